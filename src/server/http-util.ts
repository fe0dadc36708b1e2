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

/** The path of a request URL without its query string. */
export function pathOf(url: string | undefined): string {
  if (url === undefined) return '/';
  const q = url.indexOf('?');
  return q < 0 ? url : url.slice(0, q);
}
