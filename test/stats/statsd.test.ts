import net from 'node:net';
import { StatsFlusher, SINK_DROPPED } from '../../src/stats/flusher';
import { LoggingSink, NullSink } from '../../src/stats/sinks/basic';
import { StatsdSink } from '../../src/stats/sinks/statsd';
import { StatsStore } from '../../src/stats/store';
import { createLogger, silentLogger } from '../../src/telemetry/logger';
import { type TcpReceiver, type UdpReceiver, tcpReceiver, udpReceiver } from './receivers';
import { freePort } from '../support/ports';
import { quietFor } from '../support/wait';

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

async function tcp(port = 0): Promise<TcpReceiver> {
  const r = await tcpReceiver(port);
  cleanups.push(() => r.close());
  return r;
}

async function udp(): Promise<UdpReceiver> {
  const r = await udpReceiver();
  cleanups.push(() => r.close());
  return r;
}

function flusherFor(store: StatsStore, sink: StatsdSink | LoggingSink | NullSink, intervalMs = 600_000): StatsFlusher {
  const f = new StatsFlusher(store, sink, intervalMs, silentLogger);
  cleanups.push(() => f.stop());
  return f;
}

describe('statsd sink over TCP (upstream default)', () => {
  test('a removed gauge is sent a last 0 once, then no more', async () => {
    const rx = await tcp();
    const store = new StatsStore();
    const sink = new StatsdSink({ host: '127.0.0.1', port: rx.port });
    await sink.start();
    const flusher = flusherFor(store, sink);
    store.gauge('ratelimit.config.info.__version=a').set(1);
    flusher.flush();
    store.removeGauge('ratelimit.config.info.__version=a');
    store.gauge('ratelimit.config.info.__version=b').set(1);
    flusher.flush();
    flusher.flush();
    await rx.waitFor((l) => l.length >= 4);
    await quietFor(50);
    expect(rx.lines).toEqual([
      'ratelimit.config.info.__version=a:1|g',
      'ratelimit.config.info.__version=b:1|g',
      'ratelimit.config.info.__version=a:0|g',
      'ratelimit.config.info.__version=b:1|g',
    ]);
  });

  test('counters as deltas across two flushes, gauges absolute, timers per sample', async () => {
    const rx = await tcp();
    const store = new StatsStore();
    const sink = new StatsdSink({ host: '127.0.0.1', port: rx.port });
    await sink.start();
    const flusher = flusherFor(store, sink);

    const rule = store.ruleStats('domain.key_value');
    rule.totalHits.inc(3);
    rule.withinLimit.inc(3);
    store.counter('ratelimit_server.ShouldRateLimit.total_requests').inc(2);
    store.gauge('ratelimit.redis_pool.cx_active').set(7);
    const rt = store.timer('ratelimit_server.ShouldRateLimit.response_time');
    rt.record(12);
    rt.record(1.5);
    flusher.flush();
    const first = [
      'ratelimit.service.rate_limit.domain.key_value.total_hits:3|c',
      'ratelimit.service.rate_limit.domain.key_value.within_limit:3|c',
      'ratelimit_server.ShouldRateLimit.total_requests:2|c',
      'ratelimit.redis_pool.cx_active:7|g',
      'ratelimit_server.ShouldRateLimit.response_time:12|ms',
      'ratelimit_server.ShouldRateLimit.response_time:1.5|ms',
    ];
    await rx.waitFor((l) => l.length >= first.length);
    expect(rx.lines).toEqual(first);

    rule.totalHits.inc(2);
    store.gauge('ratelimit.redis_pool.cx_active').set(5);
    flusher.flush();
    await rx.waitFor((l) => l.length >= first.length + 2);
    await quietFor(50);
    // Only the counter that moved (its delta), and every gauge; no timer without samples.
    expect(rx.lines.slice(first.length)).toEqual([
      'ratelimit.service.rate_limit.domain.key_value.total_hits:2|c',
      'ratelimit.redis_pool.cx_active:5|g',
    ]);
    // The store keeps the running totals for /stats.
    expect(rule.totalHits.value).toBe(5);
    expect(store.entries()).toContainEqual(['ratelimit_server.ShouldRateLimit.response_time.count', 2]);
  });

  test('EXTRA_TAGS become sorted .__k=v suffixes on the ratelimit and ratelimit_server scopes only', async () => {
    const rx = await tcp();
    const store = new StatsStore();
    const sink = new StatsdSink({ host: '127.0.0.1', port: rx.port, extraTags: { zone: 'eu:west|1', app: 'rl.v1.2' } });
    const flusher = flusherFor(store, sink);
    store.ruleStats('domain.key_value').totalHits.inc(3);
    store.counter('ratelimit.memcache.multiget.__code=success').inc(1);
    store.counter('ratelimit_server.Check.total_requests').inc(1);
    store.counter('runtime.load_attempts').inc(1);
    flusher.flush();
    await rx.waitFor((l) => l.length >= 4);
    expect(rx.lines.sort()).toEqual(
      [
        'ratelimit.service.rate_limit.domain.key_value.total_hits.__app=rl_v1_2.__zone=eu_west_1:3|c',
        'ratelimit.memcache.multiget.__app=rl_v1_2.__code=success.__zone=eu_west_1:1|c',
        'ratelimit_server.Check.total_requests.__app=rl_v1_2.__zone=eu_west_1:1|c',
        'runtime.load_attempts:1|c',
      ].sort(),
    );
  });

  test('a timer past its sample cap sends a uniform subset with the statsd sample rate', async () => {
    const rx = await tcp();
    const store = new StatsStore({ maxTimerSamples: 4 });
    const sink = new StatsdSink({ host: '127.0.0.1', port: rx.port });
    const flusher = flusherFor(store, sink);
    const t = store.timer('ratelimit_server.ShouldRateLimit.response_time');
    for (let i = 0; i < 10; i++) t.record(i);
    flusher.flush();
    await rx.waitFor((l) => l.length >= 4);
    await quietFor(30);
    expect(rx.lines).toHaveLength(4);
    for (const l of rx.lines) expect(l).toMatch(/^ratelimit_server\.ShouldRateLimit\.response_time:\d\|ms\|@0\.4$/);
    expect(t.count).toBe(10);
  });

  test('reconnects after the server drops the connection, without blocking the flush', async () => {
    const rx = await tcp();
    const store = new StatsStore();
    const sink = new StatsdSink({ host: '127.0.0.1', port: rx.port, reconnectMinMs: 20, reconnectMaxMs: 50 });
    const flusher = flusherFor(store, sink);
    const c = store.counter('ratelimit.service.config_load_success');
    c.inc();
    flusher.flush();
    await rx.waitFor((l) => l.length === 1);
    rx.dropConnections();
    // The sink sees the close and reconnects in the background.
    for (let waited = 0; rx.connections < 2; waited += 10) {
      if (waited > 3000) throw new Error('no reconnection within 3 s');
      await quietFor(10);
    }
    c.inc(4);
    flusher.flush();
    await rx.waitFor((l) => l.length === 2);
    expect(rx.lines).toEqual(['ratelimit.service.config_load_success:1|c', 'ratelimit.service.config_load_success:4|c']);
    expect(rx.connections).toBe(2);
  });

  test('holds lines while the server is down and sends them once it is back', async () => {
    const port = await freePort();
    const store = new StatsStore();
    const warnings: string[] = [];
    const logger = { ...silentLogger, warn: (m: string) => void warnings.push(m), info: () => {} };
    const sink = new StatsdSink({ host: '127.0.0.1', port, reconnectMinMs: 20, reconnectMaxMs: 40, logger });
    const flusher = new StatsFlusher(store, sink, 600_000, logger);
    cleanups.push(() => flusher.stop());
    store.counter('ratelimit.service.global_shadow_mode').inc(2);
    flusher.flush(); // nobody listens: held in the pending buffer
    await quietFor(60);
    expect(warnings.some((w) => w.includes('statsd: connection to 127.0.0.1:' + port + ' failed'))).toBe(true);
    const rx = await tcp(port);
    await rx.waitFor((l) => l.length === 1);
    expect(rx.lines).toEqual(['ratelimit.service.global_shadow_mode:2|c']);
    expect(sink.dropped).toBe(0);
  });

  test('drops (and counts) what does not fit while disconnected; stop() stays bounded', async () => {
    const port = await freePort();
    const store = new StatsStore();
    const sink = new StatsdSink({ host: '127.0.0.1', port, maxPendingBytes: 120, reconnectMinMs: 20, closeTimeoutMs: 200 });
    const flusher = new StatsFlusher(store, sink, 600_000, silentLogger);
    for (let i = 0; i < 20; i++) store.counter(`ratelimit.test.counter_${i}`).inc();
    flusher.flush();
    expect(sink.dropped).toBe(20); // one 64 KiB chunk of 20 lines > 120 bytes: dropped whole
    flusher.flush(); // the flusher reports the drops as a counter
    expect(store.counter(SINK_DROPPED).value).toBe(20);
    const t0 = Date.now();
    await flusher.stop();
    expect(Date.now() - t0).toBeLessThan(2000);
    expect(sink.dropped).toBeGreaterThanOrEqual(21); // the last flush's sink_dropped line had nowhere to go
  });

  test('the interval timer flushes by itself; stop() flushes once more and closes', async () => {
    const rx = await tcp();
    const store = new StatsStore();
    const sink = new StatsdSink({ host: '127.0.0.1', port: rx.port });
    const flusher = new StatsFlusher(store, sink, 30, silentLogger);
    const c = store.counter('ratelimit.service.config_load_success');
    c.inc();
    await rx.waitFor((l) => l.includes('ratelimit.service.config_load_success:1|c'));
    c.inc(2);
    await flusher.stop();
    await rx.waitFor((l) => l.includes('ratelimit.service.config_load_success:2|c'));
    const n = rx.lines.length;
    c.inc();
    await quietFor(80);
    expect(rx.lines).toHaveLength(n); // stopped
  });
});

