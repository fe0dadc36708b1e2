/**
 * The simulated trading engine: requests on accounts, orders and trades, what prices do to them,
 * and the pushes that follow (the records themselves are records.ts; form fields, form.ts).
 *
 * Market orders fill at ask (buy) / bid (sell) and push Order I (→ U per extra partial fill) → D
 * with the order and trade ids, OpenPosition I, Account and Summary U. Entry orders rest (Order
 * I, status Waiting) until the price crosses, then fill the same way. Stops, limits and trailing
 * stops trigger on the closing side (bid for a buy trade, ask for a sell trade) and push
 * OpenPosition D, ClosedPosition I. When orders fill and stops move is the backtest's model
 * (`execution/fills.ts`), applied to each tick, with its slippage. Open trades accrue the daily
 * rollover at 17:00 New York (Wednesday three days) at the symbol's rollB/rollS, booked when the
 * first price or request after it arrives (on a Friday, at the weekend's close, that is Sunday's
 * open) and paid into the balance when the trade closes. Rules use the shared `fxcm/rules` module, so the
 * error bodies are the broker's (code 3 for amounts and zero-padded account ids, …), and the
 * simulator's own for what the broker's documents leave out: an amount above the offers'
 * maxQuantity, a close of more than the trade holds, a market order without the usable margin
 * for it (its margin at its fill price, `execution/instruments.ts` marginOf at the offers' mmr,
 * the backtest's formula). Entry orders are not checked for margin, when placed or when filled.
 */
import { checkAccountId, checkAmount, checkCloseWithinTrade, checkIsBuy, checkMargin, checkStopInPips, checkTimeInForce, checkTrailingStep, CLOSE_TIF_BY_ORDER_TYPE } from '../fxcm/rules';
import type { BrokerErrorBody } from '../fxcm/errors';
import { ORDER_STATUS, TABLE_ID, type ModelName, type TableRecord } from '../fxcm/types';
import { entryFill, entryKind, exitFill, levelFromPips, marketFill, tickMove, trailStop, type Slippage } from '../execution/fills';
import { rolloverOf } from '../execution/financing';
import { rolloversBetween } from '../fxcm/market-hours';
import type { AccountSpec, PushFn, SimAccount, SimOrder, SimTrade } from './book';
import type { Faults } from './faults';
import { SimRequestError, UNAUTHORIZED, flagOf, listOf, numberOf, textOf, type Form } from './form';
import type { Market, MarketQuote, SymbolSpec } from './market';
import { BrokerRecords } from './records';

/** The broker's order types of a resting entry: stop entry (SE) or limit entry (LE). */
const STOP_ENTRY = 'SE';
const entryType = (isBuy: boolean, rate: number, q: MarketQuote): string => (entryKind(isBuy, rate, q.bid, q.ask) === 'stop' ? STOP_ENTRY : 'LE');

export interface EngineOptions {
  /** Adverse slippage of market orders, stops and stop entries (default none). */
  slippage?: Slippage;
  /** Book the daily rollover (default true). */
  rollover?: boolean;
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

  private readonly records: BrokerRecords;
  /** Rollovers up to this instant are booked. */
  private rolledTo: number;

  constructor(
    private readonly market: Market,
    private readonly faults: Faults,
    private readonly push: PushFn,
    private readonly options: EngineOptions = {},
  ) {
    this.records = new BrokerRecords(market, (id) => this.accountById(id));
    this.rolledTo = market.nowMs();
    market.on('price', (symbol: string, q: MarketQuote) => this.onPrice(symbol, q));
  }

  /** Accrues the rollovers since the last booking on the trades open before each. */
  settleRollovers(): void {
    const now = this.market.nowMs();
    if (this.options.rollover === false || now <= this.rolledTo) return;
    for (const r of rolloversBetween(this.rolledTo, now)) {
      for (const t of this.trades.values()) {
        const rates = this.market.spec(t.symbol)?.rollover;
        if (rates && t.openMs < r.ms) t.roll += rolloverOf(rates, t.isBuy, t.amountK, r.days);
      }
    }
    this.rolledTo = now;
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
    if (!a) throw new SimRequestError(UNAUTHORIZED.unknownToken);
    return a;
  }

  private tradesOf(acc: SimAccount): SimTrade[] {
    return [...this.trades.values()].filter((t) => t.accountId === acc.accountId);
  }

  private accountById(accountId: string): SimAccount | undefined {
    return [...this.accounts.values()].find((a) => a.accountId === accountId);
  }

