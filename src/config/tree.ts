/**
 * A small, source-independent view of a config document, shaped like what Go's yaml.v2 (YAML 1.1)
 * hands upstream: scalars carry the type yaml.v2 would resolve them to *and* their source text
 * (yaml.v2 stores the text when a scalar is decoded into a string field). YAML files and plain
 * objects (the xDS conversion) both become this tree, so validation is shared.
 */
import { Alias, Document, LineCounter, isAlias, isMap, isScalar, isSeq, parseAllDocuments } from 'yaml';
import type { Node as YamlNode, Scalar } from 'yaml';
import { parseBlockYaml } from './block-yaml';
import { countYamlNodes, type LoadBudget, NO_BUDGET } from './budget';

/** yaml.v2's resolved scalar kinds. `uint64` = an integer above int64 max; `timestamp` stays text. */
export type ScalarType = 'str' | 'int' | 'uint64' | 'float' | 'bool' | 'null' | 'timestamp';

export interface ScalarNode {
  readonly kind: 'scalar';
  readonly type: ScalarType;
  /** Short tag for error messages: the explicit tag if any, else the resolved one (`!!str`...). */
  readonly tag: string;
  /** Source text (what yaml.v2 puts in a string field). */
  readonly text: string;
  /** Resolved value: number for int/uint64/float, boolean, null, or the text. */
  readonly value: string | number | boolean | null;
  /** Exact integer for int/uint64 beyond a number's exact range (undefined: `BigInt(value)` is exact). */
  readonly big?: bigint | undefined;
  /** 1-based source line, when known. */
  readonly line?: number | undefined;
}

export interface MapNode {
  readonly kind: 'map';
  /** Pairs in document order, with `<<` merges already spliced in (later pairs win). */
  readonly pairs: ReadonlyArray<readonly [TreeNode, TreeNode]>;
  readonly line?: number | undefined;
}

export interface SeqNode {
  readonly kind: 'seq';
  readonly items: readonly TreeNode[];
  readonly line?: number | undefined;
}

export type TreeNode = ScalarNode | MapNode | SeqNode;

/** A failure yaml.v2 reports from `yaml.Unmarshal` (the text after `error loading config file: `). */
export class YamlLoadError extends Error {}

export const NULL_SCALAR: ScalarNode = Object.freeze({
  kind: 'scalar',
  type: 'null',
  tag: '!!null',
  text: '',
  value: null,
});

// ---------------------------------------------------------------------------------------------
// yaml.v2 plain-scalar resolution (resolve.go), reimplemented.

const BOOL_NULL_SPECIALS = new Map<string, ScalarNodeInit>();
export interface ScalarNodeInit {
  type: ScalarType;
  value: string | number | boolean | null;
}
for (const s of ['y', 'Y', 'yes', 'Yes', 'YES', 'true', 'True', 'TRUE', 'on', 'On', 'ON']) {
  BOOL_NULL_SPECIALS.set(s, { type: 'bool', value: true });
}
for (const s of ['n', 'N', 'no', 'No', 'NO', 'false', 'False', 'FALSE', 'off', 'Off', 'OFF']) {
  BOOL_NULL_SPECIALS.set(s, { type: 'bool', value: false });
}
for (const s of ['', '~', 'null', 'Null', 'NULL']) BOOL_NULL_SPECIALS.set(s, { type: 'null', value: null });
for (const s of ['.nan', '.NaN', '.NAN']) BOOL_NULL_SPECIALS.set(s, { type: 'float', value: NaN });
for (const s of ['.inf', '.Inf', '.INF', '+.inf', '+.Inf', '+.INF']) {
  BOOL_NULL_SPECIALS.set(s, { type: 'float', value: Infinity });
}
for (const s of ['-.inf', '-.Inf', '-.INF']) BOOL_NULL_SPECIALS.set(s, { type: 'float', value: -Infinity });

