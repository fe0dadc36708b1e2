/**
 * Settings: the environment, read once at start-up into one typed, frozen object, with every
 * variable and default of upstream envoyproxy/ratelimit (`src/settings/settings.go`), plus this
 * project's additions (the memory store, `STORE_*` / `ALTSTORE_*` aliases).
 *
 * Rules:
 * - Values parse as Go's envconfig does (see `parsers.ts`): Go booleans, Go integer literals, Go
 *   floats, Go durations, comma lists, `k:v` maps.
 * - An empty value counts as unset: the default applies.
 * - Every duration is a number of MILLISECONDS (fields end in `Ms`; may be fractional: `150us` is 0.15).
 * - A bad value throws one {@link SettingsError} whose message is one line naming the variable, the
 *   value and what is accepted. Soft problems go to `settings.warnings` for the caller to log.
 * - Defaults, aliases, ranges and accepted values come from {@link SETTINGS_TABLE}.
 * - Rules about one subsystem (sentinel URL, pool-on-empty behaviour, memcached servers, DogStatsD
 *   mogrifiers) are checked only when that subsystem is in use, as upstream checks them only when
 *   it builds it; the syntax of every variable is always checked.
 */
import { availableParallelism } from 'node:os';
import { SettingsError, invalidValue } from './errors';
import { parseBool, parseDurationMs, parseFloat64, parseInt64, parseList, parseMap } from './parsers';
import { SETTINGS_TABLE, settingInfo, type SettingInfo } from './table';
import { errorMessage } from '../platform/errors';

export { SettingsError } from './errors';

// ---------------------------------------------------------------------------------------------
// Types

export type LogLevel = 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'fatal' | 'panic';
export type LogFormat = 'text' | 'json';
export type ConfigType = 'FILE' | 'GRPC_XDS_SOTW';
export type BackendType = 'memory' | 'redis' | 'memcache';
/**
 * Why the backend is what it is: `explicit` (BACKEND_TYPE set), `store-settings` (BACKEND_TYPE
 * unset and a REDIS_* or MEMCACHE_* setting present: redis, upstream's default), `default` (no
 * store setting at all: the embedded memory store).
 */
export type BackendSource = 'explicit' | 'store-settings' | 'default';
export type RedisType = 'single' | 'sentinel' | 'cluster';
export type RedisSocketType = 'tcp' | 'unix';
export type TracingExporterProtocol = 'http' | 'grpc';
export type GrpcTransport = 'socket' | 'grpc-js';
/** The one stats sink in use, derived from DISABLE_STATS / USE_DOG_STATSD / USE_PROMETHEUS / USE_STATSD. */
export type DebugValues = 'plain' | 'hash' | 'hide';
export type StatsSinkKind = 'disabled' | 'dogstatsd' | 'prometheus' | 'statsd' | 'logging';

export interface ListenerSettings {
  /** HOST / DEBUG_HOST */
  readonly host: string;
  /** PORT / DEBUG_PORT (0..65535) */
  readonly port: number;
}

export interface GrpcServerTlsSettings {
  /** GRPC_SERVER_USE_TLS */
  readonly enabled: boolean;
  /** GRPC_SERVER_TLS_CERT: certificate chain file */
  readonly certFile: string;
  /** GRPC_SERVER_TLS_KEY: private key file (same directory as the certificate) */
  readonly keyFile: string;
  /** GRPC_CLIENT_TLS_CACERT: when non-empty, client certificates are required and verified (mTLS) */
  readonly clientCaFile: string;
  /** GRPC_CLIENT_TLS_SAN: when non-empty, the client certificate must verify for this DNS name */
  readonly clientSan: string;
}

export interface GrpcSettings {
  /** GRPC_UDS: when non-empty, gRPC listens on this unix socket instead of host:port */
  readonly uds: string;
  /** GRPC_HOST */
  readonly host: string;
  /** GRPC_PORT */
  readonly port: number;
  /** GRPC_MAX_CONNECTION_AGE in ms (default 24h); ±10% jitter is applied by the server */
  readonly maxConnectionAgeMs: number;
  /** GRPC_MAX_CONNECTION_AGE_GRACE in ms (default 1h) */
  readonly maxConnectionAgeGraceMs: number;
  readonly tls: GrpcServerTlsSettings;
  /** GRPC_TRANSPORT (not in upstream; default `socket`, our HTTP/2 handler on the socket; `grpc-js` the library's server) */
  readonly transport: GrpcTransport;
  /** GRPC_KEEPALIVE_TIME (default 2h, grpc-go's): a connection with no activity for this long is pinged */
  readonly keepaliveTimeMs: number;
  /** GRPC_KEEPALIVE_TIMEOUT (default 20s): an unanswered keepalive ping closes the connection */
  readonly keepaliveTimeoutMs: number;
  /** GRPC_MAX_CONNECTION_IDLE (default 5m; 0 = never): a connection with no call in flight for this long since its last gets GOAWAY */
  readonly maxConnectionIdleMs: number;
  /** GRPC_FIRST_REQUEST_TIMEOUT (default 10s; 0 = never): a connection with no call this long after its handshake gets GOAWAY */
  readonly firstRequestTimeoutMs: number;
  /** GRPC_MAX_CONCURRENT_STREAMS (default 1000): calls in flight per connection */
  readonly maxConcurrentStreams: number;
  /** GRPC_MAX_CONNECTIONS (default 10000): open connections per process; at the cap the worst one makes room */
  readonly maxConnections: number;
  /** GRPC_MAX_CONNECTIONS_PER_PEER (default 1000; 0 = none): open connections per client address */
  readonly maxConnectionsPerPeer: number;
  /** GRPC_REQUEST_BODY_TIMEOUT (default 10 s; 0 = none): a call's request (a stream's message) must arrive whole within it */
  readonly requestBodyTimeoutMs: number;
}

