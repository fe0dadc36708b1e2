/**
 * The memory store's table: string keys to a count and an expiry, in typed arrays rather than a
 * Map of objects, so a million counters cost about 120 bytes each, keys included, and churn
 * retains nothing on the JavaScript heap. (With a Map of objects, every counter is a few objects
 * that survive into V8's old generation, and under churn V8 lets that heap grow to several times
 * the live data before it collects.)
 *
 * Layout: entries live in parallel arrays indexed by an id; `index` is an open-addressing hash
 * table (linear probing, backward-shift deletion, so no tombstones) of id + 1 (0 is empty).
 * `heap` is a binary min-heap of the ids by expiry (`heapAt` is each id's place in it), so the
 * counter that ends first is always at hand: the sweep frees ended counters from its top, and at
 * the cap a new key takes the place of an ended counter or is refused, never of a live one (a
 * live counter dropped would restart at zero: whoever sprays distinct keys could reset someone
 * else's count). Freed ids are linked through `heapAt` for reuse. A key of up to KEY_SLOT Latin-1 characters
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
  /** Live ids, a min-heap on `expires`. */
  private heap = new Int32Array(INITIAL_CAPACITY);
  /** Per live id its position in `heap`; per free id the next free id. */
  private heapAt = new Int32Array(INITIAL_CAPACITY);
  private index = new Int32Array(2 * INITIAL_CAPACITY);
  private mask = 2 * INITIAL_CAPACITY - 1;
  /** Ids below this have been handed out at least once. */
  private used = 0;
  private freeHead = NONE;
  /** Live entries; also the heap's length. */
  private live = 0;
  private readonly seed = (Math.random() * 0x100000000) | 0;
  /** The hash of the key last looked up, so the insert that usually follows does not rehash it. */
  private lastKey: string | undefined;
  private lastHash = 0;
  /** Whether the key last hashed has a character past Latin-1. */
  private lastWide = false;

  constructor(private readonly maxEntries: number) {}

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
   * A fresh entry for `key` ending at `expiresAtMs`, count 0; -1 when the table holds `maxEntries`
   * live counters (none ended by `nowMs`), so that a new key never displaces a live one.
   * `existing` is `find(key)`'s answer: an entry kept past its end is reused in place. At the cap
   * the counter that ended first makes room.
   */
  create(key: string, existing: number, nowMs: number, expiresAtMs: number): number {
    let id = existing;
    if (id !== NONE) {
      this.counts[id] = 0;
      this.setExpiry(id, expiresAtMs);
      return id;
    }
    if (this.live >= this.maxEntries) {
      const first = this.heap[0]!;
      if (this.expires[first]! > nowMs) return NONE;
      this.remove(first);
    }
    id = this.allocate();
    const h = this.hash(key);
    this.store(id, key);
    this.hashes[id] = h;
    this.place(id, h);
    this.counts[id] = 0;
    this.expires[id] = expiresAtMs;
    this.heap[this.live] = id;
    this.heapAt[id] = this.live;
    this.live++;
    this.siftUp(this.live - 1);
    return id;
  }

  /** Whether `create` of a key not held can succeed at `nowMs`: a place is free or ended. */
  hasRoom(nowMs: number): boolean {
    return this.live < this.maxEntries || this.expires[this.heap[0]!]! <= nowMs;
  }

  /** Moves the end of a live entry (a token bucket's grows with its TAT). */
  setExpiry(id: number, expiresAtMs: number): void {
    const was = this.expires[id]!;
    this.expires[id] = expiresAtMs;
    if (expiresAtMs > was) this.siftDown(this.heapAt[id]!);
    else if (expiresAtMs < was) this.siftUp(this.heapAt[id]!);
  }

  /**
   * Frees ended counters, those ending first first, at most `budget` of them; true once none ended
   * by `nowMs` is left.
   */
  sweepStep(nowMs: number, budget: number): boolean {
    for (let n = 0; n < budget; n++) {
      if (this.live === 0 || this.expires[this.heap[0]!]! > nowMs) return true;
      this.remove(this.heap[0]!);
    }
    return this.live === 0 || this.expires[this.heap[0]!]! > nowMs;
  }

  clear(): void {
    this.stored.fill(0);
    this.longKeys.clear();
    this.index.fill(0);
    this.used = 0;
    this.freeHead = NONE;
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
    // Out of the heap: the last entry fills its place and moves up or down from there.
    const at = this.heapAt[id]!;
    const last = this.heap[--this.live]!;
    if (last !== id) {
      this.heap[at] = last;
      this.heapAt[last] = at;
      this.siftDown(at);
      this.siftUp(this.heapAt[last]!);
    }
    if (this.stored[id] === LONG) this.longKeys.delete(id);
    this.stored[id] = 0;
    this.heapAt[id] = this.freeHead;
    this.freeHead = id;
  }

  private allocate(): number {
    if (this.freeHead !== NONE) {
      const id = this.freeHead;
      this.freeHead = this.heapAt[id]!;
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
    this.heap = widen(this.heap, (n) => new Int32Array(n));
    this.heapAt = widen(this.heapAt, (n) => new Int32Array(n));
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

  private siftUp(at: number): void {
    const heap = this.heap;
    const expires = this.expires;
    const id = heap[at]!;
    const end = expires[id]!;
    while (at > 0) {
      const up = (at - 1) >> 1;
      const parent = heap[up]!;
      if (expires[parent]! <= end) break;
      heap[at] = parent;
      this.heapAt[parent] = at;
      at = up;
    }
    heap[at] = id;
    this.heapAt[id] = at;
  }

  private siftDown(at: number): void {
    const heap = this.heap;
    const expires = this.expires;
    const n = this.live;
    const id = heap[at]!;
    const end = expires[id]!;
    for (;;) {
      let child = 2 * at + 1;
      if (child >= n) break;
      if (child + 1 < n && expires[heap[child + 1]!]! < expires[heap[child]!]!) child++;
      const c = heap[child]!;
      if (expires[c]! >= end) break;
      heap[at] = c;
      this.heapAt[c] = at;
      at = child;
    }
    heap[at] = id;
    this.heapAt[id] = at;
  }
}
