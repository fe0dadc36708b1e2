/**
 * FxcmClient: one streaming connection + typed REST calls + live table/price state.
 *
 * - The bearer is rebuilt before every request from the current Engine.IO sid.
 * - On an unexpected stream close it reconnects with exponential backoff: new handshake (new
 *   sid, new bearer), re-subscribes prices and tables, then reconciles the tables with one
 *   get_model snapshot.
 * - Order → trade ids: the Order table is subscribed before the first order; every pushed Order
 *   record adds its tradeId to the order's set (partial fills give several); the Order `D` push
 *   completes the set (`awaitTradeIds`).
 */
import { EventEmitter } from 'node:events';
import { Backoff } from '../../core/backoff';
import { type LogWriter, silentLogger } from '../../telemetry/logger';
import { mergeCandles, normalizePeriod, rowToCandle, splitCandleRange } from './candles';
import { FxcmError, FxcmOrderRejectedError, FxcmRuleError, FxcmTimeoutError, FxcmNotConnectedError } from './errors';
import { RestTransport, type BeforeRequestHook } from './rest';
import { checkAccountId, checkAmount, checkOrderRules, checkTrailingStep, type OrderRuleInput } from './rules';
import { FxcmStream, type EngineIOVersion } from './stream';
import {
  MODEL_KEY,
  MODEL_SNAPSHOT_KEY,
  isModelName,
  type AccountRecord,
  type Candle,
  type Envelope,
  type Instrument,
  type ModelName,
  type OfferRecord,
  type OrderRecord,
  type OrderResult,
  type OrderType,
  type Params,
  type Period,
  type PriceUpdate,
  type TableAction,
  type TableRecord,
  type TimeInForce,
} from './types';

/** Stream reconnect delays (src/core/backoff.ts: doubling from initialMs, capped at maxMs). */
export interface ReconnectOptions {
  initialMs: number;
  maxMs: number;
  /** 0..1: each delay is base × (1 ± jitter·random). */
  jitter: number;
  /** Give up after this many failed attempts (default: never). */
  maxAttempts?: number;
}

export interface FxcmClientOptions {
  /** e.g. https://api-demo.fxcm.com or the simulator's url. */
  baseUrl: string;
  /** The persistent API token. */
  token: string;
  /** Engine.IO protocol of the streaming connection (default 3, the broker's documented one). */
  engineIO?: EngineIOVersion;
  socketPath?: string;
  timeouts?: { connectMs?: number; requestMs?: number; tradeIdsMs?: number };
  backoff?: Partial<ReconnectOptions>;
  /** Reconnect automatically on an unexpected close (default true). */
  reconnect?: boolean;
  beforeRequest?: BeforeRequestHook;
  logger?: LogWriter;
  userAgent?: string;
  /** Check the broker's rules before sending (default true). */
  validate?: boolean;
  /** Account id to trade on; default: the first account of the Account snapshot. */
  accountId?: string;
}

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

export type Snapshot = Partial<Record<ModelName, TableRecord[]>>;

interface OrderTrades {
  tradeIds: string[];
  done: boolean;
  status: number;
}

interface Waiter {
  resolve: (ids: string[]) => void;
  reject: (e: Error) => void;
  timer: NodeJS.Timeout;
}

const DEFAULT_RECONNECT: ReconnectOptions = { initialMs: 500, maxMs: 30000, jitter: 0.2 };

/**
 * Events: `connected` (sid), `disconnected` (reason), `reconnected` (sid), `reconnectFailed` (err),
 * `reconciled` (snapshot), `price` (PriceUpdate), `table` (model, action, mergedRecord, pushed),
 * `streamError` (err).
 */
export class FxcmClient extends EventEmitter {
  private stream: FxcmStream | undefined;
  private readonly rest: RestTransport;
  private readonly log: LogWriter;
  private readonly backoff: ReconnectOptions;
  private closing = false;
  private reconnecting = false;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private wakeReconnect: (() => void) | undefined;
  private accountId: string | undefined;
  private offerIds = new Map<string, number>();
  private readonly priceSubs = new Set<string>();
  private readonly tableSubs = new Set<ModelName>();
  private readonly tables = new Map<ModelName, Map<string, TableRecord>>();
  private readonly prices = new Map<string, PriceUpdate>();
  private readonly orderTrades = new Map<string, OrderTrades>();
  private readonly waiters = new Map<string, Waiter[]>();
  private orderSubscription: Promise<void> | undefined;

