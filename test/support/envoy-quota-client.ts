/**
 * A stand-in for Envoy's `envoy.filters.http.rate_limit_quota` filter (one Envoy, one domain), for
 * tests against the real service. It reproduces what upstream Envoy does on the RLQS stream, read
 * from source/extensions/filters/http/rate_limit_quota/{filter,global_client_impl}.cc and
 * source/common/common/token_bucket_impl.h:
 *
 * - One bidirectional stream per client, opened with the reporting timer when the first bucket is
 *   created. The first request of a new bucket creates it (counted as allowed or denied by
 *   `noAssignmentBehavior`) and sends at once a report of that bucket alone, time_elapsed 0 s.
 *   From then on, every `reportingIntervalMs` (the timer is re-armed after each tick, as Envoy's
 *   enableTimer) one report carries every bucket: allowed/denied since its last report (then 0)
 *   and time_elapsed in whole seconds since that bucket's last report (truncated). With no bucket
 *   left (all abandoned) Envoy still sends the report: a domain and no usage.
 * - A request on a bucket with no assignment follows `noAssignmentBehavior` (a blanket rule).
 * - `token_bucket`: capacity max_tokens, refilled continuously at tokens_per_fill / fill_interval
 *   (fill_interval read in whole seconds); a new one starts full; an identical one (Envoy compares
 *   max_tokens, tokens_per_fill and fill_interval's nanos — not its seconds, see
 *   `sameTokenBucket`) keeps the current bucket and its tokens; a different one starts with the
 *   old one's ratio of remaining to max tokens (truncated to whole tokens). `blanket_rule`
 *   ALLOW_ALL / DENY_ALL apply as such. `requests_per_time_unit`, and an assignment without a
 *   strategy, are logged as errors and ignored (the bucket keeps what it had, TTL timer included).
 *   An action that is neither an assignment nor an abandon is cached as is: requests fail open and
 *   its time to live (0 s) ends it at once.
 * - assignment_time_to_live (whole seconds) arms an expiry timer; on expiry
 *   `expiredAssignmentBehavior` applies (its fallback strategy for its timeout in whole seconds;
 *   a token-bucket fallback identical to the expired assignment carries the bucket over), then the
 *   no-assignment behaviour. Without it, the bucket goes back to the no-assignment behaviour.
 * - An abandon_action erases the bucket (its unreported usage is lost); the next request creates
 *   it again and sends a fresh first report.
 * - A stream that ends (any status) is dropped; the next reporting tick opens a new one and sends
 *   its report there. A report due while there is no stream (a new bucket's first report) is
 *   dropped, its counts lost, as Envoy does.
 * - `close()` resets the stream (Envoy's client destructor resets it) and clears every timer.
 *
 * Not modelled: worker threads and the TLS cache (a bucket exists as soon as its first request is
 * seen), request matching and bucket_id_builder (the caller passes the bucket's pairs), deny
 * responses, preview matchers, the `reuse_last_assignment` expired behaviour, gRPC retries and
 * timeouts of Envoy's async client.
 */
import { performance } from 'node:perf_hooks';
import * as grpc from '@grpc/grpc-js';
import {
  RateLimitQuotaServiceClient,
  type RateLimitQuotaResponse,
  type RateLimitQuotaResponse_BucketAction,
  type RateLimitQuotaUsageReports,
} from '../../generated/envoy/service/rate_limit_quota/v3/rlqs';
import { RateLimitStrategy_BlanketRule, type RateLimitStrategy } from '../../generated/envoy/type/v3/ratelimit_strategy';
import type { TokenBucket as TokenBucketProto } from '../../generated/envoy/type/v3/token_bucket';

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
  /** For an assignment: its time to live in whole seconds; for a fallback: the fallback's. */
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
  readonly code: grpc.status;
  readonly details: string;
}

export interface EnvoyQuotaClientOptions {
  /** The service's gRPC address (host:port). */
  address: string;
  domain: string;
  /** RateLimitQuotaFilterConfig.bucket_matchers' reporting_interval (Envoy requires ≥ 100 ms). */
  reportingIntervalMs: number;
  /** no_assignment_behavior's blanket rule; Envoy allows all when it is not set. */
  noAssignmentBehavior?: Blanket;
  /**
   * expired_assignment_behavior: `fallback` (fallback_rate_limit) applies for `timeoutSeconds`
   * (expired_assignment_behavior_timeout, whole seconds, 0 when unset) after an assignment
   * expires. Without it, an expired assignment goes back to the no-assignment behaviour.
   */
  expiredAssignmentBehavior?: { fallback: RateLimitStrategy; timeoutSeconds: number };
  credentials?: grpc.ChannelCredentials;
}

interface Cached {
  readonly bucket: Readonly<Record<string, string>>;
  readonly key: string;
  /** Unreported usage (reset by each report). */
  pendingAllowed: number;
  pendingDenied: number;
  lastReportMs: number;
  allowed: number;
  denied: number;
  /** Envoy's cached_action: undefined = the default (no-assignment) action. */
  action: { readonly source: 'assignment' | 'fallback'; readonly message: RateLimitQuotaResponse_BucketAction; readonly sinceMs: number; readonly ttlSeconds: number } | undefined;
  limiter: EnvoyTokenBucket | undefined;
  timer: NodeJS.Timeout | undefined;
  createdMs: number;
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

/** tokens_per_fill().value(): an unset wrapper reads 0. */
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
export const bucketKey = (bucket: Readonly<Record<string, string>>): string =>
  JSON.stringify(Object.keys(bucket).sort().map((k) => [k, bucket[k]]));

export class EnvoyQuotaClient {
  /** Every report sent, in order. */
  readonly reports: SentReport[] = [];
  /** Every bucket action received, in order (ignored ones included). */
  readonly actions: ReceivedAction[] = [];
  /** Every stream that ended, with its status. */
  readonly streamEnds: StreamEnd[] = [];
  /** What Envoy would log at error level (ignored actions, dropped reports). */
  readonly errors: string[] = [];

