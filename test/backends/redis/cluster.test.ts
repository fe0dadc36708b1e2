/**
 * REDIS_TYPE=cluster against a real 3-master cluster: keys of one request spread over nodes, one
 * write per node (to the node ioredis's slot map names), REDIS_CLUSTER_PIPELINE_PARALLELISM,
 * batching, stop-increment, redirects when the slot map is stale or a slot migrates, the ioredis
 * cluster pipeline while a node connection is not ready, and the part of ioredis's public API this
 * relies on (its slot map, its nodes and their `+node` / `-node` events).
 */
import { Pipeline, type Cluster, type Redis } from 'ioredis';
import type { RedisConnection } from '../../../src/backends/redis/connection';
import type { RedisStore } from '../../../src/backends/redis/store';
import { WirePipeline } from '../../../src/backends/redis/wire';
import { Unit } from '../../../src/core/rls';
import { StatsStore } from '../../../src/stats/store';
import { StoreError } from '../../../src/core/store';
import { startCluster, type RedisClusterSet, type RedisServer } from '../../support/redis';
import { rule } from '../../limiter/helpers';
import { connectStore, op, redisSettings, ruleOf, stats, timed, uniqueKey } from './helpers';
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

/** Counts ioredis pipeline execs (the per-slot path through the cluster client). */
function trackExec(): { calls: () => number; restore: () => void } {
  let calls = 0;
  const original = proto.exec;
  const spy = jest.spyOn(proto, 'exec').mockImplementation(function (this: unknown) {
    calls++;
    return original.call(this);
  });
  return { calls: () => calls, restore: () => spy.mockRestore() };
}

