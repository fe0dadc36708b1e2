/**
 * The one decision function shared by gRPC, /json and the runner (upstream
 * `service/ratelimit.go` + `DoLimit`): validate, match, build keys, consult the local over-limit
 * cache, increment in the counter store in one round trip, compute statuses, aggregate.
 */
import type { ConfigSnapshot } from '../config/types';
import type { RateLimitRule } from '../core/rule';
import type { Caller, CounterOp, CounterStore, IncrementContext } from '../core/store';
import { type Counter, RULE_STATS_PREFIX, sanitizeStatName, type StatsStore } from '../stats/store';
import type { Attributes, Span, Tracing } from '../telemetry/tracing';
import type { DenialRing, Transport } from '../telemetry/denials';
import type { Clock } from '../platform/clock';
import { CANDIDATE_KEY_SUFFIX, keyStem, secondsUntilReset, windowStart } from './cache-key';
import { algorithmStatus, mostRestrictive, tokenBucketKey } from './algorithms';
import type { LocalCache } from './local-cache';
import { counterStatus, localCacheOverLimitStatus, okStatus } from './status';
import { Code, type Descriptor, type DescriptorStatus, type Entry, type HeaderValue, InvalidRateLimitRequestError, type JsonObject, type JsonValue, type RateLimitRequest, type RateLimitResponse, ServiceError, UNIT_NAMES, unitToDivider } from '../core/rls';
import { StoreError } from '../core/store';

/** Flags upstream re-reads from the environment at every config load; they travel with it. */
export interface ServiceFlags {
  readonly shadowMode: boolean;
  readonly quotaMode: boolean;
  readonly responseDynamicMetadata: boolean;
  readonly responseHeadersEnabled: boolean;
  readonly limitHeader: string;
  readonly remainingHeader: string;
  readonly resetHeader: string;
}

export interface RateLimitServiceOptions {
  store: CounterStore;
  snapshot: () => ConfigSnapshot<ServiceFlags> | undefined;
  stats: StatsStore;
  clock: Clock;
  nearLimitRatio: number;
  cacheKeyPrefix: string;
  localCache?: LocalCache | undefined;
  /**
   * BACKEND_FAILURE_MODE: what a store failure answers. `error` (upstream) fails the call;
   * `allow` answers OK, `deny` answers OVER_LIMIT for every limited descriptor. Both count.
   */
  failureMode?: 'error' | 'allow' | 'deny';
  /** REQUEST_MAX_*: requests beyond these are refused before any work. */
  limits?: RequestLimits;
  /** Tracing of the store round trip, under the caller's span (upstream's span names). */
  tracing?: Tracing;
  storeSpan?: StoreSpan;
  /** Told each descriptor answered OVER_LIMIT (/debug/denials); OK answers cost it nothing. */
  denials?: DenialRing | undefined;
}

/** The store round trip's span: upstream's name and attributes for that store. */
export interface StoreSpan {
  readonly name: string;
  attributes(ops: readonly CounterOp[]): Attributes;
}

export interface RequestLimits {
  maxDescriptors: number;
  maxEntries: number;
  maxEntryLength: number;
}

export const MAX_UINT32 = 4294967295;

const OVER_ELSEWHERE: IncrementContext = { overLimitElsewhere: true };
const NOT_OVER_ELSEWHERE: IncrementContext = { overLimitElsewhere: false };

/**
 * How a caller takes one decision: `decided` or `failed` is called once. `ctx` is the caller's
 * handle of the call, so one answer object serves every call instead of closures per call.
 */
export interface DecisionAnswer<C> {
  decided(ctx: C, response: RateLimitResponse): void;
  failed(ctx: C, err: unknown): void;
}

interface PromiseSettlers {
  resolve(response: RateLimitResponse): void;
  reject(err: unknown): void;
}

const SETTLE_PROMISE: DecisionAnswer<PromiseSettlers> = {
  decided: (p, response) => p.resolve(response),
  failed: (p, err) => p.reject(err),
};

