/**
 * Candle files for backtests. Two formats:
 * - JSON: `{"symbol":"EUR/USD","timeframe":"m1","candles":[[ts,bidopen,bidclose,bidhigh,bidlow,askopen,askclose,askhigh,asklow,tickqty],…]}`
 *   (the broker's row order; `ts` in epoch seconds; also what `candles download` writes), or a bare
 *   array of such rows (then --symbol and --timeframe are required);
 * - CSV: a header line `ts,bidopen,bidclose,bidhigh,bidlow,askopen,askclose,askhigh,asklow,tickqty`
 *   (column names case-insensitive, any order; `date` in ISO 8601 may replace `ts`).
 * Rows are deduplicated by timestamp (the later row wins) and sorted.
 */
import fs from 'node:fs';
import { candleToRow, mergeCandles, normalizePeriod, rowToCandle } from '../fxcm/candles';
import type { Candle, Period } from '../fxcm/types';
import type { CandleSeries } from './backtest';

const COLS = ['ts', 'bidopen', 'bidclose', 'bidhigh', 'bidlow', 'askopen', 'askclose', 'askhigh', 'asklow', 'tickqty'];

export function parseCandlesCsv(text: string): Candle[] {
  const lines = text.split(/\r?\n/).filter((l) => l.trim() !== '');
  if (!lines.length) return [];
  const head = lines[0]!.split(',').map((h) => h.trim().toLowerCase());
  const idx = COLS.map((c) => (c === 'ts' && !head.includes('ts') ? head.indexOf('date') : head.indexOf(c)));
  idx.forEach((i, k) => {
    if (i < 0 && COLS[k] !== 'tickqty') throw new Error(`CSV candles: missing column ${COLS[k]}`);
  });
  return lines.slice(1).map((l, n) => {
    const f = l.split(',').map((x) => x.trim());
    const row = idx.map((i, k) => {
      if (i < 0) return 0;
      const v = f[i] ?? '';
      if (k === 0 && head[i] === 'date') return Math.floor(Date.parse(v) / 1000);
      return Number(v);
    });
    if (row.some((v) => !Number.isFinite(v))) throw new Error(`CSV candles: bad number on line ${n + 2}`);
    return rowToCandle(row);
  });
}

export function readCandleFile(file: string, opts: { symbol?: string; timeframe?: string } = {}): CandleSeries {
  const text = fs.readFileSync(file, 'utf8');
  let symbol = opts.symbol;
  let tf = opts.timeframe;
  let candles: Candle[];
  const t = text.trimStart();
  if (t.startsWith('{') || t.startsWith('[')) {
    const j = JSON.parse(text) as unknown;
    const rows = Array.isArray(j) ? j : (j as { candles?: unknown }).candles;
    if (!Array.isArray(rows)) throw new Error(`${file}: no "candles" array`);
    if (!Array.isArray(j)) {
      const o = j as { symbol?: string; timeframe?: string; period_id?: string };
      symbol ??= o.symbol;
      tf ??= o.timeframe ?? o.period_id;
    }
    candles = rows.map((r) => (Array.isArray(r) ? rowToCandle(r as number[]) : (r as Candle)));
  } else candles = parseCandlesCsv(text);
  if (!symbol) throw new Error(`${file}: the symbol is unknown (add "symbol" to the JSON or pass --symbol)`);
  const period = normalizePeriod(tf ?? '');
  if (!period) throw new Error(`${file}: the time frame is unknown or invalid (${tf ?? 'none'}; add "timeframe" or pass --timeframe)`);
  return { symbol, timeframe: period, candles: mergeCandles(candles) };
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
