/**
 * The default gRPC listener (GRPC_TRANSPORT=socket): ShouldRateLimit, StreamRateLimitQuotas and
 * grpc.health.v1.Health served by our own HTTP/2 connection handler (h2/) straight on each socket,
 * so a socket read holding many calls costs one pass over its frames and one write of all their
 * answers. Same status codes, texts and stats as the grpc-js transport (grpc-common.ts). A new
 * stream is routed by grpc-unary.ts; its call is a unary call (grpc-unary.ts, which a health Watch
 * turns into a stream once its request has arrived) or an RLQS stream (here).
 */
import type net from 'node:net';
import { status } from '@grpc/grpc-js';
import { checkQuotaLength, QuotaCalls, quotaFrameError, type QuotaStreamHandle } from './quota-calls';
import { type GrpcListener, type GrpcListenerOptions, HealthAnswers, listenOn, percentEncode } from './grpc-common';
import { abortStatus, grpcRoutes, OK_HEADERS, OK_TRAILERS, respondStatus, routeOf, UnaryCall, type UnaryLimits } from './grpc-unary';
import { type ConnectionOptions, H2Connection, type StreamHandler } from './h2/connection';
import { STREAM_WINDOW } from './h2/frames';
import type { AbortReason, H2Stream, StreamCall } from './h2/stream';
import { encodeHeaderBlock } from './h2/hpack';
import { GRPC_PREFIX_BYTES } from './proto-codec';
import type { Admission } from './admission';
import { socketServer } from './tls';
import type { Caller } from '../core/store';
import { socketCaller } from './callers';
import { MAX_TIMER_MS } from '../platform/clock';

/** Largest request header list: far above what a gRPC client sends, small enough to bound memory. */
const MAX_HEADER_LIST_BYTES = 64 * 1024;

/**
 * An RLQS stream (StreamRateLimitQuotas): each request message goes to the quota calls as soon as
 * it is complete (the engine answers a report at once: it does no I/O on the way); responses
 * are DATA on the open stream; the client's end of stream ends it with OK.
 */
class QuotaStreaming implements StreamCall {
  readonly handle: QuotaStreamHandle;
  private headersSent = false;
  /** The client ended its side (its last messages may wait behind a report handled in parts). */
  private clientEnded = false;

  constructor(
    private readonly stream: H2Stream,
    calls: QuotaCalls,
    private readonly maxRequestBytes: number,
    private readonly bodyTimeoutMs: number,
  ) {
    stream.longLived = true;
    this.handle = calls.open({
      write: (frame) => {
        if (stream.closed) return;
        if (!this.headersSent) {
          this.headersSent = true;
          stream.respond(OK_HEADERS, false);
        }
        stream.write(frame);
      },
      unread: () => stream.unsent,
      fail: (code, details) => this.finish(code, details),
      reset: () => stream.reset(),
      resume: () => {
        this.data();
        if (this.clientEnded) this.ended();
      },
    }, stream.owner);
  }

  /** Hands over every complete message received so far (none while a report is handled in parts: their bytes wait, and so does the client). */
  data(): void {
    const s = this.stream;
    while (!s.closed && !this.handle.busy && s.body.length >= GRPC_PREFIX_BYTES) {
      const length = s.body.bytes().readUInt32BE(1);
      const tooLarge = checkQuotaLength(length, this.maxRequestBytes);
      if (tooLarge !== undefined) {
        this.finish(tooLarge.code, tooLarge.details);
        return;
      }
      if (s.body.length < GRPC_PREFIX_BYTES + length) {
        // A message under way: the window opens for all of it.
        s.acceptBody(Math.max(STREAM_WINDOW, GRPC_PREFIX_BYTES + length));
        return;
      }
      const frame = s.take(GRPC_PREFIX_BYTES + length);
      s.messageArrived();
      const refused = quotaFrameError(frame);
      if (refused !== undefined) {
        this.finish(refused.code, refused.details);
        return;
      }
      this.handle.message(frame.subarray(GRPC_PREFIX_BYTES));
    }
  }

  /** The client ended its side: the stream ends with OK (after a message left incomplete, INTERNAL). */
  ended(): void {
    this.clientEnded = true;
    this.data();
    if (this.handle.busy) return; // once the report under way and the messages behind it are handled
    const held = this.stream.body.length;
    if (held > 0) this.finish(status.INTERNAL, `Received an incomplete request message (${held} bytes)`);
    else this.finish(status.OK, '');
  }

