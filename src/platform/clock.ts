/**
 * Time is injected so window arithmetic, reconnect delays and the simulated market can be tested
 * deterministically: the system clock in production, a manual clock in tests.
 */
export interface Clock {
  /** Milliseconds since the Unix epoch. */
  nowMs(): number;
  /** Runs `fn` once after `ms` of this clock's time. */
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

/** The system clock; its timers do not keep the process alive. */
export const systemClock: Clock = {
  nowMs: () => Date.now(),
  setTimeout: (fn, ms) => {
    const t = setTimeout(fn, ms);
    t.unref();
    return t;
  },
  clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout),
};

interface ManualTimer {
  readonly id: number;
  readonly at: number;
  readonly fn: () => void;
}

/** A clock that moves only when `set` or `advance` is called; due timers run in time order. */
export class ManualClock implements Clock {
  private now: number;
  private seq = 0;
  private timers: ManualTimer[] = [];

  constructor(startMs = 0) {
    this.now = startMs;
  }

  nowMs(): number {
    return this.now;
  }

  setTimeout(fn: () => void, ms: number): unknown {
    const t = { id: ++this.seq, at: this.now + Math.max(0, ms), fn };
    this.timers.push(t);
    return t.id;
  }

  clearTimeout(handle: unknown): void {
    this.timers = this.timers.filter((t) => t.id !== handle);
  }

  advance(ms: number): void {
    this.set(this.now + ms);
  }

  /** Moves to `targetMs`, running the timers due on the way; a time in the past is simply set. */
  set(targetMs: number): void {
    for (;;) {
      this.timers.sort((a, b) => a.at - b.at || a.id - b.id);
      const t = this.timers[0];
      if (t === undefined || t.at > targetMs) break;
      this.timers.shift();
      this.now = Math.max(this.now, t.at);
      t.fn();
    }
    this.now = targetMs;
  }
}

/** The longest delay node's timers take (a longer one fires at once, with a warning). */
export const MAX_TIMER_MS = 2 ** 31 - 1;
