/**
 * REDIS_TYPE=cluster against a real 3-master cluster: keys of one request spread over slots,
 * one pipeline per slot, REDIS_CLUSTER_PIPELINE_PARALLELISM, batching and stop-increment.
 */
import { Pipeline } from 'ioredis';
import type { RedisStore } from '../../../src/backends/redis/store';
import { Unit } from '../../../src/core/rls';
import { StatsStore } from '../../../src/stats/store';
import { StoreError } from '../../../src/core/store';
import { startCluster, type RedisClusterSet } from '../../support/redis';
import { connectStore, op, redisSettings, ruleOf, timed, uniqueKey } from './helpers';
import { waitFor } from '../../support/wait';

let cluster: RedisClusterSet;

beforeAll(async () => {
  cluster = await startCluster({ masters: 3 });
}, 60_000);

afterAll(async () => {
  await cluster?.stop();
});

type Exec = () => Promise<unknown>;
const proto = Pipeline.prototype as unknown as { exec: Exec };

/** Counts pipeline execs and the most in flight at once. */
function trackExec(): { calls: () => number; maxInFlight: () => number; restore: () => void } {
  const original = proto.exec;
  let calls = 0;
  let inFlight = 0;
  let max = 0;
  const spy = jest.spyOn(proto, 'exec').mockImplementation(function (this: unknown) {
    calls++;
    inFlight++;
    max = Math.max(max, inFlight);
    const p = original.call(this);
    const done = (): void => {
      inFlight--;
    };
    p.then(done, done);
    return p;
  });
  return { calls: () => calls, maxInFlight: () => max, restore: () => spy.mockRestore() };
}

/** `n` keys in `n` different slots. */
async function keysInDistinctSlots(n: number, name: string): Promise<string[]> {
  const keys: string[] = [];
  const slots = new Set<number>();
  for (let i = 0; keys.length < n; i++) {
    const k = uniqueKey(`${name}${i}`);
    const slot = await cluster.keySlot(k);
    if (!slots.has(slot)) {
      slots.add(slot);
      keys.push(k);
    }
  }
  return keys;
}

