/**
 * The report's charts, inline SVG (no scripts, no network): equity, drawdown and a price chart
 * per symbol with the trades' entries and exits, all on one UTC time axis so they line up when
 * stacked. Axes carry ticks at round times (spacing chosen by the span: seconds to years) and
 * round values; long series are thinned to at most MAX_POINTS points, keeping each slice's
 * lowest and highest point so spikes and drawdowns survive.
 */
import { isoUtc } from '../../../platform/time-text';
import type { ClosedTrade, EquityPoint } from '../results';
import type { CloseReason } from '../strategy';

/** A price line to draw: a symbol's bar closes, or the trades' fill prices when no bars were kept. */
export interface PriceSeries {
  symbol: string;
  /** 'bars': closes of the bars the run saw (bid, at each bar's end); 'trades': the trades' open and close prices. */
  source: 'bars' | 'trades';
  points: { ts: number; price: number }[];
  /**
   * With more trades than MAX_MARKED_TRADES, for a closer chart of the last of them: the first of
   * their entries, and the line from an hour before it.
   */
  recent?: { firstEntry: number; from: number; points: { ts: number; price: number }[] };
}

export interface TimeDomain {
  from: number;
  to: number;
  /**
   * Spans inside [from, to] that are not part of the run (between the joined out-of-sample windows
   * of a sweep): the lines break there and the spans are shaded.
   */
  gaps?: readonly Span[];
}

export interface Span {
  from: number;
  to: number;
}

/** Beyond this many trades a price chart draws each trade as an entry-to-exit segment, without markers. */
export const MAX_MARKED_TRADES = 60;

/** One entry of a trade: its partial closes are rows of their own with the same entry. */
export const entryKey = (t: ClosedTrade): string => `${t.tradeId}|${t.openTime}`;

/** Points a drawn line keeps at most (a price line of a year of minute bars would be 370k). */
export const MAX_POINTS = 2000;

const SEC = 1000;
const MIN = 60 * SEC;
const HOUR = 60 * MIN;
const DAY = 24 * HOUR;
/** Fixed tick steps, smallest first; longer spans step in calendar months (MONTH_STEPS). */
const FIXED_STEPS = [SEC, 5 * SEC, 15 * SEC, 30 * SEC, MIN, 2 * MIN, 5 * MIN, 10 * MIN, 15 * MIN, 30 * MIN, HOUR, 2 * HOUR, 3 * HOUR, 6 * HOUR, 12 * HOUR, DAY, 2 * DAY, 7 * DAY, 14 * DAY];
const MONTH_STEPS = [1, 2, 3, 6, 12, 24, 60, 120];
/** Weeks start on Monday: 1970-01-05 is the first Monday after the epoch. */
const MONDAY_OFFSET = 4 * DAY;
const AVG_MONTH = 30.44 * DAY;

export interface TimeTick {
  ts: number;
  label: string;
  /** The date (`YYYY-MM-DD`) under a time-of-day label, on the first tick and where the day changes. */
  date?: string;
}


/** Ticks at round UTC times within [from, to], at most about `maxTicks`, labelled for their step. */
export function timeTicks(from: number, to: number, maxTicks = 8): TimeTick[] {
  const span = to - from;
  const fixed = FIXED_STEPS.find((s) => span / s <= maxTicks);
  const out: TimeTick[] = [];
  if (fixed !== undefined) {
    const offset = fixed % (7 * DAY) === 0 ? MONDAY_OFFSET : 0;
    let previousDate = '';
    for (let ts = Math.ceil((from - offset) / fixed) * fixed + offset; ts <= to; ts += fixed) {
      const iso = isoUtc(ts);
      const date = iso.slice(0, 10);
      if (fixed >= DAY) out.push({ ts, label: date });
      else {
        out.push({ ts, label: iso.slice(11, fixed < MIN ? 19 : 16), date: date !== previousDate ? date : undefined });
        previousDate = date;
      }
    }
    return out;
  }
  const months = MONTH_STEPS.find((m) => span / (m * AVG_MONTH) <= maxTicks) ?? Math.ceil(span / (maxTicks * 12 * AVG_MONTH)) * 12;
  const start = new Date(from);
  let index = start.getUTCFullYear() * 12 + start.getUTCMonth();
  index = Math.ceil(index / months) * months;
  for (;;) {
    const ts = Date.UTC(Math.floor(index / 12), index % 12, 1);
    if (ts > to) break;
    if (ts >= from) out.push({ ts, label: isoUtc(ts).slice(0, months % 12 === 0 ? 4 : 7) });
    index += months;
  }
  return out;
}

