/**
 * Config loading (upstream `ConfigFileContentToYaml` + `NewRateLimitConfigImpl`): every document is
 * parsed, key-validated and decoded first, then the documents are loaded in order into one new,
 * immutable snapshot. Errors are ConfigError with upstream's exact `<name>: <message>` text.
 */
import type { JsonObject, JsonValue } from '../core/rls';
import { sanitizeStatName } from '../stats/store';
import type { StatsStore } from '../stats/store';
import { LoadBudget, LoadBudgetError } from './budget';
import { ConfigProblem, decodeRoot, validateKeys } from './schema';
import type { YamlDescriptor, YamlRateLimit, YamlRoot } from './schema';
import { type AlgorithmRestriction } from '../core/store';
import { checkStoreSupport } from './capabilities';
import { ConfigNode, LoadedConfig, DomainNode, Level } from './loaded-config';
import { YamlLoadError, fromObject, goFormat, parseYaml } from './tree';
import type { TreeNode } from './tree';
import { ALGORITHMS, counterGroup } from '../core/rule';
import { ConfigError } from './types';
import type { Algorithm } from '../core/rule';
import type { ConfigFile, RateLimitConfig } from './types';
import type { HitCounter, RateLimitRule, RuleStats } from '../core/rule';

export interface LoadOptions {
  /** MERGE_DOMAIN_CONFIG: a later document with an already loaded domain merges into it. */
  readonly mergeDomainConfig: boolean;
  readonly stats: StatsStore;
  /** Algorithms the counter store in use cannot apply (a rule using one fails the load). */
  readonly restrictions?: readonly AlgorithmRestriction[];
  /**
   * CONFIG_MAX_DESCRIPTORS: a config with more descriptors (all depths), or more YAML nodes than
   * that allows (budget.ts), fails to load as soon as the reader or decoder gets there; 0 = no limit.
   */
  readonly maxDescriptors?: number;
}

/** An already decoded document with the YAML field names (the xDS conversion's output). */
export interface ConfigObject {
  readonly name: string;
  readonly root: unknown;
}

/** RLS unit numbers by upper-cased YAML name (`strings.ToUpper` lookup in the proto enum map). */
const UNIT_VALUES: ReadonlyMap<string, number> = new Map([
  ['UNKNOWN', 0],
  ['SECOND', 1],
  ['MINUTE', 2],
  ['HOUR', 3],
  ['DAY', 4],
  ['MONTH', 5],
  ['YEAR', 6],
  ['WEEK', 7],
]);

/** Parse, validate and load YAML config files (one YAML document each: a second one is refused). */
export function loadConfig(files: readonly ConfigFile[], opts: LoadOptions): RateLimitConfig {
  return assembleConfig(planFiles(files, opts), opts.stats);
}

/** Validate and load already decoded documents (plain objects with the YAML field names). */
export function loadConfigFromObjects(docs: readonly ConfigObject[], opts: LoadOptions): RateLimitConfig {
  return assembleConfig(planObjects(docs, opts), opts.stats);
}

/** What planning needs: the load options without the stats store (plans cross threads). */
export type PlanOptions = Omit<LoadOptions, 'stats'>;

/** Parse and validate YAML files into a plan: every load error is thrown here. */
export function planFiles(files: readonly ConfigFile[], opts: PlanOptions): ConfigPlan {
  const budget = new LoadBudget(opts.maxDescriptors ?? 0);
  // Every document parses before any loads: a YAML error in a later file wins over a semantic one.
  const roots = files.map((f) => ({ name: f.name, root: decodeDocument(f.name, budget, () => parseYaml(f.content, budget)) }));
  const planner = new Planner(opts);
  for (const r of roots) planner.add(r.name, r.root);
  return planner.finish();
}

/** Validate decoded documents into a plan: every load error is thrown here. */
export function planObjects(docs: readonly ConfigObject[], opts: PlanOptions): ConfigPlan {
  const budget = new LoadBudget(opts.maxDescriptors ?? 0);
  const roots = docs.map((d) => ({ name: d.name, root: decodeDocument(d.name, budget, () => fromObject(d.root, budget)) }));
  const planner = new Planner(opts);
  for (const r of roots) planner.add(r.name, r.root);
  return planner.finish();
}

