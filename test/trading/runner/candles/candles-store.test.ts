/**
 * The local candle store (candles-store.ts) against the in-process simulator on a manual clock
 * (real FX hours): its layout, the ranges a download asks for, an extension equal to one download
 * of the whole range, a forming candle replaced later, and a download that fails mid-way leaving
 * a valid file that the next download completes.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ManualClock } from '../../../../src/platform/clock';
import type { FxcmClient } from '../../../../src/trading/fxcm';
import type { Params, Period } from '../../../../src/trading/fxcm/types';
import { readCandleFile, writeCandleFile } from '../../../../src/trading/fxcm/candle-file';
import { completeUntil, downloadIntoStore, missingRanges, readStore, storeFile, type StoreDownload } from '../../../../src/trading/runner/candles/candles-store';
import type { BrokerSimulator } from '../../../../src/trading/simulator';
import { newClient, startSim } from '../../helpers';
import { flat } from '../helpers';

const DAY = 86400;

describe('candle store layout and ranges', () => {
  test('one file per symbol and time frame; the month is MN1, apart from m1 on a case-insensitive disk', () => {
    expect(storeFile('data', 'EUR/USD', 'm1')).toBe(path.join('data', 'EUR_USD', 'm1.json'));
    expect(storeFile('data', 'EUR/USD', 'H4')).toBe(path.join('data', 'EUR_USD', 'H4.json'));
    expect(storeFile('data', 'US30', 'D1')).toBe(path.join('data', 'US30', 'D1.json'));
    expect(storeFile('data', 'EUR/USD', 'M1')).toBe(path.join('data', 'EUR_USD', 'MN1.json'));
    expect(storeFile('data', '../x', 'm1')).toBe(path.join('data', '___x', 'm1.json'));
  });

  test('missing ranges: all of it, before the covered range (newest first), after it, or nothing', () => {
    expect(missingRanges(undefined, 100, 200)).toEqual([{ from: 100, to: 200, newestFirst: false }]);
    const covered = { from: 1000, to: 2000 };
    expect(missingRanges(covered, 1200, 1800)).toEqual([]);
    expect(missingRanges(covered, 1000, 2000)).toEqual([]);
    expect(missingRanges(covered, 500, 2500)).toEqual([
      { from: 500, to: 999, newestFirst: true },
      { from: 2001, to: 2500, newestFirst: false },
    ]);
    // a range apart from the covered one is joined to it, the gap included: the store stays one range
    expect(missingRanges(covered, 3000, 4000)).toEqual([{ from: 2001, to: 4000, newestFirst: false }]);
    expect(missingRanges(covered, 10, 20)).toEqual([{ from: 10, to: 999, newestFirst: true }]);
  });

  test('a file without "covered" (from --out) covers its candles but the last, which may have been forming', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rr-store-'));
    const f = storeFile(dir, 'EUR/USD', 'm1');
    fs.mkdirSync(path.dirname(f));
    const t0 = 1709631000;
    writeCandleFile(f, 'EUR/USD', 'm1', flat(t0, [1.1, 1.2, 1.3]));
    expect(readStore(f, 'EUR/USD', 'm1').covered).toEqual({ from: t0, to: t0 + 119 });
    expect(() => readStore(f, 'GBP/USD', 'm1')).toThrow(`${f} holds EUR/USD m1, not GBP/USD m1`);
    fs.writeFileSync(f, JSON.stringify({ symbol: 'EUR/USD', timeframe: 'm1', candles: [[t0, 1, 1, 1, 1, 0.9, 0.9, 0.9, 0.9, 1]] }));
    expect(() => readStore(f, 'EUR/USD', 'm1')).toThrow(`${f}: candles[0]: ask open 0.9 is below bid open 1 ('candles check ${f}' lists every bad row`);
    expect(readStore(path.join(dir, 'none.json'), 'EUR/USD', 'm1')).toEqual({ candles: [] });
    fs.rmSync(dir, { recursive: true, force: true });
  });
});

describe('candle store downloads', () => {
  let sim: BrokerSimulator;
  let client: FxcmClient;
  let clock: ManualClock;
  let dir: string;
  /** The windows of the candle requests sent: [from, to]. */
  let asked: [number, number][];
  /** Run before each candle request is sent (e.g. to inject a broker failure). */
  let beforeCandles: (n: number) => void;
  let now: number;

  beforeEach(async () => {
    clock = new ManualClock(Date.UTC(2024, 2, 13, 12, 0, 0)); // a Wednesday
    sim = await startSim({ clock, isOpen: undefined });
    asked = [];
    beforeCandles = () => {};
    client = newClient(sim, {
      beforeRequest: async (endpoint: string, _method: string, params: Params) => {
        if (!endpoint.startsWith('/candles')) return;
        asked.push([Number(params.from), Number(params.to)]);
        beforeCandles(asked.length);
      },
    });
    await client.connect();
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rr-store-'));
    now = Math.floor(clock.nowMs() / 1000);
  });
  afterEach(async () => {
    await client.close();
    await sim.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const download = (period: Period, from: number, to: number): Promise<StoreDownload> =>
    downloadIntoStore(client, { dir, symbol: 'EUR/USD', period, from, to, nowSec: () => Math.floor(clock.nowMs() / 1000) });
  const stored = (period: Period) => readCandleFile(storeFile(dir, 'EUR/USD', period));
  const covered = (period: Period) => JSON.parse(fs.readFileSync(storeFile(dir, 'EUR/USD', period), 'utf8')).covered;

  test('a wider download asks only for what lies before and after the store, and ends as one download of the whole range', async () => {
    // Thursday noon to Saturday noon (the weekend close included), then Monday a week before to Monday noon
    const first = await download('m1', now - 6 * DAY, now - 4 * DAY);
    expect(asked).toEqual([[now - 6 * DAY, now - 4 * DAY]]);
    expect(first).toMatchObject({ requests: 1, planned: 1, covered: { from: now - 6 * DAY, to: now - 4 * DAY } });
    asked = [];
    const wider = await download('m1', now - 9 * DAY, now - 2 * DAY);
    expect(asked).toEqual([
      [now - 9 * DAY, now - 6 * DAY - 1],
      [now - 4 * DAY + 1, now - 2 * DAY],
    ]);
    expect(wider).toMatchObject({ requests: 2, planned: 2, covered: { from: now - 9 * DAY, to: now - 2 * DAY } });
    const whole = await client.downloadCandles('EUR/USD', 'm1', now - 9 * DAY, now - 2 * DAY);
    const series = stored('m1');
    expect(series).toEqual({ symbol: 'EUR/USD', timeframe: 'm1', candles: whole });
    expect(wider.candles).toBe(whole.length);
    // again: the store has it all, nothing is asked
    asked = [];
    expect(await download('m1', now - 8 * DAY, now - 3 * DAY)).toMatchObject({ requests: 0, planned: 0, candles: whole.length });
    expect(asked).toEqual([]);
  });

  test('a forming candle is not covered: the next download asks for it again and keeps the complete one', async () => {
    await download('m5', now - DAY, now);
    const forming = stored('m5').candles.at(-1)!;
    expect(forming.ts).toBe(now);
    expect(covered('m5')).toEqual({ from: now - DAY, to: completeUntil('m5', now) });
    clock.advance(3600_000);
    const later = now + 3600;
    asked = [];
    await download('m5', now - DAY, later);
    expect(asked).toEqual([[completeUntil('m5', now) + 1, later]]);
    expect(stored('m5').candles).toEqual(await client.downloadCandles('EUR/USD', 'm5', now - DAY, later));
    expect(stored('m5').candles.find((c) => c.ts === forming.ts)).not.toEqual(forming);
  });

  test('a broker failure after the first request leaves a valid file with it; the same download again completes it', async () => {
    const from = now - 16 * DAY;
    const to = now - DAY;
    beforeCandles = (n) => {
      if (n === 2) sim.faults.failNext('/candles', 'Internal server error');
    };
    await expect(download('m1', from, to)).rejects.toThrow('Internal server error');
    const partial = stored('m1');
    const firstWindow = asked[0]!;
    expect(firstWindow[0]).toBe(from);
    expect(partial.candles.length).toBeGreaterThan(5000);
    expect(partial.candles.at(-1)!.ts).toBeLessThanOrEqual(firstWindow[1]);
    expect(covered('m1')).toEqual({ from, to: firstWindow[1] });

    asked = [];
    beforeCandles = () => {};
    const done = await download('m1', from, to);
    expect(asked[0]![0]).toBe(firstWindow[1] + 1);
    expect(done.requests).toBe(asked.length);
    expect(stored('m1').candles).toEqual(await client.downloadCandles('EUR/USD', 'm1', from, to));
  });

  test('a failure while extending backwards (newest window first) leaves one unbroken covered range', async () => {
    await download('m1', now - 3 * DAY, now - DAY);
    asked = [];
    beforeCandles = (n) => {
      if (n === 2) sim.faults.failNext('/candles', 'Internal server error');
    };
    await expect(download('m1', now - 20 * DAY, now - DAY)).rejects.toThrow('Internal server error');
    // the newest window before the store was fetched and joins it
    expect(asked[0]![1]).toBe(now - 3 * DAY - 1);
    expect(covered('m1')).toEqual({ from: asked[0]![0], to: now - DAY });
    beforeCandles = () => {};
    await download('m1', now - 20 * DAY, now - DAY);
    expect(stored('m1').candles).toEqual(await client.downloadCandles('EUR/USD', 'm1', now - 20 * DAY, now - DAY));
    expect(covered('m1')).toEqual({ from: now - 20 * DAY, to: now - DAY });
  });
});