describe('statsd sink over UDP', () => {
  test('same lines, in datagrams no larger than maxPacketBytes', async () => {
    const rx = await udp();
    const store = new StatsStore();
    const sink = new StatsdSink({ host: '127.0.0.1', port: rx.port, protocol: 'udp', maxPacketBytes: 120, extraTags: { env: 'test' } });
    const flusher = flusherFor(store, sink);
    const rule = store.ruleStats('domain.key_value');
    rule.totalHits.inc(3);
    rule.overLimit.inc(1);
    store.gauge('ratelimit.localcache.entryCount').set(2);
    const t = store.timer('ratelimit_server.ShouldRateLimit.response_time');
    t.record(4);
    t.record(9);
    flusher.flush();
    const expected = [
      'ratelimit.service.rate_limit.domain.key_value.total_hits.__env=test:3|c',
      'ratelimit.service.rate_limit.domain.key_value.over_limit.__env=test:1|c',
      'ratelimit.localcache.entryCount.__env=test:2|g',
      'ratelimit_server.ShouldRateLimit.response_time.__env=test:4|ms',
      'ratelimit_server.ShouldRateLimit.response_time.__env=test:9|ms',
    ];
    await rx.waitFor((l) => l.length >= expected.length);
    expect([...rx.lines].sort()).toEqual([...expected].sort());
    expect(rx.packets.length).toBeGreaterThan(1);
    for (const p of rx.packets) {
      expect(Buffer.byteLength(p)).toBeLessThanOrEqual(120);
      expect(p.endsWith('\n')).toBe(true);
    }
    // Second flush: deltas only.
    rule.totalHits.inc(1);
    flusher.flush();
    await rx.waitFor((l) => l.length >= expected.length + 2);
    expect(rx.lines.slice(expected.length).sort()).toEqual(
      ['ratelimit.localcache.entryCount.__env=test:2|g', 'ratelimit.service.rate_limit.domain.key_value.total_hits.__env=test:1|c'].sort(),
    );
  });
});

