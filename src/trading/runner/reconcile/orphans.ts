/**
 * A resumed run's journal: errors rebuilt from their journaled answers, and the intents the
 * journal has no answer for (the process died between sending and hearing back), settled from
 * the broker's reconciliation snapshot and never sent again.
 */
import type { Snapshot } from '../../fxcm/client';
import type { TableRecord } from '../../fxcm/types';
import { levelFromPips } from '../../execution/fills';
import { pipOf } from '../../execution/instruments';
import { numOf, sameRate } from './broker-state';
import { AnswerLostError, IntentExpiredError, OrderGoneError, OrderRejectedError, SafetyError } from '../errors';

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
  /** IntentExpiredError: the endpoint; AnswerLostError: the operation. */
  endpoint?: string;
  /** OrderGoneError: 'order' or 'trade', and its id. */
  what?: string;
  id?: string;
  /** SafetyError, OrderRejectedError: the rule, and the broker's code. */
  rule?: string;
  code?: number;
  /** An HTTP error's status and Retry-After (a 429, a 5xx), which the strategy reads too. */
  httpStatus?: number;
  retryAfterMs?: number;
}

/** How an answer line records an error: enough for errorOf to rebuild the class the strategy caught. */
export function journaledError(e: Error & { endpoint?: string; httpStatus?: unknown; retryAfterMs?: unknown }): JournaledError {
  const endpoint = e instanceof AnswerLostError ? e.op : e.endpoint;
  return {
    ...(typeof e.httpStatus === 'number' && e.httpStatus >= 400 ? { httpStatus: e.httpStatus } : {}),
    ...(typeof e.retryAfterMs === 'number' ? { retryAfterMs: e.retryAfterMs } : {}),
    name: e.name,
    message: e.message,
    endpoint,
    ...(e instanceof OrderGoneError ? { what: e.what, id: e.id } : {}),
    ...(e instanceof SafetyError || (e instanceof OrderRejectedError && !(e instanceof OrderGoneError)) ? { rule: e.rule } : {}),
    ...(e instanceof OrderRejectedError && e.code !== undefined ? { code: e.code } : {}),
  };
}

/** The error a journaled answer recorded, as the class the strategy can catch. */
export function errorOf(e: JournaledError | undefined): Error {
  const msg = e?.message ?? 'error';
  let err: Error;
  if (e?.name === 'SafetyError') err = new SafetyError(e.rule ?? 'recorded', msg);
  else if (e?.name === 'OrderRejectedError') err = new OrderRejectedError(msg, e.rule, e.code);
  else if (e?.name === 'OrderGoneError') err = new OrderGoneError(e.what === 'trade' ? 'trade' : 'order', e.id ?? '');
  else if (e?.name === 'AnswerLostError') err = new AnswerLostError(e.endpoint ?? '', msg, { httpStatus: e.httpStatus, retryAfterMs: e.retryAfterMs });
  else if (e?.name === 'IntentExpiredError') {
    err = new IntentExpiredError(e.endpoint ?? '', 0);
    err.message = msg;
  } else {
    err = new Error(msg);
    if (e?.name) err.name = e.name;
    if (e?.httpStatus !== undefined) Object.assign(err, { httpStatus: e.httpStatus, ...(e.retryAfterMs !== undefined ? { retryAfterMs: e.retryAfterMs } : {}) });
  }
  return err;
}

/** How an orphan was settled: its answer (and the orders it created, now the run's), or an error. */
export type Settled = { value: unknown; orderIds?: string[] } | { error: Error };

/** A record's rate field near `want` (undefined: the request did not say, anything goes). */
const levelMatches = (have: unknown, want: number | undefined, symbol: string): boolean => want === undefined || sameRate(numOf(have), want, symbol);

/** A stop or limit of a request as the rate the broker would hold, from `ref` (the fill or entry rate) when in pips. */
function levelOf(isBuy: boolean, ref: number, v: unknown, inPips: boolean, symbol: string): number | undefined {
  if (typeof v !== 'number' || v === 0) return undefined;
  return inPips ? levelFromPips(isBuy, ref, v, pipOf(symbol)) : v;
}

/** Everything an openTrade / createEntryOrder request said, against a broker record (OpenPosition or entry Order). */
export function sameOrder(args: Record<string, unknown>, r: TableRecord, kind: 'position' | 'entry'): boolean {
  const symbol = String(args.symbol ?? '');
  const isBuy = args.isBuy === true;
  const inPips = args.isInPips === true;
  if (String(r.currency ?? '') !== symbol || (r.isBuy === true) !== isBuy || numOf(r.amountK) !== numOf(args.amount)) return false;
  if (numOf(r.stopMove) !== numOf(args.trailingStep)) return false;
  if (kind === 'position') {
    const open = numOf(r.open);
    if (args.rate !== undefined && !sameRate(open, numOf(args.rate), symbol)) return false;
    return levelMatches(r.stop, levelOf(isBuy, open, args.stop, inPips, symbol), symbol) && levelMatches(r.limit, levelOf(isBuy, open, args.limit, inPips, symbol), symbol);
  }
  const rate = numOf(isBuy ? r.buy : r.sell);
  if (!sameRate(rate, numOf(args.rate), symbol)) return false;
  return levelMatches(r.stopRate, levelOf(isBuy, rate, args.stop, inPips, symbol), symbol) && levelMatches(r.limitRate, levelOf(isBuy, rate, args.limit, inPips, symbol), symbol);
}

