/**
 * The strategy API of `ratelimit-runner`: one module, the same in every mode (backtest, paper,
 * live, replay). A strategy is a plain object with hooks; every hook receives the context first.
 *
 * Units: `amount` is in thousands of units of the base currency (the broker's `amount` / amountK,
 * e.g. 10 = 10,000 EUR of EUR/USD; the broker wants a multiple of 10). Prices are rates; stops and
 * limits are rates unless `isInPips` (then a stop is a negative distance and a limit a positive
 * one, as the broker wants). Times: bars carry `ts` in epoch seconds (the candle's start), ticks
 * and `ctx.now()` in epoch milliseconds.
 *
 * Every broker operation returns a promise; it rejects (never silently drops) when the broker or
 * the runner's safety checks refuse it, or when the intent expired while waiting for rate-limit
 * budget (IntentExpiredError). A hook that throws or rejects is a fatal strategy error: the runner
 * logs the error and the script's line, flattens the run's positions and stops (see runner/errors.ts).
 */
import type { Candle, Period } from '../fxcm/types';
import type { LogWriter } from '../../telemetry/logger';

export type { Period } from '../fxcm/types';

export type RunMode = 'backtest' | 'paper' | 'live' | 'replay';

/** A bid/ask candle of one symbol and time frame (the broker's candle fields; `ts` in epoch seconds). */
export interface Bar extends Candle {
  symbol: string;
  timeframe: Period;
}

export interface Tick {
  symbol: string;
  bid: number;
  ask: number;
  /** Epoch milliseconds. */
  ts: number;
}

export type OrderStatus = 'accepted' | 'filled' | 'cancelled' | 'rejected';
export type OrderKind = 'market' | 'entry' | 'close' | 'stop' | 'limit';

export interface OrderEvent {
  orderId: string;
  symbol: string;
  isBuy: boolean;
  amount: number;
  kind: OrderKind;
  status: OrderStatus;
  /** Requested rate (entry) or fill rate (filled). */
  rate?: number;
  tradeId?: string;
  reason?: string;
  ts: number;
}

/** Protections (protections/protections.ts): each locks new entries for a while. */
export interface ProtectionRules {
  /** `stops` stop-outs within `withinMin` minutes lock new entries for `lockMin` minutes (every symbol, or `perSymbol`: that one). */
  stopLossGuard?: { stops: number; withinMin: number; lockMin: number; perSymbol?: boolean };
  /** Equity `pct` % below its highest point locks new entries for `lockMin` minutes. */
  maxDrawdown?: { pct: number; lockMin: number };
  /** After a trade of a symbol closes, no new entry on it for `minutes`. */
  cooldown?: { minutes: number };
  /** The daily loss limit, as --max-daily-loss. */
  dailyLoss?: number;
}

export type CloseReason = 'close' | 'stop' | 'limit' | 'trailing' | 'flatten' | 'operator' | 'broker';

export interface TradeEvent {
  kind: 'opened' | 'closed';
  tradeId: string;
  /** Opened: the order that opened it (what openTrade / an entry order's events named). */
  orderId?: string;
  symbol: string;
  isBuy: boolean;
  amount: number;
  openRate: number;
  closeRate?: number;
  /** Closed trades: P/L in pips and in the account currency (after commission). */
  plPips?: number;
  pl?: number;
  commission?: number;
  reason?: CloseReason;
  ts: number;
}

export interface Position {
  tradeId: string;
  symbol: string;
  isBuy: boolean;
  amount: number;
  openRate: number;
  /** Epoch ms. */
  openTime: number;
  stop?: number;
  limit?: number;
  trailingStep?: number;
  /** Unrealised P/L at the current quote, pips and account currency. */
  plPips: number;
  pl: number;
}

export interface PendingOrder {
  orderId: string;
  symbol: string;
  isBuy: boolean;
  amount: number;
  rate: number;
  stop?: number;
  limit?: number;
  ocoGroup?: string;
}

