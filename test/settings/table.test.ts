import { SETTINGS_TABLE, renderSettingsMarkdown, settingInfo } from '../../src/settings';

/** Section 1.20 of the behaviour reference: every upstream variable and its envconfig default. */
const UPSTREAM_DEFAULTS: ReadonlyArray<readonly [string, string]> = [
  ['HOST', '0.0.0.0'],
  ['PORT', '8080'],
  ['DEBUG_HOST', '0.0.0.0'],
  ['DEBUG_PORT', '6070'],
  ['GRPC_UDS', ''],
  ['GRPC_HOST', '0.0.0.0'],
  ['GRPC_PORT', '8081'],
  ['GRPC_MAX_CONNECTION_AGE', '24h'],
  ['GRPC_MAX_CONNECTION_AGE_GRACE', '1h'],
  ['GRPC_SERVER_USE_TLS', 'false'],
  ['GRPC_SERVER_TLS_CERT', ''],
  ['GRPC_SERVER_TLS_KEY', ''],
  ['GRPC_CLIENT_TLS_CACERT', ''],
  ['GRPC_CLIENT_TLS_SAN', ''],
  ['LOG_LEVEL', 'WARN'],
  ['LOG_FORMAT', 'text'],
  ['CONFIG_TYPE', 'FILE'],
  ['FORCE_START_WITHOUT_INITIAL_CONFIG', 'false'],
  ['CONFIG_GRPC_XDS_NODE_ID', 'default'],
  ['CONFIG_GRPC_XDS_NODE_METADATA', ''],
  ['CONFIG_GRPC_XDS_SERVER_URL', 'localhost:18000'],
  ['CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL', '3s'],
  ['CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS', ''],
  ['CONFIG_GRPC_XDS_SERVER_USE_TLS', 'false'],
  ['CONFIG_GRPC_XDS_CLIENT_TLS_CERT', ''],
  ['CONFIG_GRPC_XDS_CLIENT_TLS_KEY', ''],
  ['CONFIG_GRPC_XDS_SERVER_TLS_CACERT', ''],
  ['CONFIG_GRPC_XDS_SERVER_TLS_SAN', ''],
  ['XDS_CLIENT_BACKOFF_INITIAL_INTERVAL', '10s'],
  ['XDS_CLIENT_BACKOFF_MAX_INTERVAL', '60s'],
  ['XDS_CLIENT_BACKOFF_RANDOM_FACTOR', '0.5'],
  ['XDS_CLIENT_BACKOFF_JITTER', 'true'],
  ['XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES', '0'],
  ['USE_DOG_STATSD', 'false'],
  ['USE_DOG_STATSD_MOGRIFIERS', ''],
  ['USE_STATSD', 'true'],
  ['STATSD_HOST', 'localhost'],
  ['STATSD_PORT', '8125'],
  ['EXTRA_TAGS', ''],
  ['STATS_FLUSH_INTERVAL', '10s'],
  ['DISABLE_STATS', 'false'],
  ['USE_PROMETHEUS', 'false'],
  ['PROMETHEUS_ADDR', ':9090'],
  ['PROMETHEUS_PATH', '/metrics'],
  ['PROMETHEUS_MAPPER_YAML', ''],
  ['PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS', 'false'],
  ['RUNTIME_ROOT', '/srv/runtime_data/current'],
  ['RUNTIME_SUBDIRECTORY', ''],
  ['RUNTIME_APPDIRECTORY', 'config'],
  ['RUNTIME_IGNOREDOTFILES', 'false'],
  ['RUNTIME_WATCH_ROOT', 'true'],
  ['EXPIRATION_JITTER_MAX_SECONDS', '300'],
  ['LOCAL_CACHE_SIZE_IN_BYTES', '0'],
  ['NEAR_LIMIT_RATIO', '0.8'],
  ['CACHE_KEY_PREFIX', ''],
  ['STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT', 'false'],
  ['LIMIT_RESPONSE_HEADERS_ENABLED', 'false'],
  ['LIMIT_LIMIT_HEADER', 'RateLimit-Limit'],
  ['LIMIT_REMAINING_HEADER', 'RateLimit-Remaining'],
  ['LIMIT_RESET_HEADER', 'RateLimit-Reset'],
  ['HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED', 'false'],
  ['SHADOW_MODE', 'false'],
  ['QUOTA_MODE', 'false'],
  ['RESPONSE_DYNAMIC_METADATA', 'false'],
  ['MERGE_DOMAIN_CONFIG', 'false'],
  ['REDIS_SOCKET_TYPE', 'unix'],
  ['REDIS_PERSECOND_SOCKET_TYPE', 'unix'],
  ['REDIS_TYPE', 'SINGLE'],
  ['REDIS_PERSECOND_TYPE', 'SINGLE'],
  ['REDIS_URL', '/var/run/nutcracker/ratelimit.sock'],
  ['REDIS_PERSECOND_URL', '/var/run/nutcracker/ratelimitpersecond.sock'],
  ['REDIS_POOL_SIZE', '10'],
  ['REDIS_PERSECOND_POOL_SIZE', '10'],
  ['REDIS_AUTH', ''],
  ['REDIS_PERSECOND_AUTH', ''],
  ['REDIS_TLS', 'false'],
  ['REDIS_PERSECOND_TLS', 'false'],
  ['REDIS_TLS_CLIENT_CERT', ''],
  ['REDIS_TLS_CLIENT_KEY', ''],
  ['REDIS_TLS_CACERT', ''],
  ['REDIS_TLS_SKIP_HOSTNAME_VERIFICATION', 'false'],
  ['REDIS_PIPELINE_WINDOW', '0'],
  ['REDIS_PERSECOND_PIPELINE_WINDOW', '0'],
  ['REDIS_PIPELINE_LIMIT', '0'],
  ['REDIS_PERSECOND_PIPELINE_LIMIT', '0'],
  ['REDIS_CLUSTER_PIPELINE_PARALLELISM', '1'],
  ['REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM', '1'],
  ['REDIS_PERSECOND', 'false'],
  ['REDIS_SENTINEL_AUTH', ''],
  ['REDIS_PERSECOND_SENTINEL_AUTH', ''],
  ['REDIS_HEALTH_CHECK_ACTIVE_CONNECTION', 'false'],
  ['REDIS_TIMEOUT', '10s'],
  ['REDIS_PERSECOND_TIMEOUT', '10s'],
  ['REDIS_POOL_ON_EMPTY_BEHAVIOR', 'WAIT'],
  ['REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR', 'WAIT'],
  ['REDIS_STARTUP_INITIAL_INTERVAL', '1s'],
  ['REDIS_STARTUP_MAX_INTERVAL', '30s'],
  ['REDIS_STARTUP_MAX_ELAPSED_TIME', '0'],
  ['MEMCACHE_HOST_PORT', ''],
  ['MEMCACHE_MAX_IDLE_CONNS', '2'],
  ['MEMCACHE_SRV', ''],
  ['MEMCACHE_SRV_REFRESH', '0'],
  ['MEMCACHE_TLS', 'false'],
  ['MEMCACHE_TLS_CLIENT_CERT', ''],
  ['MEMCACHE_TLS_CLIENT_KEY', ''],
  ['MEMCACHE_TLS_CACERT', ''],
  ['MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION', 'false'],
  ['TRACING_ENABLED', 'false'],
  ['TRACING_SERVICE_NAME', 'RateLimit'],
  ['TRACING_SERVICE_NAMESPACE', ''],
  ['TRACING_SERVICE_INSTANCE_ID', ''],
  ['TRACING_EXPORTER_PROTOCOL', 'http'],
  ['TRACING_SAMPLING_RATE', '1'],
];

