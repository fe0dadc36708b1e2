/**
 * The backtest engine: replays bid/ask candles through a strategy, deterministically (no wall
 * clock, no randomness: the same inputs give the same trades, bit for bit).
 *
 * Every candle is delivered at its close, across symbols and time frames: the candles are taken
 * in order of their close time (an H1 candle that opens at 00:00 comes at 01:00, after the m1
 * candles of other symbols up to then), those closing at one time together, in the order of the
 * data, and the clock (`ctx.now()`) never goes back. Per close time:
 *  1. Pending entry orders and the stops/limits of trades opened before this candle are checked
 *     against the candle's range, then trailing stops move: the model of `execution/fills.ts`,
 *     which the simulated broker applies to each tick. A fill is stamped at the candle's open, or
 *     at the clock when a shorter time frame has moved it past that open.
 *  2. The quote becomes the candle's close (bidClose/askClose), and the clock the close time:
 *     the onOrder / onTrade events of step 1 run then.
 *  3. The daily-loss limit is checked (UTC days); `onTick` (with the close), `onBar` for the data's
 *     time frame and for every longer subscribed time frame whose bucket this candle completes,
 *     then due timers. A longer bar whose bucket has no candle ending it (the market closed, a
 *     gap) closes at the end of its bucket, with what it has.
 * Market orders and closes from a hook fill at the current quote (the close the decision saw):
 * buy at the ask, sell at the bid. Commission is charged per side per 1K units. With `slippage`,
 * market orders, stops and stop entries fill that much worse; with `rollover`, open trades accrue
 * each daily rollover (17:00 New York, Wednesday three days) they are held over, booked before the
 * first candle at or after it and paid into the balance with the trade's P/L.
 *
 * Candles before `tradeFromTs` are history only, like the warm-up bars paper and live load before
 * onStart: they fill ctx.candles (every time frame) and nothing else.
 */
import { silentLogger } from '../../../telemetry/logger';
import { PERIOD_SECONDS } from '../../fxcm/candles';
import type { CandleSeries } from '../../fxcm/candle-file';
import type { Candle, Period } from '../../fxcm/types';
import { PreTradeCheck } from './pre-trade';
import { OrderGoneError, OrderRejectedError, isEntryLock, runErrorOf, runHook, type StrategyError } from '../errors';
import { DEFAULT_LEVERAGE, clean, exactConversion, marginOf, pipOf, positionPL } from '../../execution/instruments';
import { closeSide, entryFill, entryKind, exitFill, levelFromPips, marketFill, trailStop, type EntryKind, type Slippage } from '../../execution/fills';
import { rolloverOf, type RolloverRates } from '../../execution/financing';
import { rolloversBetween } from '../../fxcm/market-hours';
import { BarHistory, bucketStart, extendBar, openBar } from './bars';
import type { ClosedTrade, EquityPoint, RunResult } from '../results';
import { SafetyGuard, type SafetyLimits } from '../protections/safety';
import { Protections, runProtections } from '../protections/protections';
import type { ProtectionRules } from '../strategy';
import type {
  AccountInfo,
  Bar,
  CloseReason,
  EntryOrderRequest,
  OcoRequest,
  OpenTradeRequest,
  OrderEvent,
  PendingOrder,
  Position,
  Strategy,
  StrategyContext,
  StrategyLogger,
  Tick,
  TradeEvent,
} from '../strategy';
import { errorMessage } from '../../../platform/errors';

export interface BacktestOptions {
  strategy: Strategy<Record<string, unknown>>;
  /** Path of the strategy file (for the script line of errors). */
  strategyFile?: string;
  data: CandleSeries[];
  params?: Record<string, unknown>;
  /** Starting balance (default 10000). */
  balance?: number;
  /** Account currency (default USD). */
  currency?: string;
  /** Commission per side per 1K units, account currency (default 0). */
  commissionPerK?: number;
  /** Leverage for margin (default 50). */
  leverage?: number;
  /** Adverse slippage of market orders, stops and stop entries (default none). */
  slippage?: Slippage;
  /** Rollover rates per symbol (execution/financing.ts); absent: no rollover (the default). */
  rollover?: Readonly<Record<string, RolloverRates>>;
  safety?: SafetyLimits;
  /** The protections (a --protections file), instead of the strategy's. */
  protections?: ProtectionRules;
  logger?: StrategyLogger;
  /** Called every `progressEvery` candles and at the end (`final`: also when an error stopped the run early). */
  onProgress?: (done: number, total: number, final?: boolean) => void;
  progressEvery?: number;
  /** Completed bars kept per symbol and time frame for ctx.candles (default 5000). */
  historyLimit?: number;
  /**
   * Epoch seconds: the candles before it are history only (ctx.candles, longer time frames; no
   * hook, order, equity point or progress). onStart runs at the first candle from it on.
   */
  tradeFromTs?: number;
}

