/**
 * Runs the lookahead check's backtests on worker threads, a new one per run (each gets its own
 * process.argv, the run's command line, and a fresh copy of the strategy module), at most `size`
 * at once; the outcomes come back in job order. A worker that dies (a strategy calling
 * process.exit) fails only its own run.
 */
import fs from 'node:fs';
import path from 'node:path';
import { Worker } from 'node:worker_threads';
import type { LookaheadJob, LookaheadOutcome, LookaheadRunner } from './lookahead';

/** The compiled worker beside this file (dist/src/trading/runner/sweep/lookahead-worker.js). */
const WORKER_FILE = path.join(__dirname, 'lookahead-worker.js');

export class LookaheadPool implements LookaheadRunner {
  constructor(private readonly size: number) {
    if (!fs.existsSync(WORKER_FILE)) throw new Error(`${WORKER_FILE} is missing: run the check from the built package (npx tsc -p tsconfig.json)`);
  }

  async run(jobs: LookaheadJob[]): Promise<LookaheadOutcome[]> {
    const outcomes = new Array<LookaheadOutcome>(jobs.length);
    let next = 0;
    const lane = async () => {
      while (next < jobs.length) {
        const i = next++;
        outcomes[i] = await runInWorker(jobs[i]!);
      }
    };
    await Promise.all(Array.from({ length: Math.min(this.size, jobs.length) }, lane));
    return outcomes;
  }
}

function runInWorker(job: LookaheadJob): Promise<LookaheadOutcome> {
  return new Promise((resolve) => {
    const worker = new Worker(WORKER_FILE, { argv: job.argv, workerData: job });
    let outcome: LookaheadOutcome | undefined;
    let failure: string | undefined;
    worker.on('message', (o: LookaheadOutcome) => {
      outcome = o;
      void worker.terminate();
    });
    worker.on('error', (e: Error) => (failure = `${e.name}: ${e.message}`));
    worker.on('exit', (code) => resolve(outcome ?? { error: { message: `the worker thread running ${job.label} died (${failure ?? `exit code ${code}`})`, hook: 'worker' } }));
  });
}
