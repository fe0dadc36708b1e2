/**
 * The HTTP port's server: our HTTP/1.1 connection handler (http1/) straight on each socket,
 * plain or TLS (checking GRPC_CLIENT_TLS_SAN). Admission (admission.ts) takes each connection
 * and its periodic sweep applies every time bound (the handshake, keep-alive idle, and each
 * connection's request bounds), so there is no timer per request or per connection.
 */
import type net from 'node:net';
import type { Logger } from '../telemetry/logger';
import { type Admission, type ListenerAdmission, unboundedAdmission } from './admission';
import { type ServerBudgets, serverBudgets } from './byte-budget';
import { type CertificateSource, socketServer } from './tls';
import { type ConnectionLimits, type ExchangeHandler, Http1Connection } from './http1/connection';

export interface HttpSocketServer {
  /** The listening server (listen, close, address). */
  readonly server: net.Server;
  /** Stops taking connections and requests; resolves once every connection has closed. */
  drain(): Promise<void>;
  /** Closes every connection now. */
  forceClose(): void;
}

/** node:http's keep-alive bound, kept so that idle clients are treated as before. */
export const KEEP_ALIVE_TIMEOUT_MS = 5000;
/** node:http's bound on the headers when HTTP_REQUEST_BODY_TIMEOUT is 0. */
const HEADERS_TIMEOUT_MS = 60_000;

export interface HttpSocketOptions {
  /** TLS (HTTP_SERVER_USE_TLS) on these certificates; plain when undefined. */
  certs?: CertificateSource;
  /** GRPC_CLIENT_TLS_SAN, for TLS clients. */
  clientSan?: string;
  logger: Logger;
  /**
   * A request whose headers and body have not all arrived within this (0 = no bound; headers
   * still within 60 s) is answered 408 and its connection closed.
   */
  requestTimeoutMs?: number;
  /**
   * Which connections the port holds (HTTP_MAX_CONNECTIONS and the rest); its idle bound is the
   * keep-alive bound. Default: no caps, KEEP_ALIVE_TIMEOUT_MS idle.
   */
  admission?: ListenerAdmission;
  /** The process's bounds on request and answer bytes (default: a set of this server's own, unbounded). */
  budgets?: ServerBudgets;
}

export function httpSocketServer(handler: ExchangeHandler, options: HttpSocketOptions): HttpSocketServer {
  const { certs, clientSan = '', logger, requestTimeoutMs = 0, budgets = serverBudgets(Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER) } = options;
  const limits: ConnectionLimits = {
    requestTimeoutMs,
    headersTimeoutMs: requestTimeoutMs > 0 ? Math.min(requestTimeoutMs, HEADERS_TIMEOUT_MS) : HEADERS_TIMEOUT_MS,
  };
  const admission = options.admission ?? unboundedAdmission({ listener: 'http', idleTimeoutMs: KEEP_ALIVE_TIMEOUT_MS, firstRequestTimeoutMs: KEEP_ALIVE_TIMEOUT_MS });
  // A tenth of the shortest request bound.
  admission.sweepAtLeastEvery(Math.min(...[limits.requestTimeoutMs, limits.headersTimeoutMs].filter((t) => t > 0)) / 10);

  const serve = (socket: net.Socket, admitted: Admission): void => {
    // Answers go out at once (no Nagle delay behind the client's delayed ACK).
    socket.setNoDelay(true);
    admitted.connection = new Http1Connection(socket, handler, budgets, limits, (budget) => admitted.exceeded(budget));
  };

  // Half-open sockets: a client that sends its last request and ends its side still gets its answers.
  const server = socketServer(serve, admission, certs === undefined ? undefined : { certs, protocol: 'http/1.1', protocolRequired: false, clientSan, logger }, true, budgets.requests);
  server.on('close', () => admission.close());

  return {
    server,
    // Each closes when its last answer is out.
    drain: () => admission.drain(server, (c) => c.close('draining')),
    forceClose: () => admission.forceClose(),
  };
}
