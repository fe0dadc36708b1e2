/**
 * The memory store's overflow (issue 40): the counts of keys its table keeps no counter for
 * (every counter is live, or the key's caller is past its budget of new counters), in count-min
 * sketches with conservative update. A key's count is the least of its DEPTH cells, one per row;
 * an increment raises each of those cells to at least that least value plus the hits, and no
 * cell ever goes down while its window lasts. So a count read back is never below the key's true
 * count: keys that share cells read more (their limit may tighten), never less (no limit loosens).
 *
 * One sketch per algorithm and window length, made when a key of that kind first overflows and
 * dropped by `sweep` once its windows have ended. All the keys of a sketch share their windows
 * (epoch-aligned), so a window's cells are cleared when the next window starts:
 * - fixed window: one generation of cells, the current window's;
 * - sliding window: two, the current window's and the previous one's, which it reads;
 * - token bucket (one sketch for every window length): cells hold theoretical arrival times (ms),
 *   which end by themselves; a cell at or before now reads as an empty bucket.
 * A clock set back across a window's end counts in the newest generation (more, never less for
 * its keys), but finds the older window's overflow counts gone.
 *
 * Each row is cut into BANDS bands, and a rule's keys use one band per row, chosen by the rule's
 * group (src/core/rule.ts) with a per-process seed. A spray of one rule's values fills that rule's
 * bands; another rule shares that band in a given row with probability 1/BANDS, and its count
 * stays its own unless it shares in all DEPTH rows (1 in 4,096 for one sprayed rule). Key hashes
 * are seeded per process too, so collisions cannot be chosen from outside.
 *
 * Memory: DEPTH x width cells of 8 bytes per generation (2 MiB at the default width, 65,536).
 * At that width about 10,000 keys of one rule can overflow in one window before 2 % of their
 * increments read more than their own count (bench/README.md, "Key spray").
 * Cost per op: one pass over the key to hash it, DEPTH reads and at most DEPTH writes; nothing is
 * allocated except a sketch's cells when it is made.
 */

/** Rows of every sketch. */
export const SKETCH_DEPTH = 4;
/** Bands per row. */
export const SKETCH_BANDS = 8;

/** Cells of one window (or, for token buckets, of all time). */
class Generation {
  /** The epoch second the window starts at; -1 before anything was counted. */
  start = -1;
  /** Cells above 0. */
  used = 0;
  /** Cells above 0 in each band of each row (row * SKETCH_BANDS + band). */
  readonly usedInBand = new Int32Array(SKETCH_DEPTH * SKETCH_BANDS);
  constructor(readonly cells: Float64Array) {}

  /** Empties the cells for the window starting at `start`. */
  reset(start: number): void {
    if (this.used > 0) {
      this.cells.fill(0);
      this.usedInBand.fill(0);
    }
    this.used = 0;
    this.start = start;
  }
}

type Kind = 'fixed' | 'sliding' | 'bucket';

class Sketch {
  readonly generations: Generation[];
  /** Token buckets: the latest TAT written (the sketch holds nothing once it has passed). */
  latestTat = 0;

  constructor(
    readonly kind: Kind,
    readonly windowSeconds: number,
    size: number,
  ) {
    const n = kind === 'sliding' ? 2 : 1;
    this.generations = Array.from({ length: n }, () => new Generation(new Float64Array(size)));
  }

  /** The generation of the window starting at `start`, if it is kept. */
  holding(start: number): Generation | undefined {
    const g = this.generations;
    if (g[0]!.start === start) return g[0];
    return g.length > 1 && g[1]!.start === start ? g[1] : undefined;
  }

  /**
   * The generation to count the window starting at `start` in: the one holding it, else the
   * oldest made over for it (a sliding window keeps the previous window's). A window older than
   * every generation counts in the newest.
   */
  counting(start: number): Generation {
    const held = this.holding(start);
    if (held !== undefined) return held;
    const g = this.generations;
    let oldest = g[0]!;
    let newest = g[0]!;
    for (let i = 1; i < g.length; i++) {
      if (g[i]!.start < oldest.start) oldest = g[i]!;
      if (g[i]!.start > newest.start) newest = g[i]!;
    }
    if (newest.start > start) return newest;
    oldest.reset(start);
    return oldest;
  }

