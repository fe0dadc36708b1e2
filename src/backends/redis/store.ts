/**
 * The Redis counter store, command-for-command as upstream (`src/redis/fixed_cache_impl.go`), so a
 * Go instance and this one can share one Redis during a migration:
 *
 * - For every op: `INCRBY key hits` then `EXPIRE key window + jitter`, EXPIRE sent on every hit;
 *   jitter is `floor(random · EXPIRATION_JITTER_MAX_SECONDS)` (0..N-1, as Go's `rand.Int63n`).
 * - Ops with a one-second window go to the per-second instance when REDIS_PERSECOND is on; a
 *   candidate limit's op goes where the enforced op it follows goes, in the same pipeline. A
 *   cluster refuses candidates at load (their keys may hash to another node).
 * - Single / sentinel: all the commands of one request in one pipeline (one round trip; with the
 *   per-second instance two pipelines, sent concurrently). Cluster: one pipeline per master node (per
 *   hash slot while a node's connection is not ready, and with REDIS_BATCH_SCRIPT), all sent at
 *   once; REDIS_CLUSTER_PIPELINE_PARALLELISM > 1 caps how many are in flight at once, 0 or 1 means
 *   no cap (a deliberate difference: upstream's default 1 sends the groups one after another).
 * - STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: when another key is already over (local cache) every
 *   INCRBY adds 0; otherwise a pipelined `GET` of every key first, then `stopIncrementAddends` picks
 *   each INCRBY argument (two round trips, as upstream).
 * - Cross-request batching (REDIS_PIPELINE_WINDOW > 0 or REDIS_PIPELINE_LIMIT > 0, every mode): the
 *   commands of concurrent requests are queued and sent as one pipeline (cluster: one per node) when
 *   the window, started by the first queued request, elapses, or as soon as a queue holds
 *   REDIS_PIPELINE_LIMIT commands (INCRBY and EXPIRE count one each, as upstream counts pipeline
 *   length), whichever comes first; with a limit and no window the queue is also sent at the end of
 *   the current event-loop turn. Each request still gets exactly its own replies. With both 0 the
 *   requests decided in one event-loop turn share one pipeline write (one round trip each).
 * - Pipelines are written as one RESP text, replies collected without a promise per command
 *   (./wire.ts): to the connection, or in a cluster to the node that ioredis's slot map names. A
 *   command redirected there (MOVED, ASK, TRYAGAIN, CLUSTERDOWN), and every key whose node has no
 *   ready connection, goes through ioredis's cluster client, which routes it and follows redirects.
 *   The queues and pipelines are batcher.ts; the scripts, scripts.ts.
 * - REDIS_BATCH_SCRIPT (extension, off by default): a pipeline's INCRBY/EXPIRE pairs go as one EVAL
 *   of INCREMENT_SCRIPT instead; the keys, counts and TTLs are the same.
 * - Any Redis error, timeout or lost connection rejects the request with a StoreError carrying the
 *   error text; `transient` tells connection-type failures (and CLUSTERDOWN, LOADING, TRYAGAIN,
 *   MOVED, READONLY…) from the others (WRONGTYPE, NOAUTH, ERR …). A request never waits longer than
 *   REDIS_TIMEOUT per round trip: each pipeline (and each op sent again: the EVAL fallback, a
 *   redirected command) carries one deadline of that length, which in cluster mode also bounds
 *   ioredis's redirects and resends.
 */
import type { RedisSettings } from '../../settings/settings';
import type { StatsStore } from '../../stats/store';
import type { Logger } from '../../telemetry/logger';
import { StoreError } from '../../core/store';
import type { AlgorithmRestriction } from '../../core/store';
import { stopIncrementAddends } from '../stop-increment';
import type { CounterOp, CounterStore, IncrementContext } from '../../core/store';
import type { Circuit } from '../circuit';
import { Batcher, PHASE_GET, PHASE_INCR, Req } from './batcher';
import { RedisConnection } from './connection';
import { CircuitStats, NodeCircuits, type CircuitSettings } from './nodes';
import { EvictionWatch } from './evictions';

