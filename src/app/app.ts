/**
 * Assembles the `ratelimit` service from its settings: stats, counter store, local cache, config
 * store and provider, the decision service and the three listeners; and takes them down again.
 */
import http from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { CircuitBreakerStore } from '../backends/circuit-breaker';
import { MemoryStore } from '../backends/memory';
import { MemcacheConfigError, MemcacheStore } from '../backends/memcache/store';
import { RedisDemandStore, RedisStore } from '../backends/redis';
import type { CounterStore } from '../core/store';
import type { Clock } from '../platform/clock';
import { systemClock } from '../platform/clock';
import { explainRequest } from '../limiter/explain';
import { LocalCache } from '../limiter/local-cache';
import { parseDescriptor } from '../limiter/descriptor-text';
import { RateLimitService, type ServiceFlags, type StoreSpan } from '../limiter/service';
import { toServiceFlags } from '../limiter/flags';
import { ConfigBuilder } from '../providers/config-builder';
import { ConfigStore } from '../providers/config-store';
import { ConfigHistory, parseHistoryQuery } from '../providers/config-history';
import { DenialRing, parseDenialsQuery } from '../telemetry/denials';
import { FileProvider } from '../providers/file-provider';
import { XdsProvider } from '../providers/xds/provider';
import { type GrpcTransport, type Settings, loadReloadableFlags } from '../settings';
import { StatsStore } from '../stats/store';
import type { PageAnswer } from '../stats/limits/book';
import type { CandidatesPart, HotKeysPart, LimitsPart } from '../stats/limits/pages';
import type { Logger } from '../telemetry/logger';
import {
  ATTR_KEYS_TO_GET_LENGTH,
  ATTR_PER_SECOND_PIPELINE_LENGTH,
  ATTR_PIPELINE_LENGTH,
  SPAN_MEMCACHED_FETCH,
  SPAN_REDIS_PIPELINE,
  setupTracing,
  type Tracing,
} from '../telemetry/tracing';
import { StatsFlusher } from '../stats/flusher';
import { createStatsSink, type StatsSink } from '../stats/sinks';
import { createDebugHandler, DebugHttpError } from '../server/debug';
import { admitNodeHttpConnections, httpListener } from '../server/http-listener';
import type { ConnectionAdmission } from '../server/admission';
import { debugAdmissionLimits, grpcAdmissionLimits, httpAdmissionLimits, processAdmission } from './admission-limits';
import { closeHttp, hostPort, listen, settleWithin, StartupError } from './lifecycle';
import { createGrpcJsListener } from '../server/grpc';
import type { GrpcListener, GrpcListenerOptions } from '../server/grpc-common';
import { createGrpcSocketListener } from '../server/grpc-socket';
import { Health } from '../server/health';
import { createHttpHandler } from '../server/http';
import { type HttpSocketServer, httpSocketServer } from '../server/http-socket';
import { type ServerBudgets, serverBudgets } from '../server/byte-budget';
import { CertificateSource } from '../server/tls';
import { FirstUseDemandStore, MemoryDemandStore, type DemandStore } from '../quota/demand';
import { quotaBudgets } from '../quota/admission';
import { QuotaService } from '../quota/quota-service';
import { errorMessage } from '../platform/errors';

/**
 * What closing the store, the stats sink and tracing may take after the drain: the process exits
 * within SHUTDOWN_DRAIN_TIMEOUT plus one second (this, and a margin for the exit itself; in worker
 * mode the primary's own margins come on top, and a loaded machine's exit took 30 ms more than
 * the 20 ms 800 left there).
 */
export const CLOSE_GRACE_MS = 700;

export interface AppOptions {
  settings: Settings;
  logger: Logger;
  /** The process's environment (the entry point passes it): re-read at each config load for the reloadable flags (upstream behaviour). */
  env: NodeJS.ProcessEnv;
  clock?: Clock;
  /** Set in a worker process of worker mode (WORKERS ≠ 1); see src/app/cluster. */
  worker?: WorkerRole;
}

/**
 * A worker serves gRPC and HTTP only: its primary serves the debug port (and Prometheus), sums the
 * stats the worker flushes into `statsSink`, and announces the addresses once for all workers.
 */
