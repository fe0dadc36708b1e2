/**
 * The Redis counter store, command-for-command as upstream (`src/redis/fixed_cache_impl.go`), so a
 * Go instance and this one can share one Redis during a migration:
 *
 * - For every op: `INCRBY key hits` then `EXPIRE key window + jitter`, EXPIRE sent on every hit;
 *   jitter is `floor(random · EXPIRATION_JITTER_MAX_SECONDS)` (0..N-1, as Go's `rand.Int63n`).
 * - Ops with a one-second window go to the per-second instance when REDIS_PERSECOND is on.
 * - Single / sentinel: all the commands of one request in one pipeline (one round trip; with the
 *   per-second instance two pipelines, sent concurrently). Cluster: one pipeline per hash slot, all
 *   sent at once; REDIS_CLUSTER_PIPELINE_PARALLELISM > 1 caps how many are in flight at once, 0 or 1
 *   means no cap (a deliberate difference: upstream's default 1 sends the groups one after another).
 * - STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: when another key is already over (local cache) every
 *   INCRBY adds 0; otherwise a pipelined `GET` of every key first, then `stopIncrementAddends` picks
 *   each INCRBY argument (two round trips, as upstream).
 * - Cross-request batching (REDIS_PIPELINE_WINDOW > 0 or REDIS_PIPELINE_LIMIT > 0, every mode): the
 *   commands of concurrent requests are queued and sent as one pipeline (cluster: one per slot) when
 *   the window, started by the first queued request, elapses, or as soon as a queue holds
 *   REDIS_PIPELINE_LIMIT commands (INCRBY and EXPIRE count one each, as upstream counts pipeline
 *   length), whichever comes first; with a limit and no window the queue is also sent at the end of
 *   the current event-loop turn. Each request still gets exactly its own replies. With both 0 the
 *   requests decided in one event-loop turn share one pipeline write (one round trip each).
 * - Single / sentinel pipelines are written as one RESP text, replies collected without a promise
 *   per command (./wire.ts); a cluster's go through ioredis's pipeline, which routes them.
 * - REDIS_BATCH_SCRIPT (extension, off by default): a pipeline's INCRBY/EXPIRE pairs go as one EVAL
 *   of INCREMENT_SCRIPT instead; the keys, counts and TTLs are the same.
 * - Any Redis error, timeout or lost connection rejects the request with a StoreError carrying the
 *   error text; `transient` tells connection-type failures (and CLUSTERDOWN, LOADING, TRYAGAIN,
 *   MOVED, READONLY…) from the others (WRONGTYPE, NOAUTH, ERR …). A request never waits longer than
 *   REDIS_TIMEOUT per round trip: each pipeline (and the EVAL fallback) carries one deadline of
 *   that length, which in cluster mode also bounds ioredis's redirects and resends.
 */
import { createHash } from 'node:crypto';
import type { ChainableCommander, Redis } from 'ioredis';
import type { RedisSettings } from '../../settings/settings';
import type { StatsStore } from '../../stats/store';
import type { Logger } from '../../telemetry/logger';
import { StoreError } from '../../core/store';
import { emissionMs } from '../../core/algorithms';
import type { AlgorithmRestriction } from '../../core/store';
import { stopIncrementAddends } from '../stop-increment';
import type { CounterOp, CounterStore, IncrementContext } from '../../core/store';
import { RedisConnection, errorText } from './connection';
import { WirePipeline } from './wire';

// cluster-key-slot ships with ioredis and has no type declarations.
// eslint-disable-next-line @typescript-eslint/no-require-imports
const calculateSlot = require('cluster-key-slot') as (key: string) => number;

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
}

/** Reply errors that go away by themselves (failover, resharding, loading, busy script). */
const TRANSIENT_REPLIES = new Set([
  'CLUSTERDOWN',
  'LOADING',
  'TRYAGAIN',
  'MOVED',
  'ASK',
  'MASTERDOWN',
  'READONLY',
  'BUSY',
  'NOREPLICAS',
  'NOTBUSY',
]);

/**
 * A StoreError with the error's text. Reply errors from Redis are transient only for the codes
 * above; anything else that is not a reply (lost connection, timeout, cluster not ready, too many
 * redirections) is transient.
 */
