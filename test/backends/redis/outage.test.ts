/**
 * Failures: a Redis that stops answering, dies and comes back, or is not there at start-up.
 * REDIS_TIMEOUT is 500 ms here, so every wait below is short and bounded.
 */
import type { RedisStore } from '../../../src/backends/redis/store';
import { StoreError } from '../../../src/core/store';
import { StatsStore } from '../../../src/stats/store';
import { freePort, startRedis, type RedisServer } from '../../support/redis';
import { connectStore, op, recordingLogger, redisSettings, storeOptions, timed, uniqueKey } from './helpers';
import { RedisStore as Store } from '../../../src/backends/redis/store';
import { waitFor } from '../../support/wait';

const TIMEOUT_MS = 500;
/** Scheduling slack on a loaded 2-core CI machine. */
const MARGIN_MS = 400;

describe('redis store: outages', () => {
  let redis: RedisServer;
  let store: RedisStore;
  const health: boolean[] = [];
  const statsStore = new StatsStore();

  beforeAll(async () => {
    redis = await startRedis();
    store = new Store(
      storeOptions(redisSettings({ url: redis.address, timeoutMs: TIMEOUT_MS, poolSize: 2, healthCheckActiveConnection: true }), {
        stats: statsStore,
      }),
    );
    store.onHealthChange((h) => health.push(h));
    await store.connect();
  });

  afterAll(async () => {
    await store?.close();
    await redis?.stop();
  });

  it('a Redis that stops answering fails the request with a transient StoreError within REDIS_TIMEOUT', async () => {
    const key = uniqueKey('paused');
    expect(await store.increment([op(key)], 0)).toEqual([1]);
    redis.pause();
    try {
      const r = await timed(store.increment([op(key)], 0));
      expect(r.error).toBeInstanceOf(StoreError);
      expect((r.error as StoreError).message).toMatch(/timed out/i);
      expect((r.error as StoreError).transient).toBe(true);
      expect(r.ms).toBeGreaterThanOrEqual(TIMEOUT_MS - 50);
      expect(r.ms).toBeLessThan(TIMEOUT_MS + MARGIN_MS);
    } finally {
      redis.resume();
    }
    // The connection is still usable once Redis answers again (the late reply is discarded).
    await waitFor(async () => (await store.increment([op(uniqueKey('after-pause'))], 0))[0] === 1, 'requests to succeed again', 5000);
  });

  it('a killed Redis fails requests at once; after restart() counting resumes on the same store, each request once', async () => {
    const key = uniqueKey('outage');
    expect(await store.increment([op(key, 5)], 0)).toEqual([5]);
    expect(store.isHealthy()).toBe(true);
    health.length = 0;

    await redis.kill();
    await waitFor(() => !store.isHealthy(), 'the store to notice', 5000);
    expect(health).toEqual([false]);
    expect(statsStore.gauge('ratelimit.redis_pool.cx_active').value).toBe(0);
    for (let i = 0; i < 5; i++) {
      const r = await timed(store.increment([op(key), op(uniqueKey('other'))], 0));
      expect(r.error).toBeInstanceOf(StoreError);
      expect((r.error as StoreError).transient).toBe(true);
      expect(r.ms).toBeLessThan(TIMEOUT_MS + MARGIN_MS);
    }

    await redis.restart();
    // ioredis reconnects in the background (50 ms doubling to 2 s).
    await waitFor(() => store.isHealthy(), 'the store to reconnect', 10_000);
    expect(health).toEqual([false, true]);
    await waitFor(() => statsStore.gauge('ratelimit.redis_pool.cx_active').value === 2, 'both pool connections', 5000);

    // The restarted Redis is empty: every successful request adds exactly one, nothing failed
    // during the outage is replayed.
    for (let i = 1; i <= 10; i++) expect(await store.increment([op(key)], 0)).toEqual([i]);
    expect(await redis.cli(['GET', key])).toBe('10\n');
    expect(statsStore.counter('ratelimit.redis_pool.cx_local_close').value).toBeGreaterThanOrEqual(2);
    expect(statsStore.counter('ratelimit.redis_pool.cx_total').value).toBeGreaterThanOrEqual(4);
  });
});

describe('redis store: outage log', () => {
  it('an outage of a pool of 10 is one warning with the count, and one line when all are back', async () => {
    const r = await startRedis();
    const logger = recordingLogger();
    const s = await connectStore(redisSettings({ url: r.address, timeoutMs: TIMEOUT_MS, poolSize: 10 }), { logger });
    const said = (what: RegExp) => logger.lines.filter((l) => what.test(l.msg));
    try {
      await waitFor(() => s.isHealthy(), 'the pool');
      await r.kill();
      await waitFor(() => said(/lost/).length > 0, 'the outage line');
      await r.restart();
      await waitFor(() => said(/reconnected/).length > 0, 'the reconnection line', 15_000);
      expect(said(/lost/)).toEqual([{ level: 'warn', msg: expect.stringMatching(new RegExp(`^redis: lost 10 of 10 connections to ${r.address}.*; reconnecting$`)) }]);
      expect(said(/reconnected/)).toEqual([{ level: 'info', msg: `redis: reconnected to ${r.address} (10 connections)` }]);
    } finally {
      await s.close();
      await r.stop();
    }
  });
});

