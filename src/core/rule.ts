/**
 * A rate limit rule as the pipeline reads it: what config matching yields, what a counter op
 * carries to its store, and what statuses are computed from.
 */
import type { Entry, JsonObject } from './rls';

/** Anything a rule's stats count on (the stats store's counters). */
export interface HitCounter {
  inc(n?: number): void;
}

/** The counters of one rule, `ratelimit.service.rate_limit.<key>.*`. */
export interface RuleStats {
  readonly key: string;
  readonly totalHits: HitCounter;
  readonly overLimit: HitCounter;
  readonly nearLimit: HitCounter;
  readonly overLimitWithLocalCache: HitCounter;
  readonly withinLimit: HitCounter;
  readonly shadowMode: HitCounter;
}

/**
 * What the service shows about one loaded limit (its headroom in the current window and its hot
 * keys, src/stats/limits/) learns from each count the store returned for one of its keys. Called
 * on the hot path: an implementation allocates nothing per call.
 */
export interface RuleWatch {
  /**
   * The store counted `hits` for the key `stem` (the cache key without its window start) and
   * returned `after` (the count after them; for an algorithm, its effective count). `entries`
   * are the request's descriptor entries, read only if the key is listed.
   */
  counted(stem: string, entries: readonly Entry[], hits: number, after: number, nowS: number): void;
  /** The local over-limit cache answered for the key: `hits` over the limit, the store not asked. */
  overInCache(stem: string, entries: readonly Entry[], hits: number, nowS: number): void;
  /** A candidate limit's hits that could not be counted (the store failed or did not count them). */
  uncounted?(hits: number): void;
}

/** A matched rule, as upstream's config.RateLimit. Shared (never mutated) unless request-specific. */
export interface RateLimitRule {
  /** The stats key ("FullKey"), e.g. `domain.key_value.subkey`. */
  readonly fullKey: string;
  readonly stats: RuleStats;
  /**
   * Headroom and hot keys of the loaded limit this rule counts for: made at config load, shared
   * by the request-specific copies of the rule; undefined for request overrides.
   */
  readonly watch?: RuleWatch | undefined;
  /** Limit as reported in DescriptorStatus.current_limit. `unit` is an RLS Unit number. */
  readonly limit: { readonly name: string; readonly requestsPerUnit: number; readonly unit: number };
  readonly unlimited: boolean;
  readonly shadowMode: boolean;
  readonly quotaMode: boolean;
  /** Names this rule replaces (rate_limit.replaces[].name). */
  readonly replaces: readonly string[];
  /** YAML `metadata` of the matched node, as a Struct-compatible object. */
  readonly metadata?: JsonObject | undefined;
  /**
   * share_threshold: for entry index i, the wildcard value pattern (e.g. `files/*`) that replaces
   * the request value in the cache key; undefined when no entry uses share_threshold.
   */
  readonly shareThresholdKeyPattern?: readonly (string | undefined)[] | undefined;
  /** True for a RateLimitOverride from the request (never matched against config). */
  readonly isOverride: boolean;
  /**
   * `rate_limit.algorithm` (extension): undefined is upstream's fixed window, unchanged. See
   * src/limiter/algorithms.ts for what each algorithm counts and reports.
   */
  readonly algorithm?: Algorithm | undefined;
  /** `rate_limit.burst` (token_bucket only): the bucket's capacity; defaults to requests_per_unit. */
  readonly burst?: number | undefined;
  /**
   * `rate_limits:` (extension): the descriptor's 2nd and later limits, each counted under its own
   * key (this rule's key + `keySuffix`) and stats key; the descriptor reports the most restrictive.
   */
  readonly more?: readonly RateLimitRule[] | undefined;
  /** Appended to the cache key of a 2nd or later limit (`_l2`, `_l3`, ...); '' for the first. */
  readonly keySuffix?: string | undefined;
  /**
   * Names the config limit this rule counts for ({@link counterGroup} of its config path and
   * limit number; one per domain for request overrides): the same for every request it matches,
   * for the copies made per request, and across reloads. A store may partition what it keeps by
   * it (the memory store's overflow sketches do). Undefined counts as 0.
   */
  readonly group?: number | undefined;
  /**
   * `candidate:` (extension): a limit counted beside this one under keys of its own (the enforced
   * key + `_cand`), in the same store round trip, that never changes the answer; what it would
   * have done goes to its watch (would_limit, /debug/candidates). Shaped as a rule for the stores
   * (limit, algorithm, burst, group); its `stats` count nothing.
   */
  readonly candidate?: RateLimitRule | undefined;
}

/**
 * Of `hits` that took a count to `after`, those past `threshold`, as upstream counts over_limit and
 * near_limit: all of them when the count was there already, 0 when `after` is not past it.
 */
export function hitsPast(threshold: number, hits: number, after: number): number {
  if (after <= threshold) return 0;
  return after - hits >= threshold ? hits : after - threshold;
}

/** A rule's {@link RateLimitRule.group} from the name of what it counts for (FNV-1a, 32 bits). */
export function counterGroup(name: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 0x01000193);
  return h | 0;
}

/** Rate limiting algorithms: `fixed_window` is upstream's (and the default). */
export type Algorithm = 'fixed_window' | 'sliding_window' | 'token_bucket';
export const ALGORITHMS: readonly Algorithm[] = ['fixed_window', 'sliding_window', 'token_bucket'];