export function toStoreError(err: unknown): StoreError {
  if (err instanceof StoreError) return err;
  const message = errorText(err);
  if (err instanceof Error && err.name === 'ReplyError') {
    const sp = message.indexOf(' ');
    return new StoreError(message, TRANSIENT_REPLIES.has(sp < 0 ? message : message.slice(0, sp)));
  }
  return new StoreError(message, true);
}

/**
 * sliding_window and token_bucket (src/limiter/algorithms.ts), decided and written atomically in
 * one script call per op: EVALSHA, pipelined with the request's other commands; on NOSCRIPT (first
 * use on a server, or after a restart or SCRIPT FLUSH) that op is sent once more with EVAL, which
 * caches the script. The time is the service's (ARGV), so every instance shares one clock source
 * per request and a test clock works. Returns the op's effective count after.
 *   KEYS[1] key, KEYS[2] previous window's key (sliding); ARGV: mode (s|t), hits, now ms,
 *   window ms, then limit (s) or emission interval ms and burst (t).
 */
export const ALGORITHM_SCRIPT = `
local hits = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local win = tonumber(ARGV[4])
if ARGV[1] == 's' then
  local limit = tonumber(ARGV[5])
  local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
  local prev = tonumber(redis.call('GET', KEYS[2]) or '0')
  local into = now % win
  local count = math.ceil(cur + hits + prev * (win - into) / win)
  if count <= limit and hits > 0 then
    redis.call('INCRBY', KEYS[1], hits)
    redis.call('PEXPIRE', KEYS[1], 2 * win - into)
  end
  return count
end
local emission = tonumber(ARGV[5])
local burst = tonumber(ARGV[6])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local newtat = tat + hits * emission
local used = newtat - now
local level = math.ceil(used / emission - 1e-6)
if used <= burst * emission + 1e-6 then
  if hits > 0 then redis.call('SET', KEYS[1], string.format('%.3f', newtat), 'PX', math.ceil(used) + 1000) end
  if level > burst then level = burst end
  return level
end
if level < burst + 1 then level = burst + 1 end
return level
`;
export const ALGORITHM_SCRIPT_SHA = createHash('sha1').update(ALGORITHM_SCRIPT).digest('hex');

/**
 * REDIS_BATCH_SCRIPT: every INCRBY + EXPIRE pair of one pipeline in a single EVAL, so the client
 * builds and parses one command instead of two per key (in cluster mode, where ioredis's pipeline
 * still costs a Command and a promise per command). Keys, counts and TTLs are exactly the pipeline's;
 * a failing key (WRONGTYPE…) fails only its own entry, as in a pipeline. Sent with EVAL, not
 * EVALSHA: one per pipeline, so the script text is cheap and NOSCRIPT cannot happen.
 *   KEYS: the keys; ARGV: the n addends, then the n TTLs. Returns the counts (or per-key errors).
 */
export const INCREMENT_SCRIPT = `
local n = #KEYS
local out = {}
for i = 1, n do
  local c = redis.pcall('INCRBY', KEYS[i], ARGV[i])
  if type(c) == 'number' then
    local e = redis.pcall('EXPIRE', KEYS[i], ARGV[n + i])
    if type(e) == 'table' then c = e end
  end
  out[i] = c
end
return out
`;

/** The script's KEYS and ARGV for one op. */
function scriptArgs(op: CounterOp, nowMs: number): [number, ...Array<string | number>] {
  const win = op.windowSeconds * 1000;
  if (op.rule.algorithm === 'token_bucket') {
    return [1, op.key, 't', op.hits, nowMs, win, emissionMs(op.rule, op.windowSeconds), op.rule.burst ?? op.rule.limit.requestsPerUnit];
  }
  return [2, op.key, op.prevKey ?? op.key, 's', op.hits, nowMs, win, op.rule.limit.requestsPerUnit];
}

const PHASE_GET = 0;
const PHASE_INCR = 1;

/** One `increment` call in flight. */
class Req {
  pending = 0;
  settled = false;
  phase = PHASE_INCR;
  readonly counts: number[];
  nowMs = 0;
  /** Counts before the request (GET phase of the stop-increment rule). */
  current: number[] | undefined;
  resolve!: (counts: number[]) => void;
  reject!: (err: StoreError) => void;

  constructor(
    readonly ops: readonly CounterOp[],
    readonly store: RedisStore,
  ) {
    this.counts = new Array<number>(ops.length);
  }

