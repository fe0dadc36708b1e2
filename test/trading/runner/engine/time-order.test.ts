/**
 * A backtest never shows the future: with candles of different time frames (EUR/USD m1 and
 * USD/JPY H1), every candle is delivered at its close, across symbols and time frames, and the
 * clock never goes back. What a hook can read (ctx.now(), ctx.price(), ctx.candles(), the bar it
 * gets, the fills it hears of) is never later than ctx.now().
 */
import { PERIOD_SECONDS } from '../../../../src/trading/fxcm/candles';
import type { CandleSeries } from '../../../../src/trading/fxcm/candle-file';
import { runBacktest } from '../../../../src/trading/runner/engine/backtest';
import type { Bar, Period, Strategy, StrategyContext } from '../../../../src/trading/runner/strategy';
import { candle } from '../helpers';

/** A Monday 00:00 UTC. */
const T0 = Date.UTC(2026, 10, 16) / 1000;

function series(symbol: string, timeframe: Period, n: number, base: number, step: number, spread: number): CandleSeries {
  const sec = PERIOD_SECONDS[timeframe];
  const candles = Array.from({ length: n }, (_, i) => {
    const o = base + step * Math.sin(i / 5);
    const c = base + step * Math.sin((i + 1) / 5);
    const r = (x: number) => Math.round(x * 1e5) / 1e5;
    return candle(T0 + i * sec, r(o), r(Math.max(o, c) + step / 4), r(Math.min(o, c) - step / 4), r(c), spread);
  });
  return { symbol, timeframe, candles };
}

const MIXED = (): CandleSeries[] => [series('EUR/USD', 'm1', 6 * 60, 1.1, 0.0008, 0.0002), series('USD/JPY', 'H1', 6, 150, 0.4, 0.02)];

interface Seen {
  hook: string;
  now: number;
  problems: string[];
}

/** Records, in every hook, what it could read that is later than ctx.now(). */
function watcher(symbols: string[], timeframes?: Period[]): Strategy<Record<string, unknown>> & { seen: Seen[]; bars: Array<{ bar: Bar; now: number }> } {
  const seen: Seen[] = [];
  const bars: Array<{ bar: Bar; now: number }> = [];
  let last = -Infinity;
  const look = (hook: string, ctx: StrategyContext<Record<string, unknown>>) => {
    const now = ctx.now();
    const problems: string[] = [];
    if (now < last) problems.push(`the clock went back from ${new Date(last).toISOString()} to ${new Date(now).toISOString()}`);
    last = Math.max(last, now);
    for (const sym of symbols) {
      const q = ctx.price(sym);
      if (q && q.ts > now) problems.push(`${sym} quote of ${new Date(q.ts).toISOString()}`);
      for (const tf of ['m1', 'H1'] as Period[]) {
        for (const b of ctx.candles(sym, tf)) if ((b.ts + PERIOD_SECONDS[tf]) * 1000 > now) problems.push(`${sym} ${tf} bar closing at ${new Date((b.ts + PERIOD_SECONDS[tf]) * 1000).toISOString()}`);
      }
    }
    seen.push({ hook, now, problems });
  };
  let opened = 0;
  return {
    name: 'watcher',
    symbols,
    timeframes,
    seen,
    bars,
    onStart(ctx) {
      look('onStart', ctx);
      ctx.setTimer('t', 7 * 60_000);
    },
    async onTick(ctx, t) {
      look('onTick', ctx);
      if (t.ts > ctx.now()) seen[seen.length - 1]!.problems.push(`tick of ${new Date(t.ts).toISOString()}`);
      // trades in both symbols, so fills (and their events) happen on both time frames
      if (opened < 40 && ctx.positions(t.symbol).length === 0) {
        opened++;
        await ctx.openTrade({ symbol: t.symbol, isBuy: opened % 2 === 0, amount: 10, stop: -3, limit: 3, isInPips: true });
      }
    },
    onBar(ctx, bar) {
      look('onBar', ctx);
      bars.push({ bar, now: ctx.now() });
    },
    onTrade(ctx, e) {
      look('onTrade', ctx);
      if (e.ts > ctx.now()) seen[seen.length - 1]!.problems.push(`trade event of ${new Date(e.ts).toISOString()}`);
    },
    onTimer(ctx) {
      look('onTimer', ctx);
    },
    onStop(ctx) {
      look('onStop', ctx);
    },
  };
}

