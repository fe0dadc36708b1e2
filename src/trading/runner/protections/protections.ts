/**
 * Protections: rules that lock new entries for a while after what the run went through, the same
 * code in backtest, sweep, paper and live (the pre-trade check asks `check`, each engine tells
 * `closed` and `equity` as they happen, on the run's own clock), so a backtest shows what they
 * would have done live. Declared in the strategy module (`protections: {...}`) or a JSON file
 * (`--protections FILE`):
 *
 * - `stopLossGuard: {stops, withinMin, lockMin, perSymbol?}`: `stops` trades closed by their stop
 *   (or trailing stop) within `withinMin` minutes lock new entries for `lockMin` minutes, on every
 *   symbol or (`perSymbol`) on the symbol that was stopped out;
 * - `maxDrawdown: {pct, lockMin}`: equity `pct` % below its highest point locks new entries for
 *   `lockMin` minutes; at the unlock the highest point starts again from the equity then;
 * - `cooldown: {minutes}`: after a trade of a symbol closes (for any reason), no new entry on that
 *   symbol for `minutes`;
 * - `dailyLoss: N`: the daily loss limit (as `--max-daily-loss N`: flatten, then no new position
 *   until the next UTC day; safety.ts keeps it).
 *
 * An entry refused by a lock is a SafetyError whose rule is the protection's name. Closes are
 * never locked. Each lock is told once as it starts (`onLock`: the log, a notification) and kept
 * in the run's result (`history`), for the report.
 */
import { SafetyError } from '../errors';
import type { ProtectionLock } from '../results';
import type { ProtectionRules } from '../strategy';
import type { SafetyLimits } from './safety';

export type { ProtectionLock, ProtectionRules };

/** What a checkpoint keeps: the recent stops, the equity's highest point, the locks still to come to an end. */
export interface SavedProtections {
  stops: Array<{ symbol: string; at: number }>;
  peak: number | null;
  locks: ProtectionLock[];
  /** Trades told closed before their close record came (paper/live), not to be counted again. */
  counted?: string[];
}

const MIN = 60_000;

/**
 * What a run applies: the rules given (a --protections file) else the strategy's, and the safety
 * limits with the rules' daily loss among them (--max-daily-loss, when given, wins).
 */
export function runProtections(strategyRules: ProtectionRules | undefined, given: ProtectionRules | undefined, safety: SafetyLimits = {}): { rules: ProtectionRules; safety: SafetyLimits } {
  const rules = given ?? strategyRules ?? {};
  return { rules, safety: rules.dailyLoss !== undefined && safety.maxDailyLoss === undefined ? { ...safety, maxDailyLoss: rules.dailyLoss } : safety };
}

/**
 * Checks a declaration (a strategy module's `protections`, or a --protections file); throws an
 * Error naming what is wrong.
 */
export function checkProtectionRules(v: unknown, where: string): ProtectionRules {
  if (v === undefined || v === null) return {};
  if (typeof v !== 'object' || Array.isArray(v)) throw new Error(`${where}: protections must be an object, got ${JSON.stringify(v)}`);
  const o = v as Record<string, unknown>;
  const known = ['stopLossGuard', 'maxDrawdown', 'cooldown', 'dailyLoss'];
  const unknown = Object.keys(o).filter((k) => !known.includes(k));
  if (unknown.length) throw new Error(`${where}: unknown protection ${unknown.join(', ')} (there are ${known.join(', ')})`);
  const positive = (name: string, x: unknown, integer = false): number => {
    if (typeof x !== 'number' || !Number.isFinite(x) || x <= 0 || (integer && !Number.isInteger(x))) throw new Error(`${where}: ${name} must be a ${integer ? 'whole ' : ''}number above 0, got ${JSON.stringify(x)}`);
    return x;
  };
  const fields = (name: string, x: unknown, want: string[]): Record<string, unknown> => {
    if (x === null || typeof x !== 'object' || Array.isArray(x)) throw new Error(`${where}: ${name} must be an object {${want.join(', ')}}, got ${JSON.stringify(x)}`);
    const extra = Object.keys(x).filter((k) => !want.includes(k));
    if (extra.length) throw new Error(`${where}: ${name} has no field ${extra.join(', ')} (it has ${want.join(', ')})`);
    return x as Record<string, unknown>;
  };
  const rules: ProtectionRules = {};
  if (o.stopLossGuard !== undefined) {
    const g = fields('stopLossGuard', o.stopLossGuard, ['stops', 'withinMin', 'lockMin', 'perSymbol']);
    if (g.perSymbol !== undefined && typeof g.perSymbol !== 'boolean') throw new Error(`${where}: stopLossGuard.perSymbol must be true or false`);
    rules.stopLossGuard = { stops: positive('stopLossGuard.stops', g.stops, true), withinMin: positive('stopLossGuard.withinMin', g.withinMin), lockMin: positive('stopLossGuard.lockMin', g.lockMin), ...(g.perSymbol ? { perSymbol: true } : {}) };
  }
  if (o.maxDrawdown !== undefined) {
    const d = fields('maxDrawdown', o.maxDrawdown, ['pct', 'lockMin']);
    const pct = positive('maxDrawdown.pct', d.pct);
    if (pct >= 100) throw new Error(`${where}: maxDrawdown.pct must be below 100, got ${pct}`);
    rules.maxDrawdown = { pct, lockMin: positive('maxDrawdown.lockMin', d.lockMin) };
  }
  if (o.cooldown !== undefined) rules.cooldown = { minutes: positive('cooldown.minutes', fields('cooldown', o.cooldown, ['minutes']).minutes) };
  if (o.dailyLoss !== undefined) rules.dailyLoss = positive('dailyLoss', o.dailyLoss);
  return rules;
}

