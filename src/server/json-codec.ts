/**
 * The proto3-JSON codec of the HTTP `POST /json` endpoint, written by hand (no generated code, no
 * protobufjs): it sits on the hot path and must reject bad input exactly where Go's
 * `protojson.Unmarshal` does for `envoy.service.ratelimit.v3.RateLimitRequest`.
 *
 * Decoding is a single pass over the body that builds the internal request directly. Every field
 * has a known type, so a value of the wrong type is rejected at its first character and is never
 * scanned; unknown fields are errors (no DiscardUnknown); the message nesting is fixed (request →
 * descriptor → entry | override), so the parser never recurses more than four levels, whatever the
 * input (`{"domain":[[[[…]]]]}` 100k deep fails at the first `[`).
 *
 * protojson rules followed (google.golang.org/protobuf/encoding/protojson, internal/encoding/json):
 * - the top level must be an object; nothing but whitespace (space, tab, CR, LF) may follow it;
 *   an empty body or a leading BOM is an error;
 * - a field may be named by its lowerCamelCase JSON name or its proto name; an unknown name is an
 *   error; the same field twice (by either name) is an error, even when a value is `null`;
 * - `null` means "not set" for every field; inside a list, `null` is an error;
 * - strings must be JSON strings, without raw control characters, with valid escapes and no lone
 *   surrogates (`"\ud800"` is rejected, as Go rejects it);
 * - uint32 (`hitsAddend`, `requestsPerUnit`): a number or a string holding exactly a JSON number
 *   (no surrounding spaces), whose exact decimal value is an integer in [0, 4294967295]: `1.0`,
 *   `1e2`, `"100e-2"` and `-0` are integers, `1.5` and `-1` are not; protojson's cap of 20 digits
 *   when shifting an exponent is kept (`0.0001e21` is refused, as in Go);
 * - google.protobuf.UInt64Value (descriptor `hitsAddend`): a bare number or string, as uint32 but in
 *   [0, 2^64-1]. The internal type is a JS number, so values above Number.MAX_SAFE_INTEGER
 *   (2^53-1) are refused with their own error instead of being silently rounded (a hits_addend
 *   that large would make every counter overflow anyway). `0` is kept as present; `null` = absent;
 * - enum `unit` (envoy.type.v3.RateLimitUnit): a value name (case-sensitive; no WEEK in this enum)
 *   or an integer in int32 range; unknown integers pass through as numbers (open enum), an unknown
 *   name is an error; a numeric string is not accepted (protojson looks strings up as names).
 *
 * Deliberately stricter than Go in one corner case of invalid JSON that Go's tokenizer lets through:
 * an exponent without digits followed by a delimiter (`{"hitsAddend":1e}`) is refused here.
 *
 * Duplicate keys are why this is not JSON.parse plus validation: JSON.parse keeps the last of two
 * equal keys without telling (a reviver cannot see it either), while protojson refuses them.
 */
import type { Descriptor, DescriptorStatus, Entry, HeaderValue, JsonObject, LimitOverride, RateLimitRequest, RateLimitResponse } from '../core/rls';
import { UNIT_NAMES } from '../core/rls';
import { MAX_UINT32 } from '../limiter/service';

/** Any body protojson.Unmarshal would reject (HTTP 400). The message is one line: where, then what. */
export class JsonRequestError extends Error {
  override readonly name = 'JsonRequestError';
  constructor(
    message: string,
    /** Field path of the problem, e.g. `descriptors[0].entries[1].key`; '' for the top level. */
    readonly path: string,
    /** UTF-16 offset in the body where the problem was found (undefined when not known). */
    readonly offset: number | undefined,
  ) {
    super(message);
  }
}

/** Largest value of a uint32 field. */
const MAX_UINT32_STR = '4294967295';
const MAX_UINT64_STR = '18446744073709551615';
const MAX_SAFE_STR = String(Number.MAX_SAFE_INTEGER); // 9007199254740991, 16 digits
const MAX_INT32_STR = '2147483647';
const MIN_INT32_ABS_STR = '2147483648';

/** envoy.type.v3.RateLimitUnit names (the override's unit; it has no WEEK). */
function rateLimitUnitByName(name: string): number {
  switch (name) {
    case 'UNKNOWN':
      return 0;
    case 'SECOND':
      return 1;
    case 'MINUTE':
      return 2;
    case 'HOUR':
      return 3;
    case 'DAY':
      return 4;
    case 'MONTH':
      return 5;
    case 'YEAR':
      return 6;
    default:
      return -1;
  }
}

// ---------------------------------------------------------------------------------------------
// Numbers

const NOT_INTEGER = 0;
const TOO_LARGE = 1;

