/**
 * The memory store's table: string keys to a count and an expiry, in typed arrays rather than a
 * Map of objects, so a million counters cost about 120 bytes each, keys included, and churn
 * retains nothing on the JavaScript heap. (With a Map of objects, every counter is a few objects
 * that survive into V8's old generation, and under churn V8 lets that heap grow to several times
 * the live data before it collects.)
 *
 * Layout: entries live in parallel arrays indexed by an id; `index` is an open-addressing hash
 * table (linear probing, backward-shift deletion, so no tombstones) of id + 1 (0 is empty).
 * Entries are linked in creation order (`older` / `newer`) for the cap's oldest-first eviction,
 * and freed ids are linked through `newer` for reuse. A key of up to KEY_SLOT Latin-1 characters
 * (cache keys usually are) is copied into a fixed slot of `keyBytes`; a longer or wider one is kept
 * as its string. Keys are compared in full, never by hash alone, and the hash has a per-process
 * random seed, so a crafted key can neither share another key's counter nor predictably lengthen
 * the probe sequences.
 */

const NONE = -1;
const INITIAL_CAPACITY = 1024;
/** Bytes of key kept per entry; a longer key is kept as a string. */
const KEY_SLOT = 64;
/** `stored` of an entry whose key is a string in `longKeys`. */
const LONG = -1;

export class CounterTable {
  /** The count of each id; for a token bucket, its TAT in ms. */
  counts = new Float64Array(INITIAL_CAPACITY);
  /** When each id's counter ends, in ms since the epoch. */
  expires = new Float64Array(INITIAL_CAPACITY);
  /** Per id: 0 free, n > 0 a key of n characters in `keyBytes`, LONG a key in `longKeys`. */
  private stored = new Int32Array(INITIAL_CAPACITY);
  private keyBytes = new Uint8Array(INITIAL_CAPACITY * KEY_SLOT);
  private readonly longKeys = new Map<number, string>();
  private hashes = new Int32Array(INITIAL_CAPACITY);
  private older = new Int32Array(INITIAL_CAPACITY);
  private newer = new Int32Array(INITIAL_CAPACITY);
  private index = new Int32Array(2 * INITIAL_CAPACITY);
  private mask = 2 * INITIAL_CAPACITY - 1;
  /** Ids below this have been handed out at least once. */
  private used = 0;
  private freeHead = NONE;
  private oldest = NONE;
  private newest = NONE;
  private live = 0;
  private readonly seed = (Math.random() * 0x100000000) | 0;
  /** The hash of the key last looked up, so the insert that usually follows does not rehash it. */
  private lastKey: string | undefined;
  private lastHash = 0;
  /** Whether the key last hashed has a character past Latin-1. */
  private lastWide = false;

  /** `onEvict` is called once per live entry the cap removes. */
  constructor(
    private readonly maxEntries: number,
    private readonly onEvict?: () => void,
  ) {}

  get size(): number {
    return this.live;
  }

  /** The id holding `key` (expired or not), or -1. */
  find(key: string): number {
    const h = this.hash(key);
    const index = this.index;
    const mask = this.mask;
    for (let p = h & mask; ; p = (p + 1) & mask) {
      const slot = index[p]!;
      if (slot === 0) return NONE;
      const id = slot - 1;
      if (this.hashes[id] === h && this.holds(id, key)) return id;
    }
  }

  /**
   * A fresh entry for `key` ending at `expiresAtMs`, count 0, and the newest in creation order.
   * `existing` is `find(key)`'s answer: an entry kept past its end is reused in place. At the cap
   * the oldest entry is evicted first.
   */
  create(key: string, existing: number, expiresAtMs: number): number {
    let id = existing;
    if (id !== NONE) {
      this.unlink(id);
    } else {
      if (this.live >= this.maxEntries) this.evictOldest();
      id = this.allocate();
      const h = this.hash(key);
      this.store(id, key);
      this.hashes[id] = h;
      this.place(id, h);
      this.live++;
    }
    this.counts[id] = 0;
    this.expires[id] = expiresAtMs;
    this.linkNewest(id);
    return id;
  }

  /**
   * Frees up to `budget` entries' worth of expired counters, continuing from where the last call
   * stopped; true once a whole pass over the table is complete.
   */
  sweepStep(nowMs: number, budget: number, cursor: { at: number }): boolean {
    const end = Math.min(this.used, cursor.at + budget);
    for (let id = cursor.at; id < end; id++) {
      if (this.stored[id] !== 0 && this.expires[id]! <= nowMs) this.remove(id);
    }
    cursor.at = end;
    if (end < this.used) return false;
    cursor.at = 0;
    return true;
  }

  clear(): void {
    this.stored.fill(0);
    this.longKeys.clear();
    this.index.fill(0);
    this.used = 0;
    this.freeHead = this.oldest = this.newest = NONE;
    this.live = 0;
    this.lastKey = undefined;
  }

