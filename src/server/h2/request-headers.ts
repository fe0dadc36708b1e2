/**
 * A request's decoded header list (and its trailers) checked as RFC 9113 requires (8.2.1 field validity, 8.2.2
 * connection-specific fields, 8.3 pseudo-header fields) and gathered by name. A list that breaks a
 * rule is a malformed request: the stream is reset with PROTOCOL_ERROR. The record has no
 * prototype, so a field named `constructor` or `__proto__` is an ordinary name.
 */

/** Lower-case token characters (RFC 9110 5.6.2): what a field name may hold, as nghttp2 and Go accept. */
const NAME_CHAR = new Uint8Array(128);
for (const c of "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyz") NAME_CHAR[c.charCodeAt(0)] = 1;

const PSEUDO_FIELDS = new Set([':method', ':scheme', ':authority', ':path']);
const CONNECTION_FIELDS = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade']);

/** A name of lower-case token characters, after an optional leading colon. */
function validName(name: string, from: number): boolean {
  if (name.length <= from) return false;
  for (let i = from; i < name.length; i++) {
    const c = name.charCodeAt(i);
    if (c >= 128 || NAME_CHAR[c] === 0) return false;
  }
  return true;
}

/** No NUL, CR, LF or other control character (HTAB aside), and no blank at either end. */
function validValue(value: string): boolean {
  const n = value.length;
  if (n === 0) return true;
  const first = value.charCodeAt(0);
  const last = value.charCodeAt(n - 1);
  if (first === 0x20 || first === 0x09 || last === 0x20 || last === 0x09) return false;
  for (let i = 0; i < n; i++) {
    const c = value.charCodeAt(i);
    if ((c < 0x20 && c !== 0x09) || c === 0x7f) return false;
  }
  return true;
}

/**
 * The request's fields (`fields`: name, value, name, value...) by name, repeated ones joined
 * with ", " (cookie with "; "), or undefined when the request is malformed.
 */
export function requestHeaders(fields: readonly string[]): Record<string, string> | undefined {
  const headers = Object.create(null) as Record<string, string>;
  let regular = false;
  for (let i = 0; i < fields.length; i += 2) {
    const name = fields[i]!;
    const value = fields[i + 1]!;
    if (!validValue(value)) return undefined;
    if (name.charCodeAt(0) === 0x3a /* : */) {
      if (regular || !PSEUDO_FIELDS.has(name) || headers[name] !== undefined) return undefined;
      headers[name] = value;
      continue;
    }
    regular = true;
    if (!validName(name, 0) || CONNECTION_FIELDS.has(name)) return undefined;
    if (name === 'te' && value !== 'trailers') return undefined;
    const before = headers[name];
    headers[name] = before === undefined ? value : `${before}${name === 'cookie' ? '; ' : ', '}${value}`;
  }
  const method = headers[':method'];
  if (method === undefined || !validName(method.toLowerCase(), 0)) return undefined;
  if (method === 'CONNECT') return headers[':scheme'] === undefined && headers[':path'] === undefined && headers[':authority'] !== undefined ? headers : undefined;
  const path = headers[':path'];
  return headers[':scheme'] !== undefined && path !== undefined && path !== '' ? headers : undefined;
}

/**
 * Whether a trailer section (`fields`: name, value, ...) is well formed: the rules of regular
 * fields (8.2.1, 8.2.2), and no pseudo-header field at all (8.1).
 */
export function validTrailers(fields: readonly string[]): boolean {
  for (let i = 0; i < fields.length; i += 2) {
    const name = fields[i]!;
    if (!validValue(fields[i + 1]!) || !validName(name, 0) || CONNECTION_FIELDS.has(name)) return false;
  }
  return true;
}
