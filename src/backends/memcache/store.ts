/**
 * The Memcached counter store (BACKEND_TYPE=memcache), as upstream's `src/memcached/cache_impl.go`:
 *
 * 1. One multi-get of the request's keys: per node a single write (GETKQ per key + NOOP), nodes in
 *    parallel. Values are base-10 integers; one that does not parse is logged and read as 0.
 * 2. Each key's count after = value read + hits (keys repeated in one request add up, see below);
 *    the limiter decides the statuses from these counts.
 * 3. Then, not awaited by the request: `increment(key, hits)`; on a miss `add(key, hits, expiry =
 *    window + jitter)`; if the add finds the key already there (another instance won the race),
 *    `increment` again. A hits of 0 sends nothing. Errors are logged and counted.
 *
 * So, as upstream, concurrent requests may briefly over-admit (the read and the increment are not
 * atomic), and STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT is ignored (upstream ignores it for
 * memcached too): every hit is counted.
 *
 * Differences from upstream, on purpose:
 * - A key memcached cannot hold (> 250 bytes, whitespace or control characters) rejects the request
 *   before any I/O with `StoreError("memcached key … is invalid: …", transient=false)` and counts
 *   `ratelimit.memcache.invalid_key` (upstream fails obscurely inside the client).
 * - A read failure (node down, timeout) is fail-open as upstream (counted as 0, i.e. counts = hits,
 *   `multiget.__code=error`) only while BACKEND_FAILURE_MODE is unset; when it is set the request
 *   is rejected with a transient StoreError and the limiter applies the mode (nothing is counted).
 * - Health (pool.ts): healthy once at least one node answers, unhealthy while none does (upstream's memcache
 *   backend never reports healthy). A light probe (a `get` of a constant key, every second by
 *   default) keeps it current without traffic; nodeStates() shows each node, onHealthChange()
 *   tells the app.
 * - A node known to be down (its last command could not connect or timed out) is not asked while
 *   the probe runs: its keys count as a failed read at once and their increments are dropped
 *   (counted as `increment.__code=error`) until a probe gets an answer, at most one probe interval
 *   later. So a black-holed node does not add a connect timeout to every request.
 * - A node known to be hung or down is found within MEMCACHE_TIMEOUT (500 ms, gomemcache's default
 *   per-operation timeout, which upstream uses without a setting): every command has its own
 *   deadline, connecting included (node.ts), the failure mode decides the requests that waited,
 *   and the node is then skipped as above. At most MAX_IN_FLIGHT_PER_NODE commands wait on one
 *   node at once; more fail at once, so a hung node never holds an unbounded queue.
 * - Expirations past 30 days (MONTH and YEAR windows with jitter) are sent as an absolute Unix time,
 *   as memcached requires; upstream sends them relative, which memcached reads as a date in 1970,
 *   so those counters expired at once.
 * - A key repeated in one request (two descriptors with the same entries and window) is read once;
 *   the second count includes the first one's hits (as the Redis and memory stores count), and one
 *   increment carries both. Upstream returns read + own hits for each.
 * - Keys go to nodes as upstream does, crc32(key) % n over the configured list (keys.ts), so a Go
 *   and a TypeScript instance configured with the same list share their counters.
 * - MEMCACHE_TLS=true is refused at start-up: memjs (the client) has no TLS at all, and connecting
 *   in plaintext when TLS was asked for would be unsafe.
 * - A candidate limit's key (CounterOp.follows) is kept on the node of the enforced key it follows
 *   (crc32 of that key), so it is read in the same write to the same node; one memcached cannot
 *   hold (too long with its `_cand`) is not counted (-1) instead of failing the request.
 * - MEMCACHE_MAX_IDLE_CONNS has no equivalent: memjs keeps exactly one connection per node and
 *   pipelines every command on it (no pool, so nothing idles). A non-default value is warned about.
 */