describe('backtest time order across time frames', () => {
  test('EUR/USD m1 and USD/JPY H1: no hook sees a quote, a bar or an event later than ctx.now(), and the clock never goes back', async () => {
    const s = watcher(['EUR/USD', 'USD/JPY']);
    const r = await runBacktest({ strategy: s, data: MIXED(), balance: 1e6 });
    expect(r.error).toBeUndefined();
    const bad = s.seen.filter((x) => x.problems.length);
    expect(bad.slice(0, 3)).toEqual([]);
    expect(s.seen.length).toBeGreaterThan(6 * 60);
    expect(r.trades.length).toBeGreaterThan(10);
    for (let i = 1; i < r.equity.length; i++) expect(r.equity[i]!.ts).toBeGreaterThanOrEqual(r.equity[i - 1]!.ts);
  });

  test('every bar is delivered at its close: each series in its own time frame', async () => {
    const s = watcher(['EUR/USD', 'USD/JPY']);
    await runBacktest({ strategy: s, data: MIXED(), balance: 1e6 });
    for (const { bar, now } of s.bars) expect(now).toBe((bar.ts + PERIOD_SECONDS[bar.timeframe]) * 1000);
    expect(s.bars.filter((b) => b.bar.timeframe === 'm1')).toHaveLength(6 * 60);
    // the H1 candle of USD/JPY that opens at 00:00 is first seen at 01:00, not at 00:01
    const usdjpy = s.bars.filter((b) => b.bar.symbol === 'USD/JPY');
    expect(usdjpy.map((b) => b.bar.timeframe)).toEqual(Array(6).fill('H1'));
    expect(usdjpy[0]!.bar.ts).toBe(T0);
    expect(usdjpy[0]!.now).toBe((T0 + 3600) * 1000);
  });

  test('every bar is delivered at its close: H1 built from m1 and H1 candles, both at the hour', async () => {
    const s = watcher(['EUR/USD', 'USD/JPY'], ['H1']);
    await runBacktest({ strategy: s, data: MIXED(), balance: 1e6 });
    for (const { bar, now } of s.bars) expect(now).toBe((bar.ts + PERIOD_SECONDS[bar.timeframe]) * 1000);
    const h1 = s.bars.map((b) => `${b.bar.symbol} ${b.bar.timeframe} ${new Date(b.now).toISOString().slice(11, 16)}`);
    // EUR/USD's H1 bars are built from its m1 candles; USD/JPY's come as they are; each at its close
    expect(h1).toEqual(['01:00', '02:00', '03:00', '04:00', '05:00', '06:00'].flatMap((t) => [`EUR/USD H1 ${t}`, `USD/JPY H1 ${t}`]));
    expect(s.seen.filter((x) => x.problems.length).slice(0, 3)).toEqual([]);
  });

  test("a longer bar whose span's last candles are missing (the market closed) is delivered at the end of its span", async () => {
    // EUR/USD m1 from 20:00 to 20:54 only (no candle from 20:55): the H1 bar of 20:00 has no
    // candle closing at 21:00, yet it closed then
    const t20 = T0 + 20 * 3600;
    const m1 = { symbol: 'EUR/USD', timeframe: 'm1' as Period, candles: Array.from({ length: 55 }, (_, i) => candle(t20 + i * 60, 1.1, 1.1002, 1.0998, 1.1)) };
    const later = candle(T0 + 24 * 3600, 1.1, 1.1, 1.1, 1.1);
    m1.candles.push(later);
    const s = watcher(['EUR/USD'], ['m1', 'H1']);
    await runBacktest({ strategy: s, data: [m1] });
    const h1 = s.bars.filter((b) => b.bar.timeframe === 'H1');
    expect(h1.map((b) => [b.bar.ts, b.now])).toEqual([[t20, (t20 + 3600) * 1000]]);
    expect(h1[0]!.bar.tickQty).toBe(55);
    expect(s.seen.filter((x) => x.problems.length)).toEqual([]);
  });
});
