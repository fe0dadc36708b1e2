/**
 * Run reports: trades, equity curve and drawdown, P/L in pips and account currency, win rate,
 * Sharpe and Sortino, and the rate-limit budget used per endpoint. Written as JSON and as one
 * self-contained HTML page (inline CSS and an inline SVG equity chart; no scripts, no network).
 *
 * Sharpe/Sortino: {@link RATIO_METHOD}. Annualising the returns between equity points instead
 * (a point per minute bar, a point per tick) multiplies noise by sqrt(points per year) and gave
 * Sharpe 25 on a minute-bar backtest; daily returns are what traders compare.
 */
import fs from 'node:fs';
import path from 'node:path';
import { clean } from '../execution/instruments';
import type { ClosedTrade, EquityPoint, RunError, RunResult } from './results';
import { flattenOutcome } from './errors';

export interface BudgetUse {
  endpoint: string;
  /** Calls sent to the broker. */
  sent: number;
  /** Calls that had to wait for a window reset, and the total wait. */
  waited: number;
  waitMs: number;
  /** Intents dropped because they expired while waiting. */
  expired: number;
  /** The configured limit, e.g. "25/hour", when known. */
  limit?: string;
}

export interface Metrics {
  trades: number;
  wins: number;
  losses: number;
  winRate: number;
  netPL: number;
  grossPL: number;
  commission: number;
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
}

export interface RunReport {
  strategy: string;
  mode: string;
  currency: string;
  metrics: Metrics;
  trades: ClosedTrade[];
  equity: (EquityPoint & { drawdown: number })[];
  budget: BudgetUse[];
  approximateCurrency: string[];
  error?: RunError;
}

const DAY_MS = 86400_000;
/** Trading days in a year, to annualise daily figures. */
const TRADING_DAYS = 252;
/** Fewer daily returns than this make Sharpe and Sortino noise: reported n/a. */
export const MIN_DAILY_RETURNS = 20;
export const RATIO_METHOD =
  `daily returns: the equity at the last point of each UTC day against the day before (the first day against the start balance), ` +
  `annualised by sqrt(${TRADING_DAYS}), risk-free rate 0; Sharpe = mean / sample standard deviation, ` +
  `Sortino = mean / downside deviation (root mean square of the negative returns over all days); n/a with fewer than ${MIN_DAILY_RETURNS} daily returns`;

export function drawdownSeries(equity: readonly EquityPoint[]): number[] {
  let peak = -Infinity;
  return equity.map((p) => {
    peak = Math.max(peak, p.equity);
    return clean(peak - p.equity);
  });
}

