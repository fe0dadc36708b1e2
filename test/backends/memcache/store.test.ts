/**
 * The memcache store against one real memcached: what it stores (exact keys, values, expirations),
 * the counts it returns, its asynchronous increments, key validation, the add race, and what it
 * does while the node is down and after it comes back.
 */
import { MemcacheStore } from '../../../src/backends/memcache/store';
import { StoreError } from '../../../src/core/store';
import { StatsStore } from '../../../src/stats/store';
import type { Logger } from '../../../src/telemetry/logger';
import { MemcachedServer, rawGet, rawGetWithTtl, rawSet } from '../../support/memcached';
import { addRaceProxy, createStore, op, settings, stat, uniqueKey } from './helpers';
import { waitFor } from '../../support/wait';

function capturingLogger(): Logger & { lines: string[] } {
  const lines: string[] = [];
  const push = (level: string) => (m: string) => lines.push(`${level}: ${m}`);
  return { lines, debug: () => {}, info: push('info'), warn: push('warn'), error: push('error'), enabled: () => true };
}

let mc: MemcachedServer;
let store: MemcacheStore;
let stats: StatsStore;

beforeAll(async () => {
  mc = await MemcachedServer.start();
});
afterAll(async () => {
  await mc?.stop();
});
beforeEach(async () => {
  stats = new StatsStore();
  store = await createStore([mc.address], { stats });
});
afterEach(async () => {
  await store?.close();
});

describe('memcache store: counting', () => {
  it('stores the exact key and the count as base-10 text, and returns read + hits', async () => {
    const k = uniqueKey('domain_key_value_1234');
    expect(await store.increment([op(k, 3)], Date.now())).toEqual([3]);
    await store.idle();
    expect(await rawGet(mc.port, k)).toBe('3');
    expect(await store.increment([op(k, 2)], Date.now())).toEqual([5]);
    await store.idle();
    expect(await rawGet(mc.port, k)).toBe('5');

    expect(stat(stats, 'multiget.__code=success')).toBe(2);
    expect(stat(stats, 'keys_requested')).toBe(2);
    expect(stat(stats, 'keys_found')).toBe(1);
    expect(stat(stats, 'increment.__code=miss')).toBe(1);
    expect(stat(stats, 'add.__code=success')).toBe(1);
    expect(stat(stats, 'increment.__code=success')).toBe(1);
    expect(stat(stats, 'increment.__code=error')).toBe(0);
  });

  it('loses no hit under many concurrent requests on one pipelined connection', async () => {
    const k = uniqueKey('hot');
    const all = await Promise.all(Array.from({ length: 300 }, () => store.increment([op(k, 1)], Date.now())));
    // As upstream, reads and increments are not atomic: counts may repeat, but every hit is stored.
    for (const c of all) expect(c[0]).toBeGreaterThanOrEqual(1);
    await store.idle();
    expect(await rawGet(mc.port, k)).toBe('300');
    expect(await store.increment([op(k, 1)], Date.now())).toEqual([301]);
  });

  it('adds the hits to a value already there and returns counts in request order', async () => {
    const a = uniqueKey('a');
    const b = uniqueKey('b');
    await rawSet(mc.port, a, '41');
    expect(await store.increment([op(b, 2), op(a, 1)], Date.now())).toEqual([2, 42]);
    await store.idle();
    expect(await rawGet(mc.port, a)).toBe('42');
    expect(await rawGet(mc.port, b)).toBe('2');
  });

  it('increments after the request settles, not before (and idle() waits for it)', async () => {
    const k = uniqueKey('async');
    const counts = await store.increment([op(k, 1)], Date.now());
    expect(counts).toEqual([1]);
    // The read answered; the increment chain is still in flight.
    expect(store.pendingIncrements).toBe(1);
    expect(await store.idle(2000)).toBe(true);
    expect(store.pendingIncrements).toBe(0);
    expect(await rawGet(mc.port, k)).toBe('1');
  });

  it('sends nothing for hits 0 (check only)', async () => {
    const k = uniqueKey('check');
    expect(await store.increment([op(k, 0)], Date.now())).toEqual([0]);
    expect(store.pendingIncrements).toBe(0);
    expect(await rawGet(mc.port, k)).toBeUndefined();
    await rawSet(mc.port, k, '7');
    expect(await store.increment([op(k, 0)], Date.now())).toEqual([7]);
    await store.idle();
    expect(await rawGet(mc.port, k)).toBe('7');
    expect(stat(stats, 'increment.__code=miss') + stat(stats, 'increment.__code=success')).toBe(0);
  });

  it('reads a repeated key once, adds its hits up in order and increments it once', async () => {
    const k = uniqueKey('dup');
    expect(await store.increment([op(k, 1), op(uniqueKey('other'), 1), op(k, 2)], Date.now())).toEqual([1, 1, 3]);
    await store.idle();
    expect(await rawGet(mc.port, k)).toBe('3');
    expect(stat(stats, 'keys_requested')).toBe(2);
    expect(stat(stats, 'add.__code=success')).toBe(2);
  });

  it('reads a value that is not a count as 0 and logs it; its increment fails and is counted', async () => {
    await store.close();
    const logger = capturingLogger();
    store = await createStore([mc.address], { stats, logger });
    const k = uniqueKey('junk');
    await rawSet(mc.port, k, 'abc');
    expect(await store.increment([op(k, 2)], Date.now())).toEqual([2]);
    await store.idle();
    expect(logger.lines.some((l) => l.startsWith('warn:') && l.includes('is not a base-10 count'))).toBe(true);
    expect(stat(stats, 'increment.__code=error')).toBe(1);
    expect(logger.lines.some((l) => l.startsWith('error:') && l.includes('not a number'))).toBe(true);
    expect(await rawGet(mc.port, k)).toBe('abc');
  });
});

