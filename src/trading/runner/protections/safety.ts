/**
 * Safety limits, checked before any order is sent (every mode):
 * - `maxPosition`: the most a symbol may hold, in K units, summed over its open trades of one side
 *   (an order that would take it past the limit is refused; closing is always allowed);
 * - `maxDailyLoss`: when the UTC day's P/L (equity now − equity at the day's first check) reaches
 *   −maxDailyLoss the runner flattens everything and refuses new positions until the next UTC day;
 * - `minUsableMarginPct`: opening is refused when the usable margin left after the order (usable
 *   margin now less the order's margin) would be below this share of equity.
 * Each refusal is a SafetyError whose `rule` is the limit's name. The one pre-trade check of every
 * mode (pre-trade.ts) calls checkOpen after the broker's own rules.
 */
import { SafetyError } from '../errors';

export interface SafetyLimits {
  maxPosition?: number;
  maxDailyLoss?: number;
  minUsableMarginPct?: number;
}

const DAY_MS = 86400_000;

/** A lock on new entries: the rule that set it, until when (epoch ms; none: until it is lifted), and why. */
export interface SafetyLock {
  rule: string;
  until?: number;
  reason: string;
}

/** What the guard counts (a checkpoint keeps it): the UTC day, its first equity, the day halted. */
export interface SafetyCounters {
  day: number;
  dayStartEquity: number;
  halted: number;
}

export class SafetyGuard {
  private day = -1;
  private dayStartEquity = 0;
  private halted = -1;

  constructor(readonly limits: SafetyLimits) {}

  counters(): SafetyCounters {
    return { day: this.day, dayStartEquity: this.dayStartEquity, halted: this.halted };
  }

  restoreCounters(c: SafetyCounters): void {
    this.day = c.day;
    this.dayStartEquity = c.dayStartEquity;
    this.halted = c.halted;
  }

  private roll(nowMs: number, equity: number): void {
    const d = Math.floor(nowMs / DAY_MS);
    if (d !== this.day) {
      this.day = d;
      this.dayStartEquity = equity;
    }
  }

  dayPL(nowMs: number, equity: number): number {
    this.roll(nowMs, equity);
    return equity - this.dayStartEquity;
  }

  /**
   * The day's P/L as dayPL would answer it, without starting the new day: what a view from
   * outside the run reads (it must not set the baseline the run's own next check would set, or a
   * replay of the journal would count the day differently).
   */
  peekDayPL(nowMs: number, equity: number): number {
    return Math.floor(nowMs / DAY_MS) === this.day ? equity - this.dayStartEquity : 0;
  }

  /** Realised P/L is part of equity already; kept as a hook for journals. */
  onRealised(_nowMs: number, _pl: number): void {}

  /** True when the daily loss limit is reached now (the caller flattens). */
  checkDailyLoss(nowMs: number, equity: number): boolean {
    const max = this.limits.maxDailyLoss;
    if (max === undefined) return false;
    const pl = this.dayPL(nowMs, equity);
    if (pl <= -max && this.halted !== this.day) {
      this.halted = this.day;
      return true;
    }
    return false;
  }

  isHalted(nowMs: number): boolean {
    return this.halted === Math.floor(nowMs / DAY_MS);
  }

  /** The locks on new entries now, with until when (epoch ms) and why. */
  locks(nowMs: number): SafetyLock[] {
    if (!this.isHalted(nowMs)) return [];
    return [{ rule: 'maxDailyLoss', until: (Math.floor(nowMs / DAY_MS) + 1) * DAY_MS, reason: 'daily loss limit reached: no new positions until the next UTC day' }];
  }

  /**
   * `exposure`: what the symbol holds and has pending (each with its side); `usableAfter`: the
   * usable margin once the order holds its margin (undefined: unknown, not checked).
   */
  checkOpen(
    symbol: string,
    isBuy: boolean,
    amount: number,
    exposure: readonly { isBuy: boolean; amount: number }[],
    nowMs: number,
    equity: number,
    usableAfter?: number,
  ): void {
    this.roll(nowMs, equity);
    if (this.isHalted(nowMs)) throw new SafetyError('maxDailyLoss', `daily loss limit reached: no new positions until the next UTC day`);
    const max = this.limits.maxPosition;
    if (max !== undefined) {
      const same = exposure.filter((p) => p.isBuy === isBuy).reduce((s, p) => s + p.amount, 0);
      if (same + amount > max) throw new SafetyError('maxPosition', `${symbol}: ${same}K + ${amount}K would exceed the maximum position of ${max}K`);
    }
    const pct = this.limits.minUsableMarginPct;
    if (pct !== undefined && usableAfter !== undefined && equity > 0 && (usableAfter / equity) * 100 < pct) {
      throw new SafetyError('minUsableMarginPct', `usable margin after the order would be ${((usableAfter / equity) * 100).toFixed(1)}% of equity, below ${pct}%`);
    }
  }
}
