/**
 * The Redis store against one real redis-server (plus a second one for the per-second instance):
 * exact keys, TTLs and counts, one pipeline per request, stop-increment, cross-request batching,
 * per-second routing, stats and clean shutdown.
 */
import type { Redis } from 'ioredis';
import type { RedisStore } from '../../../src/backends/redis/store';
import { cacheKey } from '../../../src/limiter/cache-key';
import { type CounterOp, StoreError } from '../../../src/core/store';
import { Unit } from '../../../src/core/rls';
import { StatsStore } from '../../../src/stats/store';
import { commandStats, startRedis, type RedisServer } from '../../support/redis';
import { connectStore, op, pipelineSpy, recordingLogger, redisSettings, ruleOf, storeOptions, startRedisWithPerSecond, stopRedisWithPerSecond, uniqueKey } from './helpers';

let redis: RedisServer;
let second: RedisServer;
let reader: Redis;

beforeAll(async () => ({ redis, second, reader } = await startRedisWithPerSecond()));
afterAll(() => stopRedisWithPerSecond({ redis, second, reader }));


describe('redis store: keys, TTLs and counts', () => {
  let store: RedisStore;
  afterEach(async () => {
    await store?.close();
    jest.restoreAllMocks();
  });

  it.each([
    ['', 'domain_key_value_1234'],
    ['prefix:', 'prefix:domain_key_value_1234'],
  ])('stores upstream keys (prefix %j) with TTL = window when jitter is 0', async (prefix, expected) => {
    await redis.cli(['FLUSHALL']);
    store = await connectStore(redisSettings({ url: redis.address }));
    const r = ruleOf(10, Unit.SECOND);
    const key = cacheKey(prefix, 'domain', { entries: [{ key: 'key', value: 'value' }] }, r, 1234, 1);
    expect(key).toBe(expected);
    const hourKey = cacheKey(prefix, 'domain', { entries: [{ key: 'key3', value: 'value3' }] }, ruleOf(10), 1_000_000, 3600);
    expect(await store.increment([op(key, 1, 1, r), op(hourKey, 3, 3600)], 1_234_000)).toEqual([1, 3]);
    expect(await redis.cli(['GET', expected])).toBe('1\n');
    expect(await redis.cli(['GET', `${prefix}domain_key3_value3_997200`])).toBe('3\n');
    const pttl = await reader.pttl(expected);
    expect(pttl).toBeGreaterThan(0);
    expect(pttl).toBeLessThanOrEqual(1000);
    const hourTtl = await reader.pttl(hourKey);
    expect(hourTtl).toBeGreaterThan(3_599_000);
    expect(hourTtl).toBeLessThanOrEqual(3_600_000);
  });

  it('adds floor(random · EXPIRATION_JITTER_MAX_SECONDS) to the TTL (upstream: jitter max 3600, Int63n = 100 → EXPIRE 101)', async () => {
    store = await connectStore(redisSettings({ url: redis.address }), { jitterMaxSeconds: 3600, random: () => 100 / 3600 });
    const key = uniqueKey('jitter');
    expect(await store.increment([op(key, 1, 1)], 0)).toEqual([1]);
    const ttl = await reader.ttl(key);
    expect(ttl).toBeGreaterThanOrEqual(100);
    expect(ttl).toBeLessThanOrEqual(101);
    // The largest jitter is N-1 (random() < 1).
    const key2 = uniqueKey('jitter-max');
    const store2 = await connectStore(redisSettings({ url: redis.address }), { jitterMaxSeconds: 300, random: () => 0.999999 });
    await store2.increment([op(key2, 1, 60)], 0);
    await store2.close();
    expect(await reader.ttl(key2)).toBeGreaterThanOrEqual(358);
    expect(await reader.ttl(key2)).toBeLessThanOrEqual(359);
  });

  it('counts hits 0 and 3, and the same key twice in one request is incremented twice', async () => {
    store = await connectStore(redisSettings({ url: redis.address }));
    const a = uniqueKey('a');
    const b = uniqueKey('b');
    expect(await store.increment([op(a, 3), op(b, 0), op(a, 2)], 0)).toEqual([3, 0, 5]);
    expect(await store.increment([op(a, 0)], 0)).toEqual([5]);
    expect(await reader.get(a)).toBe('5');
    // INCRBY 0 creates the key with 0 and an expiry, as upstream.
    expect(await reader.get(b)).toBe('0');
    expect(await reader.ttl(b)).toBeGreaterThan(0);
  });

  it('refreshes EXPIRE on every hit', async () => {
    store = await connectStore(redisSettings({ url: redis.address }));
    const key = uniqueKey('refresh');
    await store.increment([op(key, 1, 60)], 0);
    await reader.expire(key, 5);
    expect(await reader.ttl(key)).toBeLessThanOrEqual(5);
    await store.increment([op(key, 1, 60)], 0);
    expect(await reader.ttl(key)).toBeGreaterThan(55);
  });

  it('sends one pipeline per request: a 5-key request is 5 INCRBY and 5 EXPIRE in one exec', async () => {
    store = await connectStore(redisSettings({ url: redis.address, poolSize: 3 }));
    await redis.cli(['CONFIG', 'RESETSTAT']);
    const spy = pipelineSpy();
    const ops = [1, 2, 3, 4, 5].map((i) => op(uniqueKey(`five${i}`)));
    expect(await store.increment(ops, 0)).toEqual([1, 1, 1, 1, 1]);
    expect(spy).toHaveBeenCalledTimes(1);
    const cs = await commandStats(redis);
    expect(cs['incrby']).toBe(5);
    expect(cs['expire']).toBe(5);
    expect(cs['get']).toBeUndefined();
  });

  it('counts exactly under many concurrent requests over a pool', async () => {
    store = await connectStore(redisSettings({ url: redis.address, poolSize: 4 }));
    const key = uniqueKey('hot');
    const all = await Promise.all(Array.from({ length: 200 }, () => store.increment([op(key)], 0)));
    expect(all.map((c) => c[0]).sort((x, y) => x! - y!)).toEqual(Array.from({ length: 200 }, (_, i) => i + 1));
  });

  it('rejects with a permanent StoreError on WRONGTYPE, and only that request', async () => {
    store = await connectStore(redisSettings({ url: redis.address, pipelineWindowMs: 5 }));
    const bad = uniqueKey('hash');
    await reader.hset(bad, 'f', 'v');
    const good = uniqueKey('good');
    const [r1, r2] = await Promise.allSettled([store.increment([op(good), op(bad)], 0), store.increment([op(good)], 0)]);
    expect(r1.status).toBe('rejected');
    const err = (r1 as PromiseRejectedResult).reason as StoreError;
    expect(err).toBeInstanceOf(StoreError);
    expect(err.message).toMatch(/^WRONGTYPE/);
    expect(err.transient).toBe(false);
    expect(r2).toEqual({ status: 'fulfilled', value: [2] });
  });
});

