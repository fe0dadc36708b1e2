/**
 * The run journal of paper/live mode: append-only JSON Lines on disk, one event per line, written
 * with one `write` per line on a file opened for appending (and fsync'ed for intents and answers,
 * so an intent is on disk before its call is sent and an answer before the strategy sees it).
 *
 * Lines (`k` is the kind; `t` the runner's time of the event, epoch ms):
 *   {k:'run', t, strategy, mode, symbols, timeframes, params}        first line of a run
 *   {k:'snapshot', t, snap, reason, downMs?}  a get_model snapshot: reason 'start', or a
 *                               reconciliation ('resume' after a restart, 'reconnect' after the
 *                               stream dropped, with how long it was down)
 *   {k:'own', t, orderId?|oco?|lost?}  an order this run's call created (its id from the answer,
 *                               or an OCO request whose orders are claimed by their legs, or a
 *                               lost call's watch that claims the order matching it): the run's own
 *   {k:'disconnected', t, reason, silentMs?}  the broker stream dropped (not an input);
 *                               silentMs: nothing had come for that long before (a silent outage)
 *   {k:'tokenRefused', t, error}  the broker refused the token (not an input)
 *   {k:'halted', t, reason, message}  the runner stopped the run (the token refused too long; not
 *                               an input, and the run stays resumable)
 *   {k:'history', t, bars}      warm-up bars
 *   {k:'start', t}              onStart ran
 *   {k:'price', t, p}           a price push (FxcmClient PriceUpdate)
 *   {k:'table', t, model, action, rec}  a table push (merged record)
 *   {k:'timer', t, name, count?}  a strategy timer fired (count: the firings it stands for)
 *   {k:'stop', t}               onStop ran
 *   {k:'intent', id, t, op, args}        a strategy decision (before any check or call)
 *   {k:'answer', id, ok, value?|error?}  the runner's / broker's answer to intent `id`; a call
 *                               whose answer was lost (reconcile/lost-answers.ts) and was settled has the
 *                               orders found (`claims`) and how (`lost`: pushes, snapshot), one
 *                               not settled the watch it leaves (`watch`)
 *   {k:'watched', t, id, outcome}  a lost call's watch ended: what it placed was found (claimed)
 *                               or is not at the broker (not an input)
 *   {k:'fatal', t, error}       the strategy failed; the runner then flattens (a resume finishes that)
 *   {k:'resume', t}             a restarted run takes over from here
 *   {k:'checkpoint', t, v, intents, strategy, engine}  everything a resume needs at a point between
 *                               two inputs with no intent unanswered (checkpoint.ts); only ever the
 *                               second line, after the run line
 * Market events, snapshots and answers are the inputs of the strategy; replaying them gives the
 * same intents (decisions), bit for bit.
 *
 * Compaction keeps the journal's size bounded: once the lines after the checkpoint pass a bound,
 * the engine writes a new checkpoint and the journal is replaced by its run line and that
 * checkpoint (compact). The segment it replaces stays beside it, for inspection, as the one
 * previous segment (journal.prev.jsonl); a resume never reads it.
 *
 * One process writes a journal: opening one takes its lock (FILE.lock, journal-lock.ts), which a
 * second writer is refused while the first lives, and which a killed writer does not keep.
 */
import fs from 'node:fs';
import path from 'node:path';
import { lockJournal, type JournalLock } from './journal-lock';
import { errorMessage } from '../../../platform/errors';

export type JournalLine = { k: string; t?: number; id?: number } & Record<string, unknown>;

/** A value as a journal line gives it back (a JSON round trip), so a run and its replay see the same. */
export const journaledValue = (v: unknown): unknown => (v === undefined ? undefined : JSON.parse(JSON.stringify(v)));

export const JOURNAL_FILE = 'journal.jsonl';

/** `--journal DIR` (a directory: DIR/journal.jsonl) or a `.jsonl` file path. */
export function journalPath(p: string): string {
  return /\.jsonl?$/.test(p) ? p : path.join(p, JOURNAL_FILE);
}