/** Not in upstream: TLS for the HTTP and debug ports, certificate reloading, request limits. */
export interface ServerExtraSettings {
  /** HTTP_SERVER_USE_TLS: the HTTP port uses the gRPC TLS files and client checks */
  readonly httpTls: boolean;
  /** DEBUG_SERVER_USE_TLS */
  readonly debugTls: boolean;
  /** TLS_RELOAD_INTERVAL in ms (default 10s) */
  readonly tlsReloadIntervalMs: number;
  /** REQUEST_MAX_BYTES (default 1 MiB): /json body and gRPC message size limit */
  readonly maxRequestBytes: number;
  /** REQUEST_MAX_BUFFERED_BYTES (default 32 MiB): request bytes held at once by all connections while requests arrive */
  readonly maxBufferedRequestBytes: number;
  /** HTTP_MAX_CONNECTIONS (default 10000): open connections of the HTTP port per process; at the cap the worst one makes room */
  readonly httpMaxConnections: number;
  /** HTTP_MAX_CONNECTIONS_PER_PEER (default 1000; 0 = none) */
  readonly httpMaxConnectionsPerPeer: number;
  /** DEBUG_MAX_CONNECTIONS (default 100): the debug port's (and the Prometheus port's) */
  readonly debugMaxConnections: number;
  /** DEBUG_MAX_CONNECTIONS_PER_PEER (default 20; 0 = none) */
  readonly debugMaxConnectionsPerPeer: number;
  /** CONNECTION_HANDSHAKE_TIMEOUT (default 10s; 0 = none): TLS handshake, and HTTP/2 preface and SETTINGS, on every port */
  readonly handshakeTimeoutMs: number;
  /** TLS_MAX_HANDSHAKES (default 1000): TLS handshakes under way at once, all ports; past it the oldest is closed */
  readonly tlsMaxHandshakes: number;
  /** REQUEST_MAX_DESCRIPTORS (default 1000) */
  readonly maxDescriptors: number;
  /** REQUEST_MAX_ENTRIES (default 100) per descriptor */
  readonly maxEntries: number;
  /** REQUEST_MAX_ENTRY_LENGTH (default 4096): longest key, value or domain, in characters */
  readonly maxEntryLength: number;
  /**
   * WORKERS (default 1): how many processes serve gRPC and HTTP; 0 in the environment is resolved
   * here to one per CPU. 1 = one process, no cluster at all.
   */
  readonly workers: number;
  /** HTTP_REQUEST_BODY_TIMEOUT (default 10 s; 0 = none): headers and body must arrive within it, else 408 */
  readonly requestBodyTimeoutMs: number;
  /** SHUTDOWN_DELAY (default 0): after SIGTERM, health unhealthy while serving, before the drain */
  readonly shutdownDelayMs: number;
  /** SHUTDOWN_DRAIN_TIMEOUT (default 10 s): the drain's bound; exit follows within 1 s */
  readonly drainTimeoutMs: number;
  /** RLQS_UNMATCHED_ACTION / RLQS_UNMATCHED_TTL: a bucket no descriptor takes (allow all, 10 s) */
  readonly rlqsUnmatched: { readonly strategy: 'allow-all' | 'deny-all'; readonly ttlSeconds: number };
  /**
   * RLQS_MAX_BUCKETS_PER_STREAM (10000), RLQS_MAX_BUCKET_BYTES_PER_STREAM (32 MiB),
   * RLQS_MAX_BUCKETS_PER_CONNECTION (20000), RLQS_MAX_BUCKET_BYTES_PER_CONNECTION (32 MiB),
   * RLQS_MAX_BUCKETS (200000), RLQS_MAX_BUCKET_BYTES (96 MiB): what RLQS streams may make the
   * process hold (src/quota/admission.ts)
   */
  readonly rlqsBudgets: {
    readonly streamBuckets: number;
    readonly streamBytes: number;
    readonly connectionBuckets: number;
    readonly connectionBytes: number;
    readonly processBuckets: number;
    readonly processBytes: number;
  };
}

export interface LogSettings {
  /** LOG_LEVEL, lower-cased; `warning` is reported as `warn` (default `warn`) */
  readonly level: LogLevel;
  /** LOG_FORMAT (default `text`) */
  readonly format: LogFormat;
}

export interface ConfigSourceSettings {
  /** CONFIG_TYPE (default FILE) */
  readonly type: ConfigType;
  /** FORCE_START_WITHOUT_INITIAL_CONFIG: start listening before the first config event */
  readonly forceStartWithoutInitialConfig: boolean;
  /** HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: unhealthy until a config with a domain is loaded */
  readonly healthyWithAtLeastOneConfigLoaded: boolean;
  /** CONFIG_MAX_BYTES (default 32 MiB; 0 = no limit): most bytes of one load */
  readonly maxBytes: number;
  /** CONFIG_MAX_DESCRIPTORS (default 100,000; 0 = no limit): most descriptors of one load */
  readonly maxDescriptors: number;
  /** CONFIG_MAX_RESOURCES (default 10,000; 0 = no limit): most files or xDS resources of one load */
  readonly maxResources: number;
  /** CONFIG_BUILD_MAX_HEAP_MB (default 192): the heap limit of the worker thread that builds a big config */
  readonly buildMaxHeapMb: number;
}

export interface RuntimeSettings {
  /** RUNTIME_ROOT */
  readonly root: string;
  /** RUNTIME_SUBDIRECTORY */
  readonly subdirectory: string;
  /** RUNTIME_APPDIRECTORY */
  readonly appDirectory: string;
  /** RUNTIME_IGNOREDOTFILES */
  readonly ignoreDotFiles: boolean;
  /** RUNTIME_WATCH_ROOT */
  readonly watchRoot: boolean;
}

export interface XdsSettings {
  /** CONFIG_GRPC_XDS_NODE_ID */
  readonly nodeId: string;
  /** CONFIG_GRPC_XDS_NODE_METADATA (`k=v,k2=v2`) */
  readonly nodeMetadata: Readonly<Record<string, string>>;
  /** CONFIG_GRPC_XDS_SERVER_URL */
  readonly serverUrl: string;
  /** CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL in ms (default 3s): wait between failed connection attempts */
  readonly connectRetryIntervalMs: number;
  /** CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS (`k:v,k2:v2`): gRPC metadata sent to the server */
  readonly additionalHeaders: Readonly<Record<string, string>>;
  readonly tls: {
    /** CONFIG_GRPC_XDS_SERVER_USE_TLS */
    readonly enabled: boolean;
    /** CONFIG_GRPC_XDS_CLIENT_TLS_CERT */
    readonly clientCertFile: string;
    /** CONFIG_GRPC_XDS_CLIENT_TLS_KEY */
    readonly clientKeyFile: string;
    /** CONFIG_GRPC_XDS_SERVER_TLS_CACERT */
    readonly serverCaFile: string;
    /** CONFIG_GRPC_XDS_SERVER_TLS_SAN: expected server name (overrides the host name) */
    readonly serverSan: string;
  };
  readonly backoff: {
    /** XDS_CLIENT_BACKOFF_INITIAL_INTERVAL in ms (default 10s) */
    readonly initialIntervalMs: number;
    /** XDS_CLIENT_BACKOFF_MAX_INTERVAL in ms (default 60s) */
    readonly maxIntervalMs: number;
    /** XDS_CLIENT_BACKOFF_RANDOM_FACTOR (default 0.5): jitter fraction of each reconnect delay (upstream: a multiplier) */
    readonly randomFactor: number;
    /** XDS_CLIENT_BACKOFF_JITTER (default true) */
    readonly jitter: boolean;
  };
  /** XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES: > 0 sets the largest response accepted; 0 = gRPC default */
  readonly maxMsgSizeInBytes: number;
}

/** One DogStatsD mogrifier: DOG_STATSD_MOGRIFIER_<NAME>_PATTERN / _NAME / _TAGS. */
export interface DogStatsdMogrifier {
  /** The name as listed in USE_DOG_STATSD_MOGRIFIERS. */
  readonly name: string;
  /**
   * _PATTERN, as JavaScript `RegExp` source (Go's `(?P<x>` named groups rewritten to `(?<x>`);
   * checked to compile.
   */
  readonly pattern: string;
  /** _NAME: the new stat name; `$0`, `$1`… are replaced by the match groups. */
  readonly metricName: string;
  /** _TAGS (`k:$1,k2:$2`): tags added; values substitute `$n` like the name. */
  readonly tags: Readonly<Record<string, string>>;
}

