/**
 * A unary gRPC call on our own HTTP/2 server (GRPC_TRANSPORT=socket): the one seam between the
 * HTTP/2 layer (h2/) and the gRPC services. The connection drives a {@link UnaryCall} as its
 * stream's StreamCall (`data`, `ended`, `abort`, `closed`); the call checks its one request
 * message while it arrives and once it is complete, in grpc-go's order, hands it to its method,
 * and the method answers on the call itself (`answer`, `message`, `fail`). The routes of every
 * call (unary, health Watch, RLQS) are checked here too, from its request headers.
 *
 * Wire format (gRPC over HTTP/2): a POST with `content-type: application/grpc[+proto]` whose DATA is
 * length-prefixed messages (1 byte compressed flag, 4 bytes big-endian length). A success is
 * HEADERS (:status 200), DATA (the prefixed message), trailers `grpc-status: 0`; an error is
 * "trailers-only": one HEADERS frame with :status 200, grpc-status and the percent-encoded
 * grpc-message, ending the stream.
 */
import { status } from '@grpc/grpc-js';
import type { RateLimitResponse } from '../core/rls';
import type { Caller } from '../core/store';
import {
  HealthCheckRequest,
  HealthCheckResponse,
  HealthListRequest,
  HealthListResponse,
} from '../../generated/grpc/health/v1/health';
import {
  decodeRequest,
  grpcMessage,
  type GrpcListenerOptions,
  HEALTH_CHECK_PATH,
  HEALTH_LIST_PATH,
  HEALTH_WATCH_PATH,
  type HealthAnswers,
  inflateMessage,
  isGrpcContentType,
  parseGrpcTimeout,
  percentEncode,
  type RateLimitCall,
  RateLimitCalls,
  SHOULD_RATE_LIMIT_PATH,
} from './grpc-common';
import { STREAM_RATE_LIMIT_QUOTAS_PATH } from './quota-calls';
import type { AbortReason, H2Stream, StreamCall } from './h2/stream';
import { encodeHeaderBlock } from './h2/hpack';
import { encodeRateLimitResponseFrame, GRPC_PREFIX_BYTES } from './proto-codec';
import { errorMessage } from '../platform/errors';

export const OK_HEADERS = encodeHeaderBlock([
  [':status', '200'],
  ['content-type', 'application/grpc'],
  ['grpc-accept-encoding', 'identity,deflate,gzip'],
]);
export const OK_TRAILERS = encodeHeaderBlock([['grpc-status', '0']]);

/** A trailers-only gRPC status, ending a stream that has not answered yet. */
export function respondStatus(stream: H2Stream, code: status, details: string): void {
  if (!stream.open) return;
  const block = encodeHeaderBlock([
    [':status', '200'],
    ['content-type', 'application/grpc'],
    ['grpc-status', String(code)],
    ['grpc-message', percentEncode(details)],
  ]);
  stream.respond(block, true);
}

/** A request that is not gRPC at all: an HTTP status, with grpc-status INTERNAL for gRPC clients. */
function respondHttpError(stream: H2Stream, httpStatus: number, details: string): void {
  const block = encodeHeaderBlock([
    [':status', String(httpStatus)],
    ['grpc-status', String(status.INTERNAL)],
    ['grpc-message', percentEncode(details)],
  ]);
  stream.respond(block, true);
}

/** How a stream that must end unanswered is answered (see StreamCall.abort). */
export function abortStatus(reason: AbortReason, bodyTimeoutMs: number): { code: status; details: string } {
  if (reason === 'deadline') return { code: status.DEADLINE_EXCEEDED, details: 'Deadline exceeded' };
  if (reason === 'body-timeout') {
    return { code: status.DEADLINE_EXCEEDED, details: `the request message did not arrive whole within ${bodyTimeoutMs / 1000}s (GRPC_REQUEST_BODY_TIMEOUT)` };
  }
  return { code: status.RESOURCE_EXHAUSTED, details: 'the server holds too many incomplete requests (REQUEST_MAX_BUFFERED_BYTES); retry' };
}

/** A method's handling of a call's one complete request message, `buf[start, end)`. */
export type UnaryMethod = (call: UnaryCall, buf: Buffer, start: number, end: number) => void;

/** Where a call's path leads. */
export interface GrpcRoute {
  /** The method of a unary call; undefined for the RLQS stream, which the listener runs. */
  readonly unary: UnaryMethod | undefined;
  /** Health Watch and RLQS live as long as the client wants, and get no deadline (their clients set none). */
  readonly longLived: boolean;
}

