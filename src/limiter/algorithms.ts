/**
 * Rate limiting algorithms (extension; upstream has only the fixed window). A store applies an
 * op's algorithm atomically and returns one integer per op, its *effective count after* in hits,
 * with the same contract for every algorithm: the request was admitted iff that count is at most
 * the algorithm's capacity (requests_per_unit; `burst` for the token bucket). The limiter turns it
 * into a status here, the same way for every store.
 *
 * - fixed_window (default, upstream): one counter per epoch-aligned window; every hit is counted
 *   (denied ones too). Count after = the counter after the increment.
 * - sliding_window: the weighted two-window approximation. With c the current window's counter, p
 *   the previous window's, and w the fraction of the current window still to run, the count after
 *   is ceil(c + hits + p·w). Only admitted hits are added to c (a denied request writes nothing),
 *   so a client that keeps sending is not locked out for ever.
 * - token_bucket: GCRA. One stored value per key, the theoretical arrival time TAT (ms). Emission
 *   interval T = unit / requests_per_unit; capacity `burst` (default requests_per_unit). A request
 *   of n hits is admitted iff max(TAT, now) + n·T − now ≤ burst·T; then TAT becomes
 *   max(TAT, now) + n·T. A denied request writes nothing. Count after = ceil((max(TAT, now) + n·T
 *   − now) / T), i.e. the tokens in use, capped at `burst` when admitted and at least burst+1
 *   when denied.
 *
 * What the status fields mean, for every algorithm:
 * - limit_remaining: how many more hits would be admitted right now (capacity − count after).
 * - duration_until_reset: seconds until, with no further request, the full allowance is back
 *   (fixed: the window end; sliding: the end of the next window when the current window has
 *   counted something, else the current window's end; token bucket: until TAT, at least 1 s).
 * - current_limit and the X-RateLimit-Limit header: the configured requests_per_unit and unit.
 */
import type { RateLimitRule } from '../config/types';
import type { CounterOp } from '../backends/types';
import { secondsUntilReset } from './cache-key';
import { counterStatus } from './status';
import { Code, type DescriptorStatus } from './types';

/** Float slack for GCRA comparisons in ms (TAT is kept to the microsecond). */
const EPS = 1e-6;

/** The op's capacity: what `count after` is compared with. */
export function capacityOf(rule: RateLimitRule): number {
  return rule.algorithm === 'token_bucket' ? rule.burst ?? rule.limit.requestsPerUnit : rule.limit.requestsPerUnit;
}

/** GCRA emission interval in ms. */
export function emissionMs(rule: RateLimitRule, windowSeconds: number): number {
  return (windowSeconds * 1000) / rule.limit.requestsPerUnit;
}

/** Sliding window: the weighted count after adding `hits` (Lua computes the same expression). */
export function slidingCount(current: number, previous: number, hits: number, nowMs: number, windowSeconds: number): number {
  const win = windowSeconds * 1000;
  const rem = win - (nowMs % win);
  return Math.ceil(current + hits + (previous * rem) / win);
}

export interface GcraResult {
  readonly admitted: boolean;
  /** The TAT to store when admitted (and hits > 0). */
  readonly tat: number;
  /** The effective count after (see the module comment). */
  readonly count: number;
}

/** One GCRA decision (the Redis Lua script mirrors it). `tat` 0 / undefined: a fresh key. */
export function gcra(storedTat: number | undefined, hits: number, nowMs: number, emission: number, burst: number): GcraResult {
  const base = storedTat !== undefined && storedTat > nowMs ? storedTat : nowMs;
  const tat = base + hits * emission;
  const used = tat - nowMs;
  const admitted = used <= burst * emission + EPS;
  const level = Math.ceil(used / emission - EPS);
  return { admitted, tat, count: admitted ? Math.min(burst, level) : Math.max(burst + 1, level) };
}

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