  fail(err: unknown): void {
    if (this.settled) return;
    this.settled = true;
    this.reject(toStoreError(err));
  }

  /** One batch holding some of this request's commands has answered. */
  batchDone(): void {
    if (--this.pending === 0 && !this.settled) this.store.phaseDone(this);
  }
}

/** Commands queued for one pipeline, with whose they are. */
class Batch {
  /** The request of each entry. */
  readonly reqs: Req[] = [];
  /** Per entry: op index i ≥ 0 for INCRBY+EXPIRE, ~i for a GET. */
  readonly idx: number[] = [];
  /** Per entry: an EVALSHA of the algorithm script (op index in idx). */
  readonly scripted: boolean[] = [];
  /** REDIS_BATCH_SCRIPT: the INCRBY/EXPIRE pairs, sent as one EVAL after the other commands. */
  readonly keys: string[] = [];
  readonly addends: number[] = [];
  readonly ttls: number[] = [];
  commands = 0;
  lastReq: Req | undefined = undefined;
  settled = false;
  deadline: NodeJS.Timeout | undefined = undefined;
  flight: Flight | undefined = undefined;

  /**
   * The commands: as RESP text for a single or sentinel connection (src/backends/redis/wire.ts),
   * as an ioredis pipeline for a cluster (which routes it and follows redirects).
   */
  constructor(
    readonly wire: WirePipeline | undefined,
    readonly pipeline: ChainableCommander | undefined,
    readonly slot: number,
  ) {}
}

/** Cluster batches of one flush, at most `cap` in flight (REDIS_CLUSTER_PIPELINE_PARALLELISM). */
class Flight {
  constructor(
    readonly batches: Batch[],
    public next: number,
  ) {}
}

/** The queue of one instance (main or per-second): one open batch, or one per slot in cluster mode. */
class Batcher {
  private open: Batch | undefined = undefined;
  private readonly bySlot = new Map<number, Batch>();
  private dirty: Batch[] = [];
  private timer: NodeJS.Timeout | undefined = undefined;
  private immediate: NodeJS.Immediate | undefined = undefined;
  private readonly cluster: boolean;
  private readonly cap: number;
  private readonly flushAllBound = (): void => this.flushAll();

  constructor(
    readonly conn: RedisConnection,
    private readonly windowMs: number,
    private readonly limit: number,
    parallelism: number,
    private readonly timeoutMs: number,
    private readonly batchScript: boolean,
  ) {
    this.cluster = conn.isCluster;
    this.cap = parallelism > 1 ? parallelism : 0;
  }

  /** Queues `INCRBY key addend` and `EXPIRE key ttl` for op `i` of `req`. */
  incr(req: Req, i: number, key: string, addend: number, ttl: number): void {
    const b = this.batchFor(key);
    if (this.batchScript) {
      b.keys.push(key);
      b.addends.push(addend);
      b.ttls.push(ttl);
    } else if (b.wire !== undefined) {
      b.wire.incrbyExpire(key, addend, ttl);
    } else {
      b.pipeline!.incrby(key, addend).expire(key, ttl);
    }
    b.commands += 2;
    this.note(b, req, i);
  }

  /** Queues the algorithm script for op `i` of `req`. */
  script(req: Req, i: number, op: CounterOp): void {
    const b = this.batchFor(op.key);
    if (b.wire !== undefined) b.wire.command('evalsha', [ALGORITHM_SCRIPT_SHA, ...scriptArgs(op, req.nowMs)]);
    else b.pipeline!.evalsha(ALGORITHM_SCRIPT_SHA, ...scriptArgs(op, req.nowMs));
    b.commands += 1;
    this.note(b, req, i, true);
  }

  /** Queues `GET key` for op `i` of `req`. */
  get(req: Req, i: number, key: string): void {
    const b = this.batchFor(key);
    if (b.wire !== undefined) b.wire.command('get', [key]);
    else b.pipeline!.get(key);
    b.commands += 1;
    this.note(b, req, ~i);
  }