/** The return of each UTC day that has equity points: its last equity against the previous day's. */
export function dailyReturns(equity: readonly EquityPoint[], startBalance: number): number[] {
  const returns: number[] = [];
  let previous = startBalance;
  for (let i = 0; i < equity.length; i++) {
    const day = Math.floor(equity[i]!.ts / DAY_MS);
    const next = equity[i + 1];
    if (next !== undefined && Math.floor(next.ts / DAY_MS) === day) continue; // not the day's last point
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

export function computeMetrics(trades: readonly ClosedTrade[], equity: readonly EquityPoint[], startBalance: number): Metrics {
  const wins = trades.filter((t) => t.pl > 0);
  const losses = trades.filter((t) => t.pl < 0);
  const sum = (xs: readonly number[]) => clean(xs.reduce((s, x) => s + x, 0));
  const dd = drawdownSeries(equity);
  let maxDd = 0;
  let maxDdPct = 0;
  let peak = -Infinity;
  equity.forEach((p, i) => {
    peak = Math.max(peak, p.equity);
    if (dd[i]! > maxDd) maxDd = dd[i]!;
    if (peak > 0) maxDdPct = Math.max(maxDdPct, (dd[i]! / peak) * 100);
  });
  const last = equity[equity.length - 1];
  const endEquity = last ? last.equity : startBalance;
  const endBalance = last ? last.balance : startBalance;
  const gp = sum(wins.map((t) => t.pl));
  const gl = -sum(losses.map((t) => t.pl));
  return {
    trades: trades.length,
    wins: wins.length,
    losses: losses.length,
    winRate: trades.length ? clean(wins.length / trades.length) : 0,
    netPL: sum(trades.map((t) => t.pl)),
    grossPL: sum(trades.map((t) => t.grossPL)),
    commission: sum(trades.map((t) => t.commission)),
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
  };
}

export function buildReport(r: RunResult & { budget?: BudgetUse[] }): RunReport {
  const dd = drawdownSeries(r.equity);
  return {
    strategy: r.strategy,
    mode: r.mode,
    currency: r.currency,
    metrics: computeMetrics(r.trades, r.equity, r.startBalance),
    trades: r.trades,
    equity: r.equity.map((p, i) => ({ ...p, drawdown: dd[i]! })),
    budget: r.budget ?? [],
    approximateCurrency: r.approximateCurrency ?? [],
    error: r.error,
  };
}

const esc = (s: unknown) => String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
const fmt = (n: number, d = 2) => (Number.isFinite(n) ? n.toFixed(d) : String(n));
const fmtOrNa = (n: number | null) => (n === null ? 'n/a' : fmt(n));
const iso = (ms: number) => new Date(ms).toISOString().replace('.000Z', 'Z');

/** Inline SVG of equity (line) and drawdown (area below), scaled to the data. */
export function equitySvg(equity: readonly (EquityPoint & { drawdown?: number })[], width = 900, height = 300): string {
  if (equity.length === 0) return `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}"><text x="10" y="20">no data</text></svg>`;
  const pad = 40;
  const t0 = equity[0]!.ts;
  const t1 = equity[equity.length - 1]!.ts;
  const vals = equity.map((p) => p.equity);
  let lo = Math.min(...vals);
  let hi = Math.max(...vals);
  if (hi === lo) {
    hi += 1;
    lo -= 1;
  }
  const x = (ts: number) => pad + (t1 === t0 ? 0 : ((ts - t0) / (t1 - t0)) * (width - 2 * pad));
  const y = (v: number) => height - pad - ((v - lo) / (hi - lo)) * (height - 2 * pad);
  const pts = equity.map((p) => `${x(p.ts).toFixed(1)},${y(p.equity).toFixed(1)}`).join(' ');
  const dd = equity.map((p) => `${x(p.ts).toFixed(1)},${y(p.equity + (p.drawdown ?? 0)).toFixed(1)}`);
  const ddPoly = [...dd, ...equity.map((p) => `${x(p.ts).toFixed(1)},${y(p.equity).toFixed(1)}`).reverse()].join(' ');
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${width} ${height}" width="100%" role="img" aria-label="equity curve">`,
    `<rect x="0" y="0" width="${width}" height="${height}" fill="#fff"/>`,
    `<line x1="${pad}" y1="${height - pad}" x2="${width - pad}" y2="${height - pad}" stroke="#999"/>`,
    `<line x1="${pad}" y1="${pad}" x2="${pad}" y2="${height - pad}" stroke="#999"/>`,
    `<text x="4" y="${pad}" font-size="11">${esc(fmt(hi))}</text>`,
    `<text x="4" y="${height - pad}" font-size="11">${esc(fmt(lo))}</text>`,
    `<text x="${pad}" y="${height - 10}" font-size="11">${esc(iso(t0))}</text>`,
    `<text x="${width - pad}" y="${height - 10}" font-size="11" text-anchor="end">${esc(iso(t1))}</text>`,
    `<polygon class="drawdown" points="${ddPoly}" fill="#f4b4b4" fill-opacity="0.6"/>`,
    `<polyline class="equity" points="${pts}" fill="none" stroke="#1f6feb" stroke-width="2"/>`,
    `</svg>`,
  ].join('\n');
}

export function renderHtml(r: RunReport): string {
  const m = r.metrics;
  const rows: [string, string][] = [
    ['Trades', String(m.trades)],
    ['Win rate', `${fmt(m.winRate * 100, 1)}%`],
    [`Net P/L (${r.currency})`, fmt(m.netPL)],
    ['P/L (pips)', fmt(m.plPips, 1)],
    [`Commission (${r.currency})`, fmt(m.commission)],
    ['Return', `${fmt(m.returnPct)}%`],
    [`Max drawdown (${r.currency})`, `${fmt(m.maxDrawdown)} (${fmt(m.maxDrawdownPct)}%)`],
    ['Wins / losses / breakeven', `${m.wins} / ${m.losses} / ${m.breakeven}`],
    [`Sharpe (${m.dailyReturns} daily returns)`, fmtOrNa(m.sharpe)],
    ['Sortino', fmtOrNa(m.sortino)],
    ['Profit factor', m.profitFactor === null ? (m.losses === 0 ? 'n/a (no losing trade)' : 'n/a') : fmt(m.profitFactor)],
    [`End balance (${r.currency})`, fmt(m.endBalance)],
    [`End equity (${r.currency})`, fmt(m.endEquity)],
  ];
  const trades = r.trades
    .map(
      (t) =>
        `<tr><td>${esc(t.tradeId)}</td><td>${esc(t.symbol)}</td><td>${t.isBuy ? 'buy' : 'sell'}</td><td>${t.amount}</td><td>${esc(iso(t.openTime))}</td><td>${t.openRate}</td><td>${esc(iso(t.closeTime))}</td><td>${t.closeRate}</td><td>${fmt(t.plPips, 1)}</td><td>${fmt(t.pl)}</td><td>${esc(t.reason)}</td></tr>`,
    )
    .join('\n');
  const budget = r.budget
    .map((b) => `<tr><td>${esc(b.endpoint)}</td><td>${b.sent}</td><td>${b.waited}</td><td>${fmt(b.waitMs / 1000, 1)}</td><td>${b.expired}</td><td>${esc(b.limit ?? '')}</td></tr>`)
    .join('\n');
  return `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>${esc(r.strategy)} — ${esc(r.mode)} report</title>
<style>body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f3f3f3}.err{color:#b00020;font-weight:bold}</style>
</head><body>
<h1>${esc(r.strategy)} <small>(${esc(r.mode)})</small></h1>
${r.error ? `<p class="err">Stopped by a strategy error in ${esc(r.error.hook)}: ${esc(r.error.message)}${r.error.location ? ` at ${esc(r.error.location)}` : ''}; ${esc(flattenOutcome(r.error))}.</p>` : ''}
${r.approximateCurrency.length ? `<p>P/L of ${esc(r.approximateCurrency.join(', '))} is in the quote currency (no conversion rate to ${esc(r.currency)}).</p>` : ''}
<h2>Summary</h2><table>${rows.map(([k, v]) => `<tr><th>${esc(k)}</th><td>${esc(v)}</td></tr>`).join('')}</table>
<p class="note">Sharpe and Sortino: ${esc(m.ratioMethod)}.</p>
<h2>Equity and drawdown</h2>
${equitySvg(r.equity)}
<h2>Rate-limit budget per endpoint</h2>
<table><tr><th>Endpoint</th><th>Sent</th><th>Waited</th><th>Wait (s)</th><th>Expired</th><th>Limit</th></tr>${budget || '<tr><td colspan="6">no broker calls</td></tr>'}</table>
<h2>Trades</h2>
<table><tr><th>Id</th><th>Symbol</th><th>Side</th><th>Amount (K)</th><th>Open time</th><th>Open</th><th>Close time</th><th>Close</th><th>Pips</th><th>P/L</th><th>Reason</th></tr>
${trades}</table>
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
