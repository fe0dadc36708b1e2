/**
 * Status arithmetic shared by every store (upstream `base_limiter.go`): from the count before and
 * after a request's hits, the descriptor's code, remaining quota and per-rule counters.
 */
import { hitsPast, type RateLimitRule } from '../core/rule';
import { Code, type DescriptorStatus } from '../core/rls';

/** Near-limit threshold with Go's float32 arithmetic: floor(float32(limit) * float32(ratio)). */
export function nearLimitThreshold(limit: number, ratio: number): number {
  return Math.floor(Math.fround(Math.fround(limit) * Math.fround(ratio)));
}

/** The status of a descriptor with no limit (no match, replaced): `{code: OK}`. */
export function okStatus(): DescriptorStatus {
  return { code: Code.OK, currentLimit: undefined, limitRemaining: 0, durationUntilReset: undefined };
}

/** Status of a key found in the local over-limit cache: the store was not asked. */
export function localCacheOverLimitStatus(rule: RateLimitRule, hits: number, resetSeconds: number): DescriptorStatus {
  const s = rule.stats;
  s.overLimit.inc(hits);
  s.overLimitWithLocalCache.inc(hits);
  let code = Code.OVER_LIMIT;
  if (rule.shadowMode) {
    s.shadowMode.inc(hits);
    code = Code.OK;
  }
  return { code, currentLimit: rule.limit, limitRemaining: 0, durationUntilReset: resetSeconds };
}

/**
 * Status from the store's count after the increment. Returns the status; the caller learns that
 * the key went over (for the local cache) from `code` before shadow mode or from `after > limit`.
 */
export function counterStatus(
  rule: RateLimitRule,
  hits: number,
  after: number,
  nearRatio: number,
  resetSeconds: number,
  /** What `after` is compared with (the token bucket's burst); requests_per_unit by default. */
  capacity: number = rule.limit.requestsPerUnit,
): DescriptorStatus {
  const s = rule.stats;
  const threshold = capacity;
  const near = nearLimitThreshold(threshold, nearRatio);
  const before = after - hits;
  if (after > threshold) {
    const over = hitsPast(threshold, hits, after);
    s.overLimit.inc(over);
    if (before < threshold) s.nearLimit.inc(threshold - Math.max(near, before));
    let code = Code.OVER_LIMIT;
    if (rule.shadowMode) {
      s.shadowMode.inc(over);
      code = Code.OK;
    }
    return { code, currentLimit: rule.limit, limitRemaining: 0, durationUntilReset: resetSeconds };
  }
  s.withinLimit.inc(hits);
  if (after > near) s.nearLimit.inc(hitsPast(near, hits, after));
  return {
    code: Code.OK,
    currentLimit: rule.limit,
    limitRemaining: threshold - after,
    durationUntilReset: resetSeconds,
  };
}