export interface RedisStoreOptions {
  settings: RedisSettings;
  /** EXPIRATION_JITTER_MAX_SECONDS (0 = no jitter). */
  jitterMaxSeconds: number;
  /** STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT */
  stopIncrementWhenOverLimit: boolean;
  stats: StatsStore;
  logger: Logger;
  /** Source of the expiry jitter and the start-up backoff jitter; Math.random by default. */
  random?: (() => number) | undefined;
  /**
   * BACKEND_CIRCUIT_*: a circuit per node (nodes.ts; a single or sentinel instance is one node,
   * a cluster has one per master). Without it no request is failed early.
   */
  circuit?: CircuitSettings | undefined;
}

export class RedisStore implements CounterStore {
  readonly kind = 'redis';
  private readonly main: RedisConnection;
  private readonly perSecond: RedisConnection | undefined;
  private readonly mainBatcher: Batcher;
  private readonly perSecondBatcher: Batcher | undefined;
  private readonly jitterMax: number;
  private readonly random: () => number;
  private readonly stopIncrement: boolean;
  private readonly healthListeners: Array<(healthy: boolean) => void> = [];
  /** How many node circuits are open (both instances). */
  private readonly circuitStats: CircuitStats;
  /** REDIS_EVICTION_CHECK_INTERVAL > 0: whether each instance's nodes may evict, or did. */
  private readonly watches: EvictionWatch[] = [];
  private connected = false;
  private closed = false;
  private healthy = false;
  /** Algorithms this store cannot apply (a sliding window over a cluster). */
  readonly restrictions: readonly AlgorithmRestriction[];

  /** Creates the store and its clients without connecting; call `connect()` (or use `RedisStore.connect`). */
  constructor(private readonly options: RedisStoreOptions) {
    const s = options.settings;
    this.jitterMax = Math.max(0, Math.floor(options.jitterMaxSeconds));
    this.random = options.random ?? Math.random;
    this.stopIncrement = options.stopIncrementWhenOverLimit;
    this.circuitStats = new CircuitStats(options.stats.gauge('ratelimit.redis.circuit_open'), options.stats.counter('ratelimit.redis.circuit_opened'));
    const circuits = (label: string): NodeCircuits | undefined =>
      options.circuit === undefined ? undefined : new NodeCircuits(options.circuit, this.circuitStats, options.logger, label);
    this.main = new RedisConnection({
      settings: s,
      shared: s,
      logger: options.logger,
      stats: options.stats,
      statsScope: 'ratelimit.redis_pool',
      stateStatsScope: 'ratelimit.redis',
      label: 'redis',
      random: options.random,
      circuits: circuits('redis'),
    });
    this.mainBatcher = new Batcher(this.main, s.pipelineWindowMs, s.pipelineLimit, s.clusterPipelineParallelism, s.timeoutMs, s.batchScript);
    // The sliding-window script reads two windows' keys, which a cluster may hold in different slots.
    // A candidate's key may hash to another slot than its enforced key's, so another node: a
    // second pipeline, and that node's failure would fail requests the enforced keys answer.
    this.restrictions = this.main.isCluster
      ? [
        { store: 'redis cluster', algorithm: 'sliding_window', reason: 'its two window keys may live in different hash slots' },
        {
          store: 'redis cluster',
          algorithm: 'candidate',
          reason: "a candidate's key may live on another node than its rule's, which would add a round trip and let that node's failure change answers",
        },
      ]
      : [];
    this.main.onStateChange(() => this.checkHealth());
    if (s.perSecond.enabled) {
      const p = s.perSecond;
      this.perSecond = new RedisConnection({
        settings: p,
        shared: s,
        logger: options.logger,
        stats: options.stats,
        statsScope: 'ratelimit.redis_per_second_pool',
        stateStatsScope: 'ratelimit.redis_per_second',
        label: 'redis per-second',
        variablePrefix: 'REDIS_PERSECOND_',
        random: options.random,
        circuits: circuits('redis per-second'),
      });
      this.perSecondBatcher = new Batcher(this.perSecond, p.pipelineWindowMs, p.pipelineLimit, p.clusterPipelineParallelism, p.timeoutMs, s.batchScript);
      this.perSecond.onStateChange(() => this.checkHealth());
    }
    if (s.evictionCheckIntervalMs > 0) {
      const watch = (conn: RedisConnection, scope: string, timeoutMs: number): EvictionWatch =>
        new EvictionWatch({ conn, intervalMs: s.evictionCheckIntervalMs, timeoutMs, stats: options.stats, scope, logger: options.logger });
      this.watches.push(watch(this.main, 'ratelimit.redis', s.timeoutMs));
      if (this.perSecond !== undefined) this.watches.push(watch(this.perSecond, 'ratelimit.redis_per_second', s.perSecond.timeoutMs));
    }
  }

