/**
 * Value parsers with the syntax of upstream's Go libraries (kelseyhightower/envconfig v1.4 on top of
 * `strconv` and `time.ParseDuration`), so a value that works with envoyproxy/ratelimit means the same
 * here. Each parser takes the raw text and the variable name, and throws a one-line
 * {@link SettingsError} naming both.
 *
 * Where we are more lenient than upstream (never stricter), it is said at the parser.
 */
import { invalidValue } from './errors';

// ---------------------------------------------------------------------------------------------
// Booleans: strconv.ParseBool.

const TRUE_TEXTS: ReadonlySet<string> = new Set(['1', 't', 'T', 'TRUE', 'true', 'True']);
const FALSE_TEXTS: ReadonlySet<string> = new Set(['0', 'f', 'F', 'FALSE', 'false', 'False']);

/** `strconv.ParseBool`: exactly 1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False. */
export function parseBool(text: string, variable: string): boolean {
  if (TRUE_TEXTS.has(text)) return true;
  if (FALSE_TEXTS.has(text)) return false;
  throw invalidValue(variable, text, 'expected a boolean (true, false, 1, 0, t, f)');
}

// ---------------------------------------------------------------------------------------------
// Integers: strconv.ParseInt(text, 0, 64), which is what envconfig calls. Base 0 means the Go
// literal syntax: an optional sign, then decimal (`42`), `0x`/`0X` hex, `0o`/`0O` or a leading `0`
// octal (`010` is 8, `08` is an error), `0b`/`0B` binary, with `_` allowed between digits.

const INT_FORMS: ReadonlyArray<{ re: RegExp; bigintPrefix: string }> = [
  { re: /^0[xX]((?:_?[0-9a-fA-F])+)$/, bigintPrefix: '0x' },
  { re: /^0[bB]((?:_?[01])+)$/, bigintPrefix: '0b' },
  { re: /^0[oO]((?:_?[0-7])+)$/, bigintPrefix: '0o' },
  { re: /^0((?:_?[0-7])+)$/, bigintPrefix: '0o' },
  { re: /^([1-9](?:_?[0-9])*|0)$/, bigintPrefix: '' },
];

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

export interface IntRange {
  readonly min?: number;
  readonly max?: number;
}

function describeIntRange(range: IntRange): string {
  const { min, max } = range;
  if (min !== undefined && max !== undefined) return `expected an integer between ${min} and ${max}`;
  if (min !== undefined) return `expected an integer >= ${min}`;
  if (max !== undefined) return `expected an integer <= ${max}`;
  return 'expected an integer';
}

/**
 * Go `strconv.ParseInt(text, 0, 64)` (see above), then the optional inclusive range. Values that a
 * JavaScript number cannot hold exactly (beyond ±2^53) are rejected as out of range.
 */
export function parseInt64(text: string, variable: string, range: IntRange = {}): number {
  let body = text;
  let negative = false;
  if (body.startsWith('+') || body.startsWith('-')) {
    negative = body[0] === '-';
    body = body.slice(1);
  }
  let big: bigint | undefined;
  for (const form of INT_FORMS) {
    const m = form.re.exec(body);
    if (!m) continue;
    big = BigInt(form.bigintPrefix + m[1]!.replace(/_/g, ''));
    break;
  }
  if (big === undefined) throw invalidValue(variable, text, describeIntRange(range));
  if (negative) big = -big;
  if (big < INT64_MIN || big > INT64_MAX || big < BigInt(Number.MIN_SAFE_INTEGER) || big > BigInt(Number.MAX_SAFE_INTEGER)) {
    throw invalidValue(variable, text, `${describeIntRange(range)} (value out of range)`);
  }
  const n = Number(big);
  if ((range.min !== undefined && n < range.min) || (range.max !== undefined && n > range.max)) {
    throw invalidValue(variable, text, describeIntRange(range));
  }
  return n;
}

// ---------------------------------------------------------------------------------------------
// Floats: strconv.ParseFloat. Decimal with optional exponent (`0.8`, `.5`, `1.`, `1e-3`, `1_000.5`)
// and hexadecimal with a binary exponent (`0x1p-2`). Go also accepts `Inf`/`NaN`; no setting has a
// use for them, so they are rejected (the only place this parser is stricter than Go, on values that
// would break the setting anyway).

const DIGITS = String.raw`\d(?:_?\d)*`;
const DECIMAL_FLOAT = new RegExp(String.raw`^[+-]?(?:${DIGITS}(?:\.(?:${DIGITS})?)?|\.${DIGITS})(?:[eE][+-]?${DIGITS})?$`);
const HEX_FLOAT = /^([+-]?)0[xX]((?:_?[0-9a-fA-F])*)(?:\.([0-9a-fA-F](?:_?[0-9a-fA-F])*)?)?[pP]([+-]?\d(?:_?\d)*)$/;

export interface FloatRange {
  readonly min?: number;
  readonly max?: number;
}

function describeFloatRange(range: FloatRange): string {
  const { min, max } = range;
  if (min !== undefined && max !== undefined) return `expected a number between ${min} and ${max}`;
  if (min !== undefined) return `expected a number >= ${min}`;
  if (max !== undefined) return `expected a number <= ${max}`;
  return 'expected a finite number';
}

