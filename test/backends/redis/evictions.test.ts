/**
 * Evictions are followed and shown: a Redis with a tiny `maxmemory` and an LRU policy is warned
 * about at start (`ratelimit.redis.may_evict` 1), a spray of distinct keys that evicts counters
 * which had spent their limit is counted in `ratelimit.redis.evicted_keys` and warned once, and
 * the end of the evictions is one line; a Redis that forbids CONFIG is read from INFO, one that
 * forbids both is said once; a policy changed to `noeviction` is seen. REDIS_EVICTION_CHECK_INTERVAL
 * is short here; every wait is for a line or a stat.
 */
import type { RedisStore } from '../../../src/backends/redis/store';
import { Unit } from '../../../src/core/rls';
import { StatsStore } from '../../../src/stats/store';
import { startRedis, type RedisServer } from '../../support/redis';
import { waitFor } from '../../support/wait';
import { connectStore, op, recordingLogger, redisSettings, ruleOf, uniqueKey } from './helpers';

const CHECK_MS = 100;

describe('redis store: evictions', () => {
  const servers: RedisServer[] = [];
  const stores: RedisStore[] = [];
  afterEach(async () => {
    await Promise.all(stores.splice(0).map((s) => s.close()));
    await Promise.all(servers.splice(0).map((s) => s.stop()));
  });

  async function setup(extraArgs: string[], settings: Parameters<typeof redisSettings>[0] = {}) {
    const server = await startRedis({ extraArgs });
    servers.push(server);
    const logger = recordingLogger();
    const stats = new StatsStore();
    const store = await connectStore(redisSettings({ url: server.address, timeoutMs: 1000, evictionCheckIntervalMs: CHECK_MS, ...settings }), { logger, stats });
    stores.push(store);
    const said = (what: RegExp) => logger.lines.filter((l) => what.test(l.msg));
    return { server, store, logger, stats, said };
  }

  it('maxmemory 2mb allkeys-lru: warned at start, a spray that resets spent counters is counted and warned once, its end said once', async () => {
    const { server, store, stats, said } = await setup(['--maxmemory', '2mb', '--maxmemory-policy', 'allkeys-lru']);
    await waitFor(() => stats.gauge('ratelimit.redis.may_evict').value === 1, 'the policy to be read');
    expect(said(/may evict/)).toEqual([
      {
        level: 'warn',
        msg: `redis: ${server.address} may evict counters (maxmemory 2097152 bytes, maxmemory-policy allkeys-lru): an evicted counter restarts at zero; set maxmemory-policy noeviction (a full Redis then answers errors, which BACKEND_FAILURE_MODE decides)`,
      },
    ]);

    // 20 clients spend their limit of 30 this hour.
    const limit = ruleOf(30, Unit.HOUR, 'd.spent');
    const spent = Array.from({ length: 20 }, (_, i) => uniqueKey(`spent${i}`));
    for (const k of spent) expect(await store.increment([op(k, 30, 3600, limit)], 0)).toEqual([30]);
    // The first check after them has taken its baseline.
    await store.checkEvictions();

    // A spray of distinct keys, through the store as a flood of descriptor values would come.
    for (let i = 0; i < 600; i++) {
      await store.increment(
        Array.from({ length: 100 }, (_, j) => op(uniqueKey(`spray${i}_${j}`), 1, 3600, limit)),
        0,
      );
    }
    await store.checkEvictions();
    const reset = (await Promise.all(spent.map((k) => server.cli(['GET', k])))).filter((v) => v.trim() === '').length;
    expect(reset).toBeGreaterThan(0);
    const evicted = stats.counter('ratelimit.redis.evicted_keys').value;
    // Every reset counter is among the evicted keys counted.
    expect(evicted).toBeGreaterThanOrEqual(reset);
    expect(evicted).toBeGreaterThan(1000);
    await waitFor(() => said(/evicts no more keys/).length === 1, 'a check that finds the evictions stopped');
    const warned = said(/evicted \d+ keys? since the last check/);
    expect(warned).toEqual([
      {
        level: 'warn',
        msg: expect.stringMatching(
          new RegExp(
            `^redis: ${server.address} evicted \\d+ keys since the last check \\(maxmemory 2097152 bytes, maxmemory-policy allkeys-lru\\): each evicted counter restarted at zero, loosening its limit; see ratelimit\\.redis\\.evicted_keys$`,
          ),
        ),
      },
    ]);
    expect(said(/evicts no more keys/)).toEqual([{ level: 'info', msg: `redis: ${server.address} evicts no more keys (${stats.counter('ratelimit.redis.evicted_keys').value} evicted since the warning)` }]);

    // Policy changed to noeviction: seen, and the gauge goes down.
    await server.cli(['CONFIG', 'SET', 'maxmemory-policy', 'noeviction']);
    await waitFor(() => stats.gauge('ratelimit.redis.may_evict').value === 0, 'the new policy to be read');
    expect(said(/no longer evicts counters/)).toEqual([
      { level: 'info', msg: `redis: ${server.address} no longer evicts counters (maxmemory 2097152 bytes, maxmemory-policy noeviction)` },
    ]);
  }, 60_000);

  it('noeviction: nothing may be evicted; a full Redis answers new counters with OOM errors, said once, and once when it has room again', async () => {
    const { server, store, stats, said } = await setup(['--maxmemory', '2mb', '--maxmemory-policy', 'noeviction']);
    await store.checkEvictions();
    expect(stats.gauge('ratelimit.redis.may_evict').value).toBe(0);
    const kept = uniqueKey('kept');
    expect(await store.increment([op(kept, 5)], 0)).toEqual([5]);
    let refused: Error | undefined;
    for (let i = 0; refused === undefined && i < 2000; i++) {
      try {
        await store.increment(Array.from({ length: 100 }, (_, j) => op(uniqueKey(`fill${i}_${j}`))), 0);
      } catch (err) {
        refused = err as Error;
      }
    }
    expect(refused?.message).toMatch(/^OOM command not allowed/);
    // Full for good while the refusals are counted: at the edge a small write squeezes in once the
    // big batch's reply has left Redis's buffers (CI saw one go through).
    await server.cli(['CONFIG', 'SET', 'maxmemory', '1']);
    // Followed from the answers: one line, however many calls are refused.
    for (let i = 0; i < 5; i++) await expect(store.increment([op(uniqueKey('more'))], 0)).rejects.toThrow(/^OOM /);
    expect(said(/is full/)).toEqual([
      {
        level: 'warn',
        msg: `redis: ${server.address} is full and refuses every increment, of existing counters too (OOM command not allowed when used memory > 'maxmemory'.): those calls fail, as BACKEND_FAILURE_MODE decides, until counters expire or maxmemory is raised`,
      },
    ]);
    expect(stats.gauge('ratelimit.redis.oom').value).toBe(1);
    // Nothing was evicted: the first counter is intact.
    expect(await server.cli(['GET', kept])).toBe('5\n');
    await store.checkEvictions();
    expect(stats.counter('ratelimit.redis.evicted_keys').value).toBe(0);
    await server.cli(['CONFIG', 'SET', 'maxmemory', '2mb']);
    await server.cli(['FLUSHALL']);
    expect(await store.increment([op(kept)], 0)).toEqual([1]);
    expect(said(/has room/)).toEqual([{ level: 'info', msg: `redis: ${server.address} has room for counters again` }]);
    expect(stats.gauge('ratelimit.redis.oom').value).toBe(0);
    expect(said(/may evict|evicted/)).toEqual([]);
  }, 60_000);

  it('a Redis that forbids CONFIG is read from INFO: volatile-ttl with maxmemory is warned about, noeviction is not', async () => {
    const evicting = await setup(['--rename-command', 'CONFIG', '', '--maxmemory', '100mb', '--maxmemory-policy', 'volatile-ttl']);
    await waitFor(() => evicting.stats.gauge('ratelimit.redis.may_evict').value === 1, 'the policy to be read from INFO');
    expect(evicting.said(/may evict counters \(maxmemory 104857600 bytes, maxmemory-policy volatile-ttl\)/)).toHaveLength(1);
    expect(evicting.said(/cannot tell/)).toEqual([]);

    const safe = await setup(['--rename-command', 'CONFIG', '', '--maxmemory', '100mb', '--maxmemory-policy', 'noeviction']);
    await safe.store.checkEvictions();
    await safe.store.checkEvictions();
    expect(safe.stats.gauge('ratelimit.redis.may_evict').value).toBe(0);
    expect(safe.said(/evict|cannot tell/)).toEqual([]);
  });

  it('a user allowed neither CONFIG nor INFO: said once, nothing else changes', async () => {
    const { store, said, stats } = await setup(['--user', 'counter', 'on', '>pw', '~*', '&*', '+@all', '-config', '-info'], { auth: 'counter:pw' });
    await waitFor(() => said(/cannot tell/).length === 1, 'the line');
    await store.checkEvictions();
    await store.checkEvictions();
    expect(said(/cannot tell/)).toEqual([
      { level: 'warn', msg: expect.stringMatching(/^redis: cannot tell whether 127\.0\.0\.1:\d+ may evict counters: CONFIG GET maxmemory-policy answered NOPERM.*, INFO answered NOPERM/) },
    ]);
    expect(stats.gauge('ratelimit.redis.may_evict').value).toBe(0);
    expect(await store.increment([op(uniqueKey('still'))], 0)).toEqual([1]);
  });
});
