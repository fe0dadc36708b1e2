/**
 * The stream's heartbeat (issue 42, item 6), Engine.IO 3 and 4, against the simulator behind a
 * proxy: a frozen connection (nothing forwarded, nothing closed) is seen as dead within two ping
 * intervals of the handshake, however long its pingTimeout; a process busy past the deadline
 * (its event loop blocked; the broker in a process of its own) does not take a live link for dead; the close says how long the link
 * had been silent.
 */
import { spawn } from 'node:child_process';
import path from 'node:path';
import type { BrokerSimulator } from '../../src/trading/simulator';
import type { FxcmClient } from '../../src/trading/fxcm';
import { BrokerProxy } from '../support/broker-proxy';
import { quietFor } from '../support/wait';
import { newClient, once, startSim, TOKEN } from './helpers';
import { DIST } from '../e2e/harness';

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
    // the broker in a process of its own (as it is): its heartbeats arrive while this one is busy
    const broker = await spawnSim(['--ping-interval-ms', String(PING_MS), '--ping-timeout-ms', String(20 * PING_MS)]);
    const remote = newClient(broker, { engineIO: eio, reconnect: false });
    try {
      await remote.connect();
      let lost: unknown;
      remote.once('disconnected', (reason: string) => (lost = reason));
      for (let i = 0; i < 10; i++) {
        // the event loop blocked for two ping intervals at a time: the heartbeat waits unread
        const until = Date.now() + 2 * PING_MS;
        while (Date.now() < until) {
          /* busy */
        }
        await quietFor(1);
      }
      await quietFor(3 * PING_MS);
      expect(lost).toBeUndefined();
      expect(remote.connected).toBe(true);
    } finally {
      await remote.close();
      await broker.stop();
    }
  });
});

/** `ratelimit-runner sim` (the built one) in a child process, on a free loopback port. */
async function spawnSim(args: string[]): Promise<{ url: string; stop(): Promise<void> }> {
  const proc = spawn(process.execPath, [path.join(DIST, 'runner.js'), 'sim', '--token', TOKEN, '--always-open', ...args], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  let out = '';
  const url = await new Promise<string>((resolve, reject) => {
    proc.once('exit', (code) => reject(new Error(`sim exited (${code}): ${out}`)));
    proc.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /listening on (\S+)/.exec(out);
      if (m) resolve(m[1]!);
    });
  });
  return {
    url,
    stop: async () => {
      proc.kill('SIGTERM');
      await exited;
    },
  };
}