  /** Creates the store and connects it (see `connect()`); on failure everything is closed again. */
  static async connect(options: RedisStoreOptions): Promise<RedisStore> {
    const store = new RedisStore(options);
    await store.connect();
    return store;
  }

  /**
   * Connects the main and (REDIS_PERSECOND) the per-second instance, retrying as upstream does at
   * start-up (REDIS_STARTUP_*). Rejects with `timed out waiting for Redis connection to <url>`
   * after REDIS_STARTUP_MAX_ELAPSED_TIME (when > 0), or when `close()` is called meanwhile; the
   * store is then closed.
   */
  async connect(): Promise<void> {
    try {
      await Promise.all([this.main.connect(), this.perSecond?.connect()]);
    } catch (err) {
      await this.close();
      throw err;
    }
    this.connected = true;
    this.checkHealth();
    for (const w of this.watches) w.start();
  }

  /** Runs one eviction check of every node now (tests; the timer runs them every interval). */
  checkEvictions(): Promise<void> {
    return Promise.all(this.watches.map((w) => w.check())).then(() => undefined);
  }

  increment(ops: readonly CounterOp[], nowMs: number, context?: IncrementContext): Promise<number[]> {
    if (this.closed) return Promise.reject(new StoreError('redis store is closed', false));
    if (ops.length === 0) return Promise.resolve([]);
    if (this.circuitStats.open !== 0) {
      const refused = this.refusedByCircuit(ops);
      if (refused !== undefined) return Promise.reject(refused);
    }
    const req = new Req(ops, this);
    req.nowMs = nowMs;
    const promise = new Promise<number[]>((resolve, reject) => {
      req.resolve = resolve;
      req.reject = reject;
    });
    if (!this.stopIncrement || ops.every((op) => op.rule.algorithm !== undefined)) {
      this.enqueueIncr(req, undefined);
    } else if (context !== undefined && context.overLimitElsewhere) {
      this.enqueueIncr(req, stopIncrementAddends(ops, true, undefined));
    } else {
      this.enqueueGet(req);
    }
    return promise;
  }

  /** Called by a request whose batches of the current phase have all answered. */
  phaseDone(req: Req): void {
    if (req.phase === PHASE_GET) {
      req.phase = PHASE_INCR;
      this.enqueueIncr(req, stopIncrementAddends(req.ops, false, req.current));
      return;
    }
    req.settled = true;
    req.resolve(req.counts);
  }

  /**
   * True once connected. With REDIS_HEALTH_CHECK_ACTIVE_CONNECTION, false while the main (or the
   * per-second) instance has no ready connection; true again when Redis is back.
   */
  isHealthy(): boolean {
    if (!this.connected || this.closed) return false;
    if (!this.options.settings.healthCheckActiveConnection) return true;
    return this.main.isReady && (this.perSecond === undefined || this.perSecond.isReady);
  }