/** One strategy decision (the input of a replay comparison). */
export interface Intent {
  ts: number;
  op: string;
  args: unknown;
  result: 'ok' | 'rejected';
  detail?: string;
}

export interface BacktestResult extends RunResult {
  mode: 'backtest';
  account: AccountInfo;
  intents: Intent[];
  /** Candles the strategy reached (fewer than given when it stopped on an error). */
  candles: number;
  /** Candles given to trade on (after the warm-up). */
  candlesGiven: number;
  approximateCurrency: string[];
}

/** A position as the strategy sees it, less its live P/L, plus what the simulation tracks. */
interface OpenTradeState extends Omit<Position, 'plPips' | 'pl'> {
  openCandleTs: number;
  trailDistance?: number;
  commission: number;
  /** Rollover accrued and not yet paid into the balance. */
  rollover: number;
}

interface EntryState extends PendingOrder {
  kind: EntryKind;
  trailingStep?: number;
  isInPips: boolean;
  placedCandleTs: number;
  ocoGroup?: string;
}

const NO_BARS: readonly Bar[] = [];

/** A strategy timer (ctx.setTimer) in simulated time. */
interface StrategyTimer {
  name: string;
  every: number;
  next: number;
}


export class BacktestEngine {
  private readonly opts: BacktestOptions;
  private readonly currency: string;
  private readonly commissionPerK: number;
  private readonly leverage: number;
  private balance: number;
  private nowMs = 0;
  private candleTs = 0;
  private seq = 0;
  private readonly quotes = new Map<string, Tick>();
  private readonly open = new Map<string, OpenTradeState>();
  private readonly entries = new Map<string, EntryState>();
  private readonly closed: ClosedTrade[] = [];
  private readonly equity: EquityPoint[] = [];
  private readonly intents: Intent[] = [];
  private readonly history: BarHistory;
  private readonly building = new Map<string, Bar>();
  private readonly timers = new Map<string, StrategyTimer>();
  private readonly guard: SafetyGuard;
  private readonly protections: Protections;
  private readonly events: (() => Promise<void>)[] = [];
  private readonly ctx: StrategyContext<Record<string, unknown>>;
  private readonly log: StrategyLogger;
  private readonly approx = new Set<string>();
  /** Rollovers up to this instant (epoch ms) are booked. */
  private rolledTo = -Infinity;

  constructor(opts: BacktestOptions) {
    this.opts = opts;
    this.currency = opts.currency ?? 'USD';
    this.commissionPerK = opts.commissionPerK ?? 0;
    this.leverage = opts.leverage ?? DEFAULT_LEVERAGE;
    this.balance = opts.balance ?? 10000;
    this.log = opts.logger ?? silentLogger;
    const run = runProtections(opts.strategy.protections, opts.protections, opts.safety);
    this.guard = new SafetyGuard(run.safety);
    this.protections = new Protections(run.rules, (l) => this.log.warn(`protection ${l.rule} locks new entries${l.symbol ? ` on ${l.symbol}` : ''} until ${new Date(l.until).toISOString()}: ${l.reason}`));
    this.history = new BarHistory(opts.historyLimit ?? 5000);
    this.ctx = this.makeContext();
  }

  // ------------------------------------------------------------ accounting

  /** The quote of a symbol the pre-trade check let through (it has one). */
  private quote(symbol: string): Tick {
    const q = this.quotes.get(symbol);
    if (q === undefined) throw new OrderRejectedError(`no price for ${symbol} yet`, 'price');
    return q;
  }

  private plOf(t: { symbol: string; isBuy: boolean; amount: number; openRate: number }, closeRate: number): { pips: number; pl: number } {
    if (!exactConversion(t.symbol, this.currency)) this.approx.add(t.symbol);
    const { pips, pl } = positionPL(t.symbol, this.currency, t.isBuy, t.openRate, closeRate, t.amount * 1000);
    return { pips: clean(pips), pl };
  }

  private markRate(t: OpenTradeState): number {
    const q = this.quotes.get(t.symbol);
    if (!q) return t.openRate;
    return closeSide(t.isBuy, q.bid, q.ask);
  }

