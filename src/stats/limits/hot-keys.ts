/**
 * The hot keys of one loaded limit over the last minute and the last hour, in bounded memory:
 * four Space-Saving summaries of 15 seconds for the minute and four of 15 minutes for the hour,
 * each of `capacity` keys. A call updates only the current 15-second summary; when its slot is
 * taken again, 60 seconds later, its keys are merged into the 15-minute summary of their time.
 * A horizon's list is the merge of the periods it covers (so "the last minute" is the last 45 to
 * 60 seconds, "the last hour" the last 45 to 60 minutes), its bounds the sums of theirs.
 *
 * Memory: at most 8 × capacity entries, whatever the number of distinct values.
 */
import type { Entry } from '../../core/rls';
import { mergeSummaries, SpaceSaving } from './space-saving';

const MINUTE_SLOT_S = 15;
const HOUR_SLOT_S = 900;
const SLOTS = 4;

class Tier {
  readonly summaries: Array<SpaceSaving | undefined> = new Array<SpaceSaving | undefined>(SLOTS);
  /** Each slot's period start (seconds), or -1. */
  readonly starts = new Array<number>(SLOTS).fill(-1);
  constructor(
    readonly slotS: number,
    readonly capacity: number,
  ) {}

  /** The summary of the period holding `nowS`; the slot's older content goes to `retire` first. */
  current(nowS: number, retire?: (old: SpaceSaving, start: number) => void): SpaceSaving {
    const start = nowS - (nowS % this.slotS);
    const i = Math.floor(start / this.slotS) % SLOTS;
    let s = this.summaries[i];
    if (s === undefined) {
      s = this.summaries[i] = new SpaceSaving(this.capacity);
    } else if (this.starts[i] !== start) {
      if (retire !== undefined && s.total > 0) retire(s, this.starts[i]!);
      s.clear();
    }
    this.starts[i] = start;
    return s;
  }

  /** The summaries of periods that started after `sinceS` (and not in the future). */
  within(sinceS: number, nowS: number): SpaceSaving[] {
    const out: SpaceSaving[] = [];
    for (let i = 0; i < SLOTS; i++) {
      const s = this.summaries[i];
      const st = this.starts[i]!;
      if (s !== undefined && st > sinceS && st <= nowS && s.total > 0) out.push(s);
    }
    return out;
  }
}

export type Horizon = 'minute' | 'hour';

export class HotKeys {
  private readonly minute: Tier;
  private readonly hour: Tier;
  private last: SpaceSaving | undefined;
  private lastStart = -1;

  constructor(readonly capacity: number) {
    this.minute = new Tier(MINUTE_SLOT_S, capacity);
    this.hour = new Tier(HOUR_SLOT_S, capacity);
  }

  offer(key: string, entries: readonly Entry[], weight: number, over: number, remaining: number, nowS: number, admit: boolean): void {
    let s = this.last;
    // The common case: the same 15 seconds as the previous call.
    if (s === undefined || nowS - this.lastStart >= MINUTE_SLOT_S || nowS < this.lastStart) {
      s = this.last = this.minute.current(nowS, (old, start) => this.fold(old, start, nowS));
      this.lastStart = nowS - (nowS % MINUTE_SLOT_S);
    }
    s.offer(key, entries, weight, over, remaining, nowS, admit);
  }

  /** A 15-second summary leaving its slot: into the 15 minutes it belongs to (if still within the hour). */
  private fold(old: SpaceSaving, start: number, nowS: number): void {
    const hourStart = start - (start % HOUR_SLOT_S);
    if (hourStart <= nowS - SLOTS * HOUR_SLOT_S) return;
    const i = Math.floor(hourStart / HOUR_SLOT_S) % SLOTS;
    const tier = this.hour;
    const cur = tier.summaries[i];
    if (cur === undefined || tier.starts[i] !== hourStart) {
      if (tier.starts[i]! > hourStart) return; // its slot already holds a later period
      const fresh = mergeSummaries([old], this.capacity);
      tier.summaries[i] = fresh;
      tier.starts[i] = hourStart;
      return;
    }
    tier.summaries[i] = mergeSummaries([cur, old], this.capacity);
  }

  /** The horizon's summary at `nowS`: the merge of the periods it covers. */
  view(horizon: Horizon, nowS: number): SpaceSaving {
    if (horizon === 'minute') return mergeSummaries(this.minute.within(nowS - 60, nowS), this.capacity);
    // The hour: its 15-minute periods, and the 15-second ones not yet folded into them.
    return mergeSummaries([...this.hour.within(nowS - 3600, nowS), ...this.minute.within(nowS - 3600, nowS)], this.capacity);
  }

  /** Whether anything was offered in the last hour. */
  active(nowS: number): boolean {
    return this.hour.within(nowS - 3600, nowS).length > 0 || this.minute.within(nowS - 3600, nowS).length > 0;
  }
}