/** The one earlier segment kept after a compaction: journal.jsonl → journal.prev.jsonl. */
export function previousJournalPath(file: string): string {
  return /\.jsonl?$/.test(file) ? file.replace(/(\.jsonl?)$/, '.prev$1') : `${file}.prev`;
}

/** Where a compaction writes the new journal before renaming it over the old one. */
const nextPath = (file: string): string => `${file}.next`;

export class Journal {
  private fd: number | undefined;
  /** Bytes of a torn last line cut off when the journal was opened (0: it ended cleanly). */
  readonly tornTailBytes: number;
  /** Bytes in the file, and those of the run line and checkpoint it starts with (0 when it has none). */
  private size: number;
  private headBytes: number;
  /** The journal's lock (one writer per journal), held until close. */
  readonly lock: JournalLock;
  /**
   * Opens (creates) a journal for appending, after taking its lock: JournalLockedError while
   * another live process writes it (journal-lock.ts).
   */
  constructor(readonly file: string, private readonly fsync = true) {
    fs.mkdirSync(path.dirname(path.resolve(file)), { recursive: true });
    this.lock = lockJournal(file);
    try {
      // a compaction killed before its rename leaves its new file beside a journal that is whole
      fs.rmSync(nextPath(file), { force: true });
      this.fd = fs.openSync(file, 'a+');
      this.tornTailBytes = dropTornTail(file, this.fd);
      this.size = fs.fstatSync(this.fd).size;
      this.headBytes = checkpointHeadBytes(this.fd, this.size);
    } catch (e) {
      this.lock.release();
      throw e;
    }
  }

  /** Bytes appended after the checkpoint the journal starts with (after its start when it has none). */
  get bytesSinceCheckpoint(): number {
    return this.size - this.headBytes;
  }

  append(line: JournalLine, sync = false): void {
    if (this.fd === undefined) return;
    const text = JSON.stringify(line) + '\n';
    fs.writeSync(this.fd, text);
    this.size += Buffer.byteLength(text);
    if (sync && this.fsync) fs.fsyncSync(this.fd);
  }

  /**
   * Replaces the journal by `head` (its run line and a checkpoint): written and fsync'ed beside it
   * (FILE.next), the old journal linked as the one previous segment, then renamed over it. A kill
   * at any point leaves under the journal's name the old journal or the new one, whole.
   */
  compact(head: readonly JournalLine[]): void {
    if (this.fd === undefined) return;
    const text = head.map((l) => JSON.stringify(l) + '\n').join('');
    const next = nextPath(this.file);
    try {
      const fd = fs.openSync(next, 'w');
      try {
        fs.writeSync(fd, text);
        if (this.fsync) fs.fsyncSync(fd);
      } finally {
        fs.closeSync(fd);
      }
      const prev = previousJournalPath(this.file);
      fs.rmSync(prev, { force: true });
      try {
        fs.linkSync(this.file, prev);
      } catch {
        fs.copyFileSync(this.file, prev); // a file system without hard links
      }
      fs.renameSync(next, this.file);
    } catch (e) {
      // (a full disk, a lost permission): the journal is still the old one, appended to as before
      fs.rmSync(next, { force: true });
      throw e;
    }
    if (this.fsync) fsyncDirectory(path.dirname(path.resolve(this.file)));
    fs.closeSync(this.fd);
    this.fd = fs.openSync(this.file, 'a');
    this.size = this.headBytes = Buffer.byteLength(text);
  }

  /** Closes the file and releases the lock. */
  close(): void {
    if (this.fd === undefined) return;
    try {
      fs.fsyncSync(this.fd);
    } catch {
      /* best effort */
    }
    fs.closeSync(this.fd);
    this.fd = undefined;
    this.lock.release();
  }
}

