/** The HTTP(S) server behind /json, /healthcheck and the debug port. */
import http from 'node:http';
import https from 'node:https';
import type { Logger } from '../telemetry/logger';
import { type CertificateSource, enforceClientSan, httpsOptions } from './tls';

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
  requestTimeoutMs = 0,
): http.Server {
  const limits: http.ServerOptions = {
    requestTimeout: requestTimeoutMs,
    // node:http requires headersTimeout <= requestTimeout; its own default (60 s) otherwise.
    headersTimeout: requestTimeoutMs > 0 ? Math.min(requestTimeoutMs, 60_000) : 60_000,
    // How often the bound is checked (node's default is 30 s): a tenth of it, within 50 ms..1 s.
    connectionsCheckingInterval: requestTimeoutMs > 0 ? Math.min(1000, Math.max(50, requestTimeoutMs / 10)) : 30_000,
  };
  if (certs === undefined) return http.createServer(limits, handler);
  const server = https.createServer({ ...limits, ...httpsOptions(certs.current) }, handler);
  certs.subscribe((m) => server.setSecureContext(httpsOptions(m)));
  if (clientSan !== '') enforceClientSan(server, clientSan, logger);
  return server;
}