describe('redis store: STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT', () => {
  let store: RedisStore;
  afterEach(async () => {
    await store?.close();
    jest.restoreAllMocks();
  });
  const r15 = ruleOf(15, Unit.HOUR, 'd.k15');
  const r14 = ruleOf(14, Unit.HOUR, 'd.k14');

  it('charges only the keys that would go over (upstream: 15/h and 14/h at 13, addend 2)', async () => {
    store = await connectStore(redisSettings({ url: redis.address }), { stopIncrementWhenOverLimit: true });
    const k4 = uniqueKey('key4');
    const k5 = uniqueKey('key5');
    await reader.set(k4, '13');
    await reader.set(k5, '13');
    await redis.cli(['CONFIG', 'RESETSTAT']);
    const spy = pipelineSpy();
    expect(await store.increment([op(k4, 2, 3600, r15), op(k5, 2, 3600, r14)], 0)).toEqual([13, 15]);
    // Two round trips: the GETs, then INCRBY 0 / INCRBY 2 with their EXPIREs.
    expect(spy).toHaveBeenCalledTimes(2);
    const cs = await commandStats(redis);
    expect(cs['get']).toBe(2);
    expect(cs['incrby']).toBe(2);
    expect(cs['expire']).toBe(2);
    expect(await reader.get(k4)).toBe('13');
    expect(await reader.get(k5)).toBe('15');
    expect(await reader.ttl(k4)).toBeGreaterThan(3500);
  });

  it('charges every key when none would go over', async () => {
    store = await connectStore(redisSettings({ url: redis.address }), { stopIncrementWhenOverLimit: true });
    const a = uniqueKey('a');
    const b = uniqueKey('b');
    expect(await store.increment([op(a, 2, 3600, r15), op(b, 2, 3600, r14)], 0)).toEqual([2, 2]);
  });

  it('adds 0 to every key, without GET, when another key is over in the local cache', async () => {
    store = await connectStore(redisSettings({ url: redis.address }), { stopIncrementWhenOverLimit: true });
    const a = uniqueKey('a');
    await reader.set(a, '4');
    await redis.cli(['CONFIG', 'RESETSTAT']);
    expect(await store.increment([op(a, 2, 3600, r15), op(uniqueKey('b'), 1, 3600, r14)], 0, { overLimitElsewhere: true })).toEqual([4, 0]);
    const cs = await commandStats(redis);
    expect(cs['get']).toBeUndefined();
    expect(cs['incrby']).toBe(2);
  });

  it('ignores the rule when the option is off', async () => {
    store = await connectStore(redisSettings({ url: redis.address }));
    const a = uniqueKey('a');
    await reader.set(a, '13');
    expect(await store.increment([op(a, 2, 3600, r15)], 0, { overLimitElsewhere: true })).toEqual([15]);
  });
});

