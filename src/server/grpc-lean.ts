/**
 * The gRPC calls of our own transport (grpc-socket.ts), apart from how it writes them: routing a
 * call from its request headers, the checks on its one request message while it arrives and once
 * it is complete, and the ShouldRateLimit and health answers. The transport says how it answers
 * ({@link LeanReply}) and streams health Watch and RLQS itself.
 *
 * Wire format (gRPC over HTTP/2): a POST with `content-type: application/grpc[+proto]` whose DATA is
 * length-prefixed messages (1 byte compressed flag, 4 bytes big-endian length). A success is
 * HEADERS (:status 200), DATA (the prefixed message), trailers `grpc-status: 0`; an error is
 * "trailers-only": one HEADERS frame with :status 200, grpc-status and the percent-encoded
 * grpc-message, ending the stream.
 */
import { status } from '@grpc/grpc-js';
import type { Caller } from '../core/store';
import {
  HealthCheckRequest,
  HealthCheckResponse,
  HealthListRequest,
  HealthListResponse,
} from '../../generated/grpc/health/v1/health';
import {
  type CallAnswer,
  decodeRequest,
  grpcMessage,
  type GrpcListenerOptions,
  HEALTH_CHECK_PATH,
  HEALTH_LIST_PATH,
  HEALTH_WATCH_PATH,
  HealthAnswers,
  inflateMessage,
  isGrpcContentType,
  parseGrpcTimeout,
  RateLimitCalls,
  SHOULD_RATE_LIMIT_PATH,
} from './grpc-common';
import { encodeRateLimitResponseFrame, GRPC_PREFIX_BYTES } from './proto-codec';
import { QuotaCalls, STREAM_RATE_LIMIT_QUOTAS_PATH } from './quota-calls';
import { errorMessage } from '../platform/errors';

/** A call's request headers, names in lower case (node:http2's or our own). */
export type RequestHeaders = Readonly<Record<string, string | string[] | undefined>>;

/** How a transport answers a call; `C` is its handle of the call. */
export interface LeanReply<C> {
  /** One message (with its gRPC prefix), then `grpc-status: 0` trailers. */
  message(call: C, frame: Buffer): void;
  /** A trailers-only gRPC status. */
  status(call: C, code: status, details: string): void;
  /** A request that is not gRPC at all: an HTTP status, with grpc-status INTERNAL for gRPC clients. */
  httpError(call: C, httpStatus: number, details: string): void;
  /** The call must be answered within `ms` (its grpc-timeout); DEADLINE_EXCEEDED after that. */
  deadline(call: C, ms: number): void;
  /** The client the call comes from (its connection's peer). */
  caller(call: C): Caller | undefined;
}

/** A handler of a call's one complete request message: `buf[start, end)`. */
export type MessageHandler<C> = (call: C, headers: RequestHeaders, buf: Buffer, start: number, end: number) => void;

/** The services of the lean transports: ShouldRateLimit and grpc.health.v1.Health. */
export class LeanServices<C> {
  readonly health: HealthAnswers;
  private readonly routes: ReadonlyMap<string, MessageHandler<C>>;
  private readonly onWatch: MessageHandler<C>;
  /** RLQS, when served: the route's handler marks a streaming call, which the transport runs. */
  readonly quota: QuotaCalls | undefined;
  readonly onQuotaStream: MessageHandler<C> = () => {
    throw new Error('a streaming call has no single request message');
  };
  private readonly maxRequestBytes: number;

  /** `watch` streams the status of `service` on a Watch call until the call or the server ends. */
  constructor(
    opts: GrpcListenerOptions,
    private readonly reply: LeanReply<C>,
    watch: (call: C, service: string) => void,
  ) {
    this.maxRequestBytes = opts.maxRequestBytes;
    const calls = new RateLimitCalls(opts);
    const health = new HealthAnswers(opts.health, opts.stats);
    this.health = health;
    const rateLimitAnswer: CallAnswer<C> = {
      ok(call, response) {
        let frame: Buffer;
        try {
          frame = encodeRateLimitResponseFrame(response);
        } catch (err) {
          reply.status(call, status.INTERNAL, `cannot encode the response: ${errorMessage(err)}`);
          return;
        }
        reply.message(call, frame);
      },
      fail: (call, code, details) => reply.status(call, code, details),
    };
    /** Decodes a small health request with the generated code; undefined (answered) when malformed. */
    const decodeHealth = <T>(decode: (input: Uint8Array) => T, call: C, buf: Buffer, start: number, end: number): T | undefined => {
      try {
        return decode(buf.subarray(start, end));
      } catch {
        reply.status(call, status.INTERNAL, 'Error deserializing request');
        return undefined;
      }
    };
    const onRateLimit: MessageHandler<C> = (call, headers, buf, start, end) =>
      calls.handle(decodeRequest(buf, start, end), headers, call, rateLimitAnswer, reply.caller(call));
    const onCheck: MessageHandler<C> = (call, _headers, buf, start, end) => {
      const request = decodeHealth(HealthCheckRequest.decode, call, buf, start, end);
      if (request === undefined) return;
      const s = health.check(request.service);
      if (s === undefined) reply.status(call, status.NOT_FOUND, 'unknown service');
      else reply.message(call, grpcMessage(HealthCheckResponse.encode({ status: s }).finish()));
    };
    const onList: MessageHandler<C> = (call, _headers, buf, start, end) => {
      if (decodeHealth(HealthListRequest.decode, call, buf, start, end) === undefined) return;
      reply.message(call, grpcMessage(HealthListResponse.encode(health.list()).finish()));
    };
    this.onWatch = (call, _headers, buf, start, end) => {
      const request = decodeHealth(HealthCheckRequest.decode, call, buf, start, end);
      if (request !== undefined) watch(call, request.service);
    };
    const routes = new Map([
      [SHOULD_RATE_LIMIT_PATH, onRateLimit],
      [HEALTH_CHECK_PATH, onCheck],
      [HEALTH_WATCH_PATH, this.onWatch],
      [HEALTH_LIST_PATH, onList],
    ]);
    if (opts.quota !== undefined) {
      this.quota = new QuotaCalls(opts.quota, opts.stats, opts.logger);
      routes.set(STREAM_RATE_LIMIT_QUOTAS_PATH, this.onQuotaStream);
    }
    this.routes = routes;
  }

