/**
 * The loaded config tree and its request-time lookup (upstream `GetLimit`, section 1.2), plus the
 * stats-key rewriting of section 1.15. Everything that does not depend on the request is computed
 * at load time: in the common case a lookup is a few Map reads and returns a shared frozen rule.
 */
import type { Descriptor, Entry, JsonObject } from '../core/rls';
import { UNIT_NAMES } from '../core/rls';
import { sanitizeStatName } from '../stats/store';
import type { StatsStore } from '../stats/store';
import type { MatchStep, MatchTrace, RateLimitConfig } from './types';
import { counterGroup, type RateLimitRule } from '../core/rule';

/** How a level was matched. */
const EXACT = 0;
const WILDCARD = 1;
const BARE = 2;

/** A compiled wildcard (`*` = zero or more characters) over the whole `key_value` string. */
export class Wildcard {
  private readonly segs: readonly string[];
  private readonly first: string;
  private readonly last: string;
  private readonly minLen: number;

  constructor(
    readonly pattern: string,
    readonly node: ConfigNode,
  ) {
    this.segs = pattern.split('*');
    this.first = this.segs[0]!;
    this.last = this.segs[this.segs.length - 1]!;
    let n = 0;
    for (const s of this.segs) n += s.length;
    this.minLen = n;
  }

  /**
   * Whether the pattern matches `key + '_' + value`. The prefix and suffix are compared against
   * the two parts in place, so the usual miss or single-`*` match builds no string.
   */
  matches(key: string, value: string): boolean {
    const kl = key.length;
    const total = kl + 1 + value.length;
    if (total < this.minLen) return false;
    const first = this.first;
    for (let i = 0; i < first.length; i++) {
      const c = i < kl ? key.charCodeAt(i) : i === kl ? 95 /* _ */ : value.charCodeAt(i - kl - 1);
      if (c !== first.charCodeAt(i)) return false;
    }
    const last = this.last;
    const off = total - last.length;
    for (let i = 0; i < last.length; i++) {
      const j = off + i;
      const c = j < kl ? key.charCodeAt(j) : j === kl ? 95 : value.charCodeAt(j - kl - 1);
      if (c !== last.charCodeAt(i)) return false;
    }
    const segs = this.segs;
    if (segs.length === 2) return true;
    // Middle segments in order, non-overlapping, between the prefix and the suffix.
    const s = key + '_' + value;
    let pos = first.length;
    for (let i = 1; i < segs.length - 1; i++) {
      const seg = segs[i]!;
      if (seg.length === 0) continue;
      const at = s.indexOf(seg, pos);
      if (at < 0 || at + seg.length > off) return false;
      pos = at + seg.length;
    }
    return true;
  }
}

/** One level of descriptors (a node's children). */
export class Level {
  /** finalKey -> node (also the bare `key` lookup). */
  readonly byFinalKey = new Map<string, ConfigNode>();
  /**
   * Exact `key_value` lookup without building the string: a node with a value is registered under
   * its own key and value. Every other split of a finalKey (a bare key's included) is found through
   * `otherSplits`.
   */
  private readonly exact = new Map<string, Map<string, ConfigNode>>();
  /**
   * The other places a finalKey can be split at an `_` (`a_b_c`: `a` | `b_c` besides `a_b` | `c`):
   * upstream looks up the concatenation `key + '_' + value`, so a request `a`=`b_c` finds node
   * `a_b`=`c`. Only the distinct key parts are kept (a handful per level, however many nodes); a
   * lookup that misses `exact` with such a key builds the string once.
   */
  private readonly otherSplits = new Set<string>();
  /** finalKeys containing `*`, in load order. */
  readonly wildcards: Wildcard[] = [];

  add(node: ConfigNode): void {
    const fk = node.finalKey;
    this.byFinalKey.set(fk, node);
    // Registered under its own split when it has one; a bare key is found by its other splits.
    const own = node.value !== '' ? node.key.length : -1;
    if (own >= 0) this.register(node.key, node.value, node);
    for (let i = fk.indexOf('_'); i >= 0; i = fk.indexOf('_', i + 1)) {
      if (i !== own) this.otherSplits.add(fk.slice(0, i));
    }
    if (fk.includes('*')) this.wildcards.push(new Wildcard(fk, node));
  }