export class RateLimitService {
  private readonly store: CounterStore;
  private readonly stats: StatsStore;
  private readonly serviceError: Counter;
  private readonly storeError: Counter;
  private readonly globalShadowMode: Counter;
  private readonly failureAllowed: Counter;
  private readonly failureDenied: Counter;

  constructor(private readonly opts: RateLimitServiceOptions) {
    this.store = opts.store;
    this.stats = opts.stats;
    this.serviceError = this.stats.counter('ratelimit.service.call.should_rate_limit.service_error');
    this.storeError = this.stats.counter('ratelimit.service.call.should_rate_limit.redis_error');
    this.globalShadowMode = this.stats.counter('ratelimit.service.global_shadow_mode');
    this.failureAllowed = this.stats.counter('ratelimit.service.call.should_rate_limit.failure_mode_allow');
    this.failureDenied = this.stats.counter('ratelimit.service.call.should_rate_limit.failure_mode_deny');
  }

  /**
   * Decides one request as a promise: for in-process callers (the runner), which do not count the
   * microtask. Rejects with ServiceError or StoreError, each counted as upstream does. The
   * arguments are decideInto's.
   */
  shouldRateLimit(request: RateLimitRequest, span?: Span, caller?: Caller, transport: Transport = ''): Promise<RateLimitResponse> {
    return new Promise((resolve, reject) => this.decideInto(request, span, caller, transport, { resolve, reject }, SETTLE_PROMISE));
  }

  /**
   * Decides one request and hands the outcome to `answer`: the one place that tells a decision
   * made now from one a remote store makes later. A store that counts in process answers in this
   * turn (no promise, no microtask per call); a remote one later. Every failure, thrown at once
   * or rejected later, is counted as upstream does and goes to `answer.failed`. `span` (the
   * caller's) ends when the outcome is known. `caller`: the client it comes from, as its transport
   * knows it; `transport`: the listener it came through ('' in process), as the denials page tells it.
   */
  decideInto<C>(
    request: RateLimitRequest,
    span: Span | undefined,
    caller: Caller | undefined,
    transport: Transport,
    ctx: C,
    answer: DecisionAnswer<C>,
  ): void {
    let outcome: RateLimitResponse | Promise<RateLimitResponse>;
    try {
      outcome = this.decide(request, span, caller, transport);
    } catch (err) {
      this.failed(err, span, ctx, answer);
      return;
    }
    if (outcome instanceof Promise) {
      outcome.then(
        (response) => {
          span?.end();
          answer.decided(ctx, response);
        },
        (err: unknown) => this.failed(err, span, ctx, answer),
      );
    } else {
      span?.end();
      answer.decided(ctx, outcome);
    }
  }

  private failed<C>(err: unknown, span: Span | undefined, ctx: C, answer: DecisionAnswer<C>): void {
    if (err instanceof StoreError) this.storeError.inc();
    else this.serviceError.inc();
    span?.end();
    answer.failed(ctx, err);
  }

  private domainNotFound(domain: string): Counter {
    return this.stats.dynamicCounter(
      RULE_STATS_PREFIX + sanitizeStatName(domain) + '.domain_not_found',
      RULE_STATS_PREFIX + 'overflow.domain_not_found',
    );
  }

