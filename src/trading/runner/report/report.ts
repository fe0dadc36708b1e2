/**
 * Run reports: trades, equity curve and drawdown, P/L in pips and account currency, trade
 * statistics, monthly returns, and the rate-limit budget per endpoint (what a paper/live run
 * spent, or for a backtest what a live run of it would spend). Written as JSON and as one
 * self-contained HTML page (inline CSS and inline SVG charts; no scripts, no network).
 * The numbers are report-metrics.ts's, the charts report-charts.ts's, a backtest's projected
 * budget engine/budget-projection.ts's.
 */
import fs from 'node:fs';
import path from 'node:path';
import { isoUtc } from '../../../platform/time-text';
import { PERIOD_SECONDS } from '../../fxcm/candles';
import type { CandleSeries } from '../../fxcm/candle-file';
import { clean } from '../../execution/instruments';
import { flattenOutcome } from '../errors';
import { MAX_MARKED_TRADES, MAX_POINTS, downsample, entryKey, drawdownSvg, equitySvg, esc, priceSvg, splitAtGaps, utc, type PriceSeries, type Span, type TimeDomain } from './report-charts';
import { computeMetrics, drawdownSeries, type Metrics } from './report-metrics';
import type { ClosedTrade, EquityPoint, RunError, RunResult } from '../results';

export { MIN_DAILY_RETURNS, RATIO_METHOD, computeMetrics, dailyReturns, drawdownSeries, ratios } from './report-metrics';
export type { Metrics, MonthReturn, SideStats } from './report-metrics';
export type { PriceSeries } from './report-charts';

export interface BudgetUse {
  endpoint: string;
  /** Calls sent to the broker. */
  sent: number;
  /** Calls that had to wait for a window reset, and the total wait. */
  waited: number;
  waitMs: number;
  /** Intents dropped because they expired while waiting. */
  expired: number;
  /** Calls the broker answered HTTP 429 (each held the calls of its kind); absent when none. */
  throttled?: number;
  /** The configured limit, e.g. "25/hour", when known. */
  limit?: string;
}

/** One limit a live run of a backtested strategy would spend against (engine/budget-projection.ts). */
export interface ProjectedLimitUse {
  /** Endpoint name as the limiter counts it: open_trade, get_model, candles, … */
  endpoint: string;
  /** The descriptor's entries after [broker, account, endpoint], e.g. `model=OpenPosition`; '' for the endpoint itself. */
  scope: string;
  /** Projected calls carrying this descriptor. */
  calls: number;
  /** The configured limit, e.g. `45/hour, token bucket, burst 5`; absent when none applies. */
  limit?: string;
  /** Length of the busiest window: the limit's unit; without a limit the broker's documented window, else an hour. */
  windowS: number;
  /** Most projected calls in any window [t, t + windowS), and the first call's time of that window. */
  busiest: number;
  busiestFrom?: number;
  /** Most calls the limit lets through in any such window (its algorithm's worst case). */
  allowed?: number;
  /** The broker's documented limit on this descriptor, and the most calls in any of its windows as the limiter would send them (after its waits). */
  documented?: { max: number; windowS: number; source: string; busiest: number };
  /** Calls the limiter made wait on this descriptor in the replay, and their total wait (shared by a descriptor's limits). */
  waited: number;
  waitMs: number;
  /** Calls still waiting 8 days after they were asked (a limit that lets nothing through): the replay gave up on them. */
  stuck: number;
}

export interface BudgetProjection {
  /** The limits config the projection used. */
  limitsFile: string;
  /** Projected broker calls of the live run. */
  calls: number;
  /** How the calls were projected, for the report. */
  method: string;
  limits: ProjectedLimitUse[];
}

export interface RunReport {
  strategy: string;
  mode: string;
  currency: string;
  /** When the run began, when known (a backtest's first candle). */
  startTime?: number;
  metrics: Metrics;
  trades: ClosedTrade[];
  equity: (EquityPoint & { drawdown: number })[];
  /** Price lines for the price charts, at most MAX_POINTS points each. */
  prices: PriceSeries[];
  budget: BudgetUse[];
  /** A backtest's projection of what a live run would spend (budget is then empty). */
  projectedBudget?: BudgetProjection;
  approximateCurrency: string[];
  error?: RunError;
  /** Positions and entry orders open when the run ended (paper/live: at the broker). */
  leftOpen?: RunResult['leftOpen'];
  /** The locks the run's protections set, in order. */
  locks?: RunResult['locks'];
  /**
   * The spans the run covers when it joins separate windows (a sweep's out-of-sample runs);
   * what lies between them is not part of it. Absent: one span.
   */
  windows?: Span[];
  /** Holding the run's symbols from its start instead (when its bars are known). */
  buyAndHold?: BuyAndHold;
}