export class Protections {
  /** Stop-outs within the guard's window, oldest first. */
  private stops: Array<{ symbol: string; at: number }> = [];
  private peak: number | undefined;
  /** Locks not yet over (a lock ends at `until`). */
  private active: ProtectionLock[] = [];
  /** Trades told closed (by their key) whose close record is still to come. */
  private counted = new Set<string>();
  /** Every lock the run had, for its result (bounded: the report shows the first HISTORY_KEPT). */
  readonly history: ProtectionLock[] = [];

  constructor(
    readonly rules: ProtectionRules,
    private readonly onLock: (lock: ProtectionLock) => void = () => undefined,
  ) {}

  get any(): boolean {
    return this.rules.stopLossGuard !== undefined || this.rules.maxDrawdown !== undefined || this.rules.cooldown !== undefined;
  }

  /**
   * A trade (or part of one) of the run closed at `at` (epoch ms, the run's clock), for `reason`.
   * `key`: paper and live tell a trade when the broker deletes it (its reason known from its stop
   * order), before its close record, so that an entry between the two is already locked; the
   * record's own call with the same key then counts nothing.
   */
  closed(symbol: string, reason: string, at: number, key?: string, early = false): void {
    if (key !== undefined) {
      if (early) this.counted.add(key);
      else if (this.counted.delete(key)) return;
    }
    const c = this.rules.cooldown;
    if (c) this.lock({ rule: 'cooldown', symbol, from: at, until: at + c.minutes * MIN, reason: `${symbol} closed a trade: no new entry on it for ${c.minutes} min` });
    const g = this.rules.stopLossGuard;
    if (!g || (reason !== 'stop' && reason !== 'trailing')) return;
    this.stops.push({ symbol, at });
    this.stops = this.stops.filter((s) => s.at > at - g.withinMin * MIN);
    const counted = g.perSymbol ? this.stops.filter((s) => s.symbol === symbol) : this.stops;
    if (counted.length < g.stops) return;
    this.lock({
      rule: 'stopLossGuard',
      ...(g.perSymbol ? { symbol } : {}),
      from: at,
      until: at + g.lockMin * MIN,
      reason: `${counted.length} stop-outs${g.perSymbol ? ` on ${symbol}` : ''} within ${g.withinMin} min: no new entries${g.perSymbol ? ` on ${symbol}` : ''} for ${g.lockMin} min`,
    });
    // the stops that set the lock are spent: the next lock needs as many new ones
    this.stops = this.stops.filter((s) => !counted.includes(s));
  }

  /** The account's equity at `at`. */
  equity(at: number, equity: number): void {
    const d = this.rules.maxDrawdown;
    if (!d) return;
    this.expire(at);
    if (this.active.some((l) => l.rule === 'maxDrawdown')) return;
    if (this.peak === undefined || equity > this.peak) this.peak = equity;
    const down = this.peak > 0 ? ((this.peak - equity) / this.peak) * 100 : 0;
    if (down < d.pct) return;
    this.lock({ rule: 'maxDrawdown', from: at, until: at + d.lockMin * MIN, reason: `equity ${down.toFixed(1)}% below its highest point (${this.peak.toFixed(2)}): no new entries for ${d.lockMin} min` });
    this.peak = undefined; // starts again from the equity at the unlock
  }

  /** Refuses a new entry on `symbol` at `at` while a lock holds (SafetyError named after the rule). */
  check(symbol: string, at: number): void {
    this.expire(at);
    const l = this.active.find((x) => x.symbol === undefined || x.symbol === symbol);
    if (l) throw new SafetyError(l.rule, `${l.reason} (locked until ${new Date(l.until).toISOString()})`);
  }

  /** The locks holding at `at`. */
  locks(at: number): ProtectionLock[] {
    this.expire(at);
    return [...this.active];
  }

  saved(): SavedProtections {
    return { stops: [...this.stops], peak: this.peak ?? null, locks: [...this.active], ...(this.counted.size ? { counted: [...this.counted] } : {}) };
  }

  restore(s: SavedProtections | undefined): void {
    if (!s) return;
    this.stops = [...s.stops];
    this.peak = s.peak ?? undefined;
    this.active = [...s.locks];
    this.counted = new Set(s.counted ?? []);
  }

  private expire(at: number): void {
    if (this.active.some((l) => l.until <= at)) this.active = this.active.filter((l) => l.until > at);
  }

  /** A lock the safety limits set (the daily loss halt): told and kept like the protections' own. */
  noteHalt(l: ProtectionLock): void {
    if (this.history.length < HISTORY_KEPT) this.history.push(l);
    this.onLock(l);
  }

  private lock(l: ProtectionLock): void {
    this.expire(l.from);
    // a lock already holding that covers it (same rule and symbol, ending later) is the same lock
    const same = this.active.find((x) => x.rule === l.rule && x.symbol === l.symbol);
    if (same && same.until >= l.until) return;
    if (same) this.active = this.active.filter((x) => x !== same);
    this.active.push(l);
    if (this.history.length < HISTORY_KEPT) this.history.push(l);
    this.onLock(l);
  }
}

/** Locks a run's result keeps (a cooldown on every close of a long run would be many). */
export const HISTORY_KEPT = 1000;