function isDigit(c: number): boolean {
  return c >= 48 && c <= 57;
}

/** Go's isNotDelim: a character that may not directly follow a number or a literal. */
function isNotDelim(c: number): boolean {
  return (
    (c >= 48 && c <= 57) ||
    (c >= 97 && c <= 122) ||
    (c >= 65 && c <= 90) ||
    c === 45 || // -
    c === 43 || // +
    c === 46 || // .
    c === 95 // _
  );
}

/**
 * Scans a strict JSON number starting at `i` (`-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`)
 * and returns its end, or -1 when there is none or when it runs into a non-delimiter (`01`, `1.`,
 * `1e`, `1x`), as Go's tokenizer reports "invalid number".
 */
function scanNumber(s: string, i: number): number {
  const len = s.length;
  if (i < len && s.charCodeAt(i) === 45) i++;
  if (i >= len) return -1;
  let c = s.charCodeAt(i);
  if (c === 48) i++;
  else if (c >= 49 && c <= 57) {
    i++;
    while (i < len && isDigit(s.charCodeAt(i))) i++;
  } else return -1;
  if (i < len && s.charCodeAt(i) === 46) {
    i++;
    if (i >= len || !isDigit(s.charCodeAt(i))) return -1;
    while (i < len && isDigit(s.charCodeAt(i))) i++;
  }
  if (i < len && ((c = s.charCodeAt(i)) === 101 || c === 69)) {
    i++;
    if (i < len && ((c = s.charCodeAt(i)) === 43 || c === 45)) i++;
    if (i >= len || !isDigit(s.charCodeAt(i))) return -1;
    while (i < len && isDigit(s.charCodeAt(i))) i++;
  }
  if (i < len && isNotDelim(s.charCodeAt(i))) return -1;
  return i;
}

/**
 * The exact integer value of the valid JSON number literal `s[start, end)`, as protojson computes
 * it (internal/encoding/json normalizeToIntString): a canonical decimal string (`-` only for
 * non-zero values, no leading zeros), NOT_INTEGER when the value has a fractional part, or
 * TOO_LARGE when it has more than 20 digits (or an exponent beyond int32).
 */
function integerDigits(s: string, start: number, end: number): string | typeof NOT_INTEGER | typeof TOO_LARGE {
  let i = start;
  let neg = false;
  if (s.charCodeAt(i) === 45) {
    neg = true;
    i++;
  }
  let intStart = i;
  let intEnd: number;
  if (s.charCodeAt(i) === 48) {
    i++;
    intStart = intEnd = i; // a leading 0 is the whole integer part and contributes no digit
  } else {
    while (i < end && isDigit(s.charCodeAt(i))) i++;
    intEnd = i;
  }
  let fracStart = i;
  let fracEnd = i;
  if (i < end && s.charCodeAt(i) === 46) {
    i++;
    fracStart = i;
    while (i < end && isDigit(s.charCodeAt(i))) i++;
    fracEnd = i;
    while (fracEnd > fracStart && s.charCodeAt(fracEnd - 1) === 48) fracEnd--;
  }
  const intSize = intEnd - intStart;
  const fracSize = fracEnd - fracStart;
  if (intSize === 0 && fracSize === 0) return '0';

  let exp = 0;
  if (i < end) {
    // 'e' or 'E'
    i++;
    let expNeg = false;
    const c = s.charCodeAt(i);
    if (c === 43) i++;
    else if (c === 45) {
      expNeg = true;
      i++;
    }
    while (i < end - 1 && s.charCodeAt(i) === 48) i++;
    const digits = end - i;
    // Go parses the exponent as an int32; beyond that the number is not converted.
    if (digits > 10) return expNeg ? NOT_INTEGER : TOO_LARGE;
    exp = Number(s.slice(i, end));
    if (expNeg) exp = -exp;
    if (exp > 2147483647 || exp < -2147483648) return expNeg ? NOT_INTEGER : TOO_LARGE;
  }

  let num: string;
  if (exp >= 0) {
    if (fracSize > exp) return NOT_INTEGER;
    if (intSize + exp > 20) return TOO_LARGE; // protojson's maxDigits (max uint64 has 20)
    num = s.slice(intStart, intEnd) + s.slice(fracStart, fracEnd);
    if (exp > fracSize) num += '0'.repeat(exp - fracSize);
    if (intSize === 0) {
      let z = 0;
      while (num.charCodeAt(z) === 48) z++;
      num = num.slice(z);
    }
  } else {
    if (fracSize > 0) return NOT_INTEGER;
    const index = intSize + exp;
    if (index <= 0) return NOT_INTEGER; // the first integer digit is never 0
    for (let k = intStart + index; k < intEnd; k++) {
      if (s.charCodeAt(k) !== 48) return NOT_INTEGER;
    }
    num = s.slice(intStart, intStart + index);
  }
  return neg ? '-' + num : num;
}