export interface StatsSettings {
  /** The sink in use (the "at most one sink" rule already checked). */
  readonly sink: StatsSinkKind;
  /** DISABLE_STATS */
  readonly disabled: boolean;
  /** USE_STATSD (default true): statsd over TCP */
  readonly useStatsd: boolean;
  /** USE_DOG_STATSD */
  readonly useDogStatsd: boolean;
  /** USE_PROMETHEUS */
  readonly usePrometheus: boolean;
  /** STATSD_HOST (also the DogStatsD host) */
  readonly statsdHost: string;
  /** STATSD_PORT (also the DogStatsD port) */
  readonly statsdPort: number;
  /** EXTRA_TAGS (`k:v,k2:v2`) */
  readonly extraTags: Readonly<Record<string, string>>;
  /** STATS_FLUSH_INTERVAL in ms (default 10s) */
  readonly flushIntervalMs: number;
  /** USE_DOG_STATSD_MOGRIFIERS, as listed */
  readonly dogStatsdMogrifierNames: readonly string[];
  /** The listed mogrifiers, loaded and checked; empty unless the sink is `dogstatsd`. */
  readonly dogStatsdMogrifiers: readonly DogStatsdMogrifier[];
  readonly prometheus: {
    /** PROMETHEUS_ADDR (default `:9090`) */
    readonly addr: string;
    /** PROMETHEUS_PATH (default `/metrics`) */
    readonly path: string;
    /** PROMETHEUS_MAPPER_YAML: file replacing the built-in mapper; empty = built-in */
    readonly mapperYaml: string;
    /** PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS */
    readonly responseTimeAsMilliseconds: boolean;
  };
}

export interface CacheSettings {
  /**
   * The counter store: BACKEND_TYPE; else `redis` (upstream's default) when any REDIS_* or
   * MEMCACHE_* setting (or its STORE_* / ALTSTORE_* alias) is set; else `memory`.
   */
  readonly backendType: BackendType;
  /** How backendType was chosen. */
  readonly backendSource: BackendSource;
  /** The same in words, naming the variables as spelled (for the start-up log and warnings). */
  readonly backendReason: string;
  /** EXPIRATION_JITTER_MAX_SECONDS (default 300): TTL += random [0, N) seconds when N > 0 */
  readonly expirationJitterMaxSeconds: number;
  /** LOCAL_CACHE_SIZE_IN_BYTES (default 0 = no local over-limit cache) */
  readonly localCacheSizeInBytes: number;
  /** NEAR_LIMIT_RATIO (default 0.8, in [0, 1]); a float32 upstream: use Math.fround in threshold maths */
  readonly nearLimitRatio: number;
  /** CACHE_KEY_PREFIX */
  readonly cacheKeyPrefix: string;
  /** STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT */
  readonly stopCacheKeyIncrementWhenOverlimit: boolean;
  /**
   * BACKEND_FAILURE_MODE (not in upstream). `undefined` (unset) keeps each store's upstream
   * behaviour: Redis errors fail the call, Memcached read errors count as 0 (fail-open).
   */
  readonly failureMode: 'error' | 'allow' | 'deny' | undefined;
  /** BACKEND_CIRCUIT_FAILURES (default 5; 0 = the circuit never opens) */
  readonly circuitFailures: number;
  /** BACKEND_CIRCUIT_OPEN_DURATION in ms (default 1000) */
  readonly circuitOpenMs: number;
}

export interface MemorySettings {
  /**
   * MEMORY_MAX_KEYS (default 1,000,000; not in upstream): most counters the memory store's table
   * holds, so memory stays bounded. At the cap a new key takes the place of a counter whose window
   * ended; when all are live it is counted in the overflow sketches.
   */
  readonly maxKeys: number;
  /** MEMORY_OVERFLOW_WIDTH (default 65,536, a power of two): cells per row of each overflow sketch. */
  readonly overflowWidth: number;
  /** MEMORY_CALLER_NEW_KEYS_PER_SECOND (default 50,000; 0: no bound): new counters per client address a second. */
  readonly callerNewKeysPerSecond: number;
}

/** What the service shows about its limits (src/stats/limits/); none in upstream. */
export interface LimitsSettings {
  /** HEADROOM_ENABLED (default true) */
  readonly headroom: boolean;
  /** HOT_KEYS_TOP_K (default 10; 0: no hot keys) */
  readonly topK: number;
  /** HOT_KEYS_SAMPLE_ONE_IN (default 16) */
  readonly sampleOneIn: number;
  /** HOT_KEYS_MAX_RULES (default 1,000) */
  readonly maxRules: number;
}

export interface ResponseHeaderSettings {
  /** LIMIT_RESPONSE_HEADERS_ENABLED */
  readonly enabled: boolean;
  /** LIMIT_LIMIT_HEADER (default RateLimit-Limit) */
  readonly limitHeader: string;
  /** LIMIT_REMAINING_HEADER (default RateLimit-Remaining) */
  readonly remainingHeader: string;
  /** LIMIT_RESET_HEADER (default RateLimit-Reset) */
  readonly resetHeader: string;
}

/**
 * The flags upstream re-reads from the environment at every config load (`loadReloadableFlags`).
 * `Settings.reloadable` holds their values at start-up.
 */
export interface ReloadableFlags {
  /** SHADOW_MODE: global shadow mode */
  readonly shadowMode: boolean;
  /** QUOTA_MODE: global quota mode */
  readonly quotaMode: boolean;
  /** RESPONSE_DYNAMIC_METADATA */
  readonly responseDynamicMetadata: boolean;
  /** MERGE_DOMAIN_CONFIG: merge files naming the same domain */
  readonly mergeDomainConfig: boolean;
  /** LIMIT_RESPONSE_HEADERS_ENABLED and LIMIT_*_HEADER */
  readonly responseHeaders: ResponseHeaderSettings;
}

/** One Redis instance: the main one (REDIS_*) or the per-second one (REDIS_PERSECOND_*). */
export interface RedisConnectionSettings {
  /** _SOCKET_TYPE (default unix) */
  readonly socketType: RedisSocketType;
  /** _TYPE, lower-cased (default single) */
  readonly type: RedisType;
  /** _URL: single host:port or socket path; sentinel `master,sentinel1,…`; cluster `host:port,…` */
  readonly url: string;
  /** _POOL_SIZE (default 10) */
  readonly poolSize: number;
  /** _AUTH: `password` or `user:password` */
  readonly auth: string;
  /** _SENTINEL_AUTH: password for the sentinel nodes */
  readonly sentinelAuth: string;
  /** _TLS */
  readonly tls: boolean;
  /** _PIPELINE_WINDOW in ms (default 0): commands of concurrent requests are batched into one pipeline for this long (every mode) */
  readonly pipelineWindowMs: number;
  /** _PIPELINE_LIMIT (default 0 = no count limit): a batched pipeline is flushed once it holds this many commands */
  readonly pipelineLimit: number;
  /** _CLUSTER_PIPELINE_PARALLELISM (default 1): cluster pipelines (one per node) of one flush in flight at once; 0 or 1 = all in parallel, N > 1 caps it */
  readonly clusterPipelineParallelism: number;
  /** _TIMEOUT in ms (default 10s): dial and I/O */
  readonly timeoutMs: number;
  /** _POOL_ON_EMPTY_BEHAVIOR: always WAIT once loaded (CREATE/ERROR rejected, others warned) */
  readonly poolOnEmptyBehavior: 'WAIT';
}

