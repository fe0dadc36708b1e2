/** Small helpers shared by the HTTP and debug listeners. */
import type { ServerResponse } from 'node:http';

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
export function sanitizeHeader(s: string): string {
  const clean = s.replace(/[^\x20-\x7e]/g, '?');
  return clean.length > 512 ? clean.slice(0, 509) + '...' : clean;
}

/**
 * The path of a request target (node:http's `req.url`, or our HTTP/1.1 reader's): origin-form
 * without its query, absolute-form without scheme and authority.
 */
export function pathOf(target: string | undefined): string {
  if (target === undefined) return '/';
  let start = 0;
  if (target.charCodeAt(0) !== 47 /* / */) {
    const scheme = target.indexOf('://');
    if (scheme > 0) {
      const slash = target.indexOf('/', scheme + 3);
      if (slash < 0) return '/';
      start = slash;
    }
  }
  const q = target.indexOf('?', start);
  return q < 0 ? (start === 0 ? target : target.slice(start)) : target.slice(start, q);
}
