/**
 * A model of one Envoy process running the `envoy.filters.http.rate_limit_quota` filter for one
 * domain, for tests against the real service. It does what Envoy's source does (read in
 * source/extensions/filters/http/rate_limit_quota/{filter.cc, global_client_impl.cc,
 * filter_persistence.cc, quota_bucket_cache.h} and source/common/common/token_bucket_impl.h),
 * not what the proto comments promise:
 *
 * - One stream per RLQS target and domain per Envoy process, opened with the report timer when
 *   the first bucket is created. The timer fires every 5 s (hardcoded in filter_persistence.cc;
 *   the bucket's reporting_interval is ignored) and is re-armed after each tick.
 * - A new bucket's first request is decided by no_assignment_behavior (allowed unless it is a
 *   DENY_ALL blanket rule), counted, and sends at once a report of that bucket alone with
 *   time_elapsed 0. Each tick reports every bucket: its counts since its last report (then reset,
 *   even when the report is dropped) and time_elapsed in whole seconds, truncated. Idle buckets
 *   keep being reported with zero counts until the server abandons them.
 * - A token_bucket assignment refills continuously at tokens_per_fill / fill_interval, where the
 *   interval is truncated to whole seconds (a sub-second one divides by zero: an always-full
 *   bucket). It replaces the bucket only when max_tokens, tokens_per_fill or fill_interval.nanos
 *   differ (a change of fill_interval.seconds alone is not seen); a replacement starts at
 *   trunc(max_tokens × remaining / old max); the first one starts full.
 * - requests_per_time_unit, and an assignment without a strategy, are dropped: the bucket keeps
 *   its previous action and that action's TTL timer. An action that is neither an assignment nor
 *   an abandon is cached as is: requests fail open, and its TTL (0 s) ends it at once.
 * - The TTL reads assignment_time_to_live.seconds only (unset: expires at once); every
 *   assignment restarts it. At expiry expired_assignment_behavior's fallback applies for its
 *   timeout (whole seconds), then no_assignment_behavior; without it, no_assignment_behavior at
 *   once. reuse_last_assignment is never read.
 * - abandon_action erases the bucket (unreported counts lost); its next request creates it again.
 * - A stream that ends (any status) is dropped; the next tick opens a new one and sends the full
 *   report there. A new bucket's first report while there is no stream is dropped.
 *
 * Time comes from a Clock (src/platform/clock): a ManualClock runs many simulated seconds in
 * milliseconds and deterministically; systemClock runs in real time. The stream goes through a
 * QuotaTransport: over gRPC to a running service, or in process to a QuotaService.
 *
 * Not modelled: worker threads and the TLS cache (a bucket exists as soon as its first request is
 * seen), request matching and bucket_id_builder (the caller passes the bucket's pairs), deny
 * responses, preview matchers, gRPC retries and timeouts of Envoy's async client.
 */
import * as grpc from '@grpc/grpc-js';
import {
  RateLimitQuotaServiceClient,
  RateLimitQuotaResponse,
  type RateLimitQuotaResponse_BucketAction,
  RateLimitQuotaUsageReports,
} from '../../generated/envoy/service/rate_limit_quota/v3/rlqs';
import { RateLimitStrategy_BlanketRule, type RateLimitStrategy } from '../../generated/envoy/type/v3/ratelimit_strategy';
import type { TokenBucket as TokenBucketProto } from '../../generated/envoy/type/v3/token_bucket';
import type { Clock } from '../../src/platform/clock';
import type { QuotaService } from '../../src/quota/quota-service';
import { QuotaCalls } from '../../src/server/quota-calls';
import { StatsStore } from '../../src/stats/store';
import type { Logger } from '../../src/telemetry/logger';

/** filter_persistence.cc: `std::chrono::milliseconds reporting_interval(5000);` */
export const ENVOY_REPORT_INTERVAL_MS = 5000;

/** Envoy's AtomicTokenBucketImpl floor on the fill rate (one token a year). */
const MIN_FILL_RATE = 1 / (365 * 24 * 60 * 60);

/**
 * Envoy's AtomicTokenBucketImpl: the state is one time point; the tokens at `now` are
 * min(max, (now - time) * rate); taking one moves the time point forward by 1 / rate.
 */
