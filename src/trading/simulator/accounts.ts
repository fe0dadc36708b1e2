/**
 * The simulated trading engine: accounts, orders, trades and their pushes.
 *
 * Market orders fill at ask (buy) / bid (sell) and push Order I (→ U per extra partial fill) → D
 * with the order and trade ids, OpenPosition I, Account and Summary U. Entry orders rest (Order
 * I, status Waiting) until the price crosses, then fill the same way. Stops, limits and trailing
 * stops trigger on the closing side (bid for a buy trade, ask for a sell trade) and push
 * OpenPosition D, ClosedPosition I. When orders fill and stops move is the backtest's model
 * (`execution/fills.ts`), applied to each tick. Rules use the shared `fxcm/rules` module, so the error
 * bodies are the broker's (code 3 for amounts and zero-padded account ids, …).
 */
import { checkAccountId, checkAmount, checkIsBuy, checkStopInPips, checkTimeInForce, checkTrailingStep, CLOSE_TIF_BY_ORDER_TYPE } from '../fxcm/rules';
import type { BrokerErrorBody } from '../fxcm/errors';
import { ORDER_STATUS, type ModelName, type TableRecord } from '../fxcm/types';
import { closeSide, entryFill, entryKind, exitFill, levelFromPips, tickMove, trailStop } from '../execution/fills';
import { plInAccount } from '../execution/instruments';
import type { Faults } from './faults';
import type { Market, Quote, SymbolSpec } from './market';

/** A request error: the `error` string of the envelope (a JSON broker body or plain text). */
/**
 * `currencyPoint`: what one pip of `amountK` thousand is worth in the account currency (USD), as
 * gross P/L is counted (USD/xxx pairs converted at `price`). The broker shows 0.5 for 5K EUR/USD.
 */
function pipValue(symbol: string, pip: number, amountK: number, price: number): number {
  const v = pip * amountK * 1000;
  return Math.round((symbol.startsWith('USD/') ? v / price : v) * 1e4) / 1e4;
}

/** Every simulated account is in US dollars. */
const ACCOUNT_CURRENCY = 'USD';

export class SimRequestError extends Error {
  constructor(readonly error: string) {
    super(error);
  }
  static body(b: BrokerErrorBody): SimRequestError {
    return new SimRequestError(JSON.stringify(b));
  }
}

export type Form = Record<string, string | string[] | undefined>;

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

const bool = (v: unknown) => v === true || v === 'true' || v === '1';
const num = (v: unknown, d = 0) => {
  if (v === undefined || v === '' || Array.isArray(v)) return d;
  const n = Number(v);
  return Number.isFinite(n) ? n : d;
};
const str = (v: unknown) => (Array.isArray(v) ? String(v[0] ?? '') : v === undefined ? '' : String(v));
const list = (v: unknown): string[] => (v === undefined ? [] : Array.isArray(v) ? v.map(String) : String(v).split(',').filter(Boolean));

function pad(n: number, w = 2): string {
  return String(n).padStart(w, '0');
}
/** MMddyyyyHHmmssfff (17 digits), UTC. */
export function brokerTime(ms: number): string {
  const d = new Date(ms);
  return `${pad(d.getUTCMonth() + 1)}${pad(d.getUTCDate())}${d.getUTCFullYear()}${pad(d.getUTCHours())}${pad(d.getUTCMinutes())}${pad(d.getUTCSeconds())}${pad(d.getUTCMilliseconds(), 3)}`;
}

export class TradingEngine {
  readonly accounts = new Map<string, SimAccount>();
  readonly trades = new Map<string, SimTrade>();
  readonly orders = new Map<string, SimOrder>();
  readonly closed: TableRecord[] = [];
  private nextOrderId = 390285837;
  private nextTradeId = 170162801;
  private nextOcoId = 1;
  private nextAccount = 1537581;
  /** Trades with a close order in flight (not triggered twice). */
  private readonly closing = new Set<string>();

  constructor(private readonly market: Market, private readonly faults: Faults, private readonly push: PushFn) {
    market.on('price', (symbol: string, q: Quote) => this.onPrice(symbol, q));
  }

