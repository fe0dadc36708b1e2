/**
 * Streaming connection: a small Engine.IO 3 / 4 + Socket.IO (default namespace) client on `ws`.
 *
 * Why our own client instead of socket.io-client 2.x / 4.x: FXCM's bearer needs the *Engine.IO*
 * session id, and the handshake must be exactly the broker's
 * (`EIO=3&transport=polling&t=…&b64=1&access_token=…`, then a websocket upgrade), which we then
 * control end to end (timeouts, 403 on a bad token, reconnect policy owned by FxcmClient rather
 * than a library's hidden one). One code path serves both protocols (EIO3: client pings; EIO4:
 * server pings, explicit namespace CONNECT). socket.io-client 2.x would pull in ws@7 and an old
 * XHR shim and can only speak EIO3; 4.x can only speak EIO4. Both are used in the tests instead,
 * to prove the simulator speaks the protocols like the real server.
 *
 * Packets: `0` open, `1` close, `2` ping, `3` pong, `4` message (`40` connect, `41` disconnect,
 * `42[...]` event, `44` connect error), `5` upgrade, `6` noop.
 */
import { EventEmitter } from 'node:events';
import { type LogWriter, silentLogger } from '../../telemetry/logger';
import WebSocket from 'ws';
import { FxcmAuthError, FxcmTimeoutError, FxcmTransportError } from './errors';
import { errorMessage } from '../../platform/errors';

export type EngineIOVersion = 3 | 4;

export interface StreamOptions {
  /** e.g. http://127.0.0.1:4000 (https → wss). */
  baseUrl: string;
  token: string;
  engineIO: EngineIOVersion;
  /** Socket.IO path; default `/socket.io/`. */
  path?: string;
  /** Extra query parameters (e.g. `agent`). */
  query?: Record<string, string>;
  /** Timeout of the whole connect (handshake + upgrade + namespace connect). */
  connectTimeoutMs?: number;
  logger?: LogWriter;
}

interface Handshake {
  sid: string;
  upgrades: string[];
  pingInterval: number;
  pingTimeout: number;
}

/** Splits an EIO3 (`<len>:<packet>…`) or EIO4 (`\x1e`-separated) polling payload into packets. */
export function decodePollingPayload(payload: string, eio: EngineIOVersion): string[] {
  if (eio === 4) return payload.length ? payload.split('\x1e') : [];
  const out: string[] = [];
  let i = 0;
  while (i < payload.length) {
    const colon = payload.indexOf(':', i);
    if (colon < 0) throw new FxcmTransportError(`bad EIO3 payload: ${payload.slice(0, 80)}`);
    const len = Number(payload.slice(i, colon));
    if (!Number.isInteger(len) || len < 0) throw new FxcmTransportError(`bad EIO3 payload length: ${payload.slice(0, 80)}`);
    out.push(payload.slice(colon + 1, colon + 1 + len));
    i = colon + 1 + len;
  }
  return out;
}

let markerSeq = 0;
/** A per-request marker like the `t` (yeast) parameter of socket.io clients. */
function marker(): string {
  return `${Date.now().toString(36)}${(markerSeq++).toString(36)}`;
}

/**
 * Events: `event` (name: string, args: unknown[]), `close` (reason: string, silentMs: how long
 * nothing had come before it: a silent outage's start), `error` (err).
 * One instance = one connection; reconnecting means creating a new instance.
 */
export class FxcmStream extends EventEmitter {
  sid: string | undefined;
  /** Socket.IO socket id (EIO4 sends its own in `40{"sid":…}`; EIO3 equals the engine sid). */
  socketId: string | undefined;
  private ws: WebSocket | undefined;
  private handshake: Handshake | undefined;
  private pingTimer: NodeJS.Timeout | undefined;
  private deadTimer: NodeJS.Timeout | undefined;
  private closed = false;
  /** When the last packet came (the open included): a close says how long the link was silent before it. */
  private lastHeardMs = Date.now();
  /** When the last heartbeat came (EIO3: a pong; EIO4: the server's ping). */
  private lastBeatMs = 0;
  private readonly log: LogWriter;

  constructor(private readonly opts: StreamOptions) {
    super();
    this.log = opts.logger ?? silentLogger;
  }

  get connected(): boolean {
    return !this.closed && this.ws?.readyState === WebSocket.OPEN && this.socketId !== undefined;
  }

  private url(transport: 'polling' | 'websocket', extra: Record<string, string>): string {
    const u = new URL(this.opts.path ?? '/socket.io/', this.opts.baseUrl);
    if (transport === 'websocket') u.protocol = u.protocol === 'https:' ? 'wss:' : 'ws:';
    // the broker's order: access_token, EIO, transport, t, b64
    u.searchParams.set('access_token', this.opts.token);
    u.searchParams.set('EIO', String(this.opts.engineIO));
    u.searchParams.set('transport', transport);
    for (const [k, v] of Object.entries(extra)) u.searchParams.set(k, v);
    for (const [k, v] of Object.entries(this.opts.query ?? {})) u.searchParams.set(k, v);
    return u.toString();
  }

