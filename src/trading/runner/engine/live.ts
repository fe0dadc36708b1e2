/**
 * Paper / live / replay engine: the same Strategy API as the backtest, against a broker
 * (FxcmClient, every call through the BrokerCallBudget) or against a recorded journal.
 *
 * - Start: one get_model snapshot (Account, OpenPosition, Order), table subscriptions (Order,
 *   OpenPosition, ClosedPosition, Account), price subscriptions of the strategy's symbols.
 * - Every input of the strategy (snapshot, price push, table push, timer, start, stop) goes through
 *   one queue and is handled in order; hooks never run concurrently. Bars are built from the ticks
 *   as the broker builds candles; a bar whose ticks were partly missed (at the start, across a
 *   reconnect or a restart) is fetched from the broker instead, its answer one more input
 *   (bars.ts: LiveBars). `ctx.now()` is the time of the event being handled.
 * - Table pushes map to hooks: OpenPosition I → onTrade opened; ClosedPosition I → onTrade closed;
 *   an entry Order I → onOrder accepted; Order D → onOrder filled/cancelled/rejected.
 * - Every decision (broker operation of the strategy) is an intent: journaled (fsync) before any
 *   check or call, then its answer (result or error) is journaled. Replaying the journal's inputs
 *   and answers gives the same intents bit for bit (`replay`), and a restarted run first replays
 *   its journal (no broker calls) to rebuild the runner's and the strategy's state, then takes one
 *   reconciliation snapshot and continues: nothing already sent is sent again. An intent that was
 *   sent but not answered before the process died is settled from that snapshot (an order the
 *   journal does not know → its answer; ../reconcile/orphans.ts) and never resent.
 * - Checkpoints (checkpoint.ts), for a strategy with saveState/restoreState: once the journal has
 *   grown by `journalMaxBytes` since its checkpoint, at the next point between two inputs with no
 *   intent unanswered, the strategy's and the runner's state become a new checkpoint and the
 *   journal is cut to it. A resume or a replay takes the last checkpoint back and replays only the
 *   lines after it. Without the hooks the journal is never cut, and a resume replays all of it.
 * - A dropped stream: the connection reconnects, resubscribes and takes one snapshot; that snapshot
 *   is an input like the resume's (journaled, reason 'reconnect') and reconciles the same way
 *   (../reconcile/snapshot.ts: applySnapshot): trades closed meanwhile with the broker's P/L,
 *   entry orders filled or gone, then onReconnect. The outage and the reconciliation are logged.
 * - Reconciliation lives in ../reconcile/ and works on the run's RunBook (what it knows of the
 *   broker and has told the strategy), which this engine owns; the engine keeps the results and
 *   runs the hooks.
 * - Ownership (../reconcile/broker-state.ts, claims.ts): the strategy sees, acts on and is credited
 *   with the orders its calls created and their trades; an answered order call is an `own` input,
 *   handled next.
 * - A hook that throws is fatal: the error and the script line are logged, the run's positions are
 *   closed and its entry orders deleted (closing calls first in the limiter's queue), the run stops.
 * - createOco resolves with `orderIds: []` (the broker's simple_oco answer has no ids; the orders
 *   arrive as onOrder accepted events).
 */
import { silentLogger } from '../../../telemetry/logger';
import { systemClock, type Clock } from '../../../platform/clock';
import type { FxcmClient, Snapshot } from '../../fxcm/client';
import type { ModelName, Period, PriceUpdate, TableAction, TableRecord } from '../../fxcm/types';
import type { ClosedTrade, EquityPoint, RunResult } from '../results';
import { BarHistory, LiveBars, type BarFetch, type BarsOut } from './bars';
import { MAX_CANDLES_PER_REQUEST, PERIOD_SECONDS } from '../../fxcm/candles';
import { brokerTimeMs, closedEvent, numOf } from '../reconcile/broker-state';
import { RunBook, type OwnInput } from '../reconcile/run-book';
import { applySnapshot, type ReconcileHooks, type SnapshotReason, type SnapshotRun } from '../reconcile/snapshot';
import { claimOf, ordersClaimed, resumeClaims, unclaimedOrderCalls } from '../reconcile/claims';
import { claimWatched, unsettledCalls } from '../reconcile/watches';
import { DEFAULT_LEVERAGE } from '../../execution/instruments';
import { PreTradeCheck } from './pre-trade';
import { liveContext } from './live-context';
import { errorOf, journaledError, type JournaledError } from '../reconcile/orphans';
import { LOST_SNAPSHOT_TTL_MS, PLACING_OPS, SETTLED_OPS, type LostContext, type SnapshotRecord } from '../reconcile/lost-answers';
import { settleLostCall, type LostCallRun, type Settlement } from '../reconcile/lost-settlement';
import { answerLost } from '../../fxcm/errors';
import { JournalFinishedError, OrderRejectedError, isEntryLock, runErrorOf, runHook, scriptLocation, type StrategyError } from '../errors';
import { finishedRunOf, journaledValue, type Journal, type JournalLine } from '../journal/journal';
import { CHECKPOINT_VERSION, DEFAULT_JOURNAL_MAX_BYTES, hasStateHooks, jsonProblem, lastCheckpoint, type CheckpointLine, type SavedEngine } from './checkpoint';
import { thinEquity } from '../report/equity-thinning';
import type { BrokerCallBudget } from '../broker/call-budget';
import { SafetyGuard, type SafetyLimits } from '../protections/safety';
import { Protections, runProtections } from '../protections/protections';
import type { AccountInfo, Bar, CloseReason, OrderEvent, ProtectionRules, RunMode, Strategy, StrategyContext, StrategyLogger, Tick, TradeEvent } from '../strategy';
import { errorMessage } from '../../../platform/errors';
import type { RunView } from './run-view';
import type { RunEventKind, RunEvents } from './run-events';
import { RunControls, type ActionDone, type ControlLine, type OperatorAction } from './run-controls';

export interface LiveIntent {
  id: number;
  ts: number;
  op: string;
  args: unknown;
}

export interface LiveOptions {
  mode: Exclude<RunMode, 'backtest'>;
  strategy: Strategy<Record<string, unknown>>;
  strategyFile?: string;
  params?: Record<string, unknown>;
  safety?: SafetyLimits;
  /** The protections (a --protections file), instead of the strategy's. */
  protections?: ProtectionRules;
  /** The account's leverage for the pre-trade margin check (default DEFAULT_LEVERAGE, the simulator's). */
  leverage?: number;
  logger?: StrategyLogger;
  /** The broker (paper/live); its beforeRequest should be `limiter.beforeRequest`. */
  client?: FxcmClient;
  limiter?: BrokerCallBudget;
  journal?: Journal;
  /**
   * Cut the journal to a new checkpoint once this many bytes follow its last one (default
   * DEFAULT_JOURNAL_MAX_BYTES); only for a strategy with saveState/restoreState.
   */
  journalMaxBytes?: number;
  /** A recorded journal: replayed first (all of `replay`; the catch-up of a restarted run), from its last checkpoint when it has one. */
  recorded?: JournalLine[];
  /** Stop this many ms after onStart (a resumed run: after it resumed); paper/live; default: until stop(). */
  durationMs?: number;
  currency?: string;
  /**
   * The run's clock: the time of the runner's own inputs (snapshots, timers, ctx.now() in their
   * hooks), the strategy's timers and --duration (default the system clock; tests pass a ManualClock).
   */
  clock?: Clock;
  /**
   * Once the broker has refused the token (every call 401, every handshake 403) for this long
   * without a call going through again, the run is halted (its journal resumable); default
   * DEFAULT_TOKEN_REFUSED_MS.
   */
  tokenRefusedTimeoutMs?: number;
  /** How long the snapshot that settles a lost answer may wait for its budget (default LOST_SNAPSHOT_TTL_MS). */
  lostSnapshotTtlMs?: number;
  /** Called once the start-up calls (snapshot, subscriptions, history) are done. */
  onRunning?: () => void;
  /** Told what happens as it happens (webhooks), never in a replay; must return at once. */
  events?: RunEvents;
}

export interface LiveResult extends RunResult {
  /** The intents since the run's last checkpoint (all of them when it had none). */
  intents: LiveIntent[];
  /** How many intents the run made, those before its last checkpoint included. */
  decisions: number;
  resumed: boolean;
  /** The run was stopped by the runner, not by the strategy or a signal: the broker refused the token (the journal resumes it). */
  halted?: { reason: 'token'; message: string };
  /**
   * Order calls whose answer was lost and that no snapshot could settle yet: they may have placed
   * orders this run does not own. A run again with the same journal reconciles them.
   */
  unsettled?: string[];
}

