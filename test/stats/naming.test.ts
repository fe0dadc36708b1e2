import { DogNamer } from '../../src/stats/sinks/dogstatsd';
import { MapperConfigError, MetricMapper, defaultMapperConfig, escapeMetricName } from '../../src/stats/sinks/prom-mapper';
import { formatNumber } from '../../src/stats/sinks/types';
import { TagNamer, replaceTagChars, splitTags } from '../../src/stats/tags';

describe('gostats tags', () => {
  test('splitTags reads only trailing .__k=v segments', () => {
    expect(splitTags('ratelimit.memcache.multiget.__code=success')).toEqual({ base: 'ratelimit.memcache.multiget', tags: [['code', 'success']] });
    expect(splitTags('a.b.__x=1.__y=2')).toEqual({ base: 'a.b', tags: [['x', '1'], ['y', '2']] });
    expect(splitTags('ratelimit.service.rate_limit.d.__k=v.total_hits')).toEqual({ base: 'ratelimit.service.rate_limit.d.__k=v.total_hits', tags: [] });
    expect(splitTags('plain.name')).toEqual({ base: 'plain.name', tags: [] });
  });

  test('replaceTagChars', () => {
    expect(replaceTagChars('a.b:c|d')).toBe('a_b_c_d');
  });

  test('TagNamer merges EXTRA_TAGS (the stat own tags win), sorted, scopes only, empty dropped', () => {
    const n = new TagNamer({ b: '1.0', a: 'x', code: 'extra', empty: '' });
    expect(n.resolve('ratelimit.memcache.add.__code=success').serialized).toBe('ratelimit.memcache.add.__a=x.__b=1_0.__code=success');
    expect(n.resolve('ratelimit').serialized).toBe('ratelimit.__a=x.__b=1_0.__code=extra');
    expect(n.resolve('ratelimitx.y').serialized).toBe('ratelimitx.y');
    expect(n.resolve('runtime.x').serialized).toBe('runtime.x');
    expect(n.resolve('ratelimit_server.Check.total_requests').tags).toEqual([
      ['a', 'x'],
      ['b', '1_0'],
      ['code', 'extra'],
    ]);
  });

  test('line breaks in names (request data) cannot split a statsd line', () => {
    expect(new TagNamer().resolve('ratelimit.service.rate_limit.d.k_a\r\nb.total_hits').serialized).toBe('ratelimit.service.rate_limit.d.k_a__b.total_hits');
  });

  test('formatNumber never uses an exponent', () => {
    expect(formatNumber(3)).toBe('3');
    expect(formatNumber(1.5)).toBe('1.5');
    expect(formatNumber(1e21)).toBe('1000000000000000000000');
    expect(formatNumber(1.5e-7)).toBe('0.00000015');
    expect(formatNumber(-2.5e-7)).toBe('-0.00000025');
  });
});

describe('DogStatsD naming', () => {
  test('tag suffixes become k:v tags; the first matching mogrifier (listed order) rewrites', () => {
    const n = new DogNamer({ env: 'prod' }, [
      {
        name: 'RULES',
        pattern: '^ratelimit\\.service\\.rate_limit\\.(.*)\\.(.*)\\.(total_hits|over_limit)$',
        metricName: 'ratelimit.rule.$3',
        tags: { domain: '$1', descriptor: '$2', missing: '$9' },
      },
      { name: 'ALL', pattern: '^ratelimit\\.(.*)$', metricName: 'custom.$1', tags: {} },
    ]);
    expect(n.resolve('ratelimit.service.rate_limit.d.k_v.total_hits')).toEqual({
      name: 'ratelimit.rule.total_hits',
      tags: ['env:prod', 'descriptor:k_v', 'domain:d', 'missing:'],
    });
    expect(n.resolve('ratelimit.memcache.multiget.__code=error')).toEqual({ name: 'custom.memcache.multiget', tags: ['code:error', 'env:prod'] });
    expect(n.resolve('other.metric')).toEqual({ name: 'other.metric', tags: [] });
  });
});

