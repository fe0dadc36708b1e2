/**
 * The admission bounds of each listener, from the settings (src/server/admission.ts applies
 * them), and the process's connection cap from its open-file limit.
 */
import { type AdmissionLimits, ConnectionAdmission } from '../server/admission';
import { KEEP_ALIVE_TIMEOUT_MS } from '../server/http-socket';
import { connectionsWithin, openFileLimit } from '../platform/open-files';
import type { GrpcSettings, Settings } from '../settings';
import type { StatsStore } from '../stats/store';
import type { Logger } from '../telemetry/logger';

/**
 * The process's admission: every listener's connections together stay within the open-file limit,
 * and the TLS handshakes under way within TLS_MAX_HANDSHAKES.
 */
export function processAdmission(settings: Settings, stats: StatsStore, logger: Logger, openFiles: number | undefined = openFileLimit()): ConnectionAdmission {
  const cap = openFiles === undefined ? Infinity : connectionsWithin(openFiles);
  if (openFiles !== undefined) logger.debug(`connections: at most ${cap} open at once in this process, all ports together (open-file limit ${openFiles})`);
  return new ConnectionAdmission(cap, stats, logger, undefined, settings.server.tlsMaxHandshakes);
}

/**
 * The gRPC port. On grpc-js only the caps and the handshake bound apply (it shows admission its
 * sockets, not its calls): its idle bound is its own GRPC_MAX_CONNECTION_IDLE.
 */
export function grpcAdmissionLimits(grpc: GrpcSettings, handshakeTimeoutMs: number): AdmissionLimits {
  const ours = grpc.transport === 'socket';
  return {
    listener: 'grpc',
    maxConnections: grpc.maxConnections,
    maxConnectionsSetting: 'GRPC_MAX_CONNECTIONS',
    maxPerPeer: grpc.maxConnectionsPerPeer,
    maxPerPeerSetting: 'GRPC_MAX_CONNECTIONS_PER_PEER',
    handshakeTimeoutMs,
    firstRequestTimeoutMs: ours ? grpc.firstRequestTimeoutMs : 0,
    idleTimeoutMs: ours ? grpc.maxConnectionIdleMs : 0,
  };
}

/** The HTTP port: node:http's keep-alive bound before the first request and between requests, as before. */
export function httpAdmissionLimits(settings: Settings): AdmissionLimits {
  const { server } = settings;
  return {
    listener: 'http',
    maxConnections: server.httpMaxConnections,
    maxConnectionsSetting: 'HTTP_MAX_CONNECTIONS',
    maxPerPeer: server.httpMaxConnectionsPerPeer,
    maxPerPeerSetting: 'HTTP_MAX_CONNECTIONS_PER_PEER',
    handshakeTimeoutMs: server.handshakeTimeoutMs,
    firstRequestTimeoutMs: KEEP_ALIVE_TIMEOUT_MS,
    idleTimeoutMs: KEEP_ALIVE_TIMEOUT_MS,
  };
}

/** The debug port, and the Prometheus port beside it (both for operators and scrapers, both on node:http). */
export function debugAdmissionLimits(settings: Settings, listener: 'debug' | 'metrics'): AdmissionLimits {
  const { server } = settings;
  return {
    listener,
    maxConnections: server.debugMaxConnections,
    maxConnectionsSetting: 'DEBUG_MAX_CONNECTIONS',
    maxPerPeer: server.debugMaxConnectionsPerPeer,
    maxPerPeerSetting: 'DEBUG_MAX_CONNECTIONS_PER_PEER',
    handshakeTimeoutMs: server.handshakeTimeoutMs,
    firstRequestTimeoutMs: KEEP_ALIVE_TIMEOUT_MS,
    idleTimeoutMs: KEEP_ALIVE_TIMEOUT_MS,
  };
}