  /** account_id must be the account's id: zero-padded names fail with the code 3 body. */
  private checkAccount(acc: SimAccount, form: Form): void {
    const id = textOf(form.account_id);
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

  snapshot(token: string, model: ModelName): TableRecord[] {
    const acc = this.account(token);
    this.settleRollovers();
    switch (model) {
      case 'Offer':
        return this.market
          .symbols()
          .filter((s) => acc.visibleOffers.has(s))
          .map((s) => this.records.offer(this.market.spec(s)!));
      case 'OpenPosition':
        return this.tradesOf(acc).map((t) => this.records.position(t));
      case 'ClosedPosition':
        return this.closed.filter((c) => c.accountName === acc.accountName).map((c) => ({ ...c }));
      case 'Order':
        // a snapshot never links an executed market order to its trade (identifier rule 4)
        return [...this.orders.values()].filter((o) => o.accountId === acc.accountId).map((o) => ({ ...this.records.order(o), tradeId: '' }));
      case 'Summary':
        return this.records.summaries(this.tradesOf(acc));
      case 'Account':
        return [this.records.account(acc, this.tradesOf(acc))];
      case 'LeverageProfile':
      case 'Properties':
        return [];
    }
  }

  private pushAccount(acc: SimAccount, symbol?: string): void {
    this.push(acc.token, 'Account', this.records.account(acc, this.tradesOf(acc), 'U'));
    if (symbol) {
      const ts = this.tradesOf(acc).filter((t) => t.symbol === symbol);
      const spec = this.market.spec(symbol)!;
      if (ts.length) this.push(acc.token, 'Summary', { ...this.records.summary(symbol, ts), action: 'U' });
      else this.push(acc.token, 'Summary', { t: TABLE_ID.Summary, offerId: spec.offerId, currency: symbol, action: 'D' });
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
    const orderType = textOf(form.order_type);
    const tif = textOf(form.time_in_force);
    this.must(checkTimeInForce(orderType, tif));
    this.must(checkTrailingStep(form.trailing_step));
    this.must(checkStopInPips(form.stop, form.is_in_pips));
    if (orderType !== 'AtMarket' && orderType !== 'MarketRange') throw SimRequestError.body({ code: 3, message: 'Invalid order type', parameters: [orderType] });
    const spec = this.spec(textOf(form.symbol));
    this.requireOpen();
    const isBuy = flagOf(form.is_buy);
    // the margin the order needs at the price it fills at now, against the account's usable margin
    const q = this.market.quote(spec.symbol)!;
    const { equity, used } = this.records.margin(acc, this.tradesOf(acc));
    this.must(checkMargin(this.records.orderMargin(spec.symbol, numberOf(form.amount), marketFill(isBuy, q.bid, q.ask, spec.pip, this.options.slippage)), equity - used));
    const o: SimOrder = {
      orderId: String(this.nextOrderId++),
      accountId: acc.accountId,
      symbol: spec.symbol,
      isBuy,
      amountK: numberOf(form.amount),
      rate: 0,
      type: 'OM',
      timeInForce: tif,
      status: ORDER_STATUS.InProcess,
      isEntry: false,
      stop: 0,
      limit: 0,
      stopMove: numberOf(form.trailing_step),
      ocoBulkId: 0,
      range: numberOf(form.at_market),
      expireDate: '',
      timeMs: this.market.nowMs(),
      tradeId: '',
    };
    const inPips = flagOf(form.is_in_pips);
    const stop = numberOf(form.stop);
    const limit = numberOf(form.limit);
    // deferred so the HTTP response (with the order id) is written before the pushes
    setImmediate(() => this.executeMarket(acc, o, { stop, limit, inPips }));
    return { type: 0, orderId: Number(o.orderId) };
  }

  private executeMarket(acc: SimAccount, o: SimOrder, sl: { stop: number; limit: number; inPips: boolean }): void {
    const spec = this.market.spec(o.symbol)!;
    if (this.faults.takeRequote()) {
      o.status = ORDER_STATUS.Requoted;
      this.push(acc.token, 'Order', this.records.order(o, 'I'));
      this.push(acc.token, 'Order', this.records.order(o, 'D'));
      return;
    }
    const q = this.market.quote(o.symbol)!;
    const price = marketFill(o.isBuy, q.bid, q.ask, spec.pip, this.options.slippage);
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
        roll: 0,
      };
      this.trades.set(t.tradeId, t);
      trades.push(t);
      o.tradeId = t.tradeId;
      o.status = i === sizes.length - 1 ? ORDER_STATUS.Executed : ORDER_STATUS.InProcess;
      this.push(acc.token, 'Order', this.records.order(o, i === 0 && insertFirst ? 'I' : 'U'));
      this.push(acc.token, 'OpenPosition', this.records.position(t, 'I'));
    });
    this.orders.delete(o.orderId);
    this.push(acc.token, 'Order', this.records.order(o, 'D'));
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
    const orderType = textOf(form.order_type) || 'Entry';
    const tif = textOf(form.time_in_force);
    this.must(checkTimeInForce(orderType, tif));
    this.must(checkTrailingStep(k('trailing_stop_step')));
    this.must(checkTrailingStep(k('trailing_step')));
    this.must(checkStopInPips(k('stop'), form.is_in_pips));
    if (orderType !== 'Entry' && orderType !== 'RangeEntry') throw SimRequestError.body({ code: 3, message: 'Invalid order type', parameters: [orderType] });
    const spec = this.spec(textOf(form.symbol));
    // is_buy defaults to true when omitted (documented broker behaviour; the client always sends it)
    const isBuy = k('is_buy') === undefined ? true : flagOf(k('is_buy'));
    const rate = numberOf(k('rate'));
    if (!(rate > 0)) throw SimRequestError.body({ code: 3, message: 'Invalid rate', parameters: [textOf(k('rate'))] });
    const q = this.market.quote(spec.symbol)!;
    const inPips = flagOf(form.is_in_pips);
    const rates = this.stopLimitRates(spec, isBuy, rate, numberOf(k('stop')), numberOf(k('limit')), inPips);
    const o: SimOrder = {
      orderId: String(this.nextOrderId++),
      accountId: acc.accountId,
      symbol: spec.symbol,
      isBuy,
      amountK: numberOf(form.amount),
      rate,
      type: entryType(isBuy, rate, q),
      timeInForce: tif,
      status: ORDER_STATUS.Waiting,
      isEntry: true,
      stop: rates.stop,
      limit: rates.limit,
      stopPips: rates.stopPips,
      limitPips: rates.limitPips,
      stopMove: numberOf(k('trailing_stop_step')) || numberOf(k('trailing_step')),
      ocoBulkId,
      range: numberOf(form.range),
      expireDate: textOf(form.expiration),
      timeMs: this.market.nowMs(),
      tradeId: '',
    };
    this.orders.set(o.orderId, o);
    if (pushNow) this.push(acc.token, 'Order', this.records.order(o, 'I'));
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
    const o = this.findOrder(acc, textOf(form.order_id));
    this.must(checkAmount(form.amount));
    this.must(checkTrailingStep(form.trailing_step));
    const spec = this.spec(o.symbol);
    o.rate = numberOf(form.rate, o.rate);
    o.amountK = numberOf(form.amount, o.amountK);
    o.range = numberOf(form.range, o.range);
    if (form.trailing_step !== undefined) o.stopMove = numberOf(form.trailing_step);
    const q = this.market.quote(o.symbol)!;
    o.type = entryType(o.isBuy, o.rate, q);
    if (o.stopPips !== undefined || o.limitPips !== undefined) {
      const r = this.stopLimitRates(spec, o.isBuy, o.rate, o.stopPips ?? 0, o.limitPips ?? 0, true);
      o.stop = r.stop;
      o.limit = r.limit;
    }
    this.push(acc.token, 'Order', this.records.order(o, 'U'));
    return null;
  }

  deleteOrder(token: string, form: Form): null {
    const acc = this.account(token);
    const o = this.findOrder(acc, textOf(form.order_id));
    const group = o.ocoBulkId ? [...this.orders.values()].filter((x) => x.ocoBulkId === o.ocoBulkId) : [o];
    for (const x of group) this.cancel(acc, x);
    return null;
  }

  private cancel(acc: SimAccount, o: SimOrder): void {
    this.orders.delete(o.orderId);
    o.status = ORDER_STATUS.Canceled;
    this.push(acc.token, 'Order', this.records.order(o, 'D'));
  }

  closeTrade(token: string, form: Form): { type: number; orderId: number } {
    const acc = this.account(token);
    const t = this.findTrade(acc, textOf(form.trade_id));
    this.must(checkAmount(form.amount));
    this.must(checkCloseWithinTrade(form.amount, t.amountK));
    this.must(checkTimeInForce(textOf(form.order_type), textOf(form.time_in_force), CLOSE_TIF_BY_ORDER_TYPE));
    this.requireOpen();
    const amount = numberOf(form.amount);
    const o = this.closeOrder(acc, t, amount);
    return { type: 0, orderId: Number(o.orderId) };
  }

  /**
   * A close order for (part of) a trade. One the account asked for runs after the HTTP response
   * (its pushes follow the order id); a stop or limit the price hit (`type` S or L) runs at once,
   * at that price, before the price itself is pushed, as a backtest closes it within the candle.
   */
  private closeOrder(acc: SimAccount, t: SimTrade, amount: number, type: 'CM' | 'S' | 'L' = 'CM', triggeredAt?: number): SimOrder {
    const spec = this.market.spec(t.symbol)!;
    const marketRate = () => {
      const q = this.market.quote(t.symbol)!;
      return marketFill(!t.isBuy, q.bid, q.ask, spec.pip, this.options.slippage);
    };
    const o: SimOrder = {
      orderId: String(this.nextOrderId++),
      accountId: acc.accountId,
      symbol: t.symbol,
      isBuy: !t.isBuy,
      amountK: amount,
      rate: triggeredAt ?? marketRate(),
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
      this.push(acc.token, 'Order', this.records.order(o, 'I'));
      this.closeTradeNow(acc, t, amount, o.rate);
      this.push(acc.token, 'Order', this.records.order(o, 'D'));
    };
    if (type !== 'CM') {
      execute();
      return o;
    }
    if (amount >= t.amountK) this.closing.add(t.tradeId);
    setImmediate(() => {
      this.closing.delete(t.tradeId);
      o.rate = marketRate();
      if (this.trades.has(t.tradeId)) execute();
    });
    return o;
  }

  /** Closes (part of) a trade at `rate`; its P/L and its share of the rollover go into the balance. */
  private closeTradeNow(acc: SimAccount, t: SimTrade, amount: number, rate: number): void {
    this.settleRollovers();
    const full = amount >= t.amountK;
    const closedId = full ? t.tradeId : String(this.nextTradeId++);
    const rec = this.records.closedPosition(t, amount, rate, closedId, this.market.nowMs());
    const booked = (rec.grossPL as number) + (rec.roll as number);
    this.closed.push(rec);
    acc.balance += booked;
    acc.dayPL += booked;
    if (full) {
      this.trades.delete(t.tradeId);
      this.push(acc.token, 'OpenPosition', this.records.position(t, 'D'));
    } else {
      t.roll -= rec.roll as number;
      t.amountK -= amount;
      this.push(acc.token, 'OpenPosition', this.records.position(t, 'U'));
    }
    this.push(acc.token, 'ClosedPosition', { ...rec, action: 'I' });
    this.pushAccount(acc, t.symbol);
  }

  closeAllForSymbol(token: string, form: Form): null {
    const acc = this.account(token);
    this.checkAccount(acc, form);
    this.must(checkTimeInForce(textOf(form.order_type), textOf(form.time_in_force), CLOSE_TIF_BY_ORDER_TYPE));
    this.requireOpen();
    const forSymbol = form.forSymbol === undefined ? true : flagOf(form.forSymbol);
    const symbol = textOf(form.symbol);
    if (forSymbol) this.spec(symbol);
    for (const t of [...this.trades.values()]) {
      if (t.accountId !== acc.accountId || (forSymbol && t.symbol !== symbol)) continue;
      this.closeOrder(acc, t, t.amountK);
    }
    return null;
  }

  changeTradeStopLimit(token: string, form: Form): null {
    const acc = this.account(token);
    const t = this.findTrade(acc, textOf(form.trade_id));
    const isStop = flagOf(form.is_stop);
    const inPips = flagOf(form.is_in_pips);
    const rate = numberOf(form.rate);
    this.must(checkTrailingStep(form.trailing_step));
    if (isStop) this.must(checkStopInPips(rate, inPips));
    const spec = this.spec(t.symbol);
    const ref = this.records.closePrice(t);
    const r = this.stopLimitRates(spec, t.isBuy, ref, isStop ? rate : 0, isStop ? 0 : rate, inPips);
    if (isStop) {
      t.stop = rate === 0 ? 0 : r.stop;
      t.stopMove = t.stop ? numberOf(form.trailing_step) : 0;
      t.trailDist = t.stop ? Math.abs(ref - t.stop) : 0;
    } else {
      t.limit = rate === 0 ? 0 : r.limit;
    }
    this.push(acc.token, 'OpenPosition', this.records.position(t, 'U'));
    return null;
  }

  changeOrderStopLimit(token: string, form: Form): { type: number; orderId: number }[] {
    const acc = this.account(token);
    const o = this.findOrder(acc, textOf(form.order_id));
    this.must(checkTrailingStep(form.trailing_step));
    this.must(checkStopInPips(form.stop, form.is_stop_in_pips));
    const spec = this.spec(o.symbol);
    const s = this.stopLimitRates(spec, o.isBuy, o.rate, numberOf(form.stop), 0, flagOf(form.is_stop_in_pips));
    const l = this.stopLimitRates(spec, o.isBuy, o.rate, 0, numberOf(form.limit), flagOf(form.is_limit_in_pips));
    o.stop = s.stop;
    o.stopPips = s.stopPips;
    o.limit = l.limit;
    o.limitPips = l.limitPips;
    if (form.trailing_step !== undefined) o.stopMove = numberOf(form.trailing_step);
    this.push(acc.token, 'Order', this.records.order(o, 'U'));
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
    this.push(acc.token, 'Order', this.records.order(a, 'I'));
    this.push(acc.token, 'Order', this.records.order(b, 'I'));
    return [null, null];
  }

  addToOco(token: string, form: Form): [null, null] {
    const acc = this.account(token);
    const ids = listOf(form.orderIds);
    const orders = ids.map((id) => this.findOrder(acc, id));
    let bulk = numberOf(form.ocoBulkId);
    if (!bulk) bulk = this.nextOcoId++;
    for (const o of orders) {
      o.ocoBulkId = bulk;
      this.push(acc.token, 'Order', this.records.order(o, 'U'));
    }
    return [null, null];
  }

  removeFromOco(token: string, form: Form): [null, null] {
    const acc = this.account(token);
    for (const o of listOf(form.orderIds).map((id) => this.findOrder(acc, id))) {
      o.ocoBulkId = 0;
      this.push(acc.token, 'Order', this.records.order(o, 'U'));
    }
    return [null, null];
  }

  editOco(token: string, form: Form): null {
    const acc = this.account(token);
    const bulk = numberOf(form.ocoBulkId);
    if (!bulk) throw SimRequestError.body({ code: 3, message: 'Invalid ocoBulkId', parameters: [textOf(form.ocoBulkId)] });
    const add = listOf(form.addOrderIds).map((id) => this.findOrder(acc, id));
    const rem = listOf(form.removeOrderIds).map((id) => this.findOrder(acc, id));
    for (const o of add) {
      o.ocoBulkId = bulk;
      this.push(acc.token, 'Order', this.records.order(o, 'U'));
    }
    for (const o of rem) {
      if (o.ocoBulkId !== bulk) continue;
      o.ocoBulkId = 0;
      this.push(acc.token, 'Order', this.records.order(o, 'U'));
    }
    return null;
  }

  updateSubscriptions(token: string, form: Form): void {
    const acc = this.account(token);
    const spec = this.spec(textOf(form.symbol));
    if (flagOf(form.visible)) acc.visibleOffers.add(spec.symbol);
    else acc.visibleOffers.delete(spec.symbol);
  }

  // ---------------------------------------------------------------- price reactions

  private onPrice(symbol: string, q: MarketQuote): void {
    this.settleRollovers();
    const spec = this.market.spec(symbol)!;
    const move = tickMove(q.bid, q.ask);
    // entry orders
    for (const o of [...this.orders.values()]) {
      if (o.symbol !== symbol || !o.isEntry || !this.orders.has(o.orderId)) continue;
      const px = entryFill({ isBuy: o.isBuy, kind: o.type === STOP_ENTRY ? 'stop' : 'limit', rate: o.rate }, move, spec.pip, this.options.slippage);
      if (px === undefined) continue;
      const acc = this.accountById(o.accountId)!;
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
      const acc = this.accountById(t.accountId)!;
      const exit = exitFill({ isBuy: t.isBuy, stop: t.stop || undefined, limit: t.limit || undefined }, move, spec.pip, this.options.slippage);
      if (exit) {
        this.closeOrder(acc, t, t.amountK, exit.reason === 'stop' ? 'S' : 'L', exit.rate);
        continue;
      }
      if (t.stop && t.stopMove) t.stop = trailStop({ isBuy: t.isBuy, stop: t.stop, distance: t.trailDist, trailingStep: t.stopMove }, move, spec.pip);
      this.push(acc.token, 'OpenPosition', this.records.position(t, 'U'));
      touched.add(acc);
    }
    for (const acc of touched) this.push(acc.token, 'Account', this.records.account(acc, this.tradesOf(acc), 'U'));
    for (const acc of this.accounts.values()) if (acc.visibleOffers.has(symbol)) this.push(acc.token, 'Offer', this.records.offer(spec, 'U'));
  }
}
