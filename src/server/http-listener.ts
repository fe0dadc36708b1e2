/**
 * The node:http(s) server behind the debug port (and the primary's in worker mode), with its
 * connections taken by admission (admission.ts) as the other ports' are: the caps and per-peer
 * bound, the TLS handshake bound, and the first-request and idle bounds.
 */
import http from 'node:http';
import https from 'node:https';
import type net from 'node:net';
import type { Logger } from '../telemetry/logger';
import { type AdmittedConnection, type ListenerAdmission, refuseBeforeSocket } from './admission';
import { type CertificateSource, enforceClientSan, httpsOptions, tlsHandshakeBackstop } from './tls';

/**
 * An HTTP server, or an HTTPS one following `certs` (and checking GRPC_CLIENT_TLS_SAN) when given.
 * A request whose headers and body have not all arrived within `requestTimeoutMs` (0 = no bound) is
 * answered 408 and its connection closed by node:http itself: a periodic check of the open
 * connections, so no timer per request.
 */
export function httpListener(
  handler: http.RequestListener,
  certs: CertificateSource | undefined,
  clientSan: string,
  logger: Logger,
  admission: ListenerAdmission,
  requestTimeoutMs = 0,
): http.Server {
  const limits: http.ServerOptions = {
    requestTimeout: requestTimeoutMs,
    // node:http requires headersTimeout <= requestTimeout; its own default (60 s) otherwise.
    headersTimeout: requestTimeoutMs > 0 ? Math.min(requestTimeoutMs, 60_000) : 60_000,
    // How often the bound is checked (node's default is 30 s): a tenth of it, within 50 ms..1 s.
    connectionsCheckingInterval: requestTimeoutMs > 0 ? Math.min(1000, Math.max(50, requestTimeoutMs / 10)) : 30_000,
  };
  const server =
    certs === undefined
      ? http.createServer(limits, handler)
      : https.createServer({ ...limits, ...httpsOptions(certs.current), handshakeTimeout: tlsHandshakeBackstop(admission.limits.handshakeTimeoutMs) }, handler);
  admitNodeHttpConnections(server, admission, certs !== undefined);
  if (certs !== undefined) {
    const secure = server as https.Server;
    certs.subscribe((m) => secure.setSecureContext(httpsOptions(m)));
    if (clientSan !== '') enforceClientSan(secure, clientSan, logger);
    // node leaves closing a socket whose handshake failed (or took too long) to this listener.
    secure.on('tlsClientError', (_err: Error, socket: net.Socket) => socket.destroy());
  }
  server.on('close', () => admission.close());
  return server;
}

/** A node:http connection as admission sees it: its requests counted from node's events. */
class NodeHttpConnection implements AdmittedConnection {
  handshaking: boolean;
  callsInFlight = 0;
  lastRequestAt = 0;

  constructor(
    private socket: net.Socket,
    tls: boolean,
  ) {
    this.handshaking = tls;
  }

  /** The TLS socket node:http serves, once the handshake is done. */
  secured(socket: net.Socket): void {
    this.socket = socket;
    this.handshaking = false;
  }

  close(): void {
    // node:http closes a connection it has answered when asked to; one mid-request finishes first.
    if (this.callsInFlight === 0) this.socket.end();
  }

  shed(): void {
    this.socket.destroy();
  }
}

/** Takes every connection of `server` through admission and follows its requests. */
export function admitNodeHttpConnections(server: http.Server, admission: ListenerAdmission, tls: boolean): void {
  const bySocket = new WeakMap<net.Socket, NodeHttpConnection>();
  refuseBeforeSocket(server, admission);
  server.on('connection', (socket: net.Socket) => {
    // A unix socket has no address to tell its TLS socket by: admitted once secure.
    if (tls && socket.remotePort === undefined) return;
    const admitted = admission.accept(socket, tls);
    if (admitted === undefined) return;
    const connection = new NodeHttpConnection(socket, tls);
    admitted.connection = connection;
    if (!tls) bySocket.set(socket, connection);
  });
  if (tls) {
    server.on('secureConnection', (socket: net.Socket) => {
      const admitted = socket.remotePort === undefined ? admission.accept(socket) : admission.secured(socket);
      if (admitted === undefined) {
        socket.destroy();
        return;
      }
      let connection = admitted.connection as NodeHttpConnection | undefined;
      if (connection === undefined) admitted.connection = connection = new NodeHttpConnection(socket, false);
      else connection.secured(socket);
      bySocket.set(socket, connection);
    });
  }
  server.on('request', (req: http.IncomingMessage, res: http.ServerResponse) => {
    const connection = bySocket.get(req.socket);
    if (connection === undefined) return;
    connection.callsInFlight++;
    connection.lastRequestAt = performance.now();
    res.once('close', () => {
      connection.callsInFlight--;
      connection.lastRequestAt = performance.now();
    });
  });
}
