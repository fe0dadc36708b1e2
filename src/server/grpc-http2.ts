/**
 * The gRPC listener on node:http2 (GRPC_TRANSPORT=http2, the default before our socket server):
 * ShouldRateLimit and grpc.health.v1.Health served straight from HTTP/2 streams, without
 * grpc-js's per-call machinery (metadata objects, interceptors, message queues). The services and
 * their checks are grpc-lean.ts's, shared with the socket transport.
 *
 * Hot path: the common request arrives in one DATA chunk and is decoded in place (no copy, no
 * concat); the answer is one buffer holding prefix and message; header objects are constants.
 */
import http2 from 'node:http2';
import type { Socket } from 'node:net';
import { status } from '@grpc/grpc-js';
import { HealthCheckResponse } from '../../generated/grpc/health/v1/health';
import { grpcMessage, type GrpcListener, type GrpcListenerOptions, listenOn, percentEncode } from './grpc-common';
import { type LeanReply, LeanServices, type MessageHandler } from './grpc-lean';
import { GRPC_PREFIX_BYTES } from './proto-codec';
import { RateLimitQuotaResponse } from '../../generated/envoy/service/rate_limit_quota/v3/rlqs';
import { checkQuotaLength, decodeQuotaMessage, isQuotaReadError, type QuotaCalls } from './quota-calls';
import { enforceClientSan, httpsOptions } from './tls';

/** Node's timers cannot wait longer: a longer connection age or grace is never reached. */
const MAX_TIMER_MS = 2 ** 31 - 1;
/** The highest stream id: a first GOAWAY that lets every stream the client has sent finish. */
const LAST_STREAM_ID = 2 ** 31 - 1;

// Constant header blocks and options: node:http2 still copies them per response, but nothing is
// built per call. No `date` header: gRPC has no use for it.
const OK_HEADERS = {
  ':status': 200,
  'content-type': 'application/grpc',
  'grpc-accept-encoding': 'identity,deflate,gzip',
} as const;
const OK_TRAILERS = { 'grpc-status': '0' } as const;
const WITH_TRAILERS = { waitForTrailers: true, sendDate: false } as const;
const END_STREAM = { endStream: true, sendDate: false } as const;

/** The stream's 'timeout' listener (`this` is the stream): the client's deadline passed unanswered. */
function deadlineExceeded(this: http2.ServerHttp2Stream): void {
  REPLY.status(this, status.DEADLINE_EXCEEDED, 'Deadline exceeded');
}

function ignore(): void {}

/** Listener of 'wantTrailers' (`this` is the stream): the call succeeded. */
function sendOkTrailers(this: http2.ServerHttp2Stream): void {
  this.sendTrailers(OK_TRAILERS);
}

function isLive(stream: http2.ServerHttp2Stream): boolean {
  return !stream.destroyed && !stream.closed;
}

/** Live and not answered yet (a call answered at its deadline is not answered again). */
function isOpen(stream: http2.ServerHttp2Stream): boolean {
  return isLive(stream) && !stream.headersSent;
}

/** How this transport answers: node:http2's respond, with constant header objects. */
const REPLY: LeanReply<http2.ServerHttp2Stream> = {
  message(stream, frame) {
    if (!isOpen(stream)) return; // cancelled by the client meanwhile
    stream.on('wantTrailers', sendOkTrailers);
    stream.respond(OK_HEADERS, WITH_TRAILERS);
    stream.end(frame);
  },
  status(stream, code, details) {
    if (!isOpen(stream)) return;
    stream.respond(
      { ':status': 200, 'content-type': 'application/grpc', 'grpc-status': code, 'grpc-message': percentEncode(details) },
      END_STREAM,
    );
  },
  httpError(stream, httpStatus, details) {
    stream.respond({ ':status': httpStatus, 'grpc-status': status.INTERNAL, 'grpc-message': percentEncode(details) }, END_STREAM);
  },
  deadline(stream, ms) {
    // Node's stream inactivity timer: the request has arrived by the time it could fire, so it
    // runs from the call's start; it is cleared with the stream.
    stream.setTimeout(Math.min(ms, MAX_TIMER_MS), deadlineExceeded);
  },
};

/** The declared length of the first message (its prefix may span chunks: rare, so concat then). */
function declaredLength(first: Buffer, chunks: Buffer[] | undefined): number {
  if (first.length >= GRPC_PREFIX_BYTES || chunks === undefined) return first.readUInt32BE(1);
  return Buffer.concat(chunks).readUInt32BE(1);
}

/**
 * Collects the one request message of a unary or server-streaming call and hands it to `handle`
 * once the client has half-closed, refusing oversized input as soon as its prefix says so.
 */
