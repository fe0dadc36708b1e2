import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { CandleSeries } from '../../../../src/trading/fxcm/candle-file';
import { isFxMarketOpen } from '../../../../src/trading/fxcm/market-hours';
import { runBacktest } from '../../../../src/trading/runner/engine/backtest';
import { loadStrategy } from '../../../../src/trading/runner/engine/loader';
import { buildReport, computeMetrics, renderHtml, writeReport } from '../../../../src/trading/runner/report/report';
import type { Strategy, StrategyContext } from '../../../../src/trading/runner/strategy';
import { candle, flat, wave } from '../helpers';

const T0 = 1_700_000_040; // a whole minute
const eur = (candles: CandleSeries['candles']): CandleSeries[] => [{ symbol: 'EUR/USD', timeframe: 'm1', candles }];
type S = Strategy<Record<string, unknown>>;

describe('backtest engine: known answers', () => {
  test('market buy fills at the ask, close at the bid, commission per side', async () => {
    let n = 0;
    const s: S = {
      symbols: ['EUR/USD'],
      async onBar(ctx) {
        n++;
        if (n === 1) await ctx.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 10 });
        if (n === 3) await ctx.closeAll();
      },
    };
    const r = await runBacktest({ strategy: s, data: eur(flat(T0, [1.1, 1.101, 1.102])), commissionPerK: 0.05 });
    expect(r.error).toBeUndefined();
    expect(r.trades).toHaveLength(1);
    const t = r.trades[0]!;
    expect(t.openRate).toBe(1.1002);
    expect(t.closeRate).toBe(1.102);
    expect(t.plPips).toBeCloseTo(18, 9);
    expect(t.grossPL).toBeCloseTo(18, 9);
    expect(t.commission).toBeCloseTo(1, 9);
    expect(t.pl).toBeCloseTo(17, 9);
    expect(r.account.balance).toBeCloseTo(10017, 9);
    expect(r.equity.map((e) => e.equity)).toEqual([10000 - 0.5 + (1.1 - 1.1002) * 10000, 10000 - 0.5 + (1.101 - 1.1002) * 10000, 10017].map((x) => Math.round(x * 1e10) / 1e10));
  });

  test('short stop in pips: triggers on the ask; a gap fills at the open', async () => {
    const mk = (askOpen: number) => {
      const s: S = {
        symbols: ['EUR/USD'],
        async onBar(ctx, bar) {
          if (bar.ts === T0) await ctx.openTrade({ symbol: 'EUR/USD', isBuy: false, amount: 10, stop: -20, isInPips: true });
        },
      };
      const c2 = candle(T0 + 60, askOpen - 0.0002, 1.1028, 1.0995, 1.1);
      return runBacktest({ strategy: s, data: eur([candle(T0, 1.1, 1.1, 1.1, 1.1), c2, candle(T0 + 120, 1.1, 1.1, 1.1, 1.1)]) });
    };
    const normal = await mk(1.1005);
    expect(normal.trades).toHaveLength(1);
    expect(normal.trades[0]).toMatchObject({ openRate: 1.1, closeRate: 1.102, reason: 'stop' });
    expect(normal.trades[0]!.plPips).toBeCloseTo(-20, 9);
    expect(normal.trades[0]!.pl).toBeCloseTo(-20, 9);
    const gap = await mk(1.1025);
    expect(gap.trades[0]!.closeRate).toBe(1.1025);
    expect(gap.trades[0]!.plPips).toBeCloseTo(-25, 9);
  });

  test('buy stop entry fills at its rate on the ask, then the limit closes on the bid', async () => {
    const s: S = {
      symbols: ['EUR/USD'],
      async onBar(ctx, bar) {
        if (bar.ts === T0) await ctx.createEntryOrder({ symbol: 'EUR/USD', isBuy: true, amount: 20, rate: 1.105, limit: 30, isInPips: true });
      },
    };
    const data = [candle(T0, 1.1, 1.1, 1.1, 1.1), candle(T0 + 60, 1.1038, 1.1058, 1.1035, 1.1055), candle(T0 + 120, 1.1055, 1.109, 1.105, 1.1085)];
    const orders: string[] = [];
    s.onOrder = (_ctx, e) => void orders.push(`${e.kind}:${e.status}`);
    const r = await runBacktest({ strategy: s, data: eur(data) });
    expect(orders).toEqual(['entry:accepted', 'entry:filled']);
    expect(r.trades).toHaveLength(1);
    expect(r.trades[0]).toMatchObject({ openRate: 1.105, closeRate: 1.108, reason: 'limit', amount: 20 });
    expect(r.trades[0]!.plPips).toBeCloseTo(30, 9);
    expect(r.trades[0]!.pl).toBeCloseTo(60, 9);
  });

  test('OCO: the first entry to fill cancels the other', async () => {
    const s: S = {
      symbols: ['EUR/USD'],
      async onBar(ctx, bar) {
        if (bar.ts === T0) await ctx.createOco({ symbol: 'EUR/USD', amount: 10, first: { isBuy: true, rate: 1.102 }, second: { isBuy: false, rate: 1.098 } });
        if (bar.ts === T0 + 120) await ctx.closeAll();
      },
    };
    const r = await runBacktest({ strategy: s, data: eur([candle(T0, 1.1, 1.1, 1.1, 1.1), candle(T0 + 60, 1.1, 1.1, 1.097, 1.0975), candle(T0 + 120, 1.0975, 1.0975, 1.0975, 1.0975)]) });
    expect(r.trades).toHaveLength(1);
    expect(r.trades[0]).toMatchObject({ isBuy: false, openRate: 1.098, closeRate: 1.0977 });
    expect(r.trades[0]!.plPips).toBeCloseTo(3, 9);
  });

  test('USD/JPY P/L converts at the close rate; pips of 0.01', async () => {
    const s: S = {
      symbols: ['USD/JPY'],
      async onBar(ctx, bar) {
        if (bar.ts === T0) await ctx.openTrade({ symbol: 'USD/JPY', isBuy: true, amount: 10 });
        if (bar.ts === T0 + 60) await ctx.closeAll();
      },
    };
    const r = await runBacktest({ strategy: s, data: [{ symbol: 'USD/JPY', timeframe: 'm1', candles: flat(T0, [150, 151], 0.02) }] });
    expect(r.trades[0]!.plPips).toBeCloseTo(98, 9);
    expect(r.trades[0]!.pl).toBeCloseTo((0.98 * 10000) / 151, 9);
  });

  test('trailing stop follows the bid by whole steps and closes as trailing', async () => {
    const s: S = {
      symbols: ['EUR/USD'],
      async onBar(ctx, bar) {
        if (bar.ts === T0) await ctx.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 10, stop: -20, isInPips: true, trailingStep: 10 });
      },
    };
    // open at ask 1.1002, stop 1.0982 (distance 20 pips); high 1.1035 → candidate 1.1015 → +30 pips (3 steps) → 1.1012
    const data = [candle(T0, 1.1, 1.1, 1.1, 1.1), candle(T0 + 60, 1.1, 1.1035, 1.1, 1.103), candle(T0 + 120, 1.103, 1.103, 1.1, 1.1)];
    const r = await runBacktest({ strategy: s, data: eur(data) });
    expect(r.trades).toHaveLength(1);
    expect(r.trades[0]).toMatchObject({ closeRate: 1.1012, reason: 'trailing' });
    expect(r.trades[0]!.plPips).toBeCloseTo(10, 9);
  });

  test('longer time frames are built from the data and get onBar when complete', async () => {
    const seen: string[] = [];
    const s: S = {
      symbols: ['EUR/USD'],
      timeframes: ['m1', 'm5'],
      onBar(_ctx, b) {
        if (b.timeframe === 'm5') seen.push(`${b.ts}:${b.bidOpen}/${b.bidHigh}/${b.bidLow}/${b.bidClose}`);
      },
    };
    const t0 = 1_700_000_100; // multiple of 300
    const closes = [1.1, 1.101, 1.099, 1.102, 1.1005, 1.1, 1.1, 1.1, 1.1, 1.103];
    await runBacktest({ strategy: s, data: eur(flat(t0, closes)) });
    expect(seen).toEqual([`${t0}:1.1/1.102/1.099/1.1005`, `${t0 + 300}:1.1/1.103/1.1/1.103`]);
  });

  test('timers fire on the virtual clock', async () => {
    const fired: number[] = [];
    const s: S = {
      symbols: ['EUR/USD'],
      onStart(ctx) {
        ctx.setTimer('t', 120_000);
      },
      onTimer(ctx) {
        fired.push(ctx.now());
      },
    };
    await runBacktest({ strategy: s, data: eur(flat(T0, [1, 1, 1, 1, 1, 1])) });
    expect(fired.map((t) => t / 1000 - T0)).toEqual([120, 240, 360]);
  });

  test('safety: maximum position per symbol and the daily loss limit', async () => {
    const errors: string[] = [];
    const s: S = {
      symbols: ['EUR/USD'],
      async onBar(ctx, bar) {
        for (let i = 0; i < 3; i++) await ctx.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 10 }).catch((e: Error) => void errors.push(`${bar.ts - T0}:${e.name}`));
      },
    };
    const r = await runBacktest({ strategy: s, data: eur(flat(T0, [1.1, 1.09, 1.08])), safety: { maxPosition: 20, maxDailyLoss: 100 } });
    // bar 0: 2 opens, 1 refused; bar 1 (−200 pips × 20K... loss ≥ 100): flatten, then refused for the day
    expect(errors[0]).toBe('0:SafetyError');
    expect(r.trades).toHaveLength(2);
    expect(r.trades.every((t) => t.reason === 'flatten')).toBe(true);
    expect(errors.slice(1).every((e) => e.endsWith('SafetyError'))).toBe(true);
    expect(r.account.balance).toBeCloseTo(10000 + 2 * (1.09 - 1.1002) * 10000, 6);
    // the halt is one of the run's locks, for the report
    expect(r.locks).toEqual([{ rule: 'maxDailyLoss', from: (T0 + 120) * 1000, until: expect.any(Number), reason: 'daily loss limit reached: no new positions until the next UTC day' }]);
  });

  test('a strategy symbol without candles is an error before the run, not 0 trades', async () => {
    const s: S = { symbols: ['EUR/USD', 'GBP/USD'], onBar() {} };
    await expect(runBacktest({ strategy: s, data: eur(flat(T0, [1.1, 1.1])) })).rejects.toThrow(
      'no candles for GBP/USD, which the strategy trades (candles given for: EUR/USD)',
    );
    await expect(runBacktest({ strategy: { symbols: ['EUR/USD'], onBar() {} }, data: eur([]) })).rejects.toThrow('no candles for EUR/USD');
  });

  test('an order for a symbol the strategy does not trade names it (not "no price yet"), as in paper and live', async () => {
    const seen: string[] = [];
    const s: S = {
      symbols: ['EUR/USD'],
      async onBar(ctx) {
        try {
          await ctx.openTrade({ symbol: 'FOO/BAR', isBuy: true, amount: 10 });
        } catch (e) {
          seen.push((e as Error).message);
        }
      },
    };
    await runBacktest({ strategy: s, data: eur(flat(T0, [1.1])) });
    expect(seen).toEqual(["FOO/BAR is not one of the strategy's symbols (EUR/USD)"]);
  });

  test('what onStop closes is in the end state: a flat account ends with balance = equity', async () => {
    const s: S = {
      symbols: ['EUR/USD'],
      async onBar(ctx) {
        if (!ctx.positions().length) await ctx.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 10 });
      },
      async onStop(ctx) {
        await ctx.closeAll();
      },
    };
    const r = await runBacktest({ strategy: s, data: eur(flat(T0, [1.1, 1.101, 1.102])) });
    const m = buildReport(r).metrics;
    expect(r.trades).toHaveLength(1);
    expect(m.endBalance).toBeCloseTo(10000 + r.trades[0]!.pl, 9);
    expect(m.endEquity).toBe(m.endBalance);
  });

  test('a throwing strategy: error with the script line, positions flattened, run stopped', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'strat-'));
    const file = path.join(dir, 'boom.js');
    fs.writeFileSync(
      file,
      [
        "'use strict';",
        'module.exports = {',
        "  symbols: ['EUR/USD'],",
        '  async onBar(ctx, bar) {',
        "    if (!ctx.positions().length) await ctx.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 10 });",
        '    else throw new Error("boom");',
        '  },',
        '};',
      ].join('\n'),
    );
    const strategy = loadStrategy(file);
    const r = await runBacktest({ strategy, strategyFile: file, data: eur(flat(T0, [1.1, 1.101, 1.102, 1.103])) });
    expect(r.error).toMatchObject({ message: 'boom', hook: 'onBar' });
    expect(r.error!.location).toBe(`${file}:6:16`);
    expect(r.trades).toHaveLength(1);
    expect(r.trades[0]!.reason).toBe('flatten');
    // It stopped at the second candle: the summary says so rather than claiming all four.
    expect(r.candles).toBe(2);
    expect(r.candlesGiven).toBe(4);
  });

  test('deterministic: the example crossover gives identical results twice (.js and .ts)', async () => {
    const data = eur(wave(T0, 600));
    const js = loadStrategy(path.join(__dirname, '../../../../examples/strategies/ma-crossover.js'));
    const ts = loadStrategy(path.join(__dirname, '../../../../examples/strategies/ma-crossover.ts'));
    const a = await runBacktest({ strategy: js, data, commissionPerK: 0.04 });
    const b = await runBacktest({ strategy: js, data, commissionPerK: 0.04 });
    const c = await runBacktest({ strategy: ts, data, commissionPerK: 0.04 });
    expect(a.trades.length).toBeGreaterThan(3);
    expect(JSON.stringify(a)).toBe(JSON.stringify(b));
    expect(JSON.stringify(a.trades)).toBe(JSON.stringify(c.trades));
    // every trade after the first reversal alternates side
    for (let i = 1; i < a.trades.length; i++) expect(a.trades[i]!.isBuy).toBe(!a.trades[i - 1]!.isBuy);
  });
});

