import { MemoryStore } from '../../src/backends/memory';
import type { CounterOp } from '../../src/core/store';
import { Unit } from '../../src/core/rls';
import { StatsStore } from '../../src/stats/store';
import { ManualClock } from '../../src/platform/clock';
import { silentLogger } from '../../src/telemetry/logger';
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

  it('at maxKeys, a new key takes the place of a counter whose window ended, never of a live one', async () => {
    const refused = stats.counter('test.reclaim.refused');
    const s = new MemoryStore({ maxKeys: 3, refused });
    await s.increment([op('second', 1, 1)], 0); // window [0 s, 1 s)
    await s.increment([op('a'), op('b')], 500); // minute windows
    expect(await s.increment([op('c')], 1500)).toEqual([1]); // `second` ended: its place
    expect(['a', 'b', 'c', 'second'].map((k) => s.peek(k, 1600))).toEqual([1, 1, 1, 0]);
    expect(s.size).toBe(3);
    expect(refused.value).toBe(0);
  });

  it('full of live counters, a new key is NOT_COUNTED (NaN), counted and warned about at most once a second; live counts go on', async () => {
    const refused = stats.counter('test.full.refused');
    const warnings: string[] = [];
    const logger = { ...silentLogger, warn: (m: string) => warnings.push(m) };
    const clock = new ManualClock(0);
    const s = new MemoryStore({ maxKeys: 2, refused, logger, clock });
    expect(await s.increment([op('a', 2), op('b', 3)], 0)).toEqual([2, 3]);
    const [c] = await s.increment([op('c', 1)], 10);
    expect(c).toBeNaN();
    expect(await s.increment([op('a'), op('d'), op('b')], 20)).toEqual([3, NaN, 4]);
    clock.set(999);
    await s.increment([op('e', 1)], 999);
    clock.set(1000);
    await s.increment([op('f', 1)], 1000);
    expect(refused.value).toBe(4);
    const line = 'memory store: all MEMORY_MAX_KEYS=2 counters are live, so a new key is not counted (BACKEND_FAILURE_MODE decides its answer; live counters are never dropped)';
    expect(warnings).toEqual([`${line}: "c"`, `${line}: "f" (2 similar messages suppressed)`]);
    expect(s.size).toBe(2);
    // A check-only op (0 hits) reads 0 and needs no place.
    expect(await s.increment([op('g', 0)], 1000)).toEqual([0]);
    expect(refused.value).toBe(4);
    // When the minute ends, the new window's keys find room again.
    expect(await s.increment([op('c', 1)], 60_000)).toEqual([1]);
  });

  it('a client spraying distinct values cannot reset a live counter (the victim keeps its count)', async () => {
    const refused = stats.counter('test.spray.refused');
    const s = new MemoryStore({ maxKeys: 100, refused });
    for (let i = 0; i < 5; i++) await s.increment([op('victim', 1, 86400)], 1000);
    let counted = 0;
    for (let i = 0; i < 20_000; i++) {
      const [n] = await s.increment([op(`spray_${i}`, 1, 86400)], 1000 + i);
      if (!Number.isNaN(n)) counted++;
    }
    expect(counted).toBe(99);
    expect(refused.value).toBe(20_000 - 99);
    expect(await s.increment([op('victim', 1, 86400)], 30_000)).toEqual([6]);
  });

  it('a sliding window or token bucket that needs a new counter in a full store is NOT_COUNTED too', async () => {
    const s = new MemoryStore({ maxKeys: 1 });
    await s.increment([op('taken', 1, 86400)], 0);
    const sliding = rule(stats, 'd.sliding', 10, Unit.MINUTE, { algorithm: 'sliding_window' });
    const bucket = rule(stats, 'd.bucket', 10, Unit.MINUTE, { algorithm: 'token_bucket' });
    const counts = await s.increment(
      [
        { key: 'sw', hits: 1, windowSeconds: 60, rule: sliding, prevKey: 'sw_prev' },
        { key: 'tb', hits: 1, windowSeconds: 60, rule: bucket },
      ],
      1000,
    );
    expect(counts.every(Number.isNaN)).toBe(true);
    expect(s.size).toBe(1);
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