type InEvent =
  | { k: 'snapshot'; t: number; snap: Snapshot; reason?: SnapshotReason; downMs?: number }
  /** What an answered order call makes the run's (`lost`: a watch, ../reconcile/watches.ts). */
  | OwnInput
  | { k: 'history'; t: number; bars: Bar[] }
  | { k: 'start'; t: number }
  | { k: 'price'; t: number; p: PriceUpdate }
  | { k: 'table'; t: number; model: ModelName; action: TableAction; rec: TableRecord }
  /** `count`: how many times it fell due since it last ran (a hook ran meanwhile), when more than once. */
  | { k: 'timer'; t: number; name: string; count?: number }
  | { k: 'stop'; t: number }
  /** The broker's bars of a range the live bars asked for (empty when it could not be fetched). */
  | { k: 'bars'; t: number; fetch: BarFetch; bars: Bar[] }
  /** The price stream was interrupted (disconnect, restart): ticks were missed. */
  | { k: 'gap'; t: number }
  /** An operator's action (run-controls.ts): journaled when it is taken, an input of a replay only. */
  | ControlLine;

const IN_KINDS = new Set(['snapshot', 'own', 'history', 'start', 'price', 'table', 'timer', 'stop', 'bars', 'gap', 'control']);
/**
 * Inputs that change what the strategy sees (table pushes, the claims of answered calls,
 * snapshots): all those queued are handled before the next queued input whose hook would
 * otherwise run on a stale view (a timer, a tick, a bar, onStop). Their own hooks (onTrade,
 * onOrder, onReconnect) run as they are handled.
 */
const STATE_KINDS: ReadonlySet<string> = new Set(['table', 'own', 'snapshot']);
/**
 * The inputs waiting to be handled, in two lines: the state inputs (STATE_KINDS), always taken
 * first, and the others; each line keeps its order (push: at its end, unshift: at its front).
 */
class InputQueue {
  private readonly state: InEvent[] = [];
  private readonly other: InEvent[] = [];

  get length(): number {
    return this.state.length + this.other.length;
  }

  private lineOf(ev: InEvent): InEvent[] {
    return STATE_KINDS.has(ev.k) ? this.state : this.other;
  }

  push(...evs: InEvent[]): void {
    for (const ev of evs) this.lineOf(ev).push(ev);
  }

  unshift(...evs: InEvent[]): void {
    for (let i = evs.length - 1; i >= 0; i--) this.lineOf(evs[i]!).unshift(evs[i]!);
  }

  /** The next input to handle. */
  shift(): InEvent | undefined {
    return this.state.shift() ?? this.other.shift();
  }

  some(pred: (ev: InEvent) => boolean): boolean {
    return this.state.some(pred) || this.other.some(pred);
  }

  /** Takes out the queued firing of a timer, if there is one. */
  takeTimer(name: string): Extract<InEvent, { k: 'timer' }> | undefined {
    const i = this.other.findIndex((ev) => ev.k === 'timer' && ev.name === name);
    return i < 0 ? undefined : (this.other.splice(i, 1)[0] as Extract<InEvent, { k: 'timer' }>);
  }
}

/** How long the broker may refuse the token before the run halts (LiveOptions.tokenRefusedTimeoutMs). */
export const DEFAULT_TOKEN_REFUSED_MS = 60_000;
/** Attempts at fetching a range of bars before the series is left with a gap (said in the log). */
const BAR_FETCH_ATTEMPTS = 3;
/** The tables a run subscribes to, and the models of its start-up snapshot (a restart adds ClosedPosition). */
export const LIVE_TABLES: ModelName[] = ['Order', 'OpenPosition', 'ClosedPosition', 'Account'];
export const LIVE_SNAPSHOT: ModelName[] = ['Account', 'OpenPosition', 'Order'];
/** The time frame of a strategy that names none. */
export const LIVE_DEFAULT_TIMEFRAME: Period = 'm1';
export class LiveEngine {
  private readonly o: LiveOptions;
  private readonly log: StrategyLogger;
  private readonly guard: SafetyGuard;
  private readonly protections: Protections;
  /** The operator's actions and the lock on new entries they set (the kill switch). */
  private readonly controls: RunControls;
  private readonly ctx: StrategyContext<Record<string, unknown>>;
  private readonly timeframes: Period[];
  private now = 0;
  private readonly queue = new InputQueue();
  private pumping: Promise<void> | undefined;
  private replaying = false;
  private answers = new Map<number, JournalLine>();
  private orphanSignal: (() => void) | undefined;
  private intentSeq = 0;
  /** Intents journaled and not answered yet: no checkpoint is taken while there is one. */
  private unanswered = 0;
  readonly intents: LiveIntent[] = [];
  /** The journal's first line, which a compacted journal starts with too. */
  private runLine: JournalLine | undefined;
  /** Checkpoints are taken: the strategy has the hooks, and its saveState has not failed in this run. */
  private checkpointing: boolean;
  private readonly quotes = new Map<string, Tick>();
  /** What the run knows of the broker and has told the strategy: what reconciling reads and writes. */
  private readonly book = new RunBook();
  /** The strategy's onTrade, onOrder and onReconnect as hooks of this run (undefined: it has not got the hook). */
  private readonly hooks: ReconcileHooks;
  /** What the code that reconciles (../reconcile/) needs of this run besides its book. */
  private readonly reconciling: SnapshotRun;
  /** What settling a lost call reads of this run (../reconcile/lost-settlement.ts). */
  private readonly lostCallRun: LostCallRun;
  private readonly history = new BarHistory();
  private readonly liveBars: LiveBars;
  private readonly timers = new Map<string, { every: number; next?: number; handle?: unknown }>();
  private readonly clock: Clock;
  private readonly closed: ClosedTrade[] = [];
  /** When the broker stream dropped (reconnects report how long it was away). */
  private disconnectedAt: number | undefined;
  /** What the run's view shows of its connection: since when it is up, and the last reconnect once reconciled. */
  private connectedSince: number | undefined;
  private lastReconnect: RunView['connection']['lastReconnect'];
  private startedAt: number | undefined;
  private lastCheckpointAt: number | undefined;
  private equity: EquityPoint[] = [];
  private startBalance: number | undefined;
  private started = false;
  private stopped = false;
  private finished = false;
  private resumed = false;
  private error: LiveResult['error'];
  private done!: Promise<void>;
  private finish!: () => void;
  private listeners: (() => void)[] = [];

  constructor(opts: LiveOptions) {
    this.o = opts;
    this.clock = opts.clock ?? systemClock;
    this.log = opts.logger ?? silentLogger;
    const s = opts.strategy;
    this.hooks = {
      onTrade: (e) => (s.onTrade ? this.call('onTrade', () => s.onTrade!.call(s, this.ctx, e)) : undefined),
      onOrder: (e) => (s.onOrder ? this.call('onOrder', () => s.onOrder!.call(s, this.ctx, e)) : undefined),
      onReconnect: (e) => (s.onReconnect ? this.call('onReconnect', () => s.onReconnect!.call(s, this.ctx, e)) : undefined),
    };
    this.reconciling = {
      book: this.book,
      log: this.log,
      now: () => this.now,
      journal: (line) => this.journalLine(line, true, true),
      started: () => this.started,
      setAccount: (r) => this.setAccount(r),
      recordClosed: (id, r, reason, closeTime) => this.recordClosed(id, r, reason, closeTime),
      announceTrade: (id) => this.announceTrade(id),
      announceOrder: (id) => this.announceOrder(id),
      reconnected: (info) => {
        this.lastReconnect = { at: this.wallNow(), downMs: info.downMs, closed: info.closed, opened: info.opened };
        this.tell('reconnected', { ...info, ts: undefined });
      },
      ...this.hooks,
    };
    this.lostCallRun = {
      log: this.log,
      book: this.book,
      snapshot: (models) => {
        const get = () => this.o.client!.getModel(models);
        const l = this.o.limiter;
        return l ? l.withIntent({ ttlMs: this.o.lostSnapshotTtlMs ?? LOST_SNAPSHOT_TTL_MS, priority: 1 }, get) : get();
      },
      now: () => this.now,
    };
    const run = runProtections(opts.strategy.protections, opts.protections, opts.safety);
    this.guard = new SafetyGuard(run.safety);
    this.protections = new Protections(run.rules, (l) => {
      if (this.replaying) return;
      this.log.warn(`protection ${l.rule} locks new entries${l.symbol ? ` on ${l.symbol}` : ''} until ${new Date(l.until).toISOString()}: ${l.reason}`);
      this.tell('protection_locked', { ...l, from: new Date(l.from).toISOString(), until: new Date(l.until).toISOString() });
    });
    this.timeframes = opts.strategy.timeframes?.length ? [...opts.strategy.timeframes] : [LIVE_DEFAULT_TIMEFRAME];
    this.liveBars = new LiveBars(this.timeframes);
    this.controls = new RunControls({
      now: () => this.wallNow(),
      phase: () => this.phase(),
      replaying: () => this.replaying,
      journal: (line) => this.journalLine(line, true),
      info: (message) => this.log.info(message),
      trade: (id) => {
        const r = this.book.broker.positions.get(id);
        if (r === undefined) return undefined;
        return this.book.broker.ownPositions().includes(r) ? { amountK: numOf(r.amountK) } : 'foreign';
      },
      ownTradeIds: () => this.book.broker.ownPositions().map((r) => String(r.tradeId)),
      closing: (ids) => {
        for (const id of ids === 'all' ? this.book.broker.ownPositions().map((r) => String(r.tradeId)) : ids) this.book.broker.closeReasons.set(id, 'operator');
      },
      closeTrade: (id, amountK) => this.first(() => this.o.client!.closeTrade({ tradeId: id, amount: amountK })).then(() => undefined),
      flatten: () => this.flatten('operator'),
      stop: () => this.stop(),
    });
    this.ctx = this.makeContext();
    this.checkpointing = hasStateHooks(opts.strategy);
    this.done = new Promise((r) => (this.finish = r));
  }