export interface WorkerRole {
  /** 1..WORKERS, sent back in the {@link WORKER_HEADER} of /healthcheck answers. */
  readonly slot: number;
  readonly statsSink: StatsSink;
}

/** The /healthcheck answer's header naming the worker that answered (worker mode only). */
export const WORKER_HEADER = 'X-Ratelimit-Worker';

export interface Listening {
  grpc: string;
  http: string;
  /** Undefined in a worker (the primary serves the debug port). */
  debug: string | undefined;
}

/** A counter store before it is up: its kind, and how to bring it up. */
interface StoreOpener {
  readonly kind: string;
  /** Upstream's span for the store round trip, if it has one. */
  readonly span?: StoreSpan;
  /**
   * Connects (with upstream's start-up retry for Redis) and resolves to what the service calls
   * (Memcached sits behind a circuit breaker; Redis keeps a circuit per node itself). `onHealth` follows the store's own health.
   */
  open(onHealth: (healthy: boolean) => void): Promise<CounterStore>;
}

/** The gRPC server of each GRPC_TRANSPORT, and its name in the start-up log. */
const GRPC_LISTENERS: Readonly<Record<GrpcTransport, (opts: GrpcListenerOptions) => GrpcListener>> = {
  socket: createGrpcSocketListener,
  'grpc-js': createGrpcJsListener,
};
const TRANSPORT_NAMES: Readonly<Record<GrpcTransport, string>> = { socket: 'HTTP/2 on the socket', 'grpc-js': 'grpc-js' };

function storeOpener(settings: Settings, stats: StatsStore, logger: Logger, clock: Clock): StoreOpener {
  const cache = settings.cache;
  const breaker = (inner: CounterStore): CircuitBreakerStore =>
    new CircuitBreakerStore(inner, {
      failures: cache.circuitFailures,
      openMs: cache.circuitOpenMs,
      clock,
      opened: stats.counter(`ratelimit.${inner.kind}.circuit_opened`),
      openGauge: stats.gauge(`ratelimit.${inner.kind}.circuit_open`),
      onStateChange: (open, reason) =>
        open
          ? logger.warn(`${inner.kind} circuit opened: requests fail at once for ${cache.circuitOpenMs} ms at a time (${reason})`)
          : logger.info(`${inner.kind} circuit closed: ${reason}`),
    });
  switch (cache.backendType) {
    case 'memory': {
      const store = new MemoryStore({
        maxKeys: settings.memory.maxKeys,
        overflowWidth: settings.memory.overflowWidth,
        callerNewKeysPerSecond: settings.memory.callerNewKeysPerSecond,
        overflowed: stats.counter('ratelimit.memory.keys_overflowed'),
        overCallerBudget: stats.counter('ratelimit.memory.keys_over_caller_budget'),
        overflowBytes: stats.gauge('ratelimit.memory.overflow_bytes'),
        overflowFill: stats.gauge('ratelimit.memory.overflow_fill'),
        keys: stats.gauge('ratelimit.memory.keys'),
        logger,
        clock,
        stopIncrementWhenOverLimit: cache.stopCacheKeyIncrementWhenOverlimit,
      });
      return {
        kind: store.kind,
        open: (onHealth) => {
          onHealth(true);
          return Promise.resolve(store);
        },
      };
    }
    case 'redis': {
      const redis = new RedisStore({
        settings: settings.redis,
        jitterMaxSeconds: cache.expirationJitterMaxSeconds,
        stopIncrementWhenOverLimit: cache.stopCacheKeyIncrementWhenOverlimit,
        stats,
        logger,
        // A circuit per node, in the store (a dead cluster shard fails only its own keys).
        circuit: { failures: cache.circuitFailures, openMs: cache.circuitOpenMs, clock },
      });
      const perSecond = settings.redis.perSecond.enabled;
      return {
        kind: redis.kind,
        span: {
          name: SPAN_REDIS_PIPELINE,
          attributes: (ops) => {
            let second = 0;
            if (perSecond) for (const op of ops) if (op.windowSeconds === 1) second++;
            // Each key is two pipeline entries (INCRBY, EXPIRE), as upstream counts them.
            return { [ATTR_PIPELINE_LENGTH]: 2 * (ops.length - second), [ATTR_PER_SECOND_PIPELINE_LENGTH]: 2 * second };
          },
        },
        open: async (onHealth) => {
          redis.onHealthChange(onHealth);
          await redis.connect();
          onHealth(true);
          return redis;
        },
      };
    }
    case 'memcache':
      return {
        kind: 'memcache',
        span: { name: SPAN_MEMCACHED_FETCH, attributes: (ops) => ({ [ATTR_KEYS_TO_GET_LENGTH]: ops.length }) },
        open: async (onHealth) => {
          let memcache: MemcacheStore;
          try {
            memcache = await MemcacheStore.create({
              settings: settings.memcache,
              failureMode: cache.failureMode,
              expirationJitterMaxSeconds: cache.expirationJitterMaxSeconds,
              stats,
              logger,
            });
          } catch (err) {
            if (err instanceof MemcacheConfigError) throw new StartupError(err.message);
            throw err;
          }
          memcache.onHealthChange((healthy) => onHealth(healthy));
          onHealth(memcache.isHealthy());
          return breaker(memcache);
        },
      };
  }
}

