/**
 * sliding_window and token_bucket (extension) on the Redis store against a real redis-server:
 * the Lua script decides exactly as the memory store does (same admissions for the same
 * arrivals), stays within each algorithm's bound, is one pipeline per request, and survives a
 * SCRIPT FLUSH (EVALSHA → NOSCRIPT → EVAL).
 */
import { Redis } from 'ioredis';
import { MemoryStore } from '../../../src/backends/memory';
import type { RedisStore } from '../../../src/backends/redis/store';
import { Code } from '../../../src/core/rls';
import { startRedis, type RedisServer } from '../../support/redis';
import { BOUND, L, burstAfterIdle, bursty, drive, maxInWindow, setup, steady } from '../../limiter/algorithm-cases';
import { connectStore, pipelineSpy, redisSettings, uniqueKey } from './helpers';

let redis: RedisServer;
let admin: Redis;
let store: RedisStore;

beforeAll(async () => {
  redis = await startRedis();
  admin = new Redis({ host: redis.host, port: redis.port, lazyConnect: true });
  await admin.connect();
  store = await connectStore(redisSettings({ url: `${redis.host}:${redis.port}` }));
});

afterAll(async () => {
  await store?.close();
  admin?.disconnect();
  await redis?.stop();
});

const START = 1_700_000_000_000;

describe('redis store: algorithms', () => {
  test.each(Object.keys(BOUND))('%s: same admissions as the memory store, within the bound', async (key) => {
    const prefix = uniqueKey(key) + ':';
    const r = setup(store, prefix);
    const m = setup(new MemoryStore({ maxKeys: 10_000 }), prefix);
    const arrivalsS = steady(START);
    const arrivalsB = bursty(START + 60_000);
    const rs = await drive(r, key, 's', arrivalsS);
    const rb = await drive(r, key, 'b', arrivalsB);
    expect(rs).toEqual(await drive(m, key, 's', arrivalsS));
    expect(rb).toEqual(await drive(m, key, 'b', arrivalsB));
    expect(maxInWindow(rs, 1000)).toBeLessThanOrEqual(BOUND[key]!.steady);
    expect(maxInWindow(rb, 1000)).toBeLessThanOrEqual(BOUND[key]!.bursty);
    if (key === 'fixed') expect(maxInWindow(rb, 1000)).toBe(2 * L);
  });

  test.each([
    ['bucket', L],
    ['smooth', 1],
  ] as const)('token bucket %s: after sitting idle (its key still stored), a burst admits exactly its burst (%i)', async (key, burst) => {
    // The clock is simulated: the TAT key outlives the simulated idle time in Redis, so the
    // script sees an arrival time in the past, as after a real idle spell shorter than its expiry.
    const s = setup(store, uniqueKey('idle') + ':');
    for (const idleMs of [1500, 30_000, 3_600_000]) expect(await burstAfterIdle(s, key, `idle-${idleMs}`, START, idleMs)).toBe(burst);
  });

  test('keys: sliding windows keep upstream-format keys, the token bucket one TAT key', async () => {
    const prefix = uniqueKey('keys') + ':';
    const s = setup(store, prefix);
    s.clock.set(1_700_000_100 * 1000);
    await s.ask('sliding', 'x');
    await s.ask('bucket', 'x');
    expect(await admin.get(`${prefix}algo_sliding_x_1700000100`)).toBe('1');
    const ttl = await admin.pttl(`${prefix}algo_sliding_x_1700000100`);
    expect(ttl).toBeGreaterThan(1000); // lives through the next window, where it is `previous`
    expect(ttl).toBeLessThanOrEqual(2000);
    expect(Number(await admin.get(`${prefix}algo_bucket_x_tb`))).toBe(1_700_000_100_100);
  });

  test('several limits: one pipeline, each limit its own key', async () => {
    const prefix = uniqueKey('multi') + ':';
    const s = setup(store, prefix);
    s.clock.set(1_700_000_200 * 1000);
    const exec = pipelineSpy();
    const res = await s.ask('multi', 'y');
    expect(exec).toHaveBeenCalledTimes(1);
    exec.mockRestore();
    expect(res.statuses[0]).toMatchObject({ code: Code.OK, limitRemaining: 2 });
    expect(await admin.get(`${prefix}algo_multi_y_1700000200`)).toBe('1');
    expect(await admin.get(`${prefix}algo_multi_y_1700000160_l2`)).toBe('1');
    expect(await admin.exists(`${prefix}algo_multi_y_tb_l3`)).toBe(1);
  });

  test('SCRIPT FLUSH: the next call falls back to EVAL and goes on', async () => {
    const prefix = uniqueKey('flush') + ':';
    const s = setup(store, prefix);
    s.clock.set(1_700_000_300 * 1000);
    expect((await s.ask('smooth', 'z')).overallCode).toBe(Code.OK);
    await admin.script('FLUSH');
    expect((await s.ask('smooth', 'z')).overallCode).toBe(Code.OVER_LIMIT);
    s.clock.advance(100);
    expect((await s.ask('smooth', 'z')).overallCode).toBe(Code.OK);
  });
});
