/**
 * Http1Connection (src/server/http1/connection.ts) behind httpSocketServer, over real loopback
 * sockets, with a test handler whose answers are synchronous or held until the test releases
 * them: answers in request order, backpressure against clients that pipeline and do not read,
 * the bound of 64 unanswered requests (enforced within one socket read), the request budget
 * (bytes held between reads are copies, charged, 503 past it), the answers budget, the
 * connection cap, half-closed clients, HTTP/1.0 and Connection: close, HEAD, 100 Continue, the
 * request timeout (408, slow clients), drain and forceClose. The keep-alive idle bound (5 s) is tested by calling
 * the connection's sweep with a later clock, not by waiting 5 s. Every wait is for an event (bytes,
 * a close, a handler call); the only pauses assert that nothing happens.
 */
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { ConnectionAdmission } from '../../../src/server/admission';
import { StatsStore } from '../../../src/stats/store';
import { PEER_BACKLOG_HIGH, serverBudgets } from '../../../src/server/byte-budget';
import { errorAnswer, type Exchange, type ExchangeHandler, Http1Connection, MAX_UNANSWERED } from '../../../src/server/http1/connection';
import type { BodyPlan, RequestHead } from '../../../src/server/http1/parser';
import { type HttpSocketOptions, type HttpSocketServer, httpSocketServer, KEEP_ALIVE_TIMEOUT_MS } from '../../../src/server/http-socket';
import type { Logger } from '../../../src/telemetry/logger';
import { quietFor, waitFor } from '../../support/wait';

const quiet: Logger = { debug: () => {}, info: () => {}, warn: () => {}, error: () => {}, enabled: () => false };

/** Longest any awaited event may take: far above what each needs, below Jest's test timeout. */
const SAFETY_MS = 10_000;

// ---- events ----

/** Something that changes on events; `until` resolves once `check` holds, checked at every change. */
class Watched {
  private readonly waiters = new Set<() => void>();

  changed(): void {
    for (const w of [...this.waiters]) w();
  }