export class RateLimitApp {
  readonly stats = new StatsStore();
  readonly health = new Health();
  private store: CounterStore | undefined;
  private readonly opener: StoreOpener;
  private readonly clock: Clock;
  readonly configStore: ConfigStore<ServiceFlags>;
  private readonly configBuilder: ConfigBuilder;
  private readonly localCache: LocalCache | undefined;
  private provider: FileProvider<ServiceFlags> | XdsProvider<ServiceFlags> | undefined;
  private grpc: GrpcListener | undefined;
  private httpServer: HttpSocketServer | undefined;
  private debugServer: http.Server | undefined;
  private stopping: Promise<void> | undefined;
  /** Resolves when stop() is called (ends a start-up that waits for a config). */
  private readonly stopRequested: Promise<void>;
  private requestStop!: () => void;
  private certificates: CertificateSource | undefined;
  private readonly sink: StatsSink;
  private flusher: StatsFlusher | undefined;
  private readonly tracing: Tracing;
  /** Which connections every port holds: one process cap, each listener's bounds (admission-limits.ts). */
  private readonly admission: ConnectionAdmission;
  private demand: DemandStore | undefined;
  private quota: QuotaService | undefined;
  /** /debug/denials (undefined with DEBUG_DENIALS_SIZE=0). */
  readonly denials: DenialRing | undefined;
  /** /debug/config-history (undefined with DEBUG_CONFIG_HISTORY_SIZE=0). */
  readonly configHistory: ConfigHistory | undefined;

  constructor(private readonly opts: AppOptions) {
    const { settings, logger } = opts;
    this.stopRequested = new Promise((resolve) => (this.requestStop = resolve));
    const env = opts.env;
    this.stats.setLogger(logger);
    this.stats.limits.configure({ ...settings.limits, values: settings.limitsView.debugValues });
    this.admission = processAdmission(settings, this.stats, logger);
    try {
      this.sink =
        opts.worker?.statsSink ??
        createStatsSink(settings.stats, logger, {
          admitMetricsConnections: (server) => admitNodeHttpConnections(server, this.admission.listener(debugAdmissionLimits(settings, 'metrics')), false),
        });
    } catch (err) {
      throw new StartupError(errorMessage(err));
    }
    this.tracing = setupTracing(settings.tracing, logger);
    const clock = opts.clock ?? systemClock;
    this.clock = clock;
    this.opener = storeOpener(settings, this.stats, logger, clock);
    const lc = settings.cache.localCacheSizeInBytes;
    this.localCache = lc > 0 ? new LocalCache(lc) : undefined;

    // Like upstream's `redis` component: unhealthy until the store has connected.
    this.health.add('store', false);
    this.health.add('sigterm', true);
    if (settings.config.healthyWithAtLeastOneConfigLoaded) this.health.add('config', false);

    const view = settings.limitsView;
    this.denials =
      view.denialsSize > 0
        ? new DenialRing({ size: view.denialsSize, clock, logPerSecond: view.denialsLogPerSecond, logger, privacy: view.debugValues })
        : undefined;
    if (view.denialsSize > 0 && view.denialsLogPerSecond > 0 && !logger.enabled('info')) {
      logger.warn('DEBUG_DENIALS_LOG_PER_SECOND: the denial lines are written at info level, which LOG_LEVEL leaves out');
    }
    this.configHistory = view.configHistorySize > 0 ? new ConfigHistory({ size: view.configHistorySize, clock, stats: this.stats, logger }) : undefined;

    this.configBuilder = new ConfigBuilder({ stats: this.stats, maxHeapMb: settings.config.buildMaxHeapMb });
    this.configStore = new ConfigStore<ServiceFlags>({
      stats: this.stats,
      logger,
      readFlags: () => toServiceFlags(loadReloadableFlags(env)),
      history: this.configHistory,
    });
    if (settings.config.healthyWithAtLeastOneConfigLoaded) {
      this.configStore.onUpdate((snap) => this.health.set('config', snap.config.domainCount > 0));
    }
    // The headroom gauges and hot keys follow the config in use from the swap on.
    this.configStore.onUpdate((snap) => this.stats.limits.adopt(snap.config.rules, Math.floor(this.clock.nowMs() / 1000)));
  }

