/**
 * A fast reader for the YAML that rate limit configs are written in: block mappings and sequences
 * of single-line plain or simply quoted scalars and simple one-line flow collections
 * (`rate_limit: {unit: second, requests_per_unit: 5}`), with comments. It builds the same tree as the
 * general reader (`parseYaml` in tree.ts over the `yaml` package), in a single pass over the text
 * and without the general reader's document model, which costs about 80 bytes of heap and a
 * microsecond and a half per byte of input (a 10 MB config: 13 s and 1 GB before this reader).
 *
 * Anything outside that subset (other flow collections, anchors and aliases, tags, block scalars,
 * multi-line scalars, escapes, merge keys, several documents, tabs, unusual indentation) makes it
 * answer `undefined`, and the caller reads the document with the general reader, which also
 * produces every syntax error text. So a document is either read here exactly as the general
 * reader would, or not at all.
 *
 * Memory: lines are cut from the text as the reader reaches them (it holds the current one and the
 * next), every node made is counted in the load's budget (so a config over its cap stops here,
 * before the rest of its tree exists), and a key is one node per spelling, shared (keys carry no
 * line: no error message names a key's line).
 */
import { type LoadBudget, NO_BUDGET } from './budget';
import { makeScalar, resolvePlain, type MapNode, type ScalarNode, type SeqNode, type TreeNode } from './tree';

/** Not in the subset: the general reader takes the document. */
class Unsupported extends Error {}

/**
 * Where a node sits, for counting descriptors as the decoder will: the document, a descriptor (an
 * item of a `descriptors` list of either), the value of such a `descriptors` key, or elsewhere.
 */
const enum Place {
  Root,
  Descriptor,
  DescriptorList,
  Other,
}

interface Line {
  /** 1-based line number. */
  readonly no: number;
  /** Column of the first content character. */
  readonly indent: number;
  /** The content from `indent`, comment and trailing blanks removed. */
  readonly text: string;
}

/**
 * The tree of `content`, null for an empty document, undefined when outside the subset (the nodes
 * counted before it found out are given back to `budget`). Throws the budget's error when the
 * document holds more nodes than `budget` has left.
 */
export function parseBlockYaml(content: string, budget: LoadBudget = NO_BUDGET): TreeNode | null | undefined {
  const mark = budget.mark();
  try {
    if (content.charCodeAt(0) === 0xfeff) unsupported();
    const lines = new Lines(content);
    const first = lines.at(0);
    if (first === undefined) return null;
    const reader = new BlockReader(lines, budget);
    const root = reader.node(0, first.indent, Place.Root);
    if (lines.at(reader.pos) !== undefined) return undefined;
    return root;
  } catch (e) {
    if (e instanceof Unsupported) {
      budget.rewind(mark);
      return undefined;
    }
    throw e;
  }
}

function unsupported(): never {
  throw new Unsupported();
}

/**
 * The content lines of a text (blank and comment lines left out), cut when first asked for. The
 * reader asks for line `i` only once it is at line `i - 1` or later, so the lines before are let go.
 */
class Lines {
  private readonly window: Line[] = [];
  /** The index of window[0]. */
  private base = 0;
  /** Where the next line starts in the text, and the number of the last line cut. */
  private start = 0;
  private no = 0;

  constructor(private readonly content: string) {}

  /** Content line `i` (0-based), or undefined past the end. */
  at(i: number): Line | undefined {
    while (this.base < i - 1 && this.window.length > 0) {
      this.window.shift();
      this.base++;
    }
    while (this.base + this.window.length <= i) {
      const line = this.next();
      if (line === undefined) return undefined;
      this.window.push(line);
    }
    return this.window[i - this.base];
  }

  private next(): Line | undefined {
    const content = this.content;
    while (this.start < content.length) {
      let end = content.indexOf('\n', this.start);
      if (end < 0) end = content.length;
      this.no++;
      const from = this.start;
      this.start = end + 1;
      let indent = from;
      while (indent < end && content.charCodeAt(indent) === 32) indent++;
      if (indent === end) continue;
      const c = content.charCodeAt(indent);
      if (c === 35 /* # */) continue;
      if (indent === from && (content.startsWith('---', from) || content.startsWith('...', from) || c === 37 /* % */)) unsupported();
      return { no: this.no, indent: indent - from, text: stripComment(content, indent, end) };
    }
    return undefined;
  }
}

/** The line `raw[from, to)` without its comment and trailing spaces; unsupported characters refuse it. */
function stripComment(raw: string, from: number, to: number): string {
  let quote = 0;
  let end = to;
  for (let i = from; i < to; i++) {
    const c = raw.charCodeAt(i);
    if (c < 32 || c === 127) unsupported(); // tabs, carriage returns, control characters
    if (quote !== 0) {
      if (c === quote) quote = 0;
      continue;
    }
    if ((c === 34 || c === 39) && (i === from || isValueStart(raw, i, from))) quote = c;
    else if (c === 35 && raw.charCodeAt(i - 1) === 32) {
      end = i;
      break;
    }
  }
  while (end > from && raw.charCodeAt(end - 1) === 32) end--;
  return raw.slice(from, end);
}