describe('backtest engine: realism (slippage, rollover, gaps)', () => {
  /** Buys 10K at the first bar with an optional stop/limit in pips; closes at bar `closeAt`. */
  const buyer = (o: { stop?: number; limit?: number; closeAt?: number } = {}): S => {
    let n = 0;
    return {
      symbols: ['EUR/USD'],
      async onBar(ctx) {
        n++;
        if (n === 1) await ctx.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 10, stop: o.stop, limit: o.limit, isInPips: true });
        if (n === o.closeAt) await ctx.closeAll();
      },
    };
  };
  const slippage = { pips: 0.5, spreadShare: 0.5 }; // 0.5 pip + half the 2-pip spread: 1.5 pips

  test('slippage: market orders and stops fill worse by the fixed pips and the share of the spread; limits do not slip', async () => {
    const market = await runBacktest({ strategy: buyer({ closeAt: 3 }), data: eur(flat(T0, [1.1, 1.101, 1.102])), slippage });
    expect(market.trades[0]).toMatchObject({ openRate: 1.10035, closeRate: 1.10185 });
    const none = await runBacktest({ strategy: buyer({ closeAt: 3 }), data: eur(flat(T0, [1.1, 1.101, 1.102])) });
    expect(none.trades[0]).toMatchObject({ openRate: 1.1002, closeRate: 1.102 });
    // the stop 10 pips below the fill (1.09935) is hit inside the next candle: it fills 1.5 pips below
    const stopped = await runBacktest({ strategy: buyer({ stop: -10 }), data: eur([candle(T0, 1.1, 1.1, 1.1, 1.1), candle(T0 + 60, 1.1, 1.1, 1.098, 1.099)]), slippage });
    expect(stopped.trades[0]).toMatchObject({ reason: 'stop', closeRate: 1.0992 });
    // gapped: the candle opens at 1.0950, beyond the stop: the fill is the open, slipped
    const gapped = await runBacktest({ strategy: buyer({ stop: -10 }), data: eur([candle(T0, 1.1, 1.1, 1.1, 1.1), candle(T0 + 60, 1.095, 1.096, 1.094, 1.095)]), slippage });
    expect(gapped.trades[0]).toMatchObject({ reason: 'stop', closeRate: 1.09485 });
    const limited = await runBacktest({ strategy: buyer({ limit: 10 }), data: eur([candle(T0, 1.1, 1.1, 1.1, 1.1), candle(T0 + 60, 1.1, 1.102, 1.1, 1.101)]), slippage });
    expect(limited.trades[0]).toMatchObject({ reason: 'limit', closeRate: 1.10135 });
  });

  // H1 candles from Tuesday 2026-11-17 20:00 UTC to Thursday 20:00 UTC: the rollovers at 17:00 New
  // York (22:00 UTC in November) of Tuesday (one day) and Wednesday (three days) fall inside
  const TUE_20 = Date.UTC(2026, 10, 17, 20) / 1000;
  const hours = (n: number) => Array.from({ length: n }, (_, i) => candle(TUE_20 + i * 3600, 1.1, 1.1, 1.1, 1.1));
  const h1 = (candles: CandleSeries['candles']): CandleSeries[] => [{ symbol: 'EUR/USD', timeframe: 'H1', candles }];

  test('rollover: a long held over Tuesday and Wednesday pays 1 + 3 days at the long rate, in equity as it accrues and in P/L at the close', async () => {
    const rollover = { 'EUR/USD': { long: -0.62, short: 0.28 } };
    const r = await runBacktest({ strategy: buyer({ closeAt: 48 }), data: h1(hours(48)), rollover });
    const t = r.trades[0]!;
    expect(t.rollover).toBeCloseTo(-0.62 * 4, 9); // 10K: the rate itself, four days
    expect(t.pl).toBeCloseTo(t.grossPL + t.rollover!, 9);
    expect(r.account.balance).toBeCloseTo(10000 + t.grossPL - 2.48, 9);
    // equity: Tuesday's day is in from the 22:00 candle on, Wednesday's three from Wednesday's
    const at = (h: number) => r.equity.find((e) => e.ts === (TUE_20 + (h + 1) * 3600) * 1000)!.equity;
    expect(at(1) - at(2)).toBeCloseTo(0.62, 9);
    expect(at(25) - at(26)).toBeCloseTo(0.62 * 3, 9);
    expect(computeMetrics(r.trades, r.equity, 10000).rollover).toBeCloseTo(-2.48, 9);
    // a short earns; without rates there is none
    const s: S = { symbols: ['EUR/USD'], async onBar(ctx) { if (ctx.candles('EUR/USD', 'H1').length === 1) await ctx.openTrade({ symbol: 'EUR/USD', isBuy: false, amount: 20 }); }, async onStop(ctx) { await ctx.closeAll(); } };
    expect((await runBacktest({ strategy: s, data: h1(hours(48)), rollover })).trades[0]!.rollover).toBeCloseTo(0.28 * 2 * 4, 9);
    expect((await runBacktest({ strategy: buyer({ closeAt: 48 }), data: h1(hours(48)) })).trades[0]!.rollover).toBe(0);
  });
});

