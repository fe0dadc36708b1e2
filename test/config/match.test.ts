/** GetLimit matching (reference 1.2): precedence, wildcards, depth rule, whitelisting, rule fields. */
import { StatsStore } from '../../src/stats/store';
import { desc, load } from './helpers';

const rl = (unit: string, n: number) => `{unit: ${unit}, requests_per_unit: ${n}}`;

describe('precedence at one level', () => {
  const c = load(`domain: d
descriptors:
  - key: k
    rate_limit: ${rl('second', 1)}
  - key: k
    value: "a*"
    rate_limit: ${rl('second', 2)}
  - key: k
    value: "ab*"
    rate_limit: ${rl('second', 3)}
  - key: k
    value: abc
    rate_limit: ${rl('second', 4)}
  - key: k
    value: "*z"
    rate_limit: ${rl('second', 5)}
  - key: k
    value: "m*d*e"
    rate_limit: ${rl('second', 6)}
  - key: k
    value: "lit*"
    rate_limit: ${rl('second', 7)}
  - key: k
    value: "lit*x"
    rate_limit: ${rl('second', 8)}
`);
  const rpu = (v: string) => c.getLimit('d', desc(['k', v]))?.limit.requestsPerUnit;

  test('exact key_value beats any wildcard', () => expect(rpu('abc')).toBe(4));
  test('first matching wildcard in load order wins', () => {
    expect(rpu('abd')).toBe(2); // "a*" is before "ab*"
    expect(rpu('a')).toBe(2); // * matches zero characters
  });
  test('wildcard at the start', () => expect(rpu('xyz')).toBe(5));
  test('wildcards in the middle', () => {
    expect(rpu('mde')).toBe(6);
    expect(rpu('m1d2e')).toBe(6);
    expect(rpu('m1e2d')).toBe(1); // segments must appear in order
    expect(rpu('md')).toBe(1); // the last literal must end the string
  });
  test('a config value with a literal * is matched exactly first', () => {
    expect(rpu('lit*x')).toBe(8);
    expect(rpu('lit*')).toBe(7);
    expect(rpu('litx')).toBe(7);
  });
  test('bare key is the fallback', () => {
    expect(rpu('nothing')).toBe(1);
    expect(rpu('')).toBe(1);
  });
  test('keys and values are case-sensitive', () => {
    expect(rpu('ABC')).toBe(1);
    expect(c.getLimit('d', desc(['K', 'abc']))).toBeUndefined();
  });
});

describe('wildcards match the whole key_value string', () => {
  test('an empty request value matches k_*', () => {
    const c = load(`domain: d\ndescriptors:\n  - key: k\n    value: "*"\n    rate_limit: ${rl('minute', 9)}\n`);
    expect(c.getLimit('d', desc(['k', '']))!.limit.requestsPerUnit).toBe(9);
    expect(c.getLimit('d', desc(['kk', 'x']))).toBeUndefined();
  });

  test('exact lookup is on the key_value string, as upstream (underscores can cross the key/value boundary)', () => {
    const c = load(`domain: d
descriptors:
  - key: a_b
    value: c
    rate_limit: ${rl('second', 1)}
  - key: x_
    rate_limit: ${rl('second', 2)}
`);
    expect(c.getLimit('d', desc(['a_b', 'c']))!.limit.requestsPerUnit).toBe(1);
    expect(c.getLimit('d', desc(['a', 'b_c']))!.limit.requestsPerUnit).toBe(1);
    // request x="" gives finalKey "x_", which is the config key "x_" without value
    expect(c.getLimit('d', desc(['x', '']))!.limit.requestsPerUnit).toBe(2);
  });
});