/** Builds a whole plan at once (small configs, tools, tests). */
export function assembleConfig(plan: ConfigPlan, stats: StatsStore): RateLimitConfig {
  const a = new ConfigAssembly(stats, plan.ruleCount);
  a.add(plan.records);
  return a.finish();
}

function decodeDocument(name: string, budget: LoadBudget, tree: () => TreeNode | null): YamlRoot {
  try {
    let root: TreeNode | null;
    try {
      root = tree();
    } catch (e) {
      if (e instanceof YamlLoadError) throw new ConfigProblem('error loading config file: ' + e.message);
      throw e;
    }
    validateKeys(root);
    return decodeRoot(root, budget);
  } catch (e) {
    if (e instanceof ConfigProblem || e instanceof LoadBudgetError) throw new ConfigError(`${name}: ${e.message}`);
    throw e;
  }
}

/**
 * A validated config as plain data: the descriptor nodes in depth-first order, each domain opened
 * by a {@link DomainPlan}. Plain data crosses a worker thread by structured clone, in slices, and
 * is assembled into the immutable snapshot by {@link ConfigAssembly} without further checks.
 */
export interface ConfigPlan {
  readonly records: PlanRecord[];
  readonly ruleCount: number;
  readonly domainCount: number;
}

export type PlanRecord = DomainPlan | NodePlan;

export interface DomainPlan {
  /** The domain whose top-level descriptors follow (seen again with MERGE_DOMAIN_CONFIG). */
  readonly domain: string;
}

export interface NodePlan {
  /** 1 for a top-level descriptor of the domain, 2 for its children, ... */
  readonly depth: number;
  readonly key: string;
  readonly value: string;
  readonly valueToMetric: boolean;
  readonly shareThreshold: boolean;
  readonly detailedMetric: boolean;
  readonly metadata?: JsonObject | undefined;
  readonly rule?: RulePlan | undefined;
}

export interface LimitPlan {
  readonly name: string;
  readonly requestsPerUnit: number;
  readonly unit: number;
  readonly algorithm?: Algorithm | undefined;
  readonly burst?: number | undefined;
  /** Position of this limit's line in the sorted /rlconfig listing. */
  rank: number;
}

export interface RulePlan extends LimitPlan {
  readonly unlimited: boolean;
  readonly shadowMode: boolean;
  readonly quotaMode: boolean;
  readonly replaces: readonly string[];
  /** The 2nd and later limits (`rate_limits:`). */
  readonly more?: readonly LimitPlan[] | undefined;
  readonly candidate?: CandidatePlan | undefined;
}

/** A descriptor's candidate limit (`candidate:`): counted beside its limits, never enforced. */
export interface CandidatePlan {
  readonly requestsPerUnit: number;
  readonly unit: number;
  readonly algorithm?: Algorithm | undefined;
  readonly burst?: number | undefined;
}

/** Per path-level state the children of a node inherit. */
interface PathInfo {
  readonly fullKey: string;
  readonly depth: number;
}

const NO_REPLACES: readonly string[] = Object.freeze([]);

/** A candidate's `stats`: it counts nothing in the rule's series (its watch counts would_limit). */
const NO_COUNTER: HitCounter = Object.freeze({ inc: () => undefined });
const NO_RULE_STATS: RuleStats = Object.freeze({
  key: '',
  totalHits: NO_COUNTER,
  overLimit: NO_COUNTER,
  nearLimit: NO_COUNTER,
  overLimitWithLocalCache: NO_COUNTER,
  withinLimit: NO_COUNTER,
  shadowMode: NO_COUNTER,
});

/** Runs every check of upstream's loader (in its order) and writes the plan. */
class Planner {
  private readonly records: PlanRecord[] = [];
  /** Top-level finalKeys per domain (kept across documents: MERGE_DOMAIN_CONFIG). */
  private readonly domains = new Map<string, Set<string>>();
  /** Every limit with its stats key, to rank the /rlconfig lines. */
  private readonly limits: Array<{ key: string; limit: LimitPlan }> = [];

  constructor(private readonly opts: PlanOptions) {}

  add(name: string, root: YamlRoot): void {
    try {
      this.loadRoot(root);
    } catch (e) {
      if (e instanceof ConfigProblem) throw new ConfigError(`${name}: ${e.message}`);
      throw e;
    }
  }

