import type { RateLimitRule } from '../../src/core/rule';
import type { RuleSeries, StatsStore } from '../../src/stats/store';

/** A rule as the config loader would produce it, for tests of the pipeline pieces alone. */
export function rule(
  stats: StatsStore,
  key: string,
  requestsPerUnit: number,
  unit: number,
  extra: Partial<RateLimitRule> = {},
): RateLimitRule & { stats: RuleSeries } {
  return {
    fullKey: key,
    limit: { name: extra.limit?.name ?? '', requestsPerUnit, unit },
    unlimited: false,
    shadowMode: false,
    quotaMode: false,
    replaces: [],
    isOverride: false,
    ...extra,
    stats: stats.ruleStats(key),
  };
}
