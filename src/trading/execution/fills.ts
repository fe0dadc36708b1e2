/**
 * How prices move orders and trades: one model for the backtest (a candle's range per side) and
 * the simulated broker (one tick: open = high = low = close), so that a backtest and a paper run
 * over the same prices fill at the same rates.
 *
 * - Buys fill at the ask, sells at the bid; a long's stop and limit trigger on the bid, a short's
 *   on the ask. A gap through the level fills at the open, else at the level.
 * - Stop before limit when both are inside one move (the pessimistic choice for a candle; a tick
 *   cannot reach both).
 * - Market orders, stops and stop entries slip by the `Slippage` model (none by default); limits
 *   never slip.
 * - Trailing stops move after the trigger check, with the move's best price, in whole steps: a
 *   dynamic trailing stop (step 1) by tenths of a pip, a fixed one by `step` pips.
 */
import { clean } from './instruments';

/** The prices one symbol went through: a candle, or a single tick. */
export interface PriceMove {
  bidOpen: number;
  bidHigh: number;
  bidLow: number;
  bidClose: number;
  askOpen: number;
  askHigh: number;
  askLow: number;
  askClose: number;
}

export function tickMove(bid: number, ask: number): PriceMove {
  return { bidOpen: bid, bidHigh: bid, bidLow: bid, bidClose: bid, askOpen: ask, askHigh: ask, askLow: ask, askClose: ask };
}

/** The side a new trade opens at, and the side that closes it. */
export const openSide = (isBuy: boolean, bid: number, ask: number): number => (isBuy ? ask : bid);
export const closeSide = (isBuy: boolean, bid: number, ask: number): number => (isBuy ? bid : ask);

export type EntryKind = 'stop' | 'limit';

/** A buy entry above the ask (a sell below the bid) waits for the price to break through: a stop entry. */
export function entryKind(isBuy: boolean, rate: number, bid: number, ask: number): EntryKind {
  return (isBuy ? rate > ask : rate < bid) ? 'stop' : 'limit';
}

/** The rate a market order that buys (or sells) gets at this bid and ask: the ask (bid), slipped. */
export function marketFill(buys: boolean, bid: number, ask: number, pip: number, s: Slippage = NO_SLIPPAGE): number {
  return slipped(buys ? ask : bid, buys, ask - bid, pip, s);
}

/** The spread at the start of a move, the one a gap fills at. */
const openSpread = (m: PriceMove): number => m.askOpen - m.bidOpen;

/** The rate a resting entry order fills at in this move, or undefined; a stop entry slips. */
export function entryFill(o: { isBuy: boolean; kind: EntryKind; rate: number }, m: PriceMove, pip = 0, s: Slippage = NO_SLIPPAGE): number | undefined {
  let rate: number | undefined;
  if (o.isBuy) {
    if (o.kind === 'stop') rate = m.askHigh >= o.rate ? Math.max(o.rate, m.askOpen) : undefined;
    else return m.askLow <= o.rate ? Math.min(o.rate, m.askOpen) : undefined;
  } else if (o.kind === 'stop') rate = m.bidLow <= o.rate ? Math.min(o.rate, m.bidOpen) : undefined;
  else return m.bidHigh >= o.rate ? Math.max(o.rate, m.bidOpen) : undefined;
  return rate === undefined ? undefined : slipped(rate, o.isBuy, openSpread(m), pip, s);
}

export interface ExitLevels {
  isBuy: boolean;
  stop?: number;
  limit?: number;
}

/**
 * The stop or limit an open trade hits in this move, and the rate it closes at: the level, or the
 * open when the move gaps through it; a stop then slips (closing a long sells, a short buys).
 */
export function exitFill(t: ExitLevels, m: PriceMove, pip = 0, s: Slippage = NO_SLIPPAGE): { rate: number; reason: 'stop' | 'limit' } | undefined {
  const stopAt = (rate: number) => ({ rate: slipped(rate, !t.isBuy, openSpread(m), pip, s), reason: 'stop' as const });
  if (t.isBuy) {
    if (t.stop !== undefined && m.bidLow <= t.stop) return stopAt(Math.min(t.stop, m.bidOpen));
    if (t.limit !== undefined && m.bidHigh >= t.limit) return { rate: Math.max(t.limit, m.bidOpen), reason: 'limit' };
    return undefined;
  }
  if (t.stop !== undefined && m.askHigh >= t.stop) return stopAt(Math.max(t.stop, m.askOpen));
  if (t.limit !== undefined && m.askLow <= t.limit) return { rate: Math.min(t.limit, m.askOpen), reason: 'limit' };
  return undefined;
}

/**
 * Adverse slippage on the fills that take the market: market orders and closes, stops (trailing
 * ones included) and stop entries. A fixed part in pips plus a share of the spread at the fill;
 * limits and limit entries never slip (a limit order fills at its rate or better). A gapped stop
 * slips from the gapped price. None by default.
 */
export interface Slippage {
  pips: number;
  spreadShare: number;
}

export const NO_SLIPPAGE: Slippage = { pips: 0, spreadShare: 0 };

/** `rate` moved against the side that trades: up for a fill that buys, down for one that sells. */
export function slipped(rate: number, buys: boolean, spread: number, pip: number, s: Slippage): number {
  const by = s.pips * pip + s.spreadShare * Math.max(0, spread);
  return by > 0 ? toPoint(rate + (buys ? by : -by), pip) : rate;
}

/** Rounds a rate to the symbol's quoting precision (a tenth of a pip). */
export function toPoint(rate: number, pip: number): number {
  const point = pip / 10;
  return clean(Math.round(rate / point) * point);
}

/**
 * A stop or limit given as a distance in pips from `ref`, as a rate: positive pips are in the
 * trade's favour (a limit), negative against it (a stop).
 */
export function levelFromPips(isBuy: boolean, ref: number, pips: number, pip: number): number {
  return toPoint(ref + (isBuy ? 1 : -1) * pips * pip, pip);
}

/** The step a trailing stop moves by: 1 is the broker's dynamic trailing (a tenth of a pip). */
export const trailingStepSize = (trailingStep: number, pip: number): number => (trailingStep === 1 ? pip / 10 : trailingStep * pip);

/**
 * The stop of a trailing stop after this move: it follows the best closing-side price at
 * `distance`, in whole steps, and never moves back.
 */
export function trailStop(t: { isBuy: boolean; stop: number; distance: number; trailingStep: number }, m: PriceMove, pip: number): number {
  const step = trailingStepSize(t.trailingStep, pip);
  const gain = t.isBuy ? m.bidHigh - t.distance - t.stop : t.stop - (m.askLow + t.distance);
  if (gain < step - 1e-12) return t.stop;
  const steps = Math.floor(gain / step + 1e-9);
  return toPoint(t.stop + (t.isBuy ? 1 : -1) * steps * step, pip);
}
