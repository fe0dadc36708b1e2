/**
 * What an operator does to a paper or live run from outside it (the control API, a signal):
 * pause and resume new entries, close one of the run's trades, flatten, stop.
 *
 * - Each action is checked first and refused (ActionRefused, with the reason) when it cannot
 *   apply: a trade that is not one of the run's open trades, a run still starting or already
 *   ended. A refused action sends nothing and writes nothing.
 * - An accepted action is journaled (a `control` line, fsync'ed) before it acts, so a replay and a
 *   resume know it happened: they take back the lock it set, and the trades it closed are closed
 *   for the reason `operator`.
 * - The kill switch: pause, flatten and stop lock new entries the moment they are accepted, before
 *   any hook runs again. The engine asks `entryRefusal()` when an entry is made, and gives each
 *   entry's broker call `entrySignal()`, aborted with the refusal when a lock is set: an entry
 *   waiting for budget is taken out of the queue and refused at once. No new order leaves after
 *   the answer. Closes and deletes are never locked. Pause and flatten hold until resume; stop for
 *   good.
 */
import { SafetyError } from '../errors';
import type { SafetyLock } from '../protections/safety';

export type OperatorAction =
  | { action: 'pause' }
  | { action: 'resume' }
  /** `amount`: K units of a partial close (default: the whole trade). */
  | { action: 'close'; tradeId: string; amount?: number }
  | { action: 'flatten' }
  | { action: 'stop' };

export const OPERATOR_ACTIONS = ['pause', 'resume', 'close', 'flatten', 'stop'] as const;

/** An action that cannot apply: nothing was sent or journaled. `status` is the HTTP answer's. */
export class ActionRefused extends Error {
  override readonly name = 'ActionRefused';
  constructor(readonly status: 404 | 409, message: string) {
    super(message);
  }
}

/** What an accepted action did. */
export interface ActionDone {
  action: OperatorAction['action'];
  /** What it says to the operator, in a sentence. */
  message: string;
  /** The lock on new entries it left (none after resume). */
  lock?: EntryLock;
  /** Flatten and close: what could not be closed or deleted ("trade 12: <why>"). */
  failed?: string[];
}

/** Who locked new entries, and when (epoch ms). */
export interface EntryLock {
  by: 'pause' | 'flatten' | 'stop';
  at: number;
}

/** The journal line of an accepted action. */
export interface ControlLine extends Record<string, unknown> {
  k: 'control';
  t: number;
  action: OperatorAction['action'];
  tradeId?: string;
  amount?: number;
}

/** What the controls need of the run. */
export interface ControlledRun {
  now(): number;
  phase(): 'starting' | 'running' | 'ending' | 'ended';
  /** A resumed run replays its journal (the first part of starting). */
  replaying(): boolean;
  journal(line: ControlLine): void;
  info(message: string): void;
  /** The run's own open trade with that id (its amount, K), 'foreign' for another run's or the account's, else undefined. */
  trade(id: string): { amountK: number } | 'foreign' | undefined;
  /** The ids of the run's own open trades, to name them in a refusal. */
  ownTradeIds(): string[];
  /** Marks trades as closed by the operator (the reason their closes are recorded with). */
  closing(tradeIds: readonly string[] | 'all'): void;
  /** Sends the close (first in the budget's queue); rejects with the broker's error. */
  closeTrade(id: string, amountK: number): Promise<void>;
  /** Closes every own trade and deletes every own entry order; what failed. */
  flatten(): Promise<string[]>;
  stop(): void;
}

const LOCK_RULE: Record<EntryLock['by'], string> = { pause: 'paused', flatten: 'flattened', stop: 'stopping' };


export class RunControls {
  private lock: EntryLock | undefined;
  /** Aborted when entries are locked (the entries waiting for budget are cut); a new one on resume. */
  private cut = new AbortController();

  constructor(private readonly run: ControlledRun) {}

  /** The signal an entry's broker call carries: aborted, with the refusal, when entries are locked. */
  entrySignal(): AbortSignal {
    return this.cut.signal;
  }

  private setLock(lock: EntryLock | undefined): void {
    this.lock = lock;
    if (lock === undefined) {
      if (this.cut.signal.aborted) this.cut = new AbortController();
    } else if (!this.cut.signal.aborted) this.cut.abort(this.entryRefusal());
  }

  /** The lock on new entries, as a checkpoint keeps it. */
  saved(): EntryLock | undefined {
    return this.lock;
  }

  restore(lock: EntryLock | undefined): void {
    this.setLock(lock);
  }

  /** Stop was asked (the API, a signal, --duration): new entries are locked from now on. */
  stopping(): void {
    if (this.lock?.by !== 'stop') this.setLock({ by: 'stop', at: this.run.now() });
  }

  /** Stop was journaled by the run this one resumes, and the run did not get to stop: it should now. */
  get stopAsked(): boolean {
    return this.lock?.by === 'stop';
  }