/** Beyond upstream, or with a different default on purpose. */
const OWN: ReadonlyArray<readonly [string, string]> = [
  ['BACKEND_TYPE', ''], // upstream: redis; here too when any REDIS_* or MEMCACHE_* variable is set, else memory
  ['MEMORY_MAX_KEYS', '1000000'],
  ['MEMORY_OVERFLOW_WIDTH', '65536'],
  ['MEMORY_CALLER_NEW_KEYS_PER_SECOND', '50000'],
  ['HEADROOM_ENABLED', 'true'],
  ['HOT_KEYS_TOP_K', '10'],
  ['HOT_KEYS_SAMPLE_ONE_IN', '16'],
  ['HOT_KEYS_MAX_RULES', '1000'],
  ['BACKEND_FAILURE_MODE', ''],
  ['BACKEND_CIRCUIT_FAILURES', '5'],
  ['BACKEND_CIRCUIT_OPEN_DURATION', '1s'],
  ['MEMCACHE_TIMEOUT', '500ms'],
  ['HTTP_SERVER_USE_TLS', 'false'],
  ['DEBUG_SERVER_USE_TLS', 'false'],
  ['DEBUG_VALUES', 'plain'],
  ['DEBUG_DENIALS_SIZE', '1000'],
  ['DEBUG_DENIALS_LOG_PER_SECOND', '0'],
  ['DEBUG_CONFIG_HISTORY_SIZE', '20'],
  ['TLS_RELOAD_INTERVAL', '10s'],
  ['REQUEST_MAX_BYTES', '1048576'],
  ['REQUEST_MAX_DESCRIPTORS', '1000'],
  ['REQUEST_MAX_ENTRIES', '100'],
  ['REQUEST_MAX_ENTRY_LENGTH', '4096'],
  ['RLQS_UNMATCHED_ACTION', 'allow'],
  ['RLQS_UNMATCHED_TTL', '10s'],
  ['RLQS_MAX_BUCKETS_PER_STREAM', '10000'],
  ['RLQS_MAX_BUCKET_BYTES_PER_STREAM', '33554432'],
  ['RLQS_MAX_BUCKETS_PER_CONNECTION', '20000'],
  ['RLQS_MAX_BUCKET_BYTES_PER_CONNECTION', '33554432'],
  ['RLQS_MAX_BUCKETS', '200000'],
  ['RLQS_MAX_BUCKET_BYTES', '100663296'],
  ['GRPC_TRANSPORT', 'grpc-js'],
  ['GRPC_KEEPALIVE_TIME', '2h'],
  ['GRPC_KEEPALIVE_TIMEOUT', '20s'],
  ['GRPC_MAX_CONNECTION_IDLE', '5m'],
  ['GRPC_FIRST_REQUEST_TIMEOUT', '10s'],
  ['GRPC_MAX_CONCURRENT_STREAMS', '1000'],
  ['GRPC_MAX_CONNECTIONS', '10000'],
  ['GRPC_MAX_CONNECTIONS_PER_PEER', '1000'],
  ['GRPC_REQUEST_BODY_TIMEOUT', '10s'],
  ['HTTP_MAX_CONNECTIONS', '10000'],
  ['HTTP_MAX_CONNECTIONS_PER_PEER', '1000'],
  ['DEBUG_MAX_CONNECTIONS', '100'],
  ['DEBUG_MAX_CONNECTIONS_PER_PEER', '20'],
  ['CONNECTION_HANDSHAKE_TIMEOUT', '10s'],
  ['TLS_MAX_HANDSHAKES', '1000'],
  ['REQUEST_MAX_BUFFERED_BYTES', '33554432'],
  ['WORKERS', '1'],
  ['REDIS_BATCH_SCRIPT', 'false'],
  ['REDIS_EVICTION_CHECK_INTERVAL', '10s'],
  ['HTTP_REQUEST_BODY_TIMEOUT', '10s'],
  ['SHUTDOWN_DELAY', '0s'],
  ['SHUTDOWN_DRAIN_TIMEOUT', '10s'],
  ['CONFIG_MAX_BYTES', '33554432'],
  ['CONFIG_MAX_DESCRIPTORS', '100000'],
  ['CONFIG_MAX_RESOURCES', '10000'],
  ['CONFIG_BUILD_MAX_HEAP_MB', '192'],
];