export interface ValueTicks {
  /** The axis range: the data's range widened to whole steps. */
  lo: number;
  hi: number;
  ticks: number[];
  decimals: number;
}

/** About `count` ticks at 1, 2 or 5 × 10^k over [lo, hi]; a flat range is widened around its value. */
export function valueTicks(lo: number, hi: number, count = 5): ValueTicks {
  if (!(hi > lo)) {
    const pad = Math.abs(lo) * 0.01 || 1;
    lo -= pad;
    hi += pad;
  }
  const rough = (hi - lo) / count;
  const mag = 10 ** Math.floor(Math.log10(rough));
  const norm = rough / mag;
  const step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
  const decimals = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
  const round = (v: number) => Number(v.toFixed(decimals));
  const first = Math.floor(lo / step + 1e-9);
  const last = Math.ceil(hi / step - 1e-9);
  const ticks: number[] = [];
  for (let k = first; k <= last; k++) ticks.push(round(k * step));
  return { lo: round(first * step), hi: round(last * step), ticks, decimals };
}

/**
 * At most `max` points of a series in time order: the first, the last, and the lowest and the
 * highest of each of (max - 2) / 2 equal slices.
 */
export function downsample<T>(points: readonly T[], max: number, value: (p: T) => number): T[] {
  if (points.length <= max) return [...points];
  const slices = Math.max(1, Math.floor((max - 2) / 2));
  const keep = new Set<number>([0, points.length - 1]);
  for (let b = 0; b < slices; b++) {
    const start = Math.floor((b * points.length) / slices);
    const end = Math.floor(((b + 1) * points.length) / slices);
    let lo = start;
    let hi = start;
    for (let i = start + 1; i < end; i++) {
      if (value(points[i]!) < value(points[lo]!)) lo = i;
      if (value(points[i]!) > value(points[hi]!)) hi = i;
    }
    keep.add(lo).add(hi);
  }
  return [...keep].sort((a, b) => a - b).map((i) => points[i]!);
}

export const esc = (s: unknown) => String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
/** `2024-01-02 10:15Z` */
export const utc = (ms: number) => isoUtc(ms).slice(0, 16).replace('T', ' ') + 'Z';
const num = (v: number, decimals: number) => v.toLocaleString('en-US', { minimumFractionDigits: decimals, maximumFractionDigits: decimals });
const px = (v: number) => v.toFixed(1);

/** Chart geometry shared by every chart, so stacked charts line up. */
export const CHART = { width: 900, left: 72, right: 40, top: 26, bottom: 40 } as const;

interface Frame {
  x(ts: number): number;
  y(v: number): number;
  /** Background, grid, ticks and their labels. */
  axes: string;
  /** clip-path attribute value keeping data inside the plot. */
  clip: string;
  defs: string;
}

function frame(id: string, height: number, time: TimeDomain, lo: number, hi: number): Frame {
  const { width, left, right, top, bottom } = CHART;
  const plotW = width - left - right;
  const plotH = height - top - bottom;
  const from = time.to > time.from ? time.from : time.from - 30 * MIN;
  const to = time.to > time.from ? time.to : time.to + 30 * MIN;
  const v = valueTicks(lo, hi);
  const x = (ts: number) => left + ((ts - from) / (to - from)) * plotW;
  const y = (val: number) => top + plotH - ((val - v.lo) / (v.hi - v.lo)) * plotH;
  const parts = [`<rect x="${left}" y="${top}" width="${plotW}" height="${plotH}" fill="#fff" stroke="#bbb"/>`];
  for (const g of time.gaps ?? []) {
    const x0 = Math.max(left, x(g.from));
    const x1 = Math.min(left + plotW, x(g.to));
    if (x1 > x0) parts.push(`<rect class="gap" x="${px(x0)}" y="${top}" width="${px(x1 - x0)}" height="${plotH}" fill="#eee"/>`);
  }
  for (const t of v.ticks) {
    parts.push(
      `<g class="ytick" transform="translate(${left},${px(y(t))})"><line x2="${plotW}" stroke="#eee"/><line x1="-4" stroke="#999"/>` +
        `<text x="-7" dy="4" text-anchor="end">${esc(num(t, v.decimals))}</text></g>`,
    );
  }
  for (const t of timeTicks(from, to)) {
    parts.push(
      `<g class="xtick" data-ts="${t.ts}" transform="translate(${px(x(t.ts))},${top + plotH})"><line y2="${-plotH}" stroke="#eee"/><line y2="4" stroke="#999"/>` +
        `<text y="16" text-anchor="middle">${esc(t.label)}</text>${t.date ? `<text class="date" y="30" text-anchor="middle">${esc(t.date)}</text>` : ''}</g>`,
    );
  }
  return {
    x,
    y,
    axes: parts.join('\n'),
    clip: `url(#${id}-plot)`,
    defs: `<clipPath id="${id}-plot"><rect x="${left}" y="${top}" width="${plotW}" height="${plotH}"/></clipPath>`,
  };
}