  private unrealised(): number {
    let s = 0;
    for (const t of this.open.values()) s += this.plOf(t, this.markRate(t)).pl + t.rollover;
    return s;
  }

  private usedMargin(): number {
    let s = 0;
    for (const t of this.open.values()) s += marginOf(t.symbol, this.currency, t.amount * 1000, this.markRate(t), this.leverage);
    return s;
  }

  accountInfo(): AccountInfo {
    const equity = this.balance + this.unrealised();
    const used = this.usedMargin();
    return {
      accountId: 'backtest',
      currency: this.currency,
      balance: clean(this.balance),
      equity: clean(equity),
      usedMargin: clean(used),
      usableMargin: clean(equity - used),
      dayPL: clean(this.guard.dayPL(this.nowMs, equity)),
    };
  }

  private positionOf(t: OpenTradeState): Position {
    const { pips, pl } = this.plOf(t, this.markRate(t));
    return {
      tradeId: t.tradeId,
      symbol: t.symbol,
      isBuy: t.isBuy,
      amount: t.amount,
      openRate: t.openRate,
      openTime: t.openTime,
      stop: t.stop,
      limit: t.limit,
      trailingStep: t.trailingStep,
      plPips: pips,
      pl: clean(pl),
    };
  }

  // ------------------------------------------------------------ order book

  private nextId(prefix: string): string {
    return `${prefix}${++this.seq}`;
  }

  private queue(fn: () => Promise<void>): void {
    this.events.push(fn);
  }

  private emitOrder(e: OrderEvent): void {
    const h = this.opts.strategy.onOrder;
    if (h) this.queue(() => this.call('onOrder', () => h.call(this.opts.strategy, this.ctx, e)));
  }

  /**
   * The end state as the last equity point: what onStop (or the flatten after an error) closed
   * after the last bar's point is in the end balance and equity.
   */
  private positions(symbol?: string): Position[] {
    return [...this.open.values()].filter((t) => !symbol || t.symbol === symbol).map((t) => this.positionOf(t));
  }

  private orders(symbol?: string): PendingOrder[] {
    return [...this.entries.values()]
      .filter((o) => !symbol || o.symbol === symbol)
      .map((o) => ({ orderId: o.orderId, symbol: o.symbol, isBuy: o.isBuy, amount: o.amount, rate: o.rate, stop: o.stop, limit: o.limit, ocoGroup: o.ocoGroup }));
  }

  private markEnd(): void {
    const point = { ts: this.nowMs, balance: clean(this.balance), equity: clean(this.balance + this.unrealised()) };
    const last = this.equity[this.equity.length - 1];
    if (last !== undefined && last.ts === point.ts) this.equity.pop();
    this.equity.push(point);
  }

  private emitTrade(e: TradeEvent): void {
    const h = this.opts.strategy.onTrade;
    if (h) this.queue(() => this.call('onTrade', () => h.call(this.opts.strategy, this.ctx, e)));
  }

  private resolveLevel(symbol: string, isBuy: boolean, base: number, level: number | undefined, isInPips: boolean): number | undefined {
    if (level === undefined || level === 0) return undefined;
    return isInPips ? levelFromPips(isBuy, base, level, pipOf(symbol)) : level;
  }

  private fill(symbol: string, isBuy: boolean, amount: number, rate: number, orderId: string, kind: 'market' | 'entry', p: { stop?: number; limit?: number; trailingStep?: number; isInPips?: boolean }): OpenTradeState {
    const tradeId = this.nextId('T');
    const commission = this.commissionPerK * amount;
    this.balance -= commission;
    const t: OpenTradeState = {
      tradeId,
      symbol,
      isBuy,
      amount,
      openRate: rate,
      openTime: this.nowMs,
      openCandleTs: this.candleTs,
      commission,
      rollover: 0,
      trailingStep: p.trailingStep || undefined,
    };
    t.stop = this.resolveLevel(symbol, isBuy, rate, p.stop, !!p.isInPips);
    t.limit = this.resolveLevel(symbol, isBuy, rate, p.limit, !!p.isInPips);
    if (t.stop !== undefined && t.trailingStep) t.trailDistance = Math.abs(rate - t.stop);
    this.open.set(tradeId, t);
    this.emitOrder({ orderId, symbol, isBuy, amount, kind, status: 'filled', rate, tradeId, ts: this.nowMs });
    this.emitTrade({ kind: 'opened', tradeId, orderId, symbol, isBuy, amount, openRate: rate, ts: this.nowMs });
    return t;
  }

