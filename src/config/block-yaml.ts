/**
 * A fast reader for the YAML that rate limit configs are written in: block mappings and sequences
 * of single-line plain or simply quoted scalars, with comments. It builds the same tree as the
 * general reader (`parseYaml` in tree.ts over the `yaml` package), in a single pass over the text
 * and without the general reader's document model, which costs about 80 bytes of heap and a
 * microsecond and a half per byte of input (a 10 MB config: 13 s and 1 GB before this reader).
 *
 * Anything outside that subset (flow collections, anchors and aliases, tags, block scalars,
 * multi-line scalars, escapes, merge keys, several documents, tabs, unusual indentation) makes it
 * answer `undefined`, and the caller reads the document with the general reader, which also
 * produces every syntax error text. So a document is either read here exactly as the general
 * reader would, or not at all.
 */
import { makeScalar, resolvePlain, type MapNode, type ScalarNode, type SeqNode, type TreeNode } from './tree';

/** Not in the subset: the general reader takes the document. */
class Unsupported extends Error {}

interface Line {
  /** 1-based line number. */
  readonly no: number;
  /** Column of the first content character. */
  readonly indent: number;
  /** The content from `indent`, comment and trailing blanks removed. */
  readonly text: string;
}

/** The tree of `content`, null for an empty document, undefined when outside the subset. */
export function parseBlockYaml(content: string): TreeNode | null | undefined {
  try {
    const lines = splitLines(content);
    if (lines.length === 0) return null;
    const reader = new BlockReader(lines);
    const root = reader.node(0, lines[0]!.indent);
    if (reader.pos !== lines.length) return undefined;
    return root;
  } catch (e) {
    if (e instanceof Unsupported) return undefined;
    throw e;
  }
}

function unsupported(): never {
  throw new Unsupported();
}

function splitLines(content: string): Line[] {
  const out: Line[] = [];
  let start = 0;
  let no = 0;
  if (content.charCodeAt(0) === 0xfeff) unsupported();
  while (start < content.length) {
    let end = content.indexOf('\n', start);
    if (end < 0) end = content.length;
    no++;
    const raw = content.slice(start, end);
    start = end + 1;
    let indent = 0;
    while (indent < raw.length && raw.charCodeAt(indent) === 32) indent++;
    if (indent === raw.length) continue;
    const c = raw.charCodeAt(indent);
    if (c === 35 /* # */) continue;
    if (indent === 0 && (raw.startsWith('---') || raw.startsWith('...') || c === 37 /* % */)) unsupported();
    const text = stripComment(raw, indent);
    out.push({ no, indent, text });
  }
  return out;
}

/** The line's content without its comment and trailing spaces; unsupported characters refuse it. */
function stripComment(raw: string, from: number): string {
  let quote = 0;
  let end = raw.length;
  for (let i = from; i < raw.length; i++) {
    const c = raw.charCodeAt(i);
    if (c < 32 || c === 127) unsupported(); // tabs, carriage returns, control characters
    if (quote !== 0) {
      if (c === quote) quote = 0;
      continue;
    }
    if ((c === 34 || c === 39) && (i === from || isValueStart(raw, i))) quote = c;
    else if (c === 35 && raw.charCodeAt(i - 1) === 32) {
      end = i;
      break;
    }
  }
  while (end > from && raw.charCodeAt(end - 1) === 32) end--;
  return raw.slice(from, end);
}