  private loadRoot(root: YamlRoot): void {
    if (root.domain === '') throw new ConfigProblem('config file cannot have empty domain');
    let top = this.domains.get(root.domain);
    if (top !== undefined) {
      if (!this.opts.mergeDomainConfig) throw new ConfigProblem(`duplicate domain '${root.domain}' in config file`);
    } else {
      top = new Set();
      this.domains.set(root.domain, top);
    }
    this.records.push({ domain: root.domain });
    this.loadDescriptors(top, root.descriptors, { fullKey: root.domain, depth: 1 });
  }

  private loadDescriptors(level: Set<string>, descriptors: readonly YamlDescriptor[], parent: PathInfo): void {
    for (const d of descriptors) {
      if (d.key === '') throw new ConfigProblem('descriptor has empty key');
      const finalKey = d.value !== '' ? d.key + '_' + d.value : d.key;
      const fullKey = parent.fullKey + '.' + finalKey;
      if (level.has(finalKey)) throw new ConfigProblem(`duplicate descriptor composite key '${fullKey}'`);

      let unit = 0;
      // Extension: `rate_limits:` beside (after) `rate_limit:`; the first limit is the primary rule.
      const limits = d.rateLimit !== undefined ? [d.rateLimit, ...d.rateLimits] : d.rateLimits;
      const rl = limits[0];
      if (rl !== undefined) {
        const u = UNIT_VALUES.get(rl.unit.toUpperCase());
        const validUnit = u !== undefined && u !== 0;
        if (rl.unlimited) {
          if (validUnit) throw new ConfigProblem('should not specify rate limit unit when unlimited');
        } else if (!validUnit) {
          throw new ConfigProblem(`invalid rate limit unit '${rl.unit}'`);
        }
        unit = u ?? 0;
        for (const r of rl.replaces) {
          if (r.name === '') throw new ConfigProblem('should not have an empty replaces entry');
          if (r.name === rl.name) throw new ConfigProblem('replaces should not contain name of same descriptor');
        }
      }

      for (const x of d.candidate !== undefined ? [...limits, d.candidate] : limits) {
        if (x.candidateInside === true) {
          throw new ConfigProblem(`candidate of '${fullKey}': candidate goes beside rate_limit, not inside a limit`);
        }
      }
      if (d.candidate !== undefined && rl === undefined) {
        throw new ConfigProblem(
          `candidate of '${fullKey}': a candidate is counted beside a rate_limit, and this descriptor has none (to try a limit where there is none, use shadow_mode)`,
        );
      }

      if (d.shareThreshold && !finalKey.includes('*')) {
        throw new ConfigProblem(
          `share_threshold can only be used with wildcard values (containing '*'), but found key '${finalKey}'`,
        );
      }

      let metadata: JsonObject | undefined;
      if (d.metadata !== undefined) metadata = convertMetadata(d.metadata);

      let rule: RulePlan | undefined;
      if (rl !== undefined) {
        const algo = algorithmOf(rl);
        let more: LimitPlan[] | undefined;
        for (let k = 1; k < limits.length; k++) {
          const x = limits[k]!;
          if (rl.unlimited || x.unlimited) throw new ConfigProblem('unlimited cannot be combined with other limits (rate_limits)');
          if (x.replaces.length > 0) throw new ConfigProblem('replaces is only allowed on the first limit of a descriptor');
          const xu = UNIT_VALUES.get(x.unit.toUpperCase());
          if (xu === undefined || xu === 0) throw new ConfigProblem(`invalid rate limit unit '${x.unit}'`);
          const extra: LimitPlan = { name: x.name, requestsPerUnit: x.requestsPerUnit, unit: xu, ...algorithmFields(algorithmOf(x), x), rank: 0 };
          (more ??= []).push(extra);
          this.limits.push({ key: fullKey + '.limit_' + String(k + 1), limit: extra });
        }
        const candidate = d.candidate !== undefined ? candidatePlan(fullKey, d.candidate, rl) : undefined;
        rule = {
          name: rl.name,
          requestsPerUnit: rl.requestsPerUnit,
          unit,
          unlimited: rl.unlimited,
          shadowMode: d.shadowMode,
          quotaMode: d.quotaMode,
          replaces: rl.replaces.length === 0 ? NO_REPLACES : rl.replaces.map((r) => r.name),
          ...(rl.unlimited ? {} : algorithmFields(algo, rl)),
          ...(more !== undefined ? { more } : {}),
          ...(candidate !== undefined ? { candidate } : {}),
          rank: 0,
        };
        checkStoreSupport(fullKey, rule, this.opts.restrictions);
        this.limits.push({ key: fullKey, limit: rule });
      }

      this.records.push({
        depth: parent.depth,
        key: d.key,
        value: d.value,
        valueToMetric: d.valueToMetric,
        shareThreshold: d.shareThreshold,
        detailedMetric: rl !== undefined && d.detailedMetric,
        ...(metadata !== undefined ? { metadata } : {}),
        ...(rule !== undefined ? { rule } : {}),
      });
      level.add(finalKey);
      if (d.descriptors.length > 0) this.loadDescriptors(new Set(), d.descriptors, { fullKey, depth: parent.depth + 1 });
    }
  }

