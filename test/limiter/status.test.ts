import { counterStatus, localCacheOverLimitStatus, nearLimitThreshold } from '../../src/limiter/status';
import { Code, Unit } from '../../src/core/rls';
import { StatsStore } from '../../src/stats/store';
import { rule } from './helpers';

const counts = (r: ReturnType<typeof rule>) => [
  r.stats.totalHits.value,
  r.stats.overLimit.value,
  r.stats.nearLimit.value,
  r.stats.withinLimit.value,
];

describe('near-limit threshold (float32 arithmetic)', () => {
  it.each([
    [15, 12],
    [20, 16],
    [10, 8],
    [8, 6],
    [0, 0],
    [4294967295, 3435973888],
  ])('limit %d gives %d at 0.8', (limit, near) => {
    expect(nearLimitThreshold(limit, 0.8)).toBe(near);
  });
});

describe('counterStatus follows upstream arithmetic', () => {
  // One row per hit: limit, addend, count after, expected code, remaining, cumulative total/over/near/within.
  const rows: Array<[number, number, number, Code, number, number[]]> = [
    [15, 1, 11, Code.OK, 4, [1, 0, 0, 1]],
    [15, 1, 13, Code.OK, 2, [2, 0, 1, 2]],
    [15, 1, 16, Code.OVER_LIMIT, 0, [3, 1, 1, 2]],
  ];
  it('accumulates near and over limit for one key', () => {
    const stats = new StatsStore();
    const r = rule(stats, 'domain.key', 15, Unit.HOUR);
    for (const [, hits, after, code, remaining, expected] of rows) {
      r.stats.totalHits.inc(hits);
      const s = counterStatus(r, hits, after, 0.8, 10);
      expect(s.code).toBe(code);
      expect(s.limitRemaining).toBe(remaining);
      expect(s.durationUntilReset).toBe(10);
      expect(s.currentLimit).toEqual({ name: '', requestsPerUnit: 15, unit: Unit.HOUR });
      expect(counts(r)).toEqual(expected);
    }
  });

  it.each([
    [20, 3, 5, Code.OK, 15, [3, 0, 0, 3]],
    [8, 2, 7, Code.OK, 1, [2, 0, 1, 2]],
    [20, 3, 19, Code.OK, 1, [3, 0, 3, 3]],
    [20, 3, 22, Code.OVER_LIMIT, 0, [3, 2, 1, 0]],
    [20, 7, 22, Code.OVER_LIMIT, 0, [7, 2, 4, 0]],
    [10, 3, 30, Code.OVER_LIMIT, 0, [3, 3, 0, 0]],
    [10, 0, 11, Code.OVER_LIMIT, 0, [0, 0, 0, 0]],
  ])('limit %d addend %d after %d', (limit, hits, after, code, remaining, expected) => {
    const stats = new StatsStore();
    const r = rule(stats, 'd.k', limit, Unit.SECOND);
    r.stats.totalHits.inc(hits);
    const s = counterStatus(r, hits, after, 0.8, 1);
    expect(s.code).toBe(code);
    expect(s.limitRemaining).toBe(remaining);
    expect(counts(r)).toEqual(expected);
  });

  it('requests_per_unit 0 blocks every hit, and a 0 addend only checks', () => {
    const stats = new StatsStore();
    const r = rule(stats, 'd.ban', 0, Unit.SECOND);
    expect(counterStatus(r, 1, 1, 0.8, 1).code).toBe(Code.OVER_LIMIT);
    const check = counterStatus(r, 0, 0, 0.8, 1);
    expect(check.code).toBe(Code.OK);
    expect(check.limitRemaining).toBe(0);
  });

  it('shadow mode answers OK with remaining 0 and counts shadow_mode', () => {
    const stats = new StatsStore();
    const r = rule(stats, 'd.shadow', 10, Unit.MINUTE, { shadowMode: true });
    const s1 = counterStatus(r, 3, 12, 0.8, 5);
    expect(s1.code).toBe(Code.OK);
    expect(s1.limitRemaining).toBe(0);
    expect(r.stats.shadowMode.value).toBe(2);
    counterStatus(r, 1, 13, 0.8, 5);
    expect(r.stats.shadowMode.value).toBe(3);
    expect(r.stats.overLimit.value).toBe(3);
  });

  it('local cache hits count over_limit and over_limit_with_local_cache', () => {
    const stats = new StatsStore();
    const r = rule(stats, 'd.lc', 10, Unit.MINUTE);
    const s = localCacheOverLimitStatus(r, 2, 30);
    expect(s).toEqual({ code: Code.OVER_LIMIT, currentLimit: r.limit, limitRemaining: 0, durationUntilReset: 30 });
    expect(r.stats.overLimit.value).toBe(2);
    expect(r.stats.overLimitWithLocalCache.value).toBe(2);
    const shadow = rule(stats, 'd.lcs', 10, Unit.MINUTE, { shadowMode: true });
    expect(localCacheOverLimitStatus(shadow, 1, 30).code).toBe(Code.OK);
    expect(shadow.stats.shadowMode.value).toBe(1);
  });
});
