/**
 * The broker's state as the runner knows it, from the snapshot and the table pushes (records as
 * the broker sends them), and its mapping to what a strategy sees: positions, pending orders, the
 * account, the kind of an order, why a trade closed, and onTrade's event of a closed trade.
 *
 * Ownership: the account's records are all here, but a run owns only the orders its own calls
 * created (their ids come back in the broker's answers; an OCO's two orders, which its answer does
 * not name, are claimed by their symbol, amount, sides and rates) and the trades those orders
 * opened (linked by the OpenPosition record's orderId or an Order push's tradeId). The broker's
 * REST API has no field to tag an order with, so the journal keeps the claims (`own` lines). An
 * order call whose answer was lost and that nothing settled is watched for (lostCalls): an order
 * that matches it is claimed when it shows up.
 */
import type { TableRecord } from '../../fxcm/types';
import { pipOf } from '../../execution/instruments';
import type { ClosedTrade } from '../results';
import type { CloseReason, OrderKind, PendingOrder, Position, TradeEvent } from '../strategy';
import type { LostCall } from './lost-answers';

/** A record's number field (the broker sends numbers, sometimes as strings); `otherwise` when absent or malformed. */
export const numOf = (v: unknown, otherwise = 0): number =>
  typeof v === 'number' && Number.isFinite(v) ? v : v === undefined || v === null || v === '' ? otherwise : Number.isFinite(Number(v)) ? Number(v) : otherwise;

/** A broker time (`MMddyyyyHHmmss`, optionally with `fff` milliseconds; UTC) in epoch ms; undefined when it is not one. */
export function brokerTimeMs(v: unknown): number | undefined {
  const m = /^(\d\d)(\d\d)(\d{4})(\d\d)(\d\d)(\d\d)(\d{3})?$/.exec(String(v ?? ''));
  if (!m) return undefined;
  const ms = Date.UTC(Number(m[3]), Number(m[1]) - 1, Number(m[2]), Number(m[4]), Number(m[5]), Number(m[6]), Number(m[7] ?? 0));
  return Number.isFinite(ms) ? ms : undefined;
}

/** Two rates of a symbol that the broker stores as the same (within half a tenth of a pip). */
export const sameRate = (a: number, b: number, symbol: string): boolean => Math.abs(a - b) <= pipOf(symbol) / 20;

/** onTrade closed for a trade of the run's results, at `ts`. */
export function closedEvent(t: ClosedTrade, ts: number): TradeEvent {
  return { kind: 'closed', tradeId: t.tradeId, symbol: t.symbol, isBuy: t.isBuy, amount: t.amount, openRate: t.openRate, closeRate: t.closeRate, plPips: t.plPips, pl: t.pl, commission: t.commission, reason: t.reason, ts };
}

/** An OCO request of this run: the legs (side and rate) whose orders it has not claimed yet. */
export interface OcoClaim {
  symbol: string;
  amount: number;
  legs: { isBuy: boolean; rate: number }[];
}

/** BrokerState as a checkpoint keeps it: every map as its entries, every set as its members. */
export interface SavedBrokerState {
  positions: [string, TableRecord][];
  orders: [string, TableRecord][];
  account: TableRecord | null;
  openTimes: [string, number][];
  knownOrderIds: string[];
  closeReasons: [string, CloseReason][];
  ownOrders: string[];
  ownTrades: string[];
  tradeOrders: [string, string][];
  pendingOco: OcoClaim[];
  /** Absent in checkpoints written before lost answers were settled. */
  lostCalls?: LostCall[];
}

/** A level field where 0 means none. */
const nonZero = (v: unknown): number | undefined => (numOf(v) === 0 ? undefined : numOf(v));

export class BrokerState {
  /** Open positions by trade id. */
  readonly positions = new Map<string, TableRecord>();
  /** Resting entry orders by order id. */
  readonly orders = new Map<string, TableRecord>();
  account: TableRecord | undefined;
  /** When the runner first saw each trade (the broker's records have no open time in ms). */
  readonly openTimes = new Map<string, number>();
  /** Every order id seen (to tell a restart's orphaned order from the known ones). */
  readonly knownOrderIds = new Set<string>();
  /** Why a trade is closing: the runner's own close, a flatten, or the broker's stop/limit. */
  readonly closeReasons = new Map<string, CloseReason>();
  /** The orders this run created and the trades they opened. */
  readonly ownOrders = new Set<string>();
  readonly ownTrades = new Set<string>();
  /** The order that opened each trade, as far as the broker said. */
  readonly tradeOrders = new Map<string, string>();
  /** OCO requests of this run whose orders have not been claimed yet. */
  readonly pendingOco: OcoClaim[] = [];
  /** Order calls of this run whose answer was lost and that nothing settled yet (lost-answers.ts): an order matching one is claimed. */
  readonly lostCalls: LostCall[] = [];

  saved(): SavedBrokerState {
    return {
      positions: [...this.positions],
      orders: [...this.orders],
      account: this.account ?? null,
      openTimes: [...this.openTimes],
      knownOrderIds: [...this.knownOrderIds],
      closeReasons: [...this.closeReasons],
      ownOrders: [...this.ownOrders],
      ownTrades: [...this.ownTrades],
      tradeOrders: [...this.tradeOrders],
      pendingOco: this.pendingOco,
      lostCalls: this.lostCalls,
    };
  }

