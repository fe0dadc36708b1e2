/**
 * Config loading (upstream `ConfigFileContentToYaml` + `NewRateLimitConfigImpl`): every document is
 * parsed, key-validated and decoded first, then the documents are loaded in order into one new,
 * immutable snapshot. Errors are ConfigError with upstream's exact `<name>: <message>` text.
 */
import type { JsonObject, JsonValue } from '../core/rls';
import { sanitizeStatName } from '../stats/store';
import type { StatsStore } from '../stats/store';
import { ConfigProblem, decodeRoot, validateKeys } from './schema';
import type { YamlDescriptor, YamlRateLimit, YamlRoot } from './schema';
import { type AlgorithmRestriction } from '../core/store';
import { checkStoreSupport } from './capabilities';
import { ConfigNode, LoadedConfig, DomainNode, Level, dumpLine } from './loaded-config';
import { YamlLoadError, fromObject, goFormat, parseYaml } from './tree';
import type { TreeNode } from './tree';
import { ALGORITHMS } from '../core/rule';
import { ConfigError } from './types';
import type { Algorithm } from '../core/rule';
import type { ConfigFile, RateLimitConfig } from './types';
import type { RateLimitRule } from '../core/rule';

export interface LoadOptions {
  /** MERGE_DOMAIN_CONFIG: a later document with an already loaded domain merges into it. */
  readonly mergeDomainConfig: boolean;
  readonly stats: StatsStore;
  /** Algorithms the counter store in use cannot apply (a rule using one fails the load). */
  readonly restrictions?: readonly AlgorithmRestriction[];
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

/** Parse, validate and load YAML config files. Only the first YAML document of each is read. */
export function loadConfig(files: readonly ConfigFile[], opts: LoadOptions): RateLimitConfig {
  const roots = files.map((f) => ({ name: f.name, root: decodeDocument(f.name, () => parseYaml(f.content)) }));
  return build(roots, opts);
}

/** Validate and load already decoded documents (plain objects with the YAML field names). */
export function loadConfigFromObjects(docs: readonly ConfigObject[], opts: LoadOptions): RateLimitConfig {
  const roots = docs.map((d) => ({ name: d.name, root: decodeDocument(d.name, () => fromObject(d.root)) }));
  return build(roots, opts);
}

function decodeDocument(name: string, tree: () => TreeNode | null): YamlRoot {
  try {
    let root: TreeNode | null;
    try {
      root = tree();
    } catch (e) {
      if (e instanceof YamlLoadError) throw new ConfigProblem('error loading config file: ' + e.message);
      throw e;
    }
    validateKeys(root);
    return decodeRoot(root);
  } catch (e) {
    if (e instanceof ConfigProblem) throw new ConfigError(`${name}: ${e.message}`);
    throw e;
  }
}

function build(roots: ReadonlyArray<{ name: string; root: YamlRoot }>, opts: LoadOptions): RateLimitConfig {
  const builder = new Builder(opts.stats, opts.mergeDomainConfig, opts.restrictions);
  for (const { name, root } of roots) {
    try {
      builder.loadRoot(root);
    } catch (e) {
      if (e instanceof ConfigProblem) throw new ConfigError(`${name}: ${e.message}`);
      throw e;
    }
  }
  return builder.finish();
}

/** Per path-level state the children of a node inherit. */
interface PathInfo {
  readonly fullKey: string;
  readonly shareCount: number;
  readonly sharePatterns: readonly (string | undefined)[];
}

class Builder {
  private readonly domains = new Map<string, DomainNode>();
  private readonly lines: string[] = [];

  constructor(
    private readonly stats: StatsStore,
    private readonly merge: boolean,
    private readonly restrictions: readonly AlgorithmRestriction[] | undefined,
  ) {}

  loadRoot(root: YamlRoot): void {
    if (root.domain === '') throw new ConfigProblem('config file cannot have empty domain');
    let dom = this.domains.get(root.domain);
    if (dom !== undefined) {
      if (!this.merge) throw new ConfigProblem(`duplicate domain '${root.domain}' in config file`);
    } else {
      dom = new DomainNode(root.domain);
      // Registered before the descriptors load, as upstream; a failed load is discarded anyway.
      this.domains.set(root.domain, dom);
    }
    this.loadDescriptors(dom.children, root.descriptors, {
      fullKey: root.domain,
      shareCount: 0,
      sharePatterns: [],
    });
  }