  /**
   * One request's commands are queued. They go when the limit fills, when the window ends, or —
   * with neither set — at the end of this event-loop turn, so the requests decided in one turn
   * share one pipeline (one write; still one round trip each; ~25% more throughput than a write
   * per request).
   */
  commit(): void {
    if (this.limit > 0) {
      if (this.cluster) {
        let full: Batch[] | undefined;
        for (const b of this.dirty) {
          if (b.commands >= this.limit) (full ??= []).push(b);
        }
        if (full !== undefined) {
          for (const b of full) this.bySlot.delete(b.slot);
          this.dirty = this.dirty.filter((b) => b.commands < this.limit);
          this.launch(full);
        }
      } else if (this.open !== undefined && this.open.commands >= this.limit) {
        const b = this.open;
        this.open = undefined;
        this.dirty.length = 0;
        this.send(b);
      }
    }
    if (this.dirty.length === 0) return;
    if (this.windowMs > 0) {
      this.timer ??= setTimeout(this.flushAllBound, this.windowMs);
    } else {
      this.immediate ??= setImmediate(this.flushAllBound);
    }
  }

  /** Sends everything queued. */
  flushAll(): void {
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    if (this.immediate !== undefined) {
      clearImmediate(this.immediate);
      this.immediate = undefined;
    }
    if (this.cluster) {
      if (this.dirty.length === 0) return;
      const list = this.dirty;
      this.dirty = [];
      this.bySlot.clear();
      this.launch(list);
    } else if (this.open !== undefined) {
      const b = this.open;
      this.open = undefined;
      this.dirty.length = 0;
      this.send(b);
    }
  }

  private batchFor(key: string): Batch {
    if (!this.cluster) {
      let b = this.open;
      if (b === undefined) {
        b = new Batch(new WirePipeline(), undefined, -1);
        this.open = b;
        this.dirty.push(b);
      }
      return b;
    }
    const slot = calculateSlot(key);
    let b = this.bySlot.get(slot);
    if (b === undefined) {
      b = new Batch(undefined, this.conn.client().pipeline(), slot);
      this.bySlot.set(slot, b);
      this.dirty.push(b);
    }
    return b;
  }

  private note(b: Batch, req: Req, idx: number, scripted = false): void {
    b.reqs.push(req);
    b.idx.push(idx);
    b.scripted.push(scripted);
    if (b.lastReq !== req) {
      b.lastReq = req;
      req.pending++;
    }
  }

  private launch(list: Batch[]): void {
    if (this.cap === 0 || list.length <= this.cap) {
      for (const b of list) this.send(b);
      return;
    }
    const f = new Flight(list, this.cap);
    for (let k = 0; k < this.cap; k++) {
      list[k]!.flight = f;
      this.send(list[k]!);
    }
  }

  private send(b: Batch): void {
    const n = b.keys.length;
    // One REDIS_TIMEOUT deadline per pipeline (not one timer per command, as ioredis's
    // commandTimeout would arm); in cluster mode it also bounds ioredis's redirects and resends.
    // Armed first: a connection that cannot take commands answers before sendPipeline returns.
    b.deadline = setTimeout(() => this.fail(b, new Error('Command timed out')), this.timeoutMs);
    if (b.wire !== undefined) {
      if (n > 0) b.wire.command('eval', [INCREMENT_SCRIPT, n, ...b.keys, ...b.addends, ...b.ttls]);
      b.wire.send(this.conn.client() as Redis, (replies) => this.done(b, replies));
      return;
    }
    if (n > 0) b.pipeline!.eval(INCREMENT_SCRIPT, n, ...b.keys, ...b.addends, ...b.ttls);
    b.pipeline!.exec().then(
      (res) => {
        if (res === null) this.fail(b, new Error('pipeline returned no replies'));
        else this.done(b, res.map(([err, value]) => err ?? value));
      },
      (err: unknown) => this.fail(b, err),
    );
  }