/** Records the store's direct writes (WirePipeline.send): the port of each, and the most in flight at once. */
function trackWrites(): { ports: () => number[]; maxInFlight: () => number; restore: () => void } {
  const original = WirePipeline.prototype.send;
  const ports: number[] = [];
  let inFlight = 0;
  let max = 0;
  const spy = jest.spyOn(WirePipeline.prototype, 'send').mockImplementation(function (this: WirePipeline, redis, onDone) {
    ports.push(redis.options.port!);
    max = Math.max(max, ++inFlight);
    original.call(this, redis, (replies) => {
      inFlight--;
      onDone(replies);
    });
  });
  return { ports: () => ports.slice().sort((a, b) => a - b), maxInFlight: () => max, restore: () => spy.mockRestore() };
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

/** One key on each node, ordered as `cluster.nodes`. */
async function keyPerNode(name: string): Promise<string[]> {
  const byPort = new Map<number, string>();
  for (let i = 0; byPort.size < cluster.nodes.length; i++) {
    const k = uniqueKey(`${name}${i}`);
    const port = (await cluster.nodeForKey(k)).port;
    if (!byPort.has(port)) byPort.set(port, k);
  }
  return cluster.nodes.map((n) => byPort.get(n.port)!);
}

const ports = (nodes: readonly RedisServer[]): number[] => nodes.map((n) => n.port).sort((a, b) => a - b);


/** The store's main connection (private): the tests below reach into ioredis's cluster through it. */
function connectionOf(s: RedisStore): RedisConnection {
  return (s as unknown as { main: RedisConnection }).main;
}

function clusterOf(s: RedisStore): Cluster {
  return connectionOf(s).client() as Cluster;
}

/** ioredis's connection to the node at `address` (public API: the cluster's nodes and their options). */
function nodeConnection(s: RedisStore, address: string): Redis | undefined {
  return clusterOf(s)
    .nodes('all')
    .find((n) => `${n.options.host}:${n.options.port}` === address);
}

/**
 * Holds ioredis's reloads of its slot map (its 5-second timer's, and those a MOVED asks for) until
 * the returned function is called, which runs them: a reload landing between {@link staleSlot}
 * and the write would make the map right again, and the write go to the owner at once.
 */
function holdSlotReloads(s: RedisStore): () => void {
  const c = clusterOf(s);
  const original = c.refreshSlotsCache;
  const held: Array<Parameters<Cluster['refreshSlotsCache']>[0]> = [];
  c.refreshSlotsCache = ((callback?: Parameters<Cluster['refreshSlotsCache']>[0]) => {
    held.push(callback);
  }) as Cluster['refreshSlotsCache'];
  return () => {
    c.refreshSlotsCache = original;
    for (const callback of held) original.call(c, callback);
  };
}

/** Points ioredis's slot map for `key` at a node that does not own it (a stale map); returns both nodes. */
async function staleSlot(s: RedisStore, key: string): Promise<{ owner: RedisServer; wrong: RedisServer }> {
  const owner = await cluster.nodeForKey(key);
  const wrong = cluster.nodes.find((n) => n !== owner)!;
  const slot = await cluster.keySlot(key);
  // One array is shared by a whole slot range: replace this slot's, do not edit it.
  clusterOf(s).slots[slot] = [wrong.address];
  // The fast path writes only to a ready connection (else the cluster client routes the op): wait
  // for ioredis's connection to the wrong node, which may still be connecting on a loaded machine.
  await waitFor(() => connectionOf(s).readyMaster(slot) !== undefined, `the connection to ${wrong.address} ready`);
  return { owner, wrong };
}

async function keysInSlot(node: RedisServer, key: string): Promise<number> {
  return Number(await node.cli(['CLUSTER', 'COUNTKEYSINSLOT', String(await cluster.keySlot(key))]));
}

describe('redis store in cluster mode', () => {
  let store: RedisStore;
  afterEach(async () => {
    jest.restoreAllMocks();
    await store?.close();
  });

  it('relies only on ioredis\'s public API: its slot map and its nodes name the node of a key', async () => {
    store = await connectStore(redisSettings({ type: 'cluster', url: cluster.url }));
    const c = clusterOf(store);
    expect(c.slots).toHaveLength(16384);
    expect(typeof c.refreshSlotsCache).toBe('function');
    for (const k of await keyPerNode('internals')) {
      const owner = await cluster.nodeForKey(k);
      const slot = await cluster.keySlot(k);
      expect(c.slots[slot]![0]).toBe(owner.address);
      const node = connectionOf(store).readyMaster(slot);
      expect(node).toBe(nodeConnection(store, owner.address));
      expect(node!.options.port).toBe(owner.port);
    }
  });

  it('answers a request whose keys live on different nodes: one write per node, each key stored on the node of its slot', async () => {
    const statsStore = new StatsStore();
    store = await connectStore(redisSettings({ type: 'cluster', url: cluster.url }), { stats: statsStore });
    expect(store.isHealthy()).toBe(true);
    const keys = [...(await keyPerNode('spread')), ...(await keyPerNode('spread2'))];
    const owners = await Promise.all(keys.map((k) => cluster.nodeForKey(k)));
    const slots = new Set(await Promise.all(keys.map((k) => cluster.keySlot(k))));
    expect(slots.size).toBeGreaterThan(3);

    const execs = trackExec();
    const writes = trackWrites();
    const counts = await store.increment(
      keys.map((k, i) => op(k, i + 1, 3600)),
      0,
    );
    writes.restore();
    execs.restore();
    expect(counts).toEqual(keys.map((_, i) => i + 1));
    expect(writes.ports()).toEqual(ports(cluster.nodes));
    expect(execs.calls()).toBe(0);

    for (let i = 0; i < keys.length; i++) {
      const k = keys[i]!;
      const owner = owners[i]!;
      expect(await owner.cli(['GET', k])).toBe(`${i + 1}\n`);
      const ttl = Number(await owner.cli(['TTL', k]));
      expect(ttl).toBeGreaterThan(3500);
      for (const n of cluster.nodes) {
        if (n !== owner) expect(await keysInSlot(n, k)).toBe(0);
      }
    }
    // A second request adds to the same counters.
    expect(await store.increment(keys.map((k) => op(k, 1, 3600)), 0)).toEqual(keys.map((_, i) => i + 2));
    expect(statsStore.gauge('ratelimit.redis_pool.cx_active').value).toBeGreaterThanOrEqual(3);
  });

  it('keys of one node go in one write, whatever their slots', async () => {
    store = await connectStore(redisSettings({ type: 'cluster', url: cluster.url }));
    const node = cluster.nodes[0]!;
    const keys: string[] = [];
    const slots = new Set<number>();
    for (let i = 0; keys.length < 3; i++) {
      const k = uniqueKey(`onenode${i}`);
      const slot = await cluster.keySlot(k);
      if ((await cluster.nodeForKey(k)) === node && !slots.has(slot)) {
        slots.add(slot);
        keys.push(k);
      }
    }
    const tag = uniqueKey('tag');
    const writes = trackWrites();
    expect(await store.increment([...keys.map((k) => op(k)), op(`{${tag}}a`), op(`{${tag}}b`, 2), op(`{${tag}}a`)], 0)).toEqual([1, 1, 1, 1, 2, 2]);
    writes.restore();
    const tagOwner = await cluster.nodeForKey(`{${tag}}a`);
    expect(writes.ports()).toEqual(ports(tagOwner === node ? [node] : [node, tagOwner]));
  });

  it('REDIS_BATCH_SCRIPT: one EVAL per slot group through the cluster client, each key counted on the node of its slot', async () => {
    store = await connectStore(redisSettings({ type: 'cluster', url: cluster.url, batchScript: true }));
    const keys = await keysInDistinctSlots(5, 'script');
    const execs = trackExec();
    const writes = trackWrites();
    expect(await store.increment(keys.map((k, i) => op(k, i + 1, 3600)), 0)).toEqual([1, 2, 3, 4, 5]);
    writes.restore();
    execs.restore();
    expect(execs.calls()).toBe(5);
    expect(writes.ports()).toEqual([]);
    expect(await store.increment(keys.map((k) => op(k, 1, 3600)), 0)).toEqual([2, 3, 4, 5, 6]);
    for (let i = 0; i < keys.length; i++) {
      const owner = await cluster.nodeForKey(keys[i]!);
      expect(await owner.cli(['GET', keys[i]!])).toBe(`${i + 2}\n`);
      expect(Number(await owner.cli(['TTL', keys[i]!]))).toBeGreaterThan(3500);
    }
  });

  it('sends every node batch at once by default and caps them with REDIS_CLUSTER_PIPELINE_PARALLELISM > 1', async () => {
    const keys = [...(await keyPerNode('par')), ...(await keyPerNode('par2'))];
    store = await connectStore(redisSettings({ type: 'cluster', url: cluster.url, clusterPipelineParallelism: 1 }));
    let writes = trackWrites();
    expect(await store.increment(keys.map((k) => op(k)), 0)).toEqual([1, 1, 1, 1, 1, 1]);
    writes.restore();
    expect(writes.ports()).toEqual(ports(cluster.nodes));
    expect(writes.maxInFlight()).toBe(3);
    await store.close();

    store = await connectStore(redisSettings({ type: 'cluster', url: cluster.url, clusterPipelineParallelism: 2 }));
    writes = trackWrites();
    expect(await store.increment(keys.map((k) => op(k)), 0)).toEqual([2, 2, 2, 2, 2, 2]);
    writes.restore();
    expect(writes.ports()).toEqual(ports(cluster.nodes));
    expect(writes.maxInFlight()).toBe(2);
  });

  it('batches the requests of several event-loop turns per node with REDIS_PIPELINE_WINDOW', async () => {
    const keys = await keyPerNode('win');
    store = await connectStore(redisSettings({ type: 'cluster', url: cluster.url, pipelineWindowMs: 200 }));
    const writes = trackWrites();
    const pending: Array<Promise<number[]>> = [];
    for (let turn = 0; turn < 4; turn++) {
      for (let r = 0; r < 5; r++) pending.push(store.increment(keys.map((k) => op(k)), 0));
      await new Promise((resolve) => setImmediate(resolve));
    }
    const results = await Promise.all(pending);
    writes.restore();
    expect(writes.ports()).toEqual(ports(cluster.nodes));
    for (let i = 0; i < 3; i++) {
      expect(results.map((c) => c[i]).sort((a, b) => a! - b!)).toEqual(Array.from({ length: 20 }, (_, n) => n + 1));
    }
  });

  it('applies STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT across nodes, GETs and INCRBYs in node writes', async () => {
    const [k4, k5] = await keyPerNode('stop');
    const n4 = await cluster.nodeForKey(k4!);
    const n5 = await cluster.nodeForKey(k5!);
    await n4.cli(['SET', k4!, '13']);
    await n5.cli(['SET', k5!, '13']);
    store = await connectStore(redisSettings({ type: 'cluster', url: cluster.url }), { stopIncrementWhenOverLimit: true });
    const r15 = ruleOf(15, Unit.HOUR, 'd.c15');
    const r14 = ruleOf(14, Unit.HOUR, 'd.c14');
    const execs = trackExec();
    const writes = trackWrites();
    expect(await store.increment([op(k4!, 2, 3600, r15), op(k5!, 2, 3600, r14)], 0)).toEqual([13, 15]);
    writes.restore();
    execs.restore();
    expect(writes.ports()).toEqual(ports([n4, n4, n5, n5]));
    expect(execs.calls()).toBe(0);
    expect(await n4.cli(['GET', k4!])).toBe('13\n');
    expect(await n5.cli(['GET', k5!])).toBe('15\n');
  });

  it('follows MOVED when ioredis\'s slot map is stale (INCRBY/EXPIRE, GET, algorithm script): counted once, on the owner', async () => {
    store = await connectStore(redisSettings({ type: 'cluster', url: cluster.url }), { stopIncrementWhenOverLimit: true });
    const bucket = rule(stats, 'd.tb', 10, Unit.MINUTE, { algorithm: 'token_bucket' });
    // A fixed window (GET, then INCRBY + EXPIRE) and a token bucket (EVALSHA), each on a stale slot.
    const [kFixed, kBucket] = await keysInDistinctSlots(2, 'moved');
    for (let round = 1; round <= 2; round++) {
      // A reload in flight (the last round's MOVED asked for one) ends first; later ones wait.
      await new Promise((resolve) => clusterOf(store).refreshSlotsCache(resolve));
      const release = holdSlotReloads(store);
      const fixed = await staleSlot(store, kFixed!);
      const tb = await staleSlot(store, kBucket!);
      const writes = trackWrites();
      let counts: number[];
      try {
        counts = await store.increment([op(kFixed!, 1, 3600), op(kBucket!, 1, 60, bucket)], 1_700_000_000_000);
      } finally {
        writes.restore();
        release();
      }
      expect(counts[0]).toBe(round);
      expect(counts[1]).toEqual(expect.any(Number));
      // The first writes went to the wrong nodes (the fast path was used).
      expect(writes.ports()).toEqual(expect.arrayContaining(ports([fixed.wrong, tb.wrong])));
      expect(await fixed.owner.cli(['GET', kFixed!])).toBe(`${round}\n`);
      expect(Number(await fixed.owner.cli(['TTL', kFixed!]))).toBeGreaterThan(3500);
      expect(await tb.owner.cli(['EXISTS', kBucket!])).toBe('1\n');
      expect(await keysInSlot(fixed.wrong, kFixed!)).toBe(0);
      expect(await keysInSlot(tb.wrong, kBucket!)).toBe(0);
      // ioredis learnt the owner from the redirect.
      const c = clusterOf(store);
      expect(c.slots[await cluster.keySlot(kFixed!)]![0]).toBe(fixed.owner.address);
      expect(c.slots[await cluster.keySlot(kBucket!)]![0]).toBe(tb.owner.address);
    }
    // With the map right again, one write per owner and no redirect.
    const writes = trackWrites();
    const execs = trackExec();
    expect((await store.increment([op(kFixed!, 1, 3600)], 0))[0]).toBe(3);
    writes.restore();
    execs.restore();
    expect(writes.ports()).toEqual(ports([await cluster.nodeForKey(kFixed!), await cluster.nodeForKey(kFixed!)]));
    expect(execs.calls()).toBe(0);
  });

  it('follows ASK while a slot migrates and MOVED once it has moved, counting each hit once', async () => {
    store = await connectStore(redisSettings({ type: 'cluster', url: cluster.url }));
    const [k] = await keysInDistinctSlots(1, 'migrate');
    const slot = String(await cluster.keySlot(k!));
    const from = await cluster.nodeForKey(k!);
    const to = cluster.nodes.find((n) => n !== from)!;
    const id = async (n: RedisServer): Promise<string> => (await n.cli(['CLUSTER', 'MYID'])).trim();
    const [fromId, toId] = [await id(from), await id(to)];
    // The key does not exist yet: the source answers ASK, the target counts it.
    await to.cli(['CLUSTER', 'SETSLOT', slot, 'IMPORTING', fromId]);
    await from.cli(['CLUSTER', 'SETSLOT', slot, 'MIGRATING', toId]);
    let writes = trackWrites();
    expect(await store.increment([op(k!, 1, 3600)], 0)).toEqual([1]);
    writes.restore();
    expect(writes.ports()).toEqual([from.port]);
    expect(await keysInSlot(from, k!)).toBe(0);
    expect(await keysInSlot(to, k!)).toBe(1);
    // The migration ends: every node now names the target.
    for (const n of cluster.nodes) await n.cli(['CLUSTER', 'SETSLOT', slot, 'NODE', toId]);
    await waitFor(async () => (await cluster.nodeForKey(k!)) === to, 'the slot to move');
    writes = trackWrites();
    expect(await store.increment([op(k!, 1, 3600)], 0)).toEqual([2]);
    writes.restore();
    expect(writes.ports()).toEqual([from.port]);
    expect(await to.cli(['GET', k!])).toBe('2\n');
    expect(Number(await to.cli(['TTL', k!]))).toBeGreaterThan(3500);
    expect(await keysInSlot(from, k!)).toBe(0);
    await waitFor(() => clusterOf(store).slots[Number(slot)]![0] === to.address, 'ioredis to learn the new owner');
    writes = trackWrites();
    expect(await store.increment([op(k!, 1, 3600)], 0)).toEqual([3]);
    writes.restore();
    expect(writes.ports()).toEqual([to.port]);
  });

  it('goes through the ioredis cluster pipeline while a node connection is not ready, and writes to the node again once it is', async () => {
    store = await connectStore(redisSettings({ type: 'cluster', url: cluster.url }));
    const tag = uniqueKey('notready');
    const [k, k2] = [`{${tag}}a`, `{${tag}}b`];
    const owner = await cluster.nodeForKey(k);
    const slot = await cluster.keySlot(k);
    const c = clusterOf(store);
    const conn = nodeConnection(store, owner.address)!;
    conn.disconnect();
    await waitFor(() => conn.status === 'end', 'the node connection to end');
    // A slot map reload makes a new connection to the node, which connects on its first command.
    await new Promise((resolve) => c.refreshSlotsCache(resolve));
    expect(nodeConnection(store, owner.address)?.status).toBe('wait');
    expect(connectionOf(store).readyMaster(slot)).toBeUndefined();
    let execs = trackExec();
    let writes = trackWrites();
    expect(await store.increment([op(k, 1, 3600), op(k2, 2, 3600)], 0)).toEqual([1, 2]);
    writes.restore();
    execs.restore();
    // Both keys in the slot's one pipeline, which connected the node.
    expect(execs.calls()).toBe(1);
    expect(writes.ports()).toEqual([]);
    expect(await owner.cli(['GET', k])).toBe('1\n');
    expect(await owner.cli(['GET', k2])).toBe('2\n');
    await waitFor(() => nodeConnection(store, owner.address)?.status === 'ready', 'the new node connection to be ready');
    execs = trackExec();
    writes = trackWrites();
    expect(await store.increment([op(k, 1, 3600)], 0)).toEqual([2]);
    writes.restore();
    execs.restore();
    expect(execs.calls()).toBe(0);
    expect(writes.ports()).toEqual([owner.port]);
  });

  it('sends a batch through the ioredis cluster when its node connection is lost before the batch is written', async () => {
    store = await connectStore(redisSettings({ type: 'cluster', url: cluster.url }));
    const [k] = await keysInDistinctSlots(1, 'lost');
    const owner = await cluster.nodeForKey(k!);
    const execs = trackExec();
    const writes = trackWrites();
    // Queued in the node's batch (written at the end of this event-loop turn); then the connection goes.
    const counted = store.increment([op(k!, 1, 3600)], 0);
    nodeConnection(store, owner.address)!.disconnect();
    expect(await counted).toEqual([1]);
    writes.restore();
    execs.restore();
    expect(writes.ports()).toEqual([]);
    expect(execs.calls()).toBeGreaterThanOrEqual(1);
    expect(await owner.cli(['GET', k!])).toBe('1\n');
    expect(Number(await owner.cli(['TTL', k!]))).toBeGreaterThan(3500);
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
