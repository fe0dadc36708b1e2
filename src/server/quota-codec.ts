/**
 * RLQS messages (envoy.service.rate_limit_quota.v3, generated code) to and from the quota
 * engine's own terms (src/quota/types.ts).
 */
import type { RateLimitQuotaResponse, RateLimitQuotaUsageReports } from '../../generated/envoy/service/rate_limit_quota/v3/rlqs';
import { RateLimitStrategy_BlanketRule, type RateLimitStrategy } from '../../generated/envoy/type/v3/ratelimit_strategy';
import type { Duration } from '../../generated/google/protobuf/duration';
import type { BucketAction, QuotaStrategy, UsageReports } from '../quota/types';

const seconds = (d: Duration | undefined): number => (d === undefined ? 0 : Number(d.seconds) + d.nanos / 1e9);
const duration = (s: number): Duration => ({ seconds: BigInt(Math.trunc(s)), nanos: 0 });

/** A usage report; an absent time_elapsed reads as 0 (a subscription, as Envoy's first report). */
export function usageReportsOf(m: RateLimitQuotaUsageReports): UsageReports {
  return {
    domain: m.domain,
    usages: m.bucketQuotaUsages.map((u) => ({
      bucket: new Map(Object.entries(u.bucketId?.bucket ?? {})),
      elapsedSeconds: seconds(u.timeElapsed),
      allowed: Number(u.numRequestsAllowed),
      denied: Number(u.numRequestsDenied),
    })),
  };
}

function strategyOf(s: QuotaStrategy): RateLimitStrategy {
  switch (s.kind) {
    case 'allow-all':
      return { blanketRule: RateLimitStrategy_BlanketRule.ALLOW_ALL };
    case 'deny-all':
      return { blanketRule: RateLimitStrategy_BlanketRule.DENY_ALL };
    case 'token-bucket':
      return { tokenBucket: { maxTokens: s.maxTokens, tokensPerFill: s.tokensPerFill, fillInterval: duration(s.fillIntervalSeconds) } };
  }
}

export function quotaResponseOf(actions: readonly BucketAction[]): RateLimitQuotaResponse {
  return {
    bucketAction: actions.map((a) => ({
      bucketId: { bucket: Object.fromEntries(a.bucket) },
      ...('abandon' in a
        ? { abandonAction: {} }
        : { quotaAssignmentAction: { assignmentTimeToLive: duration(a.assign.ttlSeconds), rateLimitStrategy: strategyOf(a.assign.strategy) } }),
    })),
  };
}