  /** The node whose finalKey is `key + '_' + value`, as upstream's map lookup of the concatenation. */
  exactMatch(key: string, value: string): ConfigNode | undefined {
    const byValue = this.exact.get(key);
    const node = byValue !== undefined ? byValue.get(value) : undefined;
    if (node !== undefined || !this.otherSplits.has(key)) return node;
    return this.byFinalKey.get(key + '_' + value);
  }

  private register(key: string, value: string, node: ConfigNode): void {
    let byValue = this.exact.get(key);
    if (byValue === undefined) {
      byValue = new Map();
      this.exact.set(key, byValue);
    }
    byValue.set(value, node);
  }
}

/** Per-snapshot budget for cached request-specific rules (detailed_metric, value_to_metric). */
export interface RuleCacheBudget {
  remaining: number;
}

/** A loaded descriptor node. */
export class ConfigNode {
  children: Level | undefined;
  rule: RateLimitRule | undefined;
  /** `rule` with the share_threshold patterns of a fully wildcard-matched path. */
  shareRule: RateLimitRule | undefined;
  sharePatterns: readonly (string | undefined)[] | undefined;
  /** share_threshold nodes on the path from the domain to this node (inclusive). */
  shareCount = 0;
  /** Request-specific rules keyed by their stats key. */
  dynamicRules: Map<string, RateLimitRule> | undefined;

  constructor(
    readonly key: string,
    readonly value: string,
    readonly finalKey: string,
    /** The config path, `domain.k1_v1.k2`: upstream's load-time FullKey. */
    readonly fullKey: string,
    readonly valueToMetric: boolean,
    readonly shareThreshold: boolean,
    readonly detailedMetric: boolean,
    readonly metadata: JsonObject | undefined,
  ) {}
}

export class DomainNode {
  readonly children = new Level();
  constructor(readonly name: string) {}
}

const EMPTY: readonly string[] = Object.freeze([]);

function trimPrefix(s: string, prefix: string): string {
  return s.startsWith(prefix) ? s.slice(prefix.length) : s;
}

/** The value part of a matched wildcard pattern, as upstream derives it from the request key. */
function wildcardValue(node: ConfigNode, entry: Entry): string {
  if (entry.key === node.key && node.value !== '') return node.value;
  return trimPrefix(node.finalKey, entry.key + '_');
}

/** A loaded config: the domains' descriptor trees, matched by getLimit (one per successful load). */
export class LoadedConfig implements RateLimitConfig {
  readonly domainCount: number;
  readonly ruleCount: number;
  private readonly overrideRules = new Map<string, RateLimitRule>();
  /**
   * Scratch space for one lookup: the node and match kind per entry (getLimit is synchronous, so
   * one set per snapshot is enough; the arrays grow on demand).
   */
  private readonly scratchNodes: ConfigNode[] = new Array<ConfigNode>(8);
  private readonly scratchMatch: number[] = new Array<number>(8).fill(0);

  constructor(
    private readonly domains: ReadonlyMap<string, DomainNode>,
    private readonly stats: StatsStore,
    private readonly cacheBudget: RuleCacheBudget,
    /** Every limit, in /rlconfig order. */
    readonly rules: readonly RateLimitRule[],
  ) {
    this.domainCount = domains.size;
    this.ruleCount = rules.length;
    Object.freeze(this);
  }

  hasDomain(domain: string): boolean {
    return this.domains.has(domain);
  }

