/**
 * The webhook notifications of a paper or live run (`--notify URL`, repeatable). The engine calls
 * `notify(kind, details)` at its events; each becomes one JSON object POSTed to every URL. The
 * contract is that notifications never get in the way of trading:
 *
 * - `notify()` is synchronous and O(1): it numbers the event, serializes it once and queues it on
 *   each sink; it never throws and never waits. Sending happens later, off the caller's turn.
 * - What is sent: `POST` with `Content-Type: application/json`, `User-Agent: ratelimit-runner`
 *   and the body `{"kind", "seq", "at", "run", ...details}`. `seq` counts 1, 2, 3... in the order
 *   the events were made (a gap is an event dropped, refused or a heartbeat replaced); `at` is ISO 8601 UTC; a detail
 *   named like one of these four does not replace it. Credentials in a URL (`user:pass@`) are sent
 *   as Basic auth and never shown: stats and logs name a URL without them or its query string.
 * - One sink per URL, each with its own queue and one request in flight at a time: a sink receives
 *   its events in seq order, and a slow sink never holds another.
 * - Bounds, and what happens at each:
 *   - an event whose JSON is over MAX_EVENT_BYTES is refused: counted failed on every sink, logged;
 *     one that cannot be serialized (a cycle, a BigInt) is refused the same way;
 *   - a sink's queue holds `queueMax` events; when full, the oldest queued is dropped and counted;
 *   - a heartbeat (every `heartbeatMs`) waits outside the queue, at most one per sink: a newer
 *     heartbeat replaces a queued one (not counted dropped: the newest says all the older did);
 *   - an attempt has `timeoutMs` for connecting and answering, then it is abandoned; a network
 *     error, a timeout, 429 and 5xx are retried up to `retries` times after backoffs doubling from
 *     `backoffMs` up to MAX_BACKOFF_MS (a longer Retry-After of a 429 or 503 is waited for, up to
 *     the same cap); another answer (3xx, 4xx) is not retried; an event not delivered by then is
 *     counted failed and the sink goes on with the next;
 *   - an answer's body is discarded, at most MAX_ANSWER_BYTES of it read;
 *   - a failing sink is logged at warn at most once per LOG_EVERY_MS, its recovery at info once.
 * - `close(ms)` stops the heartbeat, waits at most `ms` for the queued events (the run's
 *   `run_ended` among them) to be delivered, then abandons the rest, counted dropped. It never
 *   rejects; a notify() after it does nothing.
 */
import http from 'node:http';
import https from 'node:https';
import { Backoff } from '../../../platform/backoff';
import { MAX_TIMER_MS, systemClock, type Clock } from '../../../platform/clock';
import { errorMessage } from '../../../platform/errors';
import { isoUtc } from '../../../platform/time-text';
import { retryAfterMsOf } from '../../../platform/retry-after';
import type { LogWriter } from '../../../telemetry/logger';
import { ThrottledLog } from '../../../telemetry/throttled-log';
import type { RunEventKind } from '../engine/run-events';

/** The run's events (engine/run-events.ts), one webhook each. */
export type NotifyKind = RunEventKind;

/** What a sink receives: the envelope, then the event's own details. */
export interface NotifyEvent {
  kind: NotifyKind;
  /** 1, 2, 3... per notifier, in the order the events were made. */
  seq: number;
  /** When the event was made, ISO 8601 UTC. */
  at: string;
  run: { strategy: string; mode: string; account?: string };
  [detail: string]: unknown;
}

export interface NotifierOptions {
  /** Where events are POSTed; http: or https: only. */
  urls: readonly string[];
  run: NotifyEvent['run'];
  /** Events a sink holds while it cannot take them (default 1000); beyond, the oldest is dropped. */
  queueMax?: number;
  /** Connecting and answering, per attempt (default 5000 ms). */
  timeoutMs?: number;
  /** Attempts after the first on a network error, a timeout, 429 or 5xx (default 3). */
  retries?: number;
  /** The first retry's delay (default 1000 ms), doubling up to MAX_BACKOFF_MS. */
  backoffMs?: number;
  /** A heartbeat event this often, so a watchdog notices a dead process (0 or undefined: none). */
  heartbeatMs?: number;
  /** Times the backoffs, the attempts and the heartbeat (systemClock by default). */
  clock?: Clock;
  log?: LogWriter;
}