import type { MemcacheSettings } from '../../settings/settings';
import { StoreError } from '../../core/store';
import { slidingCount } from '../../core/algorithms';
import type { AlgorithmRestriction } from '../../core/store';
import type { Counter, StatsStore } from '../../stats/store';
import { type Logger, silentLogger } from '../../telemetry/logger';
import { ThrottledLog } from '../../telemetry/throttled-log';
import type { CounterOp, CounterStore } from '../../core/store';
import { keyProblem, pickNode, showKey } from './keys';
import { MemcacheNode, type MultiGetSink, Status } from './node';
import { MemcachePool, type HealthListener, type MemcacheNodeState } from './pool';
import { MemcacheConfigError, SrvResolver, checkSrvName, distinctNodes, parseHostPort } from './servers';
import { errorMessage } from '../../platform/errors';

export { MemcacheConfigError } from './servers';
export type { HealthListener, MemcacheNodeState } from './pool';

/** memcached reads an expiration above this many seconds as an absolute Unix time. */
const MAX_RELATIVE_EXPIRATION = 60 * 60 * 24 * 30;
const STAT = 'ratelimit.memcache.';
/**
 * Far above what a healthy node has waiting (a request is one multi-get plus its increments, and
 * answers take well under a millisecond), small enough that a hung node holds a few MB at most.
 */
export const MAX_IN_FLIGHT_PER_NODE = 10_000;

export interface MemcacheStoreOptions {
  /** MEMCACHE_HOST_PORT / MEMCACHE_SRV / MEMCACHE_SRV_REFRESH / MEMCACHE_MAX_IDLE_CONNS / MEMCACHE_TIMEOUT / MEMCACHE_TLS*. */
  readonly settings: MemcacheSettings;
  /** BACKEND_FAILURE_MODE: unset = upstream fail-open on read errors; set = reject, the limiter decides. */
  readonly failureMode?: 'error' | 'allow' | 'deny' | undefined;
  /** EXPIRATION_JITTER_MAX_SECONDS: expiry = window + random [0, N) seconds when N > 0. */
  readonly expirationJitterMaxSeconds: number;
  readonly stats: StatsStore;
  readonly logger?: Logger | undefined;
  /** Overrides MEMCACHE_TIMEOUT (`settings.timeoutMs`), the longest wait for a command, connecting included. */
  readonly timeoutMs?: number | undefined;
  /** Commands that may wait on one node at once; more fail at once (default MAX_IN_FLIGHT_PER_NODE). */
  readonly maxInFlightPerNode?: number | undefined;
  /** Period of the liveness probe of every node (default 1000 ms; 0 = only traffic updates health). */
  readonly healthCheckIntervalMs?: number | undefined;
  /** Source of the expiration jitter, [0, 1) (default Math.random). */
  readonly random?: (() => number) | undefined;
  /** DNS servers for MEMCACHE_SRV instead of the system's (`ip` or `ip:port`). */
  readonly dnsServers?: readonly string[] | undefined;
  /** Per-try DNS timeout for MEMCACHE_SRV (default 2000 ms, two tries). */
  readonly dnsTimeoutMs?: number | undefined;
  /** Longest wait in close() for increments still in flight (default 2000 ms). */
  readonly closeTimeoutMs?: number | undefined;
}

interface MemcacheStats {
  readonly multigetSuccess: Counter;
  readonly multigetError: Counter;
  readonly incrementSuccess: Counter;
  readonly incrementMiss: Counter;
  readonly incrementError: Counter;
  readonly addSuccess: Counter;
  readonly addError: Counter;
  readonly addNotStored: Counter;
  readonly keysRequested: Counter;
  readonly keysFound: Counter;
  readonly invalidKey: Counter;
}

function memcacheStats(stats: StatsStore): MemcacheStats {
  return {
    multigetSuccess: stats.counter(STAT + 'multiget.__code=success'),
    multigetError: stats.counter(STAT + 'multiget.__code=error'),
    incrementSuccess: stats.counter(STAT + 'increment.__code=success'),
    incrementMiss: stats.counter(STAT + 'increment.__code=miss'),
    incrementError: stats.counter(STAT + 'increment.__code=error'),
    addSuccess: stats.counter(STAT + 'add.__code=success'),
    addError: stats.counter(STAT + 'add.__code=error'),
    addNotStored: stats.counter(STAT + 'add.__code=not_stored'),
    keysRequested: stats.counter(STAT + 'keys_requested'),
    keysFound: stats.counter(STAT + 'keys_found'),
    invalidKey: stats.counter(STAT + 'invalid_key'),
  };
}