export interface RedisSettings extends RedisConnectionSettings {
  /** REDIS_TLS_CLIENT_CERT (both instances) */
  readonly tlsClientCertFile: string;
  /** REDIS_TLS_CLIENT_KEY (both instances) */
  readonly tlsClientKeyFile: string;
  /** REDIS_TLS_CACERT (both instances) */
  readonly tlsCaCertFile: string;
  /** REDIS_TLS_SKIP_HOSTNAME_VERIFICATION */
  readonly tlsSkipHostnameVerification: boolean;
  /** REDIS_HEALTH_CHECK_ACTIVE_CONNECTION: unhealthy while no connection is active */
  readonly healthCheckActiveConnection: boolean;
  /** REDIS_BATCH_SCRIPT: a pipeline's INCRBY/EXPIRE pairs go as one EVAL (both instances) */
  readonly batchScript: boolean;
  /** REDIS_EVICTION_CHECK_INTERVAL in ms (default 10s; 0 = never): the eviction policy and evicted_keys of every node */
  readonly evictionCheckIntervalMs: number;
  readonly startup: {
    /** REDIS_STARTUP_INITIAL_INTERVAL in ms (default 1s) */
    readonly initialIntervalMs: number;
    /** REDIS_STARTUP_MAX_INTERVAL in ms (default 30s) */
    readonly maxIntervalMs: number;
    /** REDIS_STARTUP_MAX_ELAPSED_TIME in ms (default 0 = retry forever) */
    readonly maxElapsedTimeMs: number;
  };
  /** The per-second instance; `enabled` is REDIS_PERSECOND. */
  readonly perSecond: RedisConnectionSettings & { readonly enabled: boolean };
}

export interface MemcacheSettings {
  /** MEMCACHE_HOST_PORT (`host:port,…`) */
  readonly hostPorts: readonly string[];
  /** MEMCACHE_SRV: SRV record to resolve the servers from */
  readonly srv: string;
  /** MEMCACHE_SRV_REFRESH in ms (default 0 = never re-resolve) */
  readonly srvRefreshMs: number;
  /** MEMCACHE_MAX_IDLE_CONNS (default 2) */
  readonly maxIdleConns: number;
  /**
   * MEMCACHE_TIMEOUT in ms (default 500, gomemcache's per-operation timeout; not a setting in
   * upstream): longest wait for a memcached command, connecting included.
   */
  readonly timeoutMs: number;
  readonly tls: {
    /** MEMCACHE_TLS */
    readonly enabled: boolean;
    /** MEMCACHE_TLS_CLIENT_CERT */
    readonly clientCertFile: string;
    /** MEMCACHE_TLS_CLIENT_KEY */
    readonly clientKeyFile: string;
    /** MEMCACHE_TLS_CACERT */
    readonly caCertFile: string;
    /** MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION */
    readonly skipHostnameVerification: boolean;
  };
}

export interface TracingSettings {
  /** TRACING_ENABLED */
  readonly enabled: boolean;
  /** TRACING_SERVICE_NAME (default RateLimit) */
  readonly serviceName: string;
  /** TRACING_SERVICE_NAMESPACE */
  readonly serviceNamespace: string;
  /** TRACING_SERVICE_INSTANCE_ID; empty = the tracer generates a random UUIDv4 */
  readonly serviceInstanceId: string;
  /** TRACING_EXPORTER_PROTOCOL (default http) */
  readonly exporterProtocol: TracingExporterProtocol;
  /** TRACING_SAMPLING_RATE (default 1, in [0, 1]) */
  readonly samplingRate: number;
}

/** What the service shows about its limits on the debug port and in its log (not in upstream). */
export interface LimitsViewSettings {
  /** DEBUG_VALUES (default plain): how descriptor values and client addresses are shown. */
  readonly debugValues: DebugValues;
  /** DEBUG_DENIALS_SIZE (default 1,000; 0 = none): OVER_LIMIT decisions kept for /debug/denials. */
  readonly denialsSize: number;
  /** DEBUG_DENIALS_LOG_PER_SECOND (default 0 = none): info lines about denials a second. */
  readonly denialsLogPerSecond: number;
  /** DEBUG_CONFIG_HISTORY_SIZE (default 20; 0 = none): config loads kept for /debug/config-history. */
  readonly configHistorySize: number;
}

export interface Settings {
  /** HTTP listener (`/json`, `/healthcheck`): HOST, PORT */
  readonly http: ListenerSettings;
  /** Debug listener: DEBUG_HOST, DEBUG_PORT */
  readonly debug: ListenerSettings;
  readonly grpc: GrpcSettings;
  /** TLS for HTTP/debug, certificate reloading and request limits (not in upstream) */
  readonly server: ServerExtraSettings;
  readonly log: LogSettings;
  readonly config: ConfigSourceSettings;
  /** File config (CONFIG_TYPE=FILE): RUNTIME_* */
  readonly runtime: RuntimeSettings;
  /** xDS config (CONFIG_TYPE=GRPC_XDS_SOTW) */
  readonly xds: XdsSettings;
  readonly stats: StatsSettings;
  readonly cache: CacheSettings;
  readonly memory: MemorySettings;
  readonly limits: LimitsSettings;
  readonly redis: RedisSettings;
  readonly memcache: MemcacheSettings;
  readonly tracing: TracingSettings;
  readonly limitsView: LimitsViewSettings;
  /** Start-up values of the flags re-read at every config load. */
  readonly reloadable: ReloadableFlags;
  /** Soft problems found while loading, one line each, for the caller to log as warnings. */
  readonly warnings: readonly string[];
}

// ---------------------------------------------------------------------------------------------
// Reading the environment

/** Upstream's exact text (runner.go), without its `Error: ` prefix. */
export const STATS_SINK_CONFLICT_MESSAGE =
  'unable to use more than one stats sink at the same time. Set one of USE_DOG_STATSD, USE_STATSD, USE_PROMETHEUS.';
/** Upstream's exact panic text (driver_impl.go). */
export const SENTINEL_URL_MESSAGE =
  'Expected master name and a list of urls for the sentinels, in the format: <redis master name>,<sentinel1>,...,<sentineln>';

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value === '' ? undefined : value;
}

/** A value as it may appear in an error message: secrets hidden, URL credentials masked. */
function shown(info: SettingInfo, value: string): string {
  if (info.secret) return '***';
  return value.replace(/\/\/[^/@\s]*@/g, '//***@');
}

/** Reads table variables from one environment: aliases, empty = unset, defaults, parsers. */
class EnvReader {
  constructor(private readonly env: NodeJS.ProcessEnv) {}

  /** The value and the variable it came from, or undefined when unset/empty under both spellings. */
  lookup(name: string): { readonly value: string; readonly from: string } | undefined {
    const info = settingInfo(name);
    const own = nonEmpty(this.env[info.name]);
    const alt = info.alias === undefined ? undefined : nonEmpty(this.env[info.alias]);
    if (own !== undefined && alt !== undefined && own !== alt) {
      throw new SettingsError(
        `conflicting values for ${info.name} (${JSON.stringify(shown(info, own))}) and its alias ${info.alias} (${JSON.stringify(shown(info, alt))}): set only one of them`,
        info.name,
      );
    }
    if (own !== undefined) return { value: own, from: info.name };
    if (alt !== undefined && info.alias !== undefined) return { value: alt, from: info.alias };
    return undefined;
  }

  isSet(name: string): boolean {
    return this.lookup(name) !== undefined;
  }

  /** The spelling the user set (name or alias); the upstream name when unset. */
  source(name: string): string {
    return this.lookup(name)?.from ?? name;
  }

  /** Raw text (user value or table default) and the variable to blame. */
  private text(name: string, kind: SettingInfo['kind']): { text: string; from: string; info: SettingInfo } {
    const info = settingInfo(name);
    if (info.kind !== kind) throw new Error(`settings table: ${name} is ${info.kind}, read as ${kind}`);
    const found = this.lookup(name);
    return { text: found?.value ?? info.default, from: found?.from ?? name, info };
  }