  getLimit(domain: string, descriptor: Descriptor): RateLimitRule | undefined {
    const dom = this.domains.get(domain);
    if (dom === undefined) return undefined;
    if (descriptor.limit !== undefined && descriptor.limit !== null) return this.overrideRule(domain, descriptor);

    const entries = descriptor.entries;
    const n = entries.length;
    const nodes = this.scratchNodes;
    const match = this.scratchMatch;

    let level: Level | undefined = dom.children;
    let found: ConfigNode | undefined;
    // True when the value_to_metric stats key may differ from the load-time FullKey.
    let dynamic = false;
    let shareSeen = 0;
    let shareIrregular = false;

    for (let i = 0; i < n && level !== undefined; i++) {
      const e = entries[i]!;
      let node: ConfigNode | undefined;
      let how = EXACT;
      node = level.exactMatch(e.key, e.value);
      if (node !== undefined) {
        // The stats segment is `key` (not the finalKey `key_`) for an empty request value.
        if (e.value === '') dynamic = true;
      } else {
        const wild: readonly Wildcard[] = level.wildcards;
        if (wild.length > 0) {
          for (let w = 0; w < wild.length; w++) {
            if (wild[w]!.matches(e.key, e.value)) {
              node = wild[w]!.node;
              how = WILDCARD;
              break;
            }
          }
        }
        if (node !== undefined) {
          const regular = e.key === node.key && node.value !== '';
          if (node.shareThreshold) {
            shareSeen++;
            if (!regular) {
              shareIrregular = true;
              dynamic = true;
            }
          } else if (node.valueToMetric || !regular) {
            dynamic = true;
          }
        } else {
          node = level.byFinalKey.get(e.key);
          if (node === undefined) break;
          how = BARE;
          if (node.valueToMetric && e.value !== '') dynamic = true;
        }
      }
      nodes[i] = node;
      match[i] = how;
      if (i === n - 1 && node.rule !== undefined) found = node;
      level = node.children;
    }

    if (found === undefined) return undefined;
    const base = found.rule!;
    const shareStandard = shareSeen === found.shareCount && !shareIrregular;

    if (!found.detailedMetric && !dynamic) {
      if (shareSeen === 0) return base;
      if (shareStandard) return found.shareRule;
      return this.makeRule(base, base.fullKey, base.stats, this.patterns(entries, n));
    }

    let patterns: readonly (string | undefined)[] | undefined;
    if (shareSeen > 0) patterns = shareStandard ? found.sharePatterns : this.patterns(entries, n);
    const key = found.detailedMetric ? detailedStatsKey(dom.name, entries, n, patterns) : this.matchedStatsKey(dom.name, entries, n);
    if (!found.detailedMetric && key === base.fullKey) {
      if (shareSeen === 0) return base;
      if (shareStandard) return found.shareRule;
      return this.makeRule(base, base.fullKey, base.stats, patterns);
    }
    // Cache only rules whose patterns follow from the node alone (none, or the standard set).
    const cacheable = shareSeen > 0 ? shareStandard : found.shareCount === 0;
    return this.ruleWithKey(found, key, patterns, cacheable);
  }

  /**
   * The stats key of the last walk (value_to_metric, wildcards, empty values): each entry as it
   * matched, from the scratch arrays getLimit filled.
   */
  private matchedStatsKey(domain: string, entries: Descriptor['entries'], n: number): string {
    const nodes = this.scratchNodes;
    const match = this.scratchMatch;
    let key = domain;
    for (let i = 0; i < n; i++) {
      const e = entries[i]!;
      const node = nodes[i]!;
      const how = match[i];
      if (how === WILDCARD) {
        if (node.shareThreshold || !node.valueToMetric) key += '.' + e.key + '_' + wildcardValue(node, e);
        else key += e.value !== '' ? '.' + e.key + '_' + e.value : '.' + e.key;
      } else if (how === EXACT || node.valueToMetric) {
        key += e.value !== '' ? '.' + e.key + '_' + e.value : '.' + e.key;
      } else {
        key += '.' + e.key;
      }
    }
    return key;
  }

  /**
   * The rule of `found` under its request-made stats key: remembered per node (within the cache
   * budget) when `cacheable`, else made for this request.
   */
  private ruleWithKey(found: ConfigNode, key: string, patterns: readonly (string | undefined)[] | undefined, cacheable: boolean): RateLimitRule {
    const base = found.rule!;
    if (!cacheable) return this.makeRule(base, key, this.stats.deferredRuleStats(sanitizeStatName(key)), patterns);
    let cache = found.dynamicRules;
    const hit = cache !== undefined ? cache.get(key) : undefined;
    if (hit !== undefined) return hit;
    const rule = this.makeRule(base, key, this.stats.deferredRuleStats(sanitizeStatName(key)), patterns);
    if (this.cacheBudget.remaining > 0) {
      this.cacheBudget.remaining--;
      if (cache === undefined) {
        cache = new Map();
        found.dynamicRules = cache;
      }
      cache.set(key, rule);
    }
    return rule;
  }

