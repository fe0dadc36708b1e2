/**
 * BrokerSimulator: an FXCM-compatible REST + Socket.IO server for tests and `ratelimit-runner sim`.
 *
 * Wire protocol: socket.io v4 with `allowEIO3` (Engine.IO 3 clients such as socket.io-client 2.x
 * and the broker's documented `EIO=3&transport=polling&b64=1` handshake, and Engine.IO 4).
 * The bearer `Bearer <socket id><token>` is checked against the token's *current* connection
 * (engine sid, or the socket.io id for EIO4 clients); a second connection with the same token
 * invalidates the first one's bearer and pushes. A bad token is refused at the handshake with HTTP
 * 403 (default) or, with `badTokenMode: 'socketError'`, with the socket error packet
 * `44"Your token is not valid, please contact admin@fxcm.com"`.
 *
 * Errors are HTTP 200 with `{"response":{"executed":false,"error":…}}` and the endpoint's payload
 * keys present but empty. A refused bearer has the same body with HTTP 401 (the status the broker's
 * swagger declares) and an error that starts with the broker's `Unauthorized` and names the cause
 * (UNAUTHORIZED in form.ts): when a second connection takes a token's session over, the first
 * connection's bearer is refused with "token already has a streaming session". The per-session
 * request cap answers HTTP 403
 * `{"Code":403,"Message":"The number of API requests per session has been exceeded."}`.
 * The broker's per-command limits (get_model OpenPosition 50/h, Order 1500/h,
 * update_subscriptions 500/h, on the market clock) fail with
 * `ORA-20301: Max calls limit reached: Cmd=<n>, max <calls> calls per <seconds> seconds`
 * (the broker documents the code, command and numbers, not the exact text).
 */
import http from 'node:http';
import { type LogWriter, silentLogger } from '../../telemetry/logger';
import type { AddressInfo } from 'node:net';
import { Server as IOServer, type Socket } from 'socket.io';
import { MAX_CANDLES_PER_REQUEST, maxWindowSeconds, normalizePeriod, PERIOD_SECONDS } from '../fxcm/candles';
import { MODEL_SNAPSHOT_KEY, MODELS, SUBSCRIBABLE_MODELS, isModelName, type ModelName, type TableRecord } from '../fxcm/types';
import type { AccountSpec } from './book';
import { TradingEngine, type EngineOptions } from './engine';
import { SimRequestError, UNAUTHORIZED, type Form } from './form';
import { systemClock, type Clock } from '../../platform/clock';
import { Faults } from './faults';
import { Lru } from './lru';
import { Market, type MarketOptions, type MarketQuote, type SymbolSpec } from './market';

export const BAD_TOKEN_MESSAGE = 'Your token is not valid, please contact admin@fxcm.com';
export const SESSION_LIMIT_MESSAGE = 'The number of API requests per session has been exceeded.';

export interface SimulatorLimits {
  /** get_model OpenPosition per token per hour (broker Cmd=44). Default 50. */
  openPositionSnapshotsPerHour?: number;
  /** get_model Order per token per hour (Cmd=46). Default 1500. */
  orderSnapshotsPerHour?: number;
  /** update_subscriptions per token per hour (Cmd=24). Default 500. */
  updateSubscriptionsPerHour?: number;
  /** Requests per connection (session) before HTTP 403; default unlimited. */
  requestsPerSession?: number;
}