describe('redis store in cluster mode', () => {
  let store: RedisStore;
  afterEach(async () => {
    jest.restoreAllMocks();
    await store?.close();
  });

  it('answers a request whose keys live on different nodes, each key stored on the node of its slot', async () => {
    const statsStore = new StatsStore();
    store = await connectStore(redisSettings({ type: 'cluster', url: cluster.url }), { stats: statsStore });
    expect(store.isHealthy()).toBe(true);
    // Keys until all three nodes are covered.
    const keys: string[] = [];
    const owners = new Set<number>();
    for (let i = 0; owners.size < 3 || keys.length < 4; i++) {
      const k = uniqueKey(`spread${i}`);
      owners.add((await cluster.nodeForKey(k)).port);
      keys.push(k);
    }
    const slots = new Set(await Promise.all(keys.map((k) => cluster.keySlot(k))));
    expect(slots.size).toBeGreaterThan(1);

    const tracker = trackExec();
    const counts = await store.increment(
      keys.map((k, i) => op(k, i + 1, 3600)),
      0,
    );
    tracker.restore();
    expect(counts).toEqual(keys.map((_, i) => i + 1));
    // One pipeline per slot.
    expect(tracker.calls()).toBe(slots.size);

    for (let i = 0; i < keys.length; i++) {
      const k = keys[i]!;
      const owner = await cluster.nodeForKey(k);
      expect(await owner.cli(['GET', k])).toBe(`${i + 1}\n`);
      const ttl = Number(await owner.cli(['TTL', k]));
      expect(ttl).toBeGreaterThan(3500);
      const slot = String(await cluster.keySlot(k));
      for (const n of cluster.nodes) {
        if (n !== owner) expect(await n.cli(['CLUSTER', 'COUNTKEYSINSLOT', slot])).toBe('0\n');
      }
    }
    // A second request adds to the same counters.
    expect(await store.increment(keys.map((k) => op(k, 1, 3600)), 0)).toEqual(keys.map((_, i) => i + 2));
    expect(statsStore.gauge('ratelimit.redis_pool.cx_active').value).toBeGreaterThanOrEqual(3);
  });

  it('REDIS_BATCH_SCRIPT: one EVAL per slot group, each key counted on the node of its slot', async () => {
    store = await connectStore(redisSettings({ type: 'cluster', url: cluster.url, batchScript: true }));
    const keys = await keysInDistinctSlots(5, 'script');
    const tracker = trackExec();
    expect(await store.increment(keys.map((k, i) => op(k, i + 1, 3600)), 0)).toEqual([1, 2, 3, 4, 5]);
    tracker.restore();
    expect(tracker.calls()).toBe(5);
    expect(await store.increment(keys.map((k) => op(k, 1, 3600)), 0)).toEqual([2, 3, 4, 5, 6]);
    for (let i = 0; i < keys.length; i++) {
      const owner = await cluster.nodeForKey(keys[i]!);
      expect(await owner.cli(['GET', keys[i]!])).toBe(`${i + 2}\n`);
      expect(Number(await owner.cli(['TTL', keys[i]!]))).toBeGreaterThan(3500);
    }
  });

  it('keys sharing a hash tag go in one pipeline', async () => {
    store = await connectStore(redisSettings({ type: 'cluster', url: cluster.url }));
    const tag = uniqueKey('tag');
    const tracker = trackExec();
    expect(await store.increment([op(`{${tag}}a`), op(`{${tag}}b`, 2), op(`{${tag}}a`)], 0)).toEqual([1, 2, 2]);
    tracker.restore();
    expect(tracker.calls()).toBe(1);
  });

  it('sends every slot group at once by default and caps them with REDIS_CLUSTER_PIPELINE_PARALLELISM > 1', async () => {
    const keys = await keysInDistinctSlots(6, 'par');
    store = await connectStore(redisSettings({ type: 'cluster', url: cluster.url, clusterPipelineParallelism: 1 }));
    let tracker = trackExec();
    expect(await store.increment(keys.map((k) => op(k)), 0)).toEqual([1, 1, 1, 1, 1, 1]);
    tracker.restore();
    expect(tracker.calls()).toBe(6);
    expect(tracker.maxInFlight()).toBe(6);
    await store.close();

    store = await connectStore(redisSettings({ type: 'cluster', url: cluster.url, clusterPipelineParallelism: 2 }));
    tracker = trackExec();
    expect(await store.increment(keys.map((k) => op(k)), 0)).toEqual([2, 2, 2, 2, 2, 2]);
    tracker.restore();
    expect(tracker.calls()).toBe(6);
    expect(tracker.maxInFlight()).toBe(2);
  });

  it('batches concurrent requests per slot with REDIS_PIPELINE_WINDOW', async () => {
    const keys = await keysInDistinctSlots(3, 'win');
    store = await connectStore(redisSettings({ type: 'cluster', url: cluster.url, pipelineWindowMs: 5 }));
    const tracker = trackExec();
    const results = await Promise.all(Array.from({ length: 20 }, () => store.increment(keys.map((k) => op(k)), 0)));
    tracker.restore();
    expect(tracker.calls()).toBeLessThan(20 * 3);
    for (let i = 0; i < 3; i++) {
      expect(results.map((c) => c[i]).sort((a, b) => a! - b!)).toEqual(Array.from({ length: 20 }, (_, n) => n + 1));
    }
  });

  it('applies STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT across slots', async () => {
    const [k4, k5] = await keysInDistinctSlots(2, 'stop');
    const n4 = await cluster.nodeForKey(k4!);
    const n5 = await cluster.nodeForKey(k5!);
    await n4.cli(['SET', k4!, '13']);
    await n5.cli(['SET', k5!, '13']);
    store = await connectStore(redisSettings({ type: 'cluster', url: cluster.url }), { stopIncrementWhenOverLimit: true });
    const r15 = ruleOf(15, Unit.HOUR, 'd.c15');
    const r14 = ruleOf(14, Unit.HOUR, 'd.c14');
    expect(await store.increment([op(k4!, 2, 3600, r15), op(k5!, 2, 3600, r14)], 0)).toEqual([13, 15]);
    expect(await n4.cli(['GET', k4!])).toBe('13\n');
    expect(await n5.cli(['GET', k5!])).toBe('15\n');
  });

  // Last: it takes a node down.
  it('fails fast with a transient StoreError while a node is down, and recovers when it is back', async () => {
    const [k] = await keysInDistinctSlots(1, 'down');
    const node = await cluster.nodeForKey(k!);
    store = await connectStore(redisSettings({ type: 'cluster', url: cluster.url, timeoutMs: 500 }));
    expect(await store.increment([op(k!)], 0)).toEqual([1]);
    await node.kill();
    for (let i = 0; i < 3; i++) {
      const r = await timed(store.increment([op(k!)], 0));
      expect(r.error).toBeInstanceOf(StoreError);
      expect((r.error as StoreError).transient).toBe(true);
      expect(r.ms).toBeLessThan(500 + 400);
    }
    await node.restart();
    await waitFor(async () => {
        try {
          await store.increment([op(uniqueKey('probe'))], 0);
          return (await store.increment([op(k!, 0)], 0))[0] !== undefined;
        } catch {
          return false;
        }
      }, 'counting to resume', 20_000);
    // The restarted node lost its data (no persistence): counting starts again, once per request.
    const before = (await store.increment([op(k!, 0)], 0))[0]!;
    expect(await store.increment([op(k!)], 0)).toEqual([before + 1]);
    expect(await node.cli(['GET', k!])).toBe(`${before + 1}\n`);
  }, 40_000);
});
