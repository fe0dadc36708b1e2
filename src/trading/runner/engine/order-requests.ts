/**
 * The one check of a strategy's order requests, for every mode (backtest, paper, live): each
 * field's type and range, stops and limits on the side the broker wants, and rates rounded to the
 * instrument's precision. A request that fails is refused with InvalidRequestError naming the
 * field and the value; nothing is sent or booked. What the broker itself rules on (an amount
 * divisible by 10, trailing steps 1 or >= 10) stays in fxcm/rules.ts, shared with the simulator.
 *
 * Sides, with rates: a buy's stop below the price and its limit above it, a sell's the reverse.
 * The price is the order's rate for an entry order, and the closing side of the current quote
 * (bid for a buy, ask for a sell: where stops and limits trigger) for a market order or a trade.
 * With `isInPips` a stop is a negative distance and a limit a positive one (the broker's code 18).
 */
import { closeSide } from '../../execution/fills';
import { roundRate } from '../../execution/instruments';
import type { EntryOrderRequest, OcoRequest, OpenTradeRequest, StopLimitOptions } from '../strategy';

/** A request of the strategy that cannot be sent as it is; `field` names what is wrong. */
export class InvalidRequestError extends Error {
  override readonly name = 'InvalidRequestError';
  constructor(readonly field: string, message: string) {
    super(message);
  }
}

export interface BidAsk {
  bid: number;
  ask: number;
}

/** How a bad value reads in an error: strings quoted, so `'10'` differs from 10. */
function shown(v: unknown): string {
  if (typeof v === 'string') return `'${v}'`;
  if (typeof v === 'number' || v === undefined || v === null || typeof v === 'boolean') return String(v);
  try {
    return JSON.stringify(v) ?? String(v);
  } catch {
    return String(v);
  }
}

function fail(field: string, must: string, v: unknown): never {
  throw new InvalidRequestError(field, `${field} must be ${must}, got ${shown(v)}`);
}

const isNumber = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);

function positive(field: string, v: unknown): number {
  if (!isNumber(v) || v <= 0) fail(field, 'a positive number', v);
  return v;
}

function optionalNumber(field: string, v: unknown): number | undefined {
  if (v === undefined) return undefined;
  if (!isNumber(v)) fail(field, 'a finite number', v);
  return v;
}

function optionalFlag(field: string, v: unknown): boolean | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'boolean') fail(field, 'true or false', v);
  return v;
}

function flag(field: string, v: unknown): boolean {
  if (typeof v !== 'boolean') fail(field, 'true or false', v);
  return v;
}

function symbolOf(field: string, v: unknown): string {
  if (typeof v !== 'string' || v === '') fail(field, 'a symbol such as EUR/USD', v);
  return v;
}

function objectOf(what: string, v: unknown): Record<string, unknown> {
  if (typeof v !== 'object' || v === null) throw new InvalidRequestError(what, `${what} must be an object, got ${shown(v)}`);
  return v as Record<string, unknown>;
}

/**
 * A stop or a limit (0 or undefined: none) on the right side of `price` for a buy or a sell, as a
 * rate rounded to the symbol's precision, or a pip distance of the right sign.
 */
function level(field: string, kind: 'stop' | 'limit', v: unknown, symbol: string, isBuy: boolean, isInPips: boolean, price: number | undefined, priceName: string): number | undefined {
  const n = optionalNumber(field, v);
  if (n === undefined || n === 0) return n;
  if (isInPips) {
    if (kind === 'stop' && n > 0) fail(field, 'a negative distance in pips (isInPips: a stop is a distance against the position)', v);
    if (kind === 'limit' && n < 0) fail(field, 'a positive distance in pips (isInPips: a limit is a distance in favour of the position)', v);
    return n;
  }
  if (n < 0) fail(field, 'a positive rate (or a distance with isInPips: true)', v);
  const rate = roundRate(symbol, n);
  if (price !== undefined) {
    const below = (kind === 'stop') === isBuy;
    const side = `${kind} of a ${isBuy ? 'buy' : 'sell'}`;
    if (below && !(rate < price)) fail(field, `below the price for the ${side} (${priceName} ${price})`, v);
    if (!below && !(rate > price)) fail(field, `above the price for the ${side} (${priceName} ${price})`, v);
  }
  return rate;
}

function trailingStepOf(field: string, v: unknown): number | undefined {
  const n = optionalNumber(field, v);
  if (n !== undefined && n < 0) fail(field, '0 (none), 1 (dynamic) or 10 and more pips', v);
  return n;
}

function ttlOf(v: unknown): number | undefined {
  const n = optionalNumber('ttlMs', v);
  if (n !== undefined && n < 0) fail('ttlMs', 'a number of milliseconds >= 0', v);
  return n;
}