export interface AccountInfo {
  accountId: string;
  currency: string;
  balance: number;
  equity: number;
  usedMargin: number;
  usableMargin: number;
  /** Realised + unrealised P/L of the current UTC day. */
  dayPL: number;
}

export interface OpenTradeRequest {
  symbol: string;
  isBuy: boolean;
  amount: number;
  stop?: number;
  limit?: number;
  /** 0 none, 1 dynamic, >= 10 fixed step in pips (the broker's rule). */
  trailingStep?: number;
  isInPips?: boolean;
  /** Give up if the call cannot be sent within this many ms (rate-limit wait). */
  ttlMs?: number;
}

export interface EntryOrderRequest extends OpenTradeRequest {
  rate: number;
}

export interface OcoRequest {
  symbol: string;
  amount: number;
  first: { isBuy: boolean; rate: number; stop?: number; limit?: number };
  second: { isBuy: boolean; rate: number; stop?: number; limit?: number };
  isInPips?: boolean;
  ttlMs?: number;
}

/**
 * Paper/live: a run acts on its own trades and orders (those its calls opened); `accountWide`
 * reads or acts on every one of the account, another run's and manual ones included.
 */
export interface Scope {
  accountWide?: boolean;
}

export interface StopLimitOptions extends Scope {
  isInPips?: boolean;
  trailingStep?: number;
}

/**
 * Paper/live: the runner reconciled with the broker after the stream dropped and came back
 * (`reconnect`), or after a restart from the journal (`resume`). The trades closed meanwhile have
 * had their onTrade closed events (with the broker's close and P/L) before this.
 */
export interface ReconnectEvent {
  reason: 'reconnect' | 'resume';
  /** How long the stream was down (reconnect). */
  downMs?: number;
  /** The run's trades the broker closed meanwhile, and those opened meanwhile (entry orders that filled). */
  closed: number;
  opened: number;
  /** The run's positions and entry orders open now. */
  positions: number;
  orders: number;
  ts: number;
}

/** `ctx.log`: debug, info, warn and error, each with optional structured fields. */
export type StrategyLogger = LogWriter;

/** What every hook receives. */
export interface StrategyContext<P = Record<string, unknown>> {
  readonly mode: RunMode;
  /** The strategy's `params` merged with `--param key=value` from the command line. */
  readonly params: P;
  readonly log: StrategyLogger;
  readonly symbols: readonly string[];
  /** Current time (virtual in backtest/replay), epoch ms. */
  now(): number;
  /** Last quote of a symbol. */
  price(symbol: string): Tick | undefined;
  /** Pip size of a symbol (0.0001, 0.01 for JPY pairs). */
  pip(symbol: string): number;
  /** The last `count` completed bars (oldest first) of a subscribed symbol and time frame. */
  candles(symbol: string, timeframe: Period, count?: number): Bar[];
  /** Paper/live: this run's positions / entry orders; `{ accountWide: true }` every one of the account. */
  positions(symbol?: string, scope?: Scope): Position[];
  orders(symbol?: string, scope?: Scope): PendingOrder[];
  account(): AccountInfo;