export interface SimulatorStartOptions {
  /** Port to listen on; 0 (default) picks a free one. */
  port?: number;
  /** Default 127.0.0.1. */
  host?: string;
  /** Seed of the price path: the live quotes and the candle history. Default 1. */
  seed?: number;
  /** Accepted tokens (one account each), or token → account spec. */
  tokens: string[] | Record<string, AccountSpec>;
  /** Symbols (from KNOWN_SYMBOLS by name, or full specs). Default EUR/USD, USD/JPY, GBP/USD. */
  symbols?: (string | SymbolSpec)[];
  /** Time source of the market (default the system clock; tests pass a ManualClock). */
  clock?: Clock;
  /** Auto-tick interval of the market on its clock (default none: ticks only by `market.tick()`/`setPrice`). */
  tickIntervalMs?: number;
  /** Daily standard deviation of the log price (default 0.005): MarketOptions.volatility. */
  volatility?: number;
  /** Replay candles (per symbol: a list or a file path) as the live quotes instead of the price path (candle history stays the path's). */
  replay?: MarketOptions['replay'];
  /** Override market hours (default FX hours: closed Fri 16:55 → Sun 17:00 US Eastern). */
  isOpen?: (ms: number) => boolean;
  /** Engine.IO heartbeat (defaults 25000 / 60000 like the broker's handshake). */
  pingIntervalMs?: number;
  pingTimeoutMs?: number;
  /** How a bad token is refused: HTTP 403 at the handshake (default) or a socket error packet. */
  badTokenMode?: 'http403' | 'socketError';
  limits?: SimulatorLimits;
  /** Adverse slippage of market orders, stops and stop entries (default none): the backtest's model. */
  slippage?: EngineOptions['slippage'];
  /** Book the daily rollover on open trades (default true, as the broker does). */
  rollover?: boolean;
  logger?: LogWriter;
}

interface Session {
  token: string;
  socket: Socket | undefined;
  sid: string | undefined;
  socketId: string | undefined;
  prices: Set<string>;
  models: Set<ModelName>;
  requests: number;
}

type Payload = Record<string, unknown>;

function parseForm(text: string, into: Form = {}): Form {
  const sp = new URLSearchParams(text);
  for (const k of new Set(sp.keys())) {
    const all = sp.getAll(k);
    const prev = into[k];
    const merged = prev === undefined ? all : [...(Array.isArray(prev) ? prev : [prev]), ...all];
    into[k] = merged.length === 1 ? merged[0] : merged;
  }
  return into;
}

const asList = (v: string | string[] | undefined): string[] => (v === undefined ? [] : Array.isArray(v) ? v : [v]);

export class BrokerSimulator {
  private server: http.Server | undefined;
  private io: IOServer | undefined;
  private _market: Market | undefined;
  private _engine: TradingEngine | undefined;
  readonly faults = new Faults();
  private readonly sessions = new Map<string, Session>();
  /** Connection ids (engine sid, socket id) whose live session a later connection took over → their token. */
  private readonly takenOver = new Lru<string, string>(1000);
  private readonly counts = new Map<string, number>();
  private readonly callLog = new Map<string, number[]>();
  private opts: SimulatorStartOptions | undefined;
  private log: LogWriter = silentLogger;
  url = '';
  port = 0;
  /** The last REST request received (method, path, headers, raw body) for wire assertions. */
  lastRequest: { method: string; path: string; query: string; headers: http.IncomingHttpHeaders; body: string } | undefined;

  /** The market handle (set prices, tick, advance a ManualClock, force hours). Available after start(). */
  get market(): Market {
    if (!this._market) throw new Error('BrokerSimulator not started');
    return this._market;
  }

  /** The trading engine (accounts, orders, trades) for assertions. */
  get engine(): TradingEngine {
    if (!this._engine) throw new Error('BrokerSimulator not started');
    return this._engine;
  }

  /** Requests received per endpoint (`/trading/open_trade`, `/candles`, …; get_model also per model as `/trading/get_model:Order`). */
  requestCounts(): Record<string, number> {
    return Object.fromEntries(this.counts);
  }

  resetCounters(): void {
    this.counts.clear();
  }

  /** Account of a token (accountId, accountName, balance). */
  account(token: string) {
    return this.engine.account(token);
  }

