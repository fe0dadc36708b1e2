/**
 * The delay before restarting a worker that died: short for a rare crash, doubling while a worker
 * keeps dying soon after its restart, so a crash loop costs little CPU and log volume.
 */
export interface RestartBackoffOptions {
  /** First delay (ms). */
  readonly initialMs: number;
  /** Largest delay (ms). */
  readonly maxMs: number;
  /** A worker that ran this long before dying starts again from `initialMs`. */
  readonly stableMs: number;
}

export const DEFAULT_RESTART_BACKOFF: RestartBackoffOptions = { initialMs: 100, maxMs: 30_000, stableMs: 60_000 };

export class RestartBackoff {
  private failures = 0;

  constructor(private readonly opts: RestartBackoffOptions = DEFAULT_RESTART_BACKOFF) {}

  /** The delay before the next start, given how long the dead worker ran. */
  next(ranMs: number): number {
    if (ranMs >= this.opts.stableMs) this.failures = 0;
    const delay = Math.min(this.opts.maxMs, this.opts.initialMs * 2 ** this.failures);
    // Stop growing the exponent once the cap is reached (2 ** n would overflow to Infinity).
    if (delay < this.opts.maxMs) this.failures++;
    return delay;
  }
}