  private wallNow(): number {
    return this.clock.nowMs();
  }

  private get strategyName(): string {
    return this.o.strategy.name ?? 'strategy';
  }

  // ------------------------------------------------------------ state views

  accountInfo(): AccountInfo {
    return this.account((equity) => this.guard.dayPL(this.now, equity));
  }

  private account(dayPL: (equity: number) => number): AccountInfo {
    const a = this.book.broker.account ?? {};
    const equity = numOf(a.equity);
    return {
      accountId: String(a.accountId ?? ''),
      currency: this.o.currency ?? 'USD',
      balance: numOf(a.balance),
      equity,
      usedMargin: numOf(a.usdMr),
      usableMargin: numOf(a.usableMargin),
      dayPL: dayPL(equity),
    };
  }

  /**
   * The run's state as it is now (control API, dashboard): no broker call, and nothing of the run
   * changes (the day's P/L is peeked, not rolled). Its lists are the run's own, to read at once.
   */
  view(): RunView {
    const account = this.account((equity) => this.guard.peekDayPL(this.now, equity));
    const b = this.book.broker;
    const own = b.ownPositions().map((r) => b.position(r));
    const ownIds = new Set(own.map((p) => p.tradeId));
    const orders = b.ownEntryOrders().map((r) => b.pending(r));
    const orderIds = new Set(orders.map((o) => o.orderId));
    const realised = this.closed.reduce((sum, t) => sum + t.pl, 0);
    return {
      mode: this.o.mode,
      strategy: this.strategyName,
      now: this.wallNow(),
      startedAt: this.startedAt,
      phase: this.phase(),
      resumed: this.resumed,
      decisions: this.intentSeq,
      connection: {
        state: this.startedAt === undefined ? 'connecting' : this.disconnectedAt !== undefined ? 'disconnected' : 'connected',
        since: this.disconnectedAt ?? this.connectedSince,
        lastReconnect: this.lastReconnect,
      },
      error: this.error === undefined ? undefined : { message: this.error.message, hook: this.error.hook },
      account,
      positions: own,
      orders,
      foreign: {
        positions: b.ownPositions(true).filter((r) => !ownIds.has(String(r.tradeId))).map((r) => b.position(r)),
        orders: b.ownEntryOrders(true).filter((r) => !orderIds.has(String(r.orderId))).map((r) => b.pending(r)),
      },
      closed: this.closed,
      equity: this.equity,
      pnl: { realised, unrealised: own.reduce((sum, p) => sum + p.pl, 0), day: account.dayPL, currency: account.currency },
      protections: { limits: { ...this.guard.limits }, rules: this.protections.rules, locks: [...this.controls.locks(), ...this.guard.locks(this.now), ...this.protections.locks(this.wallNow())] },
      lastCheckpointAt: this.lastCheckpointAt,
    };
  }

  /** An event for the outside (run-events.ts): not in a replay, and nothing it does reaches the run. */
  private tell(kind: RunEventKind, details: Record<string, unknown>): void {
    if (this.replaying || !this.o.events) return;
    try {
      this.o.events(kind, details);
    } catch {
      // a listener's failure is its own
    }
  }

  private phase(): RunView['phase'] {
    return this.finished ? 'ended' : this.stopped || this.error !== undefined ? 'ending' : this.startedAt === undefined ? 'starting' : 'running';
  }

  /**
   * An operator's action (the control API): checked, journaled, then carried out; ActionRefused
   * (nothing sent, nothing journaled) when it cannot apply (run-controls.ts).
   */
  async act(a: OperatorAction): Promise<ActionDone> {
    const done = await this.controls.act(a);
    this.tell('operator', { ...a, ...done });
    return done;
  }

  // ------------------------------------------------------------ the strategy context

  private makeContext(): StrategyContext<Record<string, unknown>> {
    const s = this.o.strategy;
    return liveContext({
      mode: this.o.mode,
      strategy: s,
      params: { ...(s.params ?? {}), ...(this.o.params ?? {}) },
      log: this.log,
      now: () => this.now,
      quote: (symbol) => this.quotes.get(symbol),
      history: this.history,
      broker: this.book.broker,
      accountInfo: () => this.accountInfo(),
      op: <T>(name: string, args: unknown, check: () => void, send: (c: FxcmClient) => Promise<T>, ttlMs?: number) => this.op<T>(name, args, check, send, ttlMs),
      check: this.preTradeCheck(),
      setTimer: (name, everyMs) => {
        this.clearTimer(name);
        this.timers.set(name, { every: everyMs });
        if (!this.replaying && !this.stopped) this.armTimer(name);
      },
      clearTimer: (name) => this.clearTimer(name),
    });
  }

  /** Arms a timer on the run's clock: due every `every` ms from now (without drift). */
  private armTimer(name: string): void {
    const t = this.timers.get(name);
    if (!t || t.handle !== undefined) return;
    t.next = this.wallNow() + t.every;
    const due = () => {
      if (this.timers.get(name) !== t) return;
      t.next! += t.every;
      t.handle = this.clock.setTimeout(due, Math.max(0, t.next! - this.wallNow()));
      this.timerDue(name);
    };
    t.handle = this.clock.setTimeout(due, t.every);
  }

  /**
   * A timer fell due. When its last firing is still queued (a hook has been running since), the
   * two are one firing, at the later time and behind what arrived meanwhile, with the count.
   */
  private timerDue(name: string): void {
    const queued = this.queue.takeTimer(name);
    const count = queued ? (queued.count ?? 1) + 1 : 1;
    this.enqueue({ k: 'timer', t: this.wallNow(), name, ...(count > 1 ? { count } : {}) });
  }

  private clearTimer(name: string): void {
    const t = this.timers.get(name);
    if (t?.handle !== undefined) this.clock.clearTimeout(t.handle);
    this.timers.delete(name);
  }

  /** The pre-trade check of every mode, on what the runner knows of the account (every trade and entry order of it). */
  private preTradeCheck(): PreTradeCheck {
    const b = this.book.broker;
    return new PreTradeCheck(
      this.guard,
      {
        symbols: this.o.strategy.symbols,
        currency: this.o.currency ?? 'USD',
        leverage: this.o.leverage ?? DEFAULT_LEVERAGE,
        now: () => this.now,
        quote: (symbol) => this.quotes.get(symbol),
        margin: () => (b.account ? this.accountInfo() : undefined),
        positions: (symbol) => [...b.positions.values()].filter((r) => r.currency === symbol).map((r) => ({ isBuy: r.isBuy === true, amount: numOf(r.amountK) })),
        entries: (symbol) => b.ownEntryOrders(true).map((r) => b.pending(r)).filter((o) => o.symbol === symbol),
      },
      this.protections,
    );
  }

  // ------------------------------------------------------------ intents and answers