  private hash(key: string): number {
    if (key === this.lastKey) return this.lastHash;
    // FNV-1a over UTF-16 units from a random basis, then murmur3's finaliser for the low bits.
    let h = this.seed ^ 0x811c9dc5;
    let all = 0;
    for (let i = 0; i < key.length; i++) {
      const c = key.charCodeAt(i);
      all |= c;
      h = Math.imul(h ^ c, 0x01000193);
    }
    this.lastWide = all > 0xff;
    h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
    h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
    h ^= h >>> 16;
    this.lastKey = key;
    this.lastHash = h;
    return h;
  }

  private holds(id: number, key: string): boolean {
    const n = this.stored[id]!;
    if (n === LONG) return this.longKeys.get(id) === key;
    if (n !== key.length) return false;
    const bytes = this.keyBytes;
    const base = id * KEY_SLOT;
    for (let i = 0; i < n; i++) if (bytes[base + i] !== key.charCodeAt(i)) return false;
    return true;
  }

  /** Copies `key` (just hashed) into the entry's slot, or keeps the string when it does not fit. */
  private store(id: number, key: string): void {
    const n = key.length;
    if (n === 0 || n > KEY_SLOT || this.lastWide) {
      this.stored[id] = LONG;
      this.longKeys.set(id, key);
      return;
    }
    const bytes = this.keyBytes;
    const base = id * KEY_SLOT;
    for (let i = 0; i < n; i++) bytes[base + i] = key.charCodeAt(i);
    this.stored[id] = n;
  }

  private place(id: number, h: number): void {
    const index = this.index;
    const mask = this.mask;
    let p = h & mask;
    while (index[p] !== 0) p = (p + 1) & mask;
    index[p] = id + 1;
  }

  private remove(id: number): void {
    const index = this.index;
    const mask = this.mask;
    let p = this.hashes[id]! & mask;
    while (index[p] !== id + 1) p = (p + 1) & mask;
    // Backward shift: pull later entries of the run into the hole when their home allows it.
    for (let q = (p + 1) & mask; index[q] !== 0; q = (q + 1) & mask) {
      const home = this.hashes[index[q]! - 1]! & mask;
      const stays = p <= q ? p < home && home <= q : p < home || home <= q;
      if (!stays) {
        index[p] = index[q]!;
        p = q;
      }
    }
    index[p] = 0;
    this.unlink(id);
    if (this.stored[id] === LONG) this.longKeys.delete(id);
    this.stored[id] = 0;
    this.newer[id] = this.freeHead;
    this.freeHead = id;
    this.live--;
  }

  private evictOldest(): void {
    if (this.oldest === NONE) return;
    this.remove(this.oldest);
    this.onEvict?.();
  }

  private allocate(): number {
    if (this.freeHead !== NONE) {
      const id = this.freeHead;
      this.freeHead = this.newer[id]!;
      return id;
    }
    if (this.used === this.counts.length) this.grow();
    return this.used++;
  }

  /**
   * Doubles the entry arrays (never past the cap) and rebuilds the index at half load or less.
   * Only called with every id live and fewer than `maxEntries` of them, so the arrays do grow.
   */
  private grow(): void {
    const cap = Math.min(this.counts.length * 2, this.maxEntries);
    const widen = <T extends Float64Array | Int32Array>(old: T, make: (n: number) => T): T => {
      const next = make(cap);
      next.set(old);
      return next;
    };
    this.counts = widen(this.counts, (n) => new Float64Array(n));
    this.expires = widen(this.expires, (n) => new Float64Array(n));
    this.hashes = widen(this.hashes, (n) => new Int32Array(n));
    this.older = widen(this.older, (n) => new Int32Array(n));
    this.newer = widen(this.newer, (n) => new Int32Array(n));
    this.stored = widen(this.stored, (n) => new Int32Array(n));
    const bytes = new Uint8Array(cap * KEY_SLOT);
    bytes.set(this.keyBytes);
    this.keyBytes = bytes;
    let size = this.index.length;
    while (size < 2 * cap) size *= 2;
    if (size !== this.index.length) {
      this.index = new Int32Array(size);
      this.mask = size - 1;
      for (let id = 0; id < this.used; id++) if (this.stored[id] !== 0) this.place(id, this.hashes[id]!);
    }
  }

  private linkNewest(id: number): void {
    this.older[id] = this.newest;
    this.newer[id] = NONE;
    if (this.newest !== NONE) this.newer[this.newest] = id;
    else this.oldest = id;
    this.newest = id;
  }

  private unlink(id: number): void {
    const o = this.older[id]!;
    const n = this.newer[id]!;
    if (o !== NONE) this.newer[o] = n;
    else this.oldest = n;
    if (n !== NONE) this.older[n] = o;
    else this.newest = o;
  }
}
