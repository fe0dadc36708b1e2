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
 *   {k:'own', t, orderId?|oco?} an order this run's call created (its id from the answer, or an
 *                               OCO request whose orders are claimed by their legs): the run's own
 *   {k:'disconnected', t, reason}  the broker stream dropped (not an input)
 *   {k:'history', t, bars}      warm-up bars
 *   {k:'start', t}              onStart ran
 *   {k:'price', t, p}           a price push (FxcmClient PriceUpdate)
 *   {k:'table', t, model, action, rec}  a table push (merged record)
 *   {k:'timer', t, name}        a strategy timer fired
 *   {k:'stop', t}               onStop ran
 *   {k:'intent', id, t, op, args}        a strategy decision (before any check or call)
 *   {k:'answer', id, ok, value?|error?}  the runner's / broker's answer to intent `id`
 *   {k:'fatal', t, error}       the strategy failed; the runner then flattens (a resume finishes that)
 *   {k:'resume', t}             a restarted run takes over from here
 * Market events, snapshots and answers are the inputs of the strategy; replaying them gives the
 * same intents (decisions), bit for bit.
 */
import fs from 'node:fs';
import path from 'node:path';

export type JournalLine = { k: string; t?: number; id?: number } & Record<string, unknown>;

export const JOURNAL_FILE = 'journal.jsonl';

/** `--journal DIR` (a directory: DIR/journal.jsonl) or a `.jsonl` file path. */
export function journalPath(p: string): string {
  return /\.jsonl?$/.test(p) ? p : path.join(p, JOURNAL_FILE);
}

export class Journal {
  private fd: number | undefined;
  /** Bytes of a torn last line cut off when the journal was opened (0: it ended cleanly). */
  readonly tornTailBytes: number;
  constructor(readonly file: string, private readonly fsync = true) {
    fs.mkdirSync(path.dirname(path.resolve(file)), { recursive: true });
    this.fd = fs.openSync(file, 'a+');
    this.tornTailBytes = dropTornTail(file, this.fd);
  }

  append(line: JournalLine, sync = false): void {
    if (this.fd === undefined) return;
    fs.writeSync(this.fd, JSON.stringify(line) + '\n');
    if (sync && this.fsync) fs.fsyncSync(this.fd);
  }

  close(): void {
    if (this.fd === undefined) return;
    try {
      fs.fsyncSync(this.fd);
    } catch {
      /* best effort */
    }
    fs.closeSync(this.fd);
    this.fd = undefined;
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
      throw new Error(`${file}:${i + 1}: not a journal line: ${(e as Error).message}`);
    }
  }
  return out;
}

/**
 * When a journal's run ended cleanly: the time of its `stop` (onStop ran) when it has one, no
 * strategy error, and an answer for every intent. Such a run has nothing left to resume.
 */
export function finishedRunOf(lines: readonly JournalLine[]): number | undefined {
  let stopAt: number | undefined;
  const unanswered = new Set<number>();
  for (const l of lines) {
    if (l.k === 'fatal') return undefined;
    if (l.k === 'stop') stopAt ??= l.t ?? 0;
    else if (l.k === 'intent' && typeof l.id === 'number') unanswered.add(l.id);
    else if (l.k === 'answer' && typeof l.id === 'number') unanswered.delete(l.id);
  }
  return unanswered.size === 0 ? stopAt : undefined;
}