  /** Why a new entry may not go now (a SafetyError to refuse it with), or undefined. */
  entryRefusal(): SafetyError | undefined {
    const l = this.lock;
    if (l === undefined) return undefined;
    const why = l.by === 'pause' ? 'new entries are paused by the operator (resume: POST /api/resume)' : l.by === 'flatten' ? 'the operator flattened the run: new entries are locked until POST /api/resume' : 'the run is stopping: no new entries';
    return new SafetyError(LOCK_RULE[l.by], why);
  }

  /** The lock as the run's status shows it, among the protections' locks. */
  locks(): SafetyLock[] {
    const l = this.lock;
    if (l === undefined) return [];
    const since = new Date(l.at).toISOString().slice(0, 19).replace('T', ' ');
    const reason = l.by === 'stop' ? `stop asked at ${since} UTC: no new entries` : `${l.by === 'pause' ? 'paused' : 'flattened'} by the operator at ${since} UTC: no new entries until resume`;
    return [{ rule: LOCK_RULE[l.by], reason }];
  }

  /** An accepted action's journal line, read back in a replay or a resume: its lock and its close reasons. */
  replayed(line: ControlLine): void {
    this.take(line);
  }

  /** Checks, journals and carries out an operator's action; ActionRefused when it cannot apply. */
  async act(a: OperatorAction): Promise<ActionDone> {
    const r = this.run;
    const phase = r.phase();
    if (phase === 'ended') throw new ActionRefused(409, 'the run has ended');
    // while starting, the broker's state is not in (nothing to close yet), and a resumed run's
    // journal is replayed (its own actions would undo a new one): only pause and stop apply, and
    // pause only once the journal is replayed
    if (phase === 'starting' && a.action !== 'stop' && (a.action !== 'pause' || r.replaying())) {
      throw new ActionRefused(409, `the run is starting (${r.replaying() ? 'its journal is replayed' : "the broker's state is not in yet"}): ${a.action} applies once it runs; stop applies now${r.replaying() ? '' : ', and pause'}`);
    }
    let amountK = 0;
    if (a.action === 'close') {
      const t = r.trade(a.tradeId);
      if (t === 'foreign') throw new ActionRefused(409, `trade ${a.tradeId} is not this run's (another run's, or the account's): the run leaves it alone`);
      if (t === undefined) {
        const own = r.ownTradeIds();
        throw new ActionRefused(404, `trade ${a.tradeId} is not one of this run's open trades (${own.length ? `they are ${own.join(', ')}` : 'it has none'})`);
      }
      if (a.amount !== undefined && a.amount > t.amountK) throw new ActionRefused(409, `trade ${a.tradeId} holds ${t.amountK}K: ${a.amount}K cannot be closed`);
      amountK = a.amount ?? t.amountK;
    }
    if (a.action === 'resume' && this.lock?.by === 'stop') throw new ActionRefused(409, 'the run is stopping: it cannot be resumed');
    if (a.action === 'pause' && this.lock !== undefined) return { action: a.action, message: `new entries were already locked (${this.lock.by})`, lock: this.lock };
    if (a.action === 'resume' && this.lock === undefined) return { action: a.action, message: 'new entries were not locked' };
    const line: ControlLine = { k: 'control', t: r.now(), action: a.action, ...(a.action === 'close' ? { tradeId: a.tradeId, ...(a.amount !== undefined ? { amount: a.amount } : {}) } : {}) };
    r.journal(line);
    this.take(line);
    switch (a.action) {
      case 'pause':
        r.info('paused by the operator: no new entries until resume (closes and the strategy\'s hooks go on)');
        return { action: a.action, message: 'new entries are paused', lock: this.lock };
      case 'resume':
        r.info('resumed by the operator: new entries are allowed again');
        return { action: a.action, message: 'new entries are allowed again' };
      case 'stop':
        r.info('stop asked by the operator: no new entries; onStop, the report, then exit');
        r.stop();
        return { action: a.action, message: 'the run is stopping (onStop, the report, exit 0)', lock: this.lock };
      case 'close': {
        r.info(`the operator closes trade ${a.tradeId} (${amountK}K)`);
        try {
          await r.closeTrade(a.tradeId, amountK);
          return { action: a.action, message: `trade ${a.tradeId}: ${amountK}K closed` };
        } catch (e) {
          return { action: a.action, message: `trade ${a.tradeId} could not be closed`, failed: [`trade ${a.tradeId}: ${(e as Error).message}`] };
        }
      }
      case 'flatten': {
        r.info('flatten asked by the operator: new entries locked, closing every trade and deleting every entry order of the run');
        const failed = await r.flatten();
        return { action: a.action, message: failed.length ? `flattened but for ${failed.length}` : 'flat: every trade of the run closed and its entry orders deleted', lock: this.lock, failed };
      }
    }
  }

  private take(line: ControlLine): void {
    const at = line.t;
    if (line.action === 'pause') this.setLock({ by: 'pause', at });
    else if (line.action === 'resume') this.setLock(undefined);
    else if (line.action === 'flatten') {
      if (this.lock?.by !== 'stop') this.setLock({ by: 'flatten', at });
      this.run.closing('all');
    } else if (line.action === 'stop') this.setLock({ by: 'stop', at });
    else if (line.action === 'close' && line.tradeId !== undefined) this.run.closing([line.tradeId]);
  }
}