/** The benchmark: the start balance put into the run's symbols in equal parts at its start and held. */
export interface BuyAndHold {
  returnPct: number;
  /** At most MAX_POINTS points of its equity. */
  points: { ts: number; equity: number }[];
  method: string;
}

export const BUY_AND_HOLD_METHOD =
  "the start balance in equal parts in each traded symbol at its first bid close of the run, valued at each bar's bid close (no spread, commission or rollover); between joined windows it is out of the market";

/**
 * The buy-and-hold benchmark of a run from its bars (the first series of each symbol), from
 * `startTime` on. Across a gap between windows the holding is sold at the window's last close and
 * bought again at the next window's first, as the run itself was not trading in between.
 */
export function buyAndHold(bars: readonly CandleSeries[], startBalance: number, startTime: number | undefined, windows?: readonly Span[]): BuyAndHold | undefined {
  const time: TimeDomain = { from: 0, to: 0, gaps: gapsOf(windows) };
  const symbols: { ratio: number; points: { ts: number; price: number }[] }[] = [];
  for (const symbol of new Set(bars.map((b) => b.symbol))) {
    const points = closesOf(bars.find((b) => b.symbol === symbol)!).filter((p) => startTime === undefined || p.ts > startTime);
    if (points.length) symbols.push({ ratio: 1, points });
  }
  if (!symbols.length || !(startBalance > 0)) return undefined;
  // every symbol's value as a ratio to what was put in, carried forward between its bars
  const steps: { ts: number; s: number; ratio: number }[] = [];
  symbols.forEach((sym, s) => {
    let acc = 1;
    for (const part of splitAtGaps(sym.points, time)) {
      const base = part[0]!.price;
      for (const p of part) steps.push({ ts: p.ts, s, ratio: (acc * p.price) / base });
      acc = (acc * part[part.length - 1]!.price) / base;
    }
  });
  steps.sort((a, b) => a.ts - b.ts || a.s - b.s);
  const share = startBalance / symbols.length;
  let total = startBalance;
  const points: { ts: number; equity: number }[] = [];
  for (const step of steps) {
    total += share * (step.ratio - symbols[step.s]!.ratio);
    symbols[step.s]!.ratio = step.ratio;
    const last = points[points.length - 1];
    if (last !== undefined && last.ts === step.ts) last.equity = total;
    else points.push({ ts: step.ts, equity: total });
  }
  return {
    returnPct: clean((total / startBalance - 1) * 100),
    points: downsample(points, MAX_POINTS, (p) => p.equity).map((p) => ({ ts: p.ts, equity: clean(p.equity) })),
    method: BUY_AND_HOLD_METHOD,
  };
}

/** A series' bid closes at each bar's end (when a decision on that bar is taken), epoch ms. */
function closesOf(series: CandleSeries): { ts: number; price: number }[] {
  const sec = PERIOD_SECONDS[series.timeframe];
  return series.candles.map((c) => ({ ts: (c.ts + sec) * 1000, price: c.bidClose }));
}

/** What lies between consecutive windows. */
function gapsOf(windows: readonly Span[] | undefined): Span[] {
  const sorted = [...(windows ?? [])].sort((a, b) => a.from - b.from);
  const gaps: Span[] = [];
  for (let i = 1; i < sorted.length; i++) if (sorted[i]!.from > sorted[i - 1]!.to) gaps.push({ from: sorted[i - 1]!.to, to: sorted[i]!.from });
  return gaps;
}

/**
 * A price line per symbol: the bid closes of the first series of its bars (at each bar's end,
 * when a decision on that bar is taken), else the trades' open and close prices in time order.
 */