  private loadDescriptors(level: Level, descriptors: readonly YamlDescriptor[], parent: PathInfo): void {
    for (const d of descriptors) {
      if (d.key === '') throw new ConfigProblem('descriptor has empty key');
      const finalKey = d.value !== '' ? d.key + '_' + d.value : d.key;
      const fullKey = parent.fullKey + '.' + finalKey;
      if (level.byFinalKey.has(finalKey)) {
        throw new ConfigProblem(`duplicate descriptor composite key '${fullKey}'`);
      }

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

      if (d.shareThreshold && !finalKey.includes('*')) {
        throw new ConfigProblem(
          `share_threshold can only be used with wildcard values (containing '*'), but found key '${finalKey}'`,
        );
      }

      let metadata: JsonObject | undefined;
      if (d.metadata !== undefined) metadata = convertMetadata(d.metadata);

      const node = new ConfigNode(
        d.key,
        d.value,
        finalKey,
        fullKey,
        d.valueToMetric,
        d.shareThreshold,
        rl !== undefined && d.detailedMetric,
        metadata,
      );
      const sharePatterns = [...parent.sharePatterns, d.shareThreshold ? d.value : undefined];
      node.shareCount = parent.shareCount + (d.shareThreshold ? 1 : 0);

      if (rl !== undefined) {
        const algo = algorithmOf(rl);
        let more: RateLimitRule[] | undefined;
        for (let k = 1; k < limits.length; k++) {
          const x = limits[k]!;
          if (rl.unlimited || x.unlimited) throw new ConfigProblem('unlimited cannot be combined with other limits (rate_limits)');
          if (x.replaces.length > 0) throw new ConfigProblem('replaces is only allowed on the first limit of a descriptor');
          const u = UNIT_VALUES.get(x.unit.toUpperCase());
          if (u === undefined || u === 0) throw new ConfigProblem(`invalid rate limit unit '${x.unit}'`);
          const xa = algorithmOf(x);
          const statsKey = fullKey + '.limit_' + String(k + 1);
          const extra: RateLimitRule = Object.freeze({
            fullKey: statsKey,
            stats: this.stats.ruleStats(sanitizeStatName(statsKey)),
            limit: Object.freeze({ name: x.name, requestsPerUnit: x.requestsPerUnit, unit: u }),
            unlimited: false,
            shadowMode: d.shadowMode,
            quotaMode: d.quotaMode,
            replaces: Object.freeze([]),
            metadata,
            shareThresholdKeyPattern: undefined,
            isOverride: false,
            ...algorithmFields(xa, x),
            keySuffix: '_l' + String(k + 1),
          });
          (more ??= []).push(extra);
          this.lines.push(dumpLine(extra));
        }
        const rule: RateLimitRule = Object.freeze({
          fullKey,
          stats: this.stats.ruleStats(sanitizeStatName(fullKey)),
          limit: Object.freeze({ name: rl.name, requestsPerUnit: rl.requestsPerUnit, unit }),
          unlimited: rl.unlimited,
          shadowMode: d.shadowMode,
          quotaMode: d.quotaMode,
          replaces: Object.freeze(rl.replaces.map((r) => r.name)),
          metadata,
          shareThresholdKeyPattern: undefined,
          isOverride: false,
          ...(rl.unlimited ? {} : algorithmFields(algo, rl)),
          ...(more !== undefined ? { more: Object.freeze(more) } : {}),
        });
        checkStoreSupport(rule, this.restrictions);
        node.rule = rule;
        if (node.shareCount > 0) {
          node.sharePatterns = Object.freeze(sharePatterns);
          node.shareRule = Object.freeze({ ...rule, shareThresholdKeyPattern: node.sharePatterns });
        }
        this.lines.push(dumpLine(rule));
      }

      if (d.descriptors.length > 0) {
        const children = new Level();
        this.loadDescriptors(children, d.descriptors, {
          fullKey,
          shareCount: node.shareCount,
          sharePatterns,
        });
        if (children.byFinalKey.size > 0) node.children = children;
      }
      level.add(node);
    }
  }

  finish(): RateLimitConfig {
    this.lines.sort();
    return new LoadedConfig(
      this.domains,
      this.stats,
      { remaining: this.stats.maxDynamicSeries },
      this.lines.join(''),
    );
  }
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
