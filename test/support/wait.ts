/**
 * The tests' one way to wait: for a condition that an event makes true (a file reloaded, a
 * connection back, a line received), polled briefly, with a clear error naming what never came.
 */
export async function waitFor(check: () => boolean | Promise<boolean>, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      if (await check()) return;
      last = undefined;
    } catch (err) {
      last = err;
    }
    if (Date.now() >= deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last === undefined ? '' : `: ${String(last)}`}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/**
 * A pause, for the one case where no event exists: asserting that something does NOT happen
 * within a time (no reload, no packet, no reconnect).
 */
export function quietFor(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * For a test that counts several hits against a fixed window (a limit per minute, per hour): if
 * the current window of the service's wall clock ends within `needMs`, waits for the next one to
 * begin, so that the window cannot turn between the hits and reset the count.
 */
export async function inOneWindow(windowMs: number, needMs = 15_000): Promise<void> {
  const left = windowMs - (Date.now() % windowMs);
  if (left < needMs) await new Promise((resolve) => setTimeout(resolve, left + 50));
}
