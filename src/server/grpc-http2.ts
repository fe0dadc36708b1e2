/**
 * The gRPC listener on node:http2 (GRPC_TRANSPORT=http2): ShouldRateLimit and grpc.health.v1.Health
 * served straight from HTTP/2 streams, without grpc-js's per-call machinery (metadata objects,
 * interceptors, message queues). Same status codes, texts and stats as the grpc-js listener
 * (grpc.ts shares them through grpc-common.ts).
 *
 * Wire format (gRPC over HTTP/2): a POST with `content-type: application/grpc[+proto]` whose DATA is
 * length-prefixed messages (1 byte compressed flag, 4 bytes big-endian length). A success is
 * HEADERS (:status 200), DATA (the prefixed message), trailers `grpc-status: 0`; an error is
 * "trailers-only": one HEADERS frame with :status 200, grpc-status and the percent-encoded
 * grpc-message, ending the stream.
 *
 * Hot path: the common request arrives in one DATA chunk and is decoded in place (no copy, no
 * concat); the answer is one buffer holding prefix and message; header objects are constants.
 */
import http2 from 'node:http2';
import type { AddressInfo, Socket } from 'node:net';
import { status } from '@grpc/grpc-js';
import {
  HealthCheckRequest,
  HealthCheckResponse,
  HealthListRequest,
  HealthListResponse,
} from '../../generated/grpc/health/v1/health';
import type { RateLimitResponse } from '../core/rls';
import {
  type CallAnswer,
  decodeRequest,
  grpcMessage,
  type GrpcListener,
  type GrpcListenerOptions,
  HEALTH_CHECK_PATH,
  HEALTH_LIST_PATH,
  HEALTH_WATCH_PATH,
  HealthAnswers,
  inflateMessage,
  isGrpcContentType,
  parseGrpcTimeout,
  percentEncode,
  RateLimitCalls,
  SHOULD_RATE_LIMIT_PATH,
} from './grpc-common';
import { encodeRateLimitResponseFrame, GRPC_PREFIX_BYTES } from './proto-codec';
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
  answerStatus(this, status.DEADLINE_EXCEEDED, 'Deadline exceeded');
}

/** A handler of one complete request message: `buf[start, end)`. */
type MessageHandler = (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders, buf: Buffer, start: number, end: number) => void;

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

/** A trailers-only error answer (the stream ends with it). */
function answerStatus(stream: http2.ServerHttp2Stream, code: status, details: string): void {
  if (!isOpen(stream)) return;
  stream.respond(
    { ':status': 200, 'content-type': 'application/grpc', 'grpc-status': code, 'grpc-message': percentEncode(details) },
    END_STREAM,
  );
}

/** A request that is not gRPC at all: an HTTP status, with a gRPC status for gRPC clients. */
function answerHttpError(stream: http2.ServerHttp2Stream, httpStatus: number, details: string): void {
  stream.respond({ ':status': httpStatus, 'grpc-status': status.INTERNAL, 'grpc-message': percentEncode(details) }, END_STREAM);
}

/** One message answer: headers, the prefixed message, `grpc-status: 0` trailers. */
function answerMessage(stream: http2.ServerHttp2Stream, frame: Buffer): void {
  if (!isOpen(stream)) return; // cancelled by the client meanwhile
  stream.on('wantTrailers', sendOkTrailers);
  stream.respond(OK_HEADERS, WITH_TRAILERS);
  stream.end(frame);
}

