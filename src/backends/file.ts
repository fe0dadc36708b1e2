/**
 * A counter store in one local file, for processes on one machine that share a budget without a
 * Redis: the strategy runner's in-process limiter, whose broker budget must outlive the process
 * (a restart must not get a fresh hour of calls) and be shared by runs on the same token.
 *
 * Every increment is one read-modify-write of the whole file under an exclusive lock file
 * (`FILE.lock`, created with O_EXCL, holding the owner's pid), so two processes never decide on
 * the same state. The new state is written to a temporary file, fsync'ed and renamed over the old
 * one: a process killed at any point leaves the old state or the new one, never half of either.
 * A lock left by a killed process (its pid is gone) is removed by the next one. Expired counters
 * are dropped on every write and at most `maxKeys` are kept, so the file stays small.
 *
 * The algorithms are those of the memory store (src/core/algorithms.ts): fixed windows count every
 * hit, sliding windows and token buckets write only what they admit.
 */
import fs from 'node:fs';
import path from 'node:path';
import { emissionMs, gcra, slidingCount } from '../core/algorithms';
import { StoreError, type CounterOp, type CounterStore } from '../core/store';
import { processLives } from '../platform/processes';
import { errorMessage } from '../platform/errors';

export interface FileStoreOptions {
  /** The state file; its directory is created when missing. */
  readonly path: string;
  /** Counters kept at most (those that expire first are dropped). Default 10,000. */
  readonly maxKeys?: number;
  /** Hears what the store had to repair (a corrupt state file set aside). */
  readonly onWarning?: (message: string) => void;
}

/** The file's content: each live counter's value and when it expires (epoch ms). */
interface State {
  version: 1;
  counters: Record<string, [value: number, expiresMs: number]>;
}

/** Lock attempts before giving up, and the pause between them: about 5 s of waiting in all. */
const LOCK_ATTEMPTS = 1000;
const LOCK_RETRY_MS = 5;
/** An empty lock file seen this many attempts in a row: its creator died before writing its pid. */
const EMPTY_LOCK_ATTEMPTS = 40;

const pause = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

export class FileStore implements CounterStore {
  readonly kind = 'file';
  private readonly lockPath: string;
  private readonly maxKeys: number;
  /** Increments of this process, one at a time (the file lock is per process). */
  private chain: Promise<unknown> = Promise.resolve();
  private healthy = true;

  constructor(private readonly options: FileStoreOptions) {
    this.lockPath = `${options.path}.lock`;
    this.maxKeys = options.maxKeys ?? 10_000;
  }

  increment(ops: readonly CounterOp[], nowMs: number): Promise<number[]> {
    const run = this.chain.then(() => this.locked(() => this.apply(ops, nowMs)));
    this.chain = run.catch(() => undefined);
    return run;
  }

  isHealthy(): boolean {
    return this.healthy;
  }

  close(): Promise<void> {
    return this.chain.then(() => undefined);
  }

  /** Runs `fn` holding the lock file; a failure to lock or to write is a transient StoreError. */
  private async locked<T>(fn: () => T): Promise<T> {
    await this.lock();
    try {
      const r = fn();
      this.healthy = true;
      return r;
    } catch (e) {
      this.healthy = false;
      throw e instanceof StoreError ? e : new StoreError(`budget state ${this.options.path}: ${errorMessage(e)}`, true);
    } finally {
      fs.rmSync(this.lockPath, { force: true });
    }
  }

  private async lock(): Promise<void> {
    fs.mkdirSync(path.dirname(this.options.path), { recursive: true });
    let emptySeen = 0;
    for (let attempt = 0; ; attempt++) {
      try {
        const fd = fs.openSync(this.lockPath, 'wx');
        try {
          fs.writeSync(fd, `${process.pid}\n`);
        } finally {
          fs.closeSync(fd);
        }
        return;
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw new StoreError(`cannot lock ${this.lockPath}: ${errorMessage(e)}`, true);
      }
      const owner = this.lockOwner();
      emptySeen = owner === undefined ? emptySeen + 1 : 0;
      const stale = owner === undefined ? emptySeen >= EMPTY_LOCK_ATTEMPTS : owner === process.pid || !processLives(owner);
      if (stale && this.lockOwner() === owner) {
        // Left by a process that died holding it (kill -9): no increment of this process holds
        // it (they run one at a time), and a pid that is gone will not finish its write.
        fs.rmSync(this.lockPath, { force: true });
        continue;
      }
      if (attempt >= LOCK_ATTEMPTS) {
        this.healthy = false;
        throw new StoreError(`${this.lockPath} is held by process ${owner ?? '(unknown)'}: gave up waiting for it`, true);
      }
      await pause(LOCK_RETRY_MS);
    }
  }

