import { StatsFlusher } from '../../src/stats/flusher';
import { createStatsSink } from '../../src/stats/sinks';
import { DogStatsdSink } from '../../src/stats/sinks/dogstatsd';
import { StatsStore } from '../../src/stats/store';
import { silentLogger } from '../../src/telemetry/logger';
import { type UdpReceiver, udpReceiver } from './receivers';

let rx: UdpReceiver;
let flusher: StatsFlusher | undefined;
beforeEach(async () => {
  rx = await udpReceiver();
});
afterEach(async () => {
  await flusher?.stop();
  flusher = undefined;
  await rx.close();
});

/** Parses `name:value|type|#tags` (ignoring DogStatsD extensions such as `|c:` container ids). */
function parse(line: string): { name: string; value: string; type: string; tags: string[] } {
  const [head, ...fields] = line.split('|');
  const i = head!.lastIndexOf(':');
  const tagField = fields.find((f) => f.startsWith('#'));
  return { name: head!.slice(0, i), value: head!.slice(i + 1), type: fields[0]!, tags: tagField === undefined ? [] : tagField.slice(1).split(',').sort() };
}

describe('DogStatsD sink (hot-shots, UDP)', () => {
  test('tag suffixes and EXTRA_TAGS become tags; counters, gauges, timers in whole ms', async () => {
    const store = new StatsStore();
    const sink = new DogStatsdSink({ host: '127.0.0.1', port: rx.port, extraTags: { env: 'prod.1' }, clientOptions: { originDetection: false, includeDataDogTags: false } });
    flusher = new StatsFlusher(store, sink, 600_000, silentLogger);
    store.counter('ratelimit.memcache.multiget.__code=success').inc(4);
    store.ruleStats('domain.key_value').totalHits.inc(3);
    store.gauge('ratelimit.localcache.entryCount').set(9);
    store.timer('ratelimit_server.ShouldRateLimit.response_time').record(12.7);
    flusher.flush();
    await rx.waitFor((l) => l.length >= 4);
    const got = rx.lines.map(parse).sort((a, b) => (a.name < b.name ? -1 : 1));
    expect(got).toEqual([
      { name: 'ratelimit.localcache.entryCount', value: '9', type: 'g', tags: ['env:prod_1'] },
      { name: 'ratelimit.memcache.multiget', value: '4', type: 'c', tags: ['code:success', 'env:prod_1'] },
      { name: 'ratelimit.service.rate_limit.domain.key_value.total_hits', value: '3', type: 'c', tags: ['env:prod_1'] },
      { name: 'ratelimit_server.ShouldRateLimit.response_time', value: '12', type: 'ms', tags: ['env:prod_1'] },
    ]);
  });

  test('a mogrifier rewrites the name and adds its tags (through the settings factory)', async () => {
    const store = new StatsStore();
    const sink = createStatsSink(
      {
        sink: 'dogstatsd',
        disabled: false,
        useStatsd: false,
        useDogStatsd: true,
        usePrometheus: false,
        statsdHost: '127.0.0.1',
        statsdPort: rx.port,
        extraTags: {},
        flushIntervalMs: 600_000,
        dogStatsdMogrifierNames: ['RULES'],
        dogStatsdMogrifiers: [
          {
            name: 'RULES',
            pattern: '^ratelimit\\.service\\.rate_limit\\.(.*)\\.(.*)\\.(total_hits|over_limit)$',
            metricName: 'ratelimit.$3',
            tags: { domain: '$1', descriptor: '$2' },
          },
        ],
        prometheus: { addr: ':0', path: '/metrics', mapperYaml: '', responseTimeAsMilliseconds: false },
      },
      silentLogger,
    );
    flusher = new StatsFlusher(store, sink, 600_000, silentLogger);
    const rule = store.ruleStats('messaging.auth-service');
    rule.totalHits.inc(5);
    rule.overLimit.inc(2);
    store.counter('ratelimit.service.config_load_success').inc();
    flusher.flush();
    await rx.waitFor((l) => l.length >= 3);
    const got = rx.lines.map(parse);
    expect(got).toContainEqual(expect.objectContaining({ name: 'ratelimit.total_hits', value: '5', type: 'c', tags: expect.arrayContaining(['descriptor:auth-service', 'domain:messaging']) }));
    expect(got).toContainEqual(expect.objectContaining({ name: 'ratelimit.over_limit', value: '2', type: 'c', tags: expect.arrayContaining(['descriptor:auth-service', 'domain:messaging']) }));
    expect(got).toContainEqual(expect.objectContaining({ name: 'ratelimit.service.config_load_success', value: '1', type: 'c' }));
  });
});
