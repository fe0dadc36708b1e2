/** Injectable time for the simulator: the system clock, or a manual clock tests advance. */
export interface Clock {
  nowMs(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

export const systemClock: Clock = {
  nowMs: () => Date.now(),
  setTimeout: (fn, ms) => {
    const t = setTimeout(fn, ms);
    t.unref?.();
    return t;
  },
  clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout),
};

interface ManualTimer {
  id: number;
  at: number;
  fn: () => void;
}

/** A clock that only moves when `advance` / `set` is called; due timers run in time order. */
export class ManualClock implements Clock {
  private now: number;
  private seq = 0;
  private timers: ManualTimer[] = [];
  constructor(startMs: number) {
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
  set(targetMs: number): void {
    for (;;) {
      this.timers.sort((a, b) => a.at - b.at || a.id - b.id);
      const t = this.timers[0];
      if (!t || t.at > targetMs) break;
      this.timers.shift();
      this.now = Math.max(this.now, t.at);
      t.fn();
    }
    this.now = Math.max(this.now, targetMs);
  }
}