describe('SETTINGS_TABLE', () => {
  it.each(UPSTREAM_DEFAULTS)('%s has upstream default %j', (name, def) => {
    expect(settingInfo(name).default).toBe(def);
    expect(settingInfo(name).extension).toBeUndefined();
  });

  it('holds exactly the upstream variables, the DogStatsD mogrifier family and our own', () => {
    const expected = [...UPSTREAM_DEFAULTS, ...OWN].map(([name]) => name).sort();
    const actual = SETTINGS_TABLE.filter((info) => !info.templated).map((info) => info.name).sort();
    expect(actual).toEqual(expected);
    expect(SETTINGS_TABLE.filter((info) => info.templated).map((info) => info.name)).toEqual([
      'DOG_STATSD_MOGRIFIER_<NAME>_PATTERN',
      'DOG_STATSD_MOGRIFIER_<NAME>_NAME',
      'DOG_STATSD_MOGRIFIER_<NAME>_TAGS',
    ]);
  });

  it('has no duplicate names or aliases', () => {
    const names = SETTINGS_TABLE.flatMap((info) => [info.name, ...(info.alias ? [info.alias] : [])]);
    expect(new Set(names).size).toBe(names.length);
  });

  it('every REDIS_* has a STORE_* alias, every MEMCACHE_* an ALTSTORE_* alias, nothing else has one', () => {
    for (const info of SETTINGS_TABLE) {
      if (info.name.startsWith('REDIS_')) expect(info.alias).toBe(`STORE_${info.name.slice(6)}`);
      else if (info.name.startsWith('MEMCACHE_')) expect(info.alias).toBe(`ALTSTORE_${info.name.slice(9)}`);
      else expect(info.alias).toBeUndefined();
    }
    expect(settingInfo('REDIS_PERSECOND_URL').alias).toBe('STORE_PERSECOND_URL');
    expect(settingInfo('REDIS_HEALTH_CHECK_ACTIVE_CONNECTION').alias).toBe('STORE_HEALTH_CHECK_ACTIVE_CONNECTION');
    expect(settingInfo('MEMCACHE_HOST_PORT').alias).toBe('ALTSTORE_HOST_PORT');
  });

  it('marks the reloadable flags', () => {
    expect(SETTINGS_TABLE.filter((info) => info.reloadable).map((info) => info.name).sort()).toEqual(
      [
        'LIMIT_LIMIT_HEADER',
        'LIMIT_REMAINING_HEADER',
        'LIMIT_RESET_HEADER',
        'LIMIT_RESPONSE_HEADERS_ENABLED',
        'MERGE_DOMAIN_CONFIG',
        'QUOTA_MODE',
        'RESPONSE_DYNAMIC_METADATA',
        'SHADOW_MODE',
      ].sort(),
    );
  });

  it('every entry has a one-line meaning and enums list their choices', () => {
    for (const info of SETTINGS_TABLE) {
      expect(info.description.length).toBeGreaterThan(5);
      expect(info.description).not.toMatch(/[\r\n]/);
      if (info.kind === 'enum') expect(info.choices?.length).toBeGreaterThan(1);
    }
  });

  it('is frozen', () => {
    expect(Object.isFrozen(SETTINGS_TABLE)).toBe(true);
  });

  it('settingInfo rejects unknown names', () => {
    expect(() => settingInfo('NOPE')).toThrow('settings table has no entry for NOPE');
  });
});