describe('memcache store: expiration', () => {
  it('sets window + jitter as the expiration of the add, and the key disappears after it', async () => {
    await store.close();
    // jitter max 4, random 0.5 → jitter 2: a 1 s window expires after 3 s.
    store = await createStore([mc.address], { stats, expirationJitterMaxSeconds: 4, random: () => 0.5 });
    const k = uniqueKey('jitter');
    await store.increment([op(k, 1, 60)], Date.now());
    await store.idle();
    const got = await rawGetWithTtl(mc.port, k);
    expect(got?.value).toBe('1');
    expect(got!.ttl).toBeGreaterThanOrEqual(61);
    expect(got!.ttl).toBeLessThanOrEqual(62);

    await store.close();
    store = await createStore([mc.address], { stats, expirationJitterMaxSeconds: 0 });
    const short = uniqueKey('short');
    await store.increment([op(short, 1, 1)], Date.now());
    await store.idle();
    expect(await rawGet(mc.port, short)).toBe('1');
    // Increments do not refresh the expiration.
    await store.increment([op(short, 1, 1)], Date.now());
    await store.idle();
    await waitFor(async () => (await rawGet(mc.port, short)) === undefined, 'the 1 s key to expire', 3500);
  });

  it('sends expirations past 30 days as a Unix time, so MONTH and YEAR counters live', async () => {
    await store.close();
    store = await createStore([mc.address], { stats, expirationJitterMaxSeconds: 10, random: () => 0.5 });
    const month = uniqueKey('month');
    const year = uniqueKey('year');
    await store.increment([op(month, 1, 2592000), op(year, 1, 31536000)], Date.now());
    await store.idle();
    const m = await rawGetWithTtl(mc.port, month);
    const y = await rawGetWithTtl(mc.port, year);
    expect(m?.value).toBe('1');
    expect(Math.abs(m!.ttl - 2592005)).toBeLessThanOrEqual(2);
    expect(y?.value).toBe('1');
    expect(Math.abs(y!.ttl - 31536005)).toBeLessThanOrEqual(2);
  });
});

describe('memcache store: keys memcached cannot hold', () => {
  const bad: Array<[string, string, RegExp]> = [
    ['251 bytes', 'k'.repeat(251), /is invalid: it is 251 bytes long, more than 250$/],
    ['multi-byte, 252 bytes', 'é'.repeat(126), /is invalid: it is 252 bytes long/],
    ['a space', 'domain_key_a value_60', /is invalid: it contains whitespace or a control character \(0x20 at offset 12\)$/],
    ['a newline', 'domain_key_a\nvalue_60', /\(0x0a at offset 12\)/],
    ['a tab', 'domain\tkey', /\(0x09 at offset 6\)/],
    ['DEL', 'domain_\x7f', /\(0x7f at offset 7\)/],
    ['NUL', 'd\x00', /\(0x00 at offset 1\)/],
    ['nothing', '', /is invalid: it is empty$/],
    ['a lone surrogate', 'domain_k_\ud800x', /is invalid: it is not valid Unicode \(lone surrogate 0xd800 at offset 9\)$/],
  ];
  it.each(bad)('rejects the whole request before any I/O: %s', async (_what, key, reason) => {
    const good = uniqueKey('good');
    const err = await store.increment([op(good, 1), op(key, 1)], Date.now()).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(StoreError);
    expect((err as StoreError).transient).toBe(false);
    expect((err as StoreError).message).toMatch(/^memcached key ".*" is invalid: /s);
    expect((err as StoreError).message).toMatch(reason);
    expect(stat(stats, 'invalid_key')).toBe(1);
    expect(stat(stats, 'keys_requested')).toBe(0);
    expect(stat(stats, 'multiget.__code=success') + stat(stats, 'multiget.__code=error')).toBe(0);
    expect(store.pendingIncrements).toBe(0);
    expect(await rawGet(mc.port, good)).toBeUndefined();
  });

  it('accepts 250 bytes, multi-byte and surrogate pairs included', async () => {
    const emoji = uniqueKey('emoji_\u{1f600}');
    expect(await store.increment([op(emoji, 2)], Date.now())).toEqual([2]);
    await store.idle();
    expect(await rawGet(mc.port, emoji)).toBe('2');
    expect(await store.increment([op(emoji, 1)], Date.now())).toEqual([3]);

    const k = uniqueKey('x');
    const key = k + 'é'.repeat((250 - k.length) >> 1) + (((250 - k.length) & 1) === 1 ? 'z' : '');
    expect(Buffer.byteLength(key)).toBe(250);
    expect(await store.increment([op(key, 4)], Date.now())).toEqual([4]);
    await store.idle();
    expect(stat(stats, 'add.__code=success')).toBe(2);
  });
});

