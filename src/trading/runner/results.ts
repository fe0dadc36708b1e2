/**
 * What a run of any mode produces, and what a report is built from: the closed trades, the equity
 * curve and how the run ended.
 */
import type { CloseReason, PendingOrder, Position } from './strategy';

export interface ClosedTrade {
  tradeId: string;
  symbol: string;
  isBuy: boolean;
  amount: number;
  openRate: number;
  closeRate: number;
  /** Epoch ms. */
  openTime: number;
  closeTime: number;
  plPips: number;
  /** Net: grossPL + rollover − commission, account currency. */
  pl: number;
  grossPL: number;
  commission: number;
  /** Rollover (swap) the trade earned (+) or paid (−) while open; absent where none was booked. */
  rollover?: number;
  reason: CloseReason;
}

export interface EquityPoint {
  /** Epoch ms. */
  ts: number;
  balance: number;
  equity: number;
}

/** A strategy error that ended the run: its message, the hook, and the script line when known. */
export interface RunError {
  message: string;
  hook: string;
  location?: string;
  /** What the flatten after the error could not close or delete ("trade 12: <why>"); absent or empty when all went. */
  notFlattened?: string[];
}

export interface RunResult {
  strategy: string;
  mode: string;
  currency: string;
  startBalance: number;
  /** Epoch ms the run began at, when known (a backtest's first candle): the start of its time for the exposure and the charts. */
  startTime?: number;
  trades: ClosedTrade[];
  equity: EquityPoint[];
  /** Symbols whose P/L could not be converted exactly to the account currency. */
  approximateCurrency?: string[];
  error?: RunError;
  /** Paper/live: the run's own positions and entry orders still open at the broker when it ended. */
  leftOpen?: { positions: Position[]; orders: PendingOrder[] };
  /** The locks its protections set, in order (the first 1,000). */
  locks?: ProtectionLock[];
}

/** A lock a protection set: by which rule, on which symbol (none: every symbol), from when until when (epoch ms), and why. */
export interface ProtectionLock {
  rule: 'stopLossGuard' | 'maxDrawdown' | 'cooldown' | 'maxDailyLoss';
  symbol?: string;
  from: number;
  until: number;
  reason: string;
}