  /** Takes back a saved state (into a BrokerState that has none yet). */
  restore(s: SavedBrokerState): void {
    const fill = <K, V>(m: Map<K, V>, entries: [K, V][]) => entries.forEach(([k, v]) => m.set(k, v));
    fill(this.positions, s.positions);
    fill(this.orders, s.orders);
    this.account = s.account ?? undefined;
    fill(this.openTimes, s.openTimes);
    s.knownOrderIds.forEach((id) => this.knownOrderIds.add(id));
    fill(this.closeReasons, s.closeReasons);
    s.ownOrders.forEach((id) => this.ownOrders.add(id));
    s.ownTrades.forEach((id) => this.ownTrades.add(id));
    fill(this.tradeOrders, s.tradeOrders);
    this.pendingOco.push(...s.pendingOco);
    this.lostCalls.push(...(s.lostCalls ?? []));
  }

  /** Notes which order opened a trade; true when that makes the trade this run's. */
  link(tradeId: string, orderId: string): boolean {
    if (!tradeId || !orderId) return false;
    this.tradeOrders.set(tradeId, orderId);
    if (!this.ownOrders.has(orderId) || this.ownTrades.has(tradeId)) return false;
    this.ownTrades.add(tradeId);
    return true;
  }

  /** Claims an order for this run; returns the trades it opened that became this run's. */
  claimOrder(orderId: string): string[] {
    this.ownOrders.add(orderId);
    const trades: string[] = [];
    for (const [tradeId, o] of this.tradeOrders) {
      if (o === orderId && !this.ownTrades.has(tradeId)) {
        this.ownTrades.add(tradeId);
        trades.push(tradeId);
      }
    }
    return trades;
  }

  /**
   * The OCO request a resting entry order not yet owned belongs to, if any: same symbol, amount,
   * side and rate as one of its unclaimed legs (that leg is then taken).
   */
  takeOcoLeg(r: TableRecord): boolean {
    const o = this.pending(r);
    for (const claim of this.pendingOco) {
      if (claim.symbol !== o.symbol || claim.amount !== o.amount) continue;
      const i = claim.legs.findIndex((l) => l.isBuy === o.isBuy && sameRate(l.rate, o.rate, o.symbol));
      if (i < 0) continue;
      claim.legs.splice(i, 1);
      if (!claim.legs.length) this.pendingOco.splice(this.pendingOco.indexOf(claim), 1);
      return true;
    }
    return false;
  }

  /** This run's positions (every position of the account with `accountWide`). */
  ownPositions(accountWide = false): TableRecord[] {
    return [...this.positions.values()].filter((r) => accountWide || this.ownTrades.has(String(r.tradeId)));
  }

  /** This run's resting entry orders (every one of the account with `accountWide`). */
  ownEntryOrders(accountWide = false): TableRecord[] {
    return [...this.orders.values()].filter((r) => accountWide || this.ownOrders.has(String(r.orderId)));
  }

  position(r: TableRecord): Position {
    const id = String(r.tradeId);
    return {
      tradeId: id,
      symbol: String(r.currency ?? ''),
      isBuy: r.isBuy === true,
      amount: numOf(r.amountK),
      openRate: numOf(r.open),
      openTime: this.openTimes.get(id) ?? 0,
      stop: nonZero(r.stop),
      limit: nonZero(r.limit),
      trailingStep: nonZero(r.stopMove),
      plPips: numOf(r.visiblePL),
      pl: numOf(r.grossPL),
    };
  }

  pending(r: TableRecord): PendingOrder {
    return {
      orderId: String(r.orderId),
      symbol: String(r.currency ?? ''),
      isBuy: r.isBuy === true,
      amount: numOf(r.amountK),
      rate: numOf(r.isBuy ? r.buy : r.sell) || numOf(r.buy) || numOf(r.sell),
      stop: nonZero(r.stopRate),
      limit: nonZero(r.limitRate),
      ocoGroup: numOf(r.ocoBulkId) ? String(r.ocoBulkId) : undefined,
    };
  }

  accountId(): string | undefined {
    const id = this.account?.accountId;
    return id === undefined ? undefined : String(id);
  }

  orderKind(r: TableRecord): OrderKind {
    const type = String(r.type ?? '');
    if (r.isEntryOrder === true || type === 'SE' || type === 'LE') return 'entry';
    if (type.startsWith('C')) return 'close';
    if (type === 'S' || type === 'ST') return 'stop';
    if (type === 'L') return 'limit';
    return 'market';
  }

  /** A stop or limit order the broker executes for a trade names why the trade closes. */
  noteBrokerClose(tradeId: string, kind: 'stop' | 'limit'): void {
    if (this.closeReasons.has(tradeId) || !this.positions.has(tradeId)) return;
    const trailing = kind === 'stop' && numOf(this.positions.get(tradeId)?.stopMove) > 0;
    this.closeReasons.set(tradeId, trailing ? 'trailing' : kind);
  }

  /**
   * Why a trade the broker closed while the runner was away closed, from its last known record and
   * its close rate: at its limit, by its trailing stop (which may have moved anywhere meanwhile), at
   * or past its stop, or for a reason the broker does not say ('broker').
   */
  awayCloseReason(last: TableRecord, closeRate: number, pip: number): CloseReason {
    const isBuy = last.isBuy === true;
    const stop = numOf(last.stop);
    const limit = numOf(last.limit);
    const slack = 3 * pip; // a close at the level can slip a little
    if (limit > 0 && (isBuy ? closeRate >= limit - slack : closeRate <= limit + slack)) return 'limit';
    if (stop > 0 && numOf(last.stopMove) > 0) return 'trailing';
    if (stop > 0 && (isBuy ? closeRate <= stop + slack : closeRate >= stop - slack)) return 'stop';
    return 'broker';
  }

  closeReasonsPending(): boolean {
    for (const id of this.closeReasons.keys()) if (this.positions.has(id)) return true;
    return false;
  }
}
