/**
 * Settling an order call whose answer was lost (lost-answers.ts says how the broker's pushes and
 * a snapshot show what it did): what it found, what it claims, what the strategy is answered, and
 * the watch a call not found leaves. LiveEngine calls it with what it needs of the run.
 */
import type { Snapshot } from '../../fxcm/client';
import type { ModelName } from '../../fxcm/types';
import { AnswerLostError } from '../errors';
import type { OcoClaim } from './broker-state';
import { ocoClaimOf } from './claims';
import type { ReconcileRun } from './run-book';
import { PLACING_OPS, describeCall, settleFromPushes, settleFromSnapshot, snapshotModels, type LostCall, type LostContext, type SnapshotRecord } from './lost-answers';
import { errorMessage } from '../../../platform/errors';

/** How a lost answer was settled: the orders found (claims), or the watch it leaves. */
export interface Settlement {
  claims: string[];
  how?: 'pushes' | 'snapshot';
  watch?: { lost: LostCall } | { oco: OcoClaim };
  /** Settled from a snapshot: its records of what the call did, handled as the pushes that did not come. */
  records?: SnapshotRecord[];
}

/** What settling a lost call reads of the run: its book (the broker state, the pushes since the call, the orders whose claim is not handled yet), log and time. */
export interface LostCallRun extends Pick<ReconcileRun, 'book' | 'log' | 'now'> {
  /** One snapshot of these models through the call budget (LOST_SNAPSHOT_TTL_MS of waiting at most). */
  snapshot(models: ModelName[]): Promise<Snapshot>;
}

/**
 * A call whose answer was lost (answerLost): settled from the broker's pushes since it was sent
 * (`mark`), else from one snapshot within the call budget (LOST_SNAPSHOT_TTL_MS of waiting at
 * most); found, it is answered as the broker would have answered it (its `settled` says so) and
 * what it placed is claimed; not found, it is rejected with AnswerLostError, and an order call
 * leaves a watch. Never resent; the log says what was found.
 */
export async function settleLostCall(run: LostCallRun, intent: { id: number; op: string; args: unknown }, e: Error, mark: number | undefined, ctx: LostContext): Promise<Settlement & ({ value: unknown } | { error: Error })> {
  const op = intent.op;
  const args = (intent.args ?? {}) as Record<string, unknown>;
  const { broker, pushLog, answeredOrderIds } = run.book;
  const noAnswer = `${describeCall(op, args)} got no answer from the broker (${e.message})`;
  const fail = (message: string, watch?: Settlement['watch']) => {
    const error = new AnswerLostError(op, message, e);
    run.log.error(`intent ${intent.id}: ${message}`);
    return { error, claims: [], ...(watch ? { watch } : {}) };
  };
  if (mark === undefined) return fail(`${noAnswer} and may have been applied: it is not resent; the broker's pushes show what it holds (ctx.positions(), ctx.orders())`);
  const taken = (id: string) => broker.ownOrders.has(id) || answeredOrderIds.has(id);
  const settled = (f: { value: unknown; orderIds: string[]; what: string }, how: 'pushes' | 'snapshot') => {
    const said = `${noAnswer}; the broker's ${how === 'pushes' ? 'pushes since the call show' : 'snapshot shows'} ${f.what}`;
    run.log.warn(`intent ${intent.id}: ${said}${f.orderIds.length ? ': claimed by this run' : ''}`);
    const value = f.value !== null && typeof f.value === 'object' ? { ...(f.value as object), settled: said } : f.value;
    return { value, claims: f.orderIds, how };
  };
  let found = settleFromPushes(op, args, pushLog.since(mark), taken, ctx);
  if (found && 'value' in found) return settled(found, 'pushes');
  let why = found?.notFound;
  let ambiguous = found?.ambiguous === true;
  let checked = false;
  if (!ambiguous) {
    try {
      const snap = await run.snapshot(snapshotModels(op));
      checked = true;
      // what was pushed meanwhile first, then the snapshot: an order the run did not know before the call
      const pushed = pushLog.since(mark);
      found = settleFromPushes(op, args, pushed, taken, ctx);
      if (found && 'value' in found) return settled(found, 'pushes');
      const known = new Set(broker.knownOrderIds);
      for (const id of pushed.orders.keys()) known.delete(id);
      for (const id of [...broker.ownOrders, ...answeredOrderIds]) known.add(id);
      const s = settleFromSnapshot(op, args, snap, known, ctx);
      if ('value' in s) return { ...settled(s, 'snapshot'), records: s.records };
      why = s.notFound;
      ambiguous = s.ambiguous === true;
    } catch (se) {
      why = `${why ? `${why}; ` : ''}no snapshot could be taken (${errorMessage(se)})`;
    }
  }
  if (!PLACING_OPS.has(op)) {
    return fail(checked ? `${noAnswer}: ${why}; it is not resent` : `${noAnswer} and may have executed: its pushes since show nothing, and ${why}; it is not resent: the broker's pushes and the next reconciliation show what it did`);
  }
  if (ambiguous) return fail(`${noAnswer} and may have executed: ${why}; it is not resent, and none of them is claimed by this run (they are the account's: ctx.positions(undefined, { accountWide: true }))`);
  const watch: Settlement['watch'] =
    op === 'createOco' ? { oco: ocoClaimOf(args) } : { lost: { id: intent.id, op, args, since: run.now(), awaitsSnapshot: !checked } };
  if (checked) return fail(`${noAnswer} and may have executed: neither the broker's pushes since nor a snapshot show it (${why}); it is not resent, and an order matching it that shows up later is claimed by this run (onOrder / onTrade)`, watch);
  return fail(`${noAnswer} and may have executed: its pushes since show nothing, and ${why}; it is not resent: the next reconciliation with the broker (after a reconnect or a restart) claims what it placed, if anything`, watch);
}