/**
 * A resumed run's journal: errors rebuilt from their journaled answers, and the intents the
 * journal has no answer for (the process died between sending and hearing back), settled from
 * the broker's reconciliation snapshot and never sent again.
 */
import type { Snapshot } from '../fxcm/client';
import { IntentExpiredError, OrderGoneError, OrderRejectedError, SafetyError } from './errors';

/** An intent replayed from the journal that has no answer; its strategy call waits on it. */
export interface Orphan {
  id: number;
  op: string;
  args: Record<string, unknown>;
  resolve: (v: unknown) => void;
  reject: (e: Error) => void;
}

/** An error as an answer line records it. */
export interface JournaledError {
  name?: string;
  message?: string;
  endpoint?: string;
  /** OrderGoneError: 'order' or 'trade', and its id. */
  what?: string;
  id?: string;
}

/** How an answer line records an error: enough for errorOf to rebuild the class the strategy caught. */
export function journaledError(e: Error & { endpoint?: string }): JournaledError {
  return { name: e.name, message: e.message, endpoint: e.endpoint, ...(e instanceof OrderGoneError ? { what: e.what, id: e.id } : {}) };
}

/** The error a journaled answer recorded, as the class the strategy can catch. */
export function errorOf(e: JournaledError | undefined): Error {
  const msg = e?.message ?? 'error';
  let err: Error;
  if (e?.name === 'SafetyError') err = new SafetyError('recorded', msg);
  else if (e?.name === 'OrderRejectedError') err = new OrderRejectedError(msg);
  else if (e?.name === 'OrderGoneError') err = new OrderGoneError(e.what === 'trade' ? 'trade' : 'order', e.id ?? '');
  else if (e?.name === 'IntentExpiredError') {
    err = new IntentExpiredError(e.endpoint ?? '', 0);
    err.message = msg;
  } else {
    err = new Error(msg);
    if (e?.name) err.name = e.name;
  }
  return err;
}

/**
 * What the snapshot says became of an orphaned intent: an order the journal never saw answers an
 * openTrade/createEntryOrder (and becomes known); a closeTrade whose trade is gone succeeded;
 * anything else is rejected.
 */
export function settleOrphan(o: Pick<Orphan, 'op' | 'args'>, snap: Snapshot, knownOrderIds: Set<string>): { value: unknown } | { error: Error } {
  if (o.op === 'openTrade' || o.op === 'createEntryOrder') {
    const ids = [...(snap.Order ?? []), ...(snap.OpenPosition ?? [])].map((r) => String(r.orderId ?? '')).filter(Boolean);
    const unknownId = ids.find((id) => !knownOrderIds.has(id));
    if (unknownId) {
      knownOrderIds.add(unknownId);
      return { value: { orderId: unknownId } };
    }
  } else if (o.op === 'closeTrade' && !(snap.OpenPosition ?? []).some((r) => String(r.tradeId) === String(o.args.tradeId))) {
    return { value: undefined };
  }
  return { error: new OrderRejectedError(`${o.op} was interrupted by a restart before the broker answered and is not resent`) };
}