const INT64_MIN = -(1n << 63n);
const INT64_MAX = (1n << 63n) - 1n;
const UINT64_MAX = (1n << 64n) - 1n;
const YAML_STYLE_FLOAT = /^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$/;
const DOT_FLOAT = /^\.[0-9]+([eE][-+]?[0-9]+)?$/;
const TS_DATE = /^(\d{4})-(\d{1,2})-(\d{1,2})$/;
const TS_DATETIME_T = /^(\d{4})-(\d{1,2})-(\d{1,2})[Tt]\d{1,2}:\d{1,2}:\d{1,2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;
const TS_DATETIME_SP = /^(\d{4})-(\d{1,2})-(\d{1,2}) \d{1,2}:\d{1,2}:\d{1,2}(\.\d+)?$/;

/** Go strconv.ParseInt/ParseUint with base 0 (sign handled by the caller's `signed`). */
function parseGoInt(s: string, signed: boolean): bigint | undefined {
  let i = 0;
  let neg = false;
  if (signed && (s[0] === '+' || s[0] === '-')) {
    neg = s[0] === '-';
    i = 1;
  }
  let digits = s.slice(i);
  let base = 10;
  if (digits.length >= 2 && digits[0] === '0') {
    const p = digits[1]!;
    if (p === 'x' || p === 'X') {
      base = 16;
      digits = digits.slice(2);
    } else if (p === 'o' || p === 'O') {
      base = 8;
      digits = digits.slice(2);
    } else if (p === 'b' || p === 'B') {
      base = 2;
      digits = digits.slice(2);
    } else {
      base = 8;
      digits = digits.slice(1);
    }
  }
  if (digits.length === 0) return undefined;
  const re = base === 16 ? /^[0-9a-fA-F]+$/ : base === 8 ? /^[0-7]+$/ : base === 2 ? /^[01]+$/ : /^[0-9]+$/;
  if (!re.test(digits)) return undefined;
  const prefix = base === 16 ? '0x' : base === 8 ? '0o' : base === 2 ? '0b' : '';
  let v = BigInt(prefix + digits);
  if (neg) v = -v;
  if (signed ? v < INT64_MIN || v > INT64_MAX : v > UINT64_MAX) return undefined;
  return v;
}

function looksLikeTimestamp(s: string): boolean {
  // yaml.v2 only tries timestamps for text starting with exactly four digits and a '-'.
  if (s.length < 5 || s[4] !== '-') return false;
  const m = TS_DATE.exec(s) ?? TS_DATETIME_T.exec(s) ?? TS_DATETIME_SP.exec(s);
  if (m === null) return false;
  const month = Number(m[2]);
  const day = Number(m[3]);
  if (month < 1 || month > 12 || day < 1) return false;
  const daysInMonth = new Date(Date.UTC(Number(m[1]), month, 0)).getUTCDate();
  return day <= daysInMonth;
}

/** Resolve a plain (or resolvable explicitly tagged) scalar the way yaml.v2 does. */
export function resolvePlain(text: string): ScalarNodeInit {
  const special = BOOL_NULL_SPECIALS.get(text);
  if (special !== undefined) return special;
  const c = text.charCodeAt(0);
  if (c === 0x2e /* . */) {
    if (DOT_FLOAT.test(text)) {
      const f = Number(text);
      if (Number.isFinite(f)) return { type: 'float', value: f };
    }
    return { type: 'str', value: text };
  }
  const isDigit = c >= 0x30 && c <= 0x39;
  if (!isDigit && c !== 0x2b && c !== 0x2d) return { type: 'str', value: text };
  if (isDigit && looksLikeTimestamp(text)) return { type: 'timestamp', value: text };
  const plain = text.replace(/_/g, '');
  const iv = parseGoInt(plain, true);
  if (iv !== undefined) return { type: 'int', value: Number(iv) };
  const uv = parseGoInt(plain, false);
  if (uv !== undefined) return { type: 'uint64', value: Number(uv) };
  if (YAML_STYLE_FLOAT.test(plain)) {
    const f = Number(plain);
    if (Number.isFinite(f)) return { type: 'float', value: f };
  }
  return { type: 'str', value: text };
}

const TAG_PREFIX = 'tag:yaml.org,2002:';
function shortTag(tag: string): string {
  return tag.startsWith(TAG_PREFIX) ? '!!' + tag.slice(TAG_PREFIX.length) : tag;
}

/** The resolved tag of each scalar type, one string each (not a new one per scalar). */
const RESOLVED_TAGS: Readonly<Record<ScalarType, string>> = {
  str: '!!str',
  int: '!!int',
  uint64: '!!int',
  float: '!!float',
  bool: '!!bool',
  null: '!!null',
  timestamp: '!!timestamp',
};

/**
 * A scalar node. `big` is kept only for an integer that a number cannot hold exactly: for any
 * other, `BigInt(value)` is the same (a config holds hundreds of thousands of integers).
 */
export function makeScalar(init: ScalarNodeInit, text: string, tag: string | undefined, line: number | undefined): ScalarNode {
  let big: bigint | undefined;
  if ((init.type === 'int' || init.type === 'uint64') && !Number.isSafeInteger(init.value)) {
    big = parseGoInt(text.replace(/_/g, ''), init.type === 'int');
  }
  return {
    kind: 'scalar',
    type: init.type,
    tag: tag ?? RESOLVED_TAGS[init.type],
    text,
    value: init.value,
    big,
    line,
  };
}

// ---------------------------------------------------------------------------------------------
// YAML text -> tree.

/**
 * Parse the one YAML document of `content` (a later one that holds anything is refused). Returns null for an empty document (yaml.v2 then
 * decodes nothing, which ends in "config file cannot have empty domain").
 * Throws YamlLoadError with a one-line `yaml: line N: ...` message on a syntax error, and the
 * budget's error when the document holds more nodes than `budget` has left: counted as the block
 * reader makes them, or bounded from the text before the general reader parses it.
 */
export function parseYaml(content: string, budget: LoadBudget = NO_BUDGET): TreeNode | null {
  const bound = budget === NO_BUDGET ? 0 : countYamlNodes(content);
  budget.scanned(bound);
  const fast = parseBlockYaml(content, budget);
  if (fast !== undefined) return fast;
  budget.general(bound);
  return parseGeneralYaml(content, budget);
}

/** parseYaml with the `yaml` package alone: every YAML construct, and every syntax error text. */
export function parseGeneralYaml(content: string, budget: LoadBudget = NO_BUDGET): TreeNode | null {
  const lineCounter = new LineCounter();
  const docs = parseAllDocuments(content, {
    version: '1.1',
    schema: 'yaml-1.1',
    merge: false,
    uniqueKeys: false,
    prettyErrors: false,
    lineCounter,
  });
  // An empty stream yields no document at all; parseAllDocuments may also hand back an
  // EmptyStream object (an array) — both mean "nothing".
  const doc = (docs as unknown as Document[])[0];
  if (doc === undefined) return null;
  if (doc.errors.length > 0) {
    const err = doc.errors[0]!;
    const line = lineCounter.linePos(err.pos[0]).line;
    const msg = err.message.split('\n')[0]!.replace(/ at line \d+, column \d+:?$/, '');
    throw new YamlLoadError(`yaml: line ${line}: ${msg}`);
  }
  refuseLaterDocuments(docs as unknown as Document[], lineCounter);
  if (doc.contents === null || doc.contents === undefined) return null;
  return new YamlConverter(doc, lineCounter, budget).convert(doc.contents as YamlNode);
}

/**
 * A file holds one document: upstream's yaml.v2 reads the first and drops the others without a
 * word (a second domain put after `---` would simply not exist), so a later document that holds
 * anything is refused by name. An empty one (a trailing `---`, comments) is not a document lost.
 */
function refuseLaterDocuments(docs: readonly Document[], lineCounter: LineCounter): void {
  for (let i = 1; i < docs.length; i++) {
    const later = docs[i]!;
    const contents = later.contents;
    if (contents === null || contents === undefined || (isScalar(contents) && contents.value === null)) continue;
    const at = later.range?.[0] ?? contents.range?.[0] ?? 0;
    throw new YamlLoadError(
      `yaml: line ${lineCounter.linePos(at).line}: a second YAML document: a config file holds one (envoyproxy/ratelimit reads only the first and ignores the rest); put each document in a file of its own`,
    );
  }
}

class YamlConverter {
  private readonly done = new Map<unknown, TreeNode>();
  private readonly inProgress = new Set<unknown>();

  constructor(
    private readonly doc: Document,
    private readonly lc: LineCounter,
    private readonly budget: LoadBudget,
  ) {}

  private line(node: { range?: readonly number[] | null | undefined }): number | undefined {
    const r = node.range;
    return r ? this.lc.linePos(r[0]!).line : undefined;
  }

  private deref(node: unknown): unknown {
    let n = node;
    for (let hops = 0; isAlias(n); hops++) {
      const target = (n as Alias).resolve(this.doc);
      if (target === undefined) throw new YamlLoadError(`yaml: unknown anchor '${(n as Alias).source}' referenced`);
      if (hops > 1000) throw new YamlLoadError(`yaml: anchor '${(n as Alias).source}' value contains itself`);
      if (this.inProgress.has(target)) {
        throw new YamlLoadError(`yaml: anchor '${(n as Alias).source}' value contains itself`);
      }
      n = target;
    }
    return n;
  }

  convert(raw: unknown): TreeNode {
    if (raw === null || raw === undefined) return NULL_SCALAR;
    const node = this.deref(raw);
    const cached = this.done.get(node);
    if (cached !== undefined) return cached;
    this.budget.node();
    let out: TreeNode;
    if (isScalar(node)) {
      out = this.scalar(node);
    } else if (isMap(node)) {
      this.inProgress.add(node);
      const pairs: Array<readonly [TreeNode, TreeNode]> = [];
      for (const p of node.items) {
        const k = p.key;
        if (isScalar(k) && k.type === 'PLAIN' && k.source === '<<' && (k.tag === undefined || k.tag === TAG_PREFIX + 'merge')) {
          this.merge(p.value, pairs);
          continue;
        }
        pairs.push([this.key(k), this.convert(p.value)]);
      }
      this.inProgress.delete(node);
      out = { kind: 'map', pairs, line: this.line(node) };
    } else if (isSeq(node)) {
      this.inProgress.add(node);
      const items = node.items.map((i) => this.convert(i));
      this.inProgress.delete(node);
      out = { kind: 'seq', items, line: this.line(node) };
    } else {
      out = NULL_SCALAR;
    }
    this.done.set(node, out);
    return out;
  }

  /** A mapping key: a scalar one without its line (no error names a key's line; the block reader shares them). */
  private key(raw: unknown): TreeNode {
    const node = raw === null || raw === undefined ? raw : this.deref(raw);
    if (!isScalar(node)) return this.convert(raw);
    this.budget.node();
    return this.scalar(node, false);
  }

  /** yaml.v2 merge: a map, or a sequence of maps applied last-to-first (so the first wins). */
  private merge(value: unknown, into: Array<readonly [TreeNode, TreeNode]>): void {
    const bad = (): never => {
      throw new YamlLoadError('yaml: map merge requires map or sequence of maps as the value');
    };
    const v = this.deref(value);
    // Merged pairs are copies of references: counted, so merges of merges cannot grow unbounded.
    if (isMap(v)) {
      const m = this.convert(v) as MapNode;
      this.budget.node(m.pairs.length);
      into.push(...m.pairs);
    } else if (isSeq(v)) {
      for (let i = v.items.length - 1; i >= 0; i--) {
        const item = this.deref(v.items[i]);
        if (!isMap(item)) bad();
        const pairs = (this.convert(item) as MapNode).pairs;
        this.budget.node(pairs.length);
        into.push(...pairs);
      }
    } else {
      bad();
    }
  }

  private scalar(node: Scalar, withLine = true): ScalarNode {
    const text = typeof node.source === 'string' ? node.source : String(node.value ?? '');
    const line = withLine ? this.line(node) : undefined;
    const explicit = node.tag;
    if (explicit !== undefined) {
      const tag = shortTag(explicit);
      switch (tag) {
        case '!!str':
          return makeScalar({ type: 'str', value: text }, text, tag, line);
        case '!!int':
        case '!!float':
        case '!!bool':
        case '!!timestamp': {
          let r = resolvePlain(text);
          if (tag === '!!float' && (r.type === 'int' || r.type === 'uint64')) r = { type: 'float', value: r.value };
          if ((r.type === 'uint64' ? '!!int' : '!!' + r.type) !== tag) {
            throw new YamlLoadError(`yaml: cannot decode !!${r.type} \`${text}\` as a ${tag}`);
          }
          return makeScalar(r, text, tag, line);
        }
        case '!!binary': {
          const decoded = Buffer.from(text.replace(/\s+/g, ''), 'base64').toString('utf8');
          return makeScalar({ type: 'str', value: decoded }, decoded, tag, line);
        }
        default:
          return makeScalar({ type: 'str', value: text }, text, tag, line);
      }
    }
    if (node.type === 'PLAIN') return makeScalar(resolvePlain(text), text, undefined, line);
    return makeScalar({ type: 'str', value: text }, text, undefined, line);
  }
}

// ---------------------------------------------------------------------------------------------
// Plain object -> tree (the xDS conversion hands us decoded objects with the YAML field names).

/** The tree of a plain object (the xDS conversion's output); every node is counted in `budget`. */
export function fromObject(v: unknown, budget: LoadBudget = NO_BUDGET): TreeNode {
  return objectNode(v, budget, new Set());
}

function objectNode(v: unknown, budget: LoadBudget, seen: Set<unknown>): TreeNode {
  budget.node();
  if (v === null || v === undefined) return NULL_SCALAR;
  switch (typeof v) {
    case 'string':
      return { kind: 'scalar', type: 'str', tag: '!!str', text: v, value: v };
    case 'boolean':
      return { kind: 'scalar', type: 'bool', tag: '!!bool', text: String(v), value: v };
    case 'bigint': {
      const type = v >= INT64_MIN && v <= INT64_MAX ? 'int' : v >= 0n && v <= UINT64_MAX ? 'uint64' : 'float';
      const tag = type === 'float' ? '!!float' : '!!int';
      return { kind: 'scalar', type, tag, text: v.toString(), value: Number(v), big: type === 'float' ? undefined : v };
    }
    case 'number': {
      if (Number.isInteger(v) && Number.isSafeInteger(v)) {
        return { kind: 'scalar', type: 'int', tag: '!!int', text: String(v), value: v, big: undefined };
      }
      return { kind: 'scalar', type: 'float', tag: '!!float', text: String(v), value: v };
    }
    case 'object': {
      if (seen.has(v)) throw new YamlLoadError('yaml: value contains itself');
      seen.add(v);
      let out: TreeNode;
      if (Array.isArray(v)) {
        out = { kind: 'seq', items: v.map((i) => objectNode(i, budget, seen)) };
      } else if (v instanceof Date) {
        const s = v.toISOString();
        out = { kind: 'scalar', type: 'str', tag: '!!str', text: s, value: s };
      } else {
        const pairs: Array<readonly [TreeNode, TreeNode]> = [];
        for (const [k, val] of Object.entries(v as Record<string, unknown>)) {
          if (val === undefined) continue;
          pairs.push([objectNode(k, budget, seen), objectNode(val, budget, seen)]);
        }
        out = { kind: 'map', pairs };
      }
      seen.delete(v);
      return out;
    }
    default: {
      const s = String(v);
      return { kind: 'scalar', type: 'str', tag: '!!str', text: s, value: s };
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Go `%v` formatting of decoded values (used in upstream's error texts).

/** Go's `%v` of a float64: strconv 'g' with shortest digits, exponent form when exp < -4 or exp >= 6. */
export function goFloat(v: number): string {
  if (Number.isNaN(v)) return 'NaN';
  if (v === Infinity) return '+Inf';
  if (v === -Infinity) return '-Inf';
  if (v === 0) return Object.is(v, -0) ? '-0' : '0';
  const e = v.toExponential(); // shortest round-trip digits, e.g. "2.5e-1"
  const idx = e.indexOf('e');
  const exp = Number(e.slice(idx + 1));
  if (exp < -4 || exp >= 6) {
    const sign = exp < 0 ? '-' : '+';
    const abs = Math.abs(exp);
    return e.slice(0, idx) + 'e' + sign + (abs < 10 ? '0' + abs : String(abs));
  }
  return String(v);
}

export function goFormat(n: TreeNode): string {
  switch (n.kind) {
    case 'scalar':
      switch (n.type) {
        case 'null':
          return '<nil>';
        case 'bool':
          return n.value ? 'true' : 'false';
        case 'int':
        case 'uint64':
          return n.big !== undefined ? n.big.toString() : String(n.value);
        case 'float':
          return goFloat(n.value as number);
        default:
          return n.text;
      }
    case 'seq':
      return '[' + n.items.map(goFormat).join(' ') + ']';
    case 'map': {
      const parts = n.pairs.map(([k, v]) => goFormat(k) + ':' + goFormat(v));
      parts.sort();
      return 'map[' + parts.join(' ') + ']';
    }
  }
}
