/**
 * An equity curve of bounded size for a run that lasts: a paper/live run gets an equity point at
 * nearly every tick while a position is open, and a checkpoint must not carry them all.
 *
 * The curve is cut into spans of equal length (a minute, doubled until the run's time makes at
 * most `spans` of them), none across the end of a trading day or a UTC month. Each span keeps
 * its first and last point, its lowest and highest, and the two ends of its deepest fall. So
 * what the report reads from the curve is unchanged: the end equity and balance, the first
 * point's time, the daily returns (each trading day's last point), the monthly returns (each
 * month's last point) and the maximum drawdown (a fall across spans runs from one span's highest
 * point to a later span's lowest; a fall within a span is kept whole). Only the drawdown in
 * percent, read at every point, may come out slightly lower.
 */
import { fxTradingDay } from '../../fxcm/market-hours';
import type { EquityPoint } from '../results';

/** About this many spans over the run's time (up to six points each, and as many more spans as trading days and months). */
export const EQUITY_SPANS = 2500;
const MINUTE_MS = 60_000;

/** The curve thinned as the header says; a copy (the points themselves are shared). */
export function thinEquity(points: readonly EquityPoint[], spans = EQUITY_SPANS): EquityPoint[] {
  if (points.length < 2) return [...points];
  const time = points[points.length - 1]!.ts - points[0]!.ts;
  let width = MINUTE_MS;
  while (time / width > spans) width *= 2;
  const spanOf = (p: EquityPoint) => {
    const d = new Date(p.ts);
    return `${Math.floor(p.ts / width)}|${fxTradingDay(p.ts)}|${d.getUTCFullYear()}-${d.getUTCMonth()}`;
  };
  const out: EquityPoint[] = [];
  for (let from = 0; from < points.length; ) {
    const span = spanOf(points[from]!);
    let to = from + 1;
    while (to < points.length && spanOf(points[to]!) === span) to++;
    for (const i of kept(points, from, to)) out.push(points[i]!);
    from = to;
  }
  return out;
}

/** Indices kept of the span [from, to), in time order: first, last, lowest, highest, and the peak and trough of its deepest fall. */
function kept(points: readonly EquityPoint[], from: number, to: number): number[] {
  let low = from;
  let high = from;
  let peak = from;
  let fall = 0;
  let fallPeak = from;
  let fallTrough = from;
  for (let i = from; i < to; i++) {
    const e = points[i]!.equity;
    if (e < points[low]!.equity) low = i;
    if (e > points[high]!.equity) high = i;
    if (e > points[peak]!.equity) peak = i;
    if (points[peak]!.equity - e > fall) {
      fall = points[peak]!.equity - e;
      fallPeak = peak;
      fallTrough = i;
    }
  }
  return [...new Set([from, to - 1, low, high, fallPeak, fallTrough])].sort((a, b) => a - b);
}
