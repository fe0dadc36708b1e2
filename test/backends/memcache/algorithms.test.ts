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
    # Minutes, not seconds: memcached's clock ticks once a second, so a key added to live 1 s may
    # be gone a few milliseconds later (CI lost the per-second count of six quick requests).
    rate_limit: {unit: minute, requests_per_unit: 5}
    rate_limits:
      - {unit: hour, requests_per_unit: 8, algorithm: sliding_window}
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

/**
 * The test's clock is simulated, but memcached expires a window's key a unit (1 s) of real time
 * after it was added: the stores agree only when each simulated second's requests took under a
 * real second. Drives `arrivals` on fresh keys until they did (at most three times; a loaded CI
 * machine once took longer and memcached forgot a window's count).
 */
async function driveInTime(key: string, value: string, arrivals: readonly number[]): Promise<number[]> {
  for (let attempt = 1; ; attempt++) {
    const c = setup(store, uniqueKey(key).replace(/[^A-Za-z0-9_]/g, '_') + '_', YAML);
    const started = new Map<number, number>();
    let slow = false;
    // Until every increment has landed or failed (bounded by the store's own timeout).
    const idle = async (): Promise<void> => {
      await store.idle();
      const second = Math.floor(c.clock.nowMs() / 1000);
      const first = started.get(second) ?? Date.now();
      started.set(second, first);
      if (Date.now() - first >= 800) slow = true;
    };
    const admitted = await drive(c, key, value, arrivals, idle);
    if (!slow || attempt === 3) return admitted;
  }
}

describe('memcache store: algorithms', () => {
  test.each(['fixed', 'sliding'])('%s: same admissions as the memory store, within the bound', async (key) => {
    const prefix = uniqueKey(key).replace(/[^A-Za-z0-9_]/g, '_') + '_';
    const m = setup(new MemoryStore({ maxKeys: 10_000 }), prefix, YAML);
    const cs = await driveInTime(key, 's', steady(START));
    const cb = await driveInTime(key, 'b', bursty(START + 60_000));
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
