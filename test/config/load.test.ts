/** Snapshot-level behaviour: merge, dump, metadata, immutability, the object (xDS) entry point. */
import { ConfigError, loadConfigFromObjects } from '../../src/config';
import { StatsStore } from '../../src/stats/store';
import { desc, load } from './helpers';

describe('MERGE_DOMAIN_CONFIG', () => {
  const a = `domain: d
descriptors:
  - key: k1
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: w
    value: "a*"
    rate_limit: {unit: second, requests_per_unit: 10}
`;
  const b = `domain: d
descriptors:
  - key: k2
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: w
    value: "ab*"
    rate_limit: {unit: second, requests_per_unit: 20}
  - key: w
    value: "b*"
    rate_limit: {unit: second, requests_per_unit: 30}
`;
  test('a later file with the same domain merges into the existing tree', () => {
    const c = load([a, b], { merge: true });
    expect(c.domainCount).toBe(1);
    expect(c.getLimit('d', desc(['k1', 'x']))!.limit.requestsPerUnit).toBe(1);
    expect(c.getLimit('d', desc(['k2', 'x']))!.limit.requestsPerUnit).toBe(2);
    // wildcard priority follows load order across files
    expect(c.getLimit('d', desc(['w', 'abc']))!.limit.requestsPerUnit).toBe(10);
    expect(c.getLimit('d', desc(['w', 'bc']))!.limit.requestsPerUnit).toBe(30);
  });

  test('without merge the later file is rejected', () => {
    expect(() => load([a, b])).toThrow(new ConfigError("file1.yaml: duplicate domain 'd' in config file"));
  });
});

describe('dump (/rlconfig)', () => {
  test('one sorted line per configured limit', () => {
    const c = load([
      `domain: zeta
descriptors:
  - key: k
    value: v
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 7}
`,
      `domain: alpha
descriptors:
  - key: unl
    rate_limit: {unlimited: true}
  - key: white
    value: listed
  - key: parent
    descriptors:
      - key: child
        quota_mode: true
        rate_limit: {unit: week, requests_per_unit: 3}
`,
    ]);
    expect(c.dump()).toBe(
      'alpha.parent.child: unit=WEEK requests_per_unit=3, shadow_mode: false, quota_mode: true\n' +
        'alpha.unl: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false\n' +
        'zeta.k_v: unit=HOUR requests_per_unit=7, shadow_mode: true, quota_mode: false\n',
    );
    expect(c.domainCount).toBe(2);
  });

  test('an empty config dumps nothing', () => {
    const c = loadConfigFromObjects([], { mergeDomainConfig: false, stats: new StatsStore() });
    expect(c.dump()).toBe('');
    expect(c.domainCount).toBe(0);
  });
});

describe('metadata', () => {
  const c = load(`domain: d
descriptors:
  - key: svc
    value: a
    metadata:
      service_with_quota:
        name: backend-a
      weight: 0.5
      count: 3
      enabled: yes
      tags: [x, 1, ~]
      __proto__: safe
      when: 2001-12-14
    rate_limit: {unit: second, requests_per_unit: 1}
    descriptors:
      - key: sub
        metadata: {level: child}
        rate_limit: {unit: second, requests_per_unit: 2}
  - key: nometa
    rate_limit: {unit: second, requests_per_unit: 1}
`);

  test('converted to a Struct-compatible object, attached to the matched rule', () => {
    const r = c.getLimit('d', desc(['svc', 'a']))!;
    expect(JSON.stringify(r.metadata)).toBe(
      '{"service_with_quota":{"name":"backend-a"},"weight":0.5,"count":3,"enabled":true,' +
        '"tags":["x",1,null],"__proto__":"safe","when":"2001-12-14"}',
    );
    expect(Object.getPrototypeOf(r.metadata)).toBe(Object.prototype);
    expect(Object.isFrozen(r.metadata)).toBe(true);
    expect(Object.isFrozen((r.metadata as { service_with_quota: object }).service_with_quota)).toBe(true);
  });

  test('YAML 1.1 booleans and numbers as keys load as upstream makes them: text at the top, %v inside', () => {
    const m = load(`domain: d
descriptors:
  - key: k
    metadata:
      y: top-level keys keep their text (yaml.v2 decodes them into a string field)
      1: one
      nested: {y: a, n: b, 1: f, 2.5: g, 1000000.0: h, ~: i, name: j}
      also: {yes: c, off: e}
      again: {on: d}
      list: [{on: x}]
    rate_limit: {unit: second, requests_per_unit: 1}
`).getLimit('d', desc(['k', 'v']))!.metadata;
    expect(m).toEqual({
      y: 'top-level keys keep their text (yaml.v2 decodes them into a string field)',
      '1': 'one',
      nested: { true: 'a', false: 'b', '1': 'f', '2.5': 'g', '1e+06': 'h', '<nil>': 'i', name: 'j' },
      also: { true: 'c', false: 'e' },
      again: { true: 'd' },
      list: [{ true: 'x' }],
    });
  });

  test('each node carries its own metadata', () => {
    expect(c.getLimit('d', desc(['svc', 'a'], ['sub', 'x']))!.metadata).toEqual({ level: 'child' });
    expect(c.getLimit('d', desc(['nometa', 'x']))!.metadata).toBeUndefined();
  });
});

