/**
 * The two passes upstream runs over each config document before building the tree:
 *  1. key validation over the generic (map[interface{}]interface{}) view (`validateYamlKeys`), and
 *  2. the struct decode into YamlRoot, whose type mismatches yaml.v2 reports as
 *     `yaml: unmarshal errors:\n  line N: cannot unmarshal !!str `abc` into uint32`.
 */
import { type LoadBudget, NO_BUDGET } from './budget';
import type { MapNode, ScalarNode, TreeNode } from './tree';
import { goFormat } from './tree';

/** A config problem; the message is upstream's text without the `<name>: ` prefix. */
export class ConfigProblem extends Error {}

export interface YamlReplaces {
  name: string;
}

export interface YamlRateLimit {
  requestsPerUnit: number;
  unit: string;
  unlimited: boolean;
  name: string;
  replaces: YamlReplaces[];
  /** Extension: '' (fixed_window), `sliding_window` or `token_bucket`. */
  algorithm: string;
  /** Extension (token_bucket): 0 when not set. */
  burst: number;
  /** A `candidate:` key inside this block (it belongs beside `rate_limit:`): refused at load. */
  candidateInside?: boolean;
}

export interface YamlDescriptor {
  key: string;
  value: string;
  rateLimit: YamlRateLimit | undefined;
  /** Extension: further limits of the same descriptor. */
  rateLimits: YamlRateLimit[];
  /** Extension: a candidate limit, counted beside the descriptor's limits, never enforced. */
  candidate: YamlRateLimit | undefined;
  descriptors: YamlDescriptor[];
  shadowMode: boolean;
  quotaMode: boolean;
  detailedMetric: boolean;
  valueToMetric: boolean;
  shareThreshold: boolean;
  /** `metadata` as decoded into map[string]interface{}: string keys, raw values. */
  metadata: Map<string, TreeNode> | undefined;
}

export interface YamlRoot {
  domain: string;
  descriptors: YamlDescriptor[];
}

const VALID_KEYS = new Set([
  'domain',
  'key',
  'value',
  'descriptors',
  'rate_limit',
  'unit',
  'requests_per_unit',
  'unlimited',
  'shadow_mode',
  'quota_mode',
  'name',
  'replaces',
  'detailed_metric',
  'value_to_metric',
  'share_threshold',
  'metadata',
  // Extensions (not upstream): rate limiting algorithms and several limits per descriptor.
  'algorithm',
  'burst',
  'rate_limits',
  // Extension: a candidate limit beside rate_limit (counted, never enforced).
  'candidate',
]);

const GENERIC_MAP_TYPE = 'map[interface {}]interface {}';

/**
 * Aliases make the tree a DAG; expanding it is what yaml.v2 guards with its "excessive aliasing"
 * check. Any real config is orders of magnitude below this many visited nodes.
 */
const MAX_VISITS = 2_000_000;

class VisitBudget {
  private n = 0;
  visit(): void {
    if (++this.n > MAX_VISITS) throw new ConfigProblem('error loading config file: yaml: document contains excessive aliasing');
  }
}

function keyIdentity(k: TreeNode): string {
  if (k.kind !== 'scalar') return k.kind + ':' + goFormat(k);
  switch (k.type) {
    case 'str':
    case 'timestamp':
      return 's:' + k.text;
    case 'int':
    case 'uint64':
      return 'i:' + goFormat(k);
    default:
      return k.type + ':' + goFormat(k);
  }
}

function isStringScalar(n: TreeNode): n is ScalarNode {
  // yaml.v2 keeps timestamp-looking text as a string when decoding into interface{}.
  return n.kind === 'scalar' && (n.type === 'str' || n.type === 'timestamp');
}

/** Go map semantics: one entry per key (the last value wins), visited in first-seen order. */
function uniquePairs(m: MapNode): Array<readonly [TreeNode, TreeNode]> {
  if (m.pairs.length < 2) return m.pairs as Array<readonly [TreeNode, TreeNode]>;
  const byKey = new Map<string, [TreeNode, TreeNode]>();
  for (const [k, v] of m.pairs) {
    const id = keyIdentity(k);
    const prev = byKey.get(id);
    if (prev === undefined) byKey.set(id, [k, v]);
    else prev[1] = v;
  }
  return [...byKey.values()];
}

function unmarshalErrors(errs: readonly string[]): ConfigProblem {
  return new ConfigProblem('error loading config file: yaml: unmarshal errors:\n  ' + errs.join('\n  '));
}

function terror(n: TreeNode, type: string): string {
  let tag: string;
  let val = '';
  if (n.kind === 'scalar') {
    tag = n.tag;
    const t = n.text;
    val = t.length > 10 ? ' `' + t.slice(0, 7) + '...`' : ' `' + t + '`';
  } else {
    tag = n.kind === 'map' ? '!!map' : '!!seq';
  }
  return (n.line !== undefined ? `line ${n.line}: ` : '') + `cannot unmarshal ${tag}${val} into ${type}`;
}