/** The bounds every unary call of a listener shares. */
export interface UnaryLimits {
  /** REQUEST_MAX_BYTES. */
  readonly maxRequestBytes: number;
  /** GRPC_REQUEST_BODY_TIMEOUT, for the text of its status. */
  readonly bodyTimeoutMs: number;
}

/** A call with one request message (ShouldRateLimit, health Check, List and Watch). */
export class UnaryCall implements StreamCall, RateLimitCall {
  /** The message length its prefix declared, once read; -1 before. */
  private declared = -1;
  startedAt = 0;

  constructor(
    readonly stream: H2Stream,
    private readonly method: UnaryMethod,
    private readonly limits: UnaryLimits,
    /** The client, from its connection. */
    readonly caller: Caller | undefined,
  ) {}

  // The HTTP/2 side: what the connection tells the call.

  /**
   * Checks the body while it arrives, once the first message's prefix is in: a message larger
   * than REQUEST_MAX_BYTES, or a second one, is answered at once, so the rest need not be read.
   */
  data(): void {
    const s = this.stream;
    if (!s.open || s.received < GRPC_PREFIX_BYTES) return;
    const declared = this.declared >= 0 ? this.declared : s.body.bytes().readUInt32BE(1);
    const max = this.limits.maxRequestBytes;
    if (declared > max) {
      this.fail(status.RESOURCE_EXHAUSTED, `Received message larger than max (${declared} vs ${max})`);
      return;
    }
    if (s.received > GRPC_PREFIX_BYTES + declared) {
      this.fail(status.UNIMPLEMENTED, `Received a second request message for method ${String(s.headers[':path'])}`);
      return;
    }
    if (this.declared >= 0) return;
    // The stream's window opens as far as the message it declared, and no further.
    this.declared = declared;
    s.acceptBody(GRPC_PREFIX_BYTES + declared);
  }

  /** The client has sent its whole request: its one message goes to the method (decompressed when the client compressed it). */
  ended(): void {
    const s = this.stream;
    if (!s.open) return;
    const body = s.received === 0 ? undefined : s.body.bytes();
    if (body === undefined || body.length === 0) {
      this.fail(status.UNIMPLEMENTED, `Received no request message for method ${String(s.headers[':path'])}`);
      return;
    }
    const received = body.length;
    if (received < GRPC_PREFIX_BYTES || received < GRPC_PREFIX_BYTES + body.readUInt32BE(1)) {
      this.fail(status.INTERNAL, `Received an incomplete request message (${received} bytes)`);
      return;
    }
    const flag = body[0];
    if (flag === 0) this.method(this, body, GRPC_PREFIX_BYTES, received);
    else if (flag === 1) {
      inflateMessage(s.headers['grpc-encoding'], body.subarray(GRPC_PREFIX_BYTES), this.limits.maxRequestBytes, (out, code, details) => {
        if (out !== undefined) this.method(this, out, 0, out.length);
        else this.fail(code, details);
      });
    } else this.fail(status.INTERNAL, `Received a message with an invalid compressed flag ${String(flag)}`);
  }

  abort(reason: AbortReason): void {
    const { code, details } = abortStatus(reason, this.limits.bodyTimeoutMs);
    this.fail(code, details);
  }

  closed(): void {}

  // The gRPC side: how a method answers.

  /** The request headers, names in lower case (trace propagation reads them). */
  get headers(): Record<string, string> {
    return this.stream.headers;
  }

  /** One message (with its gRPC prefix), then `grpc-status: 0` trailers. */
  message(frame: Buffer): void {
    const s = this.stream;
    if (s.open) s.answer(OK_HEADERS, frame, OK_TRAILERS);
  }

  /** A ShouldRateLimit response. */
  answer(response: RateLimitResponse): void {
    let frame: Buffer;
    try {
      frame = encodeRateLimitResponseFrame(response);
    } catch (err) {
      this.fail(status.INTERNAL, `cannot encode the response: ${errorMessage(err)}`);
      return;
    }
    this.message(frame);
  }

  /** A trailers-only gRPC status. */
  fail(code: status, details: string): void {
    respondStatus(this.stream, code, details);
  }
}

/** A health Watch stream once its request has arrived: how to stop following the health. */
class Watching implements StreamCall {
  constructor(private readonly stop: () => void) {}
  data(): void {}
  ended(): void {}
  abort(): void {}
  closed(): void {
    this.stop();
  }
}