  private decide(
    request: RateLimitRequest,
    span: Span | undefined,
    caller: Caller | undefined,
    transport: Transport,
  ): RateLimitResponse | Promise<RateLimitResponse> {
    if (request.domain === '') throw new ServiceError('rate limit domain must not be empty');
    const descriptors = request.descriptors;
    const n = descriptors.length;
    if (n === 0) throw new ServiceError('rate limit descriptor list must not be empty');
    const snapshot = this.opts.snapshot();
    if (snapshot === undefined) throw new ServiceError('no rate limit configuration loaded');
    if (this.opts.limits !== undefined) checkLimits(request, this.opts.limits);
    const { config, flags } = snapshot;
    const domain = request.domain;
    // Upstream counts an unknown domain once per descriptor looked up.
    if (!config.hasDomain(domain)) this.domainNotFound(domain).inc(n);

    // Match every descriptor; unlimited and replaced rules leave no limit to count.
    const rules = new Array<RateLimitRule | undefined>(n);
    let unlimited: boolean[] | undefined;
    let replacing: Set<string> | undefined;
    for (let i = 0; i < n; i++) {
      let rule = config.getLimit(domain, descriptors[i]!);
      if (rule !== undefined) {
        if (rule.replaces.length > 0) {
          replacing ??= new Set();
          for (const name of rule.replaces) replacing.add(name);
        }
        if (rule.unlimited) {
          (unlimited ??= new Array<boolean>(n).fill(false))[i] = true;
          rule = undefined;
        } else if (rule.isOverride && unitToDivider(rule.limit.unit) === 0) {
          // Upstream crashes here (an unrecovered panic); we answer an error instead.
          throw new ServiceError(
            `invalid rate limit unit '${UNIT_NAMES[rule.limit.unit] ?? rule.limit.unit}' in the limit override of descriptor ${i}`,
          );
        }
      }
      rules[i] = rule;
    }
    if (replacing !== undefined) {
      for (let i = 0; i < n; i++) {
        const r = rules[i];
        if (r !== undefined && r.limit.name !== '' && replacing.has(r.limit.name)) rules[i] = undefined;
      }
    }

    const statuses = this.doLimit(request, rules, span, caller);
    return statuses instanceof Promise
      ? statuses.then((st) => this.aggregate(request, rules, unlimited, st, flags, caller, transport))
      : this.aggregate(request, rules, unlimited, statuses, flags, caller, transport);
  }

  /**
   * Keys, local cache, one store round trip, statuses (upstream DoLimit + base limiter). Every
   * limit of every matched descriptor (one, or more with `rate_limits:`) takes a slot: the index
   * of its op in the store batch, or its status when the local cache already answered.
   */
  private doLimit(
    request: RateLimitRequest,
    rules: Array<RateLimitRule | undefined>,
    span: Span | undefined,
    caller: Caller | undefined,
  ): DescriptorStatus[] | Promise<DescriptorStatus[]> {
    const { clock, cacheKeyPrefix } = this.opts;
    const descriptors = request.descriptors;
    const n = descriptors.length;
    const nowMs = clock.nowMs();
    const nowS = Math.floor(nowMs / 1000);
    const defaultHits = request.hitsAddend > 1 ? request.hitsAddend : 1;
    const statuses = new Array<DescriptorStatus>(n);
    const ops: CounterOp[] = [];
    const slots: Array<number | DescriptorStatus> = [];
    // Descriptor i's limits are slots[firstSlot[i]] .. slots[firstSlot[i + 1] - 1].
    const firstSlot = new Array<number>(n + 1);
    // PLANNED_* bits of every planLimit.
    let planned = 0;

    for (let i = 0; i < n; i++) {
      firstSlot[i] = slots.length;
      const rule = rules[i];
      if (rule === undefined) {
        statuses[i] = okStatus();
        continue;
      }
      const d = descriptors[i]!;
      const hits = d.hitsAddend !== undefined ? d.hitsAddend : defaultHits;
      const stem = keyStem(cacheKeyPrefix, request.domain, d, rule);
      planned |= this.planLimit(rule, stem, d.entries, hits, nowMs, nowS, ops, slots);
      const more = rule.more;
      if (more !== undefined) {
        for (let k = 0; k < more.length; k++) planned |= this.planLimit(more[k]!, stem, d.entries, hits, nowMs, nowS, ops, slots);
      }
    }
    firstSlot[n] = slots.length;
    // A candidate's op is only added beside its enforced op: it never makes a round trip of its own.
    const withCandidates = (planned & PLANNED_CANDIDATE) !== 0;
    if (ops.length === 0) return this.resolve(statuses, slots, firstSlot, ops, undefined, nowMs, false);
    const localCacheHit = (planned & PLANNED_LOCAL) !== 0;

    const context = caller === undefined
      ? localCacheHit ? OVER_ELSEWHERE : NOT_OVER_ELSEWHERE
      : localCacheHit ? caller.overLimitElsewhere : caller.notOverLimitElsewhere;
    const sync = this.store.incrementSync;
    if (sync !== undefined) {
      return this.resolve(statuses, slots, firstSlot, ops, sync.call(this.store, ops, nowMs, context), nowMs, withCandidates);
    }
    const { tracing, storeSpan } = this.opts;
    const child = span !== undefined && tracing !== undefined && storeSpan !== undefined
      ? tracing.startChildSpan(span, storeSpan.name, storeSpan.attributes(ops))
      : undefined;
    return this.store.increment(ops, nowMs, context).then(
      (counts) => {
        child?.end();
        return this.resolve(statuses, slots, firstSlot, ops, counts, nowMs, withCandidates);
      },
      (err: unknown) => {
        child?.end();
        const mode = this.opts.failureMode ?? 'error';
        if (mode === 'error' || !(err instanceof StoreError)) {
          if (withCandidates) countCandidates(ops, undefined, 0);
          throw err;
        }
        // The store failed, but the operator chose an answer over an error: count both.
        this.storeError.inc();
        (mode === 'allow' ? this.failureAllowed : this.failureDenied).inc();
        return this.resolve(statuses, slots, firstSlot, ops, mode, nowMs, withCandidates);
      },
    );
  }

