/**
 * The simulated market: quotes per symbol from a seeded random walk (or replayed from candles),
 * a bid/ask spread, market hours (FX closes Friday 16:55 and opens Sunday 17:00 US Eastern), and
 * deterministic historical candles (a pure function of seed, symbol, period and time).
 */
import { EventEmitter } from 'node:events';
import { readFileSync } from 'node:fs';
import { PERIOD_SECONDS, normalizePeriod, rowToCandle } from '../fxcm/candles';
import type { Candle, CandleRow, Period } from '../fxcm/types';
import type { Clock } from '../../core/clock';

export interface SymbolSpec {
  symbol: string;
  offerId: number;
  pip: number;
  ratePrecision: number;
  /** Starting mid price. */
  price: number;
  spreadPips: number;
  instrumentType?: number;
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

/** Deterministic PRNG (mulberry32). */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Hash of integers to [0,1). */
function hash01(...xs: number[]): number {
  let h = 0x811c9dc5;
  for (const x of xs) {
    h ^= x | 0;
    h = Math.imul(h, 0x01000193);
    h ^= (x / 4294967296) | 0;
    h = Math.imul(h, 0x01000193);
  }
  h ^= h >>> 13;
  h = Math.imul(h, 0x5bd1e995);
  h ^= h >>> 15;
  return (h >>> 0) / 4294967296;
}

const etFormat = new Intl.DateTimeFormat('en-US', { timeZone: 'America/New_York', weekday: 'short', hour: '2-digit', minute: '2-digit', hourCycle: 'h23' });

/** FX hours: closed from Friday 16:55 to Sunday 17:00 US Eastern time. */
export function isFxMarketOpen(ms: number): boolean {
  const parts = etFormat.formatToParts(new Date(ms));
  const get = (t: string) => parts.find((p) => p.type === t)?.value ?? '';
  const wd = get('weekday');
  const minutes = Number(get('hour')) * 60 + Number(get('minute'));
  if (wd === 'Sat') return false;
  if (wd === 'Fri' && minutes >= 16 * 60 + 55) return false;
  if (wd === 'Sun' && minutes < 17 * 60) return false;
  return true;
}

/** Reads a candle file: JSON (array of broker rows or Candle objects, or `{candles:[…]}`) or CSV rows. */
export function loadCandleFile(path: string): Candle[] {
  const text = readFileSync(path, 'utf8');
  const t = text.trim();
  if (t.startsWith('[') || t.startsWith('{')) {
    const v = JSON.parse(t) as unknown;
    const arr = (Array.isArray(v) ? v : ((v as { candles?: unknown[] }).candles ?? [])) as unknown[];
    return arr.map((r) => (Array.isArray(r) ? rowToCandle(r as number[]) : (r as Candle)));
  }
  return t
    .split(/\r?\n/)
    .filter((l) => /^\d/.test(l))
    .map((l) => rowToCandle(l.split(',').map(Number)));
}

export interface MarketOptions {
  clock: Clock;
  seed?: number;
  symbols?: (string | SymbolSpec)[];
  /** Relative std-dev of one random-walk step (default 0.0002). */
  volatility?: number;
  /** Auto-tick interval on the clock; 0/undefined = only manual ticks. */
  tickIntervalMs?: number;
  /** Replayed candles per symbol: each tick moves to the next candle's close. */
  replay?: Record<string, Candle[] | string>;
  /** Override market hours (default: FX hours). */
  isOpen?: (ms: number) => boolean;
}

/** Events: `price` (symbol, Quote). */
export class Market extends EventEmitter {
  readonly clock: Clock;
  readonly specs = new Map<string, SymbolSpec>();
  private readonly quotes = new Map<string, Quote>();
  private readonly rand: () => number;
  private readonly seed: number;
  private readonly volatility: number;
  private readonly replay = new Map<string, { candles: Candle[]; i: number }>();
  private timer: unknown;
  private hoursOverride: boolean | undefined;
  private readonly hours: (ms: number) => boolean;

