/**
 * The one directory watcher of the project (fs.watch with debounce): the file provider watches the
 * runtime directories with it, the xDS management server's DirectoryPublisher its config directory,
 * the TLS certificate source the directories of its certificate files.
 *
 * The owner says which directories to watch (`watch()`, again after each load: it is cheap when
 * nothing changed) and gets one `onChange()` per burst of events: `debounceMs` after the last
 * event, at most `10 × debounceMs` after the first. Each watched directory has a filter: events it
 * rejects (another entry of the root link's parent) only make the watcher check that its watches
 * are alive. Before `onChange()` every watch is re-armed where needed, so a change made after the
 * owner's read is never missed; a re-armed watch also calls `onChange()` (changes may have been
 * missed while it was dead). A watched directory that does not exist (or cannot be watched) is
 * polled every `retryMs`; when it appears, it is watched and `onChange()` follows.
 *
 * fs.watch facts this relies on (Linux/inotify):
 * - Watching a symlink path watches its target, so a symlink swap is only seen from the parent
 *   directory (events named after the link).
 * - A watcher dies silently when its directory is removed or replaced (one last `rename` event
 *   named after the directory itself, then nothing; no `error` event); a recreated directory may
 *   even get the same inode number. So watches are re-armed whenever an event names the watched
 *   directory itself (or has no name), when the directory's identity (dev, inode, birth time)
 *   changed, or after an `error` event.
 * - `fs.watch` throws synchronously (ENOENT) for a missing path, and an `error` event with no
 *   listener would crash the process: both are handled.
 * - Directory watches are not recursive (node 20's `recursive` option is emulated on Linux): an
 *   owner that loads subdirectories watches each of them.
 * - Events carry only `rename` or `change` and an optional file name; reading files does not
 *   produce events (no IN_ACCESS/IN_OPEN watch), so an owner's load never triggers itself.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';

/** Whether an event, named after the entry that changed (null: unnamed), is a change for the owner. */
export type EventFilter = (filename: string | null) => boolean;

export const EVERY_EVENT: EventFilter = () => true;

export const DEFAULT_DEBOUNCE_MS = 100;
export const DEFAULT_RETRY_MS = 1000;

export interface DirectoryWatcherOptions {
  /** Called once per burst of events that changed something (or may have). */
  readonly onChange: () => void;
  readonly logger: { warn(msg: string): void };
  /** Starts each warning (`runtime: ` for the file provider). */
  readonly logPrefix?: string;
  /** Quiet time after the last event before `onChange()` (default 100 ms). */
  readonly debounceMs?: number;
  /** Poll interval for watched directories that do not exist or cannot be watched (default 1000 ms). */
  readonly retryMs?: number;
  /** Whether the watches keep the process alive (fs.watch `persistent`, default true). */
  readonly persistent?: boolean;
}

type WatchState = 'ok' | 'armed' | 'missing';

export function errCode(err: unknown): string | undefined {
  return typeof err === 'object' && err !== null && 'code' in err ? String((err as { code: unknown }).code) : undefined;
}

export function isMissing(err: unknown): boolean {
  const code = errCode(err);
  return code === 'ENOENT' || code === 'ENOTDIR';
}

/** Go-style reason for a node fs error: `open /a/b.yaml: permission denied`. */
export function fsReason(err: unknown): string {
  // Duck-typed, not `instanceof Error`: errors from node core can come from another realm (jest).
  if (typeof err !== 'object' || err === null || typeof (err as { message?: unknown }).message !== 'string') {
    return String(err);
  }
  const e = err as NodeJS.ErrnoException;
  const m = /^[A-Z0-9_]+: (.*?), \w+(?: '.*')?$/.exec(e.message);
  const desc = m?.[1] ?? e.message;
  if (e.syscall !== undefined && e.path !== undefined) return `${e.syscall} ${e.path}: ${desc}`;
  return desc;
}

/** dev + inode + birth time of a directory (following symlinks), or undefined if it is not one. */
function dirIdentity(dir: string): string | undefined {
  try {
    const st = fs.statSync(dir, { bigint: true, throwIfNoEntry: false });
    if (st === undefined || !st.isDirectory()) return undefined;
    return `${st.dev}:${st.ino}:${st.birthtimeNs}`;
  } catch {
    return undefined;
  }
}

/** One fs.watch on one directory, re-armed when the directory is replaced. */
class DirWatch {
  private watcher: fs.FSWatcher | undefined;
  private identity: string | undefined;
  private suspect = false;
  private readonly base: string;

  constructor(
    readonly dir: string,
    private readonly relevant: EventFilter,
    private readonly onEvent: (relevant: boolean) => void,
    private readonly opts: DirectoryWatcherOptions,
  ) {
    this.base = path.basename(dir);
  }

