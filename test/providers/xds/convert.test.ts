import {
  RateLimitConfig as RateLimitConfigProto,
  RateLimitUnit,
} from '../../../generated/ratelimit/config/ratelimit/v3/rls_conf';
import { loadConfig, loadConfigFromObjects } from '../../../src/config';
import type { RateLimitConfig } from '../../../src/config';
import type { Descriptor } from '../../../src/core/rls';
import {
  rateLimitConfigToObject,
  unitFromName,
  unitName,
  yamlToRateLimitConfig,
} from '../../../src/providers/xds/convert';
import { StatsStore } from '../../../src/stats/store';
import { rlc } from '../../support/xds';

function fromProtos(...protos: RateLimitConfigProto[]): RateLimitConfig {
  // Through the wire format, as the provider sees them.
  const decoded = protos.map((p) => RateLimitConfigProto.decode(RateLimitConfigProto.encode(p).finish()));
  return loadConfigFromObjects(decoded.map(rateLimitConfigToObject), { mergeDomainConfig: false, stats: new StatsStore() });
}

function protoError(...protos: RateLimitConfigProto[]): string {
  try {
    fromProtos(...protos);
    return 'OK';
  } catch (e) {
    expect((e as Error).name).toBe('ConfigError');
    return (e as Error).message;
  }
}

function yamlError(name: string, content: string): string {
  try {
    loadConfig([{ name, content }], { mergeDomainConfig: false, stats: new StatsStore() });
    return 'OK';
  } catch (e) {
    return (e as Error).message;
  }
}

function desc(...kv: Array<[string, string]>): Descriptor {
  return { entries: kv.map(([key, value]) => ({ key, value })) };
}

