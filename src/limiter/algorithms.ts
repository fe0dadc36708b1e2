/**
 * Statuses for the rules that use an algorithm (see src/core/algorithms.ts for what a store counts),
 * and the most restrictive of a descriptor's limits.
 */
import type { CounterOp } from '../core/store';
import { capacityOf, emissionMs } from '../core/algorithms';
import { secondsUntilReset } from './cache-key';
import { counterStatus } from './status';
import { Code, type DescriptorStatus } from '../core/rls';

/** The key of a token bucket: no window start (one TAT per descriptor). */
export function tokenBucketKey(stem: string, suffix: string): string {
  return stem + 'tb' + suffix;
}

/** Seconds until the current window of `divider` ends: 1..divider. */
function untilWindowEnd(nowMs: number, divider: number): number {
  return secondsUntilReset(Math.floor(nowMs / 1000), divider);
}

/** The status of an op that uses an algorithm (not the fixed window) from its count after. */
export function algorithmStatus(op: CounterOp, count: number, nearRatio: number, nowMs: number): DescriptorStatus {
  const rule = op.rule;
  const divider = op.windowSeconds;
  if (rule.algorithm === 'token_bucket') {
    const capacity = capacityOf(rule);
    const inUse = count > capacity ? count - op.hits : count;
    const reset = Math.max(1, Math.ceil((Math.max(0, inUse) * emissionMs(rule, divider)) / 1000));
    return counterStatus(rule, op.hits, count, nearRatio, reset, capacity);
  }
  const toEnd = untilWindowEnd(nowMs, divider);
  return counterStatus(rule, op.hits, count, nearRatio, count > 0 ? toEnd + divider : toEnd);
}

/**
 * The descriptor's status from its limits' statuses: OVER_LIMIT if any is (the one that stays
 * over longest), else the one with the smallest limit_remaining (the first on a tie).
 */
export function mostRestrictive(statuses: readonly DescriptorStatus[]): DescriptorStatus {
  let best = statuses[0]!;
  for (let k = 1; k < statuses.length; k++) {
    const s = statuses[k]!;
    const bOver = best.code === Code.OVER_LIMIT;
    const sOver = s.code === Code.OVER_LIMIT;
    if (sOver !== bOver) {
      if (sOver) best = s;
      continue;
    }
    if (sOver) {
      if ((s.durationUntilReset ?? 0) > (best.durationUntilReset ?? 0)) best = s;
    } else if (s.currentLimit !== undefined && (best.currentLimit === undefined || s.limitRemaining < best.limitRemaining)) {
      best = s;
    }
  }
  return best;
}