  /** The pid in the lock file; undefined when it is empty, unreadable or gone. */
  private lockOwner(): number | undefined {
    try {
      const pid = Number.parseInt(fs.readFileSync(this.lockPath, 'utf8'), 10);
      return Number.isInteger(pid) && pid > 0 ? pid : undefined;
    } catch {
      return undefined;
    }
  }

  private read(): State {
    let text: string;
    try {
      text = fs.readFileSync(this.options.path, 'utf8');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return { version: 1, counters: {} };
      throw e;
    }
    try {
      const s = JSON.parse(text) as State;
      if (s?.version === 1 && typeof s.counters === 'object' && s.counters !== null) {
        const ok = Object.values(s.counters).every((c) => Array.isArray(c) && c.length === 2 && c.every((x) => typeof x === 'number' && Number.isFinite(x)));
        if (ok) return s;
      }
    } catch {
      // fall through: not JSON
    }
    const aside = `${this.options.path}.corrupt`;
    fs.renameSync(this.options.path, aside);
    this.options.onWarning?.(`${this.options.path} was not a budget state file (moved to ${aside}); counting from empty`);
    return { version: 1, counters: {} };
  }

  private write(s: State, nowMs: number): void {
    const entries = Object.entries(s.counters).filter(([, [, expires]]) => expires > nowMs);
    if (entries.length > this.maxKeys) {
      entries.sort((a, b) => b[1][1] - a[1][1]);
      entries.length = this.maxKeys;
    }
    const tmp = `${this.options.path}.${process.pid}.tmp`;
    const fd = fs.openSync(tmp, 'w');
    try {
      fs.writeSync(fd, JSON.stringify({ version: 1, counters: Object.fromEntries(entries) }));
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    fs.renameSync(tmp, this.options.path);
  }

  private apply(ops: readonly CounterOp[], nowMs: number): number[] {
    const s = this.read();
    const live = (key: string): [number, number] | undefined => {
      const c = s.counters[key];
      return c !== undefined && c[1] > nowMs ? c : undefined;
    };
    const windowEnd = (w: number, windows = 1) => (Math.floor(Math.floor(nowMs / 1000) / w) * w + windows * w) * 1000;
    const out = ops.map((op) => {
      const c = live(op.key);
      if (op.rule.algorithm === 'token_bucket') {
        const r = gcra(c?.[0], op.hits, nowMs, emissionMs(op.rule, op.windowSeconds), op.rule.burst ?? op.rule.limit.requestsPerUnit);
        if (r.admitted && op.hits > 0) s.counters[op.key] = [r.tat, Math.ceil(r.tat)];
        return r.count;
      }
      if (op.rule.algorithm === 'sliding_window') {
        const prev = op.prevKey !== undefined ? live(op.prevKey)?.[0] ?? 0 : 0;
        const count = slidingCount(c?.[0] ?? 0, prev, op.hits, nowMs, op.windowSeconds);
        // Kept one more window: it is the next window's `previous`.
        if (count <= op.rule.limit.requestsPerUnit && op.hits > 0) s.counters[op.key] = [(c?.[0] ?? 0) + op.hits, c?.[1] ?? windowEnd(op.windowSeconds, 2)];
        return count;
      }
      const count = (c?.[0] ?? 0) + op.hits;
      s.counters[op.key] = [count, c?.[1] ?? windowEnd(op.windowSeconds)];
      return count;
    });
    this.write(s, nowMs);
    return out;
  }
}
