/**
 * The gRPC listener on grpc-js (GRPC_TRANSPORT=grpc-js, the default):
 * envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit and grpc.health.v1.Health. Decision
 * errors answer UNKNOWN with upstream's text. Each method counts
 * `ratelimit_server.<Method>.total_requests` and times `ratelimit_server.<Method>.response_time`.
 */
import type net from 'node:net';
import * as grpc from '@grpc/grpc-js';
import {
  type HealthCheckRequest,
  type HealthCheckResponse,
  type HealthListRequest,
  type HealthListResponse,
  HealthService,
} from '../../generated/grpc/health/v1/health';
import type { RateLimitRequest, RateLimitResponse } from '../core/rls';
import {
  decodeRequest,
  type GrpcListener,
  type GrpcListenerOptions,
  type GrpcServicesOptions,
  HealthAnswers,
  type RateLimitCall,
  RateLimitCalls,
  SHOULD_RATE_LIMIT_PATH,
  type Undecodable,
} from './grpc-common';
import { encodeRateLimitResponse } from './proto-codec';
import { GRPC_PREFIX_BYTES } from './proto-codec';
import { QuotaCalls, STREAM_RATE_LIMIT_QUOTAS_PATH } from './quota-calls';
import { enforceClientSanOnGrpc, grpcJsListeners, grpcServerCredentials } from './tls';
import { type AdmittedConnection, type ListenerAdmission, refuseBeforeSocket } from './admission';
import { peerCaller } from './callers';

/**
 * RateLimitService with the hand-written codec (proto-codec.ts): requests decode straight into
 * the service's types and responses encode straight from them.
 */
const RATE_LIMIT_SERVICE = {
  shouldRateLimit: {
    path: SHOULD_RATE_LIMIT_PATH,
    requestStream: false,
    responseStream: false,
    requestSerialize: (): Buffer => {
      throw new Error('server-side definition: requests are never serialized here');
    },
    requestDeserialize: (b: Buffer): RateLimitRequest | Undecodable => decodeRequest(b),
    responseSerialize: encodeRateLimitResponse,
    responseDeserialize: (): RateLimitResponse => {
      throw new Error('server-side definition: responses are never decoded here');
    },
  },
} as const;

/**
 * RateLimitQuotaService with the hand-written codec (quota-codec.ts): the messages pass as bytes,
 * decoded into the quota engine's terms and encoded from them by the quota calls.
 */
const RATE_LIMIT_QUOTA_SERVICE = {
  streamRateLimitQuotas: {
    path: STREAM_RATE_LIMIT_QUOTAS_PATH,
    requestStream: true,
    responseStream: true,
    requestSerialize: (): Buffer => {
      throw new Error('server-side definition: requests are never serialized here');
    },
    requestDeserialize: (b: Buffer): Buffer => b,
    responseSerialize: (b: Buffer): Buffer => b,
    responseDeserialize: (): Buffer => {
      throw new Error('server-side definition: responses are never decoded here');
    },
  },
} as const;

/**
 * What names the HTTP/2 connection a grpc-js call came on, for the RLQS budget per connection:
 * the peer's address and port, which name one live TCP connection (grpc-js shows its session
 * only through private fields, which a release of it may move).
 */
function connectionOf(call: grpc.ServerDuplexStream<Buffer, Buffer>): string {
  return `peer ${call.getPeer()}`;
}

/** A grpc-js ShouldRateLimit call: answered through its callback (grpc-js encodes the response). */
class GrpcJsRateLimitCall implements RateLimitCall {
  startedAt = 0;
  constructor(private readonly callback: grpc.sendUnaryData<RateLimitResponse>) {}
  answer(response: RateLimitResponse): void {
    this.callback(null, response);
  }
  fail(code: grpc.status, details: string): void {
    this.callback({ code, details });
  }
}

/**
 * Adds the rate limit and health services to `server`. Returns a function that ends the open
 * health Watch streams, which would otherwise hold a graceful shutdown until its deadline.
 */