/** Whether a quote at `i` opens a quoted scalar: after `- ` or `: ` (else it is plain text); the line starts at `from`. */
function isValueStart(raw: string, i: number, from: number): boolean {
  let j = i - 1;
  while (j >= from && raw.charCodeAt(j) === 32) j--;
  if (j < from) return true;
  const c = raw.charCodeAt(j);
  return (c === 58 /* : */ || c === 45 /* - */) && j < i - 1;
}

/** Where `key:` ends in `text` (the index of the colon), or -1 when the text is not a mapping entry. */
function entryColon(text: string): number {
  const c = text.charCodeAt(0);
  if (c === 34 || c === 39) {
    const close = text.indexOf(String.fromCharCode(c), 1);
    if (close < 0) unsupported();
    const after = text.charCodeAt(close + 1);
    if (after === 58 && (close + 2 === text.length || text.charCodeAt(close + 2) === 32)) return close + 1;
    return -1;
  }
  for (let i = text.indexOf(':'); i >= 0; i = text.indexOf(':', i + 1)) {
    if (i + 1 === text.length || text.charCodeAt(i + 1) === 32) return i;
  }
  return -1;
}

function isSeqEntry(text: string): boolean {
  return text.charCodeAt(0) === 45 && (text.length === 1 || text.charCodeAt(1) === 32);
}

class BlockReader {
  pos = 0;
  /** Key nodes by their spelling. */
  private readonly keys = new Map<string, ScalarNode>();

  constructor(
    private readonly lines: Lines,
    private readonly budget: LoadBudget,
  ) {}

  /** The block node starting at line `pos`, whose lines are at column `indent`, at `place`. */
  node(at: number, indent: number, place: Place): TreeNode {
    this.pos = at;
    const line = this.lines.at(at)!;
    if (line.indent !== indent) unsupported();
    if (isSeqEntry(line.text)) return this.sequence(indent, line.text, place);
    if (entryColon(line.text) >= 0) return this.mapping(indent, line.text, place);
    // A scalar document, or a multi-line scalar: the general reader's.
    return unsupported();
  }

  /** A block sequence at column `indent`, whose first entry is line `pos`, `firstText`. */
  private sequence(indent: number, firstText: string, place: Place): SeqNode {
    // The map items of a `descriptors` list are descriptors (the decoder counts the same ones).
    const itemPlace = place === Place.DescriptorList ? Place.Descriptor : Place.Other;
    this.budget.node();
    const start = this.lines.at(this.pos)!;
    const items: TreeNode[] = [];
    let text = firstText;
    for (;;) {
      const line = this.lines.at(this.pos)!;
      // After `-`: spaces, then the item on this line, or on the next deeper lines.
      let rest = 1;
      while (rest < text.length && text.charCodeAt(rest) === 32) rest++;
      const itemCol = indent + rest;
      const item = text.slice(rest);
      if (item === '') {
        const next = this.lines.at(this.pos + 1);
        if (next !== undefined && next.indent > indent) items.push(this.node(this.pos + 1, next.indent, itemPlace));
        else {
          items.push(this.nullAt(line.no));
          this.pos++;
        }
      } else if (isSeqEntry(item)) {
        return unsupported(); // `- - x`
      } else if (isFlowStart(item)) {
        items.push(this.flowLine(item, line.no, itemPlace));
        this.pos++;
        this.checkNoContinuation(indent);
      } else if (entryColon(item) >= 0) {
        items.push(this.mapping(itemCol, item, itemPlace));
      } else {
        items.push(this.scalar(item, line.no));
        this.pos++;
        this.checkNoContinuation(indent);
      }
      const next = this.lines.at(this.pos);
      if (next === undefined || next.indent < indent) break;
      if (next.indent > indent || !isSeqEntry(next.text)) {
        // A mapping key at the sequence's column ends a sequence that is a mapping value.
        if (next.indent === indent && entryColon(next.text) >= 0) break;
        unsupported();
      }
      text = next.text;
    }
    // slice(): an exact-size copy (a grown array keeps room for 17 entries: 150 bytes for a 2-pair map).
    return { kind: 'seq', items: items.slice(), line: start.no };
  }

