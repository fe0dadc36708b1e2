/**
 * The broker's order rules, shared by the client (checked before sending) and the simulator
 * (enforced with the same error bodies). Each check returns the broker error body or undefined.
 *
 * Known bodies (seed 000, reference §1.4):
 *  - amount not divisible by 10, and account_id sent with leading zeros (the account name):
 *    {"code":3,"message":"Amount should be divisible by 10","parameters":["10"]}
 *  - stop on the wrong side in pips: {"code":18,"message":"The Stop distance must be ","parameters":["<",0]}
 * Not documented by the broker (simulator's choice, code 3 like the other parameter errors):
 *  - trailing stop step 2..9, invalid time in force for the order type, missing is_buy.
 */
import type { BrokerErrorBody } from './errors';

export const AMOUNT_BODY: BrokerErrorBody = { code: 3, message: 'Amount should be divisible by 10', parameters: ['10'] };

export function checkAccountId(accountId: unknown): BrokerErrorBody | undefined {
  const s = String(accountId ?? '');
  if (!/^[1-9][0-9]*$/.test(s)) return { ...AMOUNT_BODY, parameters: [...AMOUNT_BODY.parameters] };
  return undefined;
}

export function checkAmount(amount: unknown): BrokerErrorBody | undefined {
  const n = Number(amount);
  if (!Number.isFinite(n) || n <= 0 || !Number.isInteger(n) || n % 10 !== 0) {
    return { ...AMOUNT_BODY, parameters: [...AMOUNT_BODY.parameters] };
  }
  return undefined;
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