  finish(): ConfigPlan {
    const limits = this.limits;
    limits.sort((a, b) => compareDumpKeys(a.key, b.key));
    for (let i = 0; i < limits.length; i++) limits[i]!.limit.rank = i;
    return { records: this.records, ruleCount: limits.length, domainCount: this.domains.size };
  }
}

/**
 * The order of two /rlconfig lines (`<key>: ...`) from their keys alone: the key, then `:`. Keys
 * are unique, so this is the order of the lines (a key followed by `:` inside another aside).
 */
export function compareDumpKeys(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const d = a.charCodeAt(i) - b.charCodeAt(i);
    if (d !== 0) return d;
  }
  if (a.length === b.length) return 0;
  return a.length < b.length ? 58 /* : */ - b.charCodeAt(n) : a.charCodeAt(n) - 58;
}

/**
 * Turns plan records into the immutable snapshot. `add` may be called once per slice of records
 * (in order), so a big config is assembled between other work on the event loop.
 */
export class ConfigAssembly {
  private readonly domains = new Map<string, DomainNode>();
  private readonly sorted: RateLimitRule[];
  private domain: DomainNode | undefined;
  /** The last node at each depth: the parent of the next deeper record. */
  private readonly path: ConfigNode[] = [];
  private readonly sharePath: Array<readonly (string | undefined)[]> = [];

  constructor(
    private readonly stats: StatsStore,
    ruleCount: number,
  ) {
    this.sorted = new Array<RateLimitRule>(ruleCount);
  }

  add(records: readonly PlanRecord[], from = 0, to = records.length): void {
    for (let i = from; i < to; i++) {
      const r = records[i]!;
      if ('domain' in r) this.openDomain(r.domain);
      else this.addNode(r);
    }
  }

  private openDomain(name: string): void {
    let dom = this.domains.get(name);
    if (dom === undefined) {
      dom = new DomainNode(name);
      this.domains.set(name, dom);
    }
    this.domain = dom;
    this.path.length = 0;
    this.sharePath.length = 0;
  }

