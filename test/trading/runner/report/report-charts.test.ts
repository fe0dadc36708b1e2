/**
 * The report's SVG charts: time ticks at round UTC times labelled for the span (hours with dates
 * where the day changes, days, months, years), value ticks, thinning that keeps extremes, and the
 * price chart's entry and exit markers at their trade's time and price on the chart's own axes.
 */
import type { CandleSeries } from '../../../../src/trading/fxcm/candle-file';
import { runBacktest } from '../../../../src/trading/runner/engine/backtest';
import { CHART, MAX_MARKED_TRADES, MAX_POINTS, downsample, equitySvg, priceSvg, splitAtGaps, timeTicks, valueTicks, type PriceSeries } from '../../../../src/trading/runner/report/report-charts';
import { buildReport, buyAndHold, renderHtml } from '../../../../src/trading/runner/report/report';
import type { ClosedTrade, EquityPoint } from '../../../../src/trading/runner/results';
import type { CloseReason, Strategy } from '../../../../src/trading/runner/strategy';
import { flat } from '../helpers';

const MIN = 60_000;
const H = 60 * MIN;
const D = 24 * H;
const utc = (s: string) => Date.parse(s);

interface Tick {
  pos: number;
  label: string;
  date?: string;
  ts?: number;
}

/** The ticks of an SVG: x ticks with their time, label and date line; y ticks with their label. */
function ticksOf(svg: string): { x: Tick[]; y: Tick[] } {
  const x = [...svg.matchAll(/<g class="xtick" data-ts="(\d+)" transform="translate\(([\d.]+),[\d.]+\)">.*?<text y="16"[^>]*>([^<]*)<\/text>(?:<text class="date"[^>]*>([^<]*)<\/text>)?<\/g>/g)].map((m) => ({
    ts: Number(m[1]),
    pos: Number(m[2]),
    label: m[3]!,
    date: m[4],
  }));
  const y = [...svg.matchAll(/<g class="ytick" transform="translate\([\d.]+,([\d.]+)\)">.*?<text[^>]*>([^<]*)<\/text><\/g>/g)].map((m) => ({ pos: Number(m[1]), label: m[2]! }));
  return { x, y };
}

function equity(from: number, to: number, n = 50): EquityPoint[] {
  return Array.from({ length: n }, (_, i) => {
    const e = 10000 + 100 * Math.sin(i / 5);
    return { ts: from + ((to - from) * i) / (n - 1), balance: e, equity: e };
  });
}

