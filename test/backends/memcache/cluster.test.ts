/**
 * The memcache store over two real memcached nodes: how keys are spread, that every instance
 * places a key alike whatever the list order, what happens while one or both nodes are down or
 * hung, and that counting resumes on the same store when they are back.
 */
import type { MemcacheStore } from '../../../src/backends/memcache/store';
import { type CounterOp, StoreError } from '../../../src/core/store';
import net from 'node:net';
import { StatsStore } from '../../../src/stats/store';
import { type MemcachedServer, rawGet, startMemcachedServers } from '../../support/memcached';
import { createStore, op, stat, uniqueKey } from './helpers';
import { waitFor } from '../../support/wait';

let a: MemcachedServer;
let b: MemcachedServer;

beforeAll(async () => {
  [a, b] = (await startMemcachedServers(2)) as [MemcachedServer, MemcachedServer];
});
afterAll(async () => {
  await Promise.all([a?.stop(), b?.stop()]);
});
afterEach(async () => {
  for (const s of [a, b]) {
    s.resume();
    if (!s.running) await s.restart();
  }
});

/** Which of the two servers hold `key` (by raw reads). */
async function holders(key: string): Promise<string[]> {
  const out: string[] = [];
  if ((await rawGet(a.port, key)) !== undefined) out.push(a.address);
  if ((await rawGet(b.port, key)) !== undefined) out.push(b.address);
  return out;
}

/** Keys that land on `server` for `store`, `count` of them. */
function keysOn(store: MemcacheStore, server: string, count: number, label: string): string[] {
  const out: string[] = [];
  for (let i = 0; out.length < count && i < 10_000; i++) {
    const k = uniqueKey(`${label}${i}`);
    if (store.serverFor(k) === server) out.push(k);
  }
  return out;
}

