/** The algorithm extension travels over xDS: YAML → RateLimitConfig proto → the same rules. */
import { RateLimitConfig } from '../../../generated/ratelimit/config/ratelimit/v3/rls_conf';
import { loadConfigFromObjects } from '../../../src/config/load';
import { rateLimitConfigToObject, yamlToRateLimitConfig } from '../../../src/providers/xds/convert';
import { StatsStore } from '../../../src/stats/store';

const YAML = `
domain: algo
descriptors:
  - key: bucket
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 20}
  - key: multi
    rate_limit: {unit: second, requests_per_unit: 5, algorithm: sliding_window}
    rate_limits:
      - {unit: day, requests_per_unit: 1000}
`;

test('algorithm, burst and rate_limits survive the wire (fields 100+)', () => {
  const proto = yamlToRateLimitConfig('algo.yaml', YAML, 'algo');
  const bucket = proto.descriptors[0]!.rateLimit!;
  expect([bucket.algorithm, bucket.burst]).toEqual(['token_bucket', 20]);
  expect(proto.descriptors[1]!.rateLimits).toHaveLength(1);
  const wire = RateLimitConfig.decode(RateLimitConfig.encode(proto).finish());
  const config = loadConfigFromObjects([rateLimitConfigToObject(wire)], { mergeDomainConfig: false, stats: new StatsStore() });
  const rule = config.getLimit('algo', { entries: [{ key: 'bucket', value: 'x' }] })!;
  expect([rule.algorithm, rule.burst]).toEqual(['token_bucket', 20]);
  const multi = config.getLimit('algo', { entries: [{ key: 'multi', value: 'x' }] })!;
  expect(multi.algorithm).toBe('sliding_window');
  expect(multi.more).toHaveLength(1);
});
