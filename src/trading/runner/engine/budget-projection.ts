/**
 * What a live run of a backtested strategy would spend against each broker limit. The backtest's
 * decisions become the broker calls a live run makes for them (live-context.ts → FxcmClient), after
 * the calls every live run starts with (live.ts run()), at the backtest's times. Per limit of the
 * limits config: the calls in the busiest window of the limit's length, what the limit lets
 * through in such a window, and whether a live run would have waited, found by replaying the calls
 * in time order through the runner's own BrokerCallBudget on a manual clock (a call that waits
 * delays the calls after it, as a strategy awaiting its call would be).
 */
import { ManualClock } from '../../../platform/clock';
import { Code, UNIT_NAMES, unitToDivider, type Descriptor } from '../../../core/rls';
import type { RateLimitRule } from '../../../core/rule';
import type { ConfigFile } from '../../../limiter';
import type { Params } from '../../fxcm/types';
import type { Intent } from './backtest';
import { IntentExpiredError } from '../errors';
import { BrokerCallBudget, DOCUMENTED_LIMITS, inProcessDecider, worstCaseOfLimit, type DocumentedLimit, type LimitDecider } from '../broker/call-budget';
import { LIVE_DEFAULT_TIMEFRAME, LIVE_SNAPSHOT, LIVE_TABLES } from './live';
import type { BudgetProjection, ProjectedLimitUse } from '../report/report';
import type { ClosedTrade } from '../results';
import type { Strategy } from '../strategy';

/** One broker call of the projected live run. */
export interface ProjectedCall {
  ts: number;
  /** The broker path, as FxcmClient requests it. */
  path: string;
  /** The params the limiter's descriptors depend on (get_model's models). */
  params: Params;
}

/** The broker call a live run makes for each accepted intent of the backtest (live-context.ts). */
const CALL_OF_INTENT: Readonly<Record<string, string>> = {
  openTrade: '/trading/open_trade',
  createEntryOrder: '/trading/create_entry_order',
  createOco: '/trading/simple_oco',
  closeTrade: '/trading/close_trade',
  closeAll: '/trading/close_trade',
  setStop: '/trading/change_trade_stop_limit',
  setLimit: '/trading/change_trade_stop_limit',
  changeOrder: '/trading/change_order',
  deleteOrder: '/trading/delete_order',
};

/** The limiter's default domain and a stand-in for the account descriptor (the bundled rules match any account). */
const DOMAIN = 'fxcm';
const ACCOUNT = 'backtest';
/** Window of the busiest count for a call that no limit applies to: the broker counts per hour (ORA-20301). */
const UNLIMITED_WINDOW_S = 3600;
/** The replay gives up on a call still waiting this long after it was asked: longer than any window up to a week. */
const GIVE_UP_MS = 8 * 86400_000;

/** What the projection needs of a backtest. */
export interface BacktestRun {
  strategy: Pick<Strategy, 'symbols' | 'timeframes' | 'warmup'>;
  /** The backtest's first candle time: when the live run's start-up calls go out. */
  startTime: number;
  intents: readonly Intent[];
  trades: readonly ClosedTrade[];
}

const PROJECTION_METHOD =
  'Each decision the backtest accepted is the call a live run sends for it, at the backtest time: openTrade → open_trade, ' +
  'createEntryOrder → create_entry_order, createOco → simple_oco, closeTrade → close_trade, closeAll → close_trade ' +
  'per trade it closed (a run closes only its own trades), setStop/setLimit → change_trade_stop_limit, changeOrder → change_order, deleteOrder → delete_order; ' +
  'each position a flatten closed (daily loss, strategy error) → close_trade. Before them, the calls every live run starts with: ' +
  'the table subscription, the get_model snapshot (Account, OpenPosition, Order), the warm-up candles per symbol and time frame ' +
  'with their one get_model Offer lookup, the price subscription. Refused decisions are not counted (a live run refuses them ' +
  'before sending). The busiest window is the most calls in any window of the limit’s length; “would wait” replays the calls ' +
  'in order through the runner’s limiter on the limits file. Not projected: reconnects (a re-subscription and a snapshot each) ' +
  'and the entry orders a flatten deletes.';