export interface SinkStats {
  /** Without credentials or query string. */
  url: string;
  /** Events the sink accepted (a 2xx). */
  sent: number;
  /** Events given up: retries spent, an answer that is not retried, or refused before sending. */
  failed: number;
  /** Events dropped unsent: pushed out of a full queue, or abandoned by close(). */
  dropped: number;
  /** Attempts that failed and were tried again. */
  retried: number;
  /** Events waiting (the queue and a heartbeat), not counting the one in hand. */
  queued: number;
  /** Whether a request is open now. */
  inFlight: boolean;
  lastError?: { at: string; message: string };
}

/** An event is a line of news, not a report; a bigger one is a bug of its maker. */
export const MAX_EVENT_BYTES = 64 * 1024;
/** What is read of an answer's body before the connection is dropped. */
const MAX_ANSWER_BYTES = 4 * 1024;
/** The longest wait before a retry, a Retry-After included. */
export const MAX_BACKOFF_MS = 30_000;
/** A failing sink's warnings: at most one per this long. */
const LOG_EVERY_MS = 60_000;

const DEFAULT_QUEUE_MAX = 1000;
const DEFAULT_TIMEOUT_MS = 5000;
const DEFAULT_RETRIES = 3;
const DEFAULT_BACKOFF_MS = 1000;
const DEFAULT_CLOSE_MS = 5000;

/** An event as made once and shared by the sinks. */
interface Queued {
  readonly seq: number;
  readonly body: Buffer;
}

/** Where and how a sink's requests go, credentials out of the URL and into a header. */
interface Target {
  readonly href: string;
  readonly shown: string;
  readonly authorization: string | undefined;
  readonly https: boolean;
}

type Outcome = { ok: true } | { ok: false; retry: boolean; message: string; retryAfterMs?: number };

export class Notifier {
  private readonly run: NotifyEvent['run'];
  private readonly sinks: Sink[];
  private readonly clock: Clock;
  private readonly log: LogWriter | undefined;
  private readonly heartbeatMs: number;
  private readonly refusals: ThrottledLog;
  private heartbeatTimer: unknown;
  private seq = 0;
  private closed = false;

  constructor(o: NotifierOptions) {
    const targets = o.urls.map(parseTarget);
    this.run = { ...o.run };
    this.clock = o.clock ?? systemClock;
    this.log = o.log;
    this.heartbeatMs = atLeast('heartbeatMs', o.heartbeatMs ?? 0, 0);
    this.refusals = new ThrottledLog((line) => this.log?.warn(line), LOG_EVERY_MS, this.clock);
    const settings: SinkSettings = {
      queueMax: Math.floor(atLeast('queueMax', o.queueMax ?? DEFAULT_QUEUE_MAX, 1)),
      timeoutMs: atLeast('timeoutMs', o.timeoutMs ?? DEFAULT_TIMEOUT_MS, 1),
      retries: Math.floor(atLeast('retries', o.retries ?? DEFAULT_RETRIES, 0)),
      backoffMs: Math.min(atLeast('backoffMs', o.backoffMs ?? DEFAULT_BACKOFF_MS, 0), MAX_BACKOFF_MS),
      clock: this.clock,
      log: this.log,
    };
    this.sinks = targets.map((t) => new Sink(t, settings));
    this.scheduleHeartbeat();
  }

  /** Queues the event on every sink and returns: never throws, never waits. */
  notify(kind: NotifyKind, details?: Record<string, unknown>): void {
    if (this.closed) return;
    const seq = ++this.seq;
    let body: Buffer;
    try {
      body = this.serialize(kind, seq, details);
    } catch (err) {
      this.refuse(kind, seq, errorMessage(err));
      return;
    }
    if (body.length > MAX_EVENT_BYTES) {
      this.refuse(kind, seq, `its JSON is ${body.length} bytes, over ${MAX_EVENT_BYTES}`);
      return;
    }
    const event = { seq, body };
    for (const s of this.sinks) {
      if (kind === 'heartbeat') s.heartbeat(event);
      else s.push(event);
    }
  }

