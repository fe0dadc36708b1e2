/**
 * Bars of every mode: a longer bar is built from shorter candles (backtest) or from ticks (paper,
 * live) the same way, and the completed bars a strategy reads through `ctx.candles` are kept per
 * symbol and time frame.
 */
import { PERIOD_SECONDS } from '../../fxcm/candles';
import type { Period } from '../../fxcm/types';
import { tickMove, type PriceMove } from '../../execution/fills';
import type { Bar } from '../strategy';

/** Start (epoch seconds) of the `timeframe` bucket holding `tsSec`. */
export function bucketStart(tsSec: number, timeframe: Period): number {
  const sec = PERIOD_SECONDS[timeframe];
  return Math.floor(tsSec / sec) * sec;
}

/** A bar opened by its first candle or tick. */
export function openBar(symbol: string, timeframe: Period, ts: number, first: PriceMove, tickQty: number): Bar {
  const { bidOpen, bidHigh, bidLow, bidClose, askOpen, askHigh, askLow, askClose } = first;
  return { symbol, timeframe, ts, bidOpen, bidHigh, bidLow, bidClose, askOpen, askHigh, askLow, askClose, tickQty };
}

/** A later candle or tick of the bar's bucket. */
export function extendBar(b: Bar, m: PriceMove, tickQty: number): void {
  b.bidHigh = Math.max(b.bidHigh, m.bidHigh);
  b.bidLow = Math.min(b.bidLow, m.bidLow);
  b.bidClose = m.bidClose;
  b.askHigh = Math.max(b.askHigh, m.askHigh);
  b.askLow = Math.min(b.askLow, m.askLow);
  b.askClose = m.askClose;
  b.tickQty += tickQty;
}

/** A range of bars the runner asks the broker for: those of `symbol` and `timeframe` starting in [fromTs, toTs] (epoch s). */
export interface BarFetch {
  symbol: string;
  timeframe: Period;
  fromTs: number;
  toTs: number;
}

/** What a tick or a fetched range gives: bars now closed, in order, and ranges to fetch. */
export interface BarsOut {
  closed: Bar[];
  fetches: BarFetch[];
}

/** A bar being built from ticks; `whole` when every tick of its bucket was seen. */
type Building = Bar & { whole: boolean };

/** One symbol and time frame: what is owed to the strategy next, and how. */
interface Line {
  readonly symbol: string;
  readonly timeframe: Period;
  /** Start of the next bar owed to the strategy (undefined: none yet, the first whole bar starts the series). */
  next?: number;
  building?: Building;
  /** The last bar that must come from the broker (ticks missed), and the range asked for now. */
  owedThrough?: number;
  inFlight?: BarFetch;
  /** Whole bars from ticks that wait behind a range asked for. */
  waiting: Bar[];
}

/** LiveBars as a checkpoint keeps it: every series' progress, and when each symbol's ticks began. */
export interface SavedLiveBars {
  lines: Line[];
  since: [string, number][];
}

/**
 * Bars of paper and live runs: one series per symbol and time frame, gap-free, without repeats,
 * of closed bars only, each equal to the broker's candle of its period.
 *
 * A bar is built from the ticks stamped in its period (bucketed by the broker's time, the tick's
 * `Updated`), as the broker builds its candles, and is closed by the first tick of a later period.
 * It is used only when the runner saw its whole period: ticks arrived continuously since before
 * it began (since the last start, reconnect or resume). A bar whose period was partly missed (the
 * one a run starts in, one across a reconnect or a restart) is asked from the broker once it is
 * closed, with every bar owed before it, and the bars after it wait for that answer so the series
 * stays in order. History loaded at the start counts as delivered; a bar still open (its period
 * not over) is never delivered.
 */
export class LiveBars {
  private readonly lines = new Map<string, Line>();
  /** Per symbol: the time of the first tick since the stream was (re)joined. */
  private readonly since = new Map<string, number>();

  constructor(private readonly timeframes: readonly Period[]) {}

  saved(): SavedLiveBars {
    return { lines: [...this.lines.values()], since: [...this.since] };
  }

  /** Takes back a saved state (into a LiveBars that has none yet). */
  restore(s: SavedLiveBars): void {
    for (const l of s.lines) this.lines.set(`${l.symbol}|${l.timeframe}`, l);
    for (const [symbol, ms] of s.since) this.since.set(symbol, ms);
  }

  private line(symbol: string, timeframe: Period): Line {
    const k = `${symbol}|${timeframe}`;
    let l = this.lines.get(k);
    if (!l) this.lines.set(k, (l = { symbol, timeframe, waiting: [] }));
    return l;
  }

  /**
   * Bars loaded at the start: those closed at `nowMs` (a period over), in order, without repeats,
   * become the start of the series. Returns the ones taken.
   */
  history(bars: readonly Bar[], nowMs: number): Bar[] {
    const taken: Bar[] = [];
    for (const tf of this.timeframes) {
      const byLine = new Map<string, Bar[]>();
      for (const b of bars) if (b.timeframe === tf) byLine.set(b.symbol, [...(byLine.get(b.symbol) ?? []), b]);
      for (const [symbol, list] of byLine) {
        const l = this.line(symbol, tf);
        for (const b of ordered(list)) {
          if ((b.ts + PERIOD_SECONDS[tf]) * 1000 > nowMs || (l.next !== undefined && b.ts < l.next)) continue;
          taken.push(b);
          l.next = b.ts + PERIOD_SECONDS[tf];
        }
      }
    }
    return taken;
  }

