/** `candidate:` (extension): validation with errors naming the rule, the /rlconfig line, and what the rule carries. */
import { loadConfig } from '../../src/config/load';
import { StatsStore } from '../../src/stats/store';

const load = (body: string, restrictions?: Parameters<typeof loadConfig>[1]['restrictions']) =>
  loadConfig([{ name: 'f.yaml', content: 'domain: d\ndescriptors:\n' + body }], { mergeDomainConfig: false, stats: new StatsStore(), restrictions });
const err = (body: string, restrictions?: Parameters<typeof loadConfig>[1]['restrictions']): string => {
  try {
    load(body, restrictions);
    return 'OK';
  } catch (e) {
    return (e as Error).message;
  }
};
const RL = '    rate_limit: {unit: minute, requests_per_unit: 10}\n';

describe('config: candidate limits', () => {
  test.each([
    ['    candidate: {unit: fortnight, requests_per_unit: 1}\n', "f.yaml: candidate of 'd.k': invalid unit 'fortnight' (expected second, minute, hour, day, week, month or year)"],
    ['    candidate: {requests_per_unit: 1}\n', "f.yaml: candidate of 'd.k': invalid unit '' (expected second, minute, hour, day, week, month or year)"],
    ['    candidate: {unit: minute, requests_per_unit: 1, unlimited: true}\n', "f.yaml: candidate of 'd.k': a candidate cannot be unlimited"],
    ['    candidate: {unit: minute, requests_per_unit: 1, name: x}\n', "f.yaml: candidate of 'd.k': a candidate has no name (it neither replaces nor is replaced)"],
    ['    candidate: {unit: minute, requests_per_unit: 1, replaces: [{name: y}]}\n', "f.yaml: candidate of 'd.k': a candidate has no replaces"],
    ['    candidate: {unit: minute, requests_per_unit: 1, algorithm: leaky}\n', "f.yaml: candidate of 'd.k': invalid rate limit algorithm 'leaky' (expected one of fixed_window, sliding_window, token_bucket)"],
    ['    candidate: {unit: minute, requests_per_unit: 1, burst: 3}\n', "f.yaml: candidate of 'd.k': config error, unknown key 'burst'"],
    ['    candidate: {unit: minute, requests_per_unit: 1, candidate: {}}\n', "f.yaml: candidate of 'd.k': candidate goes beside rate_limit, not inside a limit"],
  ])('%j', (block, message) => {
    expect(err('  - key: k\n' + RL + block)).toBe(message);
  });

  test('a candidate inside rate_limit (an indentation slip) is refused, not ignored', () => {
    expect(err('  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: 10\n      candidate: {unit: minute, requests_per_unit: 1}\n')).toBe(
      "f.yaml: candidate of 'd.k': candidate goes beside rate_limit, not inside a limit",
    );
  });

  test('a candidate needs a limit to be counted beside', () => {
    expect(err('  - key: k\n    candidate: {unit: minute, requests_per_unit: 1}\n')).toBe(
      "f.yaml: candidate of 'd.k': a candidate is counted beside a rate_limit, and this descriptor has none (to try a limit where there is none, use shadow_mode)",
    );
    expect(err('  - key: k\n    rate_limit: {unlimited: true}\n    candidate: {unit: minute, requests_per_unit: 1}\n')).toBe(
      "f.yaml: candidate of 'd.k': the rate_limit is unlimited, so there is nothing to count a candidate beside",
    );
  });

  test('a store that cannot count candidates refuses them, naming the rule', () => {
    const refused = [{ store: 'redis cluster', algorithm: 'candidate' as const, reason: 'why' }];
    expect(err('  - key: k\n' + RL + '    candidate: {unit: minute, requests_per_unit: 1}\n', refused)).toBe(
      "f.yaml: rate limit 'd.k': candidate limits are not supported by the redis cluster store (why)",
    );
    expect(err('  - key: k\n' + RL, refused)).toBe('OK');
    const noBucket = [{ store: 'memcache', algorithm: 'token_bucket' as const, reason: 'no atomic read-modify-write' }];
    expect(err('  - key: k\n' + RL + '    candidate: {unit: minute, requests_per_unit: 1, algorithm: token_bucket}\n', noBucket)).toBe(
      "f.yaml: rate limit 'd.k.candidate': algorithm token_bucket is not supported by the memcache store (no atomic read-modify-write)",
    );
  });

  test('the rule carries it (its request-specific copies too), /rlconfig shows it on the rule\'s line', () => {
    const c = load(
      '  - key: k\n' + RL + '    candidate: {unit: hour, requests_per_unit: 5, algorithm: token_bucket, burst: 7}\n' +
        '  - key: v\n    value_to_metric: true\n    rate_limit: {unit: day, requests_per_unit: 3}\n    rate_limits: [{unit: hour, requests_per_unit: 2}]\n    candidate: {unit: day, requests_per_unit: 1}\n',
    );
    expect(c.dump()).toBe(
      'd.k: unit=MINUTE requests_per_unit=10, shadow_mode: false, quota_mode: false, candidate: unit=HOUR requests_per_unit=5, algorithm: token_bucket, burst: 7\n' +
        'd.v.limit_2: unit=HOUR requests_per_unit=2, shadow_mode: false, quota_mode: false\n' +
        'd.v: unit=DAY requests_per_unit=3, shadow_mode: false, quota_mode: false, candidate: unit=DAY requests_per_unit=1\n',
    );
    const k = c.getLimit('d', { entries: [{ key: 'k', value: '' }] })!;
    expect(k.candidate).toMatchObject({ limit: { requestsPerUnit: 5, unit: 3 }, algorithm: 'token_bucket', burst: 7, unlimited: false });
    // value_to_metric makes a rule per value: the candidate is the config's, shared.
    const v1 = c.getLimit('d', { entries: [{ key: 'v', value: 'one' }] })!;
    const v2 = c.getLimit('d', { entries: [{ key: 'v', value: 'two' }] })!;
    expect(v1.fullKey).toBe('d.v_one');
    expect(v1.candidate).toBeDefined();
    expect(v1.candidate).toBe(v2.candidate);
    expect(v1.more![0]!.candidate).toBeUndefined();
  });
});
