/**
 * One HTTP/1.1 connection of the HTTP port, straight on its socket: requests are read by
 * RequestReader, answered by the handler now or later, and written back in request order
 * (pipelining), all the answers of one socket read in one write. Keep-alive as HTTP/1.1 says
 * (HTTP/1.0 only when asked), `100 Continue` when a client waits for it, and the request time
 * bounds, applied at each sweep of the port's admission (which also closes it when idle).
 *
 * Bounded per connection and per process: at most 64 requests read and not answered (the reader
 * holds the rest back, even within one socket read), request bytes held between reads charged to
 * the process's request budget, and a client that does not take its answers stops being read,
 * counts against the process's answer budget and is closed once it takes nothing for 30 s.
 */
import type net from 'node:net';
import type { AdmittedConnection, BudgetName } from '../admission';
import { PEER_BACKLOG_HIGH, PeerBacklog, type ServerBudgets, serverBudgets } from '../byte-budget';
import { sanitizeHeader } from '../http-util';
import { type BodyPlan, type RequestHead, RequestReader } from './parser';

/** What the server does with requests. */
export interface ExchangeHandler {
  /** How to read the body of the request with this head. */
  plan(head: RequestHead): BodyPlan;
  /**
   * Answers a complete request, now or later, through `exchange.answer`. `body` is valid until
   * this returns (it may be a view of a socket read): copy what must outlive it.
   */
  handle(head: RequestHead, body: Buffer, exchange: Exchange): void;
}

/** Time bounds, each 0 for none. */
export interface ConnectionLimits {
  /** Headers and body of a request must all arrive within this. */
  readonly requestTimeoutMs: number;
  /** The headers of a request must arrive within this. */
  readonly headersTimeoutMs: number;
}

const NO_LIMITS: ConnectionLimits = { requestTimeoutMs: 0, headersTimeoutMs: 0 };

const CONTINUE = 'HTTP/1.1 100 Continue\r\n\r\n';
/** Requests read and not yet answered beyond which the connection stops reading until some are. */
export const MAX_UNANSWERED = 64;

export const STATUS_TEXT: Readonly<Record<number, string>> = {
  100: 'Continue',
  200: 'OK',
  400: 'Bad Request',
  404: 'Not Found',
  408: 'Request Timeout',
  413: 'Request Entity Too Large',
  417: 'Expectation Failed',
  429: 'Too Many Requests',
  431: 'Request Header Fields Too Large',
  500: 'Internal Server Error',
  501: 'Not Implemented',
  503: 'Service Unavailable',
  505: 'HTTP Version Not Supported',
};

let dateSecond = -1;
let dateLine = '';
/** `Date: …\r\n`, built once per second. */
function dateHeader(nowMs: number): string {
  const s = Math.floor(nowMs / 1000);
  if (s !== dateSecond) {
    dateSecond = s;
    dateLine = `Date: ${new Date(s * 1000).toUTCString()}\r\n`;
  }
  return dateLine;
}

/** One request's answer slot, in the connection's order. */
export class Exchange {
  /** The answer, once given (0 before); its text is built when it is written. */
  status = 0;
  private headers = '';
  private body = '';
  /** The connection closes after this answer (decided up to the moment it is written). */
  close: boolean;

  constructor(
    private readonly connection: Http1Connection,
    readonly head: RequestHead | undefined,
  ) {
    this.close = head === undefined || !head.keepAlive;
  }

  /** The connection's socket (its peer address names the client). */
  get socket(): net.Socket {
    return this.connection.socket;
  }

  /**
   * The answer: `headers` are complete header lines (each ending in CRLF) other than Date,
   * Content-Length and Connection, which are added here. A second answer is ignored.
   */
  answer(status: number, headers: string, body: string): void {
    if (this.status !== 0) return;
    this.status = status;
    this.headers = headers;
    this.body = body;
    this.connection.answered();
  }

  /** The answer's bytes. */
  text(): string {
    const head = this.head;
    const body = this.body;
    return (
      `HTTP/1.1 ${this.status} ${STATUS_TEXT[this.status] ?? 'Unknown'}\r\n${this.headers}${dateHeader(Date.now())}` +
      `Content-Length: ${Buffer.byteLength(body)}\r\n` +
      (this.close ? 'Connection: close\r\n' : head !== undefined && head.minor === 0 ? 'Connection: keep-alive\r\n' : '') +
      '\r\n' +
      (head !== undefined && head.method === 'HEAD' ? '' : body)
    );
  }
}

