/**
 * Every environment variable the service reads, in one table: name, alias, type, default (written
 * as upstream's envconfig `default:` tag, and parsed by the same parser as a user's value), and a
 * one-line meaning. The loader takes defaults, aliases, ranges and accepted values from here, and the
 * settings table of docs/settings.md and `--help`-style output are rendered from here (`renderSettingsMarkdown`),
 * so they cannot drift apart.
 *
 * Aliases: the seed document spells the Redis variables `STORE_*` and the Memcached ones
 * `ALTSTORE_*`; every `REDIS_*` variable is also read as `STORE_*` and every `MEMCACHE_*` as
 * `ALTSTORE_*`. Setting both spellings to different values is a start-up error.
 */

export type SettingKind =
  | 'string'
  | 'bool'
  | 'int'
  | 'float'
  /** Go duration syntax; loaded as milliseconds. */
  | 'duration'
  /** comma separated */
  | 'list'
  /** `k1:v1,k2:v2` */
  | 'map'
  /** `k1=v1,k2=v2` */
  | 'metadata'
  /** one of `choices`, case-insensitive */
  | 'enum';

export interface SettingInfo {
  /** The upstream (envoyproxy/ratelimit) variable name. */
  readonly name: string;
  /** The seed document's spelling (`STORE_*` / `ALTSTORE_*`), read as well. */
  readonly alias?: string;
  /** Section heading, as in the behaviour reference (1.20). */
  readonly group: string;
  readonly kind: SettingKind;
  /** Default in envconfig `default:` syntax ('' = empty / unset). */
  readonly default: string;
  /** How the default is shown when the raw text would mislead (e.g. a computed default). */
  readonly defaultText?: string;
  /** One-line meaning. */
  readonly description: string;
  /** Accepted values of an enum (matched case-insensitively). */
  readonly choices?: readonly string[];
  /** Inclusive bounds of an int or float. */
  readonly min?: number;
  readonly max?: number;
  /** Re-read from the environment at every config load (see `loadReloadableFlags`). */
  readonly reloadable?: boolean;
  /** Not in envoyproxy/ratelimit. */
  readonly extension?: boolean;
  /** Holds a secret: never echoed in error messages. */
  readonly secret?: boolean;
  /** A family of variables (`<NAME>` stands for each listed name); read on demand, not one by one. */
  readonly templated?: boolean;
}

type Extra = Partial<Omit<SettingInfo, 'name' | 'group' | 'kind' | 'default' | 'description'>>;

const PORT = { min: 0, max: 65535 } as const;

function aliasOf(name: string): string | undefined {
  if (name.startsWith('REDIS_')) return `STORE_${name.slice('REDIS_'.length)}`;
  if (name.startsWith('MEMCACHE_')) return `ALTSTORE_${name.slice('MEMCACHE_'.length)}`;
  return undefined;
}

function group(title: string) {
  return (name: string, kind: SettingKind, def: string, description: string, extra: Extra = {}): SettingInfo => {
    const alias = aliasOf(name);
    return { name, ...(alias ? { alias } : {}), group: title, kind, default: def, description, ...extra };
  };
}

const listen = group('Listeners and gRPC');
const logcfg = group('Logging and config source');
const xds = group('xDS client');
const stats = group('Stats');
const runtime = group('File config');
const cache = group('Cache');
const modes = group('Headers, health and modes');
const redis = group('Redis');
const memcache = group('Memcached');
const tracing = group('Tracing');
const limits = group('Seeing your limits');

/**
 * One Redis setting and its `REDIS_PERSECOND_*` twin (the per-second instance used for SECOND
 * limits when REDIS_PERSECOND is true).
 */
function redisTwin(suffix: string, kind: SettingKind, def: string, description: string, extra: Extra = {}, perSecondDef = def): SettingInfo[] {
  return [
    redis(`REDIS_${suffix}`, kind, def, description, extra),
    redis(`REDIS_PERSECOND_${suffix}`, kind, perSecondDef, `${description} (per-second instance)`, extra),
  ];
}

