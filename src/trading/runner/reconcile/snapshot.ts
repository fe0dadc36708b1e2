/**
 * A broker snapshot (get_model: Account, OpenPosition, Order; a restart adds ClosedPosition)
 * applied to a paper or live run's book. The start's replaces what the run knows; a resume's or a
 * reconnect's is also the reconciliation, the one for both: the watches of lost calls settled, this
 * run's trades the broker closed meanwhile counted with the broker's close and P/L (onTrade closed),
 * its entry orders filled meanwhile (onOrder filled, onTrade opened) or gone (onOrder cancelled),
 * then onReconnect with the counts. The engine (SnapshotRun) keeps the results and runs the hooks.
 */
import type { Snapshot } from '../../fxcm/client';
import type { TableRecord } from '../../fxcm/types';
import { pipOf } from '../../execution/instruments';
import type { ClosedTrade } from '../results';
import type { CloseReason, OrderEvent, ReconnectEvent, TradeEvent } from '../strategy';
import { brokerTimeMs, closedEvent, numOf } from './broker-state';
import type { ReconcileRun } from './run-book';
import { settleWatches } from './watches';

/** Why a snapshot was taken: the run's start, a restart's resume, or a reconnect after the stream dropped. */
export type SnapshotReason = 'start' | 'resume' | 'reconnect';

/** The strategy's hooks a reconciliation runs, through the engine (a hook's error is the run's); undefined when the strategy has not got the hook. */
export interface ReconcileHooks {
  onTrade(e: TradeEvent): Promise<void> | undefined;
  onOrder(e: OrderEvent): Promise<void> | undefined;
  onReconnect(e: ReconnectEvent): Promise<void> | undefined;
}

/** What applying a snapshot needs of the run besides its book: its results, and what it tells the strategy. */
export interface SnapshotRun extends ReconcileRun, ReconcileHooks {
  /** onStart has run: from then on a snapshot is told to the strategy (before it, what the run holds counts as heard of). */
  started(): boolean;
  /** The account's record: the run's equity curve and its protections. */
  setAccount(r: TableRecord): void;
  /** A trade of the run closed, from the broker's close record: into the run's results (and its protections). */
  recordClosed(id: string, r: TableRecord, reason: CloseReason, closeTime: number): ClosedTrade;
  /** onTrade opened, onOrder accepted: once, for an own trade or resting entry order the strategy has not heard of. */
  announceTrade(id: string): Promise<void>;
  announceOrder(id: string): Promise<void>;
  /** After a reconnect, before onReconnect: the run's view and the outside told. */
  reconnected(info: ReconnectEvent): void;
}

/** A snapshot input: the snapshot, why it was taken, and (a reconnect) how long the stream was down. */
export interface SnapshotEvent {
  snap: Snapshot;
  reason?: SnapshotReason;
  downMs?: number;
}

/**
 * A snapshot replaces what the run knows of the broker; after the start (a resume or a reconnect)
 * it is also the reconciliation, told to the strategy.
 */
