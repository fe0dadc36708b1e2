/**
 * The broker connection: one streaming session and its state, for FxcmClient's calls.
 *
 * - The bearer is rebuilt before every request from the current Engine.IO sid.
 * - On an unexpected stream close it reconnects with exponential backoff: new handshake (new
 *   sid, new bearer), re-subscribes prices and tables, then reconciles the tables with one
 *   get_model snapshot.
 * - Table and price pushes keep live tables; order → trade ids: every pushed Order record adds
 *   its tradeId to the order's set (partial fills give several); the Order `D` push completes the
 *   set (`awaitTradeIds`).
 */
import { EventEmitter } from 'node:events';
import { Backoff } from '../../platform/backoff';
import { type LogWriter, silentLogger } from '../../telemetry/logger';
import { FxcmAuthError, FxcmOrderRejectedError, FxcmTimeoutError, FxcmNotConnectedError, FxcmUnauthorizedError } from './errors';
import { RestTransport, type AfterResponseHook, type BeforeRequestHook } from './rest';
import { FxcmStream, type EngineIOVersion } from './stream';
import { MODEL_KEY, MODEL_SNAPSHOT_KEY, isModelName, type Envelope, type ModelName, type PriceUpdate, type TableAction, type TableRecord } from './types';
import { errorMessage } from '../../platform/errors';

/** Stream reconnect delays (src/platform/backoff.ts: doubling from initialMs, capped at maxMs). */
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
  /** Run on every HTTP answer with its status and Retry-After (the runner's call budget). */
  afterResponse?: AfterResponseHook;
  logger?: LogWriter;
  userAgent?: string;
  /** Check the broker's rules before sending (default true). */
  validate?: boolean;
  /** Account id to trade on; default: the first account of the Account snapshot. */
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
 * Events: `connected` (sid), `disconnected` (reason, silentMs: how long the stream had been silent
 * before it closed, so the outage began that long before), `reconnected` (sid),
 * `reconnectAttemptFailed` (err, attempt), `reconnectFailed` (err), `reconciled` (snapshot),
 * `price` (PriceUpdate), `table` (model, action, mergedRecord, pushed), `streamError` (err),
 * `tokenRefused` (err: the handshake's FxcmAuthError or a call's FxcmUnauthorizedError; once,
 * until) `tokenAccepted` (a handshake or a call went through again).
 */
export class FxcmConnection extends EventEmitter {
  private stream: FxcmStream | undefined;
  protected readonly rest: RestTransport;
  protected readonly log: LogWriter;
  private readonly backoff: ReconnectOptions;
  private closing = false;
  private reconnecting = false;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private wakeReconnect: (() => void) | undefined;
  protected readonly priceSubs = new Set<string>();
  protected readonly tableSubs = new Set<ModelName>();
  private readonly tables = new Map<ModelName, Map<string, TableRecord>>();
  protected readonly prices = new Map<string, PriceUpdate>();
  private readonly orderTrades = new Map<string, OrderTrades>();
  private readonly waiters = new Map<string, Waiter[]>();
  protected orderSubscription: Promise<void> | undefined;

  constructor(readonly options: FxcmClientOptions) {
    super();
    this.log = options.logger ?? silentLogger;
    this.backoff = { ...DEFAULT_RECONNECT, ...options.backoff };
    this.rest = new RestTransport({
      baseUrl: options.baseUrl,
      token: options.token,
      socketId: () => (this.stream?.connected ? this.stream.sid : undefined),
      requestTimeoutMs: options.timeouts?.requestMs,
      userAgent: options.userAgent,
      beforeRequest: options.beforeRequest,
      onOutcome: (_endpoint, e) => {
        if (e instanceof FxcmUnauthorizedError) this.tokenRefused(e);
        else if (!e) this.tokenAccepted();
      },
      afterResponse: options.afterResponse,
      logger: this.log,
    });
  }

  /** Since when the broker refuses the token (undefined: it accepts it). */
  private refusedSince: number | undefined;

  /** The broker refused the token (a handshake's 401/403 or "not valid", a call's 401 Unauthorized): said once until it accepts it again. */
  private tokenRefused(e: Error): void {
    if (this.refusedSince !== undefined) return;
    this.refusedSince = Date.now();
    this.emit('tokenRefused', e);
  }

  private tokenAccepted(): void {
    if (this.refusedSince === undefined) return;
    this.refusedSince = undefined;
    this.emit('tokenAccepted');
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
    stream.on('error', (e: Error) => {
      if (e instanceof FxcmAuthError) this.tokenRefused(e);
      this.emit('streamError', e);
    });
    let sid: string;
    try {
      sid = await stream.open();
    } catch (e) {
      if (e instanceof FxcmAuthError) this.tokenRefused(e);
      throw e;
    }
    if (this.closing) {
      stream.close();
      throw new FxcmNotConnectedError('client closed during connect');
    }
    this.stream = stream;
    this.tokenAccepted();
    stream.on('close', (reason: string, silentMs: number) => this.onStreamClose(stream, reason, silentMs));
    this.emit('connected', sid);
    return sid;
  }

  private onStreamClose(stream: FxcmStream, reason: string, silentMs = 0): void {
    if (stream !== this.stream) return;
    this.emit('disconnected', reason, silentMs);
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
          this.log.warn('fxcm reconnect attempt failed', { attempt, error: errorMessage(e) });
          this.emit('reconnectAttemptFailed', e, attempt);
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

  // ---------------------------------------------------------------- subscriptions (restored on reconnect)

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

  /** The Order table is subscribed before the first order, so its pushes carry the trade ids. */
  protected ensureOrderSubscription(): Promise<void> {
    if (this.tableSubs.has('Order')) return Promise.resolve();
    if (!this.orderSubscription) {
      this.orderSubscription = this.subscribeTables('Order').catch((e) => {
        this.orderSubscription = undefined;
        throw e;
      });
    }
    return this.orderSubscription;
  }

}
