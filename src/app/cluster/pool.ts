/**
 * The primary's workers (node:cluster): one slot per worker, forked at start, restarted with a
 * growing delay when a worker dies after the program has started, stopped by forwarding the
 * termination signal. It routes the workers' messages (addresses, start-up errors, stats batches,
 * replies) and asks them queries with a deadline.
 *
 * Before every slot has listened once, any worker exit ends the program (`onFatal`): a worker that
 * cannot start would only fail again. Afterwards a start-up error still ends it (as the single
 * process would end), while a crash is restarted.
 */
import { Backoff, type BackoffOptions } from '../../platform/backoff';
import type { StatsBatch } from '../../stats/sinks/ipc';
import type { Counter, Gauge } from '../../stats/store';
import type { Logger } from '../../telemetry/logger';
import { type FromWorker, isMessage, type ToWorker, type WorkerQuery } from './messages';

export interface WorkerAddresses {
  readonly grpc: string;
  readonly http: string;
}

/**
 * A forked worker process, as the pool uses it (the entry point adapts node:cluster's Worker: the
 * process and its cluster belong to the program, not to the service).
 */
export interface Worker {
  /** Unique per process. */
  readonly id: number;
  readonly pid: number | undefined;
  send(message: ToWorker, done: (err: Error | null) => void): void;
  /** Sends `signal` to the worker process (not a disconnect: its last stats flush still arrives). */
  kill(signal: NodeJS.Signals): void;
  isDead(): boolean;
  on(event: 'message', listener: (message: unknown) => void): void;
  on(event: 'exit', listener: (code: number | null, signal: string | null) => void): void;
  on(event: 'error', listener: (err: Error) => void): void;
}

export interface WorkerPoolOptions {
  /** Starts a worker process of this program. */
  readonly fork: () => Worker;
  readonly count: number;
  readonly logger: Logger;
  /** Whether the workers' stats batches should carry timer samples (the primary's sink uses them). */
  readonly forwardTimerSamples: boolean;
  /** Every slot listened once: the program is up. */
  readonly onReady: (addresses: WorkerAddresses) => void;
  /** The program must end with this one-line error. */
  readonly onFatal: (message: string) => void;
  /** A worker's flushed stats (`worker` is cluster's id, unique per process). */
  readonly onStats: (worker: number, batch: StatsBatch) => void;
  readonly onWorkerExit: (worker: number) => void;
  /**
   * The primary's own series: `ratelimit.workers.listening` (workers listening now) and
   * `ratelimit.workers.restarts` (workers that died after the start and were restarted).
   */
  readonly stats?: { readonly listening: Gauge; readonly restarts: Counter };
}

/**
 * Restart delays: short for a rare crash, doubling while a worker keeps dying soon after its
 * restart, so a crash loop costs little CPU and log volume.
 */
export const RESTART_DELAYS: BackoffOptions = { initialMs: 100, maxMs: 30_000 };

/** A worker that ran this long before dying was stable: its restart starts over at the first delay. */
export const STABLE_RUN_MS = 60_000;

/** The delay before restarting a worker that died after running `ranMs`; advances `delays`. */
export function restartDelay(delays: Backoff, ranMs: number): number {
  if (ranMs >= STABLE_RUN_MS) delays.reset();
  return delays.next();
}

/** No worker could answer a query (none listening, it exited, or it timed out). */
export class WorkerUnavailableError extends Error {}

interface Slot {
  /** 1..count */
  readonly index: number;
  worker: Worker | undefined;
  startedAt: number;
  addresses: WorkerAddresses | undefined;
  startupError: string | undefined;
  readonly restartDelays: Backoff;
  restartTimer: NodeJS.Timeout | undefined;
}

interface Pending {
  readonly slot: Slot;
  readonly worker: Worker;
  readonly resolve: (value: string) => void;
  readonly reject: (err: Error) => void;
  readonly timer: NodeJS.Timeout;
}

export class WorkerPool {
  private readonly slots: Slot[];
  private readonly pending = new Map<number, Pending>();
  private nextQueryId = 1;
  private ready = false;
  private stopping = false;

  constructor(private readonly opts: WorkerPoolOptions) {
    this.slots = Array.from({ length: opts.count }, (_, i) => ({
      index: i + 1,
      worker: undefined,
      startedAt: 0,
      addresses: undefined,
      startupError: undefined,
      restartDelays: new Backoff(RESTART_DELAYS),
      restartTimer: undefined,
    }));
  }

  start(): void {
    for (const slot of this.slots) this.fork(slot);
  }

  /** Slots whose worker is listening now. */
  listeningSlots(): number[] {
    return this.slots.filter((s) => s.addresses !== undefined).map((s) => s.index);
  }

