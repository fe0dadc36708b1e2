/**
 * Rollover (swap): the interest a position earns or pays for each day it is held over the broker's
 * daily rollover (17:00 New York; Wednesday's counts three days: fxcm/market-hours.ts). The broker
 * quotes it per instrument as `rollB` (a long) and `rollS` (a short) in its Offer table: account
 * currency per day, here per 10K units (FXCM's rollover table quotes 10K; the broker's feed does
 * not say), positive earned, negative paid. It accrues on the open trade (OpenPosition `roll`), is
 * part of the equity, and is booked into the balance with the trade's P/L when it closes.
 */
import { clean } from './instruments';

export interface RolloverRates {
  /** rollB: per 10K units held long, per day, account currency. */
  long: number;
  /** rollS: per 10K units held short. */
  short: number;
}

/**
 * Typical rates for a USD account (2026 interest rates less a broker's markup, so often both sides
 * pay): what the simulator quotes and `backtest --rollover` charges unless --rollover-rate gives
 * the broker's current ones. Other symbols have none.
 */
export const DEFAULT_ROLLOVER: Readonly<Record<string, RolloverRates>> = {
  'EUR/USD': { long: -0.62, short: 0.28 },
  'USD/JPY': { long: 0.75, short: -1.2 },
  'GBP/USD': { long: -0.1, short: -0.25 },
  'USD/CHF': { long: 0.8, short: -1.1 },
  'EUR/CHF': { long: 0.35, short: -0.7 },
  'AUD/USD': { long: -0.25, short: -0.05 },
  'USD/CAD': { long: 0.2, short: -0.45 },
  'NZD/USD': { long: -0.2, short: -0.05 },
  'EUR/GBP': { long: -0.55, short: 0.2 },
  'EUR/JPY': { long: 0.3, short: -0.65 },
  'GBP/JPY': { long: 0.85, short: -1.3 },
};

/** The rollover of `amountK` thousand units over `days` days. */
export function rolloverOf(rates: RolloverRates, isBuy: boolean, amountK: number, days: number): number {
  return clean(((isBuy ? rates.long : rates.short) * amountK * days) / 10);
}