export class EnvoyTokenBucket {
  readonly fillRate: number;
  private timeS: number;

  constructor(
    readonly maxTokens: number,
    fillRate: number,
    initialTokens: number,
    nowS: number,
  ) {
    this.fillRate = Math.max(Math.abs(fillRate), MIN_FILL_RATE);
    this.timeS = nowS - (initialTokens > 0 && Number.isFinite(this.fillRate) ? initialTokens / this.fillRate : 0);
  }

  remaining(nowS: number): number {
    // std::min(max, NaN) is max in C++: an infinite rate (fill_interval under 1 s) is always full.
    if (!Number.isFinite(this.fillRate)) return this.maxTokens;
    return Math.min(this.maxTokens, (nowS - this.timeS) * this.fillRate);
  }

  /** consume(1, allow_partial=false). */
  consume(nowS: number): boolean {
    const total = this.remaining(nowS);
    if (total < 1) return false;
    if (Number.isFinite(this.fillRate)) this.timeS = nowS - (total - 1) / this.fillRate;
    return true;
  }
}

export type Blanket = 'allow-all' | 'deny-all';

/** A strategy as the tests read it. */
export type StrategyView =
  | { readonly kind: Blanket }
  | { readonly kind: 'token-bucket'; readonly maxTokens: number; readonly tokensPerFill: number; readonly fillIntervalSeconds: number; readonly tokensPerSecond: number }
  | { readonly kind: 'unset' }
  | { readonly kind: 'unrecognized' };

/** What a bucket enforces now, and where it came from. */
export interface AssignmentView {
  readonly source: 'no-assignment' | 'assignment' | 'fallback';
  readonly strategy: StrategyView;
  readonly ttlSeconds?: number;
  /** Client clock (ms) when it took effect. */
  readonly sinceMs: number;
}

export interface BucketView {
  readonly bucket: Readonly<Record<string, string>>;
  readonly assignment: AssignmentView;
  /** Requests since the bucket was (last) created. */
  readonly allowed: number;
  readonly denied: number;
  /** Tokens in its token bucket now (undefined without one). */
  readonly tokens: number | undefined;
  /** Token buckets built for it so far (replacements included). */
  readonly tokenBucketsBuilt: number;
}

export interface SentReport {
  readonly atMs: number;
  /** The stream it went on (1 = the first stream opened). */
  readonly stream: number;
  readonly kind: 'first' | 'periodic';
  readonly message: RateLimitQuotaUsageReports;
}

export interface ReceivedAction {
  readonly atMs: number;
  readonly stream: number;
  readonly action: RateLimitQuotaResponse_BucketAction;
}

export interface StreamEnd {
  readonly atMs: number;
  readonly stream: number;
  readonly code: number;
  readonly details: string;
}

/** One RLQS stream as the client sees it. */
export interface QuotaCall {
  write(m: RateLimitQuotaUsageReports): void;
  /** Resets the stream (Envoy's client going away). */
  cancel(): void;
}

/** How the client reaches the service: each `open` is a new stream. */
export interface QuotaTransport {
  open(on: { response(r: RateLimitQuotaResponse): void; ended(code: number, details: string): void }): QuotaCall;
}

export interface EnvoyQuotaClientOptions {
  transport: QuotaTransport;
  clock: Clock;
  domain: string;
  /** no_assignment_behavior's blanket rule; Envoy allows all when it is not set. */
  noAssignmentBehavior?: Blanket;
  /** expired_assignment_behavior: `fallback` (fallback_rate_limit) for `timeoutSeconds` (0 when unset). */
  expiredAssignmentBehavior?: { fallback: RateLimitStrategy; timeoutSeconds: number };
}

interface Cached {
  readonly bucket: Readonly<Record<string, string>>;
  readonly key: string;
  /** QuotaUsage: unreported counts (reset by each report) and the last report's time. */
  pendingAllowed: number;
  pendingDenied: number;
  lastReportMs: number;
  allowed: number;
  denied: number;
  /** Envoy's cached_action: undefined = the default (no-assignment) action. */
  action: { readonly source: 'assignment' | 'fallback'; readonly message: RateLimitQuotaResponse_BucketAction; readonly sinceMs: number; readonly ttlSeconds: number } | undefined;
  limiter: EnvoyTokenBucket | undefined;
  timer: unknown;
  createdMs: number;
  tokenBucketsBuilt: number;
}

