/**
 * REDIS_TYPE=sentinel against a master, a replica and three sentinels (with REDIS_AUTH for the
 * data nodes and REDIS_SENTINEL_AUTH for the sentinels): counting through the master the sentinels
 * name, then a failover that the same store survives.
 */
import type { RedisStore } from '../../../src/backends/redis/store';
import { StoreError } from '../../../src/core/store';
import { startSentinelSet, type SentinelSet } from '../../support/redis';
import { connectStore, op, redisSettings, uniqueKey } from './helpers';
import { waitFor } from '../../support/wait';

let set: SentinelSet;
let store: RedisStore;

beforeAll(async () => {
  set = await startSentinelSet({ password: 'data-pw', sentinelPassword: 'sentinel-pw' });
}, 60_000);

afterAll(async () => {
  await store?.close();
  await set?.stop();
});

describe('redis store in sentinel mode', () => {
  it('counts through the master the sentinels name, and survives a failover without being recreated', async () => {
    store = await connectStore(
      redisSettings({
        type: 'sentinel',
        url: set.url,
        auth: 'data-pw',
        sentinelAuth: 'sentinel-pw',
        timeoutMs: 1000,
        poolSize: 2,
        healthCheckActiveConnection: true,
      }),
    );
    const key = uniqueKey('sentinel');
    expect(await store.increment([op(key, 2, 3600)], 0)).toEqual([2]);
    const first = await set.master();
    expect(first).toBe(set.servers[0]);
    expect(await first.cli(['GET', key])).toBe('2\n');
    // Wait until the replica has the key, so the count survives the failover.
    await waitFor(async () => (await set.servers[1]!.cli(['GET', key])) === '2\n', 'replication', 5000);

    const promoted = await set.failover();
    expect(promoted).toBe(set.servers[1]);

    // A bounded number of requests may fail while the store finds the new master.
    let failures = 0;
    await waitFor(async () => {
        try {
          await store.increment([op(uniqueKey('probe'))], 0);
          return true;
        } catch (err) {
          expect(err).toBeInstanceOf(StoreError);
          failures++;
          return false;
        }
      }, 'the store to count on the new master', 20_000);
    expect(failures).toBeLessThan(200);
    expect(await store.increment([op(key, 1, 3600)], 0)).toEqual([3]);
    expect(await promoted.cli(['GET', key])).toBe('3\n');
    await waitFor(() => store.isHealthy(), 'health to be back', 5000);
  }, 60_000);
});
