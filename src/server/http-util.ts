/** Small helpers shared by the HTTP and debug listeners. */
import type { IncomingMessage, ServerResponse } from 'node:http';

/** Go's http.Error: text/plain, nosniff, the message plus a newline. */
export function plainError(res: ServerResponse, status: number, message: string, detail?: string): void {
  res.statusCode = status;
  res.setHeader('Content-Type', 'text/plain; charset=utf-8');
  res.setHeader('X-Content-Type-Options', 'nosniff');
  if (detail !== undefined) res.setHeader('X-Error-Detail', sanitizeHeader(detail));
  res.end(message + '\n');
}

export function plainText(res: ServerResponse, status: number, body: string): void {
  res.statusCode = status;
  res.setHeader('Content-Type', 'text/plain; charset=utf-8');
  res.end(body);
}

/** Header values may not hold control characters; keep the detail readable and bounded. */
function sanitizeHeader(s: string): string {
  const clean = s.replace(/[^\x20-\x7e]/g, '?');
  return clean.length > 512 ? clean.slice(0, 509) + '...' : clean;
}

export class BodyTooLargeError extends Error {}

/**
 * Reads a request body up to `limit` bytes, then calls `done` once (BodyTooLargeError past it).
 * No 'error' listener: node:http emits a request's error only to listeners, and a request whose
 * client went away needs no answer, so `done` is simply never called for it.
 */
export function readBody(req: IncomingMessage, limit: number, done: (err: Error | undefined, body?: Buffer) => void): void {
  const declared = declaredLength(req.rawHeaders);
  if (declared > limit) {
    req.resume();
    done(new BodyTooLargeError(`request body of ${declared} bytes exceeds the limit of ${limit}`));
    return;
  }
  let first: Buffer | undefined;
  let chunks: Buffer[] | undefined;
  let size = 0;
  let finished = false;
  req.on('data', (c: Buffer) => {
    if (finished) return;
    size += c.length;
    if (size > limit) {
      finished = true;
      req.resume();
      done(new BodyTooLargeError(`request body exceeds the limit of ${limit} bytes`));
      return;
    }
    if (first === undefined) first = c;
    else (chunks ??= [first]).push(c);
  });
  req.on('end', () => {
    if (finished) return;
    finished = true;
    done(undefined, chunks !== undefined ? Buffer.concat(chunks, size) : (first ?? EMPTY));
  });
}

const EMPTY = Buffer.alloc(0);

/** Content-Length from the raw header list (NaN when absent): `req.headers` would build the whole map. */
function declaredLength(raw: readonly string[]): number {
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!;
    if (name.length === 14 && name.toLowerCase() === 'content-length') return Number(raw[i + 1]);
  }
  return NaN;
}

/** The path of a request URL without its query string. */
export function pathOf(url: string | undefined): string {
  if (url === undefined) return '/';
  const q = url.indexOf('?');
  return q < 0 ? url : url.slice(0, q);
}
