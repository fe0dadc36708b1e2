/**
 * Candle files, for backtests and for the simulator's replay. Two formats:
 * - JSON: `{"symbol":"EUR/USD","timeframe":"m1","candles":[[ts,bidopen,bidclose,bidhigh,bidlow,askopen,askclose,askhigh,asklow,tickqty],…]}`
 *   (the broker's row order; `ts` in epoch seconds; also what `candles download` writes), or a bare
 *   array of such rows (then --symbol and --timeframe are required);
 * - CSV: a header line `ts,bidopen,bidclose,bidhigh,bidlow,askopen,askclose,askhigh,asklow,tickqty`
 *   (column names case-insensitive, any order; `date` in ISO 8601 may replace `ts`).
 * Every row is checked: a number missing or not a number, a low above the open or close or a high
 * below them, an ask below the bid, a time not after the row before (the file must be in time
 * order, without repeats: a backtest over shuffled data would be wrong without a sign of it).
 * readCandleFile refuses the first bad row, naming the file and the line (CSV) or the row (JSON);
 * inspectCandleFile lists them all (`candles check`). A candle store's files (runner/candles/candles-store.ts)
 * are JSON files with one more field, `covered`.
 */
import fs from 'node:fs';
import { isoUtc } from '../../platform/time-text';
import { candleToRow, normalizePeriod, rowToCandle } from './candles';
import type { Candle, Period } from './types';
import { errorMessage } from '../../platform/errors';

const COLS = ['ts', 'bidopen', 'bidclose', 'bidhigh', 'bidlow', 'askopen', 'askclose', 'askhigh', 'asklow', 'tickqty'];
const PRICES = ['bidOpen', 'bidClose', 'bidHigh', 'bidLow', 'askOpen', 'askClose', 'askHigh', 'askLow'] as const;

/** One symbol's candles in one time frame, in time order. */
export interface CandleSeries {
  symbol: string;
  timeframe: Period;
  candles: Candle[];
}

/** A candle file that cannot be used as it is; the message names the file and the line or row. */
export class CandleFileError extends Error {
  override readonly name = 'CandleFileError';
}

/** The kinds of bad rows, as `candles check` counts them. */
export type CandleProblemKind = 'malformed' | 'prices' | 'ask below bid' | 'duplicate' | 'unsorted';

/** One row that cannot be used; `message` starts with its place (`file:line` or `file: candles[i]`). */
export interface CandleProblem {
  kind: CandleProblemKind;
  message: string;
}

/** The time range a candle store has asked the broker for, epoch seconds, both ends included. */
export interface Coverage {
  from: number;
  to: number;
}

/** A candle file read row by row: what it says about itself, its candles, and every bad row. */
export interface CandleFileContents {
  symbol?: string;
  /** As written (normalizePeriod gives the period, when valid). */
  timeframe?: string;
  /** Written by the candle store (runner/candles/candles-store.ts); absent in other files. */
  covered?: Coverage;
  /** Every row that parsed as numbers, bad prices and order included. */
  candles: Candle[];
  /** In file order. */
  problems: CandleProblem[];
}

/** A candle time (epoch seconds) as ISO 8601 text, without the milliseconds: 2024-03-05T09:30:00Z. */
export const isoTime = (ts: number): string => isoUtc(ts * 1000);

/** What is wrong with one candle on its own, or undefined. */
function candleProblem(c: Candle): { kind: CandleProblemKind; what: string } | undefined {
  if (!Number.isFinite(c.ts)) return { kind: 'malformed', what: 'the time is not a number' };
  for (const k of PRICES) if (!Number.isFinite(c[k]) || c[k] <= 0) return { kind: 'prices', what: `${k} is ${String(c[k])}, not a positive number` };
  if (!Number.isFinite(c.tickQty) || c.tickQty < 0) return { kind: 'prices', what: `tickQty is ${String(c.tickQty)}, not a count` };
  for (const side of ['bid', 'ask'] as const) {
    const [open, close, high, low] = [c[`${side}Open`], c[`${side}Close`], c[`${side}High`], c[`${side}Low`]];
    if (low > Math.min(open, close)) return { kind: 'prices', what: `${side} low ${low} is above the ${side} open or close` };
    if (high < Math.max(open, close)) return { kind: 'prices', what: `${side} high ${high} is below the ${side} open or close` };
  }
  if (c.askOpen < c.bidOpen) return { kind: 'ask below bid', what: `ask open ${c.askOpen} is below bid open ${c.bidOpen}` };
  if (c.askClose < c.bidClose) return { kind: 'ask below bid', what: `ask close ${c.askClose} is below bid close ${c.bidClose}` };
  return undefined;
}

