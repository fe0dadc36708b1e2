/**
 * A backtest's projected broker budget: the calls a live run would make for its decisions (and at
 * its start), the busiest window of each limit's length against the limit, and the waits the
 * runner's limiter would impose, replayed on a manual clock.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { CandleSeries } from '../../../../src/trading/fxcm/candle-file';
import { runBacktest, type Intent } from '../../../../src/trading/runner/engine/backtest';
import { busiestWindow, projectBudget, projectedCalls } from '../../../../src/trading/runner/engine/budget-projection';
import { buildReport, renderHtml, type ProjectedLimitUse } from '../../../../src/trading/runner/report/report';
import type { ClosedTrade } from '../../../../src/trading/runner/results';
import type { Strategy } from '../../../../src/trading/runner/strategy';
import { flat, tightBrokerLimits } from '../helpers';

const BUNDLED_FILE = path.join(__dirname, '../../../../examples/runner/broker-limits.yaml');
const BUNDLED = { name: BUNDLED_FILE, content: fs.readFileSync(BUNDLED_FILE, 'utf8') };
const T0 = 1_700_000_040; // a whole minute, 46 minutes before a whole hour (1_700_002_800)
const MIN = 60_000;
type S = Strategy<Record<string, unknown>>;

const row = (rows: ProjectedLimitUse[], endpoint: string, scope = '') => {
  const r = rows.find((x) => x.endpoint === endpoint && x.scope === scope);
  if (!r) throw new Error(`no row ${endpoint} ${scope}: ${rows.map((x) => `${x.endpoint}(${x.scope})`).join(' ')}`);
  return r;
};

describe('projected calls', () => {
  const t = (ts: number, op: string, args: unknown = {}, result: Intent['result'] = 'ok'): Intent => ({ ts, op, args, result });
  const trade = (closeTime: number, symbol: string, reason: ClosedTrade['reason']): ClosedTrade => ({
    tradeId: 'T', symbol, isBuy: true, amount: 1, openRate: 1, closeRate: 1, openTime: 0, closeTime, plPips: 0, pl: 0, grossPL: 0, commission: 0, reason,
  });

  test('each accepted decision is its broker call; closeAll a close_trade per trade it closed; flatten closes are close_trade', () => {
    const calls = projectedCalls({
      strategy: { symbols: ['EUR/USD'] },
      startTime: 1000,
      intents: [
        t(1000, 'openTrade'),
        t(2000, 'createEntryOrder'),
        t(3000, 'createOco'),
        t(4000, 'setStop'),
        t(4000, 'setLimit'),
        t(5000, 'changeOrder'),
        t(6000, 'deleteOrder'),
        t(7000, 'closeTrade'),
        t(8000, 'closeTrade', {}, 'rejected'), // refused before sending
        t(9000, 'closeAll', { symbol: 'EUR/USD' }), // closed two trades: two closes
        t(10000, 'closeAll', { symbol: 'EUR/USD' }), // nothing open: not sent
        t(11000, 'closeAll', {}), // every symbol, closed one: sent
      ],
      trades: [trade(9000, 'EUR/USD', 'close'), trade(9000, 'EUR/USD', 'close'), trade(11000, 'USD/JPY', 'close'), trade(12000, 'EUR/USD', 'flatten')],
    });
    expect(calls.map((c) => [c.ts, c.path])).toEqual([
      [1000, '/trading/subscribe'],
      [1000, '/trading/get_model'],
      [1000, '/subscribe'],
      [1000, '/trading/open_trade'],
      [2000, '/trading/create_entry_order'],
      [3000, '/trading/simple_oco'],
      [4000, '/trading/change_trade_stop_limit'],
      [4000, '/trading/change_trade_stop_limit'],
      [5000, '/trading/change_order'],
      [6000, '/trading/delete_order'],
      [7000, '/trading/close_trade'],
      [9000, '/trading/close_trade'],
      [9000, '/trading/close_trade'],
      [11000, '/trading/close_trade'],
      [12000, '/trading/close_trade'],
    ]);
    expect(calls[1]!.params).toEqual({ models: ['Account', 'OpenPosition', 'Order'] });
  });

  test('warm-up: one Offer lookup and a candle download per symbol and time frame (m1 when the strategy names none)', () => {
    const paths = (s: Pick<S, 'symbols' | 'timeframes' | 'warmup'>) => projectedCalls({ strategy: s, startTime: 0, intents: [], trades: [] }).map((c) => c.path);
    expect(paths({ symbols: ['EUR/USD', 'USD/JPY'], timeframes: ['m1', 'H1'], warmup: 50 }).filter((p) => p === '/candles')).toHaveLength(4);
    expect(paths({ symbols: ['EUR/USD'], warmup: 50 })).toEqual(['/trading/subscribe', '/trading/get_model', '/trading/get_model', '/candles', '/subscribe']);
    expect(paths({ symbols: ['EUR/USD'] })).not.toContain('/candles');
  });

  test('busiest window: the most times within any [t, t + w)', () => {
    expect(busiestWindow([], 60_000)).toEqual({ count: 0, from: undefined });
    expect(busiestWindow([0, 40_000, 50_000, 60_000, 99_999], 60_000)).toEqual({ count: 4, from: 40_000 }); // 60 000 is outside [0, 60 000)
    expect(busiestWindow([0, 60_000, 120_000], 60_000)).toEqual({ count: 1, from: 0 });
  });
});

/** Every bar (m1, from T0): close the open trade (from the 2nd bar on), then open one. */
const everyBar: S = {
  symbols: ['EUR/USD'],
  async onBar(ctx, bar) {
    for (const p of ctx.positions()) await ctx.closeTrade(p.tradeId);
    await ctx.openTrade({ symbol: bar.symbol, isBuy: true, amount: 10 });
  },
};
const BARS = 150;
const data: CandleSeries[] = [{ symbol: 'EUR/USD', timeframe: 'm1', candles: flat(T0, Array.from({ length: BARS }, () => 1.1)) }];

