/**
 * A worker process of worker mode (WORKERS ≠ 1): the whole service (store, config provider, local
 * cache, tracing, gRPC and HTTP on the ports shared through node:cluster) without the debug port.
 * It flushes its stats to the primary, answers the primary's queries (/rlconfig, /debug/explain,
 * profiles, fresh flushes), reports its addresses once listening, and drains on SIGTERM, SIGINT
 * or SIGHUP. A start-up error is reported to the primary before exiting 1, so the primary can end
 * the program with that line instead of restarting the worker.
 */
import { RateLimitApp } from '../app';
import { StartupError, stopOnSignals } from '../lifecycle';
import { cpuProfile } from '../../server/debug';
import type { Settings } from '../../settings';
import { IpcStatsSink } from '../../stats/sinks/ipc';
import type { Logger } from '../../telemetry/logger';
import { Listings } from './listings';
import { type FromWorker, isMessage, type ToWorker, type WorkerQuery } from './messages';

function send(message: FromWorker): Promise<void> {
  return new Promise((resolve, reject) => {
    if (process.send === undefined || !process.connected) {
      reject(new Error('no IPC channel to the primary'));
      return;
    }
    process.send(message, undefined, {}, (err: Error | null) => (err ? reject(err) : resolve()));
  });
}

/** The worker's lines carry its slot, so the shared stderr tells the workers apart. */
function prefixed(logger: Logger, prefix: string): Logger {
  return {
    debug: (m) => logger.debug(prefix + m),
    info: (m) => logger.info(prefix + m),
    warn: (m) => logger.warn(prefix + m),
    error: (m) => logger.error(prefix + m),
    enabled: (level) => logger.enabled(level),
  };
}

function answer(app: RateLimitApp, listings: Listings, query: WorkerQuery): Promise<string> {
  switch (query.op) {
    case 'rlconfig':
      return Promise.resolve(listings.start(query.listing, app.dumpConfigChunks()));
    case 'rlconfig-next':
      return Promise.resolve(listings.next(query.listing));
    case 'rlconfig-end':
      listings.end(query.listing);
      return Promise.resolve('');
    case 'explain':
      return app.explain(query.domain, query.descriptors);
    case 'profile':
      return cpuProfile(query.ms);
    case 'rlqs':
      return Promise.resolve(app.quotaBuckets());
    case 'explain-bucket':
      return Promise.resolve(app.explainBucket(query.domain, query.bucket));
    case 'flush':
      app.flushStats();
      return Promise.resolve('');
  }
}

/** Waits for the primary's `init` (sent right after the fork). */
function initFromPrimary(): Promise<Extract<ToWorker, { type: 'init' }>> {
  return new Promise((resolve) => {
    const onMessage = (m: unknown): void => {
      if (!isMessage<ToWorker>(m) || m.type !== 'init') return;
      process.off('message', onMessage);
      resolve(m);
    };
    process.on('message', onMessage);
  });
}

export async function runWorker(settings: Settings, baseLogger: Logger): Promise<void> {
  const init = await initFromPrimary();
  const logger = prefixed(baseLogger, `worker ${init.slot}: `);
  const sink = new IpcStatsSink((batch) => send({ type: 'stats', batch }));
  sink.forwardTimerSamples = init.forwardTimerSamples;
  const app = new RateLimitApp({ settings, logger, worker: { slot: init.slot, statsSink: sink } });

  const listings = new Listings();
  process.on('message', (m: unknown) => {
    if (!isMessage<ToWorker>(m) || m.type !== 'query') return;
    const { id } = m;
    Promise.resolve()
      .then(() => answer(app, listings, m.query))
      .then(
      (value) => send({ type: 'reply', id, ok: true, value }),
      (err: unknown) => send({ type: 'reply', id, ok: false, error: err instanceof Error ? err.message : String(err) }),
    ).catch(() => {
      // The primary is gone; cluster ends this process on the disconnect.
    });
  });

  // Not once: a terminal's Ctrl-C reaches the worker and the primary forwards it too, and a
  // second signal without a listener would kill the worker before it drained.
  stopOnSignals(app, logger, false);

  let listening;
  try {
    listening = await app.start();
  } catch (err) {
    if (app.isStopping) return; // a signal arrived during start-up
    if (!(err instanceof StartupError)) throw err;
    await send({ type: 'startup-error', message: err.message }).catch(() => undefined);
    process.exit(1);
  }
  await send({ type: 'listening', grpc: listening.grpc, http: listening.http });
}