  /**
   * Where RLQS keeps the demand of the streams: Redis when it is the counter store, else this
   * process. Made when a stream first needs it: a deployment without RLQS opens no connection for
   * it and logs nothing about it.
   */
  private demandStore(): DemandStore {
    const { settings, logger } = this.opts;
    return new FirstUseDemandStore(() => {
      if (settings.cache.backendType === 'redis') return new RedisDemandStore(settings.redis, logger, settings.cache.cacheKeyPrefix);
      if (settings.server.workers > 1 || settings.cache.backendType === 'memcache') {
        logger.warn('RLQS divides each limit among the streams of each process (demand is shared only through Redis)');
      }
      return new MemoryDemandStore();
    });
  }

  /**
   * Opens the store, starts the stats, loads the config and listens on the ports: one step each,
   * in this order (a worker has no debug port). A problem for the operator is a StartupError.
   */
  async start(): Promise<Listening> {
    const { settings, logger } = this.opts;
    const store = (this.store = await this.openStore());
    const service = this.decisionService(store);
    const quota = this.quotaService();
    // Stats first: a service waiting for a config that loads still shows config_load_error (and
    // 0 rules) on its sink.
    await this.startStats();
    await this.startConfig(store);
    const certs = this.loadCertificates();
    // One process's bounds on what both ports hold for their clients.
    const budgets = serverBudgets(settings.server.maxBufferedRequestBytes);
    const grpc = await this.listenGrpc(service, quota, certs, budgets);
    const http = await this.listenHttp(service, certs, budgets);
    if (this.opts.worker !== undefined) return { grpc, http, debug: undefined };
    const debug = await this.listenDebug(certs);
    logger.info(`listening: gRPC ${grpc}, HTTP ${http}, debug ${debug}`);
    return { grpc, http, debug };
  }

  /** The counter store, its health on the health check; says which store and why. */
  private async openStore(): Promise<CounterStore> {
    const { settings, logger } = this.opts;
    const kind = this.opener.kind;
    const { backendReason, backendSource } = settings.cache;
    if (backendSource === 'default') {
      logger.info(`counter store: memory (${backendReason}): counts are per process; BACKEND_TYPE=redis or memcache shares them across replicas`);
    } else {
      logger.info(`counter store: ${kind} (${backendReason})${kind === 'memory' ? ': counts are per process' : ''}`);
    }
    try {
      return await this.opener.open((ok) => {
        if (this.health.states().get('store') === ok) return;
        this.health.set('store', ok);
        if (ok) logger.info(`${kind} store: healthy`);
        // Closing the store on the way out is not news.
        else if (this.stopping === undefined) logger.warn(`${kind} store: unhealthy`);
      });
    } catch (err) {
      if (err instanceof StartupError) throw err;
      // Chosen without BACKEND_TYPE: say why, so the way to another store is plain.
      const why = backendSource === 'store-settings' ? ` (${backendReason})` : '';
      throw new StartupError(`cannot connect the ${kind} store${why}: ${errorMessage(err)}`);
    }
  }