/** A base-10 count as memcached stores it (trailing spaces allowed); -1 when it is not one. */
function parseCount(b: Buffer): number {
  const n = b.length;
  let v = 0;
  let i = 0;
  for (; i < n; i++) {
    const c = b[i]!;
    if (c < 0x30 || c > 0x39) break;
    v = v * 10 + (c - 0x30);
  }
  if (i === 0) return -1;
  for (; i < n; i++) if (b[i] !== 0x20) return -1;
  return v;
}

/** One request's multi-get: collects hits from every node, then computes the counts. */
class Read implements MultiGetSink {
  /** Value read per op index (first occurrence of a key only). */
  readonly values: number[];
  remaining = 0;
  failedNodes: string[] | undefined;
  firstError: Error | undefined;
  found = 0;
  resolve!: (counts: number[]) => void;
  reject!: (err: Error) => void;

  constructor(
    readonly store: MemcacheStore,
    readonly ops: readonly CounterOp[],
    readonly nowMs: number,
    /** Index of the first op with the same key, -1 for a first occurrence. */
    readonly dupOf: readonly number[],
    /** Node (index in `nodes`) per op index; undefined when there is one node. */
    public nodeOf: readonly number[] | undefined,
    readonly nodes: readonly MemcacheNode[],
  ) {
    this.values = new Array<number>(ops.length).fill(0);
  }

  hit(index: number, value: Buffer): void {
    this.found++;
    const v = parseCount(value);
    if (v < 0) {
      this.store.parseFailed(this.ops[index]!.key, value);
      return;
    }
    this.values[index] = v;
  }

  done(node: MemcacheNode, err: Error | undefined): void {
    if (err !== undefined) {
      (this.failedNodes ??= []).push(node.name);
      this.firstError ??= err;
    }
    if (--this.remaining === 0) this.store.finishRead(this);
  }
}

export class MemcacheStore implements CounterStore {
  readonly kind = 'memcache';
  private readonly stats: MemcacheStats;
  private readonly pool: MemcachePool;
  private readonly logger: Logger;
  private readonly random: () => number;
  private readonly jitterMax: number;
  private readonly failOpen: boolean;
  private pending = 0;
  private idleWaiters: Array<() => void> = [];
  private closed = false;
  private closing: Promise<void> | undefined;
  private readonly readErrors: ThrottledLog;
  private readonly writeErrors: ThrottledLog;
  private readonly parseErrors: ThrottledLog;

  private constructor(
    private readonly opts: MemcacheStoreOptions,
    resolver: SrvResolver | undefined,
  ) {
    this.stats = memcacheStats(opts.stats);
    this.logger = opts.logger ?? silentLogger;
    this.pool = new MemcachePool({
      timeoutMs: opts.timeoutMs ?? opts.settings.timeoutMs,
      maxInFlightPerNode: opts.maxInFlightPerNode ?? MAX_IN_FLIGHT_PER_NODE,
      healthCheckIntervalMs: opts.healthCheckIntervalMs ?? 1000,
      logger: this.logger,
      srv: resolver && { name: opts.settings.srv, resolver, refreshMs: opts.settings.srvRefreshMs },
    });
    this.random = opts.random ?? Math.random;
    this.jitterMax = Math.max(0, Math.floor(opts.expirationJitterMaxSeconds));
    this.failOpen = opts.failureMode === undefined;
    this.readErrors = new ThrottledLog((m) => this.logger.error(m));
    this.writeErrors = new ThrottledLog((m) => this.logger.error(m));
    this.parseErrors = new ThrottledLog((m) => this.logger.warn(m));
  }

  readonly restrictions: readonly AlgorithmRestriction[] = [
    { store: 'memcache', algorithm: 'token_bucket', reason: 'memcached has no atomic read-modify-write' },
  ];

