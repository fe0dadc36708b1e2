/** HTTP's Retry-After (RFC 9110 §10.2.3), read the one way every client of ours reads it. */

/**
 * A Retry-After header in milliseconds: delta-seconds, or an HTTP-date against the answer's own
 * Date header (the server's clock); undefined when absent or unreadable.
 */
export function retryAfterMsOf(retryAfter: string | null | undefined, date?: string | null): number | undefined {
  const v = retryAfter?.trim();
  if (!v) return undefined;
  if (/^\d+$/.test(v)) return Number(v) * 1000;
  const at = Date.parse(v);
  const now = date ? Date.parse(date) : NaN;
  if (!Number.isFinite(at) || !Number.isFinite(now)) return undefined;
  return Math.max(0, at - now);
}