export function priceSeries(trades: readonly ClosedTrade[], bars: readonly CandleSeries[] = []): PriceSeries[] {
  const symbols = [...new Set([...bars.map((b) => b.symbol), ...trades.map((t) => t.symbol)])];
  return symbols.map((symbol) => {
    const series = bars.find((b) => b.symbol === symbol);
    if (series) {
      const points = closesOf(series);
      const firstEntry = recentFirstEntry(trades.filter((t) => t.symbol === symbol));
      const from = firstEntry === undefined ? 0 : firstEntry - RECENT_LEAD_MS;
      return {
        symbol,
        source: 'bars',
        points: downsample(points, MAX_POINTS, (p) => p.price),
        ...(firstEntry === undefined ? {} : { recent: { firstEntry, from, points: downsample(points.filter((p) => p.ts >= from), MAX_POINTS, (p) => p.price) } }),
      };
    }
    const points = trades
      .filter((t) => t.symbol === symbol)
      .flatMap((t) => [
        { ts: t.openTime, price: t.openRate },
        { ts: t.closeTime, price: t.closeRate },
      ])
      .sort((a, b) => a.ts - b.ts);
    return { symbol, source: 'trades', points: downsample(points, MAX_POINTS, (p) => p.price) };
  });
}

/** The chart of a symbol's last trades begins this long before the first of them. */
const RECENT_LEAD_MS = 3600_000;

/** When the first of a symbol's last MAX_MARKED_TRADES trades opened; undefined when the main chart marks them all. */
function recentFirstEntry(own: readonly ClosedTrade[]): number | undefined {
  const entries = [...new Map(own.map((t) => [entryKey(t), t.openTime])).values()].sort((a, b) => a - b);
  return entries.length <= MAX_MARKED_TRADES ? undefined : entries[entries.length - MAX_MARKED_TRADES];
}

export function buildReport(
  r: RunResult & { budget?: BudgetUse[]; bars?: readonly CandleSeries[]; projectedBudget?: BudgetProjection; windows?: Span[] },
): RunReport {
  const dd = drawdownSeries(r.equity);
  const benchmark = r.bars ? buyAndHold(r.bars, r.startBalance, r.startTime, r.windows) : undefined;
  return {
    strategy: r.strategy,
    mode: r.mode,
    currency: r.currency,
    startTime: r.startTime,
    metrics: computeMetrics(r.trades, r.equity, r.startBalance, r.startTime),
    trades: r.trades,
    equity: r.equity.map((p, i) => ({ ...p, drawdown: dd[i]! })),
    prices: priceSeries(r.trades, r.bars),
    budget: r.budget ?? [],
    projectedBudget: r.projectedBudget,
    approximateCurrency: r.approximateCurrency ?? [],
    error: r.error,
    ...(r.leftOpen ? { leftOpen: r.leftOpen } : {}),
    ...(r.locks?.length ? { locks: r.locks } : {}),
    ...(r.windows ? { windows: r.windows } : {}),
    ...(benchmark ? { buyAndHold: benchmark } : {}),
  };
}

/** "trade 170162801 buy 10 EUR/USD at 1.10012, order 390285840 buy 10 EUR/USD at 1.09" — what a run left open. */
export function leftOpenText(open: NonNullable<RunResult['leftOpen']>): string {
  const side = (isBuy: boolean) => (isBuy ? 'buy' : 'sell');
  return [
    ...open.positions.map((p) => `trade ${p.tradeId} ${side(p.isBuy)} ${p.amount} ${p.symbol} at ${p.openRate}`),
    ...open.orders.map((o) => `order ${o.orderId} ${side(o.isBuy)} ${o.amount} ${o.symbol} at ${o.rate}`),
  ].join(', ');
}

function leftOpenSection(r: RunReport): string {
  const open = r.leftOpen;
  if (!open) return '';
  const backtest = r.mode === 'backtest';
  if (!open.positions.length && !open.orders.length) return backtest ? '<p>No position or entry order was open when the backtest ended.</p>' : '<p>Nothing of this run was left open at the broker.</p>';
  const side = (isBuy: boolean) => (isBuy ? 'buy' : 'sell');
  const positions = open.positions.map((p) => [esc(p.tradeId), esc(p.symbol), side(p.isBuy), String(p.amount), esc(utc(p.openTime)), String(p.openRate), fmt(p.plPips, 1), signed(p.pl, fmt(p.pl))]);
  const orders = open.orders.map((o) => [esc(o.orderId), esc(o.symbol), side(o.isBuy), String(o.amount), String(o.rate)]);
  return `<h2>${backtest ? 'Open when the backtest ended' : 'Left open at the broker'}</h2>
${backtest ? `<p class="note">Their unrealised P/L is in the end equity, not in the trades below.</p>` : `<p class="err">This run ended with ${open.positions.length} positions and ${open.orders.length} entry orders open: ${esc(leftOpenText(open))}.</p>`}
${open.positions.length ? table(['Trade', 'Symbol', 'Side', 'Amount (K)', 'Open time', 'Open', 'Pips', `P/L (${esc(r.currency)})`], positions) : ''}
${open.orders.length ? table(['Entry order', 'Symbol', 'Side', 'Amount (K)', 'Rate'], orders) : ''}`;
}

