/**
 * The size budget of one config load, counted while its documents are read, so that a config over
 * CONFIG_MAX_DESCRIPTORS is refused before it is built rather than after:
 *
 * - descriptors (every depth, every document, alias expansions included) are counted as the
 *   decoder makes them, and before that as the block reader meets them (an item of a
 *   `descriptors` list of the document or of a descriptor), so a file with too many stops there;
 * - YAML nodes (every key, value, map and list, metadata included) are counted as the tree readers
 *   make them: a load may hold {@link NODES_PER_DESCRIPTOR} per descriptor the cap allows (a
 *   descriptor with its limit is 11). The tree is what a load spends most memory on (about 1 KB a
 *   descriptor with the block reader, docs/configuration.md "Size limits"), and metadata makes
 *   nodes without descriptors, so the nodes have a budget of their own;
 * - before either reader runs, the text is scanned for an upper bound of its nodes
 *   ({@link countYamlNodes}: one pass, nothing built), so a text far over the budget is refused at
 *   once; a document outside the block reader's subset is read by the `yaml` package, whose
 *   document model is built before any node can be counted and costs about
 *   {@link GENERAL_READER_WEIGHT} times as much per node: each node the scan allows it weighs that much.
 *
 * A cap of 0 counts nothing. Exceeding the budget throws a {@link LoadBudgetError} whose message
 * names the setting; the loader prefixes it with the document's name.
 */

/** YAML nodes a load may hold for each descriptor CONFIG_MAX_DESCRIPTORS allows. */
export const NODES_PER_DESCRIPTOR = 16;

/**
 * How many block-reader nodes one node of the general reader (the `yaml` package) costs, measured:
 * 20,000 descriptors in flow style need 128-192 MiB of heap to load, in block style about 35 MiB.
 */
export const GENERAL_READER_WEIGHT = 4;

/** A load over its budget (the message names the setting; the loader adds the document's name). */
export class LoadBudgetError extends Error {}

/** What {@link LoadBudget.mark} saves. */
export interface BudgetMark {
  readonly nodes: number;
  readonly read: number;
}

export class LoadBudget {
  private descriptors = 0;
  /** Descriptors seen by the block reader (before the decoder counts them again). */
  private read = 0;
  private nodes = 0;
  private readonly maxNodes: number;

  /** `maxDescriptors`: CONFIG_MAX_DESCRIPTORS; 0 = no limit. */
  constructor(readonly maxDescriptors: number) {
    this.maxNodes = maxDescriptors * NODES_PER_DESCRIPTOR;
  }

  /** One more descriptor decoded. */
  descriptor(): void {
    if (this.maxDescriptors > 0 && ++this.descriptors > this.maxDescriptors) this.tooManyDescriptors();
  }

  /**
   * One more descriptor seen by the block reader, which stops a document at the descriptor past
   * the cap rather than after its whole tree; counted apart (the decoder counts them again).
   */
  readDescriptor(): void {
    if (this.maxDescriptors > 0 && ++this.read > this.maxDescriptors) this.tooManyDescriptors();
  }

  private tooManyDescriptors(): never {
    throw new LoadBudgetError(
      `the configuration has more than ${this.maxDescriptors} descriptors, the limit set by CONFIG_MAX_DESCRIPTORS; it was not loaded`,
    );
  }

  /** `n` more YAML nodes made by a tree reader. */
  node(n = 1): void {
    if (this.maxNodes === 0) return;
    this.nodes += n;
    if (this.nodes > this.maxNodes) {
      throw new LoadBudgetError(
        `the configuration has more than ${this.maxNodes} YAML nodes (${NODES_PER_DESCRIPTOR} for each of the ${this.maxDescriptors} descriptors CONFIG_MAX_DESCRIPTORS allows); it was not loaded`,
      );
    }
  }

  /** What the tree readers counted so far, to give back with {@link rewind} (a reader that declined a document). */
  mark(): BudgetMark {
    return { nodes: this.nodes, read: this.read };
  }

  rewind(mark: BudgetMark): void {
    this.nodes = mark.nodes;
    this.read = mark.read;
  }

