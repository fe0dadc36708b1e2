/**
 * A worker process of worker mode (WORKERS ≠ 1): the whole service (store, config provider, local
 * cache, tracing, gRPC and HTTP on the ports shared through node:cluster) without the debug port.
 * It flushes its stats to the primary, answers the primary's queries (/rlconfig, /debug/explain,
 * profiles, fresh flushes) and reports its addresses once listening; the entry point stops it on
 * SIGTERM, SIGINT or SIGHUP. A start-up error is reported to the primary before the worker exits
 * 1, so the primary can end the program with that line instead of restarting the worker.
 */
import { RateLimitApp } from '../app';
import { StartupError } from '../lifecycle';
import { cpuProfile } from '../../server/debug';
import type { Settings } from '../../settings';
import type { PageAnswer } from '../../stats/limits/book';
import { IpcStatsSink } from '../../stats/sinks/ipc';
import type { Logger } from '../../telemetry/logger';
import { Listings } from './listings';
import { type FromWorker, isMessage, type ToWorker, type WorkerQuery } from './messages';

/** The worker's IPC channel to its primary (the entry point adapts the process's own). */
export interface PrimaryChannel {
  /** Resolves once the message is written; rejects when the primary is gone. */
  send(message: FromWorker): Promise<void>;
  /** Calls `listener` with every message of the primary; the returned function stops that. */
  onMessage(listener: (message: unknown) => void): () => void;
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

/** The answer to one query (async: an error thrown by a listing becomes the reply's error). */
async function answer(app: RateLimitApp, listings: Listings, query: WorkerQuery): Promise<string> {
  switch (query.op) {
    case 'rlconfig':
      return listings.start(query.listing, app.dumpConfigChunks());
    case 'rlconfig-next':
      return listings.next(query.listing);
    case 'rlconfig-end':
      listings.end(query.listing);
      return '';
    case 'explain':
      return app.explain(query.domain, query.descriptors);
    case 'profile':
      return cpuProfile(query.ms);
    case 'rlqs':
      return listings.start(query.listing, app.quotaBuckets());
    case 'explain-bucket':
      return app.explainBucket(query.domain, query.bucket);
    case 'denials':
      return app.denialsPage(new URLSearchParams(query.query));
    case 'hotkeys':
      return partAnswer(app.hotKeysPart(new URLSearchParams(query.query)));
    case 'candidates':
      return partAnswer(app.candidatesPart(new URLSearchParams(query.query)));
    case 'limits':
      return partAnswer(app.limitsPart(new URLSearchParams(query.query)));
    case 'config-history':
      return app.configHistoryPage(new URLSearchParams(query.query));
    case 'flush':
      app.flushStats();
      return '';
  }
}

/** A page's part as the primary reads it (messages.ts), or the query's refusal. */
function partAnswer(part: object | PageAnswer): string {
  return JSON.stringify('status' in part ? { refused: part.body.trimEnd() } : { part });
}

/** Waits for the primary's `init` (sent right after the fork). */
function initFromPrimary(channel: PrimaryChannel): Promise<Extract<ToWorker, { type: 'init' }>> {
  return new Promise((resolve) => {
    const stop = channel.onMessage((m: unknown): void => {
      if (!isMessage<ToWorker>(m) || m.type !== 'init') return;
      stop();
      resolve(m);
    });
  });
}

/**
 * Runs the worker: its app is given to `onApp` as soon as it exists (the entry point stops it on
 * signals), then started. A start-up error for the operator is told to the primary, then thrown.
 */
export async function runWorker(settings: Settings, env: NodeJS.ProcessEnv, baseLogger: Logger, channel: PrimaryChannel, onApp: (app: RateLimitApp) => void): Promise<void> {
  const init = await initFromPrimary(channel);
  const logger = prefixed(baseLogger, `worker ${init.slot}: `);
  const sink = new IpcStatsSink((batch) => channel.send({ type: 'stats', batch }));
  sink.forwardTimerSamples = init.forwardTimerSamples;
  const app = new RateLimitApp({ settings, env, logger, worker: { slot: init.slot, statsSink: sink } });

  const listings = new Listings();
  channel.onMessage((m: unknown) => {
    if (!isMessage<ToWorker>(m) || m.type !== 'query') return;
    const { id } = m;
    answer(app, listings, m.query)
      .then(
        (value) => channel.send({ type: 'reply', id, ok: true, value }),
        (err: unknown) => channel.send({ type: 'reply', id, ok: false, error: err instanceof Error ? err.message : String(err) }),
      )
      .catch(() => {
        // The primary is gone; cluster ends this process on the disconnect.
      });
  });

  onApp(app);

  let listening;
  try {
    listening = await app.start();
  } catch (err) {
    if (app.isStopping) return; // a signal arrived during start-up
    if (err instanceof StartupError) await channel.send({ type: 'startup-error', message: err.message }).catch(() => undefined);
    throw err;
  }
  await channel.send({ type: 'listening', grpc: listening.grpc, http: listening.http });
}