/**
 * Pass 1 (upstream `validateYamlKeys`): every map key anywhere must be a string from the allowed
 * set, every list item a map, every leaf a string, int, bool or null. `metadata` values are free.
 * Go visits map keys in random order; this visits them in document order.
 */
export function validateKeys(root: TreeNode | null): void {
  if (root === null) return;
  if (root.kind !== 'map') {
    if (root.kind === 'scalar' && root.type === 'null') return;
    throw unmarshalErrors([terror(root, GENERIC_MAP_TYPE)]);
  }
  validateMap(root, new VisitBudget());
}

function validateMap(m: MapNode, budget: VisitBudget): void {
  for (const [k, v] of uniquePairs(m)) {
    budget.visit();
    if (!isStringScalar(k)) {
      throw new ConfigProblem(`config error, key is not of type string: ${goFormat(k)}`);
    }
    const key = k.text;
    if (!VALID_KEYS.has(key)) throw new ConfigProblem(`config error, unknown key '${key}'`);
    if (key === 'metadata') continue;
    switch (v.kind) {
      case 'seq':
        for (const item of v.items) {
          if (item.kind !== 'map') {
            throw new ConfigProblem(`config error, yaml file contains list of type other than map: ${goFormat(item)}`);
          }
          validateMap(item, budget);
        }
        break;
      case 'map':
        validateMap(v, budget);
        break;
      case 'scalar':
        if (v.type === 'uint64' || v.type === 'float') throw new ConfigProblem('error checking config');
        break;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Pass 2: the struct decode.

type FieldKind = 'string' | 'bool' | 'uint32' | 'descriptors' | 'rate_limit' | 'rate_limits' | 'replaces' | 'metadata';

const ROOT_FIELDS: Readonly<Record<string, FieldKind>> = { domain: 'string', descriptors: 'descriptors' };
const DESCRIPTOR_FIELDS: Readonly<Record<string, FieldKind>> = {
  key: 'string',
  value: 'string',
  rate_limit: 'rate_limit',
  rate_limits: 'rate_limits',
  candidate: 'rate_limit',
  descriptors: 'descriptors',
  shadow_mode: 'bool',
  quota_mode: 'bool',
  detailed_metric: 'bool',
  value_to_metric: 'bool',
  share_threshold: 'bool',
  metadata: 'metadata',
};
const RATE_LIMIT_FIELDS: Readonly<Record<string, FieldKind>> = {
  requests_per_unit: 'uint32',
  unit: 'string',
  unlimited: 'bool',
  name: 'string',
  replaces: 'replaces',
  algorithm: 'string',
  burst: 'uint32',
};
const REPLACES_FIELDS: Readonly<Record<string, FieldKind>> = { name: 'string' };

const UINT32_MAX = 4294967295;

class Decoder {
  readonly errors: string[] = [];
  private readonly budget = new VisitBudget();

  /** `load`: the load's budget, which counts every descriptor made (alias expansions included). */
  constructor(private readonly load: LoadBudget) {}

  /** Walk a map into a struct: unknown fields are ignored (yaml.v2 non-strict). */
  private fields(n: TreeNode, table: Readonly<Record<string, FieldKind>>, typeName: string, set: (field: string, v: TreeNode) => void): void {
    if (n.kind === 'map') {
      for (const [k, v] of n.pairs) {
        this.budget.visit();
        if (k.kind !== 'scalar') {
          this.errors.push(terror(k, 'string'));
          continue;
        }
        const name = k.type === 'null' ? '' : k.text;
        if (Object.prototype.hasOwnProperty.call(table, name)) set(name, v);
      }
    } else if (!(n.kind === 'scalar' && n.type === 'null')) {
      this.errors.push(terror(n, typeName));
    }
  }

  string(n: TreeNode): string {
    if (n.kind === 'scalar') return n.type === 'null' ? '' : n.text;
    this.errors.push(terror(n, 'string'));
    return '';
  }

  bool(n: TreeNode): boolean {
    if (n.kind === 'scalar') {
      if (n.type === 'bool') return n.value as boolean;
      if (n.type === 'null') return false;
    }
    this.errors.push(terror(n, 'bool'));
    return false;
  }

  uint32(n: TreeNode): number {
    if (n.kind === 'scalar') {
      switch (n.type) {
        case 'null':
          return 0;
        case 'int':
        case 'uint64': {
          const big = n.big ?? BigInt(n.value as number);
          if (big >= 0n && big <= BigInt(UINT32_MAX)) return Number(big);
          break;
        }
        case 'float': {
          const f = n.value as number;
          if (f >= 0 && Math.trunc(f) <= UINT32_MAX) return Math.trunc(f);
          break;
        }
        default:
          break;
      }
    }
    this.errors.push(terror(n, 'uint32'));
    return 0;
  }

  private list<T>(n: TreeNode, typeName: string, item: (n: TreeNode) => T): T[] {
    if (n.kind === 'seq') return n.items.map(item);
    if (!(n.kind === 'scalar' && n.type === 'null')) this.errors.push(terror(n, typeName));
    return [];
  }

  root(n: TreeNode | null): YamlRoot {
    const out: YamlRoot = { domain: '', descriptors: [] };
    if (n === null) return out;
    this.fields(n, ROOT_FIELDS, 'config.YamlRoot', (f, v) => {
      if (f === 'domain') out.domain = this.string(v);
      else out.descriptors = this.descriptors(v);
    });
    return out;
  }

  private descriptors(n: TreeNode): YamlDescriptor[] {
    return this.list(n, '[]config.YamlDescriptor', (i) => this.descriptor(i));
  }

  private descriptor(n: TreeNode): YamlDescriptor {
    this.load.descriptor();
    const d: YamlDescriptor = {
      key: '',
      value: '',
      rateLimit: undefined,
      rateLimits: [],
      candidate: undefined,
      descriptors: [],
      shadowMode: false,
      quotaMode: false,
      detailedMetric: false,
      valueToMetric: false,
      shareThreshold: false,
      metadata: undefined,
    };
    this.fields(n, DESCRIPTOR_FIELDS, 'config.YamlDescriptor', (f, v) => {
      switch (f) {
        case 'key':
          d.key = this.string(v);
          break;
        case 'value':
          d.value = this.string(v);
          break;
        case 'rate_limit':
          d.rateLimit = this.rateLimit(v);
          break;
        case 'rate_limits':
          d.rateLimits = this.list(v, '[]config.YamlRateLimit', (i) => this.rateLimit(i)).filter(
            (r): r is YamlRateLimit => r !== undefined,
          );
          break;
        case 'candidate':
          d.candidate = this.rateLimit(v);
          break;
        case 'descriptors':
          d.descriptors = this.descriptors(v);
          break;
        case 'shadow_mode':
          d.shadowMode = this.bool(v);
          break;
        case 'quota_mode':
          d.quotaMode = this.bool(v);
          break;
        case 'detailed_metric':
          d.detailedMetric = this.bool(v);
          break;
        case 'value_to_metric':
          d.valueToMetric = this.bool(v);
          break;
        case 'share_threshold':
          d.shareThreshold = this.bool(v);
          break;
        case 'metadata':
          d.metadata = this.metadata(v);
          break;
      }
    });
    return d;
  }

  private rateLimit(n: TreeNode): YamlRateLimit | undefined {
    // A pointer field: null leaves it nil (no rate limit at all).
    if (n.kind === 'scalar' && n.type === 'null') return undefined;
    const r: YamlRateLimit = { requestsPerUnit: 0, unit: '', unlimited: false, name: '', replaces: [], algorithm: '', burst: 0 };
    this.fields(n, RATE_LIMIT_FIELDS, 'config.YamlRateLimit', (f, v) => {
      switch (f) {
        case 'requests_per_unit':
          r.requestsPerUnit = this.uint32(v);
          break;
        case 'unit':
          r.unit = this.string(v);
          break;
        case 'unlimited':
          r.unlimited = this.bool(v);
          break;
        case 'name':
          r.name = this.string(v);
          break;
        case 'algorithm':
          r.algorithm = this.string(v);
          break;
        case 'burst':
          r.burst = this.uint32(v);
          break;
        case 'replaces':
          r.replaces = this.list(v, '[]config.yamlReplaces', (i) => {
            const rep: YamlReplaces = { name: '' };
            this.fields(i, REPLACES_FIELDS, 'config.yamlReplaces', (_f, nv) => {
              rep.name = this.string(nv);
            });
            return rep;
          });
          break;
      }
    });
    // Not a field of a limit (upstream's decoder would ignore it): a misplaced block is an error.
    if (n.kind === 'map' && n.pairs.some(([k]) => k.kind === 'scalar' && k.text === 'candidate')) r.candidateInside = true;
    return r;
  }

  private metadata(n: TreeNode): Map<string, TreeNode> | undefined {
    if (n.kind === 'map') {
      const out = new Map<string, TreeNode>();
      for (const [k, v] of n.pairs) {
        if (k.kind !== 'scalar') {
          this.errors.push(terror(k, 'string'));
          continue;
        }
        out.set(k.type === 'null' ? '' : k.text, v);
      }
      return out;
    }
    if (!(n.kind === 'scalar' && n.type === 'null')) this.errors.push(terror(n, 'map[string]interface {}'));
    return undefined;
  }
}

/**
 * Pass 2: decode a validated document into YamlRoot, or throw the collected unmarshal errors (or
 * the budget's error as soon as a descriptor is one too many).
 */
export function decodeRoot(root: TreeNode | null, budget: LoadBudget = NO_BUDGET): YamlRoot {
  const d = new Decoder(budget);
  const out = d.root(root);
  if (d.errors.length > 0) throw unmarshalErrors(d.errors);
  return out;
}