export const SETTINGS_TABLE: readonly SettingInfo[] = Object.freeze([
  // Listeners and gRPC
  listen('HOST', 'string', '0.0.0.0', 'HTTP listener host (`/json`, `/healthcheck`)'),
  listen('PORT', 'int', '8080', 'HTTP listener port', PORT),
  listen('DEBUG_HOST', 'string', '0.0.0.0', 'debug listener host (`/rlconfig`, `/stats`, profiling)'),
  listen('DEBUG_PORT', 'int', '6070', 'debug listener port', PORT),
  listen('GRPC_UDS', 'string', '', 'when set, gRPC listens on this unix socket path instead of GRPC_HOST:GRPC_PORT'),
  listen('GRPC_HOST', 'string', '0.0.0.0', 'gRPC listener host'),
  listen('GRPC_PORT', 'int', '8081', 'gRPC listener port', PORT),
  listen('GRPC_MAX_CONNECTION_AGE', 'duration', '24h', 'a gRPC connection is closed with GOAWAY after this age (±10% jitter)'),
  listen('GRPC_MAX_CONNECTION_AGE_GRACE', 'duration', '1h', 'extra time after GRPC_MAX_CONNECTION_AGE before the connection is forcibly closed'),
  listen('GRPC_SERVER_USE_TLS', 'bool', 'false', 'serve gRPC over TLS'),
  listen('GRPC_SERVER_TLS_CERT', 'string', '', 'server certificate chain file (same directory as the key; reloaded on change)'),
  listen('GRPC_SERVER_TLS_KEY', 'string', '', 'server private key file'),
  listen('GRPC_CLIENT_TLS_CACERT', 'string', '', 'client CA file; when set, client certificates are required and verified (mTLS)'),
  listen('GRPC_CLIENT_TLS_SAN', 'string', '', 'when set, the client certificate must also verify for this DNS SAN with client-auth usage'),
  listen('GRPC_TRANSPORT', 'enum', 'socket', 'gRPC server: `socket`, our HTTP/2 handler straight on each connection, serving ShouldRateLimit, RLQS and health; or `grpc-js`, the gRPC library\'s server (response compression, several addresses for one host name)', {
    choices: ['socket', 'grpc-js'],
    extension: true,
  }),
  listen('GRPC_KEEPALIVE_TIME', 'duration', '2h', 'a gRPC connection with no activity for this long is pinged (grpc-go\'s default)', { extension: true }),
  listen('GRPC_KEEPALIVE_TIMEOUT', 'duration', '20s', 'a keepalive ping not answered within this closes the connection', { extension: true }),
  listen('GRPC_MAX_CONNECTION_IDLE', 'duration', '5m', 'a gRPC connection with no call in flight for this long since its last call is closed with GOAWAY (Envoy reconnects at its next call); 0 = never', { extension: true }),
  listen('GRPC_FIRST_REQUEST_TIMEOUT', 'duration', '10s', 'a gRPC connection that has made no call this long after its handshake is closed with GOAWAY; 0 = never', { extension: true }),
  listen('TLS_MAX_HANDSHAKES', 'int', '1000', 'TLS handshakes under way at once in the process, all ports together (each holds some 50 KB until it finishes); past it the oldest under way is closed. A connection that has sent nothing yet is not one', { min: 1, extension: true }),
  listen('CONNECTION_HANDSHAKE_TIMEOUT', 'duration', '10s', 'every port: a connection whose TLS handshake (and, on the gRPC port, the HTTP/2 preface and SETTINGS) has not finished this long after it was accepted is closed; 0 = no bound (node then closes a TLS handshake after 120 s)', { extension: true }),
  listen('GRPC_MAX_CONCURRENT_STREAMS', 'int', '1000', 'calls in flight at once on one gRPC connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS); more are refused for the client to retry', { min: 1, extension: true }),
  listen('GRPC_MAX_CONNECTIONS', 'int', '10000', 'open connections the gRPC port holds (per process); at the cap a new connection is taken and the one that costs most and serves least is closed: the highest (connections its address holds) x (time since its last call)', { min: 1, extension: true }),
  listen('GRPC_MAX_CONNECTIONS_PER_PEER', 'int', '1000', 'open connections one client address may hold on the gRPC port (per process); its connections beyond are closed as they arrive; 0 = no bound. A unix socket (GRPC_UDS) has none', { min: 0, extension: true }),
  listen('GRPC_REQUEST_BODY_TIMEOUT', 'duration', '10s', 'a gRPC call whose request has not all arrived within this (a streaming call: each message, once begun) is answered DEADLINE_EXCEEDED, whatever its own deadline (0 = no limit)', { extension: true }),
  listen('HTTP_SERVER_USE_TLS', 'bool', 'false', 'serve the HTTP port over TLS with the GRPC_SERVER_TLS_* certificate (and the GRPC_CLIENT_TLS_* client checks)', { extension: true }),
  listen('DEBUG_SERVER_USE_TLS', 'bool', 'false', 'serve the debug port over TLS, as HTTP_SERVER_USE_TLS', { extension: true }),
  listen('TLS_RELOAD_INTERVAL', 'duration', '10s', 'how often certificate files are re-read (a change in their directory also reloads them at once)', { extension: true }),
  listen('REQUEST_MAX_BYTES', 'int', '1048576', 'largest accepted request: /json body or gRPC message, in bytes', { min: 1, extension: true }),
  listen('REQUEST_MAX_BUFFERED_BYTES', 'int', '33554432', 'request bytes all connections of both ports may hold at once while their requests are still arriving (per process); a gRPC stream\'s window opens only against room taken from it; when it is spent, a call that arrives whole is still served and a request whose bytes cannot be held is answered RESOURCE_EXHAUSTED or 503', { min: 1, extension: true }),
  listen('RLQS_UNMATCHED_ACTION', 'enum', 'allow', 'RLQS: what a bucket gets when no descriptor of its domain takes it (`allow` all or `deny` all requests)', { choices: ['allow', 'deny'], extension: true }),
  listen('RLQS_UNMATCHED_TTL', 'duration', '10s', 'RLQS: time to live of that assignment (whole seconds, at least 1 s), after which Envoy asks again', { extension: true }),
  listen('RLQS_MAX_BUCKETS_PER_STREAM', 'int', '10000', 'RLQS: most buckets one stream may report; the report that would pass it is answered (the buckets beyond with their rule\'s answer without a share: deny all under a limit), then the stream ends with RESOURCE_EXHAUSTED', { min: 1, extension: true }),
  listen('RLQS_MAX_BUCKET_BYTES_PER_STREAM', 'int', '33554432', 'RLQS: most bytes the buckets of one stream may hold (estimated: 640 per bucket plus its id, 1920 plus twice its id more for a bucket no other stream tracks); past it, as past RLQS_MAX_BUCKETS_PER_STREAM', { min: 1, extension: true }),
  listen('RLQS_MAX_BUCKETS_PER_CONNECTION', 'int', '20000', 'RLQS: most buckets the streams of one connection may report together; the stream whose report would pass it is answered, then ends with RESOURCE_EXHAUSTED', { min: 1, extension: true }),
  listen('RLQS_MAX_BUCKET_BYTES_PER_CONNECTION', 'int', '33554432', 'RLQS: most bytes the buckets of one connection\'s streams may hold (counted as RLQS_MAX_BUCKET_BYTES_PER_STREAM); past it, as past RLQS_MAX_BUCKETS_PER_CONNECTION', { min: 1, extension: true }),
  listen('RLQS_MAX_BUCKETS', 'int', '200000', 'RLQS: most buckets the process tracks for all its streams (per worker); a new bucket beyond is not tracked and gets its rule\'s answer without a share (deny all under a limit) at each report, and its stream goes on', { min: 1, extension: true }),
  listen('RLQS_MAX_BUCKET_BYTES', 'int', '100663296', 'RLQS: most bytes the buckets of the process may hold (estimated as for RLQS_MAX_BUCKET_BYTES_PER_STREAM, a bucket\'s shared part once); a new bucket beyond, as beyond RLQS_MAX_BUCKETS', { min: 1, extension: true }),
  listen('REQUEST_MAX_DESCRIPTORS', 'int', '1000', 'most descriptors in one request', { min: 1, extension: true }),
  listen('REQUEST_MAX_ENTRIES', 'int', '100', 'most entries in one descriptor', { min: 1, extension: true }),
  listen('REQUEST_MAX_ENTRY_LENGTH', 'int', '4096', 'longest entry key or value, in characters (also the domain)', { min: 1, extension: true }),
  listen('HTTP_MAX_CONNECTIONS', 'int', '10000', 'open connections the HTTP port holds (per process); at the cap a new connection is taken and the one that costs most and serves least is closed, as GRPC_MAX_CONNECTIONS', { min: 1, extension: true }),
  listen('HTTP_MAX_CONNECTIONS_PER_PEER', 'int', '1000', 'open connections one client address may hold on the HTTP port (per process); its connections beyond are closed as they arrive; 0 = no bound', { min: 0, extension: true }),
  listen('DEBUG_MAX_CONNECTIONS', 'int', '100', 'open connections the debug port (and the Prometheus port) holds; at the cap a new connection is taken and the one that costs most and serves least is closed, as GRPC_MAX_CONNECTIONS', { min: 1, extension: true }),
  listen('DEBUG_MAX_CONNECTIONS_PER_PEER', 'int', '20', 'open connections one client address may hold on the debug port (and the Prometheus port); its connections beyond are closed as they arrive; 0 = no bound', { min: 0, extension: true }),
  listen('HTTP_REQUEST_BODY_TIMEOUT', 'duration', '10s', 'a request on the HTTP port whose headers and body have not all arrived within this is answered 408 and its connection closed (0 = no limit)', { extension: true }),
  listen('SHUTDOWN_DELAY', 'duration', '0s', 'after SIGTERM, answer health checks unhealthy for this long while both ports keep serving, then drain (lets Kubernetes remove the endpoint first)', { extension: true }),
  listen('SHUTDOWN_DRAIN_TIMEOUT', 'duration', '10s', 'how long in-flight calls get to finish after the listeners close; the process exits at most 1 s later, whatever a store does', { extension: true }),
  listen('WORKERS', 'int', '1', 'processes serving gRPC and HTTP on the same ports: 1 = one process, 0 = one per CPU, N > 1 = N workers under a primary that serves the debug port and sums their stats; needs BACKEND_TYPE=redis or memcache', { min: 0, extension: true }),

  // Logging and config source
  logcfg('LOG_LEVEL', 'enum', 'WARN', 'log level', { choices: ['trace', 'debug', 'info', 'warn', 'warning', 'error', 'fatal', 'panic'] }),
  logcfg('LOG_FORMAT', 'enum', 'text', 'log format; `json` writes `@timestamp`, `@message`, `level`', { choices: ['text', 'json'] }),
  logcfg('CONFIG_TYPE', 'enum', 'FILE', 'where rate limit configs come from: files (RUNTIME_*) or an xDS server', { choices: ['FILE', 'GRPC_XDS_SOTW'] }),
  logcfg('FORCE_START_WITHOUT_INITIAL_CONFIG', 'bool', 'false', 'start the listeners before a config has loaded (false: listen only once one loads, a failed first load included; upstream listens after a failed first load)'),
  logcfg('CONFIG_MAX_BYTES', 'int', '33554432', 'most bytes one config load may hold (all files, or all resources of an xDS response), checked before they are read or decoded; a bigger one is refused with an error naming this setting and the last good config stays (0 = no limit)', { min: 0, extension: true }),
  logcfg('CONFIG_MAX_DESCRIPTORS', 'int', '100000', 'most descriptors (every depth) one config load may hold, and 16 YAML nodes for each; counted as the files are read (an xDS response: before it is decoded), a bigger one is refused with an error naming this setting and the last good config stays (0 = no limit)', { min: 0, extension: true }),
  logcfg('CONFIG_MAX_RESOURCES', 'int', '10000', 'most documents one config load may hold: files of a file load, or resources of an xDS response (counted before it is decoded); more are refused with an error naming this setting and the last good config stays (0 = no limit)', { min: 0, extension: true }),
  logcfg('CONFIG_BUILD_MAX_HEAP_MB', 'int', '192', 'heap (MiB) of the worker thread that reads and checks a big config; a config that needs more is refused and the last good config stays, so a load cannot take the process past its memory', { min: 16, extension: true }),

  // xDS client
  xds('CONFIG_GRPC_XDS_NODE_ID', 'string', 'default', 'xDS node id'),
  xds('CONFIG_GRPC_XDS_NODE_METADATA', 'metadata', '', 'xDS node metadata, `k1=v1,k2=v2`'),
  xds('CONFIG_GRPC_XDS_SERVER_URL', 'string', 'localhost:18000', 'xDS management server address'),
  xds('CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL', 'duration', '3s', 'wait between xDS connection attempts that fail before a stream is up (no effect upstream; takes effect here)'),
  xds('CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS', 'map', '', 'extra gRPC metadata sent to the xDS server, `k1:v1,k2:v2` (a secret: its values never appear in an error)', { secret: true }),
  xds('CONFIG_GRPC_XDS_SERVER_USE_TLS', 'bool', 'false', 'connect to the xDS server over TLS'),
  xds('CONFIG_GRPC_XDS_CLIENT_TLS_CERT', 'string', '', 'client certificate file for the xDS connection'),
  xds('CONFIG_GRPC_XDS_CLIENT_TLS_KEY', 'string', '', 'client key file for the xDS connection'),
  xds('CONFIG_GRPC_XDS_SERVER_TLS_CACERT', 'string', '', 'CA file that verifies the xDS server'),
  xds('CONFIG_GRPC_XDS_SERVER_TLS_SAN', 'string', '', 'server name expected in the xDS server certificate (overrides the host name)'),
  xds('XDS_CLIENT_BACKOFF_INITIAL_INTERVAL', 'duration', '10s', 'first delay before reconnecting a lost xDS stream; doubles per attempt'),
  xds('XDS_CLIENT_BACKOFF_MAX_INTERVAL', 'duration', '60s', 'largest delay before reconnecting a lost xDS stream'),
  xds('XDS_CLIENT_BACKOFF_RANDOM_FACTOR', 'float', '0.5', 'jitter fraction: each reconnect delay is base × (1 ± factor·random) (upstream used it as the multiplier)'),
  xds('XDS_CLIENT_BACKOFF_JITTER', 'bool', 'true', 'apply XDS_CLIENT_BACKOFF_RANDOM_FACTOR jitter to reconnect delays'),
  xds('XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES', 'int', '0', 'largest xDS response accepted; 0 = gRPC default', { defaultText: '0 (gRPC default)' }),

  // Stats
  stats('USE_STATSD', 'bool', 'true', 'send stats to statsd over TCP (only one of USE_STATSD, USE_DOG_STATSD, USE_PROMETHEUS)'),
  stats('STATSD_HOST', 'string', 'localhost', 'statsd / DogStatsD host'),
  stats('STATSD_PORT', 'int', '8125', 'statsd / DogStatsD port', PORT),
  stats('USE_DOG_STATSD', 'bool', 'false', 'send stats to DogStatsD (requires USE_STATSD=false)'),
  stats('USE_DOG_STATSD_MOGRIFIERS', 'list', '', 'names of DogStatsD mogrifiers to apply, in order'),
  stats('DOG_STATSD_MOGRIFIER_<NAME>_PATTERN', 'string', '', 'regular expression a stat name must match for mogrifier <NAME>', { templated: true }),
  stats('DOG_STATSD_MOGRIFIER_<NAME>_NAME', 'string', '', 'new stat name for mogrifier <NAME> (`$1`… substitute groups)', { templated: true }),
  stats('DOG_STATSD_MOGRIFIER_<NAME>_TAGS', 'map', '', 'tags added by mogrifier <NAME>, `k:$1,k2:$2`', { templated: true }),
  stats('EXTRA_TAGS', 'map', '', 'tags added to every stat, `k1:v1,k2:v2`'),
  stats('STATS_FLUSH_INTERVAL', 'duration', '10s', 'how often stats are flushed to the sink'),
  stats('DISABLE_STATS', 'bool', 'false', 'discard all stats'),
  stats('USE_PROMETHEUS', 'bool', 'false', 'serve stats for Prometheus (requires USE_STATSD=false)'),
  stats('PROMETHEUS_ADDR', 'string', ':9090', 'Prometheus listener address'),
  stats('PROMETHEUS_PATH', 'string', '/metrics', 'Prometheus scrape path'),
  stats('PROMETHEUS_MAPPER_YAML', 'string', '', 'file replacing the built-in statsd-to-Prometheus mapping'),
  stats('PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS', 'bool', 'false', 'report response times in milliseconds instead of seconds'),

  // Seeing your limits
  limits('HEADROOM_ENABLED', 'bool', 'true', 'per loaded limit, gauges of its current window from the counts the store returns: `limit`, `window_used` (the busiest key\'s count), `window_keys`, `window_keys_over_limit`, `utilization` (percent in statsd, a ratio in Prometheus); as many series as limits', { extension: true }),
  limits('HOT_KEYS_TOP_K', 'int', '10', 'per loaded limit, the K keys with most hits over the last minute and the last hour (Space-Saving, 3·K places per 15-second or 15-minute period), at `/debug/hotkeys`; 0 turns hot keys off', { min: 0, max: 100, extension: true }),
  limits('HOT_KEYS_SAMPLE_ONE_IN', 'int', '16', 'one counted call in N (at random) feeds the hot keys, weighted N: the lists cost a map lookup per call they take (about 0.5 µs a 1-descriptor call unsampled, 7 % of a call; bench/README.md), so by default one in 16; 1 counts every call, with exact Space-Saving bounds', { min: 1, max: 1000000, extension: true }),
  limits('HOT_KEYS_MAX_RULES', 'int', '1000', 'loaded limits whose hot keys are kept (each at most 8 × 3·K entries); those counted after the cap is reached have none until a reload', { min: 0, extension: true }),
  limits('DEBUG_VALUES', 'enum', 'plain', 'how the debug pages and log lines about limits (denials, hot keys) show descriptor values and client addresses, which may be personal data: `plain` as they came, `hash` as `#` and 16 hex digits of a keyed hash drawn per process (the same value reads the same within the process, not across processes), `hide` as `(hidden)`', { choices: ['plain', 'hash', 'hide'], extension: true }),
  limits('DEBUG_DENIALS_SIZE', 'int', '1000', 'the last N OVER_LIMIT decisions kept for `/debug/denials` (a ring preallocated at start-up; a descriptor of more than 1,024 characters is kept without its entries); 0 = none kept', { min: 0, max: 1000000, extension: true }),
  limits('DEBUG_DENIALS_LOG_PER_SECOND', 'int', '0', 'write an info line per OVER_LIMIT decision, at most N a second, then one line with the number left out; 0 = no lines', { min: 0, extension: true }),
  limits('DEBUG_CONFIG_HISTORY_SIZE', 'int', '20', 'the last N config loads (successful or failed, each with its version and its diff against the load before) kept for `/debug/config-history`; 0 = no history, no version series and no load line', { min: 0, max: 1000, extension: true }),

  // File config
  runtime('RUNTIME_ROOT', 'string', '/srv/runtime_data/current', 'config root directory (a symlink swapped to reload, when RUNTIME_WATCH_ROOT=true)'),
  runtime('RUNTIME_SUBDIRECTORY', 'string', '', 'subdirectory of RUNTIME_ROOT holding the service configs'),
  runtime('RUNTIME_APPDIRECTORY', 'string', 'config', 'directory (under the subdirectory) whose files are the rate limit configs'),
  runtime('RUNTIME_IGNOREDOTFILES', 'bool', 'false', 'skip files whose name starts with a dot'),
  runtime('RUNTIME_WATCH_ROOT', 'bool', 'true', 'reload when RUNTIME_ROOT is replaced (true) or when a file of the config directory changes (false)'),
  runtime('MERGE_DOMAIN_CONFIG', 'bool', 'false', 'merge config files that name the same domain instead of rejecting them', { reloadable: true }),

  // Cache
  cache('BACKEND_TYPE', 'enum', '', 'counter store: memory, redis, or memcache (`altstore` is memcache). Unset: redis, as upstream, when any `REDIS_*` or `MEMCACHE_*` variable (or its `STORE_*` / `ALTSTORE_*` alias) is set, so a deployment set up for upstream never counts per replica by mistake (an unreachable Redis holds start-up, see REDIS_STARTUP_*); the memory store only when none is set', {
    choices: ['memory', 'redis', 'memcache', 'altstore'],
    defaultText: 'redis when any `REDIS_*` or `MEMCACHE_*` variable is set, else memory',
  }),
  cache('MEMORY_MAX_KEYS', 'int', '1000000', 'memory store: most counters kept in its exact table. At the cap a new key takes the place of a counter whose window has ended; when every counter is live it is counted in the overflow sketches instead (see MEMORY_OVERFLOW_WIDTH: never under-counted, a key that shares cells there may be over-counted), counted in `ratelimit.memory.keys_overflowed`. A live counter is never dropped', { min: 1, extension: true }),
  cache('MEMORY_OVERFLOW_WIDTH', 'int', '65536', 'memory store: cells per row of each overflow sketch, a power of two. A sketch (4 rows of 8-byte cells: 2 MiB at the default) is made per window length and algorithm while its new keys overflow (two for a sliding window) and dropped when its windows end; wider means fewer keys sharing cells, so fewer over-counted (at the default, about 10,000 keys of one rule in one window)', { min: 8, max: 4194304, extension: true }),
  cache('MEMORY_CALLER_NEW_KEYS_PER_SECOND', 'int', '50000', 'memory store: new counters one client address may add to the table a second (in a burst of up to one second\'s worth; an Envoy sending 10,000 requests a second, each from a new client address, adds about 20,000); its further new keys are counted in the overflow sketches instead (not refused), counted in `ratelimit.memory.keys_over_caller_budget`. 0: no bound. Requests on a Unix socket, and the runner\'s in-process limiter, have no caller', { min: 0, extension: true }),
  cache('EXPIRATION_JITTER_MAX_SECONDS', 'int', '300', 'counter TTL gets a random 0..N-1 extra seconds (0 = none)'),
  cache('LOCAL_CACHE_SIZE_IN_BYTES', 'int', '0', 'size of the in-process cache of over-limit keys; 0 disables it'),
  cache('NEAR_LIMIT_RATIO', 'float', '0.8', 'fraction of the limit above which hits count as near_limit', { min: 0, max: 1 }),
  cache('CACHE_KEY_PREFIX', 'string', '', 'prefix of every counter key'),
  cache('STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT', 'bool', 'false', 'do not increment the other keys of a request when one is already over limit (Redis)'),
  cache('BACKEND_FAILURE_MODE', 'enum', '', 'when the counter store fails: `error` answers an error, `allow` answers OK, `deny` answers OVER_LIMIT; unset keeps upstream behaviour. The memory store does not fail: past MEMORY_MAX_KEYS it counts new keys in its overflow sketches', {
    choices: ['error', 'allow', 'deny'],
    defaultText: 'upstream: error for Redis; counts read as 0 for Memcached',
    extension: true,
  }),
  cache('BACKEND_CIRCUIT_FAILURES', 'int', '5', 'consecutive store failures that open the circuit, failing requests at once until a probe succeeds (0 = never open)', {
    min: 0,
    extension: true,
  }),
  cache('BACKEND_CIRCUIT_OPEN_DURATION', 'duration', '1s', 'how long an open circuit fails requests at once before one probe is let through', { extension: true }),

  // Headers, health and modes
  modes('LIMIT_RESPONSE_HEADERS_ENABLED', 'bool', 'false', 'add rate limit headers to responses', { reloadable: true }),
  modes('LIMIT_LIMIT_HEADER', 'string', 'RateLimit-Limit', 'name of the header carrying the limit', { reloadable: true }),
  modes('LIMIT_REMAINING_HEADER', 'string', 'RateLimit-Remaining', 'name of the header carrying the remaining count', { reloadable: true }),
  modes('LIMIT_RESET_HEADER', 'string', 'RateLimit-Reset', 'name of the header carrying the seconds until reset', { reloadable: true }),
  modes('HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED', 'bool', 'false', 'report unhealthy until at least one config domain is loaded'),
  modes('SHADOW_MODE', 'bool', 'false', 'global shadow mode: the overall code is always OK (statuses, stats and headers unchanged)', { reloadable: true }),
  modes('QUOTA_MODE', 'bool', 'false', 'global quota mode: every descriptor is a quota descriptor (over only when all quota descriptors are over)', { reloadable: true }),
  modes('RESPONSE_DYNAMIC_METADATA', 'bool', 'false', 'return domain, descriptors and matched rule metadata as response dynamic metadata', { reloadable: true }),


  // Redis
  ...redisTwin('SOCKET_TYPE', 'enum', 'unix', 'network of REDIS_URL', { choices: ['tcp', 'unix'] }),
  ...redisTwin('TYPE', 'enum', 'SINGLE', 'Redis topology', { choices: ['single', 'sentinel', 'cluster'] }),
  ...redisTwin(
    'URL',
    'string',
    '/var/run/nutcracker/ratelimit.sock',
    'single: host:port or socket path; sentinel: master,sentinel1,…; cluster: host:port,…; dialled when the store is redis (BACKEND_TYPE=redis, or BACKEND_TYPE unset and any `REDIS_*` or `MEMCACHE_*` variable set), this default when unset, as upstream',
    {},
    '/var/run/nutcracker/ratelimitpersecond.sock',
  ),
  ...redisTwin('POOL_SIZE', 'int', '10', 'connections in the pool'),
  ...redisTwin('AUTH', 'string', '', '`password` or `user:password`', { secret: true }),
  ...redisTwin('SENTINEL_AUTH', 'string', '', 'password for the sentinel nodes', { secret: true }),
  ...redisTwin('TLS', 'bool', 'false', 'connect over TLS'),
  redis('REDIS_TLS_CLIENT_CERT', 'string', '', 'client certificate file for Redis TLS (both instances)'),
  redis('REDIS_TLS_CLIENT_KEY', 'string', '', 'client key file for Redis TLS (both instances)'),
  redis('REDIS_TLS_CACERT', 'string', '', 'CA file that verifies Redis (both instances)'),
  redis('REDIS_TLS_SKIP_HOSTNAME_VERIFICATION', 'bool', 'false', 'verify the Redis certificate chain but not its host name'),
  ...redisTwin('PIPELINE_WINDOW', 'duration', '0', 'batch the commands of concurrent requests into one pipeline for this long (every mode); 0 = one pipeline per request'),
  ...redisTwin('PIPELINE_LIMIT', 'int', '0', 'flush a batched pipeline once it holds this many commands (INCRBY and EXPIRE count one each); 0 = no count limit'),
  ...redisTwin('CLUSTER_PIPELINE_PARALLELISM', 'int', '1', 'cluster mode: pipelines (one per node) of one flush in flight at once; 0 or 1 = all in parallel, N > 1 caps it', { min: 0 }),
  ...redisTwin('TIMEOUT', 'duration', '10s', 'dial and I/O timeout'),
  ...redisTwin('POOL_ON_EMPTY_BEHAVIOR', 'string', 'WAIT', 'when the pool is exhausted: WAIT (CREATE and ERROR are rejected; others mean WAIT)'),
  redis('REDIS_PERSECOND', 'bool', 'false', 'use a second Redis (REDIS_PERSECOND_*) for per-second limits'),
  redis('REDIS_BATCH_SCRIPT', 'bool', 'false', 'send the INCRBY and EXPIRE of a pipeline as one EVAL (same keys, counts and TTLs; much less client CPU); needs scripting allowed and no key-routing proxy in front (both instances)', { extension: true }),
  redis('REDIS_HEALTH_CHECK_ACTIVE_CONNECTION', 'bool', 'false', 'report unhealthy while Redis has no active connection (none connected, or the credentials refused)'),
  redis('REDIS_EVICTION_CHECK_INTERVAL', 'duration', '10s', 'how often each Redis node (both instances) is asked whether it may evict counters (`maxmemory` with a `maxmemory-policy` other than `noeviction`) and how many keys it evicted (`INFO` `evicted_keys`), warned once per change and counted in `ratelimit.redis.may_evict` / `ratelimit.redis.evicted_keys`; also at start; 0 = never', { extension: true }),
  redis('REDIS_STARTUP_INITIAL_INTERVAL', 'duration', '1s', 'first retry delay while connecting at start-up'),
  redis('REDIS_STARTUP_MAX_INTERVAL', 'duration', '30s', 'largest retry delay while connecting at start-up'),
  redis('REDIS_STARTUP_MAX_ELAPSED_TIME', 'duration', '0', 'give up connecting at start-up after this long; 0 = retry forever'),

  // Memcached
  memcache('MEMCACHE_HOST_PORT', 'list', '', 'memcached servers, `host:port,…` (not with MEMCACHE_SRV)'),
  memcache('MEMCACHE_SRV', 'string', '', 'SRV record listing the memcached servers (not with MEMCACHE_HOST_PORT)'),
  memcache('MEMCACHE_SRV_REFRESH', 'duration', '0', 're-resolve MEMCACHE_SRV this often; 0 = never'),
  memcache('MEMCACHE_MAX_IDLE_CONNS', 'int', '2', 'idle connections kept per memcached server'),
  memcache('MEMCACHE_TIMEOUT', 'duration', '500ms', 'longest wait for a memcached command, connecting included (gomemcache\'s default per-operation timeout, which upstream uses without a setting); past it every command on that connection fails, BACKEND_FAILURE_MODE decides those requests, and the server is not asked again until it answers a health probe', { extension: true }),
  memcache('MEMCACHE_TLS', 'bool', 'false', 'connect to memcached over TLS'),
  memcache('MEMCACHE_TLS_CLIENT_CERT', 'string', '', 'client certificate file for memcached TLS'),
  memcache('MEMCACHE_TLS_CLIENT_KEY', 'string', '', 'client key file for memcached TLS'),
  memcache('MEMCACHE_TLS_CACERT', 'string', '', 'CA file that verifies memcached'),
  memcache('MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION', 'bool', 'false', 'verify the memcached certificate chain but not its host name'),

  // Tracing
  tracing('TRACING_ENABLED', 'bool', 'false', 'export OpenTelemetry traces (endpoint from OTEL_EXPORTER_OTLP_*)'),
  tracing('TRACING_SERVICE_NAME', 'string', 'RateLimit', 'service.name of the spans'),
  tracing('TRACING_SERVICE_NAMESPACE', 'string', '', 'service.namespace of the spans'),
  tracing('TRACING_SERVICE_INSTANCE_ID', 'string', '', 'service.instance.id of the spans; empty = a random UUID', { defaultText: '(random UUID)' }),
  tracing('TRACING_EXPORTER_PROTOCOL', 'enum', 'http', 'OTLP exporter protocol', { choices: ['http', 'grpc'] }),
  tracing('TRACING_SAMPLING_RATE', 'float', '1', 'fraction of traces sampled (parent-based)', { min: 0, max: 1 }),
]);