  /**
   * Checks the settings, resolves MEMCACHE_SRV (rejecting when that first lookup fails), probes
   * every node once (bounded by the timeouts; a node down does not fail start-up, as upstream) and
   * starts the health probe and SRV refresh timers (all unref'd).
   */
  static async create(opts: MemcacheStoreOptions): Promise<MemcacheStore> {
    const s = opts.settings;
    const logger = opts.logger ?? silentLogger;
    if (s.tls.enabled) {
      throw new MemcacheConfigError(
        'MEMCACHE_TLS=true: the memcached client used by this build (memjs) has no TLS support; refusing to connect to memcached in plaintext',
      );
    }
    if (s.tls.clientCertFile !== '' || s.tls.clientKeyFile !== '' || s.tls.caCertFile !== '') {
      logger.warn('MEMCACHE_TLS_CLIENT_CERT / MEMCACHE_TLS_CLIENT_KEY / MEMCACHE_TLS_CACERT are set but MEMCACHE_TLS is not true: ignored');
    }
    if (s.maxIdleConns !== 2) {
      logger.warn(
        `MEMCACHE_MAX_IDLE_CONNS=${s.maxIdleConns} has no effect: the memcached client keeps one connection per server and pipelines every command on it`,
      );
    }
    if (s.hostPorts.length > 0 && s.srv !== '') throw new MemcacheConfigError('Both MEMCACHE_HOST_PORT and MEMCACHE_SRV are set');

    let names: string[];
    let resolver: SrvResolver | undefined;
    if (s.srv !== '') {
      checkSrvName(s.srv);
      resolver = new SrvResolver({ servers: opts.dnsServers, timeoutMs: opts.dnsTimeoutMs });
      try {
        names = await resolver.resolve(s.srv);
      } catch (err) {
        resolver.cancel();
        throw new MemcacheConfigError(`MEMCACHE_SRV=${s.srv}: unable to fetch servers from SRV: ${errorMessage(err)}`);
      }
    } else {
      names = distinctNodes(s.hostPorts.map((h) => parseHostPort(h)));
    }

    const store = new MemcacheStore(opts, resolver);
    store.pool.setNodes(names);
    if (names.length === 0) logger.warn('memcache store: no memcached servers configured; every read fails');
    store.pool.start();
    await store.pool.checkNow();
    return store;
  }

  increment(ops: readonly CounterOp[], nowMs: number): Promise<number[]> {
    for (let i = 0; i < ops.length; i++) {
      const op = ops[i]!;
      if (op.follows !== undefined && (keyProblem(op.key) !== undefined || (op.prevKey !== undefined && keyProblem(op.prevKey) !== undefined))) {
        return this.withoutUnfitCandidates(ops, nowMs);
      }
    }
    for (let i = 0; i < ops.length; i++) if (ops[i]!.rule.algorithm !== undefined) return this.incrementSliding(ops, nowMs);
    return this.incrementFixed(ops, nowMs);
  }

  /**
   * A candidate limit's key memcached cannot hold (its `_cand` made it too long) must not fail
   * the request its enforced key answers: it is left out and answered -1 (not counted).
   */
  private async withoutUnfitCandidates(ops: readonly CounterOp[], nowMs: number): Promise<number[]> {
    const kept: CounterOp[] = [];
    const at = new Array<number>(ops.length).fill(-1);
    for (let i = 0; i < ops.length; i++) {
      const op = ops[i]!;
      const unfit = op.follows !== undefined && (keyProblem(op.key) !== undefined || (op.prevKey !== undefined && keyProblem(op.prevKey) !== undefined));
      if (unfit) continue;
      at[i] = kept.length;
      kept.push(op);
    }
    const counts = kept.length === 0 ? [] : await this.increment(kept, nowMs);
    return at.map((j) => (j < 0 ? -1 : counts[j]!));
  }