describe('memcache store: two nodes', () => {
  it('spreads keys over both nodes, each key on exactly one, the same for every instance with the list', async () => {
    const stats = new StatsStore();
    const s1 = await createStore([a.address, b.address], { stats });
    const s2 = await createStore([a.address, b.address], { stats: new StatsStore() });
    try {
      expect(s1.servers()).toEqual(s2.servers());
      const keys = Array.from({ length: 40 }, (_, i) => uniqueKey(`spread${i}`));
      // One request holding all the keys: one multi-get per node.
      expect(await s1.increment(keys.map((k) => op(k, 1)), Date.now())).toEqual(keys.map(() => 1));
      await s1.idle();
      expect(stat(stats, 'multiget.__code=success')).toBe(1);
      const onA: string[] = [];
      const onB: string[] = [];
      for (const k of keys) {
        const h = await holders(k);
        expect(h).toEqual([s1.serverFor(k)]);
        expect(s2.serverFor(k)).toBe(s1.serverFor(k));
        (h[0] === a.address ? onA : onB).push(k);
      }
      expect(onA.length).toBeGreaterThan(5);
      expect(onB.length).toBeGreaterThan(5);

      // The other instance reads and increments the same counters.
      expect(await s2.increment(keys.map((k) => op(k, 2)), Date.now())).toEqual(keys.map(() => 3));
      await s2.idle();
      for (const k of keys) expect(await holders(k)).toEqual([s1.serverFor(k)]);
      expect(await rawGet(a.port, onA[0]!)).toBe('3');
      expect(await rawGet(b.port, onB[0]!)).toBe('3');
    } finally {
      await Promise.all([s1.close(), s2.close()]);
    }
  });

  it('with a node killed: its keys fail open (counts = hits), the other node still counts, health stays', async () => {
    const stats = new StatsStore();
    const open = await createStore([a.address, b.address], { stats });
    const strict = await createStore([a.address, b.address], { stats: new StatsStore(), failureMode: 'error' });
    try {
      const [ka] = keysOn(open, a.address, 1, 'ka');
      const [kb] = keysOn(open, b.address, 1, 'kb');
      expect(await open.increment([op(ka!, 5), op(kb!, 5)], Date.now())).toEqual([5, 5]);
      await open.idle();

      await b.kill();
      expect(await open.increment([op(ka!, 1), op(kb!, 1)], Date.now())).toEqual([6, 1]);
      expect(stat(stats, 'multiget.__code=error')).toBe(1);
      await open.idle();
      expect(await rawGet(a.port, ka!)).toBe('6');
      // A key only on the live node is not affected by the dead one.
      expect(await strict.increment([op(ka!, 1)], Date.now())).toEqual([7]);
      await expect(strict.increment([op(ka!, 1), op(kb!, 1)], Date.now())).rejects.toThrow(StoreError);

      await waitFor(() => open.nodeStates().find((n) => n.node === b.address)?.up === false, 'node b reported down');
      expect(open.nodeStates().find((n) => n.node === a.address)?.up).toBe(true);
      expect(open.isHealthy()).toBe(true);

      await b.restart();
      await waitFor(() => open.nodeStates().every((n) => n.up === true), 'both nodes up again');
      expect(await open.increment([op(kb!, 1)], Date.now())).toEqual([1]);
      await open.idle();
      expect(await open.increment([op(kb!, 1)], Date.now())).toEqual([2]);
      await open.idle();
      expect(await rawGet(b.port, kb!)).toBe('2');
    } finally {
      await Promise.all([open.close(), strict.close()]);
    }
  });

  it('is unhealthy while every node is down and healthy again when one answers', async () => {
    const s = await createStore([a.address, b.address], { stats: new StatsStore() });
    const changes: Array<[boolean, string]> = [];
    s.onHealthChange((h, reason) => changes.push([h, reason]));
    try {
      expect(s.isHealthy()).toBe(true);
      await a.kill();
      await waitFor(() => s.nodeStates().find((n) => n.node === a.address)!.up === false, 'node a down');
      expect(s.isHealthy()).toBe(true);
      await b.kill();
      await waitFor(() => !s.isHealthy(), 'unhealthy with both nodes down');
      expect(s.nodeStates().map((n) => n.up)).toEqual([false, false]);
      await a.restart();
      await waitFor(() => s.isHealthy(), 'healthy with one node back');
      expect(changes.map((c) => c[0])).toEqual([false, true]);
      expect(changes[1]![1]).toBe(`${a.address} answers`);
    } finally {
      await s.close();
    }
  });

  it('bounds a read from a hung node by the timeout, and fails a pending read at once when the node dies', async () => {
    const stats = new StatsStore();
    const s = await createStore([a.address, b.address], { stats, timeoutMs: 300 });
    const slow = await createStore([a.address, b.address], { stats: new StatsStore(), timeoutMs: 5000, healthCheckIntervalMs: 0 });
    try {
      const [ka] = keysOn(s, a.address, 1, 'hung');
      await a.pause();
      let t0 = Date.now();
      expect(await s.increment([op(ka!, 2)], Date.now())).toEqual([2]);
      expect(Date.now() - t0).toBeLessThan(1500);
      expect(stat(stats, 'multiget.__code=error')).toBe(1);
      // Now marked down: not asked (no timeout wait) until a health probe gets an answer.
      expect(s.nodeStates().find((n) => n.node === a.address)?.up).toBe(false);
      t0 = Date.now();
      expect(await s.increment([op(ka!, 2)], Date.now())).toEqual([2]);
      expect(Date.now() - t0).toBeLessThan(100);
      expect(stat(stats, 'multiget.__code=error')).toBe(2);
      a.resume();
      await waitFor(() => s.nodeStates().every((n) => n.up === true), 'node a back after resume');
      await a.pause();

      // A read waiting on the hung node (5 s timeout) ends as soon as the node's process dies.
      const pending = slow.increment([op(ka!, 4)], Date.now());
      await new Promise((res) => setTimeout(res, 100));
      t0 = Date.now();
      await a.kill();
      expect(await pending).toEqual([4]);
      expect(Date.now() - t0).toBeLessThan(1000);
    } finally {
      await Promise.all([s.close(), slow.close()]);
    }
  });

  it('fails a pending read at once when the server closes the connection without answering', async () => {
    // A server that reads the request and closes cleanly (FIN, no RST), as a node shutting down.
    const sockets = new Set<net.Socket>();
    const fake = net.createServer((sock) => {
      sockets.add(sock);
      sock.on('error', () => {});
      sock.once('data', () => sock.end());
    });
    await new Promise<void>((res) => fake.listen(0, '127.0.0.1', () => res()));
    const addr = `127.0.0.1:${(fake.address() as net.AddressInfo).port}`;
    const stats = new StatsStore();
    const s = await createStore([addr], { stats, timeoutMs: 5000, healthCheckIntervalMs: 0 });
    try {
      const t0 = Date.now();
      expect(await s.increment([op(uniqueKey('fin'), 3)], Date.now())).toEqual([3]);
      expect(Date.now() - t0).toBeLessThan(1000);
      expect(stat(stats, 'multiget.__code=error')).toBe(1);
      // And the next command reconnects.
      const t1 = Date.now();
      expect(await s.increment([op(uniqueKey('fin2'), 1)], Date.now())).toEqual([1]);
      expect(Date.now() - t1).toBeLessThan(1000);
      expect(stat(stats, 'multiget.__code=error')).toBe(2);
    } finally {
      await s.close();
      for (const sock of sockets) sock.destroy();
      await new Promise((res) => fake.close(res));
    }
  });

  it('reads and counts a candidate on the node of the enforced key it follows: a node only its own key would hash to can be down', async () => {
    const s = await createStore([a.address, b.address], { failureMode: 'deny' });
    try {
      // An enforced key on a whose `_cand` key would hash to b.
      let enforced = '';
      for (let i = 0; i < 10_000 && enforced === ''; i++) {
        const k = uniqueKey(`cand${i}`);
        if (s.serverFor(k) === a.address && s.serverFor(k + '_cand') === b.address) enforced = k;
      }
      expect(enforced).not.toBe('');
      const e = op(enforced, 1);
      const c: CounterOp = { ...op(enforced + '_cand', 1), follows: e };
      expect(await s.increment([e, c], Date.now())).toEqual([1, 1]);
      await s.idle();
      expect(await holders(c.key)).toEqual([a.address]);
      // b down: the request reaches only a, as without the candidate.
      await b.kill();
      expect(await s.increment([e, c], Date.now())).toEqual([2, 2]);
      await s.idle();
      // A candidate key memcached cannot hold is left uncounted (-1), not a failed request.
      const long: CounterOp = { ...op(enforced + '_'.repeat(250) + '_cand', 1), follows: e };
      expect(await s.increment([e, long], Date.now())).toEqual([3, -1]);
    } finally {
      await s.close();
    }
  });
});