/**
 * Checks rows as they are read, so problems come in file order; `where(i)` names the i-th row's
 * place, built only for bad rows (a large file would otherwise build a string per row).
 */
class RowChecker {
  readonly candles: Candle[] = [];
  readonly problems: CandleProblem[] = [];

  constructor(private readonly where: (i: number) => string) {}

  /** `what` follows the place after ': ', or after a space when it reads on from it ("candles[3] has 7 entries"). */
  bad(kind: CandleProblemKind, i: number, what: string, after = ': '): void {
    this.problems.push({ kind, message: `${this.where(i)}${after}${what}` });
  }

  add(c: Candle, i: number): void {
    const problem = candleProblem(c);
    if (problem !== undefined) this.bad(problem.kind, i, problem.what);
    if (problem?.kind === 'malformed') return;
    const before = this.candles[this.candles.length - 1];
    if (before !== undefined && c.ts <= before.ts) {
      this.bad(
        c.ts === before.ts ? 'duplicate' : 'unsorted',
        i,
        `the candle at ${isoTime(c.ts)} is not after the one before it (${isoTime(before.ts)}); a candle file must be in time order, without repeats`,
      );
    }
    this.candles.push(c);
  }
}

/** The problems of candles already in memory (e.g. a broker's answer); `where(i)` names the i-th. */
export function candleProblems(candles: readonly Candle[], where: (i: number) => string): CandleProblem[] {
  const rows = new RowChecker(where);
  candles.forEach((c, i) => rows.add(c, i));
  return rows.problems;
}

function firstProblem(rows: { problems: CandleProblem[] }): void {
  const p = rows.problems[0];
  if (p !== undefined) throw new CandleFileError(p.message);
}

/** CSV text to candles and the problems of its rows (a header without a needed column throws). */
function csvRows(text: string, file: string): RowChecker {
  const lines = text.split(/\r?\n/);
  const rows = new RowChecker((n) => `${file}:${n + 1}`);
  const headAt = lines.findIndex((l) => l.trim() !== '');
  if (headAt < 0) return rows;
  const head = lines[headAt]!.split(',').map((h) => h.trim().toLowerCase());
  const idx = COLS.map((c) => (c === 'ts' && !head.includes('ts') ? head.indexOf('date') : head.indexOf(c)));
  idx.forEach((i, k) => {
    if (i < 0 && COLS[k] !== 'tickqty') throw new CandleFileError(`${file}:${headAt + 1}: the header has no column ${COLS[k]}`);
  });
  for (let n = headAt + 1; n < lines.length; n++) {
    const line = lines[n]!;
    if (line.trim() === '') continue;
    const f = line.split(',').map((x) => x.trim());
    if (f.length < head.length) {
      rows.bad('malformed', n, `${f.length} fields, the header has ${head.length}`);
      continue;
    }
    const row = idx.map((i, k) => {
      if (i < 0) return 0;
      const v = f[i]!;
      if (v === '') return NaN;
      if (k === 0 && head[i] === 'date') return Math.floor(Date.parse(v) / 1000);
      return Number(v);
    });
    const bad = row.findIndex((v) => !Number.isFinite(v));
    if (bad >= 0) rows.bad('malformed', n, `${COLS[bad]} is ${JSON.stringify(f[idx[bad]!] ?? '')}, not a number`);
    else rows.add(rowToCandle(row), n);
  }
  return rows;
}

/** CSV text to candles; `file` names the source in errors. */
export function parseCandlesCsv(text: string, file = 'CSV candles'): Candle[] {
  const rows = csvRows(text, file);
  firstProblem(rows);
  return rows.candles;
}

/** JSON rows (arrays in the broker's order, or candle objects) to candles and their problems. */
function jsonRows(list: readonly unknown[], file: string): RowChecker {
  const rows = new RowChecker((i) => `${file}: candles[${i}]`);
  list.forEach((r, i) => {
    if (Array.isArray(r)) {
      if (r.length < 9 || r.length > 10) return rows.bad('malformed', i, `has ${r.length} entries, not 9 or 10 (${COLS.join(',')})`, ' ');
      const bad = r.findIndex((v) => typeof v !== 'number');
      if (bad >= 0) return rows.bad('malformed', i, `${COLS[bad]} is ${JSON.stringify(r[bad])}, not a number`);
      return rows.add(rowToCandle(r.length === 9 ? [...(r as number[]), 0] : (r as number[])), i);
    }
    if (typeof r === 'object' && r !== null) {
      const c = r as Candle;
      return rows.add({ ...c, tickQty: c.tickQty ?? 0 }, i);
    }
    rows.bad('malformed', i, 'is neither a row nor a candle object', ' ');
  });
  return rows;
}

