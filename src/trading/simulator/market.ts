/**
 * The simulated market: quotes per symbol, market hours, and candles. Live quotes and candle
 * history both come from one seeded price path per symbol (price-path.ts), so history is exactly
 * the past of the live stream; replayed candles can drive the live quotes instead.
 *
 * The broker's candle rule, which a runner building bars from the stream reproduces exactly: the
 * stream ticks at every multiple of the tick interval (epoch-aligned, stamped with that instant,
 * while the market is open), and a candle of [start, end) is made of the ticks stamped in it: open
 * the first, close the last, high and low over all of them, bid and ask apart, tickQty their
 * number. The interval divides the path's 5-second grid, so every grid point (where the path
 * turns) is a tick. Prices forced with setPrice are off the path and in no candle.
 */
import { EventEmitter } from 'node:events';
import { readCandles } from '../fxcm/candle-file';
import { MAX_CANDLES_PER_REQUEST, PERIOD_SECONDS, normalizePeriod } from '../fxcm/candles';
import type { Candle, CandleRow, Period } from '../fxcm/types';
import type { Clock } from '../../platform/clock';
import { isFxMarketOpen } from '../fxcm/market-hours';
import { DEFAULT_ROLLOVER, type RolloverRates } from '../execution/financing';
import { MarketCalendar } from './calendar';
import { GRID_MS } from './calendar';
import { DEFAULT_DAILY_VOLATILITY, PricePath } from './price-path';

/** Tick interval when none is set (manual ticks): the grid of the candle rule. */
const DEFAULT_TICK_MS = 1000;

export { isFxMarketOpen } from '../fxcm/market-hours';
export { mulberry32 } from './random';

export interface SymbolSpec {
  symbol: string;
  offerId: number;
  pip: number;
  ratePrecision: number;
  /** Mid price at PATH_ANCHOR_MS (2026-01-01T00:00Z); the price path wanders from there, forwards and backwards. */
  price: number;
  spreadPips: number;
  instrumentType?: number;
  /** rollB/rollS, per 10K units per day (execution/financing.ts); default the typical rates there. */
  rollover?: RolloverRates;
}

/** Offer ids from the broker's public list. */
export const KNOWN_SYMBOLS: SymbolSpec[] = [
  { symbol: 'EUR/USD', offerId: 1, pip: 0.0001, ratePrecision: 5, price: 1.1, spreadPips: 0.2 },
  { symbol: 'USD/JPY', offerId: 2, pip: 0.01, ratePrecision: 3, price: 145, spreadPips: 0.3 },
  { symbol: 'GBP/USD', offerId: 3, pip: 0.0001, ratePrecision: 5, price: 1.27, spreadPips: 0.5 },
  { symbol: 'USD/CHF', offerId: 4, pip: 0.0001, ratePrecision: 5, price: 0.9, spreadPips: 0.5 },
  { symbol: 'EUR/CHF', offerId: 5, pip: 0.0001, ratePrecision: 5, price: 0.95, spreadPips: 0.8 },
  { symbol: 'AUD/USD', offerId: 6, pip: 0.0001, ratePrecision: 5, price: 0.66, spreadPips: 0.3 },
  { symbol: 'USD/CAD', offerId: 7, pip: 0.0001, ratePrecision: 5, price: 1.36, spreadPips: 0.6 },
  { symbol: 'NZD/USD', offerId: 8, pip: 0.0001, ratePrecision: 5, price: 0.6, spreadPips: 0.9 },
  { symbol: 'EUR/GBP', offerId: 9, pip: 0.0001, ratePrecision: 5, price: 0.86, spreadPips: 0.6 },
  { symbol: 'EUR/JPY', offerId: 10, pip: 0.01, ratePrecision: 3, price: 158, spreadPips: 0.6 },
  { symbol: 'GBP/JPY', offerId: 11, pip: 0.01, ratePrecision: 3, price: 184, spreadPips: 1.2 },
];

export interface MarketQuote {
  bid: number;
  ask: number;
  high: number;
  low: number;
  updatedMs: number;
}

export interface MarketOptions {
  clock: Clock;
  seed?: number;
  symbols?: (string | SymbolSpec)[];
  /**
   * Daily volatility: standard deviation of the log mid over 24 hours of average activity
   * (default 0.005, so EUR/USD moves about 0.5 % a day; quiet and busy hours and spells vary around it).
   */
  volatility?: number;
  /**
   * Auto-tick interval on the clock; 0/undefined = only manual ticks. Ticks sample the path; they
   * do not move it. It must divide 5000 (the path's grid); candles follow a 1000 ms grid without it.
   */
  tickIntervalMs?: number;
  /** Replayed candles per symbol (or a candle file's path, read as backtests read it): each tick moves to the next candle's close. */
  replay?: Record<string, Candle[] | string>;
  /** Override market hours (default: FX hours). */
  isOpen?: (ms: number) => boolean;
}

