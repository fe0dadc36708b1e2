/**
 * What the simulated broker shows: its table records (orders, open and closed positions, the
 * account, per-symbol summaries, offers) and the figures in them, P/L and pip value.
 */
import { closeSide } from '../execution/fills';
import { marginOf, positionPL } from '../execution/instruments';
import { TABLE_ID, type TableRecord } from '../fxcm/types';
import { MAX_QUANTITY } from '../fxcm/rules';
import { ACCOUNT_CURRENCY, type SimAccount, type SimOrder, type SimTrade } from './book';
import type { Market, SymbolSpec } from './market';

function pad(n: number, w = 2): string {
  return String(n).padStart(w, '0');
}

/** MMddyyyyHHmmssfff (17 digits), UTC. */
export function brokerTime(ms: number): string {
  const d = new Date(ms);
  return `${pad(d.getUTCMonth() + 1)}${pad(d.getUTCDate())}${d.getUTCFullYear()}${pad(d.getUTCHours())}${pad(d.getUTCMinutes())}${pad(d.getUTCSeconds())}${pad(d.getUTCMilliseconds(), 3)}`;
}

/**
 * `currencyPoint`: what one pip of `amountK` thousand is worth in the account currency (USD), as
 * gross P/L is counted (USD/xxx pairs converted at `price`). The broker shows 0.5 for 5K EUR/USD.
 */
function pipValue(symbol: string, pip: number, amountK: number, price: number): number {
  const v = pip * amountK * 1000;
  return Math.round((symbol.startsWith('USD/') ? v / price : v) * 1e4) / 1e4;
}

/** The margin requirement the offers show (`mmr`): 2% of the notional, a leverage of 50. */
export const MMR = 0.02;

export class BrokerRecords {
  constructor(
    private readonly market: Market,
    private readonly accountOf: (accountId: string) => SimAccount | undefined,
  ) {}

  order(o: SimOrder, action?: 'I' | 'U' | 'D'): TableRecord {
    const acc = this.accountOf(o.accountId)!;
    const spec = this.market.spec(o.symbol)!;
    const rec: TableRecord = {
      t: TABLE_ID.Order,
      ratePrecision: spec.ratePrecision,
      orderId: o.orderId,
      tradeId: o.tradeId,
      time: brokerTime(o.timeMs),
      accountName: acc.accountName,
      accountId: acc.accountId,
      timeInForce: o.timeInForce,
      expireDate: o.expireDate,
      currency: o.symbol,
      isBuy: o.isBuy,
      buy: o.isBuy ? o.rate : 0,
      sell: o.isBuy ? 0 : o.rate,
      type: o.type,
      status: o.status,
      amountK: o.amountK,
      currencyPoint: pipValue(o.symbol, spec.pip, o.amountK, o.rate > 0 ? o.rate : this.market.quote(o.symbol)!.bid),
      stopMove: o.stopMove,
      stop: o.stopPips ?? 0,
      stopRate: o.stop,
      limit: o.limitPips ?? 0,
      limitRate: o.limit,
      isEntryOrder: o.isEntry,
      ocoBulkId: o.ocoBulkId,
      isNetQuantity: false,
      isLimitOrder: o.limit !== 0,
      isStopOrder: o.stop !== 0,
      isELSOrder: false,
      stopPegBaseType: -1,
      limitPegBaseType: -1,
      range: o.range,
    };
    if (action) rec.action = action;
    return rec;
  }

  closePrice(t: SimTrade): number {
    const q = this.market.quote(t.symbol)!;
    return closeSide(t.isBuy, q.bid, q.ask);
  }

  pl(t: SimTrade, close = this.closePrice(t)): { pips: number; gross: number } {
    const { pips, pl } = positionPL(t.symbol, ACCOUNT_CURRENCY, t.isBuy, t.open, close, t.amountK * 1000);
    // As the broker shows them: pips to a tenth, money to the cent.
    return { pips: Math.round(pips * 10) / 10, gross: Math.round(pl * 100) / 100 };
  }