/** `a > b` for canonical decimal digit strings of the same length or not. */
function decimalGreater(a: string, b: string): boolean {
  return a.length !== b.length ? a.length > b.length : a > b;
}

const enum IntKind {
  Uint32,
  Uint64,
  Int32,
}

// ---------------------------------------------------------------------------------------------
// Request parser

/** Field bits used to detect a field given twice (by either name). */
const F1 = 1;
const F2 = 2;
const F3 = 4;

class RequestParser {
  private pos = 0;
  /** Path of the value being parsed: field names and list indices. Turned into text on error only. */
  private readonly segs: (string | number)[] = [];

  constructor(private readonly src: string) {}

  parse(): RateLimitRequest {
    const src = this.src;
    if (src.length === 0) this.fail('empty request body', 0);
    if (src.charCodeAt(0) === 0xfeff) {
      this.fail('invalid JSON at line 1, column 1: a byte order mark (U+FEFF) is not allowed', 0);
    }
    this.skipWs();
    if (this.pos >= src.length) this.fail('request body contains only whitespace', this.pos);
    const req = this.parseRequest();
    this.skipWs();
    if (this.pos < src.length) this.syntax('unexpected data after the top-level object');
    return req;
  }

  // --- messages -----------------------------------------------------------------------------

  private parseRequest(): RateLimitRequest {
    let domain = '';
    let descriptors: Descriptor[] = [];
    let hitsAddend = 0;
    if (this.openObject('the request')) {
      let seen = 0;
      const segs = this.segs;
      do {
        const keyPos = this.pos;
        const key = this.readKey();
        let bit: number;
        switch (key) {
          case 'domain':
            bit = F1;
            break;
          case 'descriptors':
            bit = F2;
            break;
          case 'hitsAddend':
          case 'hits_addend':
            bit = F3;
            break;
          default:
            return this.unknownField(key, keyPos);
        }
        if ((seen & bit) !== 0) this.duplicateField(key, keyPos);
        seen |= bit;
        segs.push(key);
        if (!this.takeNull()) {
          if (bit === F1) domain = this.readString();
          else if (bit === F2) descriptors = this.parseList(() => this.parseDescriptor());
          else hitsAddend = this.readInteger(IntKind.Uint32);
        }
        segs.pop();
      } while (this.nextMember());
    }
    return { domain, descriptors, hitsAddend };
  }

  /** A repeated message field: `[item, ...]`, with the index kept in the error path. */
  private parseList<T>(item: () => T): T[] {
    const list: T[] = [];
    if (!this.openArray()) return list;
    const segs = this.segs;
    const at = segs.length;
    let i = 0;
    segs.push(0);
    do {
      segs[at] = i++;
      list.push(item());
    } while (this.nextElement());
    segs.pop();
    return list;
  }

  private parseDescriptor(): Descriptor {
    let entries: Entry[] = [];
    let limit: LimitOverride | undefined;
    let hitsAddend: number | undefined;
    if (this.openObject('a descriptor')) {
      let seen = 0;
      const segs = this.segs;
      do {
        const keyPos = this.pos;
        const key = this.readKey();
        let bit: number;
        switch (key) {
          case 'entries':
            bit = F1;
            break;
          case 'limit':
            bit = F2;
            break;
          case 'hitsAddend':
          case 'hits_addend':
            bit = F3;
            break;
          default:
            return this.unknownField(key, keyPos);
        }
        if ((seen & bit) !== 0) this.duplicateField(key, keyPos);
        seen |= bit;
        segs.push(key);
        if (!this.takeNull()) {
          if (bit === F1) entries = this.parseList(() => this.parseEntry());
          else if (bit === F2) limit = this.parseLimit();
          else hitsAddend = this.readInteger(IntKind.Uint64);
        }
        segs.pop();
      } while (this.nextMember());
    }
    return { entries, limit, hitsAddend };
  }

  private parseEntry(): Entry {
    let key = '';
    let value = '';
    if (this.openObject('an entry')) {
      let seen = 0;
      const segs = this.segs;
      do {
        const keyPos = this.pos;
        const name = this.readKey();
        let bit: number;
        switch (name) {
          case 'key':
            bit = F1;
            break;
          case 'value':
            bit = F2;
            break;
          default:
            return this.unknownField(name, keyPos);
        }
        if ((seen & bit) !== 0) this.duplicateField(name, keyPos);
        seen |= bit;
        segs.push(name);
        if (!this.takeNull()) {
          if (bit === F1) key = this.readString();
          else value = this.readString();
        }
        segs.pop();
      } while (this.nextMember());
    }
    return { key, value };
  }

