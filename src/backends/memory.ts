/**
 * The embedded memory store: epoch-aligned fixed windows counted in this process. JavaScript runs
 * one request's increments without interleaving, so counts are exact under any concurrency.
 * Each counter expires at the end of its window; a sweep, at most once a second and in bounded
 * slices, frees expired windows. A hard cap (MEMORY_MAX_KEYS) bounds memory under a flood of
 * distinct descriptor values: at the cap a new key takes the place of a counter whose window has
 * ended, and when every counter is live it is not counted (NOT_COUNTED: the limiter answers it
 * per BACKEND_FAILURE_MODE). A live counter is never dropped, so a client spraying distinct values
 * cannot reset anyone else's count. A check-only op (0 hits) reads without taking a place. The
 * counters live in a CounterTable (typed arrays), not in objects on the heap.
 */
import type { Counter, Gauge } from '../stats/store';
import type { Clock } from '../platform/clock';
import { emissionMs, gcra, slidingCount } from '../core/algorithms';
import { type Logger, silentLogger } from '../telemetry/logger';
import { ThrottledLog } from '../telemetry/throttled-log';
import { CounterTable } from './counter-table';
import { stopIncrementAddends } from './stop-increment';
import { NOT_COUNTED, type CounterOp, type CounterStore, type IncrementContext } from '../core/store';

export interface MemoryStoreOptions {
  /** Live counters kept at most (MEMORY_MAX_KEYS); past it new keys are not counted. */
  maxKeys: number;
  /** Counts the new keys not counted because every counter was live (`ratelimit.memory.keys_refused`). */
  refused?: Counter;
  /** Warned, at most once a second, while new keys are refused. */
  logger?: Logger;
  /** Paces that warning (default the system clock). */
  clock?: Clock;
  /** Follows the number of live counters (`ratelimit.memory.keys`). */
  keys?: Gauge;
  /** STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, honoured as the Redis store does. */
  stopIncrementWhenOverLimit?: boolean;
}

/** Ended counters a sweep frees per call, so freeing a million never stalls a request. */
const SWEEP_BUDGET = 16_384;

export class MemoryStore implements CounterStore {
  readonly kind = 'memory';
  private readonly table: CounterTable;
  private sweeping = false;
  private nextSweepMs = 0;
  private readonly fullWarning: ThrottledLog;

  constructor(private readonly options: MemoryStoreOptions) {
    this.table = new CounterTable(options.maxKeys);
    const logger = options.logger ?? silentLogger;
    this.fullWarning = new ThrottledLog((m) => logger.warn(m), 1000, options.clock);
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
      addends = stopIncrementAddends(ops, elsewhere, elsewhere ? undefined : ops.map((op) => this.peek(op.key, nowMs)));
    }
    const table = this.table;
    const out = new Array<number>(ops.length);
    for (let i = 0; i < ops.length; i++) {
      const op = ops[i]!;
      if (op.rule.algorithm !== undefined) {
        out[i] = this.applyAlgorithm(op, nowMs);
        continue;
      }
      const hits = addends === undefined ? op.hits : addends[i]!;
      let id = table.find(op.key);
      if (id < 0 || table.expires[id]! <= nowMs) {
        if (hits === 0) {
          out[i] = 0;
          continue;
        }
        id = this.create(op, id, nowMs);
        if (id < 0) {
          out[i] = NOT_COUNTED;
          continue;
        }
      }
      out[i] = table.counts[id] += hits;
    }
    return out;
  }

  /** sliding_window / token_bucket (src/limiter/algorithms.ts): decide, write only if admitted. */
  private applyAlgorithm(op: CounterOp, nowMs: number): number {
    const table = this.table;
    let id = table.find(op.key);
    const live = id >= 0 && table.expires[id]! > nowMs;
    if (op.rule.algorithm === 'token_bucket') {
      const burst = op.rule.burst ?? op.rule.limit.requestsPerUnit;
      const r = gcra(live ? table.counts[id] : undefined, op.hits, nowMs, emissionMs(op.rule, op.windowSeconds), burst);
      if (r.admitted && op.hits > 0) {
        // The bucket lives until its TAT: the expiry grows with it.
        if (live) {
          table.setExpiry(id, Math.ceil(r.tat));
        } else {
          id = this.create(op, id, nowMs, Math.ceil(r.tat));
          if (id < 0) return NOT_COUNTED;
        }
        table.counts[id] = r.tat;
      }
      return r.count;
    }
    const prev = op.prevKey !== undefined ? this.peek(op.prevKey, nowMs) : 0;
    const count = slidingCount(live ? table.counts[id]! : 0, prev, op.hits, nowMs, op.windowSeconds);
    if (count <= op.rule.limit.requestsPerUnit && op.hits > 0) {
      if (!live) {
        // Kept one more window: it is the next window's `previous`.
        const w = op.windowSeconds;
        const endS = Math.floor(Math.floor(nowMs / 1000) / w) * w + 2 * w;
        id = this.create(op, id, nowMs, endS * 1000);
        if (id < 0) return NOT_COUNTED;
      }
      table.counts[id] += op.hits;
    }
    return count;
  }

  /** The live count of `key`, 0 when it has none. */
  peek(key: string, nowMs: number): number {
    const id = this.table.find(key);
    return id < 0 || this.table.expires[id]! <= nowMs ? 0 : this.table.counts[id]!;
  }

  isHealthy(): boolean {
    return true;
  }

  close(): Promise<void> {
    this.table.clear();
    return Promise.resolve();
  }

  /**
   * A new counter for `op` (reusing `existing`, its expired entry, if any) ending with its window;
   * -1 (counted and warned about) when every counter is live.
   */
  private create(op: CounterOp, existing: number, nowMs: number, expiresAtMs?: number): number {
    const w = op.windowSeconds;
    const id = this.table.create(op.key, existing, nowMs, expiresAtMs ?? (Math.floor(Math.floor(nowMs / 1000) / w) * w + w) * 1000);
    if (id < 0) {
      this.options.refused?.inc();
      this.fullWarning.log(
        `memory store: all MEMORY_MAX_KEYS=${this.options.maxKeys} counters are live, so a new key is not counted ` +
          `(BACKEND_FAILURE_MODE decides its answer; live counters are never dropped): ${JSON.stringify(op.key.slice(0, 120))}`,
      );
    } else if (this.options.keys !== undefined) {
      this.options.keys.value = this.table.size;
    }
    return id;
  }

  /** At most once a second, a pass that frees expired counters, a bounded slice per call. */
  private sweep(nowMs: number): void {
    const done = this.table.sweepStep(nowMs, SWEEP_BUDGET);
    this.sweeping = !done;
    if (done) this.nextSweepMs = nowMs + 1000;
    if (this.options.keys !== undefined) this.options.keys.value = this.table.size;
  }
}