export async function applySnapshot(run: SnapshotRun, ev: SnapshotEvent): Promise<void> {
  const { broker, closedIds, deletedOrders, announcedTrades, announcedOrders } = run.book;
  const snap = ev.snap;
  const acc = (snap.Account ?? [])[0];
  if (acc) run.setAccount(acc);
  if (ev.reason === 'reconnect' || ev.reason === 'resume') settleWatches(run, snap);
  const before = new Map(broker.ownPositions().map((r) => [String(r.tradeId), r]));
  const ordersBefore = new Map(broker.ownEntryOrders().map((r) => [String(r.orderId), r]));
  broker.positions.clear();
  for (const r of snap.OpenPosition ?? []) {
    const id = String(r.tradeId);
    // a close pushed after the snapshot was taken was handled before it: the trade is gone
    if (closedIds.has(id)) continue;
    broker.positions.set(id, { ...r });
    if (!broker.openTimes.has(id)) broker.openTimes.set(id, run.now());
    if (r.orderId !== undefined && r.orderId !== '') {
      broker.knownOrderIds.add(String(r.orderId));
      broker.link(id, String(r.orderId));
    }
  }
  broker.orders.clear();
  for (const r of snap.Order ?? []) {
    const id = String(r.orderId);
    broker.knownOrderIds.add(id);
    if (broker.orderKind(r) === 'entry' && !deletedOrders.has(id)) broker.orders.set(id, { ...r });
  }
  deletedOrders.clear();
  for (const [id, r] of broker.orders) if (!broker.ownOrders.has(id) && broker.takeOcoLeg(r)) broker.claimOrder(id);
  if (!run.started()) {
    for (const r of broker.ownPositions()) announcedTrades.add(String(r.tradeId));
    for (const r of broker.ownEntryOrders()) announcedOrders.add(String(r.orderId));
    return;
  }
  const closedAway = new Map((snap.ClosedPosition ?? []).map((r) => [String(r.tradeId), r]));
  let closedCount = 0;
  for (const [id, r] of before) {
    if (broker.positions.has(id) || closedIds.has(id)) continue;
    closedCount++;
    const c = closedAway.get(id);
    if (!c) {
      // ClosedPosition lists the current trading day only.
      const p = broker.position(r);
      run.log.warn(`trade ${id} was closed while the runner was away and the broker no longer lists it: its close and P/L are not in this run's results`);
      await run.onTrade({ kind: 'closed', tradeId: id, symbol: p.symbol, isBuy: p.isBuy, amount: p.amount, openRate: p.openRate, reason: 'broker', ts: run.now() });
      continue;
    }
    const reason = broker.closeReasons.get(id) ?? broker.awayCloseReason(r, numOf(c.close), pipOf(String(r.currency ?? '')));
    const trade = run.recordClosed(id, { ...r, ...c }, reason, brokerTimeMs(c.closeTime) ?? run.now());
    run.log.info(`trade ${id} was closed while the runner was away: ${reason} at ${trade.closeRate}, P/L ${trade.pl.toFixed(2)}`);
    await run.onTrade(closedEvent(trade, run.now()));
  }
  const opened = broker.ownPositions().filter((r) => !before.has(String(r.tradeId)) && !announcedTrades.has(String(r.tradeId)));
  for (const [id, r] of ordersBefore) {
    if (broker.orders.has(id)) continue;
    const trade = opened.find((p) => String(p.orderId ?? '') === id);
    const base = { orderId: id, symbol: String(r.currency ?? ''), isBuy: r.isBuy === true, amount: numOf(r.amountK), kind: 'entry' as const, ts: run.now() };
    run.log.info(`entry order ${id} ${trade ? `filled while the runner was away: trade ${String(trade.tradeId)}` : 'is gone from the broker (cancelled or deleted while the runner was away)'}`);
    await run.onOrder(trade ? { ...base, status: 'filled', tradeId: String(trade.tradeId), rate: numOf(trade.open) } : { ...base, status: 'cancelled', reason: 'gone while away' });
  }
  for (const r of opened) await run.announceTrade(String(r.tradeId));
  // own entry orders the strategy has not heard of (claimed before this snapshot brought them)
  for (const r of broker.ownEntryOrders()) await run.announceOrder(String(r.orderId));
  if (ev.reason === 'reconnect' || ev.reason === 'resume') {
    const info: ReconnectEvent = {
      reason: ev.reason,
      ...(ev.downMs !== undefined ? { downMs: ev.downMs } : {}),
      closed: closedCount,
      opened: opened.length,
      positions: broker.ownPositions().length,
      orders: broker.ownEntryOrders().length,
      ts: run.now(),
    };
    const what = `${info.closed} of its trades closed, ${info.opened} opened meanwhile; ${info.positions} positions and ${info.orders} entry orders open`;
    if (ev.reason === 'reconnect') run.reconnected(info);
    if (ev.reason === 'reconnect') run.log.info(`reconciled with the broker after the reconnect${ev.downMs !== undefined ? ` (${(ev.downMs / 1000).toFixed(1)} s away)` : ''}: ${what}`);
    else run.log.info(`reconciled with the broker after the restart: ${what}`);
    await run.onReconnect(info);
  }
}