  /** ShouldRateLimit's decisions on `store`, from the current config. */
  private decisionService(store: CounterStore): RateLimitService {
    const { settings } = this.opts;
    return new RateLimitService({
      store,
      snapshot: () => this.configStore.current(),
      stats: this.stats,
      clock: this.clock,
      nearLimitRatio: settings.cache.nearLimitRatio,
      cacheKeyPrefix: settings.cache.cacheKeyPrefix,
      localCache: this.localCache,
      failureMode: settings.cache.failureMode,
      tracing: this.tracing,
      storeSpan: this.opener.span,
      denials: this.denials,
      limits: {
        maxDescriptors: settings.server.maxDescriptors,
        maxEntries: settings.server.maxEntries,
        maxEntryLength: settings.server.maxEntryLength,
      },
    });
  }

  /**
   * RLQS on the gRPC port, from the same rules. With Redis, replicas (and workers) divide each
   * limit together; otherwise each process divides it among the streams it serves.
   */
  private quotaService(): QuotaService {
    const { settings, logger } = this.opts;
    const demand = (this.demand = this.demandStore());
    const quota = (this.quota = new QuotaService({
      config: () => this.configStore.current()?.config,
      demand,
      clock: this.clock,
      unmatched: settings.server.rlqsUnmatched,
      budgets: quotaBudgets(settings.server.rlqsBudgets),
      maxEntries: settings.server.maxEntries,
      maxEntryLength: settings.server.maxEntryLength,
      stats: this.stats,
      logger,
    }));
    this.configStore.onUpdate(() => void quota.configChanged());
    return quota;
  }

  /**
   * Starts the config provider (files or xDS) and, unless FORCE_START_WITHOUT_INITIAL_CONFIG, waits
   * for a config that loads: after a failed first load it says why (error level) and keeps waiting.
   */
  private async startConfig(store: CounterStore): Promise<void> {
    const { settings, logger } = this.opts;
    const env = this.opts.env;
    const mergeDomainConfig = (): boolean => loadReloadableFlags(env).mergeDomainConfig;
    const { maxBytes, maxDescriptors, maxResources } = settings.config;
    if (settings.config.type === 'GRPC_XDS_SOTW') {
      logger.info(`config source: xDS server ${settings.xds.serverUrl} (node ${settings.xds.nodeId})`);
      this.provider = new XdsProvider<ServiceFlags>({
        settings: settings.xds,
        mergeDomainConfig,
        stats: this.stats,
        store: this.configStore,
        logger,
        restrictions: store.restrictions,
        builder: this.configBuilder,
        maxBytes,
        maxDescriptors,
        maxResources,
      });
    } else {
      this.provider = new FileProvider<ServiceFlags>({
        root: settings.runtime.root,
        subdirectory: settings.runtime.subdirectory,
        appDirectory: settings.runtime.appDirectory,
        ignoreDotFiles: settings.runtime.ignoreDotFiles,
        watchRoot: settings.runtime.watchRoot,
        mergeDomainConfig,
        loader: (files, merge) =>
          this.configBuilder.build({ kind: 'files', files, maxBytes }, { mergeDomainConfig: merge, restrictions: store.restrictions, maxDescriptors }),
        store: this.configStore,
        logger,
        maxBytes,
        maxFiles: maxResources,
      });
    }
    try {
      this.provider.start();
    } catch (err) {
      throw new StartupError(`cannot start the config provider: ${errorMessage(err)}`);
    }
    if (settings.config.forceStartWithoutInitialConfig) return;
    // The file provider loads at start(): usually there is nothing left to wait for.
    if (!this.configStore.hasFirstEvent) logger.info('waiting for the first configuration before listening');
    if ((await this.configStore.waitForFirst()) !== undefined) return;
    // Not as upstream, which listens after a failed first load and fails every call: without
    // FORCE_START_WITHOUT_INITIAL_CONFIG the service serves only with a config, so it keeps waiting.
    const next =
      settings.config.type === 'GRPC_XDS_SOTW'
        ? 'the next xDS response that loads starts the service'
        : settings.runtime.watchRoot
          ? 'a swap of RUNTIME_ROOT to a config that loads starts the service (RUNTIME_WATCH_ROOT=true: edits inside it are not watched)'
          : 'the config files are watched: fixing them starts the service';
    logger.error(
      `the first configuration failed to load (${this.configStore.lastError ?? 'unknown error'}): not listening on the gRPC and HTTP ports ` +
        `until one loads (FORCE_START_WITHOUT_INITIAL_CONFIG is false); ${next}`,
    );
    await Promise.race([this.configStore.waitForLoaded(), this.stopRequested]);
    if (this.stopping !== undefined) throw new StartupError('stopped before a configuration loaded');
    logger.info('a configuration loaded: starting the listeners');
  }