  /** Whether everything counted has ended by `nowMs`. */
  ended(nowMs: number): boolean {
    if (this.kind === 'bucket') return this.latestTat <= nowMs;
    let last = -1;
    for (const g of this.generations) last = Math.max(last, g.start);
    // A sliding window's counts are read for one window more.
    const lives = this.kind === 'sliding' ? 2 : 1;
    return last < 0 || (last + lives * this.windowSeconds) * 1000 <= nowMs;
  }

  get bytes(): number {
    return this.generations.length * this.generations[0]!.cells.byteLength;
  }
}

export class OverflowSketches {
  private readonly fixed = new Map<number, Sketch>();
  private readonly sliding = new Map<number, Sketch>();
  private bucket: Sketch | undefined;
  private readonly size: number;
  private readonly bandWidth: number;
  /** Where the key last located has its cells, one per row, and the band of each. */
  private readonly at = new Int32Array(SKETCH_DEPTH);
  private readonly band = new Int32Array(SKETCH_DEPTH);
  private readonly keySeed: number;
  private readonly bandSeed: number;
  private live = 0;

  /** `width`: cells per row, a power of two of at least SKETCH_BANDS; `random` draws the seeds. */
  constructor(
    private readonly width: number,
    random: () => number = Math.random,
  ) {
    if (!Number.isInteger(width) || width < SKETCH_BANDS || (width & (width - 1)) !== 0) {
      throw new RangeError(`overflow sketch width must be a power of two >= ${SKETCH_BANDS}, got ${width}`);
    }
    this.keySeed = (random() * 0x100000000) | 0;
    this.bandSeed = (random() * 0x100000000) | 0;
    this.size = SKETCH_DEPTH * width;
    this.bandWidth = width / SKETCH_BANDS;
  }

  /** Whether any sketch holds counts (else every read is 0 and need not be made). */
  get active(): boolean {
    return this.live > 0;
  }

  /** Bytes held by the sketches' cells. */
  get bytes(): number {
    let n = this.bucket?.bytes ?? 0;
    for (const s of this.fixed.values()) n += s.bytes;
    for (const s of this.sliding.values()) n += s.bytes;
    return n;
  }

  /**
   * The share of cells above 0 in the fullest band of any row of any generation, in percent: near
   * 100, the keys of the rules of that band (one rule sprayed, or more keys than the band holds)
   * are over-counted.
   */
  get fillPercent(): number {
    let most = 0;
    const visit = (s: Sketch): void => {
      for (const g of s.generations) for (const n of g.usedInBand) if (n > most) most = n;
    };
    if (this.bucket !== undefined) visit(this.bucket);
    for (const s of this.fixed.values()) visit(s);
    for (const s of this.sliding.values()) visit(s);
    return (100 * most) / this.bandWidth;
  }

  // Fixed windows ---------------------------------------------------------------------------

  /** The count of `key` in its fixed window of `windowSeconds` at `nowMs`: at least its own. */
  fixedCount(key: string, group: number, windowSeconds: number, nowMs: number): number {
    const g = this.fixed.get(windowSeconds)?.holding(windowStartS(nowMs, windowSeconds));
    if (g === undefined) return 0;
    this.locate(key, group);
    return this.least(g.cells);
  }

  /** Adds `hits` to `key` in its fixed window; returns its count after (at least its own). */
  fixedAdd(key: string, group: number, windowSeconds: number, nowMs: number, hits: number): number {
    const g = this.sketch(this.fixed, 'fixed', windowSeconds).counting(windowStartS(nowMs, windowSeconds));
    this.locate(key, group);
    const after = this.least(g.cells) + hits;
    this.raise(g, after);
    return after;
  }

  // Sliding windows -------------------------------------------------------------------------

  /** The count of `key` in the window of `windowSeconds` that holds `atMs` (0 when none is kept). */
  slidingCount(key: string, group: number, windowSeconds: number, atMs: number): number {
    const g = this.sliding.get(windowSeconds)?.holding(windowStartS(atMs, windowSeconds));
    if (g === undefined) return 0;
    this.locate(key, group);
    return this.least(g.cells);
  }

  /** Raises the count of `key` in its current window to at least `count`. */
  slidingRaise(key: string, group: number, windowSeconds: number, nowMs: number, count: number): void {
    const g = this.sketch(this.sliding, 'sliding', windowSeconds).counting(windowStartS(nowMs, windowSeconds));
    this.locate(key, group);
    this.raise(g, count);
  }

