/**
 * The xDS reconnect backoff (XDS_CLIENT_BACKOFF_*), fixing upstream's use of the random factor as
 * the growth factor (section 10 item 8 of the behaviour notes):
 *
 * - attempt n (0-based, counted since the last reset) has the base delay
 *   `min(initialIntervalMs × 2^n, maxIntervalMs)`;
 * - with `jitter` on and `randomFactor` f > 0, the wait is `base × (1 + f × (2r − 1))` for a uniform
 *   r in [0, 1): anywhere in `base × [1 − f, 1 + f)`. f is clamped to [0, 1];
 * - the wait is then capped at `maxIntervalMs` (the "largest reconnect delay"), so at the cap the
 *   jitter only shortens waits;
 * - `jitter` off (or f = 0) gives the plain doubling sequence;
 * - `reset()` starts over at the initial interval (the provider resets after a stream that
 *   delivered at least one response).
 *
 * Non-positive intervals are raised to 1 ms, and a max below the initial interval is raised to it.
 */

export interface BackoffOptions {
  readonly initialIntervalMs: number;
  readonly maxIntervalMs: number;
  readonly randomFactor: number;
  readonly jitter: boolean;
  /** Uniform in [0, 1); Math.random by default (injectable for tests). */
  readonly random?: () => number;
}

export class Backoff {
  private readonly initial: number;
  private readonly max: number;
  private readonly factor: number;
  private readonly random: () => number;
  private attemptCount = 0;

  constructor(opts: BackoffOptions) {
    this.initial = Math.max(1, finiteOr(opts.initialIntervalMs, 1));
    this.max = Math.max(this.initial, finiteOr(opts.maxIntervalMs, this.initial));
    this.factor = opts.jitter ? Math.min(1, Math.max(0, finiteOr(opts.randomFactor, 0))) : 0;
    this.random = opts.random ?? Math.random;
  }

  /** Attempts since the last reset. */
  get attempts(): number {
    return this.attemptCount;
  }

  /** The base (un-jittered) delay of attempt `n`. */
  base(n: number): number {
    // 2^n overflows to Infinity for large n, which min() caps.
    return Math.min(this.initial * 2 ** n, this.max);
  }

  /** The wait before the next attempt; advances the attempt counter. */
  next(): number {
    const base = this.base(this.attemptCount);
    this.attemptCount++;
    if (this.factor === 0) return Math.round(base);
    const r = Math.min(Math.max(this.random(), 0), 1);
    const wait = base * (1 + this.factor * (2 * r - 1));
    return Math.round(Math.min(this.max, Math.max(0, wait)));
  }

  reset(): void {
    this.attemptCount = 0;
  }
}

function finiteOr(v: number, fallback: number): number {
  return Number.isFinite(v) ? v : fallback;
}