/** A coverage written by the candle store, or undefined when absent or not two ordered times. */
function coverageOf(v: unknown): Coverage | undefined {
  const c = v as Partial<Coverage> | undefined;
  if (typeof c?.from !== 'number' || typeof c.to !== 'number' || !(c.from <= c.to)) return undefined;
  return { from: c.from, to: c.to };
}

/**
 * Reads every row of a candle file and reports each bad one (CandleFileContents.problems); throws
 * CandleFileError only when the file as a whole cannot be read (not JSON, no "candles" array, a
 * CSV header without a needed column). `opts` win over what the file says about itself.
 */
export function inspectCandleFile(file: string, opts: { symbol?: string; timeframe?: string } = {}): CandleFileContents {
  const text = fs.readFileSync(file, 'utf8');
  const t = text.trimStart();
  if (!(t.startsWith('{') || t.startsWith('['))) {
    const rows = csvRows(text, file);
    return { symbol: opts.symbol, timeframe: opts.timeframe, candles: rows.candles, problems: rows.problems };
  }
  let j: unknown;
  try {
    j = JSON.parse(text);
  } catch (err) {
    throw new CandleFileError(`${file}: not valid JSON (${errorMessage(err)})`);
  }
  const list = Array.isArray(j) ? j : (j as { candles?: unknown }).candles;
  if (!Array.isArray(list)) throw new CandleFileError(`${file}: no "candles" array`);
  const o = Array.isArray(j) ? {} : (j as { symbol?: string; timeframe?: string; period_id?: string; covered?: unknown });
  const rows = jsonRows(list, file);
  return { symbol: opts.symbol ?? o.symbol, timeframe: opts.timeframe ?? o.timeframe ?? o.period_id, covered: coverageOf(o.covered), candles: rows.candles, problems: rows.problems };
}

/** A candle file's candles: the first bad row is an error (CandleFileError naming its place). */
export function readCandles(file: string): Candle[] {
  const read = inspectCandleFile(file);
  firstProblem(read);
  return read.candles;
}

/** A candle file for a backtest: as readCandles, and its symbol and time frame must be known. */
export function readCandleFile(file: string, opts: { symbol?: string; timeframe?: string } = {}): CandleSeries {
  const read = inspectCandleFile(file, opts);
  firstProblem(read);
  if (!read.symbol) throw new CandleFileError(`${file}: the symbol is unknown (add "symbol" to the JSON or pass --symbol)`);
  const period = normalizePeriod(read.timeframe ?? '');
  if (!period) throw new CandleFileError(`${file}: the time frame is unknown or invalid (${read.timeframe ?? 'none'}; add "timeframe" or pass --timeframe)`);
  return { symbol: read.symbol, timeframe: period, candles: read.candles };
}

/**
 * Replaces `file` in one step (a temp file renamed over it, removed if the write fails): a reader,
 * or a crash, never sees half a file.
 */
function writeWhole(file: string, text: string): void {
  const tmp = `${file}.${process.pid}.tmp`;
  try {
    fs.writeFileSync(tmp, text);
    fs.renameSync(tmp, file);
  } finally {
    fs.rmSync(tmp, { force: true });
  }
}

/**
 * Writes JSON, or CSV when the file name ends with .csv (the header of parseCandlesCsv; a CSV
 * file has no symbol or time frame of its own: pass --symbol and --timeframe to read it).
 * `covered` is the candle store's record of what it has asked the broker for (JSON only).
 */
export function writeCandleFile(file: string, symbol: string, timeframe: Period, candles: Candle[], covered?: Coverage): void {
  if (/\.csv$/i.test(file)) {
    writeWhole(file, [COLS.join(','), ...candles.map((c) => candleToRow(c).join(','))].join('\n') + '\n');
    return;
  }
  writeWhole(file, JSON.stringify({ symbol, timeframe, ...(covered && { covered }), candles: candles.map(candleToRow) }) + '\n');
}
