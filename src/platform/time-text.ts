/** Times as text, one way everywhere: ISO 8601 in UTC. */

/** `2024-01-02T10:15:00Z` from epoch ms (with `.sss` only when there are milliseconds). */
export function isoUtc(ms: number): string {
  const text = new Date(ms).toISOString();
  return text.endsWith('.000Z') ? `${text.slice(0, -5)}Z` : text;
}

/** `2024-01-02T10:15Z` when the seconds are 0, else as isoUtc: a whole minute without its `:00`. */
export function isoUtcMinutes(ms: number): string {
  const text = isoUtc(ms);
  return text.endsWith(':00Z') ? `${text.slice(0, -4)}Z` : text;
}
