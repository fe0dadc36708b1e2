/**
 * The immutable config snapshot: what the decision pipeline reads. Built from YAML files or xDS
 * RateLimitConfig resources by the same loader; a request reads one snapshot start to end.
 */
import type { Descriptor } from '../core/rls';
import type { RateLimitRule } from '../core/rule';

export interface RateLimitConfig {
  /** Whether `domain` is loaded (the service counts `<domain>.domain_not_found` when not). */
  hasDomain(domain: string): boolean;
  /**
   * Upstream GetLimit: the rule for one descriptor of a request to `domain`, or undefined when
   * nothing matches or the domain is unknown. No side effects: the stats of a request-specific
   * rule are created when it first counts.
   */
  getLimit(domain: string, descriptor: Descriptor): RateLimitRule | undefined;
  /**
   * The descriptor an RLQS BucketId stands for: its pairs in the order of `domain`'s descriptor
   * tree. At each level the next entry is the pair that matches a descriptor there by key and
   * value, else by a wildcard value, else by its key alone (a tie goes to the smaller key).
   * Undefined when the domain is unknown or some pair has no place on the path.
   */
  bucketDescriptor(domain: string, pairs: ReadonlyMap<string, string>): Descriptor | undefined;
  /** How `getLimit` walks the config for one descriptor (the explain tool); no side effects. */
  explainMatch(domain: string, descriptor: Descriptor): MatchTrace;
  /** `/rlconfig`: one line per rule, `<FullKey>: unit=<UNIT> requests_per_unit=<N>, shadow_mode: <b>, quota_mode: <b>`. */
  dump(): string;
  /** The same text in pieces of about `chunkChars` characters, built as they are taken (a big config streams). */
  dumpChunks(chunkChars?: number): Iterable<string>;
  /**
   * Every limit in /rlconfig order: by stats key as `compareDumpKeys` (load.ts) orders them (a
   * `rate_limits:` descriptor's 2nd and later limits each under their own key).
   */
  readonly rules: readonly RateLimitRule[];
  /** Number of loaded domains (health with HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED). */
  readonly domainCount: number;
  /** Number of limits (the lines of `dump()`): a `rate_limits:` descriptor counts each of its limits. */
  readonly ruleCount: number;
}

/** What one request reads: a config and the flags loaded with it, swapped together. */
export interface ConfigSnapshot<F> {
  readonly config: RateLimitConfig;
  readonly flags: F;
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
