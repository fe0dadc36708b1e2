/**
 * The simulated market: quotes per symbol, market hours, and candles. Live quotes and candle
 * history both come from one seeded price path per symbol (price-path.ts), so history is exactly
 * the past of the live stream; replayed candles can drive the live quotes instead.
 */
import { EventEmitter } from 'node:events';
import { readCandles } from '../fxcm/candle-file';
import { MAX_CANDLES_PER_REQUEST, PERIOD_SECONDS, normalizePeriod } from '../fxcm/candles';
import type { Candle, CandleRow, Period } from '../fxcm/types';
import type { Clock } from '../../core/clock';
import { isFxMarketOpen } from '../fxcm/market-hours';
import { DEFAULT_ROLLOVER, type RolloverRates } from '../execution/financing';
import { MarketCalendar } from './calendar';
import { DEFAULT_DAILY_VOLATILITY, PricePath } from './price-path';

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

export interface Quote {
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
  /** Auto-tick interval on the clock; 0/undefined = only manual ticks. Ticks sample the path; they do not move it. */
  tickIntervalMs?: number;
  /** Replayed candles per symbol (or a candle file's path, read as backtests read it): each tick moves to the next candle's close. */
  replay?: Record<string, Candle[] | string>;
  /** Override market hours (default: FX hours). */
  isOpen?: (ms: number) => boolean;
}

/** Events: `price` (symbol, Quote). */
export class Market extends EventEmitter {
  readonly clock: Clock;
  readonly specs = new Map<string, SymbolSpec>();
  private readonly quotes = new Map<string, Quote>();
  private readonly paths = new Map<string, PricePath>();
  private readonly replay = new Map<string, { candles: Candle[]; i: number }>();
  private timer: unknown;
  private hoursOverride: boolean | undefined;
  private readonly calendar: MarketCalendar;

  constructor(private readonly opts: MarketOptions) {
    super();
    this.clock = opts.clock;
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

  quote(symbol: string): Quote | undefined {
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
  setPrice(symbol: string, bid: number, ask?: number): Quote {
    const spec = this.specs.get(symbol);
    const q = this.quotes.get(symbol);
    if (!spec || !q) throw new Error(`unknown symbol ${symbol}`);
    q.bid = this.round(spec, bid);
    q.ask = this.round(spec, ask ?? bid + spec.spreadPips * spec.pip);
    q.high = Math.max(q.high, q.ask);
    q.low = Math.min(q.low, q.bid);
    q.updatedMs = this.clock.nowMs();
    this.emit('price', symbol, { ...q });
    return { ...q };
  }

  /** Every symbol's quote becomes the path's price now (or the next replayed candle). No-op when closed. */
  tick(): void {
    if (!this.isOpen()) return;
    for (const [symbol, path] of this.paths) {
      const r = this.replay.get(symbol);
      if (r && r.candles.length) {
        const c = r.candles[r.i % r.candles.length];
        r.i++;
        this.setPrice(symbol, c.bidClose, c.askClose);
        continue;
      }
      const [bid, ask] = path.quoteAt(this.clock.nowMs());
      this.setPrice(symbol, bid, ask);
    }
  }

  /** Auto-tick on the clock every `tickIntervalMs`. */
  start(): void {
    const iv = this.opts.tickIntervalMs;
    if (!iv || this.timer !== undefined) return;
    const loop = () => {
      this.tick();
      this.timer = this.clock.setTimeout(loop, iv);
    };
    this.timer = this.clock.setTimeout(loop, iv);
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
   * Candles whose start lies in [fromSec, toSec] and not after now, ascending; the current one
   * closes at now. A candle covers the part of its period when the market trades (its open is the
   * first traded price, its close the last), so longer candles are exactly their shorter ones
   * joined; candles shorter than a week wholly inside closed hours are absent. At most `max` (the
   * most recent ones).
   */
  candles(symbol: string, periodId: string, fromSec: number, toSec: number, max = MAX_CANDLES_PER_REQUEST): CandleRow[] {
    const period = normalizePeriod(periodId);
    const spec = this.specs.get(symbol);
    const path = this.paths.get(symbol);
    if (!period || !spec || !path) return [];
    const nowMs = this.clock.nowMs();
    const last = Math.min(toSec, Math.floor(nowMs / 1000));
    const intraday = PERIOD_SECONDS[period] < 86400 * 7;
    const spans: [number, [number, number]][] = [];
    let start = this.periodStart(period, fromSec);
    if (start < fromSec) start = this.nextStart(period, start);
    for (; start <= last; start = this.nextStart(period, start)) {
      const whole: [number, number] = [start * 1000, Math.min(this.nextStart(period, start) * 1000, nowMs)];
      const traded = this.calendar.openSpan(whole[0], whole[1]);
      if (traded || !intraday) spans.push([start, traded ?? whole]);
    }
    const r = (v: number) => this.round(spec, v);
    return spans.slice(-max).map(([s, [from, to]]) => {
      const c = path.candle(from, to);
      return [s, r(c.bidOpen), r(c.bidClose), r(c.bidHigh), r(c.bidLow), r(c.askOpen), r(c.askClose), r(c.askHigh), r(c.askLow), c.ticks];
    });
  }
}