describe('memcache store: concurrent instances', () => {
  it('increments after losing the add race (miss → add not stored → increment)', async () => {
    // Another instance adds the key between this store's increment (a miss) and its add.
    const proxy = await addRaceProxy(mc.port, (key) => rawSet(mc.port, key, '5'));
    const raced = await createStore([proxy.address], { stats });
    try {
      const k = uniqueKey('lost_race');
      expect(await raced.increment([op(k, 2)], Date.now())).toEqual([2]);
      await raced.idle();
      expect(await rawGet(mc.port, k)).toBe('7');
      expect(stat(stats, 'increment.__code=miss')).toBe(1);
      expect(stat(stats, 'add.__code=not_stored')).toBe(1);
      expect(stat(stats, 'add.__code=success')).toBe(0);
      expect(stat(stats, 'increment.__code=success')).toBe(1);
    } finally {
      await raced.close();
      await proxy.close();
    }
  });

  it('ends with the right totals when two instances count missing keys at once', async () => {
    const stats2 = new StatsStore();
    const other = await createStore([mc.address], { stats: stats2 });
    try {
      const keys = Array.from({ length: 30 }, (_, i) => uniqueKey(`race${i}`));
      await Promise.all(
        keys.flatMap((k) => [store.increment([op(k, 1)], Date.now()), other.increment([op(k, 2)], Date.now())]),
      );
      await Promise.all([store.idle(), other.idle()]);
      for (const k of keys) expect(await rawGet(mc.port, k)).toBe('3');
      const sum = (name: string): number => stat(stats, name) + stat(stats2, name);
      // Each key is added once; an instance that lost the race (usual here) incremented instead.
      expect(sum('add.__code=success')).toBe(keys.length);
      expect(sum('increment.__code=success')).toBe(keys.length);
      expect(sum('increment.__code=miss')).toBe(keys.length + sum('add.__code=not_stored'));
      expect(sum('increment.__code=error') + sum('add.__code=error')).toBe(0);
    } finally {
      await other.close();
    }
  });
});