describe('time axis', () => {
  test('a 10-day run: a tick every 2 days at UTC midnight, labelled with the date', () => {
    const from = utc('2024-01-15T00:00:00Z');
    const ticks = timeTicks(from, utc('2024-01-25T00:00:00Z'));
    // epoch day of 2024-01-15 is 19737 (odd): 2-day ticks fall on even epoch days
    expect(ticks.map((t) => t.label)).toEqual(['2024-01-16', '2024-01-18', '2024-01-20', '2024-01-22', '2024-01-24']);
    for (const t of ticks) expect(new Date(t.ts).toISOString()).toBe(`${t.label}T00:00:00.000Z`);
  });

  test('the equity chart of a multi-day run: tick labels present, in order, left to right, at their dates', () => {
    const svg = equitySvg(equity(utc('2024-03-04T09:30:00Z'), utc('2024-03-09T17:00:00Z')), { from: utc('2024-03-04T09:30:00Z'), to: utc('2024-03-09T17:00:00Z') }, 10000);
    const { x, y } = ticksOf(svg);
    expect(x.length).toBeGreaterThanOrEqual(4);
    expect(x.map((t) => t.label)).toEqual(['2024-03-05', '2024-03-06', '2024-03-07', '2024-03-08', '2024-03-09']);
    for (let i = 1; i < x.length; i++) expect(x[i]!.pos).toBeGreaterThan(x[i - 1]!.pos);
    for (const t of x) expect(new Date(t.ts!).toISOString().slice(0, 10)).toBe(t.label);
    // the x position is linear in time: 2024-03-05 00:00 is (14.5 h / 127.5 h) of the plot from its left edge
    const plotW = CHART.width - CHART.left - CHART.right;
    expect(x[0]!.pos).toBeCloseTo(CHART.left + (14.5 / 127.5) * plotW, 1);
    // value labels: round steps, increasing upwards (smaller y), covering the data
    const values = y.map((t) => Number(t.label.replace(/,/g, '')));
    expect(values).toEqual([9900, 9950, 10000, 10050, 10100]);
    for (let i = 1; i < y.length; i++) expect(y[i]!.pos).toBeLessThan(y[i - 1]!.pos);
    // the lowest and highest value ticks are the plot's bottom and top edges
    expect(y[0]!.pos).toBeCloseTo(280 - CHART.bottom, 1);
    expect(y[y.length - 1]!.pos).toBeCloseTo(CHART.top, 1);
  });

  test('within a day: hours, with the date under the first tick and where the day changes', () => {
    const ticks = timeTicks(utc('2024-01-15T20:00:00Z'), utc('2024-01-16T04:00:00Z'));
    expect(ticks.map((t) => t.label)).toEqual(['20:00', '21:00', '22:00', '23:00', '00:00', '01:00', '02:00', '03:00', '04:00']);
    expect(ticks.map((t) => t.date)).toEqual(['2024-01-15', undefined, undefined, undefined, '2024-01-16', undefined, undefined, undefined, undefined]);
    expect(timeTicks(utc('2024-01-15T10:00:00Z'), utc('2024-01-15T11:00:00Z')).map((t) => t.label)).toEqual(['10:00', '10:10', '10:20', '10:30', '10:40', '10:50', '11:00']);
    expect(timeTicks(utc('2024-01-15T10:00:07Z'), utc('2024-01-15T10:01:00Z')).map((t) => t.label)).toEqual(['10:00:15', '10:00:30', '10:00:45', '10:01:00']);
  });

  test('weeks start on Monday; a year steps in months; decades in years', () => {
    const weeks = timeTicks(utc('2024-01-01T00:00:00Z'), utc('2024-02-20T00:00:00Z'));
    expect(weeks.map((t) => t.label)).toEqual(['2024-01-01', '2024-01-08', '2024-01-15', '2024-01-22', '2024-01-29', '2024-02-05', '2024-02-12', '2024-02-19']);
    for (const t of weeks) expect(new Date(t.ts).getUTCDay()).toBe(1);
    expect(timeTicks(utc('2023-01-10T00:00:00Z'), utc('2024-01-10T00:00:00Z')).map((t) => t.label)).toEqual(['2023-03', '2023-05', '2023-07', '2023-09', '2023-11', '2024-01']);
    expect(timeTicks(utc('2000-01-01T00:00:00Z'), utc('2024-06-01T00:00:00Z')).map((t) => t.label)).toEqual(['2000', '2005', '2010', '2015', '2020']);
  });
});

describe('value axis and thinning', () => {
  test('round steps and the decimals they need', () => {
    expect(valueTicks(9990, 10050)).toEqual({ lo: 9990, hi: 10050, ticks: [9990, 10000, 10010, 10020, 10030, 10040, 10050], decimals: 0 });
    expect(valueTicks(1.0612, 1.0684)).toMatchObject({ lo: 1.061, hi: 1.069, decimals: 3 });
    expect(valueTicks(100, 100)).toEqual({ lo: 99, hi: 101, ticks: [99, 99.5, 100, 100.5, 101], decimals: 1 });
    expect(valueTicks(-43.7, 0)).toMatchObject({ lo: -50, hi: 0, ticks: [-50, -40, -30, -20, -10, 0] });
  });

  test(`a long series keeps at most ${MAX_POINTS} points, in order, with its first, last, lowest and highest`, () => {
    const pts = Array.from({ length: 100_000 }, (_, i) => ({ ts: i, v: Math.sin(i / 1000) + (i === 51_234 ? 5 : 0) - (i === 77_777 ? 5 : 0) }));
    const kept = downsample(pts, MAX_POINTS, (p) => p.v);
    expect(kept.length).toBeLessThanOrEqual(MAX_POINTS);
    expect(kept.length).toBeGreaterThan(MAX_POINTS - 10);
    for (let i = 1; i < kept.length; i++) expect(kept[i]!.ts).toBeGreaterThan(kept[i - 1]!.ts);
    expect(kept.map((p) => p.ts)).toEqual(expect.arrayContaining([0, 99_999, 51_234, 77_777]));
    expect(downsample(pts.slice(0, 10), MAX_POINTS, (p) => p.v)).toHaveLength(10);
  });
});

