/**
 * A proxy between a broker client and the simulator (or any broker URL), for the faults a network
 * and a broker's gateways cause and the simulator cannot: it forwards REST calls and the stream
 * (the Engine.IO polling handshake and the websocket, byte for byte), and on demand
 *
 * - withholds answers: the call reaches the broker, which runs it and pushes what follows; its
 *   answer never reaches the client (`withhold`);
 * - injects an HTTP status (401, 429, 500, …) with a body and headers, before the broker sees the
 *   call or after it ran it (`inject`);
 * - freezes every connection: nothing is forwarded either way and nothing is closed, new
 *   connections are accepted and held — a silent outage; `thaw` forwards what is still wanted (a
 *   request whose client gave up meanwhile never reaches the broker) (`freeze`, `thaw`);
 * - refuses the token: REST calls answer 401, handshakes 403, open streams are cut (`refuseToken`);
 * - cuts the streams (`cutStreams`).
 *
 * Endpoints are REST paths (`/trading/open_trade`), `/candles` for every candle path, or `*`.
 */
import { EventEmitter } from 'node:events';
import http from 'node:http';
import net from 'node:net';
import type { AddressInfo } from 'node:net';

export interface Injected {
  status: number;
  /** The body (JSON-encoded when not a string); default the broker's envelope with `executed:false`. */
  body?: unknown;
  headers?: Record<string, string>;
  /** Forward the call first (the broker runs it), then answer with this instead of its answer. */
  afterBroker?: boolean;
}

interface Rule<T> {
  endpoint: string;
  remaining: number;
  what: T;
}

/** The swagger body of a refused token (reference §1.4). */
export const REFUSED_TOKEN_BODY = { Code: 401, Message: 'The access token is not valid for this.' };

const endpointOf = (path: string): string => {
  const p = path.replace(/\?.*$/, '').replace(/\/+$/, '') || '/';
  return p.startsWith('/candles/') ? '/candles' : p;
};

/**
 * Events: `request` (endpoint) for every REST call received, `forwarded` (endpoint) once the
 * broker answered one, `withheld` (endpoint) when an answer was kept from its client, `injected`
 * (endpoint, status).
 */
export class BrokerProxy extends EventEmitter {
  url = '';
  private server: http.Server | undefined;
  private target!: URL;
  private readonly withholds: Rule<true>[] = [];
  private readonly injections: Rule<Injected>[] = [];
  private frozen = false;
  /** What a freeze holds back, run in order at the thaw. */
  private held: (() => void)[] = [];
  private refusing = false;
  private readonly tunnels = new Set<net.Socket>();
  /** Responses never answered (withheld), ended at stop. */
  private readonly pending = new Set<http.ServerResponse>();
  /** REST calls received per endpoint. */
  readonly seen: Record<string, number> = {};

  async start(target: string): Promise<void> {
    this.target = new URL(target);
    const server = http.createServer((req, res) => this.onRequest(req, res));
    server.on('upgrade', (req: http.IncomingMessage, socket: net.Socket, head: Buffer) => this.onUpgrade(req, socket, head));
    this.server = server;
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
    this.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  }

  /** The next `count` answers of `endpoint` never reach their client (the broker runs the calls). */
  withhold(endpoint: string, count = 1): void {
    this.withholds.push({ endpoint, remaining: count, what: true });
  }

  /** The next `count` calls of `endpoint` are answered with `what` (before or after the broker ran them). */
  inject(endpoint: string, what: Injected, count = 1): void {
    this.injections.push({ endpoint, remaining: count, what });
  }

  /** A silent outage: nothing is forwarded either way, nothing closed, new connections held. */
  freeze(): void {
    this.frozen = true;
  }

  /** The outage ends: what was held is forwarded (requests whose client gave up are dropped). */
  thaw(): void {
    this.frozen = false;
    for (const f of this.held.splice(0)) f();
  }

  /** Every call answers 401, every handshake 403, and the open streams are cut, until `acceptToken`. */
  refuseToken(): void {
    this.refusing = true;
    this.cutStreams();
  }

  acceptToken(): void {
    this.refusing = false;
  }

  /** Cuts every stream (the client sees its websocket close); returns how many. */
  cutStreams(): number {
    const n = this.tunnels.size;
    for (const s of this.tunnels) s.destroy();
    this.tunnels.clear();
    return n;
  }

  reset(): void {
    this.withholds.splice(0);
    this.injections.splice(0);
    this.refusing = false;
    this.thaw();
  }