/** The locks the protections set: when, how long, on what, why (the first 50; the JSON has them all). */
function locksSection(r: RunReport): string {
  const locks = r.locks ?? [];
  if (!locks.length) return '';
  const rows = locks.slice(0, 50).map((l) => [esc(l.rule), esc(l.symbol ?? 'every symbol'), esc(utc(l.from)), esc(utc(l.until)), esc(l.reason)]);
  return `<h2>Protections</h2>
<p class="note">${locks.length} lock${locks.length > 1 ? 's' : ''} on new entries${locks.length > 50 ? ' (the first 50 here)' : ''}.</p>
${table(['Protection', 'On', 'From', 'Until', 'Why'], rows)}`;
}

const fmt = (n: number, d = 2) => (Number.isFinite(n) ? n.toFixed(d) : String(n));
const fmtOrNa = (n: number | null, d = 2, na = 'n/a') => (n === null ? na : fmt(n, d));

/** `45 s`, `12 min`, `3 h 5 min`, `2 d 4 h` */
export function duration(ms: number): string {
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s} s`;
  const m = Math.round(s / 60);
  if (m < 60) return `${m} min`;
  if (m < 1440) return `${Math.floor(m / 60)} h${m % 60 ? ` ${m % 60} min` : ''}`;
  const h = Math.round(m / 60);
  return `${Math.floor(h / 24)} d${h % 24 ? ` ${h % 24} h` : ''}`;
}

/** The span all charts share, so they line up: the run's start (or first point) to its last point. */
function timeDomain(r: RunReport): TimeDomain {
  let from = r.startTime ?? Infinity;
  let to = -Infinity;
  for (const p of [r.equity[0], r.equity[r.equity.length - 1], ...r.prices.flatMap((s) => [s.points[0], s.points[s.points.length - 1]])]) {
    if (!p) continue;
    from = Math.min(from, p.ts);
    to = Math.max(to, p.ts);
  }
  const gaps = gapsOf(r.windows);
  return Number.isFinite(from) && Number.isFinite(to) ? { from, to, ...(gaps.length ? { gaps } : {}) } : { from: 0, to: 0 };
}

const table = (head: string[], rows: string[][]) =>
  `<table><tr>${head.map((h) => `<th>${esc(h)}</th>`).join('')}</tr>${rows.map((row) => `<tr>${row.map((c) => `<td>${c}</td>`).join('')}</tr>`).join('\n')}</table>`;
/** A signed amount, green above zero and red below. */
const signed = (n: number | null, text: string) => `<span class="${n === null || n === 0 ? '' : n > 0 ? 'pos' : 'neg'}">${esc(text)}</span>`;

function budgetSection(r: RunReport): string {
  const p = r.projectedBudget;
  if (p) {
    const rows = p.limits.map((l) => {
      const over = l.documented !== undefined && l.documented.busiest > l.documented.max;
      return [
        esc(l.scope ? `${l.endpoint} (${l.scope})` : l.endpoint),
        String(l.calls),
        esc(l.limit ?? 'none configured'),
        esc(`${l.busiest} in ${duration(l.windowS * 1000)}${l.busiestFrom !== undefined ? ` from ${utc(l.busiestFrom)}` : ''}`),
        esc(l.allowed ?? '—'),
        l.documented ? `<span class="${over ? 'neg' : ''}">${esc(`${l.documented.max} per ${duration(l.documented.windowS * 1000)}${over ? ` (exceeded: ${l.documented.busiest})` : ''}`)}</span>` : '—',
        l.waited || l.stuck
          ? `<span class="neg">${esc([l.waited ? `yes: ${l.waited} calls, ${fmt(l.waitMs / 1000, 1)} s in all` : 'yes', l.stuck ? `${l.stuck} never sent (still waiting after 8 days)` : ''].filter(Boolean).join('; '))}</span>`
          : 'no',
      ];
    });
    return `<h2>Projected rate-limit budget of a live run</h2>
