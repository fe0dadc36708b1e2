/**
 * HPACK (RFC 7541) for a server: a decoder of request header blocks with its dynamic table, and an
 * encoder of response header blocks that needs no state (literals without indexing), so its
 * constant blocks are built once and copied as bytes.
 */
import { decodeHuffman, HuffmanError } from './huffman';

/** RFC 7541 Appendix A, indexes 1..61. */
const STATIC_TABLE: readonly (readonly [string, string])[] = [
  [':authority', ''],
  [':method', 'GET'],
  [':method', 'POST'],
  [':path', '/'],
  [':path', '/index.html'],
  [':scheme', 'http'],
  [':scheme', 'https'],
  [':status', '200'],
  [':status', '204'],
  [':status', '206'],
  [':status', '304'],
  [':status', '400'],
  [':status', '404'],
  [':status', '500'],
  ['accept-charset', ''],
  ['accept-encoding', 'gzip, deflate'],
  ['accept-language', ''],
  ['accept-ranges', ''],
  ['accept', ''],
  ['access-control-allow-origin', ''],
  ['age', ''],
  ['allow', ''],
  ['authorization', ''],
  ['cache-control', ''],
  ['content-disposition', ''],
  ['content-encoding', ''],
  ['content-language', ''],
  ['content-length', ''],
  ['content-location', ''],
  ['content-range', ''],
  ['content-type', ''],
  ['cookie', ''],
  ['date', ''],
  ['etag', ''],
  ['expect', ''],
  ['expires', ''],
  ['from', ''],
  ['host', ''],
  ['if-match', ''],
  ['if-modified-since', ''],
  ['if-none-match', ''],
  ['if-range', ''],
  ['if-unmodified-since', ''],
  ['last-modified', ''],
  ['link', ''],
  ['location', ''],
  ['max-forwards', ''],
  ['proxy-authenticate', ''],
  ['proxy-authorization', ''],
  ['range', ''],
  ['referer', ''],
  ['refresh', ''],
  ['retry-after', ''],
  ['server', ''],
  ['set-cookie', ''],
  ['strict-transport-security', ''],
  ['transfer-encoding', ''],
  ['user-agent', ''],
  ['vary', ''],
  ['via', ''],
  ['www-authenticate', ''],
];
const STATIC_COUNT = STATIC_TABLE.length;

/** The size of a table entry or of a field in a header list: its octets plus 32 (RFC 7541 4.1). */
const ENTRY_OVERHEAD = 32;

const NO_ENTRIES: string[] = [];

/** Header blocks that do not decode: a connection error of type COMPRESSION_ERROR. */
export class HpackError extends Error {}

/** Largest integer accepted in a representation: no header needs more, and it stays exact. */
const MAX_INTEGER = 2 ** 28;

/**
 * Decodes request header blocks in order (they share the dynamic table, so every block of the
 * connection must be decoded, including the blocks of refused streams).
 */
export class HpackDecoder {
  // The dynamic table as a ring, newest entry at `head`; capacity covers the smallest entries.
  // Made at the first insert: a connection whose client never indexes a field holds none.
  private names: string[] = NO_ENTRIES;
  private values: string[] = NO_ENTRIES;
  private head = 0;
  private count = 0;
  private size = 0;
  private maxSize: number;
  /** True when the last decoded block's header list went over the limit (its fields were cut). */
  tooLarge = false;
  /** How many representations the last block held: the work its decoding took. */
  representations = 0;

  /** `tableSizeLimit` is our SETTINGS_HEADER_TABLE_SIZE (4096 unless announced otherwise). */
  constructor(private readonly tableSizeLimit = 4096) {
    this.maxSize = tableSizeLimit;
  }

  /**
   * Decodes `block[start, end)` into `fields` (name, value, name, value...). Once the header list
   * passes `maxListBytes`, the remaining fields are decoded (the table must stay in step) but not
   * kept, and {@link tooLarge} is set. Throws {@link HpackError} for a malformed block.
   */
  decode(block: Buffer, start: number, end: number, fields: string[], maxListBytes: number): void {
    fields.length = 0;
    this.tooLarge = false;
    let listBytes = 0;
    let pos = start;
    let sizeUpdateAllowed = true;
    let representations = 0;
    while (pos < end) {
      representations++;
      const first = block[pos]!;
      let name: string;
      let value: string;
      if (first >= 0x80) {
        // Indexed field.
        const r = readInteger(block, pos, end, 7);
        pos = r.next;
        if (r.value === 0) throw new HpackError('index 0 in an indexed field');
        name = this.nameAt(r.value);
        value = this.valueAt(r.value);
      } else if (first >= 0x40 || first < 0x20) {
        // Literal: with incremental indexing (6-bit index), or without / never indexed (4-bit).
        const indexing = first >= 0x40;
        const r = readInteger(block, pos, end, indexing ? 6 : 4);
        pos = r.next;
        if (r.value === 0) {
          const n = readString(block, pos, end);
          name = n.text;
          pos = n.next;
        } else name = this.nameAt(r.value);
        const v = readString(block, pos, end);
        value = v.text;
        pos = v.next;
        if (indexing) this.insert(name, value);
      } else {
        // Dynamic table size update: only before the first field of a block.
        if (!sizeUpdateAllowed) throw new HpackError('a dynamic table size update after a field');
        const r = readInteger(block, pos, end, 5);
        pos = r.next;
        if (r.value > this.tableSizeLimit) throw new HpackError(`dynamic table size ${r.value} above the limit ${this.tableSizeLimit}`);
        this.maxSize = r.value;
        this.evictTo(this.maxSize);
        continue;
      }
      sizeUpdateAllowed = false;
      listBytes += name.length + value.length + ENTRY_OVERHEAD;
      if (listBytes > maxListBytes) this.tooLarge = true;
      else fields.push(name, value);
    }
    this.representations = representations;
  }