  /** What an open and a closed position record both show of `amountK` of a trade at `close`. */
  private tradeFigures(t: SimTrade, amountK: number, close: number): TableRecord {
    const acc = this.accountOf(t.accountId)!;
    const spec = this.market.spec(t.symbol)!;
    const { pips, gross } = this.pl({ ...t, amountK }, close);
    return {
      ratePrecision: spec.ratePrecision,
      accountName: acc.accountName,
      roll: Math.round(((t.roll * amountK) / t.amountK) * 100) / 100,
      com: 0,
      open: t.open,
      valueDate: '',
      grossPL: gross,
      close,
      visiblePL: pips,
      currency: t.symbol,
      isBuy: t.isBuy,
      amountK,
      currencyPoint: pipValue(t.symbol, spec.pip, amountK, close),
      isTotal: false,
    };
  }

  position(t: SimTrade, action?: 'I' | 'U' | 'D'): TableRecord {
    const rec: TableRecord = {
      t: TABLE_ID.OpenPosition,
      tradeId: t.tradeId,
      accountId: t.accountId,
      ...this.tradeFigures(t, t.amountK, this.closePrice(t)),
      isDisabled: false,
      time: brokerTime(t.openMs).slice(0, 14),
      usedMargin: Math.round(this.usedMargin(t) * 100) / 100,
      stop: t.stop,
      stopMove: t.stopMove,
      limit: t.limit,
      orderId: t.orderId,
    };
    if (action) rec.action = action;
    return rec;
  }

  /** The margin a trade holds at its closing price (the one formula of the backtest and the runner's check). */
  usedMargin(t: SimTrade): number {
    return marginOf(t.symbol, ACCOUNT_CURRENCY, t.amountK * 1000, this.closePrice(t), 1 / MMR);
  }

  /** The margin an order of `amountK` at `rate` needs. */
  orderMargin(symbol: string, amountK: number, rate: number): number {
    return marginOf(symbol, ACCOUNT_CURRENCY, amountK * 1000, rate, 1 / MMR);
  }

  /** An account's equity and used margin (unrounded; the Account record shows them to the cent). */
  margin(acc: SimAccount, trades: SimTrade[]): { equity: number; used: number; gross: number } {
    const gross = trades.reduce((s, t) => s + this.pl(t).gross, 0);
    const used = trades.reduce((s, t) => s + this.usedMargin(t), 0);
    // the rollover accrued on open trades is the account's until they close
    return { equity: acc.balance + gross + trades.reduce((s, t) => s + t.roll, 0), used, gross };
  }

  account(acc: SimAccount, trades: SimTrade[], action?: 'U'): TableRecord {
    const { equity, used, gross } = this.margin(acc, trades);
    const rec: TableRecord = {
      t: TABLE_ID.Account,
      ratePrecision: 0,
      accountId: acc.accountId,
      balance: Math.round(acc.balance * 100) / 100,
      usdMr: Math.round(used * 100) / 100,
      mc: 'N',
      accountName: acc.accountName,
      usdMr3: Math.round(used * 100) / 100,
      hedging: 'Y',
      usableMargin3: Math.round((equity - used) * 100) / 100,
      usableMarginPerc: equity > 0 ? Math.round(((equity - used) / equity) * 10000) / 100 : 0,
      usableMargin3Perc: equity > 0 ? Math.round(((equity - used) / equity) * 10000) / 100 : 0,
      equity: Math.round(equity * 100) / 100,
      usableMargin: Math.round((equity - used) * 100) / 100,
      dayPL: Math.round(acc.dayPL * 100) / 100,
      grossPL: Math.round(gross * 100) / 100,
      isTotal: false,
    };
    if (action) rec.action = action;
    return rec;
  }