  constructor(readonly options: FxcmClientOptions) {
    super();
    this.log = options.logger ?? silentLogger;
    this.backoff = { ...DEFAULT_RECONNECT, ...options.backoff };
    this.accountId = options.accountId;
    this.rest = new RestTransport({
      baseUrl: options.baseUrl,
      token: options.token,
      socketId: () => (this.stream?.connected ? this.stream.sid : undefined),
      requestTimeoutMs: options.timeouts?.requestMs,
      userAgent: options.userAgent,
      beforeRequest: options.beforeRequest,
      logger: this.log,
    });
  }

  /** The Engine.IO session id used in the bearer (undefined while disconnected). */
  get socketId(): string | undefined {
    return this.stream?.connected ? this.stream.sid : undefined;
  }

  get connected(): boolean {
    return this.stream?.connected ?? false;
  }

  async connect(): Promise<string> {
    this.closing = false;
    return this.openStream();
  }

  private async openStream(): Promise<string> {
    const stream = new FxcmStream({
      baseUrl: this.options.baseUrl,
      token: this.options.token,
      engineIO: this.options.engineIO ?? 3,
      path: this.options.socketPath,
      connectTimeoutMs: this.options.timeouts?.connectMs,
      logger: this.log,
    });
    stream.on('event', (name: string, args: unknown[]) => this.onEvent(name, args));
    stream.on('error', (e: Error) => this.emit('streamError', e));
    const sid = await stream.open();
    if (this.closing) {
      stream.close();
      throw new FxcmNotConnectedError('client closed during connect');
    }
    this.stream = stream;
    stream.on('close', (reason: string) => this.onStreamClose(stream, reason));
    this.emit('connected', sid);
    return sid;
  }

  private onStreamClose(stream: FxcmStream, reason: string): void {
    if (stream !== this.stream) return;
    this.emit('disconnected', reason);
    if (this.closing || this.options.reconnect === false || this.reconnecting) return;
    void this.reconnectLoop();
  }

  private async reconnectLoop(): Promise<void> {
    this.reconnecting = true;
    const b = this.backoff;
    const delays = new Backoff({ initialMs: b.initialMs, maxMs: b.maxMs, jitter: { spread: b.jitter } });
    let attempt = 0;
    try {
      while (!this.closing) {
        const delay = delays.delay(attempt);
        await new Promise<void>((resolve) => {
          this.wakeReconnect = resolve;
          this.reconnectTimer = setTimeout(resolve, delay);
        });
        this.wakeReconnect = undefined;
        if (this.closing) return;
        attempt++;
        try {
          const sid = await this.openStream();
          await this.resubscribe();
          this.log.info('fxcm reconnected', { sid, attempt });
          this.emit('reconnected', sid);
          return;
        } catch (e) {
          this.log.warn('fxcm reconnect attempt failed', { attempt, error: (e as Error).message });
          this.stream?.close();
          if (this.backoff.maxAttempts !== undefined && attempt >= this.backoff.maxAttempts) {
            this.emit('reconnectFailed', e);
            return;
          }
        }
      }
    } finally {
      this.reconnecting = false;
    }
  }

  /** Re-subscribes prices and tables on the new connection and reconciles tables with one snapshot. */
  private async resubscribe(): Promise<void> {
    if (this.priceSubs.size) await this.rest.request('POST', '/subscribe', { pairs: [...this.priceSubs] });
    const models = [...this.tableSubs];
    if (!models.length) return;
    await this.rest.request('POST', '/trading/subscribe', { models });
    const snap = await this.getModel(models);
    for (const m of models) this.replaceTable(m, snap[m] ?? []);
    this.emit('reconciled', snap);
  }

  /** Closes the stream and stops reconnecting; pending trade-id waiters are rejected. */
  async close(): Promise<void> {
    this.closing = true;
    clearTimeout(this.reconnectTimer);
    this.wakeReconnect?.();
    this.stream?.close();
    for (const [id, ws] of this.waiters) {
      for (const w of ws) {
        clearTimeout(w.timer);
        w.reject(new FxcmNotConnectedError(`client closed while waiting for trades of order ${id}`));
      }
    }
    this.waiters.clear();
  }

  // ---------------------------------------------------------------- pushes