describe('backtest engine: history before tradeFromTs', () => {
  const t0 = 1_700_000_100; // a multiple of 300: m5 bars start at t0 and t0 + 300
  const closes = [1.1, 1.101, 1.099, 1.102, 1.1005, 1.1, 1.104, 1.098, 1.1, 1.103, 1.1, 1.1];
  const from = t0 + 7 * 60; // inside the second m5 bar

  /** Records what it sees: ctx at onStart, every hook with its time; buys at its first bar, closes at the end. */
  function recorder(): { s: S; seen: string[] } {
    const seen: string[] = [];
    let bought = false;
    const held = (ctx: StrategyContext<Record<string, unknown>>) => `m1 ${ctx.candles('EUR/USD', 'm1').length}, m5 ${ctx.candles('EUR/USD', 'm5').length}`;
    const s: S = {
      symbols: ['EUR/USD'],
      timeframes: ['m1', 'm5'],
      onStart(ctx) {
        seen.push(`start ${ctx.now() / 1000 - t0}: ${held(ctx)}, price ${ctx.price('EUR/USD') === undefined ? 'none' : 'some'}`);
        ctx.setTimer('t', 120_000);
      },
      onTick(_ctx, tick) {
        seen.push(`tick ${tick.ts / 1000 - t0}`);
      },
      async onBar(ctx, bar) {
        seen.push(`${bar.timeframe} ${bar.ts - t0}: ${held(ctx)}`);
        if (bar.timeframe === 'm5') seen.push(`m5 ${bar.bidOpen}/${bar.bidHigh}/${bar.bidLow}/${bar.bidClose}`);
        else if (!bought) {
          bought = true;
          await ctx.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 10 });
        }
      },
      onTimer(ctx) {
        seen.push(`timer ${ctx.now() / 1000 - t0}`);
      },
      async onStop(ctx) {
        await ctx.closeAll();
      },
    };
    return { s, seen };
  }

  test('history fills ctx.candles of every time frame; no hook, trade, equity point or progress before tradeFromTs', async () => {
    const { s, seen } = recorder();
    const progress: [number, number][] = [];
    const r = await runBacktest({ strategy: s, data: eur(flat(t0, closes)), tradeFromTs: from, onProgress: (done, total) => progress.push([done, total]), progressEvery: 1 });
    expect(seen).toEqual([
      'start 420: m1 7, m5 1, price none',
      'tick 480',
      'm1 420: m1 8, m5 1',
      'tick 540',
      'm1 480: m1 9, m5 1',
      'timer 540',
      'tick 600',
      'm1 540: m1 10, m5 1',
      // the m5 bar begun in the history closes whole, as in a run over all the candles
      'm5 300: m1 10, m5 2',
      'm5 1.1/1.104/1.098/1.103',
      'tick 660',
      'm1 600: m1 11, m5 2',
      'timer 660',
      'tick 720',
      'm1 660: m1 12, m5 2',
    ]);
    expect(r.trades[0]!.openTime).toBe((from + 60) * 1000);
    expect(r.startTime).toBe(from * 1000);
    expect(r.equity.map((p) => p.ts / 1000 - t0)).toEqual([480, 540, 600, 660, 720]);
    expect(r.candles).toBe(5);
    expect(progress).toEqual([[1, 5], [2, 5], [3, 5], [4, 5], [5, 5], [5, 5]]);
  });

  test('without tradeFromTs every candle trades, from an empty history', async () => {
    const { s, seen } = recorder();
    const r = await runBacktest({ strategy: s, data: eur(flat(t0, closes)) });
    expect(seen.slice(0, 3)).toEqual(['start 0: m1 0, m5 0, price none', 'tick 60', 'm1 0: m1 1, m5 0']);
    expect(r.trades[0]!.openTime).toBe((t0 + 60) * 1000);
    expect(r.startTime).toBe(t0 * 1000);
    expect(r.equity).toHaveLength(closes.length);
    expect(r.candles).toBe(closes.length);
  });

  test('trades, equity and metrics are those of the whole run from tradeFromTs on, for a strategy that waits for it', async () => {
    const data = eur(wave(T0, 300));
    const start = T0 + 60 * 100; // the fifth minute of an m5 bar
    const sma = (bars: { bidClose: number }[]) => bars.reduce((x, b) => x + b.bidClose, 0) / bars.length;
    const run = async (tradeFromTs?: number) => {
      const m5: string[] = [];
      const s: S = {
        symbols: ['EUR/USD'],
        timeframes: ['m1', 'm5'],
        async onBar(ctx, bar) {
          if (ctx.now() <= start * 1000) return;
          if (bar.timeframe === 'm5') return void m5.push(JSON.stringify(bar));
          const bars = ctx.candles('EUR/USD', 'm1', 8);
          const up = sma(bars.slice(-3)) > sma(bars);
          const held = ctx.positions()[0];
          if (held?.isBuy === up) return;
          await ctx.closeAll();
          await ctx.openTrade({ symbol: 'EUR/USD', isBuy: up, amount: 10 });
        },
        async onStop(ctx) {
          await ctx.closeAll();
        },
      };
      return { r: await runBacktest({ strategy: s, data, commissionPerK: 0.04, tradeFromTs }), m5 };
    };
    const whole = await run();
    const warm = await run(start);
    expect(warm.r.trades.length).toBeGreaterThan(3);
    expect(warm.r.trades[0]!.openTime).toBe((start + 60) * 1000);
    expect(warm.r.trades).toEqual(whole.r.trades);
    expect(warm.r.intents).toEqual(whole.r.intents);
    expect(warm.m5).toEqual(whole.m5);
    const fromStart = whole.r.equity.filter((p) => p.ts > start * 1000);
    expect(warm.r.equity).toEqual(fromStart);
    expect(computeMetrics(warm.r.trades, warm.r.equity, warm.r.startBalance, warm.r.startTime)).toEqual(computeMetrics(whole.r.trades, fromStart, 10_000, start * 1000));
  });

  test('a traded symbol with candles only before tradeFromTs is an error that says so', async () => {
    await expect(runBacktest({ strategy: { symbols: ['EUR/USD'], onBar() {} }, data: eur(flat(T0, [1.1, 1.1])), tradeFromTs: T0 + 120 })).rejects.toThrow(
      `no candles for EUR/USD from ${new Date((T0 + 120) * 1000).toISOString()} on, which the strategy trades`,
    );
  });
});