<p class="note">${p.calls} broker calls against the limits in ${esc(p.limitsFile)}. ${esc(p.method)}</p>
${table(['Endpoint', 'Calls', 'Limit', 'Busiest window', 'Limit allows', 'Broker documents', 'Live run would wait'], rows)}`;
  }
  const rows = r.budget.map((b) => [esc(b.endpoint), String(b.sent), String(b.waited), fmt(b.waitMs / 1000, 1), String(b.expired), String(b.throttled ?? 0), esc(b.limit ?? '')]);
  return `<h2>Rate-limit budget per endpoint</h2>
${table(['Endpoint', 'Sent', 'Waited', 'Wait (s)', 'Expired', 'HTTP 429', 'Limit'], rows.length ? rows : [['no broker calls', '', '', '', '', '', '']])}`;
}

function priceSection(r: RunReport, time: TimeDomain): string {
  if (!r.prices.length) return '<p class="note">No price chart: the run has no bars and no trades.</p>';
  return r.prices
    .map((s, i) => {
      const parts = [`<h3>${esc(s.symbol)}</h3>`];
      if (s.source === 'trades') parts.push(`<p class="note">No bars are kept in a ${esc(r.mode)} result: the dashed line joins the trades' fill prices.</p>`);
      parts.push(priceSvg(s, r.trades, time, `price${i}`));
      if (s.recent) {
        const zoom: TimeDomain = { ...time, from: Math.max(time.from, s.recent.from) };
        const firstEntry = s.recent.firstEntry;
        const last = r.trades.filter((t) => t.openTime >= firstEntry);
        parts.push(`<h4>${esc(s.symbol)}: the last ${MAX_MARKED_TRADES} trades</h4>`, priceSvg({ ...s, points: s.recent.points }, last, zoom, `recent${i}`));
      }
      return parts.join('\n');
    })
    .join('\n');
}

