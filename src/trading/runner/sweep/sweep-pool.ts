/**
 * Runs a sweep's backtests on worker threads (node:worker_threads), one job at a time per worker,
 * the next job to whichever worker is free; the outcomes come back in job order, so the sweep's
 * result is the same for any number of workers. A worker that dies (a strategy calling
 * process.exit, an exception thrown outside its hooks) fails only the job it was running: that job
 * gets the error and a new worker takes the next one.
 */
import fs from 'node:fs';
import path from 'node:path';
import { Worker } from 'node:worker_threads';
import type { JobRunner } from './sweep';
import type { JobOutcome, SweepJob, SweepSetup } from './sweep-job';

/** The compiled worker beside this file (dist/src/trading/runner/sweep/sweep-worker.js). */
const WORKER_FILE = path.join(__dirname, 'sweep-worker.js');

export class BacktestPool implements JobRunner {
  private readonly free: Worker[] = [];
  private readonly live = new Set<Worker>();
  private readonly waiting = new Map<Worker, (o: JobOutcome) => void>();

  constructor(
    private readonly setup: SweepSetup,
    private readonly size: number,
  ) {
    if (!fs.existsSync(WORKER_FILE)) throw new Error(`${WORKER_FILE} is missing: run the sweep from the built package (npx tsc -p tsconfig.json)`);
  }

  async run(jobs: SweepJob[], onDone?: (index: number) => void): Promise<JobOutcome[]> {
    const outcomes: JobOutcome[] = new Array<JobOutcome>(jobs.length);
    let next = 0;
    const lane = async () => {
      while (next < jobs.length) {
        const i = next++;
        outcomes[i] = await this.runOne(jobs[i]!);
        onDone?.(i);
      }
    };
    await Promise.all(Array.from({ length: Math.min(this.size, jobs.length) }, lane));
    return outcomes;
  }

  /** Ends every worker thread. */
  async close(): Promise<void> {
    await Promise.all([...this.live].map((w) => w.terminate()));
  }

  private runOne(job: SweepJob): Promise<JobOutcome> {
    const worker = this.free.pop() ?? this.spawn();
    return new Promise((resolve) => {
      this.waiting.set(worker, resolve);
      worker.postMessage(job);
    });
  }

  private spawn(): Worker {
    const worker = new Worker(WORKER_FILE, { workerData: this.setup });
    this.live.add(worker);
    let failure: string | undefined;
    const answer = (o: JobOutcome) => {
      const resolve = this.waiting.get(worker);
      this.waiting.delete(worker);
      resolve?.(o);
    };
    worker.on('message', (o: JobOutcome) => {
      this.free.push(worker);
      answer(o);
    });
    worker.on('error', (e: Error) => (failure = `${e.name}: ${e.message}`));
    worker.on('exit', (code) => {
      this.live.delete(worker);
      const at = this.free.indexOf(worker);
      if (at >= 0) this.free.splice(at, 1);
      answer({ error: { message: `the worker thread running this set died (${failure ?? `exit code ${code}`})`, hook: 'worker' } });
    });
    return worker;
  }
}
