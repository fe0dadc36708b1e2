/**
 * Candle periods, per-request limits (seed 000 "Limits") and range splitting / merging.
 * `m1` is one minute, `M1` one month: the two are never folded together.
 */
import type { Candle, CandleRow, Period } from './types';

export const MAX_CANDLES_PER_REQUEST = 10000;

/** Max days back per request; undefined = no limit (D1, W1, M1). */
export const MAX_DAYS_BACK: Record<Period, number | undefined> = {
  m1: 16,
  m5: 56,
  m15: 212,
  m30: 316,
  H1: 624,
  H2: 1224,
  H3: 2056,
  H4: 2664,
  H6: 3632,
  H8: 5128,
  D1: undefined,
  W1: undefined,
  M1: undefined,
};

/** Nominal period length in seconds (M1 uses 31 days as the upper bound for splitting). */
export const PERIOD_SECONDS: Record<Period, number> = {
  m1: 60,
  m5: 300,
  m15: 900,
  m30: 1800,
  H1: 3600,
  H2: 7200,
  H3: 10800,
  H4: 14400,
  H6: 21600,
  H8: 28800,
  D1: 86400,
  W1: 604800,
  M1: 31 * 86400,
};

/**
 * Canonical period id. Minutes are lower-case `m` only; `M1` is the month. H/D/W are accepted in
 * either case (the broker echoes `h1`). Returns undefined for anything else (e.g. `M5`, `m2`).
 */
export function normalizePeriod(p: string): Period | undefined {
  if (p === 'M1') return 'M1';
  if (/^m(1|5|15|30)$/.test(p)) return p as Period;
  const m = /^[hH](1|2|3|4|6|8)$/.exec(p);
  if (m) return `H${m[1]}` as Period;
  if (/^[dD]1$/.test(p)) return 'D1';
  if (/^[wW]1$/.test(p)) return 'W1';
  return undefined;
}

export function rowToCandle(r: readonly number[]): Candle {
  return {
    ts: Number(r[0]),
    bidOpen: Number(r[1]),
    bidClose: Number(r[2]),
    bidHigh: Number(r[3]),
    bidLow: Number(r[4]),
    askOpen: Number(r[5]),
    askClose: Number(r[6]),
    askHigh: Number(r[7]),
    askLow: Number(r[8]),
    tickQty: Number(r[9]),
  };
}

export function candleToRow(c: Candle): CandleRow {
  return [c.ts, c.bidOpen, c.bidClose, c.bidHigh, c.bidLow, c.askOpen, c.askClose, c.askHigh, c.askLow, c.tickQty];
}

/** Max seconds one request may span for a period: min(days back, 10000 candles). */
export function maxWindowSeconds(period: Period): number {
  const byCount = PERIOD_SECONDS[period] * MAX_CANDLES_PER_REQUEST;
  const days = MAX_DAYS_BACK[period];
  const byDays = days === undefined ? Infinity : days * 86400;
  return Math.min(byCount, byDays);
}

export interface CandleChunk {
  from: number;
  to: number;
  num: number;
}

/**
 * Splits [fromSec, toSec] (inclusive, epoch seconds) into request windows that each respect the
 * period's limits. Windows are contiguous, non-overlapping and ordered oldest first.
 */
export function splitCandleRange(period: Period, fromSec: number, toSec: number): CandleChunk[] {
  if (!(toSec >= fromSec)) return [];
  const win = maxWindowSeconds(period);
  const step = PERIOD_SECONDS[period];
  const out: CandleChunk[] = [];
  let start = Math.floor(fromSec);
  const end = Math.floor(toSec);
  while (start <= end) {
    // window [start, stop] spans at most `win` seconds, i.e. at most 10000 candle starts
    const stop = Math.min(end, start + win - 1);
    const num = Math.min(MAX_CANDLES_PER_REQUEST, Math.max(1, Math.ceil((stop - start + 1) / step)));
    out.push({ from: start, to: stop, num });
    start = stop + 1;
  }
  return out;
}

/** Merges candle lists, deduplicating by timestamp (the later row wins), ascending. */
export function mergeCandles(...lists: Candle[][]): Candle[] {
  const byTs = new Map<number, Candle>();
  for (const list of lists) for (const c of list) byTs.set(c.ts, c);
  return [...byTs.values()].sort((a, b) => a.ts - b.ts);
}