  /** The stats sink and its periodic flush (which also publishes the local cache's gauges). */
  private async startStats(): Promise<void> {
    const { settings, logger } = this.opts;
    try {
      await this.sink.start();
    } catch (err) {
      throw new StartupError(errorMessage(err));
    }
    this.flusher = new StatsFlusher(this.stats, this.sink, settings.stats.flushIntervalMs, logger);
    this.flusher.onFlush(() => this.publishGauges());
  }

  /** The server certificates (reloading) when any port uses TLS. */
  private loadCertificates(): CertificateSource | undefined {
    const { settings, logger } = this.opts;
    const extra = settings.server;
    const tlsFiles = settings.grpc.tls;
    if (!(tlsFiles.enabled || extra.httpTls || extra.debugTls)) return undefined;
    try {
      this.certificates = new CertificateSource({ ...tlsFiles, reloadIntervalMs: extra.tlsReloadIntervalMs }, logger);
    } catch (err) {
      throw new StartupError(errorMessage(err));
    }
    this.certificates.start();
    return this.certificates;
  }

  /** The gRPC port (ShouldRateLimit, RLQS, health) on the chosen transport; its address as bound. */
  private async listenGrpc(service: RateLimitService, quota: QuotaService, certs: CertificateSource | undefined, budgets: ServerBudgets): Promise<string> {
    const { settings, logger } = this.opts;
    const grpcTarget = settings.grpc.uds !== '' ? `unix:${settings.grpc.uds}` : hostPort(settings.grpc.host, settings.grpc.port);
    const transport = settings.grpc.transport;
    logger.info(`gRPC transport: ${TRANSPORT_NAMES[transport]} (GRPC_TRANSPORT=${transport})`);
    this.grpc = GRPC_LISTENERS[transport]({
      service,
      quota,
      health: this.health,
      stats: this.stats,
      logger,
      tracing: this.tracing,
      grpc: settings.grpc,
      target: grpcTarget,
      maxRequestBytes: settings.server.maxRequestBytes,
      certificates: certs,
      budgets,
      admission: this.admission.listener(grpcAdmissionLimits(settings.grpc, settings.server.handshakeTimeoutMs)),
    });
    const grpcPort = await this.grpc.listen().catch((err: Error) => {
      throw new StartupError(`cannot listen for gRPC on ${grpcTarget}: ${err.message}`);
    });
    return settings.grpc.uds !== '' ? grpcTarget : hostPort(settings.grpc.host, grpcPort);
  }

  /** The HTTP port (/json, /healthcheck); its address as bound. */
  private listenHttp(service: RateLimitService, certs: CertificateSource | undefined, budgets: ServerBudgets): Promise<string> {
    const { settings, logger } = this.opts;
    const worker = this.opts.worker;
    this.httpServer = httpSocketServer(
      createHttpHandler({
        service,
        health: this.health,
        logger,
        maxBodyBytes: settings.server.maxRequestBytes,
        tracing: this.tracing,
        worker: worker === undefined ? undefined : { header: WORKER_HEADER, slot: worker.slot },
      }),
      {
        certs: settings.server.httpTls ? certs : undefined,
        clientSan: settings.grpc.tls.clientSan,
        logger,
        requestTimeoutMs: settings.server.requestBodyTimeoutMs,
        admission: this.admission.listener(httpAdmissionLimits(settings)),
        budgets,
      },
    );
    return listen(this.httpServer.server, settings.http.host, settings.http.port, 'HTTP');
  }