  private parseLimit(): LimitOverride {
    let requestsPerUnit = 0;
    let unit = 0;
    if (this.openObject('a limit override')) {
      let seen = 0;
      const segs = this.segs;
      do {
        const keyPos = this.pos;
        const key = this.readKey();
        let bit: number;
        switch (key) {
          case 'requestsPerUnit':
          case 'requests_per_unit':
            bit = F1;
            break;
          case 'unit':
            bit = F2;
            break;
          default:
            return this.unknownField(key, keyPos);
        }
        if ((seen & bit) !== 0) this.duplicateField(key, keyPos);
        seen |= bit;
        segs.push(key);
        if (!this.takeNull()) {
          if (bit === F1) requestsPerUnit = this.readInteger(IntKind.Uint32);
          else unit = this.readUnit();
        }
        segs.pop();
      } while (this.nextMember());
    }
    return { requestsPerUnit, unit };
  }

  // --- structure ----------------------------------------------------------------------------

  private skipWs(): void {
    const src = this.src;
    let i = this.pos;
    for (;;) {
      const c = src.charCodeAt(i);
      if (c === 32 || c === 10 || c === 13 || c === 9) i++;
      else break;
    }
    this.pos = i;
  }

  /** Expects `{` (at pos, after whitespace); returns false for `{}`, else leaves pos on the first name. */
  private openObject(what: string): boolean {
    this.skipWs();
    if (this.src.charCodeAt(this.pos) !== 123) this.typeError(`${what} as a JSON object`);
    this.pos++;
    this.skipWs();
    if (this.src.charCodeAt(this.pos) === 125) {
      this.pos++;
      return false;
    }
    return true;
  }

  /** Reads `"name"` and the `:` after it, and skips whitespace before the value. */
  private readKey(): string {
    if (this.src.charCodeAt(this.pos) !== 34) {
      this.syntax(this.pos >= this.src.length ? 'unexpected end of input, expected a field name' : 'expected a field name (a JSON string)');
    }
    const key = this.parseString();
    this.skipWs();
    if (this.src.charCodeAt(this.pos) !== 58) this.syntax(`expected ':' after field name ${quote(key)}`);
    this.pos++;
    this.skipWs();
    return key;
  }

  /** After a member value: `,` → true (pos on the next name), `}` → false. */
  private nextMember(): boolean {
    return this.nextItem(125, '}', 'a field value');
  }

  /**
   * After a member or an element: `,` → true (pos on the next one, whitespace skipped), the
   * closing bracket `close` → false (pos after it).
   */
  private nextItem(close: number, closeChar: string, after: string): boolean {
    this.skipWs();
    const c = this.src.charCodeAt(this.pos);
    if (c === 44) {
      this.pos++;
      this.skipWs();
      return true;
    }
    if (c === close) {
      this.pos++;
      return false;
    }
    return this.syntax(this.pos >= this.src.length ? `unexpected end of input, expected ',' or '${closeChar}'` : `expected ',' or '${closeChar}' after ${after}`);
  }

  /** Expects `[`; returns false for `[]`, else leaves pos on the first element. */
  private openArray(): boolean {
    if (this.src.charCodeAt(this.pos) !== 91) this.typeError('a JSON array');
    this.pos++;
    this.skipWs();
    if (this.src.charCodeAt(this.pos) === 93) {
      this.pos++;
      return false;
    }
    return true;
  }

  /** After an element: `,` → true (pos on the next element), `]` → false. */
  private nextElement(): boolean {
    return this.nextItem(93, ']', 'a list element');
  }

  /** Consumes a `null` literal at pos if there is one. */
  private takeNull(): boolean {
    if (this.src.charCodeAt(this.pos) === 110 && this.src.startsWith('null', this.pos)) {
      this.pos += 4;
      if (isNotDelim(this.src.charCodeAt(this.pos))) this.syntax('invalid literal (expected null)');
      return true;
    }
    return false;
  }

  // --- scalars ------------------------------------------------------------------------------

  private readString(): string {
    if (this.src.charCodeAt(this.pos) !== 34) this.typeError('a string');
    return this.parseString();
  }

  /** pos is on the opening quote; returns the decoded string and leaves pos after the closing one. */
  private parseString(): string {
    const src = this.src;
    const len = src.length;
    const start = this.pos + 1;
    let i = start;
    while (i < len) {
      const c = src.charCodeAt(i);
      if (c === 34) {
        this.pos = i + 1;
        return src.slice(start, i);
      }
      if (c === 92 || c < 32 || (c >= 0xd800 && c <= 0xdfff)) return this.parseStringSlow(start, i);
      i++;
    }
    return this.syntaxAt(this.pos, 'unterminated string');
  }

