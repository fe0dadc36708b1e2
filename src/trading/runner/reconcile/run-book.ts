/**
 * RunBook: what a paper or live run knows of the broker and of what it told its strategy, the
 * state that reconciling with the broker reads and writes (a snapshot, claims and watches, the ends
 * of orders and trades not yet claimed, a lost answer's settlement, a restart's orphaned intents).
 * LiveEngine owns one and hands it, as a ReconcileRun, to the code that reconciles; nothing here
 * calls the broker or a hook.
 */
import type { ModelName, TableRecord } from '../../fxcm/types';
import type { JournalLine } from '../journal/journal';
import type { StrategyLogger } from '../strategy';
import { BrokerState, type OcoClaim } from './broker-state';
import { PushLog, type LostCall } from './lost-answers';
import type { Orphan } from './orphans';

/** How many ends of unclaimed trades and orders are kept for a late claim. */
const UNCLAIMED_ENDS = 200;

/** The end (ClosedPosition I, Order D) of a trade or order the run had not claimed when it came. */
export interface UnclaimedEnd {
  model: ModelName;
  rec: TableRecord;
}

/**
 * An `own` input (journaled as an `own` line): what an answered order call makes the run's — the
 * order it created, the legs of its OCO, or the watch of a call whose answer was lost.
 */
export interface OwnInput {
  k: 'own';
  t: number;
  orderId?: string;
  oco?: OcoClaim;
  lost?: LostCall;
}

export class RunBook {
  /** The broker's records as the run knows them, and which of them are the run's. */
  readonly broker = new BrokerState();
  /** The tickets the run's results count (a trade, or a part closed under a ticket of its own): a snapshot never brings one back. */
  readonly closedIds = new Set<string>();
  /** Own trades and entry orders the strategy has heard of (onTrade opened, onOrder accepted). */
  readonly announcedTrades = new Set<string>();
  readonly announcedOrders = new Set<string>();
  /**
   * The ends of trades and orders this run had not claimed when they came, by `model:id`: another
   * run's, or this run's with the claim still queued behind them (it then replays them).
   */
  readonly unclaimedEnds = new Map<string, UnclaimedEnd>();
  /** Entry orders the broker deleted (a snapshot taken before the delete must not bring them back). */
  readonly deletedOrders = new Set<string>();
  /** Orders this run's calls created whose claim is not handled yet: never another lost call's. */
  readonly answeredOrderIds = new Set<string>();
  /** The table pushes that come while order calls wait for their answers (lost-answers.ts). */
  readonly pushLog = new PushLog();
  /** Intents replayed from the journal without an answer: settled from the resume's snapshot. */
  readonly orphans: Orphan[] = [];
  /** Order calls the journal answered but did not claim (claims.ts: unclaimedOrderCalls): claimed at the resume. */
  unclaimed: OwnInput[] = [];

  /** Keeps the end of a trade or order not (yet) claimed; the oldest goes beyond UNCLAIMED_ENDS. */
  keepUnclaimedEnd(model: ModelName, id: string, r: TableRecord): void {
    this.unclaimedEnds.set(`${model}:${id}`, { model, rec: { ...r } });
    if (this.unclaimedEnds.size > UNCLAIMED_ENDS) this.unclaimedEnds.delete(this.unclaimedEnds.keys().next().value as string);
  }

  /** The end kept for a trade or order just claimed, taken out. */
  takeUnclaimedEnd(model: ModelName, id: string): UnclaimedEnd | undefined {
    const end = this.unclaimedEnds.get(`${model}:${id}`);
    if (end) this.unclaimedEnds.delete(`${model}:${id}`);
    return end;
  }
}

/** What the code that reconciles needs of the run besides its book. */
export interface ReconcileRun {
  readonly book: RunBook;
  readonly log: StrategyLogger;
  /** The time of the input being handled (ctx.now()). */
  now(): number;
  /** Appends a journal line, fsync'ed; none while the run replays its journal (the line is in it). */
  journal(line: JournalLine): void;
}