  until(check: () => boolean, what: string, timeoutMs = SAFETY_MS): Promise<void> {
    return new Promise((resolve, reject) => {
      const test = (): void => {
        if (!check()) return;
        clearTimeout(timer);
        this.waiters.delete(test);
        resolve();
      };
      const timer = setTimeout(() => {
        this.waiters.delete(test);
        reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`));
      }, timeoutMs);
      this.waiters.add(test);
      test();
    });
  }
}

// ---- the handler ----

/**
 * Answers by path: /sync/<text> at once with <text>; /hold/<id> when the test releases <id>
 * (or at once while `holdAll` is false and `answerHeldAtOnce` is set); /echo/… the body;
 * /sized/<n> a body of n bytes; /throw throws; anything else 404.
 */
class TestHandler extends Watched implements ExchangeHandler {
  readonly calls: string[] = [];
  private readonly held = new Map<string, (body?: string) => void>();
  answerHeldAtOnce = false;

  plan(head: RequestHead): BodyPlan {
    return head.path.startsWith('/echo') ? { keep: true, limit: 4096 } : { keep: false };
  }

  handle(head: RequestHead, body: Buffer, exchange: Exchange): void {
    this.calls.push(`${head.method} ${head.target}`);
    try {
      const [, kind, arg = ''] = head.path.split('/');
      switch (kind) {
        case 'sync':
          exchange.answer(200, 'Content-Type: text/plain\r\n', arg);
          break;
        case 'hold':
          if (this.answerHeldAtOnce) exchange.answer(200, '', arg);
          else this.held.set(arg, (text = arg) => exchange.answer(200, '', text));
          break;
        case 'echo':
          exchange.answer(200, '', body.toString('latin1'));
          break;
        case 'sized':
          exchange.answer(200, '', 'x'.repeat(Number(arg)));
          break;
        case 'throw':
          throw new Error('a handler defect');
        default:
          errorAnswer(exchange, 404);
      }
    } finally {
      this.changed();
    }
  }

  isHeld(id: string): boolean {
    return this.held.has(id);
  }

  release(id: string, body?: string): void {
    const answer = this.held.get(id);
    if (answer === undefined) throw new Error(`nothing held for ${id}`);
    this.held.delete(id);
    answer(body);
  }

  releaseAll(): void {
    for (const id of [...this.held.keys()]) this.release(id);
  }

  calledTimes(n: number): Promise<void> {
    return this.until(() => this.calls.length >= n, `${n} handler calls (${this.calls.length} so far)`);
  }

  holding(id: string): Promise<void> {
    return this.until(() => this.held.has(id), `the handler to hold ${id}`);
  }
}

// ---- servers ----

interface Started {
  srv: HttpSocketServer;
  port: number;
  handler: TestHandler;
  /** The server side of each accepted connection, in order, with whether it saw the client's end. */
  sockets: net.Socket[];
  serverSide: Watched;
}

const servers: Started[] = [];
const clients: Client[] = [];

async function start(requestTimeoutMs = 0, options: Pick<HttpSocketOptions, 'budgets' | 'admission'> = {}): Promise<Started> {
  const handler = new TestHandler();
  const srv = httpSocketServer(handler, { logger: quiet, requestTimeoutMs, ...options });
  const sockets: net.Socket[] = [];
  const serverSide = new Watched();
  srv.server.on('connection', (s: net.Socket) => {
    sockets.push(s);
    s.on('end', () => serverSide.changed());
    s.on('close', () => serverSide.changed());
    serverSide.changed();
  });
  await new Promise<void>((resolve) => srv.server.listen(0, '127.0.0.1', resolve));
  const started = { srv, port: (srv.server.address() as AddressInfo).port, handler, sockets, serverSide };
  servers.push(started);
  return started;
}

afterEach(async () => {
  for (const c of clients.splice(0)) c.socket.destroy();
  for (const s of servers.splice(0)) {
    s.handler.answerHeldAtOnce = true;
    s.handler.releaseAll();
    s.srv.forceClose();
    await s.srv.drain();
  }
});

// ---- a raw client ----

class Client extends Watched {
  readonly socket: net.Socket;
  private readonly chunks: Buffer[] = [];
  private joined: string | undefined;
  /** Final responses parsed so far, as bytes arrive (so that thousands cost no re-parsing). */
  readonly parsed: Response[] = [];
  /** Interim (1xx) response heads. */
  readonly interim: string[] = [];
  /** Received bytes not yet parsed into a response. */
  private unparsed = '';
  /** Indexes of the final responses that have no body (answers to HEAD). */
  readonly noBody = new Set<number>();
  /** The server ended its side. */
  ended = false;
  closed = false;
  error: Error | undefined;

  constructor(port: number, options: { read?: boolean; allowHalfOpen?: boolean } = {}) {
    super();
    this.socket = net.connect({ port, host: '127.0.0.1', allowHalfOpen: options.allowHalfOpen ?? false });
    clients.push(this);
    if (options.read ?? true) this.startReading();
    this.socket.on('end', () => {
      this.ended = true;
      this.changed();
    });
    this.socket.on('close', () => {
      this.closed = true;
      this.changed();
    });
    this.socket.on('error', (err) => {
      this.error = err;
      this.changed();
    });
  }

  startReading(): void {
    this.socket.on('data', (chunk: Buffer) => {
      this.chunks.push(chunk);
      this.joined = undefined;
      this.unparsed += chunk.toString('latin1');
      const { responses, interim, rest } = parseResponses(this.unparsed, (i) => this.noBody.has(this.parsed.length + i));
      this.parsed.push(...responses);
      this.interim.push(...interim);
      this.unparsed = rest;
      this.changed();
    });
  }

  connected(): Promise<void> {
    return new Promise((resolve, reject) => {
      if (!this.socket.connecting) resolve();
      this.socket.once('connect', resolve);
      this.socket.once('error', reject);
    });
  }

  /** Everything received (for short exchanges). */
  get text(): string {
    this.joined ??= Buffer.concat(this.chunks).toString('latin1');
    return this.joined;
  }

  /** Bytes received and not part of a complete response. */
  get rest(): string {
    return this.unparsed;
  }

  write(s: string): void {
    this.socket.write(s, 'latin1');
  }

  /** Resolves with the responses once at least `n` final ones have arrived. */
  async responses(n: number): Promise<Response[]> {
    await this.until(() => this.parsed.length >= n || this.closed, `${n} responses (${this.parsed.length} so far)`);
    if (this.parsed.length < n) throw new Error(`the connection closed after ${this.parsed.length} of ${n} responses: ${JSON.stringify(this.text.slice(0, 2000))}`);
    return this.parsed;
  }

  whenClosed(): Promise<void> {
    return this.until(() => this.closed, 'the connection to close');
  }

  whenEnded(): Promise<void> {
    return this.until(() => this.ended || this.closed, 'the server to end the connection');
  }
}

interface Response {
  status: number;
  /** Header names in lower case; repeated ones joined with ", ". */
  headers: Record<string, string>;
  body: string;
  /** The response's head (status line and header lines) as sent. */
  head: string;
}

/** The complete responses at the start of `text` (1xx interim ones apart); `noBody(i)`: the i-th final one has no body (HEAD). */
function parseResponses(text: string, noBody: (i: number) => boolean = () => false): { responses: Response[]; interim: string[]; rest: string } {
  const responses: Response[] = [];
  const interim: string[] = [];
  let at = 0;
  for (;;) {
    const end = text.indexOf('\r\n\r\n', at);
    if (end < 0) break;
    const head = text.slice(at, end);
    const [statusLine = '', ...lines] = head.split('\r\n');
    const m = /^HTTP\/1\.[01] (\d{3}) /.exec(statusLine);
    if (m === null) throw new Error(`not a status line: ${JSON.stringify(statusLine)} in ${JSON.stringify(text.slice(0, 500))}`);
    const status = Number(m[1]);
    if (status < 200) {
      interim.push(head);
      at = end + 4;
      continue;
    }
    const headers: Record<string, string> = {};
    for (const line of lines) {
      const colon = line.indexOf(':');
      const name = line.slice(0, colon).toLowerCase();
      const value = line.slice(colon + 1).trim();
      headers[name] = headers[name] === undefined ? value : `${headers[name]}, ${value}`;
    }
    const length = noBody(responses.length) ? 0 : Number(headers['content-length'] ?? NaN);
    if (!Number.isInteger(length)) throw new Error(`a response without Content-Length: ${head}`);
    if (text.length < end + 4 + length) break;
    responses.push({ status, headers, body: text.slice(end + 4, end + 4 + length), head });
    at = end + 4 + length;
  }
  return { responses, interim, rest: text.slice(at) };
}

const get = (path: string, extra = ''): string => `GET ${path} HTTP/1.1\r\nHost: x\r\n${extra}\r\n`;

/** Resolves once the server side of a connection has read `n` bytes (no event says so: polled). */
const serverRead = (socket: () => net.Socket | undefined, n: number): Promise<void> =>
  waitFor(() => (socket()?.bytesRead ?? 0) >= n, `the server to read ${n} bytes`);

// ---------------------------------------------------------------------------------------------

describe('pipelining', () => {
  test('answers go out in request order even when later requests finish first', async () => {
    const { port, handler } = await start();
    const c = new Client(port);
    c.write(get('/hold/a') + get('/sync/b') + get('/hold/c') + get('/sync/d') + get('/hold/e'));
    await handler.calledTimes(5);
    expect(handler.calls).toEqual(['GET /hold/a', 'GET /sync/b', 'GET /hold/c', 'GET /sync/d', 'GET /hold/e']);
    handler.release('e');
    handler.release('c');
    handler.release('a');
    const responses = await c.responses(5);
    expect(responses.map((r) => r.body)).toEqual(['a', 'b', 'c', 'd', 'e']);
    expect(responses.every((r) => r.status === 200 && r.headers.connection === undefined)).toBe(true);
    expect(c.rest).toBe('');
    // The connection stays open for more.
    c.write(get('/sync/f'));
    expect((await c.responses(6))[5]!.body).toBe('f');
  });

  test('an error is answered after the earlier answers still owed, then the connection closes', async () => {
    const { port, handler } = await start();
    const c = new Client(port);
    c.write(get('/hold/a') + get('/sync/b') + 'NOT A REQUEST\r\n\r\n' + get('/sync/never'));
    await handler.holding('a');
    await handler.calledTimes(2);
    expect(c.text).toBe('');
    handler.release('a');
    const responses = await c.responses(3);
    await c.whenClosed();
    expect(responses.map((r) => r.status)).toEqual([200, 200, 400]);
    expect(responses[2]!.headers.connection).toBe('close');
    expect(responses[2]!.body).toBe('Bad Request\n');
    expect(handler.calls).toEqual(['GET /hold/a', 'GET /sync/b']);
  });

  test('a handler that throws costs its own request a 500, and the next request is answered', async () => {
    const { port, handler } = await start();
    const c = new Client(port);
    c.write(get('/sync/a') + get('/throw') + get('/sync/c'));
    const responses = await c.responses(3);
    expect(responses.map((r) => r.status)).toEqual([200, 500, 200]);
    expect(responses[1]!.headers['x-error-detail']).toBe('a handler defect');
    expect(handler.calls).toHaveLength(3);
  });
});

describe('backpressure', () => {
  test('with answers held, reading pauses at the unanswered bound; all are answered in order once released', async () => {
    const { port, handler, sockets, serverSide } = await start();
    const count = 20_000;
    const c = new Client(port);
    let all = '';
    for (let i = 0; i < count; i++) all += get(`/hold/${i}`);
    c.write(all);
    // Pausing is no event: polled.
    await waitFor(() => sockets[0]?.isPaused() === true, 'the server to pause reading');
    await handler.calledTimes(64);
    const calledWhenPaused = handler.calls.length;
    // A read of at most 64 KiB can carry ~2000 of these requests; the server then stops reading.
    expect(calledWhenPaused).toBeLessThan(count / 4);
    await quietFor(200);
    expect(handler.calls.length).toBe(calledWhenPaused);

    handler.answerHeldAtOnce = true;
    handler.releaseAll();
    const responses = await c.responses(count);
    expect(responses.map((r) => r.body)).toEqual(Array.from({ length: count }, (_, i) => String(i)));
    expect(handler.calls).toHaveLength(count);
  });

  test('a client that pipelines thousands of requests and never reads does not make the server buffer without bound', async () => {
    const { port, handler, sockets, serverSide } = await start();
    const count = 60_000;
    const answerBytes = 1000;
    const request = get(`/sized/${answerBytes}`);
    const c = new Client(port, { read: false });
    await c.connected();
    c.write(request.repeat(count));
    // Pausing is no event: polled.
    await waitFor(() => sockets[0]?.isPaused() === true, 'the server to pause reading');
    const server = sockets[0]!;
    const calledWhenPaused = handler.calls.length;
    // What the kernel buffers hold (a few MB here), PEER_BACKLOG_HIGH unsent, and the answers of one read.
    expect(calledWhenPaused).toBeLessThan(count / 4);
    const oneRead = Math.ceil((64 * 1024) / request.length) * (answerBytes + 200);
    expect(server.writableLength).toBeLessThanOrEqual(PEER_BACKLOG_HIGH + oneRead);
    await quietFor(200);
    expect(handler.calls.length).toBe(calledWhenPaused);
    expect(server.isPaused()).toBe(true);

    c.startReading();
    const responses = await c.responses(count);
    expect(responses.every((r) => r.status === 200 && r.body.length === answerBytes)).toBe(true);
    expect(handler.calls).toHaveLength(count);
  });
});

describe('the unanswered bound (64)', () => {
  const pipelined = (count: number): string => Array.from({ length: count }, (_, i) => get(`/hold/${i}`)).join('');
  const bodies = (count: number): string[] => Array.from({ length: count }, (_, i) => String(i));

  test('of 200 requests in one write, with answers held, exactly 64 are read; one answer lets exactly one more in; all answers let all 200 in, answered in order', async () => {
    expect(MAX_UNANSWERED).toBe(64);
    const { port, handler } = await start();
    const count = 200;
    const c = new Client(port);
    c.write(pipelined(count));
    await handler.calledTimes(MAX_UNANSWERED);
    await quietFor(200);
    expect(handler.calls).toHaveLength(MAX_UNANSWERED);

    handler.release('0');
    await handler.calledTimes(MAX_UNANSWERED + 1);
    expect((await c.responses(1))[0]!.body).toBe('0');
    await quietFor(200);
    expect(handler.calls).toHaveLength(MAX_UNANSWERED + 1);

    handler.answerHeldAtOnce = true;
    handler.releaseAll();
    const responses = await c.responses(count);
    expect(responses.map((r) => r.body)).toEqual(bodies(count));
    expect(handler.calls).toEqual(bodies(count).map((i) => `GET /hold/${i}`));
  });

  test('requests held back wait for the server: no 408 while they wait, and an unfinished one after them gets its whole bound from when reading resumes', async () => {
    const BOUND_MS = 300;
    const { port, handler } = await start(BOUND_MS);
    const count = MAX_UNANSWERED + 5;
    const c = new Client(port);
    c.write(pipelined(count) + 'GET /sync/last HTTP/1.1\r\n');
    await handler.calledTimes(MAX_UNANSWERED);
    // Several bounds (and sweeps) pass while the requests wait for answers.
    await quietFor(3 * BOUND_MS);
    expect(c.text).toBe('');
    expect(c.ended || c.closed).toBe(false);

    handler.answerHeldAtOnce = true;
    const resumed = Date.now();
    handler.releaseAll();
    const responses = await c.responses(count + 1);
    expect(Date.now() - resumed).toBeGreaterThanOrEqual(BOUND_MS - 20);
    expect(responses.slice(0, count).map((r) => r.body)).toEqual(bodies(count));
    expect(responses[count]!.status).toBe(408);
    expect(handler.calls).toHaveLength(count);
  });

  test('drain with requests held back: they are not read; the answers owed go out, the last with Connection: close', async () => {
    const { srv, port, handler } = await start();
    const c = new Client(port);
    c.write(pipelined(MAX_UNANSWERED + 6));
    await handler.calledTimes(MAX_UNANSWERED);
    const drained = srv.drain();
    handler.answerHeldAtOnce = true;
    handler.releaseAll();
    await c.whenEnded();
    await drained;
    expect(c.parsed.map((r) => r.body)).toEqual(bodies(MAX_UNANSWERED));
    expect(c.parsed[MAX_UNANSWERED - 1]!.headers.connection).toBe('close');
    expect(handler.calls).toHaveLength(MAX_UNANSWERED);
  });

  test('a client that pipelines more than 64 requests and then ends its side gets every answer, then the connection closes', async () => {
    const { port, handler } = await start();
    const count = MAX_UNANSWERED + 6;
    const c = new Client(port);
    c.write(pipelined(count));
    c.socket.end();
    await handler.calledTimes(MAX_UNANSWERED);
    // The client's end arrives meanwhile; it ends nothing while requests are held back.
    await quietFor(200);
    expect(c.text).toBe('');
    handler.answerHeldAtOnce = true;
    handler.releaseAll();
    const responses = await c.responses(count);
    expect(responses.map((r) => r.body)).toEqual(bodies(count));
    await c.whenClosed();
  });
});

describe('the request budget (REQUEST_MAX_BUFFERED_BYTES)', () => {
  const BODY = 3000;
  const PIECE = 500;
  const postHead = `POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: ${BODY}\r\n\r\n`;

  /**
   * Sends postHead, then the body in pieces, each once the server has read the one before (so
   * that each is a read of its own), until the body is sent or the server ends the connection.
   * `read(n)`: the server has read n bytes of the body.
   */
  async function sendInPieces(c: Client, socket: () => net.Socket | undefined, read: (n: number) => void = () => {}): Promise<void> {
    c.write(postHead);
    let sent = postHead.length;
    await serverRead(socket, sent);
    for (let at = PIECE; at <= BODY && !c.ended && !c.closed; at += PIECE) {
      c.write('b'.repeat(PIECE));
      sent += PIECE;
      await waitFor(() => (socket()?.bytesRead ?? 0) >= sent || c.ended || c.closed, `the server to read ${sent} bytes`);
      read(at);
    }
  }

  test('a body that spans reads is held as a copy of about its size, charged; with a budget that can hold it the request is answered, and the budget is given back on completion and on close', async () => {
    // Bodies may hold seven eighths of it: room for the 4,096 bytes a 3,000-byte body grows to.
    const budgets = serverBudgets(4800);
    const { port, sockets, serverSide } = await start(0, { budgets });
    const c = new Client(port);
    const charged: Array<[number, number]> = [];
    await sendInPieces(c, () => sockets[0], (n) => {
      if (n < BODY) charged.push([n, budgets.requests.held]);
    });
    // Not a view of the socket read (charged nothing), nor the read itself: a copy of what came.
    for (const [n, held] of charged) {
      expect(held).toBeGreaterThanOrEqual(n);
      expect(held).toBeLessThanOrEqual(Math.max(512, 2 * n));
    }
    const [response] = await c.responses(1);
    expect(response!.status).toBe(200);
    expect(response!.body).toBe('b'.repeat(BODY));
    expect(budgets.requests.held).toBe(0);

    // A second request the client leaves mid-body.
    c.write(postHead + 'b'.repeat(PIECE));
    await serverRead(() => sockets[0], 2 * postHead.length + BODY + PIECE);
    expect(budgets.requests.held).toBeGreaterThanOrEqual(PIECE);
    c.socket.destroy();
    await serverSide.until(() => sockets[0]?.closed === true, 'the server side to close');
    expect(budgets.requests.held).toBe(0);
  });

  test('a body larger than the budget, arriving in pieces: 503, the connection closes, and the budget is given back', async () => {
    const budgets = serverBudgets(2048);
    const { port, handler, sockets, serverSide } = await start(0, { budgets });
    const c = new Client(port);
    await sendInPieces(c, () => sockets[0]);
    const [response] = await c.responses(1);
    expect(response!.status).toBe(503);
    expect(response!.headers['x-error-detail']).toContain('REQUEST_MAX_BUFFERED_BYTES');
    expect(response!.headers.connection).toBe('close');
    await c.whenClosed();
    await serverSide.until(() => sockets[0]?.closed === true, 'the server side to close');
    expect(budgets.requests.held).toBe(0);
    expect(handler.calls).toEqual([]);
  });

  test('an unfinished head sent slowly is charged as it arrives, and given back when the client leaves', async () => {
    const budgets = serverBudgets(4096);
    const { port, sockets, serverSide } = await start(0, { budgets });
    const c = new Client(port);
    let sent = 0;
    for (const piece of ['GET /sync/a HTTP/1.1\r\n', 'Host: x\r\n', `X-Pad: ${'p'.repeat(300)}\r\n`]) {
      c.write(piece);
      sent += piece.length;
      await serverRead(() => sockets[0], sent);
      expect(budgets.requests.held).toBe(sent);
    }
    c.socket.destroy();
    await serverSide.until(() => sockets[0]?.closed === true, 'the server side to close');
    expect(budgets.requests.held).toBe(0);
  });

  test('an unfinished head the budget cannot hold: 503 and the connection closes', async () => {
    const budgets = serverBudgets(1024);
    const { port, handler, sockets, serverSide } = await start(0, { budgets });
    const c = new Client(port);
    c.write('GET /sync/a HTTP/1.1\r\nHost: x\r\n');
    let sent = 'GET /sync/a HTTP/1.1\r\nHost: x\r\n'.length;
    await serverRead(() => sockets[0], sent);
    while (!c.ended && !c.closed) {
      const piece = `X-Pad: ${'p'.repeat(400)}\r\n`;
      c.write(piece);
      sent += piece.length;
      await waitFor(() => c.ended || c.closed || (sockets[0]?.bytesRead ?? 0) >= sent, 'the server to read the piece or end the connection');
    }
    expect(c.parsed.map((r) => r.status)).toEqual([503]);
    await serverSide.until(() => sockets[0]?.closed === true, 'the server side to close');
    expect(budgets.requests.held).toBe(0);
    expect(handler.calls).toEqual([]);
  });
});

describe('the answers budget', () => {
  test('a client that does not read its answers is closed once the process budget cannot hold its backlog; the budget is given back', async () => {
    const budgets = serverBudgets(Number.MAX_SAFE_INTEGER, 32 * 1024);
    const { port, handler, sockets } = await start(0, { budgets });
    const c = new Client(port, { read: false });
    await c.connected();
    // 8 MiB of answers a write, until the kernel's buffers are full and the backlog passes the
    // budget. Each write ends in an unfinished request, so that the connection is never idle
    // (no keep-alive bound closes it).
    const batch = get(`/sized/${1 << 20}`).repeat(8) + 'GET /sync/tail HTTP/1.1\r\n';
    const rest = 'Host: x\r\n\r\n';
    let sent = 0;
    while (sockets[0]?.closed !== true) {
      const write = (sent === 0 ? '' : rest) + batch;
      c.write(write);
      sent += write.length;
      // The server's FIN waits behind the answers the client does not read: its side's close is the event.
      await waitFor(() => sockets[0]?.closed === true || (sockets[0]?.bytesRead ?? 0) >= sent, 'the server to read the batch or close the connection');
    }
    expect(handler.calls.length).toBeGreaterThan(0);
    expect(budgets.answers.held).toBe(0);
  });
});

describe('HTTP_MAX_CONNECTIONS and HTTP_MAX_CONNECTIONS_PER_PEER (admission)', () => {
  /** The HTTP port's admission with these caps, the program's idle bounds. */
  function capped(maxConnections: number, maxPerPeer: number) {
    const stats = new StatsStore();
    const admission = new ConnectionAdmission(Infinity, stats, undefined).listener({
      listener: 'http',
      maxConnections,
      maxConnectionsSetting: 'HTTP_MAX_CONNECTIONS',
      maxPerPeer,
      maxPerPeerSetting: 'HTTP_MAX_CONNECTIONS_PER_PEER',
      handshakeTimeoutMs: 0,
      firstRequestTimeoutMs: KEEP_ALIVE_TIMEOUT_MS,
      idleTimeoutMs: KEEP_ALIVE_TIMEOUT_MS,
    });
    return { admission, stats };
  }

  test('with 2, a third connection is served and the one idle the longest is closed for it', async () => {
    const { admission, stats } = capped(2, 0);
    const { port, handler } = await start(0, { admission });
    const a = new Client(port);
    a.write(get('/sync/a'));
    await a.responses(1);
    const b = new Client(port);
    b.write(get('/sync/b'));
    await b.responses(1);

    const third = new Client(port);
    third.write(get('/sync/c'));
    expect((await third.responses(1))[0]!.body).toBe('c');
    // a served last before b: it goes.
    await a.whenClosed();
    b.write(get('/sync/b2'));
    expect((await b.responses(2))[1]!.body).toBe('b2');
    expect(handler.calls).toEqual(['GET /sync/a', 'GET /sync/b', 'GET /sync/c', 'GET /sync/b2']);
    expect(stats.counter('ratelimit.server.connections_evicted.__listener=http').value).toBe(1);
    expect(admission.size).toBe(2);
  });

  test('with 2 per peer, a third connection from the same address is closed at once and the two are still served', async () => {
    const { admission, stats } = capped(100, 2);
    const { port, handler, sockets } = await start(0, { admission });
    const a = new Client(port);
    const b = new Client(port);
    a.write(get('/sync/a'));
    b.write(get('/sync/b'));
    await a.responses(1);
    await b.responses(1);

    const third = new Client(port);
    third.write(get('/sync/c'));
    await third.whenClosed();
    expect(third.text).toBe('');
    expect(stats.counter('ratelimit.server.connections_refused.__listener=http').value).toBe(1);
    a.write(get('/sync/a2'));
    expect((await a.responses(2))[1]!.body).toBe('a2');
    expect(handler.calls).toEqual(['GET /sync/a', 'GET /sync/b', 'GET /sync/a2']);
    expect(sockets.filter((s) => !s.destroyed)).toHaveLength(2);
  });
});

describe('half-close', () => {
  test('a client that ends its side after its request still gets the delayed answer, then the connection closes', async () => {
    const { port, handler, sockets, serverSide } = await start();
    const c = new Client(port);
    c.write(get('/hold/a'));
    c.socket.end();
    await handler.holding('a');
    await serverSide.until(() => sockets[0]?.readableEnded === true, 'the server to see the client end');
    handler.release('a');
    const [response] = await c.responses(1);
    expect(response!.body).toBe('a');
    expect(response!.headers.connection).toBe('close');
    await c.whenClosed();
  });

  test('two pipelined requests then the end: both answered in order', async () => {
    const { port, handler, sockets, serverSide } = await start();
    const c = new Client(port);
    c.write(get('/hold/a') + get('/hold/b'));
    c.socket.end();
    await handler.calledTimes(2);
    await serverSide.until(() => sockets[0]?.readableEnded === true, 'the server to see the client end');
    handler.release('b');
    handler.release('a');
    const responses = await c.responses(2);
    expect(responses.map((r) => r.body)).toEqual(['a', 'b']);
    expect(responses[1]!.headers.connection).toBe('close');
    await c.whenClosed();
  });

  test('a client that ends mid-request gets nothing and the connection closes', async () => {
    const { port, handler } = await start();
    const c = new Client(port);
    c.write('GET /sync/a HTTP/1.1\r\nHost: x\r\n');
    c.socket.end();
    await c.whenClosed();
    expect(c.text).toBe('');
    expect(handler.calls).toEqual([]);
  });

  test('a client that resets the connection while its answer is held costs nothing; the server serves on', async () => {
    const { port, handler, sockets, serverSide } = await start();
    const c = new Client(port);
    c.write(get('/hold/a'));
    await handler.holding('a');
    c.socket.resetAndDestroy();
    await serverSide.until(() => sockets[0]?.destroyed === true, 'the server side to close');
    expect(() => handler.release('a')).not.toThrow();
    const d = new Client(port);
    d.write(get('/sync/b'));
    expect((await d.responses(1))[0]!.body).toBe('b');
  });
});

describe('connection close', () => {
  test('HTTP/1.0 closes after the answer, which says Connection: close', async () => {
    const { port } = await start();
    const c = new Client(port);
    c.write('GET /sync/a HTTP/1.0\r\n\r\n');
    const [response] = await c.responses(1);
    expect(response!.head).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
    expect(response!.headers.connection).toBe('close');
    await c.whenEnded();
  });

  test('HTTP/1.0 with Connection: keep-alive stays open and says so', async () => {
    const { port } = await start();
    const c = new Client(port);
    c.write('GET /sync/a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n');
    const [first] = await c.responses(1);
    expect(first!.headers.connection).toBe('keep-alive');
    c.write('GET /sync/b HTTP/1.0\r\n\r\n');
    const responses = await c.responses(2);
    expect(responses[1]!.body).toBe('b');
    expect(responses[1]!.headers.connection).toBe('close');
    await c.whenEnded();
  });

  test('Connection: close closes after its answer, and requests pipelined after it are not read', async () => {
    const { port, handler } = await start();
    const c = new Client(port);
    c.write(get('/hold/a') + get('/sync/b', 'Connection: close\r\n') + get('/sync/never'));
    await handler.holding('a');
    handler.release('a');
    const responses = await c.responses(2);
    await c.whenEnded();
    expect(responses.map((r) => [r.body, r.headers.connection])).toEqual([
      ['a', undefined],
      ['b', 'close'],
    ]);
    expect(c.rest).toBe('');
    expect(handler.calls).toEqual(['GET /hold/a', 'GET /sync/b']);
  });

  test('HEAD answers carry the Content-Length of the body they do not send', async () => {
    const { port } = await start();
    const c = new Client(port);
    c.noBody.add(0);
    c.write('HEAD /sync/hello HTTP/1.1\r\nHost: x\r\n\r\n' + get('/sync/after'));
    const responses = await c.responses(2);
    expect(responses[0]!.status).toBe(200);
    expect(responses[0]!.headers['content-length']).toBe('5');
    expect(responses[0]!.body).toBe('');
    // The next answer starts right after the head of the first: no body bytes in between.
    expect(c.text.indexOf('HTTP/1.1 200', 1)).toBe(responses[0]!.head.length + 4);
    expect(responses[1]!.body).toBe('after');
  });
});

describe('100 Continue', () => {
  test('a client that waits for 100 Continue gets it before it sends the body', async () => {
    const { port } = await start();
    const c = new Client(port);
    c.write('POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n');
    await c.until(() => c.text.length >= 'HTTP/1.1 100 Continue\r\n\r\n'.length, 'the interim answer');
    expect(c.text).toBe('HTTP/1.1 100 Continue\r\n\r\n');
    c.write('hello');
    const [response] = await c.responses(1);
    expect(response!.status).toBe(200);
    expect(response!.body).toBe('hello');
  });

  test('behind an answer still owed, 100 Continue follows that answer instead of never coming', async () => {
    const { port, handler } = await start();
    const c = new Client(port);
    c.write(get('/hold/a') + 'POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n');
    await handler.calledTimes(1);
    handler.release('a');
    await c.until(() => c.text.endsWith('HTTP/1.1 100 Continue\r\n\r\n'), 'the interim answer after the held one');
    c.write('hello');
    const responses = await c.responses(2);
    expect(responses.map((r) => r.body)).toEqual(['a', 'hello']);
  });

  test('a declared body over the limit is 413 at once, with no 100 Continue', async () => {
    const { port } = await start();
    const c = new Client(port);
    c.write('POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5000\r\n\r\n');
    const [response] = await c.responses(1);
    await c.whenEnded();
    expect(response!.status).toBe(413);
    expect(c.interim).toEqual([]);
  });

  test('no 100 Continue when there is no body to wait for', async () => {
    const { port } = await start();
    const c = new Client(port);
    c.write(get('/sync/a', 'Expect: 100-continue\r\n'));
    await c.responses(1);
    expect(c.text).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
  });
});

describe('request timeout (408)', () => {
  const BOUND_MS = 300;

  test('headers that do not all arrive in time: 408, then the connection closes', async () => {
    const { port, handler } = await start(BOUND_MS);
    const c = new Client(port);
    await c.connected();
    const t0 = Date.now();
    c.write('GET /sync/a HTTP/1.1\r\nHost: x\r\n');
    const [response] = await c.responses(1);
    await c.whenEnded();
    expect(Date.now() - t0).toBeGreaterThanOrEqual(BOUND_MS - 20);
    expect(response!.status).toBe(408);
    expect(response!.headers.connection).toBe('close');
    expect(handler.calls).toEqual([]);
  });

  test('a body that does not all arrive in time: 408, then the connection closes', async () => {
    const { port, handler } = await start(BOUND_MS);
    const c = new Client(port);
    c.write('POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc');
    const [response] = await c.responses(1);
    await c.whenEnded();
    expect(response!.status).toBe(408);
    expect(handler.calls).toEqual([]);
  });

  test('a slow-loris client sending its head one byte at a time gets 408, not an unbounded wait', async () => {
    const { port, handler } = await start(BOUND_MS);
    const c = new Client(port);
    await c.connected();
    const head = get('/sync/slow', `X-Padding: ${'p'.repeat(200)}\r\n`);
    // The client's pace: a byte every 20 ms, so the head would take ~5 s.
    let sent = 0;
    const drip = setInterval(() => {
      if (c.closed || c.ended || sent >= head.length) clearInterval(drip);
      else c.write(head[sent++]!);
    }, 20);
    try {
      const [response] = await c.responses(1);
      await c.whenEnded();
      expect(response!.status).toBe(408);
      expect(sent).toBeLessThan(head.length);
      expect(handler.calls).toEqual([]);
    } finally {
      clearInterval(drip);
    }
  });

  test('a client that only sends empty lines does not hold the connection beyond the headers bound', async () => {
    const { port } = await start(BOUND_MS);
    const c = new Client(port);
    await c.connected();
    const drip = setInterval(() => {
      if (c.closed || c.ended) clearInterval(drip);
      else c.write('\r\n');
    }, 20);
    try {
      await c.until(() => c.ended || c.closed, 'the server to close a connection that sends only empty lines', 5 * BOUND_MS + 2000);
    } finally {
      clearInterval(drip);
    }
  });

  test('the bound is per request: an idle keep-alive connection between requests gets no 408', async () => {
    const { port } = await start(BOUND_MS);
    const c = new Client(port);
    c.write(get('/sync/a'));
    await c.responses(1);
    await quietFor(2 * BOUND_MS);
    expect(c.ended || c.closed).toBe(false);
    c.write(get('/sync/b'));
    const responses = await c.responses(2);
    expect(responses.map((r) => r.status)).toEqual([200, 200]);
  });
});

describe('sweep (the time bounds, with a later clock)', () => {
  const LIMITS = { requestTimeoutMs: 0, headersTimeoutMs: 60_000 };
  /** Admission's clock runs this far ahead of performance.now(). */
  let ahead = 0;
  const admission = new ConnectionAdmission(Infinity, undefined, undefined, () => performance.now() + ahead).listener({
    listener: 'http',
    maxConnections: Infinity,
    maxConnectionsSetting: '',
    maxPerPeer: 0,
    maxPerPeerSetting: '',
    handshakeTimeoutMs: 0,
    firstRequestTimeoutMs: KEEP_ALIVE_TIMEOUT_MS,
    idleTimeoutMs: KEEP_ALIVE_TIMEOUT_MS,
  });
  let server: net.Server | undefined;
  const accepted: net.Socket[] = [];

  afterEach(async () => {
    ahead = 0;
    for (const c of clients.splice(0)) c.socket.destroy();
    for (const a of accepted.splice(0)) a.destroy();
    const s = server;
    server = undefined;
    if (s !== undefined) await new Promise<void>((resolve) => s.close(() => resolve()));
  });

  /** A plain server of Http1Connections through admission, which the test sweeps itself; resolves with the first connection. */
  async function direct(
    options: { allowHalfOpen?: boolean } = {},
  ): Promise<{ client: Client; handler: TestHandler; connection: Http1Connection; socket: net.Socket }> {
    const handler = new TestHandler();
    const connections: Http1Connection[] = [];
    const watched = new Watched();
    server = net.createServer({ allowHalfOpen: true }, (socket) => {
      accepted.push(socket);
      const connection = new Http1Connection(socket, handler, undefined, LIMITS);
      admission.accept(socket)!.connection = connection;
      connections.push(connection);
      watched.changed();
    });
    await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
    const client = new Client((server.address() as AddressInfo).port, options);
    await watched.until(() => connections.length > 0, 'the connection');
    return { client, handler, connection: connections[0]!, socket: accepted[0]! };
  }

  test('the keep-alive bound is 5 s, as node:http', () => {
    expect(KEEP_ALIVE_TIMEOUT_MS).toBe(5000);
  });

  test('an idle keep-alive connection is closed once past the bound, not before', async () => {
    const { client } = await direct();
    client.write(get('/sync/a'));
    await client.responses(1);
    ahead = KEEP_ALIVE_TIMEOUT_MS - 1000;
    admission.sweep();
    // Still open: the next request is answered.
    client.write(get('/sync/b'));
    await client.responses(2);
    expect(client.ended).toBe(false);
    ahead = KEEP_ALIVE_TIMEOUT_MS + 1000;
    admission.sweep();
    await client.whenEnded();
    expect(client.parsed).toHaveLength(2);
  });

  test('a connection that sends no request is closed after the same bound', async () => {
    const { client } = await direct();
    ahead = KEEP_ALIVE_TIMEOUT_MS - 1000;
    admission.sweep();
    expect(client.ended).toBe(false);
    ahead = KEEP_ALIVE_TIMEOUT_MS + 1000;
    admission.sweep();
    await client.whenEnded();
    expect(client.parsed).toHaveLength(0);
  });

  test('a connection owing an answer is not idle; its answer still comes', async () => {
    const { client, handler } = await direct();
    client.write(get('/hold/a'));
    await handler.holding('a');
    ahead = 10 * KEEP_ALIVE_TIMEOUT_MS;
    admission.sweep();
    handler.release('a');
    const [response] = await client.responses(1);
    expect(response!.body).toBe('a');
    expect(client.ended).toBe(false);
  });

  test('a head still arriving is bounded by the headers bound, not the keep-alive one', async () => {
    const { client, handler, connection } = await direct();
    client.write('GET /sync/a HTTP/1.1\r\n');
    await waitFor(() => connection.idle === false, 'the server to read the partial head');
    ahead = 10 * KEEP_ALIVE_TIMEOUT_MS;
    admission.sweep();
    client.write('Host: x\r\n');
    connection.sweep(Date.now() + LIMITS.headersTimeoutMs + 1000);
    const [response] = await client.responses(1);
    expect(response!.status).toBe(408);
    await client.whenEnded();
    expect(handler.calls).toEqual([]);
  });

  test('a client that keeps its side open after the server ended it is destroyed after the linger', async () => {
    const { client, connection, socket } = await direct({ allowHalfOpen: true });
    client.write('GET /sync/a HTTP/1.0\r\n\r\n');
    await client.responses(1);
    await client.whenEnded();
    connection.sweep(Date.now() + 4000);
    expect(socket.destroyed).toBe(false);
    connection.sweep(Date.now() + 6000);
    expect(socket.destroyed).toBe(true);
  });
});

describe('drain and forceClose', () => {
  test('drain closes an idle connection at once and resolves', async () => {
    const { srv, port } = await start();
    const c = new Client(port);
    c.write(get('/sync/a'));
    await c.responses(1);
    const drained = srv.drain();
    await c.whenEnded();
    await drained;
  });

  test('drain lets a delayed answer out, with Connection: close, then closes and resolves', async () => {
    const { srv, port, handler } = await start();
    const c = new Client(port);
    c.write(get('/hold/a'));
    await handler.holding('a');
    let resolved = false;
    const drained = srv.drain().then(() => (resolved = true));
    // No new connections meanwhile.
    const late = new Client(port);
    await late.until(() => late.error !== undefined || late.closed, 'the late connection to fail');
    expect(resolved).toBe(false);
    expect(c.text).toBe('');
    handler.release('a');
    const [response] = await c.responses(1);
    expect(response!.body).toBe('a');
    expect(response!.headers.connection).toBe('close');
    await c.whenEnded();
    await drained;
  });

  test('drain lets a request being read finish, answers it with Connection: close, then closes', async () => {
    const { srv, port, sockets, serverSide, handler } = await start();
    const c = new Client(port);
    const first = 'GET /sync/a HTTP/1.1\r\n';
    c.write(first);
    await serverSide.until(() => sockets.length > 0, 'the connection');
    await waitFor(() => sockets[0]!.bytesRead >= first.length, 'the server to read the partial head');
    const drained = srv.drain();
    c.write('Host: x\r\n\r\n');
    const [response] = await c.responses(1);
    expect(response!.headers.connection).toBe('close');
    await c.whenEnded();
    await drained;
    expect(handler.calls).toEqual(['GET /sync/a']);
  });

  test('drain with pipelined answers owed: the last one to go out says Connection: close', async () => {
    const { srv, port, handler } = await start();
    const c = new Client(port);
    c.write(get('/hold/a') + get('/sync/b'));
    await handler.calledTimes(2);
    const drained = srv.drain();
    handler.release('a');
    const responses = await c.responses(2);
    await c.whenEnded();
    await drained;
    expect(responses.map((r) => r.body)).toEqual(['a', 'b']);
    expect(responses[1]!.headers.connection).toBe('close');
  });

  test('forceClose destroys connections with answers owed; drain then resolves', async () => {
    const { srv, port, handler } = await start();
    const c = new Client(port);
    c.write(get('/hold/a'));
    await handler.holding('a');
    srv.forceClose();
    await c.whenClosed();
    expect(c.text).toBe('');
    expect(() => handler.release('a')).not.toThrow();
    await srv.drain();
  });
});