  private closeAt(t: OpenTradeState, amount: number, rate: number, reason: CloseReason): void {
    const part = { ...t, amount };
    const { pips, pl } = this.plOf(part, rate);
    const closeCommission = this.commissionPerK * amount;
    const openCommission = t.commission * (amount / t.amount);
    const rollover = t.rollover * (amount / t.amount);
    this.balance += pl + rollover - closeCommission;
    const commission = clean(openCommission + closeCommission);
    const rec: ClosedTrade = {
      tradeId: t.tradeId,
      symbol: t.symbol,
      isBuy: t.isBuy,
      amount,
      openRate: t.openRate,
      closeRate: rate,
      openTime: t.openTime,
      closeTime: this.nowMs,
      plPips: pips,
      grossPL: clean(pl),
      commission,
      rollover: clean(rollover),
      pl: clean(pl + rollover - commission),
      reason,
    };
    this.closed.push(rec);
    this.guard.onRealised(this.nowMs, rec.pl);
    this.protections.closed(t.symbol, reason, this.nowMs);
    if (amount >= t.amount) this.open.delete(t.tradeId);
    else {
      t.commission -= openCommission;
      t.rollover -= rollover;
      t.amount -= amount;
    }
    this.emitTrade({ kind: 'closed', tradeId: t.tradeId, symbol: t.symbol, isBuy: t.isBuy, amount, openRate: t.openRate, closeRate: rate, plPips: pips, pl: rec.pl, commission, reason, ts: this.nowMs });
  }

  /** What the pre-trade check reads: this run's account, quotes, trades and entry orders. */
  private preTradeCheck(): PreTradeCheck {
    return new PreTradeCheck(
      this.guard,
      {
        symbols: this.opts.strategy.symbols,
        currency: this.currency,
        leverage: this.leverage,
        now: () => this.nowMs,
        quote: (symbol) => this.quotes.get(symbol),
        margin: () => this.accountInfo(),
        positions: (symbol) => [...this.open.values()].filter((t) => t.symbol === symbol),
        entries: (symbol) => [...this.entries.values()].filter((o) => o.symbol === symbol),
      },
      this.protections,
    );
  }

  /**
   * A decision, booked now: its result, or its refusal (the promise rejects, as a broker's answer
   * would; nothing else happens, in every mode).
   */
  private record<T>(op: string, args: unknown, fn: () => T): Promise<T> {
    try {
      const r = fn();
      this.intents.push({ ts: this.nowMs, op, args, result: 'ok' });
      return Promise.resolve(r);
    } catch (e) {
      this.intents.push({ ts: this.nowMs, op, args, result: 'rejected', detail: errorMessage(e) });
      return Promise.reject(e);
    }
  }

  private openMarket(r: OpenTradeRequest): { orderId: string } {
    const q = this.quote(r.symbol);
    const orderId = this.nextId('O');
    this.fill(r.symbol, r.isBuy, r.amount, marketFill(r.isBuy, q.bid, q.ask, pipOf(r.symbol), this.opts.slippage), orderId, 'market', r);
    return { orderId };
  }

  private placeEntry(r: EntryOrderRequest, ocoGroup?: string): string {
    const q = this.quote(r.symbol);
    const orderId = this.nextId('O');
    this.entries.set(orderId, {
      orderId,
      symbol: r.symbol,
      isBuy: r.isBuy,
      amount: r.amount,
      rate: r.rate,
      stop: r.stop,
      limit: r.limit,
      kind: entryKind(r.isBuy, r.rate, q.bid, q.ask),
      trailingStep: r.trailingStep,
      isInPips: !!r.isInPips,
      placedCandleTs: this.candleTs,
      ocoGroup,
    });
    this.emitOrder({ orderId, symbol: r.symbol, isBuy: r.isBuy, amount: r.amount, kind: 'entry', status: 'accepted', rate: r.rate, ts: this.nowMs });
    return orderId;
  }

  private closeTradeNow(tradeId: string, amount: number | undefined, reason: CloseReason): void {
    const t = this.open.get(tradeId);
    if (!t) throw new OrderGoneError('trade', tradeId);
    const amt = amount ?? t.amount;
    const q = this.quote(t.symbol);
    this.closeAt(t, amt, marketFill(!t.isBuy, q.bid, q.ask, pipOf(t.symbol), this.opts.slippage), reason);
  }

