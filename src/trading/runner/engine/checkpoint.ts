/**
 * A checkpoint of a paper/live run: everything a resume needs to go on from a point between two
 * inputs at which no intent waits for its answer — the strategy's saved state (its saveState
 * hook), the runner's own (what the broker holds and which of it is the run's, the bars behind
 * ctx.candles and the bars being built, the safety counters, timers, the intent counter, the
 * run's results so far). A resume takes it back and replays only the journal's lines after it.
 *
 * The journal keeps it as its second line, after the run line (journal.ts: compact); the lines
 * before it are dropped, so the journal's size is bounded by the checkpoint and the bytes after
 * it (`journalMaxBytes`), whatever the run's age.
 */
import type { ClosedTrade, EquityPoint } from '../results';
import type { Strategy, Tick } from '../strategy';
import type { SavedBarSeries, SavedLiveBars } from './bars';
import type { SavedBrokerState } from '../reconcile/broker-state';
import type { UnclaimedEnd } from '../reconcile/run-book';
import type { JournalLine } from '../journal/journal';
import type { SafetyCounters } from '../protections/safety';
import type { EntryLock } from './run-controls';
import type { SavedProtections } from '../protections/protections';

/** The bytes a journal takes after its checkpoint before the next one replaces them. */
export const DEFAULT_JOURNAL_MAX_BYTES = 8 * 1024 * 1024;

/** The format of the engine's part; a journal with another one is refused rather than misread. */
export const CHECKPOINT_VERSION = 1;

/** The runner's state in a checkpoint (LiveEngine's fields, maps as entries, sets as members). */
export interface SavedEngine {
  /** The time of the last input handled. */
  now: number;
  started: boolean;
  startBalance: number | null;
  quotes: [string, Tick][];
  broker: SavedBrokerState;
  history: SavedBarSeries[];
  liveBars: SavedLiveBars;
  safety: SafetyCounters;
  /** Timers the strategy set: name and interval. */
  timers: [string, number][];
  closed: ClosedTrade[];
  /** Thinned (report/equity-thinning.ts). */
  equity: EquityPoint[];
  announcedTrades: string[];
  announcedOrders: string[];
  unclaimedEnds: [string, UnclaimedEnd][];
  deletedOrders: string[];
  /** The operator's lock on new entries (run-controls.ts), when one holds. */
  entryLock?: EntryLock;
  /** The protections' recent stops, equity peak and locks (absent in a checkpoint of an older runner). */
  protections?: SavedProtections;
}

export interface CheckpointLine extends JournalLine {
  k: 'checkpoint';
  t: number;
  v: number;
  /** Intents made before it: the next one is numbered intents + 1. */
  intents: number;
  /** What the strategy's saveState returned. */
  strategy: unknown;
  engine: SavedEngine;
}

/** Whether a strategy can be checkpointed: it has both hooks (the loader refuses one without the other). */
export const hasStateHooks = (s: Strategy<Record<string, unknown>>): boolean => typeof s.saveState === 'function' && typeof s.restoreState === 'function';

/** The index of a journal's last checkpoint line, -1 when it has none; one in another format is an error. */
export function lastCheckpoint(lines: readonly JournalLine[]): number {
  for (let i = lines.length - 1; i >= 0; i--) {
    if (lines[i]!.k !== 'checkpoint') continue;
    const v = lines[i]!.v;
    if (v !== CHECKPOINT_VERSION) throw new Error(`the journal's checkpoint is in format ${String(v)}, this runner reads format ${CHECKPOINT_VERSION}`);
    return i;
  }
  return -1;
}

/**
 * Where a saved state holds something JSON does not give back as it was (a Map, a Set, a Date, a
 * class instance, a function, NaN or Infinity, undefined in an array or as the whole state: a
 * saveState without its return, a cycle): "state.window is a Map". Undefined when it comes back
 * whole; an object property that is undefined is left out and reads back undefined all the same.
 */
export function jsonProblem(v: unknown, where = 'state', seen = new Set<object>()): string | undefined {
  if (v === null || typeof v === 'string' || typeof v === 'boolean') return undefined;
  if (typeof v === 'number') return Number.isFinite(v) ? undefined : `${where} is ${v}`;
  if (typeof v !== 'object') return `${where} is ${v === undefined ? 'undefined' : `a ${typeof v}`}`;
  if (seen.has(v)) return `${where} refers back to itself`;
  seen.add(v);
  try {
    if (Array.isArray(v)) {
      for (let i = 0; i < v.length; i++) {
        const p = jsonProblem(v[i], `${where}[${i}]`, seen);
        if (p) return p;
      }
      return undefined;
    }
    const proto = Object.getPrototypeOf(v) as { constructor?: { name?: string } } | null;
    if (proto !== Object.prototype && proto !== null) return `${where} is a ${proto.constructor?.name || 'class instance'}`;
    for (const [k, x] of Object.entries(v)) {
      if (x === undefined) continue;
      const p = jsonProblem(x, `${where}.${k}`, seen);
      if (p) return p;
    }
    return undefined;
  } finally {
    seen.delete(v);
  }
}
