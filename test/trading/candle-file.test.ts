import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Candle } from '../../src/trading/fxcm/types';
import { parseCandlesCsv, readCandleFile, writeCandleFile } from '../../src/trading/fxcm/candle-file';

// 2024-03-05T09:30:00Z and the next two minutes, in epoch seconds
const TS = [1709631000, 1709631060, 1709631120];

const c0: Candle = { ts: TS[0]!, bidOpen: 1.0851, bidClose: 1.0853, bidHigh: 1.0856, bidLow: 1.085, askOpen: 1.0852, askClose: 1.0854, askHigh: 1.0857, askLow: 1.0851, tickQty: 42 };
const c1: Candle = { ts: TS[1]!, bidOpen: 1.0853, bidClose: 1.0849, bidHigh: 1.0855, bidLow: 1.0847, askOpen: 1.0854, askClose: 1.085, askHigh: 1.0856, askLow: 1.0848, tickQty: 17 };
const c2: Candle = { ts: TS[2]!, bidOpen: 1.0849, bidClose: 1.086, bidHigh: 1.0861, bidLow: 1.0849, askOpen: 1.085, askClose: 1.0861, askHigh: 1.0862, askLow: 1.085, tickQty: 0 };

/** The broker's row order: ts, bidopen, bidclose, bidhigh, bidlow, askopen, askclose, askhigh, asklow, tickqty. */
const row = (c: Candle) => [c.ts, c.bidOpen, c.bidClose, c.bidHigh, c.bidLow, c.askOpen, c.askClose, c.askHigh, c.askLow, c.tickQty];

const HEADER = 'ts,bidopen,bidclose,bidhigh,bidlow,askopen,askclose,askhigh,asklow,tickqty';
const csvLine = (c: Candle) => row(c).join(',');