  string(name: string): string {
    return this.text(name, 'string').text;
  }

  bool(name: string): boolean {
    const { text, from } = this.text(name, 'bool');
    return parseBool(text, from);
  }

  int(name: string): number {
    const { text, from, info } = this.text(name, 'int');
    return parseInt64(text, from, { min: info.min, max: info.max });
  }

  float(name: string): number {
    const { text, from, info } = this.text(name, 'float');
    return parseFloat64(text, from, { min: info.min, max: info.max });
  }

  /** Milliseconds. */
  duration(name: string): number {
    const { text, from } = this.text(name, 'duration');
    return parseDurationMs(text, from);
  }

  list(name: string): string[] {
    return parseList(this.text(name, 'list').text);
  }

  map(name: string): Record<string, string> {
    const { text, from, info } = this.text(name, 'map');
    return parseMap(text, from, ':', info.secret === true);
  }

  metadata(name: string): Record<string, string> {
    const { text, from } = this.text(name, 'metadata');
    return parseMap(text, from, '=');
  }

  /** One of the table's choices, case-insensitive; returns the choice as spelled in the table. */
  choice<T extends string>(name: string): T {
    const { text, from, info } = this.text(name, 'enum');
    const choices = info.choices ?? [];
    if (text === '' && info.default === '') return '' as T; // unset, no default: the caller decides
    const match = choices.find((c) => c.toLowerCase() === text.toLowerCase());
    if (match === undefined) throw invalidValue(from, shown(info, text), `expected one of ${choices.join(', ')}`);
    return match as T;
  }

  /** Variables of the table whose name starts with `prefix` that are set (as the user spelled them). */
  setVariables(prefix: string): string[] {
    return SETTINGS_TABLE.filter((info) => !info.templated && info.name.startsWith(prefix))
      .map((info) => this.lookup(info.name)?.from)
      .filter((from): from is string => from !== undefined);
  }

  raw(name: string): string | undefined {
    return nonEmpty(this.env[name]);
  }
}

function readReloadable(r: EnvReader): ReloadableFlags {
  return {
    shadowMode: r.bool('SHADOW_MODE'),
    quotaMode: r.bool('QUOTA_MODE'),
    responseDynamicMetadata: r.bool('RESPONSE_DYNAMIC_METADATA'),
    mergeDomainConfig: r.bool('MERGE_DOMAIN_CONFIG'),
    responseHeaders: {
      enabled: r.bool('LIMIT_RESPONSE_HEADERS_ENABLED'),
      limitHeader: r.string('LIMIT_LIMIT_HEADER'),
      remainingHeader: r.string('LIMIT_REMAINING_HEADER'),
      resetHeader: r.string('LIMIT_RESET_HEADER'),
    },
  };
}

type BackendChoice = Pick<CacheSettings, 'backendType' | 'backendSource' | 'backendReason'>;

/**
 * Upstream's BACKEND_TYPE default is redis (at its default socket). A deployment that sets any
 * store variable is taken to be configured as for upstream and gets redis too, so an unreachable
 * store holds start-up, named in the log, instead of each replica counting alone. Only the
 * table's variables count: Kubernetes injects REDIS_PORT, REDIS_SERVICE_HOST… for a Service
 * named `redis`.
 */
function chooseBackend(r: EnvReader): BackendChoice {
  if (r.isSet('BACKEND_TYPE')) {
    const chosen = r.choice<'memory' | 'redis' | 'memcache' | 'altstore'>('BACKEND_TYPE');
    const backendType = chosen === 'altstore' ? 'memcache' : chosen;
    return { backendType, backendSource: 'explicit', backendReason: `${r.source('BACKEND_TYPE')}=${r.lookup('BACKEND_TYPE')!.value}` };
  }
  const redis = r.setVariables('REDIS_');
  const memcache = r.setVariables('MEMCACHE_');
  const present = redis.length > 0 ? redis : memcache;
  if (present.length > 0) {
    const onlyMemcache = redis.length === 0 ? '; BACKEND_TYPE=memcache selects memcached' : '';
    return {
      backendType: 'redis',
      backendSource: 'store-settings',
      backendReason: `BACKEND_TYPE is unset and ${present.join(', ')} ${present.length === 1 ? 'is' : 'are'} set: envoyproxy/ratelimit's default store${onlyMemcache}`,
    };
  }
  return { backendType: 'memory', backendSource: 'default', backendReason: 'no BACKEND_TYPE, REDIS_* or MEMCACHE_* setting' };
}

function readStats(r: EnvReader, warnings: string[]): StatsSettings {
  const disabled = r.bool('DISABLE_STATS');
  const useDogStatsd = r.bool('USE_DOG_STATSD');
  const useStatsd = r.bool('USE_STATSD');
  const usePrometheus = r.bool('USE_PROMETHEUS');
  let sink: StatsSinkKind;
  if (disabled) {
    sink = 'disabled';
  } else {
    if ([useDogStatsd, useStatsd, usePrometheus].filter(Boolean).length > 1) {
      throw new SettingsError(STATS_SINK_CONFLICT_MESSAGE);
    }
    sink = useDogStatsd ? 'dogstatsd' : usePrometheus ? 'prometheus' : useStatsd ? 'statsd' : 'logging';
  }
  const dogStatsdMogrifierNames = r.list('USE_DOG_STATSD_MOGRIFIERS');
  if (dogStatsdMogrifierNames.length > 0 && sink !== 'dogstatsd') {
    warnings.push(
      `${r.source('USE_DOG_STATSD_MOGRIFIERS')} is set but the stats sink is ${sink}, not dogstatsd: the mogrifiers are ignored`,
    );
  }
  return {
    sink,
    disabled,
    useStatsd,
    useDogStatsd,
    usePrometheus,
    statsdHost: r.string('STATSD_HOST'),
    statsdPort: r.int('STATSD_PORT'),
    extraTags: r.map('EXTRA_TAGS'),
    flushIntervalMs: r.duration('STATS_FLUSH_INTERVAL'),
    dogStatsdMogrifierNames,
    dogStatsdMogrifiers: sink === 'dogstatsd' ? dogStatsdMogrifierNames.map((name) => readMogrifier(r, name)) : [],
    prometheus: {
      addr: r.string('PROMETHEUS_ADDR'),
      path: r.string('PROMETHEUS_PATH'),
      mapperYaml: r.string('PROMETHEUS_MAPPER_YAML'),
      responseTimeAsMilliseconds: r.bool('PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS'),
    },
  };
}

