/**
 * The embedded memory store: epoch-aligned fixed windows counted in this process. JavaScript runs
 * one request's increments without interleaving, so counts are exact under any concurrency.
 * Each counter expires at the end of its window; a sweep, at most once a second, drops expired
 * windows, and a hard cap (MEMORY_MAX_KEYS) evicts the oldest counters first, so memory stays
 * bounded under a flood of distinct descriptor values.
 */
import type { Counter, Gauge } from '../stats/store';
import { emissionMs, gcra, slidingCount } from '../limiter/algorithms';
import { stopIncrementAddends } from './stop-increment';
import type { CounterOp, CounterStore, IncrementContext } from './types';

interface Slot {
  /** The counter; for a token bucket, its TAT in ms. */
  count: number;
  /** Grows for a token bucket (its TAT); the slot is also re-filed under its new expiry. */
  expiresAtMs: number;
  readonly key: string;
}

export interface MemoryStoreOptions {
  /** Live counters kept at most; past it the oldest are evicted (counted in `evictions`). */
  maxKeys: number;
  /** Counts counters evicted by the cap before their window ended. */
  evictions?: Counter;
  /** Follows the number of live counters (`ratelimit.memory.keys`). */
  keys?: Gauge;
  /** STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, honoured as the Redis store does. */
  stopIncrementWhenOverLimit?: boolean;
}

export class MemoryStore implements CounterStore {
  readonly kind = 'memory';
  private readonly slots = new Map<string, Slot>();
  /** Keys grouped by the second their window ends: keys of one window share an expiry. */
  private readonly byExpiry = new Map<number, string[]>();
  /** Entries in byExpiry, live or evicted; rebuilt when it outgrows the live set. */
  private bucketed = 0;
  /**
   * Slots in creation order, for the cap's oldest-first eviction; `head` is the oldest not yet
   * looked at. Entries whose slot has expired or was replaced are skipped when reached. (Taking
   * the Map's first key instead costs a walk over every deleted entry still at the front of V8's
   * table, quadratic under a flood: ten times slower at a cap of a million.)
   */
  private order: Array<Slot | undefined> = [];
  private head = 0;
  private nextSweepMs = 0;

  constructor(private readonly options: MemoryStoreOptions) {}

  get size(): number {
    return this.slots.size;
  }

  increment(ops: readonly CounterOp[], nowMs: number, context?: IncrementContext): Promise<number[]> {
    return Promise.resolve(this.incrementSync(ops, nowMs, context));
  }

  /** The synchronous core, also used by in-process callers that need no promise. */
  incrementSync(ops: readonly CounterOp[], nowMs: number, context?: IncrementContext): number[] {
    if (nowMs >= this.nextSweepMs) this.sweep(nowMs);
    let addends: number[] | undefined;
    if (this.options.stopIncrementWhenOverLimit === true) {
      const elsewhere = context?.overLimitElsewhere === true;
      addends = stopIncrementAddends(ops, elsewhere, elsewhere ? undefined : ops.map((op) => this.peek(op.key, nowMs)));
    }
    const out = new Array<number>(ops.length);
    for (let i = 0; i < ops.length; i++) {
      const op = ops[i]!;
      if (op.rule.algorithm !== undefined) {
        out[i] = this.applyAlgorithm(op, nowMs);
        continue;
      }
      let slot = this.slots.get(op.key);
      if (slot === undefined || slot.expiresAtMs <= nowMs) {
        slot = this.create(op, nowMs);
      }
      slot.count += addends === undefined ? op.hits : addends[i]!;
      out[i] = slot.count;
    }
    return out;
  }

  /** sliding_window / token_bucket (src/limiter/algorithms.ts): decide, write only if admitted. */
  private applyAlgorithm(op: CounterOp, nowMs: number): number {
    if (op.rule.algorithm === 'token_bucket') {
      const slot = this.slots.get(op.key);
      const live = slot !== undefined && slot.expiresAtMs > nowMs ? slot.count : undefined;
      const burst = op.rule.burst ?? op.rule.limit.requestsPerUnit;
      const r = gcra(live, op.hits, nowMs, emissionMs(op.rule, op.windowSeconds), burst);
      if (r.admitted && op.hits > 0) {
        const exp = Math.ceil(r.tat);
        if (slot === undefined || slot.expiresAtMs <= nowMs) {
          const created = this.create(op, nowMs, exp);
          created.count = r.tat;
        } else {
          slot.count = r.tat;
          this.refile(op.key, slot, exp);
        }
      }
      return r.count;
    }
    const prev = op.prevKey !== undefined ? this.peek(op.prevKey, nowMs) : 0;
    let slot = this.slots.get(op.key);
    const cur = slot === undefined || slot.expiresAtMs <= nowMs ? 0 : slot.count;
    const count = slidingCount(cur, prev, op.hits, nowMs, op.windowSeconds);
    if (count <= op.rule.limit.requestsPerUnit && op.hits > 0) {
      if (slot === undefined || slot.expiresAtMs <= nowMs) {
        // Kept one more window: it is the next window's `previous`.
        const w = op.windowSeconds;
        const endS = Math.floor(Math.floor(nowMs / 1000) / w) * w + 2 * w;
        slot = this.create(op, nowMs, endS * 1000);
      }
      slot.count += op.hits;
    }
    return count;
  }

