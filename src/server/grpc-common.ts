/**
 * What both gRPC transports share (grpc-js in grpc.ts; ours, socket, through grpc-unary.ts): the ShouldRateLimit call (stats, span, decision, error codes), the health
 * service's answers, the gRPC wire helpers, and the listener contract app.ts starts and stops.
 */
import type { AddressInfo, Server } from 'node:net';
import zlib from 'node:zlib';
import { status } from '@grpc/grpc-js';
import { HealthCheckResponse_ServingStatus as Serving, type HealthListResponse } from '../../generated/grpc/health/v1/health';
import { InvalidRateLimitRequestError, type RateLimitRequest, type RateLimitResponse } from '../core/rls';
import type { Caller } from '../core/store';
import type { GrpcSettings } from '../settings';
import type { Counter, StatsStore, Timer } from '../stats/store';
import type { Logger } from '../telemetry/logger';
import { NOOP_TRACING, type TraceCarrier, type Tracing } from '../telemetry/tracing';
import type { DecisionAnswer } from '../limiter/service';
import { errorMessage } from '../platform/errors';
import type { QuotaService } from '../quota/quota-service';
import type { Health } from './health';
import type { Decider } from './http';
import { decodeRateLimitRequest, GRPC_PREFIX_BYTES, ProtoDecodeError } from './proto-codec';
import { requestText } from './request-text';
import type { ServerBudgets } from './byte-budget';
import { LISTEN_BACKLOG, type ListenerAdmission } from './admission';
import type { CertificateSource } from './tls';

/** The health service name whose status follows the components (upstream's "ratelimit"). */
export const HEALTH_SERVICE_NAME = 'ratelimit';

export const SHOULD_RATE_LIMIT_PATH = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';
export const HEALTH_CHECK_PATH = '/grpc.health.v1.Health/Check';
export const HEALTH_WATCH_PATH = '/grpc.health.v1.Health/Watch';
export const HEALTH_LIST_PATH = '/grpc.health.v1.Health/List';

export interface GrpcServicesOptions {
  service: Decider;
  /** RLQS (StreamRateLimitQuotas), when the service serves it. */
  quota?: QuotaService;
  health: Health;
  stats: StatsStore;
  logger: Logger;
  tracing?: Tracing;
}

export interface GrpcListenerOptions extends GrpcServicesOptions {
  grpc: GrpcSettings;
  /** The grpc-js form of the address: `host:port` or `unix:path`. */
  target: string;
  /** REQUEST_MAX_BYTES: largest accepted message. */
  maxRequestBytes: number;
  /** The TLS material when GRPC_SERVER_USE_TLS. */
  certificates: CertificateSource | undefined;
  /** The process's bounds on what the servers hold for clients (shared with the HTTP port). */
  budgets: ServerBudgets;
  /** Which connections the port holds, and for how long (admission.ts). */
  admission: ListenerAdmission;
}

/** A gRPC server as app.ts drives it, whichever transport serves it. */
export interface GrpcListener {
  /** Binds the address (and applies TLS); resolves to the bound port. */
  listen(): Promise<number>;
  /** Ends the open health Watch streams, which would otherwise hold a graceful stop. */
  endWatches(): void;
  /** Stops accepting calls; resolves once the calls in flight have finished. */
  drain(): Promise<void>;
  /** Closes every connection at once. */
  forceClose(): void;
}

/** Binds a lean transport's server to GRPC_UDS or GRPC_HOST:GRPC_PORT; resolves to the port (0 on a socket file). */
export function listenOn(server: Server, settings: GrpcSettings): Promise<number> {
  return new Promise<number>((resolve, reject) => {
    server.once('error', reject);
    const listening = (): void => {
      server.off('error', reject);
      resolve(settings.uds !== '' ? 0 : (server.address() as AddressInfo).port);
    };
    if (settings.uds !== '') server.listen({ path: settings.uds, backlog: LISTEN_BACKLOG }, listening);
    else server.listen({ port: settings.port, host: settings.host, backlog: LISTEN_BACKLOG }, listening);
  });
}

export interface MethodStats {
  readonly total: Counter;
  readonly time: Timer;
}