/** Upstream `newMogrifierMapFromEnv` for one name (envconfig upper-cases the prefix). */
function readMogrifier(r: EnvReader, name: string): DogStatsdMogrifier {
  const prefix = `DOG_STATSD_MOGRIFIER_${name.toUpperCase()}`;
  const required = (suffix: string, what: string): string => {
    const variable = `${prefix}_${suffix}`;
    const value = r.raw(variable);
    if (value === undefined) {
      throw new SettingsError(
        `missing value for ${variable}: mogrifier ${JSON.stringify(name)} listed in USE_DOG_STATSD_MOGRIFIERS needs ${what}`,
        variable,
      );
    }
    return value;
  };
  const goPattern = required('PATTERN', 'a regular expression');
  const pattern = goPattern.replace(/\(\?P</g, '(?<');
  try {
    new RegExp(pattern);
  } catch (err) {
    throw invalidValue(`${prefix}_PATTERN`, goPattern, `expected a regular expression (${errorMessage(err)})`);
  }
  const metricName = required('NAME', 'a stat name');
  const tagsVariable = `${prefix}_TAGS`;
  const tagsText = r.raw(tagsVariable) ?? '';
  const tags = parseMap(tagsText, tagsVariable, ':');
  for (const [key, value] of Object.entries(tags)) {
    if (value === '') throw invalidValue(tagsVariable, tagsText, `expected key:value pairs with non-empty values (tag ${JSON.stringify(key)} has none)`);
  }
  return { name, pattern, metricName, tags };
}

type RedisPrefix = 'REDIS_' | 'REDIS_PERSECOND_';

/** One Redis instance; `inUse` turns on the checks upstream makes when it builds that client. */
function readRedisConnection(r: EnvReader, p: RedisPrefix, inUse: boolean, warnings: string[]): RedisConnectionSettings {
  const conn = {
    socketType: r.choice<RedisSocketType>(`${p}SOCKET_TYPE`),
    type: r.choice<RedisType>(`${p}TYPE`),
    url: r.string(`${p}URL`),
    poolSize: r.int(`${p}POOL_SIZE`),
    auth: r.string(`${p}AUTH`),
    sentinelAuth: r.string(`${p}SENTINEL_AUTH`),
    tls: r.bool(`${p}TLS`),
    pipelineWindowMs: r.duration(`${p}PIPELINE_WINDOW`),
    pipelineLimit: r.int(`${p}PIPELINE_LIMIT`),
    clusterPipelineParallelism: r.int(`${p}CLUSTER_PIPELINE_PARALLELISM`),
    timeoutMs: r.duration(`${p}TIMEOUT`),
    poolOnEmptyBehavior: 'WAIT' as const,
  };
  const onEmpty = r.string(`${p}POOL_ON_EMPTY_BEHAVIOR`);
  if (!inUse) return conn;

  const onEmptyVar = r.source(`${p}POOL_ON_EMPTY_BEHAVIOR`);
  const poolSizeVar = r.source(`${p}POOL_SIZE`);
  switch (onEmpty.toUpperCase()) {
    case 'WAIT':
      break;
    case 'CREATE':
      throw invalidValue(
        onEmptyVar,
        onEmpty,
        `expected WAIT: CREATE is not supported (as in envoyproxy/ratelimit, the pool blocks instead of creating overflow connections); remove it or set WAIT, and consider increasing ${poolSizeVar}`,
      );
    case 'ERROR':
      throw invalidValue(
        onEmptyVar,
        onEmpty,
        'expected WAIT: ERROR is not supported (as in envoyproxy/ratelimit, the pool blocks instead of failing fast); remove it or set WAIT',
      );
    default:
      warnings.push(`${onEmptyVar}=${JSON.stringify(onEmpty)} is not a known behaviour: using WAIT (the pool blocks until a connection is free)`);
  }
  if (conn.type === 'sentinel' && conn.url.split(',').length < 2) {
    throw invalidValue(r.source(`${p}URL`), shown(settingInfo(`${p}URL`), conn.url), SENTINEL_URL_MESSAGE);
  }
  return conn;
}

function readRedis(r: EnvReader, inUse: boolean, warnings: string[]): RedisSettings {
  const perSecondEnabled = r.bool('REDIS_PERSECOND');
  return {
    ...readRedisConnection(r, 'REDIS_', inUse, warnings),
    tlsClientCertFile: r.string('REDIS_TLS_CLIENT_CERT'),
    tlsClientKeyFile: r.string('REDIS_TLS_CLIENT_KEY'),
    tlsCaCertFile: r.string('REDIS_TLS_CACERT'),
    tlsSkipHostnameVerification: r.bool('REDIS_TLS_SKIP_HOSTNAME_VERIFICATION'),
    healthCheckActiveConnection: r.bool('REDIS_HEALTH_CHECK_ACTIVE_CONNECTION'),
    batchScript: r.bool('REDIS_BATCH_SCRIPT'),
    evictionCheckIntervalMs: r.duration('REDIS_EVICTION_CHECK_INTERVAL'),
    startup: {
      initialIntervalMs: r.duration('REDIS_STARTUP_INITIAL_INTERVAL'),
      maxIntervalMs: r.duration('REDIS_STARTUP_MAX_INTERVAL'),
      maxElapsedTimeMs: r.duration('REDIS_STARTUP_MAX_ELAPSED_TIME'),
    },
    perSecond: {
      enabled: perSecondEnabled,
      ...readRedisConnection(r, 'REDIS_PERSECOND_', inUse && perSecondEnabled, warnings),
    },
  };
}

function readMemory(r: EnvReader): MemorySettings {
  const overflowWidth = r.int('MEMORY_OVERFLOW_WIDTH');
  // Sketch rows are cut into bands and cells by bit masks.
  if ((overflowWidth & (overflowWidth - 1)) !== 0) {
    const from = r.source('MEMORY_OVERFLOW_WIDTH');
    throw invalidValue(from, String(overflowWidth), 'expected a power of two (8, 16, ..., 65536, 131072, ...)');
  }
  return {
    maxKeys: r.int('MEMORY_MAX_KEYS'),
    overflowWidth,
    callerNewKeysPerSecond: r.int('MEMORY_CALLER_NEW_KEYS_PER_SECOND'),
  };
}

function readLimits(r: EnvReader): LimitsSettings {
  return {
    headroom: r.bool('HEADROOM_ENABLED'),
    topK: r.int('HOT_KEYS_TOP_K'),
    sampleOneIn: r.int('HOT_KEYS_SAMPLE_ONE_IN'),
    maxRules: r.int('HOT_KEYS_MAX_RULES'),
  };
}

function readMemcacheTimeout(r: EnvReader, inUse: boolean): number {
  const ms = r.duration('MEMCACHE_TIMEOUT');
  if (inUse && ms <= 0) {
    const from = r.source('MEMCACHE_TIMEOUT');
    throw new SettingsError(`${from} must be greater than 0 (every memcached command needs a deadline)`, from);
  }
  return ms;
}

function readMemcache(r: EnvReader, inUse: boolean, warnings: string[]): MemcacheSettings {
  const hostPorts = r.list('MEMCACHE_HOST_PORT');
  const srv = r.string('MEMCACHE_SRV');
  if (inUse) {
    const hostPortVar = r.source('MEMCACHE_HOST_PORT');
    const srvVar = r.source('MEMCACHE_SRV');
    if (hostPorts.length > 0 && srv !== '') {
      throw new SettingsError(`Both ${hostPortVar} and ${srvVar} are set`, hostPortVar);
    }
    if (hostPorts.length === 0 && srv === '') {
      warnings.push(`the memcache backend has no servers: neither ${hostPortVar} nor ${srvVar} is set`);
    }
  }
  return {
    hostPorts,
    srv,
    srvRefreshMs: r.duration('MEMCACHE_SRV_REFRESH'),
    maxIdleConns: r.int('MEMCACHE_MAX_IDLE_CONNS'),
    timeoutMs: readMemcacheTimeout(r, inUse),
    tls: {
      enabled: r.bool('MEMCACHE_TLS'),
      clientCertFile: r.string('MEMCACHE_TLS_CLIENT_CERT'),
      clientKeyFile: r.string('MEMCACHE_TLS_CLIENT_KEY'),
      caCertFile: r.string('MEMCACHE_TLS_CACERT'),
      skipHostnameVerification: r.bool('MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION'),
    },
  };
}

/**
 * WORKERS, with 0 resolved to the CPU count. The memory store counts per process, so several
 * workers would each grant the whole limit: refused whatever the CPU count, so a setting that
 * starts on a laptop also starts on a larger machine.
 */
function readWorkers(r: EnvReader, backendType: BackendType): number {
  const requested = r.int('WORKERS');
  if (requested !== 1 && backendType === 'memory') {
    const from = r.source('WORKERS');
    throw new SettingsError(
      `${from}=${requested} needs a shared counter store (BACKEND_TYPE=redis or memcache): the memory store counts per process`,
      from,
    );
  }
  return requested === 0 ? availableParallelism() : requested;
}

function warnUnusedStoreSettings(r: EnvReader, backend: CacheSettings, warnings: string[]): void {
  const unused: Array<[string, string]> = [
    ['redis', 'REDIS_'],
    ['memcache', 'MEMCACHE_'],
  ];
  for (const [store, prefix] of unused) {
    if (backend.backendType === store) continue;
    const set = r.setVariables(prefix);
    if (set.length === 0) continue;
    // Memcached settings beside implicit redis: say how to select memcached instead.
    const why =
      backend.backendSource === 'store-settings' ? `BACKEND_TYPE is unset: envoyproxy/ratelimit's default; BACKEND_TYPE=${store} selects ${store}` : backend.backendReason;
    warnings.push(`${set.join(', ')} ${set.length === 1 ? 'is' : 'are'} set but the counter store is ${backend.backendType} (${why}): ignored`);
  }
}

function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const child of Object.values(value)) deepFreeze(child);
  }
  return value;
}

