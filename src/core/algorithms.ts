/**
 * Rate limiting algorithms (extension; upstream has only the fixed window). A store applies an
 * op's algorithm atomically and returns one integer per op, its *effective count after* in hits,
 * with the same contract for every algorithm: the request was admitted iff that count is at most
 * the algorithm's capacity (requests_per_unit; `burst` for the token bucket). The limiter turns it
 * into a status (src/limiter/algorithms.ts), the same way for every store.
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
import type { RateLimitRule } from './rule';

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