/** `ratelimit_server.<Method>.total_requests` and `.response_time`, as upstream. */
export function methodStats(stats: StatsStore, method: string): MethodStats {
  return {
    total: stats.counter(`ratelimit_server.${method}.total_requests`),
    time: stats.timer(`ratelimit_server.${method}.response_time`),
  };
}

/** A request that failed to decode: the call answers INVALID_ARGUMENT with its reason. */
export class Undecodable {
  constructor(readonly reason: string) {}
}

/** Decodes `buf[start, end)`; malformed input becomes an {@link Undecodable}. */
export function decodeRequest(buf: Buffer, start = 0, end = buf.length): RateLimitRequest | Undecodable {
  try {
    return decodeRateLimitRequest(buf, start, end);
  } catch (err) {
    if (err instanceof ProtoDecodeError) return new Undecodable(`invalid RateLimitRequest: ${err.message}`);
    throw err;
  }
}

/** One ShouldRateLimit call as both transports carry it: what the shared code answers. */
export interface RateLimitCall {
  /** When its message arrived (performance.now()), for response_time; set by RateLimitCalls. */
  startedAt: number;
  /** The decision, encoded and sent by the transport. */
  answer(response: RateLimitResponse): void;
  /** A gRPC status instead of a response. */
  fail(code: status, details: string): void;
}

/** ShouldRateLimit once its message has arrived: counted, traced, decided, timed, answered. */
export class RateLimitCalls implements DecisionAnswer<RateLimitCall> {
  private readonly stats: MethodStats;
  private readonly tracing: Tracing;

  constructor(private readonly opts: GrpcServicesOptions) {
    this.stats = methodStats(opts.stats, 'ShouldRateLimit');
    this.tracing = opts.tracing ?? NOOP_TRACING;
  }

  /**
   * `carrier` holds the caller's trace headers (grpc-js metadata or HTTP/2 headers); `caller` is
   * the client as its connection knows it.
   */
  handle(request: RateLimitRequest | Undecodable, carrier: TraceCarrier, call: RateLimitCall, caller: Caller | undefined): void {
    call.startedAt = performance.now();
    this.stats.total.inc();
    if (request instanceof Undecodable) {
      this.timed(call);
      call.fail(status.INVALID_ARGUMENT, request.reason);
      return;
    }
    const tracing = this.tracing;
    const span = tracing.enabled ? tracing.startCallSpan(carrier, request.domain, () => requestText(request)) : undefined;
    this.opts.service.decideInto(request, span, caller, 'grpc', call, this);
  }

  decided(call: RateLimitCall, response: RateLimitResponse): void {
    this.timed(call);
    call.answer(response);
  }

  failed(call: RateLimitCall, err: unknown): void {
    this.timed(call);
    const details = errorMessage(err);
    const logger = this.opts.logger;
    if (logger.enabled('debug')) logger.debug(`ShouldRateLimit error: ${details}`);
    // Upstream answers every decision error UNKNOWN; requests beyond our own limits are INVALID_ARGUMENT.
    call.fail(err instanceof InvalidRateLimitRequestError ? status.INVALID_ARGUMENT : status.UNKNOWN, details);
  }

  private timed(call: RateLimitCall): void {
    this.stats.time.record(Math.trunc(performance.now() - call.startedAt));
  }
}

/**
 * The grpc.health.v1.Health answers: '' is always SERVING, 'ratelimit' follows the components,
 * other names are unknown. Watch streams are tracked so a stop can end them.
 */
export class HealthAnswers {
  private readonly checks: MethodStats;
  private readonly watches = new Set<() => void>();

  constructor(
    private readonly health: Health,
    stats: StatsStore,
  ) {
    this.checks = methodStats(stats, 'Check');
  }

  /** The status of `name`, undefined for an unknown service (NOT_FOUND); counts the Check. */
  check(name: string): Serving | undefined {
    this.checks.total.inc();
    return this.statusOf(name);
  }

  list(): HealthListResponse {
    return { statuses: { '': { status: Serving.SERVING }, [HEALTH_SERVICE_NAME]: { status: this.statusOf(HEALTH_SERVICE_NAME)! } } };
  }