  private nameAt(index: number): string {
    if (index <= STATIC_COUNT) return STATIC_TABLE[index - 1]![0];
    return this.names[this.slot(index)]!;
  }

  private valueAt(index: number): string {
    if (index <= STATIC_COUNT) return STATIC_TABLE[index - 1]![1];
    return this.values[this.slot(index)]!;
  }

  /** The ring slot of dynamic index `index` (62 is the newest entry). */
  private slot(index: number): number {
    const age = index - STATIC_COUNT - 1;
    if (age >= this.count) throw new HpackError(`index ${index} beyond the table`);
    const capacity = this.names.length;
    return (this.head - age + capacity) % capacity;
  }

  private insert(name: string, value: string): void {
    const entrySize = name.length + value.length + ENTRY_OVERHEAD;
    if (entrySize > this.maxSize) {
      // RFC 7541 4.4: an entry larger than the table empties it and is not added.
      this.evictTo(0);
      return;
    }
    this.evictTo(this.maxSize - entrySize);
    if (this.names === NO_ENTRIES) {
      const slots = Math.max(1, Math.floor(this.tableSizeLimit / ENTRY_OVERHEAD));
      this.names = new Array<string>(slots);
      this.values = new Array<string>(slots);
    }
    const capacity = this.names.length;
    this.head = (this.head + 1) % capacity;
    this.names[this.head] = name;
    this.values[this.head] = value;
    this.count++;
    this.size += entrySize;
  }

  /** Drops the oldest entries until the table holds at most `limit` octets. */
  private evictTo(limit: number): void {
    const capacity = this.names.length;
    while (this.size > limit && this.count > 0) {
      const oldest = (this.head - this.count + 1 + capacity) % capacity;
      this.size -= this.names[oldest]!.length + this.values[oldest]!.length + ENTRY_OVERHEAD;
      this.names[oldest] = '';
      this.values[oldest] = '';
      this.count--;
    }
  }
}

/** The result of a read: a value and the position after it. Reused: read it before the next call. */
const intResult = { value: 0, next: 0 };
const strResult = { text: '', next: 0 };

/** An HPACK integer with an N-bit prefix (RFC 7541 5.1). */
function readInteger(buf: Buffer, pos: number, end: number, prefixBits: number): typeof intResult {
  const mask = (1 << prefixBits) - 1;
  let value = buf[pos++]! & mask;
  if (value === mask) {
    let factor = 1;
    let byte: number;
    do {
      if (pos >= end) throw new HpackError('an integer cut off by the end of the block');
      byte = buf[pos++]!;
      value += (byte & 0x7f) * factor;
      factor *= 128;
      // Both: a large value, and a long run of zero continuation bytes (the factor alone grows).
      if (value > MAX_INTEGER || factor > MAX_INTEGER * 128) throw new HpackError('an integer out of range');
    } while (byte >= 0x80);
  }
  intResult.value = value;
  intResult.next = pos;
  return intResult;
}

/** An HPACK string literal (RFC 7541 5.2), plain or Huffman-coded, as Latin-1 text. */
function readString(buf: Buffer, pos: number, end: number): typeof strResult {
  if (pos >= end) throw new HpackError('a string missing at the end of the block');
  const huffman = buf[pos]! >= 0x80;
  const r = readInteger(buf, pos, end, 7);
  const length = r.value;
  const from = r.next;
  if (from + length > end) throw new HpackError('a string longer than the block');
  if (huffman) {
    try {
      strResult.text = decodeHuffman(buf, from, from + length);
    } catch (err) {
      if (err instanceof HuffmanError) throw new HpackError(err.message);
      throw err;
    }
  } else strResult.text = buf.toString('latin1', from, from + length);
  strResult.next = from + length;
  return strResult;
}

/**
 * A response header block of literals without indexing and without Huffman coding: no encoder
 * state, any peer table size. `:status` 200 is the static entry 8. Names must be lower case; text
 * is written as Latin-1 (header values are ASCII here).
 */
export function encodeHeaderBlock(fields: readonly (readonly [string, string])[]): Buffer {
  const parts: number[] = [];
  const integer = (value: number, prefixBits: number, firstBits: number): void => {
    const mask = (1 << prefixBits) - 1;
    if (value < mask) {
      parts.push(firstBits | value);
      return;
    }
    parts.push(firstBits | mask);
    value -= mask;
    while (value >= 128) {
      parts.push((value % 128) | 0x80);
      value = Math.floor(value / 128);
    }
    parts.push(value);
  };
  const string = (text: string): void => {
    integer(text.length, 7, 0);
    for (let i = 0; i < text.length; i++) parts.push(text.charCodeAt(i) & 0xff);
  };
  for (const [name, value] of fields) {
    if (name === ':status' && value === '200') {
      parts.push(0x88);
      continue;
    }
    const index = STATIC_TABLE.findIndex(([n]) => n === name);
    if (index >= 0) integer(index + 1, 4, 0);
    else {
      parts.push(0);
      string(name);
    }
    string(value);
  }
  return Buffer.from(parts);
}