  /**
   * sliding_window (src/limiter/algorithms.ts): the current and previous windows' keys are read
   * in the request's one multiget (read-only: 0 hits), then an admitted op's hits are added in
   * the background like any increment. As for the fixed window, the read and the increment are
   * not atomic: concurrent requests may briefly over-admit. (token_bucket is refused at config
   * load while this store is open: it needs an atomic read-modify-write.)
   */
  private async incrementSliding(ops: readonly CounterOp[], nowMs: number): Promise<number[]> {
    const reads: CounterOp[] = [];
    const at = new Array<number>(ops.length);
    for (let i = 0; i < ops.length; i++) {
      const op = ops[i]!;
      at[i] = reads.length;
      if (op.rule.algorithm === undefined) {
        reads.push(op);
      } else if (op.rule.algorithm === 'sliding_window') {
        reads.push({ ...op, hits: 0 }, { ...op, key: op.prevKey ?? op.key, hits: 0 });
      } else {
        throw new StoreError(`the memcache store cannot apply ${op.rule.algorithm} (rule '${op.rule.fullKey}')`, false);
      }
    }
    const values = await this.incrementFixed(reads, nowMs);
    const out = new Array<number>(ops.length);
    for (let i = 0; i < ops.length; i++) {
      const op = ops[i]!;
      const j = at[i]!;
      if (op.rule.algorithm === undefined) {
        out[i] = values[j]!;
        continue;
      }
      const count = slidingCount(values[j]!, values[j + 1]!, op.hits, nowMs, op.windowSeconds);
      out[i] = count;
      if (count <= op.rule.limit.requestsPerUnit && op.hits > 0 && !this.closed) {
        const nodes = this.pool.nodes;
        if (nodes.length === 0) continue;
        const node = nodes.length === 1 ? nodes[0]! : nodes[pickNode((op.follows ?? op).key, nodes.length)]!;
        if (this.pool.skips(node)) {
          this.stats.incrementError.inc();
          continue;
        }
        // Kept through the next window, where it is the previous one.
        this.bump(node, op.key, op.hits, this.expiration(2 * op.windowSeconds, nowMs));
      }
    }
    return out;
  }

  private incrementFixed(ops: readonly CounterOp[], nowMs: number): Promise<number[]> {
    const n = ops.length;
    if (n === 0) return Promise.resolve([]);
    for (let i = 0; i < n; i++) {
      const key = ops[i]!.key;
      const problem = keyProblem(key);
      if (problem !== undefined) {
        this.stats.invalidKey.inc();
        return Promise.reject(new StoreError(`memcached key ${showKey(key)} is invalid: ${problem}`, false));
      }
    }
    if (this.closed) return Promise.reject(new StoreError('the memcache store is closed', true));

    // Repeated keys are read once.
    const dupOf = new Array<number>(n);
    let distinct = 0;
    if (n <= 16) {
      for (let i = 0; i < n; i++) {
        const key = ops[i]!.key;
        let d = -1;
        for (let j = 0; j < i; j++) {
          if (dupOf[j] === -1 && ops[j]!.key === key) {
            d = j;
            break;
          }
        }
        dupOf[i] = d;
        if (d === -1) distinct++;
      }
    } else {
      const first = new Map<string, number>();
      for (let i = 0; i < n; i++) {
        const key = ops[i]!.key;
        const d = first.get(key);
        if (d === undefined) {
          first.set(key, i);
          dupOf[i] = -1;
          distinct++;
        } else dupOf[i] = d;
      }
    }
    this.stats.keysRequested.inc(distinct);

    const nodes = this.pool.nodes;
    const nodeCount = nodes.length;
    const read = new Read(this, ops, nowMs, dupOf, undefined, nodes);
    const promise = new Promise<number[]>((resolve, reject) => {
      read.resolve = resolve;
      read.reject = reject;
    });
    if (nodeCount === 0) {
      read.failedNodes = [];
      read.firstError = new Error('no memcached servers');
      this.finishRead(read);
      return promise;
    }
    if (nodeCount === 1) {
      const slots: number[] = [];
      for (let i = 0; i < n; i++) if (dupOf[i] === -1) slots.push(i);
      read.remaining = 1;
      this.read(nodes[0]!, slots, read);
      return promise;
    }
    const nodeOf = new Array<number>(n);
    const groups: number[][] = [];
    for (let k = 0; k < nodeCount; k++) groups.push([]);
    for (let i = 0; i < n; i++) {
      if (dupOf[i] !== -1) continue;
      // A candidate limit's key lives beside its enforced key: the same node, the same read.
      const op = ops[i]!;
      const k = pickNode((op.follows ?? op).key, nodeCount);
      nodeOf[i] = k;
      groups[k]!.push(i);
    }
    read.nodeOf = nodeOf;
    let used = 0;
    for (let k = 0; k < nodeCount; k++) if (groups[k]!.length > 0) used++;
    read.remaining = used;
    for (let k = 0; k < nodeCount; k++) {
      const g = groups[k]!;
      if (g.length > 0) this.read(nodes[k]!, g, read);
    }
    return promise;
  }

