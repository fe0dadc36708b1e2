import { BarHistory, TickBars, bucketStart } from '../../../src/trading/runner/bars';
import { flat } from './helpers';

describe('bars', () => {
  test('bars from ticks complete when the first tick of a later bucket arrives', () => {
    const bars = new TickBars(['m1', 'm5']);
    const t0 = 1_700_000_100_000; // the start of a five-minute bucket
    expect(bars.add('EUR/USD', 1.1, 1.1002, t0)).toEqual([]);
    expect(bars.add('EUR/USD', 1.1005, 1.1007, t0 + 20_000)).toEqual([]);
    expect(bars.add('EUR/USD', 1.0998, 1.1, t0 + 40_000)).toEqual([]);
    const done = bars.add('EUR/USD', 1.1001, 1.1003, t0 + 60_000);
    expect(done).toEqual([
      { symbol: 'EUR/USD', timeframe: 'm1', ts: t0 / 1000, bidOpen: 1.1, bidHigh: 1.1005, bidLow: 1.0998, bidClose: 1.0998, askOpen: 1.1002, askHigh: 1.1007, askLow: 1.1, askClose: 1.1, tickQty: 3 },
    ]);
    // the m5 bar completes at the first tick of the next five minutes
    const next5 = (bucketStart(t0 / 1000, 'm5') + 300) * 1000;
    expect(bars.add('EUR/USD', 1.1, 1.1002, next5).map((b) => [b.timeframe, b.tickQty])).toEqual([
      ['m1', 1],
      ['m5', 4],
    ]);
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