const BY_NAME: ReadonlyMap<string, SettingInfo> = new Map(SETTINGS_TABLE.map((info) => [info.name, info]));

/** The table entry of a variable (by its upstream name). */
export function settingInfo(name: string): SettingInfo {
  const info = BY_NAME.get(name);
  if (!info) throw new Error(`settings table has no entry for ${name}`);
  return info;
}

function cell(text: string): string {
  return text.replace(/\|/g, '\\|');
}

function constraints(info: SettingInfo): string {
  const parts: string[] = [];
  if (info.choices) parts.push(`one of ${info.choices.map((c) => `\`${c}\``).join(', ')}`);
  if (info.min !== undefined && info.max !== undefined) parts.push(`${info.min}..${info.max}`);
  else if (info.min !== undefined) parts.push(`>= ${info.min}`);
  if (info.kind === 'duration') parts.push('duration');
  if (info.reloadable) parts.push('re-read at every config load');
  if (info.extension) parts.push('not in envoyproxy/ratelimit');
  return parts.length ? ` (${parts.join('; ')})` : '';
}

/** The default as shown to users. */
export function defaultDisplay(info: SettingInfo): string {
  if (info.defaultText !== undefined) return info.defaultText;
  return info.default === '' ? '(empty)' : `\`${info.default}\``;
}

/** The settings as a markdown table (Variable | Alias | Default | Meaning), in table order, for docs/settings.md. */
export function renderSettingsMarkdown(): string {
  const lines = ['| Variable | Alias | Default | Meaning |', '|---|---|---|---|'];
  for (const info of SETTINGS_TABLE) {
    lines.push(
      `| \`${cell(info.name)}\` | ${info.alias ? `\`${info.alias}\`` : ''} | ${cell(defaultDisplay(info))} | ${cell(info.description + constraints(info))} |`,
    );
  }
  return `${lines.join('\n')}\n`;
}

/** The settings as plain text for `ratelimit --help`: a variable per entry, grouped as in the table. */
export function renderSettingsHelp(): string {
  let out = '';
  let group = '';
  for (const info of SETTINGS_TABLE) {
    if (info.group !== group) {
      group = info.group;
      out += `\n${group}:\n`;
    }
    const alias = info.alias ? ` (or ${info.alias})` : '';
    out += `  ${info.name}${alias}  default: ${defaultDisplay(info).replace(/`/g, '')}\n      ${(info.description + constraints(info)).replace(/`/g, '')}\n`;
  }
  return out;
}