  /** A block mapping at column `indent`, whose first entry is line `pos`, `firstText` (maybe after `- `). */
  private mapping(indent: number, firstText: string, place: Place): MapNode {
    this.budget.node();
    if (place === Place.Descriptor) this.budget.readDescriptor();
    const startNo = this.lines.at(this.pos)!.no;
    const pairs: Array<readonly [TreeNode, TreeNode]> = [];
    let text = firstText;
    for (;;) {
      const line = this.lines.at(this.pos)!;
      const colon = entryColon(text);
      if (colon < 0) unsupported();
      let keyEnd = colon;
      while (keyEnd > 0 && text.charCodeAt(keyEnd - 1) === 32) keyEnd--;
      const keyText = text.slice(0, keyEnd);
      const key = this.key(keyText);
      const valuePlace = (place === Place.Root || place === Place.Descriptor) && key.text === 'descriptors' ? Place.DescriptorList : Place.Other;
      let v = colon + 1;
      while (v < text.length && text.charCodeAt(v) === 32) v++;
      const valueText = text.slice(v);
      let value: TreeNode;
      if (isFlowStart(valueText)) {
        value = this.flowLine(valueText, line.no, valuePlace);
        this.pos++;
        this.checkNoContinuation(indent);
      } else if (valueText !== '') {
        if (isSeqEntry(valueText) || entryColon(valueText) >= 0) unsupported();
        value = this.scalar(valueText, line.no);
        this.pos++;
        this.checkNoContinuation(indent);
      } else {
        const next = this.lines.at(this.pos + 1);
        if (next !== undefined && next.indent > indent) value = this.node(this.pos + 1, next.indent, valuePlace);
        else if (next !== undefined && next.indent === indent && isSeqEntry(next.text)) {
          this.pos++;
          value = this.sequence(indent, next.text, valuePlace);
        } else {
          value = this.nullAt(line.no);
          this.pos++;
        }
      }
      pairs.push([key, value]);
      const next = this.lines.at(this.pos);
      if (next === undefined || next.indent < indent) break;
      if (next.indent > indent || isSeqEntry(next.text)) unsupported();
      text = next.text;
    }
    return { kind: 'map', pairs: pairs.slice(), line: startNo };
  }

  /** A flow collection that is the whole of `text` (the rest of line `no`), at `place`. */
  private flowLine(text: string, no: number, place: Place): TreeNode {
    const flow = new FlowReader(text, no, place, this);
    const node = flow.collection();
    if (flow.pos !== text.length) unsupported();
    return node;
  }

  /** A map made by the flow reader at `place` (counted as the block ones are). */
  flowMap(pairs: Array<readonly [TreeNode, TreeNode]>, no: number, place: Place): MapNode {
    this.budget.node();
    if (place === Place.Descriptor) this.budget.readDescriptor();
    return { kind: 'map', pairs: pairs.slice(), line: no };
  }

  flowSeq(items: TreeNode[], no: number): SeqNode {
    this.budget.node();
    return { kind: 'seq', items: items.slice(), line: no };
  }

  /** A scalar value line is never followed by a deeper line (that would be a multi-line scalar). */
  private checkNoContinuation(indent: number): void {
    const next = this.lines.at(this.pos);
    if (next !== undefined && next.indent > indent) unsupported();
  }

  /** A key: one node per spelling, without a line (the general reader makes keys the same way). */
  key(text: string): ScalarNode {
    if (text === '<<' || text === '') unsupported();
    const known = this.keys.get(text);
    if (known !== undefined) {
      this.budget.node();
      return known;
    }
    const key = this.scalar(text, undefined);
    this.keys.set(text, key);
    return key;
  }

  private nullAt(no: number): ScalarNode {
    this.budget.node();
    return makeScalar({ type: 'null', value: null }, '', undefined, no);
  }

  scalar(text: string, no: number | undefined): ScalarNode {
    this.budget.node();
    const c = text.charCodeAt(0);
    if (c === 39 /* ' */) {
      if (text.length < 2 || text.charCodeAt(text.length - 1) !== 39) unsupported();
      const inner = text.slice(1, -1);
      // '' is an escaped quote; a lone quote inside ends the scalar early (something else follows).
      if (/'(?!')/.test(inner.replace(/''/g, ''))) unsupported();
      const value = inner.replace(/''/g, "'");
      return makeScalar({ type: 'str', value }, value, undefined, no);
    }
    if (c === 34 /* " */) {
      if (text.length < 2 || text.charCodeAt(text.length - 1) !== 34) unsupported();
      const value = text.slice(1, -1);
      if (value.includes('"') || value.includes('\\')) unsupported();
      return makeScalar({ type: 'str', value }, value, undefined, no);
    }
    // Indicators that start something other than a plain scalar (or a plain one we leave alone).
    if (INDICATORS.has(c)) unsupported();
    // (` #` cannot be left: the comment was cut at it.)
    if (text.charCodeAt(text.length - 1) === 58 || text.includes(': ')) unsupported();
    return makeScalar(resolvePlain(text), text, undefined, no);
  }
}

