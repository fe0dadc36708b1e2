/**
 * The one pre-trade check of every mode: backtest, sweep (its backtests), paper and live run each
 * request of a strategy through it before anything is booked or sent, so the same request gets
 * the same answer, and the same error class for the same cause, whatever the mode:
 *
 *  1. the request itself (order-requests.ts): InvalidRequestError naming the field;
 *  2. the symbol is one of the strategy's: SafetyError `symbol`;
 *  3. the broker's rules (fxcm/rules.ts, which the simulated broker enforces too): an amount that is
 *     a multiple of 10 and at most the broker's maximum, a close of no more than the trade holds,
 *     a trailing step of 0, 1 or >= 10, enough usable margin for the order's margin (execution/instruments.ts `marginOf`, the simulator's formula):
 *     OrderRejectedError with the rule and the broker's code;
 *  4. the runner's safety limits (safety.ts): the daily loss halt, the position per symbol and
 *     side (open trades and pending entry orders, an OCO group's legs of one side once), the
 *     usable margin left after the order: SafetyError with the limit's name;
 *  5. the protections' locks (protections.ts): SafetyError with the protection's name.
 *
 * An entry order is checked as if it filled now at its rate. In paper and live the broker's own
 * refusal stays the last word (live-context.ts maps it to OrderRejectedError too); this check
 * mirrors it, so a backtest sees what the broker would answer.
 */
import { checkAmount, checkCloseWithinTrade, checkMargin, checkTrailingStep, describeBody } from '../../fxcm/rules';
import type { BrokerErrorBody } from '../../fxcm/errors';
import { openSide } from '../../execution/fills';
import { marginOf } from '../../execution/instruments';
import { OrderRejectedError, SafetyError } from '../errors';
import { checkChangeOrder, checkCloseAmount, checkEntryOrder, checkOco, checkOpenTrade, checkTradeLevel, type BidAsk } from './order-requests';
import type { SafetyGuard } from '../protections/safety';
import type { Protections } from '../protections/protections';
import type { EntryOrderRequest, OcoRequest, OpenTradeRequest, StopLimitOptions } from '../strategy';

/** An open trade or a pending entry order, as position limits count it. */
export interface Exposure {
  isBuy: boolean;
  amount: number;
}

export interface PendingExposure extends Exposure {
  orderId: string;
  ocoGroup?: string;
}

/** What the check reads of a mode's state. */
export interface PreTradeView {
  /** The strategy's symbols. */
  readonly symbols: readonly string[];
  readonly currency: string;
  /** The account's leverage (margin = notional / leverage). */
  readonly leverage: number;
  now(): number;
  quote(symbol: string): BidAsk | undefined;
  /** Equity and usable margin now; undefined while unknown (paper and live before the account's first record). */
  margin(): { equity: number; usableMargin: number } | undefined;
  /** The open trades and the pending entry orders of a symbol. */
  positions(symbol: string): readonly Exposure[];
  entries(symbol: string): readonly PendingExposure[];
}

function refused(rule: string, body: BrokerErrorBody): OrderRejectedError {
  return new OrderRejectedError(describeBody(body), rule, body.code);
}

/** The pending entries of one side, an OCO group's legs once (only one of them can fill). */
function pendingOf(entries: readonly PendingExposure[], isBuy: boolean, except?: string): Exposure[] {
  const groups = new Map<string, number>();
  const out: Exposure[] = [];
  for (const e of entries) {
    if (e.isBuy !== isBuy || e.orderId === except) continue;
    if (e.ocoGroup === undefined) out.push({ isBuy, amount: e.amount });
    else groups.set(e.ocoGroup, Math.max(groups.get(e.ocoGroup) ?? 0, e.amount));
  }
  for (const amount of groups.values()) out.push({ isBuy, amount });
  return out;
}

export class PreTradeCheck {
  constructor(
    private readonly guard: SafetyGuard,
    private readonly view: PreTradeView,
    private readonly protections?: Protections,
  ) {}

  private symbol(symbol: string): void {
    if (!this.view.symbols.includes(symbol)) throw new SafetyError('symbol', `${symbol} is not one of the strategy's symbols (${this.view.symbols.join(', ')})`);
  }