describe('depth rule', () => {
  const c = load(`domain: d
descriptors:
  - key: parent
    rate_limit: ${rl('hour', 10)}
    descriptors:
      - key: child
        value: c1
        rate_limit: ${rl('minute', 20)}
        descriptors:
          - key: grandchild
            rate_limit: ${rl('second', 30)}
  - key: leaf
    rate_limit: ${rl('day', 40)}
  - key: nolimit
    descriptors:
      - key: sub
        rate_limit: ${rl('second', 50)}
`);
  const rpu = (...kv: Array<[string, string]>) => c.getLimit('d', desc(...kv))?.limit.requestsPerUnit;

  test('a request shallower than the config gets the limit of the node at its last entry', () => {
    expect(rpu(['parent', 'p'])).toBe(10);
    expect(rpu(['parent', 'p'], ['child', 'c1'])).toBe(20);
    expect(rpu(['parent', 'p'], ['child', 'c1'], ['grandchild', 'g'])).toBe(30);
  });
  test('intermediate-node limits are ignored for deeper requests', () => {
    expect(rpu(['parent', 'p'], ['child', 'other'])).toBeUndefined();
    expect(rpu(['nolimit', 'x'])).toBeUndefined();
    expect(rpu(['nolimit', 'x'], ['sub', 'y'])).toBe(50);
  });
  test('a request deeper than the config gets no limit', () => {
    expect(rpu(['leaf', 'x'], ['more', 'y'])).toBeUndefined();
    expect(rpu(['parent', 'p'], ['child', 'c1'], ['grandchild', 'g'], ['x', 'y'])).toBeUndefined();
  });
  test('a mismatch at any level gives no limit', () => {
    expect(rpu(['other', 'p'])).toBeUndefined();
    expect(rpu(['parent', 'p'], ['nochild', 'x'], ['grandchild', 'g'])).toBeUndefined();
  });
  test('a descriptor with no entries gets no limit', () => {
    expect(c.getLimit('d', { entries: [] })).toBeUndefined();
  });
});

describe('basic config (upstream basic_config.yaml)', () => {
  const c = load(require('fs').readFileSync(require('path').join(__dirname, 'fixtures/basic_config.yaml'), 'utf8'));
  test('lookups', () => {
    expect(c.getLimit('test-domain', desc(['key1', 'value1']))!.limit).toEqual({ name: '', requestsPerUnit: 5, unit: 1 });
    expect(c.getLimit('test-domain', desc(['key1', 'other']))).toBeUndefined();
    expect(c.getLimit('test-domain', desc(['key2', 'value2']))!.limit.requestsPerUnit).toBe(30);
    expect(c.getLimit('test-domain', desc(['key2', 'x']))!.limit.requestsPerUnit).toBe(20);
    expect(c.getLimit('test-domain', desc(['key3', 'x']))!.limit).toEqual({ name: '', requestsPerUnit: 10, unit: 3 });
    expect(c.getLimit('test-domain', desc(['key3', 'x'], ['subkey3', 'y']))!.limit).toEqual({ name: '', requestsPerUnit: 5, unit: 4 });
    expect(c.getLimit('test-domain', desc(['key5', 'x'], ['subkey5', 'subvalue5']))!.fullKey).toBe('test-domain.key5.subkey5_subvalue5');
  });
  test('whitelisting: a descriptor without rate_limit and children gives no limit', () => {
    expect(c.getLimit('test-domain', desc(['key4', 'value4']))).toBeUndefined();
  });
});

describe('placeholders and rule fields', () => {
  const c = load(`domain: d
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 100
      name: per_ip
  - key: user
    value: vip
    shadow_mode: true
    quota_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 5
      name: vip
      replaces:
        - name: per_ip
        - name: other
  - key: internal
    rate_limit:
      unlimited: true
      replaces: [{name: per_ip}]
`);

  test('a bare key matches any value (one counter per value)', () => {
    const a = c.getLimit('d', desc(['remote_address', '10.0.0.1']))!;
    const b = c.getLimit('d', desc(['remote_address', '10.0.0.2']))!;
    expect(a).toBe(b); // same shared rule object, no allocation
    expect(a.fullKey).toBe('d.remote_address');
    expect(a.limit).toEqual({ name: 'per_ip', requestsPerUnit: 100, unit: 1 });
    expect(a.shadowMode).toBe(false);
    expect(a.quotaMode).toBe(false);
    expect(a.isOverride).toBe(false);
    expect(a.replaces).toEqual([]);
    expect(a.shareThresholdKeyPattern).toBeUndefined();
  });

  test('name, replaces, shadow_mode and quota_mode are surfaced', () => {
    const r = c.getLimit('d', desc(['user', 'vip']))!;
    expect(r.limit.name).toBe('vip');
    expect(r.replaces).toEqual(['per_ip', 'other']);
    expect(r.shadowMode).toBe(true);
    expect(r.quotaMode).toBe(true);
  });

  test('unlimited rules are returned with their replaces', () => {
    const r = c.getLimit('d', desc(['internal', 'x']))!;
    expect(r.unlimited).toBe(true);
    expect(r.limit).toEqual({ name: '', requestsPerUnit: 0, unit: 0 });
    expect(r.replaces).toEqual(['per_ip']);
  });
});

