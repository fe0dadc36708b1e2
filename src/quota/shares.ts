/**
 * Dividing one limit among the Envoys that report a bucket (RLQS), and turning a share into the
 * token bucket Envoy's quota filter enforces. Envoy's filter applies `blanket_rule` and
 * `token_bucket` assignments only (it skips `requests_per_time_unit`), refills a token bucket
 * continuously at tokens_per_fill / fill_interval and reads fill_interval and the assignment's
 * time to live in whole seconds; so shares go out as token buckets with whole-second intervals.
 */

/** Each Envoy gets at least this part of an equal split, so a new or quiet one is not starved. */
export const FLOOR_OF_EQUAL_SPLIT = 0.1;

/** The demand of a stream that has not reported a rate yet (its first report has time_elapsed 0). */
export const NOT_MEASURED = -1;

/**
 * Shares of `limit` for Envoys with these demands (requests per second, allowed + denied): a
 * floor each, the rest in proportion to demand (equally when nobody reported demand). A demand
 * not measured yet ({@link NOT_MEASURED}) counts as the mean of the measured ones, so an Envoy
 * that joins is neither starved nor handed the share of those already running; NaN and infinite
 * figures count as none. The shares add up to `limit`.
 */
export function divide(limit: number, demands: readonly number[]): number[] {
  const n = demands.length;
  if (n === 0) return [];
  const clean = (d: number): number => (d > 0 && Number.isFinite(d) ? d : 0);
  let measured = 0;
  let measuredSum = 0;
  for (const d of demands) {
    if (d === NOT_MEASURED) continue;
    measured++;
    measuredSum += clean(d);
  }
  const mean = measured > 0 ? measuredSum / measured : 0;
  const effective = demands.map((d) => (d === NOT_MEASURED ? mean : clean(d)));
  const floor = (limit * FLOOR_OF_EQUAL_SPLIT) / n;
  const rest = limit - floor * n;
  let total = 0;
  for (const d of effective) total += d;
  return effective.map((d) => floor + rest * (total > 0 ? d / total : 1 / n));
}

export interface TokenBucketAssignment {
  maxTokens: number;
  tokensPerFill: number;
  fillIntervalSeconds: number;
}

/**
 * The token bucket for a share of `share` requests per `unitSeconds`: its rate never above the
 * share (whole tokens per whole seconds, rounded down), and its burst (max_tokens) what the
 * share earns in one reporting interval, at least 1 — so the Envoys together admit at most the
 * limit per unit plus about one reporting interval's worth. Undefined for a share below one
 * request per `maxIntervalSeconds` (the caller denies instead).
 */
export function tokenBucketFor(share: number, unitSeconds: number, reportingIntervalSeconds: number, maxIntervalSeconds = 86400 * 366): TokenBucketAssignment | undefined {
  if (!(share > 0) || !(unitSeconds > 0)) return undefined;
  let tokensPerFill: number;
  let fillIntervalSeconds: number;
  if (share >= 1) {
    tokensPerFill = Math.floor(share);
    fillIntervalSeconds = unitSeconds;
  } else {
    tokensPerFill = 1;
    fillIntervalSeconds = Math.ceil(unitSeconds / share);
    if (fillIntervalSeconds > maxIntervalSeconds) return undefined;
  }
  const perSecond = tokensPerFill / fillIntervalSeconds;
  const maxTokens = Math.max(1, Math.floor(perSecond * Math.max(1, reportingIntervalSeconds)));
  return { maxTokens: Math.min(maxTokens, 0xffffffff), tokensPerFill: Math.min(tokensPerFill, 0xffffffff), fillIntervalSeconds };
}
