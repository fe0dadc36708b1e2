/** `algorithm`, `burst` and `rate_limits` (extension): validation and /rlconfig lines. */
import { loadConfig } from '../../src/config/load';
import { StatsStore } from '../../src/stats/store';

const load = (body: string) =>
  loadConfig([{ name: 'f.yaml', content: 'domain: d\ndescriptors:\n' + body }], { mergeDomainConfig: false, stats: new StatsStore() });
const err = (body: string): string => {
  try {
    load(body);
    return 'OK';
  } catch (e) {
    return (e as Error).message;
  }
};

describe('config: algorithms and several limits', () => {
  test('errors', () => {
    expect(err('  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: leaky}\n')).toBe(
      "f.yaml: invalid rate limit algorithm 'leaky' (expected one of fixed_window, sliding_window, token_bucket)",
    );
    expect(err('  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, burst: 3}\n')).toBe("f.yaml: config error, unknown key 'burst'");
    expect(err('  - key: k\n    rate_limit: {unit: second, requests_per_unit: 0, algorithm: token_bucket}\n')).toBe(
      'f.yaml: token_bucket needs requests_per_unit greater than 0',
    );
    expect(err('  - key: k\n    rate_limits: [{unit: second, requests_per_unit: 1}, {unit: parsec, requests_per_unit: 1}]\n')).toBe(
      "f.yaml: invalid rate limit unit 'parsec'",
    );
    expect(err('  - key: k\n    rate_limit: {unlimited: true}\n    rate_limits: [{unit: second, requests_per_unit: 1}]\n')).toBe(
      'f.yaml: unlimited cannot be combined with other limits (rate_limits)',
    );
  });

  test('rlconfig lines: unchanged for the fixed window, one per further limit', () => {
    const c = load(
      '  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: fixed_window}\n' +
        '  - key: b\n    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: token_bucket, burst: 2}\n' +
        '    rate_limits: [{unit: hour, requests_per_unit: 9, algorithm: sliding_window}]\n',
    );
    expect(c.dump()).toBe(
      'd.a: unit=SECOND requests_per_unit=1, shadow_mode: false, quota_mode: false\n' +
        'd.b.limit_2: unit=HOUR requests_per_unit=9, shadow_mode: false, quota_mode: false, algorithm: sliding_window\n' +
        'd.b: unit=MINUTE requests_per_unit=5, shadow_mode: false, quota_mode: false, algorithm: token_bucket, burst: 2\n',
    );
    const a = c.getLimit('d', { entries: [{ key: 'a', value: '' }] })!;
    expect(a.algorithm).toBeUndefined();
    expect(a.more).toBeUndefined();
  });
});