  private addNode(p: NodePlan): void {
    const dom = this.domain!;
    const parent = p.depth > 1 ? this.path[p.depth - 2]! : undefined;
    const finalKey = p.value !== '' ? p.key + '_' + p.value : p.key;
    const fullKey = (parent !== undefined ? parent.fullKey : dom.name) + '.' + finalKey;
    const node = new ConfigNode(p.key, p.value, finalKey, fullKey, p.valueToMetric, p.shareThreshold, p.detailedMetric, p.metadata);
    const parentShares = p.depth > 1 ? this.sharePath[p.depth - 2]! : NO_SHARES;
    const sharePatterns = [...parentShares, p.shareThreshold ? p.value : undefined];
    node.shareCount = (parent !== undefined ? parent.shareCount : 0) + (p.shareThreshold ? 1 : 0);

    const rl = p.rule;
    if (rl !== undefined) {
      let more: RateLimitRule[] | undefined;
      if (rl.more !== undefined) {
        for (let k = 0; k < rl.more.length; k++) {
          const x = rl.more[k]!;
          const statsKey = fullKey + '.limit_' + String(k + 2);
          const limit = Object.freeze({ name: x.name, requestsPerUnit: x.requestsPerUnit, unit: x.unit });
          const extra: RateLimitRule = Object.freeze({
            fullKey: statsKey,
            stats: this.stats.configRuleStats(sanitizeStatName(statsKey)),
            watch: this.stats.limits.watch(sanitizeStatName(statsKey), dom.name, limit, x.algorithm, x.burst),
            limit,
            unlimited: false,
            shadowMode: rl.shadowMode,
            quotaMode: rl.quotaMode,
            replaces: NO_REPLACES,
            metadata: p.metadata,
            shareThresholdKeyPattern: undefined,
            isOverride: false,
            ...(x.algorithm !== undefined ? { algorithm: x.algorithm, burst: x.burst } : {}),
            keySuffix: '_l' + String(k + 2),
            group: counterGroup(statsKey),
          });
          (more ??= []).push(extra);
          this.place(x.rank, extra);
        }
      }
      const limit = Object.freeze({ name: rl.name, requestsPerUnit: rl.requestsPerUnit, unit: rl.unit });
      const candidate = rl.candidate !== undefined ? this.candidateRule(rl.candidate, fullKey, dom.name, rl) : undefined;
      const rule: RateLimitRule = Object.freeze({
        fullKey,
        stats: this.stats.configRuleStats(sanitizeStatName(fullKey)),
        watch: rl.unlimited ? undefined : this.stats.limits.watch(sanitizeStatName(fullKey), dom.name, limit, rl.algorithm, rl.burst),
        limit,
        unlimited: rl.unlimited,
        shadowMode: rl.shadowMode,
        quotaMode: rl.quotaMode,
        replaces: rl.replaces.length === 0 ? NO_REPLACES : Object.freeze(rl.replaces),
        metadata: p.metadata,
        shareThresholdKeyPattern: undefined,
        isOverride: false,
        ...(rl.algorithm !== undefined ? { algorithm: rl.algorithm, burst: rl.burst } : {}),
        ...(more !== undefined ? { more: Object.freeze(more) } : {}),
        group: counterGroup(fullKey),
        ...(candidate !== undefined ? { candidate } : {}),
      });
      node.rule = rule;
      if (node.shareCount > 0) {
        node.sharePatterns = Object.freeze(sharePatterns);
        node.shareRule = Object.freeze({ ...rule, shareThresholdKeyPattern: node.sharePatterns });
      }
      this.place(rl.rank, rule);
    }

    const level = parent !== undefined ? (parent.children ??= new Level()) : dom.children;
    level.add(node);
    this.path.length = p.depth;
    this.path[p.depth - 1] = node;
    this.sharePath.length = p.depth;
    this.sharePath[p.depth - 1] = sharePatterns;
  }

  /**
   * A rule's candidate limit, shaped as a rule for the stores: its own limit and algorithm, its
   * group, no stats of its own (what it would have done is its watch's).
   */
  private candidateRule(c: CandidatePlan, fullKey: string, domain: string, rl: RulePlan): RateLimitRule {
    const limit = Object.freeze({ name: '', requestsPerUnit: c.requestsPerUnit, unit: c.unit });
    const key = fullKey + '.candidate';
    return Object.freeze({
      fullKey: key,
      stats: NO_RULE_STATS,
      watch: this.stats.limits.candidate(sanitizeStatName(fullKey), domain, rl.name, limit, c.algorithm, c.burst, {
        requestsPerUnit: rl.requestsPerUnit,
        unit: rl.unit,
        algorithm: rl.algorithm,
      }),
      limit,
      unlimited: false,
      shadowMode: false,
      quotaMode: false,
      replaces: NO_REPLACES,
      metadata: undefined,
      shareThresholdKeyPattern: undefined,
      isOverride: false,
      ...(c.algorithm !== undefined ? { algorithm: c.algorithm, burst: c.burst } : {}),
      group: counterGroup(key),
    });
  }

  private place(rank: number, rule: RateLimitRule): void {
    this.sorted[rank] = rule;
  }

  finish(): RateLimitConfig {
    return new LoadedConfig(this.domains, this.stats, { remaining: this.stats.maxDynamicSeries }, this.sorted);
  }
}

const NO_SHARES: readonly (string | undefined)[] = Object.freeze([]);