const RATE_LIMIT_ANSWER: CallAnswer<http2.ServerHttp2Stream> = {
  ok(stream, response: RateLimitResponse) {
    let out: Buffer;
    try {
      out = encodeRateLimitResponseFrame(response);
    } catch (err) {
      answerStatus(stream, status.INTERNAL, `cannot encode the response: ${(err as Error).message}`);
      return;
    }
    answerMessage(stream, out);
  },
  fail: answerStatus,
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
function readMessage(stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders, maxBytes: number, handle: MessageHandler): void {
  let first: Buffer | undefined;
  let chunks: Buffer[] | undefined;
  let received = 0;
  let length = -1;
  let failed = false;
  stream.on('data', (chunk: Buffer) => {
    if (failed) return;
    received += chunk.length;
    if (first === undefined) first = chunk;
    else (chunks ??= [first]).push(chunk);
    if (length < 0 && received >= GRPC_PREFIX_BYTES) {
      length = declaredLength(first, chunks);
      if (length > maxBytes) {
        failed = true;
        answerStatus(stream, status.RESOURCE_EXHAUSTED, `Received message larger than max (${length} vs ${maxBytes})`);
        // The rest of the request is not needed: ask the client to stop sending (RST_STREAM NO_ERROR after the answer).
        stream.close(http2.constants.NGHTTP2_NO_ERROR);
        return;
      }
    }
    if (length >= 0 && received > GRPC_PREFIX_BYTES + length) {
      failed = true;
      answerStatus(stream, status.UNIMPLEMENTED, `Received a second request message for method ${headers[':path']}`);
      stream.close(http2.constants.NGHTTP2_NO_ERROR);
    }
  });
  stream.on('end', () => {
    if (failed) return;
    if (first === undefined) {
      answerStatus(stream, status.UNIMPLEMENTED, `Received no request message for method ${headers[':path']}`);
      return;
    }
    if (length < 0 || received < GRPC_PREFIX_BYTES + length) {
      answerStatus(stream, status.INTERNAL, `Received an incomplete request message (${received} bytes)`);
      return;
    }
    const buf = chunks === undefined ? first : Buffer.concat(chunks, received);
    const flag = buf[0];
    if (flag === 0) handle(stream, headers, buf, GRPC_PREFIX_BYTES, received);
    else if (flag === 1) decompress(stream, headers, buf.subarray(GRPC_PREFIX_BYTES, received), maxBytes, handle);
    else answerStatus(stream, status.INTERNAL, `Received a message with an invalid compressed flag ${String(flag)}`);
  });
}

/** A compressed message (flag 1): decompressed, then handled. */
function decompress(
  stream: http2.ServerHttp2Stream,
  headers: http2.IncomingHttpHeaders,
  message: Buffer,
  maxBytes: number,
  handle: MessageHandler,
): void {
  inflateMessage(headers['grpc-encoding'] as string | undefined, message, maxBytes, (out, code, details) => {
    if (out !== undefined) handle(stream, headers, out, 0, out.length);
    else answerStatus(stream, code, details);
  });
}

/** Decodes a small health request with the generated code; undefined when it is malformed. */
function decodeHealth<T>(decode: (input: Uint8Array) => T, stream: http2.ServerHttp2Stream, buf: Buffer, start: number, end: number): T | undefined {
  try {
    return decode(buf.subarray(start, end));
  } catch {
    answerStatus(stream, status.INTERNAL, 'Error deserializing request');
    return undefined;
  }
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
  const { grpc: settings, certificates, logger, maxRequestBytes } = opts;
  const calls = new RateLimitCalls(opts);
  const health = new HealthAnswers(opts.health, opts.stats);

  const onRateLimit: MessageHandler = (stream, headers, buf, start, end) =>
    calls.handle(decodeRequest(buf, start, end), headers, stream, RATE_LIMIT_ANSWER);

  const onCheck: MessageHandler = (stream, _headers, buf, start, end) => {
    const request = decodeHealth(HealthCheckRequest.decode, stream, buf, start, end);
    if (request === undefined) return;
    const s = health.check(request.service);
    if (s === undefined) answerStatus(stream, status.NOT_FOUND, 'unknown service');
    else answerMessage(stream, grpcMessage(HealthCheckResponse.encode({ status: s }).finish()));
  };

  const onList: MessageHandler = (stream, _headers, buf, start, end) => {
    if (decodeHealth(HealthListRequest.decode, stream, buf, start, end) === undefined) return;
    answerMessage(stream, grpcMessage(HealthListResponse.encode(health.list()).finish()));
  };

  const onWatch: MessageHandler = (stream, _headers, buf, start, end) => {
    const request = decodeHealth(HealthCheckRequest.decode, stream, buf, start, end);
    if (request === undefined || !isOpen(stream)) return;
    stream.on('wantTrailers', sendOkTrailers);
    stream.respond(OK_HEADERS, WITH_TRAILERS);
    const off = health.watch(
      request.service,
      (s) => {
        if (isLive(stream)) stream.write(grpcMessage(HealthCheckResponse.encode({ status: s }).finish()));
      },
      () => stream.end(),
    );
    stream.once('close', off);
  };

  const onStream = (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders): void => {
    // A reset or failed stream is over; its error has no one to go to.
    stream.on('error', ignore);
    // Checked in grpc-go's order: not gRPC (415), then not a POST (405).
    const contentType = headers['content-type'];
    if (!isGrpcContentType(contentType)) {
      answerHttpError(stream, 415, `invalid gRPC request content-type ${JSON.stringify(contentType ?? '')}`);
      return;
    }
    const method = headers[':method'];
    if (method !== 'POST') {
      answerHttpError(stream, 405, `Received a HEADERS frame with :method ${JSON.stringify(method)} which should be POST`);
      return;
    }
    const path = headers[':path'];
    const timeoutMs = parseGrpcTimeout(headers['grpc-timeout']);
    if (timeoutMs !== undefined) {
      if (Number.isNaN(timeoutMs)) {
        answerStatus(stream, status.INTERNAL, `malformed grpc-timeout: ${String(headers['grpc-timeout'])}`);
        return;
      }
      // Node's stream inactivity timer: the request has arrived by the time it could fire, so it
      // runs from the call's start; it is cleared with the stream. (Watch streams are long-lived
      // on purpose and get no deadline, as their clients set none.)
      if (path !== HEALTH_WATCH_PATH) stream.setTimeout(Math.min(timeoutMs, MAX_TIMER_MS), deadlineExceeded);
    }
    if (path === SHOULD_RATE_LIMIT_PATH) readMessage(stream, headers, maxRequestBytes, onRateLimit);
    else if (path === HEALTH_CHECK_PATH) readMessage(stream, headers, maxRequestBytes, onCheck);
    else if (path === HEALTH_WATCH_PATH) readMessage(stream, headers, maxRequestBytes, onWatch);
    else if (path === HEALTH_LIST_PATH) readMessage(stream, headers, maxRequestBytes, onList);
    else answerStatus(stream, status.UNIMPLEMENTED, `The server does not implement the method ${String(path)}`);
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
    listen: () =>
      new Promise<number>((resolve, reject) => {
        server.once('error', reject);
        const listening = (): void => {
          server.off('error', reject);
          resolve(settings.uds !== '' ? 0 : (server.address() as AddressInfo).port);
        };
        if (settings.uds !== '') server.listen(settings.uds, listening);
        else server.listen(settings.port, settings.host, listening);
      }),
    endWatches: () => health.endWatches(),
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
