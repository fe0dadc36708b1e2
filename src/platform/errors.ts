/** What went wrong, as text for a log line or an answer. */

/** The message of an Error (duck-typed: errors may come from another realm, or a library's own class), else String(err). */
export function errorMessage(err: unknown): string {
  if (typeof err === 'object' && err !== null) {
    const message = (err as { message?: unknown }).message;
    if (typeof message === 'string') return message;
  }
  return String(err);
}