type StrategyCase = 'blanket' | 'token-bucket' | 'requests-per-time-unit' | 'unset';

function strategyCase(s: RateLimitStrategy | undefined): StrategyCase {
  if (s === undefined) return 'unset';
  if (s.tokenBucket !== undefined) return 'token-bucket';
  if (s.requestsPerTimeUnit !== undefined) return 'requests-per-time-unit';
  if (s.blanketRule !== undefined) return 'blanket';
  return 'unset';
}

/** Envoy's protoTokenBucketsEq: max_tokens, tokens_per_fill and fill_interval().nanos() only. */
export function sameTokenBucket(a: TokenBucketProto, b: TokenBucketProto): boolean {
  return a.maxTokens === b.maxTokens && (a.tokensPerFill ?? 0) === (b.tokensPerFill ?? 0) && (a.fillInterval?.nanos ?? 0) === (b.fillInterval?.nanos ?? 0);
}

/** fill_interval in whole seconds (absl::ToInt64Seconds truncates). */
const wholeSeconds = (d: { seconds: bigint; nanos: number } | undefined): number => (d === undefined ? 0 : Math.trunc(Number(d.seconds) + d.nanos / 1e9));

/** tokens_per_fill().value() / whole seconds: an unset wrapper reads 0; 0 s gives Infinity (or NaN). */
function fillRateOf(tb: TokenBucketProto): number {
  return (tb.tokensPerFill ?? 0) / wholeSeconds(tb.fillInterval);
}

function viewOf(s: RateLimitStrategy | undefined): StrategyView {
  switch (strategyCase(s)) {
    case 'blanket':
      return s!.blanketRule === RateLimitStrategy_BlanketRule.ALLOW_ALL
        ? { kind: 'allow-all' }
        : s!.blanketRule === RateLimitStrategy_BlanketRule.DENY_ALL
          ? { kind: 'deny-all' }
          : { kind: 'unrecognized' };
    case 'token-bucket': {
      const tb = s!.tokenBucket!;
      return { kind: 'token-bucket', maxTokens: tb.maxTokens, tokensPerFill: tb.tokensPerFill ?? 0, fillIntervalSeconds: wholeSeconds(tb.fillInterval), tokensPerSecond: fillRateOf(tb) };
    }
    default:
      return { kind: 'unset' };
  }
}

/** A bucket's identity: its pairs, order-free (Envoy hashes the BucketId deterministically). */
export const bucketKey = (bucket: Readonly<Record<string, string>>): string => JSON.stringify(Object.keys(bucket).sort().map((k) => [k, bucket[k]]));

export class EnvoyQuotaClient {
  /** Every report sent, in order. */
  readonly reports: SentReport[] = [];
  /** Every bucket action received, in order (ignored ones included). */
  readonly actions: ReceivedAction[] = [];
  /** Every stream that ended, with its status. */
  readonly streamEnds: StreamEnd[] = [];
  /** What Envoy would log at error level (ignored actions, dropped reports). */
  readonly errors: string[] = [];
  /** Times (client clock, ms) a bucket went back to no_assignment_behavior or a fallback on expiry. */
  readonly expiries: Array<{ atMs: number; key: string }> = [];

  private readonly buckets = new Map<string, Cached>();
  private readonly noAssignment: Blanket;
  private readonly clock: Clock;
  private call: QuotaCall | undefined;
  private streamNumber = 0;
  private reportTimer: unknown;
  private started = false;
  private closed = false;

  constructor(readonly opts: EnvoyQuotaClientOptions) {
    this.clock = opts.clock;
    this.noAssignment = opts.noAssignmentBehavior ?? 'allow-all';
  }

  now(): number {
    return this.clock.nowMs();
  }

  /** Streams opened so far. */
  get streamsOpened(): number {
    return this.streamNumber;
  }

  /** Whether a stream is open now. */
  get streaming(): boolean {
    return this.call !== undefined;
  }

