/** Market unit tests: seeded prices, replay, hours, manual clock; stream heartbeat (the price path itself: simulator-market.test.ts). */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { writeCandleFile } from '../../src/trading/fxcm/candle-file';
import { Market, ManualClock, isFxMarketOpen, mulberry32 } from '../../src/trading/simulator';
import type { BrokerSimulator } from '../../src/trading/simulator';
import type { FxcmClient } from '../../src/trading/fxcm';
import { newClient, startSim } from './helpers';
import { quietFor } from '../support/wait';

describe('market', () => {
  test('FX hours: closed Fri 16:55 ET to Sun 17:00 ET', () => {
    expect(isFxMarketOpen(Date.UTC(2024, 2, 13, 12))).toBe(true); // Wed
    expect(isFxMarketOpen(Date.UTC(2024, 2, 15, 20, 50))).toBe(true); // Fri 16:50 EDT
    expect(isFxMarketOpen(Date.UTC(2024, 2, 15, 21, 0))).toBe(false); // Fri 17:00 EDT
    expect(isFxMarketOpen(Date.UTC(2024, 2, 16, 12))).toBe(false); // Sat
    expect(isFxMarketOpen(Date.UTC(2024, 2, 17, 20, 59))).toBe(false); // Sun 16:59 EDT
    expect(isFxMarketOpen(Date.UTC(2024, 2, 17, 21, 1))).toBe(true); // Sun 17:01 EDT
  });

  test('seeded prices are reproducible and tick on the manual clock', () => {
    const mk = () => new Market({ clock: new ManualClock(Date.UTC(2024, 2, 13)), seed: 42, tickIntervalMs: 1000, symbols: ['EUR/USD'] });
    const a = mk();
    const b = mk();
    const first = a.quote('EUR/USD')!;
    let ticks = 0;
    a.on('price', () => ticks++);
    a.start();
    b.start();
    a.advance(10_000);
    b.advance(10_000);
    expect(ticks).toBe(10);
    expect(a.quote('EUR/USD')).toEqual(b.quote('EUR/USD'));
    expect(a.quote('EUR/USD')!.bid).not.toBe(first.bid);
    expect(a.quote('EUR/USD')!.ask).toBeGreaterThan(a.quote('EUR/USD')!.bid);
    a.stop();
    b.stop();
    expect(mulberry32(1)()).toBe(mulberry32(1)());
  });

  test('replay follows the candle closes; closed market does not tick', () => {
    const clock = new ManualClock(Date.UTC(2024, 2, 13));
    const m = new Market({
      clock,
      symbols: ['EUR/USD'],
      replay: { 'EUR/USD': [{ ts: 1, bidOpen: 1, bidClose: 1.2, bidHigh: 1, bidLow: 1, askOpen: 1, askClose: 1.2002, askHigh: 1, askLow: 1, tickQty: 1 }] },
    });
    m.tick();
    expect(m.quote('EUR/USD')).toMatchObject({ bid: 1.2, ask: 1.2002 });
    m.forceOpen(false);
    m.setPrice('EUR/USD', 1.3);
    m.tick();
    expect(m.quote('EUR/USD')!.bid).toBe(1.3);
  });

  test('a replay file is read as backtests read it: a candle file replays, a bad row is refused by its place', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rl-replay-'));
    try {
      const good = path.join(dir, 'eurusd.csv');
      const candle = { ts: 60, bidOpen: 1.1, bidClose: 1.2, bidHigh: 1.21, bidLow: 1.09, askOpen: 1.1002, askClose: 1.2002, askHigh: 1.2102, askLow: 1.0902, tickQty: 5 };
      writeCandleFile(good, 'EUR/USD', 'm1', [candle]);
      const clock = new ManualClock(Date.UTC(2024, 2, 13));
      const m = new Market({ clock, symbols: ['EUR/USD'], replay: { 'EUR/USD': good } });
      m.tick();
      expect(m.quote('EUR/USD')).toMatchObject({ bid: 1.2, ask: 1.2002 });
      const bad = path.join(dir, 'bad.csv');
      fs.writeFileSync(bad, 'ts,bidopen,bidclose,bidhigh,bidlow,askopen,askclose,askhigh,asklow\n60,1.1,1.2,1.21,1.09,1.1002,1.2002,1.2102,oops\n');
      expect(() => new Market({ clock, symbols: ['EUR/USD'], replay: { 'EUR/USD': bad } })).toThrow(`${bad}:2: asklow is "oops", not a number`);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('stream heartbeat', () => {
  let sim: BrokerSimulator;
  let client: FxcmClient;
  afterEach(async () => {
    await client.close();
    await sim.stop();
  });
  test.each([3, 4] as const)('EIO%i connection survives several ping intervals', async (eio) => {
    // A timeout that a loaded machine's connect fits in (100 + 200 ms did not, once, in CI); the
    // quiet time is twice interval + timeout, so a side that stopped answering pings is caught.
    sim = await startSim({ pingIntervalMs: 200, pingTimeoutMs: 1000 });
    client = newClient(sim, { engineIO: eio });
    let disconnects = 0;
    client.on('disconnected', () => disconnects++);
    await client.connect();
    await quietFor(2500); // twelve ping intervals without a disconnect
    expect(disconnects).toBe(0);
    expect(client.connected).toBe(true);
    expect((await client.getAccounts()).length).toBe(1);
  });
});