  addAccount(token: string, spec: AccountSpec = {}): SimAccount {
    const accountId = spec.accountId ?? String(this.nextAccount++);
    const acc: SimAccount = {
      token,
      accountId,
      accountName: accountId.padStart(8, '0'),
      balance: spec.balance ?? 50000,
      dayPL: 0,
      visibleOffers: new Set(this.market.symbols()),
    };
    this.accounts.set(token, acc);
    return acc;
  }

  account(token: string): SimAccount {
    const a = this.accounts.get(token);
    if (!a) throw new SimRequestError('Unauthorized');
    return a;
  }

  private accountByToken(accountId: string): SimAccount | undefined {
    return [...this.accounts.values()].find((a) => a.accountId === accountId);
  }

  /** account_id must be the account's id: zero-padded names fail with the code 3 body. */
  private checkAccount(acc: SimAccount, form: Form): void {
    const id = str(form.account_id);
    const b = checkAccountId(id);
    if (b) throw SimRequestError.body(b);
    if (id !== acc.accountId) throw new SimRequestError(`Account ${id} is not accessible`);
  }

  private spec(symbol: string): SymbolSpec {
    const s = this.market.spec(symbol);
    if (!s) throw new SimRequestError(`Unknown symbol ${symbol}`);
    return s;
  }

  private must(b: BrokerErrorBody | undefined): void {
    if (b) throw SimRequestError.body(b);
  }

  private requireOpen(): void {
    if (!this.market.isOpen()) throw new SimRequestError('Market is closed');
  }

  // ---------------------------------------------------------------- records

