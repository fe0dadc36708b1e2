/** A worker thread of `ratelimit-runner sweep` (sweep-pool.ts): runs the backtests it is sent, one at a time. */
import { parentPort, workerData } from 'node:worker_threads';
import { runSweepJob, type SweepJob, type SweepSetup } from './sweep-job';

const port = parentPort;
if (!port) throw new Error('sweep-worker.js runs as a worker thread of ratelimit-runner sweep');
const setup = workerData as SweepSetup;
port.on('message', (job: SweepJob) => {
  void runSweepJob(setup, job).then((outcome) => port.postMessage(outcome));
});