/** Events: `price` (symbol, MarketQuote). */
export class Market extends EventEmitter {
  readonly clock: Clock;
  readonly specs = new Map<string, SymbolSpec>();
  private readonly quotes = new Map<string, MarketQuote>();
  private readonly paths = new Map<string, PricePath>();
  private readonly replay = new Map<string, { candles: Candle[]; i: number }>();
  private timer: unknown;
  private hoursOverride: boolean | undefined;
  private readonly calendar: MarketCalendar;
  /** The instants the stream ticks at (multiples of it), and so what candles are made of. */
  private readonly tickMs: number;
  private nextTickMs = 0;

  constructor(private readonly opts: MarketOptions) {
    super();
    this.clock = opts.clock;
    const iv = opts.tickIntervalMs ?? 0;
    if (!Number.isInteger(iv) || iv < 0 || (iv > 0 && GRID_MS % iv !== 0)) {
      throw new Error(`tick interval ${iv} ms: it must divide ${GRID_MS} ms (the price path's grid), e.g. 1000, 500, 250, 100, 50, 20`);
    }
    this.tickMs = iv || DEFAULT_TICK_MS;
    this.calendar = new MarketCalendar(opts.isOpen ?? isFxMarketOpen);
    const list = opts.symbols ?? ['EUR/USD', 'USD/JPY', 'GBP/USD'];
    const now = this.clock.nowMs();
    for (const s of list) {
      const spec = typeof s === 'string' ? KNOWN_SYMBOLS.find((k) => k.symbol === s) : s;
      if (!spec) throw new Error(`unknown symbol ${String(s)}: pass a SymbolSpec`);
      this.specs.set(spec.symbol, { rollover: DEFAULT_ROLLOVER[spec.symbol], ...spec });
      const path = new PricePath(opts.seed ?? 1, spec, opts.volatility ?? DEFAULT_DAILY_VOLATILITY, this.calendar);
      this.paths.set(spec.symbol, path);
      const [bid, ask] = path.quoteAt(now).map((v) => this.round(spec, v)) as [number, number];
      this.quotes.set(spec.symbol, { bid, ask, high: ask, low: bid, updatedMs: now });
    }
    for (const [sym, src] of Object.entries(opts.replay ?? {})) {
      this.replay.set(sym, { candles: typeof src === 'string' ? readCandles(src) : src, i: 0 });
    }
  }

  private round(spec: SymbolSpec, v: number): number {
    const f = Math.pow(10, spec.ratePrecision);
    return Math.round(v * f) / f;
  }

  symbols(): string[] {
    return [...this.specs.keys()];
  }

  spec(symbol: string): SymbolSpec | undefined {
    return this.specs.get(symbol);
  }

  specByOfferId(id: number): SymbolSpec | undefined {
    return [...this.specs.values()].find((s) => s.offerId === id);
  }

  quote(symbol: string): MarketQuote | undefined {
    const q = this.quotes.get(symbol);
    return q && { ...q };
  }

  nowMs(): number {
    return this.clock.nowMs();
  }

  /** Is the market open (at `ms`, default now)? `forceOpen` overrides. */
  isOpen(ms = this.clock.nowMs()): boolean {
    return this.hoursOverride ?? this.calendar.isOpen(ms);
  }

  /** Force the market open/closed (undefined = back to market hours). */
  forceOpen(open: boolean | undefined): void {
    this.hoursOverride = open;
  }

  /**
   * Sets a quote (ask defaults to bid + spread) and runs everything that reacts to prices. Tests and
   * fault injection force prices this way: the quote departs from the path until the next tick.
   */
  setPrice(symbol: string, bid: number, ask?: number): MarketQuote {
    return this.quoteAt(symbol, bid, ask, this.clock.nowMs());
  }

  /** The quote of `symbol` becomes bid/ask, stamped `atMs`, and is pushed. */
  private quoteAt(symbol: string, bid: number, ask: number | undefined, atMs: number): MarketQuote {
    const spec = this.specs.get(symbol);
    const q = this.quotes.get(symbol);
    if (!spec || !q) throw new Error(`unknown symbol ${symbol}`);
    q.bid = this.round(spec, bid);
    q.ask = this.round(spec, ask ?? bid + spec.spreadPips * spec.pip);
    q.high = Math.max(q.high, q.ask);
    q.low = Math.min(q.low, q.bid);
    q.updatedMs = atMs;
    this.emit('price', symbol, { ...q });
    return { ...q };
  }

