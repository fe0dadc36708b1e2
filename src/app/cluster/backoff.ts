/**
 * The delay before restarting a worker that died: short for a rare crash, doubling while a worker
 * keeps dying soon after its restart, so a crash loop costs little CPU and log volume. The delays
 * are the project's one Backoff; what is particular here is when it starts over.
 */
import { Backoff } from '../../core/backoff';

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
  private readonly delays: Backoff;

  constructor(private readonly opts: RestartBackoffOptions = DEFAULT_RESTART_BACKOFF) {
    this.delays = new Backoff({ initialMs: opts.initialMs, maxMs: opts.maxMs });
  }

  /** The delay before the next start, given how long the dead worker ran. */
  next(ranMs: number): number {
    if (ranMs >= this.opts.stableMs) this.delays.reset();
    return this.delays.next();
  }
}