  /** The general case: escapes, surrogate pairs, and the errors. */
  private parseStringSlow(start: number, from: number): string {
    const src = this.src;
    const len = src.length;
    let out = '';
    let chunk = start;
    let i = from;
    while (i < len) {
      const c = src.charCodeAt(i);
      if (c === 34) {
        this.pos = i + 1;
        return out + src.slice(chunk, i);
      }
      if (c === 92) {
        out += src.slice(chunk, i);
        const e = src.charCodeAt(i + 1);
        switch (e) {
          case 34:
            out += '"';
            break;
          case 92:
            out += '\\';
            break;
          case 47:
            out += '/';
            break;
          case 98:
            out += '\b';
            break;
          case 102:
            out += '\f';
            break;
          case 110:
            out += '\n';
            break;
          case 114:
            out += '\r';
            break;
          case 116:
            out += '\t';
            break;
          case 117: {
            const u = hex4(src, i + 2);
            if (u < 0) this.syntaxAt(i, `invalid escape ${quote(src.slice(i, i + 6))} in string`);
            if (u >= 0xd800 && u <= 0xdfff) {
              // Only a high surrogate escape followed by a low surrogate escape is a character.
              const lo = u <= 0xdbff && src.charCodeAt(i + 6) === 92 && src.charCodeAt(i + 7) === 117 ? hex4(src, i + 8) : -1;
              if (lo < 0xdc00 || lo > 0xdfff) {
                this.syntaxAt(i, `invalid escape ${quote(src.slice(i, i + 6))} in string: lone UTF-16 surrogate`);
              }
              out += String.fromCharCode(u, lo);
              i += 6;
            } else {
              out += String.fromCharCode(u);
            }
            i += 4;
            break;
          }
          default:
            if (i + 1 >= len) this.syntaxAt(this.pos, 'unterminated string');
            this.syntaxAt(i, `invalid escape ${quote(src.slice(i, i + 2))} in string`);
        }
        i += 2;
        chunk = i;
        continue;
      }
      if (c < 32) {
        this.syntaxAt(i, `control character U+${c.toString(16).padStart(4, '0').toUpperCase()} must be escaped in a string`);
      }
      if (c >= 0xd800 && c <= 0xdfff) {
        const d = src.charCodeAt(i + 1);
        if (c > 0xdbff || !(d >= 0xdc00 && d <= 0xdfff)) this.syntaxAt(i, 'invalid Unicode in string: lone UTF-16 surrogate');
        i += 2;
        continue;
      }
      i++;
    }
    return this.syntaxAt(this.pos, 'unterminated string');
  }

  /** A uint32, UInt64Value or int32 value: a JSON number, or (unsigned only) a string holding one. */
  private readInteger(kind: IntKind): number {
    const src = this.src;
    const start = this.pos;
    const c = src.charCodeAt(start);
    if (c === 45 || (c >= 48 && c <= 57)) {
      // Fast path: up to 9 plain digits, no sign, fraction or exponent.
      let i = start;
      let v = 0;
      let d = c - 48;
      while (d >= 0 && d <= 9 && i - start < 9) {
        v = v * 10 + d;
        d = src.charCodeAt(++i) - 48;
      }
      if (i > start && !(d >= 0 && d <= 9) && !isNotDelim(src.charCodeAt(i)) && (c !== 48 || i === start + 1)) {
        this.pos = i;
        return v;
      }
      const end = scanNumber(src, start);
      if (end < 0) this.syntax('invalid number');
      this.pos = end;
      return this.toInteger(src, start, end, kind, start);
    }
    if (c === 34 && kind !== IntKind.Int32) {
      const text = this.parseString();
      // The whole string must be exactly one JSON number (no spaces, signs like '+', or suffixes).
      if (text.length === 0 || scanNumber(text, 0) !== text.length) {
        this.fail(`expected ${intKindName(kind)}, got the string ${quote(text)} which is not a number`, start);
      }
      return this.toInteger(text, 0, text.length, kind, start);
    }
    return this.typeError(kind === IntKind.Int32 ? 'an enum value name or an integer' : `${intKindName(kind)} (a number or a numeric string)`);
  }

