/** Time is injected so window arithmetic can be tested deterministically. */
export interface Clock {
  /** Milliseconds since the Unix epoch. */
  nowMs(): number;
}

export const systemClock: Clock = { nowMs: () => Date.now() };

/** A clock tests move by hand. */
export class ManualClock implements Clock {
  constructor(private ms = 0) {}
  nowMs(): number {
    return this.ms;
  }
  setSeconds(s: number): void {
    this.ms = s * 1000;
  }
  advanceMs(ms: number): void {
    this.ms += ms;
  }
}