  private flattenAll(reason: CloseReason): void {
    for (const t of [...this.open.values()]) {
      if (this.quotes.has(t.symbol)) this.closeTradeNow(t.tradeId, undefined, reason);
    }
    for (const id of [...this.entries.keys()]) this.entries.delete(id);
  }

  private makeContext(): StrategyContext<Record<string, unknown>> {
    const s = this.opts.strategy;
    const params = { ...(s.params ?? {}), ...(this.opts.params ?? {}) };
    const self = this;
    const check = this.preTradeCheck();
    return {
      mode: 'backtest',
      params,
      log: this.log,
      symbols: [...s.symbols],
      now: () => this.nowMs,
      price: (sym) => this.quotes.get(sym),
      pip: pipOf,
      candles: (sym, tf, count) => this.history.candles(sym, tf, count),
      positions: (sym) => this.positions(sym),
      orders: (sym) => this.orders(sym),
      account: () => this.accountInfo(),
      openTrade: (req) => this.record('openTrade', req, () => this.openMarket(check.openTrade(req))),
      createEntryOrder: (req) => this.record('createEntryOrder', req, () => ({ orderId: this.placeEntry(check.entryOrder(req)) })),
      createOco: (req: OcoRequest) =>
        this.record('createOco', req, () => {
          const r = check.oco(req);
          const g = this.nextId('G');
          const base = { symbol: r.symbol, amount: r.amount, isInPips: r.isInPips };
          return { orderIds: [this.placeEntry({ ...base, ...r.first }, g), this.placeEntry({ ...base, ...r.second }, g)] };
        }),
      closeTrade: (id, amount) =>
        this.record('closeTrade', { tradeId: id, amount }, () => {
          const t = this.open.get(id);
          if (!t) throw new OrderGoneError('trade', id);
          this.closeTradeNow(id, check.closeTrade(t, amount), 'close');
        }),
      closeAll: (sym) =>
        this.record('closeAll', { symbol: sym }, () => {
          for (const t of [...this.open.values()]) if (!sym || t.symbol === sym) this.closeTradeNow(t.tradeId, undefined, 'close');
        }),
      setStop: (id, level, opts) =>
        this.record('setStop', { tradeId: id, rate: level, ...opts }, () => {
          const t = this.open.get(id);
          if (!t) throw new OrderGoneError('trade', id);
          const { rate, opts: o } = check.tradeLevel('stop', t, level, opts);
          const q = this.quote(t.symbol);
          const ref = closeSide(t.isBuy, q.bid, q.ask);
          t.stop = rate === 0 ? undefined : this.resolveLevel(t.symbol, t.isBuy, ref, rate, !!o?.isInPips);
          t.trailingStep = o?.trailingStep || undefined;
          t.trailDistance = t.stop !== undefined && t.trailingStep ? Math.abs(ref - t.stop) : undefined;
        }),
      setLimit: (id, level, opts) =>
        this.record('setLimit', { tradeId: id, rate: level, ...opts }, () => {
          const t = this.open.get(id);
          if (!t) throw new OrderGoneError('trade', id);
          const { rate, opts: o } = check.tradeLevel('limit', t, level, opts);
          const q = this.quote(t.symbol);
          t.limit = rate === 0 ? undefined : this.resolveLevel(t.symbol, t.isBuy, closeSide(t.isBuy, q.bid, q.ask), rate, !!o?.isInPips);
        }),
      changeOrder: (id, newRate, newAmount) =>
        this.record('changeOrder', { orderId: id, rate: newRate, amount: newAmount }, () => {
          const o = this.entries.get(id);
          if (!o) throw new OrderGoneError('order', id);
          const { rate, amount } = check.changeOrder(o, newRate, newAmount);
          o.rate = rate;
          if (amount !== undefined) o.amount = amount;
        }),
      deleteOrder: (id) =>
        this.record('deleteOrder', { orderId: id }, () => {
          const o = this.entries.get(id);
          if (!o) throw new OrderGoneError('order', id);
          for (const x of [...this.entries.values()]) if (x.orderId === id || (o.ocoGroup && x.ocoGroup === o.ocoGroup)) this.cancelEntry(x, 'deleted');
        }),
      setTimer(name, everyMs) {
        if (!(everyMs > 0)) throw new Error('setTimer: everyMs must be > 0');
        self.timers.set(name, { name, every: everyMs, next: self.nowMs + everyMs });
      },
      clearTimer(name) {
        self.timers.delete(name);
      },
    };
  }

