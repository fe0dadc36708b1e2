/**
 * The primary process of worker mode (WORKERS ≠ 1). It serves no rate limit request itself: it
 * forks the workers (which share the gRPC and HTTP ports through node:cluster), sums their stats
 * into its own store and runs the real stats sink on it (statsd, DogStatsD, Prometheus, logging),
 * serves the debug port, prints one `listening:` line once every worker listens, and when stopped
 * (the entry point's signal) forwards the signal and ends once the workers have drained.
 */
import { CLOSE_GRACE_MS } from '../app';
import { closeHttp, listen, settleWithin, StartupError } from '../lifecycle';
import { admitNodeHttpConnections, httpListener } from '../../server/http-listener';
import { debugAdmissionLimits, processAdmission } from '../admission-limits';
import { createDebugHandler } from '../../server/debug';
import { CertificateSource } from '../../server/tls';
import type { Settings } from '../../settings';
import { StatsAggregator } from '../../stats/aggregate';
import { StatsFlusher } from '../../stats/flusher';
import { createStatsSink, type StatsSink } from '../../stats/sinks';
import { StatsStore } from '../../stats/store';
import type { Logger } from '../../telemetry/logger';
import { primaryDebugOptions, REFRESH_TIMEOUT_MS } from './debug-options';
import { type Worker, WorkerPool } from './pool';
import { errorMessage } from '../../platform/errors';

/** Beyond the workers' own bounded stop, how long their exit may take before they are killed. */
const WORKER_EXIT_MARGIN_MS = 100;
/** The primary's last stats flush and debug-port close: what is left of the second after the drain. */
const PRIMARY_CLOSE_MS = 80;

export interface PrimaryOptions {
  /** Starts a worker process of this program (the entry point owns node:cluster). */
  readonly fork: () => Worker;
  /** Says a worker's start-up error, the program's last line, as the single process would. */
  readonly reportFatal: (message: string) => void;
}

export interface Primary {
  /** Forwards `signal` to the workers and ends once they drained (at most once). */
  stop(signal: NodeJS.Signals): void;
  /** The program's exit code once it ended: 0 after a clean stop, 1 after a worker's start-up error or a worker that had to be killed. */
  readonly ended: Promise<number>;
}

/**
 * Opens the sink and the debug port (a problem there throws a StartupError before any worker is
 * forked), then forks the workers.
 */
export async function runPrimary(settings: Settings, logger: Logger, opts: PrimaryOptions): Promise<Primary> {
  const count = settings.server.workers;
  const stats = new StatsStore({ logger });
  const aggregator = new StatsAggregator(stats);
  const admission = processAdmission(settings, stats, logger);
  let sink: StatsSink;
  try {
    sink = createStatsSink(settings.stats, logger, {
      admitMetricsConnections: (server) => admitNodeHttpConnections(server, admission.listener(debugAdmissionLimits(settings, 'metrics')), false),
    });
    await sink.start();
  } catch (err) {
    throw new StartupError(errorMessage(err));
  }
  let certs: CertificateSource | undefined;
  if (settings.server.debugTls) {
    try {
      certs = new CertificateSource({ ...settings.grpc.tls, reloadIntervalMs: settings.server.tlsReloadIntervalMs }, logger);
    } catch (err) {
      throw new StartupError(errorMessage(err));
    }
    certs.start();
  }

  let ended!: (code: number) => void;
  const endedPromise = new Promise<number>((resolve) => (ended = resolve));
  let stopping = false;
  const stop = (signal: NodeJS.Signals, fatal?: string): void => {
    if (stopping) return;
    stopping = true;
    void (async () => {
      if (fatal !== undefined) opts.reportFatal(fatal);
      else logger.info(`received ${signal}: stopping the workers`);
      // A worker exits within delay + drain + CLOSE_GRACE_MS (app.ts); one that does not is killed,
      // and the primary's own last flush gets what is left of the second after the drain.
      const { shutdownDelayMs, drainTimeoutMs } = settings.server;
      const clean = await pool.stop(signal, shutdownDelayMs + drainTimeoutMs + CLOSE_GRACE_MS + WORKER_EXIT_MARGIN_MS);
      certs?.stop();
      if (await settleWithin(Promise.all([flusher.stop(), closeHttp(debugServer)]), PRIMARY_CLOSE_MS)) logger.info('stopped');
      ended(fatal === undefined && clean ? 0 : 1);
    })().catch((err: unknown) => {
      logger.error(`error while stopping the workers: ${String(err)}`);
      ended(1);
    });
  };

  const pool = new WorkerPool({
    fork: opts.fork,
    count,
    logger,
    forwardTimerSamples: sink.wantsTimerSamples,
    onReady: (addresses) => logger.info(`listening: gRPC ${addresses.grpc}, HTTP ${addresses.http}, debug ${debugAddr}`),
    onFatal: (message) => stop('SIGTERM', message),
    onStats: (worker, batch) => aggregator.apply(worker, batch),
    onWorkerExit: (worker) => aggregator.removeWorker(worker),
    stats: { listening: stats.gauge('ratelimit.workers.listening'), restarts: stats.counter('ratelimit.workers.restarts') },
  });
  const flusher = new StatsFlusher(stats, sink, settings.stats.flushIntervalMs, logger, () => pool.flushAll(REFRESH_TIMEOUT_MS));
  const debugServer = httpListener(
    createDebugHandler(
      primaryDebugOptions(pool, stats, count, settings.limitsView, {
        values: settings.limitsView.debugValues,
        topK: settings.limits.topK,
        sampleOneIn: settings.limits.sampleOneIn,
      }),
    ),
    certs,
    settings.grpc.tls.clientSan,
    logger,
    admission.listener(debugAdmissionLimits(settings, 'debug')),
    settings.server.requestBodyTimeoutMs,
  );
  // Before the fork: a port conflict is reported before any worker connects to the store.
  const debugAddr = await listen(debugServer, settings.debug.host, settings.debug.port, 'debug');

  logger.info(`worker mode: starting ${count} workers`);
  pool.start();
  return { stop, ended: endedPromise };
}
