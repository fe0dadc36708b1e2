/**
 * The strategy context of paper, live and replay runs: what a strategy reads (prices, bars,
 * positions, orders, the account, from the broker's state) and what it asks for, each request an
 * intent of the engine mapped to its broker call (FxcmClient), checked first against what the
 * runner knows (a trade or order that does not exist or is another run's) and by the pre-trade
 * check of every mode (pre-trade.ts: the request, the symbol, the broker's rules, the safety
 * limits). A trade or order the broker no longer has (it closed or filled before the runner heard)
 * is OrderGoneError, and the broker's refusal of an order call OrderRejectedError (its rule and
 * code kept), as in a backtest.
 */
import type { FxcmClient } from '../../fxcm/client';
import { FxcmApiError, FxcmNotFoundError, FxcmRuleError, parseBrokerError } from '../../fxcm/errors';
import { describeBody, ruleOfBody } from '../../fxcm/rules';
import type { BarHistory } from './bars';
import { numOf, type BrokerState } from '../reconcile/broker-state';
import { OrderGoneError, OrderRejectedError, SafetyError } from '../errors';
import type { PreTradeCheck } from './pre-trade';
import { pipOf } from '../../execution/instruments';
import type { AccountInfo, RunMode, Scope, StopLimitOptions, Strategy, StrategyContext, StrategyLogger, Tick } from '../strategy';

/** A request's ttlMs, read before it is checked (the check itself refuses a bad one). */
const ttlOf = (req: unknown): number | undefined => {
  const t = (req as { ttlMs?: unknown } | null | undefined)?.ttlMs;
  return typeof t === 'number' && Number.isFinite(t) ? t : undefined;
};

/** What the context needs from its engine. */
export interface LiveContextHost {
  readonly mode: Exclude<RunMode, 'backtest'>;
  readonly strategy: Strategy<Record<string, unknown>>;
  /** The strategy's defaults with the run's parameters over them. */
  readonly params: Record<string, unknown>;
  readonly log: StrategyLogger;
  readonly history: BarHistory;
  readonly broker: BrokerState;
  now(): number;
  quote(symbol: string): Tick | undefined;
  accountInfo(): AccountInfo;
  /** An intent: journaled, checked, then sent through the limiter (answered from the journal in a replay). */
  op<T>(name: string, args: unknown, check: () => void, send: (c: FxcmClient) => Promise<T>, ttlMs?: number): Promise<T>;
  /** The pre-trade check of every mode, on the broker's state. */
  readonly check: PreTradeCheck;
  setTimer(name: string, everyMs: number): void;
  clearTimer(name: string): void;
}

