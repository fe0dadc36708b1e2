/**
 * Candle files for backtests. Two formats:
 * - JSON: `{"symbol":"EUR/USD","timeframe":"m1","candles":[[ts,bidopen,bidclose,bidhigh,bidlow,askopen,askclose,askhigh,asklow,tickqty],…]}`
 *   (the broker's row order; `ts` in epoch seconds; also what `candles download` writes), or a bare
 *   array of such rows (then --symbol and --timeframe are required);
 * - CSV: a header line `ts,bidopen,bidclose,bidhigh,bidlow,askopen,askclose,askhigh,asklow,tickqty`
 *   (column names case-insensitive, any order; `date` in ISO 8601 may replace `ts`).
 * Every row is checked, and the first bad one is an error naming the file and the line (CSV) or
 * the row (JSON): a number missing or not a number, a low above the open or close or a high below
 * them, an ask below the bid, a time not after the row before (the file must be in time order,
 * without repeats: a backtest over shuffled data would be wrong without a sign of it).
 */
import fs from 'node:fs';
import { candleToRow, normalizePeriod, rowToCandle } from '../fxcm/candles';
import type { Candle, Period } from '../fxcm/types';
import type { CandleSeries } from './backtest';

const COLS = ['ts', 'bidopen', 'bidclose', 'bidhigh', 'bidlow', 'askopen', 'askclose', 'askhigh', 'asklow', 'tickqty'];
const PRICES = ['bidOpen', 'bidClose', 'bidHigh', 'bidLow', 'askOpen', 'askClose', 'askHigh', 'askLow'] as const;

/** A candle file that cannot be used as it is; the message names the file and the line or row. */
export class CandleFileError extends Error {
  override readonly name = 'CandleFileError';
}

const iso = (ts: number) => new Date(ts * 1000).toISOString().replace('.000Z', 'Z');

/** What is wrong with one candle on its own, or undefined. */
function candleProblem(c: Candle): string | undefined {
  if (!Number.isFinite(c.ts)) return 'the time is not a number';
  for (const k of PRICES) if (!Number.isFinite(c[k]) || c[k] <= 0) return `${k} is ${String(c[k])}, not a positive number`;
  if (!Number.isFinite(c.tickQty) || c.tickQty < 0) return `tickQty is ${String(c.tickQty)}, not a count`;
  for (const side of ['bid', 'ask'] as const) {
    const [open, close, high, low] = [c[`${side}Open`], c[`${side}Close`], c[`${side}High`], c[`${side}Low`]];
    if (low > Math.min(open, close)) return `${side} low ${low} is above the ${side} open or close`;
    if (high < Math.max(open, close)) return `${side} high ${high} is below the ${side} open or close`;
  }
  if (c.askOpen < c.bidOpen) return `ask open ${c.askOpen} is below bid open ${c.bidOpen}`;
  if (c.askClose < c.bidClose) return `ask close ${c.askClose} is below bid close ${c.bidClose}`;
  return undefined;
}

/** Checks each candle and the order; `where(i)` names the i-th candle's place in the file. */
function checkCandles(candles: readonly Candle[], where: (i: number) => string): void {
  for (let i = 0; i < candles.length; i++) {
    const c = candles[i]!;
    const problem = candleProblem(c);
    if (problem !== undefined) throw new CandleFileError(`${where(i)}: ${problem}`);
    const before = candles[i - 1];
    if (before !== undefined && c.ts <= before.ts) {
      throw new CandleFileError(
        `${where(i)}: the candle at ${iso(c.ts)} is not after the one before it (${iso(before.ts)}); a candle file must be in time order, without repeats`,
      );
    }
  }
}