describe('redis store: cross-request batching', () => {
  let store: RedisStore;
  afterEach(async () => {
    await store?.close();
    jest.restoreAllMocks();
  });

  it('REDIS_PIPELINE_WINDOW: concurrent requests share pipelines and each gets its own counts', async () => {
    store = await connectStore(redisSettings({ url: redis.address, pipelineWindowMs: 5 }));
    const spy = pipelineSpy();
    const keys = Array.from({ length: 10 }, (_, i) => uniqueKey(`w${i}`));
    const results = await Promise.all(
      Array.from({ length: 50 }, (_, n) => store.increment([op(keys[n % 10]!, 1), op(keys[(n + 1) % 10]!, 2)], 0)),
    );
    expect(spy.mock.calls.length).toBeLessThan(50);
    expect(spy.mock.calls.length).toBeGreaterThanOrEqual(1);
    // Every key got 5 hits of 1 and 5 of 2: 15, and each request saw its own intermediate counts.
    for (const k of keys) expect(await reader.get(k)).toBe('15');
    const seen = new Map<string, number[]>();
    results.forEach((counts, n) => {
      (seen.get(keys[n % 10]!) ?? seen.set(keys[n % 10]!, []).get(keys[n % 10]!)!).push(counts[0]!);
      (seen.get(keys[(n + 1) % 10]!) ?? seen.set(keys[(n + 1) % 10]!, []).get(keys[(n + 1) % 10]!)!).push(counts[1]!);
    });
    for (const values of seen.values()) expect(new Set(values).size).toBe(values.length);
  });

  it('REDIS_PIPELINE_WINDOW: a lone request is sent when the window elapses', async () => {
    store = await connectStore(redisSettings({ url: redis.address, pipelineWindowMs: 30 }));
    const t0 = Date.now();
    expect(await store.increment([op(uniqueKey('lone'))], 0)).toEqual([1]);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(25);
  });

  it('REDIS_PIPELINE_LIMIT flushes before the window elapses', async () => {
    // A 10 s window: only the limit can send these in time.
    store = await connectStore(redisSettings({ url: redis.address, pipelineWindowMs: 10_000, pipelineLimit: 4 }));
    const spy = pipelineSpy();
    const t0 = Date.now();
    const counts = await Promise.all([store.increment([op(uniqueKey('l1'))], 0), store.increment([op(uniqueKey('l2'))], 0)]);
    expect(Date.now() - t0).toBeLessThan(2000);
    expect(counts).toEqual([[1], [1]]);
    // 2 requests × (INCRBY + EXPIRE) = 4 commands = the limit: one pipeline.
    expect(spy).toHaveBeenCalledTimes(1);
  });

  it('REDIS_PIPELINE_LIMIT without a window sends at the end of the event-loop turn', async () => {
    store = await connectStore(redisSettings({ url: redis.address, pipelineLimit: 100 }));
    const spy = pipelineSpy();
    const counts = await Promise.all(Array.from({ length: 5 }, () => store.increment([op(uniqueKey('t'))], 0)));
    expect(counts).toEqual([[1], [1], [1], [1], [1]]);
    expect(spy).toHaveBeenCalledTimes(1);
  });

  it('batches the GETs of the stop-increment rule too', async () => {
    store = await connectStore(redisSettings({ url: redis.address, pipelineWindowMs: 5 }), { stopIncrementWhenOverLimit: true });
    const r2 = ruleOf(2, Unit.HOUR, 'd.k2');
    const key = uniqueKey('stop');
    const results = await Promise.all(Array.from({ length: 4 }, () => store.increment([op(key, 1, 3600, r2)], 0)));
    // All four read 0 before any increment (same window), none would go over: all charged.
    expect(results.map((c) => c[0]).sort()).toEqual([1, 2, 3, 4]);
  });
});