  private cancelEntry(o: EntryState, reason: string): void {
    this.entries.delete(o.orderId);
    this.emitOrder({ orderId: o.orderId, symbol: o.symbol, isBuy: o.isBuy, amount: o.amount, kind: 'entry', status: 'cancelled', rate: o.rate, reason, ts: this.nowMs });
  }

  // ------------------------------------------------------------ candle processing

  private processTriggers(symbol: string, c: Candle, baseSec: number): void {
    // What fills within a candle is stamped at its open, or later when a shorter time frame has
    // already moved the clock past it (an H1 candle handled at its close): never back in time.
    this.nowMs = Math.max(this.nowMs, c.ts * 1000);
    // entry orders placed before this candle
    for (const o of [...this.entries.values()]) {
      if (o.symbol !== symbol || o.placedCandleTs >= c.ts || !this.entries.has(o.orderId)) continue;
      const rate = entryFill(o, c, pipOf(symbol), this.opts.slippage);
      if (rate === undefined) continue;
      this.entries.delete(o.orderId);
      if (o.ocoGroup) for (const x of [...this.entries.values()]) if (x.ocoGroup === o.ocoGroup) this.cancelEntry(x, 'oco');
      // checked when it was placed (pre-trade.ts), as a broker fills a resting order
      this.fill(symbol, o.isBuy, o.amount, rate, o.orderId, 'entry', o);
    }
    // stops and limits of trades opened before this candle
    for (const t of [...this.open.values()]) {
      if (t.symbol !== symbol || t.openCandleTs >= c.ts) continue;
      const exit = exitFill(t, c, pipOf(symbol), this.opts.slippage);
      if (exit) {
        this.closeAt(t, t.amount, exit.rate, exit.reason === 'stop' && t.trailDistance !== undefined ? 'trailing' : exit.reason);
        continue;
      }
      if (t.trailDistance !== undefined && t.stop !== undefined && t.trailingStep) {
        t.stop = trailStop({ isBuy: t.isBuy, stop: t.stop, distance: t.trailDistance, trailingStep: t.trailingStep }, c, pipOf(symbol));
      }
    }
    this.quotes.set(symbol, { symbol, bid: c.bidClose, ask: c.askClose, ts: (c.ts + baseSec) * 1000 });
  }

  /** Accrues the rollovers in (last booked, `toMs`] on the trades open before each. */
  private bookRollovers(toMs: number): void {
    if (toMs <= this.rolledTo) return;
    const rates = this.opts.rollover;
    if (rates && this.open.size && this.rolledTo > -Infinity) {
      for (const r of rolloversBetween(this.rolledTo, toMs)) {
        for (const t of this.open.values()) {
          const rate = rates[t.symbol];
          if (rate && t.openTime < r.ms) t.rollover += rolloverOf(rate, t.isBuy, t.amount, r.days);
        }
      }
    }
    this.rolledTo = toMs;
  }

  /** Runs a hook; an entry refused by a lock ends the hook, not the run (errors.ts). */
  private async call(hook: string, fn: () => void | Promise<void>): Promise<void> {
    try {
      await runHook(hook, fn, this.opts.strategyFile);
    } catch (e) {
      if (!isEntryLock(e)) throw e;
      this.log.info(`${hook} ended on an entry refused: ${((e as StrategyError).cause as Error).message}`);
    }
  }

  private async drain(): Promise<void> {
    while (this.events.length) await this.events.shift()!();
  }

  /** Adds a candle of `series` to its `tf` bar; returns that bar when this candle completes it. */
  private closedBar(series: CandleSeries, c: Candle, tf: Period): Bar | undefined {
    if (tf === series.timeframe) return { symbol: series.symbol, timeframe: tf, ...c };
    const start = bucketStart(c.ts, tf);
    const k = `${series.symbol}|${tf}`;
    let b = this.building.get(k);
    if (!b || b.ts !== start) {
      b = openBar(series.symbol, tf, start, c, c.tickQty);
      this.building.set(k, b);
    } else extendBar(b, c, c.tickQty);
    if (c.ts + PERIOD_SECONDS[series.timeframe] < start + PERIOD_SECONDS[tf]) return undefined;
    this.building.delete(k);
    return b;
  }

