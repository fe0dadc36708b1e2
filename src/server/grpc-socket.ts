/**
 * The default gRPC listener (GRPC_TRANSPORT=socket): ShouldRateLimit and grpc.health.v1.Health
 * served by our own HTTP/2 connection handler (h2/) straight on each socket, so a socket read
 * holding many calls costs one pass over its frames and one write of all their answers. Same
 * status codes, texts and stats as the other transports (grpc-common.ts).
 */
import type net from 'node:net';
import { status } from '@grpc/grpc-js';
import { HealthCheckResponse } from '../../generated/grpc/health/v1/health';
import { RateLimitQuotaResponse } from '../../generated/envoy/service/rate_limit_quota/v3/rlqs';
import { checkQuotaLength, decodeQuotaMessage, isQuotaReadError, type QuotaCalls, type QuotaStreamHandle } from './quota-calls';
import { grpcMessage, type GrpcListener, type GrpcListenerOptions, listenOn, percentEncode } from './grpc-common';
import { type LeanReply, LeanServices, type MessageHandler } from './grpc-lean';
import { type ConnectionOptions, H2Connection, type H2Stream, type StreamHandler } from './h2/connection';
import { encodeHeaderBlock } from './h2/hpack';
import { GRPC_PREFIX_BYTES } from './proto-codec';
import { socketServer } from './tls';

/** Node's timers cannot wait longer: a longer connection age or grace is never reached. */
const MAX_TIMER_MS = 2 ** 31 - 1;
/** Largest request header list: far above what a gRPC client sends, small enough to bound memory. */
const MAX_HEADER_LIST_BYTES = 64 * 1024;
/** The preface and SETTINGS of a new connection must arrive within this. */
const HANDSHAKE_TIMEOUT_MS = 20_000;

const OK_HEADERS = encodeHeaderBlock([
  [':status', '200'],
  ['content-type', 'application/grpc'],
  ['grpc-accept-encoding', 'identity,deflate,gzip'],
]);
const OK_TRAILERS = encodeHeaderBlock([['grpc-status', '0']]);

/** The state of a health Watch stream: how to stop following the health. */
class Watching {
  constructor(readonly stop: () => void) {}
}

/**
 * The state of an RLQS stream (StreamRateLimitQuotas): each request message goes to the quota
 * calls as soon as it is complete; responses are DATA on the open stream; the client's end of
 * stream ends it with OK.
 */
class QuotaStreaming {
  readonly handle: QuotaStreamHandle;
  private headersSent = false;

  constructor(
    private readonly stream: H2Stream,
    calls: QuotaCalls,
    private readonly maxRequestBytes: number,
  ) {
    this.handle = calls.open({
      write: (response) => {
        if (stream.closed) return;
        if (!this.headersSent) {
          this.headersSent = true;
          stream.respond(OK_HEADERS, false);
        }
        stream.write(grpcMessage(RateLimitQuotaResponse.encode(response).finish()));
      },
      unread: () => stream.unsent,
      fail: (code, details) => this.finish(code, details),
      reset: () => stream.reset(),
    });
  }

  /** Hands over every complete message received so far. */
  data(): void {
    const s = this.stream;
    while (!s.closed && s.received >= GRPC_PREFIX_BYTES) {
      const head = s.body[0]!.length >= GRPC_PREFIX_BYTES ? s.body[0]! : s.bodyBuffer();
      const length = head.readUInt32BE(1);
      const tooLarge = checkQuotaLength(length, this.maxRequestBytes);
      if (tooLarge !== undefined) {
        this.finish(tooLarge.code, tooLarge.details);
        return;
      }
      if (s.received < GRPC_PREFIX_BYTES + length) return;
      const m = decodeQuotaMessage(s.take(GRPC_PREFIX_BYTES + length));
      if (isQuotaReadError(m)) {
        this.finish(m.code, m.details);
        return;
      }
      this.handle.message(m);
    }
  }

  /**
   * The client ended its side: once its reports are handled the stream ends with OK (after a
   * message left incomplete, INTERNAL).
   */
  ended(): void {
    if (this.stream.received > 0) this.finish(status.INTERNAL, `Received an incomplete request message (${this.stream.received} bytes)`);
    else void this.handle.settled().then(() => this.finish(status.OK, ''));
  }

