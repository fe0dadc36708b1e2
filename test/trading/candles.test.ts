/** Candle limits, splitting, merging, period ids and the simulator's candle endpoint. */
import { mergeCandles, normalizePeriod, splitCandleRange, maxWindowSeconds, type Candle, type FxcmClient, FxcmMarketClosedError } from '../../src/trading/fxcm';
import { ManualClock, type BrokerSimulator } from '../../src/trading/simulator';
import { newClient, startSim } from './helpers';

const c = (ts: number, v: number): Candle => ({ ts, bidOpen: v, bidClose: v, bidHigh: v, bidLow: v, askOpen: v, askClose: v, askHigh: v, askLow: v, tickQty: 1 });

describe('candle helpers', () => {
  test('m1 (minute) and M1 (month) stay distinct; H/D/W case-insensitive', () => {
    expect(normalizePeriod('m1')).toBe('m1');
    expect(normalizePeriod('M1')).toBe('M1');
    expect(normalizePeriod('h1')).toBe('H1');
    expect(normalizePeriod('d1')).toBe('D1');
    expect(normalizePeriod('M5')).toBeUndefined();
    expect(maxWindowSeconds('m1')).toBe(60 * 10000);
    expect(maxWindowSeconds('M1')).toBe(31 * 86400 * 10000);
    expect(maxWindowSeconds('m1')).toBeLessThanOrEqual(16 * 86400);
  });

  test('split respects 10000 candles and the days-back window, contiguous and ordered', () => {
    const from = 1_600_000_000;
    const to = from + 30 * 86400;
    const chunks = splitCandleRange('m1', from, to);
    expect(chunks.length).toBe(Math.ceil((to - from + 1) / 600000));
    for (const ch of chunks) {
      expect(ch.num).toBeLessThanOrEqual(10000);
      expect(ch.to - ch.from + 1).toBeLessThanOrEqual(Math.min(600000, 16 * 86400));
    }
    for (let i = 1; i < chunks.length; i++) expect(chunks[i]!.from).toBe(chunks[i - 1]!.to + 1);
    expect(chunks[0]!.from).toBe(from);
    expect(chunks.at(-1)!.to).toBe(to);
    expect(splitCandleRange('D1', from, to)).toHaveLength(1);
  });

  test('merge deduplicates by timestamp, later row wins, ascending', () => {
    expect(mergeCandles([c(3, 1), c(1, 1)], [c(3, 2), c(2, 2)]).map((x) => [x.ts, x.bidOpen])).toEqual([
      [1, 1],
      [2, 2],
      [3, 2],
    ]);
  });
});

describe('candles over the wire', () => {
  let sim: BrokerSimulator;
  let client: FxcmClient;
  let clock: ManualClock;
  beforeEach(async () => {
    clock = new ManualClock(Date.UTC(2024, 2, 13, 12, 0, 0)); // a Wednesday
    sim = await startSim({ clock, isOpen: undefined });
    client = newClient(sim);
    await client.connect();
  });
  afterEach(async () => {
    await client.close();
    await sim.stop();
  });

  test('a 20-day m1 download is split into windows the server accepts, merged without duplicates', async () => {
    const to = Math.floor(clock.nowMs() / 1000);
    const from = to - 20 * 86400;
    const before = sim.requestCounts()['/candles'] ?? 0;
    const candles = await client.downloadCandles('EUR/USD', 'm1', from, to);
    const requests = (sim.requestCounts()['/candles'] ?? 0) - before;
    expect(requests).toBe(splitCandleRange('m1', from, to).length);
    expect(new Set(candles.map((x) => x.ts)).size).toBe(candles.length);
    for (let i = 1; i < candles.length; i++) expect(candles[i]!.ts).toBeGreaterThan(candles[i - 1]!.ts);
    // weekends are absent: 20 days hold 2 or 3 weekends of ~49h each
    expect(candles.length).toBeGreaterThan(20 * 1440 - 3 * 49 * 60);
    expect(candles.length).toBeLessThan(20 * 1440 - 2 * 47 * 60);
    // too wide a window for one request is refused by the simulator like the broker
    await expect(client.getCandles(1, 'm1', { num: 10000, from: to - 17 * 86400, to })).rejects.toThrow(/Invalid settings of parameneters/);
  });

  test('M1 is months and m1 minutes; deterministic for a seed', async () => {
    const months = await client.getCandles('EUR/USD', 'M1', { num: 12 });
    expect(months).toHaveLength(12);
    expect(months[1]!.ts - months[0]!.ts).toBeGreaterThan(27 * 86400);
    const minutes = await client.getCandles('EUR/USD', 'm1', { num: 5 });
    expect(minutes[1]!.ts - minutes[0]!.ts).toBe(60);
    expect(await client.getCandles('EUR/USD', 'm1', { num: 5 })).toEqual(minutes);
  });

  test('weekend: candles request is not executed (empty error), typed as market closed', async () => {
    clock.set(Date.UTC(2024, 2, 16, 12, 0, 0)); // Saturday
    await expect(client.getCandles('EUR/USD', 'H1', { num: 10 })).rejects.toBeInstanceOf(FxcmMarketClosedError);
    // and market orders are refused
    await expect(client.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 10 })).rejects.toThrow(/Market is closed/);
  });
});