  /**
   * Adds one limit's slot: a status when the local cache knows its window is over the limit,
   * else an op for the store. Counts its hits. Then its candidate's op, if it has one (an op
   * without a slot). Returns PLANNED_* bits (0: an op, no candidate).
   */
  private planLimit(
    r: RateLimitRule,
    stem: string,
    entries: readonly Entry[],
    hits: number,
    nowMs: number,
    nowS: number,
    ops: CounterOp[],
    slots: Array<number | DescriptorStatus>,
  ): number {
    const div = unitToDivider(r.limit.unit);
    const suffix = r.keySuffix ?? '';
    r.stats.totalHits.inc(hits);
    slots.push(ops.length);
    let op: CounterOp;
    if (r.algorithm === 'token_bucket') {
      op = { key: tokenBucketKey(stem, suffix), hits, windowSeconds: div, rule: r, prevKey: undefined, stem, entries };
      ops.push(op);
    } else {
      const ws = windowStart(nowS, div);
      const key = suffix === '' ? stem + ws : stem + ws + suffix;
      if (r.algorithm === 'sliding_window') {
        op = { key, hits, windowSeconds: div, rule: r, prevKey: stem + (ws - div) + suffix, stem, entries };
        ops.push(op);
      } else {
        const localCache = this.opts.localCache;
        if (localCache !== undefined && localCache.has(key, nowMs)) {
          slots[slots.length - 1] = localCacheOverLimitStatus(r, hits, secondsUntilReset(nowS, div));
          r.watch?.overInCache(stem, entries, hits, nowS);
          // Its candidate is not counted either: it might reach a node this request does not.
          r.candidate?.watch?.uncounted?.(hits);
          return PLANNED_LOCAL;
        } else {
          op = { key, hits, windowSeconds: div, rule: r, prevKey: undefined, stem, entries };
          ops.push(op);
        }
      }
    }
    const c = r.candidate;
    if (c === undefined) return 0;
    ops.push(candidateOp(c, stem, entries, hits, nowS, op));
    return PLANNED_CANDIDATE;
  }