describe('immutability', () => {
  test('rules are frozen and a second load does not affect the first snapshot', () => {
    const stats = new StatsStore();
    const first = load(`domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: x}]}\n`, { stats });
    const rule = first.getLimit('d', desc(['k', 'v']))!;
    expect(Object.isFrozen(rule)).toBe(true);
    expect(Object.isFrozen(rule.limit)).toBe(true);
    expect(Object.isFrozen(rule.replaces)).toBe(true);
    expect(Object.isFrozen(first)).toBe(true);
    expect(() => {
      (rule.limit as { requestsPerUnit: number }).requestsPerUnit = 99;
    }).toThrow(TypeError);

    const second = load(
      [
        `domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 50}\n  - key: other\n    rate_limit: {unit: hour, requests_per_unit: 5}\n`,
        `domain: e\ndescriptors: []\n`,
      ],
      { stats },
    );
    expect(first.getLimit('d', desc(['k', 'v']))).toBe(rule);
    expect(rule.limit).toEqual({ name: '', requestsPerUnit: 1, unit: 1 });
    expect(first.getLimit('d', desc(['other', 'v']))).toBeUndefined();
    expect(first.domainCount).toBe(1);
    expect(first.dump()).toBe('d.k: unit=SECOND requests_per_unit=1, shadow_mode: false, quota_mode: false\n');
    expect(second.getLimit('d', desc(['k', 'v']))!.limit.requestsPerUnit).toBe(50);
    // counters are keyed by name and shared across reloads (as upstream's stats are)
    expect(second.getLimit('d', desc(['k', 'v']))!.stats.totalHits).toBe(rule.stats.totalHits);
  });

  test('a failed load throws and leaves nothing behind', () => {
    expect(() => load([`domain: d\ndescriptors: []\n`, `domain: d\n`])).toThrow(ConfigError);
  });
});

describe('loadConfigFromObjects (the xDS conversion)', () => {
  const opts = () => ({ mergeDomainConfig: false, stats: new StatsStore() });

  test('loads plain objects with the YAML field names', () => {
    const c = loadConfigFromObjects(
      [
        {
          name: 'cfg1',
          root: {
            domain: 'foo',
            descriptors: [
              {
                key: 'k1',
                value: 'v1',
                rate_limit: { unit: 'MINUTE', requests_per_unit: 3, unlimited: false, name: '', replaces: [] },
                shadow_mode: false,
                detailed_metric: false,
                quota_mode: true,
                metadata: { a: { b: [1, 'two', null, true] } },
                descriptors: [],
              },
              { key: 'u', value: '', rate_limit: { unit: 'UNKNOWN', unlimited: true }, descriptors: undefined },
            ],
          },
        },
      ],
      opts(),
    );
    expect(c.dump()).toBe(
      'foo.k1_v1: unit=MINUTE requests_per_unit=3, shadow_mode: false, quota_mode: true\n' +
        'foo.u: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false\n',
    );
    const r = c.getLimit('foo', desc(['k1', 'v1']))!;
    expect(r.metadata).toEqual({ a: { b: [1, 'two', null, true] } });
    expect(r.quotaMode).toBe(true);
  });

  test('the same validation and messages, with the config name as prefix', () => {
    const err = (root: unknown) => {
      try {
        loadConfigFromObjects([{ name: 'xds-cfg', root }], opts());
        return 'OK';
      } catch (e) {
        expect(e).toBeInstanceOf(ConfigError);
        return (e as Error).message;
      }
    };
    expect(err({ domain: '' })).toBe('xds-cfg: config file cannot have empty domain');
    expect(err({ domain: 'd', descriptors: [{ key: 'k', rate_limit: { unit: 'UNKNOWN', requests_per_unit: 1 } }] })).toBe(
      "xds-cfg: invalid rate limit unit 'UNKNOWN'",
    );
    expect(err({ domain: 'd', descriptors: [{ key: 'k', rate_limit: { unit: 'SECOND', unlimited: true } }] })).toBe(
      'xds-cfg: should not specify rate limit unit when unlimited',
    );
    expect(err({ domain: 'd', descriptors: [{ key: 'k', bogus: 1 }] })).toBe("xds-cfg: config error, unknown key 'bogus'");
    expect(err({ domain: 'd', descriptors: [{ key: 'k', rate_limit: { unit: 'SECOND', requests_per_unit: -1 } }] })).toBe(
      'xds-cfg: error loading config file: yaml: unmarshal errors:\n  cannot unmarshal !!int `-1` into uint32',
    );
    expect(
      err({ domain: 'd', descriptors: [{ key: 'a' }, { key: 'a' }] }),
    ).toBe("xds-cfg: duplicate descriptor composite key 'd.a'");
    expect(err({ domain: 'd', descriptors: [{ key: 'k', metadata: { ratio: 0.25 } }] })).toBe('OK');
  });

  test('merge across resources honours mergeDomainConfig', () => {
    const docs = [
      { name: 'a', root: { domain: 'd', descriptors: [{ key: 'x', rate_limit: { unit: 'SECOND', requests_per_unit: 1 } }] } },
      { name: 'b', root: { domain: 'd', descriptors: [{ key: 'y', rate_limit: { unit: 'SECOND', requests_per_unit: 2 } }] } },
    ];
    expect(() => loadConfigFromObjects(docs, opts())).toThrow("b: duplicate domain 'd' in config file");
    const c = loadConfigFromObjects(docs, { mergeDomainConfig: true, stats: new StatsStore() });
    expect(c.getLimit('d', desc(['y', '1']))!.limit.requestsPerUnit).toBe(2);
  });
});
