/**
 * The numbers of a run report, from its closed trades and equity curve. Every figure that has no
 * value for a run (no trade, no losing trade, no time elapsed) is null, never NaN or Infinity,
 * which JSON cannot carry; each field says what its null means.
 *
 * Sharpe/Sortino: {@link RATIO_METHOD}. Annualising the returns between equity points instead
 * (a point per minute bar, a point per tick) multiplies noise by sqrt(points per year) and gave
 * Sharpe 25 on a minute-bar backtest; daily returns are what traders compare.
 */
import { isoUtc } from '../../../platform/time-text';
import { clean } from '../../execution/instruments';
import { fxTradingDay } from '../../fxcm/market-hours';
import type { ClosedTrade, EquityPoint } from '../results';

/** Trades of one side (long = buy, short = sell). */
export interface SideStats {
  trades: number;
  wins: number;
  /** wins / trades; null when the side has no trade. */
  winRate: number | null;
  /** Net of commission, account currency. */
  netPL: number;
}

/** One UTC calendar month of the run. */
export interface MonthReturn {
  /** `YYYY-MM`. */
  month: string;
  /**
   * Equity at the month's last point against the equity at the end of the previous month (the
   * start balance for the first month), in %: the months compound to the run's return. null when
   * the month has no equity point (only a trade closed in it) or the reference equity is not positive.
   */
  returnPct: number | null;
  /**
   * The same change in the account currency (null when returnPct is): it includes the open
   * positions' unrealised P/L and accrued rollover, so it differs from closedPL.
   */
  equityChange: number | null;
  /** Trades closed in the month. */
  closedTrades: number;
  /** Net P/L of the trades closed in the month (a trade's whole P/L falls in its closing month). */
  closedPL: number;
}

export interface Metrics {
  trades: number;
  wins: number;
  losses: number;
  winRate: number;
  netPL: number;
  grossPL: number;
  commission: number;
  /** Rollover (swap) earned (+) or paid (−), included in netPL. */
  rollover: number;
  plPips: number;
  startBalance: number;
  endBalance: number;
  endEquity: number;
  returnPct: number;
  maxDrawdown: number;
  maxDrawdownPct: number;
  /** Annualised from daily returns; null ("n/a") with too few days or no variation. */
  sharpe: number | null;
  sortino: number | null;
  /** Daily returns the ratios were computed from. */
  dailyReturns: number;
  /** How Sharpe and Sortino are computed, for the report. */
  ratioMethod: string;
  /** Gross profit / gross loss; null when there was no losing trade (or no trade). */
  profitFactor: number | null;
  /** Trades closed at exactly zero P/L: neither wins nor losses. */
  breakeven: number;
  /** Mean net P/L per closed trade, breakeven trades included; null without trades. */
  expectancy: number | null;
  /** Mean pips per closed trade; null without trades. */
  expectancyPips: number | null;
  /** Mean net P/L of the winning trades; null without a win. */
  averageWin: number | null;
  /** Mean net P/L of the losing trades (negative); null without a loss. */
  averageLoss: number | null;
  /** Best trade's net P/L; null without a win. */
  largestWin: number | null;
  /** Worst trade's net P/L (negative); null without a loss. */
  largestLoss: number | null;
  /**
   * Share (0..1) of the run's time with at least one position open, from the closed trades (a
   * position still open at the end is not counted); null when the run spans no time.
   */
  exposure: number | null;
  /** Mean time from open to close of the closed trades, ms; null without trades. */
  averageHoldingMs: number | null;
  /** Most consecutive losing trades in close order (a breakeven trade ends a streak). */
  longestLosingStreak: number;
  long: SideStats;
  short: SideStats;
  /** Per UTC calendar month, in time order. */
  monthly: MonthReturn[];
}

