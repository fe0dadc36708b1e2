import { cacheKey, secondsUntilReset } from '../../src/limiter/cache-key';
import { Unit, unitToDivider } from '../../src/core/rls';
import { StatsStore } from '../../src/stats/store';
import { rule } from './helpers';

const stats = new StatsStore();
const d = (...kv: string[]) => ({
  entries: Array.from({ length: kv.length / 2 }, (_, i) => ({ key: kv[2 * i]!, value: kv[2 * i + 1]! })),
});

describe('cache keys are byte-identical to upstream', () => {
  it.each([
    [1234, '', ['key', 'value'], Unit.SECOND, 'domain_key_value_1234'],
    [1234, 'prefix:', ['key', 'value'], Unit.SECOND, 'prefix:domain_key_value_1234'],
    [1234, '', ['key2', 'value2', 'subkey2', 'subvalue2'], Unit.MINUTE, 'domain_key2_value2_subkey2_subvalue2_1200'],
    [1000000, '', ['key3', 'value3'], Unit.HOUR, 'domain_key3_value3_997200'],
    [1000000, '', ['key3', 'value3', 'subkey3', 'subvalue3'], Unit.DAY, 'domain_key3_value3_subkey3_subvalue3_950400'],
    [1000000, '', ['k', ''], Unit.WEEK, 'domain_k__604800'],
    [100000000, '', ['k', 'v'], Unit.MONTH, 'domain_k_v_98496000'],
    [100000000, '', ['k', 'v'], Unit.YEAR, 'domain_k_v_94608000'],
  ])('now %d prefix %j', (now, prefix, kv, unit, expected) => {
    const r = rule(stats, 'x', 1, unit);
    expect(cacheKey(prefix, 'domain', d(...kv), r, now, unitToDivider(unit))).toBe(expected);
  });

  it('uses the share_threshold pattern instead of the value', () => {
    const r = rule(stats, 'x', 1, Unit.SECOND, { shareThresholdKeyPattern: ['files/*'] });
    expect(cacheKey('', 'domain', d('files', 'files/a.pdf'), r, 1234, 1)).toBe('domain_files_files/*_1234');
    const nested = rule(stats, 'x', 1, Unit.SECOND, { shareThresholdKeyPattern: [undefined, 'nested/*'] });
    expect(cacheKey('', 'domain', d('parent', 'value1', 'files', 'nested/file1.txt'), nested, 1234, 1)).toBe(
      'domain_parent_value1_files_nested/*_1234',
    );
  });

  it('weeks start on Thursday (the epoch) and reset counts down to 1', () => {
    expect(secondsUntilReset(2222, 60)).toBe(58);
    expect(secondsUntilReset(1234, 1)).toBe(1);
    expect(secondsUntilReset(0, 604800)).toBe(604800);
  });

  it('maps every unit to its divider and rejects others', () => {
    expect([1, 2, 3, 4, 5, 6, 7].map(unitToDivider)).toEqual([1, 60, 3600, 86400, 2592000, 31536000, 604800]);
    expect(unitToDivider(0)).toBe(0);
    expect(unitToDivider(8)).toBe(0);
  });
});
