/**
 * FxcmClient: the broker's REST calls (market data, tables, orders, OCO, candles), typed and
 * checked against the broker's rules before they are sent, on an FxcmConnection (connection.ts:
 * the stream, reconnects, live tables and prices, order → trade ids).
 */
import { mergeCandles, normalizePeriod, rowToCandle, splitCandleRange, type CandleChunk } from './candles';
import { FxcmError, FxcmRuleError } from './errors';
import { checkAccountId, checkAmount, checkOrderRules, checkTrailingStep, type OrderRuleInput } from './rules';
import type { AccountRecord, Candle, Envelope, Instrument, OfferRecord, OrderRecord, OrderResult, OrderType, Params, Period, TableRecord, TimeInForce } from './types';
import { FxcmConnection } from './connection';

export type { FxcmClientOptions, ReconnectOptions, Snapshot } from './connection';

export interface OpenTradeParams {
  symbol: string;
  isBuy: boolean;
  amount: number;
  orderType?: Extract<OrderType, 'AtMarket' | 'MarketRange'>;
  timeInForce?: TimeInForce;
  rate?: number;
  stop?: number;
  limit?: number;
  trailingStep?: number;
  isInPips?: boolean;
  atMarket?: number;
  accountId?: string;
}

export interface EntryOrderParams {
  symbol: string;
  isBuy: boolean;
  amount: number;
  rate: number;
  orderType?: Extract<OrderType, 'Entry' | 'RangeEntry'>;
  timeInForce?: TimeInForce;
  stop?: number;
  limit?: number;
  isInPips?: boolean;
  trailingStep?: number;
  trailingStopStep?: number;
  range?: number;
  expiration?: string;
  accountId?: string;
}

export interface CloseTradeParams {
  tradeId: string;
  amount: number;
  orderType?: Extract<OrderType, 'AtMarket' | 'MarketRange'>;
  timeInForce?: TimeInForce;
  rate?: number;
  atMarket?: number;
}

export interface SimpleOcoParams {
  symbol: string;
  amount: number;
  isBuy: boolean;
  rate: number;
  isBuy2: boolean;
  rate2: number;
  stop?: number;
  limit?: number;
  stop2?: number;
  limit2?: number;
  trailingStep?: number;
  trailingStep2?: number;
  trailingStopStep?: number;
  trailingStopStep2?: number;
  isInPips?: boolean;
  timeInForce?: TimeInForce;
  orderType?: Extract<OrderType, 'Entry' | 'RangeEntry'>;
  expiration?: string;
  atMarket?: number;
  accountId?: string;
}

export class FxcmClient extends FxcmConnection {
  private accountId: string | undefined = this.options.accountId;
  private offerIds = new Map<string, number>();

  // ---------------------------------------------------------------- market data

  async getInstruments(): Promise<Instrument[]> {
    const env = await this.rest.request<Envelope & { data?: { instrument?: Instrument[] } }>('GET', '/trading/get_instruments');
    return env.data?.instrument ?? [];
  }

  /** POST /trading/update_subscriptions: which symbols appear in the Offer table. */
  async updateSubscriptions(symbol: string, visible: boolean): Promise<void> {
    await this.rest.request('POST', '/trading/update_subscriptions', { symbol, visible });
  }

  // ---------------------------------------------------------------- tables

  async getAccounts(): Promise<AccountRecord[]> {
    return ((await this.getModel('Account')).Account ?? []) as AccountRecord[];
  }
  async getOffers(): Promise<OfferRecord[]> {
    return ((await this.getModel('Offer')).Offer ?? []) as OfferRecord[];
  }
  async getOpenPositions(): Promise<TableRecord[]> {
    return (await this.getModel('OpenPosition')).OpenPosition ?? [];
  }
  async getClosedPositions(): Promise<TableRecord[]> {
    return (await this.getModel('ClosedPosition')).ClosedPosition ?? [];
  }
  async getOrders(): Promise<OrderRecord[]> {
    return ((await this.getModel('Order')).Order ?? []) as OrderRecord[];
  }
  async getSummary(): Promise<TableRecord[]> {
    return (await this.getModel('Summary')).Summary ?? [];
  }
  async getLeverageProfile(): Promise<TableRecord[]> {
    return (await this.getModel('LeverageProfile')).LeverageProfile ?? [];
  }
  async getProperties(): Promise<TableRecord[]> {
    return (await this.getModel('Properties')).Properties ?? [];
  }