  /**
   * A node known to be down (its last command failed to connect or timed out) is not asked while
   * the health probe runs: the probe brings it back within one interval, and requests meanwhile
   * do not each wait for a connect timeout (a black-holed node would add it to every request).
   */
  private read(node: MemcacheNode, slots: number[], read: Read): void {
    if (this.pool.skips(node)) {
      read.done(node, new Error(`memcached ${node.name} is down (${node.lastError}); not asked until it answers a probe`));
      return;
    }
    node.getMulti(read.ops, slots, read);
  }

  /**
   * @internal Called by Read once every node answered or failed (from a memjs socket callback,
   * where an exception would be uncaught: none escapes).
   */
  finishRead(read: Read): void {
    try {
      this.complete(read);
    } catch (err) {
      const msg = `memcache store: internal error: ${(err as Error)?.stack ?? String(err)}`;
      this.logger.error(msg);
      read.reject(new StoreError(msg, true));
    }
  }

  private complete(read: Read): void {
    const { ops, values, dupOf } = read;
    const n = ops.length;
    this.stats.keysFound.inc(read.found);
    if (read.firstError !== undefined) {
      this.stats.multigetError.inc();
      const where = read.failedNodes!.length > 0 ? ` on ${read.failedNodes!.join(', ')}` : '';
      const msg = `memcached read failed${where}: ${read.firstError.message}`;
      if (!this.failOpen) {
        this.readErrors.log(msg);
        read.reject(new StoreError(msg, true));
        return;
      }
      this.readErrors.log(`${msg}; counting the keys it could not read as 0 (fail-open)`);
    } else {
      this.stats.multigetSuccess.inc();
    }

    // Counts after: value read + hits, repeated keys adding up in request order.
    const counts = new Array<number>(n);
    let totals: number[] | undefined;
    for (let i = 0; i < n; i++) {
      const first = dupOf[i]!;
      const hits = ops[i]!.hits;
      if (first === -1) {
        counts[i] = values[i] = values[i]! + hits;
      } else {
        // A repeated key: its hits join the first occurrence's increment.
        totals ??= ops.map((o) => o.hits);
        totals[first] = totals[first]! + hits;
        counts[i] = values[first] = values[first]! + hits;
      }
    }
    // The increments (one per distinct key, with the hits of all its ops), not awaited.
    for (let i = 0; i < n; i++) {
      if (dupOf[i] !== -1) continue;
      const hits = totals === undefined ? ops[i]!.hits : totals[i]!;
      if (hits <= 0) continue;
      const node = read.nodes[read.nodeOf === undefined ? 0 : read.nodeOf[i]!];
      if (node === undefined) continue; // no servers at all
      if (this.pool.skips(node)) {
        this.stats.incrementError.inc();
        continue;
      }
      this.bump(node, ops[i]!.key, hits, this.expiration(ops[i]!.windowSeconds, read.nowMs));
    }
    read.resolve(counts);
  }

  /** @internal Logs a value that is not a count (read as 0). */
  parseFailed(key: string, value: Buffer): void {
    this.parseErrors.log(`memcached value of ${showKey(key)} is not a base-10 count (${showKey(value.toString('latin1'))}); read as 0`);
  }

  /** Increments (increment → add → increment chains) still in flight. */
  get pendingIncrements(): number {
    return this.pending;
  }