  /** A tick (its broker time in ms): the bars it closes that can be delivered, and ranges to fetch. */
  tick(symbol: string, bid: number, ask: number, tsMs: number): BarsOut {
    const out: BarsOut = { closed: [], fetches: [] };
    if (!this.since.has(symbol)) this.since.set(symbol, tsMs);
    const since = this.since.get(symbol)!;
    const move = tickMove(bid, ask);
    for (const tf of this.timeframes) {
      const l = this.line(symbol, tf);
      const start = bucketStart(tsMs / 1000, tf);
      const b = l.building;
      // A tick older than the bar being built belongs to a bar already closed: a broker's stream
      // is in time order, so it is not used (the bar was closed by a later tick).
      if (b && b.ts > start) continue;
      if (b && b.ts === start) {
        extendBar(b, move, 1);
        continue;
      }
      if (b) this.close(l, b, out);
      l.building = { ...openBar(symbol, tf, start, move, 1), whole: since <= start * 1000 };
    }
    return out;
  }

  /** The broker's answer for a range asked for: the bars now deliverable, and a further range when more is owed. */
  fetched(f: BarFetch, bars: readonly Bar[]): BarsOut {
    const out: BarsOut = { closed: [], fetches: [] };
    const l = this.line(f.symbol, f.timeframe);
    if (!l.inFlight || l.inFlight.fromTs !== f.fromTs || l.inFlight.toTs !== f.toTs) return out;
    l.inFlight = undefined;
    for (const b of ordered(bars)) {
      if (b.ts > f.toTs || (l.next !== undefined && b.ts < l.next)) continue;
      out.closed.push(b);
      l.next = b.ts + PERIOD_SECONDS[f.timeframe];
    }
    // periods without a candle (no tick at the broker) are owed nothing
    l.next = Math.max(l.next ?? 0, f.toTs + PERIOD_SECONDS[f.timeframe]);
    if (l.owedThrough !== undefined && l.owedThrough >= l.next) {
      this.ask(l, out);
      return out;
    }
    l.owedThrough = undefined;
    for (const b of l.waiting.splice(0)) this.deliver(l, b, out);
    return out;
  }

  /** The stream was interrupted (a disconnect, a restart): ticks until the next one are missing. */
  discontinuity(): void {
    this.since.clear();
    for (const l of this.lines.values()) if (l.building) l.building.whole = false;
  }

  /** Ranges asked for and not answered (to ask again after a restart). */
  inFlight(): BarFetch[] {
    return [...this.lines.values()].flatMap((l) => (l.inFlight ? [l.inFlight] : []));
  }

  private close(l: Line, b: Building, out: BarsOut): void {
    const { whole, ...bar } = b;
    if (l.next !== undefined && bar.ts < l.next) return; // delivered already (history or the broker)
    if (!whole) {
      // The first, partial bar of a run without history owes nothing before it: it is dropped.
      if (l.next === undefined) return;
      l.owedThrough = Math.max(l.owedThrough ?? bar.ts, bar.ts);
      if (!l.inFlight) this.ask(l, out);
      return;
    }
    if (l.inFlight || l.owedThrough !== undefined) l.waiting.push(bar);
    else this.deliver(l, bar, out);
  }

  private deliver(l: Line, b: Bar, out: BarsOut): void {
    if (l.next !== undefined && b.ts < l.next) return;
    out.closed.push(b);
    l.next = b.ts + PERIOD_SECONDS[l.timeframe];
  }

  private ask(l: Line, out: BarsOut): void {
    l.inFlight = { symbol: l.symbol, timeframe: l.timeframe, fromTs: l.next!, toTs: l.owedThrough! };
    out.fetches.push(l.inFlight);
  }
}

/** Bars by start time, the later of two with one start kept (the broker may revise a row). */
function ordered(bars: readonly Bar[]): Bar[] {
  const byTs = new Map<number, Bar>();
  for (const b of bars) byTs.set(b.ts, b);
  return [...byTs.values()].sort((a, b) => a.ts - b.ts);
}

/** A BarHistory as a checkpoint keeps it: per series its bars, without the symbol and time frame each repeats. */
export interface SavedBarSeries {
  symbol: string;
  timeframe: Period;
  bars: Omit<Bar, 'symbol' | 'timeframe'>[];
}

/** The completed bars per symbol and time frame, the most recent `limit` of each. */
export class BarHistory {
  private readonly bars = new Map<string, Bar[]>();

  constructor(private readonly limit = 5000) {}

  saved(): SavedBarSeries[] {
    return [...this.bars.values()].filter((h) => h.length).map((h) => ({ symbol: h[0]!.symbol, timeframe: h[0]!.timeframe, bars: h.map(({ symbol: _s, timeframe: _t, ...rest }) => rest) }));
  }

  /** Takes back saved series (into a BarHistory that has none yet). */
  restore(series: readonly SavedBarSeries[]): void {
    for (const s of series) for (const b of s.bars) this.push({ symbol: s.symbol, timeframe: s.timeframe, ...b });
  }

  push(bar: Bar): void {
    const k = `${bar.symbol}|${bar.timeframe}`;
    let h = this.bars.get(k);
    if (!h) this.bars.set(k, (h = []));
    h.push(bar);
    if (h.length > this.limit) h.splice(0, h.length - this.limit);
  }

  /** The last `count` bars (all when undefined), oldest first; a copy. */
  candles(symbol: string, timeframe: Period, count?: number): Bar[] {
    const h = this.bars.get(`${symbol}|${timeframe}`) ?? [];
    return count === undefined ? [...h] : h.slice(Math.max(0, h.length - count));
  }
}