/** Whether a quote at `i` opens a quoted scalar: after `- ` or `: ` (else it is plain text). */
function isValueStart(raw: string, i: number): boolean {
  let j = i - 1;
  while (j >= 0 && raw.charCodeAt(j) === 32) j--;
  if (j < 0) return true;
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
  constructor(private readonly lines: readonly Line[]) {}

  /** The block node starting at line `pos`, whose lines are at column `indent`. */
  node(at: number, indent: number): TreeNode {
    this.pos = at;
    const line = this.lines[at]!;
    if (line.indent !== indent) unsupported();
    if (isSeqEntry(line.text)) return this.sequence(indent, line.text);
    if (entryColon(line.text) >= 0) return this.mapping(indent, line.text);
    // A scalar document, or a multi-line scalar: the general reader's.
    return unsupported();
  }

  /** A block sequence at column `indent`, whose first entry is line `pos`, `firstText`. */
  private sequence(indent: number, firstText: string): SeqNode {
    const start = this.lines[this.pos]!;
    const items: TreeNode[] = [];
    let text = firstText;
    for (;;) {
      const line = this.lines[this.pos]!;
      // After `-`: spaces, then the item on this line, or on the next deeper lines.
      let rest = 1;
      while (rest < text.length && text.charCodeAt(rest) === 32) rest++;
      const itemCol = indent + rest;
      const item = text.slice(rest);
      if (item === '') {
        const next = this.lines[this.pos + 1];
        if (next !== undefined && next.indent > indent) items.push(this.node(this.pos + 1, next.indent));
        else {
          items.push(nullAt(line.no));
          this.pos++;
        }
      } else if (isSeqEntry(item)) {
        return unsupported(); // `- - x`
      } else if (entryColon(item) >= 0) {
        items.push(this.mapping(itemCol, item));
      } else {
        items.push(this.scalar(item, line.no));
        this.pos++;
        this.checkNoContinuation(indent);
      }
      const next = this.lines[this.pos];
      if (next === undefined || next.indent < indent) break;
      if (next.indent > indent || !isSeqEntry(next.text)) {
        // A mapping key at the sequence's column ends a sequence that is a mapping value.
        if (next.indent === indent && entryColon(next.text) >= 0) break;
        unsupported();
      }
      text = next.text;
    }
    return { kind: 'seq', items, line: start.no };
  }

  /** A block mapping at column `indent`, whose first entry is line `pos`, `firstText` (maybe after `- `). */
  private mapping(indent: number, firstText: string): MapNode {
    const startNo = this.lines[this.pos]!.no;
    const pairs: Array<readonly [TreeNode, TreeNode]> = [];
    let text = firstText;
    for (;;) {
      const line = this.lines[this.pos]!;
      const colon = entryColon(text);
      if (colon < 0) unsupported();
      let keyEnd = colon;
      while (keyEnd > 0 && text.charCodeAt(keyEnd - 1) === 32) keyEnd--;
      const keyText = text.slice(0, keyEnd);
      const key = this.key(keyText, line.no);
      let v = colon + 1;
      while (v < text.length && text.charCodeAt(v) === 32) v++;
      const valueText = text.slice(v);
      let value: TreeNode;
      if (valueText !== '') {
        if (isSeqEntry(valueText) || entryColon(valueText) >= 0) unsupported();
        value = this.scalar(valueText, line.no);
        this.pos++;
        this.checkNoContinuation(indent);
      } else {
        const next = this.lines[this.pos + 1];
        if (next !== undefined && next.indent > indent) value = this.node(this.pos + 1, next.indent);
        else if (next !== undefined && next.indent === indent && isSeqEntry(next.text)) {
          this.pos++;
          value = this.sequence(indent, next.text);
        } else {
          value = nullAt(line.no);
          this.pos++;
        }
      }
      pairs.push([key, value]);
      const next = this.lines[this.pos];
      if (next === undefined || next.indent < indent) break;
      if (next.indent > indent || isSeqEntry(next.text)) unsupported();
      text = next.text;
    }
    return { kind: 'map', pairs, line: startNo };
  }

  /** A scalar value line is never followed by a deeper line (that would be a multi-line scalar). */
  private checkNoContinuation(indent: number): void {
    const next = this.lines[this.pos];
    if (next !== undefined && next.indent > indent) unsupported();
  }

  private key(text: string, no: number): ScalarNode {
    if (text === '<<' || text === '') unsupported();
    return this.scalar(text, no);
  }

  private scalar(text: string, no: number): ScalarNode {
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

const INDICATORS: ReadonlySet<number> = new Set([...'[]{}&*!|>%@`?,#:'].map((ch) => ch.charCodeAt(0)));

function nullAt(no: number): ScalarNode {
  return makeScalar({ type: 'null', value: null }, '', undefined, no);
}