// ---------------------------------------------------------------------------------------------
// Public API

/**
 * Reads every setting from `env` (default `process.env`), one reader per group. Throws
 * {@link SettingsError} on the first bad value. The result is deeply frozen.
 */
export function loadSettings(env: NodeJS.ProcessEnv = process.env): Settings {
  const r = new EnvReader(env);
  const warnings: string[] = [];
  const logLevel = r.choice<LogLevel | 'warning'>('LOG_LEVEL');
  const cache = readCache(r);
  const settings: Settings = {
    http: { host: r.string('HOST'), port: r.int('PORT') },
    debug: { host: r.string('DEBUG_HOST'), port: r.int('DEBUG_PORT') },
    grpc: readGrpc(r),
    server: readServer(r, cache.backendType),
    log: {
      level: logLevel === 'warning' ? 'warn' : logLevel,
      format: r.choice<LogFormat>('LOG_FORMAT'),
    },
    config: {
      type: r.choice<ConfigType>('CONFIG_TYPE'),
      forceStartWithoutInitialConfig: r.bool('FORCE_START_WITHOUT_INITIAL_CONFIG'),
      healthyWithAtLeastOneConfigLoaded: r.bool('HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED'),
      maxBytes: r.int('CONFIG_MAX_BYTES'),
      maxDescriptors: r.int('CONFIG_MAX_DESCRIPTORS'),
      maxResources: r.int('CONFIG_MAX_RESOURCES'),
      buildMaxHeapMb: r.int('CONFIG_BUILD_MAX_HEAP_MB'),
    },
    runtime: {
      root: r.string('RUNTIME_ROOT'),
      subdirectory: r.string('RUNTIME_SUBDIRECTORY'),
      appDirectory: r.string('RUNTIME_APPDIRECTORY'),
      ignoreDotFiles: r.bool('RUNTIME_IGNOREDOTFILES'),
      watchRoot: r.bool('RUNTIME_WATCH_ROOT'),
    },
    xds: readXds(r),
    stats: readStats(r, warnings),
    cache,
    memory: readMemory(r),
    limits: readLimits(r),
    redis: readRedis(r, cache.backendType === 'redis', warnings),
    memcache: readMemcache(r, cache.backendType === 'memcache', warnings),
    tracing: readTracing(r),
    limitsView: {
      debugValues: r.choice<DebugValues>('DEBUG_VALUES'),
      denialsSize: r.int('DEBUG_DENIALS_SIZE'),
      denialsLogPerSecond: r.int('DEBUG_DENIALS_LOG_PER_SECOND'),
      configHistorySize: r.int('DEBUG_CONFIG_HISTORY_SIZE'),
    },
    reloadable: readReloadable(r),
    warnings,
  };
  warnUnusedStoreSettings(r, cache, warnings);
  checkTls(settings);
  return deepFreeze(settings);
}

/** The counter store (chosen as chooseBackend says) and what every store shares. */
function readCache(r: EnvReader): CacheSettings {
  const { backendType, backendSource, backendReason } = chooseBackend(r);
  return {
    backendType,
    backendSource,
    backendReason,
    expirationJitterMaxSeconds: r.int('EXPIRATION_JITTER_MAX_SECONDS'),
    localCacheSizeInBytes: r.int('LOCAL_CACHE_SIZE_IN_BYTES'),
    nearLimitRatio: r.float('NEAR_LIMIT_RATIO'),
    cacheKeyPrefix: r.string('CACHE_KEY_PREFIX'),
    stopCacheKeyIncrementWhenOverlimit: r.bool('STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT'),
    failureMode: r.choice<'error' | 'allow' | 'deny' | ''>('BACKEND_FAILURE_MODE') || undefined,
    circuitFailures: r.int('BACKEND_CIRCUIT_FAILURES'),
    circuitOpenMs: r.duration('BACKEND_CIRCUIT_OPEN_DURATION'),
  };
}

function readGrpc(r: EnvReader): GrpcSettings {
  return {
    uds: r.string('GRPC_UDS'),
    host: r.string('GRPC_HOST'),
    port: r.int('GRPC_PORT'),
    maxConnectionAgeMs: r.duration('GRPC_MAX_CONNECTION_AGE'),
    maxConnectionAgeGraceMs: r.duration('GRPC_MAX_CONNECTION_AGE_GRACE'),
    tls: {
      enabled: r.bool('GRPC_SERVER_USE_TLS'),
      certFile: r.string('GRPC_SERVER_TLS_CERT'),
      keyFile: r.string('GRPC_SERVER_TLS_KEY'),
      clientCaFile: r.string('GRPC_CLIENT_TLS_CACERT'),
      clientSan: r.string('GRPC_CLIENT_TLS_SAN'),
    },
    transport: r.choice<GrpcTransport>('GRPC_TRANSPORT'),
    keepaliveTimeMs: r.duration('GRPC_KEEPALIVE_TIME'),
    keepaliveTimeoutMs: r.duration('GRPC_KEEPALIVE_TIMEOUT'),
    maxConnectionIdleMs: r.duration('GRPC_MAX_CONNECTION_IDLE'),
    firstRequestTimeoutMs: r.duration('GRPC_FIRST_REQUEST_TIMEOUT'),
    maxConcurrentStreams: r.int('GRPC_MAX_CONCURRENT_STREAMS'),
    maxConnections: r.int('GRPC_MAX_CONNECTIONS'),
    maxConnectionsPerPeer: r.int('GRPC_MAX_CONNECTIONS_PER_PEER'),
    requestBodyTimeoutMs: r.duration('GRPC_REQUEST_BODY_TIMEOUT'),
  };
}

