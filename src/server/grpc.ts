/**
 * The gRPC listener: envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit and
 * grpc.health.v1.Health. Decision errors answer UNKNOWN with upstream's text. Each method counts
 * `ratelimit_server.<Method>.total_requests` and times `ratelimit_server.<Method>.response_time`.
 */
import * as grpc from '@grpc/grpc-js';
import {
  type HealthCheckRequest,
  type HealthCheckResponse,
  HealthCheckResponse_ServingStatus as Serving,
  type HealthListRequest,
  type HealthListResponse,
  HealthService,
} from '../../generated/grpc/health/v1/health';
import type { StatsStore } from '../stats/store';
import type { Logger } from '../telemetry/logger';
import { NOOP_TRACING, type Tracing } from '../telemetry/tracing';
import { requestText } from './request-text';
import type { Health } from './health';
import type { Decider } from './http';
import { InvalidRequestError, type RateLimitRequest, type RateLimitResponse } from '../limiter/types';
import { decodeRateLimitRequest, encodeRateLimitResponse, ProtoDecodeError } from './proto-codec';

/** The health service name whose status follows the components (upstream's "ratelimit"). */
export const HEALTH_SERVICE_NAME = 'ratelimit';

export interface GrpcServicesOptions {
  service: Decider;
  health: Health;
  stats: StatsStore;
  logger: Logger;
  tracing?: Tracing;
}

function methodStats(stats: StatsStore, method: string) {
  return {
    total: stats.counter(`ratelimit_server.${method}.total_requests`),
    time: stats.timer(`ratelimit_server.${method}.response_time`),
  };
}

/** A request that failed to decode: the handler answers INVALID_ARGUMENT with its reason. */
class Undecodable {
  constructor(readonly reason: string) {}
}

/**
 * RateLimitService with the hand-written codec (proto-codec.ts): requests decode straight into
 * the service's types and responses encode straight from them.
 */
const RATE_LIMIT_SERVICE = {
  shouldRateLimit: {
    path: '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit',
    requestStream: false,
    responseStream: false,
    requestSerialize: (): Buffer => {
      throw new Error('server-side definition: requests are never serialized here');
    },
    requestDeserialize: (b: Buffer): RateLimitRequest | Undecodable => {
      try {
        return decodeRateLimitRequest(b);
      } catch (err) {
        if (err instanceof ProtoDecodeError) return new Undecodable(`invalid RateLimitRequest: ${err.message}`);
        throw err;
      }
    },
    responseSerialize: encodeRateLimitResponse,
    responseDeserialize: (): RateLimitResponse => {
      throw new Error('server-side definition: responses are never decoded here');
    },
  },
} as const;

/**
 * Adds the rate limit and health services to `server`. Returns a function that ends the open
 * health Watch streams, which would otherwise hold a graceful shutdown until its deadline.
 */
export function addGrpcServices(server: grpc.Server, opts: GrpcServicesOptions): () => void {
  const { service, health, stats, logger } = opts;
  const tracing = opts.tracing ?? NOOP_TRACING;
  const rl = methodStats(stats, 'ShouldRateLimit');
  server.addService(RATE_LIMIT_SERVICE as unknown as grpc.ServiceDefinition, {
    shouldRateLimit(
      call: grpc.ServerUnaryCall<RateLimitRequest | Undecodable, RateLimitResponse>,
      callback: grpc.sendUnaryData<RateLimitResponse>,
    ): void {
      const start = performance.now();
      rl.total.inc();
      const request = call.request;
      if (request instanceof Undecodable) {
        rl.time.record(Math.trunc(performance.now() - start));
        callback({ code: grpc.status.INVALID_ARGUMENT, details: request.reason });
        return;
      }
      const span = tracing.enabled ? tracing.startCallSpan(call.metadata, request.domain, () => requestText(request)) : undefined;
      service.shouldRateLimit(request, span).then(
        (res) => {
          span?.end();
          rl.time.record(Math.trunc(performance.now() - start));
          callback(null, res);
        },
        (err: unknown) => {
          span?.end();
          rl.time.record(Math.trunc(performance.now() - start));
          const details = err instanceof Error ? err.message : String(err);
          if (logger.enabled('debug')) logger.debug(`ShouldRateLimit error: ${details}`);
          // Upstream answers every decision error UNKNOWN; requests beyond our own limits are INVALID_ARGUMENT.
          callback({ code: err instanceof InvalidRequestError ? grpc.status.INVALID_ARGUMENT : grpc.status.UNKNOWN, details });
        },
      );
    },
  });

  const statusOf = (name: string): Serving | undefined =>
    name === '' ? Serving.SERVING : name === HEALTH_SERVICE_NAME ? (health.isHealthy() ? Serving.SERVING : Serving.NOT_SERVING) : undefined;
  const check = methodStats(stats, 'Check');
  const watches = new Set<grpc.ServerWritableStream<HealthCheckRequest, HealthCheckResponse>>();
  server.addService(HealthService, {
    check(
      call: grpc.ServerUnaryCall<HealthCheckRequest, HealthCheckResponse>,
      callback: grpc.sendUnaryData<HealthCheckResponse>,
    ): void {
      check.total.inc();
      const s = statusOf(call.request.service);
      if (s === undefined) callback({ code: grpc.status.NOT_FOUND, details: 'unknown service' });
      else callback(null, { status: s });
    },
    list(_call: grpc.ServerUnaryCall<HealthListRequest, HealthListResponse>, callback: grpc.sendUnaryData<HealthListResponse>): void {
      callback(null, {
        statuses: { '': { status: Serving.SERVING }, [HEALTH_SERVICE_NAME]: { status: statusOf(HEALTH_SERVICE_NAME)! } },
      });
    },
    watch(call: grpc.ServerWritableStream<HealthCheckRequest, HealthCheckResponse>): void {
      const name = call.request.service;
      let last: Serving | undefined;
      const send = (): void => {
        const s = statusOf(name) ?? Serving.SERVICE_UNKNOWN;
        if (s !== last) {
          last = s;
          call.write({ status: s });
        }
      };
      send();
      const unsubscribe = health.onChange(send);
      watches.add(call);
      const off = (): void => {
        unsubscribe();
        watches.delete(call);
      };
      call.on('cancelled', off);
      call.on('close', off);
      call.on('error', off);
    },
  });
  return () => {
    for (const call of watches) call.end();
    watches.clear();
  };
}