  /**
   * Before a text with up to `upperBound` nodes ({@link countYamlNodes}) is parsed at all: refused
   * when even that many would not fit. Counts nothing (the readers count what they make).
   */
  scanned(upperBound: number): void {
    if (this.maxNodes === 0) return;
    const room = this.maxNodes - this.nodes;
    if (upperBound > room) {
      throw new LoadBudgetError(
        `the configuration has up to ${upperBound} YAML nodes, more than the ${room} left of ${this.maxNodes} ` +
          `(${NODES_PER_DESCRIPTOR} for each of the ${this.maxDescriptors} descriptors CONFIG_MAX_DESCRIPTORS allows); it was not loaded`,
      );
    }
  }

  /**
   * Before the general reader parses a text with up to `upperBound` nodes: refused when they would
   * not fit at {@link GENERAL_READER_WEIGHT} each. Counts nothing (its converter counts the nodes).
   */
  general(upperBound: number): void {
    if (this.maxNodes === 0) return;
    const room = Math.floor((this.maxNodes - this.nodes) / GENERAL_READER_WEIGHT);
    if (upperBound > room) {
      throw new LoadBudgetError(
        `the configuration has up to ${upperBound} YAML nodes outside the block style (flow collections, anchors, tags, ` +
          `multi-line or escaped scalars): read that way a node takes ${GENERAL_READER_WEIGHT} times the memory, so it may hold ` +
          `${room} where block style may hold ${this.maxNodes} (${NODES_PER_DESCRIPTOR} for each of the ${this.maxDescriptors} ` +
          `descriptors CONFIG_MAX_DESCRIPTORS allows); it was not loaded`,
      );
    }
  }
}

/** The budget that counts nothing (tools, tests, the management server's checks). */
export const NO_BUDGET = new LoadBudget(0);

/**
 * An upper bound on the YAML nodes `text` can hold (every document, before alias expansion), from
 * one pass over its characters without building anything. Comments are skipped (a `#` at the start
 * of a line or after a blank begins one, or sits inside a scalar, which holds no nodes); every other
 * character counts, quoted text included, so the bound never falls short:
 * - a `:` followed by a blank or the end of a line or text, or after a closing quote: a key and its
 *   value (2);
 * - a `-` followed by a blank or the end: an entry (1, its `:` counts the rest); a `?` so: a key
 *   and its value (2);
 * - `[` and `{`: the collection and its first entry, at most a one-pair map (4); `,`: the next entry (3);
 * - the first document (1), and one for every `---` and `...` (a document may follow each).
 * Each collection is counted as the value of the entry that holds it. The bound is close for block
 * style (a config's descriptor: 11 counted, 11 made) and about 1.5 times the nodes in flow style.
 */
export function countYamlNodes(text: string): number {
  let n = 1;
  const len = text.length;
  for (let i = 0; i < len; i++) {
    const c = text.charCodeAt(i);
    switch (c) {
      case 35 /* # */: {
        const prev = i === 0 ? 10 : text.charCodeAt(i - 1);
        if (prev === 32 || prev === 9 || prev === 10 || prev === 13) {
          const eol = text.indexOf('\n', i);
          if (eol < 0) return n;
          i = eol - 1;
        }
        break;
      }
      case 58 /* : */: {
        const next = i + 1 < len ? text.charCodeAt(i + 1) : 10;
        const prev = i === 0 ? 10 : text.charCodeAt(i - 1);
        if (isBlankOrEnd(next) || next === 44 || next === 93 || next === 125 || prev === 34 || prev === 39) n += 2;
        break;
      }
      case 45 /* - */: {
        const next = i + 1 < len ? text.charCodeAt(i + 1) : 10;
        if (isBlankOrEnd(next) || text.startsWith('--', i + 1)) n += 1;
        break;
      }
      case 63 /* ? */: {
        const next = i + 1 < len ? text.charCodeAt(i + 1) : 10;
        if (isBlankOrEnd(next)) n += 2;
        break;
      }
      case 46 /* . */:
        if (text.startsWith('..', i + 1)) n += 1;
        break;
      case 91 /* [ */:
      case 123 /* { */:
        n += 4;
        break;
      case 44 /* , */:
        n += 3;
        break;
      default:
        break;
    }
  }
  return n;
}

function isBlankOrEnd(c: number): boolean {
  return c === 32 || c === 9 || c === 10 || c === 13;
}