describe('RateLimitConfig → YAML object', () => {
  test('every unit by enum name, WEEK (7) included', () => {
    const units: Array<[RateLimitUnit, string]> = [
      [RateLimitUnit.SECOND, 'SECOND'],
      [RateLimitUnit.MINUTE, 'MINUTE'],
      [RateLimitUnit.HOUR, 'HOUR'],
      [RateLimitUnit.DAY, 'DAY'],
      [RateLimitUnit.WEEK, 'WEEK'],
      [RateLimitUnit.MONTH, 'MONTH'],
      [RateLimitUnit.YEAR, 'YEAR'],
    ];
    const config = fromProtos(
      rlc(
        'units',
        'd',
        units.map(([unit, n]) => ({ key: 'k', value: n.toLowerCase(), rateLimit: { unit, requestsPerUnit: 5 } })),
      ),
    );
    for (const [unit, n] of units) {
      const rule = config.getLimit('d', desc(['k', n.toLowerCase()]));
      expect(rule?.limit).toEqual({ name: '', requestsPerUnit: 5, unit });
      expect(unitName(unit)).toBe(n);
    }
    expect(config.dump()).toContain('d.k_week: unit=WEEK requests_per_unit=5');
  });

  test('the plain object omits defaults and keeps what validation needs', () => {
    const obj = rateLimitConfigToObject(
      rlc('cfg', 'dom', [
        { key: 'a', rateLimit: { unit: RateLimitUnit.MINUTE, requestsPerUnit: 0, replaces: [{ name: '' }] } },
        { key: 'b', value: 'v', shadowMode: true, quotaMode: true, detailedMetric: true, metadata: { x: 'y' }, descriptors: [{ key: '' }] },
      ]),
    );
    expect(obj).toEqual({
      name: 'cfg',
      root: {
        domain: 'dom',
        descriptors: [
          { key: 'a', rate_limit: { unit: 'MINUTE', requests_per_unit: 0, replaces: [{ name: '' }] } },
          { key: 'b', value: 'v', shadow_mode: true, quota_mode: true, detailed_metric: true, metadata: { x: 'y' }, descriptors: [{ key: '' }] },
        ],
      },
    });
  });

  test('unlimited with UNKNOWN (unset) unit is valid; UNKNOWN alone or an unknown number is not', () => {
    const config = fromProtos(rlc('u', 'd', [{ key: 'free', rateLimit: { unlimited: true } }]));
    const rule = config.getLimit('d', desc(['free', 'x']));
    expect(rule?.unlimited).toBe(true);
    expect(rule?.limit.unit).toBe(RateLimitUnit.UNKNOWN);

    expect(protoError(rlc('u', 'd', [{ key: 'k', rateLimit: { requestsPerUnit: 1 } }]))).toBe(
      "u: invalid rate limit unit 'UNKNOWN'",
    );
    expect(protoError(rlc('u', 'd', [{ key: 'k', rateLimit: { unit: 99 as RateLimitUnit, requestsPerUnit: 1 } }]))).toBe(
      "u: invalid rate limit unit '99'",
    );
    expect(protoError(rlc('u', 'd', [{ key: 'k', rateLimit: { unit: RateLimitUnit.MINUTE, unlimited: true } }]))).toBe(
      'u: should not specify rate limit unit when unlimited',
    );
  });

  test('nested descriptors, replaces, flags and metadata reach the rules', () => {
    const config = fromProtos(
      rlc('nested', 'shop', [
        {
          key: 'user',
          descriptors: [
            {
              key: 'path',
              value: '/checkout',
              rateLimit: { unit: RateLimitUnit.SECOND, requestsPerUnit: 3, name: 'checkout', replaces: [{ name: 'generic' }] },
              shadowMode: true,
              quotaMode: true,
              metadata: { team: 'payments', weight: 2, ratio: 0.5, tags: ['a', 'b'], nested: { on: true, none: null } },
            },
            { key: 'path', rateLimit: { unit: RateLimitUnit.HOUR, requestsPerUnit: 100, name: 'generic' } },
          ],
        },
      ]),
    );
    const rule = config.getLimit('shop', desc(['user', 'alice'], ['path', '/checkout']));
    expect(rule).toBeDefined();
    expect(rule!.fullKey).toBe('shop.user.path_/checkout');
    expect(rule!.limit).toEqual({ name: 'checkout', requestsPerUnit: 3, unit: RateLimitUnit.SECOND });
    expect(rule!.replaces).toEqual(['generic']);
    expect(rule!.shadowMode).toBe(true);
    expect(rule!.quotaMode).toBe(true);
    expect(rule!.metadata).toEqual({ team: 'payments', weight: 2, ratio: 0.5, tags: ['a', 'b'], nested: { on: true, none: null } });
    const generic = config.getLimit('shop', desc(['user', 'bob'], ['path', '/other']));
    expect(generic!.limit).toEqual({ name: 'generic', requestsPerUnit: 100, unit: RateLimitUnit.HOUR });
    expect(generic!.metadata).toBeUndefined();
  });

  test.each([
    [
      'empty domain',
      rlc('empty_domain', '', []),
      'empty_domain.yaml',
      'domain: ""\n',
      'config file cannot have empty domain',
    ],
    [
      'empty key',
      rlc('k', 'd', [{ key: '', rateLimit: { unit: RateLimitUnit.SECOND, requestsPerUnit: 1 } }]),
      'k.yaml',
      'domain: d\ndescriptors:\n  - key: ""\n    rate_limit: {unit: second, requests_per_unit: 1}\n',
      'descriptor has empty key',
    ],
    [
      'duplicate key',
      rlc('dup', 'd', [
        { key: 'k', value: 'v' },
        { key: 'k', value: 'v' },
      ]),
      'dup.yaml',
      'domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n',
      "duplicate descriptor composite key 'd.k_v'",
    ],
    [
      'empty replaces entry',
      rlc('r', 'd', [{ key: 'k', rateLimit: { unit: RateLimitUnit.SECOND, requestsPerUnit: 1, replaces: [{ name: '' }] } }]),
      'r.yaml',
      'domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: ""\n',
      'should not have an empty replaces entry',
    ],
    [
      'replaces itself',
      rlc('r', 'd', [{ key: 'k', rateLimit: { unit: RateLimitUnit.SECOND, requestsPerUnit: 1, name: 'n', replaces: [{ name: 'n' }] } }]),
      'r.yaml',
      'domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      name: n\n      replaces:\n        - name: n\n',
      'replaces should not contain name of same descriptor',
    ],
  ])('%s: the YAML error text, named after the resource', (_what, proto, yamlName, yaml, message) => {
    expect(protoError(proto)).toBe(`${proto.name}: ${message}`);
    expect(yamlError(yamlName, yaml)).toBe(`${yamlName}: ${message}`);
  });

  test('duplicate domains across resources: the later resource is named; merged with MERGE_DOMAIN_CONFIG', () => {
    const a = rlc('a', 'd', [{ key: 'x', rateLimit: { unit: RateLimitUnit.SECOND, requestsPerUnit: 1 } }]);
    const b = rlc('b', 'd', [{ key: 'y', rateLimit: { unit: RateLimitUnit.SECOND, requestsPerUnit: 2 } }]);
    expect(protoError(a, b)).toBe("b: duplicate domain 'd' in config file");
    const merged = loadConfigFromObjects([a, b].map(rateLimitConfigToObject), { mergeDomainConfig: true, stats: new StatsStore() });
    expect(merged.domainCount).toBe(1);
    expect(merged.getLimit('d', desc(['y', '1']))?.limit.requestsPerUnit).toBe(2);
  });
});