/**
 * A run killed mid-write leaves a last line without its newline; readJournal ignores it, and the
 * next line appended must not be glued to it: cut the file back to its last complete line.
 */
function dropTornTail(file: string, fd: number): number {
  const size = fs.fstatSync(fd).size;
  if (size === 0) return 0;
  const last = Buffer.alloc(1);
  fs.readSync(fd, last, 0, 1, size - 1);
  if (last[0] === 0x0a) return 0; // the usual case: only the last byte is read
  const kept = fs.readFileSync(file).lastIndexOf(0x0a) + 1;
  fs.ftruncateSync(fd, kept);
  return size - kept;
}

/** The rename of a compaction is durable once its directory is on disk (where a directory can be opened: not on Windows). */
function fsyncDirectory(dir: string): void {
  let fd: number | undefined;
  try {
    fd = fs.openSync(dir, 'r');
    fs.fsyncSync(fd);
  } catch {
    /* the file's own fsync is what remains */
  } finally {
    if (fd !== undefined) fs.closeSync(fd);
  }
}

const CHECKPOINT_PREFIX = Buffer.from('{"k":"checkpoint"');

/** Bytes of the run line and checkpoint a compacted journal starts with; 0 when its second line is no checkpoint. */
function checkpointHeadBytes(fd: number, size: number): number {
  const line1End = newlineFrom(fd, 0, size);
  if (line1End < 0) return 0;
  const head = Buffer.alloc(CHECKPOINT_PREFIX.length);
  if (fs.readSync(fd, head, 0, head.length, line1End + 1) < head.length || !head.equals(CHECKPOINT_PREFIX)) return 0;
  return newlineFrom(fd, line1End + 1, size) + 1;
}

/** The offset of the first newline at or after `from`; -1 when there is none. */
function newlineFrom(fd: number, from: number, size: number): number {
  const chunk = Buffer.alloc(64 * 1024);
  for (let at = from; at < size; at += chunk.length) {
    const n = fs.readSync(fd, chunk, 0, chunk.length, at);
    const i = chunk.subarray(0, n).indexOf(0x0a);
    if (i >= 0) return at + i;
  }
  return -1;
}

/** Reads a journal; a torn last line (the process was killed mid-write) is ignored. */
export function readJournal(file: string): JournalLine[] {
  if (!fs.existsSync(file)) return [];
  const out: JournalLine[] = [];
  const lines = fs.readFileSync(file, 'utf8').split('\n');
  for (let i = 0; i < lines.length; i++) {
    const l = lines[i]!.trim();
    if (!l) continue;
    try {
      out.push(JSON.parse(l) as JournalLine);
    } catch (e) {
      if (i >= lines.length - 2) break; // torn tail
      throw new Error(`${file}:${i + 1}: not a journal line: ${errorMessage(e)}`);
    }
  }
  return out;
}

/**
 * When a journal's run ended cleanly: the time of its `stop` (onStop ran) when it has one, no
 * strategy error, an answer for every intent, and no order call whose answer was lost still
 * waiting for a reconciliation to settle it (an answer's `watch` that awaits a snapshot, without
 * a `watched` line after it). Such a run has nothing left to resume.
 */
export function finishedRunOf(lines: readonly JournalLine[]): number | undefined {
  let stopAt: number | undefined;
  const unanswered = new Set<number>();
  for (const l of lines) {
    if (l.k === 'fatal') return undefined;
    if (l.k === 'stop') stopAt ??= l.t ?? 0;
    else if (l.k === 'intent' && typeof l.id === 'number') unanswered.add(l.id);
    else if (l.k === 'answer' && typeof l.id === 'number' && (l.watch as { lost?: { awaitsSnapshot?: boolean } } | undefined)?.lost?.awaitsSnapshot !== true) unanswered.delete(l.id);
    else if (l.k === 'watched' && typeof l.id === 'number') unanswered.delete(l.id);
  }
  return unanswered.size === 0 ? stopAt : undefined;
}
