/**
 * What the simulated broker holds: accounts, resting and executed orders, open trades.
 */
import type { ModelName, TableRecord } from '../fxcm/types';

/** Every simulated account is in US dollars. */
export const ACCOUNT_CURRENCY = 'USD';

export interface AccountSpec {
  /** Account id (no leading zeros); the name is it zero-padded to 8 digits. */
  accountId?: string;
  balance?: number;
}

export interface SimAccount {
  token: string;
  accountId: string;
  accountName: string;
  balance: number;
  dayPL: number;
  visibleOffers: Set<string>;
}

export interface SimTrade {
  tradeId: string;
  orderId: string;
  accountId: string;
  symbol: string;
  isBuy: boolean;
  amountK: number;
  open: number;
  openMs: number;
  stop: number;
  limit: number;
  /** 0 none, 1 dynamic trailing, n >= 10 fixed trailing step in pips. */
  stopMove: number;
  /** Trailing: the distance the stop keeps from the best price. */
  trailDist: number;
  /** Rollover accrued (account currency), paid into the balance at the close. */
  roll: number;
}

export interface SimOrder {
  orderId: string;
  accountId: string;
  symbol: string;
  isBuy: boolean;
  amountK: number;
  rate: number;
  type: string;
  timeInForce: string;
  status: number;
  isEntry: boolean;
  stop: number;
  limit: number;
  stopMove: number;
  ocoBulkId: number;
  range: number;
  expireDate: string;
  timeMs: number;
  tradeId: string;
  /** Stop/limit as pip distances from the fill price (entry orders with is_in_pips). */
  stopPips?: number;
  limitPips?: number;
}

export type PushFn = (token: string, model: ModelName, record: TableRecord) => void;