  /** Per URL, in the order of `urls`. */
  stats(): SinkStats[] {
    return this.sinks.map((s) => s.stats());
  }

  /**
   * Stops the heartbeat; waits at most `ms` for what is queued (the run_ended event especially)
   * to be delivered, then abandons the rest (counted dropped). Never rejects.
   */
  async close(ms = DEFAULT_CLOSE_MS): Promise<void> {
    if (!this.closed) {
      this.closed = true;
      if (this.heartbeatTimer !== undefined) this.clock.clearTimeout(this.heartbeatTimer);
    }
    // On purpose a ref'ed timer and not the clock's (unref'ed): the process must stay up for the
    // last deliveries its exit awaits.
    let deadline: NodeJS.Timeout | undefined;
    const timedOut = new Promise<void>((resolve) => (deadline = setTimeout(resolve, Math.min(MAX_TIMER_MS, Math.max(0, ms)))));
    await Promise.race([Promise.all(this.sinks.map((s) => s.drain())), timedOut]);
    clearTimeout(deadline);
    for (const s of this.sinks) s.abandon();
  }

  private serialize(kind: NotifyKind, seq: number, details: Record<string, unknown> | undefined): Buffer {
    const at = isoUtc(this.clock.nowMs());
    const event: NotifyEvent = { kind, seq, at, run: this.run, ...details };
    // The envelope is ours: a detail of the same name keeps its place in the JSON, not its value.
    Object.assign(event, { kind, seq, at, run: this.run });
    return Buffer.from(JSON.stringify(event));
  }

  private refuse(kind: NotifyKind, seq: number, why: string): void {
    for (const s of this.sinks) s.refused(why);
    this.refusals.log(`notification ${seq} (${kind}) not sent: ${why}`);
  }

  private scheduleHeartbeat(): void {
    if (this.heartbeatMs <= 0) return;
    this.heartbeatTimer = this.clock.setTimeout(() => {
      this.notify('heartbeat');
      if (!this.closed) this.scheduleHeartbeat();
    }, this.heartbeatMs);
  }
}

interface SinkSettings {
  readonly queueMax: number;
  readonly timeoutMs: number;
  readonly retries: number;
  readonly backoffMs: number;
  readonly clock: Clock;
  readonly log: LogWriter | undefined;
}

/** One URL: its queue, its one request in flight, its retries and its counts. */
class Sink {
  private readonly queue: Ring<Queued>;
  private readonly backoff: Backoff;
  private readonly warnings: ThrottledLog;
  private heartbeatEvent: Queued | undefined;
  private current: Queued | undefined;
  private attempts = 0;
  private abort: (() => void) | undefined;
  private retryTimer: unknown;
  private pumpScheduled = false;
  private warnedSinceOk = false;
  private abandoned = false;
  private idleWaiters: (() => void)[] = [];
  private sent = 0;
  private failed = 0;
  private dropped = 0;
  private retried = 0;
  private lastError: { at: string; message: string } | undefined;

  constructor(
    private readonly target: Target,
    private readonly s: SinkSettings,
  ) {
    this.queue = new Ring(s.queueMax);
    this.backoff = new Backoff({ initialMs: s.backoffMs, maxMs: MAX_BACKOFF_MS });
    this.warnings = new ThrottledLog(
      (line) => {
        this.warnedSinceOk = true;
        s.log?.warn(line);
      },
      LOG_EVERY_MS,
      s.clock,
    );
  }

  push(e: Queued): void {
    if (this.queue.push(e)) this.dropped++;
    this.schedulePump();
  }

  heartbeat(e: Queued): void {
    this.heartbeatEvent = e;
    this.schedulePump();
  }