  summaries(trades: SimTrade[]): TableRecord[] {
    const bySym = new Map<string, SimTrade[]>();
    for (const t of trades) bySym.set(t.symbol, [...(bySym.get(t.symbol) ?? []), t]);
    return [...bySym.entries()].map(([sym, ts]) => this.summary(sym, ts));
  }

  summary(sym: string, ts: SimTrade[]): TableRecord {
    const spec = this.market.spec(sym)!;
    const q = this.market.quote(sym)!;
    const buys = ts.filter((t) => t.isBuy);
    const sells = ts.filter((t) => !t.isBuy);
    const amt = (a: SimTrade[]) => a.reduce((s, t) => s + t.amountK, 0);
    const avg = (a: SimTrade[]) => (amt(a) ? a.reduce((s, t) => s + t.open * t.amountK, 0) / amt(a) : 0);
    const plOf = (a: SimTrade[]) => a.reduce((s, t) => s + this.pl(t).gross, 0);
    return {
      t: TABLE_ID.Summary,
      ratePrecision: spec.ratePrecision,
      offerId: spec.offerId,
      currency: sym,
      plSell: plOf(sells),
      amountKSell: amt(sells),
      avgSell: avg(sells),
      closeBuy: q.bid,
      closeSell: q.ask,
      avgBuy: avg(buys),
      amountKBuy: amt(buys),
      rollSum: Math.round(ts.reduce((s, t) => s + t.roll, 0) * 100) / 100,
      usedMarginSell: Math.round(sells.reduce((s, t) => s + this.usedMargin(t), 0) * 100) / 100,
      usedMarginBuy: Math.round(buys.reduce((s, t) => s + this.usedMargin(t), 0) * 100) / 100,
      isSellDisabled: false,
      isBuyDisabled: false,
      plBuy: plOf(buys),
      amountK: amt(buys) - amt(sells),
      currencyPoint: pipValue(sym, spec.pip, Math.abs(amt(buys) - amt(sells)), q.bid),
      grossPL: plOf(ts),
      netPL: plOf(ts),
      netStop: 0,
      netStopMove: 0,
      netLimit: TABLE_ID.Offer,
      isTotal: false,
    };
  }

  offer(spec: SymbolSpec, action?: 'U'): TableRecord {
    const q = this.market.quote(spec.symbol)!;
    const open = this.market.isOpen();
    const rec: TableRecord = {
      t: TABLE_ID.Offer,
      ratePrecision: spec.ratePrecision,
      offerId: spec.offerId,
      rollB: spec.rollover?.long ?? 0,
      rollS: spec.rollover?.short ?? 0,
      fractionDigits: spec.ratePrecision,
      pip: spec.pip,
      defaultSortOrder: spec.offerId,
      currency: spec.symbol,
      instrumentType: spec.instrumentType ?? 1,
      valueDate: '',
      time: new Date(q.updatedMs).toISOString(),
      sell: q.bid,
      buy: q.ask,
      sellTradable: open,
      buyTradable: open,
      high: q.high,
      low: q.low,
      volume: 1,
      pipFraction: 0.1,
      spread: Math.round(((q.ask - q.bid) / spec.pip) * 10) / 10,
      mmr: MMR,
      emr: 0,
      lmr: 0,
      pipCost: spec.pip,
      minQuantity: 1000,
      maxQuantity: MAX_QUANTITY,
      instrBaseUnitSize: 1000,
    };
    if (action) rec.action = action;
    return rec;
  }

  /** The ClosedPosition record of `amountK` of a trade closed at `close` (a partial close gets its own id). */
  closedPosition(t: SimTrade, amountK: number, close: number, closedId: string, closeMs: number): TableRecord {
    return {
      t: TABLE_ID.ClosedPosition,
      tradeId: closedId,
      ...this.tradeFigures(t, amountK, close),
      openTime: brokerTime(t.openMs).slice(0, 14),
      closeTime: brokerTime(closeMs).slice(0, 14),
    };
  }
}
