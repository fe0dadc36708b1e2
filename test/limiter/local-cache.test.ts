import { LocalCache } from '../../src/limiter/local-cache';
import { StatsStore } from '../../src/stats/store';

describe('local over-limit cache', () => {
  it('remembers a key until its TTL passes and counts lookups', () => {
    const c = new LocalCache(1000);
    expect(c.capacityBytes).toBe(512 * 1024);
    expect(c.has('k', 0)).toBe(false);
    c.set('k', 60, 0);
    expect(c.has('k', 59_999)).toBe(true);
    expect(c.has('k', 60_000)).toBe(false);
    expect(c.counters).toMatchObject({ lookupCount: 3, hitCount: 1, missCount: 2, expiredCount: 1, entryCount: 0 });
  });

  it('stays within its byte budget by evicting the oldest entries', () => {
    const c = new LocalCache(512 * 1024);
    for (let i = 0; i < 100_000; i++) c.set('key-' + i.toString().padStart(8, '0'), 60, 0);
    expect(c.counters.entryCount).toBeLessThan(100_000);
    expect(c.counters.evacuateCount).toBe(100_000 - c.counters.entryCount);
    expect(c.has('key-00000000', 0)).toBe(false);
    expect(c.has('key-00099999', 0)).toBe(true);
  });

  it('publishes upstream gauge names', () => {
    const c = new LocalCache(0);
    c.set('a', 1, 0);
    c.set('a', 1, 0);
    const stats = new StatsStore();
    c.publish(stats);
    const names = stats.entries().map(([n]) => n);
    expect(names).toEqual(
      [
        'averageAccessTime',
        'entryCount',
        'evacuateCount',
        'expiredCount',
        'hitCount',
        'lookupCount',
        'missCount',
        'overwriteCount',
      ].map((n) => 'ratelimit.localcache.' + n),
    );
    expect(stats.gauge('ratelimit.localcache.overwriteCount').value).toBe(1);
  });
});
