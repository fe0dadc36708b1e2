import { BarHistory, LiveBars } from '../../../../src/trading/runner/engine/bars';
import { flat } from '../helpers';

describe('bars', () => {
  const t0 = 1_700_000_100_000; // the start of a five-minute bucket
  const S = t0 / 1000;

  test('a bar is its ticks, closed by the first tick of a later period; a run without history starts at its first whole bar', () => {
    const bars = new LiveBars(['m1', 'm5']);
    // joined mid-minute: that minute (and those five) are partial, never delivered
    expect(bars.tick('EUR/USD', 1.1, 1.1002, t0 + 30_000)).toEqual({ closed: [], fetches: [] });
    expect(bars.tick('EUR/USD', 1.1, 1.1002, t0 + 60_000)).toEqual({ closed: [], fetches: [] });
    bars.tick('EUR/USD', 1.1005, 1.1007, t0 + 80_000);
    bars.tick('EUR/USD', 1.0998, 1.1, t0 + 119_999);
    const done = bars.tick('EUR/USD', 1.1001, 1.1003, t0 + 120_000);
    expect(done).toEqual({
      closed: [{ symbol: 'EUR/USD', timeframe: 'm1', ts: S + 60, bidOpen: 1.1, bidHigh: 1.1005, bidLow: 1.0998, bidClose: 1.0998, askOpen: 1.1002, askHigh: 1.1007, askLow: 1.1, askClose: 1.1, tickQty: 3 }],
      fetches: [],
    });
  });

  test('a tick late across a minute boundary is not put in the next bar', () => {
    const bars = new LiveBars(['m1']);
    bars.history([{ symbol: 'EUR/USD', timeframe: 'm1', ...flat(S - 60, [1.1])[0]! }], t0);
    bars.tick('EUR/USD', 1.1, 1.1002, t0);
    bars.tick('EUR/USD', 1.1003, 1.1005, t0 + 60_000);
    // stamped 59.9 s, arriving after the 60 s tick: it belongs to the closed minute
    expect(bars.tick('EUR/USD', 1.2, 1.2002, t0 + 59_900)).toEqual({ closed: [], fetches: [] });
    const next = bars.tick('EUR/USD', 1.1004, 1.1006, t0 + 120_000).closed[0]!;
    expect([next.ts, next.bidHigh, next.tickQty]).toEqual([S + 60, 1.1003, 1]);
  });

  test('history: only closed bars, once; a partial bar after it is asked from the broker, the bars after it wait', () => {
    const bars = new LiveBars(['m1']);
    const hist = flat(S - 120, [1, 2, 3]).map((c) => ({ symbol: 'EUR/USD', timeframe: 'm1' as const, ...c }));
    // at t0 + 10 s the bar of t0 is still open: not taken
    expect(bars.history(hist, t0 + 10_000).map((b) => b.ts)).toEqual([S - 120, S - 60]);
    expect(bars.history(hist.slice(0, 2), t0 + 70_000)).toEqual([]); // nothing twice
    bars.tick('EUR/USD', 1.1, 1.1002, t0 + 30_000); // joined mid-minute
    const missing = bars.tick('EUR/USD', 1.1, 1.1002, t0 + 60_000);
    expect(missing).toEqual({ closed: [], fetches: [{ symbol: 'EUR/USD', timeframe: 'm1', fromTs: S, toTs: S }] });
    // the next minute is whole, but waits for the answer
    expect(bars.tick('EUR/USD', 1.2, 1.2002, t0 + 120_000).closed).toEqual([]);
    const broker = flat(S, [1.15]).map((c) => ({ symbol: 'EUR/USD', timeframe: 'm1' as const, ...c }));
    expect(bars.fetched({ symbol: 'EUR/USD', timeframe: 'm1', fromTs: S, toTs: S }, broker).closed.map((b) => [b.ts, b.bidClose])).toEqual([
      [S, 1.15],
      [S + 60, 1.1],
    ]);
  });

  test('a discontinuity: the bar across it comes from the broker; an answer without a candle leaves no debt', () => {
    const bars = new LiveBars(['m1']);
    bars.history([{ symbol: 'EUR/USD', timeframe: 'm1', ...flat(S - 60, [1])[0]! }], t0);
    bars.tick('EUR/USD', 1.1, 1.1002, t0);
    expect(bars.tick('EUR/USD', 1.1, 1.1002, t0 + 60_000).closed.map((b) => b.ts)).toEqual([S]);
    bars.discontinuity();
    // missed the rest of S + 60 and the start of S + 120: both are asked for, one range at a time
    const f1 = bars.tick('EUR/USD', 1.1, 1.1002, t0 + 150_000);
    expect(f1.fetches).toEqual([{ symbol: 'EUR/USD', timeframe: 'm1', fromTs: S + 60, toTs: S + 60 }]);
    expect(bars.tick('EUR/USD', 1.1, 1.1002, t0 + 180_000)).toEqual({ closed: [], fetches: [] });
    expect(bars.inFlight()).toEqual(f1.fetches);
    const f2 = bars.fetched(f1.fetches[0]!, flat(S + 60, [1.3]).map((c) => ({ symbol: 'EUR/USD', timeframe: 'm1' as const, ...c })));
    expect(f2.closed.map((b) => b.ts)).toEqual([S + 60]);
    expect(f2.fetches).toEqual([{ symbol: 'EUR/USD', timeframe: 'm1', fromTs: S + 120, toTs: S + 120 }]);
    // no candle for it at the broker (no tick there): nothing is owed any more
    expect(bars.fetched(f2.fetches[0]!, []).closed).toEqual([]);
    expect(bars.inFlight()).toEqual([]);
    expect(bars.tick('EUR/USD', 1.1, 1.1002, t0 + 240_000).closed.map((b) => b.ts)).toEqual([S + 180]);
  });

  test('the history keeps the last bars per symbol and time frame', () => {
    const h = new BarHistory(3);
    const bars = flat(1_700_000_040, [1, 2, 3, 4, 5]).map((c) => ({ symbol: 'EUR/USD', timeframe: 'm1' as const, ...c }));
    for (const b of bars.slice(0, 4)) h.push(b);
    expect(h.candles('EUR/USD', 'm1').map((b) => b.bidClose)).toEqual([2, 3, 4]); // never more than the limit
    h.push(bars[4]!);
    expect(h.candles('EUR/USD', 'm1').map((b) => b.bidClose)).toEqual([3, 4, 5]);
    expect(h.candles('EUR/USD', 'm1', 2).map((b) => b.bidClose)).toEqual([4, 5]);
    expect(h.candles('EUR/USD', 'H1')).toEqual([]);
    h.candles('EUR/USD', 'm1').pop();
    expect(h.candles('EUR/USD', 'm1')).toHaveLength(3);
  });
});
