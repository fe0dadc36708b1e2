import type { RateLimitRule } from '../../src/config/types';
import type { StatsStore } from '../../src/stats/store';

/** A rule as the config loader would produce it, for tests of the pipeline pieces alone. */
export function rule(
  stats: StatsStore,
  key: string,
  requestsPerUnit: number,
  unit: number,
  extra: Partial<RateLimitRule> = {},
): RateLimitRule {
  return {
    fullKey: key,
    stats: stats.ruleStats(key),
    limit: { name: extra.limit?.name ?? '', requestsPerUnit, unit },
    unlimited: false,
    shadowMode: false,
    quotaMode: false,
    replaces: [],
    isOverride: false,
    ...extra,
  };
}