describe('unknown domain and overrides', () => {
  const stats = new StatsStore();
  const c = load(`domain: d\ndescriptors:\n  - key: k\n    rate_limit: ${rl('second', 1)}\n`, { stats });

  // The lookup itself counts nothing: the service counts domain_not_found (test/limiter/service.test.ts).
  test('unknown domain: undefined, hasDomain false, no series created', () => {
    const before = stats.entries().length;
    expect(c.hasDomain('no:such')).toBe(false);
    expect(c.hasDomain('d')).toBe(true);
    expect(c.getLimit('no:such', desc(['k', 'v']))).toBeUndefined();
    expect(stats.entries().length).toBe(before);
  });

  test('an override on an unknown domain is still nothing', () => {
    expect(c.getLimit('nope', { entries: [{ key: 'k', value: 'v' }], limit: { requestsPerUnit: 3, unit: 2 } })).toBeUndefined();
  });

  test('an override returns a synthetic rule, never matched against config', () => {
    const r = c.getLimit('d', {
      entries: [
        { key: 'k', value: 'v' },
        { key: 'ip', value: '10.1.2.3' },
        { key: 'empty', value: '' },
      ],
      limit: { requestsPerUnit: 42, unit: 3 },
    })!;
    expect(r.isOverride).toBe(true);
    expect(r.limit).toEqual({ name: '', requestsPerUnit: 42, unit: 3 });
    expect(r.shadowMode).toBe(false);
    expect(r.quotaMode).toBe(false);
    expect(r.unlimited).toBe(false);
    expect(r.replaces).toEqual([]);
    expect(r.metadata).toBeUndefined();
    expect(r.fullKey).toBe('d.k_v.ip_10.1.2.3.empty');
    expect(r.stats.key).toBe('d.k_v.ip_10_1_2_3.empty');
    r.stats.totalHits.inc(2);
    expect(stats.counter('ratelimit.service.rate_limit.d.k_v.ip_10_1_2_3.empty.total_hits').value).toBe(2);
  });

  test('override units are passed through unvalidated', () => {
    const r = c.getLimit('d', { entries: [{ key: 'zzz', value: '' }], limit: { requestsPerUnit: 1, unit: 0 } })!;
    expect(r.limit.unit).toBe(0);
    expect(r.fullKey).toBe('d.zzz');
  });
});

describe('exact match is upstream\'s lookup of `key + "_" + value`, wherever the `_` falls', () => {
  const c = load(`domain: d
descriptors:
  - key: a
    value: b_c
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: a_b
    value: x
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: k_z
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: k
    rate_limit: {unit: second, requests_per_unit: 4}
`);
  const rpu = (key: string, value: string) => c.getLimit('d', desc([key, value]))?.limit.requestsPerUnit;

  test('each node by its own key and value', () => {
    expect(rpu('a', 'b_c')).toBe(1);
    expect(rpu('a_b', 'x')).toBe(2);
  });

  test('and by any other split of the same text', () => {
    expect(rpu('a_b', 'c')).toBe(1); // "a_b_c" is a=b_c
    expect(rpu('a', 'b_x')).toBe(2); // "a_b_x" is a_b=x
    expect(rpu('k', 'z')).toBe(3); // "k_z" is the bare key k_z, before k's default
    expect(rpu('k', 'y')).toBe(4);
    expect(c.explainMatch('d', desc(['a_b', 'c'])).steps[0]).toMatchObject({ how: 'exact', node: 'a_b_c' });
  });
});