  private finish(code: status, details: string): void {
    this.handle.close();
    const s = this.stream;
    if (s.closed || s.localEnded) return;
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
};

/** The length the request's first message declares (its prefix may span chunks). */
function declaredLength(stream: H2Stream): number {
  const first = stream.body[0]!;
  return first.length >= GRPC_PREFIX_BYTES ? first.readUInt32BE(1) : stream.bodyBuffer().readUInt32BE(1);
}

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
    else stream.state = new Watching(stop);
  });

  // stream.state: the call's message handler until its message is handled, then Watching for a
  // Watch; QuotaStreaming for an RLQS stream.
  const handler: StreamHandler = {
    opened(stream) {
      const handle = services.route(stream, stream.headers);
      stream.state = handle === services.onQuotaStream ? new QuotaStreaming(stream, services.quota!, opts.maxRequestBytes) : handle;
    },
    data(stream) {
      if (stream.state instanceof QuotaStreaming) {
        stream.state.data();
        return;
      }
      if (typeof stream.state !== 'function' || !stream.open || stream.received < GRPC_PREFIX_BYTES) return;
      services.bodySoFar(stream, stream.headers, stream.received, declaredLength(stream));
    },
    ended(stream) {
      if (stream.state instanceof QuotaStreaming) {
        stream.state.ended();
        return;
      }
      const handle = stream.state;
      if (typeof handle !== 'function' || !stream.open) return;
      services.bodyEnded(stream, stream.headers, stream.received === 0 ? undefined : stream.bodyBuffer(), handle as MessageHandler<H2Stream>);
    },
    deadline(stream) {
      REPLY.status(stream, status.DEADLINE_EXCEEDED, 'Deadline exceeded');
    },
    closed(stream) {
      if (stream.state instanceof Watching) stream.state.stop();
      else if (stream.state instanceof QuotaStreaming) stream.state.handle.close();
    },
  };

  const connectionOptions: ConnectionOptions = {
    maxConcurrentStreams: settings.maxConcurrentStreams,
    maxHeaderListBytes: MAX_HEADER_LIST_BYTES,
    keepaliveTimeMs: settings.keepaliveTimeMs,
    keepaliveTimeoutMs: settings.keepaliveTimeoutMs,
    maxIdleMs: settings.maxConnectionIdleMs,
    handshakeTimeoutMs: HANDSHAKE_TIMEOUT_MS,
  };
  const connections = new Set<H2Connection>();
  const ageMs = settings.maxConnectionAgeMs;
  const graceMs = settings.maxConnectionAgeGraceMs;

  const serve = (socket: net.Socket): void => {
    // Answers go out at once (no Nagle delay behind the client's delayed ACK).
    socket.setNoDelay(true);
    const connection = new H2Connection(socket, handler, connectionOptions);
    connections.add(connection);
    let graceTimer: NodeJS.Timeout | undefined;
    // ±10 % jitter, as grpc-js, so connections opened together do not all reconnect together.
    const age = ageMs + (Math.random() * 2 - 1) * (ageMs / 10);
    const ageTimer =
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
      connections.delete(connection);
      clearTimeout(ageTimer);
      clearTimeout(graceTimer);
    });
  };

  // HTTP/2 over TLS only (RFC 9113 3.2): a client that did not choose h2 is closed.
  const tlsOn = settings.tls.enabled && certificates !== undefined;
  const server = socketServer(serve, tlsOn ? { certs: certificates, protocol: 'h2', protocolRequired: true, clientSan: settings.tls.clientSan, logger } : undefined);

  return {
    listen: () => listenOn(server, settings),
    endWatches: () => services.health.endWatches(),
    drain: () =>
      new Promise<void>((resolve) => {
        // Resolves once every connection has closed; each closes when its last call has finished.
        server.close(() => resolve());
        for (const connection of connections) connection.close();
      }),
    forceClose: () => {
      for (const connection of connections) connection.destroy();
    },
  };
}
