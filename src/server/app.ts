/**
 * Assembles the `ratelimit` service from its settings: stats, counter store, local cache, config
 * store and provider, the decision service and the three listeners; and takes them down again.
 */
import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import * as grpc from '@grpc/grpc-js';
import { CircuitBreakerStore } from '../backends/circuit-breaker';
import { MemoryStore } from '../backends/memory';
import { MemcacheConfigError, MemcacheStore } from '../backends/memcache/store';
import { RedisStore } from '../backends/redis';
import type { CounterStore } from '../backends/types';
import { loadConfig } from '../config/load';
import type { Clock } from '../limiter/clock';
import { systemClock } from '../limiter/clock';
import { explainRequest } from '../limiter/explain';
import { LocalCache } from '../limiter/local-cache';
import { parseDescriptor } from '../limiter/descriptor-text';
import { RateLimitService, type ServiceFlags, type StoreSpan } from '../limiter/service';
import { ConfigStore } from '../providers/config-store';
import { FileProvider } from '../providers/file-provider';
import { XdsProvider } from '../providers/xds/provider';
import { type ReloadableFlags, type Settings, loadReloadableFlags } from '../settings';
import { StatsStore } from '../stats/store';
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
import { createDebugHandler } from './debug';
import { addGrpcServices } from './grpc';
import { Health } from './health';
import { createHttpHandler } from './http';
import { CertificateSource, enforceClientSan, enforceClientSanOnGrpc, grpcServerCredentials, httpsOptions } from './tls';

/** How long in-flight calls may take to finish after a termination signal. */
export const DRAIN_TIMEOUT_MS = 10_000;

export interface AppOptions {
  settings: Settings;
  logger: Logger;
  /** Environment re-read at each config load for the reloadable flags (upstream behaviour). */
  env?: NodeJS.ProcessEnv;
  clock?: Clock;
}

export interface Listening {
  grpc: string;
  http: string;
  debug: string;
}

export function toServiceFlags(r: ReloadableFlags): ServiceFlags {
  return {
    shadowMode: r.shadowMode,
    quotaMode: r.quotaMode,
    responseDynamicMetadata: r.responseDynamicMetadata,
    responseHeadersEnabled: r.responseHeaders.enabled,
    limitHeader: r.responseHeaders.limitHeader,
    remainingHeader: r.responseHeaders.remainingHeader,
    resetHeader: r.responseHeaders.resetHeader,
  };
}

/** A start-up problem that is the operator's to fix (printed as one line, exit 1). */
export class StartupError extends Error {}