  private amount(amount: number): void {
    const b = checkAmount(amount);
    if (b) throw refused('amount', b);
  }

  private trailingStep(step: number | undefined): void {
    const b = checkTrailingStep(step);
    if (b) throw refused('trailing_step', b);
  }

  /**
   * A position of `amount` on `isBuy` at `rate` (a market order: the side it opens at now): the
   * margin, then the safety limits. `except`: an entry order being changed, not counted. Without
   * a quote for a market order (paper and live before the first price) the margin is the broker's
   * to check; a backtest's book has no price to fill at then (OrderRejectedError `price`).
   */
  private opening(symbol: string, isBuy: boolean, amount: number, rate: number | undefined, except?: string): void {
    const q = this.view.quote(symbol);
    const price = rate ?? (q ? openSide(isBuy, q.bid, q.ask) : undefined);
    const need = price === undefined ? undefined : marginOf(symbol, this.view.currency, amount * 1000, price, this.view.leverage);
    const m = this.view.margin();
    const short = m && need !== undefined && checkMargin(need, m.usableMargin);
    if (short) throw new OrderRejectedError(`not enough usable margin for ${amount}K ${symbol}: need ${short.parameters[0]}, have ${short.parameters[1]}`, 'margin', short.code);
    const exposure = [...this.view.positions(symbol), ...pendingOf(this.view.entries(symbol), isBuy, except)];
    this.guard.checkOpen(symbol, isBuy, amount, exposure, this.view.now(), m?.equity ?? 0, m && need !== undefined ? m.usableMargin - need : undefined);
    this.protections?.check(symbol, this.view.now());
  }

  /** A market order: the checked request, rates rounded. */
  openTrade(req: unknown): OpenTradeRequest {
    const r = checkOpenTrade(req, (sym) => this.view.quote(sym));
    this.symbol(r.symbol);
    this.amount(r.amount);
    this.trailingStep(r.trailingStep);
    this.opening(r.symbol, r.isBuy, r.amount, undefined);
    return r;
  }

  /** An entry order, as if it filled now at its rate. */
  entryOrder(req: unknown): EntryOrderRequest {
    const r = checkEntryOrder(req);
    this.symbol(r.symbol);
    this.amount(r.amount);
    this.trailingStep(r.trailingStep);
    this.opening(r.symbol, r.isBuy, r.amount, r.rate);
    return r;
  }

  /** Two entry orders in one group: each leg as an entry order (only one of them fills). */
  oco(req: unknown): OcoRequest {
    const r = checkOco(req);
    this.symbol(r.symbol);
    this.amount(r.amount);
    for (const leg of [r.first, r.second]) this.opening(r.symbol, leg.isBuy, r.amount, leg.rate);
    return r;
  }

  /** closeTrade's amount (all of the trade when omitted): a multiple of 10, no more than the trade holds. */
  closeTrade(trade: { tradeId: string; amount: number }, amount: unknown): number {
    const a = checkCloseAmount(amount) ?? trade.amount;
    this.amount(a);
    const over = checkCloseWithinTrade(a, trade.amount);
    if (over) throw new OrderRejectedError(`closeTrade ${a}K of trade ${trade.tradeId}: it holds ${trade.amount}K`, 'amount', over.code);
    return a;
  }

  /** setStop / setLimit of an open trade. */
  tradeLevel(kind: 'stop' | 'limit', trade: { symbol: string; isBuy: boolean }, rate: unknown, opts: unknown): { rate: number; opts: StopLimitOptions } {
    const v = checkTradeLevel(kind, trade, rate, opts, this.view.quote(trade.symbol));
    this.trailingStep(v.opts.trailingStep);
    return v;
  }

  /** changeOrder of a pending entry order: its new rate, and a larger amount checked as a new order's would be. */
  changeOrder(order: { orderId: string; symbol: string; isBuy: boolean; amount: number }, rate: unknown, amount: unknown): { rate: number; amount: number | undefined } {
    const v = checkChangeOrder(order.symbol, rate, amount);
    if (v.amount === undefined) return v;
    this.amount(v.amount);
    if (v.amount > order.amount) this.opening(order.symbol, order.isBuy, v.amount, v.rate, order.orderId);
    return v;
  }
}
