/**
 * The primary process of worker mode (WORKERS ≠ 1). It serves no rate limit request itself: it
 * forks the workers (which share the gRPC and HTTP ports through node:cluster), sums their stats
 * into its own store and runs the real stats sink on it (statsd, DogStatsD, Prometheus, logging),
 * serves the debug port, prints one `listening:` line once every worker listens, and on SIGTERM,
 * SIGINT or SIGHUP forwards the signal and exits once the workers have drained.
 */
import { CLOSE_GRACE_MS } from '../app';
import { closeHttp, listen, settleWithin, StartupError } from '../lifecycle';
import { httpListener } from '../../server/http-listener';
import { createDebugHandler } from '../../server/debug';
import { CertificateSource } from '../../server/tls';
import type { Settings } from '../../settings';
import { StatsAggregator } from '../../stats/aggregate';
import { StatsFlusher } from '../../stats/flusher';
import { createStatsSink, type StatsSink } from '../../stats/sinks';
import { StatsStore } from '../../stats/store';
import type { Logger } from '../../telemetry/logger';
import { primaryDebugOptions, REFRESH_TIMEOUT_MS } from './debug-options';
import { WorkerPool } from './pool';

/** Beyond the workers' own bounded stop, how long their exit may take before they are killed. */
const WORKER_EXIT_MARGIN_MS = 100;
/** The primary's last stats flush and debug-port close: what is left of the second after the drain. */
const PRIMARY_CLOSE_MS = 80;

/**
 * Opens the sink and the debug port (a problem there throws a StartupError before any worker is
 * forked), then forks the workers. Afterwards the process ends through process.exit: 0 once the
 * workers drained after a signal, 1 with a worker's start-up error.
 */
export async function runPrimary(settings: Settings, logger: Logger): Promise<void> {
  const count = settings.server.workers;
  const stats = new StatsStore({ logger });
  const aggregator = new StatsAggregator(stats);
  let sink: StatsSink;
  try {
    sink = createStatsSink(settings.stats, logger);
    await sink.start();
  } catch (err) {
    throw new StartupError((err as Error).message);
  }
  let certs: CertificateSource | undefined;
  if (settings.server.debugTls) {
    try {
      certs = new CertificateSource({ ...settings.grpc.tls, reloadIntervalMs: settings.server.tlsReloadIntervalMs }, logger);
    } catch (err) {
      throw new StartupError((err as Error).message);
    }
    certs.start();
  }

  let stopping: Promise<void> | undefined;
  const stop = (signal: NodeJS.Signals, fatal?: string): Promise<void> =>
    (stopping ??= (async () => {
      if (fatal !== undefined) process.stderr.write(`ratelimit: ${fatal}\n`);
      else logger.info(`received ${signal}: stopping the workers`);
      // A worker exits within delay + drain + CLOSE_GRACE_MS (app.ts); one that does not is killed,
      // and the primary's own last flush gets what is left of the second after the drain.
      const { shutdownDelayMs, drainTimeoutMs } = settings.server;
      const clean = await pool.stop(signal, shutdownDelayMs + drainTimeoutMs + CLOSE_GRACE_MS + WORKER_EXIT_MARGIN_MS);
      certs?.stop();
      if (await settleWithin(Promise.all([flusher.stop(), closeHttp(debugServer)]), PRIMARY_CLOSE_MS)) logger.info('stopped');
      process.exit(fatal === undefined && clean ? 0 : 1);
    })());

  const pool = new WorkerPool({
    count,
    logger,
    forwardTimerSamples: sink.wantsTimerSamples,
    onReady: (addresses) => logger.info(`listening: gRPC ${addresses.grpc}, HTTP ${addresses.http}, debug ${debugAddr}`),
    onFatal: (message) => void stop('SIGTERM', message),
    onStats: (worker, batch) => aggregator.apply(worker, batch),
    onWorkerExit: (worker) => aggregator.removeWorker(worker),
  });
  const flusher = new StatsFlusher(stats, sink, settings.stats.flushIntervalMs, logger, () => pool.flushAll(REFRESH_TIMEOUT_MS));
  const debugServer = httpListener(createDebugHandler(primaryDebugOptions(pool, stats, count)), certs, settings.grpc.tls.clientSan, logger);
  // Before the fork: a port conflict is reported before any worker connects to the store.
  const debugAddr = await listen(debugServer, settings.debug.host, settings.debug.port, 'debug');

  for (const sig of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) process.on(sig, () => void stop(sig));
  logger.info(`worker mode: starting ${count} workers`);
  pool.start();
}
