/**
 * Memcached key rules and the key → node distribution.
 *
 * Key rules (memcached's own): at most 250 bytes, no whitespace or control characters (no byte
 * <= 0x20, no 0x7f). Multi-byte UTF-8 is allowed; the limit counts bytes. A lone UTF-16 surrogate
 * (possible in a /json request) has no UTF-8 form and is refused too.
 *
 * Distribution: as upstream (gomemcache's ServerList): the node at index
 * `crc32(utf8(key)) % n` of the list as configured (MEMCACHE_HOST_PORT order; SRV targets
 * sorted). Every instance with the same list picks the same node for a key — a Go
 * envoyproxy/ratelimit instance included, so both can share the nodes during a migration.
 */

import { crc32 } from 'node:zlib';

export const MAX_KEY_BYTES = 250;

/** UTF-8 byte length of `s`, as Buffer.byteLength (lone surrogates count as U+FFFD, 3 bytes). */
export function utf8Length(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      n += 4;
      i++;
    } else n += 3;
  }
  return n;
}

/**
 * Why memcached cannot store `key`, or undefined when it can. Only the error path allocates.
 */
export function keyProblem(key: string): string | undefined {
  if (key.length === 0) return 'it is empty';
  for (let i = 0; i < key.length; i++) {
    const c = key.charCodeAt(i);
    if (c <= 0x20 || c === 0x7f) {
      return `it contains whitespace or a control character (0x${c.toString(16).padStart(2, '0')} at offset ${i})`;
    }
    if (c >= 0xd800 && c <= 0xdfff) {
      // A surrogate pair is fine; a lone surrogate has no UTF-8 form (it would alias U+FFFD).
      if (c <= 0xdbff && i + 1 < key.length && (key.charCodeAt(i + 1) & 0xfc00) === 0xdc00) i++;
      else return `it is not valid Unicode (lone surrogate 0x${c.toString(16)} at offset ${i})`;
    }
  }
  // Fast path: a key of at most 83 UTF-16 units is at most 249 UTF-8 bytes.
  if (key.length > MAX_KEY_BYTES / 3) {
    const bytes = utf8Length(key);
    if (bytes > MAX_KEY_BYTES) return `it is ${bytes} bytes long, more than ${MAX_KEY_BYTES}`;
  }
  return undefined;
}

/** A key as it may appear in an error message: control characters escaped, at most 300 chars. */
export function showKey(key: string): string {
  const cut = key.length > 300 ? key.slice(0, 300) + '…' : key;
  let out = '';
  for (let i = 0; i < cut.length; i++) {
    const c = cut.charCodeAt(i);
    if (c < 0x20 || c === 0x7f) out += '\\x' + c.toString(16).padStart(2, '0');
    else if (c === 0x22 || c === 0x5c) out += '\\' + cut[i];
    else out += cut[i];
  }
  return '"' + out + '"';
}


/** Index of the node holding `key` among `n` nodes (gomemcache: crc32 IEEE of the key, mod n). */
export function pickNode(key: string, n: number): number {
  return n === 1 ? 0 : crc32(key) % n;
}