  /**
   * Each matched descriptor's status from its slots: the store's counts after the increment (the
   * base limiter, feeding the local cache), or BACKEND_FAILURE_MODE's answer when the store failed.
   * A descriptor with several limits reports the most restrictive.
   */
  private resolve(
    statuses: DescriptorStatus[],
    slots: ReadonlyArray<number | DescriptorStatus>,
    firstSlot: readonly number[],
    ops: readonly CounterOp[],
    counts: readonly number[] | 'allow' | 'deny' | undefined,
    nowMs: number,
    withCandidates: boolean,
  ): DescriptorStatus[] {
    const nowS = Math.floor(nowMs / 1000);
    if (withCandidates) countCandidates(ops, counts, nowS);
    for (let i = 0; i < statuses.length; i++) {
      const from = firstSlot[i]!;
      const to = firstSlot[i + 1]!;
      if (to === from) continue;
      if (to === from + 1) {
        statuses[i] = this.slotStatus(slots[from]!, ops, counts, nowMs, nowS);
        continue;
      }
      const each = new Array<DescriptorStatus>(to - from);
      for (let k = from; k < to; k++) each[k - from] = this.slotStatus(slots[k]!, ops, counts, nowMs, nowS);
      statuses[i] = mostRestrictive(each);
    }
    return statuses;
  }

  private slotStatus(
    slot: number | DescriptorStatus,
    ops: readonly CounterOp[],
    counts: readonly number[] | 'allow' | 'deny' | undefined,
    nowMs: number,
    nowS: number,
  ): DescriptorStatus {
    if (typeof slot !== 'number') return slot;
    const op = ops[slot]!;
    if (typeof counts === 'string') return failureStatus(op, counts, nowS);
    const after = counts![slot]!;
    const watch = op.rule.watch;
    if (watch !== undefined) watch.counted(op.stem!, op.entries!, op.hits, after, nowS);
    const { nearLimitRatio, localCache } = this.opts;
    if (op.rule.algorithm !== undefined) return algorithmStatus(op, after, nearLimitRatio, nowMs);
    const divider = op.windowSeconds;
    if (localCache !== undefined && after > op.rule.limit.requestsPerUnit) localCache.set(op.key, divider, nowMs);
    return counterStatus(op.rule, op.hits, after, nearLimitRatio, secondsUntilReset(nowS, divider));
  }

  private aggregate(
    request: RateLimitRequest,
    rules: Array<RateLimitRule | undefined>,
    unlimited: boolean[] | undefined,
    statuses: DescriptorStatus[],
    flags: ServiceFlags,
    caller: Caller | undefined,
    transport: Transport,
  ): RateLimitResponse {
    const n = statuses.length;
    let header: DescriptorStatus | undefined;
    let headerIdx = -1;
    let minRemaining = MAX_UINT32;
    let failedRateLimit = 0;
    let failedQuota = 0;
    let totalQuota = 0;
    let passed: number[] | undefined;
    const wantMetadata = flags.responseDynamicMetadata;

    for (let i = 0; i < n; i++) {
      const status = statuses[i]!;
      if (flags.responseHeadersEnabled && status.currentLimit !== undefined && status.limitRemaining < minRemaining) {
        header = status;
        headerIdx = i;
        minRemaining = status.limitRemaining;
      }
      if (unlimited !== undefined && unlimited[i]) {
        statuses[i] = { code: Code.OK, currentLimit: undefined, limitRemaining: MAX_UINT32, durationUntilReset: undefined };
        continue;
      }
      const rule = rules[i];
      const isQuota = flags.quotaMode || (rule !== undefined && rule.quotaMode);
      if (status.code === Code.OVER_LIMIT) {
        if (isQuota) {
          failedQuota++;
        } else {
          failedRateLimit++;
          header = status;
          headerIdx = i;
          minRemaining = 0;
        }
      } else if (wantMetadata) {
        (passed ??= []).push(i);
      }
      if (isQuota) totalQuota++;
    }

    let overallCode =
      failedRateLimit > 0 || (totalQuota > 0 && totalQuota === failedQuota) ? Code.OVER_LIMIT : Code.OK;

    let headers: HeaderValue[] = [];
    if (flags.responseHeadersEnabled && header !== undefined && header.currentLimit !== undefined) {
      const divider = unitToDivider(header.currentLimit.unit);
      const nowS = Math.floor(this.opts.clock.nowMs() / 1000);
      const hr = rules[headerIdx];
      // With an algorithm or several limits, the reset header is the status's own.
      const reset = hr !== undefined && (hr.algorithm !== undefined || hr.more !== undefined) && header.durationUntilReset !== undefined
        ? header.durationUntilReset
        : secondsUntilReset(nowS, divider);
      headers = [
        { key: flags.limitHeader, value: String(header.currentLimit.requestsPerUnit) },
        { key: flags.remainingHeader, value: String(header.limitRemaining) },
        { key: flags.resetHeader, value: String(reset) },
      ];
    }

    if (overallCode === Code.OVER_LIMIT && flags.shadowMode) {
      overallCode = Code.OK;
      this.globalShadowMode.inc();
    }
    const denials = this.opts.denials;
    if (denials !== undefined && failedRateLimit + failedQuota > 0) this.recordDenials(denials, request, rules, statuses, overallCode, caller, transport);

    return {
      overallCode,
      statuses,
      responseHeadersToAdd: headers,
      dynamicMetadata: wantMetadata ? dynamicMetadata(request, rules, passed) : undefined,
    };
  }

