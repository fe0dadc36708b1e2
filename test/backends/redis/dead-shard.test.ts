/**
 * Each node of a real 3-master cluster is followed: every master is asked whether it may evict
 * counters; and a circuit per node: one master is killed (SIGKILL) under load, and
 * only the requests with keys on it fail, at once (not after REDIS_TIMEOUT), while the two other
 * shards count every call; the node's circuit is shown (gauge, counter, one line per change) and
 * closes when the node is back. The cluster runs with `cluster-require-full-coverage no`, so the
 * healthy nodes keep answering their own slots once the cluster has marked the dead one failed.
 */
import type { RedisStore } from '../../../src/backends/redis/store';
import { StoreError } from '../../../src/core/store';
import { systemClock } from '../../../src/platform/clock';
import { StatsStore } from '../../../src/stats/store';
import { startCluster, type RedisClusterSet, type RedisServer } from '../../support/redis';
import { connectStore, op, recordingLogger, redisSettings, uniqueKey } from './helpers';
import { waitFor } from '../../support/wait';

const TIMEOUT_MS = 500;
const OPEN_MS = 300;
/** A call slower than this waited for Redis (a probe, or one in flight at the kill), not for nothing. */
const SLOW_MS = TIMEOUT_MS / 2;

let cluster: RedisClusterSet;

beforeAll(async () => {
  cluster = await startCluster({
    masters: 3,
    extraArgs: ['--cluster-require-full-coverage', 'no', '--maxmemory', '100mb', '--maxmemory-policy', 'allkeys-lru'],
  });
}, 60_000);

afterAll(async () => {
  await cluster?.stop();
});

interface Shard {
  node: RedisServer;
  key: string;
  ok: number;
  failed: number;
  slow: number;
  errors: Set<string>;
  /** Only successes of calls started at or after this time count: an answer read after a reset can belong to a call sent before it. */
  countFrom: number;
}

/** One key per node, ordered as `cluster.nodes`. */
async function shards(): Promise<Shard[]> {
  const byPort = new Map<number, string>();
  for (let i = 0; byPort.size < cluster.nodes.length; i++) {
    const k = uniqueKey(`shard${i}`);
    const port = (await cluster.nodeForKey(k)).port;
    if (!byPort.has(port)) byPort.set(port, k);
  }
  return cluster.nodes.map((node) => ({ node, key: byPort.get(node.port)!, ok: 0, failed: 0, slow: 0, errors: new Set<string>(), countFrom: 0 }));
}