/** Go `strconv.ParseFloat` syntax (see above), finite values only, then the optional inclusive range. */
export function parseFloat64(text: string, variable: string, range: FloatRange = {}): number {
  let value: number | undefined;
  if (DECIMAL_FLOAT.test(text)) {
    value = Number(text.replace(/_/g, ''));
  } else {
    const m = HEX_FLOAT.exec(text);
    const intDigits = m?.[2]?.replace(/_/g, '') ?? '';
    const fracDigits = m?.[3]?.replace(/_/g, '') ?? '';
    if (m && (intDigits !== '' || fracDigits !== '')) {
      const mantissa = parseInt(intDigits + fracDigits || '0', 16);
      const exponent = Number(m[4]!.replace(/_/g, '')) - 4 * fracDigits.length;
      value = (m[1] === '-' ? -1 : 1) * mantissa * 2 ** exponent;
    }
  }
  if (value === undefined || !Number.isFinite(value)) throw invalidValue(variable, text, describeFloatRange(range));
  if ((range.min !== undefined && value < range.min) || (range.max !== undefined && value > range.max)) {
    throw invalidValue(variable, text, describeFloatRange(range));
  }
  return value;
}

// ---------------------------------------------------------------------------------------------
// Durations: time.ParseDuration. `[-+]?([0-9]*(\.[0-9]*)?[a-z]+)+`, units ns, us, µs (U+00B5),
// μs (U+03BC), ms, s, m, h; `0` alone needs no unit; `1h30m`, `1.5h`, `.5s` are fine; `10`, `0.0`,
// `1 s`, `1sec` and `` are errors.

const UNIT_NANOS: ReadonlyMap<string, bigint> = new Map([
  ['ns', 1n],
  ['us', 1_000n],
  ['\u00b5s', 1_000n],
  ['\u03bcs', 1_000n],
  ['ms', 1_000_000n],
  ['s', 1_000_000_000n],
  ['m', 60_000_000_000n],
  ['h', 3_600_000_000_000n],
]);

const DURATION_HINT = 'expected a duration such as 300ms, 10s, 1.5h or 2h45m (units ns, us, µs, ms, s, m, h; a number needs a unit unless it is 0)';

function isDigit(c: string | undefined): boolean {
  return c !== undefined && c >= '0' && c <= '9';
}

/** Go `time.ParseDuration`; returns nanoseconds, or the reason it is invalid. */
export function goDurationNanos(text: string): bigint | { readonly error: string } {
  let s = text;
  let negative = false;
  if (s.startsWith('-') || s.startsWith('+')) {
    negative = s[0] === '-';
    s = s.slice(1);
  }
  if (s === '0') return 0n;
  if (s === '') return { error: 'invalid duration' };
  let total = 0n;
  while (s !== '') {
    if (!(s[0] === '.' || isDigit(s[0]))) return { error: 'invalid duration' };
    let i = 0;
    while (isDigit(s[i])) i++;
    const whole = s.slice(0, i);
    s = s.slice(i);
    let fraction = '';
    if (s.startsWith('.')) {
      let j = 1;
      while (isDigit(s[j])) j++;
      fraction = s.slice(1, j);
      s = s.slice(j);
    }
    if (whole === '' && fraction === '') return { error: 'invalid duration' };
    let k = 0;
    while (k < s.length && s[k] !== '.' && !isDigit(s[k])) k++;
    if (k === 0) return { error: 'missing unit' };
    const unitText = s.slice(0, k);
    s = s.slice(k);
    const unit = UNIT_NANOS.get(unitText);
    if (unit === undefined) return { error: `unknown unit ${JSON.stringify(unitText)}` };
    total += BigInt(whole || '0') * unit;
    if (fraction !== '') total += (BigInt(fraction) * unit) / 10n ** BigInt(fraction.length);
    if (total > INT64_MAX + (negative ? 1n : 0n)) return { error: 'duration out of range' };
  }
  return negative ? -total : total;
}

/** Go `time.ParseDuration`, returned in milliseconds (fractional below 1 ms: `150us` is 0.15). */
export function parseDurationMs(text: string, variable: string): number {
  const nanos = goDurationNanos(text);
  if (typeof nanos !== 'bigint') throw invalidValue(variable, text, `${nanos.error}; ${DURATION_HINT}`);
  return Number(nanos) / 1e6;
}

// ---------------------------------------------------------------------------------------------
// Lists and maps.

/**
 * envconfig `[]string`: comma separated. More lenient than envconfig: items are trimmed and empty
 * items dropped (`a, b,` is `["a", "b"]`; upstream would keep `" b"` and `""`).
 */
export function parseList(text: string): string[] {
  return text
    .split(',')
    .map((item) => item.trim())
    .filter((item) => item !== '');
}

/**
 * envconfig `map[string]string` (`k1:v1,k2:v2`, separator `:`) or the xDS node metadata form
 * (`k1=v1,k2=v2`, separator `=`). Each item is split at its FIRST separator, so a value may contain
 * it (`authorization:Basic a:b`), where envconfig rejects such items; keys and values are trimmed;
 * empty items are skipped. An item without the separator, or with an empty key, is an error. An
 * empty value is kept (`k:` → `{k: ""}`), as envconfig does. A repeated key keeps the last value.
 * With `secret`, an error shows neither the text nor an item (`***`, and the item by its
 * position): an item without a separator may well be the secret itself.
 */
export function parseMap(text: string, variable: string, separator: ':' | '=' = ':', secret = false): Record<string, string> {
  const out: Record<string, string> = {};
  let position = 0;
  for (const rawItem of text.split(',')) {
    const item = rawItem.trim();
    if (item === '') continue;
    position++;
    const at = item.indexOf(separator);
    const key = at < 0 ? '' : item.slice(0, at).trim();
    if (at < 0 || key === '') {
      const which = secret ? `item ${position}` : `item ${JSON.stringify(item)}`;
      const why = at < 0 ? `${which} has no "${separator}"` : `${which} has an empty key`;
      throw invalidValue(variable, secret ? '***' : text, `expected comma-separated key${separator}value pairs (${why})`);
    }
    out[key] = item.slice(at + 1).trim();
  }
  return out;
}
