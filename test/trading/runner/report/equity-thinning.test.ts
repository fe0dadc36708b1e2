/**
 * The thinned equity curve a checkpoint keeps: bounded whatever the run's length, made of the
 * curve's own points, and giving the report the same end equity, daily and monthly returns and
 * maximum drawdown as the whole curve.
 */
import { mulberry32 } from '../../../../src/platform/random';
import { EQUITY_SPANS, thinEquity } from '../../../../src/trading/runner/report/equity-thinning';
import { computeMetrics, dailyReturns } from '../../../../src/trading/runner/report/report-metrics';
import type { EquityPoint } from '../../../../src/trading/runner/results';

/** A random walk of equity, a point every `stepMs` from `fromMs` (a tick-by-tick curve). */
function walk(seed: number, fromMs: number, points: number, stepMs: number): EquityPoint[] {
  const rnd = mulberry32(seed);
  let equity = 50_000;
  return Array.from({ length: points }, (_, i) => {
    equity = Math.round((equity + (rnd() - 0.5) * 40 + (rnd() < 0.001 ? -900 : 0)) * 100) / 100;
    return { ts: fromMs + i * stepMs, balance: 50_000, equity };
  });
}

/** Monday 2 November 2026, 00:00 UTC. */
const START = Date.UTC(2026, 10, 2);

describe('thinEquity', () => {
  test.each([
    ['a day of a point a second', 86_400, 1000, EQUITY_SPANS],
    ['seven weeks of a point a minute, across a month end', 7 * 7 * 1440, 60_000, EQUITY_SPANS],
    // spans of 1024 minutes: across trading days and the month's end
    ['the same in 100 spans', 7 * 7 * 1440, 60_000, 100],
  ])('%s: bounded, its own points in order, the same figures', (_what, n, step, spans) => {
    for (const seed of [1, 2, 3]) {
      const curve = walk(seed, START, n, step);
      const thin = thinEquity(curve, spans);
      const days = new Set(curve.map((p) => Math.floor(p.ts / 86_400_000))).size;
      expect(thin.length).toBeLessThanOrEqual(6 * (spans + 2 * days + 2));
      expect(thin.length).toBeLessThan(curve.length / 3);
      const at = new Map(curve.map((p, i) => [p, i]));
      const indices = thin.map((p) => at.get(p));
      expect(indices.every((i) => i !== undefined)).toBe(true);
      expect(indices).toEqual([...indices].sort((a, b) => a! - b!));
      expect(thin[0]).toBe(curve[0]);
      expect(thin.at(-1)).toBe(curve.at(-1));
      const whole = computeMetrics([], curve, 50_000);
      const thinned = computeMetrics([], thin, 50_000);
      expect(thinned.maxDrawdown).toBe(whole.maxDrawdown);
      expect([thinned.endEquity, thinned.endBalance, thinned.monthly]).toEqual([whole.endEquity, whole.endBalance, whole.monthly]);
      expect(dailyReturns(thin, 50_000)).toEqual(dailyReturns(curve, 50_000));
    }
  });

  test('a fall within one span is kept whole, even when the span rises higher after it', () => {
    const t = START;
    // one minute: up to 100, down to 40, up to 120 (the span's highest comes after its lowest)
    const curve = [70, 100, 40, 120, 110].map((equity, i) => ({ ts: t + i * 1000, balance: 0, equity }));
    const thin = thinEquity(curve);
    expect(thin.map((p) => p.equity)).toEqual([70, 100, 40, 120, 110]);
    expect(computeMetrics([], thin, 70).maxDrawdown).toBe(60);
    // a longer span: the fall from 100 to 40 is kept among the span's other points
    const busy = [...curve, ...[115, 118, 112, 116].map((equity, i) => ({ ts: t + (5 + i) * 1000, balance: 0, equity }))];
    expect(computeMetrics([], thinEquity(busy), 70).maxDrawdown).toBe(60);
    expect(thinEquity(busy).length).toBeLessThan(busy.length);
  });

  test('thinning a thinned curve changes nothing, and short curves are copied as they are', () => {
    const curve = walk(9, START, 20_000, 2000);
    const once = thinEquity(curve);
    expect(thinEquity(once)).toEqual(once);
    expect(thinEquity([])).toEqual([]);
    const one = [{ ts: START, balance: 1, equity: 1 }];
    expect(thinEquity(one)).toEqual(one);
    expect(thinEquity(one)).not.toBe(one);
  });
});