  /** The account id for orders: read from the Account snapshot once (never the zero-padded name). */
  async getAccountId(): Promise<string> {
    if (this.accountId) return this.accountId;
    const accounts = await this.getAccounts();
    const acc = accounts[0];
    if (!acc) throw new FxcmError('Account snapshot is empty');
    this.accountId = String(acc.accountId);
    return this.accountId;
  }

  // ---------------------------------------------------------------- orders

  private validate(endpoint: string, input: OrderRuleInput, close = false): void {
    if (this.options.validate === false) return;
    const v = checkOrderRules(input, close);
    if (v) throw new FxcmRuleError(endpoint, v.rule, v.body);
  }

  /** Subscribes the Order table once, before the first order (the only way to learn trade ids). */
  private orderResult(env: Envelope): OrderResult {
    const d = env.data as { type?: number; orderId?: number | string } | undefined;
    return { type: Number(d?.type ?? 0), orderId: String(d?.orderId ?? '') };
  }

  /** POST /trading/open_trade (market order). */
  async openTrade(p: OpenTradeParams): Promise<OrderResult> {
    const accountId = p.accountId ?? (await this.getAccountId());
    const params: Params = {
      account_id: accountId,
      symbol: p.symbol,
      is_buy: p.isBuy,
      rate: p.rate ?? 0,
      amount: p.amount,
      order_type: p.orderType ?? 'AtMarket',
      time_in_force: p.timeInForce ?? 'GTC',
      stop: p.stop,
      limit: p.limit,
      trailing_step: p.trailingStep,
      is_in_pips: p.isInPips,
      at_market: p.atMarket,
    };
    this.validate('/trading/open_trade', params);
    await this.ensureOrderSubscription();
    return this.orderResult(await this.rest.request('POST', '/trading/open_trade', params));
  }

  /** POST /trading/create_entry_order. is_buy is always sent (the broker defaults it to true). */
  async createEntryOrder(p: EntryOrderParams): Promise<OrderResult> {
    const accountId = p.accountId ?? (await this.getAccountId());
    const params: Params = {
      account_id: accountId,
      symbol: p.symbol,
      is_buy: p.isBuy,
      rate: p.rate,
      amount: p.amount,
      order_type: p.orderType ?? 'Entry',
      time_in_force: p.timeInForce ?? 'GTC',
      is_in_pips: p.isInPips ?? false,
      stop: p.stop,
      limit: p.limit ?? 0,
      trailing_step: p.trailingStep,
      trailing_stop_step: p.trailingStopStep,
      range: p.range,
      expiration: p.expiration,
    };
    this.validate('/trading/create_entry_order', params);
    await this.ensureOrderSubscription();
    return this.orderResult(await this.rest.request('POST', '/trading/create_entry_order', params));
  }

  /** POST /trading/close_trade. */
  async closeTrade(p: CloseTradeParams): Promise<OrderResult> {
    const params: Params = {
      trade_id: p.tradeId,
      amount: p.amount,
      order_type: p.orderType ?? 'AtMarket',
      time_in_force: p.timeInForce ?? 'GTC',
      rate: p.rate,
      at_market: p.atMarket,
    };
    this.validate('/trading/close_trade', params, true);
    await this.ensureOrderSubscription();
    return this.orderResult(await this.rest.request('POST', '/trading/close_trade', params));
  }

  /** POST /trading/close_all_for_symbol (forSymbol=false closes every symbol). */
  async closeAllForSymbol(p: { symbol: string; forSymbol?: boolean; orderType?: 'AtMarket' | 'MarketRange'; timeInForce?: TimeInForce; accountId?: string }): Promise<void> {
    const accountId = p.accountId ?? (await this.getAccountId());
    const params: Params = {
      account_id: accountId,
      forSymbol: p.forSymbol ?? true,
      symbol: p.symbol,
      order_type: p.orderType ?? 'AtMarket',
      time_in_force: p.timeInForce ?? 'GTC',
    };
    if (this.options.validate !== false) {
      const b = checkAccountId(accountId);
      if (b) throw new FxcmRuleError('/trading/close_all_for_symbol', 'account_id', b);
    }
    await this.ensureOrderSubscription();
    await this.rest.request('POST', '/trading/close_all_for_symbol', params);
  }