  private toInteger(s: string, start: number, end: number, kind: IntKind, at: number): number {
    const digits = integerDigits(s, start, end);
    const lit = end - start > 40 ? s.slice(start, start + 37) + '...' : s.slice(start, end);
    if (digits === NOT_INTEGER) this.fail(`expected ${intKindName(kind)}, got ${lit} which is not an integer`, at);
    if (kind === IntKind.Int32) {
      const neg = digits !== TOO_LARGE && digits.charCodeAt(0) === 45;
      const abs = digits === TOO_LARGE ? '' : neg ? digits.slice(1) : digits;
      if (digits === TOO_LARGE || decimalGreater(abs, neg ? MIN_INT32_ABS_STR : MAX_INT32_STR)) {
        this.fail(`expected an enum value name or an int32 integer, got ${lit} which is out of range`, at);
      }
      return Number(digits);
    }
    if (digits !== TOO_LARGE && digits.charCodeAt(0) === 45) {
      this.fail(`expected ${intKindName(kind)}, got ${lit} which is negative`, at);
    }
    if (kind === IntKind.Uint32) {
      if (digits === TOO_LARGE || decimalGreater(digits, MAX_UINT32_STR)) {
        this.fail(`expected ${intKindName(kind)}, got ${lit} which is out of range (max ${MAX_UINT32})`, at);
      }
      return Number(digits);
    }
    if (digits === TOO_LARGE || decimalGreater(digits, MAX_UINT64_STR)) {
      this.fail(`expected ${intKindName(kind)}, got ${lit} which is out of range (max ${MAX_UINT64_STR})`, at);
    }
    if (decimalGreater(digits, MAX_SAFE_STR)) {
      this.fail(
        `${lit} is a valid uint64 but exceeds ${MAX_SAFE_STR} (2^53-1), the largest hits_addend this service counts exactly`,
        at,
      );
    }
    return Number(digits);
  }

  /** envoy.type.v3.RateLimitUnit: a value name or an int32 (unknown numbers pass through). */
  private readUnit(): number {
    const at = this.pos;
    if (this.src.charCodeAt(at) === 34) {
      const name = this.parseString();
      const n = rateLimitUnitByName(name);
      if (n < 0) {
        this.fail(
          `unknown envoy.type.v3.RateLimitUnit value ${quote(name)} (expected UNKNOWN, SECOND, MINUTE, HOUR, DAY, MONTH, YEAR or an integer)`,
          at,
        );
      }
      return n;
    }
    return this.readInteger(IntKind.Int32);
  }

  // --- errors -------------------------------------------------------------------------------

  private pathText(): string {
    const segs = this.segs;
    let out = '';
    for (let k = 0; k < segs.length; k++) {
      const s = segs[k]!;
      if (typeof s === 'number') out += `[${s}]`;
      else out += (out === '' ? '' : '.') + (/^[A-Za-z_][A-Za-z0-9_]*$/.test(s) ? s : quote(s));
    }
    return out;
  }

  private fail(what: string, at: number): never {
    const path = this.pathText();
    throw new JsonRequestError(path === '' ? what : `${path}: ${what}`, path, at);
  }

  private syntax(what: string): never {
    return this.syntaxAt(this.pos, what);
  }

  private syntaxAt(at: number, what: string): never {
    const src = this.src;
    let line = 1;
    let lineStart = 0;
    for (let k = src.indexOf('\n'); k >= 0 && k < at; k = src.indexOf('\n', k + 1)) {
      line++;
      lineStart = k + 1;
    }
    return this.fail(`invalid JSON at line ${line}, column ${at - lineStart + 1}: ${what}`, at);
  }

  /** The value at pos has the wrong JSON type (or is not JSON at all). */
  private typeError(expected: string): never {
    const src = this.src;
    const at = this.pos;
    if (at >= src.length) return this.syntax('unexpected end of input, expected a value');
    const c = src.charCodeAt(at);
    let got: string;
    if (c === 123) got = 'an object';
    else if (c === 91) got = 'an array';
    else if (c === 34) got = 'a string';
    else if (c === 45 || (c >= 48 && c <= 57)) {
      if (scanNumber(src, at) < 0) return this.syntax('invalid number');
      got = 'a number';
    } else if (c === 116 || c === 102 || c === 110) {
      const lit = c === 116 ? 'true' : c === 102 ? 'false' : 'null';
      if (!src.startsWith(lit, at) || isNotDelim(src.charCodeAt(at + lit.length))) return this.syntax('invalid literal');
      got = lit;
    } else {
      return this.syntax(`unexpected character ${quote(String.fromCodePoint(src.codePointAt(at)!))}`);
    }
    return this.fail(`expected ${expected}, got ${got}`, at);
  }

  private unknownField(name: string, at: number): never {
    return this.fail(`unknown field ${quote(name)}`, at);
  }

  private duplicateField(name: string, at: number): never {
    return this.fail(`duplicate field ${quote(name)} (each field may be given once, by either of its names)`, at);
  }
}

