/**
 * Order calls whose answer was lost (fxcm/errors.ts answerLost: a timeout, the connection lost
 * mid-call, a gateway's 5xx): the broker may have run them, and resending could do it twice.
 * Such a call is settled from what the broker pushed since it was sent — its table pushes follow
 * an order within milliseconds — and, failing that, from one snapshot taken through the call
 * budget (never over it); what it placed becomes the run's, and its promise is answered as the
 * broker would have answered it. A call settled neither way is rejected with AnswerLostError
 * saying what was asked and found, and leaves a watch (LostCall): an order of its kind that shows
 * up later in the pushes, or at the next reconciliation, and matches it is claimed.
 *
 * What the broker pushes for each call the runner sends (reference §1.2; the simulator does the same):
 *   openTrade         Order I (type OM, its tradeId), OpenPosition I, Order D; a requote is Order I
 *                     (status 4) and D without a trade
 *   createEntryOrder  Order I (an entry order, status Waiting); when it fills, Order U/D and OpenPosition I
 *   createOco         two Order I (entry orders of one ocoBulkId)
 *   closeTrade        Order I (type CM, the trade's id), OpenPosition D (U for a part), ClosedPosition I, Order D
 *   deleteOrder       Order D (status Canceled); for an OCO order, one per order of its group
 * A match is what orphans.ts matches at a restart: the one order or trade the run did not know
 * before that has everything the request asked (symbol, side, amount, rate, stop, limit, trailing
 * step); none or several are said, never guessed.
 */
import type { Snapshot } from '../../fxcm/client';
import type { ModelName, TableAction, TableRecord } from '../../fxcm/types';
import { numOf } from './broker-state';
import { describeOrder, matchPlacedOrder, ocoGroupsOf, sameOrder } from './orphans';

/** The operations settled when their answer is lost (the others are rejected with AnswerLostError at once). */
export const SETTLED_OPS: ReadonlySet<string> = new Set(['openTrade', 'createEntryOrder', 'createOco', 'closeTrade', 'closeAll', 'deleteOrder']);
/** Operations that place orders: a lost one that is not found leaves a watch. */
export const PLACING_OPS: ReadonlySet<string> = new Set(['openTrade', 'createEntryOrder', 'createOco']);
/** How long a settling snapshot may wait for its budget before the call is left to its watch. */
export const LOST_SNAPSHOT_TTL_MS = 10_000;
/** How long (run time) after its settlement a lost order call's watch claims an order its pushes bring. */
export const LOST_WATCH_MS = 60_000;
/** Pushes kept while order calls wait for their answers (a bound, far above what a call's wait brings). */
const MAX_ARRIVALS = 20_000;

/**
 * The get_model models that show what became of a call: a market order is gone from the Order
 * table once it filled, its trade stays; a close leaves its ClosedPosition record.
 */
export function snapshotModels(op: string): ModelName[] {
  if (op === 'openTrade') return ['OpenPosition'];
  if (op === 'closeTrade' || op === 'closeAll') return ['OpenPosition', 'ClosedPosition'];
  if (op === 'deleteOrder') return ['Order'];
  return ['OpenPosition', 'Order'];
}

/** A snapshot's record of what a settled call did, handled as the push of it that did not come. */
export interface SnapshotRecord {
  model: ModelName;
  action: TableAction;
  rec: TableRecord;
}

/** What the engine knew when the call was made, for calls whose request does not say it all. */
export interface LostContext {
  /** closeTrade, closeAll: the trades it closes. */
  tradeIds?: string[];
  /** closeTrade: the trade's amount (K) when the close was asked, and how much it closes. */
  amountBefore?: number;
  amount?: number;
}

/** A lost order call that was not found: an order matching it that shows up later is the run's. */
export interface LostCall {
  /** The intent. */
  id: number;
  op: string;
  args: Record<string, unknown>;
  /** The run's time of its settlement. */
  since: number;
  /**
   * No snapshot could be taken (no budget, no connection): the next reconciliation settles it,
   * however late. Otherwise its pushes can claim it for LOST_WATCH_MS, then it is over.
   */
  awaitsSnapshot: boolean;
}