/** The live run's broker calls for a backtest, in time order (start-up calls first). */
export function projectedCalls(run: BacktestRun): ProjectedCall[] {
  const at = run.startTime;
  const calls: ProjectedCall[] = [
    { ts: at, path: '/trading/subscribe', params: { models: LIVE_TABLES } },
    { ts: at, path: '/trading/get_model', params: { models: LIVE_SNAPSHOT } },
  ];
  const s = run.strategy;
  if (s.warmup && s.warmup > 0) {
    calls.push({ ts: at, path: '/trading/get_model', params: { models: ['Offer'] } }); // FxcmClient.offerId, once
    const timeframes = s.timeframes?.length ? s.timeframes : [LIVE_DEFAULT_TIMEFRAME];
    for (let i = 0; i < s.symbols.length * timeframes.length; i++) calls.push({ ts: at, path: '/candles', params: {} });
  }
  calls.push({ ts: at, path: '/subscribe', params: {} });
  for (const i of run.intents) {
    const path = CALL_OF_INTENT[i.op];
    if (path === undefined || i.result !== 'ok') continue;
    if (i.op === 'closeAll') {
      // live-context closes each of the run's trades with its own close_trade (none when none is open)
      const symbol = (i.args as { symbol?: string } | undefined)?.symbol;
      const closed = run.trades.filter((t) => t.reason === 'close' && t.closeTime === i.ts && (symbol === undefined || t.symbol === symbol));
      for (const _ of closed) calls.push({ ts: i.ts, path, params: {} });
      continue;
    }
    calls.push({ ts: i.ts, path, params: {} });
  }
  for (const t of run.trades) if (t.reason === 'flatten') calls.push({ ts: t.closeTime, path: '/trading/close_trade', params: {} });
  return calls.sort((a, b) => a.ts - b.ts); // stable: at one time, the start-up calls first, then in decision order
}

/** Most of the sorted `times` within any [t, t + windowMs), and the first time of such a window. */
export function busiestWindow(times: readonly number[], windowMs: number): { count: number; from?: number } {
  let count = 0;
  let from: number | undefined;
  let j = 0;
  for (let i = 0; i < times.length; i++) {
    while (j < times.length && times[j]! < times[i]! + windowMs) j++;
    if (j - i > count) {
      count = j - i;
      from = times[i];
    }
  }
  return { count, from };
}

const keyOf = (d: Descriptor) => d.entries.map((e) => `${e.key}=${e.value}`).join(',');

/** `45/hour, token bucket, burst 5` */
function limitText(rule: RateLimitRule): string {
  if (rule.unlimited) return 'unlimited';
  const l = rule.limit.requestsPerUnit;
  const head = `${l}/${(UNIT_NAMES[rule.limit.unit] ?? String(rule.limit.unit)).toLowerCase()}`;
  const algorithm = rule.algorithm === 'token_bucket' ? `token bucket, burst ${rule.burst ?? l}` : (rule.algorithm ?? 'fixed_window').replace('_', ' ');
  return `${head}, ${algorithm}${rule.shadowMode ? ' (shadow mode: never waits)' : ''}`;
}

/** Waits for the limiter to let `call` go; false when it has not by `deadlineMs`. */
function allowedBy(limiter: BrokerCallBudget, call: ProjectedCall, deadlineMs: number): Promise<boolean> {
  return limiter.acquire(call.path, call.params, { deadlineMs }).then(
    () => true,
    (e: unknown) => {
      if (e instanceof IntentExpiredError) return false;
      throw e;
    },
  );
}

interface Row {
  descriptor: Descriptor;
  /** When the strategy asks for its calls (the backtest's times). */
  times: number[];
  /** When the replayed limiter lets them go: what the broker would see. */
  sent: number[];
  waited: number;
  waitMs: number;
  stuck: number;
}

/**
 * The projected budget of a live run of `run` under the limits config `limits` (the file the
 * live runner would load): per descriptor a call carries (each endpoint, and each get_model model
 * that a limit or a documented broker limit applies to) and per limit on it, a ProjectedLimitUse.
 */
