/** A burst, then a rate per second: the budgets of what one client may make the server do. */
export class TokenBucket {
  private tokens: number;
  private refilledAt: number;

  constructor(
    private readonly burst: number,
    private readonly perSecond: number,
    now = performance.now(),
  ) {
    this.tokens = burst;
    this.refilledAt = now;
  }

  /** Spends `n` tokens; false when there are not enough (the caller refuses what it was for). */
  spend(n = 1, now = performance.now()): boolean {
    this.tokens = this.available(now);
    this.refilledAt = now;
    if (this.tokens < n) return false;
    this.tokens -= n;
    return true;
  }

  /** Whether `n` tokens could be spent now (nothing is spent). */
  has(n = 1, now = performance.now()): boolean {
    return this.available(now) >= n;
  }

  private available(now: number): number {
    return Math.min(this.burst, this.tokens + ((now - this.refilledAt) / 1000) * this.perSecond);
  }

  /** Adds `n` tokens (up to the burst). */
  earn(n: number): void {
    this.tokens = Math.min(this.burst, this.tokens + n);
  }
}