function svg(label: string, height: number, body: string[]): string {
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${CHART.width} ${height}" width="100%" role="img" aria-label="${esc(label)}" font-family="system-ui,sans-serif" font-size="11" fill="#333">`,
    ...body,
    `</svg>`,
  ].join('\n');
}

/** Legend entries along the top margin: [svg of a 12 px symbol centred at 0,0, its text]. */
function legend(items: [string, string][]): string {
  let x = CHART.left;
  return items
    .map(([symbol, text]) => {
      const g = `<g transform="translate(${x + 6},13)">${symbol}<text x="10" dy="4">${esc(text)}</text></g>`;
      x += 30 + text.length * 6;
      return g;
    })
    .join('');
}

const line = (points: string, cls: string, stroke: string, clip: string, extra = '') =>
  `<polyline class="${cls}" points="${points}" fill="none" stroke="${stroke}" stroke-width="1.5" stroke-linejoin="round" clip-path="${clip}"${extra}/>`;

/** The parts of a time-ordered series that no gap of `time` separates (a line is drawn per part). */
export function splitAtGaps<T extends { ts: number }>(points: readonly T[], time: TimeDomain): T[][] {
  if (!points.length) return [];
  const gaps = time.gaps ?? [];
  const parts: T[][] = [[points[0]!]];
  for (let i = 1; i < points.length; i++) {
    const before = points[i - 1]!.ts;
    const at = points[i]!.ts;
    if (gaps.some((g) => before <= g.from && at >= g.to)) parts.push([]);
    parts[parts.length - 1]!.push(points[i]!);
  }
  return parts;
}

/** One polyline per part of `points` between gaps. */
function lines<T extends { ts: number }>(points: readonly T[], f: Frame, time: TimeDomain, value: (p: T) => number, cls: string, stroke: string, extra = ''): string[] {
  return splitAtGaps(points, time).map((part) => line(part.map((p) => `${px(f.x(p.ts))},${px(f.y(value(p)))}`).join(' '), cls, stroke, f.clip, extra));
}

const GAP_LEGEND: [string, string] = ['<rect x="-6" y="-5" width="12" height="10" fill="#eee" stroke="#bbb"/>', 'not in this run'];

function noData(label: string): string {
  return svg(label, 60, [`<text x="${CHART.left}" y="34">no data</text>`]);
}

/** The equity curve, with the start balance dashed and, when given, the buy-and-hold benchmark. */
export function equitySvg(equity: readonly EquityPoint[], time: TimeDomain, startBalance: number, height = 280, benchmark: readonly { ts: number; equity: number }[] = []): string {
  if (!equity.length) return noData('equity curve');
  let lo = startBalance;
  let hi = startBalance;
  for (const p of [...equity, ...benchmark]) {
    lo = Math.min(lo, p.equity);
    hi = Math.max(hi, p.equity);
  }
  const f = frame('equity', height, time, lo, hi);
  const start = px(f.y(startBalance));
  const value = (p: { equity: number }) => p.equity;
  return svg('equity curve', height, [
    `<defs>${f.defs}</defs>`,
    f.axes,
    `<line class="start-balance" x1="${CHART.left}" x2="${CHART.width - CHART.right}" y1="${start}" y2="${start}" stroke="#888" stroke-dasharray="4 3"/>`,
    ...lines(downsample(benchmark, MAX_POINTS, value), f, time, value, 'benchmark', '#bf8700', ' stroke-dasharray="6 3"'),
    ...lines(downsample(equity, MAX_POINTS, value), f, time, value, 'equity', '#1f6feb'),
    legend([
      ['<line x1="-6" x2="6" stroke="#1f6feb" stroke-width="2"/>', 'equity'],
      ['<line x1="-6" x2="6" stroke="#888" stroke-dasharray="4 3"/>', 'start balance'],
      ...(benchmark.length ? [['<line x1="-6" x2="6" stroke="#bf8700" stroke-width="2" stroke-dasharray="6 3"/>', 'buy and hold'] as [string, string]] : []),
      ...(time.gaps?.length ? [GAP_LEGEND] : []),
    ]),
  ]);
}

