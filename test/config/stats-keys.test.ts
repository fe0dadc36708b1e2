/** Stats keys ("FullKey", reference 1.15) and share_threshold cache-key patterns (1.3). */
import { type Counter, StatsStore } from '../../src/stats/store';
import { desc, load } from './helpers';

const RL = 'rate_limit: {unit: minute, requests_per_unit: 10}';

function counterExists(stats: StatsStore, key: string): boolean {
  return stats.entries().some(([name]) => name === `ratelimit.service.rate_limit.${key}.total_hits`);
}

describe('default stats key: the config path', () => {
  const stats = new StatsStore();
  const c = load(
    `domain: test-domain
descriptors:
  - key: wild
    value: "foo*"
    ${RL}
  - key: ip
    value: "10.0.0.1"
    ${RL}
  - key: k
    value: "a:b|c"
    ${RL}
`,
    { stats },
  );

  test('wildcard match: key_<pattern>, shared rule', () => {
    const a = c.getLimit('test-domain', desc(['wild', 'foo1']))!;
    expect(a.fullKey).toBe('test-domain.wild_foo*');
    expect(a).toBe(c.getLimit('test-domain', desc(['wild', 'foo2'])));
    expect(Object.isFrozen(a)).toBe(true);
  });

  test('stats names pass through SanitizeStatName; fullKey stays the raw path', () => {
    const ip = c.getLimit('test-domain', desc(['ip', '10.0.0.1']))!;
    expect(ip.fullKey).toBe('test-domain.ip_10.0.0.1');
    expect(ip.stats.key).toBe('test-domain.ip_10_0_0_1');
    const k = c.getLimit('test-domain', desc(['k', 'a:b|c']))!;
    expect(k.stats.key).toBe('test-domain.k_a_b_c');
    // A rule's series are made when it first counts: a big config that is little used stays small.
    expect(counterExists(stats, 'test-domain.k_a_b_c')).toBe(false);
    k.stats.totalHits.inc();
    expect(counterExists(stats, 'test-domain.k_a_b_c')).toBe(true);
    expect((c.getLimit('test-domain', desc(['k', 'a:b|c']))!.stats.totalHits as Counter).value).toBe(1);
  });
});

describe('detailed_metric', () => {
  const stats = new StatsStore();
  const c = load(
    `domain: test-domain
descriptors:
  - key: key7
    detailed_metric: true
    ${RL}
  - key: parent
    detailed_metric: true
    ${RL}
    descriptors:
      - key: child
        value_to_metric: true
        detailed_metric: true
        ${RL}
  - key: service
    value: "svc/*"
    share_threshold: true
    descriptors:
      - key: endpoint
        detailed_metric: true
        ${RL}
  - key: nodetail
    descriptors:
      - key: leaf
        detailed_metric: true
        ${RL}
`,
    { stats },
  );

  test('key_value of every request entry, with runtime values', () => {
    const r = c.getLimit('test-domain', desc(['key7', 'unspecified_value']))!;
    expect(r.fullKey).toBe('test-domain.key7_unspecified_value');
    expect(r.stats.key).toBe('test-domain.key7_unspecified_value');
    // The lookup creates no series; the rule's first count does.
    expect(counterExists(stats, 'test-domain.key7_unspecified_value')).toBe(false);
    r.stats.totalHits.inc();
    expect(counterExists(stats, 'test-domain.key7_unspecified_value')).toBe(true);
    expect(r.limit).toEqual({ name: '', requestsPerUnit: 10, unit: 2 });
    expect(Object.isFrozen(r)).toBe(true);
  });

  test('an empty value still gives key_', () => {
    expect(c.getLimit('test-domain', desc(['key7', '']))!.fullKey).toBe('test-domain.key7_');
  });

  test('the per-request rule is cached per key', () => {
    const a = c.getLimit('test-domain', desc(['key7', 'v1']))!;
    expect(c.getLimit('test-domain', desc(['key7', 'v1']))).toBe(a);
    expect(c.getLimit('test-domain', desc(['key7', 'v2']))).not.toBe(a);
  });

  test('a request shallower than the config uses the detailed key of its node', () => {
    expect(c.getLimit('test-domain', desc(['parent', 'p1']))!.fullKey).toBe('test-domain.parent_p1');
    // value_to_metric is ignored when the leaf is detailed
    expect(c.getLimit('test-domain', desc(['parent', 'p1'], ['child', '']))!.fullKey).toBe('test-domain.parent_p1.child_');
  });

  test('the detailed flag of an intermediate node does not apply to a deeper leaf', () => {
    expect(c.getLimit('test-domain', desc(['nodetail', 'x'], ['leaf', 'y']))!.fullKey).toBe('test-domain.nodetail_x.leaf_y');
  });

  test('with share_threshold: key_<pattern> for shared entries, key or key_value for the others', () => {
    const r = c.getLimit('test-domain', desc(['service', 'svc/a'], ['endpoint', 'get']))!;
    expect(r.fullKey).toBe('test-domain.service_svc/*.endpoint_get');
    expect(r.shareThresholdKeyPattern).toEqual(['svc/*', undefined]);
    expect(c.getLimit('test-domain', desc(['service', 'svc/b'], ['endpoint', '']))!.fullKey).toBe('test-domain.service_svc/*.endpoint');
  });
});