  bucketDescriptor(domain: string, pairs: ReadonlyMap<string, string>): Descriptor | undefined {
    const dom = this.domains.get(domain);
    if (dom === undefined || pairs.size === 0) return undefined;
    const left = [...pairs.keys()].sort();
    const entries: Entry[] = [];
    let level: Level | undefined = dom.children;
    while (left.length > 0 && level !== undefined) {
      let best = -1;
      let bestHow = BARE + 1;
      let bestNode: ConfigNode | undefined;
      for (let i = 0; i < left.length && bestHow !== EXACT; i++) {
        const key = left[i]!;
        const value = pairs.get(key)!;
        const exact = level.exactMatch(key, value);
        const wild = exact === undefined ? level.wildcards.find((w) => w.matches(key, value))?.node : undefined;
        const bare = exact === undefined && wild === undefined ? level.byFinalKey.get(key) : undefined;
        const how = exact !== undefined ? EXACT : wild !== undefined ? WILDCARD : bare !== undefined ? BARE : BARE + 1;
        if (how < bestHow) {
          best = i;
          bestHow = how;
          bestNode = exact ?? wild ?? bare;
        }
      }
      if (bestNode === undefined) return undefined;
      const key = left.splice(best, 1)[0]!;
      entries.push({ key, value: pairs.get(key)! });
      level = bestNode.children;
    }
    return left.length === 0 ? { entries } : undefined;
  }

  /** The walk of getLimit, step by step, for the explain tool (no stats, no caching). */
  explainMatch(domain: string, descriptor: Descriptor): MatchTrace {
    const dom = this.domains.get(domain);
    if (dom === undefined) return { domainFound: false, override: false, steps: [], reason: `domain '${domain}' is not loaded` };
    if (descriptor.limit !== undefined && descriptor.limit !== null) {
      return { domainFound: true, override: true, steps: [] };
    }
    const steps: MatchStep[] = [];
    const entries = descriptor.entries;
    let level: Level | undefined = dom.children;
    for (let i = 0; i < entries.length; i++) {
      const e = entries[i]!;
      if (level === undefined) {
        return { domainFound: true, override: false, steps, reason: `the request is deeper than the config: nothing is nested under ${steps[i - 1]!.node} (depth rule)` };
      }
      let node: ConfigNode | undefined = level.exactMatch(e.key, e.value);
      let how: MatchStep['how'] = 'exact';
      if (node === undefined) {
        node = level.wildcards.find((w) => w.matches(e.key, e.value))?.node;
        how = 'wildcard';
      }
      if (node === undefined) {
        node = level.byFinalKey.get(e.key);
        how = 'default';
      }
      if (node === undefined) {
        steps.push({ key: e.key, value: e.value, how: 'none' });
        return { domainFound: true, override: false, steps, reason: `no rule matches ${e.key}=${e.value} at depth ${i + 1}` };
      }
      steps.push({ key: e.key, value: e.value, how, node: node.finalKey, hasLimit: node.rule !== undefined });
      level = node.children;
    }
    const last = steps[steps.length - 1];
    if (last === undefined) return { domainFound: true, override: false, steps, reason: 'the descriptor has no entries' };
    if (!last.hasLimit) {
      const reason = level !== undefined
        ? `${last.node} has no rate_limit, only nested descriptors: a placeholder (the request is shallower than its rules)`
        : `${last.node} has no rate_limit: whitelisted`;
      return { domainFound: true, override: false, steps, reason };
    }
    return { domainFound: true, override: false, steps };
  }

  /** share_threshold patterns for the current scratch path (entries matched via a share wildcard). */
  private patterns(entries: readonly Entry[], n: number): readonly (string | undefined)[] | undefined {
    let out: (string | undefined)[] | undefined;
    for (let i = 0; i < n; i++) {
      const node = this.scratchNodes[i]!;
      if (this.scratchMatch[i] === WILDCARD && node.shareThreshold) {
        if (out === undefined) out = new Array<string | undefined>(n).fill(undefined);
        out[i] = wildcardValue(node, entries[i]!);
      }
    }
    return out === undefined ? undefined : Object.freeze(out);
  }

  private makeRule(
    base: RateLimitRule,
    fullKey: string,
    stats: RateLimitRule['stats'],
    patterns: readonly (string | undefined)[] | undefined,
  ): RateLimitRule {
    return Object.freeze({
      fullKey,
      stats,
      limit: base.limit,
      unlimited: base.unlimited,
      shadowMode: base.shadowMode,
      quotaMode: base.quotaMode,
      replaces: base.replaces,
      metadata: base.metadata,
      shareThresholdKeyPattern: patterns,
      isOverride: false,
      ...(base.algorithm !== undefined ? { algorithm: base.algorithm, burst: base.burst } : {}),
      ...(base.more !== undefined ? { more: this.moreRules(base.more, base.stats, fullKey, stats, patterns) } : {}),
      // Counted for the config's limit, whatever its stats key: its group, its window, its candidate.
      group: base.group,
      ...(base.watch !== undefined ? { watch: base.watch } : {}),
      ...(base.candidate !== undefined ? { candidate: base.candidate } : {}),
    });
  }