export function renderHtml(r: RunReport): string {
  const m = r.metrics;
  const ccy = r.currency;
  const rows: [string, string][] = [
    ['Trades', String(m.trades)],
    ['Win rate', `${fmt(m.winRate * 100, 1)}%`],
    [`Net P/L (${ccy})`, fmt(m.netPL)],
    ['P/L (pips)', fmt(m.plPips, 1)],
    [`Commission (${ccy})`, fmt(m.commission)],
    [`Rollover (${ccy})`, fmt(m.rollover)],
    ['Return', `${fmt(m.returnPct)}%`],
    [`Max drawdown (${ccy})`, `${fmt(m.maxDrawdown)} (${fmt(m.maxDrawdownPct)}%)`],
    ['Wins / losses / breakeven', `${m.wins} / ${m.losses} / ${m.breakeven}`],
    [`Sharpe (${m.dailyReturns} daily returns)`, fmtOrNa(m.sharpe)],
    ['Sortino', fmtOrNa(m.sortino)],
    ['Profit factor', m.profitFactor === null ? (m.losses === 0 ? 'n/a (no losing trade)' : 'n/a') : fmt(m.profitFactor)],
    [`End balance (${ccy})`, fmt(m.endBalance)],
    [`End equity (${ccy})`, fmt(m.endEquity)],
    ...(r.buyAndHold ? [['Buy and hold (benchmark)', `${fmt(r.buyAndHold.returnPct)}%`] as [string, string]] : []),
  ];
  const stats: [string, string][] = [
    [`Expectancy per trade (${ccy} / pips)`, m.expectancy === null ? 'n/a (no trade)' : `${fmt(m.expectancy)} / ${fmtOrNa(m.expectancyPips, 1)}`],
    [`Average win / largest win (${ccy})`, m.averageWin === null ? 'n/a (no winning trade)' : `${fmt(m.averageWin)} / ${fmtOrNa(m.largestWin)}`],
    [`Average loss / largest loss (${ccy})`, m.averageLoss === null ? 'n/a (no losing trade)' : `${fmt(m.averageLoss)} / ${fmtOrNa(m.largestLoss)}`],
    ['Exposure (time with a position open)', m.exposure === null ? 'n/a (the run spans no time)' : `${fmt(m.exposure * 100, 1)}%`],
    ['Average holding time', m.averageHoldingMs === null ? 'n/a (no trade)' : duration(m.averageHoldingMs)],
    ['Longest losing streak', `${m.longestLosingStreak} trades`],
  ];
  const sides = (['long', 'short'] as const).map((k) => {
    const s = m[k];
    return [k === 'long' ? 'long (buy)' : 'short (sell)', String(s.trades), String(s.wins), s.winRate === null ? 'n/a' : `${fmt(s.winRate * 100, 1)}%`, signed(s.netPL, fmt(s.netPL))];
  });
  const months = m.monthly.map((x) => [
    x.month,
    signed(x.returnPct, x.returnPct === null ? 'n/a' : `${fmt(x.returnPct)}%`),
    signed(x.equityChange, x.equityChange === null ? 'n/a' : fmt(x.equityChange)),
    String(x.closedTrades),
    signed(x.closedPL, fmt(x.closedPL)),
  ]);
  const trades = r.trades.map((t) =>
    [esc(t.tradeId), esc(t.symbol), t.isBuy ? 'buy' : 'sell', String(t.amount), esc(isoUtc(t.openTime)), String(t.openRate), esc(isoUtc(t.closeTime)), String(t.closeRate), fmt(t.plPips, 1), signed(t.pl, fmt(t.pl)), esc(t.reason)],
  );
  const time = timeDomain(r);
  const kv = (list: [string, string][]) => `<table>${list.map(([k, v]) => `<tr><th>${esc(k)}</th><td>${esc(v)}</td></tr>`).join('')}</table>`;
  return `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>${esc(r.strategy)} — ${esc(r.mode)} report</title>
<style>body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f3f3f3}td:first-child{text-align:left}.err{color:#b00020;font-weight:bold}.pos{color:#1a7f37}.neg{color:#cf222e}.note{color:#555;font-size:90%}.cols{display:flex;gap:2em;flex-wrap:wrap;align-items:flex-start}svg{display:block;max-width:960px}</style>
</head><body>
<h1>${esc(r.strategy)} <small>(${esc(r.mode)})</small></h1>
${r.error ? `<p class="err">Stopped by a strategy error in ${esc(r.error.hook)}: ${esc(r.error.message)}${r.error.location ? ` at ${esc(r.error.location)}` : ''}; ${esc(flattenOutcome(r.error))}.</p>` : ''}
${r.approximateCurrency.length ? `<p>P/L of ${esc(r.approximateCurrency.join(', '))} is in the quote currency (no conversion rate to ${esc(ccy)}).</p>` : ''}
<div class="cols"><div><h2>Summary</h2>${kv(rows)}</div><div><h2>Trade statistics</h2>${kv(stats)}
<h3>Long / short</h3>${table(['Side', 'Trades', 'Wins', 'Win rate', `Net P/L (${ccy})`], sides)}</div>
<div><h2>Monthly returns</h2>${table(['Month (UTC)', 'Equity return', `Equity change (${ccy})`, 'Trades closed', `Their P/L (${ccy})`], months.length ? months : [['no data', '', '', '', '']])}</div></div>
<p class="note">Sharpe and Sortino: ${esc(m.ratioMethod)}. A month's equity return and change are its last equity against the previous month's (the start balance for the first), open positions and rollover included; apart from them, the trades closed in the month and their P/L, each trade's whole P/L in its closing month.</p>
<h2>Equity (${esc(ccy)}, times UTC)</h2>
${equitySvg(r.equity, time, m.startBalance, undefined, r.buyAndHold?.points)}
${r.buyAndHold ? `<p class="note">Buy and hold: ${esc(r.buyAndHold.method)}.</p>` : ''}
<h2>Drawdown (${esc(ccy)})</h2>
${drawdownSvg(r.equity, time)}
<h2>Prices, entries and exits</h2>
${priceSection(r, time)}
${leftOpenSection(r)}
${locksSection(r)}
${budgetSection(r)}
<h2>Trades</h2>
${table(['Id', 'Symbol', 'Side', 'Amount (K)', 'Open time', 'Open', 'Close time', 'Close', 'Pips', 'P/L', 'Reason'], trades)}
</body></html>
`;
}

/** Writes `<out>.json` and `<out>.html` (out without extension); returns both paths. */
export function writeReport(r: RunReport, out: string): { json: string; html: string } {
  const base = out.replace(/\.(json|html)$/, '');
  fs.mkdirSync(path.dirname(path.resolve(base)), { recursive: true });
  const json = `${base}.json`;
  const html = `${base}.html`;
  fs.writeFileSync(json, JSON.stringify(r, (_k, v) => (v === Infinity ? 'Infinity' : v), 2) + '\n');
  fs.writeFileSync(html, renderHtml(r));
  return { json, html };
}
