/**
 * REDIS_BATCH_SCRIPT against real redis-servers: the INCRBY/EXPIRE pairs of a pipeline go as one
 * EVAL, with exactly the keys, counts and TTLs of the plain pipeline; errors stay per request; the
 * other commands of the pipeline (algorithm scripts, stop-increment GETs) keep working beside it.
 */
import type { Redis } from 'ioredis';
import type { RedisStore } from '../../../src/backends/redis/store';
import { StoreError } from '../../../src/core/store';
import { Unit } from '../../../src/core/rls';
import { rule } from '../../limiter/helpers';
import { commandStats, type RedisServer } from '../../support/redis';
import { connectStore, op, redisSettings, ruleOf, stats, startRedisWithPerSecond, stopRedisWithPerSecond, uniqueKey } from './helpers';

let redis: RedisServer;
let second: RedisServer;
let reader: Redis;

beforeAll(async () => ({ redis, second, reader } = await startRedisWithPerSecond()));
afterAll(() => stopRedisWithPerSecond({ redis, second, reader }));

describe('redis store: REDIS_BATCH_SCRIPT', () => {
  let store: RedisStore | undefined;
  let plain: RedisStore | undefined;
  afterEach(async () => {
    await Promise.all([store?.close(), plain?.close()]);
    store = plain = undefined;
  });

  it('stores the same counts and TTLs as the plain pipeline, jitter included', async () => {
    const random = (): number => 7 / 100;
    store = await connectStore(redisSettings({ url: redis.address, batchScript: true }), { jitterMaxSeconds: 100, random });
    plain = await connectStore(redisSettings({ url: redis.address }), { jitterMaxSeconds: 100, random });
    const a = [uniqueKey('sa'), uniqueKey('sb')];
    const b = [uniqueKey('pa'), uniqueKey('pb')];
    // The same key twice in one request is incremented twice, as in a pipeline.
    expect(await store.increment([op(a[0]!, 2, 60), op(a[1]!, 0, 3600), op(a[0]!, 1, 60)], 0)).toEqual([2, 0, 3]);
    expect(await plain.increment([op(b[0]!, 2, 60), op(b[1]!, 0, 3600), op(b[0]!, 1, 60)], 0)).toEqual([2, 0, 3]);
    for (let i = 0; i < 2; i++) {
      expect(await reader.get(a[i]!)).toBe(await reader.get(b[i]!));
      expect(await reader.ttl(a[i]!)).toBe(await reader.ttl(b[i]!));
    }
    expect(await reader.ttl(a[0]!)).toBe(67);
    expect(await reader.ttl(a[1]!)).toBe(3607);
  });

  it('sends the requests decided in one turn as one EVAL, each request getting its own counts', async () => {
    store = await connectStore(redisSettings({ url: redis.address, batchScript: true, poolSize: 1 }));
    const key = uniqueKey('hot');
    const others = [1, 2, 3, 4, 5].map((i) => uniqueKey(`five${i}`));
    await redis.cli(['CONFIG', 'RESETSTAT']);
    const all = await Promise.all(Array.from({ length: 20 }, () => store!.increment([op(key), ...others.map((k) => op(k))], 0)));
    const firsts = all.map((c) => c[0]!).sort((x, y) => x - y);
    expect(firsts).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    for (const counts of all) expect(new Set(counts).size).toBe(1); // every key of a request moved together
    const cs = await commandStats(redis);
    expect(cs['eval']).toBe(1);
    expect(cs['incrby']).toBe(120);
    expect(cs['expire']).toBe(120);
  });

  it('fails only the request with a WRONGTYPE key, permanently; the others in the same EVAL count', async () => {
    store = await connectStore(redisSettings({ url: redis.address, batchScript: true, pipelineWindowMs: 5 }));
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

  it('runs beside an algorithm script and the stop-increment GETs in one pipeline', async () => {
    store = await connectStore(redisSettings({ url: redis.address, batchScript: true }), { stopIncrementWhenOverLimit: true });
    const bucket = rule(stats, 'd.bucket', 10, Unit.MINUTE, { algorithm: 'token_bucket', burst: 10 });
    const small = ruleOf(3, Unit.HOUR, 'd.fixed3');
    const large = ruleOf(100, Unit.HOUR, 'd.fixed100');
    const tb = uniqueKey('tb');
    const a = uniqueKey('fa');
    const b = uniqueKey('fb');
    const now = 1_700_000_000_000;
    const ops = [op(a, 1, 3600, small), op(b, 1, 3600, large), op(tb, 1, 60, bucket)];
    for (let i = 1; i <= 3; i++) expect(await store.increment(ops, now)).toEqual([i, i, i]);
    // The fourth goes over on `a` only: upstream's rule charges `a` and spares `b`.
    expect(await store.increment(ops, now)).toEqual([4, 3, 4]);
    expect(await reader.get(a)).toBe('4');
    expect(await reader.get(b)).toBe('3');
    expect(await reader.ttl(b)).toBeGreaterThan(3500);
  });

  it('applies to the per-second instance too', async () => {
    store = await connectStore(redisSettings({ url: redis.address, batchScript: true, perSecond: { enabled: true, url: second.address } }));
    await Promise.all([redis.cli(['CONFIG', 'RESETSTAT']), second.cli(['CONFIG', 'RESETSTAT'])]);
    const sec = uniqueKey('sec');
    const min = uniqueKey('min');
    expect(await store.increment([op(sec, 1, 1), op(min, 2, 60)], 0)).toEqual([1, 2]);
    expect(await second.cli(['GET', sec])).toBe('1\n');
    expect(await redis.cli(['GET', min])).toBe('2\n');
    expect((await commandStats(second))['eval']).toBe(1);
    expect((await commandStats(redis))['eval']).toBe(1);
  });
});