/** A market order, checked against the current quote (when there is one) and rounded. */
export function checkOpenTrade(req: unknown, quoteOf: (symbol: string) => BidAsk | undefined): OpenTradeRequest {
  const r = objectOf('openTrade request', req);
  const symbol = symbolOf('symbol', r.symbol);
  const isBuy = flag('isBuy', r.isBuy);
  const amount = positive('amount', r.amount);
  const isInPips = optionalFlag('isInPips', r.isInPips);
  const quote = quoteOf(symbol);
  const price = quote ? roundRate(symbol, closeSide(isBuy, quote.bid, quote.ask)) : undefined;
  const priceName = isBuy ? 'bid' : 'ask';
  return {
    symbol,
    isBuy,
    amount,
    stop: level('stop', 'stop', r.stop, symbol, isBuy, !!isInPips, price, priceName),
    limit: level('limit', 'limit', r.limit, symbol, isBuy, !!isInPips, price, priceName),
    trailingStep: trailingStepOf('trailingStep', r.trailingStep),
    isInPips,
    ttlMs: ttlOf(r.ttlMs),
  };
}

/** An entry order: its rate positive and rounded, stop and limit on the right side of it. */
export function checkEntryOrder(req: unknown): EntryOrderRequest {
  const r = objectOf('createEntryOrder request', req);
  const symbol = symbolOf('symbol', r.symbol);
  const isBuy = flag('isBuy', r.isBuy);
  const amount = positive('amount', r.amount);
  const rate = roundRate(symbol, positive('rate', r.rate));
  const isInPips = optionalFlag('isInPips', r.isInPips);
  return {
    symbol,
    isBuy,
    amount,
    rate,
    stop: level('stop', 'stop', r.stop, symbol, isBuy, !!isInPips, rate, 'rate'),
    limit: level('limit', 'limit', r.limit, symbol, isBuy, !!isInPips, rate, 'rate'),
    trailingStep: trailingStepOf('trailingStep', r.trailingStep),
    isInPips,
    ttlMs: ttlOf(r.ttlMs),
  };
}

/** Two entry orders in one group: each leg as an entry order (fields `first.rate`, `second.stop`, …). */
export function checkOco(req: unknown): OcoRequest {
  const r = objectOf('createOco request', req);
  const symbol = symbolOf('symbol', r.symbol);
  const amount = positive('amount', r.amount);
  const isInPips = optionalFlag('isInPips', r.isInPips);
  const leg = (name: 'first' | 'second') => {
    const l = objectOf(name, r[name]);
    const isBuy = flag(`${name}.isBuy`, l.isBuy);
    const rate = roundRate(symbol, positive(`${name}.rate`, l.rate));
    return {
      isBuy,
      rate,
      stop: level(`${name}.stop`, 'stop', l.stop, symbol, isBuy, !!isInPips, rate, 'rate'),
      limit: level(`${name}.limit`, 'limit', l.limit, symbol, isBuy, !!isInPips, rate, 'rate'),
    };
  };
  return { symbol, amount, first: leg('first'), second: leg('second'), isInPips, ttlMs: ttlOf(r.ttlMs) };
}

/**
 * setStop / setLimit of an open trade: `rate` 0 removes it; otherwise on the right side of the
 * trade's closing price now (when there is a quote), rounded.
 */
export function checkTradeLevel(kind: 'stop' | 'limit', trade: { symbol: string; isBuy: boolean }, rate: unknown, opts: unknown, quote: BidAsk | undefined): { rate: number; opts: StopLimitOptions } {
  const o = opts === undefined ? {} : objectOf('options', opts);
  const isInPips = optionalFlag('isInPips', o.isInPips);
  const price = quote ? roundRate(trade.symbol, closeSide(trade.isBuy, quote.bid, quote.ask)) : undefined;
  const checked = level('rate', kind, rate, trade.symbol, trade.isBuy, !!isInPips, price, trade.isBuy ? 'bid' : 'ask');
  if (checked === undefined) fail('rate', `a ${kind} rate (0 removes the ${kind})`, rate);
  const trailingStep = trailingStepOf('trailingStep', o.trailingStep);
  return { rate: checked, opts: { ...(isInPips !== undefined ? { isInPips } : {}), ...(trailingStep !== undefined ? { trailingStep } : {}) } };
}

/** changeOrder: a positive rate, rounded, and an amount when one is given. */
export function checkChangeOrder(symbol: string, rate: unknown, amount: unknown): { rate: number; amount: number | undefined } {
  return { rate: roundRate(symbol, positive('rate', rate)), amount: amount === undefined ? undefined : positive('amount', amount) };
}

/** closeTrade's amount: all of the trade when omitted. */
export function checkCloseAmount(amount: unknown): number | undefined {
  return amount === undefined ? undefined : positive('amount', amount);
}