function closed(tradeId: string, isBuy: boolean, openTime: number, openRate: number, closeTime: number, closeRate: number, reason: CloseReason): ClosedTrade {
  return { tradeId, symbol: 'EUR/USD', isBuy, amount: 10, openRate, closeRate, openTime, closeTime, plPips: 0, pl: 0, grossPL: 0, commission: 0, reason };
}

interface Marker {
  kind: string;
  trade: string;
  x: number;
  y: number;
}
const markersOf = (svg: string): Marker[] =>
  [...svg.matchAll(/<use href="#[^"]+" class="marker ([^"]+)" data-trade="([^"]+)" x="([\d.]+)" y="([\d.]+)">/g)].map((m) => ({ kind: m[1]!, trade: m[2]!, x: Number(m[3]), y: Number(m[4]) }));

describe('price chart markers', () => {
  const T = utc('2024-01-15T10:00:00Z');
  const series: PriceSeries = { symbol: 'EUR/USD', source: 'bars', points: Array.from({ length: 61 }, (_, i) => ({ ts: T + i * MIN, price: 1.1 + 0.005 * Math.abs(Math.sin(i / 9)) })) };
  const trades = [
    closed('T1', true, T + 10 * MIN, 1.102, T + 30 * MIN, 1.104, 'limit'),
    closed('T2', false, T + 40 * MIN, 1.103, T + 50 * MIN, 1.104, 'stop'),
    // a partial close: two exits, one entry
    closed('T3', false, T + 20 * MIN, 1.101, T + 50 * MIN, 1.102, 'close'),
    closed('T3', false, T + 20 * MIN, 1.101, T + 60 * MIN, 1.1, 'flatten'),
    { ...closed('X', true, T, 1.3, T + MIN, 1.3, 'close'), symbol: 'USD/JPY' }, // another symbol's chart
  ];
  const svg = priceSvg(series, trades, { from: T, to: T + 60 * MIN }, 'p0');
  const { x, y } = ticksOf(svg);
  const xAt = (ts: number) => x.find((t) => t.ts === ts)!.pos;
  const yAt = (price: number) => y.find((t) => Number(t.label) === price)!.pos;

  test('one marker per entry (buy and sell distinct) and per exit (by reason), nothing for other symbols', () => {
    const m = markersOf(svg);
    expect(m.filter((k) => k.kind.startsWith('entry')).map((k) => [k.kind, k.trade])).toEqual([
      ['entry buy', 'T1'],
      ['entry sell', 'T2'],
      ['entry sell', 'T3'],
    ]);
    expect(m.filter((k) => k.kind.startsWith('exit')).map((k) => [k.kind, k.trade])).toEqual([
      ['exit limit', 'T1'],
      ['exit stop', 'T2'],
      ['exit close', 'T3'],
      ['exit flatten', 'T3'],
    ]);
    expect(svg).toContain('<g id="p0-buy"><path d="M0,-7L6,4H-6Z"');
    expect(svg).toContain('<g id="p0-sell"><path d="M0,7L6,-4H-6Z"');
    for (const text of ['buy entry', 'sell entry', 'exit: limit', 'exit: stop', 'exit: closed', 'exit: flattened']) expect(svg).toContain(`>${text}</text>`);
  });

  test('each marker sits at its time on the time axis and its price on the value axis', () => {
    expect(x.map((t) => t.label)).toEqual(['10:00', '10:10', '10:20', '10:30', '10:40', '10:50', '11:00']);
    expect(y.map((t) => t.label)).toEqual(['1.100', '1.101', '1.102', '1.103', '1.104', '1.105']);
    const plotW = CHART.width - CHART.left - CHART.right;
    expect(xAt(T + 30 * MIN)).toBeCloseTo(CHART.left + plotW / 2, 1);
    // exits are drawn first, entries over them
    const expected = [
      ['T1', T + 30 * MIN, 1.104],
      ['T2', T + 50 * MIN, 1.104],
      ['T3', T + 50 * MIN, 1.102],
      ['T3', T + 60 * MIN, 1.1],
      ['T1', T + 10 * MIN, 1.102],
      ['T2', T + 40 * MIN, 1.103],
      ['T3', T + 20 * MIN, 1.101],
    ] as const;
    const m = markersOf(svg);
    expect(m).toHaveLength(expected.length);
    m.forEach((k, i) => {
      const [trade, ts, price] = expected[i]!;
      expect(k.trade).toBe(trade);
      expect(k.x).toBeCloseTo(xAt(ts), 1);
      expect(k.y).toBeCloseTo(yAt(price), 1);
    });
  });
});

describe('price charts in the report', () => {
  const T0 = 1_705_312_800; // 2024-01-15 10:00 UTC, in seconds
  type S = Strategy<Record<string, unknown>>;

  test('a backtest: the bid closes at each bar end, and a marker per trade entry and exit', async () => {
    const closes = Array.from({ length: 30 }, (_, i) => Math.round((1.1 + 0.001 * Math.sin(i / 4)) * 1e5) / 1e5);
    const data: CandleSeries[] = [{ symbol: 'EUR/USD', timeframe: 'm1', candles: flat(T0, closes) }];
    let n = 0;
    const s: S = {
      symbols: ['EUR/USD'],
      async onBar(ctx, bar) {
        n++;
        if (n % 5 === 0) await ctx.closeAll();
        if (n % 5 === 1) await ctx.openTrade({ symbol: bar.symbol, isBuy: n % 10 === 1, amount: 10 });
      },
    };
    const r = await runBacktest({ strategy: s, data });
    const rep = buildReport({ ...r, bars: data });
    expect(rep.startTime).toBe(T0 * 1000);
    expect(rep.prices).toHaveLength(1);
    expect(rep.prices[0]!.source).toBe('bars');
    expect(rep.prices[0]!.points[0]).toEqual({ ts: (T0 + 60) * 1000, price: closes[0] });
    expect(rep.prices[0]!.points).toHaveLength(30);
    const html = renderHtml(rep);
    const m = markersOf(html);
    expect(r.trades).toHaveLength(6);
    expect(m.filter((k) => k.kind.startsWith('entry'))).toHaveLength(6);
    expect(m.filter((k) => k.kind === 'entry buy')).toHaveLength(3);
    expect(m.filter((k) => k.kind === 'exit close')).toHaveLength(6);
    expect(html).not.toMatch(/<script|https?:\/\/(?!www\.w3\.org)/);
  });

  test('a paper/live result without bars: the line joins the trades’ prices, and the page says so', () => {
    const T = T0 * 1000;
    const trades = [closed('1', true, T, 1.1, T + H, 1.102, 'close'), closed('2', false, T + 2 * H, 1.101, T + 3 * H, 1.099, 'stop')];
    const rep = buildReport({ strategy: 's', mode: 'paper', currency: 'USD', startBalance: 100, trades, equity: [] });
    expect(rep.prices).toEqual([
      {
        symbol: 'EUR/USD',
        source: 'trades',
        points: [
          { ts: T, price: 1.1 },
          { ts: T + H, price: 1.102 },
          { ts: T + 2 * H, price: 1.101 },
          { ts: T + 3 * H, price: 1.099 },
        ],
      },
    ]);
    const html = renderHtml(rep);
    expect(html).toContain('No bars are kept in a paper result');
    expect(markersOf(html)).toHaveLength(4);
    expect(renderHtml(buildReport({ strategy: 's', mode: 'live', currency: 'USD', startBalance: 100, trades: [], equity: [] }))).toContain('No price chart: the run has no bars and no trades.');
  });

  test('a day-long run: equity and drawdown charts share the time axis', () => {
    const eq = equity(T0 * 1000, T0 * 1000 + D - MIN, 200);
    const html = renderHtml(buildReport({ strategy: 's', mode: 'backtest', currency: 'USD', startBalance: 10000, startTime: T0 * 1000, trades: [], equity: eq }));
    const charts = html.split('<svg').slice(1);
    expect(charts).toHaveLength(2); // equity, drawdown (no price chart: no bars, no trades)
    const a = ticksOf(charts[0]!).x;
    const b = ticksOf(charts[1]!).x;
    expect(a.length).toBeGreaterThan(3);
    expect(b).toEqual(a);
    expect(a[0]!.date).toBe('2024-01-15');
  });

  test('the charts start at the run\'s start (a backtest\'s first candle), before its first equity point', () => {
    const eq = equity(T0 * 1000 + 2 * H, T0 * 1000 + 10 * H);
    const html = renderHtml(buildReport({ strategy: 's', mode: 'backtest', currency: 'USD', startBalance: 10000, startTime: T0 * 1000, trades: [], equity: eq }));
    expect(ticksOf(html.split('<svg')[1]!).x.map((t) => t.label)).toEqual(['10:00', '12:00', '14:00', '16:00', '18:00', '20:00']);
  });
});

describe('many trades, joined windows, the benchmark and what was left open', () => {
  const T = utc('2024-01-15T00:00:00Z');
  const price = (i: number) => Math.round((1.1 + 0.002 * Math.sin(i / 30)) * 1e5) / 1e5;
  const series: PriceSeries = { symbol: 'EUR/USD', source: 'bars', points: Array.from({ length: 2000 }, (_, i) => ({ ts: T + i * MIN, price: price(i) })) };
  /** `n` trades of 10 minutes, one every 20 minutes, alternately won and lost. */
  const many = (n: number): ClosedTrade[] =>
    Array.from({ length: n }, (_, k) => ({ ...closed(`T${k}`, k % 2 === 0, T + k * 20 * MIN, price(k * 20), T + (k * 20 + 10) * MIN, price(k * 20 + 10), 'close'), pl: k % 2 === 0 ? 5 : -3 }));
  const segmentsOf = (svg: string) => [...svg.matchAll(/<line class="trade (won|lost|even)" data-trade="([^"]+)"/g)].map((m) => ({ result: m[1]!, trade: m[2]! }));

  test(`up to ${MAX_MARKED_TRADES} trades are marked; beyond, each is an entry-to-exit segment coloured by its result`, () => {
    const time = { from: T, to: T + 2000 * MIN };
    const few = priceSvg(series, many(MAX_MARKED_TRADES), time, 'a');
    expect(markersOf(few)).toHaveLength(2 * MAX_MARKED_TRADES);
    expect(segmentsOf(few)).toHaveLength(0);
    const lots = priceSvg(series, many(MAX_MARKED_TRADES + 1), time, 'b');
    expect(markersOf(lots)).toHaveLength(0);
    const seg = segmentsOf(lots);
    expect(seg).toHaveLength(MAX_MARKED_TRADES + 1);
    expect(seg.filter((s) => s.result === 'won')).toHaveLength(31);
    expect(lots).toContain('trade won (entry to exit)');
  });

  test(`the report adds a chart of the last ${MAX_MARKED_TRADES} trades, marked, on bars from an hour before the first of them`, () => {
    const trades = many(90);
    const rep = buildReport({ strategy: 's', mode: 'backtest', currency: 'USD', startBalance: 10000, startTime: T, trades, equity: [{ ts: T, balance: 10000, equity: 10000 }], bars: [{ symbol: 'EUR/USD', timeframe: 'm1', candles: flat(T / 1000, series.points.map((p) => p.price)) }] });
    const recent = rep.prices[0]!.recent!;
    expect(recent.firstEntry).toBe(trades[30]!.openTime);
    expect(recent.from).toBe(trades[30]!.openTime - H);
    expect(recent.points.every((p) => p.ts >= recent.from)).toBe(true);
    const html = renderHtml(rep);
    expect(html).toContain(`EUR/USD: the last ${MAX_MARKED_TRADES} trades`);
    const marked = new Set(markersOf(html).map((m) => m.trade));
    expect(marked.size).toBe(MAX_MARKED_TRADES);
    expect(marked.has('T29')).toBe(false);
    expect(marked.has('T30') && marked.has('T89')).toBe(true);
    expect(segmentsOf(html)).toHaveLength(90); // the whole run's chart
  });

  test('joined windows: every line breaks between them and the span between is shaded', () => {
    const w1 = { from: T, to: T + 100 * MIN };
    const w2 = { from: T + 500 * MIN, to: T + 600 * MIN };
    const eq = [...[0, 50, 100].map((m) => T + m * MIN), ...[501, 550, 600].map((m) => T + m * MIN)].map((ts, i) => ({ ts, balance: 10000 + i, equity: 10000 + i }));
    const time = { from: T, to: T + 600 * MIN, gaps: [{ from: w1.to, to: w2.from }] };
    const svg = equitySvg(eq, time, 10000);
    expect([...svg.matchAll(/<polyline class="equity"/g)]).toHaveLength(2);
    expect(svg).toMatch(/<rect class="gap" x="[\d.]+" y="\d+" width="[\d.]+"/);
    expect(splitAtGaps(eq, time).map((p) => p.length)).toEqual([3, 3]);
    expect(splitAtGaps(eq, { from: T, to: T + 600 * MIN }).map((p) => p.length)).toEqual([6]); // no gaps: one line
    // Through the report: the windows make the gaps of every chart.
    const html = renderHtml(buildReport({ strategy: 's', mode: 'out-of-sample', currency: 'USD', startBalance: 10000, startTime: T, trades: [], equity: eq, windows: [w1, w2] }));
    expect([...html.matchAll(/<polyline class="equity"/g)]).toHaveLength(2);
    expect([...html.matchAll(/<polygon class="drawdown"/g)]).toHaveLength(2);
    expect(html).toContain('not in this run');
  });

  test('buy and hold: equal parts of each symbol from its first close of the run; out of the market between windows', () => {
    const bars = (symbol: string, closes: number[], t0 = T / 1000): CandleSeries => ({ symbol, timeframe: 'm1', candles: flat(t0, closes) });
    // One symbol from 1.0 to 1.1: +10 %. The warm-up candle before the start is not held.
    const one = buyAndHold([bars('EUR/USD', [5, 1.0, 1.05, 1.1])], 10000, T + MIN)!;
    expect(one.returnPct).toBeCloseTo(10, 9);
    expect(one.points.at(-1)!.equity).toBeCloseTo(11000, 6);
    // Two symbols: +10 % and -10 %, half each: 0.
    const two = buyAndHold([bars('EUR/USD', [1.0, 1.1]), bars('USD/JPY', [100, 90])], 10000, undefined)!;
    expect(two.returnPct).toBeCloseTo(0, 9);
    // Two windows: +10 % in each, the jump between them (1.1 to 2.0) not held: 1.1 × 1.1.
    const gapped = bars('EUR/USD', [1.0, 1.1]);
    gapped.candles.push(...flat(T / 1000 + 600, [2.0, 2.2]));
    const windows = [{ from: T, to: T + 2 * MIN }, { from: T + 600_000, to: T + 602 * 1000 * 60 }];
    expect(buyAndHold([gapped], 10000, undefined, windows)!.returnPct).toBeCloseTo(21, 9);
    expect(buyAndHold([gapped], 10000, undefined)!.returnPct).toBeCloseTo(120, 9); // one window: held through
    expect(buyAndHold([], 10000, undefined)).toBeUndefined();
  });

  test('a backtest report: the benchmark beside the equity, and the positions open at its end with their unrealised P/L', async () => {
    const T0 = T / 1000;
    const data: CandleSeries[] = [{ symbol: 'EUR/USD', timeframe: 'm1', candles: flat(T0, [1.1, 1.1, 1.105, 1.11]) }];
    const s: Strategy<Record<string, unknown>> = {
      symbols: ['EUR/USD'],
      async onBar(ctx) {
        if (!ctx.positions().length) await ctx.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 10 });
      },
    };
    const r = await runBacktest({ strategy: s, data });
    expect(r.leftOpen!.positions).toHaveLength(1);
    expect(r.leftOpen!.positions[0]!.pl).toBeCloseTo((1.11 - 1.1002) * 10_000, 6);
    const rep = buildReport({ ...r, bars: data });
    expect(rep.buyAndHold!.returnPct).toBeCloseTo((1.11 / 1.1 - 1) * 100, 6);
    const html = renderHtml(rep);
    expect(html).toContain('Buy and hold (benchmark)');
    expect(html).toMatch(/<polyline class="benchmark"/);
    expect(html).toContain('Open when the backtest ended');
    expect(html).toContain(String(r.leftOpen!.positions[0]!.tradeId));
  });
});
