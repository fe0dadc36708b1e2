/**
 * Symbol arithmetic of the backtest and the simulated broker: pip sizes, P/L and margin in the
 * account currency.
 *
 * Conversion: P/L is computed in the quote currency (rate difference × units) and converted with
 * the trade's own close rate when the base currency is the account currency (USD/JPY on a USD
 * account). For crosses (neither side is the account currency, e.g. EUR/GBP on a USD account) the
 * runner has no conversion rate in a single-symbol backtest: it books the quote-currency amount
 * unchanged and says so in the report (`approximateCurrency`).
 */

export function pipOf(symbol: string): number {
  return /JPY$/i.test(symbol.replace('/', '')) ? 0.01 : 0.0001;
}

/** Decimals of a symbol's rates (the broker's ratePrecision): a tenth of a pip, 5 (3 for JPY pairs). */
export function ratePrecisionOf(symbol: string): number {
  return pipOf(symbol) === 0.01 ? 3 : 5;
}

/** A rate rounded to the symbol's precision, as the broker quotes and takes it (no 1.2344300000000001). */
export function roundRate(symbol: string, rate: number): number {
  const f = 10 ** ratePrecisionOf(symbol);
  return Math.round(rate * f) / f;
}

export function splitSymbol(symbol: string): [string, string] {
  const [b = '', q = ''] = symbol.split('/');
  return [b.toUpperCase(), q.toUpperCase()];
}

/** Is the conversion of this symbol's P/L to `currency` exact? */
export function exactConversion(symbol: string, currency: string): boolean {
  const [b, q] = splitSymbol(symbol);
  return b === currency.toUpperCase() || q === currency.toUpperCase();
}

/** P/L in the account currency of `units` (signed direction already applied to diff). */
export function plInAccount(symbol: string, currency: string, diff: number, units: number, closeRate: number): number {
  const [b, q] = splitSymbol(symbol);
  const cur = currency.toUpperCase();
  const inQuote = diff * units;
  if (q === cur) return inQuote;
  if (b === cur && closeRate > 0) return inQuote / closeRate;
  return inQuote;
}

/**
 * The P/L of `units` of a position from `openRate` to `closeRate`: in pips and in `currency`,
 * unrounded (the broker shows pips to a tenth and money to the cent; the simulator rounds as it does).
 */
export function positionPL(symbol: string, currency: string, isBuy: boolean, openRate: number, closeRate: number, units: number): { pips: number; pl: number } {
  const diff = isBuy ? closeRate - openRate : openRate - closeRate;
  return { pips: diff / pipOf(symbol), pl: plInAccount(symbol, currency, diff, units, closeRate) };
}

/** Notional in the account currency (margin = notional / leverage). */
export function notionalInAccount(symbol: string, currency: string, units: number, rate: number): number {
  const [b] = splitSymbol(symbol);
  if (b === currency.toUpperCase()) return units;
  return units * rate;
}

/** The leverage of a margin requirement of 2% (the simulator's `mmr` of 0.02): the backtest's default too. */
export const DEFAULT_LEVERAGE = 50;

/**
 * The margin `units` of a symbol hold at `rate`, in the account currency: the notional over the
 * leverage. One formula for the backtest's account, the runner's pre-trade check and the
 * simulated broker's account (an open position at its closing price, an order at its fill price).
 */
export function marginOf(symbol: string, currency: string, units: number, rate: number, leverage: number = DEFAULT_LEVERAGE): number {
  return notionalInAccount(symbol, currency, units, rate) / leverage;
}

/** Rounds to 1e-10 to keep float noise out of reports and comparisons. */
export function clean(v: number): number {
  return Math.round(v * 1e10) / 1e10;
}