  private op<T>(name: string, args: unknown, check: () => void, send: (c: FxcmClient) => Promise<T>, ttlMs?: number): Promise<T> {
    const id = ++this.intentSeq;
    const intent: LiveIntent = { id, ts: this.now, op: name, args: journaledValue(args) };
    this.intents.push(intent);
    if (this.replaying) {
      this.journalLine({ k: 'intent', ...intent }, true, true);
      const a = this.answers.get(id);
      if (a) return a.ok ? Promise.resolve(a.value as T) : Promise.reject(errorOf(a.error as JournaledError));
      return new Promise<T>((resolve, reject) => {
        this.book.orphans.push({ id, op: name, args: (intent.args ?? {}) as Record<string, unknown>, resolve: resolve as (v: unknown) => void, reject });
        this.orphanSignal?.();
      });
    }
    this.journalLine({ k: 'intent', ...intent }, true);
    this.unanswered++;
    /** The answer, journaled; what it placed (or, unsettled, its watch) becomes the run's next. */
    const answer = (ok: boolean, v: unknown, settled?: Settlement) => {
      this.unanswered--;
      const t = this.wallNow();
      if (ok) this.journalLine({ k: 'answer', id, ok: true, value: journaledValue(v), ...(settled ? { claims: settled.claims, lost: settled.how } : {}) }, true);
      else this.journalLine({ k: 'answer', id, ok: false, error: journaledError(v as Error), ...(settled?.watch ? { watch: journaledValue(settled.watch) } : {}) }, true);
      const owns: OwnInput[] = settled
        ? [...settled.claims.map((orderId) => ({ k: 'own' as const, t, orderId })), ...(settled.watch ? [{ k: 'own' as const, t, ...settled.watch }] : [])]
        : ok
          ? [claimOf(name, intent.args, v, t)].filter((x) => x !== undefined)
          : [];
      // a delete's record as the broker's push would carry it (the order's fields)
      const pushed = (r: SnapshotRecord): SnapshotRecord => (r.model === 'Order' && r.action === 'D' ? { ...r, rec: { ...(this.book.broker.orders.get(String(r.rec.orderId)) ?? {}), ...r.rec } } : r);
      this.claim(owns, (settled?.records ?? []).map((r) => ({ k: 'table' as const, t, ...pushed(r) })));
      // known from its answer, as a replay knows it from the answer line (before the order's push)
      const orderId = ok ? (v as { orderId?: unknown } | undefined)?.orderId : undefined;
      if (orderId !== undefined) this.book.broker.knownOrderIds.add(String(orderId));
      if (PLACING_OPS.has(name)) {
        if (ok) this.tell('entry_sent', { intent: id, op: name, request: intent.args, ...(orderId !== undefined ? { orderId: String(orderId) } : {}), ...(settled ? { settled: settled.how } : {}) });
        else {
          const err = v as Error & { rule?: string; code?: number };
          this.tell('order_refused', { intent: id, op: name, request: intent.args, error: { name: err.name, message: err.message, ...(err.rule !== undefined ? { rule: err.rule } : {}), ...(err.code !== undefined ? { code: err.code } : {}) } });
        }
      }
    };
    const placing = PLACING_OPS.has(name);
    try {
      if (this.stopped && this.finished) throw new OrderRejectedError('the run has stopped');
      if (placing) {
        const locked = this.controls.entryRefusal();
        if (locked) throw locked;
      }
      check();
    } catch (e) {
      answer(false, e);
      return Promise.reject(e);
    }
    const client = this.o.client;
    if (!client) {
      const e = new Error('no broker connection');
      answer(false, e);
      return Promise.reject(e);
    }
    // what the broker pushes from now on settles the call if its answer is lost
    const mark = SETTLED_OPS.has(name) ? this.book.pushLog.begin() : undefined;
    const lostCtx = this.lostContext(name, intent.args);
    const done = () => {
      if (mark !== undefined) this.book.pushLog.end();
    };
    const run = () => send(client);
    const l = this.o.limiter;
    // the kill switch: an entry waiting for budget when entries are locked is cut, never sent
    const p = l ? l.withIntent({ ttlMs, ...(placing ? { signal: this.controls.entrySignal() } : {}) }, run) : run();
    return p.then(
      (v) => {
        done();
        answer(true, v);
        return v;
      },
      async (e: Error) => {
        if (!answerLost(e)) {
          done();
          answer(false, e);
          throw e;
        }
        const settled = await settleLostCall(this.lostCallRun, intent, e, mark, lostCtx).finally(done);
        if ('error' in settled) {
          answer(false, settled.error, settled);
          throw settled.error;
        }
        answer(true, settled.value, settled);
        return settled.value as T;
      },
    );
  }

  /**
   * What answered order calls created becomes this run's: `own` inputs, handled next (before
   * the pushes and prices already queued) and journaled with them, so a replay claims at the same point.
   */
  private claim(owns: OwnInput[], records: Array<Extract<InEvent, { k: 'table' }>> = []): void {
    if (!owns.length && !records.length) return;
    for (const own of owns) if (own.orderId !== undefined) this.book.answeredOrderIds.add(own.orderId);
    this.queue.unshift(...owns, ...records);
    this.kick();
  }

  /** What a lost answer's settlement needs that its request does not say: the trades a close closes, and their size. */
  private lostContext(op: string, args: unknown): LostContext {
    const a = (args ?? {}) as Record<string, unknown>;
    if (op === 'closeTrade') {
      const before = this.book.broker.positions.has(String(a.tradeId)) ? numOf(this.book.broker.positions.get(String(a.tradeId))!.amountK) : undefined;
      return { tradeIds: [String(a.tradeId)], amountBefore: before, amount: a.amount === undefined ? before : numOf(a.amount) };
    }
    if (op === 'closeAll') return { tradeIds: this.book.broker.ownPositions(a.accountWide === true).filter((r) => a.symbol === undefined || r.currency === a.symbol).map((r) => String(r.tradeId)) };
    return {};
  }



  private journalLine(line: JournalLine, sync = false, skipWhenReplaying = false): void {
    if (skipWhenReplaying && this.replaying) return;
    this.o.journal?.append(line, sync);
  }

  // ------------------------------------------------------------ the event queue

  private enqueue(ev: InEvent): void {
    if (this.finished) return;
    this.queue.push(ev);
    if (!this.replaying) void this.pump();
  }

  private pump(): Promise<void> {
    if (this.pumping) return this.pumping;
    this.pumping = (async () => {
      await null; // the finally below must run after this.pumping is assigned
      try {
        while (this.queue.length && !this.finished) {
          const ev = this.queue.shift()!;
          this.journalLine(ev as unknown as JournalLine, ev.k === 'snapshot' || ev.k === 'start' || ev.k === 'stop');
          await this.handle(ev);
          this.checkpointWhenDue();
        }
      } finally {
        this.pumping = undefined;
      }
    })();
    return this.pumping;
  }

  /** Handles one input; a strategy error flattens and ends the run (an entry refused by a lock does not: errors.ts). */
  private async handle(ev: InEvent): Promise<void> {
    try {
      await this.apply(ev);
    } catch (e) {
      if (isEntryLock(e)) {
        if (!this.replaying) this.log.info(`${(e as StrategyError).hook} ended on an entry refused: ${((e as StrategyError).cause as Error).message}`);
        return;
      }
      await this.fatal(e);
    }
  }

  private async call(hook: string, fn: () => void | Promise<void>): Promise<void> {
    if (this.stopped && hook !== 'onStop') return;
    await runHook(hook, fn, this.o.strategyFile);
  }

  private async fatal(e: unknown): Promise<void> {
    const error = (this.error = runErrorOf(e));
    const what = `strategy error in ${error.hook}: ${error.message}${error.location ? ` (at ${error.location})` : ''}`;
    this.stopped = true;
    if (this.replaying) {
      // A resumed run reconciles with the broker and flattens after the replay (run()).
      this.log.error(`the journal ends with a ${what}`);
    } else {
      this.log.error(`${what}; flattening the run's positions and entry orders`);
      this.tell('strategy_error', { ...error, flattening: true });
      this.journalLine({ k: 'fatal', t: this.now, error: this.error }, true);
      const left = await this.flatten('flatten');
      if (left.length) error.notFlattened = left;
    }
    this.end();
  }

  /**
   * Closes this run's positions and deletes its entry orders (never another run's); runner
   * actions, not strategy intents. Returns what could not be closed or deleted ("trade 12: <why>"),
   * empty when all went.
   */
  async flatten(reason: CloseReason): Promise<string[]> {
    const c = this.o.client;
    if (!c) return [];
    const failed: string[] = [];
    const attempt = (what: string, fn: () => Promise<unknown>) =>
      this.first(fn).catch((e: Error) => {
        failed.push(`${what}: ${e.message}`);
        this.log.error(`flatten: ${what} could not be closed: ${e.message}`);
      });
    const jobs: Promise<unknown>[] = [];
    for (const r of this.book.broker.ownPositions()) {
      const id = String(r.tradeId);
      this.book.broker.closeReasons.set(id, reason);
      jobs.push(attempt(`trade ${id}`, () => c.closeTrade({ tradeId: id, amount: numOf(r.amountK) })));
    }
    for (const r of this.book.broker.ownEntryOrders()) {
      const id = String(r.orderId);
      jobs.push(attempt(`order ${id}`, () => c.deleteOrder(id)));
    }
    await Promise.all(jobs);
    return failed;
  }

  /** A runner's own call (a close, a delete), first in the budget's queue. */
  private first<T>(fn: () => Promise<T>): Promise<T> {
    const l = this.o.limiter;
    return l ? l.withIntent({ priority: 0 }, fn) : fn();
  }