/** `- x` or `-`: a block entry, which a flow collection cannot hold. */
function isBlockEntry(text: string): boolean {
  return text.charCodeAt(0) === 45 && (text.length === 1 || text.charCodeAt(1) === 32);
}

function isFlowStart(text: string): boolean {
  const c = text.charCodeAt(0);
  return c === 123 /* { */ || c === 91 /* [ */;
}

/**
 * A flow collection within one line, of the simple kind configs use:
 * `{unit: second, requests_per_unit: 5}`, `[a, b]`, nested, `{}` and `[]`. Each entry is a key,
 * `: ` and a value (maps) or a value (lists); a value is a nested collection or a scalar as the
 * block reader reads one (plain, or simply quoted). Anything else (`{a}`, `{a:1}`, an empty value,
 * a trailing comma, `[a: b]`, a `,` or bracket inside a scalar) is left to the general reader.
 */
class FlowReader {
  pos = 0;
  private depth = 0;

  constructor(
    private readonly text: string,
    private readonly no: number,
    private readonly place: Place,
    private readonly block: BlockReader,
  ) {}

  collection(place: Place = this.place): TreeNode {
    // Deeper nesting than a config has: the general reader's (and no deep recursion here).
    if (++this.depth > 32) unsupported();
    const open = this.text.charCodeAt(this.pos);
    const node = open === 123 ? this.map(place) : open === 91 ? this.seq(place) : unsupported();
    this.depth--;
    return node;
  }

  private map(place: Place): MapNode {
    this.pos++; // {
    const pairs: Array<readonly [TreeNode, TreeNode]> = [];
    this.spaces();
    if (this.text.charCodeAt(this.pos) === 125 /* } */) {
      this.pos++;
      return this.block.flowMap(pairs, this.no, place);
    }
    for (;;) {
      const colon = this.text.indexOf(':', this.pos);
      if (colon < 0 || this.text.charCodeAt(colon + 1) !== 32) unsupported();
      const keyText = this.text.slice(this.pos, colon);
      if (keyText === '' || keyText.charCodeAt(keyText.length - 1) === 32 || /[,{}[\]]/.test(keyText) || isBlockEntry(keyText)) unsupported();
      const key = this.block.key(keyText);
      this.pos = colon + 1;
      this.spaces();
      const valuePlace = (place === Place.Root || place === Place.Descriptor) && key.text === 'descriptors' ? Place.DescriptorList : Place.Other;
      pairs.push([key, this.value(125, valuePlace)]);
      if (this.close(125)) return this.block.flowMap(pairs, this.no, place);
    }
  }

  private seq(place: Place): SeqNode {
    this.pos++; // [
    const items: TreeNode[] = [];
    const itemPlace = place === Place.DescriptorList ? Place.Descriptor : Place.Other;
    this.spaces();
    if (this.text.charCodeAt(this.pos) === 93 /* ] */) {
      this.pos++;
      return this.block.flowSeq(items, this.no);
    }
    for (;;) {
      items.push(this.value(93, itemPlace));
      if (this.close(93)) return this.block.flowSeq(items, this.no);
    }
  }

  /** An entry's value, up to the next `,` or the closing bracket `close`. */
  private value(close: number, place: Place): TreeNode {
    const c = this.text.charCodeAt(this.pos);
    if (c === 123 || c === 91) return this.collection(place);
    let end = this.pos;
    while (end < this.text.length) {
      const e = this.text.charCodeAt(end);
      if (e === 44 /* , */ || e === close) break;
      if (e === 123 || e === 125 || e === 91 || e === 93) unsupported();
      end++;
    }
    let last = end;
    while (last > this.pos && this.text.charCodeAt(last - 1) === 32) last--;
    const scalarText = this.text.slice(this.pos, last);
    if (scalarText === '' || isBlockEntry(scalarText)) unsupported();
    this.pos = end;
    return this.block.scalar(scalarText, this.no);
  }

  /** After an entry: `, ` and another entry (false), or the closing bracket (true). */
  private close(bracket: number): boolean {
    this.spaces();
    const c = this.text.charCodeAt(this.pos);
    if (c === bracket) {
      this.pos++;
      return true;
    }
    if (c !== 44) unsupported();
    this.pos++;
    this.spaces();
    // A trailing comma, or an empty entry.
    const next = this.text.charCodeAt(this.pos);
    if (next === bracket || next === 44 || Number.isNaN(next)) unsupported();
    return false;
  }

  private spaces(): void {
    while (this.text.charCodeAt(this.pos) === 32) this.pos++;
  }
}

const INDICATORS: ReadonlySet<number> = new Set([...'[]{}&*!|>%@`?,#:'].map((ch) => ch.charCodeAt(0)));