  // Token buckets ---------------------------------------------------------------------------

  /** The TAT of `key` (ms; at least its own), undefined when none is after `nowMs`. */
  bucketTat(key: string, group: number, nowMs: number): number | undefined {
    const s = this.bucket;
    if (s === undefined) return undefined;
    this.locate(key, group);
    const tat = this.least(s.generations[0]!.cells);
    return tat > nowMs ? tat : undefined;
  }

  /** Sets the TAT of `key` to at least `tat`. */
  bucketRaise(key: string, group: number, tat: number): void {
    let s = this.bucket;
    if (s === undefined) {
      s = new Sketch('bucket', 0, this.size);
      s.generations[0]!.start = 0;
      this.bucket = s;
      this.live++;
    }
    this.locate(key, group);
    this.raise(s.generations[0]!, tat);
    if (tat > s.latestTat) s.latestTat = tat;
  }

  // -----------------------------------------------------------------------------------------

  /** Drops the sketches whose counts have all ended, giving their memory back. */
  sweep(nowMs: number): void {
    for (const map of [this.fixed, this.sliding]) {
      for (const [w, s] of map) {
        if (s.ended(nowMs)) {
          map.delete(w);
          this.live--;
        }
      }
    }
    if (this.bucket?.ended(nowMs) === true) {
      this.bucket = undefined;
      this.live--;
    }
  }

  clear(): void {
    this.fixed.clear();
    this.sliding.clear();
    this.bucket = undefined;
    this.live = 0;
  }

  private sketch(map: Map<number, Sketch>, kind: Kind, windowSeconds: number): Sketch {
    let s = map.get(windowSeconds);
    if (s === undefined) {
      s = new Sketch(kind, windowSeconds, this.size);
      map.set(windowSeconds, s);
      this.live++;
    }
    return s;
  }

  /** Fills `at` with the cell of `key` in each row, in the bands of `group`. */
  private locate(key: string, group: number): void {
    // Two FNV-1a style hashes in one pass (different bases and primes), combined per row
    // (Kirsch-Mitzenmacher) and mixed by murmur3's finaliser.
    let a = this.keySeed ^ 0x811c9dc5;
    let b = ~this.keySeed ^ 0x2545f491;
    for (let i = 0; i < key.length; i++) {
      const c = key.charCodeAt(i);
      a = Math.imul(a ^ c, 0x01000193);
      b = Math.imul(b ^ c, 0x5bd1e995);
    }
    b = mix(b) | 1;
    const bandWidth = this.bandWidth;
    const bandMask = SKETCH_BANDS - 1;
    const cellMask = bandWidth - 1;
    const g = group ^ this.bandSeed;
    for (let r = 0; r < SKETCH_DEPTH; r++) {
      const band = mix(g + Math.imul(r, 0x9e3779b9)) & bandMask;
      const cell = mix(a + Math.imul(r, b)) & cellMask;
      this.at[r] = r * this.width + band * bandWidth + cell;
      this.band[r] = r * SKETCH_BANDS + band;
    }
  }

  private least(cells: Float64Array): number {
    const at = this.at;
    let v = cells[at[0]!]!;
    for (let r = 1; r < SKETCH_DEPTH; r++) {
      const c = cells[at[r]!]!;
      if (c < v) v = c;
    }
    return v;
  }

  /** Conservative update: each cell of the key located last to at least `value`. */
  private raise(g: Generation, value: number): void {
    const at = this.at;
    const cells = g.cells;
    for (let r = 0; r < SKETCH_DEPTH; r++) {
      const i = at[r]!;
      const c = cells[i]!;
      if (c < value) {
        if (c === 0) {
          g.used++;
          g.usedInBand[this.band[r]!]!++;
        }
        cells[i] = value;
      }
    }
  }
}

/** The epoch second at which the window of `windowSeconds` holding `nowMs` starts. */
function windowStartS(nowMs: number, windowSeconds: number): number {
  return Math.floor(Math.floor(nowMs / 1000) / windowSeconds) * windowSeconds;
}

/** murmur3's 32-bit finaliser: every input bit reaches every output bit. */
function mix(h: number): number {
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return h ^ (h >>> 16);
}