  private readonly client: RateLimitQuotaServiceClient;
  private readonly buckets = new Map<string, Cached>();
  private readonly noAssignment: Blanket;
  private call: grpc.ClientDuplexStream<RateLimitQuotaUsageReports, RateLimitQuotaResponse> | undefined;
  private streamNumber = 0;
  private reportTimer: NodeJS.Timeout | undefined;
  private started = false;
  private closed = false;

  constructor(readonly opts: EnvoyQuotaClientOptions) {
    this.client = new RateLimitQuotaServiceClient(opts.address, opts.credentials ?? grpc.credentials.createInsecure());
    this.noAssignment = opts.noAssignmentBehavior ?? 'allow-all';
  }

  /** The client's monotonic clock, in ms (the clock of every timestamp it records). */
  now(): number {
    return performance.now();
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
    const nowS = this.now() / 1000;
    return {
      bucket: b.bucket,
      assignment:
        b.action === undefined
          ? { source: 'no-assignment', strategy: { kind: this.noAssignment }, sinceMs: b.createdMs }
          : {
              source: b.action.source,
              strategy: viewOf(b.action.message.quotaAssignmentAction?.rateLimitStrategy),
              ttlSeconds: b.action.ttlSeconds,
              sinceMs: b.action.sinceMs,
            },
      allowed: b.allowed,
      denied: b.denied,
      tokens: b.limiter?.remaining(nowS),
    };
  }

  /** The token bucket's refill rate (tokens per second) the bucket enforces now, if any. */
  tokensPerSecond(bucket: Readonly<Record<string, string>>): number | undefined {
    const s = this.bucket(bucket)?.assignment.strategy;
    return s?.kind === 'token-bucket' ? s.tokensPerSecond : undefined;
  }

  /** Stops reporting, resets the stream (as Envoy's client does when it goes away), ends the channel. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.reportTimer);
    this.reportTimer = undefined;
    for (const b of this.buckets.values()) clearTimeout(b.timer);
    this.buckets.clear();
    const call = this.call;
    this.call = undefined;
    call?.cancel();
    this.client.close();
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
      this.armReportTimer(this.now());
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

  /**
   * Envoy's timer is re-armed for the interval after each tick; libevent never runs it early, so
   * a Node timer that fires a little early (it can, by a millisecond) waits out the rest.
   */
  private armReportTimer(fromMs: number): void {
    const due = fromMs + this.opts.reportingIntervalMs;
    const wait = (): void => {
      const left = due - this.now();
      this.reportTimer = setTimeout(() => {
        if (this.closed) return;
        if (this.now() < due) return wait();
        this.onReportTimer();
        this.armReportTimer(this.now());
      }, Math.max(0, Math.ceil(left)));
    };
    wait();
  }

  private onReportTimer(): void {
    const now = this.now();
    const message: RateLimitQuotaUsageReports = { domain: this.opts.domain, bucketQuotaUsages: [...this.buckets.values()].map((b) => this.usageOf(b, now)) };
    if (this.call === undefined) this.startStream();
    this.send(message, 'periodic');
  }

  private startStream(): void {
    const call = this.client.streamRateLimitQuotas();
    const stream = ++this.streamNumber;
    this.call = call;
    call.on('data', (r: RateLimitQuotaResponse) => {
      if (this.call === call) this.onResponse(r, stream);
    });
    call.on('status', (s: grpc.StatusObject) => {
      this.streamEnds.push({ atMs: this.now(), stream, code: s.code, details: s.details });
      if (this.call === call) this.call = undefined;
    });
    call.on('error', () => undefined); // the status event carries it
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
        clearTimeout(cached.timer);
        this.buckets.delete(key);
        continue;
      }
      // A new cached bucket: timers and the old action are not carried over.
      clearTimeout(cached.timer);
      const ttlSeconds = Number(action.quotaAssignmentAction?.assignmentTimeToLive?.seconds ?? 0n);
      cached.action = { source: 'assignment', message: action, sinceMs: now, ttlSeconds };
      cached.limiter = limiter;
      cached.timer = setTimeout(() => this.onAssignmentExpired(cached), ttlSeconds * 1000);
    }
  }

  /** shouldReplaceTokenBucket / createTokenBucketFromAction. */
  private limiterFor(cached: Cached, tb: TokenBucketProto, now: number): EnvoyTokenBucket {
    const old = cached.action?.message.quotaAssignmentAction?.rateLimitStrategy?.tokenBucket;
    if (old !== undefined && cached.limiter !== undefined && sameTokenBucket(tb, old)) return cached.limiter;
    const nowS = now / 1000;
    const existing = cached.limiter;
    const initial =
      existing === undefined ? tb.maxTokens : existing.maxTokens > 0 ? Math.trunc(tb.maxTokens * (existing.remaining(nowS) / existing.maxTokens)) : 0;
    return new EnvoyTokenBucket(tb.maxTokens, fillRateOf(tb), initial, nowS);
  }

  private onAssignmentExpired(cached: Cached): void {
    if (this.closed || this.buckets.get(cached.key) !== cached) return;
    const now = this.now();
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
    cached.timer = setTimeout(() => {
      if (this.closed || this.buckets.get(cached.key) !== cached || cached.action?.message !== message) return;
      cached.action = undefined;
      cached.limiter = undefined;
      cached.timer = undefined;
    }, behaviour.timeoutSeconds * 1000);
  }
}