/**
 * The routes of the socket transport: ShouldRateLimit and grpc.health.v1.Health as unary
 * methods, and StreamRateLimitQuotas when `quotaServed`.
 */
export function grpcRoutes(opts: GrpcListenerOptions, health: HealthAnswers, quotaServed: boolean): ReadonlyMap<string, GrpcRoute> {
  const calls = new RateLimitCalls(opts);
  /** Decodes a small health request with the generated code; undefined (answered) when malformed. */
  const decodeHealth = <T>(decode: (input: Uint8Array) => T, call: UnaryCall, buf: Buffer, start: number, end: number): T | undefined => {
    try {
      return decode(buf.subarray(start, end));
    } catch {
      call.fail(status.INTERNAL, 'Error deserializing request');
      return undefined;
    }
  };
  const shouldRateLimit: UnaryMethod = (call, buf, start, end) => calls.handle(decodeRequest(buf, start, end), call.headers, call, call.caller);
  const check: UnaryMethod = (call, buf, start, end) => {
    const request = decodeHealth(HealthCheckRequest.decode, call, buf, start, end);
    if (request === undefined) return;
    const s = health.check(request.service);
    if (s === undefined) call.fail(status.NOT_FOUND, 'unknown service');
    else call.message(grpcMessage(HealthCheckResponse.encode({ status: s }).finish()));
  };
  const list: UnaryMethod = (call, buf, start, end) => {
    if (decodeHealth(HealthListRequest.decode, call, buf, start, end) === undefined) return;
    call.message(grpcMessage(HealthListResponse.encode(health.list()).finish()));
  };
  // Watch: the status of a service now and at every change, until the call or the server ends.
  const watch: UnaryMethod = (call, buf, start, end) => {
    const request = decodeHealth(HealthCheckRequest.decode, call, buf, start, end);
    const stream = call.stream;
    if (request === undefined || !stream.open) return;
    stream.respond(OK_HEADERS, false);
    const stop = health.watch(
      request.service,
      (s) => stream.write(grpcMessage(HealthCheckResponse.encode({ status: s }).finish())),
      () => stream.end(OK_TRAILERS),
    );
    if (stream.closed) stop();
    else stream.call = new Watching(stop);
  };
  const unary = (method: UnaryMethod): GrpcRoute => ({ unary: method, longLived: false });
  const routes = new Map<string, GrpcRoute>([
    [SHOULD_RATE_LIMIT_PATH, unary(shouldRateLimit)],
    [HEALTH_CHECK_PATH, unary(check)],
    [HEALTH_WATCH_PATH, { unary: watch, longLived: true }],
    [HEALTH_LIST_PATH, unary(list)],
  ]);
  if (quotaServed) routes.set(STREAM_RATE_LIMIT_QUOTAS_PATH, { unary: undefined, longLived: true });
  return routes;
}

/**
 * The route of a new stream, from its request headers, with its deadline set; undefined once the
 * stream has been answered: not gRPC (415), not a POST (405), a malformed grpc-timeout (INTERNAL),
 * an unknown method (UNIMPLEMENTED), checked in grpc-go's order.
 */
export function routeOf(stream: H2Stream, routes: ReadonlyMap<string, GrpcRoute>): GrpcRoute | undefined {
  const headers = stream.headers;
  const contentType = headers['content-type'];
  if (!isGrpcContentType(contentType)) {
    respondHttpError(stream, 415, `invalid gRPC request content-type ${JSON.stringify(contentType ?? '')}`);
    return undefined;
  }
  const method = headers[':method'];
  if (method !== 'POST') {
    respondHttpError(stream, 405, `Received a HEADERS frame with :method ${JSON.stringify(method)} which should be POST`);
    return undefined;
  }
  const timeoutMs = parseGrpcTimeout(headers['grpc-timeout']);
  if (Number.isNaN(timeoutMs)) {
    respondStatus(stream, status.INTERNAL, `malformed grpc-timeout: ${String(headers['grpc-timeout'])}`);
    return undefined;
  }
  const path = String(headers[':path']);
  const route = routes.get(path);
  if (route === undefined) {
    respondStatus(stream, status.UNIMPLEMENTED, `The server does not implement the method ${path}`);
    return undefined;
  }
  // Armed by the connection only if the call is still unanswered at the end of the read.
  if (timeoutMs !== undefined && !route.longLived) stream.deadlineAt = performance.now() + timeoutMs;
  return route;
}
