/**
 * What the counter store in use cannot do, checked at every config load. The config loader does
 * not know the store: the app passes the store's restrictions (e.g. Memcached has no atomic
 * read-modify-write for token_bucket) in the load options, so a config using such an algorithm
 * fails to load with a clear error naming the rule (at start-up: the service does not start).
 */
import type { Algorithm } from '../core/rule';
import type { AlgorithmRestriction } from '../core/store';
import { ConfigProblem } from './schema';

/**
 * Throws the load error for a rule (or one of its further limits, stats key `<key>.limit_N`, or
 * its candidate) the store cannot apply.
 */
export function checkStoreSupport(
  fullKey: string,
  rule: {
    readonly algorithm?: Algorithm | undefined;
    readonly more?: ReadonlyArray<{ readonly algorithm?: Algorithm | undefined }> | undefined;
    readonly candidate?: { readonly algorithm?: Algorithm | undefined } | undefined;
  },
  restrictions: readonly AlgorithmRestriction[] | undefined,
): void {
  if (restrictions === undefined || restrictions.length === 0) return;
  if (rule.candidate !== undefined) {
    for (const x of restrictions) {
      if (x.algorithm === 'candidate') {
        throw new ConfigProblem(`rate limit '${fullKey}': candidate limits are not supported by the ${x.store} store (${x.reason})`);
      }
    }
  }
  const all = [{ key: fullKey, algorithm: rule.algorithm }];
  rule.more?.forEach((m, i) => all.push({ key: `${fullKey}.limit_${i + 2}`, algorithm: m.algorithm }));
  if (rule.candidate !== undefined) all.push({ key: `${fullKey}.candidate`, algorithm: rule.candidate.algorithm });
  for (const r of all) {
    if (r.algorithm === undefined) continue;
    for (const x of restrictions) {
      if (x.algorithm === r.algorithm) {
        throw new ConfigProblem(
          `rate limit '${r.key}': algorithm ${r.algorithm} is not supported by the ${x.store} store (${x.reason})`,
        );
      }
    }
  }
}
