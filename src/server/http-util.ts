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

/** Reads a request body up to `limit` bytes; rejects with BodyTooLargeError past it. */
export function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const declared = Number(req.headers['content-length']);
    if (Number.isFinite(declared) && declared > limit) {
      req.resume();
      reject(new BodyTooLargeError(`request body of ${declared} bytes exceeds the limit of ${limit}`));
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    req.on('data', (c: Buffer) => {
      if (done) return;
      size += c.length;
      if (size > limit) {
        done = true;
        req.resume();
        reject(new BodyTooLargeError(`request body exceeds the limit of ${limit} bytes`));
        return;
      }
      chunks.push(c);
    });
    req.on('end', () => {
      if (!done) {
        done = true;
        resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size));
      }
    });
    req.on('error', (e) => {
      if (!done) {
        done = true;
        reject(e);
      }
    });
  });
}

/** The path of a request URL without its query string. */
export function pathOf(url: string | undefined): string {
  if (url === undefined) return '/';
  const q = url.indexOf('?');
  return q < 0 ? url : url.slice(0, q);
}