describe('statsd_exporter mapper', () => {
  const mapper = new MetricMapper(defaultMapperConfig(false));

  test('escapeMetricName as statsd_exporter', () => {
    expect(escapeMetricName('ratelimit.service.rate_limit.d.k.over_limit_with_local_cache')).toBe('ratelimit_service_rate_limit_d_k_over_limit_with_local_cache');
    expect(escapeMetricName('1abc')).toBe('_1abc');
    expect(escapeMetricName('a--b---c-d')).toBe('a_b_c_d');
    expect(escapeMetricName('a/b*c é')).toBe('a_b_c__');
  });

  test.each([
    ['ratelimit.service.rate_limit.domain.key_value.total_hits', 'counter', 'ratelimit_service_rate_limit_total_hits', { domain: 'domain', key1: 'key_value' }],
    ['ratelimit.service.rate_limit.d.k1.k2.over_limit', 'counter', 'ratelimit_service_rate_limit_over_limit', { domain: 'd', key1: 'k1', key2: 'k2' }],
    ['ratelimit.service.rate_limit.d.k1.k2.k3.k4.near_limit', 'counter', 'ratelimit_service_rate_limit_near_limit', { domain: 'd', key1: 'k1', key2: 'k2' }],
    ['ratelimit.service.rate_limit.d.k1.k2.over_limit_with_local_cache', 'counter', 'ratelimit_service_rate_limit_over_limit', { domain: 'd', key1: 'k1', key2: 'k2' }],
    ['ratelimit.service.rate_limit.d.k1.over_limit_with_local_cache', 'counter', 'ratelimit_service_rate_limit_d_k1_over_limit_with_local_cache', {}],
    ['ratelimit.service.rate_limit.d.domain_not_found', 'counter', 'ratelimit_service_rate_limit_d_domain_not_found', {}],
    ['ratelimit.service.call.should_rate_limit.redis_error', 'counter', 'ratelimit_service_should_rate_limit_error', { err_type: 'redis_error' }],
    ['ratelimit.service.call.should_rate_limit.redis_error', 'gauge', 'ratelimit_service_call_should_rate_limit_redis_error', {}],
    ['ratelimit_server.ShouldRateLimit.total_requests', 'counter', 'ratelimit_service_total_requests', { grpc_method: 'ShouldRateLimit' }],
    ['ratelimit_server.Check.response_time', 'observer', 'ratelimit_service_response_time_seconds', { grpc_method: 'Check' }],
    ['ratelimit.service.config_load_success', 'counter', 'ratelimit_service_config_load_success', {}],
    ['ratelimit.service.config_load_error', 'counter', 'ratelimit_service_config_load_error', {}],
    ['ratelimit.service.global_shadow_mode', 'counter', 'ratelimit_service_global_shadow_mode', {}],
    ['ratelimit.localcache.hitCount', 'gauge', 'ratelimit_localcache_hitCount', {}],
  ] as const)('%s (%s) -> %s', (name, type, prom, labels) => {
    const m = mapper.map(name, type);
    expect(m.name).toBe(prom);
    expect(m.labels).toEqual(labels);
  });

  test('the response time histogram scales to seconds unless asked for milliseconds', () => {
    expect(mapper.map('ratelimit_server.ShouldRateLimit.response_time', 'observer')).toMatchObject({ scale: 0.001, observer: { type: 'histogram' } });
    const ms = new MetricMapper(defaultMapperConfig(true));
    expect(ms.map('ratelimit_server.ShouldRateLimit.response_time', 'observer').scale).toBeUndefined();
  });

  test('YAML: glob and regex forms, defaults, drop, help, templates', () => {
    const m = MetricMapper.fromYaml(`
defaults:
  observer_type: histogram
  buckets: [1, 5, 10]
mappings:
  - match: "ratelimit.service.rate_limit.*.*.total_hits"
    name: "rl_hits_\${1}"
    help: "Hits per rule"
    labels:
      rule: "$2"
  - match: 'ratelimit\\.service\\.rate_limit\\.(?P<dom>[^.]+)\\.(.*)\\.over_limit'
    match_type: regex
    name: "rl_over"
    labels:
      domain: "$dom"
      rest: "\${2}"
  - match: "ratelimit.localcache.*"
    action: drop
  - match: "ratelimit_server.*.response_time"
    name: "rt"
    timer_type: summary
    summary_options:
      quantiles: [{quantile: 0.5, error: 0.05}]
      max_age: 1m
`);
    expect(m.map('ratelimit.service.rate_limit.dom.k_v.total_hits', 'counter')).toMatchObject({ name: 'rl_hits_dom', labels: { rule: 'k_v' }, help: 'Hits per rule' });
    expect(m.map('ratelimit.service.rate_limit.dom.a.b.over_limit', 'counter')).toMatchObject({ name: 'rl_over', labels: { domain: 'dom', rest: 'a.b' } });
    expect(m.map('ratelimit.localcache.hitCount', 'gauge').drop).toBe(true);
    expect(m.map('ratelimit_server.X.response_time', 'observer').observer).toMatchObject({ type: 'summary', maxAgeSeconds: 60 });
    expect(m.map('other.timer', 'observer').observer).toMatchObject({ type: 'histogram', buckets: [1, 5, 10] });
  });

  test.each([
    ['mappings:\n  - match: "a.b"\n    name: "x"\n    ttl: 5m\n', 'mappings[0].ttl'],
    ['mappings:\n  - match: "a.b"\n    name: "x"\n    bogus: 1\n', 'unsupported key "bogus"'],
    ['mappings:\n  - match: "a.b"\n    name: "x"\n    observer_type: distribution\n', 'mappings[0].observer_type: unsupported value "distribution"'],
    ['mappings:\n  - match: "a.b"\n    name: "x"\n    histogram_options:\n      native_histogram_bucket_factor: 1.1\n', 'mappings[0].histogram_options: unsupported key "native_histogram_bucket_factor"'],
    ['mappings:\n  - match: "a.b"\n', "didn't set a metric name"],
    ['mappings:\n  - match: "a.(b"\n    match_type: regex\n    name: x\n', 'invalid regex'],
    ['mappings:\n  - match: "a.b"\n    name: "x"\n    labels:\n      "bad-label": "1"\n', 'invalid label key "bad-label"'],
    ['defaults:\n  glob_disable_ordering: true\n', 'glob_disable_ordering'],
    ['whatever: 1\n', 'unsupported key "whatever"'],
    ['mappings: [\n', 'invalid YAML'],
  ])('rejects %j', (yaml, message) => {
    expect(() => MetricMapper.fromYaml(yaml, 'm.yaml')).toThrow(MapperConfigError);
    expect(() => MetricMapper.fromYaml(yaml, 'm.yaml')).toThrow(message);
  });
});
