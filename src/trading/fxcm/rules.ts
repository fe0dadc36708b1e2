/**
 * The broker's order rules, shared by the client (checked before sending) and the simulator
 * (enforced with the same error bodies). Each check returns the broker error body or undefined.
 *
 * Known bodies (seed 000, reference §1.4):
 *  - amount not divisible by 10, and account_id sent with leading zeros (the account name):
 *    {"code":3,"message":"Amount should be divisible by 10","parameters":["10"]}
 *  - stop on the wrong side in pips: {"code":18,"message":"The Stop distance must be ","parameters":["<",0]}
 * Not documented by the broker (simulator's choice, code 3 like the other parameter errors):
 *  - trailing stop step 2..9, invalid time in force for the order type, missing is_buy;
 *  - an amount above the Offer's `maxQuantity` (50,000,000 units: 50000 in the API's K units);
 *  - a close of more than the trade holds;
 *  - not enough usable margin for an order (need and usable, in the account currency).
 */
import type { BrokerErrorBody } from './errors';

export const AMOUNT_BODY: BrokerErrorBody = { code: 3, message: 'Amount should be divisible by 10', parameters: ['10'] };

export function checkAccountId(accountId: unknown): BrokerErrorBody | undefined {
  const s = String(accountId ?? '');
  if (!/^[1-9][0-9]*$/.test(s)) return { ...AMOUNT_BODY, parameters: [...AMOUNT_BODY.parameters] };
  return undefined;
}

/** The Offer's `maxQuantity` in units (the simulator's offers show it), and in the API's K units. */
export const MAX_QUANTITY = 50_000_000;
export const MAX_AMOUNT_K = MAX_QUANTITY / 1000;

/** An order's or a close's amount (K units): a positive multiple of 10, at most MAX_AMOUNT_K. */
export function checkAmount(amount: unknown): BrokerErrorBody | undefined {
  const n = Number(amount);
  if (!Number.isFinite(n) || n <= 0 || !Number.isInteger(n) || n % 10 !== 0) {
    return { ...AMOUNT_BODY, parameters: [...AMOUNT_BODY.parameters] };
  }
  if (n > MAX_AMOUNT_K) return { code: 3, message: `Amount should not be more than ${MAX_AMOUNT_K}`, parameters: [String(MAX_AMOUNT_K)] };
  return undefined;
}

/** close_trade: no more than the trade holds (K units). */
export function checkCloseWithinTrade(amount: unknown, tradeAmountK: number): BrokerErrorBody | undefined {
  const n = Number(amount);
  if (n > tradeAmountK) return { code: 3, message: `Amount should not be more than the trade's ${tradeAmountK}`, parameters: [String(tradeAmountK)] };
  return undefined;
}

/** An order needs `need` of margin and the account has `usable` (account currency). */
export function checkMargin(need: number, usable: number): BrokerErrorBody | undefined {
  if (!(need > usable)) return undefined;
  return { code: 3, message: 'Not enough usable margin', parameters: [need.toFixed(2), usable.toFixed(2)] };
}

/** trailing_stop_step / trailing_step: 0 (none), 1 (dynamic) or >= 10 (fixed); 2..9 rejected. */
export function checkTrailingStep(step: unknown): BrokerErrorBody | undefined {
  if (step === undefined || step === null || step === '') return undefined;
  const n = Number(step);
  if (!Number.isFinite(n) || n < 0 || (n > 1 && n < 10)) {
    return { code: 3, message: 'Trailing stop step should be 1 (dynamic) or 10 and above (fixed)', parameters: ['10'] };
  }
  return undefined;
}

export const TIF_BY_ORDER_TYPE: Record<string, readonly string[]> = {
  AtMarket: ['DAY', 'GTC', 'IOC', 'FOK'],
  MarketRange: ['IOC', 'FOK'],
  Entry: ['GTC', 'DAY', 'GTD', 'IOC', 'FOK'],
  RangeEntry: ['GTC', 'DAY', 'GTD', 'IOC', 'FOK'],
};

