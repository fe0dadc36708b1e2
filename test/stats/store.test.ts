import { StatsStore, Timer } from '../../src/stats/store';

describe('StatsStore', () => {
  test('constructor forms: none, a number, options', () => {
    expect(new StatsStore().maxDynamicSeries).toBe(10_000);
    expect(new StatsStore(5).maxDynamicSeries).toBe(5);
    expect(new StatsStore({ maxDynamicSeries: 7 }).maxDynamicSeries).toBe(7);
  });

  test('the dynamic-series cap overflows into the catch-all series and warns once', () => {
    const warnings: string[] = [];
    const store = new StatsStore({ maxDynamicSeries: 2, logger: { warn: (m) => void warnings.push(m) } });
    store.dynamicRuleStats('d.a').totalHits.inc();
    store.dynamicRuleStats('d.b').totalHits.inc();
    expect(warnings).toHaveLength(0);
    const over = store.dynamicRuleStats('d.c');
    expect(over.key).toBe('overflow');
    store.dynamicRuleStats('d.e');
    store.dynamicCounter('ratelimit.service.rate_limit.x.domain_not_found', 'ratelimit.service.rate_limit.overflow.domain_not_found').inc();
    expect(store.counter('ratelimit.stats.dynamic_series_overflow').value).toBe(3);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain('cap of 2 stat series');
    expect(warnings[0]).toContain('ratelimit.service.rate_limit.d.c');
    // Known keys still resolve to their own series.
    expect(store.dynamicRuleStats('d.a').key).toBe('d.a');
  });

  test('setLogger attaches the warning after construction', () => {
    const warnings: string[] = [];
    const store = new StatsStore(0);
    store.setLogger({ warn: (m) => void warnings.push(m) });
    store.dynamicRuleStats('k');
    store.dynamicRuleStats('k2');
    expect(warnings).toHaveLength(1);
  });

  test('counters latch deltas', () => {
    const c = new StatsStore().counter('x');
    c.inc(3);
    expect(c.latch()).toBe(3);
    expect(c.latch()).toBe(0);
    c.inc();
    expect(c.latch()).toBe(1);
    expect(c.value).toBe(4);
  });

  test('timers keep no samples until a sink asks; then drain per interval', () => {
    const store = new StatsStore();
    const before = store.timer('a');
    before.record(1);
    expect(before.drain().count).toBe(0);
    store.enableTimerSamples();
    const after = store.timer('b');
    before.record(2);
    after.record(3);
    after.record(4);
    expect(Array.from(before.drain().samples)).toEqual([2]);
    const d = after.drain();
    expect(Array.from(d.samples)).toEqual([3, 4]);
    expect(d.count).toBe(2);
    expect(d.sumMs).toBe(7);
    expect(after.drain().count).toBe(0);
    expect(after.count).toBe(2);
    expect(after.sumMs).toBe(7);
    store.enableTimerSamples(false);
    after.record(5);
    expect(after.drain().count).toBe(0);
  });

  test('a timer buffer is bounded: a uniform reservoir past the cap, exact count and sum', () => {
    const t = new Timer('t', 100);
    t.keepSamples(true);
    let sum = 0;
    for (let i = 0; i < 100_000; i++) {
      t.record(i % 1000);
      sum += i % 1000;
    }
    const d = t.drain();
    expect(d.samples.length).toBe(100);
    expect(d.count).toBe(100_000);
    expect(d.sumMs).toBe(sum);
    // A uniform subset: its mean is near the population's (499.5).
    const mean = d.samples.reduce((a, b) => a + b, 0) / d.samples.length;
    expect(mean).toBeGreaterThan(350);
    expect(mean).toBeLessThan(650);
  });

  test('the sample buffer shrinks back after a burst', () => {
    const t = new Timer('t', 1_000_000);
    t.keepSamples(true);
    for (let i = 0; i < 100_000; i++) t.record(1);
    expect(t.drain().samples.length).toBe(100_000);
    t.record(1);
    expect(t.drain().samples.length).toBe(1);
    // Internal capacity is not observable directly; a fresh burst still works.
    for (let i = 0; i < 1000; i++) t.record(2);
    expect(t.drain().samples.length).toBe(1000);
  });
});