describe('YAML file → RateLimitConfig', () => {
  const YAML = `
domain: shop
descriptors:
  - key: user
    descriptors:
      - key: path
        value: /checkout
        rate_limit:
          unit: Week
          requests_per_unit: 3
          name: checkout
          replaces:
            - name: generic
        shadow_mode: true
        quota_mode: true
        detailed_metric: true
        metadata:
          team: payments
          weight: 2
          tags: [a, b]
          nested: {enabled: true}
      - key: path
        rate_limit: {unit: hour, requests_per_unit: 100, name: generic}
  - key: free
    rate_limit:
      unlimited: true
  - key: plain
    value_to_metric: false
`;

  test('fields, units case-insensitively, metadata', () => {
    const proto = yamlToRateLimitConfig('shop.yaml', YAML, 'shop');
    expect(proto.name).toBe('shop');
    expect(proto.domain).toBe('shop');
    const [user, free, plain] = proto.descriptors;
    const checkout = user!.descriptors[0]!;
    expect(checkout).toMatchObject({
      key: 'path',
      value: '/checkout',
      rateLimit: { unit: RateLimitUnit.WEEK, requestsPerUnit: 3, unlimited: false, name: 'checkout', replaces: [{ name: 'generic' }] },
      shadowMode: true,
      quotaMode: true,
      detailedMetric: true,
      metadata: { team: 'payments', weight: 2, tags: ['a', 'b'], nested: { enabled: true } },
    });
    expect(user!.descriptors[1]!.rateLimit?.unit).toBe(RateLimitUnit.HOUR);
    expect(free!.rateLimit).toMatchObject({ unit: RateLimitUnit.UNKNOWN, unlimited: true });
    expect(plain!.rateLimit).toBeUndefined();
    expect(unitFromName('mInUtE')).toBe(RateLimitUnit.MINUTE);
  });

  test('round trip: YAML → proto → wire → object loads the same config as the YAML', () => {
    const proto = yamlToRateLimitConfig('shop.yaml', YAML, 'shop.yaml');
    const viaXds = fromProtos(proto);
    const direct = loadConfig([{ name: 'shop.yaml', content: YAML }], { mergeDomainConfig: false, stats: new StatsStore() });
    expect(viaXds.dump()).toBe(direct.dump());
    const d = desc(['user', 'u'], ['path', '/checkout']);
    expect(viaXds.getLimit('shop', d)?.metadata).toEqual(direct.getLimit('shop', d)?.metadata);
  });

  test('invalid files fail with the loader error, named after the file', () => {
    const bad = 'domain: d\ndescriptors:\n  - key: k\n    ratelimit:\n      unit: second\n';
    expect(() => yamlToRateLimitConfig('bad.yaml', bad, 'bad')).toThrow("bad.yaml: config error, unknown key 'ratelimit'");
    expect(() => yamlToRateLimitConfig('unit.yaml', 'domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n', 'unit')).toThrow(
      "unit.yaml: invalid rate limit unit 'fortnight'",
    );
  });

  test('value_to_metric and share_threshold travel as extension fields 101 and 102, and load as from the YAML', () => {
    const yaml =
      'domain: d\ndescriptors:\n  - key: k\n    descriptors:\n      - key: route\n        value_to_metric: true\n        rate_limit: {unit: second, requests_per_unit: 1}\n' +
      '  - key: files\n    value: "a*"\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n';
    const proto = yamlToRateLimitConfig('x.yaml', yaml, 'x');
    expect(proto.descriptors[0]!.descriptors[0]!.valueToMetric).toBe(true);
    expect(proto.descriptors[1]!.shareThreshold).toBe(true);
    const wire = Buffer.from(RateLimitConfigProto.encode(proto).finish());
    expect(wire.includes(Buffer.from([0xa8, 0x06, 0x01]))).toBe(true); // field 101, varint, true
    expect(wire.includes(Buffer.from([0xb0, 0x06, 0x01]))).toBe(true); // field 102, varint, true
    const direct = loadConfig([{ name: 'x.yaml', content: yaml }], { mergeDomainConfig: false, stats: new StatsStore() });
    expect(fromProtos(RateLimitConfigProto.decode(wire)).dump()).toBe(direct.dump());
  });
});
