/**
 * The runner's broker-call budget (BrokerCallBudget; named apart from src/limiter, the service's
 * rate limiter, which it asks): every REST call of the broker client asks the rate limit
 * service first (FxcmClient `beforeRequest`), and waits instead of sending when over budget.
 *
 * Descriptors (domain `fxcm` by default), one request per call:
 *   [broker=<broker>, account=<account>, endpoint=<name>]               always
 *   [broker=<broker>, account=<account>, endpoint=get_model, model=<M>] per model of get_model
 * `endpoint` is the path without `/trading/` and without the candles ids (`open_trade`,
 * `get_model`, `candles`, `subscribe`, …).
 *
 * The service is in-process (RateLimitService on a MemoryStore with the same YAML config format as
 * `ratelimit`) or a remote `ratelimit` over gRPC (several runners then share one budget through
 * its Redis). When the answer is OVER_LIMIT the call waits until the window resets
 * (durationUntilReset of the over-limit statuses) and asks again. Waiting calls are served by
 * priority — closing and protective orders first, snapshots and candle downloads last — and, at
 * equal priority, in arrival order. An intent whose deadline passes while waiting is dropped
 * (IntentExpiredError) and never sent. A limiter error (service unreachable) fails the call: the
 * runner never sends a call it could not account for.
 *
 * The broker has the last word on its rate: an answer of HTTP 429 (FxcmClient `afterResponse`)
 * holds the calls of that kind (the same descriptors: endpoint, and get_model's models) until its
 * Retry-After has passed, or without one for a backoff of 1 s doubling with each 429 in a row up
 * to 60 s; a 5xx with a Retry-After holds them as asked. Other calls go on; a held call, once
 * free, still asks the rate limit service, so the hold never spends more than the budget.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { createHash } from 'node:crypto';
import { remoteRateLimitService } from '../../../client/remote-service';
import { createInProcessLimiter, type ConfigFile, type RateLimitConfig } from '../../../limiter';
import type { Clock } from '../../../platform/clock';
import type { RateLimitRule } from '../../../core/rule';
import { UNIT_NAMES, unitToDivider, type Descriptor, type RateLimitRequest, type RateLimitResponse } from '../../../core/rls';
import type { HttpMethod, ResponseInfo } from '../../fxcm/rest';
import type { Params } from '../../fxcm/types';
import { IntentExpiredError } from '../errors';
import type { BudgetUse } from '../report/report';

export interface LimitDecider {
  shouldRateLimit(req: RateLimitRequest): Promise<RateLimitResponse>;
  close?(): Promise<void>;
}

/**
 * The in-process service: the same pipeline and config loader as `ratelimit`, on a MemoryStore,
 * or with `state.file` on a file every run on the machine that names it shares, kept across
 * restarts (budget-state.ts).
 */
export function inProcessDecider(files: ConfigFile[], clock: Clock, state?: { file: string; onWarning?: (message: string) => void }): { decider: LimitDecider; config: RateLimitConfig } {
  const limiter = createInProcessLimiter(files, { clock, cacheKeyPrefix: 'runner_', stateFile: state?.file, onStateWarning: state?.onWarning });
  return { decider: { shouldRateLimit: (r) => limiter.shouldRateLimit(r) }, config: limiter.config };
}

/** A remote `ratelimit` over gRPC (plaintext), e.g. `127.0.0.1:8081`. */
export function remoteDecider(address: string, timeoutMs = 5000): LimitDecider {
  return remoteRateLimitService(address, timeoutMs);
}