  private async apply(ev: InEvent): Promise<void> {
    // inputs handled out of their arrival order (STATE_KINDS) never take ctx.now() back
    this.now = Math.max(this.now, ev.t);
    const s = this.o.strategy;
    switch (ev.k) {
      case 'snapshot':
        return applySnapshot(this.reconciling, ev);
      case 'own':
        return this.applyOwn(ev);
      case 'history':
        for (const b of this.liveBars.history(ev.bars, ev.t)) this.history.push(b);
        return;
      case 'bars':
        return this.deliverBars(this.liveBars.fetched(ev.fetch, ev.bars));
      case 'gap':
        this.liveBars.discontinuity();
        return;
      case 'control':
        this.controls.replayed(ev);
        return;
      case 'start':
        this.started = true;
        if (!this.replaying) this.armDuration();
        if (s.onStart) await this.call('onStart', () => s.onStart!.call(s, this.ctx));
        return;
      case 'price':
        return this.applyPrice(ev.p, ev.t);
      case 'table':
        return this.applyTable(ev.model, ev.action, ev.rec);
      case 'timer':
        if (this.timers.has(ev.name) && s.onTimer) await this.call('onTimer', () => s.onTimer!.call(s, this.ctx, ev.name, ev.count ?? 1));
        return;
      case 'stop':
        if (this.stopped) return;
        this.stopped = true;
        for (const name of [...this.timers.keys()]) this.clearTimer(name);
        if (s.onStop) await this.call('onStop', () => s.onStop!.call(s, this.ctx));
        return;
    }
  }

  /** onTrade opened for an own trade the strategy has not heard of (once); `closed`: its close record, when it is gone already. */
  private async announceTrade(id: string, closed?: TableRecord): Promise<void> {
    const r = this.book.broker.positions.get(id) ?? closed;
    if (!r || this.book.announcedTrades.has(id) || !this.book.broker.ownTrades.has(id)) return;
    this.book.announcedTrades.add(id);
    const s = this.o.strategy;
    const opened = this.openedEvent(id, r);
    this.tell('filled', { tradeId: id, ...(opened.orderId !== undefined ? { orderId: opened.orderId } : {}), symbol: opened.symbol, isBuy: opened.isBuy, amount: opened.amount, openRate: opened.openRate });
    if (s.onTrade) await this.call('onTrade', () => s.onTrade!.call(s, this.ctx, opened));
  }

  /** onOrder accepted for an own resting entry order the strategy has not heard of (once). */
  private async announceOrder(id: string): Promise<void> {
    const r = this.book.broker.orders.get(id);
    if (!r || this.book.announcedOrders.has(id) || !this.book.broker.ownOrders.has(id)) return;
    this.book.announcedOrders.add(id);
    const s = this.o.strategy;
    const e: OrderEvent = { orderId: id, symbol: String(r.currency ?? ''), isBuy: r.isBuy === true, amount: numOf(r.amountK), kind: 'entry', ts: this.now, status: 'accepted', rate: numOf(r.isBuy ? r.buy : r.sell) };
    if (s.onOrder) await this.call('onOrder', () => s.onOrder!.call(s, this.ctx, e));
  }

  /**
   * An order became this run's: it, and the trades it opened (also one that closed before the
   * claim), are the strategy's. A lost order call's watch (`lost`) claims the order that shows up for it.
   */
  private async applyOwn(ev: OwnInput): Promise<void> {
    for (const orderId of ordersClaimed(this.reconciling, ev)) {
      const trades = this.book.broker.claimOrder(orderId);
      await this.announceOrder(orderId);
      for (const id of trades) await this.announceTrade(id);
      await this.replayUnclaimed('Order', orderId);
      for (const [tradeId, o] of [...this.book.broker.tradeOrders]) if (o === orderId) await this.replayUnclaimed('ClosedPosition', tradeId);
    }
  }

  private setAccount(r: TableRecord): void {
    this.book.broker.account = { ...(this.book.broker.account ?? {}), ...r };
    const bal = numOf(this.book.broker.account.balance);
    const eq = numOf(this.book.broker.account.equity);
    if (this.startBalance === undefined) this.startBalance = bal;
    const last = this.equity[this.equity.length - 1];
    if (!last || last.balance !== bal || last.equity !== eq) {
      if (last && last.ts === this.now) this.equity.pop();
      this.equity.push({ ts: this.now, balance: bal, equity: eq });
    }
    this.protections.equity(this.now, eq);
  }

  private async applyPrice(p: PriceUpdate, t: number): Promise<void> {
    const s = this.o.strategy;
    const [bid, ask] = [numOf(p.Rates[0]), numOf(p.Rates[1])];
    if (!(bid > 0) || !(ask > 0)) return;
    const ts = numOf(p.Updated) || t;
    const tick: Tick = { symbol: p.Symbol, bid, ask, ts };
    this.quotes.set(p.Symbol, tick);
    if (!s.symbols.includes(p.Symbol)) return;
    await this.deliverBars(this.liveBars.tick(p.Symbol, bid, ask, ts));
    if (!this.started) return;
    if (s.onTick) await this.call('onTick', () => s.onTick!.call(s, this.ctx, tick));
  }

  /** Closed bars into the history and onBar (once started); ranges to fetch asked for. */
  private async deliverBars(out: BarsOut): Promise<void> {
    const s = this.o.strategy;
    for (const f of out.fetches) this.fetchBars(f);
    for (const b of out.closed) {
      this.history.push(b);
      if (this.started && s.onBar) await this.call('onBar', () => s.onBar!.call(s, this.ctx, b));
    }
  }

  /**
   * Asks the broker for a range of closed bars (through the limiter); the answer is an input
   * event. A replay has it in the journal; a resumed run asks again for what was not answered.
   */
  private fetchBars(f: BarFetch): void {
    const c = this.o.client;
    if (!c || this.replaying) return;
    const num = Math.min(MAX_CANDLES_PER_REQUEST, (f.toTs - f.fromTs) / PERIOD_SECONDS[f.timeframe] + 1);
    void (async () => {
      let bars: Bar[] = [];
      for (let attempt = 1; attempt <= BAR_FETCH_ATTEMPTS && !this.finished; attempt++) {
        try {
          bars = (await c.getCandles(f.symbol, f.timeframe, { num, from: f.fromTs, to: f.toTs })).map((k) => ({ symbol: f.symbol, timeframe: f.timeframe, ...k }));
          break;
        } catch (e) {
          const range = `${f.symbol} ${f.timeframe} bars from ${new Date(f.fromTs * 1000).toISOString()} to ${new Date(f.toTs * 1000).toISOString()}`;
          if (attempt === BAR_FETCH_ATTEMPTS) this.log.error(`${range} could not be fetched (${errorMessage(e)}): the series has a gap there`);
          else await new Promise((r) => setTimeout(r, 1000 * attempt));
        }
      }
      this.enqueue({ k: 'bars', t: this.wallNow(), fetch: f, bars });
    })();
  }