  /** One request matched into `bucket`: whether it is admitted. Counted for the reports. */
  request(bucket: Readonly<Record<string, string>>): boolean {
    if (this.closed) throw new Error('EnvoyQuotaClient: request() after close()');
    const key = bucketKey(bucket);
    const b = this.buckets.get(key);
    if (b === undefined) {
      const allowed = this.noAssignment === 'allow-all';
      this.createBucket({ ...bucket }, key, allowed);
      return allowed;
    }
    const allowed = this.shouldAllow(b);
    if (allowed) {
      b.pendingAllowed++;
      b.allowed++;
    } else {
      b.pendingDenied++;
      b.denied++;
    }
    return allowed;
  }

  /** What the bucket enforces now (undefined when the client holds no such bucket). */
  bucket(bucket: Readonly<Record<string, string>>): BucketView | undefined {
    const b = this.buckets.get(bucketKey(bucket));
    if (b === undefined) return undefined;
    return {
      bucket: b.bucket,
      assignment:
        b.action === undefined
          ? { source: 'no-assignment', strategy: { kind: this.noAssignment }, sinceMs: b.createdMs }
          : { source: b.action.source, strategy: viewOf(b.action.message.quotaAssignmentAction?.rateLimitStrategy), ttlSeconds: b.action.ttlSeconds, sinceMs: b.action.sinceMs },
      allowed: b.allowed,
      denied: b.denied,
      tokens: b.limiter?.remaining(this.now() / 1000),
      tokenBucketsBuilt: b.tokenBucketsBuilt,
    };
  }

  /** The refill rate (tokens per second) the bucket enforces now, if a token bucket. */
  tokensPerSecond(bucket: Readonly<Record<string, string>>): number | undefined {
    const s = this.bucket(bucket)?.assignment.strategy;
    return s?.kind === 'token-bucket' ? s.tokensPerSecond : undefined;
  }