describe('reports', () => {
  const eq = [100, 110, 99, 120].map((e, i) => ({ ts: i * 86400_000, balance: e, equity: e }));
  const closed = (pl: number) => ({
    tradeId: 'T', symbol: 'EUR/USD', isBuy: true, amount: 10, openRate: 1, closeRate: 1, openTime: 0, closeTime: 1,
    plPips: pl, pl, grossPL: pl, commission: 0, reason: 'close' as const,
  });

  test('drawdown, win rate, profit factor', () => {
    const m = computeMetrics([closed(10), closed(-11), closed(0)], eq, 100);
    expect(m).toMatchObject({ trades: 3, wins: 1, losses: 1, breakeven: 1, netPL: -1, plPips: -1, maxDrawdown: 11, endEquity: 120, returnPct: 20 });
    expect(m.winRate).toBeCloseTo(1 / 3, 9);
    expect(m.maxDrawdownPct).toBeCloseTo(10, 9);
    expect(m.profitFactor).toBeCloseTo(10 / 11, 9);
  });

  test('no losing trade: profit factor null (not Infinity, which JSON cannot carry)', () => {
    const m = computeMetrics([closed(10)], eq, 100);
    expect(m.profitFactor).toBeNull();
    expect(JSON.parse(JSON.stringify(m)).profitFactor).toBeNull();
    expect(computeMetrics([], eq, 100).profitFactor).toBeNull();
  });

  test('Sharpe and Sortino from daily returns, annualised by sqrt(252): many points a day count as one day', () => {
    // 30 days; each day has 60 minute points wandering around, and the day closes at a known value.
    const closes = Array.from({ length: 30 }, (_, d) => 1000 * (1 + 0.01 * Math.sin(d) + 0.002 * d));
    const points = closes.flatMap((close, d) =>
      Array.from({ length: 60 }, (_, k) => {
        const equity = k === 59 ? close : close * (1 + 0.03 * Math.cos(k + d));
        return { ts: d * 86400_000 + k * 60_000, balance: equity, equity };
      }),
    );
    const m = computeMetrics([], points, 1000);
    const r = closes.map((c, d) => c / (d === 0 ? 1000 : closes[d - 1]!) - 1);
    const mean = r.reduce((a, x) => a + x, 0) / r.length;
    const sd = Math.sqrt(r.reduce((a, x) => a + (x - mean) ** 2, 0) / (r.length - 1));
    const dd = Math.sqrt(r.reduce((a, x) => a + Math.min(x, 0) ** 2, 0) / r.length);
    expect(m.dailyReturns).toBe(30);
    expect(m.sharpe).toBeCloseTo((mean / sd) * Math.sqrt(252), 6);
    expect(m.sortino).toBeCloseTo((mean / dd) * Math.sqrt(252), 6);
    expect(m.ratioMethod).toContain('risk-free rate 0');
  });

  test('daily returns are the broker\'s trading days (ending 17:00 New York): five a week, the Sunday evening session counted with Monday', () => {
    // Four FX weeks of hourly points, Sunday 17:00 New York (22:00 UTC in winter) to Friday 16:00.
    const sunday = Date.UTC(2024, 0, 7, 22);
    const points: { ts: number; balance: number; equity: number }[] = [];
    for (let h = 0; h < 4 * 7 * 24; h++) {
      const ts = sunday + h * 3600_000;
      if (!isFxMarketOpen(ts)) continue;
      points.push({ ts, balance: 1000, equity: 1000 + h });
    }
    const m = computeMetrics([], points, 1000);
    expect(m.dailyReturns).toBe(4 * 5); // by UTC day there would be 4 × 6
    expect(m.ratioMethod).toContain('17:00 New York');
  });

  test('fewer than 20 daily returns: Sharpe and Sortino are n/a, however many points', () => {
    // from 17:00 New York on 1969-12-31 (22:00 UTC), where a trading day starts
    const points = Array.from({ length: 19 * 1440 }, (_, i) => ({ ts: -7_200_000 + i * 60_000, balance: 100, equity: 100 + Math.sin(i) }));
    const m = computeMetrics([], points, 100);
    expect(m.dailyReturns).toBe(19);
    expect(m).toMatchObject({ sharpe: null, sortino: null });
    expect(renderHtml(buildReport({ strategy: 's', mode: 'backtest', currency: 'USD', startBalance: 100, trades: [], equity: points }))).toContain('n/a');
  });

  test('JSON and a self-contained HTML page with an inline SVG equity chart', () => {
    const rep = buildReport({ strategy: 'x<y', mode: 'backtest', currency: 'USD', startBalance: 100, trades: [], equity: eq, budget: [{ endpoint: '/trading/open_trade', sent: 3, waited: 1, waitMs: 2000, expired: 0, limit: '5/minute' }] });
    expect(rep.equity.map((p) => p.drawdown)).toEqual([0, 0, 11, 0]);
    const html = renderHtml(rep);
    expect(html).toContain('<svg');
    expect(html).toContain('class="equity"');
    expect(html).toContain('x&lt;y');
    expect(html).toContain('/trading/open_trade');
    expect(html).not.toMatch(/<script|https?:\/\/(?!www\.w3\.org)/);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rep-'));
    const out = writeReport(rep, path.join(dir, 'sub', 'r'));
    expect(JSON.parse(fs.readFileSync(out.json, 'utf8')).metrics.maxDrawdown).toBe(11);
    expect(fs.readFileSync(out.html, 'utf8')).toBe(html);
  });
});
