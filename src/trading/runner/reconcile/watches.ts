/**
 * The watches of order calls whose answer was lost and that nothing settled (lost-answers.ts:
 * LostCall), kept in the broker state: an order of the account that matches one becomes the run's,
 * when it is pushed (for LOST_WATCH_MS, or until the next reconciliation when no snapshot could be
 * taken) or when the next reconciliation's snapshot has it; that reconciliation ends every watch.
 * Each watch's end is logged and journaled (`watched`, not an input).
 */
import type { Snapshot } from '../../fxcm/client';
import type { TableRecord } from '../../fxcm/types';
import type { BrokerState } from './broker-state';
import { LOST_WATCH_MS, describeCall, watchMatches, type LostCall } from './lost-answers';
import { matchPlacedOrder } from './orphans';
import type { ReconcileRun } from './run-book';

/** Lost order calls watched for at most (the oldest is dropped, said in the log). */
const MAX_LOST_CALLS = 50;

/** A lost order call's watch begins (from its `own` input). */
export function watchLostCall(run: ReconcileRun, lost: LostCall): void {
  const watches = run.book.broker.lostCalls;
  watches.push({ ...lost, args: { ...lost.args } });
  // a bound: a strategy whose calls keep losing their answers does not grow the state for ever
  if (watches.length > MAX_LOST_CALLS) {
    const old = watches.shift()!;
    run.log.warn(`intent ${old.id} (${describeCall(old.op, old.args)}), whose answer was lost, is no longer watched for: more than ${MAX_LOST_CALLS} are`);
    run.journal({ k: 'watched', t: run.now(), id: old.id, outcome: 'no longer watched' });
  }
}

/** A new order of the account (its Order I push) that a watch waits for becomes the run's. */
export function claimWatched(run: ReconcileRun, orderId: string, r: TableRecord): void {
  const broker = run.book.broker;
  const now = run.now();
  const i = broker.lostCalls.findIndex((w) => (w.awaitsSnapshot || now - w.since <= LOST_WATCH_MS) && watchMatches(w, r));
  if (i < 0) return;
  const w = broker.lostCalls.splice(i, 1)[0]!;
  broker.claimOrder(orderId);
  run.log.warn(`order ${orderId} is what intent ${w.id} (${describeCall(w.op, w.args)}) placed after all, though its answer was lost: claimed by this run`);
  run.journal({ k: 'watched', t: now, id: w.id, outcome: `claimed order ${orderId}` });
}

/**
 * A reconciliation settles the watches: the order the snapshot has that matches one (and the run
 * did not know) is the run's; a watch it does not find is over.
 */
export function settleWatches(run: ReconcileRun, snap: Snapshot): void {
  const broker = run.book.broker;
  const now = run.now();
  for (const w of broker.lostCalls.splice(0)) {
    if (!w.awaitsSnapshot && now - w.since > LOST_WATCH_MS) continue;
    const m = matchPlacedOrder(w.op, w.args, snap, broker.knownOrderIds);
    const what = `intent ${w.id} (${describeCall(w.op, w.args)})`;
    if (m && 'value' in m) {
      for (const id of m.orderIds) broker.claimOrder(id);
      run.log.warn(`the reconciliation finds what ${what} placed, though its answer was lost: order ${m.orderIds.join(', ')}, claimed by this run`);
    } else run.log.info(`the reconciliation does not find what ${what}, whose answer was lost, would have placed${m ? ` (${m.why})` : ''}: it did not execute`);
    run.journal({ k: 'watched', t: now, id: w.id, outcome: m && 'value' in m ? `claimed order ${m.orderIds.join(', ')}` : 'not at the broker' });
  }
}

/** The lost order calls that wait for a reconciliation to say what they placed (a run's result: `unsettled`). */
export function unsettledCalls(broker: BrokerState): string[] {
  return broker.lostCalls.filter((w) => w.awaitsSnapshot).map((w) => `intent ${w.id} (${describeCall(w.op, w.args)})`);
}