  /** Stops reporting and resets the stream (Envoy's client going away). */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.clock.clearTimeout(this.reportTimer);
    for (const b of this.buckets.values()) this.clock.clearTimeout(b.timer);
    this.buckets.clear();
    const call = this.call;
    this.call = undefined;
    call?.cancel();
  }

  // --- the filter's decision (filter.cc shouldAllowRequest) ---

  private shouldAllow(b: Cached): boolean {
    if (b.action === undefined) return this.noAssignment === 'allow-all';
    const strategy = b.action.message.quotaAssignmentAction?.rateLimitStrategy;
    switch (strategyCase(strategy)) {
      case 'blanket':
        return strategy!.blanketRule !== RateLimitStrategy_BlanketRule.DENY_ALL;
      case 'token-bucket':
        return b.limiter!.consume(this.now() / 1000);
      case 'requests-per-time-unit': // warns "not yet supported" and fails open
      case 'unset': // "Bug: ... causing the filter to fail open"
        return true;
    }
  }

  // --- the global client (global_client_impl.cc) ---

  private createBucket(bucket: Readonly<Record<string, string>>, key: string, allowed: boolean): void {
    if (!this.started) {
      this.started = true;
      this.armReportTimer();
      this.startStream();
    }
    const now = this.now();
    const b: Cached = {
      bucket,
      key,
      pendingAllowed: allowed ? 1 : 0,
      pendingDenied: allowed ? 0 : 1,
      lastReportMs: now,
      allowed: allowed ? 1 : 0,
      denied: allowed ? 0 : 1,
      action: undefined,
      limiter: undefined,
      timer: undefined,
      createdMs: now,
      tokenBucketsBuilt: 0,
    };
    this.buckets.set(key, b);
    this.send({ domain: this.opts.domain, bucketQuotaUsages: [this.usageOf(b, now)] }, 'first');
  }

  /** getUsageFromBucket: takes the counts (resetting them) and the whole seconds since the last report. */
  private usageOf(b: Cached, now: number) {
    const usage = {
      bucketId: { bucket: { ...b.bucket } },
      timeElapsed: { seconds: BigInt(Math.trunc((now - b.lastReportMs) / 1000)), nanos: 0 },
      numRequestsAllowed: BigInt(b.pendingAllowed),
      numRequestsDenied: BigInt(b.pendingDenied),
    };
    b.pendingAllowed = 0;
    b.pendingDenied = 0;
    b.lastReportMs = now;
    return usage;
  }

  /** enableTimer(5 s), re-armed after each tick. */
  private armReportTimer(): void {
    this.reportTimer = this.clock.setTimeout(() => {
      if (this.closed) return;
      this.onReportTimer();
      this.armReportTimer();
    }, ENVOY_REPORT_INTERVAL_MS);
  }

  private onReportTimer(): void {
    const now = this.now();
    // buildReports() first: the counts are taken even if the report is then dropped.
    const message: RateLimitQuotaUsageReports = { domain: this.opts.domain, bucketQuotaUsages: [...this.buckets.values()].map((b) => this.usageOf(b, now)) };
    if (this.call === undefined) this.startStream();
    this.send(message, 'periodic');
  }

  private startStream(): void {
    const stream = ++this.streamNumber;
    let call: QuotaCall | undefined;
    call = this.opts.transport.open({
      response: (r) => {
        if (call !== undefined && this.call === call) this.onResponse(r, stream);
      },
      ended: (code, details) => {
        this.streamEnds.push({ atMs: this.now(), stream, code, details });
        if (call !== undefined && this.call === call) this.call = undefined;
      },
    });
    if (!this.streamEnds.some((e) => e.stream === stream)) this.call = call;
  }

  private send(message: RateLimitQuotaUsageReports, kind: SentReport['kind']): void {
    if (this.call === undefined) {
      this.errors.push('Attempted to send a UsageReports message across the RLQS stream but it has already closed.');
      return;
    }
    this.reports.push({ atMs: this.now(), stream: this.streamNumber, kind, message });
    this.call.write(message);
  }

  private onResponse(r: RateLimitQuotaResponse, stream: number): void {
    const now = this.now();
    for (const action of r.bucketAction) {
      this.actions.push({ atMs: now, stream, action });
      const pairs = action.bucketId?.bucket ?? {};
      if (Object.keys(pairs).length === 0) {
        this.errors.push('Received an RLQS response, but a bucket is missing its id.');
        continue;
      }
      const key = bucketKey(pairs);
      const cached = this.buckets.get(key);
      if (cached === undefined) {
        this.errors.push(`Received a response, but it includes an unexpected bucket that isn't present in the bucket cache: ${key}`);
        continue;
      }
      let limiter: EnvoyTokenBucket | undefined;
      if (action.quotaAssignmentAction !== undefined) {
        const strategy = action.quotaAssignmentAction.rateLimitStrategy;
        const c = strategyCase(strategy);
        if (c === 'requests-per-time-unit') {
          this.errors.push('RequestsPerTimeUnit rate limit strategies are not yet supported in RLQS.');
          continue;
        }
        if (c === 'unset') {
          this.errors.push(`Unexpected rate limit strategy in RLQS response: ${key}`);
          continue;
        }
        if (c === 'token-bucket') limiter = this.limiterFor(cached, strategy!.tokenBucket!, now);
      } else if (action.abandonAction !== undefined) {
        this.clock.clearTimeout(cached.timer);
        this.buckets.delete(key);
        continue;
      }
      // A new cached bucket: timers and the old action are not carried over.
      this.clock.clearTimeout(cached.timer);
      const ttlSeconds = Number(action.quotaAssignmentAction?.assignmentTimeToLive?.seconds ?? 0n);
      cached.action = { source: 'assignment', message: action, sinceMs: now, ttlSeconds };
      cached.limiter = limiter;
      cached.timer = this.clock.setTimeout(() => this.onAssignmentExpired(cached), ttlSeconds * 1000);
    }
  }

  /** shouldReplaceTokenBucket / createTokenBucketFromAction. */
  private limiterFor(cached: Cached, tb: TokenBucketProto, now: number): EnvoyTokenBucket {
    const old = cached.action?.message.quotaAssignmentAction?.rateLimitStrategy?.tokenBucket;
    if (old !== undefined && cached.limiter !== undefined && sameTokenBucket(tb, old)) return cached.limiter;
    const nowS = now / 1000;
    const existing = cached.limiter;
    const initial = existing === undefined ? tb.maxTokens : existing.maxTokens > 0 ? Math.trunc(tb.maxTokens * (existing.remaining(nowS) / existing.maxTokens)) : 0;
    cached.tokenBucketsBuilt++;
    return new EnvoyTokenBucket(tb.maxTokens, fillRateOf(tb), initial, nowS);
  }

  private onAssignmentExpired(cached: Cached): void {
    if (this.closed || this.buckets.get(cached.key) !== cached) return;
    const now = this.now();
    this.expiries.push({ atMs: now, key: cached.key });
    const behaviour = this.opts.expiredAssignmentBehavior;
    if (behaviour === undefined) {
      cached.action = undefined;
      cached.limiter = undefined;
      cached.timer = undefined;
      return;
    }
    const fallback = behaviour.fallback;
    const message: RateLimitQuotaResponse_BucketAction = {
      bucketId: { bucket: { ...cached.bucket } },
      quotaAssignmentAction: { assignmentTimeToLive: undefined, rateLimitStrategy: fallback },
    };
    cached.limiter = strategyCase(fallback) === 'token-bucket' ? this.limiterFor(cached, fallback.tokenBucket!, now) : undefined;
    cached.action = { source: 'fallback', message, sinceMs: now, ttlSeconds: behaviour.timeoutSeconds };
    cached.timer = this.clock.setTimeout(() => {
      if (this.closed || this.buckets.get(cached.key) !== cached || cached.action?.message !== message) return;
      cached.action = undefined;
      cached.limiter = undefined;
      cached.timer = undefined;
    }, behaviour.timeoutSeconds * 1000);
  }
}