  /** Each descriptor answered OVER_LIMIT, into the denial ring (only requests with one get here). */
  private recordDenials(
    denials: DenialRing,
    request: RateLimitRequest,
    rules: Array<RateLimitRule | undefined>,
    statuses: DescriptorStatus[],
    overallCode: Code,
    caller: Caller | undefined,
    transport: Transport,
  ): void {
    const defaultHits = request.hitsAddend > 1 ? request.hitsAddend : 1;
    for (let i = 0; i < statuses.length; i++) {
      const status = statuses[i]!;
      if (status.code !== Code.OVER_LIMIT) continue;
      const d = request.descriptors[i]!;
      denials.record(request.domain, d, rules[i], status, d.hitsAddend !== undefined ? d.hitsAddend : defaultHits, overallCode, transport, caller);
    }
  }
}

/** planLimit's answer, bits: the local cache answered the limit; a candidate's op was added. */
const PLANNED_LOCAL = 1;
const PLANNED_CANDIDATE = 2;

/**
 * A candidate limit's op, beside the enforced op `follows`: the enforced key's form with the
 * candidate's window start, then CANDIDATE_KEY_SUFFIX.
 */
export function candidateOp(c: RateLimitRule, stem: string, entries: readonly Entry[], hits: number, nowS: number, follows: CounterOp): CounterOp {
  const div = unitToDivider(c.limit.unit);
  if (c.algorithm === 'token_bucket') {
    return { key: tokenBucketKey(stem, '') + CANDIDATE_KEY_SUFFIX, hits, windowSeconds: div, rule: c, prevKey: undefined, stem, entries, follows };
  }
  const ws = windowStart(nowS, div);
  const prevKey = c.algorithm === 'sliding_window' ? stem + (ws - div) + CANDIDATE_KEY_SUFFIX : undefined;
  return { key: stem + ws + CANDIDATE_KEY_SUFFIX, hits, windowSeconds: div, rule: c, prevKey, stem, entries, follows };
}

/** What the store answered for each candidate op, to its watch (never to a status). */
function countCandidates(ops: readonly CounterOp[], counts: readonly number[] | 'allow' | 'deny' | undefined, nowS: number): void {
  for (let k = 0; k < ops.length; k++) {
    const op = ops[k]!;
    if (op.follows === undefined) continue;
    const watch = op.rule.watch;
    if (watch === undefined) continue;
    const after = typeof counts === 'object' ? counts[k]! : -1;
    if (after < 0) watch.uncounted?.(op.hits);
    else watch.counted(op.stem!, op.entries!, op.hits, after, nowS);
  }
}