  /**
   * Resolves once no increment is in flight (true), or after `timeoutMs` (false) when given.
   * Increments run after increment() resolves; tests and close() wait for them here.
   */
  idle(timeoutMs?: number): Promise<boolean> {
    if (this.pending === 0) return Promise.resolve(true);
    return new Promise<boolean>((resolve) => {
      let timer: NodeJS.Timeout | undefined;
      const done = (): void => {
        if (timer !== undefined) clearTimeout(timer);
        resolve(true);
      };
      this.idleWaiters.push(done);
      if (timeoutMs !== undefined) {
        timer = setTimeout(() => {
          const i = this.idleWaiters.indexOf(done);
          if (i >= 0) this.idleWaiters.splice(i, 1);
          resolve(false);
        }, timeoutMs);
        timer.unref();
      }
    });
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      this.closed = true;
      this.pool.stop();
      if (!(await this.idle(this.opts.closeTimeoutMs ?? 2000))) {
        this.logger.warn(`memcache store: closing with ${this.pending} increments still in flight`);
      }
      this.pool.close();
    })();
    return this.closing;
  }

  isHealthy(): boolean {
    return this.pool.isHealthy();
  }

  /** Calls `listener(healthy, reason)` on every change of isHealthy(); returns the unsubscriber. */
  onHealthChange(listener: HealthListener): () => void {
    return this.pool.onHealthChange(listener);
  }

  /** Every node and whether it answers, in distribution order. */
  nodeStates(): MemcacheNodeState[] {
    return this.pool.nodeStates();
  }

  /** The node names (`host:port`), in placement order. */
  servers(): string[] {
    return this.pool.servers();
  }

  /** The node that holds `key` with the current node list. */
  serverFor(key: string): string | undefined {
    return this.pool.serverFor(key);
  }

  /** Probes every node now (bounded by the timeouts). */
  checkNow(): Promise<void> {
    return this.pool.checkNow();
  }

  /** Re-resolves MEMCACHE_SRV now (what the refresh timer does); keeps the old list on failure. */
  refreshServers(): Promise<void> {
    return this.pool.refreshServers();
  }

  private expiration(windowSeconds: number, nowMs: number): number {
    let jitter = 0;
    if (this.jitterMax > 0) jitter = Math.min(this.jitterMax - 1, Math.floor(this.random() * this.jitterMax));
    const exp = windowSeconds + jitter;
    return exp > MAX_RELATIVE_EXPIRATION ? Math.floor(nowMs / 1000) + exp : exp;
  }

  /** increment → on a miss add → on not-stored increment again; in the background. */
  private bump(node: MemcacheNode, key: string, hits: number, expiration: number): void {
    this.pending++;
    node.incr(key, hits, (err, status) => {
      if (err === undefined && status === Status.OK) {
        this.stats.incrementSuccess.inc();
        return this.settle();
      }
      if (err !== undefined || status !== Status.NOT_FOUND) {
        this.stats.incrementError.inc();
        this.writeErrors.log(`memcached increment of ${showKey(key)} on ${node.name} failed: ${describe(err, status)}`);
        return this.settle();
      }
      this.stats.incrementMiss.inc();
      node.add(key, String(hits), expiration, (err2, status2) => {
        if (err2 === undefined && status2 === Status.OK) {
          this.stats.addSuccess.inc();
          return this.settle();
        }
        if (err2 !== undefined || (status2 !== Status.EXISTS && status2 !== Status.NOT_STORED)) {
          this.stats.addError.inc();
          this.writeErrors.log(`memcached add of ${showKey(key)} on ${node.name} failed: ${describe(err2, status2)}`);
          return this.settle();
        }
        // Another instance added it between our increment and add: increment it now.
        this.stats.addNotStored.inc();
        node.incr(key, hits, (err3, status3) => {
          if (err3 === undefined && status3 === Status.OK) {
            this.stats.incrementSuccess.inc();
          } else {
            this.stats.incrementError.inc();
            this.writeErrors.log(
              `memcached increment of ${showKey(key)} on ${node.name} after a lost add race failed: ${describe(err3, status3)}`,
            );
          }
          this.settle();
        });
      });
    });
  }

  private settle(): void {
    if (--this.pending > 0) return;
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const w of waiters) w();
  }

}

function describe(err: Error | undefined, status: number): string {
  if (err !== undefined) return err.message;
  switch (status) {
    case 6:
      return 'the stored value is not a number (status 6)';
    default:
      return `status ${status}`;
  }
}