/** `buy 10 EUR/USD at 1.105`: what an order request asked, for the log and the errors. */
export const describeOrder = (args: Record<string, unknown>): string =>
  `${args.isBuy === true ? 'buy' : 'sell'} ${numOf(args.amount)} ${String(args.symbol ?? '')}${args.rate !== undefined ? ` at ${numOf(args.rate)}` : ''}`;

/** The OCO groups among entry order records (two orders of one ocoBulkId) whose legs are those of a createOco request. */
export function ocoGroupsOf(args: Record<string, unknown>, entries: readonly TableRecord[]): TableRecord[][] {
  const a = args as { symbol?: string; amount?: number; isInPips?: boolean; first?: Record<string, unknown>; second?: Record<string, unknown> };
  const leg = (l: Record<string, unknown> | undefined) => ({ ...l, symbol: a.symbol, amount: a.amount, isInPips: a.isInPips });
  const groups = new Map<string, TableRecord[]>();
  for (const r of entries) {
    const g = String(r.ocoBulkId ?? '0');
    if (g !== '0') groups.set(g, [...(groups.get(g) ?? []), r]);
  }
  return [...groups.values()].filter((rs) => rs.length === 2 && ((sameOrder(leg(a.first), rs[0]!, 'entry') && sameOrder(leg(a.second), rs[1]!, 'entry')) || (sameOrder(leg(a.first), rs[1]!, 'entry') && sameOrder(leg(a.second), rs[0]!, 'entry'))));
}

/**
 * The one record of a snapshot that an order request placed: an order the run never saw that
 * matches everything the request said (for openTrade a trade: symbol, side, amount, trailing
 * step, stop and limit; for createEntryOrder a resting entry order and its rate, or the trade it
 * filled into at that rate; for createOco two entry orders of one OCO group, one per leg).
 * `why`: none or several matched (`ambiguous`), said and never guessed. undefined: not an order
 * request. A match adds its order ids to `knownOrderIds`.
 */
export function matchPlacedOrder(
  op: string,
  args: Record<string, unknown>,
  snap: Snapshot,
  knownOrderIds: Set<string>,
): { value: unknown; orderIds: string[] } | { what: string; why: string; ambiguous: boolean } | undefined {
  const unknown = (r: TableRecord) => r.orderId !== undefined && r.orderId !== '' && !knownOrderIds.has(String(r.orderId));
  const entries = (snap.Order ?? []).filter((r) => unknown(r) && (r.isEntryOrder === true || r.type === 'SE' || r.type === 'LE'));
  const settle = (found: TableRecord[], what: string) => {
    const ids = [...new Set(found.map((r) => String(r.orderId)))];
    if (ids.length === 1) {
      knownOrderIds.add(ids[0]!);
      return { value: { orderId: ids[0] }, orderIds: ids };
    }
    const why = ids.length ? `${ids.length} orders at the broker match it (${ids.join(', ')}), so which one is this run's is not guessed` : 'no order at the broker matches it';
    return { what, why, ambiguous: ids.length > 1 };
  };
  if (op === 'openTrade') {
    return settle((snap.OpenPosition ?? []).filter((r) => unknown(r) && sameOrder(args, r, 'position')), `market order ${describeOrder(args)}`);
  }
  if (op === 'createEntryOrder') {
    const filled = (snap.OpenPosition ?? []).filter((r) => unknown(r) && sameOrder(args, r, 'position'));
    return settle([...entries.filter((r) => sameOrder(args, r, 'entry')), ...filled], `entry order ${describeOrder(args)}`);
  }
  if (op === 'createOco') {
    const a = args as { symbol?: string; amount?: number };
    const matching = ocoGroupsOf(args, entries);
    if (matching.length === 1) {
      const ids = matching[0]!.map((r) => String(r.orderId));
      for (const id of ids) knownOrderIds.add(id);
      // the broker's simple_oco answer names no order: neither does the settled one
      return { value: { orderIds: [] }, orderIds: ids };
    }
    const why = matching.length ? `${matching.length} OCO groups at the broker match it, so which one is this run's is not guessed` : 'no OCO group at the broker matches it';
    return { what: `OCO ${String(a.symbol ?? '')} ${numOf(a.amount)}`, why, ambiguous: matching.length > 1 };
  }
  return undefined;
}

/**
 * What the snapshot says became of an orphaned intent: an order call is answered by the record it
 * placed (matchPlacedOrder); none, or more than one, is an error that says so: nothing is guessed
 * and nothing is resent. A closeTrade whose trade is gone succeeded; anything else is rejected.
 */
export function settleOrphan(o: Pick<Orphan, 'op' | 'args'>, snap: Snapshot, knownOrderIds: Set<string>): Settled {
  const notResent = `${o.op} was interrupted by a restart before the broker answered and is not resent`;
  const placed = matchPlacedOrder(o.op, o.args, snap, knownOrderIds);
  if (placed) return 'value' in placed ? placed : { error: new OrderRejectedError(`${notResent}: ${placed.what}: ${placed.why}`) };
  if (o.op === 'closeTrade' && !(snap.OpenPosition ?? []).some((r) => String(r.tradeId) === String(o.args.tradeId))) {
    return { value: undefined };
  }
  return { error: new OrderRejectedError(notResent) };
}