  /**
   * Longer bars whose span ended at or before `sec` (epoch s) without the candle that ends it (the
   * market closed, a gap in the data): closed all the same, at the end of their span, earliest first.
   */
  private endedBars(sec: number): readonly Bar[] {
    if (this.building.size === 0) return NO_BARS;
    const out: Bar[] = [];
    for (const [k, b] of this.building) {
      if (b.ts + PERIOD_SECONDS[b.timeframe] > sec) continue;
      this.building.delete(k);
      out.push(b);
    }
    return out.sort((a, b) => a.ts + PERIOD_SECONDS[a.timeframe] - (b.ts + PERIOD_SECONDS[b.timeframe]));
  }

  /** onBar for bars that closed, each at its close; `nowMs` moves to it (never back). */
  private async deliverBars(bars: readonly Bar[]): Promise<void> {
    const s = this.opts.strategy;
    for (const bar of bars) {
      this.nowMs = Math.max(this.nowMs, (bar.ts + PERIOD_SECONDS[bar.timeframe]) * 1000);
      this.history.push(bar);
      if (s.onBar) {
        await this.call('onBar', () => s.onBar!.call(s, this.ctx, bar));
        await this.drain();
      }
    }
  }

  /** onTimer for the timers due by now, earliest first. */
  private async fireTimers(): Promise<void> {
    const s = this.opts.strategy;
    for (const t of [...this.timers.values()].sort((a, b) => a.next - b.next || (a.name < b.name ? -1 : 1))) {
      while (this.timers.get(t.name) === t && t.next <= this.nowMs) {
        t.next += t.every;
        if (s.onTimer) await this.call('onTimer', () => s.onTimer!.call(s, this.ctx, t.name, 1));
        await this.drain();
      }
    }
  }