describe('renderSettingsMarkdown', () => {
  const md = renderSettingsMarkdown();
  const rows = md.trimEnd().split('\n');

  it('is one markdown table with a row per table entry', () => {
    expect(rows[0]).toBe('| Variable | Alias | Default | Meaning |');
    expect(rows[1]).toBe('|---|---|---|---|');
    expect(rows).toHaveLength(SETTINGS_TABLE.length + 2);
    for (const row of rows) expect(row.split(/(?<!\\)\|/)).toHaveLength(6);
  });

  it('shows names, aliases, defaults and notes', () => {
    expect(rows).toContain('| `PORT` |  | `8080` | HTTP listener port (0..65535) |');
    expect(md).toContain('| `REDIS_URL` | `STORE_URL` | `/var/run/nutcracker/ratelimit.sock` |');
    expect(md).toContain('| `MEMCACHE_HOST_PORT` | `ALTSTORE_HOST_PORT` | (empty) |');
    expect(md).toContain('| `BACKEND_TYPE` |  | redis when any `REDIS_*` or `MEMCACHE_*` variable is set, else memory |');
    expect(md).toMatch(/\| `MEMORY_MAX_KEYS` \|.*not in envoyproxy\/ratelimit/);
    expect(md).toMatch(/\| `SHADOW_MODE` \|.*re-read at every config load/);
    expect(md).toMatch(/\| `LOG_LEVEL` \|.*one of `trace`, `debug`/);
  });
});
