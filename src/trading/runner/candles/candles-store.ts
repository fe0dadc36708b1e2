/**
 * The local candle store (`candles download --store DIR`, or RATELIMIT_RUNNER_CANDLES=DIR): one
 * file per symbol and time frame,
 *
 *   DIR/EUR_USD/m1.json   DIR/EUR_USD/H1.json   DIR/US30/D1.json   DIR/EUR_USD/MN1.json (month)
 *
 * (the symbol with every character other than a letter or digit as `_`; the time frame as the
 * broker spells it, except the month, M1, which is MN1 so that it never shares a name with m1 on a
 * case-insensitive file system, macOS's or Windows'). Each file is an ordinary JSON candle file
 * (fxcm/candle-file.ts), symbol and time frame included, so `backtest --candles DIR/EUR_USD/m1.json`
 * reads it as it is; CSV would need --symbol and --timeframe, and a store file with a symbol of
 * its own also catches two symbols that map to one directory name.
 *
 * Each file also records `covered`: the one unbroken time range the store has asked the broker
 * for, complete candles only. A download asks only for what lies outside it: before it (newest
 * window first) and after it (oldest first), so the covered range grows without holes whichever
 * request fails; a range disjoint from it is joined up, the gap included. `covered` rather than
 * the first and last candle: a weekend, a holiday or the start of the broker's history has no
 * candles, and is not asked for again. The file is replaced (temp file, rename) after every
 * answered request, so an interrupted download (a signal, a broker failure, a crash) leaves a
 * valid file holding everything fetched so far, and the same command again completes it.
 */
import fs from 'node:fs';
import path from 'node:path';
import { PERIOD_SECONDS, mergeCandles, normalizePeriod, splitCandleRange } from '../../fxcm/candles';
import type { FxcmClient } from '../../fxcm/client';
import type { Candle, Period } from '../../fxcm/types';
import { CandleFileError, candleProblems, inspectCandleFile, isoTime, writeCandleFile, type Coverage } from '../../fxcm/candle-file';

/** The store used when `candles download` has neither --out nor --store. */
export const CANDLE_STORE_ENV = 'RATELIMIT_RUNNER_CANDLES';

/** File name of a time frame: the month M1 is MN1 (m1.json and M1.json are one file on macOS). */
const fileNameOf = (period: Period) => `${period === 'M1' ? 'MN1' : period}.json`;

/** Where the store keeps a symbol's time frame: DIR/EUR_USD/m1.json. */
export function storeFile(dir: string, symbol: string, period: Period): string {
  return path.join(dir, symbol.replace(/[^A-Za-z0-9]/g, '_'), fileNameOf(period));
}

export interface StoredCandles {
  candles: Candle[];
  covered?: Coverage;
}

/**
 * A store file's candles and coverage (none when there is no file yet). A file without `covered`
 * (e.g. one from `--out`, copied in) covers its first candle to just before its last: the last is
 * asked for again, as it may have been still forming when it was downloaded.
 */
export function readStore(file: string, symbol: string, period: Period): StoredCandles {
  if (!fs.existsSync(file)) return { candles: [] };
  const read = inspectCandleFile(file);
  const problem = read.problems[0];
  if (problem) throw new CandleFileError(`${problem.message} ('candles check ${file}' lists every bad row; move the file away to download it again)`);
  if (read.symbol !== symbol || normalizePeriod(read.timeframe ?? '') !== period) {
    throw new CandleFileError(`${file} holds ${read.symbol ?? 'an unknown symbol'} ${read.timeframe ?? ''}, not ${symbol} ${period}; move it away or use another store`);
  }
  const first = read.candles[0];
  const last = read.candles[read.candles.length - 1];
  const derived = first && last && last.ts > first.ts ? { from: first.ts, to: last.ts - 1 } : undefined;
  return { candles: read.candles, covered: read.covered ?? derived };
}

/** A range to ask the broker for, and in which order (see the header). */
export interface MissingRange extends Coverage {
  newestFirst: boolean;
}

/** The parts of [from, to] the store does not cover yet: before its range, then after it. */
export function missingRanges(covered: Coverage | undefined, from: number, to: number): MissingRange[] {
  if (!covered) return from <= to ? [{ from, to, newestFirst: false }] : [];
  const out: MissingRange[] = [];
  if (from < covered.from) out.push({ from, to: covered.from - 1, newestFirst: true });
  if (to > covered.to) out.push({ from: covered.to + 1, to, newestFirst: false });
  return out;
}

/**
 * The latest time whose candle is complete at `nowSec`: one period back, and a minute more so that
 * a local clock a little ahead of the broker's never records a forming candle as final.
 */
export function completeUntil(period: Period, nowSec: number): number {
  return nowSec - PERIOD_SECONDS[period] - 60;
}

/** How many broker requests the missing ranges take. */
export function requestsFor(period: Period, ranges: readonly Coverage[]): number {
  return ranges.reduce((n, r) => n + splitCandleRange(period, r.from, r.to).length, 0);
}

export interface StoreDownload {
  file: string;
  /** Candles in the file now. */
  candles: number;
  covered?: Coverage;
  /** Candle requests the missing ranges take, and those answered so far. */
  planned: number;
  requests: number;
}

export interface StoreDownloadOptions {
  dir: string;
  symbol: string;
  period: Period;
  from: number;
  to: number;
  /** Epoch seconds now (what is complete: completeUntil). */
  nowSec: () => number;
  /** At the start and after each answered request, once the file holds it. */
  onProgress?: (progress: Readonly<StoreDownload>) => void;
  /** Stops before the next request (the file holds every answered one). */
  signal?: AbortSignal;
}

/**
 * Downloads what the store lacks of [from, to] for one symbol and time frame, saving after every
 * request; throws what the client throws (the file then holds every request answered before).
 */
export async function downloadIntoStore(client: FxcmClient, o: StoreDownloadOptions): Promise<StoreDownload> {
  const file = storeFile(o.dir, o.symbol, o.period);
  const stored = readStore(file, o.symbol, o.period);
  const ranges = missingRanges(stored.covered, o.from, o.to);
  const state: StoreDownload = { file, candles: stored.candles.length, covered: stored.covered, planned: requestsFor(o.period, ranges), requests: 0 };
  o.onProgress?.(state);
  let candles = stored.candles;
  fs.mkdirSync(path.dirname(file), { recursive: true });
  for (const range of ranges) {
    await client.downloadCandles(o.symbol, o.period, range.from, range.to, {
      newestFirst: range.newestFirst,
      signal: o.signal,
      onChunk: (got, chunk) => {
        // the store holds only what a backtest accepts: an answer with a bad candle is not merged
        const bad = candleProblems(got, (i) => `the candle at ${isoTime(got[i]!.ts)}`)[0];
        if (bad) throw new Error(`the broker's answer is not a valid candle file: ${bad.message}`);
        candles = mergeCandles(candles, got);
        state.covered = extend(state.covered, chunk, completeUntil(o.period, o.nowSec()));
        writeCandleFile(file, o.symbol, o.period, candles, state.covered);
        state.candles = candles.length;
        state.requests++;
        o.onProgress?.(state);
      },
    });
  }
  return state;
}

/** The coverage after a request for `chunk`, which joins it (before or after), up to `complete`. */
function extend(covered: Coverage | undefined, chunk: Coverage, complete: number): Coverage | undefined {
  const from = Math.min(covered?.from ?? chunk.from, chunk.from);
  const to = Math.max(covered?.to ?? -Infinity, Math.min(chunk.to, complete));
  return to >= from ? { from, to } : covered;
}
