/**
 * The local over-limit cache (upstream uses freecache): remembers keys already over their limit
 * until their window ends, so the store is not asked again for them. Bounded in bytes by
 * LOCAL_CACHE_SIZE_IN_BYTES; when full, the oldest entries are evicted first.
 */
import type { StatsStore } from '../stats/store';

/** freecache refuses smaller caches; upstream inherits the floor, so do we. */
export const MIN_LOCAL_CACHE_BYTES = 512 * 1024;
/** Rough per-entry overhead (Map slot, number, string header) used for the byte budget. */
const ENTRY_OVERHEAD_BYTES = 48;

export interface LocalCacheCounters {
  hitCount: number;
  missCount: number;
  lookupCount: number;
  entryCount: number;
  evacuateCount: number;
  expiredCount: number;
  overwriteCount: number;
}

export class LocalCache {
  private readonly expiry = new Map<string, number>();
  private bytes = 0;
  readonly capacityBytes: number;
  readonly counters: LocalCacheCounters = {
    hitCount: 0,
    missCount: 0,
    lookupCount: 0,
    entryCount: 0,
    evacuateCount: 0,
    expiredCount: 0,
    overwriteCount: 0,
  };

  constructor(sizeInBytes: number) {
    this.capacityBytes = Math.max(sizeInBytes, MIN_LOCAL_CACHE_BYTES);
  }

  /** True when `key` is cached as over limit and its TTL has not passed. */
  has(key: string, nowMs: number): boolean {
    this.counters.lookupCount++;
    const exp = this.expiry.get(key);
    if (exp === undefined) {
      this.counters.missCount++;
      return false;
    }
    if (exp <= nowMs) {
      this.remove(key);
      this.counters.expiredCount++;
      this.counters.missCount++;
      return false;
    }
    this.counters.hitCount++;
    return true;
  }

  /** Marks `key` over limit for `ttlSeconds`. */
  set(key: string, ttlSeconds: number, nowMs: number): void {
    const exp = nowMs + ttlSeconds * 1000;
    if (this.expiry.has(key)) {
      this.counters.overwriteCount++;
      this.expiry.set(key, exp);
      return;
    }
    const size = key.length * 2 + ENTRY_OVERHEAD_BYTES;
    while (this.bytes + size > this.capacityBytes && this.expiry.size > 0) {
      const oldest = this.expiry.keys().next().value as string;
      this.remove(oldest);
      this.counters.evacuateCount++;
    }
    this.expiry.set(key, exp);
    this.bytes += size;
    this.counters.entryCount = this.expiry.size;
  }

  /** Publishes the freecache-style gauges under `ratelimit.localcache.` (upstream names). */
  publish(stats: StatsStore): void {
    const c = this.counters;
    c.entryCount = this.expiry.size;
    for (const name of Object.keys(c) as Array<keyof LocalCacheCounters>) {
      stats.gauge('ratelimit.localcache.' + name).set(c[name]);
    }
    stats.gauge('ratelimit.localcache.averageAccessTime').set(0);
  }

  private remove(key: string): void {
    if (this.expiry.delete(key)) {
      this.bytes -= key.length * 2 + ENTRY_OVERHEAD_BYTES;
      this.counters.entryCount = this.expiry.size;
    }
  }
}