  /** A table push: the state of the whole account; events for this run's orders and trades only. */
  private async applyTable(model: ModelName, action: TableAction, r: TableRecord): Promise<void> {
    const { onOrder, onTrade } = this.hooks;
    switch (model) {
      case 'Account':
        this.setAccount(r);
        if (this.guard.checkDailyLoss(this.now, numOf(this.book.broker.account?.equity))) {
          this.log.warn('daily loss limit reached: flattening; no new positions until the next UTC day');
          const halt = this.guard.locks(this.now)[0]!;
          this.protections.noteHalt({ rule: 'maxDailyLoss', from: this.now, until: halt.until!, reason: halt.reason });
          if (!this.replaying) {
            const left = await this.flatten('flatten');
            if (left.length) this.log.error(`daily loss flatten FAILED, still open at the broker: ${left.join('; ')}`);
          }
        }
        return;
      case 'OpenPosition': {
        const id = String(r.tradeId);
        if (action === 'D') {
          // gone, closed for a reason its close order told: the protections count it now, not at its close record
          const reason = this.book.broker.ownTrades.has(id) ? this.book.broker.closeReasons.get(id) : undefined;
          if (reason !== undefined) this.protections.closed(String(this.book.broker.positions.get(id)?.currency ?? r.currency ?? ''), reason, this.now, id, true);
          this.book.broker.positions.delete(id);
          return;
        }
        const isNew = !this.book.broker.positions.has(id);
        if (isNew && this.book.closedIds.has(id)) return; // an update older than its close
        this.book.broker.positions.set(id, { ...(this.book.broker.positions.get(id) ?? {}), ...r });
        if (isNew) this.book.broker.openTimes.set(id, this.now);
        if (r.orderId !== undefined && r.orderId !== '') {
          this.book.broker.knownOrderIds.add(String(r.orderId));
          this.book.broker.link(id, String(r.orderId));
        }
        await this.announceTrade(id);
        return;
      }
      case 'ClosedPosition': {
        const id = String(r.tradeId);
        // A trade the restart's reconciliation already counted can still be pushed once.
        if (action !== 'I' || this.book.closedIds.has(id)) return;
        // a part of one of the run's trades, closed under a ticket of its own: counted as the backtest counts it, under the trade's id
        const whole = this.book.broker.ownTrades.has(id) ? undefined : this.partClosedOf(r);
        if (!this.book.broker.ownTrades.has(id) && whole === undefined) return this.book.keepUnclaimedEnd(model, id, r);
        const tradeId = whole ?? id;
        const trade = this.recordClosed(tradeId, r, this.book.broker.closeReasons.get(tradeId) ?? 'broker', this.now, whole !== undefined ? id : undefined);
        await onTrade(closedEvent(trade, this.now));
        return;
      }
      case 'Order': {
        const id = String(r.orderId ?? '');
        if (!id) return;
        this.book.broker.knownOrderIds.add(id);
        if (action === 'I' && !this.book.broker.ownOrders.has(id)) claimWatched(this.reconciling, id, r);
        const kind = this.book.broker.orderKind(r);
        const tradeId = r.tradeId ? String(r.tradeId) : undefined;
        if ((kind === 'market' || kind === 'entry') && tradeId && this.book.broker.link(tradeId, id)) await this.announceTrade(tradeId);
        if ((kind === 'stop' || kind === 'limit') && tradeId) this.book.broker.noteBrokerClose(tradeId, kind);
        if (action !== 'D') {
          if (kind !== 'entry') return;
          this.book.broker.orders.set(id, { ...(this.book.broker.orders.get(id) ?? {}), ...r });
          if (!this.book.broker.ownOrders.has(id) && this.book.broker.takeOcoLeg(this.book.broker.orders.get(id)!)) this.book.broker.claimOrder(id);
          if (action === 'I') await this.announceOrder(id);
          return;
        }
        this.book.broker.orders.delete(id);
        if (kind === 'entry') this.book.deletedOrders.add(id);
        if (!this.book.broker.ownOrders.has(id)) return this.book.keepUnclaimedEnd(model, id, r);
        const base = { orderId: id, symbol: String(r.currency ?? ''), isBuy: r.isBuy === true, amount: numOf(r.amountK), kind, ts: this.now };
        const status = numOf(r.status);
        if (status === 9 || (tradeId && status !== 3 && status !== 4)) await onOrder({ ...base, status: 'filled', tradeId, rate: numOf(r.isBuy ? r.buy : r.sell) || undefined });
        else if (status === 4) await onOrder({ ...base, status: 'rejected', reason: 'requoted' });
        else await onOrder({ ...base, status: 'cancelled' });
        return;
      }
      default:
        return;
    }
  }

  /** The end of a trade or order that came before this run claimed it, handled now. */
  private async replayUnclaimed(model: ModelName, id: string): Promise<void> {
    const end = this.book.takeUnclaimedEnd(model, id);
    if (!end) return;
    if (model === 'ClosedPosition') await this.announceTrade(id, end.rec);
    await this.applyTable(end.model, end.model === 'Order' ? 'D' : 'I', end.rec);
  }

  /**
   * The run's open trade a ClosedPosition of another ticket is a part of (the broker closes part of
   * a trade under a new trade id): the same symbol, side, open rate and open time.
   */
  private partClosedOf(r: TableRecord): string | undefined {
    const open = this.book.broker.ownPositions().find((p) => p.currency === r.currency && p.isBuy === r.isBuy && numOf(p.open) === numOf(r.open) && p.time === r.openTime);
    return open === undefined ? undefined : String(open.tradeId);
  }

  /** A closed trade (or part of one) for the results, from the broker's ClosedPosition record. */
  private recordClosed(id: string, r: TableRecord, reason: CloseReason, closeTime: number, partTicket?: string): ClosedTrade {
    const commission = numOf(r.com);
    const gross = numOf(r.grossPL);
    const rollover = numOf(r.roll);
    const trade: ClosedTrade = {
      tradeId: id,
      symbol: String(r.currency ?? ''),
      isBuy: r.isBuy === true,
      amount: numOf(r.amountK),
      openRate: numOf(r.open),
      closeRate: numOf(r.close),
      openTime: this.book.broker.openTimes.get(id) ?? brokerTimeMs(r.openTime) ?? closeTime,
      closeTime,
      plPips: numOf(r.visiblePL),
      pl: gross + rollover - commission,
      grossPL: gross,
      commission,
      rollover,
      reason,
    };
    this.closed.push(trade);
    this.tell('exit', { ...trade });
    this.protections.closed(trade.symbol, reason, closeTime, partTicket === undefined ? id : undefined);
    // a part closed: its ticket is done, the trade is still open
    this.book.closedIds.add(partTicket ?? id);
    this.book.broker.closeReasons.delete(id); // said in the trade; a checkpoint keeps the open trades' only
    return trade;
  }

  private openedEvent(id: string, r: TableRecord): TradeEvent {
    const p = this.book.broker.position(r);
    const orderId = r.orderId !== undefined && r.orderId !== '' ? String(r.orderId) : undefined;
    return { kind: 'opened', tradeId: id, ...(orderId !== undefined ? { orderId } : {}), symbol: p.symbol, isBuy: p.isBuy, amount: p.amount, openRate: p.openRate, ts: this.now };
  }

  // ------------------------------------------------------------ checkpoints

  /**
   * Between two inputs, with every intent answered and claimed, once the journal has grown by its bound since
   * its checkpoint: a new checkpoint, and the journal cut to it. A saveState that throws or
   * returns what JSON cannot give back is logged and ends the checkpoints of this run (the journal
   * keeps growing and still resumes), rather than the run.
   */
  private checkpointWhenDue(): void {
    const j = this.o.journal;
    if (!j || !this.checkpointing || !this.runLine || this.replaying || !this.started || this.stopped || this.finished || this.unanswered > 0) return;
    if (j.bytesSinceCheckpoint < (this.o.journalMaxBytes ?? DEFAULT_JOURNAL_MAX_BYTES)) return;
    // an answered order call's claim is still queued: its answer must not leave the journal before it
    if (this.queue.some((ev) => ev.k === 'own')) return;
    let line: CheckpointLine;
    try {
      line = this.checkpoint();
    } catch (e) {
      this.checkpointing = false;
      const at = this.o.strategyFile ? scriptLocation(e, this.o.strategyFile) : undefined;
      this.log.error(`${(e as Error)?.message ?? String(e)}${at ? ` (at ${at})` : ''}; the journal is not cut to checkpoints for the rest of this run (a resume replays it from its last one)`);
      return;
    }
    try {
      j.compact([this.runLine, line]);
      this.lastCheckpointAt = this.wallNow();
    } catch (e) {
      // the journal is the old one, whole, and still written to: the run loses only its bound
      this.checkpointing = false;
      this.log.error(`the journal could not be cut to a checkpoint: ${(e as Error)?.message ?? String(e)}; it keeps growing for the rest of this run (a resume replays it whole)`);
      return;
    }
    // the run goes on from what the checkpoint holds: the thinned curve; the intents before it
    // are in the previous segment only, as in a resumed run
    this.equity = line.engine.equity;
    this.intents.splice(0);
  }

  /**
   * What a checkpoint taken now holds: the strategy's saveState and the runner's state (its equity
   * curve thinned). Throws what saveState throws, or an error naming what JSON cannot give back.
   */
  checkpoint(): CheckpointLine {
    const s = this.o.strategy;
    if (!hasStateHooks(s)) throw new Error(`${this.strategyName} has no saveState and restoreState`);
    const state = s.saveState!.call(s, this.ctx);
    const problem = state instanceof Promise ? 'it is a promise (saveState returns the state itself)' : jsonProblem(state);
    if (problem) throw new Error(`saveState returned what JSON cannot give back: ${problem}`);
    return { k: 'checkpoint', t: this.now, v: CHECKPOINT_VERSION, intents: this.intentSeq, strategy: state, engine: this.savedEngine() };
  }

  private savedEngine(): SavedEngine {
    return {
      now: this.now,
      started: this.started,
      startBalance: this.startBalance ?? null,
      quotes: [...this.quotes],
      broker: this.book.broker.saved(),
      history: this.history.saved(),
      liveBars: this.liveBars.saved(),
      safety: this.guard.counters(),
      timers: [...this.timers].map(([name, t]): [string, number] => [name, t.every]),
      closed: this.closed,
      equity: thinEquity(this.equity),
      announcedTrades: [...this.book.announcedTrades],
      announcedOrders: [...this.book.announcedOrders],
      unclaimedEnds: [...this.book.unclaimedEnds],
      deletedOrders: [...this.book.deletedOrders],
      ...(this.controls.saved() ? { entryLock: this.controls.saved() } : {}),
      protections: this.protections.saved(),
    };
  }