  /** The debug port (/rlconfig, /stats, explain, profiles); its address as bound. */
  private listenDebug(certs: CertificateSource | undefined): Promise<string> {
    const { settings, logger } = this.opts;
    this.debugServer = httpListener(
      createDebugHandler({
        stats: this.stats,
        dumpConfig: () => this.dumpConfigChunks(),
        refreshGauges: () => this.publishGauges(),
        hotKeys: (query) => this.hotKeys(query),
        candidates: (query) => this.candidates(query),
        limits: (query) => jsonPage(this.stats.limits.limitsPage(query, Math.floor(this.clock.nowMs() / 1000))),
        explain: (domain, texts) => this.explain(domain, texts),
        explainBucket: (domain, text) => this.explainBucket(domain, text),
        quotaBuckets: () => this.quotaBuckets(),
        ...(this.denials !== undefined ? { denials: (query: URLSearchParams) => this.denialsPage(query) } : {}),
        ...(this.configHistory !== undefined ? { configHistory: (query: URLSearchParams) => this.configHistoryPage(query) } : {}),
      }),
      settings.server.debugTls ? certs : undefined,
      settings.grpc.tls.clientSan,
      logger,
      this.admission.listener(debugAdmissionLimits(settings, 'debug')),
      settings.server.requestBodyTimeoutMs,
    );
    return listen(this.debugServer, settings.debug.host, settings.debug.port, 'debug');
  }

  /** Sets the gauges computed at read time: the local cache's, and the headroom of every loaded limit. */
  private publishGauges(): void {
    this.localCache?.publish(this.stats);
    this.stats.limits.publish(Math.floor(this.clock.nowMs() / 1000));
  }

  /** /debug/hotkeys of this process (JSON); a query it refuses throws DebugHttpError(400, why). */
  hotKeys(query: URLSearchParams): string {
    return jsonPage(this.stats.limits.hotKeysPage(query, Math.floor(this.clock.nowMs() / 1000)));
  }

  /** /debug/candidates of this process (JSON), as hotKeys. */
  candidates(query: URLSearchParams): string {
    return jsonPage(this.stats.limits.candidatesPage(query, Math.floor(this.clock.nowMs() / 1000)));
  }

  /** Worker mode: this process's part of /debug/hotkeys for the primary to merge, or the query's refusal. */
  hotKeysPart(query: URLSearchParams): HotKeysPart | PageAnswer {
    return this.stats.limits.hotKeysPart(query, Math.floor(this.clock.nowMs() / 1000));
  }

  /** Worker mode: this process's part of /debug/limits, as hotKeysPart. */
  limitsPart(query: URLSearchParams): LimitsPart | PageAnswer {
    return this.stats.limits.limitsPart(query, Math.floor(this.clock.nowMs() / 1000));
  }

  /** Worker mode: this process's part of /debug/candidates, as hotKeysPart. */
  candidatesPart(query: URLSearchParams): CandidatesPart | PageAnswer {
    return this.stats.limits.candidatesPart(query);
  }

  /** The loaded config as /rlconfig prints it, in pieces made as they are sent (a big config is never one string). */
  dumpConfigChunks(): Iterable<string> {
    return this.configStore.current()?.config.dumpChunks() ?? [];
  }

  /** The /debug/explain report for a domain and descriptors in `k=v,k2=v2` form, or an error text. */
  explain(domain: string, texts: string[]): Promise<string> {
    const snapshot = this.configStore.current();
    const store = this.store;
    if (snapshot === undefined || store === undefined) return Promise.resolve('no rate limit configuration loaded\n');
    let descriptors;
    try {
      descriptors = texts.map(parseDescriptor);
    } catch (err) {
      return Promise.resolve(`${errorMessage(err)}\n`);
    }
    const nowMs = this.clock.nowMs();
    // A 0-hit increment reads a count in every store without changing it.
    return explainRequest(snapshot.config, { domain, descriptors, hitsAddend: 0 }, {
      cacheKeyPrefix: this.opts.settings.cache.cacheKeyPrefix,
      nowMs,
      count: async (op) => (await store.increment([op], nowMs))[0],
    });
  }