/** Drawdown below the running equity peak, as a negative area (account currency). */
export function drawdownSvg(equity: readonly (EquityPoint & { drawdown: number })[], time: TimeDomain, height = 150): string {
  if (!equity.length) return noData('drawdown');
  const worst = equity.reduce((m, p) => Math.max(m, p.drawdown), 0);
  const f = frame('drawdown', height, time, -worst, 0);
  const zero = px(f.y(0));
  const areas = splitAtGaps(downsample(equity, MAX_POINTS, (p) => -p.drawdown), time).map((kept) => {
    const first = px(f.x(kept[0]!.ts));
    const last = px(f.x(kept[kept.length - 1]!.ts));
    const pts = kept.map((p) => `${px(f.x(p.ts))},${px(f.y(-p.drawdown))}`).join(' ');
    return `<polygon class="drawdown" points="${first},${zero} ${pts} ${last},${zero}" fill="#f4b4b4" stroke="#cf222e" stroke-width="1" clip-path="${f.clip}"/>`;
  });
  return svg('drawdown', height, [
    `<defs>${f.defs}</defs>`,
    f.axes,
    ...areas,
    legend([['<rect x="-6" y="-5" width="12" height="10" fill="#f4b4b4" stroke="#cf222e"/>', 'drawdown from the equity peak']]),
  ]);
}

/** Marker shapes, centred on the price: entries by side, exits by close reason. */
const MARKERS: Record<'buy' | 'sell' | CloseReason, { shape: string; text: string }> = {
  buy: { shape: '<path d="M0,-7L6,4H-6Z" fill="#1a7f37"/>', text: 'buy entry' },
  sell: { shape: '<path d="M0,7L6,-4H-6Z" fill="#cf222e"/>', text: 'sell entry' },
  close: { shape: '<circle r="5" fill="none" stroke="#24292f" stroke-width="2"/>', text: 'exit: closed' },
  stop: { shape: '<path d="M-4,-4L4,4M-4,4L4,-4" stroke="#cf222e" stroke-width="2.5"/>', text: 'exit: stop' },
  trailing: { shape: '<path d="M-4,-4L4,4M-4,4L4,-4" stroke="#bc4c00" stroke-width="2.5"/>', text: 'exit: trailing stop' },
  limit: { shape: '<rect x="-4" y="-4" width="8" height="8" fill="#1a7f37" stroke="#fff"/>', text: 'exit: limit' },
  flatten: { shape: '<path d="M0,-5L5,0L0,5L-5,0Z" fill="#8250df"/>', text: 'exit: flattened' },
  operator: { shape: '<path d="M0,-5L5,0L0,5L-5,0Z" fill="#0969da"/>', text: 'exit: by the operator' },
  broker: { shape: '<path d="M0,-5L5,0L0,5L-5,0Z" fill="#6e7781"/>', text: 'exit: by the broker' },
};

/**
 * A symbol's price line with its trades. Up to MAX_MARKED_TRADES trades: a marker per entry (one
 * per trade, ▲ buy / ▼ sell, at the open price and time) and per exit (one per close, partial
 * closes included, shaped by the reason, at the close price and time); markers are `<use>`
 * elements with x/y at the point and a tooltip. More trades than that would hide the price under
 * their markers: each close is then a thin segment from its entry to its exit, green when it won,
 * red when it lost (the report adds a chart of the last trades with their markers).
 */