async function projectionOf(strategy: S, limits = BUNDLED, series = data) {
  const r = await runBacktest({ strategy, data: series });
  expect(r.error).toBeUndefined();
  return { r, p: await projectBudget({ strategy, startTime: r.startTime!, intents: r.intents, trades: r.trades }, limits) };
}

describe('projected budget of a strategy that trades every bar', () => {
  test('the bundled limits: calls per endpoint, the busiest hour by hand, no waits', async () => {
    const { p } = await projectionOf(everyBar);
    // an open_trade at the end of each of 150 one-minute bars: 60 in any hour; 149 close_trade
    expect(row(p.limits, 'open_trade')).toMatchObject({ calls: BARS, windowS: 3600, busiest: 60, busiestFrom: (T0 + 60) * 1000, waited: 0 });
    expect(row(p.limits, 'open_trade').limit).toBeUndefined();
    expect(row(p.limits, 'close_trade')).toMatchObject({ calls: BARS - 1, busiest: 60, waited: 0 });
    // the start: one snapshot, counted against each model's limit
    expect(row(p.limits, 'get_model', 'model=OpenPosition')).toMatchObject({
      calls: 1, limit: '45/hour, token bucket, burst 5', windowS: 3600, busiest: 1, allowed: 49, documented: { max: 50, windowS: 3600, busiest: 1 }, waited: 0,
    });
    expect(row(p.limits, 'get_model', 'model=Order')).toMatchObject({ calls: 1, allowed: 1499, documented: { max: 1500 } });
    expect(row(p.limits, 'trading_subscribe').calls).toBe(1);
    expect(row(p.limits, 'subscribe').calls).toBe(1);
    // limits of the config the run never reaches are listed too
    expect(row(p.limits, 'candles')).toMatchObject({ calls: 0, busiest: 0, limit: '2/minute, token bucket, burst 2', allowed: 3, documented: { max: 3, windowS: 60 } });
    expect(row(p.limits, 'update_subscriptions')).toMatchObject({ calls: 0, allowed: 499 });
    expect(p.calls).toBe(3 + BARS + BARS - 1);
    expect(p.limits.every((l) => l.waited === 0)).toBe(true);
  });

  test('a fixed 50/hour open_trade limit: 60 in the busiest hour, and the calls that would wait are flagged', async () => {
    const { p } = await projectionOf(everyBar, tightBrokerLimits({ endpoint: 'open_trade', unit: 'hour', requestsPerUnit: 50 })[0]!);
    const open = row(p.limits, 'open_trade');
    expect(open).toMatchObject({ calls: BARS, limit: '50/hour, fixed window', windowS: 3600, busiest: 60, allowed: 100 });
    // Calls at T0 + k min, k = 1..150; clock hours start at T0 + 46 min. Hour [46, 106): k = 46..95
    // pass, k = 96 waits 10 min for the next hour, which then holds k = 96..145; k = 146 waits 20 min.
    expect(open.waited).toBe(2);
    expect(open.waitMs / 1000).toBeCloseTo(600 + 1200, 0);
    expect(row(p.limits, 'close_trade').waited).toBe(0);
    const html = renderHtml(buildReport({ strategy: 's', mode: 'backtest', currency: 'USD', startBalance: 100, trades: [], equity: [], projectedBudget: p }));
    expect(html).toContain('Projected rate-limit budget of a live run');
    expect(html).toMatch(/yes: 2 calls, 1800\.\d s in all/);
    expect(html).not.toContain('no broker calls');
  });

  test('a per-second limit: the busiest window is one second long', async () => {
    const { p } = await projectionOf(everyBar, tightBrokerLimits({ endpoint: 'open_trade', unit: 'second', requestsPerUnit: 1 })[0]!);
    expect(row(p.limits, 'open_trade')).toMatchObject({ calls: BARS, limit: '1/second, fixed window', windowS: 1, busiest: 1, allowed: 2, waited: 0 });
  });

  test('a limit of 0 lets nothing through: its calls are counted as never sent, and do not hold up the others', async () => {
    const limits = {
      name: 'zero.yaml',
      content: `domain: fxcm
descriptors:
  - key: broker
    value: fxcm
    descriptors:
      - key: account
        descriptors:
          - key: endpoint
            value: get_model
            descriptors:
              - key: model
                value: Order
                rate_limit: {unit: second, requests_per_unit: 0}
          - key: endpoint
            value: open_trade
            rate_limit: {unit: second, requests_per_unit: 1}
`,
    };
    const { p } = await projectionOf(everyBar, limits);
    expect(row(p.limits, 'get_model', 'model=Order')).toMatchObject({ calls: 1, allowed: 0, waited: 0, stuck: 1, documented: { busiest: 0 } });
    // the same call's other descriptors were not what refused it
    expect(row(p.limits, 'get_model', 'model=OpenPosition')).toMatchObject({ calls: 1, stuck: 0 });
    expect(row(p.limits, 'get_model')).toMatchObject({ calls: 1, stuck: 0 });
    // the later calls keep their times (one a minute): none waits for the 1/second limit
    expect(row(p.limits, 'open_trade')).toMatchObject({ calls: BARS, busiest: 1, waited: 0, stuck: 0 });
    const html = renderHtml(buildReport({ strategy: 's', mode: 'backtest', currency: 'USD', startBalance: 100, trades: [], equity: [], projectedBudget: p }));
    expect(html).toContain('yes; 1 never sent (still waiting after 8 days)');
  });

  test('warm-up candles over the bundled 2/minute bucket: 4 asked at once, 2 wait, the broker sees at most 3 a minute', async () => {
    const s: S = { symbols: ['EUR/USD', 'USD/JPY'], timeframes: ['m1', 'm5'], warmup: 20 };
    const two: CandleSeries[] = [...data, { symbol: 'USD/JPY', timeframe: 'm1', candles: flat(T0, Array.from({ length: 10 }, () => 150)) }];
    const { p } = await projectionOf(s, BUNDLED, two);
    const candles = row(p.limits, 'candles');
    expect(candles).toMatchObject({ calls: 4, busiest: 4, allowed: 3, waited: 2, documented: { max: 3, windowS: 60, busiest: 3 } });
    // burst 2 at once, then one every 30 s
    expect(candles.waitMs / 1000).toBeCloseTo(60, 0);
    expect(row(p.limits, 'get_model')).toMatchObject({ calls: 2 }); // the snapshot and the Offer lookup
  });
});