describe('memcache store: start-up', () => {
  it('refuses MEMCACHE_TLS=true rather than connecting in plaintext', async () => {
    await expect(
      MemcacheStore.create({
        settings: settings({
          hostPorts: [mc.address],
          tls: { enabled: true, clientCertFile: '', clientKeyFile: '', caCertFile: '', skipHostnameVerification: false },
        }),
        expirationJitterMaxSeconds: 0,
        stats: new StatsStore(),
      }),
    ).rejects.toThrow(/^MEMCACHE_TLS=true: .*no TLS support/);
  });

  it('rejects a server address that is not host:port, and both HOST_PORT and SRV', async () => {
    await expect(createStore(['localhost'])).rejects.toThrow(/MEMCACHE_HOST_PORT: invalid memcached server address "localhost"/);
    await expect(createStore(['127.0.0.1:0'])).rejects.toThrow(/invalid memcached server address/);
    await expect(createStore([mc.address], { settings: { srv: '_m._tcp.x' } })).rejects.toThrow(
      'Both MEMCACHE_HOST_PORT and MEMCACHE_SRV are set',
    );
  });

  it('warns that MEMCACHE_MAX_IDLE_CONNS has no effect when it is not the default', async () => {
    const logger = capturingLogger();
    const s = await createStore([mc.address], { logger, settings: { maxIdleConns: 10 } });
    await s.close();
    expect(logger.lines.some((l) => l.startsWith('warn: MEMCACHE_MAX_IDLE_CONNS=10 has no effect'))).toBe(true);
  });

  it('is healthy once the node answered; with no servers it is unhealthy and fails open', async () => {
    expect(store.isHealthy()).toBe(true);
    expect(store.nodeStates()).toEqual([{ node: mc.address, up: true, lastError: '', inFlight: 0, sinceMs: expect.any(Number) }]);
    const none = await createStore([], { stats });
    try {
      expect(none.isHealthy()).toBe(false);
      expect(await none.increment([op(uniqueKey('n'), 2)], Date.now())).toEqual([2]);
      expect(stat(stats, 'multiget.__code=error')).toBe(1);
    } finally {
      await none.close();
    }
  });

  it('leaves no socket or timer behind after close()', async () => {
    await store.close();
    const count = (): Record<string, number> => {
      const c: Record<string, number> = {};
      for (const r of process.getActiveResourcesInfo()) c[r] = (c[r] ?? 0) + 1;
      return c;
    };
    const before = count();
    const s = await createStore([mc.address, '127.0.0.1:1'], { stats });
    await s.increment([op(uniqueKey('c1'), 1), op(uniqueKey('c2'), 1), op(uniqueKey('c3'), 1)], Date.now());
    await s.close();
    await new Promise((res) => setImmediate(res));
    const after = count();
    expect(after.TCPSocketWrap ?? 0).toBeLessThanOrEqual(before.TCPSocketWrap ?? 0);
    expect(after.Timeout ?? 0).toBeLessThanOrEqual(before.Timeout ?? 0);
  });
});

describe('memcache store: node down and back', () => {
  it('fails open while the node is down, reports it, and resumes counting when it is back', async () => {
    const strict = await createStore([mc.address], { stats: new StatsStore(), failureMode: 'error' });
    const changes: boolean[] = [];
    store.onHealthChange((h) => changes.push(h));
    try {
      const k = uniqueKey('down');
      expect(await store.increment([op(k, 1)], Date.now())).toEqual([1]);
      await store.idle();

      await mc.kill();
      // Fail-open (BACKEND_FAILURE_MODE unset): counted as 0, so counts = hits.
      expect(await store.increment([op(k, 2)], Date.now())).toEqual([2]);
      expect(stat(stats, 'multiget.__code=error')).toBeGreaterThanOrEqual(1);
      await store.idle();
      expect(stat(stats, 'increment.__code=error')).toBeGreaterThanOrEqual(1);
      // A failure mode set: a transient StoreError for the limiter to apply the mode.
      const err = await strict.increment([op(k, 1)], Date.now()).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(StoreError);
      expect((err as StoreError).transient).toBe(true);
      expect((err as StoreError).message).toMatch(new RegExp(`^memcached read failed on ${mc.address.replace(/\./g, '\\.')}: `));
      expect(strict.pendingIncrements).toBe(0);

      await waitFor(() => !store.isHealthy(), 'unhealthy while the only node is down');
      expect(store.nodeStates()[0]!.up).toBe(false);
      expect(store.nodeStates()[0]!.lastError).not.toBe('');

      await mc.restart();
      // Each store asks the node again only after its own probe has found it up.
      await waitFor(() => store.isHealthy() && strict.isHealthy(), 'both stores healthy again once the node answers');
      // Same store, no re-creation: counting resumes (on an empty cache).
      expect(await store.increment([op(k, 1)], Date.now())).toEqual([1]);
      await store.idle();
      expect(await store.increment([op(k, 1)], Date.now())).toEqual([2]);
      await store.idle();
      expect(await rawGet(mc.port, k)).toBe('2');
      expect(await strict.increment([op(k, 1)], Date.now())).toEqual([3]);
      expect(changes).toEqual([false, true]);
    } finally {
      await strict.close();
      if (!mc.running) await mc.restart();
    }
  });

  it('starts while the node is down (unhealthy) and turns healthy when it comes up', async () => {
    await mc.stop();
    try {
      const s = await createStore([mc.address], { stats });
      try {
        expect(s.isHealthy()).toBe(false);
        expect(s.nodeStates()[0]!.up).toBe(false);
        expect(await s.increment([op(uniqueKey('early'), 3)], Date.now())).toEqual([3]);
        await mc.restart();
        await waitFor(() => s.isHealthy(), 'healthy after the node started');
      } finally {
        await s.close();
      }
    } finally {
      if (!mc.running) await mc.restart();
    }
  });
});