  /** The runner's state and the strategy's from a checkpoint, before the lines after it are replayed. */
  private async restore(c: CheckpointLine): Promise<void> {
    const s = this.o.strategy;
    if (!hasStateHooks(s)) throw new Error(`the journal starts at a checkpoint, which only a strategy with saveState and restoreState can go on from: ${this.strategyName} does not have them`);
    const e = c.engine;
    this.intentSeq = c.intents;
    this.now = e.now;
    this.started = e.started;
    this.startBalance = e.startBalance ?? undefined;
    for (const [symbol, tick] of e.quotes) this.quotes.set(symbol, tick);
    this.book.broker.restore(e.broker);
    this.history.restore(e.history);
    this.liveBars.restore(e.liveBars);
    this.guard.restoreCounters(e.safety);
    for (const [name, every] of e.timers) this.timers.set(name, { every });
    for (const t of e.closed) {
      this.closed.push(t);
      this.book.closedIds.add(t.tradeId);
    }
    this.equity = e.equity;
    for (const id of e.announcedTrades) this.book.announcedTrades.add(id);
    for (const id of e.announcedOrders) this.book.announcedOrders.add(id);
    for (const [k, end] of e.unclaimedEnds) this.book.unclaimedEnds.set(k, end);
    for (const id of e.deletedOrders) this.book.deletedOrders.add(id);
    this.controls.restore(e.entryLock);
    this.protections.restore(e.protections);
    try {
      await runHook('restoreState', () => s.restoreState!.call(s, this.ctx, c.strategy), this.o.strategyFile);
    } catch (err) {
      // as a hook that throws during a replay: the resumed run reconciles and flattens
      this.error = runErrorOf(err);
      this.stopped = true;
      this.log.error(`strategy error in restoreState: ${this.error.message}${this.error.location ? ` (at ${this.error.location})` : ''}; the run cannot go on from its checkpoint`);
      this.end();
    }
  }

  // ------------------------------------------------------------ replay / catch-up

  /**
   * Feeds recorded inputs and answers to the strategy (no broker calls), from the last checkpoint
   * when there is one. Returns the promise of a hook still waiting for an answer the journal does
   * not have (the process died mid-call).
   */
  private async replayLines(recorded: JournalLine[]): Promise<{ pending: Promise<void> } | undefined> {
    this.replaying = true;
    this.runLine = recorded.find((l) => l.k === 'run');
    const at = lastCheckpoint(recorded);
    if (at >= 0) await this.restore(recorded[at] as CheckpointLine);
    const lines = at >= 0 ? recorded.slice(at + 1) : recorded;
    for (const l of lines) if (l.k === 'answer' && typeof l.id === 'number') this.answers.set(l.id, l);
    for (const l of lines) if (l.k === 'answer' && (l.value as { orderId?: string } | undefined)?.orderId) this.book.broker.knownOrderIds.add(String((l.value as { orderId: string }).orderId));
    for (const l of lines) if (l.k === 'answer' && Array.isArray(l.claims)) for (const id of l.claims) this.book.broker.knownOrderIds.add(String(id));
    this.book.unclaimed = unclaimedOrderCalls(lines, this.wallNow());
    const events = lines.filter((l) => IN_KINDS.has(l.k));
    for (let i = 0; i < events.length; i++) {
      const ev = events[i] as unknown as InEvent;
      if (this.error) {
        // the strategy failed (a hook, or restoreState): no hook runs any more, but what the run
        // owns and holds still follows the journal, so that the flatten after it misses nothing
        await this.apply(ev).catch(() => undefined);
        continue;
      }
      const orphaned = new Promise<'orphan'>((r) => (this.orphanSignal = () => r('orphan')));
      const p = this.handle(ev);
      const r = await Promise.race([p.then(() => 'done' as const), orphaned]);
      this.orphanSignal = undefined;
      if (r === 'orphan') {
        if (i < events.length - 1) this.log.warn(`journal: ${events.length - 1 - i} events after an unanswered intent were not replayed`);
        return { pending: p };
      }
    }
    return undefined;
  }

  // ------------------------------------------------------------ running

  /** Stops the run (onStop, then the result): from a signal, a timer or a test. */
  stop(): void {
    if (this.stopped || this.finished || this.stopQueued) return;
    this.stopQueued = true;
    this.controls.stopping();
    this.enqueue({ k: 'stop', t: this.wallNow() });
    void (this.pumping ?? Promise.resolve()).then(() => this.pump()).then(() => this.end());
  }

  private end(): void {
    if (this.finished) return;
    this.finished = true;
    for (const name of [...this.timers.keys()]) this.clearTimer(name);
    this.finish();
  }

  private result(): LiveResult {
    return {
      strategy: this.strategyName,
      mode: this.o.mode,
      currency: this.o.currency ?? 'USD',
      startBalance: this.startBalance ?? 0,
      trades: this.closed,
      equity: this.equity,
      intents: this.intents,
      decisions: this.intentSeq,
      resumed: this.resumed,
      error: this.error,
      ...(this.halted ? { halted: this.halted } : {}),
      ...(this.protections.history.length ? { locks: this.protections.history } : {}),
      ...(unsettledCalls(this.book.broker).length ? { unsettled: unsettledCalls(this.book.broker) } : {}),
      leftOpen: this.o.mode === 'replay' ? undefined : { positions: this.book.broker.ownPositions().map((r) => this.book.broker.position(r)), orders: this.book.broker.ownEntryOrders().map((r) => this.book.broker.pending(r)) },
    };
  }

  /** Replay mode: the recorded run, no broker. */
  async replay(): Promise<LiveResult> {
    const pending = await this.replayLines(this.o.recorded ?? []);
    if (pending) this.log.warn('the journal ends with an unanswered intent');
    this.finished = true;
    return this.result();
  }