/** A counter store before it is up: its kind, and how to bring it up. */
interface StoreOpener {
  readonly kind: string;
  /** Upstream's span for the store round trip, if it has one. */
  readonly span?: StoreSpan;
  /**
   * Connects (with upstream's start-up retry for Redis) and resolves to what the service calls
   * (remote stores sit behind a circuit breaker). `onHealth` follows the store's own health.
   */
  open(onHealth: (healthy: boolean) => void): Promise<CounterStore>;
}

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
        evictions: stats.counter('ratelimit.memory.evictions'),
        keys: stats.gauge('ratelimit.memory.keys'),
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
          return breaker(redis);
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
  private readonly localCache: LocalCache | undefined;
  private provider: FileProvider<ServiceFlags> | XdsProvider<ServiceFlags> | undefined;
  private grpcServer: grpc.Server | undefined;
  private httpServer: http.Server | undefined;
  private debugServer: http.Server | undefined;
  private stopping: Promise<void> | undefined;
  private endWatches: (() => void) | undefined;
  private certificates: CertificateSource | undefined;
  private readonly sink: StatsSink;
  private flusher: StatsFlusher | undefined;
  private readonly tracing: Tracing;

  constructor(private readonly opts: AppOptions) {
    const { settings, logger } = opts;
    const env = opts.env ?? process.env;
    this.stats.setLogger(logger);
    try {
      this.sink = createStatsSink(settings.stats, logger);
    } catch (err) {
      throw new StartupError((err as Error).message);
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

    this.configStore = new ConfigStore<ServiceFlags>({
      stats: this.stats,
      logger,
      readFlags: () => toServiceFlags(loadReloadableFlags(env)),
    });
    if (settings.config.healthyWithAtLeastOneConfigLoaded) {
      this.configStore.onUpdate((snap) => this.health.set('config', snap.config.domainCount > 0));
    }
  }

  /** Loads config, waits for the first one unless FORCE_START_WITHOUT_INITIAL_CONFIG, listens. */
  async start(): Promise<Listening> {
    const { settings, logger } = this.opts;
    const env = this.opts.env ?? process.env;
    if (settings.cache.backendSource === 'default') {
      // A migrating user who relied on upstream's default Redis socket must not miss this.
      logger.warn('counter store: memory (default: neither BACKEND_TYPE nor REDIS_URL is set; counts are per process)');
    } else {
      const why = settings.cache.backendSource === 'explicit' ? 'BACKEND_TYPE' : 'REDIS_URL is set';
      logger.info(`counter store: ${this.opener.kind} (${why})`);
    }
    const kind = this.opener.kind;
    let store: CounterStore;
    try {
      store = await this.opener.open((ok) => {
        if (this.health.states().get('store') === ok) return;
        this.health.set('store', ok);
        if (ok) logger.info(`${kind} store: healthy`);
        else logger.warn(`${kind} store: unhealthy`);
      });
    } catch (err) {
      if (err instanceof StartupError) throw err;
      throw new StartupError(`cannot connect the ${kind} store: ${(err as Error).message}`);
    }
    this.store = store;
    const service = new RateLimitService({
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
      limits: {
        maxDescriptors: settings.server.maxDescriptors,
        maxEntries: settings.server.maxEntries,
        maxEntryLength: settings.server.maxEntryLength,
      },
    });
    const mergeDomainConfig = (): boolean => loadReloadableFlags(env).mergeDomainConfig;
    if (settings.config.type === 'GRPC_XDS_SOTW') {
      logger.info(`config source: xDS server ${settings.xds.serverUrl} (node ${settings.xds.nodeId})`);
      this.provider = new XdsProvider<ServiceFlags>({
        settings: settings.xds,
        mergeDomainConfig,
        stats: this.stats,
        store: this.configStore,
        logger,
        restrictions: store.restrictions,
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
          loadConfig(files, { mergeDomainConfig: merge, stats: this.stats, restrictions: store.restrictions }),
        store: this.configStore,
        logger,
      });
    }
    try {
      this.provider.start();
    } catch (err) {
      throw new StartupError(`cannot start the config provider: ${(err as Error).message}`);
    }
    if (!settings.config.forceStartWithoutInitialConfig) {
      logger.info('waiting for the first configuration before listening');
      await this.configStore.waitForFirst();
    }

    try {
      await this.sink.start();
    } catch (err) {
      throw new StartupError((err as Error).message);
    }
    this.flusher = new StatsFlusher(this.stats, this.sink, settings.stats.flushIntervalMs, logger);
    this.flusher.onFlush(() => this.localCache?.publish(this.stats));
    const extra = settings.server;
    const tlsFiles = settings.grpc.tls;
    if (tlsFiles.enabled || extra.httpTls || extra.debugTls) {
      try {
        this.certificates = new CertificateSource(
          { ...tlsFiles, reloadIntervalMs: extra.tlsReloadIntervalMs },
          logger,
        );
      } catch (err) {
        throw new StartupError((err as Error).message);
      }
      this.certificates.start();
    }
    const certs = this.certificates;

    const grpcServer = new grpc.Server({
      'grpc.max_connection_age_ms': settings.grpc.maxConnectionAgeMs,
      'grpc.max_connection_age_grace_ms': settings.grpc.maxConnectionAgeGraceMs,
      'grpc.max_receive_message_length': extra.maxRequestBytes,
    });
    this.endWatches = addGrpcServices(grpcServer, { service, health: this.health, stats: this.stats, logger, tracing: this.tracing });
    this.grpcServer = grpcServer;
    const grpcTarget = settings.grpc.uds !== '' ? `unix:${settings.grpc.uds}` : hostPort(settings.grpc.host, settings.grpc.port);
    const grpcCredentials =
      tlsFiles.enabled && certs !== undefined ? grpcServerCredentials(certs) : grpc.ServerCredentials.createInsecure();
    const grpcPort = await new Promise<number>((resolve, reject) =>
      grpcServer.bindAsync(grpcTarget, grpcCredentials, (err, port) =>
        err ? reject(new StartupError(`cannot listen for gRPC on ${grpcTarget}: ${err.message}`)) : resolve(port),
      ),
    );
    if (tlsFiles.enabled && tlsFiles.clientSan !== '') enforceClientSanOnGrpc(grpcServer, tlsFiles.clientSan, logger);
    if (tlsFiles.enabled) {
      // grpc-js applies the certificates on a later tick; announce nothing before they are live.
      for (let i = 0; i < 3; i++) await new Promise<void>((resolve) => setImmediate(resolve));
    }

    const serve = (handler: http.RequestListener, useTls: boolean): http.Server => {
      if (!useTls || certs === undefined) return http.createServer(handler);
      const server = https.createServer(httpsOptions(certs.current), handler);
      certs.subscribe((m) => server.setSecureContext(httpsOptions(m)));
      if (tlsFiles.clientSan !== '') enforceClientSan(server, tlsFiles.clientSan, logger);
      return server;
    };
    this.httpServer = serve(
      createHttpHandler({ service, health: this.health, logger, maxBodyBytes: extra.maxRequestBytes, tracing: this.tracing }),
      extra.httpTls,
    );
    this.debugServer = serve(
      createDebugHandler({
        stats: this.stats,
        dumpConfig: () => this.configStore.current()?.config.dump() ?? '',
        refreshGauges: () => this.localCache?.publish(this.stats),
        explain: (domain, texts) => {
          const snapshot = this.configStore.current();
          if (snapshot === undefined) return Promise.resolve('no rate limit configuration loaded\n');
          let descriptors;
          try {
            descriptors = texts.map(parseDescriptor);
          } catch (err) {
            return Promise.resolve(`${(err as Error).message}\n`);
          }
          const nowMs = this.clock.nowMs();
          // A 0-hit increment reads a count in every store without changing it.
          return explainRequest(snapshot.config, { domain, descriptors, hitsAddend: 0 }, {
            cacheKeyPrefix: settings.cache.cacheKeyPrefix,
            nowMs,
            count: async (op) => (await store.increment([op], nowMs))[0],
          });
        },
      }),
      extra.debugTls,
    );
    const httpAddr = await listen(this.httpServer, settings.http.host, settings.http.port, 'HTTP');
    const debugAddr = await listen(this.debugServer, settings.debug.host, settings.debug.port, 'debug');
    const listening: Listening = {
      grpc: settings.grpc.uds !== '' ? grpcTarget : hostPort(settings.grpc.host, grpcPort),
      http: httpAddr,
      debug: debugAddr,
    };
    logger.info(`listening: gRPC ${listening.grpc}, HTTP ${listening.http}, debug ${listening.debug}`);
    return listening;
  }

  /** True once stop() was called (a start-up failure after that is part of stopping). */
  get isStopping(): boolean {
    return this.stopping !== undefined;
  }

  /**
   * Graceful stop: health turns unhealthy, listeners stop accepting, in-flight calls get up to
   * DRAIN_TIMEOUT_MS to finish, then the provider and the store are closed.
   */
  stop(drainMs = DRAIN_TIMEOUT_MS): Promise<void> {
    this.stopping ??= this.doStop(drainMs);
    return this.stopping;
  }

  private async doStop(drainMs: number): Promise<void> {
    const { logger } = this.opts;
    this.health.set('sigterm', false);
    logger.info('shutting down: draining in-flight calls');
    // Watchers have seen NOT_SERVING by now; their streams must not hold the drain.
    this.endWatches?.();
    const drained = Promise.all([
      this.grpcServer === undefined
        ? undefined
        : new Promise<void>((resolve) => this.grpcServer!.tryShutdown(() => resolve())),
      closeHttp(this.httpServer),
      closeHttp(this.debugServer),
    ]);
    let timer: NodeJS.Timeout | undefined;
    const timedOut = await Promise.race([
      drained.then(() => false),
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(true), drainMs);
      }),
    ]);
    clearTimeout(timer);
    if (timedOut) {
      logger.warn(`in-flight calls did not finish within ${drainMs} ms; closing them`);
      this.grpcServer?.forceShutdown();
      this.httpServer?.closeAllConnections();
      this.debugServer?.closeAllConnections();
    }
    this.provider?.stop();
    this.certificates?.stop();
    await this.store?.close();
    await this.flusher?.stop();
    await this.tracing.shutdown();
    logger.info('stopped');
  }
}

function hostPort(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

function listen(server: http.Server, host: string, port: number, what: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const onError = (err: Error): void => reject(new StartupError(`cannot listen for ${what} on ${hostPort(host, port)}: ${err.message}`));
    server.once('error', onError);
    server.listen(port, host, () => {
      server.off('error', onError);
      resolve(hostPort(host, (server.address() as AddressInfo).port));
    });
  });
}

function closeHttp(server: http.Server | undefined): Promise<void> {
  if (server === undefined || !server.listening) return Promise.resolve();
  return new Promise((resolve) => {
    server.close(() => resolve());
    server.closeIdleConnections();
  });
}
