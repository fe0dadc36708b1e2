/**
 * The Rate Limit Quota Service (RLQS): each Envoy reports its usage per bucket over one stream,
 * and gets back an assignment it enforces locally until the assignment's time to live runs out.
 *
 * - A bucket (BucketId pairs) is placed on the domain's descriptor tree (config
 *   `bucketDescriptor`) and limited by the rule found there. Unlimited, shadow-mode and
 *   whitelisted rules allow all; `requests_per_unit: 0` denies all; a bucket that no descriptor
 *   takes gets the configured default (allow all with a short time to live, by default).
 * - A rule's limit is divided among the streams that report the bucket, in proportion to their
 *   demand with a floor each (shares.ts), through the DemandStore, so replicas sharing one store
 *   divide one limit. The shares add up to the limit; a share goes out as a token bucket.
 * - A bucket's first report is answered at once. Every report re-assigns its buckets: a changed
 *   assignment is sent, an unchanged one again when half its time to live has passed. A stream
 *   that ends releases its shares; one that stops reporting loses them when its demand expires.
 * - When the config changes, every bucket is assigned again; a bucket whose rule is gone is
 *   abandoned (Envoy forgets it; its next request subscribes it again).
 */
import { randomUUID } from 'node:crypto';
import type { Clock } from '../core/clock';
import { unitToDivider } from '../core/rls';
import type { RateLimitConfig } from '../config/types';
import type { RateLimitRule } from '../core/rule';
import type { Counter, Gauge, StatsStore } from '../stats/store';
import type { DemandStore } from './demand';
import { divide, NOT_MEASURED, tokenBucketFor } from './shares';
import { QuotaStreamError, type BucketAction, type BucketPairs, type QuotaStrategy, type UsageReports } from './types';

export interface QuotaServiceOptions {
  /** The current config (undefined before the first one loads: every bucket is unmatched). */
  config: () => RateLimitConfig | undefined;
  demand: DemandStore;
  clock: Clock;
  /** What a bucket that no descriptor takes gets. */
  unmatched: { strategy: 'allow-all' | 'deny-all'; ttlSeconds: number };
  /** Most buckets one stream may report (a flood of new buckets ends the stream). */
  maxBucketsPerStream: number;
  /**
   * `ratelimit.rlqs.{streams,buckets}` (gauges), `.{reports,assignments,abandons,stream_errors}`,
   * and per rule `ratelimit.service.rate_limit.<key>.rlqs_{allowed,denied}` (what Envoy reported).
   */
  stats?: StatsStore;
}

interface QuotaStats {
  readonly streams: Gauge;
  readonly buckets: Gauge;
  readonly reports: Counter;
  readonly assignments: Counter;
  readonly abandons: Counter;
  readonly streamErrors: Counter;
}

/** Stream ids must differ across replicas that share a demand store (pids may collide across hosts). */
const REPLICA = randomUUID().slice(0, 8);
/** Reports closer together than this are taken as this (whole-second reports from Envoy). */
const MIN_INTERVAL_S = 1;
/** Weight of the newest report in a bucket's demand and interval (the rest is history). */
const NEWEST = 0.5;

interface TrackedBucket {
  readonly key: string;
  readonly pairs: BucketPairs;
  /** Requests per second (allowed + denied), smoothed; NOT_MEASURED before a report with a rate. */
  demand: number;
  /** Reported since the bucket was last assigned: counted on its rule's stats then. */
  allowedSinceAssign: number;
  deniedSinceAssign: number;
  /** The streams (of all replicas) that shared the bucket at its last division, as one text. */
  peers: string | undefined;
  /** Seconds between reports, smoothed. */
  intervalS: number;
  /** Whether a rule (or a whitelisting descriptor) took the bucket when last assigned. */
  matched: boolean;
  sentStrategy: string | undefined;
  sentAtMs: number;
  sentTtlS: number;
}

export class QuotaService {
  private readonly streams = new Set<QuotaStream>();
  private nextId = 0;
  readonly stats: QuotaStats | undefined;

  constructor(readonly opts: QuotaServiceOptions) {
    const st = opts.stats;
    this.stats =
      st === undefined
        ? undefined
        : {
            streams: st.gauge('ratelimit.rlqs.streams'),
            buckets: st.gauge('ratelimit.rlqs.buckets'),
            reports: st.counter('ratelimit.rlqs.reports'),
            assignments: st.counter('ratelimit.rlqs.assignments'),
            abandons: st.counter('ratelimit.rlqs.abandons'),
            streamErrors: st.counter('ratelimit.rlqs.stream_errors'),
          };
  }