describe('redis store: start-up', () => {
  it('keeps retrying while Redis is down (logging each attempt with a masked URL) and connects when it comes up', async () => {
    const port = await freePort();
    const logger = recordingLogger();
    const url = `redis://:hunter2@127.0.0.1:${port}`;
    const connecting = connectStore(
      redisSettings({ url, timeoutMs: TIMEOUT_MS, startup: { initialIntervalMs: 50, maxIntervalMs: 100, maxElapsedTimeMs: 0 } }),
      { logger },
    );
    let settled = false;
    void connecting.then(
      () => (settled = true),
      () => (settled = true),
    );
    await waitFor(() => logger.lines.filter((l) => l.msg.startsWith('failed to connect')).length >= 3, 'a few failed attempts', 5000);
    expect(settled).toBe(false);
    const redis = await startRedis({ port, password: 'hunter2' });
    try {
      const store = await connecting;
      expect(await store.increment([op('startup_key')], 0)).toEqual([1]);
      await store.close();
      const warnings = logger.lines.filter((l) => l.level === 'warn').map((l) => l.msg);
      expect(warnings.some((m) => m.includes(`redis://:***@127.0.0.1:${port}`))).toBe(true);
      expect(logger.lines.some((l) => l.msg.includes('hunter2'))).toBe(false);
    } finally {
      await redis.stop();
    }
  });

  it('rejects with upstream\'s message after REDIS_STARTUP_MAX_ELAPSED_TIME', async () => {
    const port = await freePort();
    const r = await timed(
      connectStore(
        redisSettings({
          url: `127.0.0.1:${port}`,
          auth: 'user:secret',
          timeoutMs: TIMEOUT_MS,
          startup: { initialIntervalMs: 50, maxIntervalMs: 100, maxElapsedTimeMs: 400 },
        }),
      ),
    );
    expect((r.error as Error).message).toBe(`timed out waiting for Redis connection to 127.0.0.1:${port}`);
    expect(r.ms).toBeGreaterThanOrEqual(350);
    expect(r.ms).toBeLessThan(400 + TIMEOUT_MS + MARGIN_MS);
  });

  it('close() during the start-up retry stops it', async () => {
    const port = await freePort();
    const logger = recordingLogger();
    const store = new Store(storeOptions(redisSettings({ url: `127.0.0.1:${port}`, startup: { initialIntervalMs: 1000, maxIntervalMs: 1000, maxElapsedTimeMs: 0 } }), { logger }));
    const connecting = timed(store.connect());
    // Close while the retry waits for its next attempt.
    await waitFor(() => logger.lines.some((l) => l.msg.includes('retrying in 1000 ms')), 'the first failed attempt');
    await store.close();
    const r = await connecting;
    expect(r.error).toBeInstanceOf(Error);
    expect(r.ms).toBeLessThan(600);
    expect(store.isHealthy()).toBe(false);
  });

  it('without REDIS_HEALTH_CHECK_ACTIVE_CONNECTION health stays up while Redis is away; close() then leaves nothing running', async () => {
    const handles = (): number => process.getActiveResourcesInfo().filter((r) => r === 'TCPSocketWrap' || r === 'Timeout').length;
    const redis = await startRedis();
    const before = handles();
    const store = await connectStore(redisSettings({ url: redis.address, timeoutMs: TIMEOUT_MS }));
    try {
      await redis.kill();
      // The store has seen Redis go (a call fails), and health still says up.
      await expect(store.increment([op('k')], 0)).rejects.toBeInstanceOf(StoreError);
      expect(store.isHealthy()).toBe(true);
    } finally {
      await store.close();
      await redis.stop();
    }
    // Reconnect timers and sockets are gone.
    expect(handles()).toBeLessThanOrEqual(before);
  });

  it('with REDIS_HEALTH_CHECK_ACTIVE_CONNECTION the per-second instance counts for health too', async () => {
    const [main, perSecond] = await Promise.all([startRedis(), startRedis()]);
    const store = await connectStore(
      redisSettings({
        url: main.address,
        timeoutMs: TIMEOUT_MS,
        healthCheckActiveConnection: true,
        perSecond: { enabled: true, url: perSecond.address, timeoutMs: TIMEOUT_MS },
      }),
    );
    const changes: boolean[] = [];
    store.onHealthChange((h) => changes.push(h));
    try {
      expect(store.isHealthy()).toBe(true);
      await perSecond.kill();
      await waitFor(() => !store.isHealthy(), 'unhealthy', 5000);
      // Minute windows still count on the main instance; second windows fail.
      expect(await store.increment([op('m', 1, 60)], 0)).toEqual([1]);
      await expect(store.increment([op('s', 1, 1)], 0)).rejects.toBeInstanceOf(StoreError);
      await perSecond.restart();
      await waitFor(() => store.isHealthy(), 'healthy again', 10_000);
      expect(changes).toEqual([false, true]);
      expect(await store.increment([op('s', 1, 1)], 0)).toEqual([1]);
    } finally {
      await store.close();
      await Promise.all([main.stop(), perSecond.stop()]);
    }
  });
});
