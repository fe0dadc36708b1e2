/**
 * The embedded memory store: epoch-aligned fixed windows (and the other algorithms) counted in
 * this process. JavaScript runs one request's increments without interleaving, so counts are
 * exact under any concurrency. Each counter expires at the end of its window; a sweep, at most
 * once a second and in bounded slices, frees expired windows. The counters live in a
 * CounterTable (typed arrays), not in objects on the heap.
 *
 * A hard cap (MEMORY_MAX_KEYS) bounds the table under a flood of distinct descriptor values: at
 * the cap a new key takes the place of a counter whose window has ended. A live counter is never
 * dropped, so a client spraying distinct values cannot reset anyone else's count. When every
 * counter is live, a new key is still counted, in the overflow sketches (overflow-sketch.ts),
 * which may count more than a key's own hits but never less: a limit can tighten for keys that
 * collide there, never loosen. A caller (the client's address, from the context) may add at most
 * MEMORY_CALLER_NEW_KEYS_PER_SECOND new counters a second (caller-budget.ts); its further new keys
 * are counted in the sketches too, so that one client cannot fill the table for everyone. A key
 * that gets a counter after the sketches counted it starts from their count, never from 0. A
 * check-only op (0 hits) reads without taking a place. Candidate limits' counters live in a
 * second table of the same kind and bound, so they change nothing of the enforced ones.
 */
import type { Counter, Gauge } from '../stats/store';
import type { Clock } from '../platform/clock';
import { emissionMs, gcra, slidingCount } from '../core/algorithms';
import { type Logger, silentLogger } from '../telemetry/logger';
import { ThrottledLog } from '../telemetry/throttled-log';
import { CallerBudgets } from './caller-budget';
import { CounterTable } from './counter-table';
import { OverflowSketches } from './overflow-sketch';
import { stopIncrementAddends } from './stop-increment';
import type { CounterOp, CounterStore, IncrementContext } from '../core/store';

export interface MemoryStoreOptions {
  /** Live counters kept at most (MEMORY_MAX_KEYS); past it new keys are counted in the overflow. */
  maxKeys: number;
  /** Cells per row of each overflow sketch (MEMORY_OVERFLOW_WIDTH, a power of two); default 65,536. */
  overflowWidth?: number;
  /**
   * New counters one caller may add to the table a second (MEMORY_CALLER_NEW_KEYS_PER_SECOND);
   * 0 or undefined: no bound. Requests without a caller (in-process, Unix socket) have none.
   */
  callerNewKeysPerSecond?: number;
  /** Increments counted in the overflow because every counter was live (`ratelimit.memory.keys_overflowed`). */
  overflowed?: Counter;
  /** New keys counted in the overflow because their caller was past its budget (`ratelimit.memory.keys_over_caller_budget`). */
  overCallerBudget?: Counter;
  /** Bytes held by the overflow sketches (`ratelimit.memory.overflow_bytes`). */
  overflowBytes?: Gauge;
  /** Percent of the cells in use in the fullest band of the overflow sketches (`ratelimit.memory.overflow_fill`). */
  overflowFill?: Gauge;
  /** Warned, at most once every 10 s each, while new keys overflow. */
  logger?: Logger;
  /** Paces those warnings (default the system clock). */
  clock?: Clock;
  /** Follows the number of live counters (`ratelimit.memory.keys`). */
  keys?: Gauge;
  /** STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, honoured as the Redis store does. */
  stopIncrementWhenOverLimit?: boolean;
}

/** Ended counters a sweep frees per call, so freeing a million never stalls a request. */
const SWEEP_BUDGET = 16_384;
/** MEMORY_OVERFLOW_WIDTH's default. */
export const DEFAULT_OVERFLOW_WIDTH = 65_536;
/** The overflow warnings are written at most this often (each with the count left out). */
const WARNING_INTERVAL_MS = 10_000;

export class MemoryStore implements CounterStore {
  readonly kind = 'memory';
  private readonly table: CounterTable;
  private readonly overflow: OverflowSketches;
  private readonly callers: CallerBudgets | undefined;
  /**
   * The counters of candidate limits (CounterOp.follows), made at the first one: a store of their
   * own, also bounded by MEMORY_MAX_KEYS, so that a candidate never takes a place, an overflow
   * cell or a caller's budget from an enforced counter.
   */
  private candidates: MemoryStore | undefined;
  private sweeping = false;
  private nextSweepMs = 0;
  private readonly fullWarning: ThrottledLog;
  private readonly callerWarning: ThrottledLog;
  /** The warnings' lines, made only when one is written (not for every key of a flood). */
  private readonly fullLine: (key: string) => string;
  private readonly callerLine: (caller: string, key: string) => string;