  abort(reason: AbortReason): void {
    const { code, details } = abortStatus(reason, this.bodyTimeoutMs);
    this.finish(code, details);
  }

  closed(): void {
    this.handle.close();
  }

  private finish(code: status, details: string): void {
    this.handle.close();
    const s = this.stream;
    if (s.closed) return;
    if (!this.headersSent) {
      respondStatus(s, code, details);
      return;
    }
    s.end(code === status.OK ? OK_TRAILERS : encodeHeaderBlock([['grpc-status', String(code)], ['grpc-message', percentEncode(details)]]));
  }
}

/** The socket gRPC server with the services, GRPC_MAX_CONNECTION_AGE(_GRACE), REQUEST_MAX_BYTES and TLS. */
export function createGrpcSocketListener(opts: GrpcListenerOptions): GrpcListener {
  const { grpc: settings, certificates, logger } = opts;
  const health = new HealthAnswers(opts.health, opts.stats);
  const quota = opts.quota === undefined ? undefined : new QuotaCalls(opts.quota, opts.stats, opts.logger);
  const routes = grpcRoutes(opts, health, quota !== undefined);
  const bodyTimeoutMs = settings.requestBodyTimeoutMs;
  const limits: UnaryLimits = { maxRequestBytes: opts.maxRequestBytes, bodyTimeoutMs };
  /** The streams of one connection, whose calls come from `caller`. */
  const handlerFor = (caller: Caller | undefined): StreamHandler => ({
    open(stream) {
      const route = routeOf(stream, routes);
      if (route === undefined) return undefined;
      if (route.unary === undefined) return new QuotaStreaming(stream, quota!, opts.maxRequestBytes, bodyTimeoutMs);
      return new UnaryCall(stream, route.unary, limits, caller);
    },
  });

  const connectionOptions: ConnectionOptions = {
    maxConcurrentStreams: settings.maxConcurrentStreams,
    maxHeaderListBytes: MAX_HEADER_LIST_BYTES,
    keepaliveTimeMs: settings.keepaliveTimeMs,
    keepaliveTimeoutMs: settings.keepaliveTimeoutMs,
    bodyTimeoutMs,
    // A connection holds one largest message and one window more, as Go holds 1 MiB.
    maxHeldBodyBytes: Math.max(1 << 20, opts.maxRequestBytes + GRPC_PREFIX_BYTES),
    budgets: opts.budgets,
  };
  const admission = opts.admission;
  const ageMs = settings.maxConnectionAgeMs;
  const graceMs = settings.maxConnectionAgeGraceMs;

  const serve = (socket: net.Socket, admitted: Admission): void => {
    // Answers go out at once (no Nagle delay behind the client's delayed ACK).
    socket.setNoDelay(true);
    const connection = new H2Connection(socket, handlerFor(socketCaller(socket)), connectionOptions, (budget) => admitted.exceeded(budget));
    admitted.connection = connection;
    let graceTimer: NodeJS.Timeout | undefined;
    // ±10 % jitter, as grpc-js, so connections opened together do not all reconnect together.
    const age = ageMs + (Math.random() * 2 - 1) * (ageMs / 10);
    const ageTimer =
      // Past node's longest timer a connection age or grace is never reached.
      ageMs > 0 && age < MAX_TIMER_MS
        ? setTimeout(() => {
            // GOAWAY naming the last stream: the calls in flight finish, later ones go elsewhere.
            connection.close('max_age');
            if (graceMs < MAX_TIMER_MS) {
              graceTimer = setTimeout(() => connection.destroy(), graceMs);
              graceTimer.unref();
            }
          }, age)
        : undefined;
    ageTimer?.unref();
    socket.once('close', () => {
      clearTimeout(ageTimer);
      clearTimeout(graceTimer);
    });
  };

  // HTTP/2 over TLS only (RFC 9113 3.2): a client that did not choose h2 is closed.
  const tlsOn = settings.tls.enabled && certificates !== undefined;
  const server = socketServer(
    serve,
    admission,
    tlsOn ? { certs: certificates, protocol: 'h2', protocolRequired: true, clientSan: settings.tls.clientSan, logger } : undefined,
    false,
    opts.budgets.requests,
  );

  return {
    listen: () => listenOn(server, settings),
    endWatches: () => health.endWatches(),
    // GOAWAY: each closes when its last call has finished.
    drain: () => admission.drain(server, (c) => c.close('')),
    forceClose: () => admission.forceClose(),
  };
}