  async stop(): Promise<void> {
    this.reset();
    for (const res of this.pending) res.destroy();
    this.pending.clear();
    this.cutStreams();
    const server = this.server;
    this.server = undefined;
    if (!server) return;
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  private take<T>(rules: Rule<T>[], endpoint: string): T | undefined {
    const r = rules.find((x) => x.remaining > 0 && (x.endpoint === '*' || x.endpoint === endpoint));
    if (!r) return undefined;
    r.remaining--;
    return r.what;
  }

  /** Runs `f` now, or at the thaw when frozen. */
  private whenFlowing(f: () => void): void {
    if (this.frozen) this.held.push(f);
    else f();
  }

  // ---------------------------------------------------------------- REST and the polling handshake

  private onRequest(req: http.IncomingMessage, res: http.ServerResponse): void {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => this.whenFlowing(() => this.route(req, res, Buffer.concat(chunks))));
  }

  private route(req: http.IncomingMessage, res: http.ServerResponse, body: Buffer): void {
    if (res.destroyed || req.socket.destroyed) return; // the client gave up while it was held: the call never went on
    const endpoint = endpointOf(req.url ?? '/');
    const stream = endpoint.startsWith('/socket.io');
    if (this.refusing) {
      if (stream) return this.answer(res, 403, JSON.stringify({ code: 4, message: 'Forbidden' }));
      return this.answer(res, 401, JSON.stringify(REFUSED_TOKEN_BODY));
    }
    if (stream) return this.forward(req, body, (status, headers, data) => this.answer(res, status, data, headers));
    this.seen[endpoint] = (this.seen[endpoint] ?? 0) + 1;
    this.emit('request', endpoint);
    const injected = this.take(this.injections, endpoint);
    if (injected && !injected.afterBroker) return this.answerWith(res, endpoint, injected);
    const withheld = !injected && this.take(this.withholds, endpoint) === true;
    this.forward(req, body, (status, headers, data) => {
      this.emit('forwarded', endpoint);
      if (injected) return this.answerWith(res, endpoint, injected);
      if (withheld) {
        this.pending.add(res);
        res.on('close', () => this.pending.delete(res));
        this.emit('withheld', endpoint);
        return;
      }
      this.whenFlowing(() => this.answer(res, status, data, headers));
    });
  }

  private answerWith(res: http.ServerResponse, endpoint: string, what: Injected): void {
    const body = what.body === undefined ? { response: { executed: false, error: `HTTP ${what.status}` } } : what.body;
    this.emit('injected', endpoint, what.status);
    this.answer(res, what.status, typeof body === 'string' ? body : JSON.stringify(body), { 'content-type': 'application/json', ...what.headers });
  }

  private answer(res: http.ServerResponse, status: number, data: Buffer | string, headers: http.OutgoingHttpHeaders = { 'content-type': 'application/json' }): void {
    if (res.destroyed) return;
    const { 'content-length': _length, 'transfer-encoding': _te, connection: _c, 'keep-alive': _ka, ...rest } = headers;
    res.writeHead(status, rest);
    res.end(data);
  }

  private forward(req: http.IncomingMessage, body: Buffer, done: (status: number, headers: http.IncomingHttpHeaders, data: Buffer) => void): void {
    const up = http.request(
      { host: this.target.hostname, port: this.target.port, method: req.method, path: req.url, headers: { ...req.headers, host: this.target.host }, agent: false },
      (r) => {
        const chunks: Buffer[] = [];
        r.on('data', (c: Buffer) => chunks.push(c));
        r.on('end', () => done(r.statusCode ?? 502, r.headers, Buffer.concat(chunks)));
      },
    );
    up.on('error', (e) => done(502, { 'content-type': 'text/plain' }, Buffer.from(`proxy: ${e.message}`)));
    up.end(body);
  }

  // ---------------------------------------------------------------- the websocket

  private onUpgrade(req: http.IncomingMessage, client: net.Socket, head: Buffer): void {
    this.whenFlowing(() => {
      if (client.destroyed) return;
      if (this.refusing) {
        client.end('HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n');
        return;
      }
      const up = net.connect(Number(this.target.port), this.target.hostname);
      this.tunnels.add(client);
      const lines = [`${req.method} ${req.url} HTTP/1.1`];
      for (let i = 0; i < req.rawHeaders.length; i += 2) lines.push(`${req.rawHeaders[i]}: ${req.rawHeaders[i]!.toLowerCase() === 'host' ? this.target.host : req.rawHeaders[i + 1]}`);
      up.on('connect', () => {
        up.write(lines.join('\r\n') + '\r\n\r\n');
        if (head.length) up.write(head);
      });
      this.relay(client, up);
      this.relay(up, client);
      client.on('close', () => this.tunnels.delete(client));
    });
  }

  /** Bytes and the close of `from` reach `to`, except while frozen (then at the thaw). */
  private relay(from: net.Socket, to: net.Socket): void {
    from.on('data', (d: Buffer) => this.whenFlowing(() => to.destroyed || to.write(d)));
    from.on('error', () => undefined);
    from.on('close', () => this.whenFlowing(() => to.destroy()));
  }
}
