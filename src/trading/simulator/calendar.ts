/**
 * When the simulated market trades, as the price path needs it: the market hours (by default FX
 * hours, fxcm/market-hours.ts) per hour and per 5-second grid step, and the daily rollover (17:00
 * US Eastern).
 */
import { newYorkFivePm } from '../fxcm/market-hours';

/** Math's functions bound once: inside a vm context (Jest) every global lookup in a hot loop is slow. */
const { floor, ceil, min, max } = Math;

export const MINUTE_MS = 60_000;
export const HOUR_MS = 3_600_000;
export const DAY_MS = 86_400_000;
/** The price path's grid: 5-second steps, 720 to the hour. */
export const GRID_MS = 5_000;
export const STEPS_PER_HOUR = HOUR_MS / GRID_MS;

/** Open grid steps of one hour: [from, to) in 0…720 (from = to when closed all hour). */
export interface OpenSteps {
  from: number;
  to: number;
}

/**
 * Market hours sampled for the price path, cached per UTC day (shared by every symbol). The hours
 * function is asked at whole hours and, where the state changes within an hour, to the minute: a
 * market that changes state at most once an hour and on whole minutes (FX hours do) is exact.
 */
export class MarketCalendar {
  private readonly days = new Map<number, { open: OpenSteps[]; rolloverMs: number }>();

  constructor(readonly isOpen: (ms: number) => boolean) {}

  /** Open steps of the hour starting at `hourStartMs` (a whole UTC hour). */
  openSteps(hourStartMs: number): OpenSteps {
    const dayStart = floor(hourStartMs / DAY_MS) * DAY_MS;
    return this.day(dayStart).open[(hourStartMs - dayStart) / HOUR_MS]!;
  }

  /**
   * The part of [fromMs, toMs] when the market trades: from the start of its first open grid step
   * to the end of its last one (or `toMs`, inside a step). Undefined when closed throughout. An
   * instant [t, t] (a candle that starts now) is traded when the market is open at t.
   */
  openSpan(fromMs: number, toMs: number): [number, number] | undefined {
    if (fromMs === toMs) {
      const hour = floor(fromMs / HOUR_MS) * HOUR_MS;
      const step = floor((fromMs - hour) / GRID_MS);
      const open = this.openSteps(hour);
      return step >= open.from && step < open.to ? [fromMs, toMs] : undefined;
    }
    let first: number | undefined;
    let last = fromMs;
    for (let hour = floor(fromMs / HOUR_MS) * HOUR_MS; hour < toMs; hour += HOUR_MS) {
      const open = this.openSteps(hour);
      const from = max(open.from, ceil((fromMs - hour) / GRID_MS));
      const to = min(open.to, ceil((toMs - hour) / GRID_MS));
      if (from >= to) continue;
      first ??= hour + from * GRID_MS;
      last = min(toMs, hour + to * GRID_MS);
    }
    return first === undefined ? undefined : [first, last];
  }

  /** Milliseconds of the whole grid steps inside [fromMs, toMs] when the market is closed. */
  closedMs(fromMs: number, toMs: number): number {
    let closed = 0;
    for (let hour = floor(fromMs / HOUR_MS) * HOUR_MS; hour < toMs; hour += HOUR_MS) {
      const lo = max(0, ceil((fromMs - hour) / GRID_MS));
      const hi = min(STEPS_PER_HOUR, floor((toMs - hour) / GRID_MS));
      if (hi <= lo) continue;
      const open = this.openSteps(hour);
      closed += hi - lo - max(0, min(hi, open.to) - max(lo, open.from));
    }
    return closed * GRID_MS;
  }

  /** The instant of 17:00 US Eastern on the UTC day holding `ms`. */
  rolloverMs(ms: number): number {
    return this.day(floor(ms / DAY_MS) * DAY_MS).rolloverMs;
  }

  private day(dayStart: number) {
    let d = this.days.get(dayStart);
    if (!d) {
      const open: OpenSteps[] = [];
      let atStart = this.isOpen(dayStart);
      for (let h = 0; h < 24; h++) {
        const start = dayStart + h * HOUR_MS;
        const atEnd = this.isOpen(start + HOUR_MS);
        open.push(atStart === atEnd ? (atStart ? { from: 0, to: STEPS_PER_HOUR } : { from: 0, to: 0 }) : this.split(start, atStart));
        atStart = atEnd;
      }
      d = { open, rolloverMs: newYorkFivePm(dayStart) };
      this.days.set(dayStart, d);
    }
    return d;
  }

  /** The hour changes state once: find the first minute in the end state (binary search). */
  private split(start: number, openAtStart: boolean): OpenSteps {
    let lo = 0; // minutes from the start known to be in the start state
    let hi = 60; // … known to be in the end state
    while (hi - lo > 1) {
      const mid = (lo + hi) >> 1;
      if (this.isOpen(start + mid * MINUTE_MS) === openAtStart) lo = mid;
      else hi = mid;
    }
    const at = hi * (MINUTE_MS / GRID_MS);
    return openAtStart ? { from: 0, to: at } : { from: at, to: STEPS_PER_HOUR };
  }
}
