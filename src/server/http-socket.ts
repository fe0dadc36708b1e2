/**
 * The HTTP port's server: our HTTP/1.1 connection handler (http1/) straight on each socket,
 * plain or TLS (checking GRPC_CLIENT_TLS_SAN). One periodic sweep applies the time bounds to
 * every connection, so there is no timer per request or per connection.
 */
import type net from 'node:net';
import type { Logger } from '../telemetry/logger';
import { type ServerBudgets, serverBudgets } from './byte-budget';
import { ConnectionSet } from './connection-set';
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
  /** HTTP_MAX_CONNECTIONS: more are closed as they arrive (default: no cap). */
  maxConnections?: number;
  /** The process's bounds on request and answer bytes (default: a set of this server's own, unbounded). */
  budgets?: ServerBudgets;
}

export function httpSocketServer(handler: ExchangeHandler, options: HttpSocketOptions): HttpSocketServer {
  const { certs, clientSan = '', logger, requestTimeoutMs = 0, maxConnections, budgets = serverBudgets(Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER) } = options;
  const limits: ConnectionLimits = {
    requestTimeoutMs,
    headersTimeoutMs: requestTimeoutMs > 0 ? Math.min(requestTimeoutMs, HEADERS_TIMEOUT_MS) : HEADERS_TIMEOUT_MS,
    keepAliveTimeoutMs: KEEP_ALIVE_TIMEOUT_MS,
  };
  // Each closes when its last answer is out.
  const connections = new ConnectionSet<Http1Connection>((c) => c.drain());

  const serve = (socket: net.Socket): void => {
    // Answers go out at once (no Nagle delay behind the client's delayed ACK).
    socket.setNoDelay(true);
    connections.admit(socket, () => new Http1Connection(socket, handler, budgets));
  };

  // A tenth of the shortest bound, within 50 ms..1 s.
  const shortest = Math.min(...[limits.requestTimeoutMs, limits.headersTimeoutMs, limits.keepAliveTimeoutMs].filter((t) => t > 0));
  const sweepEveryMs = Math.min(1000, Math.max(50, shortest / 10));
  let sweeper: NodeJS.Timeout | undefined;
  const startSweeping = (): void => {
    sweeper ??= setInterval(() => {
      const now = Date.now();
      for (const c of connections) c.sweep(now, limits);
    }, sweepEveryMs);
    sweeper.unref();
  };

  // Half-open sockets: a client that sends its last request and ends its side still gets its answers.
  const server = socketServer(serve, certs === undefined ? undefined : { certs, protocol: 'http/1.1', protocolRequired: false, clientSan, logger }, true);
  if (maxConnections !== undefined) server.maxConnections = maxConnections;
  server.on('listening', startSweeping);
  server.on('close', () => {
    clearInterval(sweeper);
    sweeper = undefined;
  });

  return {
    server,
    drain: () => connections.drain(server),
    forceClose: () => connections.forceClose(),
  };
}
