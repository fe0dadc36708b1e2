/**
 * The memory store's overflow sketches alone: a count read back is never below the key's true
 * count (seeded random streams of every algorithm, sketches small enough to collide a lot),
 * collisions only add, a spray of one rule's values leaves the other rules' counts alone, and
 * the cells of a window end with it.
 */
import { OverflowSketches } from '../../src/backends/overflow-sketch';
import { int, prng } from '../support/prng';

const MIN = 60;

describe('overflow sketches', () => {
  test.each([
    [1, 8],
    [2, 64],
    [3, 1024],
    [4, 65536],
  ])('fixed windows, seed %i, width %i: no count is ever below the key\'s own; a wide sketch is mostly exact', (seed, width) => {
    const rng = prng(seed);
    const sketch = new OverflowSketches(width, rng);
    const truth = new Map<string, number>();
    let nowMs = 1_000_000_000;
    let reads = 0;
    let exact = 0;
    for (let i = 0; i < 30_000; i++) {
      nowMs += int(rng, 40); // about 10 minutes in all: windows of a second and a minute end
      const windowSeconds = int(rng, 2) === 0 ? 1 : MIN;
      const group = int(rng, 4);
      const start = Math.floor(nowMs / 1000 / windowSeconds) * windowSeconds;
      const key = `k${int(rng, 500)}_${start}`;
      const id = `${windowSeconds}|${group}|${key}`;
      const hits = int(rng, 4);
      const own = (truth.get(id) ?? 0) + hits;
      truth.set(id, own);
      const got = hits === 0 ? sketch.fixedCount(key, group, windowSeconds, nowMs) : sketch.fixedAdd(key, group, windowSeconds, nowMs, hits);
      if (got < own) throw new Error(`seed ${seed}, op ${i}: ${key} read ${got}, its own count is ${own}`);
      reads++;
      if (got === own) exact++;
    }
    if (width >= 65536) expect(exact / reads).toBeGreaterThan(0.99);
  });

  test.each([5, 6, 7])('sliding windows, seed %i: the current and the previous window read at least their own counts', (seed) => {
    const rng = prng(seed);
    const sketch = new OverflowSketches(64, rng);
    const truth = new Map<string, number>();
    let nowMs = 2_000_000_000;
    for (let i = 0; i < 20_000; i++) {
      nowMs += int(rng, 30);
      const group = int(rng, 3);
      const start = Math.floor(nowMs / 1000 / MIN) * MIN;
      const name = `s${int(rng, 300)}`;
      const cur = `${name}_${start}`;
      const prev = `${name}_${start - MIN}`;
      const curOwn = truth.get(`${group}|${cur}`) ?? 0;
      const prevOwn = truth.get(`${group}|${prev}`) ?? 0;
      const c = sketch.slidingCount(cur, group, MIN, nowMs);
      const p = sketch.slidingCount(prev, group, MIN, nowMs - MIN * 1000);
      if (c < curOwn || p < prevOwn) throw new Error(`seed ${seed}, op ${i}: read ${c}/${p}, own ${curOwn}/${prevOwn}`);
      // As the store does: an admitted request raises the current window to what it read plus its hits.
      if (int(rng, 3) > 0) {
        const hits = 1 + int(rng, 2);
        sketch.slidingRaise(cur, group, MIN, nowMs, c + hits);
        truth.set(`${group}|${cur}`, curOwn + hits);
      }
    }
  });

  test.each([8, 9])('token buckets, seed %i: a TAT read back is never before the key\'s own', (seed) => {
    const rng = prng(seed);
    const sketch = new OverflowSketches(8, rng);
    const truth = new Map<string, number>();
    let nowMs = 3_000_000_000;
    for (let i = 0; i < 20_000; i++) {
      nowMs += int(rng, 50);
      const group = int(rng, 3);
      const key = `b${int(rng, 200)}`;
      const own = truth.get(`${group}|${key}`) ?? 0;
      const read = sketch.bucketTat(key, group, nowMs);
      if (own > nowMs && (read === undefined || read < own)) throw new Error(`seed ${seed}, op ${i}: TAT ${read}, own ${own}`);
      const tat = Math.max(read ?? nowMs, nowMs) + 1 + int(rng, 5000);
      sketch.bucketRaise(key, group, tat);
      truth.set(`${group}|${key}`, tat);
    }
  });

  test('keys that share no cell count exactly; keys that share every cell read their largest count, never less', () => {
    const wide = new OverflowSketches(65536, prng(10));
    expect([wide.fixedAdd('a', 1, MIN, 0, 2), wide.fixedAdd('b', 1, MIN, 0, 5), wide.fixedAdd('a', 1, MIN, 0, 1)]).toEqual([2, 5, 3]);
    expect(wide.fixedCount('c', 1, MIN, 0)).toBe(0);
    // Width 8: one cell per band, so every key of a group has the same cells (conservative update
    // keeps the largest count there, not the sum).
    const tiny = new OverflowSketches(8, prng(11));
    expect([tiny.fixedAdd('a', 1, MIN, 0, 2), tiny.fixedAdd('b', 1, MIN, 0, 5), tiny.fixedAdd('a', 1, MIN, 0, 1)]).toEqual([2, 7, 8]);
    expect(tiny.fixedCount('never', 1, MIN, 0)).toBe(8);
  });

  test('a spray of one rule\'s values fills that rule\'s cells, not another rule\'s', () => {
    const sketch = new OverflowSketches(65536, prng(12));
    const sprayed = 101;
    for (let i = 0; i < 200_000; i++) sketch.fixedAdd(`spray_${i}_0`, sprayed, 3600, 1000, 1);
    // 1,000 keys of another rule, 2 hits each: at most a handful may share all four cells with
    // the spray (1 in 4,096 each) or with each other; the same keys in the sprayed rule read more.
    let otherOver = 0;
    let sameOver = 0;
    for (let i = 0; i < 1000; i++) {
      sketch.fixedAdd(`other_${i}_0`, 202, 3600, 1000, 2);
      if (sketch.fixedCount(`other_${i}_0`, 202, 3600, 1000) > 2) otherOver++;
      if (sketch.fixedAdd(`same_${i}_0`, sprayed, 3600, 1000, 2) > 2) sameOver++;
    }
    expect(otherOver).toBeLessThanOrEqual(5);
    expect(sameOver).toBeGreaterThan(950);
    // The sprayed rule's bands are full; the gauge shows the fullest band.
    expect(sketch.fillPercent).toBeGreaterThan(99);
  });

  test('the cells of a window end with it, and a sketch whose windows have all ended is dropped', () => {
    const sketch = new OverflowSketches(1024, prng(13));
    expect(sketch.active).toBe(false);
    expect(sketch.fixedAdd('f_0', 0, MIN, 10_000, 4)).toBe(4);
    expect(sketch.fixedCount('f_0', 0, MIN, 59_999)).toBe(4);
    // The next minute: the window's cells are not read any more, and are cleared when it counts.
    expect(sketch.fixedCount('f_0', 0, MIN, 60_000)).toBe(0);
    expect(sketch.fixedAdd('f_60', 0, MIN, 60_000, 1)).toBe(1);

    sketch.slidingRaise('s_0', 0, MIN, 10_000, 3);
    sketch.slidingRaise('s_60', 0, MIN, 70_000, 1);
    // At 70 s the minute at 0 is the previous window: still read; at 120 s it is gone.
    expect(sketch.slidingCount('s_0', 0, MIN, 10_000)).toBe(3);
    expect(sketch.slidingCount('s_60', 0, MIN, 70_000)).toBe(1);
    sketch.slidingRaise('s_120', 0, MIN, 120_000, 1);
    expect(sketch.slidingCount('s_0', 0, MIN, 60_000)).toBe(0);
    expect(sketch.slidingCount('s_60', 0, MIN, 60_000)).toBe(1);

    sketch.bucketRaise('b', 0, 150_000);
    expect(sketch.bucketTat('b', 0, 149_999)).toBe(150_000);
    expect(sketch.bucketTat('b', 0, 150_000)).toBeUndefined();

    expect(sketch.bytes).toBe(4 * 1024 * 8 * (1 + 2 + 1));
    sketch.sweep(150_000);
    // Fixed 60 s ended at 120 s; the bucket at 150 s; the sliding window at 120 s lasts to 240 s.
    expect(sketch.bytes).toBe(4 * 1024 * 8 * 2);
    expect(sketch.active).toBe(true);
    sketch.sweep(240_000);
    expect(sketch.bytes).toBe(0);
    expect(sketch.active).toBe(false);
  });

  test('a new window starts from clean cells, even where every key shares them', () => {
    const tiny = new OverflowSketches(8, prng(15));
    expect(tiny.fixedAdd('a_0', 0, MIN, 0, 5)).toBe(5);
    expect(tiny.fixedAdd('b_0', 0, MIN, 1000, 1)).toBe(6);
    expect(tiny.fixedAdd('a_60', 0, MIN, 60_000, 1)).toBe(1);
    tiny.slidingRaise('s_0', 0, MIN, 0, 5);
    tiny.slidingRaise('s_60', 0, MIN, 60_000, 1);
    // At 120 s the cells of the window at 0 are made over for the window at 120.
    tiny.slidingRaise('s_120', 0, MIN, 120_000, 2);
    expect(tiny.slidingCount('s_120', 0, MIN, 120_000)).toBe(2);
    expect(tiny.slidingCount('s_60', 0, MIN, 60_000)).toBe(1);
  });

  test('a clock set back across a window counts in the newest window: more, never less', () => {
    const sketch = new OverflowSketches(8, prng(14));
    sketch.fixedAdd('k_60', 0, MIN, 61_000, 2);
    expect(sketch.fixedAdd('k_0', 0, MIN, 59_000, 1)).toBe(3);
    expect(sketch.fixedCount('k_60', 0, MIN, 61_000)).toBe(3);
  });

  test('the width must be a power of two of at least 8', () => {
    expect(() => new OverflowSketches(4)).toThrow('overflow sketch width must be a power of two >= 8, got 4');
    expect(() => new OverflowSketches(1000)).toThrow('got 1000');
  });
});