  /** POST /trading/change_order (unexecuted orders only). */
  async changeOrder(p: { orderId: string; rate: number; amount: number; range?: number; trailingStep?: number }): Promise<void> {
    if (this.options.validate !== false) {
      const b = checkAmount(p.amount) ?? checkTrailingStep(p.trailingStep);
      if (b) throw new FxcmRuleError('/trading/change_order', checkAmount(p.amount) ? 'amount' : 'trailing_step', b);
    }
    await this.rest.request('POST', '/trading/change_order', {
      order_id: p.orderId,
      rate: p.rate,
      range: p.range ?? 0,
      amount: p.amount,
      trailing_step: p.trailingStep,
    });
  }

  /** POST /trading/delete_order (an OCO member removes the whole group). */
  async deleteOrder(orderId: string): Promise<void> {
    await this.rest.request('POST', '/trading/delete_order', { order_id: orderId });
  }

  /** POST /trading/change_trade_stop_limit (rate 0 deletes the stop/limit). */
  async changeTradeStopLimit(p: { tradeId: string; isStop: boolean; rate: number; isInPips: boolean; trailingStep?: number }): Promise<void> {
    if (this.options.validate !== false) {
      const b = checkTrailingStep(p.trailingStep);
      if (b) throw new FxcmRuleError('/trading/change_trade_stop_limit', 'trailing_step', b);
    }
    await this.rest.request('POST', '/trading/change_trade_stop_limit', {
      trade_id: p.tradeId,
      is_stop: p.isStop,
      rate: p.rate,
      is_in_pips: p.isInPips,
      trailing_step: p.trailingStep ?? 0,
    });
  }

  /** POST /trading/change_order_stop_limit; returns the stop/limit order results. */
  async changeOrderStopLimit(p: {
    orderId: string;
    limit: number;
    isLimitInPips: boolean;
    stop: number;
    isStopInPips: boolean;
    trailingStep?: number;
  }): Promise<OrderResult[]> {
    if (this.options.validate !== false) {
      const b = checkTrailingStep(p.trailingStep);
      if (b) throw new FxcmRuleError('/trading/change_order_stop_limit', 'trailing_step', b);
    }
    const env = await this.rest.request('POST', '/trading/change_order_stop_limit', {
      order_id: p.orderId,
      limit: p.limit,
      is_limit_in_pips: p.isLimitInPips,
      stop: p.stop,
      is_stop_in_pips: p.isStopInPips,
      trailing_step: p.trailingStep,
    });
    const d = env.data;
    return (Array.isArray(d) ? d : []).filter(Boolean).map((x: { type?: number; orderId?: number | string }) => ({ type: Number(x.type ?? 0), orderId: String(x.orderId ?? '') }));
  }

  /** POST /trading/simple_oco: two entry orders in a new OCO group (order ids arrive as Order pushes). */
  async simpleOco(p: SimpleOcoParams): Promise<void> {
    const accountId = p.accountId ?? (await this.getAccountId());
    const params: Params = {
      account_id: accountId,
      symbol: p.symbol,
      amount: p.amount,
      is_in_pips: p.isInPips ?? false,
      time_in_force: p.timeInForce ?? 'GTC',
      expiration: p.expiration,
      is_buy: p.isBuy,
      rate: p.rate,
      stop: p.stop,
      trailing_step: p.trailingStep,
      trailing_stop_step: p.trailingStopStep,
      limit: p.limit,
      at_market: p.atMarket,
      order_type: p.orderType ?? 'Entry',
      is_buy2: p.isBuy2,
      rate2: p.rate2,
      stop2: p.stop2,
      trailing_step2: p.trailingStep2,
      trailing_stop_step2: p.trailingStopStep2,
      limit2: p.limit2,
    };
    this.validate('/trading/simple_oco', params);
    if (this.options.validate !== false) {
      const b = checkIsBuyStrict(p.isBuy2) ?? checkTrailingStep(p.trailingStopStep2) ?? checkTrailingStep(p.trailingStep2);
      if (b) throw new FxcmRuleError('/trading/simple_oco', 'second order', b);
    }
    await this.ensureOrderSubscription();
    await this.rest.request('POST', '/trading/simple_oco', params);
  }

