/**
 * The default gRPC listener (GRPC_TRANSPORT=socket): ShouldRateLimit and grpc.health.v1.Health
 * served by our own HTTP/2 connection handler (h2/) straight on each socket, so a socket read
 * holding many calls costs one pass over its frames and one write of all their answers. Same
 * status codes, texts and stats as the other transports (grpc-common.ts).
 */
import net from 'node:net';
import tls from 'node:tls';
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
import { type ConnectionOptions, H2Connection, H2Stream, type StreamHandler } from './h2/connection';
import { encodeHeaderBlock } from './h2/hpack';
import { encodeRateLimitResponseFrame, GRPC_PREFIX_BYTES } from './proto-codec';
import { enforceClientSan, httpsOptions } from './tls';

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

/** A handler of one complete request message: `buf[start, end)`. */
type MessageHandler = (stream: H2Stream, buf: Buffer, start: number, end: number) => void;

/** The state of a health Watch stream: how to stop following the health. */
class Watching {
  constructor(readonly stop: () => void) {}
}

/** A trailers-only error answer (the stream ends with it). */
function answerStatus(stream: H2Stream, code: status, details: string): void {
  if (!stream.open) return;
  const block = encodeHeaderBlock([
    [':status', '200'],
    ['content-type', 'application/grpc'],
    ['grpc-status', String(code)],
    ['grpc-message', percentEncode(details)],
  ]);
  stream.respond(block, true);
}

/** A request that is not gRPC at all: an HTTP status, with a gRPC status for gRPC clients. */
function answerHttpError(stream: H2Stream, httpStatus: number, details: string): void {
  const block = encodeHeaderBlock([
    [':status', String(httpStatus)],
    ['grpc-status', String(status.INTERNAL)],
    ['grpc-message', percentEncode(details)],
  ]);
  stream.respond(block, true);
}

function answerMessage(stream: H2Stream, message: Buffer): void {
  if (stream.open) stream.answer(OK_HEADERS, message, OK_TRAILERS);
}