interface Arrival {
  seq: number;
  model: ModelName;
  action: TableAction;
  rec: TableRecord;
}

/** What the broker pushed since a mark: the orders inserted (merged with their later pushes), orders deleted, trades opened and closed. */
export interface Pushed {
  /** Orders whose I push came since, by id, each merged with its later U/D pushes. */
  orders: Map<string, TableRecord>;
  /** Orders (any) whose D push came since. */
  deleted: Set<string>;
  /** OpenPosition I records since (orderId from the Order pushes where a record has none). */
  positions: TableRecord[];
  /** Trades closed since (OpenPosition D, ClosedPosition I). */
  closed: Set<string>;
}

/**
 * The pushes that arrive while an order call waits for its answer (noted as they arrive, before
 * the engine's queue handles them): begin() marks where a call starts, since(mark) is what came
 * after it. Kept only while a call is out.
 */
export class PushLog {
  private seq = 0;
  private list: Arrival[] = [];
  private out = 0;

  begin(): number {
    this.out++;
    return this.seq;
  }

  end(): void {
    this.out = Math.max(0, this.out - 1);
    if (this.out === 0) this.list = [];
  }

  note(model: ModelName, action: TableAction, rec: TableRecord): void {
    if (this.out === 0) return;
    // the per-tick P/L updates of open trades say nothing about orders
    if (model !== 'Order' && model !== 'ClosedPosition' && !(model === 'OpenPosition' && action !== 'U')) return;
    this.list.push({ seq: ++this.seq, model, action, rec: { ...rec } });
    if (this.list.length > MAX_ARRIVALS) this.list.shift();
  }

  since(mark: number): Pushed {
    const out: Pushed = { orders: new Map(), deleted: new Set(), positions: [], closed: new Set() };
    const tradeOrder = new Map<string, string>();
    for (const a of this.list) {
      if (a.seq <= mark) continue;
      const r = a.rec;
      if (a.model === 'Order') {
        const id = String(r.orderId ?? '');
        if (!id) continue;
        if (a.action === 'I') out.orders.set(id, { ...r });
        else if (out.orders.has(id)) out.orders.set(id, { ...out.orders.get(id)!, ...r });
        if (a.action === 'D') out.deleted.add(id);
        if (r.tradeId) tradeOrder.set(String(r.tradeId), id);
      } else if (a.model === 'OpenPosition') {
        if (a.action === 'I') out.positions.push({ ...r });
        else if (a.action === 'D') out.closed.add(String(r.tradeId));
      } else if (a.action === 'I') out.closed.add(String(r.tradeId));
    }
    for (const p of out.positions) if ((p.orderId === undefined || p.orderId === '') && tradeOrder.has(String(p.tradeId))) p.orderId = tradeOrder.get(String(p.tradeId));
    return out;
  }
}

const isEntry = (r: TableRecord): boolean => r.isEntryOrder === true || r.type === 'SE' || r.type === 'LE';
const isClose = (r: TableRecord): boolean => String(r.type ?? '').startsWith('C');
const isMarket = (r: TableRecord): boolean => !isEntry(r) && !isClose(r) && !['S', 'ST', 'L'].includes(String(r.type ?? ''));

/** A market Order record for what an openTrade asked (its stop and limit are on the trade). */
function sameMarketOrder(args: Record<string, unknown>, r: TableRecord): boolean {
  return String(r.currency ?? '') === String(args.symbol ?? '') && (r.isBuy === true) === (args.isBuy === true) && numOf(r.amountK) === numOf(args.amount) && numOf(r.stopMove) === numOf(args.trailingStep);
}

/**
 * How a lost call was settled: found (the answer, the orders now the run's, what was seen and,
 * from a snapshot, its records of it), or not found / ambiguous (why).
 */
export type Found = { value: unknown; orderIds: string[]; what: string; records?: SnapshotRecord[] } | { notFound: string; ambiguous?: boolean };

const one = (ids: string[], value: (id: string) => unknown, what: (id: string) => string, kind: string): Found => {
  const unique = [...new Set(ids)];
  if (unique.length === 1) return { value: value(unique[0]!), orderIds: unique, what: what(unique[0]!) };
  if (unique.length > 1) return { notFound: `${unique.length} ${kind}s match it (${unique.join(', ')}), so which one is this run's is not guessed`, ambiguous: true };
  return { notFound: `no ${kind} matches it` };
};