  refused(why: string): void {
    this.failed++;
    this.lastError = { at: isoUtc(this.s.clock.nowMs()), message: `refused: ${why}` };
  }

  stats(): SinkStats {
    return {
      url: this.target.shown,
      sent: this.sent,
      failed: this.failed,
      dropped: this.dropped,
      retried: this.retried,
      queued: this.queue.size + (this.heartbeatEvent ? 1 : 0),
      inFlight: this.abort !== undefined,
      ...(this.lastError ? { lastError: { ...this.lastError } } : {}),
    };
  }

  /** Lets a waiting heartbeat go (the run is ending) and resolves when nothing is queued or in hand. */
  drain(): Promise<void> {
    this.heartbeatEvent = undefined;
    if (this.idle()) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /** Stops for good: what is queued or in hand is counted dropped. */
  abandon(): void {
    this.abandoned = true;
    this.abort?.();
    this.abort = undefined;
    if (this.retryTimer !== undefined) this.s.clock.clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    this.dropped += this.queue.size + (this.current ? 1 : 0);
    this.queue.clear();
    this.current = undefined;
    this.heartbeatEvent = undefined;
    this.wakeIdleWaiters();
  }

  private idle(): boolean {
    return this.current === undefined && this.queue.size === 0 && this.heartbeatEvent === undefined;
  }

  // Sending starts on a later turn so that notify() only queues.
  private schedulePump(): void {
    if (this.pumpScheduled || this.current !== undefined || this.abandoned) return;
    this.pumpScheduled = true;
    setImmediate(() => {
      this.pumpScheduled = false;
      this.next();
    });
  }

  /** Takes the next event in seq order (the queue's oldest or the waiting heartbeat) and sends it. */
  private next(): void {
    if (this.current !== undefined || this.abandoned) return;
    const head = this.queue.peek();
    const hb = this.heartbeatEvent;
    if (hb !== undefined && (head === undefined || hb.seq < head.seq)) {
      this.current = hb;
      this.heartbeatEvent = undefined;
    } else {
      this.current = this.queue.shift();
    }
    if (this.current === undefined) {
      this.wakeIdleWaiters();
      return;
    }
    this.attempts = 0;
    this.backoff.reset();
    this.attempt();
  }

  private attempt(): void {
    const event = this.current;
    if (event === undefined) return;
    this.abort = post(this.target, event.body, this.s.timeoutMs, this.s.clock, (outcome) => {
      this.abort = undefined;
      if (outcome.ok) {
        this.sent++;
        if (this.warnedSinceOk) this.s.log?.info(`notification sink ${this.target.shown} takes events again`);
        this.warnedSinceOk = false;
        this.finish();
        return;
      }
      this.failedAttempt(outcome.message);
      if (outcome.retry && this.attempts < this.s.retries) {
        this.attempts++;
        this.retried++;
        const wait = Math.min(MAX_BACKOFF_MS, Math.max(this.backoff.next(), outcome.retryAfterMs ?? 0));
        this.retryTimer = this.s.clock.setTimeout(() => {
          this.retryTimer = undefined;
          this.attempt();
        }, wait);
        return;
      }
      this.failed++;
      this.finish();
    });
  }

  private failedAttempt(message: string): void {
    this.lastError = { at: isoUtc(this.s.clock.nowMs()), message };
    this.warnings.log(`notification sink ${this.target.shown} failing: ${message}`);
  }

  private finish(): void {
    this.current = undefined;
    this.next();
  }

  private wakeIdleWaiters(): void {
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const w of waiters) w();
  }
}

/**
 * One POST; `done` is called once with how it went, unless the returned abort is called first.
 * `agent: false`: a connection of its own per request. Events are few (a handful a minute and the
 * heartbeats), so a handshake each costs nothing that matters, and no pooled socket can go stale
 * behind a proxy's idle timeout or outlive close().
 */
