/**
 * HTTP layer: the broker's headers, `Bearer <socket id><token>`, form-urlencoded bodies with
 * repeated keys for lists, the `{response:{executed,error}}` envelope and typed errors. HTTP 429
 * is FxcmRateLimitError and 5xx FxcmServerError, whatever the body, each with its status and the
 * Retry-After it asked for; `afterResponse` hears every answer's status (the runner's call budget
 * holds calls of a kind the broker answered 429).
 */
import { FxcmNotConnectedError, FxcmServerError, FxcmTimeoutError, FxcmTransportError, parseBrokerError, toApiError } from './errors';
import { retryAfterMsOf } from '../../platform/retry-after';
import { type LogWriter, silentLogger } from '../../telemetry/logger';
import type { Envelope, Params } from './types';

export type HttpMethod = 'GET' | 'POST';

/** Hook run before every request (the runner puts its rate limiter here). */
export type BeforeRequestHook = (endpoint: string, method: HttpMethod, params: Params) => Promise<void>;

/** What an answer said about the request rate: its status and the Retry-After it asked for. */
export interface ResponseInfo {
  status: number;
  retryAfterMs?: number;
}

/** Hook run on every HTTP answer, before it is read (the runner's call budget, for 429s). */
export type AfterResponseHook = (endpoint: string, method: HttpMethod, params: Params, res: ResponseInfo) => void;

export interface RestOptions {
  baseUrl: string;
  token: string;
  /** Returns the current socket id (Engine.IO sid) for the bearer; undefined when not connected. */
  socketId: () => string | undefined;
  requestTimeoutMs?: number;
  userAgent?: string;
  beforeRequest?: BeforeRequestHook;
  /** Hears how each request ended (no error: answered and executed), the local refusals included. */
  onOutcome?: (endpoint: string, error?: Error) => void;
  afterResponse?: AfterResponseHook;
  logger?: LogWriter;
}

/** Failures of fetch that happen before the request could leave: nothing reached the broker. */
const NOT_SENT = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'UND_ERR_CONNECT_TIMEOUT']);
const codeOf = (e: unknown): string | undefined => ((e as { cause?: { code?: unknown } })?.cause?.code as string | undefined) ?? undefined;
const neverConnected = (e: unknown): boolean => NOT_SENT.has(codeOf(e) ?? '');
/** fetch says only "fetch failed": the cause's code says why. */
const causeOf = (e: unknown): string => (codeOf(e) ? ` (${codeOf(e)})` : '');

/** key=value pairs; strings URL-encoded, booleans lowercase, arrays as repeated keys, undefined skipped. */
export function encodeParams(params: Params): string {
  const parts: string[] = [];
  const enc = (k: string, v: string | number | boolean) => parts.push(`${encodeURIComponent(k)}=${encodeURIComponent(String(v))}`);
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined) continue;
    if (Array.isArray(v)) for (const x of v) enc(k, x as string | number | boolean);
    else enc(k, v as string | number | boolean);
  }
  return parts.join('&');
}

export class RestTransport {
  private readonly log: LogWriter;
  constructor(private readonly opts: RestOptions) {
    this.log = opts.logger ?? silentLogger;
  }

  bearer(): string {
    const sid = this.opts.socketId();
    if (!sid) throw new FxcmNotConnectedError('no streaming connection: the bearer needs the socket id');
    return `Bearer ${sid}${this.opts.token}`;
  }

  /**
   * Sends a request and returns the envelope when `executed` is true; otherwise throws the typed
   * error. `endpoint` is the path (e.g. `/trading/open_trade`).
   */
  async request<T extends Envelope = Envelope>(method: HttpMethod, endpoint: string, params: Params = {}): Promise<T> {
    try {
      const env = await this.send<T>(method, endpoint, params);
      this.opts.onOutcome?.(endpoint);
      return env;
    } catch (e) {
      this.opts.onOutcome?.(endpoint, e as Error);
      throw e;
    }
  }

  private async send<T extends Envelope>(method: HttpMethod, endpoint: string, params: Params): Promise<T> {
    // refused here while disconnected, before the limiter is asked: not budget spent
    this.bearer();
    if (this.opts.beforeRequest) await this.opts.beforeRequest(endpoint, method, params);
    const body = encodeParams(params);
    const url = new URL(endpoint, this.opts.baseUrl);
    if (method === 'GET' && body) url.search = body;
    const headers: Record<string, string> = {
      'User-Agent': this.opts.userAgent ?? 'ratelimit-runner-fxcm/0.1',
      Accept: 'application/json',
      'Content-Type': 'application/x-www-form-urlencoded',
      // again: the connection may have dropped while the call waited for budget
      Authorization: this.bearer(),
    };
    const timeoutMs = this.opts.requestTimeoutMs ?? 15000;
    let res: Response;
    try {
      res = await fetch(url, {
        method,
        headers,
        body: method === 'POST' ? body : undefined,
        signal: AbortSignal.timeout(timeoutMs),
      });
    } catch (e) {
      const err = e as Error;
      if (err.name === 'TimeoutError' || err.name === 'AbortError') throw new FxcmTimeoutError(`${method} ${endpoint} timed out after ${timeoutMs} ms`, true);
      throw new FxcmTransportError(`${method} ${endpoint}: ${err.message}${causeOf(e)}`, undefined, e, !neverConnected(e));
    }
    const retryAfterMs = retryAfterMsOf(res.headers.get('retry-after'), res.headers.get('date'));
    this.opts.afterResponse?.(endpoint, method, params, { status: res.status, retryAfterMs });
    const text = await res.text();
    let env: Envelope | undefined;
    try {
      env = JSON.parse(text) as Envelope;
    } catch {
      env = undefined;
    }
    if (res.status === 429 || res.status >= 500) {
      // a gateway's or the broker's own words, from a swagger-style or an envelope body, else the text
      const said = env ? String((env as { Message?: unknown }).Message ?? env.response?.error ?? '') : text.slice(0, 200);
      if (res.status === 429) throw toApiError(endpoint, said || 'Too Many Requests', 429, retryAfterMs);
      const after = retryAfterMs !== undefined ? `; retry after ${Math.ceil(retryAfterMs / 1000)} s` : '';
      const body = parseBrokerError(said);
      throw new FxcmServerError(`${method} ${endpoint}: HTTP ${res.status}${said ? `: ${body ? body.message : said}` : ''}${after}`, res.status, retryAfterMs);
    }
    // swagger-style errors: {"Code":403,"Message":"…"}
    if (env && !env.response && typeof (env as { Code?: unknown }).Code === 'number') {
      throw toApiError(endpoint, String((env as { Message?: unknown }).Message ?? ''), res.status);
    }
    if (!env || typeof env.response !== 'object' || env.response === null) {
      throw new FxcmTransportError(`${method} ${endpoint}: HTTP ${res.status} without an envelope: ${text.slice(0, 200)}`, res.status);
    }
    if (!env.response.executed) {
      this.log.debug('fxcm request not executed', { endpoint, error: env.response.error });
      throw toApiError(endpoint, env.response.error, res.status);
    }
    return env as T;
  }
}