  constructor(private readonly opts: MarketOptions) {
    super();
    this.clock = opts.clock;
    this.seed = opts.seed ?? 1;
    this.rand = mulberry32(this.seed);
    this.volatility = opts.volatility ?? 0.0002;
    this.hours = opts.isOpen ?? isFxMarketOpen;
    const list = opts.symbols ?? ['EUR/USD', 'USD/JPY', 'GBP/USD'];
    for (const s of list) {
      const spec = typeof s === 'string' ? KNOWN_SYMBOLS.find((k) => k.symbol === s) : s;
      if (!spec) throw new Error(`unknown symbol ${String(s)}: pass a SymbolSpec`);
      this.specs.set(spec.symbol, { ...spec });
      const half = (spec.spreadPips * spec.pip) / 2;
      const bid = this.round(spec, spec.price - half);
      const ask = this.round(spec, spec.price + half);
      this.quotes.set(spec.symbol, { bid, ask, high: ask, low: bid, updatedMs: this.clock.nowMs() });
    }
    for (const [sym, src] of Object.entries(opts.replay ?? {})) {
      this.replay.set(sym, { candles: typeof src === 'string' ? loadCandleFile(src) : src, i: 0 });
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
    return this.hoursOverride ?? this.hours(ms);
  }

  /** Force the market open/closed (undefined = back to market hours). */
  forceOpen(open: boolean | undefined): void {
    this.hoursOverride = open;
  }

  /** Sets a quote (ask defaults to bid + spread) and runs everything that reacts to prices. */
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

  /** One step for every symbol: the next replayed candle, or a random-walk move. No-op when closed. */
  tick(): void {
    if (!this.isOpen()) return;
    for (const [symbol, spec] of this.specs) {
      const r = this.replay.get(symbol);
      if (r && r.candles.length) {
        const c = r.candles[r.i % r.candles.length];
        r.i++;
        this.setPrice(symbol, c.bidClose, c.askClose);
        continue;
      }
      const q = this.quotes.get(symbol)!;
      const mid = (q.bid + q.ask) / 2;
      // sum of uniforms ≈ normal
      const z = (this.rand() + this.rand() + this.rand() - 1.5) * 2;
      const next = mid * (1 + z * this.volatility);
      const half = (spec.spreadPips * spec.pip) / 2;
      this.setPrice(symbol, next - half, next + half);
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

  /** Deterministic mid price of a symbol at time `sec` (historical candles). */
  private historicalMid(spec: SymbolSpec, sec: number): number {
    const s = this.seed + spec.offerId * 7919;
    const day = 86400;
    const slow = 0.03 * Math.sin((2 * Math.PI * sec) / (97 * day) + s);
    const mid = 0.01 * Math.sin((2 * Math.PI * sec) / (9.3 * day) + 2 * s);
    const fast = 0.002 * Math.sin((2 * Math.PI * sec) / (0.37 * day) + 3 * s);
    const noise = 0.0004 * (hash01(s, Math.floor(sec / 60)) - 0.5);
    return spec.price * (1 + slow + mid + fast + noise);
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

  /** One candle starting at `start` (seconds). */
  candleAt(symbol: string, period: Period, start: number): CandleRow {
    const spec = this.specs.get(symbol)!;
    const end = this.nextStart(period, start);
    const o = this.historicalMid(spec, start);
    const c = this.historicalMid(spec, end);
    const width = Math.abs(c - o) + spec.price * 0.0002 * Math.sqrt((end - start) / 60) * hash01(this.seed, spec.offerId, start);
    const hi = Math.max(o, c) + width / 2;
    const lo = Math.min(o, c) - width / 2;
    const sp = spec.spreadPips * spec.pip;
    const r = (v: number) => this.round(spec, v);
    const ticks = 1 + Math.floor(hash01(spec.offerId, start, 17) * 50 * Math.sqrt((end - start) / 60));
    return [start, r(o), r(c), r(hi), r(lo), r(o + sp), r(c + sp), r(hi + sp), r(lo + sp), ticks];
  }

  /**
   * Candles whose start lies in [fromSec, toSec], ascending; candles wholly inside closed market
   * hours are absent. At most `max` (the most recent ones).
   */
  candles(symbol: string, periodId: string, fromSec: number, toSec: number, max = 10000): CandleRow[] {
    const period = normalizePeriod(periodId);
    if (!period || !this.specs.has(symbol)) return [];
    const out: CandleRow[] = [];
    let start = this.periodStart(period, fromSec);
    if (start < fromSec) start = this.nextStart(period, start);
    const intraday = PERIOD_SECONDS[period] < 86400 * 7;
    while (start <= toSec) {
      const end = this.nextStart(period, start);
      if (!intraday || this.hours(start * 1000) || this.hours((end - 1) * 1000)) out.push(this.candleAt(symbol, period, start));
      start = end;
    }
    return out.length > max ? out.slice(out.length - max) : out;
  }
}