  /** /debug/denials for `query`; a query it refuses is a DebugHttpError(400). */
  denialsPage(query: URLSearchParams): string {
    const ring = this.denials;
    if (ring === undefined) throw new DebugHttpError(404, 'denials are not kept (DEBUG_DENIALS_SIZE=0)');
    const q = parseDenialsQuery(query);
    if (typeof q === 'string') throw new DebugHttpError(400, q);
    return ring.page(q);
  }

  /** /debug/config-history for `query`, as denialsPage. */
  configHistoryPage(query: URLSearchParams): Promise<string> {
    const history = this.configHistory;
    if (history === undefined) throw new DebugHttpError(404, 'no config history is kept (DEBUG_CONFIG_HISTORY_SIZE=0)');
    const q = parseHistoryQuery(query, this.opts.settings.limitsView.configHistorySize);
    if (typeof q === 'string') throw new DebugHttpError(400, q);
    return history.page(q);
  }

  /** /debug/rlqs: the live RLQS streams and buckets of this process, in pieces made as they are taken. */
  quotaBuckets(): Iterable<string> {
    return this.quota?.describe() ?? ['RLQS is not started yet\n'];
  }

  /** The /debug/explain report for an RLQS bucket in `k=v,k2=v2` form, or an error text. */
  explainBucket(domain: string, text: string): string {
    const quota = this.quota;
    if (quota === undefined) return 'RLQS is not started yet\n';
    let pairs: Map<string, string>;
    try {
      pairs = new Map(parseDescriptor(text).entries.map((e) => [e.key, e.value]));
    } catch (err) {
      return `${errorMessage(err)}\n`;
    }
    return quota.explainBucket(domain, pairs);
  }

  /** Flushes the stats now (a worker's primary asks before it answers a scrape or /stats). */
  flushStats(): void {
    this.flusher?.flush();
  }

  /** True once stop() was called (a start-up failure after that is part of stopping). */
  get isStopping(): boolean {
    return this.stopping !== undefined;
  }

  /**
   * Graceful stop: health turns unhealthy; after SHUTDOWN_DELAY (both ports still serving) the
   * listeners stop accepting and in-flight calls get SHUTDOWN_DRAIN_TIMEOUT to finish; then the
   * provider, the store, the stats and tracing are closed, given CLOSE_GRACE_MS at most together,
   * so that the process exits within the drain period plus one second whatever a store does.
   */
  stop(): Promise<void> {
    this.stopping ??= this.doStop();
    this.requestStop();
    return this.stopping;
  }

  private async doStop(): Promise<void> {
    const { logger, settings } = this.opts;
    const { shutdownDelayMs, drainTimeoutMs } = settings.server;
    this.health.set('sigterm', false);
    if (shutdownDelayMs > 0) {
      logger.info(`shutting down: health answers unhealthy for ${shutdownDelayMs} ms before the drain (SHUTDOWN_DELAY)`);
      await sleep(shutdownDelayMs);
    }
    logger.info('shutting down: draining in-flight calls');
    // Watchers have seen NOT_SERVING by now; their streams must not hold the drain.
    this.grpc?.endWatches();
    const drained = Promise.all([this.grpc?.drain(), this.httpServer?.drain(), closeHttp(this.debugServer)]);
    if (!(await settleWithin(drained, drainTimeoutMs))) {
      logger.warn(`in-flight calls did not finish within ${drainTimeoutMs} ms; closing them`);
      this.grpc?.forceClose();
      this.httpServer?.forceClose();
      this.debugServer?.closeAllConnections();
    }
    this.provider?.stop();
    this.configBuilder.close();
    this.certificates?.stop();
    this.quota?.close();
    this.denials?.close();
    const closed = Promise.all([this.store?.close(), this.demand?.close?.(), this.flusher?.stop(), this.tracing.shutdown()]);
    if (!(await settleWithin(closed, CLOSE_GRACE_MS))) {
      logger.warn(`the counter store, stats sink or trace exporter did not close within ${CLOSE_GRACE_MS} ms; exiting without them`);
      return;
    }
    logger.info('stopped');
  }
}

/** A page of stats/limits as the debug port answers it: the JSON, or a DebugHttpError with the reason. */
function jsonPage(page: { readonly status: number; readonly body: string }): string {
  if (page.status !== 200) throw new DebugHttpError(page.status, page.body.trimEnd());
  return page.body;
}