  /**
   * Sends the status of `name` now and at every change (SERVICE_UNKNOWN for an unknown name);
   * `end` finishes the stream at a stop. Returns the function that stops following, to call when
   * the stream closes.
   */
  watch(name: string, send: (status: Serving) => void, end: () => void): () => void {
    let last: Serving | undefined;
    const update = (): void => {
      const s = this.statusOf(name) ?? Serving.SERVICE_UNKNOWN;
      if (s !== last) {
        last = s;
        send(s);
      }
    };
    update();
    const unsubscribe = this.health.onChange(update);
    this.watches.add(end);
    return () => {
      unsubscribe();
      this.watches.delete(end);
    };
  }

  /** Ends every open Watch stream. */
  endWatches(): void {
    const ends = [...this.watches];
    this.watches.clear();
    for (const end of ends) end();
  }

  private statusOf(name: string): Serving | undefined {
    if (name === '') return Serving.SERVING;
    if (name === HEALTH_SERVICE_NAME) return this.health.isHealthy() ? Serving.SERVING : Serving.NOT_SERVING;
    return undefined;
  }
}

/** grpc-timeout units in milliseconds (the spec's Hours, Minutes, Seconds, milli, micro, nano). */
const TIMEOUT_UNIT_MS: Readonly<Record<string, number>> = { H: 3_600_000, M: 60_000, S: 1000, m: 1, u: 1e-3, n: 1e-6 };

/**
 * The call's deadline from `grpc-timeout` (at most 8 digits and a unit), in ms rounded up so a
 * sub-millisecond timeout still expires; undefined without the header, NaN when malformed.
 */
export function parseGrpcTimeout(value: string | string[] | undefined): number | undefined {
  if (value === undefined) return undefined;
  const text = Array.isArray(value) ? value[0]! : value;
  const unit = TIMEOUT_UNIT_MS[text.charAt(text.length - 1)];
  const digits = text.slice(0, -1);
  if (unit === undefined || digits.length === 0 || digits.length > 8 || !/^\d+$/.test(digits)) return NaN;
  return Math.ceil(Number(digits) * unit);
}

/** Percent-encodes a grpc-message as the spec asks: UTF-8 bytes outside 0x20..0x7E, and `%`. */
export function percentEncode(text: string): string {
  let plain = true;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x20 || c > 0x7e || c === 0x25) {
      plain = false;
      break;
    }
  }
  if (plain) return text;
  let out = '';
  for (const b of Buffer.from(text, 'utf8')) {
    out += b < 0x20 || b > 0x7e || b === 0x25 ? `%${b < 16 ? '0' : ''}${b.toString(16).toUpperCase()}` : String.fromCharCode(b);
  }
  return out;
}

/** `application/grpc`, optionally with a subtype (`+proto`) or parameters. */
export function isGrpcContentType(value: string | undefined): boolean {
  if (value === undefined || !value.startsWith('application/grpc')) return false;
  const next = value.charCodeAt(16);
  return Number.isNaN(next) || next === 0x2b /* + */ || next === 0x3b /* ; */;
}

/**
 * Decompresses a message sent with the compressed flag in the call's grpc-encoding (gzip and
 * deflate, as grpc-js accepts). `done` gets the message, or the status and text to answer.
 */
export function inflateMessage(
  encoding: string | undefined,
  message: Buffer,
  maxBytes: number,
  done: (out: Buffer | undefined, code: status, details: string) => void,
): void {
  const name = encoding ?? 'identity';
  const inflate = name === 'gzip' ? zlib.gunzip : name === 'deflate' ? zlib.inflate : undefined;
  if (inflate === undefined) {
    if (name === 'identity') done(undefined, status.INTERNAL, 'Received a compressed message without a grpc-encoding');
    else done(undefined, status.UNIMPLEMENTED, `Received message compressed with unsupported encoding "${name}"`);
    return;
  }
  inflate(message, { maxOutputLength: maxBytes }, (err, out) => {
    if (err === null) done(out, status.OK, '');
    else if ((err as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE') {
      done(undefined, status.RESOURCE_EXHAUSTED, `Received message that decompresses to a size larger than ${maxBytes}`);
    } else done(undefined, status.INTERNAL, `Received a message that does not decompress (${name}): ${err.message}`);
  });
}

/** A generated message's bytes as one uncompressed gRPC message (prefix and message in one buffer). */
export function grpcMessage(message: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(GRPC_PREFIX_BYTES + message.length);
  out[0] = 0;
  out.writeUInt32BE(message.length, 1);
  out.set(message, GRPC_PREFIX_BYTES);
  return out;
}