/** TLS of the other ports, request and connection bounds, worker mode, shutdown, RLQS. */
function readServer(r: EnvReader, backendType: CacheSettings['backendType']): ServerExtraSettings {
  return {
    httpTls: r.bool('HTTP_SERVER_USE_TLS'),
    debugTls: r.bool('DEBUG_SERVER_USE_TLS'),
    tlsReloadIntervalMs: r.duration('TLS_RELOAD_INTERVAL'),
    maxRequestBytes: r.int('REQUEST_MAX_BYTES'),
    maxBufferedRequestBytes: r.int('REQUEST_MAX_BUFFERED_BYTES'),
    httpMaxConnections: r.int('HTTP_MAX_CONNECTIONS'),
    httpMaxConnectionsPerPeer: r.int('HTTP_MAX_CONNECTIONS_PER_PEER'),
    debugMaxConnections: r.int('DEBUG_MAX_CONNECTIONS'),
    debugMaxConnectionsPerPeer: r.int('DEBUG_MAX_CONNECTIONS_PER_PEER'),
    handshakeTimeoutMs: r.duration('CONNECTION_HANDSHAKE_TIMEOUT'),
    tlsMaxHandshakes: r.int('TLS_MAX_HANDSHAKES'),
    maxDescriptors: r.int('REQUEST_MAX_DESCRIPTORS'),
    maxEntries: r.int('REQUEST_MAX_ENTRIES'),
    maxEntryLength: r.int('REQUEST_MAX_ENTRY_LENGTH'),
    workers: readWorkers(r, backendType),
    requestBodyTimeoutMs: r.duration('HTTP_REQUEST_BODY_TIMEOUT'),
    shutdownDelayMs: r.duration('SHUTDOWN_DELAY'),
    drainTimeoutMs: r.duration('SHUTDOWN_DRAIN_TIMEOUT'),
    rlqsUnmatched: {
      strategy: r.choice<'allow' | 'deny'>('RLQS_UNMATCHED_ACTION') === 'deny' ? 'deny-all' : 'allow-all',
      ttlSeconds: Math.max(1, Math.round(r.duration('RLQS_UNMATCHED_TTL') / 1000)),
    },
    rlqsBudgets: {
      streamBuckets: r.int('RLQS_MAX_BUCKETS_PER_STREAM'),
      streamBytes: r.int('RLQS_MAX_BUCKET_BYTES_PER_STREAM'),
      connectionBuckets: r.int('RLQS_MAX_BUCKETS_PER_CONNECTION'),
      connectionBytes: r.int('RLQS_MAX_BUCKET_BYTES_PER_CONNECTION'),
      processBuckets: r.int('RLQS_MAX_BUCKETS'),
      processBytes: r.int('RLQS_MAX_BUCKET_BYTES'),
    },
  };
}

/**
 * A `k:v` map of gRPC metadata to send: names as gRPC takes them (letters, digits, `_ . -`; not
 * `-bin`, which needs binary values), values of printable ASCII. Its values are secrets (bearer
 * tokens): an error names the header, never its value.
 */
function grpcHeaders(r: EnvReader, name: string): Record<string, string> {
  const headers = r.map(name);
  const from = r.source(name);
  for (const [key, value] of Object.entries(headers)) {
    if (!/^[0-9A-Za-z_.-]+$/.test(key) || key.toLowerCase().endsWith('-bin')) {
      throw invalidValue(from, '***', `header name ${JSON.stringify(key)} is not a gRPC metadata name (letters, digits, _ . - and not ending in -bin)`);
    }
    if (!/^[ -~]*$/.test(value)) {
      throw invalidValue(from, '***', `the value of header ${JSON.stringify(key)} holds characters other than printable ASCII`);
    }
  }
  return headers;
}

function readXds(r: EnvReader): XdsSettings {
  return {
    nodeId: r.string('CONFIG_GRPC_XDS_NODE_ID'),
    nodeMetadata: r.metadata('CONFIG_GRPC_XDS_NODE_METADATA'),
    serverUrl: r.string('CONFIG_GRPC_XDS_SERVER_URL'),
    connectRetryIntervalMs: r.duration('CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL'),
    additionalHeaders: grpcHeaders(r, 'CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS'),
    tls: {
      enabled: r.bool('CONFIG_GRPC_XDS_SERVER_USE_TLS'),
      clientCertFile: r.string('CONFIG_GRPC_XDS_CLIENT_TLS_CERT'),
      clientKeyFile: r.string('CONFIG_GRPC_XDS_CLIENT_TLS_KEY'),
      serverCaFile: r.string('CONFIG_GRPC_XDS_SERVER_TLS_CACERT'),
      serverSan: r.string('CONFIG_GRPC_XDS_SERVER_TLS_SAN'),
    },
    backoff: {
      initialIntervalMs: r.duration('XDS_CLIENT_BACKOFF_INITIAL_INTERVAL'),
      maxIntervalMs: r.duration('XDS_CLIENT_BACKOFF_MAX_INTERVAL'),
      randomFactor: r.float('XDS_CLIENT_BACKOFF_RANDOM_FACTOR'),
      jitter: r.bool('XDS_CLIENT_BACKOFF_JITTER'),
    },
    maxMsgSizeInBytes: r.int('XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES'),
  };
}

function readTracing(r: EnvReader): TracingSettings {
  return {
    enabled: r.bool('TRACING_ENABLED'),
    serviceName: r.string('TRACING_SERVICE_NAME'),
    serviceNamespace: r.string('TRACING_SERVICE_NAMESPACE'),
    serviceInstanceId: r.string('TRACING_SERVICE_INSTANCE_ID'),
    exporterProtocol: r.choice<TracingExporterProtocol>('TRACING_EXPORTER_PROTOCOL'),
    samplingRate: r.float('TRACING_SAMPLING_RATE'),
  };
}

/** Certificates for every port that asks for TLS, and a client CA for the SAN check. */
function checkTls(settings: Settings): void {
  const tlsUsers = [
    settings.grpc.tls.enabled ? 'GRPC_SERVER_USE_TLS' : '',
    settings.server.httpTls ? 'HTTP_SERVER_USE_TLS' : '',
    settings.server.debugTls ? 'DEBUG_SERVER_USE_TLS' : '',
  ].filter((v) => v !== '');
  if (tlsUsers.length > 0 && (settings.grpc.tls.certFile === '' || settings.grpc.tls.keyFile === '')) {
    throw new SettingsError(`${tlsUsers.join(', ')}=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY (certificate chain and key files)`, tlsUsers[0]);
  }
  if (settings.grpc.tls.clientSan !== '' && settings.grpc.tls.clientCaFile === '') {
    throw new SettingsError('GRPC_CLIENT_TLS_SAN needs GRPC_CLIENT_TLS_CACERT: client certificates are only checked when a client CA is set', 'GRPC_CLIENT_TLS_SAN');
  }
}

/**
 * The flags upstream re-reads at every config load (SHADOW_MODE, QUOTA_MODE,
 * RESPONSE_DYNAMIC_METADATA, MERGE_DOMAIN_CONFIG, LIMIT_RESPONSE_HEADERS_ENABLED, LIMIT_*_HEADER),
 * with the same parsers, defaults and errors as {@link loadSettings}. Deeply frozen.
 */
export function loadReloadableFlags(env: NodeJS.ProcessEnv = process.env): ReloadableFlags {
  return deepFreeze(readReloadable(new EnvReader(env)));
}

export { SETTINGS_TABLE, renderSettingsMarkdown, settingInfo, defaultDisplay } from './table';
export type { SettingInfo, SettingKind } from './table';