describe('redis store: per-second instance', () => {
  it('sends one-second windows only to the per-second Redis, both pipelines at once', async () => {
    const s = redisSettings({ url: redis.address, perSecond: { enabled: true, url: second.address } });
    const statsStore = new StatsStore();
    const store = await connectStore(s, { stats: statsStore });
    try {
      await second.cli(['CONFIG', 'RESETSTAT']);
      await redis.cli(['CONFIG', 'RESETSTAT']);
      const sec = uniqueKey('sec');
      const min = uniqueKey('min');
      const spy = pipelineSpy();
      expect(await store.increment([op(sec, 1, 1), op(min, 2, 60)], 0)).toEqual([1, 2]);
      expect(spy).toHaveBeenCalledTimes(2);
      expect(await second.cli(['GET', sec])).toBe('1\n');
      expect(await second.cli(['EXISTS', min])).toBe('0\n');
      expect(await redis.cli(['GET', min])).toBe('2\n');
      expect(await redis.cli(['EXISTS', sec])).toBe('0\n');
      expect((await commandStats(second))['incrby']).toBe(1);
      expect((await commandStats(redis))['incrby']).toBe(1);
      expect(statsStore.gauge('ratelimit.redis_per_second_pool.cx_active').value).toBe(2);
      expect(statsStore.gauge('ratelimit.redis_pool.cx_active').value).toBe(2);
    } finally {
      jest.restoreAllMocks();
      await store.close();
    }
  });
});

describe('redis store: candidate limits', () => {
  it('counts a candidate in the pipeline of the enforced key it follows, on that key\'s instance (one round trip)', async () => {
    const s = redisSettings({ url: redis.address, perSecond: { enabled: true, url: second.address } });
    const store = await connectStore(s);
    try {
      const spy = pipelineSpy();
      // A per-second limit with a per-minute candidate: both on the per-second instance.
      const sec = op(uniqueKey('sec'), 1, 1);
      const cand: CounterOp = { ...op(sec.key + '_cand', 1, 60, ruleOf(1, Unit.MINUTE)), follows: sec };
      expect(await store.increment([sec, cand], 0)).toEqual([1, 1]);
      expect(spy).toHaveBeenCalledTimes(1);
      expect(await second.cli(['GET', cand.key])).toBe('1\n');
      expect(Number(await second.cli(['TTL', cand.key]))).toBeGreaterThan(1);
      expect(await redis.cli(['EXISTS', cand.key])).toBe('0\n');
      // A per-minute limit with a per-second candidate: both on the main instance.
      spy.mockClear();
      const min = op(uniqueKey('min'), 2, 60);
      const cand2: CounterOp = { ...op(min.key + '_cand', 2, 1, ruleOf(1, Unit.SECOND)), follows: min };
      expect(await store.increment([min, cand2], 0)).toEqual([2, 2]);
      expect(spy).toHaveBeenCalledTimes(1);
      expect(await redis.cli(['GET', cand2.key])).toBe('2\n');
      expect(await second.cli(['EXISTS', cand2.key])).toBe('0\n');
    } finally {
      jest.restoreAllMocks();
      await store.close();
    }
  });
});

