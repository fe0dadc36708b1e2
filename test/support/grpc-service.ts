/**
 * What the gRPC transport tests start a listener with: a rate limit service on its own memory
 * store and a fixed clock (so two of them answer alike), and listener settings for 127.0.0.1 on a
 * free port with the defaults of the real program.
 */
import { MemoryStore } from '../../src/backends/memory';
import { loadConfig } from '../../src/config/load';
import { ManualClock } from '../../src/platform/clock';
import { RateLimitService, type ServiceFlags } from '../../src/limiter/service';
import type { GrpcSettings } from '../../src/settings';
import { ConnectionAdmission, type ListenerAdmission } from '../../src/server/admission';
import { grpcAdmissionLimits } from '../../src/app/admission-limits';
import type { StatsStore } from '../../src/stats/store';
import type { Tracing } from '../../src/telemetry/tracing';
import type { RateLimitRequest, RateLimitResponse } from '../../src/core/rls';
import type { Caller } from '../../src/core/store';
import type { Decider } from '../../src/server/http';

/** Flags with response headers and dynamic metadata on, so answers carry everything. */
export const FULL_ANSWER_FLAGS: ServiceFlags = {
  shadowMode: false,
  quotaMode: false,
  responseDynamicMetadata: true,
  responseHeadersEnabled: true,
  limitHeader: 'RateLimit-Limit',
  remainingHeader: 'RateLimit-Remaining',
  resetHeader: 'RateLimit-Reset',
};

export interface TestServiceOptions {
  flags?: ServiceFlags;
  tracing?: Tracing;
}

/** A service deciding with `config` (domain `d`), at most 3 descriptors of 10 entries per request. */
export function memoryRateLimitService(stats: StatsStore, config: string, options: TestServiceOptions = {}): RateLimitService {
  const clock = new ManualClock();
  clock.set(1_000_000 * 1000);
  const loaded = loadConfig([{ name: 'd.yaml', content: config }], { mergeDomainConfig: false, stats });
  const snapshot = { config: loaded, flags: options.flags ?? FULL_ANSWER_FLAGS };
  return new RateLimitService({
    store: new MemoryStore({ maxKeys: 10_000 }),
    snapshot: () => snapshot,
    stats,
    clock,
    nearLimitRatio: 0.8,
    cacheKeyPrefix: '',
    tracing: options.tracing,
    limits: { maxDescriptors: 3, maxEntries: 10, maxEntryLength: 1000 },
  });
}

/** Listener settings: 127.0.0.1, a free port, the program's defaults, then `over`. */
export function grpcTestSettings(over: Partial<GrpcSettings> = {}): GrpcSettings {
  return {
    uds: '',
    host: '127.0.0.1',
    port: 0,
    maxConnectionAgeMs: 24 * 3600_000,
    maxConnectionAgeGraceMs: 3600_000,
    tls: { enabled: false, certFile: '', keyFile: '', clientCaFile: '', clientSan: '' },
    transport: 'socket',
    keepaliveTimeMs: 2 * 3600_000,
    keepaliveTimeoutMs: 20_000,
    maxConnectionIdleMs: 300_000,
    firstRequestTimeoutMs: 10_000,
    maxConcurrentStreams: 1000,
    maxConnections: 10_000,
    maxConnectionsPerPeer: 1000,
    requestBodyTimeoutMs: 10_000,
    ...over,
  };
}

/** The gRPC port's admission as the program makes it from `settings` (a process of its own, no open-file cap). */
export function grpcTestAdmission(settings: GrpcSettings, stats?: StatsStore, handshakeTimeoutMs = 10_000): ListenerAdmission {
  return new ConnectionAdmission(Infinity, stats, undefined).listener(grpcAdmissionLimits(settings, handshakeTimeoutMs));
}

/**
 * A listener's service from a function that answers now, later (a promise) or throws: how the
 * tests' fakes decide, handed to the listener's answer as the real service hands it.
 */
export function deciderOf(decide: (request: RateLimitRequest, caller: Caller | undefined) => RateLimitResponse | Promise<RateLimitResponse>): Decider {
  return {
    decideInto(request, span, caller, _transport, ctx, answer) {
      let outcome: RateLimitResponse | Promise<RateLimitResponse>;
      try {
        outcome = decide(request, caller);
      } catch (err) {
        span?.end();
        answer.failed(ctx, err);
        return;
      }
      if (outcome instanceof Promise) outcome.then((response) => answer.decided(ctx, response), (err: unknown) => answer.failed(ctx, err));
      else answer.decided(ctx, outcome);
    },
  };
}
