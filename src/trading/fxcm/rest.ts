/**
 * HTTP layer: the broker's headers, `Bearer <socket id><token>`, form-urlencoded bodies with
 * repeated keys for lists, the `{response:{executed,error}}` envelope and typed errors.
 */
import { FxcmNotConnectedError, FxcmTimeoutError, FxcmTransportError, toApiError } from './errors';
import { type LogWriter, silentLogger } from '../../telemetry/logger';
import type { Envelope, Params } from './types';

export type HttpMethod = 'GET' | 'POST';

/** Hook run before every request (the runner puts its rate limiter here). */
export type BeforeRequestHook = (endpoint: string, method: HttpMethod, params: Params) => Promise<void>;

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
    const text = await res.text();
    let env: Envelope | undefined;
    try {
      env = JSON.parse(text) as Envelope;
    } catch {
      env = undefined;
    }
    // swagger-style errors: {"Code":403,"Message":"…"}
    if (env && !env.response && typeof (env as { Code?: unknown }).Code === 'number') {
      throw toApiError(endpoint, String((env as { Message?: unknown }).Message ?? ''), res.status);
    }
    if (!env || typeof env.response !== 'object' || env.response === null) {
      // a gateway's 5xx: whether the broker ran the call is unknown
      throw new FxcmTransportError(`${method} ${endpoint}: HTTP ${res.status} without an envelope: ${text.slice(0, 200)}`, res.status, undefined, res.status >= 500);
    }
    if (!env.response.executed) {
      this.log.debug('fxcm request not executed', { endpoint, error: env.response.error });
      throw toApiError(endpoint, env.response.error, res.status);
    }
    return env as T;
  }
}