  /** The 2nd and later limits of a request-specific rule: stats keys follow the rule's. */
  private moreRules(
    more: readonly RateLimitRule[],
    baseStats: RateLimitRule['stats'],
    fullKey: string,
    stats: RateLimitRule['stats'],
    patterns: readonly (string | undefined)[] | undefined,
  ): readonly RateLimitRule[] {
    return Object.freeze(
      more.map((m) => {
        const key = fullKey + '.limit_' + m.keySuffix!.slice(2);
        return Object.freeze({
          ...m,
          fullKey: key,
          stats: stats === baseStats ? m.stats : this.stats.deferredRuleStats(sanitizeStatName(key)),
          shareThresholdKeyPattern: patterns,
        });
      }),
    );
  }

  /** A RateLimitOverride from the request: never matched against config (section 1.16). */
  private overrideRule(domain: string, descriptor: Descriptor): RateLimitRule {
    const o = descriptor.limit!;
    let key = domain + '.';
    const entries = descriptor.entries;
    for (let i = 0; i < entries.length; i++) {
      const e = entries[i]!;
      if (i > 0) key += '.';
      key += e.value !== '' ? e.key + '_' + e.value : e.key;
    }
    const cacheKey = o.requestsPerUnit + '|' + o.unit + '|' + key;
    const hit = this.overrideRules.get(cacheKey);
    if (hit !== undefined) return hit;
    const rule: RateLimitRule = Object.freeze({
      fullKey: key,
      stats: this.stats.deferredRuleStats(sanitizeStatName(key)),
      limit: Object.freeze({ name: '', requestsPerUnit: o.requestsPerUnit, unit: o.unit }),
      unlimited: false,
      shadowMode: false,
      quotaMode: false,
      replaces: EMPTY,
      metadata: undefined,
      shareThresholdKeyPattern: undefined,
      isOverride: true,
      // One group per domain: the limits and values of overrides are the caller's to choose.
      group: counterGroup(domain + '.'),
    });
    if (this.cacheBudget.remaining > 0) {
      this.cacheBudget.remaining--;
      this.overrideRules.set(cacheKey, rule);
    }
    return rule;
  }

  dump(): string {
    let out = '';
    for (const chunk of this.dumpChunks()) out += chunk;
    return out;
  }

  *dumpChunks(chunkBytes = DUMP_CHUNK_CHARS): Generator<string, void, undefined> {
    let out = '';
    for (const rule of this.rules) {
      out += dumpLine(rule);
      if (out.length >= chunkBytes) {
        yield out;
        out = '';
      }
    }
    if (out !== '') yield out;
  }
}

/** The stats key of a detailed_metric rule: every entry with its value (or its share pattern). */
function detailedStatsKey(domain: string, entries: Descriptor['entries'], n: number, patterns: readonly (string | undefined)[] | undefined): string {
  let key = domain;
  for (let i = 0; i < n; i++) {
    const e = entries[i]!;
    const p = patterns !== undefined ? patterns[i] : undefined;
    if (p !== undefined) key += '.' + e.key + '_' + p;
    else if (patterns !== undefined && e.value === '') key += '.' + e.key;
    else key += '.' + e.key + '_' + e.value;
  }
  return key;
}

/** About how much text one step of the /rlconfig listing builds. */
const DUMP_CHUNK_CHARS = 64 * 1024;

/** The `/rlconfig` line of a rule. */
export function dumpLine(rule: RateLimitRule): string {
  return (
    `${rule.fullKey}: unit=${UNIT_NAMES[rule.limit.unit] ?? String(rule.limit.unit)} ` +
    `requests_per_unit=${rule.limit.requestsPerUnit}, shadow_mode: ${rule.shadowMode}, quota_mode: ${rule.quotaMode}` +
    algorithmText(rule) +
    (rule.candidate === undefined ? '' : `, candidate: unit=${UNIT_NAMES[rule.candidate.limit.unit] ?? String(rule.candidate.limit.unit)} requests_per_unit=${rule.candidate.limit.requestsPerUnit}${algorithmText(rule.candidate)}`) +
    '\n'
  );
}

/** The extension's `, algorithm: A[, burst: B]` of a /rlconfig line; '' for the fixed window. */
function algorithmText(rule: RateLimitRule): string {
  return rule.algorithm === undefined ? '' : `, algorithm: ${rule.algorithm}` + (rule.burst !== undefined ? `, burst: ${rule.burst}` : '');
}