  /**
   * Market order (open_trade AtMarket). Resolves with the order id once the broker accepted it.
   * Paper/live: when the broker's answer was lost (a timeout, the connection lost mid-call) and
   * the runner found the order in the broker's pushes or a snapshot, it resolves with that order
   * and `settled` saying so; when it found nothing it rejects with AnswerLostError.
   */
  openTrade(req: OpenTradeRequest): Promise<{ orderId: string; settled?: string }>;
  /** Entry order (create_entry_order): stop entry when priced through the market, limit entry otherwise. `settled`: as openTrade's. */
  createEntryOrder(req: EntryOrderRequest): Promise<{ orderId: string; settled?: string }>;
  /** Two entry orders in one OCO group (simple_oco): the first to fill cancels the other. `settled`: as openTrade's. */
  createOco(req: OcoRequest): Promise<{ orderIds: string[]; settled?: string }>;
  /** Closes a trade (all of it when `amount` is omitted). Another run's trade only with `accountWide`. */
  closeTrade(tradeId: string, amount?: number, scope?: Scope): Promise<void>;
  /** Closes every trade of this run open when it is called, of a symbol or of every symbol (`accountWide`: the account's). */
  closeAll(symbol?: string, scope?: Scope): Promise<void>;
  /** Sets (rate 0 removes) the stop of a trade; trailingStep makes it a trailing stop. */
  setStop(tradeId: string, rate: number, opts?: StopLimitOptions): Promise<void>;
  /** Sets (rate 0 removes) the limit (take profit) of a trade. */
  setLimit(tradeId: string, rate: number, opts?: StopLimitOptions): Promise<void>;
  /** Another run's order only with `accountWide`. */
  changeOrder(orderId: string, rate: number, amount?: number, scope?: Scope): Promise<void>;
  deleteOrder(orderId: string, scope?: Scope): Promise<void>;

  /** A repeating timer on the run's clock; `onTimer(ctx, name, count)` fires every `everyMs`. */
  setTimer(name: string, everyMs: number): void;
  clearTimer(name: string): void;
}

type Awaitable = void | Promise<void>;

export interface Strategy<P = Record<string, unknown>> {
  name?: string;
  /** Symbols to trade / subscribe. */
  symbols: string[];
  /** Time frames that get `onBar` (default: the data's time frame in backtest, `m1` live). */
  timeframes?: Period[];
  /** Defaults of the parameters (overridden by `--param k=v`). */
  params?: P;
  /**
   * Bars of history of each time frame loaded before `onStart` in paper/live; each window of a
   * sweep is warmed up the same way from the candles before it (default 0).
   */
  warmup?: number;
  /**
   * Rules that lock new entries after stop-outs, a drawdown or a close, the same in every mode
   * (docs/strategy-guide.md, "Protections"); `--protections FILE` replaces them.
   */
  protections?: ProtectionRules;
  onStart?(ctx: StrategyContext<P>): Awaitable;
  onTick?(ctx: StrategyContext<P>, tick: Tick): Awaitable;
  onBar?(ctx: StrategyContext<P>, bar: Bar): Awaitable;
  onOrder?(ctx: StrategyContext<P>, evt: OrderEvent): Awaitable;
  onTrade?(ctx: StrategyContext<P>, evt: TradeEvent): Awaitable;
  /**
   * A timer of `setTimer` fell due. `count`: how many times it fell due since it last ran — 1,
   * unless (paper/live) a hook ran longer than its interval: the firings that fell due meanwhile
   * are this one, run after every push and answer that arrived before it.
   */
  onTimer?(ctx: StrategyContext<P>, name: string, count: number): Awaitable;
  /** Paper/live: after the runner reconciled with the broker on a reconnect or a resume. */
  onReconnect?(ctx: StrategyContext<P>, evt: ReconnectEvent): Awaitable;
  onStop?(ctx: StrategyContext<P>): Awaitable;
  /**
   * Paper/live, with `restoreState`: what the strategy keeps between hooks (indicator windows,
   * counters, flags), as a value JSON can carry (plain objects, arrays, strings, finite numbers,
   * booleans, null). Called between two inputs when none of its calls waits for an answer; the
   * runner's checkpoint then holds it, and the journal is cut to the checkpoint (a journal of
   * bounded size). Leave out what `ctx` gives (positions, orders, bars, prices, the account):
   * the checkpoint holds the runner's state too.
   */
  saveState?(ctx: StrategyContext<P>): unknown;
  /**
   * Paper/live/replay: a resumed run (or a replay) of a journal that starts at a checkpoint gives
   * back what `saveState` returned, before the inputs after it are replayed. Both hooks or
   * neither: without them the journal is never cut and a resume replays all of it.
   */
  restoreState?(ctx: StrategyContext<P>, state: unknown): void;
}
