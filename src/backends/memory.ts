/**
 * The embedded memory store: epoch-aligned fixed windows counted in this process. JavaScript runs
 * one request's increments without interleaving, so counts are exact under any concurrency.
 * Each counter expires at the end of its window; a sweep, at most once a second, drops expired
 * windows, and a hard cap (MEMORY_MAX_KEYS) evicts the oldest counters first, so memory stays
 * bounded under a flood of distinct descriptor values.
 */
import type { Counter, Gauge } from '../stats/store';
import { stopIncrementAddends } from './stop-increment';
import type { CounterOp, CounterStore, IncrementContext } from './types';

interface Slot {
  count: number;
  readonly expiresAtMs: number;
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
      let slot = this.slots.get(op.key);
      if (slot === undefined || slot.expiresAtMs <= nowMs) {
        slot = this.create(op, nowMs);
      }
      slot.count += addends === undefined ? op.hits : addends[i]!;
      out[i] = slot.count;
    }
    return out;
  }

  /** The live count of `key`, 0 when it has none (also the explain tool's view). */
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
    return Promise.resolve();
  }

  private create(op: CounterOp, nowMs: number): Slot {
    const w = op.windowSeconds;
    const nowS = Math.floor(nowMs / 1000);
    const endS = Math.floor(nowS / w) * w + w;
    if (!this.slots.has(op.key)) {
      while (this.slots.size >= this.options.maxKeys && this.slots.size > 0) {
        const oldest = this.slots.keys().next().value as string;
        this.slots.delete(oldest);
        this.options.evictions?.inc();
      }
    }
    const slot: Slot = { count: 0, expiresAtMs: endS * 1000 };
    this.slots.set(op.key, slot);
    let bucket = this.byExpiry.get(endS);
    if (bucket === undefined) {
      bucket = [];
      this.byExpiry.set(endS, bucket);
    }
    bucket.push(op.key);
    if (++this.bucketed > 2 * this.options.maxKeys + 1024) this.rebuildBuckets();
    if (this.options.keys !== undefined) this.options.keys.value = this.slots.size;
    return slot;
  }

  /** Evicted keys linger in byExpiry until their window ends; drop them so it stays bounded. */
  private rebuildBuckets(): void {
    this.byExpiry.clear();
    this.bucketed = 0;
    for (const [k, slot] of this.slots) {
      const endS = slot.expiresAtMs / 1000;
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
