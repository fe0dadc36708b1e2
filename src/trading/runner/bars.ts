/**
 * Bars of every mode: a longer bar is built from shorter candles (backtest) or from ticks (paper,
 * live) the same way, and the completed bars a strategy reads through `ctx.candles` are kept per
 * symbol and time frame.
 */
import { PERIOD_SECONDS } from '../fxcm/candles';
import type { Period } from '../fxcm/types';
import { tickMove, type PriceMove } from '../execution/fills';
import type { Bar } from './strategy';

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

/**
 * Bars from ticks: a bar is complete when the first tick of a later bucket arrives (a quiet
 * market completes nothing).
 */
export class TickBars {
  private readonly building = new Map<string, Bar>();

  constructor(private readonly timeframes: readonly Period[]) {}

  /** Adds a tick (time in ms); returns the bars it completed. */
  add(symbol: string, bid: number, ask: number, tsMs: number): Bar[] {
    const done: Bar[] = [];
    const move = tickMove(bid, ask);
    for (const tf of this.timeframes) {
      const start = bucketStart(tsMs / 1000, tf);
      const k = `${symbol}|${tf}`;
      const b = this.building.get(k);
      if (b && b.ts < start) done.push(b);
      if (!b || b.ts < start) this.building.set(k, openBar(symbol, tf, start, move, 1));
      else if (b.ts === start) extendBar(b, move, 1);
    }
    return done;
  }
}

/** The completed bars per symbol and time frame, the most recent `limit` of each. */
export class BarHistory {
  private readonly bars = new Map<string, Bar[]>();

  constructor(private readonly limit = 5000) {}

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