  constructor(private readonly options: MemoryStoreOptions) {
    this.table = new CounterTable(options.maxKeys);
    this.overflow = new OverflowSketches(options.overflowWidth ?? DEFAULT_OVERFLOW_WIDTH);
    const perCaller = options.callerNewKeysPerSecond ?? 0;
    this.callers = perCaller > 0 ? new CallerBudgets(perCaller) : undefined;
    const logger = options.logger ?? silentLogger;
    this.fullWarning = new ThrottledLog((m) => logger.warn(m), WARNING_INTERVAL_MS, options.clock);
    this.callerWarning = new ThrottledLog((m) => logger.warn(m), WARNING_INTERVAL_MS, options.clock);
    this.fullLine = (key) =>
      `memory store: all MEMORY_MAX_KEYS=${options.maxKeys} counters are live, so new keys are counted in the overflow sketches ` +
      `(live counters are never dropped; a key that shares cells there may be over-counted, none is under-counted): ${JSON.stringify(key.slice(0, 120))}`;
    this.callerLine = (caller, key) =>
      `memory store: caller ${caller} added MEMORY_CALLER_NEW_KEYS_PER_SECOND=${perCaller} new counters within a second, ` +
      `so its further new keys are counted in the overflow sketches (a key that shares cells there may be over-counted, none is under-counted): ${JSON.stringify(key.slice(0, 120))}`;
  }

  get size(): number {
    return this.table.size;
  }

  increment(ops: readonly CounterOp[], nowMs: number, context?: IncrementContext): Promise<number[]> {
    return Promise.resolve(this.incrementSync(ops, nowMs, context));
  }

  /** The synchronous core, also used by in-process callers that need no promise. */
  incrementSync(ops: readonly CounterOp[], nowMs: number, context?: IncrementContext): number[] {
    if (this.sweeping || nowMs >= this.nextSweepMs) this.sweep(nowMs);
    let addends: number[] | undefined;
    if (this.options.stopIncrementWhenOverLimit === true) {
      const elsewhere = context?.overLimitElsewhere === true;
      addends = stopIncrementAddends(ops, elsewhere, elsewhere ? undefined : ops.map((op) => this.current(op, nowMs)));
    }
    const table = this.table;
    const out = new Array<number>(ops.length);
    for (let i = 0; i < ops.length; i++) {
      const op = ops[i]!;
      if (op.follows !== undefined) {
        out[i] = (this.candidates ??= new MemoryStore({ maxKeys: this.options.maxKeys, overflowWidth: this.options.overflowWidth })).countAlone(op, nowMs);
        continue;
      }
      if (op.rule.algorithm !== undefined) {
        out[i] = this.applyAlgorithm(op, nowMs, context);
        continue;
      }
      const hits = addends === undefined ? op.hits : addends[i]!;
      const id = table.find(op.key);
      if (id >= 0 && table.expires[id]! > nowMs) out[i] = table.counts[id] += hits;
      else out[i] = this.fixedWithoutCounter(op, id, hits, nowMs, context);
    }
    return out;
  }

  /**
   * One candidate limit's op, in this store of candidate counters (no caller budget, no
   * STOP_CACHE_KEY_INCREMENT: every hit counted).
   */
  private countAlone(op: CounterOp, nowMs: number): number {
    if (this.sweeping || nowMs >= this.nextSweepMs) this.sweep(nowMs);
    if (op.rule.algorithm !== undefined) return this.applyAlgorithm(op, nowMs, undefined);
    const table = this.table;
    const id = table.find(op.key);
    if (id >= 0 && table.expires[id]! > nowMs) return (table.counts[id] += op.hits);
    return this.fixedWithoutCounter(op, id, op.hits, nowMs, undefined);
  }

  /** A fixed window whose key has no live counter (`existing`: its ended entry, or -1). */
  private fixedWithoutCounter(op: CounterOp, existing: number, hits: number, nowMs: number, context: IncrementContext | undefined): number {
    const overflow = this.overflow;
    const group = op.rule.group ?? 0;
    if (hits === 0) return overflow.active ? overflow.fixedCount(op.key, group, op.windowSeconds, nowMs) : 0;
    const id = this.place(op, existing, nowMs, context, fixedWindowEndMs(nowMs, op.windowSeconds));
    if (id < 0) return overflow.fixedAdd(op.key, group, op.windowSeconds, nowMs, hits);
    // What the overflow counted for the key before it had a place.
    const before = overflow.active ? overflow.fixedCount(op.key, group, op.windowSeconds, nowMs) : 0;
    return (this.table.counts[id] = before + hits);
  }

