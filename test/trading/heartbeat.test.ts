/**
 * The stream's heartbeat (issue 42, item 6), Engine.IO 3 and 4, against the simulator behind a
 * proxy: a frozen connection (nothing forwarded, nothing closed) is seen as dead within two ping
 * intervals of the handshake, however long its pingTimeout; a process busy past the deadline
 * (its event loop blocked) does not take a live link for dead; the close says how long the link
 * had been silent.
 */
import type { BrokerSimulator } from '../../src/trading/simulator';
import type { FxcmClient } from '../../src/trading/fxcm';
import { BrokerProxy } from '../support/broker-proxy';
import { quietFor } from '../support/wait';
import { newClient, once, startSim } from './helpers';

const PING_MS = 300;

describe.each([3, 4] as const)('the heartbeat over Engine.IO %i', (eio) => {
  let sim: BrokerSimulator;
  let proxy: BrokerProxy;
  let client: FxcmClient;
  beforeEach(async () => {
    // the broker's pingTimeout is more than twice its ping interval (60 s against 25 s)
    sim = await startSim({ pingIntervalMs: PING_MS, pingTimeoutMs: 20 * PING_MS });
    proxy = new BrokerProxy();
    await proxy.start(sim.url);
    client = newClient(sim, { baseUrl: proxy.url, engineIO: eio, reconnect: false });
    await client.connect();
  });
  afterEach(async () => {
    await client.close();
    await proxy.stop();
    await sim.stop();
  });

  test('a frozen connection is dead within two ping intervals (and a little), its silence reported', async () => {
    const down = once(client, 'disconnected', 20 * PING_MS);
    const frozenAt = Date.now();
    proxy.freeze();
    const [reason, silentMs] = (await down) as [string, number];
    const seenAfter = Date.now() - frozenAt;
    expect(reason).toBe('ping timeout');
    expect(seenAfter).toBeLessThan(2 * PING_MS + 500);
    // silent since before the freeze (at most the time since the last heartbeat)
    expect(silentMs).toBeGreaterThanOrEqual(seenAfter - 50);
    expect(silentMs).toBeLessThanOrEqual(seenAfter + PING_MS + 50);
  });

  test('a process busy past the deadline does not take the live link for dead', async () => {
    let lost: unknown;
    client.once('disconnected', (reason: string) => (lost = reason));
    for (let i = 0; i < 10; i++) {
      // the event loop blocked for two ping intervals at a time: the heartbeat's answer waits unread
      const until = Date.now() + 2 * PING_MS;
      while (Date.now() < until) {
        /* busy */
      }
      await quietFor(1);
    }
    await quietFor(3 * PING_MS);
    expect(lost).toBeUndefined();
    expect(client.connected).toBe(true);
  });
});