describe('logging and disabled sinks', () => {
  test('logging sink sends nothing but logs each value at debug; /stats keeps the totals', () => {
    const lines: string[] = [];
    const logger = createLogger({ level: 'debug', format: 'text', write: (l) => void lines.push(l) });
    const store = new StatsStore();
    const flusher = new StatsFlusher(store, new LoggingSink(logger, { env: 'x' }), 600_000, logger);
    cleanups.push(() => flusher.stop());
    store.counter('ratelimit.service.config_load_success').inc();
    store.timer('ratelimit_server.Check.response_time').record(3);
    flusher.flush();
    expect(lines.join('')).toContain('stats: flushing counter ratelimit.service.config_load_success.__env=x = 1');
    expect(lines.join('')).toContain('stats: flushing timer ratelimit_server.Check.response_time.__env=x = 3');
    expect(store.entries()).toContainEqual(['ratelimit.service.config_load_success', 1]);
  });

  test('logging sink keeps no timer samples when debug logging is off', () => {
    const store = new StatsStore();
    const flusher = new StatsFlusher(store, new LoggingSink(silentLogger), 600_000, silentLogger);
    cleanups.push(() => flusher.stop());
    const t = store.timer('ratelimit_server.Check.response_time');
    t.record(3);
    expect(t.drain().count).toBe(0);
  });

  test('disabled: nothing is flushed and no timer runs', async () => {
    const store = new StatsStore();
    const sink = new NullSink();
    const spy = jest.spyOn(sink, 'counter');
    const flusher = new StatsFlusher(store, sink, 1, silentLogger);
    const c = store.counter('ratelimit.service.config_load_success');
    c.inc();
    await quietFor(20);
    flusher.flush();
    await flusher.stop();
    expect(spy).not.toHaveBeenCalled();
    expect(c.latch()).toBe(1); // never latched by the flusher
  });
});