/** Endpoint name of a broker path: `/trading/open_trade` → `open_trade`, `/candles/1/m1` → `candles`. */
export function endpointName(path: string): string {
  const p = path.replace(/\?.*$/, '').replace(/\/+$/, '');
  if (p.startsWith('/candles')) return 'candles';
  if (p === '/trading/subscribe') return 'trading_subscribe';
  if (p === '/trading/unsubscribe') return 'trading_unsubscribe';
  return p.replace(/^\/trading\//, '').replace(/^\//, '').replace(/\//g, '_');
}

/** Lower is served first. */
export const ENDPOINT_PRIORITY: Record<string, number> = {
  close_trade: 0,
  close_all_for_symbol: 0,
  change_trade_stop_limit: 0,
  change_order_stop_limit: 0,
  delete_order: 1,
  remove_from_oco: 1,
  change_order: 2,
  edit_oco: 2,
  add_to_oco: 2,
  open_trade: 3,
  create_entry_order: 3,
  simple_oco: 3,
  subscribe: 4,
  unsubscribe: 4,
  trading_subscribe: 4,
  trading_unsubscribe: 4,
  update_subscriptions: 4,
  get_instruments: 4,
  get_model: 5,
  candles: 6,
};

export function accountKey(token: string, accountId?: string): string {
  return accountId ?? `tok-${createHash('sha256').update(token).digest('hex').slice(0, 12)}`;
}

export interface IntentOptions {
  priority?: number;
  /** Absolute deadline (limiter clock, ms) after which the call is dropped instead of sent. */
  deadlineMs?: number;
  /** withIntent: the deadline is this long after now on the limiter's clock (not the wall clock: a virtual one may run apart). */
  ttlMs?: number;
  /**
   * Aborted, the call is not sent: taken out of the queue at once, rejected with the signal's
   * reason (the run's kill switch: an entry waiting for budget when entries are locked).
   */
  signal?: AbortSignal;
}

export interface BrokerCallBudgetOptions {
  decider: LimitDecider;
  /** Value of the `account` descriptor entry (see accountKey). */
  account: string;
  domain?: string;
  broker?: string;
  clock: Clock;
  /** Waits on the limiter's clock (default setTimeout; a virtual clock advances itself); `stop` ends the wait early (close). */
  sleep?: (ms: number, stop: AbortSignal) => Promise<void>;
  /** Added to every reset wait (default 5 ms). */
  marginMs?: number;
  /** Called for every call sent (after the limiter allowed it), e.g. to journal it. */
  onSent?: (endpoint: string, waitedMs: number) => void;
  /** Called when a call is held back (HeldBack: what is over its limit, until when). */
  onWait?: (endpoint: string, seconds: number, heldBack: HeldBack) => void;
  /** Called when the broker's answer holds the calls of a kind: its status, how long (ms), and whether Retry-After said so. */
  onThrottled?: (endpoint: string, status: number, holdMs: number, fromRetryAfter: boolean) => void;
}

/** A 429 without Retry-After holds its kind of call for this long, doubled for each 429 in a row. */
export const THROTTLE_BACKOFF_MS = { initial: 1000, max: 60_000 } as const;

interface Item {
  seq: number;
  endpoint: string;
  key: string;
  descriptors: Descriptor[];
  priority: number;
  deadlineMs?: number;
  enqueuedMs: number;
  waited: boolean;
  resolve: () => void;
  reject: (e: Error) => void;
}

/** One of the broker's limits as the limiter last answered it (the control API's budget). */
export interface LimitState {
  /** The limited descriptor's endpoint and model, e.g. `get_model OpenPosition`, `candles`. */
  readonly what: string;
  /** e.g. "45/HOUR". */
  readonly limit: string;
  /** Calls it lets go now (a token bucket: the tokens it holds, up to its burst). */
  readonly remaining: number;
  /** When it is whole again (its window resets, or its bucket is full; limiter clock, ms); undefined when the limiter did not say. */
  readonly refillsAt: number | undefined;
  /** When the limiter answered it (limiter clock, ms). */
  readonly at: number;
}

/** What a descriptor limits, in words: its endpoint and model (`get_model OpenPosition`), past the broker and account. */
const limitedWhat = (d: Descriptor): string =>
  d.entries
    .slice(2)
    .map((e) => e.value)
    .join(' ');

/** A call the limiter holds back. */
export interface HeldBack {
  /** The limited descriptor's endpoint and model, e.g. `get_model OpenPosition`, `candles`. */
  readonly what: string;
  /** When it is asked again (limiter clock, ms): the time the next call fits. */
  readonly untilMs: number;
}

const realSleep = (ms: number, stop: AbortSignal) =>
  new Promise<void>((resolve) => {
    const stopped = () => (clearTimeout(t), resolve());
    const t = setTimeout(() => (stop.removeEventListener('abort', stopped), resolve()), ms);
    stop.addEventListener('abort', stopped, { once: true });
  });

export class BrokerCallBudget {
  private readonly queue: Item[] = [];
  private readonly blocked = new Map<string, number>();
  /** 429s in a row per kind of call (a 2xx answer of that kind ends the row). */
  private readonly throttled = new Map<string, number>();
  private readonly use = new Map<string, BudgetUse>();
  private readonly limitStates = new Map<string, LimitState>();
  private readonly intent = new AsyncLocalStorage<IntentOptions>();
  private seq = 0;
  private pumping = false;
  private wake: (() => void) | undefined;
  private readonly domain: string;
  private readonly broker: string;
  private readonly sleep: (ms: number, stop: AbortSignal) => Promise<void>;
  /** Aborted by close(): a wait for budget must not hold the process open after it. */
  private readonly closed = new AbortController();

  constructor(private readonly opts: BrokerCallBudgetOptions) {
    this.domain = opts.domain ?? 'fxcm';
    this.broker = opts.broker ?? 'fxcm';
    this.sleep = opts.sleep ?? realSleep;
  }

  /** The FxcmClient beforeRequest hook. */
  readonly beforeRequest = (endpoint: string, _method: HttpMethod, params: Params): Promise<void> => this.acquire(endpoint, params);

  /** The FxcmClient afterResponse hook: a 429 (or a 5xx with Retry-After) holds the calls of its kind. */
  readonly afterResponse = (endpoint: string, _method: HttpMethod, params: Params, res: ResponseInfo): void => {
    const key = this.keyOf(this.descriptorsFor(endpoint, params));
    if (res.status !== 429 && !(res.status >= 500 && res.retryAfterMs !== undefined)) {
      if (res.status < 300) this.throttled.delete(key);
      return;
    }
    const name = endpointName(endpoint);
    let holdMs = res.retryAfterMs;
    if (res.status === 429) {
      const inRow = (this.throttled.get(key) ?? 0) + 1;
      this.throttled.set(key, inRow);
      this.usage(name).throttled = (this.usage(name).throttled ?? 0) + 1;
      holdMs ??= Math.min(THROTTLE_BACKOFF_MS.max, THROTTLE_BACKOFF_MS.initial * 2 ** (inRow - 1));
    }
    const until = this.opts.clock.nowMs() + holdMs!;
    this.blocked.set(key, Math.max(this.blocked.get(key) ?? 0, until));
    this.opts.onThrottled?.(name, res.status, holdMs!, res.retryAfterMs !== undefined);
    this.wake?.();
  };

  private keyOf(descriptors: Descriptor[]): string {
    return descriptors.map((d) => d.entries.map((e) => e.value).join('/')).join('+');
  }

  /** Runs `fn` with a priority / deadline for the broker calls it makes. */
  withIntent<T>(o: IntentOptions, fn: () => Promise<T>): Promise<T> {
    const { ttlMs, ...rest } = o;
    return this.intent.run(ttlMs === undefined ? rest : { ...rest, deadlineMs: this.opts.clock.nowMs() + ttlMs }, fn);
  }

  descriptorsFor(endpoint: string, params: Params = {}): Descriptor[] {
    const name = endpointName(endpoint);
    const base = [
      { key: 'broker', value: this.broker },
      { key: 'account', value: this.opts.account },
      { key: 'endpoint', value: name },
    ];
    const out: Descriptor[] = [{ entries: base }];
    if (name === 'get_model') {
      const models = params.models;
      const list = Array.isArray(models) ? models : models === undefined ? [] : [models];
      for (const m of list) out.push({ entries: [...base, { key: 'model', value: String(m) }] });
    }
    return out;
  }

  private usage(name: string): BudgetUse {
    let u = this.use.get(name);
    if (!u) this.use.set(name, (u = { endpoint: name, sent: 0, waited: 0, waitMs: 0, expired: 0 }));
    return u;
  }

  /** Budget used per endpoint (sent, waited, expired). */
  budget(): BudgetUse[] {
    return [...this.use.values()].sort((a, b) => (a.endpoint < b.endpoint ? -1 : 1));
  }

  /** Each limit as the limiter last answered it, by what it limits. */
  limits(): LimitState[] {
    return [...this.limitStates.values()].sort((a, b) => (a.what < b.what ? -1 : a.what > b.what ? 1 : 0));
  }

  private noteLimits(descriptors: readonly Descriptor[], res: RateLimitResponse): void {
    const at = this.opts.clock.nowMs();
    res.statuses.forEach((st, i) => {
      const d = descriptors[i];
      if (st.currentLimit === undefined || d === undefined) return;
      const what = limitedWhat(d);
      const limit = st.currentLimit.requestsPerUnit;
      this.limitStates.set(what, {
        what,
        limit: `${limit}/${UNIT_NAMES[st.currentLimit.unit] ?? st.currentLimit.unit}`,
        remaining: st.limitRemaining,
        refillsAt: st.durationUntilReset === undefined ? undefined : at + st.durationUntilReset * 1000,
        at,
      });
    });
  }

  /** Resolves when the call may be sent; rejects with IntentExpiredError or a limiter error. */
  acquire(endpoint: string, params: Params = {}, o: IntentOptions = this.intent.getStore() ?? {}): Promise<void> {
    const name = endpointName(endpoint);
    const descriptors = this.descriptorsFor(endpoint, params);
    const signal = o.signal;
    if (signal?.aborted) return Promise.reject(signal.reason as Error);
    return new Promise<void>((resolve, reject) => {
      const item: Item = {
        seq: ++this.seq,
        endpoint: name,
        key: this.keyOf(descriptors),
        descriptors,
        priority: o.priority ?? ENDPOINT_PRIORITY[name] ?? 4,
        deadlineMs: o.deadlineMs,
        enqueuedMs: this.opts.clock.nowMs(),
        waited: false,
        resolve,
        reject,
      };
      if (signal) {
        const cut = () => {
          this.take(item);
          reject(signal.reason as Error);
          this.wake?.();
        };
        signal.addEventListener('abort', cut, { once: true });
        item.resolve = () => (signal.removeEventListener('abort', cut), resolve());
        item.reject = (e) => (signal.removeEventListener('abort', cut), reject(e));
      }
      this.queue.push(item);
      this.wake?.();
      void this.pump();
    });
  }

  /** Number of calls waiting. */
  get waiting(): number {
    return this.queue.length;
  }

  private take(item: Item): void {
    const i = this.queue.indexOf(item);
    if (i >= 0) this.queue.splice(i, 1);
  }

  private async pump(): Promise<void> {
    if (this.pumping) return;
    this.pumping = true;
    try {
      while (this.queue.length) {
        const now = this.opts.clock.nowMs();
        for (const it of [...this.queue]) {
          if (it.deadlineMs !== undefined && it.deadlineMs < now) {
            this.take(it);
            this.usage(it.endpoint).expired++;
            it.reject(new IntentExpiredError(it.endpoint, now - it.enqueuedMs));
          }
        }
        this.queue.sort((a, b) => a.priority - b.priority || a.seq - b.seq);
        const item = this.queue.find((it) => (this.blocked.get(it.key) ?? 0) <= now);
        if (!item) {
          let until = Infinity;
          for (const it of this.queue) {
            until = Math.min(until, this.blocked.get(it.key) ?? 0);
            if (it.deadlineMs !== undefined) until = Math.min(until, it.deadlineMs + 1);
          }
          if (!Number.isFinite(until) || !this.queue.length) continue;
          await Promise.race([this.sleep(Math.max(1, until - now), this.closed.signal), new Promise<void>((r) => (this.wake = r))]);
          this.wake = undefined;
          continue;
        }
        let res: RateLimitResponse;
        try {
          res = await this.opts.decider.shouldRateLimit({ domain: this.domain, descriptors: item.descriptors, hitsAddend: 1 });
        } catch (e) {
          this.take(item);
          item.reject(e as Error);
          continue;
        }
        this.noteLimits(item.descriptors, res);
        if (!this.queue.includes(item)) continue; // cut while the limiter answered: not sent
        if (res.overallCode !== 2) {
          this.take(item);
          const u = this.usage(item.endpoint);
          u.sent++;
          const waitedMs = this.opts.clock.nowMs() - item.enqueuedMs;
          if (item.waited || waitedMs > 0) {
            u.waited++;
            u.waitMs += waitedMs;
          }
          this.opts.onSent?.(item.endpoint, waitedMs);
          item.resolve();
          continue;
        }
        item.waited = true;
        const waitS = retryAfterS(res);
        const untilMs = this.opts.clock.nowMs() + waitS * 1000 + (this.opts.marginMs ?? 5);
        this.blocked.set(item.key, untilMs);
        const over = res.statuses.flatMap((st, i) => (st.code === 2 && item.descriptors[i] ? [limitedWhat(item.descriptors[i]!)] : []));
        this.opts.onWait?.(item.endpoint, waitS, { what: over[over.length - 1] ?? item.endpoint, untilMs });
      }
    } finally {
      this.pumping = false;
    }
  }

  async close(): Promise<void> {
    this.closed.abort();
    for (const it of this.queue.splice(0)) it.reject(new Error('limiter closed'));
    this.wake?.();
    await this.opts.decider.close?.();
  }
}

/**
 * When to ask again after an over-limit answer: the latest reset of the limits that refused, but
 * no later than one request's share of each (unit / requests_per_unit). A token bucket's
 * reset is when its whole burst is back, while the next call fits one share later; a fixed
 * window asked early just refuses again (a decision, not a broker call).
 */
export function retryAfterS(res: RateLimitResponse): number {
  let wait = 1;
  for (const s of res.statuses) {
    if (s.code !== 2) continue;
    const reset = s.durationUntilReset ?? 1;
    const divider = s.currentLimit ? unitToDivider(s.currentLimit.unit) : 0;
    const oneShare = divider > 0 && s.currentLimit!.requestsPerUnit > 0 ? divider / s.currentLimit!.requestsPerUnit : reset;
    wait = Math.max(wait, Math.min(reset, Math.ceil(oneShare)));
  }
  return wait;
}

// ---------------------------------------------------------------- start-up budget check

/** A limit the broker documents: at most `max` calls in any `windowS` seconds, per token. */
export interface DocumentedLimit {
  readonly what: string;
  /** A broker path and params whose descriptors the check looks up (see descriptorsFor). */
  readonly endpoint: string;
  readonly params: Params;
  readonly max: number;
  readonly windowS: number;
  /** Where the number comes from. */
  readonly source: string;
}

/**
 * The broker's documented limits, per token: ORA-20301 (FXCM RestAPI README, reference §1.5),
 * per 3600 s; candles from an FXCM staff answer (RestAPI issue #179, reference §1.5).
 */
export const DOCUMENTED_LIMITS: readonly DocumentedLimit[] = [
  { what: 'get_model OpenPosition (Cmd=44)', endpoint: '/trading/get_model', params: { models: ['OpenPosition'] }, max: 50, windowS: 3600, source: 'ORA-20301, FXCM RestAPI README' },
  { what: 'get_model Order (Cmd=46)', endpoint: '/trading/get_model', params: { models: ['Order'] }, max: 1500, windowS: 3600, source: 'ORA-20301, FXCM RestAPI README' },
  { what: 'update_subscriptions (Cmd=24)', endpoint: '/trading/update_subscriptions', params: {}, max: 500, windowS: 3600, source: 'ORA-20301, FXCM RestAPI README' },
  { what: 'candles', endpoint: '/candles', params: {}, max: 3, windowS: 60, source: 'FXCM staff, RestAPI issue #179: "the maximum frequency is 3 request per min"' },
];

/**
 * Most calls a fixed-window limit of `perWindow` per `windowS` lets through in any sliding window
 * of `slidingS` seconds: a sliding window overlaps at most ceil(slidingS/windowS)+1 fixed windows.
 */
export function worstCaseInSlidingWindow(perWindow: number, windowS: number, slidingS: number): number {
  return perWindow * (Math.ceil(slidingS / windowS) + 1);
}

/**
 * Most calls one limit lets through in any window [s, s + windowS) of the documented length, by
 * its algorithm (src/core/algorithms.ts), with L = requests_per_unit and U = the unit in seconds:
 *
 * - fixed_window: L × (ceil(W/U) + 1): the window overlaps that many epoch-aligned windows, each
 *   admitting L (worstCaseInSlidingWindow). Tight: L at the end of one window, L at the start of
 *   the next.
 * - sliding_window: L × (ceil(W/U) + 1) − 1, i.e. the fixed-window bound less one. Derived from
 *   the code: only admitted hits are counted, so each fixed window admits at most L; and a hit at
 *   remaining fraction w > 0 of a window is admitted only if c + 1 + p·w ≤ L (p the previous
 *   window's admitted count), so when p ≥ 1 the later window admits at most L − 1 and the two
 *   last windows the range touches at most L + p − 1 ≤ 2L − 1 together. Tight for W = U (L at the
 *   very end of a window after an empty one, then L − 1 just before the next edge: "under 2×");
 *   for W > U a safe bound, not always reached.
 * - token_bucket (GCRA, emission interval T = U/L, capacity B = burst): B − 1 + ceil(W·L/U). From
 *   TAT after k admissions ≥ t₁ + k·T and the admission test TAT ≤ t + (B − 1)·T, the n-th call in
 *   the range needs t_n − t₁ ≥ (n − B)·T, and t_n − t₁ < W. Tight: B at once, then one every T.
 *   For W = U: L + B − 1, as docs/configuration.md says. (A closed range [s, s + W] can hold one more.)
 *
 * These assume the store applies the algorithm atomically (memory, Redis); Memcached's brief
 * over-admission under concurrent runners is not bounded here. undefined when the limit bounds
 * nothing (unit UNKNOWN).
 */
export function worstCaseOfLimit(rule: RateLimitRule, windowS: number): number | undefined {
  const u = unitToDivider(rule.limit.unit);
  if (u === 0) return undefined;
  const l = rule.limit.requestsPerUnit;
  if (l === 0) return 0;
  if (rule.algorithm === 'token_bucket') {
    const burst = rule.burst ?? l;
    return burst - 1 + Math.ceil((windowS * l) / u);
  }
  const fixed = worstCaseInSlidingWindow(l, u, windowS);
  return rule.algorithm === 'sliding_window' ? fixed - 1 : fixed;
}

/** `{unit: minute, requests_per_unit: 2, algorithm: token_bucket, burst: 2}`, `{unit: minute, requests_per_unit: 3} (fixed window)` */
function describeRule(rule: RateLimitRule): string {
  const unit = (UNIT_NAMES[rule.limit.unit] ?? String(rule.limit.unit)).toLowerCase();
  const head = `{unit: ${unit}, requests_per_unit: ${rule.limit.requestsPerUnit}`;
  if (rule.algorithm === undefined) return `${head}} (fixed window)`;
  return `${head}, algorithm: ${rule.algorithm}${rule.algorithm === 'token_bucket' ? `, burst: ${rule.burst ?? rule.limit.requestsPerUnit}` : ''}}`;
}

const UNIT_OF_SECONDS: Record<number, string> = { 1: 'second', 60: 'minute', 3600: 'hour', 86400: 'day' };

/** How to fix a config for a documented limit: a token bucket whose worst case fits. */
function fixAdvice(d: DocumentedLimit): string {
  const unit = UNIT_OF_SECONDS[d.windowS];
  if (unit === undefined) return `use algorithm: token_bucket with burst - 1 + ceil(${d.windowS} s x requests_per_unit / unit) <= ${d.max}`;
  const burst = Math.max(1, Math.floor(d.max / 10));
  return `use algorithm: token_bucket with requests_per_unit + burst - 1 <= ${d.max} per ${unit}, e.g. {unit: ${unit}, requests_per_unit: ${d.max + 1 - burst}, algorithm: token_bucket, burst: ${burst}}`;
}

/** One documented limit a config could exceed. */
export interface BudgetProblem {
  readonly limit: DocumentedLimit;
  /** The tightest limit that applies (undefined: none does). */
  readonly rule?: RateLimitRule;
  /** Most calls it lets through in any window of limit.windowS (undefined: no limit). */
  readonly worst?: number;
  /** One line: which endpoint, which rule, its worst case, the documented limit, the fix. */
  readonly message: string;
}

/**
 * The documented limits a config could exceed: for each, the calls' descriptors are looked up as
 * the service would (unlimited, shadow-mode and replaced rules refuse nothing; quota-mode rules
 * are not counted either, since one refuses only when every quota limit of the request does), and
 * the tightest of their limits (every limit of `rate_limits:`, every descriptor of the call)
 * bounds the calls in any window of the documented length (worstCaseOfLimit).
 */
export function budgetProblems(config: RateLimitConfig, limiter: BrokerCallBudget, domain = 'fxcm'): BudgetProblem[] {
  const problems: BudgetProblem[] = [];
  for (const d of DOCUMENTED_LIMITS) {
    const matched: RateLimitRule[] = [];
    const replaced = new Set<string>();
    for (const descriptor of limiter.descriptorsFor(d.endpoint, d.params)) {
      const rule = config.getLimit(domain, descriptor);
      if (!rule) continue;
      for (const name of rule.replaces) replaced.add(name);
      matched.push(rule);
    }
    let best: number | undefined;
    let tightest: RateLimitRule | undefined;
    for (const rule of matched) {
      if (rule.unlimited || rule.shadowMode || rule.quotaMode) continue;
      if (rule.limit.name !== '' && replaced.has(rule.limit.name)) continue;
      for (const r of [rule, ...(rule.more ?? [])]) {
        const worst = worstCaseOfLimit(r, d.windowS);
        if (worst !== undefined && (best === undefined || worst < best)) {
          best = worst;
          tightest = r;
        }
      }
    }
    if (best === undefined || tightest === undefined) {
      problems.push({ limit: d, message: `${d.what}: no limit configured; the broker allows ${d.max} per ${d.windowS} s (${d.source}). Fix: add a rule for it and ${fixAdvice(d)}` });
    } else if (best > d.max) {
      problems.push({
        limit: d,
        rule: tightest,
        worst: best,
        message:
          `${d.what}: rule ${tightest.fullKey} ${describeRule(tightest)} can send up to ${best} calls within ${d.windowS} s; ` +
          `the broker allows ${d.max} per ${d.windowS} s (${d.source}). Fix: ${fixAdvice(d)}`,
      });
    }
  }
  return problems;
}

/**
 * Problems of a config against the broker's documented limits, one line each (budgetProblems): an
 * endpoint with no limit, or a limit that could let more calls through than documented in some
 * window of the documented length. Empty when the config is safe.
 */
export function checkBudget(config: RateLimitConfig, limiter: BrokerCallBudget, domain = 'fxcm'): string[] {
  return budgetProblems(config, limiter, domain).map((p) => p.message);
}

/** "25/hour" style description of the limit applied to an endpoint (first matching rule). */
export function describeLimit(config: RateLimitConfig, limiter: BrokerCallBudget, endpoint: string, params: Params = {}, domain = 'fxcm'): string | undefined {
  const out: string[] = [];
  for (const d of limiter.descriptorsFor(endpoint, params)) {
    const rule = config.getLimit(domain, d);
    if (rule && !rule.unlimited) out.push(`${rule.limit.requestsPerUnit}/${(UNIT_NAMES[rule.limit.unit] ?? '').toLowerCase()}`);
  }
  return out.length ? out.join(', ') : undefined;
}
