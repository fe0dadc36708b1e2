/**
 * One process per journal: the journal's writer holds an owner file beside it (`FILE.lock`,
 * created exclusively) that names it — pid, host, and on Linux the boot and the start time of the
 * process, so that a pid used again by another process is not taken for the owner. A second
 * writer finds it and is refused (JournalLockedError, naming the owner and the journal) while the
 * owner lives. Nothing has to release it for it to end: a lock whose process is gone (killed with
 * kill -9, crashed, the machine restarted) is stale, and the next writer takes it over (renamed
 * away first, and checked to be the stale one, so that two takers cannot both win). A lock of
 * another host cannot be checked and is refused with what to do.
 */
import fs from 'node:fs';
import os from 'node:os';
import { randomBytes } from 'node:crypto';
import { processIdentity, processLives } from '../../../platform/processes';

/** Who holds a journal, as its lock file says. */
export interface LockOwner {
  pid: number;
  host: string;
  /** Linux: `<boot id>:<start time in clock ticks>` of the process; absent elsewhere. */
  process?: string;
  /** When it took the lock (ISO 8601). */
  since: string;
  /** Tells this lock from an earlier one of the same process. */
  nonce: string;
}

export class JournalLockedError extends Error {
  override readonly name = 'JournalLockedError';
  constructor(readonly file: string, readonly owner: LockOwner, why: string) {
    super(`the journal ${file} is in use by process ${owner.pid} on ${owner.host} (since ${owner.since}): ${why}`);
  }
}

export const lockPath = (journalFile: string): string => `${journalFile}.lock`;

/** Whether the owner of a lock runs: 'alive', 'gone', or 'unknown' (another host: it cannot be checked). */
export function ownerState(o: LockOwner): 'alive' | 'gone' | 'unknown' {
  if (o.host !== os.hostname()) return 'unknown';
  return processLives(o.pid, o.process) ? 'alive' : 'gone';
}

function readOwner(file: string): LockOwner | undefined {
  try {
    const o = JSON.parse(fs.readFileSync(file, 'utf8')) as Partial<LockOwner>;
    return typeof o.pid === 'number' && typeof o.host === 'string' ? ({ since: '?', nonce: '', ...o } as LockOwner) : undefined;
  } catch {
    return undefined; // unreadable: not a lock this code wrote (it writes them whole)
  }
}

/** The lock a journal writer holds; `release` removes it (only while it is still this one). */
export class JournalLock {
  private released = false;
  constructor(
    readonly file: string,
    readonly owner: LockOwner,
    /** The stale lock this one replaced (its process was gone). */
    readonly tookOver?: LockOwner,
  ) {}

  release(): void {
    if (this.released) return;
    this.released = true;
    if (readOwner(this.file)?.nonce === this.owner.nonce) fs.rmSync(this.file, { force: true });
  }
}

/**
 * Creates the lock file holding `owner`, whole or not at all (written aside, then linked to its
 * name, which fails when the name exists); false when a lock is there.
 */
function create(file: string, owner: LockOwner): boolean {
  const tmp = `${file}.${owner.nonce}`;
  fs.writeFileSync(tmp, JSON.stringify(owner) + '\n');
  try {
    fs.linkSync(tmp, file);
    return true;
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') return false;
    if (code !== 'EPERM' && code !== 'ENOTSUP' && code !== 'EOPNOTSUPP') throw e;
    // a file system without hard links: an exclusive create
    try {
      fs.writeFileSync(file, JSON.stringify(owner) + '\n', { flag: 'wx' });
      return true;
    } catch (e2) {
      if ((e2 as NodeJS.ErrnoException).code === 'EEXIST') return false;
      throw e2;
    }
  } finally {
    fs.rmSync(tmp, { force: true });
  }
}

/**
 * Takes the lock of a journal (its `.lock` file) for this process. Throws JournalLockedError
 * while another live process holds it; a stale lock is taken over (JournalLock.tookOver).
 */
export function lockJournal(journalFile: string): JournalLock {
  const file = lockPath(journalFile);
  const me: LockOwner = { pid: process.pid, host: os.hostname(), since: new Date().toISOString(), nonce: randomBytes(8).toString('hex') };
  const identity = processIdentity(process.pid);
  if (identity !== undefined) me.process = identity;
  let tookOver: LockOwner | undefined;
  for (let attempt = 0; attempt < 5; attempt++) {
    if (create(file, me)) return new JournalLock(file, me, tookOver);
    const owner = readOwner(file);
    if (owner) {
      const state = ownerState(owner);
      if (state === 'alive') throw new JournalLockedError(journalFile, owner, 'a second runner must not write to it; stop that one first, or give this run another --journal');
      if (state === 'unknown') {
        throw new JournalLockedError(journalFile, owner, `this host (${me.host}) cannot check whether that process still runs; if it does not, remove ${file} and start again`);
      }
    }
    // stale (its process is gone) or unreadable: rename it away, and remove it only if it is
    // still the one judged stale (another taker may have replaced it meanwhile)
    const aside = `${file}.stale-${me.nonce}`;
    try {
      fs.renameSync(file, aside);
    } catch {
      continue; // someone else moved it: try again
    }
    const moved = readOwner(aside);
    if (moved?.nonce !== owner?.nonce) {
      // not the stale one: a live taker's; give it back
      try {
        fs.linkSync(aside, file);
      } catch {
        /* a third one took the name: it decides */
      }
      fs.rmSync(aside, { force: true });
      continue;
    }
    fs.rmSync(aside, { force: true });
    tookOver = owner;
  }
  const owner = readOwner(file);
  if (owner) throw new JournalLockedError(journalFile, owner, 'it was taken by another process while this one started');
  throw new Error(`${file}: could not take the journal's lock`);
}
