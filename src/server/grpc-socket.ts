/**
 * The default gRPC listener (GRPC_TRANSPORT=socket): ShouldRateLimit, StreamRateLimitQuotas and
 * grpc.health.v1.Health served by our own HTTP/2 connection handler (h2/) straight on each socket,
 * so a socket read holding many calls costs one pass over its frames and one write of all their
 * answers. Same status codes, texts and stats as the grpc-js transport (grpc-common.ts). Each
 * stream's call is one of three kinds: a call with one request message, an RLQS stream, and a
 * health Watch once its request has arrived.
 */
import type net from 'node:net';
import { status } from '@grpc/grpc-js';
import { HealthCheckResponse } from '../../generated/grpc/health/v1/health';
import { checkQuotaLength, quotaFrameError, type QuotaCalls, type QuotaStreamHandle } from './quota-calls';
import { grpcMessage, type GrpcListener, type GrpcListenerOptions, listenOn, percentEncode } from './grpc-common';
import { type LeanReply, LeanServices, type MessageHandler } from './grpc-lean';
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

const OK_HEADERS = encodeHeaderBlock([
  [':status', '200'],
  ['content-type', 'application/grpc'],
  ['grpc-accept-encoding', 'identity,deflate,gzip'],
]);
const OK_TRAILERS = encodeHeaderBlock([['grpc-status', '0']]);

/** How a stream that must end unanswered is answered (see StreamCall.abort). */
function abortStatus(reason: AbortReason, bodyTimeoutMs: number): { code: status; details: string } {
  if (reason === 'deadline') return { code: status.DEADLINE_EXCEEDED, details: 'Deadline exceeded' };
  if (reason === 'body-timeout') {
    return { code: status.DEADLINE_EXCEEDED, details: `the request message did not arrive whole within ${bodyTimeoutMs / 1000}s (GRPC_REQUEST_BODY_TIMEOUT)` };
  }
  return { code: status.RESOURCE_EXHAUSTED, details: 'the server holds too many incomplete requests (REQUEST_MAX_BUFFERED_BYTES); retry' };
}

/** A call with one request message (ShouldRateLimit, health Check, List and Watch). */
class UnaryCall implements StreamCall {
  private declared = -1;

  constructor(
    private readonly stream: H2Stream,
    private readonly handle: MessageHandler<H2Stream>,
    private readonly services: LeanServices<H2Stream>,
    private readonly bodyTimeoutMs: number,
    /** The client, from its connection. */
    readonly caller: Caller | undefined,
  ) {}

  data(): void {
    const s = this.stream;
    if (!s.open || s.received < GRPC_PREFIX_BYTES) return;
    const declared = this.declared >= 0 ? this.declared : s.body.bytes().readUInt32BE(1);
    if (!this.services.bodySoFar(s, s.headers, s.received, declared) || this.declared >= 0) return;
    // The stream's window opens as far as the message it declared, and no further.
    this.declared = declared;
    s.acceptBody(GRPC_PREFIX_BYTES + declared);
  }

  ended(): void {
    const s = this.stream;
    if (!s.open) return;
    this.services.bodyEnded(s, s.headers, s.received === 0 ? undefined : s.body.bytes(), this.handle);
  }

  abort(reason: AbortReason): void {
    const { code, details } = abortStatus(reason, this.bodyTimeoutMs);
    REPLY.status(this.stream, code, details);
  }

  closed(): void {}
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
      REPLY.status(s, code, details);
      return;
    }
    s.end(code === status.OK ? OK_TRAILERS : encodeHeaderBlock([['grpc-status', String(code)], ['grpc-message', percentEncode(details)]]));
  }
}

/** How this transport answers: header blocks and frames through the stream's connection. */
const REPLY: LeanReply<H2Stream> = {
  message(stream, frame) {
    if (stream.open) stream.answer(OK_HEADERS, frame, OK_TRAILERS);
  },
  status(stream, code, details) {
    if (!stream.open) return;
    const block = encodeHeaderBlock([
      [':status', '200'],
      ['content-type', 'application/grpc'],
      ['grpc-status', String(code)],
      ['grpc-message', percentEncode(details)],
    ]);
    stream.respond(block, true);
  },
  httpError(stream, httpStatus, details) {
    const block = encodeHeaderBlock([
      [':status', String(httpStatus)],
      ['grpc-status', String(status.INTERNAL)],
      ['grpc-message', percentEncode(details)],
    ]);
    stream.respond(block, true);
  },
  deadline(stream, ms) {
    // Armed by the connection only if the call is still unanswered at the end of the read.
    stream.deadlineAt = performance.now() + ms;
  },
  caller(stream) {
    const call = stream.call;
    return call instanceof UnaryCall ? call.caller : undefined;
  },
};

/** The socket gRPC server with the services, GRPC_MAX_CONNECTION_AGE(_GRACE), REQUEST_MAX_BYTES and TLS. */
export function createGrpcSocketListener(opts: GrpcListenerOptions): GrpcListener {
  const { grpc: settings, certificates, logger } = opts;
  const services = new LeanServices<H2Stream>(opts, REPLY, (stream, service) => {
    if (!stream.open) return;
    stream.respond(OK_HEADERS, false);
    const stop = services.health.watch(
      service,
      (s) => stream.write(grpcMessage(HealthCheckResponse.encode({ status: s }).finish())),
      () => stream.end(OK_TRAILERS),
    );
    if (stream.closed) stop();
    else stream.call = new Watching(stop);
  });

  const bodyTimeoutMs = settings.requestBodyTimeoutMs;
  /** The streams of one connection, whose calls come from `caller`. */
  const handlerFor = (caller: Caller | undefined): StreamHandler => ({
    open(stream) {
      const handle = services.route(stream, stream.headers);
      if (handle === undefined) return undefined;
      if (handle === services.onQuotaStream) return new QuotaStreaming(stream, services.quota!, opts.maxRequestBytes, bodyTimeoutMs);
      return new UnaryCall(stream, handle, services, bodyTimeoutMs, caller);
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
    endWatches: () => services.health.endWatches(),
    // GOAWAY: each closes when its last call has finished.
    drain: () => admission.drain(server, (c) => c.close('')),
    forceClose: () => admission.forceClose(),
  };
}