  /** Moves a slot whose expiry grew to the bucket of its new expiry. */
  private refile(key: string, slot: Slot, expiresAtMs: number): void {
    const oldS = Math.ceil(slot.expiresAtMs / 1000);
    slot.expiresAtMs = expiresAtMs;
    const endS = Math.ceil(expiresAtMs / 1000);
    if (endS <= oldS) return;
    this.file(key, endS);
  }

  private file(key: string, endS: number): void {
    let bucket = this.byExpiry.get(endS);
    if (bucket === undefined) {
      bucket = [];
      this.byExpiry.set(endS, bucket);
    }
    bucket.push(key);
    if (++this.bucketed > 2 * this.options.maxKeys + 1024) this.rebuildBuckets();
  }

  /** The live count of `key`, 0 when it has none. */
  peek(key: string, nowMs: number): number {
    const slot = this.slots.get(key);
    return slot === undefined || slot.expiresAtMs <= nowMs ? 0 : slot.count;
  }

  isHealthy(): boolean {
    return true;
  }

  close(): Promise<void> {
    this.slots.clear();
    this.byExpiry.clear();
    this.order = [];
    this.head = 0;
    return Promise.resolve();
  }

  private create(op: CounterOp, nowMs: number, expiresAtMs?: number): Slot {
    const w = op.windowSeconds;
    const nowS = Math.floor(nowMs / 1000);
    const endS = expiresAtMs !== undefined ? Math.ceil(expiresAtMs / 1000) : Math.floor(nowS / w) * w + w;
    if (!this.slots.has(op.key)) {
      while (this.slots.size >= this.options.maxKeys && this.evictOldest());
    }
    const slot: Slot = { count: 0, expiresAtMs: expiresAtMs ?? endS * 1000, key: op.key };
    this.slots.set(op.key, slot);
    this.order.push(slot);
    // Expired and replaced slots leave entries behind: at most as many as live ones (+1024), so
    // each compaction is paid for by the creations since the last one.
    if (this.order.length - this.head > 2 * this.slots.size + 1024) this.compactOrder();
    this.file(op.key, endS);
    if (this.options.keys !== undefined) this.options.keys.value = this.slots.size;
    return slot;
  }

  /** Deletes the oldest live slot; false when there is none. */
  private evictOldest(): boolean {
    const order = this.order;
    while (this.head < order.length) {
      const slot = order[this.head]!;
      order[this.head++] = undefined;
      if (this.slots.get(slot.key) === slot) {
        this.slots.delete(slot.key);
        this.options.evictions?.inc();
        if (this.head > 1024 && 2 * this.head > order.length) this.compactOrder();
        return true;
      }
    }
    return false;
  }

  /** Keeps only the queue entries of live slots, in order. */
  private compactOrder(): void {
    const live: Slot[] = [];
    for (let i = this.head; i < this.order.length; i++) {
      const slot = this.order[i]!;
      if (this.slots.get(slot.key) === slot) live.push(slot);
    }
    this.order = live;
    this.head = 0;
  }

  /** Evicted keys linger in byExpiry until their window ends; drop them so it stays bounded. */
  private rebuildBuckets(): void {
    this.byExpiry.clear();
    this.bucketed = 0;
    for (const [k, slot] of this.slots) {
      const endS = Math.ceil(slot.expiresAtMs / 1000);
      let bucket = this.byExpiry.get(endS);
      if (bucket === undefined) {
        bucket = [];
        this.byExpiry.set(endS, bucket);
      }
      bucket.push(k);
      this.bucketed++;
    }
  }

  private sweep(nowMs: number): void {
    this.nextSweepMs = nowMs + 1000;
    for (const [endS, keys] of this.byExpiry) {
      if (endS * 1000 > nowMs) continue;
      for (const k of keys) {
        const slot = this.slots.get(k);
        if (slot !== undefined && slot.expiresAtMs <= nowMs) this.slots.delete(k);
      }
      this.bucketed -= keys.length;
      this.byExpiry.delete(endS);
    }
    if (this.options.keys !== undefined) this.options.keys.value = this.slots.size;
  }
}