function post(target: Target, body: Buffer, timeoutMs: number, clock: Clock, done: (o: Outcome) => void): () => void {
  let settled = false;
  const headers: http.OutgoingHttpHeaders = {
    'Content-Type': 'application/json',
    'Content-Length': body.length,
    'User-Agent': 'ratelimit-runner',
  };
  if (target.authorization !== undefined) headers['Authorization'] = target.authorization;
  const send = target.https ? https.request : http.request;
  let req: http.ClientRequest | undefined;
  const settle = (o: Outcome | undefined): void => {
    if (settled) return;
    settled = true;
    clock.clearTimeout(deadline);
    req?.destroy();
    if (o !== undefined) done(o);
  };
  const deadline = clock.setTimeout(() => settle({ ok: false, retry: true, message: `no answer within ${timeoutMs} ms` }), timeoutMs);
  try {
    req = send(target.href, { method: 'POST', headers, agent: false }, (res) => {
      const outcome = classify(res);
      let read = 0;
      res.on('data', (chunk: Buffer) => {
        read += chunk.length;
        if (read > MAX_ANSWER_BYTES) settle(outcome);
      });
      res.on('end', () => settle(outcome));
      res.on('error', () => settle(outcome));
    });
    req.on('error', (err) => settle({ ok: false, retry: true, message: errorMessage(err) }));
    req.end(body);
  } catch (err) {
    settle({ ok: false, retry: false, message: errorMessage(err) });
  }
  return () => settle(undefined);
}

function classify(res: http.IncomingMessage): Outcome {
  const status = res.statusCode ?? 0;
  if (status >= 200 && status < 300) return { ok: true };
  const message = `answered ${status}${res.statusMessage ? ` ${res.statusMessage}` : ''}`;
  if (status === 429 || status >= 500) {
    const retryAfterMs = status === 429 || status === 503 ? retryAfterMsOf(res.headers['retry-after'], res.headers.date) : undefined;
    return retryAfterMs === undefined ? { ok: false, retry: true, message } : { ok: false, retry: true, message, retryAfterMs };
  }
  return { ok: false, retry: false, message: status >= 300 && status < 400 ? `${message} (redirects are not followed)` : message };
}

function parseTarget(raw: string): Target {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new Error(`--notify ${withoutCredentials(raw)}: not a URL (expected http://... or https://...)`);
  }
  const shown = `${url.protocol}//${url.host}${url.pathname}`;
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new Error(`--notify ${shown}: only http: and https: URLs are supported, not ${url.protocol}`);
  }
  const authorization =
    url.username || url.password
      ? `Basic ${Buffer.from(`${decodeURIComponent(url.username)}:${decodeURIComponent(url.password)}`).toString('base64')}`
      : undefined;
  url.username = '';
  url.password = '';
  return { href: url.href, shown, authorization, https: url.protocol === 'https:' };
}

/** Text that failed to parse as a URL may still carry `user:pass@`: cut it from the message. */
function withoutCredentials(raw: string): string {
  return raw.replace(/\/\/[^/?#]*@/, '//');
}

function atLeast(name: string, v: number, min: number): number {
  if (!Number.isFinite(v) || v < min) throw new Error(`notifier: ${name} must be a number of at least ${min}, not ${String(v)}`);
  return v;
}

/** A fixed-size FIFO; pushing onto a full one drops the oldest. Every operation O(1). */
class Ring<T> {
  private readonly items: (T | undefined)[];
  private head = 0;
  private count = 0;

  constructor(private readonly capacity: number) {
    this.items = new Array<T | undefined>(capacity);
  }

  get size(): number {
    return this.count;
  }

  /** Whether the oldest was dropped to make room. */
  push(item: T): boolean {
    const full = this.count === this.capacity;
    if (full) this.shift();
    this.items[(this.head + this.count) % this.capacity] = item;
    this.count++;
    return full;
  }

  peek(): T | undefined {
    return this.count === 0 ? undefined : this.items[this.head];
  }

  shift(): T | undefined {
    if (this.count === 0) return undefined;
    const item = this.items[this.head];
    this.items[this.head] = undefined;
    this.head = (this.head + 1) % this.capacity;
    this.count--;
    return item;
  }

  clear(): void {
    while (this.shift() !== undefined);
  }
}
