/**
 * The immutable config snapshot: what the decision pipeline reads. Built from YAML files or xDS
 * RateLimitConfig resources by the same loader; a request reads one snapshot start to end.
 */
import type { RuleStats } from '../stats/store';
import type { Descriptor, JsonObject } from '../limiter/types';

/** A matched rule, as upstream's config.RateLimit. Shared (never mutated) unless request-specific. */
export interface RateLimitRule {
  /** The stats key ("FullKey"), e.g. `domain.key_value.subkey`. */
  readonly fullKey: string;
  readonly stats: RuleStats;
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
}

/** Rate limiting algorithms: `fixed_window` is upstream's (and the default). */
export type Algorithm = 'fixed_window' | 'sliding_window' | 'token_bucket';
export const ALGORITHMS: readonly Algorithm[] = ['fixed_window', 'sliding_window', 'token_bucket'];

export interface RateLimitConfig {
  /**
   * Upstream GetLimit: the rule for one descriptor of a request to `domain`, or undefined when
   * nothing matches (or the domain is unknown, which also counts `<domain>.domain_not_found`).
   */
  getLimit(domain: string, descriptor: Descriptor): RateLimitRule | undefined;
  /** How `getLimit` walks the config for one descriptor (the explain tool); no side effects. */
  explainMatch(domain: string, descriptor: Descriptor): MatchTrace;
  /** `/rlconfig`: one line per rule, `<FullKey>: unit=<UNIT> requests_per_unit=<N>, shadow_mode: <b>, quota_mode: <b>`. */
  dump(): string;
  /** Number of loaded domains (health with HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED). */
  readonly domainCount: number;
}

/** One level of a config walk: what the request entry matched, and how. */
export interface MatchStep {
  readonly key: string;
  readonly value: string;
  /** `exact` key_value, first matching `wildcard` in load order, bare-key `default`, or `none`. */
  readonly how: 'exact' | 'wildcard' | 'default' | 'none';
  /** The config node matched (its finalKey, e.g. `key_value`, `key_foo*`, `key`). */
  readonly node?: string;
  /** Whether that node has a rate_limit. */
  readonly hasLimit?: boolean;
}

export interface MatchTrace {
  readonly domainFound: boolean;
  readonly override: boolean;
  readonly steps: readonly MatchStep[];
  /** Why no rule applies, when none does. */
  readonly reason?: string;
}

/** A config source document: the name prefixes every error message (`<name>: <message>`). */
export interface ConfigFile {
  readonly name: string;
  readonly content: string;
}

/** A config that failed to load; its message is upstream's exact `<name>: <message>` text. */
export class ConfigError extends Error {
  override readonly name = 'ConfigError';
}
