import { MemoryStore } from '../../src/backends/memory';
import type { CounterOp } from '../../src/backends/types';
import { Unit } from '../../src/limiter/types';
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