  /**
   * Paper/live: connect is the caller's; this subscribes, (re)builds the state and runs until stop.
   * A journal whose run ended cleanly is refused (JournalFinishedError). A journal whose run was
   * ending when it was killed (in onStop, or after a strategy error) is finished, not continued:
   * reconcile with the broker, let onStop complete, and after an error flatten what is still open.
   */
  async run(): Promise<LiveResult> {
    const c = this.o.client;
    if (!c) throw new Error('paper/live needs a broker client');
    const s = this.o.strategy;
    if (this.o.journal && !this.checkpointing) {
      this.log.warn(`${this.strategyName} has no saveState and restoreState hooks: its journal is never cut to a checkpoint (it grows with every tick, some 14 MB an hour) and a resume replays all of it (docs/strategy-guide.md)`);
    }
    let pendingHook: Promise<void> | undefined;
    const recorded = this.o.recorded ?? [];
    if (recorded.length) {
      const stoppedAt = finishedRunOf(recorded);
      if (stoppedAt !== undefined) throw new JournalFinishedError(stoppedAt);
      this.resumed = true;
      pendingHook = (await this.replayLines(recorded))?.pending;
      this.replaying = false;
    }
    const ending = this.stopped || this.error !== undefined;
    const recordedError = this.error !== undefined;
    // pushes are queued from now on and handled after the snapshot
    const onPrice = (p: PriceUpdate) => this.queue.push({ k: 'price', t: this.wallNow(), p });
    const onTable = (model: ModelName, action: TableAction, rec: TableRecord) => {
      if (!LIVE_TABLES.includes(model)) return;
      this.book.pushLog.note(model, action, rec);
      this.queue.push({ k: 'table', t: this.wallNow(), model, action, rec: { ...rec } });
    };
    const kick = (this.kick = () => {
      if (!this.holding) void (ending ? this.pumpStateOnly() : this.pump());
    });
    const price = (p: PriceUpdate) => (onPrice(p), kick());
    const table = (m: ModelName, a: TableAction, r: TableRecord) => (onTable(m, a, r), kick());
    // ticks are missed until the stream is back: the bars across it come from the broker
    const gap = () => (this.queue.push({ k: 'gap', t: this.wallNow() }), kick());
    c.on('price', price);
    c.on('table', table);
    // A dropped stream: the connection reconnects, resubscribes and takes a snapshot, which
    // reconciles like a resume's (journaled, logged, told to the strategy).
    // A silent outage (no close, the heartbeat unanswered) began when the stream last heard anything.
    const down = (reason: string, silentMs = 0) => {
      this.disconnectedAt ??= this.wallNow() - silentMs;
      this.connectedSince = undefined;
      const silent = silentMs >= 1000 ? `, nothing heard from it for ${(silentMs / 1000).toFixed(1)} s` : '';
      this.log.warn(`broker connection lost (${reason}${silent}): reconnecting; trades closed meanwhile are reconciled when it is back`);
      this.journalLine({ k: 'disconnected', t: this.wallNow(), reason, ...(silentMs ? { silentMs } : {}) }, true);
      this.tell('disconnected', { reason, ...(silentMs ? { silentMs } : {}) });
    };
    // A refused token is said as such; refused for tokenRefusedTimeoutMs, the run halts (resumable).
    const refusedFor = this.o.tokenRefusedTimeoutMs ?? DEFAULT_TOKEN_REFUSED_MS;
    const refused = (e: Error) => {
      this.log.error(
        `the broker refused the token (${e.message}): it is revoked, expired or not this account's, or another session took it over; ` +
          `retrying, and stopping the run${this.o.journal ? ' (resumable with the same journal)' : ''} if it is still refused in ${(refusedFor / 1000).toFixed(0)} s`,
      );
      this.journalLine({ k: 'tokenRefused', t: this.wallNow(), error: e.message }, true);
      if (this.tokenTimer === undefined) this.tokenTimer = this.clock.setTimeout(() => this.halt('token', `the broker refused the token for ${(refusedFor / 1000).toFixed(0)} s (${e.message})`), refusedFor);
    };
    const accepted = () => {
      if (this.tokenTimer === undefined) return;
      this.clock.clearTimeout(this.tokenTimer);
      this.tokenTimer = undefined;
      this.log.info('the broker accepts the token again');
    };
    c.on('tokenRefused', refused);
    c.on('tokenAccepted', accepted);
    this.listeners.push(() => c.off('tokenRefused', refused), () => c.off('tokenAccepted', accepted));
    const reconciled = (snap: Snapshot) => {
      const downMs = this.disconnectedAt === undefined ? undefined : this.wallNow() - this.disconnectedAt;
      this.disconnectedAt = undefined;
      this.connectedSince = this.wallNow();
      this.queue.push({ k: 'snapshot', t: this.wallNow(), snap, reason: 'reconnect', ...(downMs !== undefined ? { downMs } : {}) });
      kick();
    };
    const gaveUp = (e: Error) => {
      this.log.error(`broker connection lost for good: ${e.message}; stopping`);
      this.stop();
    };
    c.on('disconnected', down);
    c.on('reconciled', reconciled);
    c.on('reconnectFailed', gaveUp);
    this.listeners.push(() => c.off('disconnected', down), () => c.off('reconciled', reconciled), () => c.off('reconnectFailed', gaveUp));
    c.on('disconnected', gap);
    this.listeners.push(() => c.off('price', price), () => c.off('table', table), () => c.off('disconnected', gap));
    this.holding = true;
    try {
      await c.subscribeTables(LIVE_TABLES);
      // A restart also asks for the trades closed while it was away (their close and P/L).
      const snap = await c.getModel(this.resumed ? [...LIVE_SNAPSHOT, 'ClosedPosition'] : LIVE_SNAPSHOT);
      // Prices before the history, so no bar falls between the two (bars.ts).
      if (!ending) await c.subscribePrices(s.symbols);
      if (this.resumed) {
        this.journalLine({ k: 'resume', t: this.wallNow() }, true);
        const claims = resumeClaims(this.reconciling, snap, () => this.wallNow());
        if (ending) {
          this.queue.unshift(...claims);
          // The broker's state before the rest of onStop runs (it may close what is still open).
          this.journalLine({ k: 'snapshot', t: this.wallNow(), snap }, true);
          this.now = this.wallNow();
          await applySnapshot(this.reconciling, { snap, reason: 'resume' });
          await this.pumpStateOnly(); // the claims of settled intents, before the flatten
        }
        if (pendingHook) await pendingHook;
        // the claims before the reconciliation: onReconnect counts what the run holds
        if (!ending) this.queue.unshift({ k: 'gap', t: this.wallNow() }, ...claims, { k: 'snapshot', t: this.wallNow(), snap, reason: 'resume' });
      } else {
        this.runLine = { k: 'run', t: this.wallNow(), strategy: this.strategyName, mode: this.o.mode, symbols: s.symbols, timeframes: this.timeframes, params: journaledValue(this.ctx.params) };
        this.journalLine(this.runLine, true);
        const head: InEvent[] = [{ k: 'snapshot', t: this.wallNow(), snap, reason: 'start' }];
        if (s.warmup && s.warmup > 0) {
          const bars: Bar[] = [];
          for (const sym of s.symbols) {
            for (const tf of this.timeframes) {
              // one more: the broker's last candle is usually the one still open (not taken)
              const cs = await c.getCandles(sym, tf, { num: s.warmup + 1 });
              for (const k of cs) bars.push({ symbol: sym, timeframe: tf, ...k });
            }
          }
          head.push({ k: 'history', t: this.wallNow(), bars });
        }
        head.push({ k: 'start', t: this.wallNow() });
        this.queue.unshift(...head);
      }
    } catch (e) {
      this.holding = false;
      this.cleanup();
      throw e;
    }
    this.holding = false;
    for (const f of this.liveBars.inFlight()) this.fetchBars(f);
    this.startedAt = this.connectedSince = this.wallNow();
    this.o.onRunning?.();
    if (ending) await this.finishEndingRun(recordedError);
    else {
      for (const name of this.timers.keys()) this.armTimer(name);
      void this.pump();
      if (this.started) this.armDuration(); // resumed: onStart ran in the first run
      if (this.controls.stopAsked) this.stop(); // the run resumed was asked to stop and did not get to
      await this.done;
      if (this.durationTimer !== undefined) this.clock.clearTimeout(this.durationTimer);
    }
    // closes sent by onStop / the flatten: let their pushes arrive for the report (bounded)
    const until = Date.now() + 2000;
    while (Date.now() < until && (this.book.broker.closeReasonsPending() || this.pumping)) {
      await new Promise((r) => setTimeout(r, 20));
      if (!this.pumping && this.queue.length) void this.pumpStateOnly();
    }
    this.cleanup();
    return this.result();
  }

  /**
   * The end of a run that was killed while ending (its snapshot is applied): after the journal's
   * strategy error, the flatten it may not have finished.
   */
  private async finishEndingRun(recordedError: boolean): Promise<void> {
    const error = this.error;
    if (error && recordedError) {
      const [positions, orders] = [this.book.broker.ownPositions().length, this.book.broker.ownEntryOrders().length];
      this.log.warn(positions + orders ? `reconciling: ${positions} positions and ${orders} entry orders of this run are still open at the broker; flattening` : 'reconciling: nothing of this run is open at the broker');
      const left = await this.flatten('flatten');
      error.notFlattened = left.length ? left : undefined;
    }
    this.end();
  }

  private holding = false;
  /** stop() was called: its input is queued (a second call queues nothing). */
  private stopQueued = false;
  private durationTimer: unknown;
  /** Armed while the broker refuses the token: halts the run when it fires. */
  private tokenTimer: unknown;
  private halted: LiveResult['halted'];

  /**
   * Ends a run the broker no longer lets go on (the token refused for tokenRefusedTimeoutMs): no
   * more hooks, no onStop (its calls would be refused too), and its journal stays resumable.
   */
  private halt(reason: 'token', message: string): void {
    this.tokenTimer = undefined;
    if (this.finished) return;
    this.halted = { reason, message };
    this.log.error(`${message}: stopping the run; what it holds stays open at the broker${this.o.journal ? ', and a run with the same journal goes on from here' : ''}`);
    this.journalLine({ k: 'halted', t: this.wallNow(), reason, message }, true);
    this.stopped = true;
    this.end();
  }

  /** --duration counts from onStart: the start-up snapshot and the warm-up candles (which may wait for budget) come before. */
  private armDuration(): void {
    if (this.o.durationMs === undefined || this.durationTimer !== undefined) return;
    this.durationTimer = this.clock.setTimeout(() => this.stop(), this.o.durationMs);
  }
  /** Handles what was queued (set by run: the hooks, or only the state when the run is ending). */
  private kick: () => void = () => undefined;

  /** After the end: table pushes, claims and snapshots still update the state and the report (no hooks). */
  private async pumpStateOnly(): Promise<void> {
    this.stopped = true;
    while (this.queue.length) {
      const ev = this.queue.shift()!;
      if (ev.k !== 'table' && ev.k !== 'own' && ev.k !== 'snapshot') continue;
      this.journalLine(ev as unknown as JournalLine, ev.k !== 'table');
      await this.apply(ev).catch(() => undefined);
    }
  }

  private cleanup(): void {
    if (this.tokenTimer !== undefined) this.clock.clearTimeout(this.tokenTimer);
    this.tokenTimer = undefined;
    for (const f of this.listeners.splice(0)) f();
    for (const name of [...this.timers.keys()]) this.clearTimer(name);
  }
}