  /**
   * Asks one listening worker (slot `index`, else the first listening one) and resolves with its
   * answer and slot. Rejects with a {@link WorkerUnavailableError} when none can answer in time,
   * with a plain Error when the worker answered with one.
   */
  query(query: WorkerQuery, timeoutMs: number, index?: number): Promise<{ slot: number; value: string }> {
    const slot = index === undefined ? this.slots.find((s) => s.addresses !== undefined) : this.slots[index - 1];
    const worker = slot?.worker;
    if (slot === undefined || worker === undefined || slot.addresses === undefined) {
      const who = index === undefined ? 'no worker is' : `worker ${index} is not`;
      return Promise.reject(new WorkerUnavailableError(`${who} listening at the moment (worker mode); try again shortly`));
    }
    const id = this.nextQueryId++;
    return new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new WorkerUnavailableError(`worker ${slot.index} did not answer within ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(id, { slot, worker, resolve, reject, timer });
      this.send(worker, { type: 'query', id, query });
    }).then((value) => ({ slot: slot.index, value }));
  }

  /** Has every listening worker flush its stats; resolves once all did or `timeoutMs` passed. */
  async flushAll(timeoutMs: number): Promise<void> {
    await Promise.allSettled(this.listeningSlots().map((index) => this.query({ op: 'flush' }, timeoutMs, index)));
  }

  /**
   * Forwards `signal` to every worker and waits for them to exit; after `graceMs` the rest are
   * killed. Resolves true when every worker exited with code 0 in time.
   */
  async stop(signal: NodeJS.Signals, graceMs: number): Promise<boolean> {
    this.stopping = true;
    const live: Array<{ slot: Slot; worker: Worker; exited: Promise<boolean> }> = [];
    for (const slot of this.slots) {
      clearTimeout(slot.restartTimer);
      const worker = slot.worker;
      if (worker === undefined) continue;
      const exited = new Promise<boolean>((resolve) => worker.on('exit', (code: number | null) => resolve(code === 0)));
      live.push({ slot, worker, exited });
      worker.kill(signal);
    }
    let timer: NodeJS.Timeout | undefined;
    const codes = await Promise.race([
      Promise.all(live.map((l) => l.exited)),
      new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), graceMs))),
    ]);
    clearTimeout(timer);
    if (codes !== undefined) return codes.every(Boolean);
    for (const l of live) {
      if (l.worker.isDead()) continue;
      this.opts.logger.warn(`worker ${l.slot.index} (pid ${l.worker.pid}) did not stop within ${graceMs} ms: killing it`);
      l.worker.kill('SIGKILL');
    }
    await Promise.all(live.map((l) => l.exited));
    return false;
  }

  private fork(slot: Slot): void {
    slot.restartTimer = undefined;
    const worker = this.opts.fork();
    slot.worker = worker;
    slot.startedAt = Date.now();
    slot.addresses = undefined;
    slot.startupError = undefined;
    this.opts.logger.info(`worker ${slot.index} started (pid ${worker.pid})`);
    // Errors of the channel (a send racing the worker's death) end in the exit handler.
    worker.on('error', (err: Error) => this.opts.logger.debug(`worker ${slot.index}: ${err.message}`));
    worker.on('message', (m: unknown) => this.onMessage(slot, worker, m));
    worker.on('exit', (code: number | null, signal: string | null) => this.onExit(slot, worker, code, signal));
    this.send(worker, { type: 'init', slot: slot.index, forwardTimerSamples: this.opts.forwardTimerSamples });
  }

  private send(worker: Worker, message: ToWorker): void {
    worker.send(message, (err: Error | null) => {
      if (err) this.opts.logger.debug(`cannot reach worker pid ${worker.pid}: ${err.message}`);
    });
  }

  private onMessage(slot: Slot, worker: Worker, m: unknown): void {
    if (!isMessage<FromWorker>(m)) return;
    switch (m.type) {
      case 'listening':
        slot.addresses = { grpc: m.grpc, http: m.http };
        this.opts.stats?.listening.set(this.listeningSlots().length);
        if (this.ready) this.opts.logger.info(`worker ${slot.index} (pid ${worker.pid}) is listening`);
        else if (this.slots.every((s) => s.addresses !== undefined)) {
          this.ready = true;
          this.opts.onReady(this.slots[0]!.addresses!);
        }
        return;
      case 'startup-error':
        slot.startupError = m.message;
        return;
      case 'stats':
        this.opts.onStats(worker.id, m.batch);
        return;
      case 'reply': {
        const p = this.pending.get(m.id);
        if (p === undefined) return; // timed out already
        this.pending.delete(m.id);
        clearTimeout(p.timer);
        if (m.ok) p.resolve(m.value);
        else p.reject(new Error(m.error));
      }
    }
  }

  private onExit(slot: Slot, worker: Worker, code: number | null, signal: string | null): void {
    this.opts.onWorkerExit(worker.id);
    for (const [id, p] of this.pending) {
      if (p.worker !== worker) continue;
      this.pending.delete(id);
      clearTimeout(p.timer);
      p.reject(new WorkerUnavailableError(`worker ${slot.index} exited before answering`));
    }
    if (slot.worker !== worker) return;
    slot.worker = undefined;
    slot.addresses = undefined;
    this.opts.stats?.listening.set(this.listeningSlots().length);
    if (this.stopping) return;
    const how = signal !== null ? `signal ${signal}` : `code ${code}`;
    if (slot.startupError !== undefined) {
      this.opts.onFatal(slot.startupError);
      return;
    }
    if (!this.ready) {
      this.opts.onFatal(`worker ${slot.index} exited with ${how} before listening`);
      return;
    }
    const delay = restartDelay(slot.restartDelays, Date.now() - slot.startedAt);
    this.opts.stats?.restarts.inc();
    this.opts.logger.error(`worker ${slot.index} (pid ${worker.pid}) exited unexpectedly with ${how}; restarting it in ${delay} ms`);
    slot.restartTimer = setTimeout(() => this.fork(slot), delay);
  }
}
