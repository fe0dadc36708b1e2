/**
 * Algorithms (extension) on the Memcached store against a real memcached: sliding_window reads
 * both windows in the request's multiget and increments admitted hits in the background (same
 * admissions as the memory store once increments have landed); token_bucket is refused at
 * config load while the store is open, with an error naming the rule.
 */
import { MemoryStore } from '../../../src/backends/memory';
import type { MemcacheStore } from '../../../src/backends/memcache/store';
import { loadConfig } from '../../../src/config/load';
import { StatsStore } from '../../../src/stats/store';
import { MemcachedServer } from '../../support/memcached';
import { ALGO_YAML, BOUND, L, bursty, drive, maxInWindow, setup, steady } from '../../limiter/algorithm-cases';
import { createStore, uniqueKey } from './helpers';

const YAML = `
domain: algo
descriptors:
  - key: fixed
    rate_limit: {unit: second, requests_per_unit: ${L}}
  - key: sliding
    rate_limit: {unit: second, requests_per_unit: ${L}, algorithm: sliding_window}
  - key: multi
    rate_limit: {unit: second, requests_per_unit: 5}
    rate_limits:
      - {unit: minute, requests_per_unit: 8, algorithm: sliding_window}
`;

let mc: MemcachedServer;
let store: MemcacheStore;

beforeAll(async () => {
  mc = await MemcachedServer.start();
  store = await createStore([mc.address], { stats: new StatsStore() });
});

afterAll(async () => {
  await store?.close();
  await mc?.stop();
});

const START = 1_700_000_000_000;

describe('memcache store: algorithms', () => {
  test.each(['fixed', 'sliding'])('%s: same admissions as the memory store, within the bound', async (key) => {
    const prefix = uniqueKey(key).replace(/[^A-Za-z0-9_]/g, '_') + '_';
    const c = setup(store, prefix, YAML);
    const m = setup(new MemoryStore({ maxKeys: 10_000 }), prefix, YAML);
    // Until every increment has landed or failed (bounded by the store's own timeout): a fixed
    // wait lets a loaded machine's late increment miss the next request.
    const idle = () => store.idle();
    const cs = await drive(c, key, 's', steady(START), idle);
    const cb = await drive(c, key, 'b', bursty(START + 60_000), idle);
    expect(cs).toEqual(await drive(m, key, 's', steady(START)));
    expect(cb).toEqual(await drive(m, key, 'b', bursty(START + 60_000)));
    expect(maxInWindow(cs, 1000)).toBeLessThanOrEqual(BOUND[key]!.steady);
    expect(maxInWindow(cb, 1000)).toBeLessThanOrEqual(BOUND[key]!.bursty);
  });

  test('several limits with a sliding window', async () => {
    const c = setup(store, uniqueKey('multi').replace(/[^A-Za-z0-9_]/g, '_') + '_', YAML);
    c.clock.set(1_700_000_200 * 1000);
    const r = await c.ask('multi', 'y');
    expect(r.statuses[0]).toMatchObject({ limitRemaining: 4 });
    await store.idle();
    for (let i = 0; i < 4; i++) {
      await c.ask('multi', 'y');
      await store.idle();
    }
    expect((await c.ask('multi', 'y')).overallCode).toBe(2);
  });

  test('token_bucket: a clear config error naming the rule, from the store\'s restrictions', () => {
    const load = () =>
      loadConfig([{ name: 'algo.yaml', content: ALGO_YAML }], {
        mergeDomainConfig: false,
        stats: new StatsStore(),
        restrictions: store.restrictions,
      });
    expect(load).toThrow(
      "algo.yaml: rate limit 'algo.bucket': algorithm token_bucket is not supported by the memcache store (memcached has no atomic read-modify-write)",
    );
  });
});