/** Calls the store for each shard's key in its own loop, one call in flight per shard, until stopped. */
function load(store: RedisStore, list: Shard[]): { stop: () => Promise<void> } {
  let stopped = false;
  const loops = list.map(async (s) => {
    while (!stopped) {
      const t0 = Date.now();
      try {
        await store.increment([op(s.key, 1, 3600)], 0);
        if (t0 >= s.countFrom) s.ok++;
      } catch (err) {
        expect(err).toBeInstanceOf(StoreError);
        expect((err as StoreError).transient).toBe(true);
        s.failed++;
        s.errors.add((err as Error).message.replace(/\d+ ms/, 'N ms'));
        if (Date.now() - t0 >= SLOW_MS) s.slow++;
      }
      // A macrotask between calls: calls refused at once must not starve the event loop.
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
  });
  return {
    stop: async () => {
      stopped = true;
      await Promise.all(loops);
    },
  };
}

const reset = (list: Shard[], from = Date.now()): void => {
  for (const s of list) {
    s.ok = s.failed = s.slow = 0;
    s.errors.clear();
    s.countFrom = from;
  }
};

describe('redis cluster: the state of each node', () => {
  it('asks every master whether it may evict counters: one line per node, may_evict counts them', async () => {
    const logger = recordingLogger();
    const stats = new StatsStore();
    const store = await connectStore(redisSettings({ type: 'cluster', url: cluster.url, timeoutMs: TIMEOUT_MS, evictionCheckIntervalMs: 100 }), { logger, stats });
    try {
      await waitFor(() => stats.gauge('ratelimit.redis.may_evict').value === 3, 'every master to be read');
      await store.checkEvictions();
      const lines = logger.lines.filter((l) => /may evict/.test(l.msg));
      expect(lines.map((l) => /^redis: (\S+) may evict counters \(maxmemory 104857600 bytes, maxmemory-policy allkeys-lru\)/.exec(l.msg)?.[1]).sort()).toEqual(
        cluster.nodes.map((n) => n.address).sort(),
      );
    } finally {
      await store.close();
    }
  });
});

describe('redis cluster: one dead shard', () => {
  it('fails only the dead shard\'s keys, at once, and shows its circuit until it is back', async () => {
    const logger = recordingLogger();
    const stats = new StatsStore();
    const store = await connectStore(redisSettings({ type: 'cluster', url: cluster.url, timeoutMs: TIMEOUT_MS, healthCheckActiveConnection: true }), {
      logger,
      stats,
      circuit: { failures: 5, openMs: OPEN_MS, clock: systemClock },
    });
    const list = await shards();
    const [, dead] = [list[0]!, list[1]!];
    const healthy = list.filter((s) => s !== dead);
    const lines = (what: RegExp) => logger.lines.filter((l) => what.test(l.msg));
    const running = load(store, list);
    try {
      await waitFor(() => list.every((s) => s.ok >= 20), 'every shard to count');
      expect(list.map((s) => s.failed)).toEqual([0, 0, 0]);

      const killedAt = Date.now();
      await dead.node.kill();
      // From the moment the process is gone: a call sent before it may still be answered OK (Redis counted it).
      reset(list);
      await waitFor(() => lines(/circuit opened/).length > 0, 'the dead node\'s circuit to open');
      // Enough calls for several open periods (each lets one probe through).
      await waitFor(() => dead.failed >= 300 && healthy.every((s) => s.ok >= 300), 'calls on every shard', 30_000);
      const elapsed = Date.now() - killedAt;

      for (const s of healthy) expect({ port: s.node.port, failed: s.failed, errors: [...s.errors] }).toEqual({ port: s.node.port, failed: 0, errors: [] });
      expect(dead.ok).toBe(0);
      // Only the call in flight at the kill and one probe per open period waited for Redis.
      expect(dead.slow).toBeLessThanOrEqual(2 + Math.ceil(elapsed / OPEN_MS));
      expect(dead.failed - dead.slow).toBeGreaterThan(250);
      // Refused at once, naming the node and why.
      expect([...dead.errors].filter((e) => e.startsWith(`redis node ${dead.node.address} circuit open: connection lost`))).not.toEqual([]);
      expect(lines(/circuit opened/)).toEqual([
        { level: 'warn', msg: expect.stringMatching(new RegExp(`^redis node ${dead.node.address} circuit opened: requests with a key on it fail at once for ${OPEN_MS} ms at a time \\(connection lost`)) },
      ]);
      expect(stats.gauge('ratelimit.redis.circuit_open').value).toBe(1);
      expect(stats.counter('ratelimit.redis.circuit_opened').value).toBe(1);
      // One shard down does not take the store out of health (its circuit shows it).
      expect(store.isHealthy()).toBe(true);

      // Back: its keys count again and the circuit closes, once.
      await dead.node.restart();
      reset(list);
      await waitFor(() => dead.ok >= 20, 'the restarted shard to count', 30_000);
      expect(lines(/circuit closed/)).toEqual([{ level: 'info', msg: expect.stringMatching(new RegExp(`^redis node ${dead.node.address} circuit closed: `)) }]);
      expect(stats.gauge('ratelimit.redis.circuit_open').value).toBe(0);
    } finally {
      await running.stop();
      await store.close();
    }
    for (const s of healthy) expect(s.failed).toBe(0);
  }, 90_000);
});
