import { CounterTable } from '../../src/backends/counter-table';
import { prng } from '../support/prng';

/**
 * Adds `hits` to `key` as the memory store does: a missing or ended entry starts again at 0; NaN
 * when the table, full of live counters, refuses the key.
 */
function add(t: CounterTable, key: string, hits: number, nowMs: number, endMs: number): number {
  let id = t.find(key);
  if (id < 0 || t.expires[id]! <= nowMs) id = t.create(key, id, nowMs, endMs);
  if (id < 0) return NaN;
  return (t.counts[id] += hits);
}

/** Whether `key` has a live counter at `nowMs`. */
const live = (t: CounterTable, key: string, nowMs: number): boolean => {
  const id = t.find(key);
  return id >= 0 && t.expires[id]! > nowMs;
};

describe('CounterTable', () => {
  it('keeps short, long (over 64 characters), empty and non-Latin-1 keys apart', () => {
    const t = new CounterTable(100);
    const keys = ['a', 'b', 'x'.repeat(64), 'x'.repeat(65), 'x'.repeat(300), '', 'é_1', 'ĉ_1', 'emoji_🙂', 'a\u0000'];
    keys.forEach((k, i) => add(t, k, i + 1, 0, 1000));
    keys.forEach((k, i) => expect(t.counts[t.find(k)]).toBe(i + 1));
    expect(t.find('x'.repeat(63))).toBe(-1);
    expect(t.find('c_1')).toBe(-1);
    expect(t.size).toBe(keys.length);
  });

  it('agrees with a Map through growth, expiries, sweeps and the cap (random sequence)', () => {
    const rand = prng(42);
    const cap = 500;
    const t = new CounterTable(cap);
    // The model: key -> [count, endMs]. At the cap the entry that ends first makes room if it has
    // ended; otherwise the new key is refused. Ends are distinct, so "first" is one entry.
    const model = new Map<string, [number, number]>();
    let refused = 0;
    let reclaimed = 0;
    for (let step = 0; step < 60_000; step++) {
      const nowMs = step * 10;
      const key = `k_${Math.floor(rand() * 8000)}_${rand() < 0.1 ? 'x'.repeat(70) : ''}`;
      const endMs = nowMs + 1 + Math.floor(rand() * 20_000) + step / 100_000;
      const hits = 1 + Math.floor(rand() * 3);
      const m = model.get(key);
      let expected: number;
      if (m !== undefined && m[1] > nowMs) {
        expected = m[0] += hits;
      } else if (m !== undefined || model.size < cap) {
        model.set(key, [hits, endMs]);
        expected = hits;
      } else {
        let first: [string, number] | undefined;
        for (const [k, [, end]] of model) if (first === undefined || end < first[1]) first = [k, end];
        if (first![1] <= nowMs) {
          model.delete(first![0]);
          model.set(key, [hits, endMs]);
          expected = hits;
          reclaimed++;
        } else {
          expected = NaN;
          refused++;
        }
      }
      expect(add(t, key, hits, nowMs, endMs)).toBe(expected);
      if (step % 97 === 0) {
        t.sweepStep(nowMs, 50);
        // The sweep frees only ended counters; the model drops them whenever it likes.
        for (const [k, [, end]] of model) if (end <= nowMs && t.find(k) < 0) model.delete(k);
      }
      expect(t.size).toBe(model.size);
    }
    expect(refused).toBeGreaterThan(1000);
    expect(reclaimed).toBeGreaterThan(1000);
    for (const [k, [count]] of model) expect(t.counts[t.find(k)]).toBe(count);
  });

  it('finds every key after many removals from long probe runs (backward-shift deletion)', () => {
    const t = new CounterTable(50_000);
    for (let i = 0; i < 20_000; i++) add(t, `key${i}`, 1, 0, i % 2 === 0 ? 1000 : 5000);
    while (!t.sweepStep(2000, 4096));
    expect(t.size).toBe(10_000);
    for (let i = 0; i < 20_000; i++) expect(t.find(`key${i}`) >= 0).toBe(i % 2 === 1);
  });

  it('sweeps in bounded slices, the counters that ended first first, and reports when none ended is left', () => {
    const t = new CounterTable(10_000);
    for (let i = 0; i < 5000; i++) add(t, `s${i}`, 1, 0, i % 2 === 0 ? 1000 : 500);
    add(t, 'later', 1, 0, 5000);
    expect(t.sweepStep(1000, 2000)).toBe(false);
    // The 2500 ending at 500 went first.
    expect(t.size).toBe(3001);
    expect([live(t, 's1', 0), live(t, 's0', 0)]).toEqual([false, true]);
    expect(t.sweepStep(1000, 2000)).toBe(false);
    expect(t.sweepStep(1000, 2000)).toBe(true);
    expect(t.size).toBe(1);
    expect(t.sweepStep(1000, 2000)).toBe(true);
  });

  it('at the cap, the counter that ended first makes room (an ended entry of the same key is reused in place)', () => {
    const t = new CounterTable(3);
    add(t, 'a', 1, 0, 10_000);
    add(t, 'b', 1, 0, 2_000);
    add(t, 'c', 1, 0, 1_000);
    expect(add(t, 'd', 1, 1500, 60_000)).toBe(1); // c ended at 1000: its place
    expect(['a', 'b', 'c', 'd'].map((k) => t.find(k) >= 0)).toEqual([true, true, false, true]);
    expect(add(t, 'b', 5, 2500, 60_000)).toBe(5); // b ended: reused, no place needed
    expect(['a', 'b', 'd'].map((k) => live(t, k, 2500))).toEqual([true, true, true]);
    expect(t.size).toBe(3);
  });

  it('full of live counters, a new key is refused (-1) and no counter is dropped', () => {
    const t = new CounterTable(3);
    for (const k of ['a', 'b', 'c']) add(t, k, 2, 0, 60_000);
    expect(t.create('d', t.find('d'), 1000, 60_000)).toBe(-1);
    expect(add(t, 'e', 1, 59_999, 120_000)).toBeNaN();
    expect(['a', 'b', 'c'].map((k) => add(t, k, 1, 59_999, 60_000))).toEqual([3, 3, 3]);
    // Once their window ends, they make room.
    expect(add(t, 'd', 1, 60_000, 120_000)).toBe(1);
  });

  it('a moved expiry keeps the order (a token bucket whose end grows is not the first to go)', () => {
    const t = new CounterTable(3);
    add(t, 'bucket', 1, 0, 1000);
    add(t, 'b', 1, 0, 2000);
    add(t, 'c', 1, 0, 3000);
    t.setExpiry(t.find('bucket'), 10_000);
    expect(add(t, 'd', 1, 2500, 60_000)).toBe(1);
    expect(['bucket', 'b', 'c', 'd'].map((k) => t.find(k) >= 0)).toEqual([true, false, true, true]);
    // And one moved earlier is found first.
    t.setExpiry(t.find('d'), 2600);
    expect(add(t, 'e', 1, 2700, 60_000)).toBe(1);
    expect(['bucket', 'c', 'd', 'e'].map((k) => t.find(k) >= 0)).toEqual([true, true, false, true]);
  });
});