export function priceSvg(series: PriceSeries, trades: readonly ClosedTrade[], time: TimeDomain, id: string, height = 260): string {
  const own = trades.filter((t) => t.symbol === series.symbol && t.closeTime >= time.from && t.openTime <= time.to);
  if (!series.points.length && !own.length) return noData(`${series.symbol} price`);
  let lo = Infinity;
  let hi = -Infinity;
  for (const v of [...series.points.map((p) => p.price), ...own.flatMap((t) => [t.openRate, t.closeRate])]) {
    lo = Math.min(lo, v);
    hi = Math.max(hi, v);
  }
  const f = frame(id, height, time, lo, hi);
  const segments = new Set(own.map(entryKey)).size > MAX_MARKED_TRADES;
  const used = new Set<keyof typeof MARKERS>();
  const marks: string[] = [];
  const tipOf = (t: ClosedTrade, what: string, price: number, ts: number) => `${t.isBuy ? 'buy' : 'sell'} ${t.amount}K, trade ${t.tradeId}: ${what} ${price} at ${utc(ts)}`;
  const mark = (kind: keyof typeof MARKERS, cls: string, ts: number, price: number, t: ClosedTrade, what: string) => {
    used.add(kind);
    marks.push(`<use href="#${id}-${kind}" class="marker ${cls}" data-trade="${esc(t.tradeId)}" x="${px(f.x(ts))}" y="${px(f.y(price))}"><title>${esc(tipOf(t, what, price, ts))}</title></use>`);
  };
  if (segments) {
    for (const t of own) {
      const colour = t.pl > 0 ? '#1a7f37' : t.pl < 0 ? '#cf222e' : '#6e7781';
      const tip = `${tipOf(t, 'opened at', t.openRate, t.openTime)}, closed (${t.reason}) at ${t.closeRate} at ${utc(t.closeTime)}, P/L ${t.pl}`;
      marks.push(
        `<line class="trade ${t.pl > 0 ? 'won' : t.pl < 0 ? 'lost' : 'even'}" data-trade="${esc(t.tradeId)}" x1="${px(f.x(t.openTime))}" y1="${px(f.y(t.openRate))}" x2="${px(f.x(t.closeTime))}" y2="${px(f.y(t.closeRate))}" stroke="${colour}" stroke-width="2" stroke-linecap="round" opacity="0.8" clip-path="${f.clip}"><title>${esc(tip)}</title></line>`,
      );
    }
  } else {
    // exits first: a reversal's entry sits on the exit it follows, and is drawn over it
    for (const t of own) mark(t.reason, `exit ${t.reason}`, t.closeTime, t.closeRate, t, `${t.reason === 'close' ? 'closed' : `closed (${t.reason})`} at`);
    const entered = new Set<string>();
    for (const t of own) {
      const key = entryKey(t);
      if (entered.has(key)) continue; // a partial close repeats the trade's entry
      entered.add(key);
      mark(t.isBuy ? 'buy' : 'sell', `entry ${t.isBuy ? 'buy' : 'sell'}`, t.openTime, t.openRate, t, 'opened at');
    }
  }
  const defs = [...used].map((k) => `<g id="${id}-${k}">${MARKERS[k].shape}</g>`).join('');
  const lineLabel = series.source === 'bars' ? 'bid close' : 'trade prices (no bars)';
  const dashed = series.source === 'trades' ? ' stroke-dasharray="3 3"' : '';
  return svg(`${series.symbol} price`, height, [
    `<defs>${f.defs}${defs}</defs>`,
    f.axes,
    ...lines(downsample(series.points, MAX_POINTS, (p) => p.price), f, time, (p) => p.price, `price ${series.source}`, series.source === 'bars' ? '#57606a' : '#8c959f', dashed),
    ...marks,
    legend([
      [`<line x1="-6" x2="6" stroke="#57606a" stroke-width="2"${dashed}/>`, lineLabel],
      ...(segments
        ? ([
            ['<line x1="-6" y1="4" x2="6" y2="-4" stroke="#1a7f37" stroke-width="2"/>', 'trade won (entry to exit)'],
            ['<line x1="-6" y1="-4" x2="6" y2="4" stroke="#cf222e" stroke-width="2"/>', 'trade lost'],
          ] as [string, string][])
        : (Object.keys(MARKERS) as (keyof typeof MARKERS)[]).filter((k) => used.has(k)).map((k): [string, string] => [MARKERS[k].shape, MARKERS[k].text])),
      ...(time.gaps?.length ? [GAP_LEGEND] : []),
    ]),
  ]);
}