function intKindName(kind: IntKind): string {
  return kind === IntKind.Uint32 ? 'a uint32' : kind === IntKind.Uint64 ? 'a uint64' : 'an int32';
}

/** Four hex digits at `i` as a number, or -1. */
function hex4(s: string, i: number): number {
  let v = 0;
  for (let k = i; k < i + 4; k++) {
    const c = s.charCodeAt(k);
    let d: number;
    if (c >= 48 && c <= 57) d = c - 48;
    else if (c >= 97 && c <= 102) d = c - 87;
    else if (c >= 65 && c <= 70) d = c - 55;
    else return -1;
    v = v * 16 + d;
  }
  return v;
}

/** A JSON-quoted, length-bounded rendering of input text for an error message (always one line). */
function quote(s: string): string {
  return JSON.stringify(s.length > 64 ? s.slice(0, 61) + '...' : s);
}

/**
 * Decodes the body of `POST /json` as protojson.Unmarshal decodes a RateLimitRequest.
 * Absent `limit` / per-descriptor `hitsAddend` are `undefined` (the keys are always there).
 * @throws JsonRequestError for anything protojson would reject.
 */
export function parseRateLimitRequest(body: string): RateLimitRequest {
  return new RequestParser(body).parse();
}

const utf8Decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/**
 * As parseRateLimitRequest, from the raw body bytes: invalid UTF-8 is rejected (as protojson does)
 * instead of being replaced by U+FFFD as `Buffer.toString('utf8')` would, and a BOM is kept so that
 * it is rejected too.
 */
export function parseRateLimitRequestBytes(body: Uint8Array): RateLimitRequest {
  let text: string;
  try {
    text = utf8Decoder.decode(body);
  } catch {
    throw new JsonRequestError('request body is not valid UTF-8', '', undefined);
  }
  return parseRateLimitRequest(text);
}

// ---------------------------------------------------------------------------------------------
// Response serializer

/** RateLimitResponse.Code values as JSON (index = number); UNKNOWN is never written. */
const CODE_JSON = ['"UNKNOWN"', '"OK"', '"OVER_LIMIT"'];

/** RateLimitResponse.RateLimit.Unit values as JSON, from the shared name table (WEEK = 7). */
const UNIT_JSON: string[] = [];
for (const [n, name] of Object.entries(UNIT_NAMES)) UNIT_JSON[Number(n)] = JSON.stringify(name);

/** google.protobuf.Duration's range (±10000 years), beyond which protojson refuses to marshal. */
const MAX_DURATION_SECONDS = 315576000000;

/** Nesting limit of dynamicMetadata (also stops a cyclic object with a clear error). */
const MAX_STRUCT_DEPTH = 1000;

function enumJson(table: readonly string[], n: number, what: string): string {
  const s = table[n];
  if (s !== undefined) return s;
  // An open enum's unknown number is written as a number, as protojson does.
  if (Number.isInteger(n) && n >= -2147483648 && n <= 2147483647) return String(n);
  throw new Error(`cannot marshal ${what}: ${n} is not an enum number`);
}

function uint32Json(n: number, what: string): string {
  if (n >>> 0 !== n) throw new Error(`cannot marshal ${what}: ${n} is not a uint32`);
  return String(n);
}

function durationJson(n: number): string {
  if (Number.isInteger(n) && n <= MAX_DURATION_SECONDS && n >= -MAX_DURATION_SECONDS) return `"${n === 0 ? 0 : n}s"`;
  if (!Number.isFinite(n) || Math.abs(n) > MAX_DURATION_SECONDS) {
    throw new Error(`cannot marshal durationUntilReset: ${n} seconds is out of google.protobuf.Duration range`);
  }
  // Fractional seconds: protojson writes 3, 6 or 9 fraction digits.
  const a = Math.abs(n);
  let secs = Math.floor(a);
  let nanos = Math.round((a - secs) * 1e9);
  if (nanos >= 1e9) {
    secs++;
    nanos -= 1e9;
  }
  let text = (n < 0 ? '-' : '') + secs;
  if (nanos !== 0) {
    let f = String(nanos).padStart(9, '0');
    if (f.endsWith('000000')) f = f.slice(0, 3);
    else if (f.endsWith('000')) f = f.slice(0, 6);
    text += '.' + f;
  }
  return `"${text}s"`;
}