/** close_trade accepts GTD as well for AtMarket. */
export const CLOSE_TIF_BY_ORDER_TYPE: Record<string, readonly string[]> = {
  AtMarket: ['IOC', 'GTC', 'FOK', 'DAY', 'GTD'],
  MarketRange: ['IOC', 'FOK'],
};

export function checkTimeInForce(orderType: unknown, tif: unknown, table: Record<string, readonly string[]> = TIF_BY_ORDER_TYPE): BrokerErrorBody | undefined {
  const allowed = table[String(orderType)];
  if (!allowed) return { code: 3, message: 'Invalid order type', parameters: [String(orderType)] };
  if (!allowed.includes(String(tif))) {
    return { code: 3, message: 'Invalid time in force for the order type', parameters: [String(tif), String(orderType)] };
  }
  return undefined;
}

export function checkIsBuy(isBuy: unknown): BrokerErrorBody | undefined {
  if (isBuy === true || isBuy === false || isBuy === 'true' || isBuy === 'false') return undefined;
  return { code: 3, message: 'is_buy is required', parameters: ['is_buy'] };
}

/** In pips a stop must be negative (a distance against the position). */
export function checkStopInPips(stop: unknown, isInPips: unknown): BrokerErrorBody | undefined {
  if (!(isInPips === true || isInPips === 'true')) return undefined;
  const n = Number(stop ?? 0);
  if (Number.isFinite(n) && n > 0) return { code: 18, message: 'The Stop distance must be ', parameters: ['<', 0] };
  return undefined;
}

export interface OrderRuleInput {
  account_id?: unknown;
  amount?: unknown;
  is_buy?: unknown;
  order_type?: unknown;
  time_in_force?: unknown;
  trailing_stop_step?: unknown;
  trailing_step?: unknown;
  stop?: unknown;
  is_in_pips?: unknown;
}

/** Rules of open_trade / create_entry_order / simple_oco, in the order the broker reports them. */
export function checkOrderRules(p: OrderRuleInput, closeTable = false): { rule: string; body: BrokerErrorBody } | undefined {
  const checks: [string, () => BrokerErrorBody | undefined][] = [
    ['account_id', () => (p.account_id === undefined ? undefined : checkAccountId(p.account_id))],
    ['amount', () => checkAmount(p.amount)],
    ['is_buy', () => (closeTable ? undefined : checkIsBuy(p.is_buy))],
    ['time_in_force', () => checkTimeInForce(p.order_type, p.time_in_force, closeTable ? CLOSE_TIF_BY_ORDER_TYPE : TIF_BY_ORDER_TYPE)],
    ['trailing_stop_step', () => checkTrailingStep(p.trailing_stop_step)],
    ['trailing_step', () => checkTrailingStep(p.trailing_step)],
    ['stop', () => checkStopInPips(p.stop, p.is_in_pips)],
  ];
  for (const [rule, f] of checks) {
    const body = f();
    if (body) return { rule, body };
  }
  return undefined;
}

/** The rule a broker error body names (the bodies above), or undefined for another answer. */
export function ruleOfBody(body: BrokerErrorBody): string | undefined {
  if (body.code === 18) return 'stop';
  if (body.code !== 3) return undefined;
  if (/^Amount should/.test(body.message)) return 'amount';
  if (/^Trailing stop step/.test(body.message)) return 'trailing_step';
  if (/margin/i.test(body.message)) return 'margin';
  if (/time in force/.test(body.message)) return 'time_in_force';
  if (/^is_buy/.test(body.message)) return 'is_buy';
  return undefined;
}

/** A body as one line: `Amount should be divisible by 10 (10)`. */
export function describeBody(body: BrokerErrorBody): string {
  return `${body.message.trim()}${body.parameters.length ? ` (${body.parameters.join(', ')})` : ''}`;
}