/** Trading days in a year, to annualise daily figures. */
const TRADING_DAYS = 252;
/** Fewer daily returns than this make Sharpe and Sortino noise: reported n/a. */
export const MIN_DAILY_RETURNS = 20;
export const RATIO_METHOD =
  `daily returns: the equity at the last point of each trading day (the broker's, ending at 17:00 New York: five a week, as the ${TRADING_DAYS} a year assume) ` +
  `against the day before (the first day against the start balance), ` +
  `annualised by sqrt(${TRADING_DAYS}), risk-free rate 0; Sharpe = mean / sample standard deviation, ` +
  `Sortino = mean / downside deviation (root mean square of the negative returns over all days); n/a with fewer than ${MIN_DAILY_RETURNS} daily returns`;

const sum = (xs: readonly number[]) => clean(xs.reduce((s, x) => s + x, 0));
const meanOrNull = (xs: readonly number[]) => (xs.length ? clean(xs.reduce((s, x) => s + x, 0) / xs.length) : null);

export function drawdownSeries(equity: readonly EquityPoint[]): number[] {
  let peak = -Infinity;
  return equity.map((p) => {
    peak = Math.max(peak, p.equity);
    return clean(peak - p.equity);
  });
}

/**
 * The return of each trading day that has equity points: its last equity against the previous
 * day's. Trading days end at 17:00 New York, so the Sunday evening session counts with Monday
 * (by UTC days an FX week has six, some 310 a year, against the 252 the annualising assumes).
 */
export function dailyReturns(equity: readonly EquityPoint[], startBalance: number): number[] {
  const returns: number[] = [];
  let previous = startBalance;
  for (let i = 0; i < equity.length; i++) {
    const day = fxTradingDay(equity[i]!.ts);
    const next = equity[i + 1];
    if (next !== undefined && fxTradingDay(next.ts) === day) continue; // not the day's last point
    const close = equity[i]!.equity;
    returns.push(previous === 0 ? 0 : close / previous - 1);
    previous = close;
  }
  return returns;
}

export function ratios(equity: readonly EquityPoint[], startBalance: number): { sharpe: number | null; sortino: number | null; dailyReturns: number } {
  const r = dailyReturns(equity, startBalance);
  if (r.length < MIN_DAILY_RETURNS) return { sharpe: null, sortino: null, dailyReturns: r.length };
  const ann = Math.sqrt(TRADING_DAYS);
  const mean = r.reduce((s, x) => s + x, 0) / r.length;
  const sd = Math.sqrt(r.reduce((s, x) => s + (x - mean) ** 2, 0) / (r.length - 1));
  const dd = Math.sqrt(r.reduce((s, x) => s + Math.min(x, 0) ** 2, 0) / r.length);
  return {
    sharpe: sd > 1e-15 ? clean((mean / sd) * ann) : null,
    sortino: dd > 1e-15 ? clean((mean / dd) * ann) : null,
    dailyReturns: r.length,
  };
}

/** Share of [from, to] covered by the trades' [openTime, closeTime] (overlaps counted once); null when to <= from. */
export function exposure(trades: readonly ClosedTrade[], from: number, to: number): number | null {
  if (!(to > from)) return null;
  const spans = trades
    .map((t) => [Math.max(t.openTime, from), Math.min(t.closeTime, to)] as const)
    .filter(([a, b]) => b > a)
    .sort((x, y) => x[0] - y[0]);
  let covered = 0;
  let end = -Infinity;
  for (const [a, b] of spans) {
    if (b <= end) continue;
    covered += b - Math.max(a, end);
    end = b;
  }
  return clean(covered / (to - from));
}

/** Most consecutive losing trades in close order. */
export function longestLosingStreak(trades: readonly ClosedTrade[]): number {
  let best = 0;
  let run = 0;
  for (const t of [...trades].sort((a, b) => a.closeTime - b.closeTime)) {
    run = t.pl < 0 ? run + 1 : 0;
    best = Math.max(best, run);
  }
  return best;
}

export function sideStats(trades: readonly ClosedTrade[]): SideStats {
  const wins = trades.filter((t) => t.pl > 0).length;
  return { trades: trades.length, wins, winRate: trades.length ? clean(wins / trades.length) : null, netPL: sum(trades.map((t) => t.pl)) };
}

const monthOf = (ms: number) => isoUtc(ms).slice(0, 7);

