import { MemoryStore } from '../../src/backends/memory';
import type { CounterOp } from '../../src/core/store';
import { Unit } from '../../src/core/rls';
import { StatsStore } from '../../src/stats/store';
import { rule } from '../limiter/helpers';

const stats = new StatsStore();
const r = rule(stats, 'd.k', 10, Unit.MINUTE);
const op = (key: string, hits = 1, windowSeconds = 60): CounterOp => ({ key, hits, windowSeconds, rule: r });

describe('memory store', () => {
  it('counts per key and returns counts after each increment, in order', async () => {
    const s = new MemoryStore({ maxKeys: 100 });
    expect(await s.increment([op('a'), op('b', 3), op('a', 2)], 0)).toEqual([1, 3, 3]);
    expect(await s.increment([op('a', 0)], 1000)).toEqual([3]);
  });

  it('is exact under concurrent requests', async () => {
    const s = new MemoryStore({ maxKeys: 100 });
    const all = await Promise.all(Array.from({ length: 500 }, () => s.increment([op('hot')], 5000)));
    expect(all.map((c) => c[0]).sort((x, y) => x! - y!)).toEqual(Array.from({ length: 500 }, (_, i) => i + 1));
  });

  it('starts a fresh count when the epoch-aligned window ends', async () => {
    const s = new MemoryStore({ maxKeys: 100 });
    expect(await s.increment([op('w', 5)], 59_999)).toEqual([5]);
    // The window [0, 60) ended: same key name, new count.
    expect(await s.increment([op('w', 1)], 60_000)).toEqual([1]);
  });

  it('drops expired windows so a stream of distinct keys stays bounded', async () => {
    const s = new MemoryStore({ maxKeys: 1_000_000 });
    for (let sec = 0; sec < 10; sec++) {
      for (let i = 0; i < 1000; i++) await s.increment([op(`k${sec}_${i}`, 1, 1)], sec * 1000 + 500);
    }
    expect(s.size).toBeLessThanOrEqual(1000);
  });

  it('evicts the oldest counters past maxKeys and counts evictions', async () => {
    const evictions = stats.counter('test.evictions');
    const s = new MemoryStore({ maxKeys: 100, evictions });
    for (let i = 0; i < 1000; i++) await s.increment([op('day' + i, 1, 86400)], 0);
    expect(s.size).toBe(100);
    expect(evictions.value).toBe(900);
    expect(await s.increment([op('day999')], 0)).toEqual([2]);
  });

  it('evicts by creation order: a counter re-created after its window ended counts as new', async () => {
    const s = new MemoryStore({ maxKeys: 3 });
    await s.increment([op('short', 1, 1)], 0); // window [0 s, 1 s)
    await s.increment([op('a'), op('b')], 500);
    await s.increment([op('short', 1, 1)], 1500); // expired, then created again: now the newest
    await s.increment([op('c')], 1600); // the cap evicts `a`, the oldest live counter
    expect(['a', 'b', 'c', 'short'].map((k) => s.peek(k, 1700))).toEqual([0, 1, 1, 1]);
  });

  it('keeps evicting oldest first through a long flood, with expiries in between', async () => {
    const evictions = stats.counter('test.flood.evictions');
    const s = new MemoryStore({ maxKeys: 50, evictions });
    for (let i = 0; i < 20_000; i++) {
      // Every tenth counter lives one second; the others a day.
      await s.increment([op(`f${i}`, 1, i % 10 === 0 ? 1 : 86400)], i);
    }
    expect(s.size).toBe(50);
    // The 50 newest counters are the live ones.
    const live: number[] = [];
    for (let i = 19_000; i < 20_000; i++) if (s.peek(`f${i}`, 19_999) > 0) live.push(i);
    expect(live).toEqual(Array.from({ length: 50 }, (_, k) => 19_950 + k));
    expect(evictions.value).toBeGreaterThan(17_000);
  });
});

describe('memory store with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT', () => {
  const r15 = rule(stats, 'd.k15', 15, Unit.HOUR);
  const r14 = rule(stats, 'd.k14', 14, Unit.HOUR);
  const ops = (hits: number): CounterOp[] => [
    { key: 'key4', hits, windowSeconds: 3600, rule: r15 },
    { key: 'key5', hits, windowSeconds: 3600, rule: r14 },
  ];

  it('charges only the keys that would go over (upstream test case)', async () => {
    const s = new MemoryStore({ maxKeys: 100, stopIncrementWhenOverLimit: true });
    expect(await s.increment(ops(13), 0)).toEqual([13, 13]);
    // 13 + 2 = 15 is not over 15 (key4 not charged) but is over 14 (key5 charged).
    expect(await s.increment(ops(2), 0)).toEqual([13, 15]);
  });

  it('charges every key when none would go over, none when one is over elsewhere', async () => {
    const s = new MemoryStore({ maxKeys: 100, stopIncrementWhenOverLimit: true });
    expect(await s.increment(ops(1), 0)).toEqual([1, 1]);
    expect(await s.increment(ops(1), 0, { overLimitElsewhere: true })).toEqual([1, 1]);
    const plain = new MemoryStore({ maxKeys: 100 });
    expect(await plain.increment(ops(1), 0, { overLimitElsewhere: true })).toEqual([1, 1]);
    expect(await plain.increment(ops(20), 0)).toEqual([21, 21]);
  });
});