  /**
   * The handler of a call's message, from its request headers, with its deadline set; undefined
   * once the call has been answered: not gRPC (415), not a POST (405), a malformed grpc-timeout
   * (INTERNAL), an unknown method (UNIMPLEMENTED), checked in grpc-go's order.
   */
  route(call: C, headers: RequestHeaders): MessageHandler<C> | undefined {
    const reply = this.reply;
    const contentType = headers['content-type'] as string | undefined;
    if (!isGrpcContentType(contentType)) {
      reply.httpError(call, 415, `invalid gRPC request content-type ${JSON.stringify(contentType ?? '')}`);
      return undefined;
    }
    const method = headers[':method'];
    if (method !== 'POST') {
      reply.httpError(call, 405, `Received a HEADERS frame with :method ${JSON.stringify(method)} which should be POST`);
      return undefined;
    }
    const timeoutMs = parseGrpcTimeout(headers['grpc-timeout']);
    if (Number.isNaN(timeoutMs)) {
      reply.status(call, status.INTERNAL, `malformed grpc-timeout: ${String(headers['grpc-timeout'])}`);
      return undefined;
    }
    const path = String(headers[':path']);
    const handle = this.routes.get(path);
    if (handle === undefined) {
      reply.status(call, status.UNIMPLEMENTED, `The server does not implement the method ${path}`);
      return undefined;
    }
    // Watch and RLQS streams are long-lived on purpose and get no deadline, as their clients set none.
    if (timeoutMs !== undefined && handle !== this.onWatch && handle !== this.onQuotaStream) reply.deadline(call, timeoutMs);
    return handle;
  }

  /**
   * Checks the request body while it arrives, once its first message's prefix is in (`declared`
   * is the length it declares): false once the call has been answered (the message is too large,
   * or a second one follows), so the rest need not be read.
   */
  bodySoFar(call: C, headers: RequestHeaders, received: number, declared: number): boolean {
    if (declared > this.maxRequestBytes) {
      this.reply.status(call, status.RESOURCE_EXHAUSTED, `Received message larger than max (${declared} vs ${this.maxRequestBytes})`);
      return false;
    }
    if (received > GRPC_PREFIX_BYTES + declared) {
      this.reply.status(call, status.UNIMPLEMENTED, `Received a second request message for method ${String(headers[':path'])}`);
      return false;
    }
    return true;
  }

  /**
   * The client has sent its whole request, `body` (undefined when empty): hands its one message to
   * `handle` (decompressed when the client compressed it), or answers why it cannot.
   */
  bodyEnded(call: C, headers: RequestHeaders, body: Buffer | undefined, handle: MessageHandler<C>): void {
    const reply = this.reply;
    if (body === undefined || body.length === 0) {
      reply.status(call, status.UNIMPLEMENTED, `Received no request message for method ${String(headers[':path'])}`);
      return;
    }
    const received = body.length;
    if (received < GRPC_PREFIX_BYTES || received < GRPC_PREFIX_BYTES + body.readUInt32BE(1)) {
      reply.status(call, status.INTERNAL, `Received an incomplete request message (${received} bytes)`);
      return;
    }
    const flag = body[0];
    if (flag === 0) handle(call, headers, body, GRPC_PREFIX_BYTES, received);
    else if (flag === 1) {
      const encoding = headers['grpc-encoding'] as string | undefined;
      inflateMessage(encoding, body.subarray(GRPC_PREFIX_BYTES), this.maxRequestBytes, (out, code, details) => {
        if (out !== undefined) handle(call, headers, out, 0, out.length);
        else reply.status(call, code, details);
      });
    } else reply.status(call, status.INTERNAL, `Received a message with an invalid compressed flag ${String(flag)}`);
  }
}