  async start(opts: SimulatorStartOptions): Promise<{ url: string; port: number }> {
    this.opts = opts;
    this.log = opts.logger ?? silentLogger;
    const clock = opts.clock ?? systemClock;
    const market = new Market({
      clock,
      seed: opts.seed,
      symbols: opts.symbols,
      volatility: opts.volatility,
      tickIntervalMs: opts.tickIntervalMs,
      replay: opts.replay,
      isOpen: opts.isOpen,
    });
    this._market = market;
    this._engine = new TradingEngine(market, this.faults, (token, model, rec) => this.pushTable(token, model, rec), { slippage: opts.slippage, rollover: opts.rollover });
    const tokens: Record<string, AccountSpec> = Array.isArray(opts.tokens) ? Object.fromEntries(opts.tokens.map((t) => [t, {}])) : opts.tokens;
    for (const [t, spec] of Object.entries(tokens)) this._engine.addAccount(t, spec);
    market.on('price', (symbol: string, q: MarketQuote) => this.pushPrice(symbol, q));

    await this.listen(opts.port ?? 0);
    market.start();
    return { url: this.url, port: this.port };
  }

  /** The HTTP server and the Socket.IO server on it, on `port` (0: a free one). */
  private async listen(port: number): Promise<void> {
    const opts = this.opts!;
    const server = http.createServer((req, res) => {
      this.handle(req, res).catch((e: Error) => {
        this.log.error('simulator request failed', { error: e.message });
        if (!res.headersSent) res.writeHead(500, { 'Content-Type': 'application/json' });
        res.end(JSON.stringify({ response: { executed: false, error: e.message } }));
      });
    });
    this.server = server;
    const io = new IOServer(server, {
      allowEIO3: true,
      transports: ['polling', 'websocket'],
      pingInterval: opts.pingIntervalMs ?? 25000,
      pingTimeout: opts.pingTimeoutMs ?? 60000,
      cors: { origin: true },
      allowRequest: (req, cb) => {
        if (opts.badTokenMode === 'socketError') return cb(null, true);
        const token = new URL(req.url ?? '/', 'http://x').searchParams.get('access_token') ?? '';
        cb(null, this.engine.accounts.has(token));
      },
    });
    this.io = io;
    io.use((socket, next) => {
      const token = String(socket.handshake.query.access_token ?? '');
      if (!this.engine.accounts.has(token)) return next(new Error(BAD_TOKEN_MESSAGE));
      next();
    });
    io.on('connection', (socket) => this.onConnection(socket));
    this.faults.disconnectHook = (token) => {
      let n = 0;
      for (const s of this.sessions.values()) {
        if (token !== undefined && s.token !== token) continue;
        if (s.socket?.connected) {
          s.socket.conn.close();
          n++;
        }
      }
      return n;
    };
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, opts.host ?? '127.0.0.1', () => resolve());
    });
    this.port = (server.address() as AddressInfo).port;
    this.url = `http://${opts.host ?? '127.0.0.1'}:${this.port}`;
  }

  async stop(): Promise<void> {
    this._market?.stop();
    await this.closeListeners();
  }

  /**
   * Fault injection: the broker's servers restart. Every connection drops and none is accepted
   * until `whileDown` has run; the market and the accounts live on meanwhile (prices move, stops
   * and limits close trades, and no push reaches anyone). Then it listens again on the same port;
   * sessions start over, as at the broker.
   */
  async restart(whileDown?: () => void | Promise<void>): Promise<void> {
    await this.closeListeners();
    this.faults.fired.restarts++;
    await whileDown?.();
    await this.listen(this.port);
  }

  private async closeListeners(): Promise<void> {
    const io = this.io;
    const server = this.server;
    this.io = undefined;
    this.server = undefined;
    if (io) {
      io.disconnectSockets(true);
      await new Promise<void>((resolve) => io.close(() => resolve()));
    }
    if (server) {
      server.closeAllConnections();
      if (server.listening) await new Promise<void>((resolve) => server.close(() => resolve()));
    }
    this.sessions.clear();
  }

  // ---------------------------------------------------------------- socket

  private onConnection(socket: Socket): void {
    const token = String(socket.handshake.query.access_token ?? '');
    // one live session per token: the new connection replaces the old one (subscriptions reset)
    const previous = this.sessions.get(token);
    if (previous?.socket?.connected) {
      for (const id of [previous.sid, previous.socketId]) if (id) this.takenOver.set(id, token);
    }
    const s: Session = { token, socket, sid: (socket.conn as unknown as { id: string }).id, socketId: socket.id, prices: new Set(), models: new Set(), requests: 0 };
    this.sessions.set(token, s);
    this.log.debug('simulator connection', { sid: s.sid, socketId: s.socketId, eio: socket.conn.protocol });
    socket.on('disconnect', () => {
      if (this.sessions.get(token)?.socket === socket) s.socket = undefined;
    });
  }

  private emit(s: Session, event: string, payload: unknown): void {
    if (!s.socket?.connected) return;
    if (this.faults.shouldDrop(event)) return;
    s.socket.emit(event, JSON.stringify(payload));
  }

  private pushTable(token: string, model: ModelName, rec: TableRecord): void {
    const s = this.sessions.get(token);
    if (!s || !s.models.has(model)) return;
    this.emit(s, model, rec);
  }

  private priceUpdate(symbol: string, q: MarketQuote) {
    return { Updated: q.updatedMs, Rates: [q.bid, q.ask, q.high, q.low], Symbol: symbol };
  }

  private pushPrice(symbol: string, q: MarketQuote): void {
    for (const s of this.sessions.values()) if (s.prices.has(symbol)) this.emit(s, symbol, this.priceUpdate(symbol, q));
  }

  // ---------------------------------------------------------------- REST

  /** The session of a bearer, or why there is none. */
  private authenticate(header: string | undefined): Session | string {
    if (!header || !header.startsWith('Bearer ')) return UNAUTHORIZED.noBearer;
    const v = header.slice(7);
    for (const s of this.sessions.values()) {
      if (!s.socket?.connected) continue;
      if (v === `${s.sid}${s.token}` || v === `${s.socketId}${s.token}`) return s;
    }
    const token = [...this.engine.accounts.keys()].find((t) => v.endsWith(t));
    if (token === undefined) return UNAUTHORIZED.unknownToken;
    // a connection that was live when another one took its token, or a stale id (after a reconnect, say)
    return this.takenOver.get(v.slice(0, v.length - token.length)) === token ? UNAUTHORIZED.sessionTaken : UNAUTHORIZED.noConnection;
  }

  private emptyPayload(path: string, form: Form): Payload {
    if (path === '/subscribe' || path === '/unsubscribe') return { pairs: [] };
    if (path.startsWith('/candles')) return { instrument_id: 0, period_id: 0, candles: [] };
    if (path === '/trading/get_model') {
      const out: Payload = {};
      for (const m of asList(form.models)) if (isModelName(m)) out[MODEL_SNAPSHOT_KEY[m]] = [];
      return out;
    }
    if (path === '/trading/get_instruments') return { data: { instrument: [] } };
    if (path.startsWith('/trading/subscribe') || path.startsWith('/trading/unsubscribe') || path === '/trading/update_subscriptions') return {};
    return { data: {} };
  }

  /** Sliding one-hour window on the market clock per token and command. */
  private overLimit(token: string, cmd: number, max: number): string | undefined {
    const now = this.market.nowMs();
    const key = `${token}:${cmd}`;
    const log = (this.callLog.get(key) ?? []).filter((t) => t > now - 3600_000);
    if (log.length >= max) {
      this.callLog.set(key, log);
      return `ORA-20301: Max calls limit reached: Cmd=${cmd}, max ${max} calls per 3600 seconds`;
    }
    log.push(now);
    this.callLog.set(key, log);
    return undefined;
  }

  private count(key: string): void {
    this.counts.set(key, (this.counts.get(key) ?? 0) + 1);
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://sim');
    let path = url.pathname.length > 1 ? url.pathname.replace(/\/+$/, '') : url.pathname;
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const rawBody = Buffer.concat(chunks).toString('utf8');
    this.lastRequest = { method: req.method ?? '', path, query: url.search.slice(1), headers: req.headers, body: rawBody };
    const form = parseForm(url.search.slice(1));
    if (req.method === 'POST') parseForm(rawBody, form);
    // `/trading/get_model/<Model>` path form (the Account model is addressed as Accounts)
    const pm = /^\/trading\/get_model\/([A-Za-z]+)$/.exec(path);
    if (pm) {
      form.models = [...asList(form.models), pm[1] === 'Accounts' ? 'Account' : pm[1]!];
      path = '/trading/get_model';
    }
    const endpoint = path.startsWith('/candles/') ? '/candles' : path;
    this.count(endpoint);
    if (endpoint === '/trading/get_model') for (const m of asList(form.models)) this.count(`${endpoint}:${m}`);

    const send = (status: number, body: unknown) => {
      res.writeHead(status, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    const fail = (error: string, extra: Payload = this.emptyPayload(path, form), status = 200) => send(status, { response: { executed: false, error }, ...extra });

    const delay = this.faults.takeDelay(endpoint);
    if (delay > 0) await new Promise((r) => setTimeout(r, delay).unref());
    const http = this.faults.takeHttpError(endpoint);
    if (http) {
      res.writeHead(http.status, { 'Content-Type': 'application/json', ...(http.retryAfter !== undefined ? { 'Retry-After': http.retryAfter } : {}) });
      res.end(JSON.stringify({ Code: http.status, Message: http.status === 429 ? 'Too Many Requests' : 'Internal Server Error' }));
      return;
    }

    const session = this.authenticate(req.headers.authorization);
    if (typeof session === 'string') return fail(session, undefined, 401);
    session.requests++;
    const cap = this.opts?.limits?.requestsPerSession;
    if (cap !== undefined && session.requests > cap) return send(403, { Code: 403, Message: SESSION_LIMIT_MESSAGE });
    const injected = this.faults.takeFailure(endpoint);
    if (injected !== undefined) return fail(injected);

    try {
      const payload = this.route(session, req.method ?? 'GET', path, form);
      if (payload === undefined) return send(404, { Code: 404, Message: 'The resource name or ID is not valid.' });
      if ('__error' in payload) return fail(String(payload.__error), payload.__extra as Payload);
      send(200, { response: { executed: true }, ...payload });
    } catch (e) {
      if (e instanceof SimRequestError) return fail(e.error);
      throw e;
    }
  }

  private route(s: Session, method: string, path: string, form: Form): Payload | undefined {
    const engine = this.engine;
    const t = s.token;
    const limits = this.opts?.limits ?? {};
    const post = method === 'POST';
    if (path.startsWith('/candles/') && method === 'GET') return this.candles(path, form);
    switch (path) {
      case '/trading/get_instruments':
        return { data: { instrument: this.market.symbols().map((sym, i) => ({ symbol: sym, visible: engine.account(t).visibleOffers.has(sym), order: i + 1 })) } };
      case '/subscribe': {
        if (!post) return undefined;
        const pairs = asList(form.pairs);
        if (!pairs.length) throw new SimRequestError('Invalid settings of parameneters.');
        for (const p of pairs) if (!this.market.spec(p)) return { __error: `No price stream for ${p}`, __extra: { pairs: [] } };
        for (const p of pairs) s.prices.add(p);
        return { pairs: pairs.map((p) => this.priceUpdate(p, this.market.quote(p)!)) };
      }
      case '/unsubscribe': {
        if (!post) return undefined;
        const pairs = asList(form.pairs);
        for (const p of pairs) s.prices.delete(p);
        return { pairs };
      }
      case '/trading/subscribe':
      case '/trading/unsubscribe': {
        if (!post) return undefined;
        const models = asList(form.models);
        if (!models.length) throw new SimRequestError('Invalid settings of parameneters.');
        for (const m of models) if (!isModelName(m) || !SUBSCRIBABLE_MODELS.includes(m)) throw new SimRequestError(`Invalid model ${m}`);
        for (const m of models as ModelName[]) (path === '/trading/subscribe' ? s.models.add(m) : s.models.delete(m));
        return {};
      }
      case '/trading/get_model': {
        const models = asList(form.models);
        if (!models.length) throw new SimRequestError('Invalid settings of parameneters.');
        for (const m of models) if (!isModelName(m)) throw new SimRequestError(`Invalid model ${m}`);
        const extra = this.emptyPayload(path, form);
        if (models.includes('OpenPosition')) {
          const e = this.overLimit(t, 44, limits.openPositionSnapshotsPerHour ?? 50);
          if (e) return { __error: e, __extra: extra };
        }
        if (models.includes('Order')) {
          const e = this.overLimit(t, 46, limits.orderSnapshotsPerHour ?? 1500);
          if (e) return { __error: e, __extra: extra };
        }
        const out: Payload = {};
        for (const m of models as ModelName[]) out[MODEL_SNAPSHOT_KEY[m]] = engine.snapshot(t, m);
        return out;
      }
      case '/trading/update_subscriptions': {
        if (!post) return undefined;
        const e = this.overLimit(t, 24, limits.updateSubscriptionsPerHour ?? 500);
        if (e) return { __error: e, __extra: {} };
        engine.updateSubscriptions(t, form);
        return {};
      }
    }
    if (!post) return undefined;
    switch (path) {
      case '/trading/open_trade':
        return { data: engine.openTrade(t, form) };
      case '/trading/close_trade':
        return { data: engine.closeTrade(t, form) };
      case '/trading/change_order':
        return { data: engine.changeOrder(t, form) };
      case '/trading/delete_order':
        return { data: engine.deleteOrder(t, form) };
      case '/trading/create_entry_order':
        return { data: engine.createEntryOrder(t, form) };
      case '/trading/simple_oco':
        return { data: engine.simpleOco(t, form) };
      case '/trading/add_to_oco':
        return { data: engine.addToOco(t, form) };
      case '/trading/remove_from_oco':
        return { data: engine.removeFromOco(t, form) };
      case '/trading/edit_oco':
        return { data: engine.editOco(t, form) };
      case '/trading/change_trade_stop_limit':
        return { data: engine.changeTradeStopLimit(t, form) };
      case '/trading/change_order_stop_limit':
        return { data: engine.changeOrderStopLimit(t, form) };
      case '/trading/close_all_for_symbol':
        return { data: engine.closeAllForSymbol(t, form) };
    }
    return undefined;
  }

  /** GET /candles/{offer_id}/{period_id}?num=&from=&to= (seconds). */
  private candles(path: string, form: Form): Payload {
    const [, , offer, periodRaw] = path.split('/');
    const bad = { __error: 'Invalid settings of parameneters.', __extra: { instrument_id: 0, period_id: 0, candles: [] } };
    const period = normalizePeriod(periodRaw ?? '');
    const spec = this.market.specByOfferId(Number(offer));
    const num = Number(form.num);
    if (!period || !spec || !Number.isInteger(num) || num < 1 || num > MAX_CANDLES_PER_REQUEST) return bad;
    if (!this.market.isOpen()) {
      // weekend maintenance: not executed, empty error, empty candles
      return { __error: '', __extra: { instrument_id: String(spec.offerId), period_id: periodRaw, candles: [] } };
    }
    const nowSec = Math.floor(this.market.nowMs() / 1000);
    const to = form.to !== undefined ? Number(form.to) : nowSec;
    const span = PERIOD_SECONDS[period] * num * 3;
    const from = form.from !== undefined ? Number(form.from) : to - span;
    if (!Number.isFinite(from) || !Number.isFinite(to) || from > to) return bad;
    if (form.from !== undefined && to - from + 1 > maxWindowSeconds(period) + PERIOD_SECONDS[period]) return bad;
    const rows = this.market.candles(spec.symbol, period, from, Math.min(to, nowSec), num);
    return { instrument_id: String(spec.offerId), period_id: periodRaw, candles: rows };
  }
}

export { MODELS };