  /** A new stream; `send` delivers its bucket actions (one response per call). */
  open(send: (actions: BucketAction[]) => void): QuotaStream {
    const s = new QuotaStream(this, `${REPLICA}.${++this.nextId}`, send, () => {
      this.streams.delete(s);
      this.stats?.streams.set(this.streams.size);
    });
    this.streams.add(s);
    this.stats?.streams.set(this.streams.size);
    return s;
  }

  /** Assigns `scopedKey` again on this replica's streams other than `except` (its sharers changed). */
  redivide(scopedKey: string, except: QuotaStream): void {
    for (const s of this.streams) if (s !== except) void s.reassignBucket(scopedKey);
  }

  /** The buckets of all streams changed in number. */
  bucketsChanged(): void {
    if (this.stats === undefined) return;
    let n = 0;
    for (const s of this.streams) n += s.bucketCount;
    this.stats.buckets.set(n);
  }

  /** `/debug/rlqs`: every live stream, its domain and buckets, and what each was last assigned. */
  describe(): string {
    if (this.streams.size === 0) return 'no RLQS stream\n';
    let out = '';
    for (const s of this.streams) out += s.describe();
    return out;
  }

  /** `/debug/explain` for a bucket: where it is placed, its rule, and the streams that report it here. */
  explainBucket(domain: string, pairs: BucketPairs): string {
    const config = this.opts.config();
    if (config === undefined) return 'no rate limit configuration loaded\n';
    const descriptor = config.bucketDescriptor(domain, pairs);
    let out = `bucket ${bucketKey(pairs)} in domain '${domain}'\n`;
    if (descriptor === undefined) {
      const u = this.opts.unmatched;
      return out + `  no descriptor takes it: ${u.strategy} for ${u.ttlSeconds} s (RLQS_UNMATCHED_ACTION, RLQS_UNMATCHED_TTL)\n`;
    }
    out += `  descriptor: ${descriptor.entries.map((e) => `${e.key}=${e.value}`).join(', ')}\n`;
    const rule = config.getLimit(domain, descriptor);
    if (rule === undefined) out += '  no rate_limit there (whitelisted): allow all\n';
    else if (rule.unlimited) out += `  rule ${rule.fullKey}: unlimited: allow all\n`;
    else if (rule.shadowMode) out += `  rule ${rule.fullKey}: shadow mode: allow all\n`;
    else if (rule.limit.requestsPerUnit === 0) out += `  rule ${rule.fullKey}: 0 per unit: deny all\n`;
    else out += `  rule ${rule.fullKey}: ${rule.limit.requestsPerUnit} per ${unitToDivider(rule.limit.unit)} s, divided among the streams that report it\n`;
    const key = bucketKey(pairs);
    for (const s of this.streams) out += s.describeBucket(domain, key);
    return out;
  }

  get streamCount(): number {
    return this.streams.size;
  }

  /** The config changed: every bucket of every stream is assigned again (or abandoned). */
  async configChanged(): Promise<void> {
    await Promise.all([...this.streams].map((s) => s.reassignAll()));
  }
}

export class QuotaStream {
  private domain = '';
  private readonly buckets = new Map<string, TrackedBucket>();
  private closed = false;

  constructor(
    private readonly service: QuotaService,
    readonly id: string,
    private readonly send: (actions: BucketAction[]) => void,
    private readonly onClose: () => void,
  ) {}

  get bucketCount(): number {
    return this.buckets.size;
  }

  describe(): string {
    let out = `stream ${this.id} domain '${this.domain}': ${this.buckets.size} buckets\n`;
    for (const b of this.buckets.values()) out += `  ${bucketLine(b)}\n`;
    return out;
  }

  describeBucket(domain: string, key: string): string {
    const b = domain === this.domain ? this.buckets.get(key) : undefined;
    return b === undefined ? '' : `  stream ${this.id}: ${bucketLine(b)}\n`;
  }

