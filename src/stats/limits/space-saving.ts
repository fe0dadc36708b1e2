/**
 * A Space-Saving summary (Metwally, Agrawal, El Abbadi 2005): the heaviest keys of a stream in
 * `capacity` counters, whatever the number of distinct keys. Each listed key has a `count` and an
 * `error`: its true weight since it was listed lies in [count - error, count], and error is at
 * most the summary's smallest count, itself at most total / capacity. Any key heavier than
 * total / capacity is listed.
 *
 * One change for the service: a full summary lists a new key only when the caller `admit`s it
 * (the limiter admits a key the store had already counted in its window, so a spray of values
 * seen once each cannot take the places of the keys that repeat). A refused key's weight is
 * counted in `total` and nowhere else, so the bounds above still hold for the keys listed.
 *
 * Summaries merge (for a horizon made of several periods): a key missing from a full summary is
 * taken at that summary's smallest count, as error, so the merged bounds are the sums of the parts'.
 */
import type { Entry } from '../../core/rls';

/** A request's entries as `k=v` pairs joined by `,` (the explain tool's descriptor syntax). */
export function entriesText(entries: readonly Entry[]): string {
  let out = '';
  for (let i = 0; i < entries.length; i++) out += (i > 0 ? ',' : '') + entries[i]!.key + '=' + entries[i]!.value;
  return out;
}

/** One listed key and what was seen of it. */
export class HotEntry {
  constructor(
    /** The counter key without its window start (what identifies the key). */
    readonly key: string,
    /** The request entries at its first sight, as `k=v` pairs joined by `,`. */
    readonly entries: string,
    /** Upper bound of its weight since it was listed. */
    public count: number,
    /** How much of `count` may be the weight of other keys (the smallest count when listed). */
    public error: number,
    /** Of `count`, the hits over the limit (counted exactly while listed). */
    public over: number,
    /** What the limit left for the key at its last sight. */
    public remaining: number,
    /** When it was last seen (seconds). */
    public lastSeenS: number,
  ) {}
}

export class SpaceSaving {
  readonly entries = new Map<string, HotEntry>();
  /** The weight offered, listed or not. */
  total = 0;

  constructor(readonly capacity: number) {}

  get full(): boolean {
    return this.entries.size >= this.capacity;
  }

  /** The smallest count when full (what an unlisted key may have had at most), else 0. */
  floor(): number {
    if (!this.full) return 0;
    let min = Infinity;
    for (const e of this.entries.values()) if (e.count < min) min = e.count;
    return min;
  }

  /**
   * Adds `weight` (of which `over` over the limit) for `key`. A key not listed takes a free place,
   * or, when `admit` and the summary is full, the place of the smallest (inheriting its count as
   * error). `entries` are read only when the key is newly listed.
   */
  offer(key: string, entries: readonly Entry[], weight: number, over: number, remaining: number, nowS: number, admit: boolean): void {
    this.total += weight;
    const e = this.entries.get(key);
    if (e !== undefined) {
      e.count += weight;
      e.over += over;
      e.remaining = remaining;
      e.lastSeenS = nowS;
      return;
    }
    if (this.entries.size < this.capacity) {
      this.entries.set(key, new HotEntry(key, entriesText(entries), weight, 0, over, remaining, nowS));
      return;
    }
    if (!admit) return;
    let min: HotEntry | undefined;
    for (const x of this.entries.values()) if (min === undefined || x.count < min.count) min = x;
    this.entries.delete(min!.key);
    this.entries.set(key, new HotEntry(key, entriesText(entries), min!.count + weight, min!.count, over, remaining, nowS));
  }

  clear(): void {
    this.entries.clear();
    this.total = 0;
  }
}

/**
 * The merge of several summaries into one of `capacity` counters: a key's count and error are
 * the sums over the parts, a part that does not list it contributing its floor to both.
 */
export function mergeSummaries(parts: readonly SpaceSaving[], capacity: number): SpaceSaving {
  const out = new SpaceSaving(capacity);
  const live = parts.filter((p) => p.total > 0);
  if (live.length === 0) return out;
  const floors = live.map((p) => p.floor());
  const union = new Map<string, HotEntry>();
  for (const p of live) {
    out.total += p.total;
    for (const e of p.entries.values()) {
      const u = union.get(e.key);
      if (u === undefined) {
        union.set(e.key, new HotEntry(e.key, e.entries, 0, 0, 0, e.remaining, e.lastSeenS));
      } else if (e.lastSeenS > u.lastSeenS || (e.lastSeenS === u.lastSeenS && e.remaining < u.remaining)) {
        // In the same second, the later sight is the one with less left (a window's count only grows).
        u.remaining = e.remaining;
        u.lastSeenS = e.lastSeenS;
      }
    }
  }
  for (const u of union.values()) {
    for (let i = 0; i < live.length; i++) {
      const e = live[i]!.entries.get(u.key);
      if (e !== undefined) {
        u.count += e.count;
        u.error += e.error;
        u.over += e.over;
      } else {
        u.count += floors[i]!;
        u.error += floors[i]!;
      }
    }
  }
  const sorted = [...union.values()].sort(byCount);
  for (let i = 0; i < sorted.length && i < capacity; i++) out.entries.set(sorted[i]!.key, sorted[i]!);
  return out;
}

/** Heaviest first; on a tie, the key's text (a stable order). */
export function byCount(a: HotEntry, b: HotEntry): number {
  return b.count - a.count || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0);
}