/** Validates a descriptor's `candidate:` block (`rl`: the descriptor's first limit). */
function candidatePlan(fullKey: string, c: YamlRateLimit, rl: YamlRateLimit): CandidatePlan {
  const where = `candidate of '${fullKey}'`;
  if (rl.unlimited) throw new ConfigProblem(`${where}: the rate_limit is unlimited, so there is nothing to count a candidate beside`);
  if (c.unlimited) throw new ConfigProblem(`${where}: a candidate cannot be unlimited`);
  if (c.name !== '') throw new ConfigProblem(`${where}: a candidate has no name (it neither replaces nor is replaced)`);
  if (c.replaces.length > 0) throw new ConfigProblem(`${where}: a candidate has no replaces`);
  const u = UNIT_VALUES.get(c.unit.toUpperCase());
  if (u === undefined || u === 0) throw new ConfigProblem(`${where}: invalid unit '${c.unit}' (expected second, minute, hour, day, week, month or year)`);
  let algo: Algorithm | undefined;
  try {
    algo = algorithmOf(c);
  } catch (e) {
    if (e instanceof ConfigProblem) throw new ConfigProblem(`${where}: ${e.message}`);
    throw e;
  }
  return { requestsPerUnit: c.requestsPerUnit, unit: u, ...algorithmFields(algo, c) };
}

/** Validates `algorithm` and `burst` of one limit; undefined for upstream's fixed window. */
function algorithmOf(rl: YamlRateLimit): Algorithm | undefined {
  const a = rl.algorithm;
  if (a !== '' && !(ALGORITHMS as readonly string[]).includes(a)) {
    throw new ConfigProblem(`invalid rate limit algorithm '${a}' (expected one of ${ALGORITHMS.join(', ')})`);
  }
  // Without token_bucket the key means nothing: upstream's own error, as for any unknown key.
  if (rl.burst !== 0 && a !== 'token_bucket') throw new ConfigProblem(`config error, unknown key 'burst'`);
  if (a !== '' && rl.unlimited) throw new ConfigProblem('should not specify an algorithm when unlimited');
  if (a === 'token_bucket' && rl.requestsPerUnit === 0) {
    throw new ConfigProblem('token_bucket needs requests_per_unit greater than 0');
  }
  return a === '' || a === 'fixed_window' ? undefined : (a as Algorithm);
}

/** The rule fields of an algorithm: none at all for the fixed window (rules stay as upstream's). */
function algorithmFields(a: Algorithm | undefined, rl: YamlRateLimit): { algorithm?: Algorithm; burst?: number } {
  if (a === undefined) return {};
  if (a === 'token_bucket') return { algorithm: a, burst: rl.burst !== 0 ? rl.burst : rl.requestsPerUnit };
  return { algorithm: a };
}

/**
 * `metadata` to a google.protobuf.Struct-compatible object (nested maps, lists and scalars).
 * Also used to carry YAML metadata over xDS. Throws ConfigProblem on a non-string nested key.
 */
export function convertMetadata(m: ReadonlyMap<string, TreeNode>): JsonObject {
  const out: JsonObject = {};
  for (const [k, v] of m) setProp(out, k, metadataValue(v));
  return Object.freeze(out);
}

/** Own data property even for names like `__proto__`. */
function setProp(o: JsonObject, k: string, v: JsonValue): void {
  Object.defineProperty(o, k, { value: v, enumerable: true, writable: true, configurable: true });
}

function metadataValue(n: TreeNode): JsonValue {
  switch (n.kind) {
    case 'scalar':
      switch (n.type) {
        case 'null':
          return null;
        case 'bool':
          return n.value as boolean;
        case 'int':
        case 'uint64':
        case 'float':
          return n.value as number;
        default:
          return n.text;
      }
    case 'seq':
      return Object.freeze(n.items.map(metadataValue)) as JsonValue[];
    case 'map': {
      const out: JsonObject = {};
      for (const [k, v] of n.pairs) {
        // Nested maps decode as map[interface{}]interface{} upstream, whose keys convertMap turns
        // into strings with %v: YAML 1.1's `y`/`on` become "true", `1` stays "1", `~` is "<nil>".
        // A map or list cannot be a Go map key, so yaml.v2 refuses those.
        if (k.kind !== 'scalar') throw new ConfigProblem(`error parsing metadata: key is not of type string: ${goFormat(k)}`);
        setProp(out, k.type === 'str' || k.type === 'timestamp' ? k.text : goFormat(k), metadataValue(v));
      }
      return Object.freeze(out);
    }
  }
}