  private onEvent(name: string, args: unknown[]): void {
    const raw = args[0];
    let payload: unknown;
    try {
      payload = typeof raw === 'string' ? JSON.parse(raw) : raw;
    } catch {
      this.log.warn('fxcm push with a non-JSON payload', { event: name });
      return;
    }
    if (!payload || typeof payload !== 'object') return;
    if (isModelName(name)) return this.onTablePush(name, payload as TableRecord);
    const p = payload as Partial<PriceUpdate>;
    if (Array.isArray(p.Rates)) {
      const upd: PriceUpdate = { Updated: Number(p.Updated), Rates: p.Rates.map(Number), Symbol: String(p.Symbol ?? name) };
      this.prices.set(upd.Symbol, upd);
      this.emit('price', upd);
    }
    // unknown events are ignored
  }

  private table(model: ModelName): Map<string, TableRecord> {
    let t = this.tables.get(model);
    if (!t) this.tables.set(model, (t = new Map()));
    return t;
  }

  private keyOf(model: ModelName, rec: TableRecord): string | undefined {
    const k = MODEL_KEY[model];
    const v = k ? rec[k] : undefined;
    return v === undefined || v === null ? undefined : String(v);
  }

  private onTablePush(model: ModelName, rec: TableRecord): void {
    const action: TableAction = rec.action === 'I' || rec.action === 'D' ? rec.action : 'U';
    const key = this.keyOf(model, rec);
    const t = this.table(model);
    let merged: TableRecord = rec;
    if (key !== undefined) {
      if (action === 'D') {
        merged = { ...(t.get(key) ?? {}), ...rec };
        t.delete(key);
      } else if (action === 'I') {
        t.set(key, { ...rec });
      } else {
        merged = { ...(t.get(key) ?? {}), ...rec };
        t.set(key, merged);
      }
    }
    if (model === 'Order') this.onOrderPush(merged, action);
    this.emit('table', model, action, merged, rec);
  }

  private onOrderPush(rec: TableRecord, action: TableAction): void {
    const orderId = rec.orderId === undefined ? undefined : String(rec.orderId);
    if (!orderId) return;
    let ot = this.orderTrades.get(orderId);
    if (!ot) this.orderTrades.set(orderId, (ot = { tradeIds: [], done: false, status: 0 }));
    const tradeId = rec.tradeId === undefined || rec.tradeId === null ? '' : String(rec.tradeId);
    if (tradeId && !ot.tradeIds.includes(tradeId)) ot.tradeIds.push(tradeId);
    if (typeof rec.status === 'number') ot.status = rec.status;
    if (action === 'D') {
      ot.done = true;
      this.settleWaiters(orderId, ot);
    }
  }

  private settleWaiters(orderId: string, ot: OrderTrades): void {
    const ws = this.waiters.get(orderId);
    if (!ws) return;
    this.waiters.delete(orderId);
    for (const w of ws) {
      clearTimeout(w.timer);
      if (ot.tradeIds.length) w.resolve([...ot.tradeIds]);
      else w.reject(new FxcmOrderRejectedError(orderId, ot.status));
    }
  }

  private replaceTable(model: ModelName, records: TableRecord[]): void {
    const t = this.table(model);
    t.clear();
    for (const r of records) {
      if (r.isTotal === true) continue;
      const k = this.keyOf(model, r);
      if (k !== undefined) t.set(k, { ...r });
    }
  }

  // ---------------------------------------------------------------- state accessors

  /** Current records of a subscribed (or snapshotted) table. */
  records<T extends TableRecord = TableRecord>(model: ModelName): T[] {
    return [...(this.tables.get(model)?.values() ?? [])] as T[];
  }

  lastPrice(symbol: string): PriceUpdate | undefined {
    return this.prices.get(symbol);
  }

  /** Trade ids seen so far for an order (possibly incomplete until the order's D push). */
  tradeIdsOf(orderId: string): string[] {
    return [...(this.orderTrades.get(String(orderId))?.tradeIds ?? [])];
  }

  /**
   * Resolves with all trade ids of an order once its Order `D` push arrives (several for partial
   * fills); rejects with FxcmOrderRejectedError if it ended without a trade, FxcmTimeoutError on timeout.
   */
  awaitTradeIds(orderId: string, timeoutMs = this.options.timeouts?.tradeIdsMs ?? 30000): Promise<string[]> {
    const id = String(orderId);
    const ot = this.orderTrades.get(id);
    if (ot?.done) {
      return ot.tradeIds.length ? Promise.resolve([...ot.tradeIds]) : Promise.reject(new FxcmOrderRejectedError(id, ot.status));
    }
    return new Promise((resolve, reject) => {
      const list = this.waiters.get(id) ?? [];
      const w: Waiter = {
        resolve,
        reject,
        timer: setTimeout(() => {
          const l = this.waiters.get(id);
          if (l) {
            const i = l.indexOf(w);
            if (i >= 0) l.splice(i, 1);
            if (!l.length) this.waiters.delete(id);
          }
          reject(new FxcmTimeoutError(`no trade ids for order ${id} within ${timeoutMs} ms`));
        }, timeoutMs),
      };
      list.push(w);
      this.waiters.set(id, list);
    });
  }