/**
 * A lost call against the pushes since it was sent. `taken`: orders the run's other calls
 * created (not candidates). undefined: the pushes say nothing about it (yet).
 */
export function settleFromPushes(op: string, args: Record<string, unknown>, p: Pushed, taken: (orderId: string) => boolean, ctx: LostContext = {}): Found | undefined {
  const tradesOf = (orderId: string) => p.positions.filter((t) => String(t.orderId ?? '') === orderId).map((t) => String(t.tradeId));
  const trades = (id: string) => {
    const t = tradesOf(id);
    return t.length ? ` (trade${t.length > 1 ? 's' : ''} ${t.join(', ')})` : '';
  };
  const fresh = [...p.orders.values()].filter((r) => !taken(String(r.orderId)));
  if (op === 'openTrade') {
    // the market order (its trades, when their pushes came, have its stop and limit), or a trade whose order push was lost
    const levelsOk = (id: string) => {
      const ts = p.positions.filter((t) => String(t.orderId ?? '') === id);
      return !ts.length || ts.some((t) => sameOrder(args, { ...t, amountK: args.amount }, 'position'));
    };
    const ids = fresh.filter((r) => isMarket(r) && sameMarketOrder(args, r) && levelsOk(String(r.orderId))).map((r) => String(r.orderId));
    for (const t of p.positions) if (t.orderId && !taken(String(t.orderId)) && !p.orders.has(String(t.orderId)) && sameOrder(args, t, 'position')) ids.push(String(t.orderId));
    if (!ids.length) return undefined;
    return one(ids, (id) => ({ orderId: id }), (id) => {
      const r = p.orders.get(id);
      const status = numOf(r?.status);
      if (r && p.deleted.has(id) && !tradesOf(id).length && (status === 3 || status === 4)) return `order ${id}, ${status === 4 ? 'requoted' : 'cancelled'} by the broker without a trade`;
      return `order ${id}${trades(id)}`;
    }, 'order');
  }
  if (op === 'createEntryOrder') {
    const ids = fresh.filter((r) => isEntry(r) && sameOrder(args, r, 'entry')).map((r) => String(r.orderId));
    if (!ids.length) return undefined;
    return one(ids, (id) => ({ orderId: id }), (id) => `entry order ${id}${trades(id)}`, 'order');
  }
  if (op === 'createOco') {
    const groups = ocoGroupsOf(args, fresh.filter(isEntry));
    if (!groups.length) return undefined;
    if (groups.length > 1) return { notFound: `${groups.length} OCO groups match it, so which one is this run's is not guessed`, ambiguous: true };
    const ids = groups[0]!.map((r) => String(r.orderId));
    // the broker's simple_oco answer names no order: neither does the settled one
    return { value: { orderIds: [] }, orderIds: ids, what: `OCO orders ${ids.join(' and ')}` };
  }
  if (op === 'closeTrade' || op === 'closeAll') {
    const ids = ctx.tradeIds ?? [String(args.tradeId ?? '')];
    const done = (id: string) => p.closed.has(id) || [...p.orders.values()].some((r) => isClose(r) && String(r.tradeId ?? '') === id);
    if (!ids.length || !ids.every(done)) return undefined;
    return { value: undefined, orderIds: [], what: `trade${ids.length > 1 ? 's' : ''} ${ids.join(', ')} closed` };
  }
  if (op === 'deleteOrder') {
    const id = String(args.orderId ?? '');
    return p.deleted.has(id) ? { value: undefined, orderIds: [], what: `order ${id} deleted` } : undefined;
  }
  return undefined;
}

/**
 * A lost call against a snapshot taken after it. `known`: the order ids the run knew before the
 * call (a placed order is one it did not know).
 */
