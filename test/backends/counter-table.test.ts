import { CounterTable } from '../../src/backends/counter-table';
import { prng } from '../support/prng';

/** Adds `hits` to `key` as the memory store does: a missing or ended entry starts again at 0. */
function add(t: CounterTable, key: string, hits: number, nowMs: number, endMs: number): number {
  let id = t.find(key);
  if (id < 0 || t.expires[id]! <= nowMs) id = t.create(key, id, endMs);
  return (t.counts[id] += hits);
}

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

  it('agrees with a Map through growth, expiries, sweeps and evictions at the cap (random sequence)', () => {
    const rand = prng(42);
    const cap = 500;
    let evicted = 0;
    const t = new CounterTable(cap, () => evicted++);
    // The model: key -> [count, endMs], in creation order (a Map keeps insertion order).
    const model = new Map<string, [number, number]>();
    const cursor = { at: 0 };
    let modelEvicted = 0;
    for (let step = 0; step < 60_000; step++) {
      const nowMs = step * 10;
      const key = `k_${Math.floor(rand() * 8000)}_${rand() < 0.1 ? 'x'.repeat(70) : ''}`;
      const endMs = nowMs + 1 + Math.floor(rand() * 20_000);
      const hits = 1 + Math.floor(rand() * 3);
      const m = model.get(key);
      if (m === undefined || m[1] <= nowMs) {
        if (m !== undefined) model.delete(key);
        else if (model.size >= cap) {
          model.delete(model.keys().next().value!);
          modelEvicted++;
        }
        model.set(key, [0, endMs]);
      }
      const entry = model.get(key)!;
      entry[0] += hits;
      expect(add(t, key, hits, nowMs, endMs)).toBe(entry[0]);
      if (step % 97 === 0) {
        t.sweepStep(nowMs, 500, cursor);
        // The sweep frees only ended counters; the model drops them whenever it likes.
        for (const [k, [, end]] of model) if (end <= nowMs && t.find(k) < 0) model.delete(k);
      }
      expect(t.size).toBe(model.size);
    }
    expect(evicted).toBe(modelEvicted);
    expect(evicted).toBeGreaterThan(0);
    for (const [k, [count]] of model) expect(t.counts[t.find(k)]).toBe(count);
  });

  it('finds every key after many removals from long probe runs (backward-shift deletion)', () => {
    const t = new CounterTable(50_000);
    for (let i = 0; i < 20_000; i++) add(t, `key${i}`, 1, 0, i % 2 === 0 ? 1000 : 5000);
    const cursor = { at: 0 };
    while (!t.sweepStep(2000, 4096, cursor));
    expect(t.size).toBe(10_000);
    for (let i = 0; i < 20_000; i++) expect(t.find(`key${i}`) >= 0).toBe(i % 2 === 1);
  });

  it('sweeps in bounded slices and reports when a pass is complete', () => {
    const t = new CounterTable(10_000);
    for (let i = 0; i < 5000; i++) add(t, `s${i}`, 1, 0, 1000);
    const cursor = { at: 0 };
    expect(t.sweepStep(1000, 2000, cursor)).toBe(false);
    expect(t.size).toBe(3000);
    expect(t.sweepStep(1000, 2000, cursor)).toBe(false);
    expect(t.sweepStep(1000, 2000, cursor)).toBe(true);
    expect(t.size).toBe(0);
  });

  it('evicts oldest first, a re-created entry counting as the newest', () => {
    const order: string[] = [];
    const t = new CounterTable(3, () => order.push('evicted'));
    add(t, 'a', 1, 0, 100);
    add(t, 'b', 1, 0, 10_000);
    add(t, 'c', 1, 0, 10_000);
    add(t, 'a', 1, 200, 10_000); // ended, so created again: now the newest
    add(t, 'd', 1, 200, 10_000); // the cap evicts b
    expect(['a', 'b', 'c', 'd'].map((k) => t.find(k) >= 0)).toEqual([true, false, true, true]);
    expect(order).toEqual(['evicted']);
  });
});
