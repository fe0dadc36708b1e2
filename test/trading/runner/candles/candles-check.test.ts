/**
 * `candles check` (candles-check.ts): every bad row of a file with its line, and gaps judged by FX
 * hours (a weekend close, or a daily candle an hour longer at a daylight-saving change, is none).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Candle } from '../../../../src/trading/fxcm/types';
import { checkCandleFile, findGaps, formatCheck, isValid } from '../../../../src/trading/runner/candles/candles-check';
import { writeCandleFile } from '../../../../src/trading/fxcm/candle-file';
import { candle, flat } from '../helpers';

const at = (ms: number) => ms / 1000;
const minutes = (t0: number, n: number): Candle[] => flat(t0, Array.from({ length: n }, () => 1.1));
const HEADER = 'ts,bidopen,bidclose,bidhigh,bidlow,askopen,askclose,askhigh,asklow,tickqty';
const csv = (c: Candle) => [c.ts, c.bidOpen, c.bidClose, c.bidHigh, c.bidLow, c.askOpen, c.askClose, c.askHigh, c.askLow, c.tickQty].join(',');

describe('gaps', () => {
  const wed = at(Date.UTC(2024, 2, 13, 12));

  test('candles missing while the market is open are a gap, counted in periods', () => {
    const candles = [...minutes(wed, 10), ...minutes(wed + 14 * 60, 5)];
    expect(findGaps(candles, 'm1')).toEqual([{ before: wed + 9 * 60, after: wed + 14 * 60, missing: 4 }]);
    expect(findGaps(minutes(wed, 30), 'm1')).toEqual([]);
    const hours = [candle(wed, 1, 1, 1, 1), candle(wed + 3600, 1, 1, 1, 1), candle(wed + 5 * 3600, 1, 1, 1, 1)];
    expect(findGaps(hours, 'H1')).toEqual([{ before: wed + 3600, after: wed + 5 * 3600, missing: 3 }]);
  });

  test('the weekend close is not a gap; minutes missing before it are', () => {
    const lastOfWeek = at(Date.UTC(2024, 2, 15, 20, 54)); // Friday 16:54 New York
    const firstOfWeek = at(Date.UTC(2024, 2, 17, 21, 0)); // Sunday 17:00
    expect(findGaps([...minutes(lastOfWeek - 600, 11), ...minutes(firstOfWeek, 3)], 'm1')).toEqual([]);
    const early = minutes(lastOfWeek - 600, 7); // ends 16:50
    expect(findGaps([...early, ...minutes(firstOfWeek, 3)], 'm1')).toEqual([{ before: lastOfWeek - 240, after: firstOfWeek, missing: 4 }]);
  });

  test('daily candles at 17:00 New York: neither the weekend nor the daylight-saving change is a gap', () => {
    // 17:00 EST is 22:00 UTC until Sunday 10 March 2024, then 17:00 EDT is 21:00 UTC
    const days = [
      Date.UTC(2024, 2, 5, 22), // Tue
      Date.UTC(2024, 2, 6, 22),
      Date.UTC(2024, 2, 7, 22), // Thu (Friday's trading day)
      Date.UTC(2024, 2, 10, 21), // Sun (Monday's), after the change
      Date.UTC(2024, 2, 11, 21),
    ].map((ms) => candle(at(ms), 1, 1, 1, 1));
    expect(findGaps(days, 'D1')).toEqual([]);
    expect(findGaps([days[0]!, days[2]!], 'D1')).toEqual([{ before: days[0]!.ts, after: days[2]!.ts, missing: 1 }]);
  });
});

describe('checking a file', () => {
  let dir: string;
  beforeAll(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rr-check-'));
  });
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));
  const wed = at(Date.UTC(2024, 2, 13, 12));

  test('a good file: symbol, time frame, count, first and last, the covered range, its gaps; valid', () => {
    const f = path.join(dir, 'good.json');
    writeCandleFile(f, 'EUR/USD', 'm1', [...minutes(wed, 10), ...minutes(wed + 12 * 60, 3)], { from: wed - 60, to: wed + 20 * 60 });
    const c = checkCandleFile(f);
    expect(c).toMatchObject({ symbol: 'EUR/USD', period: 'm1', count: 13, first: wed, last: wed + 14 * 60, problems: [], gaps: [{ before: wed + 9 * 60, after: wed + 12 * 60, missing: 2 }] });
    expect(isValid(c)).toBe(true);
    expect(formatCheck(c)).toBe(
      `${f}: ok\n` +
        '  EUR/USD m1, 13 candles from 2024-03-13T12:00:00Z to 2024-03-13T12:14:00Z (the store covers 2024-03-13T11:59:00Z to 2024-03-13T12:20:00Z)\n' +
        '  1 gap while the market was open:\n' +
        '    after 2024-03-13T12:09:00Z, next 2024-03-13T12:12:00Z: 2 m1 candles missing\n',
    );
  });

  test('every bad row is listed with its line, counted by kind: a duplicate, an unsorted row, an ask below the bid, a bad number', () => {
    const [a, b, c, d] = minutes(wed, 4) as [Candle, Candle, Candle, Candle];
    const lines = [HEADER, csv(a), csv(b), csv(b), csv(d), csv(c), csv({ ...d, ts: d.ts + 60, askOpen: 1.0999, askLow: 1.0999 }), csv(d).replace('1.1', 'x')];
    const f = path.join(dir, 'bad.csv');
    fs.writeFileSync(f, lines.join('\n') + '\n');
    const r = checkCandleFile(f, { symbol: 'EUR/USD', timeframe: 'm1' });
    expect(isValid(r)).toBe(false);
    expect(r.problems.map((p) => p.kind)).toEqual(['duplicate', 'unsorted', 'ask below bid', 'malformed']);
    expect(formatCheck(r)).toBe(
      `${f}: INVALID: 4 bad rows (1 duplicate, 1 unsorted, 1 ask below bid, 1 malformed)\n` +
        '  EUR/USD m1, 6 candles from 2024-03-13T12:00:00Z to 2024-03-13T12:04:00Z\n' +
        `  ${f}:4: the candle at 2024-03-13T12:01:00Z is not after the one before it (2024-03-13T12:01:00Z); a candle file must be in time order, without repeats\n` +
        `  ${f}:6: the candle at 2024-03-13T12:02:00Z is not after the one before it (2024-03-13T12:03:00Z); a candle file must be in time order, without repeats\n` +
        `  ${f}:7: ask open 1.0999 is below bid open 1.1\n` +
        `  ${f}:8: bidopen is "x", not a number\n` +
        '  gaps not looked for: the rows are not in time order\n',
    );
  });

  test('a CSV file without --symbol/--timeframe is valid but not looked at for gaps; a file that does not parse is invalid', () => {
    const f = path.join(dir, 'plain.csv');
    fs.writeFileSync(f, [HEADER, ...minutes(wed, 3).map(csv)].join('\n'));
    const plain = checkCandleFile(f);
    expect(isValid(plain)).toBe(true);
    expect(plain.gaps).toBe('gaps not looked for without a time frame');
    expect(formatCheck(plain)).toContain('(a CSV file has no symbol or time frame of its own: pass --symbol and --timeframe)');
    const torn = path.join(dir, 'torn.json');
    fs.writeFileSync(torn, '{"symbol":"EUR/USD","candles":[[1,');
    expect(formatCheck(checkCandleFile(torn))).toMatch(new RegExp(`^${torn.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: INVALID: .*: not valid JSON`));
    const m2 = path.join(dir, 'm2.json');
    fs.writeFileSync(m2, JSON.stringify({ symbol: 'EUR/USD', timeframe: 'm2', candles: [] }));
    expect(isValid(checkCandleFile(m2))).toBe(false);
    expect(formatCheck(checkCandleFile(m2))).toContain('INVALID: the time frame m2 is not one of m1 m5');
  });

  test('more than 10 bad rows: the first 10 and a count of the rest', () => {
    const rows = minutes(wed, 15).map((c) => ({ ...c, askClose: 1.0, askLow: 1.0 }));
    const f = path.join(dir, 'many.json');
    fs.writeFileSync(f, JSON.stringify({ symbol: 'EUR/USD', timeframe: 'm1', candles: rows }));
    const out = formatCheck(checkCandleFile(f));
    expect(out).toContain('INVALID: 15 bad rows (15 ask below bid)');
    expect(out).toContain(`${f}: candles[9]: ask close 1 is below bid close 1.1`);
    expect(out).not.toContain('candles[10]');
    expect(out).toContain('  … and 5 more\n');
  });
});
