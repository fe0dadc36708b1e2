import { MemoryStore } from '../../src/backends/memory';
import { Caller, type CounterOp } from '../../src/core/store';
import { counterGroup } from '../../src/core/rule';
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
    const overflowed = stats.counter('test.reclaim.overflowed');
    const s = new MemoryStore({ maxKeys: 3, overflowed });
    await s.increment([op('second', 1, 1)], 0); // window [0 s, 1 s)
    await s.increment([op('a'), op('b')], 500); // minute windows
    expect(await s.increment([op('c')], 1500)).toEqual([1]); // `second` ended: its place
    expect(['a', 'b', 'c', 'second'].map((k) => s.peek(k, 1600))).toEqual([1, 1, 1, 0]);
    expect(s.size).toBe(3);
    expect(overflowed.value).toBe(0);
  });

  it('full of live counters, a new key is counted in the overflow, counted and warned about at most once every 10 s; live counts go on', async () => {
    const overflowed = stats.counter('test.full.overflowed');
    const warnings: string[] = [];
    const logger = { ...silentLogger, warn: (m: string) => warnings.push(m) };
    const clock = new ManualClock(0);
    const s = new MemoryStore({ maxKeys: 2, overflowed, logger, clock });
    expect(await s.increment([op('a', 2), op('b', 3)], 0)).toEqual([2, 3]);
    expect(await s.increment([op('c', 1)], 10)).toEqual([1]);
    expect(await s.increment([op('a'), op('d'), op('b'), op('c', 4)], 20)).toEqual([3, 1, 4, 5]);
    clock.set(9999);
    await s.increment([op('e', 1)], 9999);
    clock.set(10_000);
    expect(await s.increment([op('c', 1)], 10_000)).toEqual([6]);
    expect(overflowed.value).toBe(5);
    const line =
      'memory store: all MEMORY_MAX_KEYS=2 counters are live, so new keys are counted in the overflow sketches ' +
      '(live counters are never dropped; a key that shares cells there may be over-counted, none is under-counted)';
    expect(warnings).toEqual([`${line}: "c"`, `${line}: "c" (3 similar messages suppressed)`]);
    expect(s.size).toBe(2);
    // A check-only op (0 hits) reads the overflow's count and needs no place.
    expect(await s.increment([op('c', 0), op('never', 0)], 10_000)).toEqual([6, 0]);
    expect(overflowed.value).toBe(5);
    // When the minute ends, the new window's keys find room again.
    expect(await s.increment([op('c', 1)], 60_000)).toEqual([1]);
    expect(s.peek('c', 60_000)).toBe(1);
  });

  it('a client spraying distinct values cannot reset a live counter, nor switch limiting off for a watched newcomer', async () => {
    const overflowed = stats.counter('test.spray.overflowed');
    const s = new MemoryStore({ maxKeys: 100, overflowed });
    const day = rule(stats, 'd.day', 1_000_000_000, Unit.DAY, { group: counterGroup('d.day') });
    const hour = rule(stats, 'd.hour', 3, Unit.HOUR, { group: counterGroup('d.hour') });
    for (let i = 0; i < 5; i++) await s.increment([op('victim', 1, 86400)], 1000);
    let undercounted = 0;
    for (let i = 0; i < 20_000; i++) {
      const [n] = s.incrementSync([{ key: `spray_${i}`, hits: 1, windowSeconds: 86400, rule: day }], 1000 + i);
      if (!(n! >= 1)) undercounted++;
    }
    expect(undercounted).toBe(0);
    expect(s.size).toBe(100);
    expect(overflowed.value).toBe(20_000 - 99);
    expect(await s.increment([op('victim', 1, 86400)], 30_000)).toEqual([6]);
    // The watched newcomer (3 an hour) counts exactly: 1, 2, 3, then 4 (over its limit).
    const watched: number[] = [];
    for (let i = 0; i < 4; i++) watched.push((await s.increment([{ key: 'watched', hits: 1, windowSeconds: 3600, rule: hour }], 30_000 + i))[0]!);
    expect(watched).toEqual([1, 2, 3, 4]);
  });

  it('with an overflow so small that every key of a rule shares its cells, a limit tightens, never loosens', async () => {
    // Width 8: 8 bands of one cell, so the keys of one rule all share the same cell of each row.
    const s = new MemoryStore({ maxKeys: 1, overflowWidth: 8 });
    const r3 = rule(stats, 'd.r3', 3, Unit.HOUR, { group: 7 });
    const at = (key: string, hits = 1) => s.incrementSync([{ key, hits, windowSeconds: 3600, rule: r3 }], 5000)[0]!;
    at('taken');
    expect([at('x'), at('y'), at('x')]).toEqual([1, 2, 3]);
    // `z` has not been seen, but shares every cell with x and y: it reads their count.
    expect(at('z')).toBe(4);
    expect(at('z', 0)).toBe(4);
  });

  it('a key counted in the overflow starts from that count when it gets a counter (fixed, sliding, token bucket)', async () => {
    const s = new MemoryStore({ maxKeys: 1 });
    const sliding = rule(stats, 'd.sliding', 5, Unit.MINUTE, { algorithm: 'sliding_window' });
    const bucket = rule(stats, 'd.bucket', 5, Unit.MINUTE, { algorithm: 'token_bucket' });
    const sw = (nowMs: number) => s.incrementSync([{ key: 'sw', hits: 1, windowSeconds: 60, rule: sliding, prevKey: 'sw_prev' }], nowMs)[0]!;
    const tb = (nowMs: number) => s.incrementSync([{ key: 'tb', hits: 1, windowSeconds: 60, rule: bucket }], nowMs)[0]!;
    s.incrementSync([op('taken', 1, 1)], 0); // the only place, until 1 s
    expect([s.incrementSync([op('fx', 3)], 100)[0], sw(100), sw(100), tb(100), tb(100)]).toEqual([3, 1, 2, 1, 2]);
    expect(s.size).toBe(1);
    // 1.5 s: `taken` has ended; each key in turn takes the one place, from the overflow's count.
    expect(s.incrementSync([op('fx', 1)], 1500)).toEqual([4]);
    expect(s.peek('fx', 1500)).toBe(4);
    await s.close();
    const t = new MemoryStore({ maxKeys: 1 });
    const sw2 = (nowMs: number) => t.incrementSync([{ key: 'sw', hits: 1, windowSeconds: 60, rule: sliding, prevKey: 'sw_prev' }], nowMs)[0]!;
    const tb2 = (nowMs: number) => t.incrementSync([{ key: 'tb', hits: 1, windowSeconds: 60, rule: bucket }], nowMs)[0]!;
    t.incrementSync([op('taken', 1, 1)], 0);
    expect([sw2(100), sw2(100), tb2(100), tb2(100)]).toEqual([1, 2, 1, 2]);
    expect(sw2(1500)).toBe(3);
    expect(t.peek('sw', 1500)).toBe(3);
    // The sliding counter holds the place now; the bucket keeps counting in the overflow.
    expect([tb2(1500), tb2(1500), tb2(1500), tb2(1500)]).toEqual([3, 4, 5, 6]);
  });

  it('a sliding window reads its previous window from the overflow when that window overflowed', () => {
    const s = new MemoryStore({ maxKeys: 1 });
    const sliding = rule(stats, 'd.sliding2', 10, Unit.MINUTE, { algorithm: 'sliding_window' });
    const sw = (key: string, prevKey: string, nowMs: number) => s.incrementSync([{ key, hits: 1, windowSeconds: 60, rule: sliding, prevKey }], nowMs)[0]!;
    s.incrementSync([op('taken', 1, 86400)], 0);
    for (let i = 0; i < 8; i++) sw('w0', 'w-1', 1000);
    // Half of the next window to run: 8 * 0.5 = 4 from the previous window, plus this hit.
    expect(sw('w60', 'w0', 90_000)).toBe(5);
  });

  it('past its budget a caller counts its new keys in the overflow, not refused; other callers and calls without one keep getting counters', () => {
    const overCallerBudget = stats.counter('test.caller.over');
    const warnings: string[] = [];
    const logger = { ...silentLogger, warn: (m: string) => warnings.push(m) };
    const clock = new ManualClock(0);
    const s = new MemoryStore({ maxKeys: 1000, callerNewKeysPerSecond: 3, overCallerBudget, logger, clock });
    const a = new Caller('192.0.2.7');
    const b = new Caller('192.0.2.8');
    const add = (key: string, caller: Caller | undefined, nowMs: number) => s.incrementSync([op(key)], nowMs, caller?.notOverLimitElsewhere)[0]!;
    for (let i = 0; i < 5; i++) expect(add(`a${i}`, a, 0)).toBe(1);
    expect(s.size).toBe(3);
    expect(overCallerBudget.value).toBe(2);
    // Its counters go on as before; its overflowed keys are counted all the same.
    expect([add('a0', a, 0), add('a4', a, 0)]).toEqual([2, 2]);
    expect(s.peek('a0', 0)).toBe(2);
    expect(s.peek('a4', 0)).toBe(0);
    for (let i = 0; i < 3; i++) add(`b${i}`, b, 0);
    for (let i = 0; i < 10; i++) add(`none${i}`, undefined, 0);
    expect(s.size).toBe(16);
    // One new counter every 1/3 s: at 0.34 s one more place for `a`, then over again.
    add('a5', a, 340);
    add('a6', a, 340);
    expect(s.size).toBe(17);
    // a3, a4 (twice: it still had no counter the second time) and a6.
    expect(overCallerBudget.value).toBe(4);
    expect(warnings).toEqual([
      'memory store: caller 192.0.2.7 added MEMORY_CALLER_NEW_KEYS_PER_SECOND=3 new counters within a second, so its further new keys are counted ' +
        'in the overflow sketches (a key that shares cells there may be over-counted, none is under-counted): "a3"',
    ]);
  });

  it('the overflow sketches are made when keys overflow and dropped once their windows have ended', () => {
    const overflowBytes = stats.gauge('test.drop.bytes');
    const overflowFill = stats.gauge('test.drop.fill');
    const s = new MemoryStore({ maxKeys: 1, overflowWidth: 1024, overflowBytes, overflowFill });
    s.incrementSync([op('taken', 1, 86400)], 0);
    for (let i = 0; i < 100; i++) s.incrementSync([op(`m${i}`)], 500);
    // The gauges follow at the next sweep, at most a second later.
    s.incrementSync([op('taken', 1, 86400)], 1000);
    expect(overflowBytes.value).toBe(4 * 1024 * 8);
    // 100 keys of one rule in its bands of 128 cells: about half of each band in use.
    expect(overflowFill.value).toBeGreaterThan(30);
    expect(overflowFill.value).toBeLessThan(80);
    // The minute has ended: the sketch goes, and with it its memory.
    s.incrementSync([op('taken', 1, 86400)], 60_000);
    expect(overflowBytes.value).toBe(0);
    expect(overflowFill.value).toBe(0);
    expect(s.incrementSync([op('m0', 0)], 60_000)).toEqual([0]);
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

  it('keeps candidate limits in a table of their own: no place, caller budget or STOP_CACHE_KEY_INCREMENT say taken from the enforced keys', async () => {
    const overCallerBudget = new StatsStore().counter('over');
    const overflowed = new StatsStore().counter('overflowed');
    const s = new MemoryStore({ maxKeys: 2, callerNewKeysPerSecond: 2, overCallerBudget, overflowed, stopIncrementWhenOverLimit: true });
    const caller = new Caller('192.0.2.1');
    const cand = rule(stats, 'd.k.candidate', 1, Unit.MINUTE);
    const beside = (enforced: CounterOp, hits = 1): CounterOp => ({ key: enforced.key + '_cand', hits, windowSeconds: 60, rule: cand, follows: enforced });
    const a = op('a');
    const b = op('b');
    // Two enforced keys, each with a candidate over its limit of 1 from the second call: the
    // enforced keys take both places and the caller's two new keys, and are charged every hit.
    expect(s.incrementSync([a, beside(a), b, beside(b)], 0, caller.notOverLimitElsewhere)).toEqual([1, 1, 1, 1]);
    expect(s.incrementSync([a, beside(a), b, beside(b)], 0, caller.notOverLimitElsewhere)).toEqual([2, 2, 2, 2]);
    expect(s.size).toBe(2);
    expect(overCallerBudget.value).toBe(0);
    expect(overflowed.value).toBe(0);
    // Some key over in the local cache: the enforced keys add nothing, the candidates every hit.
    expect(s.incrementSync([a, beside(a)], 0, caller.overLimitElsewhere)).toEqual([2, 3]);
  });
});