function readMessage(
  services: LeanServices<http2.ServerHttp2Stream>,
  stream: http2.ServerHttp2Stream,
  headers: http2.IncomingHttpHeaders,
  handle: MessageHandler<http2.ServerHttp2Stream>,
): void {
  let first: Buffer | undefined;
  let chunks: Buffer[] | undefined;
  let received = 0;
  let failed = false;
  stream.on('data', (chunk: Buffer) => {
    if (failed) return;
    received += chunk.length;
    if (first === undefined) first = chunk;
    else (chunks ??= [first]).push(chunk);
    if (received >= GRPC_PREFIX_BYTES && !services.bodySoFar(stream, headers, received, declaredLength(first, chunks))) {
      failed = true;
      // The rest of the request is not needed: ask the client to stop sending (RST_STREAM NO_ERROR after the answer).
      stream.close(http2.constants.NGHTTP2_NO_ERROR);
    }
  });
  stream.on('end', () => {
    if (failed) return;
    const body = chunks === undefined ? first : Buffer.concat(chunks, received);
    services.bodyEnded(stream, headers, body, handle);
  });
}

/**
 * An RLQS stream (StreamRateLimitQuotas): each request message goes to the quota calls as soon as
 * it is complete; responses are DATA on the open stream, trailers end it (OK when the client ends).
 */
function serveQuotaStream(calls: QuotaCalls, stream: http2.ServerHttp2Stream, maxRequestBytes: number): void {
  let headersSent = false;
  let trailers: Record<string, string> = OK_TRAILERS;
  let unread = 0;
  let done = false;
  let pending: Buffer | undefined;
  const finish = (code: status, details: string): void => {
    if (done) return;
    done = true;
    handle.close();
    if (!isLive(stream)) return;
    if (!headersSent) REPLY.status(stream, code, details);
    else {
      if (code !== status.OK) trailers = { 'grpc-status': String(code), 'grpc-message': percentEncode(details) };
      stream.end();
    }
  };
  const handle = calls.open({
    write: (response) => {
      if (done || !isLive(stream)) return;
      if (!headersSent) {
        headersSent = true;
        stream.on('wantTrailers', () => stream.sendTrailers(trailers));
        stream.respond(OK_HEADERS, WITH_TRAILERS);
      }
      unread++;
      stream.write(grpcMessage(RateLimitQuotaResponse.encode(response).finish()), () => unread--);
    },
    unread: () => unread,
    fail: finish,
    reset: () => {
      done = true;
      stream.close(http2.constants.NGHTTP2_ENHANCE_YOUR_CALM);
    },
  });
  stream.on('data', (chunk: Buffer) => {
    let buf = pending === undefined ? chunk : Buffer.concat([pending, chunk]);
    while (!done && buf.length >= GRPC_PREFIX_BYTES) {
      const length = buf.readUInt32BE(1);
      const tooLarge = checkQuotaLength(length, maxRequestBytes);
      if (tooLarge !== undefined) return finish(tooLarge.code, tooLarge.details);
      if (buf.length < GRPC_PREFIX_BYTES + length) break;
      const m = decodeQuotaMessage(buf.subarray(0, GRPC_PREFIX_BYTES + length));
      buf = buf.subarray(GRPC_PREFIX_BYTES + length);
      if (isQuotaReadError(m)) return finish(m.code, m.details);
      handle.message(m);
    }
    pending = buf.length > 0 ? Buffer.from(buf) : undefined;
  });
  stream.on('end', () => {
    if (pending !== undefined) finish(status.INTERNAL, `Received an incomplete request message (${pending.length} bytes)`);
    else void handle.settled().then(() => finish(status.OK, ''));
  });
  stream.once('close', () => handle.close());
}

/**
 * grpc-go's server keepalive: a connection on which nothing was received for `timeMs` is pinged,
 * and closed when the ping is not answered within `timeoutMs` (a peer gone without a FIN). Checked
 * once per `timeMs`, so it costs nothing per call. Returns the function that stops it.
 */
function keepalive(session: http2.ServerHttp2Session, timeMs: number, timeoutMs: number): () => void {
  if (timeMs <= 0 || timeMs >= MAX_TIMER_MS) return ignore;
  let active = false;
  const onActivity = (): void => {
    active = true;
  };
  session.on('stream', onActivity);
  session.on('ping', onActivity);
  const timer = setInterval(() => {
    if (session.closed || session.destroyed) return;
    if (active) {
      active = false;
      return;
    }
    let answered = false;
    const deadline = setTimeout(() => {
      if (!answered) session.destroy(new Error('keepalive ping not answered'));
    }, Math.min(timeoutMs, MAX_TIMER_MS));
    deadline.unref();
    const sent = session.ping((err) => {
      answered = err === null;
      clearTimeout(deadline);
    });
    if (!sent) clearTimeout(deadline);
  }, timeMs);
  timer.unref();
  return () => clearInterval(timer);
}

/**
 * GRPC_MAX_CONNECTION_IDLE: a connection with no call in flight for `idleMs` gets GOAWAY and is
 * closed. Only while enabled does each call start and stop a timer.
 */