export function liveContext(h: LiveContextHost): StrategyContext<Record<string, unknown>> {
  const broker = h.broker;
  const foreign = (what: 'trade' | 'order', id: string) =>
    new SafetyError('ownership', `${what} ${id} was not opened by this run (another run's, or opened outside the runner); pass { accountWide: true } to act on it`);
  const mustTrade = (id: string, scope?: Scope): void => {
    if (!broker.positions.has(id)) throw new OrderGoneError('trade', id);
    if (!scope?.accountWide && !broker.ownTrades.has(id)) throw foreign('trade', id);
  };
  const mustOrder = (id: string, scope?: Scope): void => {
    if (!broker.orders.has(id)) throw new OrderGoneError('order', id);
    if (!scope?.accountWide && !broker.ownOrders.has(id)) throw foreign('order', id);
  };
  /**
   * The broker's answer to an order call, as a backtest gives it: its "not found" for the trade or
   * order a call names is OrderGoneError; a refusal of the order (a rule the client checks, or an
   * error body or text of the broker, but not a refused bearer, a rate limit or a server error) is
   * OrderRejectedError with the rule and the broker's code.
   */
  const refusal = (gone?: { what: 'trade' | 'order'; id: string }) => (e: unknown): never => {
    if (gone && e instanceof FxcmNotFoundError) throw new OrderGoneError(gone.what, gone.id);
    if (e instanceof FxcmRuleError) throw new OrderRejectedError(describeBody({ code: e.code, message: e.brokerMessage, parameters: e.parameters }), e.rule, e.code, e);
    if (e instanceof FxcmApiError && Object.getPrototypeOf(e) === FxcmApiError.prototype) {
      const body = parseBrokerError(e.rawError);
      throw new OrderRejectedError(`the broker refused it: ${body ? describeBody(body) : e.brokerMessage || 'not executed'}`, (body && ruleOfBody(body)) ?? 'broker', body?.code, e);
    }
    throw e;
  };
  /** The strategy closed these trades: those not yet gone close for that reason. */
  const closing = (tradeIds: readonly string[]): void => {
    for (const id of tradeIds) if (broker.positions.has(id)) broker.closeReasons.set(id, 'close');
  };
  const tradeLevel = (op: string, kind: 'stop' | 'limit', tradeId: string, rate: number, opts: StopLimitOptions | undefined): Promise<void> => {
    let v!: ReturnType<PreTradeCheck['tradeLevel']>;
    const check = () => {
      mustTrade(tradeId, opts);
      v = h.check.tradeLevel(kind, broker.position(broker.positions.get(tradeId)!), rate, opts);
    };
    return h.op(op, { tradeId, rate, ...opts }, check, (c) =>
      c
        .changeTradeStopLimit({ tradeId, isStop: kind === 'stop', rate: v.rate, isInPips: !!v.opts.isInPips, ...(kind === 'stop' ? { trailingStep: v.opts.trailingStep } : {}) })
        .catch(refusal({ what: 'trade', id: tradeId })),
    );
  };
  return {
    mode: h.mode,
    params: h.params,
    log: h.log,
    symbols: [...h.strategy.symbols],
    now: h.now,
    price: h.quote,
    pip: pipOf,
    candles: (sym, tf, count) => h.history.candles(sym, tf, count),
    positions: (sym, scope) => broker.ownPositions(scope?.accountWide).map((r) => broker.position(r)).filter((p) => !sym || p.symbol === sym),
    orders: (sym, scope) => broker.ownEntryOrders(scope?.accountWide).map((r) => broker.pending(r)).filter((p) => !sym || p.symbol === sym),
    account: () => h.accountInfo(),
    // Each request is checked (order-requests.ts) inside the intent, so a refusal is journaled as
    // its answer; what is sent is the checked request, its rates rounded.
    openTrade: (req) => {
      let r!: ReturnType<PreTradeCheck['openTrade']>;
      const check = () => {
        r = h.check.openTrade(req);
      };
      return h.op('openTrade', req, check, async (c) => {
        const res = await c.openTrade({ symbol: r.symbol, isBuy: r.isBuy, amount: r.amount, stop: r.stop, limit: r.limit, trailingStep: r.trailingStep, isInPips: r.isInPips, accountId: broker.accountId() }).catch(refusal());
        return { orderId: res.orderId };
      }, ttlOf(req));
    },
    createEntryOrder: (req) => {
      let r!: ReturnType<PreTradeCheck['entryOrder']>;
      const check = () => {
        r = h.check.entryOrder(req);
      };
      return h.op('createEntryOrder', req, check, async (c) => {
        const res = await c
          .createEntryOrder({ symbol: r.symbol, isBuy: r.isBuy, amount: r.amount, rate: r.rate, stop: r.stop, limit: r.limit, trailingStep: r.trailingStep, isInPips: r.isInPips, accountId: broker.accountId() })
          .catch(refusal());
        return { orderId: res.orderId };
      }, ttlOf(req));
    },
    createOco: (req) => {
      let r!: ReturnType<PreTradeCheck['oco']>;
      const check = () => {
        r = h.check.oco(req);
      };
      return h.op('createOco', req, check, async (c) => {
        await c
          .simpleOco({
          symbol: r.symbol,
          amount: r.amount,
          isInPips: r.isInPips,
          isBuy: r.first.isBuy,
          rate: r.first.rate,
          stop: r.first.stop,
          limit: r.first.limit,
          isBuy2: r.second.isBuy,
          rate2: r.second.rate,
          stop2: r.second.stop,
          limit2: r.second.limit,
          accountId: broker.accountId(),
          })
          .catch(refusal());
        return { orderIds: [] as string[] };
      }, ttlOf(req));
    },
    // Why a trade closes is noted when its close is sent (the broker's push of the close can come
    // before the call's answer), and again after the answer: a replay sends nothing.
    closeTrade: (tradeId, amount, scope) => {
      let a!: number;
      const check = () => {
        mustTrade(tradeId, scope);
        a = h.check.closeTrade({ tradeId, amount: numOf(broker.positions.get(tradeId)!.amountK) }, amount);
      };
      return h
        .op('closeTrade', { tradeId, amount, ...scope }, check, async (c) => {
          closing([tradeId]);
          await c.closeTrade({ tradeId, amount: a }).catch(refusal({ what: 'trade', id: tradeId }));
        })
        .then(() => closing([tradeId]));
    },
    // The trades open when the strategy asks (those still open when the call goes out are closed).
    // The broker's close_all_for_symbol closes every trade of the account: only with accountWide.
    closeAll: (symbol, scope) => {
      const asked = broker.ownPositions(scope?.accountWide).filter((r) => !symbol || r.currency === symbol).map((r) => String(r.tradeId));
      return h
        .op('closeAll', { symbol, ...scope }, () => undefined, async (c) => {
          const list = asked.map((id) => broker.positions.get(id)).filter((r) => r !== undefined);
          if (!list.length) return;
          closing(asked);
          if (scope?.accountWide) {
            await c.closeAllForSymbol({ symbol: symbol ?? String(list[0]!.currency), forSymbol: symbol !== undefined, accountId: broker.accountId() }).catch(refusal());
            return;
          }
          const closes = await Promise.allSettled(list.map((r) => c.closeTrade({ tradeId: String(r.tradeId), amount: numOf(r.amountK) })));
          const failed = closes.find((x): x is PromiseRejectedResult => x.status === 'rejected');
          // a trade that closed meanwhile is closed all the same
          if (failed && !(failed.reason instanceof FxcmNotFoundError)) refusal()(failed.reason);
        })
        .then(() => closing(asked));
    },
    setStop: (tradeId, rate, opts) => tradeLevel('setStop', 'stop', tradeId, rate, opts),
    setLimit: (tradeId, rate, opts) => tradeLevel('setLimit', 'limit', tradeId, rate, opts),
    changeOrder: (orderId, rate, amount, scope) => {
      let v!: ReturnType<PreTradeCheck['changeOrder']>;
      const check = () => {
        mustOrder(orderId, scope);
        v = h.check.changeOrder(broker.pending(broker.orders.get(orderId)!), rate, amount);
      };
      return h.op('changeOrder', { orderId, rate, amount, ...scope }, check, (c) =>
        c.changeOrder({ orderId, rate: v.rate, amount: v.amount ?? numOf(broker.orders.get(orderId)?.amountK) }).catch(refusal({ what: 'order', id: orderId })),
      );
    },
    // The broker deletes an OCO order's whole group. Its Order D pushes are handled after the hook,
    // so the group leaves the runner's state now: a delete of the other leg is then OrderGoneError,
    // as in a backtest. After the answer, not in the send: a replay runs this too.
    deleteOrder: (orderId, scope) => {
      const group = broker.pending(broker.orders.get(orderId) ?? {}).ocoGroup;
      return h.op('deleteOrder', { orderId, ...scope }, () => mustOrder(orderId, scope), (c) => c.deleteOrder(orderId).catch(refusal({ what: 'order', id: orderId }))).then((v) => {
        for (const [id, r] of [...broker.orders]) if (id === orderId || (group !== undefined && broker.pending(r).ocoGroup === group)) broker.orders.delete(id);
        return v;
      });
    },
    setTimer: (name, everyMs) => {
      if (!(everyMs > 0)) throw new Error('setTimer: everyMs must be > 0');
      h.setTimer(name, everyMs);
    },
    clearTimer: (name) => h.clearTimer(name),
  };
}