  /** Runs the whole backtest. A strategy error flattens every position and ends the run. */
  async run(): Promise<BacktestResult> {
    const s = this.opts.strategy;
    const base = this.opts.data;
    for (const d of base) if (!PERIOD_SECONDS[d.timeframe]) throw new Error(`unknown time frame ${d.timeframe}`);
    const tradeFromTs = this.opts.tradeFromTs ?? -Infinity;
    // A symbol without candles would trade nothing and end "successfully" with 0 trades.
    const withData = new Set(base.filter((d) => d.candles.some((c) => c.ts >= tradeFromTs)).map((d) => d.symbol));
    const missing = s.symbols.filter((sym) => !withData.has(sym));
    if (missing.length > 0) {
      const after = this.opts.tradeFromTs === undefined ? '' : ` from ${new Date(tradeFromTs * 1000).toISOString()} on`;
      throw new Error(`no candles for ${missing.join(', ')}${after}, which the strategy trades (candles given for: ${[...withData].join(', ') || 'nothing'})`);
    }
    // Every candle is delivered at its close, across symbols and time frames (an H1 candle that
    // opens at 00:00 is seen at 01:00, after the m1 candles up to then): ordered by close time,
    // then by the order of the data.
    const merged: { series: CandleSeries; c: Candle; close: number }[] = [];
    for (const series of base) for (const c of series.candles) merged.push({ series, c, close: c.ts + PERIOD_SECONDS[series.timeframe] });
    merged.sort((a, b) => a.close - b.close || base.indexOf(a.series) - base.indexOf(b.series));
    const warmup = merged.filter((m) => m.c.ts < tradeFromTs);
    const traded = merged.filter((m) => m.c.ts >= tradeFromTs);
    const total = traded.length;
    const startBalance = this.balance;
    // (a loop: a million candles do not fit in Math.min's arguments)
    let startSec: number | undefined;
    for (const m of traded) if (startSec === undefined || m.c.ts < startSec) startSec = m.c.ts;
    const tfs = (sym: string, baseTf: Period): Period[] => {
      const want = s.timeframes && s.timeframes.length ? s.timeframes : [baseTf];
      for (const tf of want) {
        const sec = PERIOD_SECONDS[tf];
        if (tf === 'W1' || tf === 'M1' || sec % PERIOD_SECONDS[baseTf] !== 0) {
          if (tf !== baseTf) throw new Error(`time frame ${tf} cannot be built from ${baseTf} candles of ${sym} in a backtest`);
        }
      }
      return want;
    };
    const tfBySeries = new Map<CandleSeries, Period[]>();
    for (const d of base) {
      if (!s.symbols.includes(d.symbol)) this.log.warn(`candles of ${d.symbol} are not in the strategy's symbols`);
      tfBySeries.set(d, tfs(d.symbol, d.timeframe));
    }
    // bars before onStart, as paper and live load the strategy's warm-up
    for (const { series, c, close } of warmup) {
      for (const bar of this.endedBars(close - 1)) this.history.push(bar);
      for (const tf of tfBySeries.get(series) ?? []) {
        const bar = this.closedBar(series, c, tf);
        if (bar) this.history.push(bar);
      }
    }
    // those that ended before the run starts without their last candle are history too
    if (startSec !== undefined) for (const bar of this.endedBars(startSec)) this.history.push(bar);
    let error: BacktestResult['error'];
    let reached = 0;
    const every = this.opts.progressEvery ?? 1000;
    try {
      if (startSec !== undefined) this.nowMs = startSec * 1000;
      if (s.onStart) await this.call('onStart', () => s.onStart!.call(s, this.ctx));
      await this.drain();
      let i = 0;
      while (i < traded.length) {
        const close = traded[i]!.close;
        let j = i;
        while (j < traded.length && traded[j]!.close === close) j++;
        // longer bars that ended before this time without their last candle close first, each at its end
        for (const bar of this.endedBars(close - 1)) {
          await this.deliverBars([bar]);
          if (this.timers.size) await this.fireTimers();
          this.equity.push({ ts: this.nowMs, balance: clean(this.balance), equity: clean(this.balance + this.unrealised()) });
        }
        reached = j;
        const group = traded.slice(i, j);
        let opened = group[0]!.c.ts;
        for (const g of group) if (g.c.ts < opened) opened = g.c.ts;
        this.bookRollovers(opened * 1000);
        for (const { series, c } of group) this.processTriggers(series.symbol, c, PERIOD_SECONDS[series.timeframe]);
        // the hooks run at the close: what the candles showed is known then, not before
        this.nowMs = close * 1000;
        await this.drain();
        // daily loss
        const eq = this.balance + this.unrealised();
        if (this.guard.checkDailyLoss(this.nowMs, eq)) {
          this.log.warn('daily loss limit reached: flattening', { dayPL: this.guard.dayPL(this.nowMs, eq) });
          const halt = this.guard.locks(this.nowMs)[0]!;
          this.protections.noteHalt({ rule: 'maxDailyLoss', from: this.nowMs, until: halt.until!, reason: halt.reason });
          this.flattenAll('flatten');
          await this.drain();
        }
        for (const { series, c } of group) {
          const sym = series.symbol;
          if (s.onTick) {
            const q = this.quotes.get(sym)!;
            await this.call('onTick', () => s.onTick!.call(s, this.ctx, q));
            await this.drain();
          }
          const bars: Bar[] = [];
          for (const tf of tfBySeries.get(series) ?? []) {
            const bar = this.closedBar(series, c, tf);
            if (bar) bars.push(bar);
          }
          if (bars.length) await this.deliverBars(bars);
        }
        const ended = this.endedBars(close);
        if (ended.length) await this.deliverBars(ended);
        if (this.timers.size) await this.fireTimers();
        const acc = this.balance + this.unrealised();
        this.equity.push({ ts: this.nowMs, balance: clean(this.balance), equity: clean(acc) });
        this.protections.equity(this.nowMs, acc);
        i = j;
        if (this.opts.onProgress && (i % every === 0 || i === total)) this.opts.onProgress(i, total);
        else if (this.opts.onProgress && Math.floor(i / every) !== Math.floor((i - group.length) / every)) this.opts.onProgress(i, total);
      }
      if (s.onStop) await this.call('onStop', () => s.onStop!.call(s, this.ctx));
      await this.drain();
      this.markEnd();
    } catch (e) {
      error = runErrorOf(e);
      this.events.length = 0;
      this.flattenAll('flatten');
      this.events.length = 0;
      this.markEnd();
    }
    if (this.opts.onProgress) this.opts.onProgress(reached, total, true);
    return {
      strategy: s.name ?? 'strategy',
      mode: 'backtest',
      currency: this.currency,
      startBalance,
      startTime: startSec === undefined ? undefined : startSec * 1000,
      trades: this.closed,
      equity: this.equity,
      account: this.accountInfo(),
      intents: this.intents,
      candles: reached,
      candlesGiven: total,
      leftOpen: { positions: this.positions(), orders: this.orders() },
      approximateCurrency: [...this.approx].sort(),
      error,
      ...(this.protections.history.length ? { locks: this.protections.history } : {}),
    };
  }
}

export function runBacktest(opts: BacktestOptions): Promise<BacktestResult> {
  return new BacktestEngine(opts).run();
}