export class Http1Connection implements AdmittedConnection {
  readonly handshaking = false;
  /** When the last request arrived whole (performance.now()); 0 before the first. */
  lastRequestAt = 0;
  private readonly reader: RequestReader;
  private readonly backlog: PeerBacklog;
  /** Exchanges read and not yet written, oldest first. */
  private readonly queue: Exchange[] = [];
  /** Answers ready to write, gathered while a socket read is handled. */
  private out = '';
  private inRead = false;
  /** A request was completed during the current socket read. */
  private completedInRead = false;
  /** A `100 Continue` waits for the answers owed before it. */
  private continueOwed = false;
  private paused = false;
  private ended = false;
  /** No more requests are taken: a drain, or an answer that closes the connection. */
  private closing = false;
  /** The client ended its side while requests it sent before were held back (see maybeResume). */
  private endAfterHeld = false;
  /** When the bytes of the request being read began to arrive (0: none being read). */
  private requestStartMs = 0;
  private lastActiveMs: number;

  constructor(
    readonly socket: net.Socket,
    private readonly handler: ExchangeHandler,
    budgets: ServerBudgets = serverBudgets(Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER),
    private readonly limits: ConnectionLimits = NO_LIMITS,
    /** Told of each budget the client goes past (admission counts and logs it). */
    private readonly exceeded: (budget: BudgetName) => void = () => {},
  ) {
    this.lastActiveMs = Date.now();
    this.backlog = new PeerBacklog(socket, budgets.answers, () => this.maybeResume(), undefined, () => exceeded('slow_reader'));
    this.reader = new RequestReader({
      head: (head) => this.handler.plan(head),
      bodyWanted: () => {
        // An interim answer may only go out when no earlier answer is still owed; else it
        // follows the last of them.
        if (this.queue.length === 0) this.out += CONTINUE;
        else this.continueOwed = true;
      },
      complete: (head, body) => this.complete(head, body),
      fail: (status, reason) => {
        if (status === 503) this.exceeded('request_bytes');
        this.refuse(status, reason);
      },
    }, budgets.requests);
    socket.on('data', (chunk: Buffer) => this.read(chunk));
    socket.on('drain', () => this.maybeResume());
    // The server allows half-open sockets, so that a client that sends its last request and
    // then ends its side still gets the answers owed.
    socket.on('end', () => {
      // Requests held back came before the end: it takes effect once they are read.
      if (this.reader.held) this.endAfterHeld = true;
      else this.closeWhenAnswered(true);
    });
    socket.on('close', () => {
      // Answers still to come have nowhere to go.
      this.ended = true;
      this.queue.length = 0;
      this.reader.stop();
    });
    // A reset or failed socket is the client's problem; 'close' follows.
    socket.on('error', () => {});
  }

  /** True when the connection has no request in progress and no answer owed. */
  get idle(): boolean {
    return this.queue.length === 0 && !this.reader.midRequest;
  }

  /** Requests owed an answer, and the one being read. */
  get callsInFlight(): number {
    return this.queue.length + (this.reader.midRequest ? 1 : 0);
  }

  private read(chunk: Buffer): void {
    const now = Date.now();
    this.lastActiveMs = now;
    const wasMidRequest = this.reader.midRequest;
    this.inRead = true;
    this.completedInRead = false;
    this.reader.push(chunk);
    this.inRead = false;
    if (!this.reader.midRequest) this.requestStartMs = 0;
    else if (!wasMidRequest || this.completedInRead || this.requestStartMs === 0) this.requestStartMs = now;
    this.flush();
    this.maybePause();
  }

  private maybePause(): void {
    if (!this.ended && !this.paused && (this.reader.held || this.socket.writableLength > PEER_BACKLOG_HIGH)) {
      this.paused = true;
      this.socket.pause();
    }
  }

  private complete(head: RequestHead, body: Buffer): void {
    this.completedInRead = true;
    this.lastRequestAt = performance.now();
    // A body that came without waiting for `100 Continue` needs it no more.
    this.continueOwed = false;
    const exchange = new Exchange(this, head);
    if (this.closing || exchange.close) {
      // Nothing after this request is read.
      exchange.close = true;
      this.reader.stop();
    }
    this.queue.push(exchange);
    // Enough unanswered: the reader reads no further request, even from the bytes it has.
    if (this.queue.length >= MAX_UNANSWERED) this.reader.hold();
    try {
      this.handler.handle(head, body, exchange);
    } catch (err) {
      // A handler's defect costs its own request an answer, not the process.
      errorAnswer(exchange, 500, String((err as Error)?.message ?? err));
    }
  }