  /** Makes sure the directory is watched as it is now: 'armed' when a new watch was set up. */
  ensure(): WatchState {
    // Identity first, then watch: if the directory is replaced in between, the recorded identity
    // is the old one and the next check re-arms (a spurious re-arm, never a missed directory).
    const id = dirIdentity(this.dir);
    if (id === undefined) {
      this.close();
      return 'missing';
    }
    if (this.watcher !== undefined && !this.suspect && id === this.identity) return 'ok';
    this.close();
    const prefix = this.opts.logPrefix ?? '';
    let w: fs.FSWatcher;
    try {
      w = fs.watch(this.dir, { persistent: this.opts.persistent ?? true }, (_event, filename) => this.handle(filename));
    } catch (err) {
      if (!isMissing(err)) this.opts.logger.warn(`${prefix}cannot watch ${this.dir}: ${fsReason(err)}`);
      return 'missing';
    }
    w.on('error', (err) => {
      this.opts.logger.warn(`${prefix}watch error on ${this.dir}: ${fsReason(err)}`);
      if (this.watcher === w) this.close();
      this.onEvent(false);
    });
    this.watcher = w;
    this.identity = id;
    this.suspect = false;
    return 'armed';
  }

  close(): void {
    const w = this.watcher;
    this.watcher = undefined;
    this.identity = undefined;
    if (w !== undefined) w.close();
  }

  private handle(filename: string | null): void {
    // inotify reports the removal or move of the watched directory itself under its own name, and
    // the watch is dead afterwards: re-arm at the next check.
    if (filename === null || filename === this.base) this.suspect = true;
    this.onEvent(this.relevant(filename));
  }
}

export class DirectoryWatcher {
  private readonly watches = new Map<string, DirWatch>();
  private readonly debounceMs: number;
  private readonly maxDelayMs: number;
  private readonly retryMs: number;
  private debounceTimer: NodeJS.Timeout | undefined;
  private retryTimer: NodeJS.Timeout | undefined;
  private burstStart: number | undefined;
  /** A relevant event arrived in the current burst. */
  private changed = false;
  private closed = false;

  constructor(private readonly opts: DirectoryWatcherOptions) {
    this.debounceMs = Math.max(0, opts.debounceMs ?? DEFAULT_DEBOUNCE_MS);
    this.maxDelayMs = this.debounceMs * 10;
    this.retryMs = Math.max(1, opts.retryMs ?? DEFAULT_RETRY_MS);
  }

  /**
   * Watches `dir` (if not already), re-arming a dead or replaced watch; a directory that does not
   * exist is polled. `relevant` is fixed by the first call for a directory. No-op after close().
   */
  watch(dir: string, relevant: EventFilter = EVERY_EVENT): void {
    if (this.closed) return;
    let w = this.watches.get(dir);
    if (w === undefined) {
      w = new DirWatch(dir, relevant, (rel) => this.onEvent(rel), this.opts);
      this.watches.set(dir, w);
    }
    if (w.ensure() === 'missing') this.scheduleRetry();
  }

  /** Stops watching every directory not in `keep`. */
  unwatchExcept(keep: ReadonlySet<string>): void {
    for (const [dir, w] of this.watches) {
      if (keep.has(dir)) continue;
      w.close();
      this.watches.delete(dir);
    }
  }

  /** A relevant event arrived and its `onChange()` is still due. */
  get changePending(): boolean {
    return this.changed && this.debounceTimer !== undefined;
  }

  /** Closes every watch and timer; no `onChange()` follows. Idempotent. */
  close(): void {
    this.closed = true;
    clearTimeout(this.debounceTimer);
    clearTimeout(this.retryTimer);
    this.debounceTimer = undefined;
    this.retryTimer = undefined;
    for (const w of this.watches.values()) w.close();
    this.watches.clear();
  }

  private onEvent(relevant: boolean): void {
    if (this.closed) return;
    if (relevant) this.changed = true;
    const now = Date.now();
    this.burstStart ??= now;
    const due = Math.min(now + this.debounceMs, this.burstStart + this.maxDelayMs);
    clearTimeout(this.debounceTimer);
    this.debounceTimer = setTimeout(() => this.onDebounced(), Math.max(0, due - now));
    this.debounceTimer.unref();
  }

  private onDebounced(): void {
    this.debounceTimer = undefined;
    this.burstStart = undefined;
    const changed = this.changed;
    this.changed = false;
    if (this.rearm() || changed) this.opts.onChange();
  }

  /** Re-arms dead or replaced watches; true when one was (re)armed, so changes may have been missed. */
  private rearm(): boolean {
    let armed = false;
    let missing = false;
    for (const w of this.watches.values()) {
      const state = w.ensure();
      if (state === 'armed') armed = true;
      else if (state === 'missing') missing = true;
    }
    if (missing) this.scheduleRetry();
    return armed;
  }

  private scheduleRetry(): void {
    if (this.closed || this.retryTimer !== undefined) return;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      if (this.rearm()) this.opts.onChange();
    }, this.retryMs);
    this.retryTimer.unref();
  }
}