  /** One message of the stream. Throws QuotaStreamError for a report the stream must end on. */
  async report(r: UsageReports): Promise<void> {
    if (this.closed) return;
    this.checkDomain(r.domain);
    this.service.stats?.reports.inc();
    // Envoy keeps reporting (the domain alone) when it has no bucket left, e.g. after abandons.
    if (r.usages.length === 0) return;
    const now = this.service.opts.clock.nowMs();
    const touched: TrackedBucket[] = [];
    for (const u of r.usages) {
      if (u.bucket.size === 0) throw new QuotaStreamError(3, 'bucket_id must hold at least one key/value pair');
      for (const [k, v] of u.bucket) if (k === '' || v === '') throw new QuotaStreamError(3, `bucket_id keys and values must not be empty (got '${k}': '${v}')`);
      const key = bucketKey(u.bucket);
      if (!(u.elapsedSeconds >= 0) || !Number.isFinite(u.elapsedSeconds)) {
        throw new QuotaStreamError(3, `bucket ${key}: time_elapsed must be a duration of zero or more, got ${u.elapsedSeconds} s`);
      }
      let b = this.buckets.get(key);
      if (b === undefined) {
        if (this.buckets.size >= this.service.opts.maxBucketsPerStream) {
          throw new QuotaStreamError(8, `this stream reports more than ${this.service.opts.maxBucketsPerStream} buckets (RLQS_MAX_BUCKETS_PER_STREAM)`);
        }
        b = { key, pairs: u.bucket, demand: NOT_MEASURED, allowedSinceAssign: 0, deniedSinceAssign: 0, peers: undefined, intervalS: MIN_INTERVAL_S, matched: false, sentStrategy: undefined, sentAtMs: 0, sentTtlS: 0 };
        this.buckets.set(key, b);
        this.service.bucketsChanged();
      }
      b.allowedSinceAssign += u.allowed;
      b.deniedSinceAssign += u.denied;
      // Envoy's first report of a bucket has time_elapsed 0: a subscription, no rate yet.
      if (u.elapsedSeconds > 0) {
        const interval = Math.max(MIN_INTERVAL_S, u.elapsedSeconds);
        const rate = (u.allowed + u.denied) / interval;
        b.demand = b.demand === NOT_MEASURED ? rate : NEWEST * rate + (1 - NEWEST) * b.demand;
        b.intervalS = NEWEST * interval + (1 - NEWEST) * b.intervalS;
      }
      if (!touched.includes(b)) touched.push(b);
    }
    const actions: BucketAction[] = [];
    for (const b of touched) {
      const a = await this.assign(b, now, false);
      if (a !== undefined) actions.push(a);
    }
    if (actions.length > 0 && !this.closed) this.send(actions);
  }

  /** The stream ended: its shares go back to the others. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    const left = [...this.buckets.values()].map((b) => this.scoped(b.key));
    for (const key of left) this.service.opts.demand.release(key, this.id);
    this.buckets.clear();
    this.onClose();
    this.service.bucketsChanged();
    // Its shares go to the streams that remain, now.
    for (const key of left) this.service.redivide(key, this);
  }

  /** Assigns one bucket again (another stream joined or left it), sending the change if any. */
  async reassignBucket(scopedKey: string): Promise<void> {
    const prefix = `${this.domain}|`;
    if (this.closed || !scopedKey.startsWith(prefix)) return;
    const b = this.buckets.get(scopedKey.slice(prefix.length));
    if (b === undefined) return;
    const a = await this.assign(b, this.service.opts.clock.nowMs(), false);
    if (a !== undefined && !this.closed) this.send([a]);
  }

  /** After a config change: assign every bucket again, abandon those whose rule is gone. */
  async reassignAll(): Promise<void> {
    if (this.closed || this.buckets.size === 0) return;
    const now = this.service.opts.clock.nowMs();
    const actions: BucketAction[] = [];
    for (const b of [...this.buckets.values()]) {
      const a = await this.assign(b, now, true);
      if (a !== undefined) actions.push(a);
    }
    if (actions.length > 0 && !this.closed) this.send(actions);
  }

  /** What Envoy reported for a bucket since it was last assigned, on its rule's `rlqs_allowed` / `rlqs_denied`. */
  private countUsage(b: TrackedBucket, rule: RateLimitRule | undefined): void {
    const stats = this.service.opts.stats;
    if (stats !== undefined && rule !== undefined) {
      const prefix = `ratelimit.service.rate_limit.${rule.stats.key}`;
      if (b.allowedSinceAssign > 0) stats.counter(`${prefix}.rlqs_allowed`).inc(b.allowedSinceAssign);
      if (b.deniedSinceAssign > 0) stats.counter(`${prefix}.rlqs_denied`).inc(b.deniedSinceAssign);
    }
    b.allowedSinceAssign = 0;
    b.deniedSinceAssign = 0;
  }