  /**
   * Every symbol's quote becomes the path's price at `atMs` (default now), stamped with it (or the
   * next replayed candle). No-op when closed.
   */
  tick(atMs = this.clock.nowMs()): void {
    if (!this.isOpen(atMs)) return;
    for (const [symbol, path] of this.paths) {
      const r = this.replay.get(symbol);
      if (r && r.candles.length) {
        const c = r.candles[r.i % r.candles.length];
        r.i++;
        this.quoteAt(symbol, c.bidClose, c.askClose, atMs);
        continue;
      }
      const [bid, ask] = path.quoteAt(atMs);
      this.quoteAt(symbol, bid, ask, atMs);
    }
  }

  /**
   * Auto-tick at every multiple of `tickIntervalMs` on the clock, each stamped with its instant;
   * a timer that fires late catches up, so no instant of the candle rule is skipped.
   */
  start(): void {
    const iv = this.opts.tickIntervalMs;
    if (!iv || this.timer !== undefined) return;
    this.nextTickMs = (Math.floor(this.clock.nowMs() / iv) + 1) * iv;
    const loop = () => {
      for (; this.nextTickMs <= this.clock.nowMs(); this.nextTickMs += iv) this.tick(this.nextTickMs);
      this.timer = this.clock.setTimeout(loop, this.nextTickMs - this.clock.nowMs());
    };
    this.timer = this.clock.setTimeout(loop, this.nextTickMs - this.clock.nowMs());
  }

  stop(): void {
    if (this.timer !== undefined) this.clock.clearTimeout(this.timer);
    this.timer = undefined;
  }

  /** Advances a ManualClock (running ticks and timers due); throws on the system clock. */
  advance(ms: number): void {
    const c = this.clock as { advance?: (ms: number) => void };
    if (!c.advance) throw new Error('advance() needs a ManualClock');
    c.advance(ms);
  }

  private periodStart(period: Period, sec: number): number {
    if (period === 'M1') {
      const d = new Date(sec * 1000);
      return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1) / 1000;
    }
    if (period === 'W1') {
      // weeks start on Sunday 00:00 UTC (epoch day 0 was a Thursday)
      const days = Math.floor(sec / 86400);
      return (days - ((days + 4) % 7)) * 86400;
    }
    const p = PERIOD_SECONDS[period];
    return Math.floor(sec / p) * p;
  }

  private nextStart(period: Period, start: number): number {
    if (period === 'M1') {
      const d = new Date(start * 1000);
      return Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1) / 1000;
    }
    return start + PERIOD_SECONDS[period];
  }

  /**
   * Candles whose start lies in [fromSec, toSec] and not after now, ascending; the current one is
   * made of the ticks until now. A candle is made of the ticks stamped in its period while the
   * market trades (the rule in the header), so longer candles are exactly their shorter ones
   * joined; candles shorter than a week without a tick are absent. At most `max` (the most recent
   * ones).
   */
  candles(symbol: string, periodId: string, fromSec: number, toSec: number, max = MAX_CANDLES_PER_REQUEST): CandleRow[] {
    const period = normalizePeriod(periodId);
    const spec = this.specs.get(symbol);
    const path = this.paths.get(symbol);
    if (!period || !spec || !path) return [];
    const nowMs = this.clock.nowMs();
    const last = Math.min(toSec, Math.floor(nowMs / 1000));
    const intraday = PERIOD_SECONDS[period] < 86400 * 7;
    const iv = this.tickMs;
    const spans: [number, [number, number], number][] = [];
    let start = this.periodStart(period, fromSec);
    if (start < fromSec) start = this.nextStart(period, start);
    for (; start <= last; start = this.nextStart(period, start)) {
      // the ticks stamped in [start, end) and not after now, while the market is open
      const end = Math.min(this.nextStart(period, start) * 1000, nowMs + 1);
      const traded = this.calendar.openSpan(start * 1000, end);
      const first = traded && Math.ceil(traded[0] / iv) * iv;
      const lastTick = traded && Math.ceil(traded[1] / iv) * iv - iv;
      if (first !== undefined && lastTick !== undefined && first <= lastTick) {
        // a week or a month spans closed weekends: their instants are no ticks
        spans.push([start, [first, lastTick], (lastTick - first - this.calendar.closedMs(first, lastTick)) / iv + 1]);
      }
      else if (!intraday) spans.push([start, [start * 1000, end - 1], 0]);
    }
    const r = (v: number) => this.round(spec, v);
    return spans.slice(-max).map(([s, [from, to], ticks]) => {
      const c = path.candle(from, to);
      return [s, r(c.bidOpen), r(c.bidClose), r(c.bidHigh), r(c.bidLow), r(c.askOpen), r(c.askClose), r(c.askHigh), r(c.askLow), ticks];
    });
  }
}