describe('redis store: connection options', () => {
  it('connects over a unix socket (REDIS_SOCKET_TYPE=unix)', async () => {
    const server = await startRedis({ unixSocket: true });
    try {
      const store = await connectStore(redisSettings({ socketType: 'unix', url: server.socket! }));
      expect(await store.increment([op('unix_key', 2)], 0)).toEqual([2]);
      await store.close();
      expect(await server.cli(['GET', 'unix_key'])).toBe('2\n');
    } finally {
      await server.stop();
    }
  });

  it('authenticates with a password and with user:password (ACL), and fails clearly on a wrong one', async () => {
    const server = await startRedis({ password: 'sekret:with:colons', aclUser: { name: 'svc', password: 'svc-pw' } });
    try {
      // The helper's own ACL user (and redis-cli authenticating as it).
      expect(await server.cli(['ACL', 'WHOAMI'])).toBe('svc\n');
      const bySvc = await connectStore(redisSettings({ url: server.address, auth: 'svc:svc-pw' }));
      expect(await bySvc.increment([op('auth_key', 0)], 0)).toEqual([0]);
      await bySvc.close();
      await server.cli(['ACL', 'SETUSER', 'limiter', 'on', '>pa:ss', '~*', '+@all']);
      const byPassword = await connectStore(redisSettings({ url: server.address, auth: 'default:sekret:with:colons' }));
      expect(await byPassword.increment([op('auth_key')], 0)).toEqual([1]);
      await byPassword.close();
      const byUser = await connectStore(redisSettings({ url: server.address, auth: 'limiter:pa:ss' }));
      expect(await byUser.increment([op('auth_key')], 0)).toEqual([2]);
      await byUser.close();

      const logger = recordingLogger();
      const wrong = connectStore(redisSettings({ url: server.address, auth: 'nope', startup: { maxElapsedTimeMs: 300 } }), { logger });
      await expect(wrong).rejects.toThrow(`timed out waiting for Redis connection to ${server.address}`);
      expect(logger.lines.some((l) => l.level === 'warn' && /WRONGPASS|invalid password|NOAUTH/i.test(l.msg))).toBe(true);
    } finally {
      await server.stop();
    }
  });

  it('authenticates with a bare password (the default user)', async () => {
    const server = await startRedis({ password: 'plain' });
    try {
      const store = await connectStore(redisSettings({ url: server.address, auth: 'plain' }));
      expect(await store.increment([op('k')], 0)).toEqual([1]);
      await store.close();
    } finally {
      await server.stop();
    }
  });
});

describe('redis store: stats and shutdown', () => {
  it('counts pool connections (upstream names) and leaves nothing running after close()', async () => {
    const statsStore = new StatsStore();
    const handles = (): number => process.getActiveResourcesInfo().filter((r) => r === 'TCPSocketWrap' || r === 'Timeout').length;
    const before = handles();
    const store = await connectStore(redisSettings({ url: redis.address, poolSize: 3, pipelineWindowMs: 1000 }), {
      stats: statsStore,
    });
    expect(statsStore.gauge('ratelimit.redis_pool.cx_active').value).toBe(3);
    expect(statsStore.counter('ratelimit.redis_pool.cx_total').value).toBe(3);
    expect(handles()).toBeGreaterThan(before);
    // A request queued in a batching window is still sent by close().
    const pending = store.increment([op(uniqueKey('closing'))], 0);
    await store.close();
    expect(await pending).toEqual([1]);
    expect(statsStore.gauge('ratelimit.redis_pool.cx_active').value).toBe(0);
    expect(statsStore.counter('ratelimit.redis_pool.cx_local_close').value).toBe(3);
    expect(store.isHealthy()).toBe(false);
    await expect(store.increment([op('x')], 0)).rejects.toBeInstanceOf(StoreError);
    await new Promise((r) => setImmediate(r));
    expect(handles()).toBeLessThanOrEqual(before);
  });

  it('exposes the store kind and health', async () => {
    const store = new (await import('../../../src/backends/redis/store')).RedisStore(storeOptions(redisSettings({ url: redis.address })));
    expect(store.kind).toBe('redis');
    expect(store.isHealthy()).toBe(false);
    const changes: boolean[] = [];
    store.onHealthChange((h) => changes.push(h));
    await store.connect();
    expect(store.isHealthy()).toBe(true);
    await store.close();
    expect(changes).toEqual([true, false]);
  });
});