export function settleFromSnapshot(op: string, args: Record<string, unknown>, snap: Snapshot, known: Set<string>, ctx: LostContext = {}): Found {
  const placed = PLACING_OPS.has(op) ? matchPlacedOrder(op, args, snap, known) : undefined;
  if (placed) {
    if (!('value' in placed)) return { notFound: placed.why, ambiguous: placed.ambiguous };
    const ids = placed.orderIds;
    const trades = (snap.OpenPosition ?? []).filter((t) => ids.includes(String(t.orderId ?? '')));
    const orders = (snap.Order ?? []).filter((r) => ids.includes(String(r.orderId)));
    const records: SnapshotRecord[] = [...orders.map((rec) => ({ model: 'Order' as const, action: 'I' as const, rec })), ...trades.map((rec) => ({ model: 'OpenPosition' as const, action: 'I' as const, rec }))];
    const tradeIds = trades.map((t) => String(t.tradeId));
    return { value: placed.value, orderIds: ids, records, what: `${op === 'createOco' ? 'OCO orders' : 'order'} ${ids.join(' and ')}${tradeIds.length ? ` (trade ${tradeIds.join(', ')})` : ''}` };
  }
  const open = new Map((snap.OpenPosition ?? []).map((t) => [String(t.tradeId), t]));
  if (op === 'closeTrade' || op === 'closeAll') {
    const ids = ctx.tradeIds ?? [String(args.tradeId ?? '')];
    const partial = op === 'closeTrade' && ctx.amount !== undefined && ctx.amountBefore !== undefined && ctx.amount < ctx.amountBefore;
    const still = ids.filter((id) => {
      const t = open.get(id);
      return t !== undefined && !(partial && numOf(t.amountK) <= ctx.amountBefore! - ctx.amount!);
    });
    if (!still.length) {
      // the close's pushes did not come: the snapshot's close records, then the trades leave
      const closedRecs = (snap.ClosedPosition ?? []).filter((c) => ids.includes(String(c.tradeId)));
      const records: SnapshotRecord[] = partial
        ? ids.filter((id) => open.has(id)).map((id) => ({ model: 'OpenPosition' as const, action: 'U' as const, rec: open.get(id)! }))
        : [...closedRecs.map((rec) => ({ model: 'ClosedPosition' as const, action: 'I' as const, rec })), ...ids.map((id) => ({ model: 'OpenPosition' as const, action: 'D' as const, rec: { tradeId: id } }))];
      return { value: undefined, orderIds: [], records, what: `trade${ids.length > 1 ? 's' : ''} ${ids.join(', ')} ${partial ? 'reduced' : 'no longer open'}` };
    }
    return { notFound: `the broker still has trade${still.length > 1 ? 's' : ''} ${still.join(', ')} open${partial ? ` for ${numOf(open.get(still[0]!)?.amountK)}` : ''}: the close did not execute` };
  }
  if (op === 'deleteOrder') {
    const id = String(args.orderId ?? '');
    if (!(snap.Order ?? []).some((r) => String(r.orderId) === id)) {
      return { value: undefined, orderIds: [], records: [{ model: 'Order', action: 'D', rec: { orderId: id, status: 3 } }], what: `order ${id} no longer there` };
    }
    return { notFound: `the broker still has order ${id}: the delete did not execute` };
  }
  return { notFound: 'what it changed cannot be told from a snapshot' };
}

/** `openTrade buy 10 EUR/USD` */
export function describeCall(op: string, args: Record<string, unknown>): string {
  if (PLACING_OPS.has(op)) return `${op} ${describeOrder(args)}`;
  if (op === 'closeTrade') return `closeTrade of trade ${String(args.tradeId ?? '')}`;
  if (op === 'deleteOrder' || op === 'changeOrder') return `${op} of order ${String(args.orderId ?? '')}`;
  if (op === 'setStop' || op === 'setLimit') return `${op} of trade ${String(args.tradeId ?? '')}`;
  if (op === 'closeAll') return `closeAll${args.symbol ? ` ${String(args.symbol)}` : ''}`;
  return op;
}

/** Whether an order record the run has not claimed (a push of it, or a snapshot's) is what a watch waits for. */
export function watchMatches(w: LostCall, r: TableRecord): boolean {
  if (w.op === 'openTrade') return isMarket(r) && sameMarketOrder(w.args, r);
  if (w.op === 'createEntryOrder') return isEntry(r) && sameOrder(w.args, r, 'entry');
  return false;
}