/** Per UTC calendar month that has an equity point or a closed trade: its equity change, and apart from it the trades closed in it (MonthReturn). */
export function monthlyReturns(trades: readonly ClosedTrade[], equity: readonly EquityPoint[], startBalance: number): MonthReturn[] {
  const lastEquity = new Map<string, number>();
  for (const p of equity) lastEquity.set(monthOf(p.ts), p.equity);
  const pl = new Map<string, number[]>();
  for (const t of trades) {
    const m = monthOf(t.closeTime);
    const list = pl.get(m);
    if (list) list.push(t.pl);
    else pl.set(m, [t.pl]);
  }
  const months = [...new Set([...lastEquity.keys(), ...pl.keys()])].sort();
  let reference = startBalance;
  return months.map((month) => {
    const close = lastEquity.get(month);
    const measured = close !== undefined && reference > 0;
    const returnPct = measured ? clean((close / reference - 1) * 100) : null;
    const equityChange = measured ? clean(close - reference) : null;
    if (close !== undefined) reference = close;
    const closed = pl.get(month) ?? [];
    return { month, returnPct, equityChange, closedTrades: closed.length, closedPL: sum(closed) };
  });
}

/**
 * All metrics of a run. `startTime` is when the run began (a backtest's first candle); without it
 * the run's time, for the exposure, starts at its first equity point.
 */
export function computeMetrics(trades: readonly ClosedTrade[], equity: readonly EquityPoint[], startBalance: number, startTime?: number): Metrics {
  const wins = trades.filter((t) => t.pl > 0);
  const losses = trades.filter((t) => t.pl < 0);
  const dd = drawdownSeries(equity);
  let maxDd = 0;
  let maxDdPct = 0;
  let peak = -Infinity;
  equity.forEach((p, i) => {
    peak = Math.max(peak, p.equity);
    if (dd[i]! > maxDd) maxDd = dd[i]!;
    if (peak > 0) maxDdPct = Math.max(maxDdPct, (dd[i]! / peak) * 100);
  });
  const first = equity[0];
  const last = equity[equity.length - 1];
  const endEquity = last ? last.equity : startBalance;
  const endBalance = last ? last.balance : startBalance;
  const gp = sum(wins.map((t) => t.pl));
  const gl = -sum(losses.map((t) => t.pl));
  const from = startTime ?? first?.ts;
  return {
    trades: trades.length,
    wins: wins.length,
    losses: losses.length,
    winRate: trades.length ? clean(wins.length / trades.length) : 0,
    netPL: sum(trades.map((t) => t.pl)),
    grossPL: sum(trades.map((t) => t.grossPL)),
    commission: sum(trades.map((t) => t.commission)),
    rollover: sum(trades.map((t) => t.rollover ?? 0)),
    plPips: sum(trades.map((t) => t.plPips)),
    startBalance,
    endBalance,
    endEquity,
    returnPct: startBalance ? clean(((endEquity - startBalance) / startBalance) * 100) : 0,
    maxDrawdown: clean(maxDd),
    maxDrawdownPct: clean(maxDdPct),
    ...ratios(equity, startBalance),
    ratioMethod: RATIO_METHOD,
    profitFactor: gl > 0 ? clean(gp / gl) : null,
    breakeven: trades.length - wins.length - losses.length,
    expectancy: meanOrNull(trades.map((t) => t.pl)),
    expectancyPips: meanOrNull(trades.map((t) => t.plPips)),
    averageWin: meanOrNull(wins.map((t) => t.pl)),
    averageLoss: meanOrNull(losses.map((t) => t.pl)),
    largestWin: wins.length ? wins.reduce((m, t) => Math.max(m, t.pl), -Infinity) : null,
    largestLoss: losses.length ? losses.reduce((m, t) => Math.min(m, t.pl), Infinity) : null,
    exposure: from === undefined || last === undefined ? null : exposure(trades, from, last.ts),
    averageHoldingMs: meanOrNull(trades.map((t) => t.closeTime - t.openTime)),
    longestLosingStreak: longestLosingStreak(trades),
    long: sideStats(trades.filter((t) => t.isBuy)),
    short: sideStats(trades.filter((t) => !t.isBuy)),
    monthly: monthlyReturns(trades, equity, startBalance),
  };
}
