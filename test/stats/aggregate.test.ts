/**
 * Worker mode's stats path in one process: worker stores flushed through the IPC sink, batches
 * applied by the primary's aggregator, the totals read from the primary's store.
 */
import { StatsAggregator } from '../../src/stats/aggregate';
import { StatsFlusher } from '../../src/stats/flusher';
import { IpcStatsSink, type StatsBatch } from '../../src/stats/sinks/ipc';
import { StatsStore } from '../../src/stats/store';
import { silentLogger } from '../../src/telemetry/logger';
import type { StatsSink } from '../../src/stats/sinks/types';

const batch = (b: Partial<StatsBatch>): StatsBatch => ({ counters: [], gauges: [], timers: [], ...b });

describe('StatsAggregator', () => {
  test('counter deltas from several workers add up', () => {
    const store = new StatsStore();
    const agg = new StatsAggregator(store);
    agg.apply(1, batch({ counters: [['c', 3]] }));
    agg.apply(2, batch({ counters: [['c', 4], ['d', 0]] }));
    agg.apply(1, batch({ counters: [['c', 1]] }));
    expect(store.counter('c').value).toBe(8);
    // A series announced with delta 0 exists (listed by /stats) at 0.
    expect(store.entries()).toContainEqual(['d', 0]);
  });

  test('a gauge is the sum of each worker\'s latest value', () => {
    const store = new StatsStore();
    const agg = new StatsAggregator(store);
    agg.apply(1, batch({ gauges: [['g', 10]] }));
    agg.apply(2, batch({ gauges: [['g', 5]] }));
    expect(store.gauge('g').value).toBe(15);
    // A worker's new value replaces its previous one.
    agg.apply(1, batch({ gauges: [['g', 2]] }));
    expect(store.gauge('g').value).toBe(7);
    agg.apply(2, batch({ gauges: [['g', 0.1]] }));
    agg.apply(2, batch({ gauges: [['g', 0.2]] }));
    expect(store.gauge('g').value).toBeCloseTo(2.2, 12);
  });

  test('the headroom gauges of a limit: the largest limit, used and utilization, the sums of the key counts', () => {
    const store = new StatsStore();
    const agg = new StatsAggregator(store);
    const p = 'ratelimit.service.rate_limit.d.user.';
    agg.apply(1, batch({ gauges: [[p + 'limit.__name=n', 3], [p + 'window_used.__name=n', 5], [p + 'utilization.__name=n', 500 / 3], [p + 'window_keys.__name=n', 2], [p + 'window_keys_over_limit.__name=n', 1]] }));
    agg.apply(2, batch({ gauges: [[p + 'limit.__name=n', 3], [p + 'window_used.__name=n', 6], [p + 'utilization.__name=n', 200], [p + 'window_keys.__name=n', 1], [p + 'window_keys_over_limit.__name=n', 0]] }));
    expect(store.gauge(p + 'limit.__name=n').value).toBe(3);
    expect(store.gauge(p + 'window_used.__name=n').value).toBe(6);
    expect(store.gauge(p + 'utilization.__name=n').value).toBe(200);
    expect(store.gauge(p + 'window_keys.__name=n').value).toBe(3);
    expect(store.gauge(p + 'window_keys_over_limit.__name=n').value).toBe(1);
  });

  test('the loaded config\'s gauges take the largest: every worker loads the same config, and one restarting drops nothing', () => {
    const store = new StatsStore();
    const agg = new StatsAggregator(store);
    for (const w of [1, 2]) agg.apply(w, batch({ gauges: [['ratelimit.config.rules', 40], ['ratelimit.config.domains', 3], ['ratelimit.config.info.__version=abc', 1]] }));
    expect([store.gauge('ratelimit.config.rules').value, store.gauge('ratelimit.config.domains').value, store.gauge('ratelimit.config.info.__version=abc').value]).toEqual([40, 3, 1]);
    agg.removeWorker(2);
    expect(store.gauge('ratelimit.config.rules').value).toBe(40);
  });

  test('a gauge the workers retire leaves the sum, then the store, and the primary\'s sink retires it once', () => {
    const store = new StatsStore();
    const agg = new StatsAggregator(store);
    const seen: string[] = [];
    const sink: StatsSink = {
      kind: 'statsd',
      wantsTimerSamples: false,
      dropped: 0,
      start: async () => {},
      counter: () => {},
      gauge: (name, value) => seen.push(`${name}=${value}`),
      retireGauge: (name) => seen.push(`retire ${name}`),
      timer: () => {},
      endFlush: () => {},
      close: async () => {},
    };
    const flusher = new StatsFlusher(store, sink, 60_000, silentLogger);
    agg.apply(1, batch({ gauges: [['info.__version=a', 1]] }));
    agg.apply(2, batch({ gauges: [['info.__version=a', 1]] }));
    agg.apply(1, batch({ gauges: [['info.__version=b', 1]], retired: ['info.__version=a'] }));
    expect(store.gauge('info.__version=a').value).toBe(1);
    agg.apply(2, batch({ gauges: [['info.__version=b', 1]], retired: ['info.__version=a'] }));
    flusher.flush();
    expect(seen).toEqual(['info.__version=b=2', 'retire info.__version=a']);
    seen.length = 0;
    flusher.flush();
    expect(seen).toEqual(['info.__version=b=2']);
    void flusher.stop();
  });

  test('a worker that exits leaves the gauge sums; its counters stay counted', () => {
    const store = new StatsStore();
    const agg = new StatsAggregator(store);
    agg.apply(1, batch({ counters: [['c', 3]], gauges: [['g', 10], ['h', 1]] }));
    agg.apply(2, batch({ counters: [['c', 2]], gauges: [['g', 5]] }));
    agg.removeWorker(1);
    expect(store.gauge('g').value).toBe(5);
    expect(store.gauge('h').value).toBe(0);
    expect(store.counter('c').value).toBe(5);
    agg.removeWorker(1); // twice, or a worker that never flushed: nothing to do
    agg.removeWorker(7);
    expect(store.gauge('g').value).toBe(5);
  });

  test('timers add exact counts and sums; samples only while the primary keeps them', () => {
    const store = new StatsStore();
    const agg = new StatsAggregator(store);
    agg.apply(1, batch({ timers: [{ name: 't', count: 3, sumMs: 6, samples: new Float64Array(0) }] }));
    expect(store.entries()).toEqual([
      ['t.count', 3],
      ['t.sum_ms', 6],
    ]);
    store.enableTimerSamples();
    agg.apply(1, batch({ timers: [{ name: 't', count: 2, sumMs: 3, samples: new Float64Array([1, 2]) }] }));
    // A capped worker timer: 10 recordings, 2 kept.
    agg.apply(2, batch({ timers: [{ name: 't', count: 10, sumMs: 50, samples: new Float64Array([4, 6]) }] }));
    const interval = store.timer('t').drain();
    expect(Array.from(interval.samples).sort()).toEqual([1, 2, 4, 6]);
    expect(interval.count).toBe(12);
    expect(interval.sumMs).toBe(53);
    expect(store.timer('t').count).toBe(15);
    expect(store.timer('t').sumMs).toBe(59);
  });
});