  orderRecord(o: SimOrder, action?: 'I' | 'U' | 'D'): TableRecord {
    const acc = this.accountByToken(o.accountId)!;
    const spec = this.market.spec(o.symbol)!;
    const rec: TableRecord = {
      t: 3,
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

  private closePrice(t: SimTrade): number {
    const q = this.market.quote(t.symbol)!;
    return closeSide(t.isBuy, q.bid, q.ask);
  }

  private pl(t: SimTrade, close = this.closePrice(t)): { pips: number; gross: number } {
    const spec = this.market.spec(t.symbol)!;
    const diff = t.isBuy ? close - t.open : t.open - close;
    const gross = plInAccount(t.symbol, ACCOUNT_CURRENCY, diff, t.amountK * 1000, close);
    return { pips: Math.round((diff / spec.pip) * 10) / 10, gross: Math.round(gross * 100) / 100 };
  }

  positionRecord(t: SimTrade, action?: 'I' | 'U' | 'D'): TableRecord {
    const acc = this.accountByToken(t.accountId)!;
    const spec = this.market.spec(t.symbol)!;
    const close = this.closePrice(t);
    const { pips, gross } = this.pl(t, close);
    const rec: TableRecord = {
      t: 1,
      ratePrecision: spec.ratePrecision,
      tradeId: t.tradeId,
      accountName: acc.accountName,
      accountId: acc.accountId,
      roll: 0,
      com: 0,
      open: t.open,
      valueDate: '',
      grossPL: gross,
      close,
      visiblePL: pips,
      isDisabled: false,
      currency: t.symbol,
      isBuy: t.isBuy,
      amountK: t.amountK,
      currencyPoint: pipValue(t.symbol, spec.pip, t.amountK, close),
      time: brokerTime(t.openMs).slice(0, 14),
      usedMargin: Math.round(t.amountK * 1000 * 0.02 * 100) / 100,
      stop: t.stop,
      stopMove: t.stopMove,
      limit: t.limit,
      isTotal: false,
      orderId: t.orderId,
    };
    if (action) rec.action = action;
    return rec;
  }

  accountRecord(acc: SimAccount, action?: 'U'): TableRecord {
    const trades = [...this.trades.values()].filter((t) => t.accountId === acc.accountId);
    const gross = trades.reduce((s, t) => s + this.pl(t).gross, 0);
    const used = trades.reduce((s, t) => s + t.amountK * 1000 * 0.02, 0);
    const equity = acc.balance + gross;
    const rec: TableRecord = {
      t: 6,
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

  summaryRecords(acc: SimAccount): TableRecord[] {
    const bySym = new Map<string, SimTrade[]>();
    for (const t of this.trades.values()) if (t.accountId === acc.accountId) bySym.set(t.symbol, [...(bySym.get(t.symbol) ?? []), t]);
    return [...bySym.entries()].map(([sym, ts]) => this.summaryRecord(sym, ts));
  }

  private summaryRecord(sym: string, ts: SimTrade[]): TableRecord {
    const spec = this.market.spec(sym)!;
    const q = this.market.quote(sym)!;
    const buys = ts.filter((t) => t.isBuy);
    const sells = ts.filter((t) => !t.isBuy);
    const amt = (a: SimTrade[]) => a.reduce((s, t) => s + t.amountK, 0);
    const avg = (a: SimTrade[]) => (amt(a) ? a.reduce((s, t) => s + t.open * t.amountK, 0) / amt(a) : 0);
    const plOf = (a: SimTrade[]) => a.reduce((s, t) => s + this.pl(t).gross, 0);
    return {
      t: 5,
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
      rollSum: 0,
      usedMarginSell: amt(sells) * 20,
      usedMarginBuy: amt(buys) * 20,
      isSellDisabled: false,
      isBuyDisabled: false,
      plBuy: plOf(buys),
      amountK: amt(buys) - amt(sells),
      currencyPoint: pipValue(sym, spec.pip, Math.abs(amt(buys) - amt(sells)), q.bid),
      grossPL: plOf(ts),
      netPL: plOf(ts),
      netStop: 0,
      netStopMove: 0,
      netLimit: 0,
      isTotal: false,
    };
  }

  offerRecord(spec: SymbolSpec, action?: 'U'): TableRecord {
    const q = this.market.quote(spec.symbol)!;
    const open = this.market.isOpen();
    const rec: TableRecord = {
      t: 0,
      ratePrecision: spec.ratePrecision,
      offerId: spec.offerId,
      rollB: 0,
      rollS: 0,
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
      mmr: 0.02,
      emr: 0,
      lmr: 0,
      pipCost: spec.pip,
      minQuantity: 1000,
      maxQuantity: 50000000,
      instrBaseUnitSize: 1000,
    };
    if (action) rec.action = action;
    return rec;
  }

  snapshot(token: string, model: ModelName): TableRecord[] {
    const acc = this.account(token);
    switch (model) {
      case 'Offer':
        return this.market
          .symbols()
          .filter((s) => acc.visibleOffers.has(s))
          .map((s) => this.offerRecord(this.market.spec(s)!));
      case 'OpenPosition':
        return [...this.trades.values()].filter((t) => t.accountId === acc.accountId).map((t) => this.positionRecord(t));
      case 'ClosedPosition':
        return this.closed.filter((c) => c.accountName === acc.accountName).map((c) => ({ ...c }));
      case 'Order':
        // a snapshot never links an executed market order to its trade (identifier rule 4)
        return [...this.orders.values()].filter((o) => o.accountId === acc.accountId).map((o) => ({ ...this.orderRecord(o), tradeId: '' }));
      case 'Summary':
        return this.summaryRecords(acc);
      case 'Account':
        return [this.accountRecord(acc)];
      case 'LeverageProfile':
      case 'Properties':
        return [];
    }
  }

  private pushAccount(acc: SimAccount, symbol?: string): void {
    this.push(acc.token, 'Account', this.accountRecord(acc, 'U'));
    if (symbol) {
      const ts = [...this.trades.values()].filter((t) => t.accountId === acc.accountId && t.symbol === symbol);
      const spec = this.market.spec(symbol)!;
      if (ts.length) this.push(acc.token, 'Summary', { ...this.summaryRecord(symbol, ts), action: 'U' });
      else this.push(acc.token, 'Summary', { t: 5, offerId: spec.offerId, currency: symbol, action: 'D' });
    }
  }

  // ---------------------------------------------------------------- stop/limit helpers

  /** Resolves stop/limit (rates or pip distances) against a reference price. */
  private stopLimitRates(spec: SymbolSpec, isBuy: boolean, ref: number, stop: number, limit: number, inPips: boolean) {
    if (!inPips) return { stop, limit, stopPips: undefined, limitPips: undefined };
    return {
      stop: stop ? levelFromPips(isBuy, ref, stop, spec.pip) : 0,
      limit: limit ? levelFromPips(isBuy, ref, limit, spec.pip) : 0,
      stopPips: stop || undefined,
      limitPips: limit || undefined,
    };
  }

  // ---------------------------------------------------------------- requests

  openTrade(token: string, form: Form): { type: number; orderId: number } {
    const acc = this.account(token);
    this.checkAccount(acc, form);
    this.must(checkAmount(form.amount));
    this.must(checkIsBuy(form.is_buy));
    const orderType = str(form.order_type);
    const tif = str(form.time_in_force);
    this.must(checkTimeInForce(orderType, tif));
    this.must(checkTrailingStep(form.trailing_step));
    this.must(checkStopInPips(form.stop, form.is_in_pips));
    if (orderType !== 'AtMarket' && orderType !== 'MarketRange') throw SimRequestError.body({ code: 3, message: 'Invalid order type', parameters: [orderType] });
    const spec = this.spec(str(form.symbol));
    this.requireOpen();
    const isBuy = bool(form.is_buy);
    const o: SimOrder = {
      orderId: String(this.nextOrderId++),
      accountId: acc.accountId,
      symbol: spec.symbol,
      isBuy,
      amountK: num(form.amount),
      rate: 0,
      type: 'OM',
      timeInForce: tif,
      status: ORDER_STATUS.InProcess,
      isEntry: false,
      stop: 0,
      limit: 0,
      stopMove: num(form.trailing_step),
      ocoBulkId: 0,
      range: num(form.at_market),
      expireDate: '',
      timeMs: this.market.nowMs(),
      tradeId: '',
    };
    const inPips = bool(form.is_in_pips);
    const stop = num(form.stop);
    const limit = num(form.limit);
    // deferred so the HTTP response (with the order id) is written before the pushes
    setImmediate(() => this.executeMarket(acc, o, { stop, limit, inPips }));
    return { type: 0, orderId: Number(o.orderId) };
  }

  private executeMarket(acc: SimAccount, o: SimOrder, sl: { stop: number; limit: number; inPips: boolean }): void {
    const spec = this.market.spec(o.symbol)!;
    if (this.faults.takeRequote()) {
      o.status = ORDER_STATUS.Requoted;
      this.push(acc.token, 'Order', this.orderRecord(o, 'I'));
      this.push(acc.token, 'Order', this.orderRecord(o, 'D'));
      return;
    }
    const q = this.market.quote(o.symbol)!;
    const price = o.isBuy ? q.ask : q.bid;
    o.rate = price;
    const rates = this.stopLimitRates(spec, o.isBuy, price, sl.stop, sl.limit, sl.inPips);
    const parts = this.faults.takeFillParts();
    this.fill(acc, o, price, parts, rates.stop, rates.limit, o.stopMove, true);
  }

  /** Fills an order in `parts` trades: Order I/U per fill, then D; OpenPosition I each; Account/Summary U. */
  private fill(acc: SimAccount, o: SimOrder, price: number, parts: number, stop: number, limit: number, stopMove: number, insertFirst: boolean): SimTrade[] {
    const spec = this.market.spec(o.symbol)!;
    const total = o.amountK;
    const unit = Math.max(1, Math.floor(total / parts));
    const sizes: number[] = [];
    let left = total;
    for (let i = 0; i < parts && left > 0; i++) {
      const s = i === parts - 1 ? left : Math.min(unit, left);
      sizes.push(s);
      left -= s;
    }
    const trades: SimTrade[] = [];
    sizes.forEach((size, i) => {
      const t: SimTrade = {
        tradeId: String(this.nextTradeId++),
        orderId: o.orderId,
        accountId: acc.accountId,
        symbol: o.symbol,
        isBuy: o.isBuy,
        amountK: size,
        open: price,
        openMs: this.market.nowMs(),
        stop,
        limit,
        stopMove,
        trailDist: stop ? Math.abs(price - stop) : 0,
      };
      this.trades.set(t.tradeId, t);
      trades.push(t);
      o.tradeId = t.tradeId;
      o.status = i === sizes.length - 1 ? ORDER_STATUS.Executed : ORDER_STATUS.InProcess;
      this.push(acc.token, 'Order', this.orderRecord(o, i === 0 && insertFirst ? 'I' : 'U'));
      this.push(acc.token, 'OpenPosition', this.positionRecord(t, 'I'));
    });
    this.orders.delete(o.orderId);
    this.push(acc.token, 'Order', this.orderRecord(o, 'D'));
    this.pushAccount(acc, spec.symbol);
    return trades;
  }

  createEntryOrder(token: string, form: Form): { type: number; orderId: number } {
    const acc = this.account(token);
    this.checkAccount(acc, form);
    const o = this.newEntryOrder(acc, form, '');
    return { type: 0, orderId: Number(o.orderId) };
  }

  private newEntryOrder(acc: SimAccount, form: Form, suffix: '' | '2', ocoBulkId = 0, pushNow = true): SimOrder {
    const k = (name: string) => form[`${name}${suffix}`];
    this.must(checkAmount(form.amount));
    const orderType = str(form.order_type) || 'Entry';
    const tif = str(form.time_in_force);
    this.must(checkTimeInForce(orderType, tif));
    this.must(checkTrailingStep(k('trailing_stop_step')));
    this.must(checkTrailingStep(k('trailing_step')));
    this.must(checkStopInPips(k('stop'), form.is_in_pips));
    if (orderType !== 'Entry' && orderType !== 'RangeEntry') throw SimRequestError.body({ code: 3, message: 'Invalid order type', parameters: [orderType] });
    const spec = this.spec(str(form.symbol));
    // is_buy defaults to true when omitted (documented broker behaviour; the client always sends it)
    const isBuy = k('is_buy') === undefined ? true : bool(k('is_buy'));
    const rate = num(k('rate'));
    if (!(rate > 0)) throw SimRequestError.body({ code: 3, message: 'Invalid rate', parameters: [str(k('rate'))] });
    const q = this.market.quote(spec.symbol)!;
    const inPips = bool(form.is_in_pips);
    const rates = this.stopLimitRates(spec, isBuy, rate, num(k('stop')), num(k('limit')), inPips);
    const o: SimOrder = {
      orderId: String(this.nextOrderId++),
      accountId: acc.accountId,
      symbol: spec.symbol,
      isBuy,
      amountK: num(form.amount),
      rate,
      type: entryKind(isBuy, rate, q.bid, q.ask) === 'stop' ? 'SE' : 'LE',
      timeInForce: tif,
      status: ORDER_STATUS.Waiting,
      isEntry: true,
      stop: rates.stop,
      limit: rates.limit,
      stopPips: rates.stopPips,
      limitPips: rates.limitPips,
      stopMove: num(k('trailing_stop_step')) || num(k('trailing_step')),
      ocoBulkId,
      range: num(form.range),
      expireDate: str(form.expiration),
      timeMs: this.market.nowMs(),
      tradeId: '',
    };
    this.orders.set(o.orderId, o);
    if (pushNow) this.push(acc.token, 'Order', this.orderRecord(o, 'I'));
    return o;
  }

  private findOrder(acc: SimAccount, id: string): SimOrder {
    const o = this.orders.get(id);
    if (!o || o.accountId !== acc.accountId) throw new SimRequestError(`Order ${id} not found`);
    return o;
  }

  private findTrade(acc: SimAccount, id: string): SimTrade {
    const t = this.trades.get(id);
    if (!t || t.accountId !== acc.accountId) throw new SimRequestError(`Trade ${id} not found`);
    return t;
  }

  changeOrder(token: string, form: Form): null {
    const acc = this.account(token);
    const o = this.findOrder(acc, str(form.order_id));
    this.must(checkAmount(form.amount));
    this.must(checkTrailingStep(form.trailing_step));
    const spec = this.spec(o.symbol);
    o.rate = num(form.rate, o.rate);
    o.amountK = num(form.amount, o.amountK);
    o.range = num(form.range, o.range);
    if (form.trailing_step !== undefined) o.stopMove = num(form.trailing_step);
    const q = this.market.quote(o.symbol)!;
    o.type = entryKind(o.isBuy, o.rate, q.bid, q.ask) === 'stop' ? 'SE' : 'LE';
    if (o.stopPips !== undefined || o.limitPips !== undefined) {
      const r = this.stopLimitRates(spec, o.isBuy, o.rate, o.stopPips ?? 0, o.limitPips ?? 0, true);
      o.stop = r.stop;
      o.limit = r.limit;
    }
    this.push(acc.token, 'Order', this.orderRecord(o, 'U'));
    return null;
  }

  deleteOrder(token: string, form: Form): null {
    const acc = this.account(token);
    const o = this.findOrder(acc, str(form.order_id));
    const group = o.ocoBulkId ? [...this.orders.values()].filter((x) => x.ocoBulkId === o.ocoBulkId) : [o];
    for (const x of group) this.cancel(acc, x);
    return null;
  }

  private cancel(acc: SimAccount, o: SimOrder): void {
    this.orders.delete(o.orderId);
    o.status = ORDER_STATUS.Canceled;
    this.push(acc.token, 'Order', this.orderRecord(o, 'D'));
  }

  closeTrade(token: string, form: Form): { type: number; orderId: number } {
    const acc = this.account(token);
    const t = this.findTrade(acc, str(form.trade_id));
    this.must(checkAmount(form.amount));
    this.must(checkTimeInForce(str(form.order_type), str(form.time_in_force), CLOSE_TIF_BY_ORDER_TYPE));
    this.requireOpen();
    const amount = Math.min(num(form.amount), t.amountK);
    const o = this.closeOrder(acc, t, amount);
    return { type: 0, orderId: Number(o.orderId) };
  }

  /**
   * A close order for (part of) a trade. One the account asked for runs after the HTTP response
   * (its pushes follow the order id); a stop or limit the price hit (`type` S or L) runs at once,
   * at that price, before the price itself is pushed, as a backtest closes it within the candle.
   */
  private closeOrder(acc: SimAccount, t: SimTrade, amount: number, type: 'CM' | 'S' | 'L' = 'CM'): SimOrder {
    const o: SimOrder = {
      orderId: String(this.nextOrderId++),
      accountId: acc.accountId,
      symbol: t.symbol,
      isBuy: !t.isBuy,
      amountK: amount,
      rate: this.closePrice(t),
      type,
      timeInForce: 'GTC',
      status: ORDER_STATUS.Executed,
      isEntry: false,
      stop: 0,
      limit: 0,
      stopMove: 0,
      ocoBulkId: 0,
      range: 0,
      expireDate: '',
      timeMs: this.market.nowMs(),
      tradeId: t.tradeId,
    };
    const execute = () => {
      this.push(acc.token, 'Order', this.orderRecord(o, 'I'));
      this.closeTradeNow(acc, t, amount);
      this.push(acc.token, 'Order', this.orderRecord(o, 'D'));
    };
    if (type !== 'CM') {
      execute();
      return o;
    }
    if (amount >= t.amountK) this.closing.add(t.tradeId);
    setImmediate(() => {
      this.closing.delete(t.tradeId);
      if (this.trades.has(t.tradeId)) execute();
    });
    return o;
  }

  /** Closes (part of) a trade at the current closing price. */
  private closeTradeNow(acc: SimAccount, t: SimTrade, amount: number): void {
    const close = this.closePrice(t);
    const part: SimTrade = { ...t, amountK: amount };
    const { pips, gross } = this.pl(part, close);
    const spec = this.market.spec(t.symbol)!;
    const full = amount >= t.amountK;
    const closedId = full ? t.tradeId : String(this.nextTradeId++);
    const rec: TableRecord = {
      t: 2,
      ratePrecision: spec.ratePrecision,
      tradeId: closedId,
      accountName: acc.accountName,
      roll: 0,
      com: 0,
      open: t.open,
      valueDate: '',
      grossPL: gross,
      close,
      visiblePL: pips,
      currency: t.symbol,
      isBuy: t.isBuy,
      amountK: amount,
      currencyPoint: pipValue(t.symbol, spec.pip, amount, close),
      openTime: brokerTime(t.openMs).slice(0, 14),
      closeTime: brokerTime(this.market.nowMs()).slice(0, 14),
      isTotal: false,
    };
    this.closed.push(rec);
    acc.balance += gross;
    acc.dayPL += gross;
    if (full) {
      this.trades.delete(t.tradeId);
      this.push(acc.token, 'OpenPosition', this.positionRecord(t, 'D'));
    } else {
      t.amountK -= amount;
      this.push(acc.token, 'OpenPosition', this.positionRecord(t, 'U'));
    }
    this.push(acc.token, 'ClosedPosition', { ...rec, action: 'I' });
    this.pushAccount(acc, t.symbol);
  }

  closeAllForSymbol(token: string, form: Form): null {
    const acc = this.account(token);
    this.checkAccount(acc, form);
    this.must(checkTimeInForce(str(form.order_type), str(form.time_in_force), CLOSE_TIF_BY_ORDER_TYPE));
    this.requireOpen();
    const forSymbol = form.forSymbol === undefined ? true : bool(form.forSymbol);
    const symbol = str(form.symbol);
    if (forSymbol) this.spec(symbol);
    for (const t of [...this.trades.values()]) {
      if (t.accountId !== acc.accountId || (forSymbol && t.symbol !== symbol)) continue;
      this.closeOrder(acc, t, t.amountK);
    }
    return null;
  }

  changeTradeStopLimit(token: string, form: Form): null {
    const acc = this.account(token);
    const t = this.findTrade(acc, str(form.trade_id));
    const isStop = bool(form.is_stop);
    const inPips = bool(form.is_in_pips);
    const rate = num(form.rate);
    this.must(checkTrailingStep(form.trailing_step));
    if (isStop) this.must(checkStopInPips(rate, inPips));
    const spec = this.spec(t.symbol);
    const ref = this.closePrice(t);
    const r = this.stopLimitRates(spec, t.isBuy, ref, isStop ? rate : 0, isStop ? 0 : rate, inPips);
    if (isStop) {
      t.stop = rate === 0 ? 0 : r.stop;
      t.stopMove = t.stop ? num(form.trailing_step) : 0;
      t.trailDist = t.stop ? Math.abs(ref - t.stop) : 0;
    } else {
      t.limit = rate === 0 ? 0 : r.limit;
    }
    this.push(acc.token, 'OpenPosition', this.positionRecord(t, 'U'));
    return null;
  }

  changeOrderStopLimit(token: string, form: Form): { type: number; orderId: number }[] {
    const acc = this.account(token);
    const o = this.findOrder(acc, str(form.order_id));
    this.must(checkTrailingStep(form.trailing_step));
    this.must(checkStopInPips(form.stop, form.is_stop_in_pips));
    const spec = this.spec(o.symbol);
    const s = this.stopLimitRates(spec, o.isBuy, o.rate, num(form.stop), 0, bool(form.is_stop_in_pips));
    const l = this.stopLimitRates(spec, o.isBuy, o.rate, 0, num(form.limit), bool(form.is_limit_in_pips));
    o.stop = s.stop;
    o.stopPips = s.stopPips;
    o.limit = l.limit;
    o.limitPips = l.limitPips;
    if (form.trailing_step !== undefined) o.stopMove = num(form.trailing_step);
    this.push(acc.token, 'Order', this.orderRecord(o, 'U'));
    return [
      { type: 0, orderId: this.nextOrderId++ },
      { type: 0, orderId: this.nextOrderId++ },
    ];
  }

  simpleOco(token: string, form: Form): [null, null] {
    const acc = this.account(token);
    this.checkAccount(acc, form);
    this.must(checkIsBuy(form.is_buy));
    this.must(checkIsBuy(form.is_buy2));
    const bulk = this.nextOcoId++;
    // validate both before creating either
    const a = this.newEntryOrder(acc, form, '', bulk, false);
    let b: SimOrder;
    try {
      b = this.newEntryOrder(acc, form, '2', bulk, false);
    } catch (e) {
      this.orders.delete(a.orderId);
      throw e;
    }
    this.push(acc.token, 'Order', this.orderRecord(a, 'I'));
    this.push(acc.token, 'Order', this.orderRecord(b, 'I'));
    return [null, null];
  }

  addToOco(token: string, form: Form): [null, null] {
    const acc = this.account(token);
    const ids = list(form.orderIds);
    const orders = ids.map((id) => this.findOrder(acc, id));
    let bulk = num(form.ocoBulkId);
    if (!bulk) bulk = this.nextOcoId++;
    for (const o of orders) {
      o.ocoBulkId = bulk;
      this.push(acc.token, 'Order', this.orderRecord(o, 'U'));
    }
    return [null, null];
  }

  removeFromOco(token: string, form: Form): [null, null] {
    const acc = this.account(token);
    for (const o of list(form.orderIds).map((id) => this.findOrder(acc, id))) {
      o.ocoBulkId = 0;
      this.push(acc.token, 'Order', this.orderRecord(o, 'U'));
    }
    return [null, null];
  }

  editOco(token: string, form: Form): null {
    const acc = this.account(token);
    const bulk = num(form.ocoBulkId);
    if (!bulk) throw SimRequestError.body({ code: 3, message: 'Invalid ocoBulkId', parameters: [str(form.ocoBulkId)] });
    const add = list(form.addOrderIds).map((id) => this.findOrder(acc, id));
    const rem = list(form.removeOrderIds).map((id) => this.findOrder(acc, id));
    for (const o of add) {
      o.ocoBulkId = bulk;
      this.push(acc.token, 'Order', this.orderRecord(o, 'U'));
    }
    for (const o of rem) {
      if (o.ocoBulkId !== bulk) continue;
      o.ocoBulkId = 0;
      this.push(acc.token, 'Order', this.orderRecord(o, 'U'));
    }
    return null;
  }

  updateSubscriptions(token: string, form: Form): void {
    const acc = this.account(token);
    const spec = this.spec(str(form.symbol));
    if (bool(form.visible)) acc.visibleOffers.add(spec.symbol);
    else acc.visibleOffers.delete(spec.symbol);
  }

  // ---------------------------------------------------------------- price reactions

  private onPrice(symbol: string, q: Quote): void {
    const spec = this.market.spec(symbol)!;
    const move = tickMove(q.bid, q.ask);
    // entry orders
    for (const o of [...this.orders.values()]) {
      if (o.symbol !== symbol || !o.isEntry || !this.orders.has(o.orderId)) continue;
      const px = entryFill({ isBuy: o.isBuy, kind: o.type === 'SE' ? 'stop' : 'limit', rate: o.rate }, move);
      if (px === undefined) continue;
      const acc = this.accountByToken(o.accountId)!;
      // OCO: the others of the group are removed when one executes
      if (o.ocoBulkId) for (const x of [...this.orders.values()]) if (x !== o && x.ocoBulkId === o.ocoBulkId) this.cancel(acc, x);
      o.status = ORDER_STATUS.Executing;
      const rates =
        o.stopPips !== undefined || o.limitPips !== undefined ? this.stopLimitRates(spec, o.isBuy, px, o.stopPips ?? 0, o.limitPips ?? 0, true) : { stop: o.stop, limit: o.limit };
      this.fill(acc, o, px, 1, rates.stop, rates.limit, o.stopMove, false);
    }
    // trades: stop, limit, then trailing and P/L updates
    const touched = new Set<SimAccount>();
    for (const t of [...this.trades.values()]) {
      if (t.symbol !== symbol || this.closing.has(t.tradeId)) continue;
      const acc = this.accountByToken(t.accountId)!;
      const exit = exitFill({ isBuy: t.isBuy, stop: t.stop || undefined, limit: t.limit || undefined }, move);
      if (exit) {
        this.closeOrder(acc, t, t.amountK, exit.reason === 'stop' ? 'S' : 'L');
        continue;
      }
      if (t.stop && t.stopMove) t.stop = trailStop({ isBuy: t.isBuy, stop: t.stop, distance: t.trailDist, trailingStep: t.stopMove }, move, spec.pip);
      this.push(acc.token, 'OpenPosition', this.positionRecord(t, 'U'));
      touched.add(acc);
    }
    for (const acc of touched) this.push(acc.token, 'Account', this.accountRecord(acc, 'U'));
    for (const acc of this.accounts.values()) if (acc.visibleOffers.has(symbol)) this.push(acc.token, 'Offer', this.offerRecord(spec, 'U'));
  }
}
