/**
 * What becomes a paper or live run's own (broker-state.ts: ownership). An answered order call
 * claims what it placed with an `own` input (OwnInput), handled next and journaled: the order it
 * created, or its OCO's legs (by symbol, amount, side and rate), or, when its answer was lost and
 * nothing settled it, a watch (watches.ts). A resume first claims what the journal answered but did
 * not claim (the run was killed between the two) and the orders found for the intents the restart
 * left unanswered (orphans.ts), before it reconciles.
 */
import type { Snapshot } from '../../fxcm/client';
import { journaledValue, type JournalLine } from '../journal/journal';
import type { OcoClaim } from './broker-state';
import type { LostCall } from './lost-answers';
import { settleOrphan } from './orphans';
import type { OwnInput, ReconcileRun } from './run-book';
import { watchLostCall } from './watches';

/** An OCO request as the claim of its legs (symbol, amount, each leg's side and rate). */
export function ocoClaimOf(args: unknown): OcoClaim {
  const r = args as { symbol: string; amount: number; first: { isBuy: boolean; rate: number }; second: { isBuy: boolean; rate: number } };
  return { symbol: r.symbol, amount: r.amount, legs: [r.first, r.second].map((l) => ({ isBuy: l.isBuy, rate: l.rate })) };
}

/** What an answered order call makes the run's own: the order it created, or the legs of its OCO. */
export function claimOf(op: string, args: unknown, value: unknown, t: number): OwnInput | undefined {
  const orderId = (value as { orderId?: unknown } | undefined)?.orderId;
  if ((op === 'openTrade' || op === 'createEntryOrder') && orderId !== undefined) return { k: 'own', t, orderId: String(orderId) };
  return op === 'createOco' ? { k: 'own', t, oco: ocoClaimOf(args) } : undefined;
}

/**
 * The claims of order calls a journal has the answer of but not the claim (an `own` line): the
 * run was killed between the two. Claimed at the resume, the orders stay the run's.
 */
export function unclaimedOrderCalls(lines: readonly JournalLine[], t: number): OwnInput[] {
  const claimed = lines.filter((l) => l.k === 'own').map((l) => JSON.stringify(l.orderId ?? l.oco ?? l.lost));
  const answered = new Map<number, JournalLine>();
  for (const l of lines) if (l.k === 'answer' && (l.ok === true || l.watch !== undefined) && typeof l.id === 'number') answered.set(l.id, l);
  const out: OwnInput[] = [];
  for (const l of lines) {
    const a = typeof l.id === 'number' ? answered.get(l.id) : undefined;
    if (l.k !== 'intent' || a === undefined) continue;
    // an intent settled at a restart or after a lost answer claims the orders found for it
    // (resumeClaims, settleLostCall), one left unsettled its watch, else its answer's
    const claims: Array<OwnInput | undefined> = [
      ...(Array.isArray(a.claims) ? a.claims.map((orderId): OwnInput => ({ k: 'own', t, orderId: String(orderId) })) : []),
      ...(a.watch !== undefined ? [{ k: 'own' as const, t, ...(a.watch as { lost?: LostCall; oco?: OcoClaim }) }] : []),
    ];
    if (!Array.isArray(a.claims) && a.watch === undefined) claims.push(claimOf(String(l.op), l.args, a.value, t));
    for (const own of claims) {
      if (!own) continue;
      const at = claimed.indexOf(JSON.stringify(own.orderId ?? own.oco ?? own.lost));
      if (at >= 0) claimed.splice(at, 1);
      else out.push(own);
    }
  }
  return out;
}

/**
 * The orders an `own` input makes the run's, in the order they are to be claimed: the order its
 * call created, or the resting entry orders that are legs of its OCO (a leg not here yet is
 * taken when it comes). A lost call's watch begins.
 */
export function ordersClaimed(run: ReconcileRun, own: OwnInput): string[] {
  const broker = run.book.broker;
  if (own.lost) watchLostCall(run, own.lost);
  const ids: string[] = [];
  if (own.orderId !== undefined) {
    ids.push(own.orderId);
    run.book.answeredOrderIds.delete(own.orderId);
  }
  if (own.oco) {
    broker.pendingOco.push({ ...own.oco, legs: own.oco.legs.map((l) => ({ ...l })) });
    for (const [id, r] of broker.orders) if (!broker.ownOrders.has(id) && broker.takeOcoLeg(r)) ids.push(id);
  }
  return ids;
}

/**
 * The claims a resume makes before it reconciles, to be handled first: the orders found for the
 * intents its journal has no answer for (settled from the snapshot and never resent: their answers
 * journaled, their strategy calls answered), then the answered calls the journal had not claimed.
 * `at`: the time of each claim.
 */
export function resumeClaims(run: ReconcileRun, snap: Snapshot, at: () => number): OwnInput[] {
  const claims: OwnInput[] = [];
  for (const o of run.book.orphans.splice(0)) {
    const settled = settleOrphan(o, snap, run.book.broker.knownOrderIds);
    run.journal(
      'value' in settled
        ? { k: 'answer', id: o.id, ok: true, value: journaledValue(settled.value), claims: settled.orderIds ?? [] }
        : { k: 'answer', id: o.id, ok: false, error: { name: settled.error.name, message: settled.error.message } },
    );
    run.log.warn(`intent ${o.id} (${o.op}) had no answer before the restart: ${'value' in settled ? `settled from the broker snapshot ${JSON.stringify(settled.value ?? null)}` : `rejected: ${settled.error.message}`}`);
    if ('value' in settled) {
      for (const orderId of settled.orderIds ?? []) claims.push({ k: 'own', t: at(), orderId });
      o.resolve(settled.value);
    } else o.reject(settled.error);
  }
  for (const own of run.book.unclaimed.splice(0)) {
    const what = own.orderId !== undefined ? `order ${own.orderId}` : own.oco ? `the OCO orders on ${own.oco.symbol}` : `the watch for intent ${own.lost!.id} (an order call that got no answer)`;
    run.log.warn(`${what} had been answered but not yet claimed by this run before the restart: claimed now`);
    claims.push(own);
  }
  return claims;
}