describe('IpcStatsSink through the flusher', () => {
  function worker(forwardTimerSamples: boolean) {
    const store = new StatsStore();
    const sent: StatsBatch[] = [];
    const sink = new IpcStatsSink(async (b) => void sent.push(b));
    sink.forwardTimerSamples = forwardTimerSamples;
    const flusher = new StatsFlusher(store, sink, 3_600_000, silentLogger);
    return { store, sent, sink, flusher };
  }

  test('two workers\' flushes sum in the primary\'s store', async () => {
    const primary = new StatsStore();
    const agg = new StatsAggregator(primary);
    const a = worker(false);
    const b = worker(false);
    a.store.ruleStats('d.k').totalHits.inc(4);
    b.store.ruleStats('d.k').totalHits.inc(6);
    a.store.gauge('ratelimit.redis_pool.cx_active').set(10);
    b.store.gauge('ratelimit.redis_pool.cx_active').set(9);
    a.store.timer('rt').record(2);
    b.store.timer('rt').record(4);
    a.flusher.flush();
    b.flusher.flush();
    a.store.ruleStats('d.k').totalHits.inc();
    a.flusher.flush();
    for (const x of a.sent) agg.apply(1, x);
    for (const x of b.sent) agg.apply(2, x);
    expect(primary.counter('ratelimit.service.rate_limit.d.k.total_hits').value).toBe(11);
    expect(primary.counter('ratelimit.service.rate_limit.d.k.over_limit').value).toBe(0);
    expect(primary.gauge('ratelimit.redis_pool.cx_active').value).toBe(19);
    expect(primary.timer('rt').count).toBe(2);
    expect(primary.timer('rt').sumMs).toBe(6);
    await a.flusher.stop();
    await b.flusher.stop();
  });

  test('unchanged series travel once; moved counters and every gauge each flush', () => {
    const w = worker(false);
    w.store.counter('quiet');
    w.store.counter('busy').inc();
    w.store.timer('idle');
    w.store.gauge('g').set(1);
    w.flusher.flush();
    w.store.counter('busy').inc(2);
    w.flusher.flush();
    w.flusher.flush();
    expect(w.sent[0]!.counters).toEqual([
      ['quiet', 0],
      ['busy', 1],
    ]);
    expect(w.sent[0]!.timers.map((t) => [t.name, t.count])).toEqual([['idle', 0]]);
    expect(w.sent[1]).toEqual({ counters: [['busy', 2]], gauges: [['g', 1]], timers: [] });
    expect(w.sent[2]).toEqual({ counters: [], gauges: [['g', 1]], timers: [] });
  });

  test('timer samples travel only when the primary\'s sink uses them, as a copy', () => {
    const off = worker(false);
    off.store.timer('t').record(5);
    off.flusher.flush();
    expect(off.sent[0]!.timers[0]).toEqual({ name: 't', count: 1, sumMs: 5, samples: new Float64Array(0) });

    const on = worker(true);
    on.store.timer('t').record(5);
    on.flusher.flush();
    on.store.timer('t').record(7); // overwrites the timer's buffer, not the batch
    expect(Array.from(on.sent[0]!.timers[0]!.samples)).toEqual([5]);
  });

  test('a batch that cannot be sent counts as dropped; close waits for the sends in flight', async () => {
    let release: () => void = () => undefined;
    const sends: Array<Promise<void>> = [];
    const sink = new IpcStatsSink((b) => {
      const p = b.counters.length > 1 ? Promise.reject(new Error('channel closed')) : new Promise<void>((r) => (release = r));
      sends.push(p);
      return p;
    });
    sink.counter('a', 1);
    sink.counter('b', 1);
    sink.endFlush();
    sink.counter('a', 1);
    sink.endFlush();
    sink.endFlush(); // nothing moved: no message
    expect(sends).toHaveLength(2);
    let closed = false;
    const closing = sink.close().then(() => (closed = true));
    await new Promise((r) => setImmediate(r));
    expect(closed).toBe(false);
    expect(sink.dropped).toBe(2);
    release();
    await closing;
    expect(closed).toBe(true);
  });
});