export function addGrpcServices(server: grpc.Server, opts: GrpcServicesOptions): () => void {
  const calls = new RateLimitCalls(opts);
  server.addService(RATE_LIMIT_SERVICE as unknown as grpc.ServiceDefinition, {
    shouldRateLimit(
      call: grpc.ServerUnaryCall<RateLimitRequest | Undecodable, RateLimitResponse>,
      callback: grpc.sendUnaryData<RateLimitResponse>,
    ): void {
      calls.handle(call.request, call.metadata, new GrpcJsRateLimitCall(callback), peerCaller(call.getPeer()));
    },
  });

  if (opts.quota !== undefined) {
    const quota = new QuotaCalls(opts.quota, opts.stats, opts.logger);
    server.addService(RATE_LIMIT_QUOTA_SERVICE, {
      streamRateLimitQuotas(call: grpc.ServerDuplexStream<Buffer, Buffer>): void {
        let unread = 0;
        const stream = quota.open({
          write: (frame) => {
            unread++;
            // grpc-js frames the message itself.
            call.write(frame.subarray(GRPC_PREFIX_BYTES), () => unread--);
          },
          unread: () => unread,
          fail: (code, details) => call.emit('error', { code, details }),
          // grpc-js offers no reset of a server stream: the status is queued behind the backlog.
          reset: (details) => call.emit('error', { code: grpc.status.RESOURCE_EXHAUSTED, details }),
          resume: () => call.resume(),
        }, connectionOf(call));
        call.on('data', (body: Buffer) => {
          stream.message(body);
          // A report handled in parts: no other message until it is done (grpc-js reads no more meanwhile).
          if (stream.busy) call.pause();
        });
        call.on('end', () => {
          stream.close();
          call.end();
        });
        for (const ev of ['cancelled', 'close', 'error'] as const) call.on(ev, () => stream.close());
      },
    });
  }

  const health = new HealthAnswers(opts.health, opts.stats);
  server.addService(HealthService, {
    check(
      call: grpc.ServerUnaryCall<HealthCheckRequest, HealthCheckResponse>,
      callback: grpc.sendUnaryData<HealthCheckResponse>,
    ): void {
      const s = health.check(call.request.service);
      if (s === undefined) callback({ code: grpc.status.NOT_FOUND, details: 'unknown service' });
      else callback(null, { status: s });
    },
    list(_call: grpc.ServerUnaryCall<HealthListRequest, HealthListResponse>, callback: grpc.sendUnaryData<HealthListResponse>): void {
      callback(null, health.list());
    },
    watch(call: grpc.ServerWritableStream<HealthCheckRequest, HealthCheckResponse>): void {
      const off = health.watch(
        call.request.service,
        (status) => call.write({ status }),
        () => call.end(),
      );
      call.on('cancelled', off);
      call.on('close', off);
      call.on('error', off);
    },
  });
  return () => health.endWatches();
}

/** The grpc-js server with the services, GRPC_MAX_CONNECTION_*, GRPC_KEEPALIVE_*, stream cap, REQUEST_MAX_BYTES and TLS. */
export function createGrpcJsListener(opts: GrpcListenerOptions): GrpcListener {
  const { grpc: settings, certificates } = opts;
  const server = new grpc.Server({
    'grpc.max_connection_age_ms': settings.maxConnectionAgeMs,
    'grpc.max_connection_age_grace_ms': settings.maxConnectionAgeGraceMs,
    'grpc.max_receive_message_length': opts.maxRequestBytes,
    'grpc.keepalive_time_ms': settings.keepaliveTimeMs,
    'grpc.keepalive_timeout_ms': settings.keepaliveTimeoutMs,
    'grpc.max_concurrent_streams': settings.maxConcurrentStreams,
    // grpc-js reads 0 as "close at once"; ours means never (its default, ~24 days, is the same).
    ...(settings.maxConnectionIdleMs > 0 ? { 'grpc.max_connection_idle_ms': settings.maxConnectionIdleMs } : {}),
  });
  const endWatches = addGrpcServices(server, opts);
  const tls = settings.tls.enabled && certificates !== undefined;
  return {
    listen: async () => {
      const credentials = tls ? grpcServerCredentials(certificates) : grpc.ServerCredentials.createInsecure();
      const port = await new Promise<number>((resolve, reject) =>
        server.bindAsync(opts.target, credentials, (err, bound) => (err ? reject(err) : resolve(bound))),
      );
      if (tls && settings.tls.clientSan !== '') enforceClientSanOnGrpc(server, settings.tls.clientSan, opts.logger);
      for (const listener of grpcJsListeners(server, 'GRPC_MAX_CONNECTIONS')) admitGrpcJsConnections(listener, opts.admission, tls);
      if (tls) {
        // grpc-js applies the certificates on a later tick; announce nothing before they are live.
        for (let i = 0; i < 3; i++) await new Promise<void>((resolve) => setImmediate(resolve));
      }
      return port;
    },
    endWatches,
    drain: () => new Promise<void>((resolve) => server.tryShutdown(() => resolve())),
    forceClose: () => {
      server.forceShutdown();
      opts.admission.close();
    },
  };
}

/**
 * A grpc-js connection as admission sees it: only its socket (grpc-js shows neither its streams
 * nor its preface), so it is ranked by age, and its idle bound is grpc-js's own
 * (grpc.max_connection_idle_ms).
 */
class GrpcJsSocket implements AdmittedConnection {
  readonly callsInFlight = 0;
  readonly lastRequestAt = 0;

  constructor(
    private readonly socket: net.Socket,
    public handshaking: boolean,
  ) {}

  close(): void {}

  shed(): void {
    this.socket.destroy();
  }
}

/** Every connection grpc-js's listener accepts goes through `admission` (caps, per-peer bound, TLS handshake bound). */
function admitGrpcJsConnections(listener: net.Server, admission: ListenerAdmission, tls: boolean): void {
  refuseBeforeSocket(listener, admission);
  listener.on('connection', (socket: net.Socket) => {
    const admitted = admission.accept(socket, tls);
    if (admitted !== undefined) admitted.connection = new GrpcJsSocket(socket, tls && socket.remotePort !== undefined);
  });
  if (!tls) return;
  listener.on('secureConnection', (socket: net.Socket) => {
    const admitted = admission.secured(socket);
    if (admitted === undefined) return;
    const connection = admitted.connection as GrpcJsSocket;
    connection.handshaking = false;
  });
}