function closeWhenIdle(session: http2.ServerHttp2Session, idleMs: number): () => void {
  if (idleMs <= 0 || idleMs >= MAX_TIMER_MS) return ignore;
  let inFlight = 0;
  let timer: NodeJS.Timeout | undefined;
  const arm = (): void => {
    timer = setTimeout(() => {
      if (session.closed || session.destroyed) return;
      session.goaway(http2.constants.NGHTTP2_NO_ERROR, LAST_STREAM_ID, Buffer.from('max_idle'));
      session.close();
    }, idleMs);
    timer.unref();
  };
  session.on('stream', (stream: http2.ServerHttp2Stream) => {
    if (inFlight++ === 0) clearTimeout(timer);
    stream.once('close', () => {
      if (--inFlight === 0) arm();
    });
  });
  arm();
  return () => clearTimeout(timer);
}

/** The node:http2 gRPC server with the services, GRPC_MAX_CONNECTION_AGE(_GRACE), REQUEST_MAX_BYTES and TLS. */
export function createGrpcHttp2Listener(opts: GrpcListenerOptions): GrpcListener {
  const { grpc: settings, certificates, logger } = opts;
  const services = new LeanServices<http2.ServerHttp2Stream>(opts, REPLY, (stream, service) => {
    if (!isOpen(stream)) return;
    stream.on('wantTrailers', sendOkTrailers);
    stream.respond(OK_HEADERS, WITH_TRAILERS);
    const off = services.health.watch(
      service,
      (s) => {
        if (isLive(stream)) stream.write(grpcMessage(HealthCheckResponse.encode({ status: s }).finish()));
      },
      () => stream.end(),
    );
    stream.once('close', off);
  });

  const onStream = (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders): void => {
    // A reset or failed stream is over; its error has no one to go to.
    stream.on('error', ignore);
    const handle = services.route(stream, headers);
    if (handle === services.onQuotaStream) serveQuotaStream(services.quota!, stream, opts.maxRequestBytes);
    else if (handle !== undefined) readMessage(services, stream, headers, handle);
  };

  // As grpc-js: no cap on the session's buffered memory (Node's default of 10 MB refuses streams
  // under load with ENHANCE_YOUR_CALM).
  const serverOptions: http2.ServerOptions = {
    maxSessionMemory: Number.MAX_SAFE_INTEGER,
    // Streams beyond it are refused (RST_STREAM REFUSED_STREAM), which clients retry.
    settings: { maxConcurrentStreams: settings.maxConcurrentStreams },
  };
  const tlsOn = settings.tls.enabled && certificates !== undefined;
  // node:http2 offers only `h2` by ALPN when HTTP/1.1 is not allowed.
  const server = tlsOn ? http2.createSecureServer({ ...serverOptions, ...httpsOptions(certificates.current) }) : http2.createServer(serverOptions);
  if (tlsOn) {
    certificates.subscribe((m) => (server as http2.Http2SecureServer).setSecureContext(httpsOptions(m)));
    if (settings.tls.clientSan !== '') enforceClientSan(server as http2.Http2SecureServer, settings.tls.clientSan, logger);
  }
  server.on('stream', onStream);
  // Answers go out at once: with Nagle's algorithm on, a small answer written while an earlier one
  // is unacknowledged waits for the client's delayed ACK (up to 40 ms on Linux).
  server.on('connection', (socket: Socket) => socket.setNoDelay(true));

  const sessions = new Set<http2.ServerHttp2Session>();
  const ageMs = settings.maxConnectionAgeMs;
  const graceMs = settings.maxConnectionAgeGraceMs;
  server.on('session', (session: http2.ServerHttp2Session) => {
    sessions.add(session);
    let graceTimer: NodeJS.Timeout | undefined;
    // ±10 % jitter, as grpc-js, so connections opened together do not all reconnect together.
    const age = ageMs + (Math.random() * 2 - 1) * (ageMs / 10);
    const ageTimer =
      ageMs > 0 && age < MAX_TIMER_MS
        ? setTimeout(() => {
            if (session.closed || session.destroyed) return;
            // GOAWAY for every stream id first, then close(): the calls in flight finish.
            session.goaway(http2.constants.NGHTTP2_NO_ERROR, LAST_STREAM_ID, Buffer.from('max_age'));
            session.close();
            if (graceMs < MAX_TIMER_MS) {
              graceTimer = setTimeout(() => session.destroy(), graceMs);
              graceTimer.unref();
            }
          }, age)
        : undefined;
    ageTimer?.unref();
    const stopKeepalive = keepalive(session, settings.keepaliveTimeMs, settings.keepaliveTimeoutMs);
    const stopIdle = closeWhenIdle(session, settings.maxConnectionIdleMs);
    session.once('close', () => {
      sessions.delete(session);
      clearTimeout(ageTimer);
      clearTimeout(graceTimer);
      stopKeepalive();
      stopIdle();
    });
  });

  return {
    listen: () => listenOn(server, settings),
    endWatches: () => services.health.endWatches(),
    drain: () =>
      new Promise<void>((resolve) => {
        // Resolves once every connection has closed; each closes when its last call has finished.
        server.close(() => resolve());
        for (const session of sessions) session.close();
      }),
    forceClose: () => {
      for (const session of sessions) session.destroy();
    },
  };
}
