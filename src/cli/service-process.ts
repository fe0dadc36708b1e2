/**
 * The process concerns of the `ratelimit` program, kept in its entry point: signals and exit
 * codes, node:cluster's workers, and a worker's IPC channel to its primary. The service
 * (src/app) builds, runs and stops without touching `process`.
 */
import cluster from 'node:cluster';
import type { Worker } from '../app/cluster/pool';
import type { PrimaryChannel } from '../app/cluster/worker';
import type { FromWorker, ToWorker } from '../app/cluster/messages';
import type { Logger } from '../telemetry/logger';

export const STOP_SIGNALS = ['SIGTERM', 'SIGINT', 'SIGHUP'] as const;

/**
 * SIGTERM, SIGINT or SIGHUP stop `app` gracefully, then exit 0 (1 when stopping failed); as
 * upstream, SIGHUP does not reload. With `once`, a second signal takes its default action (a
 * second Ctrl-C kills at once); a worker keeps listening, since its primary forwards the signal
 * the terminal already sent it.
 */
export function stopOnSignals(app: { stop(): Promise<void> }, logger: Logger, once: boolean): void {
  for (const sig of STOP_SIGNALS) {
    const onSignal = (): void => {
      logger.info(`received ${sig}`);
      app.stop().then(
        () => process.exit(0),
        (err: unknown) => {
          logger.error(`error while stopping: ${String(err)}`);
          process.exit(1);
        },
      );
    };
    if (once) process.once(sig, onSignal);
    else process.on(sig, onSignal);
  }
}

/** Forks this program as a worker (node:cluster, `advanced` serialization: timer samples travel as typed arrays). */
export function forkWorker(): Worker {
  cluster.setupPrimary({ serialization: 'advanced' });
  const w = cluster.fork();
  // One listener type for the three events, whose arguments differ.
  const on = (event: 'message' | 'exit' | 'error', listener: (...args: any[]) => void): void => void w.on(event, listener);
  return {
    id: w.id,
    pid: w.process.pid,
    send: (message: ToWorker, done) => void w.send(message, undefined, done),
    // Not w.kill(): it would close the IPC channel before the worker's last stats flush.
    kill: (signal) => void w.process.kill(signal),
    isDead: () => w.isDead(),
    on: on as Worker['on'],
  };
}

/** This worker's channel to its primary (the IPC channel node:cluster opened). */
export function primaryChannel(): PrimaryChannel {
  return {
    send: (message: FromWorker) =>
      new Promise((resolve, reject) => {
        if (process.send === undefined || !process.connected) {
          reject(new Error('no IPC channel to the primary'));
          return;
        }
        process.send(message, undefined, {}, (err: Error | null) => (err ? reject(err) : resolve()));
      }),
    onMessage: (listener) => {
      process.on('message', listener);
      return () => void process.off('message', listener);
    },
  };
}

export function isWorkerProcess(): boolean {
  return cluster.isWorker;
}