export async function projectBudget(run: BacktestRun, limits: ConfigFile): Promise<BudgetProjection> {
  const calls = projectedCalls(run);
  const clock = new ManualClock(calls[0]?.ts ?? run.startTime);
  const { decider, config } = inProcessDecider([limits], clock);
  let refused = new Set<string>();
  /** Whether nothing gets through a descriptor (a limit of 0 calls): its calls are not replayed, they would wait forever. */
  const shut = (d: Descriptor) => {
    const rule = config.getLimit(DOMAIN, d);
    return rule !== undefined && !rule.unlimited && !rule.shadowMode && [rule, ...(rule.more ?? [])].some((r) => worstCaseOfLimit(r, unitToDivider(r.limit.unit)) === 0);
  };
  const watching: LimitDecider = {
    async shouldRateLimit(req) {
      const res = await decider.shouldRateLimit(req);
      res.statuses.forEach((s, i) => {
        if (s.code === Code.OVER_LIMIT) refused.add(keyOf(req.descriptors[i]!));
      });
      return res;
    },
  };
  const limiter = new BrokerCallBudget({ decider: watching, account: ACCOUNT, clock, sleep: async (ms) => clock.advance(ms) });
  const rows = new Map<string, Row>();
  const rowOf = (d: Descriptor) => {
    const key = keyOf(d);
    let row = rows.get(key);
    if (!row) rows.set(key, (row = { descriptor: d, times: [], sent: [], waited: 0, waitMs: 0, stuck: 0 }));
    return row;
  };
  // every documented limit gets a row, with calls or without
  const documented = new Map<string, DocumentedLimit>();
  for (const d of DOCUMENTED_LIMITS) {
    const descriptor = limiter.descriptorsFor(d.endpoint, d.params).at(-1)!;
    documented.set(keyOf(descriptor), d);
    rowOf(descriptor);
  }
  try {
    for (const call of calls) {
      // the endpoint always; a model only when something limits it
      const counted = limiter.descriptorsFor(call.path, call.params).filter((d, i) => i === 0 || config.getLimit(DOMAIN, d) !== undefined || documented.has(keyOf(d)));
      clock.set(Math.max(clock.nowMs(), call.ts));
      const asked = clock.nowMs();
      const closed = counted.filter(shut).map(keyOf);
      refused = new Set(closed);
      const sent = closed.length === 0 && (await allowedBy(limiter, call, asked + GIVE_UP_MS));
      const waitMs = clock.nowMs() - asked;
      for (const d of counted) {
        const row = rowOf(d);
        row.times.push(call.ts);
        if (sent) row.sent.push(clock.nowMs());
        if (!refused.has(keyOf(d))) continue;
        if (sent) {
          row.waited++;
          row.waitMs += waitMs;
        } else row.stuck++;
      }
    }
  } finally {
    await limiter.close();
  }
  const out: ProjectedLimitUse[] = [];
  for (const [key, row] of rows) {
    const entries = row.descriptor.entries;
    const endpoint = String(entries[2]?.value ?? '');
    const scope = entries.slice(3).map((e) => `${e.key}=${e.value}`).join(',');
    const doc = documented.get(key);
    const docUse = doc && { max: doc.max, windowS: doc.windowS, source: doc.source, busiest: busiestWindow(row.sent, doc.windowS * 1000).count };
    const rule = config.getLimit(DOMAIN, row.descriptor);
    const base = { endpoint, scope, calls: row.times.length, waited: row.waited, waitMs: row.waitMs, stuck: row.stuck, ...(docUse ? { documented: docUse } : {}) };
    if (!rule) {
      const windowS = doc?.windowS ?? UNLIMITED_WINDOW_S;
      const b = busiestWindow(row.times, windowS * 1000);
      out.push({ ...base, windowS, busiest: b.count, busiestFrom: b.from });
      continue;
    }
    for (const r of [rule, ...(rule.more ?? [])]) {
      const windowS = unitToDivider(r.limit.unit) || doc?.windowS || UNLIMITED_WINDOW_S;
      const b = busiestWindow(row.times, windowS * 1000);
      const allowed = r.unlimited || r.shadowMode ? undefined : worstCaseOfLimit(r, windowS);
      out.push({ ...base, limit: limitText(r), windowS, busiest: b.count, busiestFrom: b.from, ...(allowed !== undefined ? { allowed } : {}) });
    }
  }
  out.sort((a, b) => (a.endpoint < b.endpoint ? -1 : a.endpoint > b.endpoint ? 1 : a.scope < b.scope ? -1 : a.scope > b.scope ? 1 : 0));
  return { limitsFile: limits.name, calls: calls.length, method: PROJECTION_METHOD, limits: out };
}