/** Refuses a request beyond REQUEST_MAX_* with a message naming the first offending field. */
function checkLimits(request: RateLimitRequest, limits: RequestLimits): void {
  const { maxDescriptors, maxEntries, maxEntryLength } = limits;
  if (request.domain.length > maxEntryLength) {
    throw new InvalidRateLimitRequestError(`domain is ${request.domain.length} characters long, more than ${maxEntryLength}`);
  }
  const descriptors = request.descriptors;
  if (descriptors.length > maxDescriptors) {
    throw new InvalidRateLimitRequestError(`${descriptors.length} descriptors, more than ${maxDescriptors}`);
  }
  for (let i = 0; i < descriptors.length; i++) {
    const entries = descriptors[i]!.entries;
    if (entries.length > maxEntries) throw new InvalidRateLimitRequestError(`descriptors[${i}]: ${entries.length} entries, more than ${maxEntries}`);
    for (let j = 0; j < entries.length; j++) {
      const e = entries[j]!;
      if (e.key.length > maxEntryLength || e.value.length > maxEntryLength) {
        const which = e.key.length > maxEntryLength ? 'key' : 'value';
        throw new InvalidRateLimitRequestError(`descriptors[${i}].entries[${j}].${which} is longer than ${maxEntryLength} characters`);
      }
    }
  }
}

/** The status of a descriptor whose count could not be read (BACKEND_FAILURE_MODE allow/deny). */
function failureStatus(op: CounterOp, mode: 'allow' | 'deny', nowS: number): DescriptorStatus {
  if (mode === 'allow' || op.rule.shadowMode) return okStatus();
  const divider = op.windowSeconds;
  return { code: Code.OVER_LIMIT, currentLimit: op.rule.limit, limitRemaining: 0, durationUntilReset: secondsUntilReset(nowS, divider) };
}

/** The `dynamic_metadata` Struct of upstream (Section 1.17). */
function dynamicMetadata(
  request: RateLimitRequest,
  rules: Array<RateLimitRule | undefined>,
  passed: number[] | undefined,
): JsonObject {
  const out: JsonObject = {
    domain: request.domain,
    descriptors: request.descriptors.map(descriptorMetadata),
  };
  if (request.hitsAddend !== 0) out['hitsAddend'] = request.hitsAddend;
  if (passed !== undefined) {
    const merged: JsonObject = {};
    for (const i of passed) {
      const md = rules[i]?.metadata;
      if (md !== undefined) mergeFirstWins(merged, md);
    }
    if (Object.keys(merged).length > 0) out['metadata'] = merged;
  }
  return out;
}

function descriptorMetadata(d: Descriptor): JsonValue {
  const o: JsonObject = { entries: d.entries.map((e) => e.key + '=' + e.value) };
  if (d.limit !== undefined) {
    o['limit'] = `requests_per_unit:${d.limit.requestsPerUnit} unit:${UNIT_NAMES[d.limit.unit] ?? d.limit.unit}`;
  }
  if (d.hitsAddend !== undefined) o['hitsAddend'] = d.hitsAddend;
  return o;
}

/** Deep merge where nested objects merge and, on a scalar conflict, the first value stays. */
function mergeFirstWins(into: JsonObject, from: JsonObject): void {
  for (const k of Object.keys(from)) {
    const v = from[k]!;
    const cur = into[k];
    if (cur === undefined) {
      into[k] = isObject(v) ? cloneObject(v) : v;
    } else if (isObject(cur) && isObject(v)) {
      mergeFirstWins(cur, v);
    }
  }
}

function isObject(v: JsonValue | undefined): v is JsonObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function cloneObject(o: JsonObject): JsonObject {
  const c: JsonObject = {};
  for (const k of Object.keys(o)) {
    const v = o[k]!;
    c[k] = isObject(v) ? cloneObject(v) : v;
  }
  return c;
}