  /** Handshake over polling, upgrade to websocket, join the default namespace. Resolves with the sid. */
  async open(): Promise<string> {
    const timeoutMs = this.opts.connectTimeoutMs ?? 10000;
    const ac = new AbortController();
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        ac.abort();
        reject(new FxcmTimeoutError(`stream connect timed out after ${timeoutMs} ms`));
      }, timeoutMs);
    });
    try {
      return await Promise.race([this.doOpen(ac.signal), timeout]);
    } catch (e) {
      this.teardown('connect failed');
      throw e;
    } finally {
      clearTimeout(timer);
    }
  }

  private async doOpen(signal: AbortSignal): Promise<string> {
    const eio = this.opts.engineIO;
    const extra: Record<string, string> = { t: marker() };
    if (eio === 3) extra.b64 = '1';
    let res: Response;
    try {
      res = await fetch(this.url('polling', extra), { signal, headers: { Accept: '*/*' } });
    } catch (e) {
      throw new FxcmTransportError(`handshake failed: ${errorMessage(e)}`, undefined, e);
    }
    const text = await res.text();
    if (res.status === 403 || res.status === 401) throw new FxcmAuthError(`handshake refused: HTTP ${res.status} ${text}`, res.status);
    if (res.status !== 200) throw new FxcmTransportError(`handshake: HTTP ${res.status} ${text.slice(0, 200)}`, res.status);
    const packets = decodePollingPayload(text, eio);
    const open = packets.find((p) => p.startsWith('0'));
    if (!open) throw new FxcmTransportError(`handshake without open packet: ${text.slice(0, 200)}`);
    const hs = JSON.parse(open.slice(1)) as Handshake;
    this.handshake = hs;
    this.sid = hs.sid;
    this.log.debug('fxcm stream handshake', { sid: hs.sid, eio, pingInterval: hs.pingInterval });
    // packets that came with the handshake (EIO3 servers may already send 40 or 44)
    let connectedEarly = false;
    for (const p of packets) {
      if (p === '40' || p.startsWith('40{')) connectedEarly = true;
      if (p.startsWith('44')) throw new FxcmAuthError(parseConnectError(p.slice(2)));
    }

    const ws = new WebSocket(this.url('websocket', { sid: hs.sid }), { perMessageDeflate: false });
    this.ws = ws;
    const onAbort = () => ws.terminate();
    signal.addEventListener('abort', onAbort, { once: true });
    await new Promise<void>((resolve, reject) => {
      let stage: 'probe' | 'connect' = 'probe';
      const fail = (e: Error) => {
        cleanup();
        reject(e);
      };
      const onOpen = () => ws.send('2probe');
      const onError = (e: Error) => fail(new FxcmTransportError(`websocket: ${e.message}`, undefined, e));
      const onClose = () => fail(new FxcmTransportError('websocket closed during connect'));
      const done = () => {
        cleanup();
        resolve();
      };
      const onMessage = (data: WebSocket.RawData) => {
        const msg = data.toString();
        if (stage === 'probe') {
          if (msg !== '3probe') return fail(new FxcmTransportError(`unexpected probe answer ${msg}`));
          ws.send('5');
          stage = 'connect';
          if (eio === 4) ws.send('40');
          else if (connectedEarly) {
            this.socketId = hs.sid;
            return done();
          }
          return;
        }
        if (msg === '40' || msg.startsWith('40{')) {
          this.socketId = eio === 4 ? (JSON.parse(msg.slice(2) || '{}') as { sid?: string }).sid ?? hs.sid : hs.sid;
          return done();
        }
        if (msg.startsWith('44')) return fail(new FxcmAuthError(parseConnectError(msg.slice(2))));
        if (msg === '2' && eio === 4) ws.send('3');
        // 6 (noop) and anything else before CONNECT are ignored
      };
      const cleanup = () => {
        ws.off('open', onOpen);
        ws.off('error', onError);
        ws.off('close', onClose);
        ws.off('message', onMessage);
      };
      ws.on('open', onOpen);
      ws.on('error', onError);
      ws.on('close', onClose);
      ws.on('message', onMessage);
    });
    signal.removeEventListener('abort', onAbort);
    this.lastHeardMs = Date.now();
    ws.on('message', (d) => this.onPacket(d.toString()));
    ws.on('close', () => this.teardown('transport close'));
    ws.on('error', (e) => {
      this.log.warn('fxcm stream websocket error', { error: e.message });
      this.teardown('transport error');
    });
    this.armHeartbeat();
    return hs.sid;
  }

  /**
   * How long an answer to a heartbeat may take before the link counts as dead: the handshake's
   * pingTimeout, but never more than one pingInterval (the broker's 60 s pingTimeout would leave
   * a silent outage unseen for 85 s): a dead link is seen within two ping intervals.
   */
  private get deadAfterMs(): number {
    const hs = this.handshake!;
    return Math.min(hs.pingTimeout, hs.pingInterval);
  }

  private armHeartbeat(): void {
    const hs = this.handshake!;
    clearTimeout(this.pingTimer);
    clearTimeout(this.deadTimer);
    if (this.opts.engineIO === 3) {
      // EIO3: the client pings every pingInterval and expects a pong soon after
      this.pingTimer = setTimeout(() => {
        if (this.closed) return;
        this.ws?.send('2');
        this.armDeadline(Date.now(), this.deadAfterMs);
      }, hs.pingInterval);
    } else {
      // EIO4: the server pings every pingInterval; none for a little longer means the link is dead
      this.armDeadline(Date.now(), hs.pingInterval + this.deadAfterMs);
    }
  }

  /**
   * The link is dead unless its heartbeat (EIO3 the pong, EIO4 the server's ping) comes since
   * `sinceMs` within `afterMs`. Checked after the packets already received are read
   * (setImmediate runs after the event loop's I/O): a process that was busy past the deadline (a
   * long computation, a loaded machine) finds the heartbeat that came meanwhile rather than
   * taking a live link for dead.
   */
  private armDeadline(sinceMs: number, afterMs: number): void {
    this.deadTimer = setTimeout(
      () =>
        setImmediate(() => {
          if (this.closed || this.lastBeatMs >= sinceMs) return;
          this.teardown('ping timeout');
        }),
      afterMs,
    );
  }

  private onPacket(msg: string): void {
    if (this.closed) return;
    this.lastHeardMs = Date.now();
    const type = msg[0];
    if (type === '2') {
      this.ws?.send('3' + msg.slice(1));
      if (this.opts.engineIO === 4) {
        this.lastBeatMs = this.lastHeardMs;
        this.armHeartbeat();
      }
      return;
    }
    if (type === '3') {
      if (this.opts.engineIO === 3) {
        this.lastBeatMs = this.lastHeardMs;
        this.armHeartbeat();
      }
      return;
    }
    if (type === '1') return this.teardown('server close');
    if (type !== '4') return;
    const sio = msg[1];
    if (sio === '1') return this.teardown('io server disconnect');
    if (sio === '4') {
      this.emit('error', new FxcmAuthError(parseConnectError(msg.slice(2))));
      return;
    }
    if (sio !== '2') return;
    let body = msg.slice(2);
    // optional namespace and ack id: `/ns,` then digits
    if (body.startsWith('/')) {
      const comma = body.indexOf(',');
      body = comma >= 0 ? body.slice(comma + 1) : '';
    }
    body = body.replace(/^\d+/, '');
    try {
      const arr = JSON.parse(body) as unknown[];
      if (!Array.isArray(arr) || typeof arr[0] !== 'string') return;
      this.emit('event', arr[0], arr.slice(1));
    } catch (e) {
      this.log.warn('fxcm stream: bad event packet', { packet: msg.slice(0, 200), error: errorMessage(e) });
    }
  }

  private teardown(reason: string): void {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.pingTimer);
    clearTimeout(this.deadTimer);
    const ws = this.ws;
    if (ws && ws.readyState !== WebSocket.CLOSED) {
      try {
        if (ws.readyState === WebSocket.OPEN) {
          ws.close();
          // do not wait for the close handshake of a dead peer
          setTimeout(() => ws.terminate(), 1000).unref();
        } else ws.terminate();
      } catch {
        /* ignore */
      }
    }
    const silentMs = Date.now() - this.lastHeardMs;
    this.log.debug('fxcm stream closed', { reason, sid: this.sid, silentMs });
    this.emit('close', reason, silentMs);
  }

  /** Closes the connection (sends Socket.IO disconnect + Engine.IO close first when open). */
  close(): void {
    if (this.closed) return;
    if (this.ws?.readyState === WebSocket.OPEN) {
      try {
        this.ws.send('41');
        this.ws.send('1');
      } catch {
        /* ignore */
      }
    }
    this.teardown('client close');
  }
}

function parseConnectError(s: string): string {
  try {
    const v = JSON.parse(s) as unknown;
    if (typeof v === 'string') return v;
    if (v && typeof v === 'object' && 'message' in v) return String((v as { message: unknown }).message);
  } catch {
    /* raw */
  }
  return s;
}