/** Streams over gRPC to a running service (grpc-js). `close()` closes the channel. */
export function grpcTransport(address: string, credentials = grpc.credentials.createInsecure()): QuotaTransport & { close(): void } {
  const client = new RateLimitQuotaServiceClient(address, credentials);
  return {
    open(on) {
      const call = client.streamRateLimitQuotas();
      call.on('data', (r: RateLimitQuotaResponse) => on.response(r));
      call.on('status', (s: grpc.StatusObject) => on.ended(s.code, s.details));
      call.on('error', () => undefined); // the status event carries it
      return { write: (m) => call.write(m), cancel: () => call.cancel() };
    },
    close: () => client.close(),
  };
}

/**
 * Streams in process to a QuotaService through the same QuotaCalls the gRPC transports use (the
 * messages encoded and decoded as on the wire), each response delivered `latencyMs` later on `clock` (Envoy posts
 * responses to its main thread: never within the report's own call).
 */
export function inProcessTransport(service: QuotaService, clock: Clock, logger: Logger, latencyMs = 1): QuotaTransport & { cut(details: string): void } {
  const calls = new QuotaCalls(service, new StatsStore(), logger);
  const open = new Set<(code: number, details: string) => void>();
  return {
    open(on) {
      let ended = false;
      /** Responses still on their way are lost (a reset, a cut, a cancel); a status comes after them. */
      let lost = false;
      const end = (code: number, details: string, losing: boolean): void => {
        if (ended) return;
        ended = true;
        lost = losing;
        open.delete(cut);
        handle.close();
        clock.setTimeout(() => on.ended(code, details), latencyMs);
      };
      const cut = (code: number, details: string): void => end(code, details, true);
      const handle = calls.open({
        write: (frame) => clock.setTimeout(() => !lost && on.response(RateLimitQuotaResponse.decode(frame.subarray(5))), latencyMs),
        unread: () => 0,
        fail: (code, details) => end(code, details, false),
        reset: (details) => end(grpc.status.RESOURCE_EXHAUSTED, details, true),
        resume: () => undefined, // QuotaCalls keeps what comes meanwhile; the model needs no flow control
      }, undefined); // each Envoy a connection of its own
      open.add(cut);
      return {
        write: (m) => clock.setTimeout(() => !ended && handle.message(Buffer.from(RateLimitQuotaUsageReports.encode(m).finish())), latencyMs),
        cancel: () => end(grpc.status.CANCELLED, 'Cancelled on client', true),
      };
    },
    /** Ends every open stream with UNAVAILABLE (a network cut, a replica going away). */
    cut(details: string): void {
      for (const c of [...open]) c(grpc.status.UNAVAILABLE, details);
    },
  };
}
