/**
 * The runner's broker-call limiter: every REST call of the broker client asks the rate limit
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
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { createHash } from 'node:crypto';
import { remoteRateLimitService } from '../../client/remote-service';
import { createInProcessLimiter, type ConfigFile, type RateLimitConfig } from '../../limiter';
import type { Clock } from '../../core/clock';
import { UNIT_NAMES, unitToDivider, type Descriptor, type RateLimitRequest, type RateLimitResponse } from '../../core/rls';
import type { HttpMethod } from '../fxcm/rest';
import type { Params } from '../fxcm/types';
import { IntentExpiredError } from './errors';
import type { BudgetUse } from './report';

export interface LimitDecider {
  shouldRateLimit(req: RateLimitRequest): Promise<RateLimitResponse>;
  close?(): Promise<void>;
}

/** The in-process service: the same pipeline and config loader as `ratelimit`, on a MemoryStore. */
export function inProcessDecider(files: ConfigFile[], clock: Clock): { decider: LimitDecider; config: RateLimitConfig } {
  const limiter = createInProcessLimiter(files, { clock, cacheKeyPrefix: 'runner_' });
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
}

export interface BrokerLimiterOptions {
  decider: LimitDecider;
  /** Value of the `account` descriptor entry (see accountKey). */
  account: string;
  domain?: string;
  broker?: string;
  clock: Clock;
  /** Waits on the limiter's clock (default setTimeout; a virtual clock advances itself). */
  sleep?: (ms: number) => Promise<void>;
  /** Added to every reset wait (default 5 ms). */
  marginMs?: number;
  /** Called for every call sent (after the limiter allowed it), e.g. to journal it. */
  onSent?: (endpoint: string, waitedMs: number) => void;
}

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

const realSleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

export class BrokerLimiter {
  private readonly queue: Item[] = [];
  private readonly blocked = new Map<string, number>();
  private readonly use = new Map<string, BudgetUse>();
  private readonly intent = new AsyncLocalStorage<IntentOptions>();
  private seq = 0;
  private pumping = false;
  private wake: (() => void) | undefined;
  private readonly domain: string;
  private readonly broker: string;
  private readonly sleep: (ms: number) => Promise<void>;

  constructor(private readonly opts: BrokerLimiterOptions) {
    this.domain = opts.domain ?? 'fxcm';
    this.broker = opts.broker ?? 'fxcm';
    this.sleep = opts.sleep ?? realSleep;
  }

  /** The FxcmClient beforeRequest hook. */
  readonly beforeRequest = (endpoint: string, _method: HttpMethod, params: Params): Promise<void> => this.acquire(endpoint, params);

  /** Runs `fn` with a priority / deadline for the broker calls it makes. */
  withIntent<T>(o: IntentOptions, fn: () => Promise<T>): Promise<T> {
    return this.intent.run(o, fn);
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

  /** Resolves when the call may be sent; rejects with IntentExpiredError or a limiter error. */
  acquire(endpoint: string, params: Params = {}, o: IntentOptions = this.intent.getStore() ?? {}): Promise<void> {
    const name = endpointName(endpoint);
    const descriptors = this.descriptorsFor(endpoint, params);
    return new Promise<void>((resolve, reject) => {
      this.queue.push({
        seq: ++this.seq,
        endpoint: name,
        key: descriptors.map((d) => d.entries.map((e) => e.value).join('/')).join('+'),
        descriptors,
        priority: o.priority ?? ENDPOINT_PRIORITY[name] ?? 4,
        deadlineMs: o.deadlineMs,
        enqueuedMs: this.opts.clock.nowMs(),
        waited: false,
        resolve,
        reject,
      });
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
          await Promise.race([this.sleep(Math.max(1, until - now)), new Promise<void>((r) => (this.wake = r))]);
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
        let resetS = 1;
        for (const s of res.statuses) if (s.code === 2) resetS = Math.max(resetS, s.durationUntilReset ?? 1);
        this.blocked.set(item.key, this.opts.clock.nowMs() + resetS * 1000 + (this.opts.marginMs ?? 5));
      }
    } finally {
      this.pumping = false;
    }
  }

  async close(): Promise<void> {
    for (const it of this.queue.splice(0)) it.reject(new Error('limiter closed'));
    this.wake?.();
    await this.opts.decider.close?.();
  }
}

// ---------------------------------------------------------------- start-up budget check

/** The broker's documented limits (reference §1.5: ORA-20301), per token, per 3600 s. */
export const DOCUMENTED_LIMITS = [
  { what: 'get_model OpenPosition (Cmd=44)', endpoint: '/trading/get_model', params: { models: ['OpenPosition'] }, max: 50, windowS: 3600 },
  { what: 'get_model Order (Cmd=46)', endpoint: '/trading/get_model', params: { models: ['Order'] }, max: 1500, windowS: 3600 },
  { what: 'update_subscriptions (Cmd=24)', endpoint: '/trading/update_subscriptions', params: {}, max: 500, windowS: 3600 },
] as const;

/**
 * Most calls a fixed-window limit of `perWindow` per `windowS` lets through in any sliding window
 * of `slidingS` seconds: a sliding window overlaps at most ceil(slidingS/windowS)+1 fixed windows.
 */
export function worstCaseInSlidingWindow(perWindow: number, windowS: number, slidingS: number): number {
  return perWindow * (Math.ceil(slidingS / windowS) + 1);
}

/**
 * Problems of a config against the broker's documented limits: an endpoint with no limit, or a
 * limit that could let more calls through than documented. Empty when the config is safe.
 */
export function checkBudget(config: RateLimitConfig, limiter: BrokerLimiter, domain = 'fxcm'): string[] {
  const problems: string[] = [];
  for (const d of DOCUMENTED_LIMITS) {
    let best = Infinity;
    let desc = '';
    for (const descriptor of limiter.descriptorsFor(d.endpoint, d.params as Params)) {
      const rule = config.getLimit(domain, descriptor);
      if (!rule || rule.unlimited || rule.shadowMode) continue;
      const w = unitToDivider(rule.limit.unit);
      if (w === 0) continue;
      const worst = worstCaseInSlidingWindow(rule.limit.requestsPerUnit, w, d.windowS);
      if (worst < best) {
        best = worst;
        desc = `${rule.limit.requestsPerUnit}/${(UNIT_NAMES[rule.limit.unit] ?? '').toLowerCase()}`;
      }
    }
    if (best === Infinity) problems.push(`${d.what}: no limit configured; the broker allows ${d.max} per ${d.windowS} s`);
    else if (best > d.max) problems.push(`${d.what}: ${desc} can send up to ${best} calls in ${d.windowS} s (fixed windows); the broker allows ${d.max}`);
  }
  return problems;
}

/** "25/hour" style description of the limit applied to an endpoint (first matching rule). */
export function describeLimit(config: RateLimitConfig, limiter: BrokerLimiter, endpoint: string, params: Params = {}, domain = 'fxcm'): string | undefined {
  const out: string[] = [];
  for (const d of limiter.descriptorsFor(endpoint, params)) {
    const rule = config.getLimit(domain, d);
    if (rule && !rule.unlimited) out.push(`${rule.limit.requestsPerUnit}/${(UNIT_NAMES[rule.limit.unit] ?? '').toLowerCase()}`);
  }
  return out.length ? out.join(', ') : undefined;
}