describe('value_to_metric (every row of the 1.15 table)', () => {
  const stats = new StatsStore();
  const c = load(
    `domain: domain
descriptors:
  - key: route
    value: draw
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            ${RL}
  - key: user
    value_to_metric: true
    descriptors:
      - key: action
        value: readfile
        descriptors:
          - key: resource
            ${RL}
  - key: wv
    value: "foo*"
    value_to_metric: true
    ${RL}
  - key: ws
    value: "api/*"
    value_to_metric: true
    share_threshold: true
    descriptors:
      - key: method
        ${RL}
  - key: wn
    value: "bar*"
    descriptors:
      - key: m
        value_to_metric: true
        ${RL}
  - key: bare
    value_to_metric: true
    ${RL}
  - key: plain
    ${RL}
`,
    { stats },
  );
  const key = (...kv: Array<[string, string]>) => c.getLimit('domain', desc(...kv))?.fullKey;

  test('bare key + value_to_metric: key_<runtime value>; bare key, no flag: key', () => {
    const r = c.getLimit('domain', desc(['route', 'draw'], ['http_method', 'GET'], ['subject_id', '123']))!;
    expect(r.fullKey).toBe('domain.route_draw.http_method_GET.subject_id');
    expect(counterExists(stats, 'domain.route_draw.http_method_GET.subject_id')).toBe(false);
    r.stats.withinLimit.inc();
    expect(counterExists(stats, 'domain.route_draw.http_method_GET.subject_id')).toBe(true);
  });

  test('bare key + value_to_metric with an empty value: just key (the shared rule)', () => {
    const r = c.getLimit('domain', desc(['route', 'draw'], ['http_method', ''], ['subject_id', '1']))!;
    expect(r.fullKey).toBe('domain.route_draw.http_method.subject_id');
    expect(r.stats.key).toBe('domain.route_draw.http_method.subject_id');
    expect(c.getLimit('domain', desc(['bare', '']))!.fullKey).toBe('domain.bare');
    expect(c.getLimit('domain', desc(['bare', 'x']))!.fullKey).toBe('domain.bare_x');
  });

  test('explicit value: key_value', () => {
    expect(key(['user', 'alice'], ['action', 'readfile'], ['resource', 'f1'])).toBe('domain.user_alice.action_readfile.resource');
  });

  test('wildcard + value_to_metric: key_<runtime value>', () => {
    expect(key(['wv', 'foo123'])).toBe('domain.wv_foo123');
  });

  test('wildcard + share_threshold: key_<pattern> (share_threshold wins)', () => {
    const r = c.getLimit('domain', desc(['ws', 'api/v1'], ['method', 'GET']))!;
    expect(r.fullKey).toBe('domain.ws_api/*.method');
    expect(r.shareThresholdKeyPattern).toEqual(['api/*', undefined]);
  });

  test('wildcard, no flag: key_<pattern>', () => {
    expect(key(['wn', 'bar9'], ['m', 'x'])).toBe('domain.wn_bar*.m_x');
    expect(key(['wn', 'bar9'], ['m', ''])).toBe('domain.wn_bar*.m');
  });

  test('no flags at all: the shared load-time rule', () => {
    const a = c.getLimit('domain', desc(['plain', 'a']))!;
    expect(a.fullKey).toBe('domain.plain');
    expect(a).toBe(c.getLimit('domain', desc(['plain', 'b'])));
  });

  test('runtime values are sanitized in the stats name', () => {
    const r = c.getLimit('domain', desc(['bare', '192.168.0.1:80']))!;
    expect(r.fullKey).toBe('domain.bare_192.168.0.1:80');
    expect(r.stats.key).toBe('domain.bare_192_168_0_1_80');
  });
});