function statusJson(s: DescriptorStatus): string {
  let out = '{';
  let sep = '';
  if (s.code !== 0) {
    out += '"code":' + enumJson(CODE_JSON, s.code, 'statuses.code');
    sep = ',';
  }
  const cl = s.currentLimit;
  if (cl !== undefined) {
    // RateLimit's fields in declaration order (name = 3 is declared first), as protojson writes them.
    out += sep + '"currentLimit":{';
    let inner = '';
    if (cl.name !== '') inner = '"name":' + JSON.stringify(cl.name);
    if (cl.requestsPerUnit !== 0) {
      inner += (inner === '' ? '' : ',') + '"requestsPerUnit":' + uint32Json(cl.requestsPerUnit, 'currentLimit.requestsPerUnit');
    }
    if (cl.unit !== 0) inner += (inner === '' ? '' : ',') + '"unit":' + enumJson(UNIT_JSON, cl.unit, 'currentLimit.unit');
    out += inner + '}';
    sep = ',';
  }
  if (s.limitRemaining !== 0) {
    out += sep + '"limitRemaining":' + uint32Json(s.limitRemaining, 'limitRemaining');
    sep = ',';
  }
  if (s.durationUntilReset !== undefined) out += sep + '"durationUntilReset":' + durationJson(s.durationUntilReset);
  return out + '}';
}

function headerJson(h: HeaderValue): string {
  let out = '{';
  if (h.key !== '') out += '"key":' + JSON.stringify(h.key);
  if (h.value !== '') out += (h.key !== '' ? ',' : '') + '"value":' + JSON.stringify(h.value);
  return out + '}';
}

/** google.protobuf.Struct as protojson writes it: keys sorted, finite numbers only. */
function structJson(obj: JsonObject, depth: number): string {
  if (depth > MAX_STRUCT_DEPTH) throw new Error(`cannot marshal dynamicMetadata: nested deeper than ${MAX_STRUCT_DEPTH} levels`);
  const keys = Object.keys(obj).sort();
  let out = '{';
  let first = true;
  for (let k = 0; k < keys.length; k++) {
    const key = keys[k]!;
    const v = obj[key];
    if (v === undefined) continue; // an optional property left unset: not part of the Struct
    out += (first ? '' : ',') + JSON.stringify(key) + ':' + valueJson(v, depth);
    first = false;
  }
  return out + '}';
}

function valueJson(v: unknown, depth: number): string {
  switch (typeof v) {
    case 'string':
      return JSON.stringify(v);
    case 'number':
      if (!Number.isFinite(v)) throw new Error(`cannot marshal dynamicMetadata: ${v} is not a valid JSON number`);
      return JSON.stringify(v);
    case 'boolean':
      return v ? 'true' : 'false';
    case 'object': {
      if (v === null) return 'null';
      if (Array.isArray(v)) {
        if (depth + 1 > MAX_STRUCT_DEPTH) {
          throw new Error(`cannot marshal dynamicMetadata: nested deeper than ${MAX_STRUCT_DEPTH} levels`);
        }
        let out = '[';
        for (let k = 0; k < v.length; k++) out += (k === 0 ? '' : ',') + valueJson(v[k], depth + 1);
        return out + ']';
      }
      return structJson(v as JsonObject, depth + 1);
    }
    default:
      throw new Error(`cannot marshal dynamicMetadata: a ${typeof v} is not a google.protobuf.Value`);
  }
}

/**
 * Encodes a response as protojson.Marshal does (fields in declaration order, defaults omitted,
 * enums by name, Duration as "<n>s", Struct as a plain object). Builds the text directly.
 * @throws Error only for values no RateLimitResponse can hold (a non-uint32 count, a non-finite
 * number in dynamicMetadata, …): a marshal error, which the caller answers with 500.
 */
export function serializeRateLimitResponse(res: RateLimitResponse): string {
  let out = '{';
  let sep = '';
  if (res.overallCode !== 0) {
    out += '"overallCode":' + enumJson(CODE_JSON, res.overallCode, 'overallCode');
    sep = ',';
  }
  const statuses = res.statuses;
  if (statuses.length !== 0) {
    out += sep + '"statuses":[';
    for (let k = 0; k < statuses.length; k++) out += (k === 0 ? '' : ',') + statusJson(statuses[k]!);
    out += ']';
    sep = ',';
  }
  const headers = res.responseHeadersToAdd;
  if (headers.length !== 0) {
    out += sep + '"responseHeadersToAdd":[';
    for (let k = 0; k < headers.length; k++) out += (k === 0 ? '' : ',') + headerJson(headers[k]!);
    out += ']';
    sep = ',';
  }
  const md = res.dynamicMetadata;
  if (md !== undefined) {
    if (md === null || typeof md !== 'object' || Array.isArray(md)) {
      throw new Error('cannot marshal dynamicMetadata: not a JSON object');
    }
    out += sep + '"dynamicMetadata":' + structJson(md, 0);
  }
  return out + '}';
}