  /** POST /trading/add_to_oco (ocoBulkId 0 creates a new group). */
  async addToOco(orderIds: string[], ocoBulkId: number | string): Promise<void> {
    await this.rest.request('POST', '/trading/add_to_oco', { orderIds, ocoBulkId });
  }

  async removeFromOco(orderIds: string[]): Promise<void> {
    await this.rest.request('POST', '/trading/remove_from_oco', { orderIds });
  }

  async editOco(p: { ocoBulkId: number | string; addOrderIds: string[]; removeOrderIds: string[] }): Promise<void> {
    await this.rest.request('POST', '/trading/edit_oco', { ocoBulkId: p.ocoBulkId, addOrderIds: p.addOrderIds, removeOrderIds: p.removeOrderIds });
  }

  // ---------------------------------------------------------------- candles

  /** Offer id of a symbol (from the Offer snapshot, cached). */
  async offerId(symbolOrId: string | number): Promise<number> {
    if (typeof symbolOrId === 'number') return symbolOrId;
    if (/^\d+$/.test(symbolOrId)) return Number(symbolOrId);
    if (!this.offerIds.has(symbolOrId)) {
      for (const o of await this.getOffers()) this.offerIds.set(String(o.currency), Number(o.offerId));
    }
    const id = this.offerIds.get(symbolOrId);
    if (id === undefined) throw new FxcmError(`unknown symbol ${symbolOrId}`);
    return id;
  }

  /** One GET /candles/{offer_id}/{period_id} request (num required, from/to in epoch seconds). */
  async getCandles(instrument: string | number, period: Period | string, q: { num: number; from?: number; to?: number }): Promise<Candle[]> {
    const p = normalizePeriod(period);
    if (!p) throw new FxcmError(`unknown period ${period}`);
    const id = await this.offerId(instrument);
    const env = await this.rest.request('GET', `/candles/${id}/${p}`, { num: q.num, from: q.from, to: q.to });
    const rows = Array.isArray(env.candles) ? (env.candles as number[][]) : [];
    return rows.map(rowToCandle);
  }

  /**
   * Downloads [fromSec, toSec] in as many requests as the per-period limits need (days back,
   * 10000 candles), merged and deduplicated by timestamp (later row wins). `onChunk` sees each
   * request's candles (within its window) as it is answered, e.g. to show progress or save them
   * before the next request; `newestFirst` asks for the newest window first, so what is done
   * always joins what lies after the range; an aborted `signal` stops before the next request.
   */
  async downloadCandles(
    instrument: string | number,
    period: Period | string,
    fromSec: number,
    toSec: number,
    opts: { newestFirst?: boolean; onChunk?: (candles: Candle[], chunk: CandleChunk) => void; signal?: AbortSignal } = {},
  ): Promise<Candle[]> {
    const p = normalizePeriod(period);
    if (!p) throw new FxcmError(`unknown period ${period}`);
    const id = await this.offerId(instrument);
    const chunks = splitCandleRange(p, fromSec, toSec);
    if (opts.newestFirst) chunks.reverse();
    const parts: Candle[][] = [];
    for (const chunk of chunks) {
      opts.signal?.throwIfAborted();
      const got = (await this.getCandles(id, p, chunk)).filter((c) => c.ts >= chunk.from && c.ts <= chunk.to);
      opts.onChunk?.(got, chunk);
      parts.push(got);
    }
    return mergeCandles(...parts);
  }
}

function checkIsBuyStrict(v: unknown) {
  return v === true || v === false ? undefined : { code: 3, message: 'is_buy is required', parameters: ['is_buy2'] as (string | number)[] };
}