describe('share_threshold', () => {
  const c = load(`domain: test-domain
descriptors:
  - key: files
    value: "files/*"
    share_threshold: true
    ${RL}
  - key: parent
    value: value1
    descriptors:
      - key: files
        value: "nested/*"
        share_threshold: true
        ${RL}
  - key: route
    value: "api/*"
    share_threshold: true
    descriptors:
      - key: method
        ${RL}
`);

  test('the matched pattern replaces the value in the cache key and stats (domain_files_files/*_1234)', () => {
    const r = c.getLimit('test-domain', desc(['files', 'files/a.pdf']))!;
    expect(r.shareThresholdKeyPattern).toEqual(['files/*']);
    expect(r.fullKey).toBe('test-domain.files_files/*');
    // no allocation for the common case
    expect(c.getLimit('test-domain', desc(['files', 'files/b.pdf']))).toBe(r);
  });

  test('nested entry (domain_parent_value1_files_nested/*_1234)', () => {
    const r = c.getLimit('test-domain', desc(['parent', 'value1'], ['files', 'nested/file1.txt']))!;
    expect(r.shareThresholdKeyPattern).toEqual([undefined, 'nested/*']);
    expect(r.fullKey).toBe('test-domain.parent_value1.files_nested/*');
  });

  test('a share_threshold wildcard with children: the pattern is tracked for the deeper rule', () => {
    const r = c.getLimit('test-domain', desc(['route', 'api/v1'], ['method', 'GET']))!;
    expect(r.fullKey).toBe('test-domain.route_api/*.method');
    expect(r.shareThresholdKeyPattern).toEqual(['api/*', undefined]);
  });

  test('an exact match of the literal pattern is not a wildcard match', () => {
    const r = c.getLimit('test-domain', desc(['files', 'files/*']))!;
    expect(r.shareThresholdKeyPattern).toBeUndefined();
    expect(r.fullKey).toBe('test-domain.files_files/*');
  });
});

describe('share_threshold corner cases', () => {
  const c = load(`domain: d
descriptors:
  - key: files
    value: "f/*"
    share_threshold: true
    descriptors:
      - key: user
        detailed_metric: true
        ${RL}
      - key: op
        value_to_metric: true
        ${RL}
`);

  test('detailed leaf under a share node matched by its literal value: no pattern, runtime value in the key', () => {
    const r = c.getLimit('d', desc(['files', 'f/*'], ['user', 'bob']))!;
    expect(r.shareThresholdKeyPattern).toBeUndefined();
    expect(r.fullKey).toBe('d.files_f/*.user_bob');
  });

  test('value_to_metric below a share wildcard keeps the pattern and caches the rule', () => {
    const r = c.getLimit('d', desc(['files', 'f/a'], ['op', 'read']))!;
    expect(r.fullKey).toBe('d.files_f/*.op_read');
    expect(r.shareThresholdKeyPattern).toEqual(['f/*', undefined]);
    expect(c.getLimit('d', desc(['files', 'f/b'], ['op', 'read']))).toBe(r);
    expect(Object.isFrozen(r.shareThresholdKeyPattern)).toBe(true);
  });
});

test("a rule made per request (value_to_metric, detailed_metric) counts in its config limit's window: the headroom and hot keys are per limit, not per value", () => {
  const stats = new StatsStore();
  const c = load(
    `domain: d
descriptors:
  - key: user
    value_to_metric: true
    ${RL}
  - key: path
    detailed_metric: true
    ${RL}
`,
    { stats },
  );
  for (const key of ['user', 'path']) {
    const a = c.getLimit('d', desc([key, 'alice']))!;
    const b = c.getLimit('d', desc([key, 'bob']))!;
    expect(a.fullKey).not.toBe(b.fullKey);
    expect(a.watch).toBeDefined();
    expect(a.watch).toBe(b.watch);
  }
});
