/**
 * Cache keys byte-identical to upstream (`src/limiter/cache_key.go`), so a Go instance and this
 * service can share one Redis during a migration:
 *   PREFIX + domain + "_" + Σ (key + "_" + value + "_") + windowStart
 */
import type { RateLimitRule } from '../core/rule';
import type { Descriptor } from '../core/rls';

export function windowStart(nowSeconds: number, divider: number): number {
  return Math.floor(nowSeconds / divider) * divider;
}

export function cacheKey(
  prefix: string,
  domain: string,
  descriptor: Descriptor,
  rule: RateLimitRule,
  nowSeconds: number,
  divider: number,
): string {
  return keyStem(prefix, domain, descriptor, rule) + windowStart(nowSeconds, divider);
}

/** The key without its window start: `PREFIX + domain + "_" + Σ (key + "_" + value + "_")`. */
export function keyStem(prefix: string, domain: string, descriptor: Descriptor, rule: RateLimitRule): string {
  let k = prefix + domain + '_';
  const entries = descriptor.entries;
  const share = rule.shareThresholdKeyPattern;
  for (let i = 0; i < entries.length; i++) {
    const e = entries[i]!;
    const shared = share === undefined ? undefined : share[i];
    k += e.key + '_' + (shared !== undefined && shared !== '' ? shared : e.value) + '_';
  }
  return k;
}

/**
 * Ends the key of a candidate limit (extension): the enforced key's form with the candidate's
 * window start, then `_cand`. No upstream key ends so (they end with the window start's digits),
 * nor any other key of this service (digits, `_l<N>`, `tb`, `tb_l<N>`), so a candidate's counter
 * can never be an enforced one.
 */
export const CANDIDATE_KEY_SUFFIX = '_cand';

/** Seconds until the window of `divider` resets (upstream CalculateReset): 1..divider. */
export function secondsUntilReset(nowSeconds: number, divider: number): number {
  return divider - (nowSeconds % divider);
}