  /** `replies`: one per command in queue order, an Error where the command failed. */
  private done(b: Batch, replies: unknown[]): void {
    if (b.settled) return;
    this.settle(b);
    const reqs = b.reqs;
    const idx = b.idx;
    // REDIS_BATCH_SCRIPT: the EVAL's reply (last) holds the INCRBY counts in queue order.
    let counted: unknown[] | undefined;
    let countError: Error | null = null;
    let next = 0;
    if (b.keys.length > 0) {
      const r = replies[replies.length - 1];
      if (r instanceof Error) countError = r;
      else if (!Array.isArray(r) || r.length !== b.keys.length) countError = new Error('the increment script answered an unexpected reply');
      else counted = r as unknown[];
    }
    let pos = 0;
    let last: Req | undefined;
    for (let k = 0; k < reqs.length; k++) {
      const req = reqs[k]!;
      const i = idx[k]!;
      if (req !== last) {
        last?.batchDone();
        last = req;
      }
      if (b.scripted[k] === true) {
        const r = replies[pos++];
        if (!(r instanceof Error)) req.counts[i] = Number(r);
        else if (r.message.startsWith('NOSCRIPT')) this.evalFallback(req, i);
        else req.fail(r);
      } else if (i >= 0 && this.batchScript) {
        const c = counted?.[next++];
        if (countError !== null) req.fail(countError);
        else if (c instanceof Error) req.fail(c);
        else req.counts[i] = c as number;
      } else if (i >= 0) {
        const incr = replies[pos];
        const expire = replies[pos + 1];
        pos += 2;
        if (incr instanceof Error) req.fail(incr);
        else if (expire instanceof Error) req.fail(expire);
        else req.counts[i] = incr as number;
      } else {
        const r = replies[pos++];
        if (r instanceof Error) req.fail(r);
        else req.current![~i] = toCount(r);
      }
    }
    last?.batchDone();
  }

  /** The script was not cached on that server: send that op again with EVAL (caches it). */
  private evalFallback(req: Req, i: number): void {
    req.pending++;
    let settled = false;
    const deadline = setTimeout(() => {
      if (settled) return;
      settled = true;
      req.fail(new Error('Command timed out'));
    }, this.timeoutMs);
    this.conn
      .client()
      .eval(ALGORITHM_SCRIPT, ...scriptArgs(req.ops[i]!, req.nowMs))
      .then(
        (v) => {
          if (settled) return;
          settled = true;
          clearTimeout(deadline);
          req.counts[i] = Number(v);
          req.batchDone();
        },
        (err: unknown) => {
          if (settled) return;
          settled = true;
          clearTimeout(deadline);
          req.fail(err);
        },
      );
  }

  private fail(b: Batch, err: unknown): void {
    if (b.settled) return;
    this.settle(b);
    const reqs = b.reqs;
    for (let k = 0; k < reqs.length; k++) reqs[k]!.fail(err);
  }

  private settle(b: Batch): void {
    b.settled = true;
    if (b.deadline !== undefined) clearTimeout(b.deadline);
    const f = b.flight;
    if (f !== undefined && f.next < f.batches.length) {
      const nb = f.batches[f.next++]!;
      nb.flight = f;
      this.send(nb);
    }
  }
}

function toCount(v: unknown): number {
  if (v === null || v === undefined) return 0;
  const n = Number(v);
  return Number.isFinite(n) ? n : 0;
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
    this.main = new RedisConnection({
      settings: s,
      shared: s,
      logger: options.logger,
      stats: options.stats,
      statsScope: 'ratelimit.redis_pool',
      label: 'redis',
      random: options.random,
    });
    this.mainBatcher = new Batcher(this.main, s.pipelineWindowMs, s.pipelineLimit, s.clusterPipelineParallelism, s.timeoutMs, s.batchScript);
    // The sliding-window script reads two windows' keys, which a cluster may hold in different slots.
    this.restrictions = this.main.isCluster
      ? [{ store: 'redis cluster', algorithm: 'sliding_window', reason: 'its two window keys may live in different hash slots' }]
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
        label: 'redis per-second',
        random: options.random,
      });
      this.perSecondBatcher = new Batcher(this.perSecond, p.pipelineWindowMs, p.pipelineLimit, p.clusterPipelineParallelism, p.timeoutMs, s.batchScript);
      this.perSecond.onStateChange(() => this.checkHealth());
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
  }

  increment(ops: readonly CounterOp[], nowMs: number, context?: IncrementContext): Promise<number[]> {
    if (this.closed) return Promise.reject(new StoreError('redis store is closed', false));
    if (ops.length === 0) return Promise.resolve([]);
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
        if (ps !== undefined && op.windowSeconds === 1) {
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
      if (ps !== undefined && op.windowSeconds === 1) {
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
      if (ps !== undefined && op.windowSeconds === 1) {
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

  private checkHealth(): void {
    const h = this.isHealthy();
    if (h === this.healthy) return;
    this.healthy = h;
    for (const l of this.healthListeners.slice()) l(h);
  }
}