describe('candle files', () => {
  let dir: string;
  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rl-candles-file-'));
  });
  afterEach(() => {
    fs.rmSync(dir, { recursive: true, force: true });
  });
  const put = (name: string, text: string): string => {
    const f = path.join(dir, name);
    fs.writeFileSync(f, text);
    return f;
  };

  describe('JSON', () => {
    test('writeCandleFile writes the broker row order, and readCandleFile reads it back', () => {
      const f = path.join(dir, 'eurusd.json');
      writeCandleFile(f, 'EUR/USD', 'm1', [c0, c1, c2]);
      const text = fs.readFileSync(f, 'utf8');
      expect(text.endsWith('\n')).toBe(true);
      expect(JSON.parse(text)).toEqual({ symbol: 'EUR/USD', timeframe: 'm1', candles: [row(c0), row(c1), row(c2)] });
      expect(readCandleFile(f)).toEqual({ symbol: 'EUR/USD', timeframe: 'm1', candles: [c0, c1, c2] });
    });

    test('round trip keeps every time frame as written', () => {
      for (const tf of ['m5', 'H1', 'H4', 'D1', 'W1', 'M1'] as const) {
        const f = path.join(dir, `x-${tf}.json`);
        writeCandleFile(f, 'USD/JPY', tf, [c0]);
        expect(readCandleFile(f)).toEqual({ symbol: 'USD/JPY', timeframe: tf, candles: [c0] });
      }
    });

    test('rows out of time order, or a repeated time, are an error naming the row', () => {
      const unsorted = path.join(dir, 'unsorted.json');
      writeCandleFile(unsorted, 'EUR/USD', 'm1', [c0, c2, c1]);
      expect(() => readCandleFile(unsorted)).toThrow(
        `${unsorted}: candles[2]: the candle at 2024-03-05T09:31:00Z is not after the one before it (2024-03-05T09:32:00Z); a candle file must be in time order, without repeats`,
      );
      const repeated = path.join(dir, 'repeated.json');
      writeCandleFile(repeated, 'EUR/USD', 'm1', [c0, c1, { ...c1, tickQty: 99 }]);
      expect(() => readCandleFile(repeated)).toThrow(`${repeated}: candles[2]: the candle at 2024-03-05T09:31:00Z is not after`);
    });

    test('a row with entries missing, not numbers, or prices that contradict each other is an error naming the row', () => {
      const bad = (name: string, rows: unknown[]) => put(name, JSON.stringify({ symbol: 'EUR/USD', timeframe: 'm1', candles: rows }));
      const short = bad('short.json', [row(c0), row(c1).slice(0, 7)]);
      expect(() => readCandleFile(short)).toThrow(`${short}: candles[1] has 7 entries, not 9 or 10`);
      const text = bad('text.json', [row(c0).map((v, i) => (i === 3 ? '1.09' : v))]);
      expect(() => readCandleFile(text)).toThrow(`${text}: candles[0]: bidhigh is "1.09", not a number`);
      const inverted = bad('inverted.json', [{ ...c0, askClose: 1.0852 }].map(row));
      expect(() => readCandleFile(inverted)).toThrow(`${inverted}: candles[0]: ask close 1.0852 is below bid close 1.0853`);
      const lowAbove = bad('low.json', [{ ...c0, bidLow: 1.0852 }].map(row));
      expect(() => readCandleFile(lowAbove)).toThrow(`${lowAbove}: candles[0]: bid low 1.0852 is above the bid open or close`);
      const missingField = bad('object.json', [{ ts: c0.ts, bidOpen: 1, bidClose: 1, bidHigh: 1, bidLow: 1 }]);
      expect(() => readCandleFile(missingField)).toThrow(`${missingField}: candles[0]: askOpen is undefined, not a positive number`);
      const zero = bad('zero.json', [{ ...c0, bidOpen: 0, bidLow: 0 }].map(row));
      expect(() => readCandleFile(zero)).toThrow(`${zero}: candles[0]: bidOpen is 0, not a positive number`);
    });

    test('--symbol and --timeframe win over the file; the time frame is normalised', () => {
      const f = path.join(dir, 'x.json');
      writeCandleFile(f, 'EUR/USD', 'm1', [c0]);
      expect(readCandleFile(f, { symbol: 'GBP/USD' })).toMatchObject({ symbol: 'GBP/USD', timeframe: 'm1' });
      expect(readCandleFile(f, { timeframe: 'h1' })).toMatchObject({ symbol: 'EUR/USD', timeframe: 'H1' });
      expect(readCandleFile(f, { symbol: 'AUD/USD', timeframe: 'd1' })).toMatchObject({ symbol: 'AUD/USD', timeframe: 'D1' });
    });

    test('period_id is read when timeframe is absent', () => {
      const f = put('p.json', JSON.stringify({ symbol: 'EUR/USD', period_id: 'm15', candles: [row(c0)] }));
      expect(readCandleFile(f)).toEqual({ symbol: 'EUR/USD', timeframe: 'm15', candles: [c0] });
      const both = put('both.json', JSON.stringify({ symbol: 'EUR/USD', timeframe: 'm5', period_id: 'm15', candles: [] }));
      expect(readCandleFile(both).timeframe).toBe('m5');
    });

    test('rows may also be candle objects; leading whitespace is fine', () => {
      const f = put('objects.json', '\n  ' + JSON.stringify({ symbol: 'EUR/USD', timeframe: 'm1', candles: [row(c0), c1] }));
      expect(readCandleFile(f).candles).toEqual([c0, c1]);
    });

    test('a bare array of rows needs --symbol and --timeframe', () => {
      const f = put('bare.json', JSON.stringify([row(c0), row(c1)]));
      expect(readCandleFile(f, { symbol: 'EUR/USD', timeframe: 'm1' })).toEqual({ symbol: 'EUR/USD', timeframe: 'm1', candles: [c0, c1] });
      expect(() => readCandleFile(f, { timeframe: 'm1' })).toThrow(`${f}: the symbol is unknown (add "symbol" to the JSON or pass --symbol)`);
      expect(() => readCandleFile(f, { symbol: 'EUR/USD' })).toThrow(`${f}: the time frame is unknown or invalid (none; add "timeframe" or pass --timeframe)`);
    });

    test('an invalid time frame is named in the error', () => {
      const f = put('bad-tf.json', JSON.stringify({ symbol: 'EUR/USD', timeframe: 'm2', candles: [] }));
      expect(() => readCandleFile(f)).toThrow(`${f}: the time frame is unknown or invalid (m2; add "timeframe" or pass --timeframe)`);
      expect(() => readCandleFile(f, { timeframe: 'hourly' })).toThrow(`${f}: the time frame is unknown or invalid (hourly; add "timeframe" or pass --timeframe)`);
      expect(readCandleFile(f, { timeframe: 'm30' }).timeframe).toBe('m30');
    });

    test('an object without a "candles" array is refused', () => {
      const none = put('none.json', JSON.stringify({ symbol: 'EUR/USD', timeframe: 'm1' }));
      expect(() => readCandleFile(none)).toThrow(`${none}: no "candles" array`);
      const notArray = put('obj.json', JSON.stringify({ symbol: 'EUR/USD', timeframe: 'm1', candles: { 0: row(c0) } }));
      expect(() => readCandleFile(notArray)).toThrow(`${notArray}: no "candles" array`);
    });

    test('JSON that does not parse is an error naming the file and the parser\'s reason', () => {
      const f = put('torn.json', '{"symbol":"EUR/USD","timeframe":"m1","candles":[[1709631000,1.08');
      expect(() => readCandleFile(f)).toThrow(new RegExp(`^${f.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: not valid JSON \\(.+\\)$`));
      const torn2 = put('torn2.json', '[[1,2,3],');
      expect(() => readCandleFile(torn2, { symbol: 'EUR/USD', timeframe: 'm1' })).toThrow(`${torn2}: not valid JSON (`);
    });

    test('a file that does not exist is an ENOENT error naming it', () => {
      const f = path.join(dir, 'missing.json');
      expect(() => readCandleFile(f)).toThrow(expect.objectContaining({ code: 'ENOENT', message: expect.stringContaining(f) }));
    });
  });

  describe('CSV', () => {
    test('the broker column order reads like the JSON rows; the symbol and time frame come from the options', () => {
      const f = put('eurusd.csv', [HEADER, csvLine(c0), csvLine(c1), csvLine(c2)].join('\n') + '\n');
      expect(readCandleFile(f, { symbol: 'EUR/USD', timeframe: 'm1' })).toEqual({ symbol: 'EUR/USD', timeframe: 'm1', candles: [c0, c1, c2] });
    });

    test('a file named .csv is written as CSV (header, one row per candle) and reads back with the options', () => {
      const f = path.join(dir, 'download.CSV');
      writeCandleFile(f, 'EUR/USD', 'm1', [c0, c1, c2]);
      const text = fs.readFileSync(f, 'utf8');
      expect(text.split('\n')[0]).toBe('ts,bidopen,bidclose,bidhigh,bidlow,askopen,askclose,askhigh,asklow,tickqty');
      expect(text.trimEnd().split('\n')).toHaveLength(4);
      expect(readCandleFile(f, { symbol: 'EUR/USD', timeframe: 'm1' })).toEqual({ symbol: 'EUR/USD', timeframe: 'm1', candles: [c0, c1, c2] });
    });

    test('CSV -> JSON -> read gives the same series', () => {
      const csv = put('in.csv', [HEADER, csvLine(c0), csvLine(c1), csvLine(c2)].join('\n'));
      const fromCsv = readCandleFile(csv, { symbol: 'EUR/USD', timeframe: 'H1' });
      const json = path.join(dir, 'out.json');
      writeCandleFile(json, fromCsv.symbol, fromCsv.timeframe, fromCsv.candles);
      expect(readCandleFile(json)).toEqual(fromCsv);
      expect(fromCsv).toEqual({ symbol: 'EUR/USD', timeframe: 'H1', candles: [c0, c1, c2] });
    });

    test('a CSV file has no symbol or time frame of its own', () => {
      const f = put('x.csv', [HEADER, csvLine(c0)].join('\n'));
      expect(() => readCandleFile(f)).toThrow(`${f}: the symbol is unknown (add "symbol" to the JSON or pass --symbol)`);
      expect(() => readCandleFile(f, { symbol: 'EUR/USD' })).toThrow(`${f}: the time frame is unknown or invalid (none; add "timeframe" or pass --timeframe)`);
    });

    test('columns in any order and any case, spaces around values, CRLF and blank lines', () => {
      const cols = ['AskLow', 'TS', 'BidOpen', 'bidclose', 'BIDHIGH', 'bidlow', 'askopen', 'askclose', 'askhigh', 'TickQty'];
      const pick = (c: Candle) => [c.askLow, c.ts, c.bidOpen, c.bidClose, c.bidHigh, c.bidLow, c.askOpen, c.askClose, c.askHigh, c.tickQty];
      const text = [cols.join(' , '), '', pick(c0).join(', '), '   ', pick(c1).join(' ,'), ''].join('\r\n');
      expect(parseCandlesCsv(text)).toEqual([c0, c1]);
      expect(readCandleFile(put('mixed.csv', text), { symbol: 'EUR/USD', timeframe: 'm1' }).candles).toEqual([c0, c1]);
    });

    test('tickqty may be left out (0)', () => {
      const text = ['ts,bidopen,bidclose,bidhigh,bidlow,askopen,askclose,askhigh,asklow', row(c0).slice(0, 9).join(',')].join('\n');
      expect(parseCandlesCsv(text)).toEqual([{ ...c0, tickQty: 0 }]);
    });

    test('an ISO 8601 date column may replace ts (epoch seconds); ts wins when both are there', () => {
      const cols = 'date,bidopen,bidclose,bidhigh,bidlow,askopen,askclose,askhigh,asklow,tickqty';
      const rest = (c: Candle) => row(c).slice(1).join(',');
      expect(parseCandlesCsv([cols, `2024-03-05T09:30:00Z,${rest(c0)}`, `2024-03-05T09:31:00.000Z,${rest(c1)}`].join('\n'))).toEqual([c0, c1]);
      expect(parseCandlesCsv([`${HEADER},date`, `${csvLine(c0)},2001-01-01T00:00:00Z`].join('\n'))).toEqual([c0]);
    });

    test('a header only, or an empty file, has no candles', () => {
      expect(parseCandlesCsv('')).toEqual([]);
      expect(parseCandlesCsv('\n\n')).toEqual([]);
      expect(parseCandlesCsv(HEADER + '\n')).toEqual([]);
      expect(readCandleFile(put('empty.csv', ''), { symbol: 'EUR/USD', timeframe: 'm1' })).toEqual({ symbol: 'EUR/USD', timeframe: 'm1', candles: [] });
    });

    test('a missing column is named', () => {
      expect(() => parseCandlesCsv('ts,bidopen,bidclose,bidlow,askopen,askclose,askhigh,asklow\n1,2,3,4,5,6,7,8')).toThrow('CSV candles:1: the header has no column bidhigh');
      expect(() => parseCandlesCsv('time,bidopen,bidclose,bidhigh,bidlow,askopen,askclose,askhigh,asklow')).toThrow('CSV candles:1: the header has no column ts');
      const f = put('no-ask.csv', '\nts,bidopen,bidclose,bidhigh,bidlow\n1,2,3,4,5\n');
      expect(() => readCandleFile(f, { symbol: 'EUR/USD', timeframe: 'm1' })).toThrow(`${f}:2: the header has no column askopen`);
    });

    test('a value that is not a number is reported with its line (the header is line 1)', () => {
      const bad = (c: Candle) => csvLine(c).replace(String(c.bidHigh), 'n/a');
      expect(() => parseCandlesCsv([HEADER, csvLine(c0), bad(c1), csvLine(c2)].join('\n'))).toThrow('CSV candles:3: bidhigh is "n/a", not a number');
      expect(() => parseCandlesCsv([HEADER, `${csvLine(c0)}`.replace(/,42$/, ',Infinity')].join('\n'))).toThrow('CSV candles:2: tickqty is "Infinity", not a number');
      // Blank lines count: the line number is the file's.
      const f = put('bad.csv', [HEADER, '', csvLine(c0), '', csvLine(c1), bad(c2)].join('\n'));
      expect(() => readCandleFile(f, { symbol: 'EUR/USD', timeframe: 'm1' })).toThrow(`${f}:6: bidhigh is "n/a", not a number`);
    });

    test('a row with too few fields, an empty field, unsorted rows or an ask below the bid: an error naming the line', () => {
      const read = (name: string, lines: string[]) => () => readCandleFile(put(name, lines.join('\n')), { symbol: 'EUR/USD', timeframe: 'm1' });
      expect(read('few.csv', [HEADER, csvLine(c0), '1709631060,1.0853,1.0849'])).toThrow(/few\.csv:3: 3 fields, the header has 10$/);
      expect(read('empty-field.csv', [HEADER, csvLine(c0).replace(',1.0853,', ',,')])).toThrow(/empty-field\.csv:2: bidclose is "", not a number$/);
      expect(read('order.csv', [HEADER, csvLine(c1), csvLine(c0)])).toThrow(/order\.csv:3: the candle at 2024-03-05T09:30:00Z is not after the one before it/);
      expect(read('spread.csv', [HEADER, csvLine({ ...c0, askOpen: 1.085, askLow: 1.085 })])).toThrow(/spread\.csv:2: ask open 1.085 is below bid open 1.0851$/);
    });

    test('a date that does not parse is a bad number', () => {
      const cols = 'date,bidopen,bidclose,bidhigh,bidlow,askopen,askclose,askhigh,asklow';
      expect(() => parseCandlesCsv(`${cols}\nyesterday,1,1,1,1,1,1,1,1`)).toThrow('CSV candles:2: ts is "yesterday", not a number');
    });
  });
});