  /** sliding_window / token_bucket (src/limiter/algorithms.ts): decide, write only if admitted. */
  private applyAlgorithm(op: CounterOp, nowMs: number, context: IncrementContext | undefined): number {
    const table = this.table;
    const overflow = this.overflow;
    const group = op.rule.group ?? 0;
    let id = table.find(op.key);
    const live = id >= 0 && table.expires[id]! > nowMs;
    if (op.rule.algorithm === 'token_bucket') {
      const burst = op.rule.burst ?? op.rule.limit.requestsPerUnit;
      const stored = live ? table.counts[id] : overflow.active ? overflow.bucketTat(op.key, group, nowMs) : undefined;
      const r = gcra(stored, op.hits, nowMs, emissionMs(op.rule, op.windowSeconds), burst);
      if (r.admitted && op.hits > 0) {
        // The bucket lives until its TAT: the expiry grows with it.
        if (live) {
          table.setExpiry(id, Math.ceil(r.tat));
        } else {
          id = this.place(op, id, nowMs, context, Math.ceil(r.tat));
          if (id < 0) {
            overflow.bucketRaise(op.key, group, r.tat);
            return r.count;
          }
        }
        table.counts[id] = r.tat;
      }
      return r.count;
    }
    const w = op.windowSeconds;
    const current = live ? table.counts[id]! : overflow.active ? overflow.slidingCount(op.key, group, w, nowMs) : 0;
    const prev = op.prevKey !== undefined ? this.previous(op.prevKey, group, w, nowMs) : 0;
    const count = slidingCount(current, prev, op.hits, nowMs, w);
    if (count <= op.rule.limit.requestsPerUnit && op.hits > 0) {
      if (live) {
        table.counts[id] += op.hits;
      } else {
        // Kept one more window: it is the next window's `previous`.
        id = this.place(op, id, nowMs, context, fixedWindowEndMs(nowMs, w) + w * 1000);
        if (id < 0) overflow.slidingRaise(op.key, group, w, nowMs, current + op.hits);
        else table.counts[id] = current + op.hits;
      }
    }
    return count;
  }

  /** A sliding window's previous count: its counter if live, else the overflow's count. */
  private previous(key: string, group: number, windowSeconds: number, nowMs: number): number {
    const id = this.table.find(key);
    if (id >= 0 && this.table.expires[id]! > nowMs) return this.table.counts[id]!;
    return this.overflow.active ? this.overflow.slidingCount(key, group, windowSeconds, nowMs - windowSeconds * 1000) : 0;
  }

  /** A fixed window's count before this request, wherever it is kept (for STOP_CACHE_KEY_INCREMENT). */
  private current(op: CounterOp, nowMs: number): number {
    const c = this.peek(op.key, nowMs);
    if (c > 0 || op.rule.algorithm !== undefined || !this.overflow.active) return c;
    return this.overflow.fixedCount(op.key, op.rule.group ?? 0, op.windowSeconds, nowMs);
  }

  /** The live count of `key` in the table, 0 when it has none there. */
  peek(key: string, nowMs: number): number {
    const id = this.table.find(key);
    return id < 0 || this.table.expires[id]! <= nowMs ? 0 : this.table.counts[id]!;
  }

  isHealthy(): boolean {
    return true;
  }

  close(): Promise<void> {
    this.table.clear();
    this.overflow.clear();
    this.callers?.clear();
    void this.candidates?.close();
    return Promise.resolve();
  }

  /**
   * A counter for `op` ending at `expiresAtMs` (reusing `existing`, its ended entry, if any), or
   * -1, counted and warned about, when the key is to be counted in the overflow: every counter is
   * live, or the caller has added its MEMORY_CALLER_NEW_KEYS_PER_SECOND new counters this second.
   */
  private place(op: CounterOp, existing: number, nowMs: number, context: IncrementContext | undefined, expiresAtMs: number): number {
    const table = this.table;
    if (existing < 0) {
      if (!table.hasRoom(nowMs)) {
        this.options.overflowed?.inc();
        this.fullWarning.logWith(this.fullLine, op.key);
        return -1;
      }
      const caller = context?.caller;
      if (caller !== undefined && this.callers !== undefined && !this.callers.take(caller, nowMs)) {
        this.options.overCallerBudget?.inc();
        this.callerWarning.logWith(this.callerLine, caller, op.key);
        return -1;
      }
    }
    const id = table.create(op.key, existing, nowMs, expiresAtMs);
    if (this.options.keys !== undefined) this.options.keys.value = table.size;
    return id;
  }

  /**
   * At most once a second, a pass that frees expired counters, a bounded slice per call; at its
   * start, the overflow sketches and caller budgets that hold nothing any more are dropped.
   */
  private sweep(nowMs: number): void {
    if (!this.sweeping) {
      this.overflow.sweep(nowMs);
      this.callers?.sweep(nowMs);
      if (this.options.overflowBytes !== undefined) this.options.overflowBytes.value = this.overflow.bytes;
      if (this.options.overflowFill !== undefined) this.options.overflowFill.value = Math.round(this.overflow.fillPercent);
    }
    const done = this.table.sweepStep(nowMs, SWEEP_BUDGET);
    this.sweeping = !done;
    if (done) this.nextSweepMs = nowMs + 1000;
    if (this.options.keys !== undefined) this.options.keys.value = this.table.size;
  }
}

/** When the fixed window of `windowSeconds` holding `nowMs` ends, in ms. */
function fixedWindowEndMs(nowMs: number, windowSeconds: number): number {
  return (Math.floor(Math.floor(nowMs / 1000) / windowSeconds) * windowSeconds + windowSeconds) * 1000;
}