/** CSV text to candles; `file` names the source in errors. */
export function parseCandlesCsv(text: string, file = 'CSV candles'): Candle[] {
  const lines = text.split(/\r?\n/);
  const headAt = lines.findIndex((l) => l.trim() !== '');
  if (headAt < 0) return [];
  const head = lines[headAt]!.split(',').map((h) => h.trim().toLowerCase());
  const idx = COLS.map((c) => (c === 'ts' && !head.includes('ts') ? head.indexOf('date') : head.indexOf(c)));
  idx.forEach((i, k) => {
    if (i < 0 && COLS[k] !== 'tickqty') throw new CandleFileError(`${file}:${headAt + 1}: the header has no column ${COLS[k]}`);
  });
  const candles: Candle[] = [];
  const lineOf: number[] = [];
  for (let n = headAt + 1; n < lines.length; n++) {
    const line = lines[n]!;
    if (line.trim() === '') continue;
    const f = line.split(',').map((x) => x.trim());
    if (f.length < head.length) throw new CandleFileError(`${file}:${n + 1}: ${f.length} fields, the header has ${head.length}`);
    const row = idx.map((i, k) => {
      if (i < 0) return 0;
      const v = f[i]!;
      if (v === '') return NaN;
      if (k === 0 && head[i] === 'date') return Math.floor(Date.parse(v) / 1000);
      return Number(v);
    });
    const bad = row.findIndex((v) => !Number.isFinite(v));
    if (bad >= 0) throw new CandleFileError(`${file}:${n + 1}: ${COLS[bad]} is ${JSON.stringify(f[idx[bad]!] ?? '')}, not a number`);
    candles.push(rowToCandle(row));
    lineOf.push(n + 1);
  }
  checkCandles(candles, (i) => `${file}:${lineOf[i]}`);
  return candles;
}

/** JSON rows (arrays in the broker's order, or candle objects) to candles. */
function jsonCandles(rows: readonly unknown[], file: string): Candle[] {
  const candles = rows.map((r, i) => {
    if (Array.isArray(r)) {
      if (r.length < 9 || r.length > 10) throw new CandleFileError(`${file}: candles[${i}] has ${r.length} entries, not 9 or 10 (${COLS.join(',')})`);
      const bad = r.findIndex((v) => typeof v !== 'number');
      if (bad >= 0) throw new CandleFileError(`${file}: candles[${i}]: ${COLS[bad]} is ${JSON.stringify(r[bad])}, not a number`);
      return rowToCandle(r.length === 9 ? [...(r as number[]), 0] : (r as number[]));
    }
    if (typeof r === 'object' && r !== null) {
      const c = r as Candle;
      return { ...c, tickQty: c.tickQty ?? 0 };
    }
    throw new CandleFileError(`${file}: candles[${i}] is neither a row nor a candle object`);
  });
  checkCandles(candles, (i) => `${file}: candles[${i}]`);
  return candles;
}

export function readCandleFile(file: string, opts: { symbol?: string; timeframe?: string } = {}): CandleSeries {
  const text = fs.readFileSync(file, 'utf8');
  let symbol = opts.symbol;
  let tf = opts.timeframe;
  let candles: Candle[];
  const t = text.trimStart();
  if (t.startsWith('{') || t.startsWith('[')) {
    let j: unknown;
    try {
      j = JSON.parse(text);
    } catch (err) {
      throw new CandleFileError(`${file}: not valid JSON (${(err as Error).message})`);
    }
    const rows = Array.isArray(j) ? j : (j as { candles?: unknown }).candles;
    if (!Array.isArray(rows)) throw new CandleFileError(`${file}: no "candles" array`);
    if (!Array.isArray(j)) {
      const o = j as { symbol?: string; timeframe?: string; period_id?: string };
      symbol ??= o.symbol;
      tf ??= o.timeframe ?? o.period_id;
    }
    candles = jsonCandles(rows, file);
  } else candles = parseCandlesCsv(text, file);
  if (!symbol) throw new CandleFileError(`${file}: the symbol is unknown (add "symbol" to the JSON or pass --symbol)`);
  const period = normalizePeriod(tf ?? '');
  if (!period) throw new CandleFileError(`${file}: the time frame is unknown or invalid (${tf ?? 'none'}; add "timeframe" or pass --timeframe)`);
  return { symbol, timeframe: period, candles };
}

/**
 * Writes JSON, or CSV when the file name ends with .csv (the header of parseCandlesCsv; a CSV
 * file has no symbol or time frame of its own: pass --symbol and --timeframe to read it).
 */
export function writeCandleFile(file: string, symbol: string, timeframe: Period, candles: Candle[]): void {
  if (/\.csv$/i.test(file)) {
    fs.writeFileSync(file, [COLS.join(','), ...candles.map((c) => candleToRow(c).join(','))].join('\n') + '\n');
    return;
  }
  fs.writeFileSync(file, JSON.stringify({ symbol, timeframe, candles: candles.map(candleToRow) }) + '\n');
}