  // ---------------------------------------------------------------- market data

  async getInstruments(): Promise<Instrument[]> {
    const env = await this.rest.request<Envelope & { data?: { instrument?: Instrument[] } }>('GET', '/trading/get_instruments');
    return env.data?.instrument ?? [];
  }

  /** POST /subscribe: starts price pushes; returns the current prices. */
  async subscribePrices(symbols: string | string[]): Promise<PriceUpdate[]> {
    const pairs = Array.isArray(symbols) ? symbols : [symbols];
    const env = await this.rest.request<Envelope & { pairs?: unknown }>('POST', '/subscribe', { pairs });
    for (const s of pairs) this.priceSubs.add(s);
    let list = env.pairs;
    if (typeof list === 'string') list = JSON.parse(list) as unknown; // the 2017 shape
    const arr = (Array.isArray(list) ? list : list ? [list] : []) as PriceUpdate[];
    for (const p of arr) if (p && p.Symbol) this.prices.set(p.Symbol, p);
    return arr;
  }

  async unsubscribePrices(symbols: string | string[]): Promise<string[]> {
    const pairs = Array.isArray(symbols) ? symbols : [symbols];
    const env = await this.rest.request<Envelope & { pairs?: unknown }>('POST', '/unsubscribe', { pairs });
    for (const s of pairs) this.priceSubs.delete(s);
    const p = env.pairs;
    return Array.isArray(p) ? p.map(String) : typeof p === 'string' ? [p] : [];
  }

  /** POST /trading/update_subscriptions: which symbols appear in the Offer table. */
  async updateSubscriptions(symbol: string, visible: boolean): Promise<void> {
    await this.rest.request('POST', '/trading/update_subscriptions', { symbol, visible });
  }

  // ---------------------------------------------------------------- tables

  async subscribeTables(models: ModelName | ModelName[]): Promise<void> {
    const list = Array.isArray(models) ? models : [models];
    await this.rest.request('POST', '/trading/subscribe', { models: list });
    for (const m of list) this.tableSubs.add(m);
  }

  async unsubscribeTables(models: ModelName | ModelName[]): Promise<void> {
    const list = Array.isArray(models) ? models : [models];
    await this.rest.request('POST', '/trading/unsubscribe', { models: list });
    for (const m of list) {
      this.tableSubs.delete(m);
      if (m === 'Order') this.orderSubscription = undefined;
    }
  }

  /** GET /trading/get_model with repeated `models`; returns the records per model. */
  async getModel(models: ModelName | ModelName[]): Promise<Snapshot> {
    const list = Array.isArray(models) ? models : [models];
    const env = await this.rest.request('GET', '/trading/get_model', { models: list });
    const out: Snapshot = {};
    for (const m of list) {
      const v = env[MODEL_SNAPSHOT_KEY[m]];
      out[m] = (Array.isArray(v) ? v : []).filter((r: TableRecord) => r && r.isTotal !== true) as TableRecord[];
    }
    return out;
  }

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
  private ensureOrderSubscription(): Promise<void> {
    if (this.tableSubs.has('Order')) return Promise.resolve();
    if (!this.orderSubscription) {
      this.orderSubscription = this.subscribeTables('Order').catch((e) => {
        this.orderSubscription = undefined;
        throw e;
      });
    }
    return this.orderSubscription;
  }

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
   * 10000 candles), merged and deduplicated by timestamp (later row wins).
   */
  async downloadCandles(instrument: string | number, period: Period | string, fromSec: number, toSec: number): Promise<Candle[]> {
    const p = normalizePeriod(period);
    if (!p) throw new FxcmError(`unknown period ${period}`);
    const id = await this.offerId(instrument);
    const parts: Candle[][] = [];
    for (const chunk of splitCandleRange(p, fromSec, toSec)) {
      parts.push(await this.getCandles(id, p, chunk));
    }
    return mergeCandles(...parts).filter((c) => c.ts >= fromSec && c.ts <= toSec);
  }
}

function checkIsBuyStrict(v: unknown) {
  return v === true || v === false ? undefined : { code: 3, message: 'is_buy is required', parameters: ['is_buy2'] as (string | number)[] };
}
