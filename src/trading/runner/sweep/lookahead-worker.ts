/**
 * A worker thread of `ratelimit-runner lookahead` (lookahead-pool.ts): runs the one backtest it is
 * given, with the run's command line in its process.argv, and posts the outcome.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { runLookaheadJob, type LookaheadJob } from './lookahead';

const port = parentPort;
if (!port) throw new Error('lookahead-worker.js runs as a worker thread of ratelimit-runner lookahead');
void runLookaheadJob(workerData as LookaheadJob).then((outcome) => port.postMessage(outcome));
