/**
 * Fault injection for tests: disconnects, dropped pushes, slow responses, requotes, partial
 * fills, one-off error bodies and HTTP statuses (429, 500). Every setting is consumed by count (or `Infinity`). A broker
 * restart is BrokerSimulator.restart (it needs the server); `fired.restarts` counts them.
 */
import type { BrokerErrorBody } from '../fxcm/errors';

export interface SlowRule {
  endpoint: string | '*';
  delayMs: number;
  remaining: number;
}

export interface FailRule {
  endpoint: string;
  error: string | BrokerErrorBody;
  remaining: number;
}

/** An HTTP status answered instead of the request (a gateway's 429, a 500), with its Retry-After. */
export interface HttpFault {
  status: number;
  /** The Retry-After header as sent (seconds, or an HTTP-date). */
  retryAfter?: string;
}

interface HttpRule extends HttpFault {
  endpoint: string;
  remaining: number;
}

export class Faults {
  /** Set by the server: disconnects sockets (all, or the one of `token`). */
  disconnectHook: ((token?: string) => number) | undefined;
  private dropRemaining = 0;
  private dropFilter: ((event: string) => boolean) | undefined;
  private slowRules: SlowRule[] = [];
  private failRules: FailRule[] = [];
  private httpRules: HttpRule[] = [];
  private requoteRemaining = 0;
  private partial: { parts: number; remaining: number } | undefined;
  /** Counters of faults that fired. */
  readonly fired = { dropped: 0, slowed: 0, requoted: 0, partialFills: 0, failed: 0, httpErrors: 0, disconnects: 0, restarts: 0 };

  /** Server-side disconnect of every socket (or the token's); returns how many were closed. */
  disconnect(token?: string): number {
    const n = this.disconnectHook?.(token) ?? 0;
    this.fired.disconnects += n;
    return n;
  }

  /** Drops the next `count` pushes (optionally only events for which `filter(eventName)` is true). */
  dropPushes(count: number, filter?: (event: string) => boolean): void {
    this.dropRemaining = count;
    this.dropFilter = filter;
  }

  /** Delays the next `count` responses of `endpoint` (path, e.g. `/trading/open_trade`, or `*`). */
  slowResponses(endpoint: string | '*', delayMs: number, count = Infinity): void {
    this.slowRules.push({ endpoint, delayMs, remaining: count });
  }

  /** The next `count` responses of `endpoint` are `executed:false` with this error. */
  failNext(endpoint: string, error: string | BrokerErrorBody, count = 1): void {
    this.failRules.push({ endpoint, error, remaining: count });
  }

  /**
   * The next `count` requests of `endpoint` (or `*`) get HTTP `status` (e.g. 429, 500) with a
   * swagger-style body `{"Code":…,"Message":…}` and, when given, Retry-After; nothing is executed.
   */
  httpErrorNext(endpoint: string | '*', fault: HttpFault, count = 1): void {
    this.httpRules.push({ endpoint, ...fault, remaining: count });
  }

  /** The next `count` market orders are requoted (Order pushed with status 4, then deleted; no trade). */
  requoteNext(count = 1): void {
    this.requoteRemaining = count;
  }

  /** The next `count` market orders fill in `parts` trades. */
  partialFills(parts: number, count = 1): void {
    this.partial = { parts: Math.max(1, Math.floor(parts)), remaining: count };
  }

  reset(): void {
    this.dropRemaining = 0;
    this.dropFilter = undefined;
    this.slowRules = [];
    this.failRules = [];
    this.httpRules = [];
    this.requoteRemaining = 0;
    this.partial = undefined;
  }

  // ---- consumed by the server / engine

  shouldDrop(event: string): boolean {
    if (this.dropRemaining <= 0) return false;
    if (this.dropFilter && !this.dropFilter(event)) return false;
    this.dropRemaining--;
    this.fired.dropped++;
    return true;
  }

  takeDelay(endpoint: string): number {
    const r = this.slowRules.find((s) => s.remaining > 0 && (s.endpoint === '*' || s.endpoint === endpoint));
    if (!r) return 0;
    r.remaining--;
    this.fired.slowed++;
    return r.delayMs;
  }

  takeFailure(endpoint: string): string | undefined {
    const r = this.failRules.find((s) => s.remaining > 0 && s.endpoint === endpoint);
    if (!r) return undefined;
    r.remaining--;
    this.fired.failed++;
    return typeof r.error === 'string' ? r.error : JSON.stringify(r.error);
  }

  takeHttpError(endpoint: string): HttpFault | undefined {
    const r = this.httpRules.find((s) => s.remaining > 0 && (s.endpoint === '*' || s.endpoint === endpoint));
    if (!r) return undefined;
    r.remaining--;
    this.fired.httpErrors++;
    return { status: r.status, retryAfter: r.retryAfter };
  }

  takeRequote(): boolean {
    if (this.requoteRemaining <= 0) return false;
    this.requoteRemaining--;
    this.fired.requoted++;
    return true;
  }

  takeFillParts(): number {
    if (!this.partial || this.partial.remaining <= 0) return 1;
    this.partial.remaining--;
    this.fired.partialFills++;
    return this.partial.parts;
  }
}