  private checkDomain(domain: string): void {
    if (this.domain === '') {
      if (domain === '') throw new QuotaStreamError(3, 'the first usage report of a stream must name its domain');
      this.domain = domain;
    } else if (domain !== '' && domain !== this.domain) {
      throw new QuotaStreamError(3, `a stream reports one domain: got '${domain}' after '${this.domain}' (open a new stream for another domain)`);
    }
  }

  /** The bucket's key in the demand store: all replicas' streams of one domain share it. */
  private scoped(key: string): string {
    return `${this.domain}|${key}`;
  }

  /**
   * The action for a bucket now, or undefined when the assignment Envoy holds is still good: the
   * same strategy, sent less than half its time to live ago. `configChange`: a bucket whose rule
   * is gone is abandoned.
   */
  private async assign(b: TrackedBucket, now: number, configChange: boolean): Promise<BucketAction | undefined> {
    const o = this.service.opts;
    const config = o.config();
    const descriptor = config?.bucketDescriptor(this.domain, b.pairs);
    const rule = descriptor !== undefined ? config!.getLimit(this.domain, descriptor) : undefined;
    const matched = descriptor !== undefined;
    this.countUsage(b, rule);
    if (configChange && b.matched && !matched) {
      this.buckets.delete(b.key);
      o.demand.release(this.scoped(b.key), this.id);
      this.service.stats?.abandons.inc();
      this.service.bucketsChanged();
      return { bucket: b.pairs, abandon: true };
    }
    b.matched = matched;
    const ttlS = matched ? Math.max(2, Math.ceil(3 * b.intervalS)) : o.unmatched.ttlSeconds;
    let strategy: QuotaStrategy;
    if (!matched) strategy = { kind: o.unmatched.strategy };
    else if (rule === undefined || rule.unlimited || rule.shadowMode) strategy = { kind: 'allow-all' };
    else if (rule.limit.requestsPerUnit === 0) strategy = { kind: 'deny-all' };
    else {
      const unitS = unitToDivider(rule.limit.unit);
      const live = await o.demand.report(this.scoped(b.key), this.id, b.demand, now, now + Math.ceil(2 * b.intervalS + 1) * 1000);
      const streams = [...live.keys()].sort();
      const peers = streams.join(' ');
      if (peers !== b.peers) {
        b.peers = peers;
        // Streams joined or left: this replica's other streams of the bucket are divided again
        // now, not at their next report, so the shares do not add up to more than the limit.
        if (!configChange) this.service.redivide(this.scoped(b.key), this);
      }
      const shares = divide(rule.limit.requestsPerUnit, streams.map((s) => live.get(s)!));
      const share = shares[streams.indexOf(this.id)] ?? 0;
      const tb = unitS > 0 ? tokenBucketFor(share, unitS, b.intervalS) : undefined;
      strategy = tb === undefined ? { kind: 'deny-all' } : { kind: 'token-bucket', ...tb };
    }
    const text = JSON.stringify(strategy);
    if (text === b.sentStrategy && b.sentTtlS === ttlS && now - b.sentAtMs < (ttlS * 1000) / 2) return undefined;
    b.sentStrategy = text;
    b.sentAtMs = now;
    b.sentTtlS = ttlS;
    this.service.stats?.assignments.inc();
    return { bucket: b.pairs, assign: { strategy, ttlSeconds: ttlS } };
  }
}

/** A bucket's pairs in one canonical text (sorted by key): the same bucket whatever the map order. */
export function bucketKey(pairs: BucketPairs): string {
  return JSON.stringify([...pairs.keys()].sort().map((k) => [k, pairs.get(k)]));
}

function bucketLine(b: TrackedBucket): string {
  const demand = b.demand === NOT_MEASURED ? 'not measured yet' : `${b.demand.toFixed(2)}/s`;
  return `${b.key}: demand ${demand}, reports every ${b.intervalS.toFixed(1)} s, assigned ${b.sentStrategy ?? 'nothing yet'} for ${b.sentTtlS} s`;
}
