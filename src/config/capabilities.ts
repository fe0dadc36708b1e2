/**
 * What the counter store in use cannot do, checked at every config load. The config loader does
 * not know the store: the app passes the store's restrictions (e.g. Memcached has no atomic
 * read-modify-write for token_bucket) in the load options, so a config using such an algorithm
 * fails to load with a clear error naming the rule (at start-up: the service does not start).
 */
import type { RateLimitRule } from '../core/rule';
import type { AlgorithmRestriction } from '../core/store';
import { ConfigProblem } from './schema';

/** Throws the load error for a rule (or one of its further limits) the store cannot apply. */
export function checkStoreSupport(rule: RateLimitRule, restrictions: readonly AlgorithmRestriction[] | undefined): void {
  if (restrictions === undefined || restrictions.length === 0) return;
  const all = rule.more === undefined ? [rule] : [rule, ...rule.more];
  for (const r of all) {
    if (r.algorithm === undefined) continue;
    for (const x of restrictions) {
      if (x.algorithm === r.algorithm) {
        throw new ConfigProblem(
          `rate limit '${r.fullKey}': algorithm ${r.algorithm} is not supported by the ${x.store} store (${x.reason})`,
        );
      }
    }
  }
}