  /** Calls `listener` whenever `isHealthy()` changes; returns a function that unsubscribes. */
  onHealthChange(listener: (healthy: boolean) => void): () => void {
    this.healthListeners.push(listener);
    return () => {
      const i = this.healthListeners.indexOf(listener);
      if (i >= 0) this.healthListeners.splice(i, 1);
    };
  }

  /** Sends what is queued, quits every connection and clears every timer. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const w of this.watches) w.stop();
    this.mainBatcher.flushAll();
    this.perSecondBatcher?.flushAll();
    await Promise.all([this.main.close(), this.perSecond?.close()]);
    this.checkHealth();
  }

  private enqueueIncr(req: Req, addends: readonly number[] | undefined): void {
    const ops = req.ops;
    const ps = this.perSecondBatcher;
    const jitterMax = this.jitterMax;
    let usedMain = false;
    let usedPs = false;
    for (let i = 0; i < ops.length; i++) {
      const op = ops[i]!;
      if (op.rule.algorithm !== undefined) {
        if (ps !== undefined && (op.follows ?? op).windowSeconds === 1) {
          ps.script(req, i, op);
          usedPs = true;
        } else {
          this.mainBatcher.script(req, i, op);
          usedMain = true;
        }
        continue;
      }
      const ttl = jitterMax > 0 ? op.windowSeconds + Math.floor(this.random() * jitterMax) : op.windowSeconds;
      const addend = addends === undefined ? op.hits : addends[i]!;
      if (ps !== undefined && (op.follows ?? op).windowSeconds === 1) {
        ps.incr(req, i, op.key, addend, ttl);
        usedPs = true;
      } else {
        this.mainBatcher.incr(req, i, op.key, addend, ttl);
        usedMain = true;
      }
    }
    if (usedMain) this.mainBatcher.commit();
    if (usedPs) ps!.commit();
  }

  private enqueueGet(req: Req): void {
    const ops = req.ops;
    const ps = this.perSecondBatcher;
    req.phase = PHASE_GET;
    req.current = new Array<number>(ops.length);
    let usedMain = false;
    let usedPs = false;
    for (let i = 0; i < ops.length; i++) {
      const op = ops[i]!;
      if (op.rule.algorithm !== undefined) {
        req.current[i] = 0; // decided by its script in the next phase
        continue;
      }
      if (ps !== undefined && (op.follows ?? op).windowSeconds === 1) {
        ps.get(req, i, op.key);
        usedPs = true;
      } else {
        this.mainBatcher.get(req, i, op.key);
        usedMain = true;
      }
    }
    if (usedMain) this.mainBatcher.commit();
    if (usedPs) ps!.commit();
  }

  /**
   * While some node circuit is open: the error that fails this request at once when one of its
   * keys goes to an open node whose probe is not due, before anything of it is sent; else
   * undefined, and each open node it reaches is probed by it.
   */
  private refusedByCircuit(ops: readonly CounterOp[]): StoreError | undefined {
    const ps = this.perSecondBatcher;
    let probes: Circuit[] | undefined;
    for (const op of ops) {
      const batcher = ps !== undefined && (op.follows ?? op).windowSeconds === 1 ? ps : this.mainBatcher;
      const c = batcher.openCircuitOf(op.key);
      if (c === undefined) continue;
      if (!c.wouldAdmit()) return new StoreError(`${batcher.circuitName(op.key)} circuit open: ${c.reason}`, true);
      if (probes === undefined) probes = [c];
      else if (!probes.includes(c)) probes.push(c);
    }
    if (probes !== undefined) for (const c of probes) c.admit();
    return undefined;
  }

  private checkHealth(): void {
    const h = this.isHealthy();
    if (h === this.healthy) return;
    this.healthy = h;
    for (const l of this.healthListeners.slice()) l(h);
  }
}