  /** Answers input the reader refused (after any answers still owed) and closes. */
  private refuse(status: number, reason: string): void {
    const exchange = new Exchange(this, undefined);
    this.queue.push(exchange);
    errorAnswer(exchange, status, reason);
  }

  /** Called by an exchange when its answer is ready: writes every ready answer at the front. */
  answered(): void {
    const queue = this.queue;
    let closeAfter = false;
    while (queue.length > 0 && queue[0]!.status !== 0) {
      const e = queue.shift()!;
      this.out += e.text();
      if (e.close) {
        closeAfter = true;
        queue.length = 0;
        break;
      }
    }
    if (queue.length === 0 && this.continueOwed) {
      // The interim answer held back behind earlier ones (see bodyWanted).
      this.continueOwed = false;
      this.out += CONTINUE;
    }
    if (closeAfter) {
      this.reader.stop();
      this.flush();
      this.end();
      return;
    }
    if (!this.inRead) {
      this.flush();
      this.maybeResume();
    }
  }

  private flush(): void {
    if (this.out === '' || this.ended) {
      this.out = '';
      return;
    }
    const held = this.backlog.write(this.out);
    this.out = '';
    this.lastActiveMs = Date.now();
    // The process holds too many unsent answers: this client, which is not taking its own, goes.
    if (!held) {
      this.exceeded('answer_bytes');
      this.destroy();
    }
  }

  private maybeResume(): void {
    if (this.ended) return;
    if (this.reader.held && this.queue.length < MAX_UNANSWERED) {
      // The requests held back are read now, their answers gathered into one write.
      this.inRead = true;
      this.reader.release();
      this.inRead = false;
      // A request left unfinished waited for the server, not the client: its time starts now.
      this.requestStartMs = this.reader.midRequest ? Date.now() : 0;
      this.flush();
      if (this.endAfterHeld && !this.reader.held) this.closeWhenAnswered(true);
    }
    if (this.paused && !this.ended && !this.reader.held && this.socket.writableLength <= PEER_BACKLOG_HIGH) {
      this.paused = false;
      this.socket.resume();
    }
  }

  private end(): void {
    if (this.ended) return;
    this.ended = true;
    this.socket.end();
  }

  /**
   * Applies the request bounds at `nowMs` (called by admission's sweep): a request that has not
   * all arrived in time is answered 408 and the connection closed; a closed one the client keeps
   * open is destroyed.
   */
  sweep(nowMs: number): void {
    const limits = this.limits;
    if (this.ended) {
      if (nowMs - this.lastActiveMs > CLOSED_LINGER_MS) this.socket.destroy();
      return;
    }
    const start = this.requestStartMs;
    // Requests the reader holds back wait for the server, not for the client: no bound.
    if (start > 0 && this.reader.midRequest && !this.reader.held) {
      const bound = this.reader.readingBody ? limits.requestTimeoutMs : minPositive(limits.headersTimeoutMs, limits.requestTimeoutMs);
      if (bound > 0 && nowMs - start > bound) {
        this.reader.stop();
        this.refuse(408, 'the request did not arrive in time');
      }
    }
  }

  /** Takes no more requests: closes now when idle, else after the request being read is answered (a drain, an idle bound). */
  close(): void {
    this.closeWhenAnswered(false);
  }

  /** Closes at once (admission needed the room). */
  shed(): void {
    this.destroy();
  }

  /**
   * Closes once every answer owed is written. `now`: the request being read is dropped too (the
   * client has ended its side, so it cannot finish); otherwise it is still read and answered.
   */
  private closeWhenAnswered(now: boolean): void {
    this.closing = true;
    // Requests held back are not read either: the connection closes after the answers owed now.
    if (now || !this.reader.midRequest || this.reader.held) this.reader.stop();
    const queue = this.queue;
    if (queue.length > 0) queue[queue.length - 1]!.close = true;
    else if (!this.reader.midRequest) this.end();
  }

  destroy(): void {
    this.ended = true;
    this.socket.destroy();
  }
}

/** How long a connection we ended may wait for the client to close its side before it is destroyed. */
const CLOSED_LINGER_MS = 5000;

function minPositive(a: number, b: number): number {
  if (a <= 0) return b;
  if (b <= 0) return a;
  return Math.min(a, b);
}

/** Go's http.Error form: text/plain, nosniff, the status text and a newline, the reason in X-Error-Detail. */
export function errorAnswer(exchange: Exchange, status: number, detail?: string, text = STATUS_TEXT[status] ?? 'Error'): void {
  exchange.answer(
    status,
    'Content-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\n' +
      (detail === undefined ? '' : `X-Error-Detail: ${sanitizeHeader(detail)}\r\n`),
    text + '\n',
  );
}