const RATE_LIMIT_ANSWER: CallAnswer<H2Stream> = {
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

/** The length the request's first message declares (its prefix may span chunks). */
function declaredLength(stream: H2Stream): number {
  const first = stream.body[0]!;
  return first.length >= GRPC_PREFIX_BYTES ? first.readUInt32BE(1) : stream.bodyBuffer().readUInt32BE(1);
}

/** Decodes a small health request with the generated code; undefined when it is malformed. */
function decodeHealth<T>(decode: (input: Uint8Array) => T, stream: H2Stream, buf: Buffer, start: number, end: number): T | undefined {
  try {
    return decode(buf.subarray(start, end));
  } catch {
    answerStatus(stream, status.INTERNAL, 'Error deserializing request');
    return undefined;
  }
}

/** The socket gRPC server with the services, GRPC_MAX_CONNECTION_AGE(_GRACE), REQUEST_MAX_BYTES and TLS. */
export function createGrpcSocketListener(opts: GrpcListenerOptions): GrpcListener {
  const { grpc: settings, certificates, logger, maxRequestBytes } = opts;
  const calls = new RateLimitCalls(opts);
  const health = new HealthAnswers(opts.health, opts.stats);

  const onRateLimit: MessageHandler = (stream, buf, start, end) =>
    calls.handle(decodeRequest(buf, start, end), stream.headers, stream, RATE_LIMIT_ANSWER);

  const onCheck: MessageHandler = (stream, buf, start, end) => {
    const request = decodeHealth(HealthCheckRequest.decode, stream, buf, start, end);
    if (request === undefined) return;
    const s = health.check(request.service);
    if (s === undefined) answerStatus(stream, status.NOT_FOUND, 'unknown service');
    else answerMessage(stream, grpcMessage(HealthCheckResponse.encode({ status: s }).finish()));
  };

  const onList: MessageHandler = (stream, buf, start, end) => {
    if (decodeHealth(HealthListRequest.decode, stream, buf, start, end) === undefined) return;
    answerMessage(stream, grpcMessage(HealthListResponse.encode(health.list()).finish()));
  };

  const onWatch: MessageHandler = (stream, buf, start, end) => {
    const request = decodeHealth(HealthCheckRequest.decode, stream, buf, start, end);
    if (request === undefined || !stream.open) return;
    stream.respond(OK_HEADERS, false);
    const stop = health.watch(
      request.service,
      (s) => stream.write(grpcMessage(HealthCheckResponse.encode({ status: s }).finish())),
      () => stream.end(OK_TRAILERS),
    );
    if (stream.closed) stop();
    else stream.state = new Watching(stop);
  };

  const routes: Readonly<Record<string, MessageHandler>> = {
    [SHOULD_RATE_LIMIT_PATH]: onRateLimit,
    [HEALTH_CHECK_PATH]: onCheck,
    [HEALTH_WATCH_PATH]: onWatch,
    [HEALTH_LIST_PATH]: onList,
  };

  const handler: StreamHandler = {
    opened(stream) {
      const headers = stream.headers;
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
      const path = headers[':path']!;
      const route = Object.hasOwn(routes, path) ? routes[path] : undefined;
      if (route === undefined) {
        answerStatus(stream, status.UNIMPLEMENTED, `The server does not implement the method ${path}`);
        return;
      }
      const timeoutMs = parseGrpcTimeout(headers['grpc-timeout']);
      if (timeoutMs !== undefined) {
        if (Number.isNaN(timeoutMs)) {
          answerStatus(stream, status.INTERNAL, `malformed grpc-timeout: ${headers['grpc-timeout']}`);
          return;
        }
        // Watch streams are long-lived on purpose and get no deadline, as their clients set none.
        if (route !== onWatch) stream.deadlineAt = performance.now() + timeoutMs;
      }
      stream.state = route;
    },
    data(stream) {
      if (typeof stream.state !== 'function' || !stream.open || stream.received < GRPC_PREFIX_BYTES) return;
      const length = declaredLength(stream);
      if (length > maxRequestBytes) {
        answerStatus(stream, status.RESOURCE_EXHAUSTED, `Received message larger than max (${length} vs ${maxRequestBytes})`);
      } else if (stream.received > GRPC_PREFIX_BYTES + length) {
        answerStatus(stream, status.UNIMPLEMENTED, `Received a second request message for method ${stream.headers[':path']}`);
      }
    },
    ended(stream) {
      const route = stream.state;
      if (typeof route !== 'function' || !stream.open) return;
      const handle = route as MessageHandler;
      const received = stream.received;
      if (received === 0) {
        answerStatus(stream, status.UNIMPLEMENTED, `Received no request message for method ${stream.headers[':path']}`);
        return;
      }
      if (received < GRPC_PREFIX_BYTES || received < GRPC_PREFIX_BYTES + declaredLength(stream)) {
        answerStatus(stream, status.INTERNAL, `Received an incomplete request message (${received} bytes)`);
        return;
      }
      const buf = stream.bodyBuffer();
      const flag = buf[0];
      if (flag === 0) handle(stream, buf, GRPC_PREFIX_BYTES, received);
      else if (flag === 1) {
        inflateMessage(stream.headers['grpc-encoding'], buf.subarray(GRPC_PREFIX_BYTES, received), maxRequestBytes, (out, code, details) => {
          if (out !== undefined) handle(stream, out, 0, out.length);
          else answerStatus(stream, code, details);
        });
      } else answerStatus(stream, status.INTERNAL, `Received a message with an invalid compressed flag ${String(flag)}`);
    },
    deadline(stream) {
      answerStatus(stream, status.DEADLINE_EXCEEDED, 'Deadline exceeded');
    },
    closed(stream) {
      if (stream.state instanceof Watching) stream.state.stop();
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

  const tlsOn = settings.tls.enabled && certificates !== undefined;
  let server: net.Server;
  if (tlsOn) {
    const secure = tls.createServer({ ...httpsOptions(certificates.current), ALPNProtocols: ['h2'] });
    certificates.subscribe((m) => secure.setSecureContext(httpsOptions(m)));
    // The SAN check runs first: a refused client never gets a connection.
    if (settings.tls.clientSan !== '') enforceClientSan(secure, settings.tls.clientSan, logger);
    secure.on('secureConnection', (socket: tls.TLSSocket) => {
      if (socket.destroyed) return;
      // HTTP/2 over TLS only (RFC 9113 3.2): a client that did not choose h2 is closed.
      if (socket.alpnProtocol !== 'h2') socket.destroy();
      else serve(socket);
    });
    server = secure;
  } else server = net.createServer(serve);
  // A failed handshake or a reset socket is the client's problem, not the server's.
  server.on('tlsClientError', () => {});

  return {
    listen: () =>
      new Promise<number>((resolve, reject) => {
        server.once('error', reject);
        const listening = (): void => {
          server.off('error', reject);
          resolve(settings.uds !== '' ? 0 : (server.address() as net.AddressInfo).port);
        };
        if (settings.uds !== '') server.listen(settings.uds, listening);
        else server.listen(settings.port, settings.host, listening);
      }),
    endWatches: () => health.endWatches(),
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
