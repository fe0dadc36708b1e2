/**
 * The one retry delay of the project: exponential (doubling) from `initialMs`, capped at `maxMs`,
 * with an optional jitter. Every retrying part (worker restarts, xDS and Redis reconnects, the
 * statsd connection, the broker stream) takes its delays from here.
 *
 * Attempt n (0-based, since the last reset) has the base delay `min(initialMs × 2ⁿ, maxMs)`. Jitter:
 * - `none`: the base delay;
 * - `{ spread: f }` (0 ≤ f ≤ 1): uniform in `base × [1 − f, 1 + f)`, then capped at `maxMs` (at the
 *   cap jitter only shortens waits);
 * - `from-initial`: uniform in `[initialMs, base]` (upstream's jpillora/backoff with jitter, used for
 *   the Redis start-up loop so a Go and a TypeScript instance retry alike).
 * Non-positive or non-finite intervals are raised to 1 ms; a max below the initial is raised to it.
 */
export type Jitter = 'none' | 'from-initial' | { readonly spread: number };

export interface BackoffOptions {
  readonly initialMs: number;
  readonly maxMs: number;
  readonly jitter?: Jitter | undefined;
  /** Uniform in [0, 1); Math.random by default (tests inject one). */
  readonly random?: (() => number) | undefined;
}

export class Backoff {
  private readonly initial: number;
  private readonly max: number;
  private readonly jitter: Jitter;
  private readonly random: () => number;
  private attemptCount = 0;

  constructor(opts: BackoffOptions) {
    this.initial = Math.max(1, finiteOr(opts.initialMs, 1));
    this.max = Math.max(this.initial, finiteOr(opts.maxMs, this.initial));
    const j = opts.jitter ?? 'none';
    this.jitter = typeof j === 'object' ? { spread: Math.min(1, Math.max(0, finiteOr(j.spread, 0))) } : j;
    this.random = opts.random ?? Math.random;
  }

  /** Attempts since the last reset. */
  get attempts(): number {
    return this.attemptCount;
  }

  /** The base (un-jittered) delay of attempt `n`. */
  base(n: number): number {
    // 2ⁿ overflows to Infinity for a large n, which min() caps.
    return Math.min(this.initial * 2 ** Math.max(0, n), this.max);
  }

  /** The delay of attempt `n`, jittered, without touching the attempt counter. */
  delay(n: number): number {
    const base = this.base(n);
    const j = this.jitter;
    if (j === 'none') return Math.round(base);
    const r = Math.min(Math.max(this.random(), 0), 1);
    if (j === 'from-initial') return Math.round(this.initial + r * (base - this.initial));
    if (j.spread === 0) return Math.round(base);
    return Math.round(Math.min(this.max, Math.max(0, base * (1 + j.spread * (2 * r - 1)))));
  }

  /** The wait before the next attempt; advances the attempt counter. */
  next(): number {
    return this.delay(this.attemptCount++);
  }

  /** Starts over at the initial delay (after a success). */
  reset(): void {
    this.attemptCount = 0;
  }
}

function finiteOr(v: number, fallback: number): number {
  return Number.isFinite(v) ? v : fallback;
}
