import { availableParallelism } from 'node:os';
import {
  SETTINGS_TABLE,
  SettingsError,
  loadReloadableFlags,
  loadSettings,
  type SettingInfo,
  type Settings,
} from '../../src/settings';

function errorOf(env: NodeJS.ProcessEnv): SettingsError {
  try {
    loadSettings(env);
  } catch (err) {
    expect(err).toBeInstanceOf(SettingsError);
    expect((err as Error).message).not.toMatch(/[\r\n]/);
    return err as SettingsError;
  }
  throw new Error(`expected a SettingsError for ${JSON.stringify(env)}`);
}

/** Every default of the behaviour reference, section 1.20 (durations in ms). */
const DEFAULTS: Settings = {
  http: { host: '0.0.0.0', port: 8080 },
  debug: { host: '0.0.0.0', port: 6070 },
  grpc: {
    uds: '',
    host: '0.0.0.0',
    port: 8081,
    maxConnectionAgeMs: 24 * 3600_000,
    maxConnectionAgeGraceMs: 3600_000,
    tls: { enabled: false, certFile: '', keyFile: '', clientCaFile: '', clientSan: '' },
    transport: 'socket',
    keepaliveTimeMs: 7_200_000,
    keepaliveTimeoutMs: 20_000,
    maxConnectionIdleMs: 300_000,
    firstRequestTimeoutMs: 10_000,
    maxConcurrentStreams: 1000,
    maxConnections: 10_000,
    maxConnectionsPerPeer: 1000,
    requestBodyTimeoutMs: 10_000,
  },
  server: {
    httpTls: false,
    debugTls: false,
    tlsReloadIntervalMs: 10_000,
    maxRequestBytes: 1_048_576,
    maxBufferedRequestBytes: 33_554_432,
    httpMaxConnections: 10_000,
    httpMaxConnectionsPerPeer: 1000,
    debugMaxConnections: 100,
    debugMaxConnectionsPerPeer: 20,
    handshakeTimeoutMs: 10_000,
    tlsMaxHandshakes: 1000,
    maxDescriptors: 1000,
    maxEntries: 100,
    maxEntryLength: 4096,
    workers: 1,
    requestBodyTimeoutMs: 10_000,
    shutdownDelayMs: 0,
    drainTimeoutMs: 10_000,
    rlqsUnmatched: { strategy: 'allow-all', ttlSeconds: 10 },
    rlqsBudgets: { streamBuckets: 10_000, streamBytes: 33_554_432, connectionBuckets: 20_000, connectionBytes: 33_554_432, processBuckets: 200_000, processBytes: 100_663_296 },
  },
  log: { level: 'warn', format: 'text' },
  config: { type: 'FILE', forceStartWithoutInitialConfig: false, healthyWithAtLeastOneConfigLoaded: false, maxBytes: 33_554_432, maxDescriptors: 100_000, maxResources: 10_000, buildMaxHeapMb: 192 },
  runtime: { root: '/srv/runtime_data/current', subdirectory: '', appDirectory: 'config', ignoreDotFiles: false, watchRoot: true },
  xds: {
    nodeId: 'default',
    nodeMetadata: {},
    serverUrl: 'localhost:18000',
    connectRetryIntervalMs: 3000,
    additionalHeaders: {},
    tls: { enabled: false, clientCertFile: '', clientKeyFile: '', serverCaFile: '', serverSan: '' },
    backoff: { initialIntervalMs: 10_000, maxIntervalMs: 60_000, randomFactor: 0.5, jitter: true },
    maxMsgSizeInBytes: 0,
  },
  stats: {
    sink: 'statsd',
    disabled: false,
    useStatsd: true,
    useDogStatsd: false,
    usePrometheus: false,
    statsdHost: 'localhost',
    statsdPort: 8125,
    extraTags: {},
    flushIntervalMs: 10_000,
    dogStatsdMogrifierNames: [],
    dogStatsdMogrifiers: [],
    prometheus: { addr: ':9090', path: '/metrics', mapperYaml: '', responseTimeAsMilliseconds: false },
  },
  cache: {
    backendType: 'memory',
    backendSource: 'default',
    backendReason: 'no BACKEND_TYPE, REDIS_* or MEMCACHE_* setting',
    expirationJitterMaxSeconds: 300,
    localCacheSizeInBytes: 0,
    nearLimitRatio: 0.8,
    cacheKeyPrefix: '',
    stopCacheKeyIncrementWhenOverlimit: false,
    failureMode: undefined,
    circuitFailures: 5,
    circuitOpenMs: 1000,
  },
  memory: { maxKeys: 1_000_000, overflowWidth: 65_536, callerNewKeysPerSecond: 50_000 },
  limits: { headroom: true, topK: 10, sampleOneIn: 16, maxRules: 1000 },
  redis: {
    socketType: 'unix',
    type: 'single',
    url: '/var/run/nutcracker/ratelimit.sock',
    poolSize: 10,
    auth: '',
    sentinelAuth: '',
    tls: false,
    pipelineWindowMs: 0,
    pipelineLimit: 0,
    clusterPipelineParallelism: 1,
    timeoutMs: 10_000,
    poolOnEmptyBehavior: 'WAIT',
    tlsClientCertFile: '',
    tlsClientKeyFile: '',
    tlsCaCertFile: '',
    tlsSkipHostnameVerification: false,
    healthCheckActiveConnection: false,
    batchScript: false,
    evictionCheckIntervalMs: 10_000,
    startup: { initialIntervalMs: 1000, maxIntervalMs: 30_000, maxElapsedTimeMs: 0 },
    perSecond: {
      enabled: false,
      socketType: 'unix',
      type: 'single',
      url: '/var/run/nutcracker/ratelimitpersecond.sock',
      poolSize: 10,
      auth: '',
      sentinelAuth: '',
      tls: false,
      pipelineWindowMs: 0,
      pipelineLimit: 0,
      clusterPipelineParallelism: 1,
      timeoutMs: 10_000,
      poolOnEmptyBehavior: 'WAIT',
    },
  },
  memcache: {
    hostPorts: [],
    srv: '',
    srvRefreshMs: 0,
    maxIdleConns: 2,
    timeoutMs: 500,
    tls: { enabled: false, clientCertFile: '', clientKeyFile: '', caCertFile: '', skipHostnameVerification: false },
  },
  tracing: {
    enabled: false,
    serviceName: 'RateLimit',
    serviceNamespace: '',
    serviceInstanceId: '',
    exporterProtocol: 'http',
    samplingRate: 1,
  },
  limitsView: { debugValues: 'plain', denialsSize: 1000, denialsLogPerSecond: 0, configHistorySize: 20 },
  reloadable: {
    shadowMode: false,
    quotaMode: false,
    responseDynamicMetadata: false,
    mergeDomainConfig: false,
    responseHeaders: {
      enabled: false,
      limitHeader: 'RateLimit-Limit',
      remainingHeader: 'RateLimit-Remaining',
      resetHeader: 'RateLimit-Reset',
    },
  },
  warnings: [],
};

describe('defaults', () => {
  it('an empty environment gives every upstream default', () => {
    expect(loadSettings({})).toEqual(DEFAULTS);
  });

  it('an empty value counts as unset', () => {
    const env: NodeJS.ProcessEnv = {};
    for (const info of SETTINGS_TABLE) {
      if (info.templated) continue;
      env[info.name] = '';
      if (info.alias) env[info.alias] = '';
    }
    expect(loadSettings(env)).toEqual(DEFAULTS);
  });

  it('reads process.env when no environment is given', () => {
    const saved = process.env.GRPC_PORT;
    process.env.GRPC_PORT = '9191';
    try {
      expect(loadSettings().grpc.port).toBe(9191);
    } finally {
      if (saved === undefined) delete process.env.GRPC_PORT;
      else process.env.GRPC_PORT = saved;
    }
  });

  it('RLQS: the unmatched assignment and its time to live in whole seconds (at least 1); a wrong action is refused', () => {
    const s = loadSettings({
      RLQS_UNMATCHED_ACTION: 'deny',
      RLQS_UNMATCHED_TTL: '2500ms',
      RLQS_MAX_BUCKETS_PER_STREAM: '7',
      RLQS_MAX_BUCKET_BYTES_PER_STREAM: '8',
      RLQS_MAX_BUCKETS_PER_CONNECTION: '9',
      RLQS_MAX_BUCKET_BYTES_PER_CONNECTION: '10',
      RLQS_MAX_BUCKETS: '11',
      RLQS_MAX_BUCKET_BYTES: '12',
    });
    expect(s.server.rlqsUnmatched).toEqual({ strategy: 'deny-all', ttlSeconds: 3 });
    expect(s.server.rlqsBudgets).toEqual({ streamBuckets: 7, streamBytes: 8, connectionBuckets: 9, connectionBytes: 10, processBuckets: 11, processBytes: 12 });
    expect(() => loadSettings({ RLQS_MAX_BUCKETS: '0' })).toThrow(/RLQS_MAX_BUCKETS/);
    expect(loadSettings({ RLQS_UNMATCHED_TTL: '100ms' }).server.rlqsUnmatched.ttlSeconds).toBe(1);
    expect(() => loadSettings({ RLQS_UNMATCHED_ACTION: 'maybe' })).toThrow(/RLQS_UNMATCHED_ACTION/);
  });

  it('is deeply frozen', () => {
    const s = loadSettings({ EXTRA_TAGS: 'a:b', MEMCACHE_HOST_PORT: 'h:1' });
    expect(Object.isFrozen(s)).toBe(true);
    expect(Object.isFrozen(s.redis.perSecond)).toBe(true);
    expect(Object.isFrozen(s.stats.extraTags)).toBe(true);
    expect(Object.isFrozen(s.memcache.hostPorts)).toBe(true);
    expect(Object.isFrozen(s.warnings)).toBe(true);
    expect(() => {
      (s.grpc as { port: number }).port = 1;
    }).toThrow(TypeError);
  });
});

/** A valid value different from the default, for the "every variable is read" check. */
function sampleValue(info: SettingInfo): string {
  switch (info.kind) {
    case 'string':
      return info.name === 'REDIS_POOL_ON_EMPTY_BEHAVIOR' || info.name === 'REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR'
        ? 'wait-ish'
        : `value-of-${info.name}`;
    case 'bool':
      return info.default === 'true' ? 'false' : 'true';
    case 'int':
      if (info.name === 'MEMORY_OVERFLOW_WIDTH') return String(2 * Number(info.default)); // a power of two
      return info.max !== undefined && Number(info.default) >= info.max ? String(info.max - 1) : String(Number(info.default) + 1);
    case 'float':
      return info.default === '0.5' ? '0.25' : '0.5';
    case 'duration':
      return '7s';
    case 'list':
      return 'a,b';
    case 'map':
      return 'k:v';
    case 'metadata':
      return 'k=v';
    case 'enum':
      return info.choices!.find((c) => c.toLowerCase() !== info.default.toLowerCase())!;
  }
}

/** Settings a variable needs around it to be valid (one stats sink only) or to be used (Redis in use). */
function companions(name: string): NodeJS.ProcessEnv {
  if (name === 'USE_DOG_STATSD' || name === 'USE_PROMETHEUS') return { USE_STATSD: 'false' };
  if (name.endsWith('POOL_ON_EMPTY_BEHAVIOR')) return { REDIS_URL: 'r:6379', REDIS_PERSECOND: 'true' };
  if (name.endsWith('_USE_TLS') && !name.startsWith('CONFIG_')) return { GRPC_SERVER_TLS_CERT: 'c.pem', GRPC_SERVER_TLS_KEY: 'k.pem' };
  if (name === 'GRPC_CLIENT_TLS_SAN') return { GRPC_CLIENT_TLS_CACERT: 'ca.pem' };
  if (name === 'WORKERS') return { REDIS_URL: 'r:6379' };
  // Any Redis setting selects redis, whose sentinel type needs a master and a sentinel.
  if (name === 'REDIS_TYPE') return { REDIS_URL: 'mymaster,s1:26379' };
  return {};
}

/** The loaded values without the warnings (a warning about an unused variable is not a read). */
function values(s: Settings): Omit<Settings, 'warnings'> {
  const { warnings: _, ...rest } = s;
  return rest;
}

describe('every variable of the table is read', () => {
  const entries = SETTINGS_TABLE.filter((info) => !info.templated);

  it.each(entries.map((info) => [info.name, info] as const))('%s changes the settings', (_name, info) => {
    const base = loadSettings(companions(info.name));
    const changed = loadSettings({ ...companions(info.name), [info.name]: sampleValue(info) });
    if (info.name.endsWith('POOL_ON_EMPTY_BEHAVIOR')) {
      // Always WAIT once loaded: the value shows only in its own warning.
      expect(changed.warnings).toEqual([expect.stringContaining(`${info.name}="wait-ish" is not a known behaviour`)]);
    } else {
      expect(values(changed)).not.toEqual(values(base));
    }
  });

  it.each(entries.filter((info) => info.alias).map((info) => [info.alias!, info] as const))(
    'the alias %s reads the same as its upstream name',
    (alias, info) => {
      const value = sampleValue(info);
      const companion = companions(info.name);
      const viaName = loadSettings({ ...companion, [info.name]: value });
      const viaAlias = loadSettings({ ...companion, [alias]: value });
      // Only the words that name the variable as spelled differ.
      const spelled = (text: string): string => text.split(info.name).join(alias);
      expect(viaAlias).toEqual({ ...viaName, cache: { ...viaName.cache, backendReason: viaAlias.cache.backendReason }, warnings: viaAlias.warnings });
      expect(viaAlias.cache.backendReason).toBe(spelled(viaName.cache.backendReason));
      expect(viaAlias.warnings.join(' ')).toBe(spelled(viaName.warnings.join(' ')));
    },
  );
});

describe('values', () => {
  it('parses each kind', () => {
    const s = loadSettings({
      PORT: '0x1F90',
      GRPC_MAX_CONNECTION_AGE: '2h45m',
      REDIS_PIPELINE_WINDOW: '150us',
      NEAR_LIMIT_RATIO: '.9',
      USE_STATSD: 'F',
      DISABLE_STATS: 'T',
      MEMCACHE_HOST_PORT: 'a:11211, b:11211',
      EXTRA_TAGS: 'env:prod,team:edge',
      CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: 'x-token:abc,authorization:Basic a:b',
      CONFIG_GRPC_XDS_NODE_METADATA: 'region=eu,zone=eu-1a',
      LOG_LEVEL: 'Debug',
      LOG_FORMAT: 'JSON',
      CONFIG_TYPE: 'grpc_xds_sotw',
      REDIS_TYPE: 'Cluster',
      REDIS_SOCKET_TYPE: 'TCP',
      TRACING_EXPORTER_PROTOCOL: 'GRPC',
    });
    expect(s.http.port).toBe(8080);
    expect(s.grpc.maxConnectionAgeMs).toBe(9_900_000);
    expect(s.redis.pipelineWindowMs).toBeCloseTo(0.15, 12);
    expect(s.cache.nearLimitRatio).toBe(0.9);
    expect(s.stats.useStatsd).toBe(false);
    expect(s.stats.sink).toBe('disabled');
    expect(s.memcache.hostPorts).toEqual(['a:11211', 'b:11211']);
    expect(s.stats.extraTags).toEqual({ env: 'prod', team: 'edge' });
    expect(s.xds.additionalHeaders).toEqual({ 'x-token': 'abc', authorization: 'Basic a:b' });
    expect(s.xds.nodeMetadata).toEqual({ region: 'eu', zone: 'eu-1a' });
    expect(s.log).toEqual({ level: 'debug', format: 'json' });
    expect(s.config.type).toBe('GRPC_XDS_SOTW');
    expect(s.redis.type).toBe('cluster');
    expect(s.redis.socketType).toBe('tcp');
    expect(s.tracing.exporterProtocol).toBe('grpc');
  });

  it('LOG_LEVEL accepts every logrus level, case-insensitively, warning meaning warn', () => {
    for (const level of ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'panic']) {
      expect(loadSettings({ LOG_LEVEL: level.toUpperCase() }).log.level).toBe(level);
    }
    expect(loadSettings({ LOG_LEVEL: 'Warning' }).log.level).toBe('warn');
  });

  it('strings are kept as they are', () => {
    expect(loadSettings({ CACHE_KEY_PREFIX: ' pre: ' }).cache.cacheKeyPrefix).toBe(' pre: ');
  });

  it('errors name the variable, the value and what is accepted', () => {
    expect(errorOf({ USE_STATSD: 'maybe' }).message).toBe(
      'invalid value "maybe" for USE_STATSD: expected a boolean (true, false, 1, 0, t, f)',
    );
    expect(errorOf({ GRPC_PORT: '80a' }).message).toBe('invalid value "80a" for GRPC_PORT: expected an integer between 0 and 65535');
    expect(errorOf({ REDIS_TIMEOUT: '10' }).message).toMatch(/^invalid value "10" for REDIS_TIMEOUT: missing unit; expected a duration/);
    expect(errorOf({ EXTRA_TAGS: 'a' }).message).toContain('for EXTRA_TAGS: expected comma-separated key:value pairs');
    expect(errorOf({ CONFIG_GRPC_XDS_NODE_METADATA: 'a:b' }).message).toContain('key=value');
    expect(errorOf({ USE_STATSD: 'maybe' }).variable).toBe('USE_STATSD');
  });

  it.each([
    ['PORT', '65536'],
    ['PORT', '-1'],
    ['DEBUG_PORT', '70000'],
    ['GRPC_PORT', '65536'],
    ['STATSD_PORT', '99999'],
  ])('%s=%s is out of the port range', (name, value) => {
    expect(errorOf({ [name]: value }).message).toBe(`invalid value "${value}" for ${name}: expected an integer between 0 and 65535`);
  });

  it('ports 0 and 65535 are fine', () => {
    expect(loadSettings({ PORT: '0', GRPC_PORT: '65535' }).grpc.port).toBe(65535);
  });

  it.each([
    ['NEAR_LIMIT_RATIO', '1.5'],
    ['NEAR_LIMIT_RATIO', '-0.1'],
    ['TRACING_SAMPLING_RATE', '2'],
    ['TRACING_SAMPLING_RATE', '-1'],
  ])('%s=%s is outside [0, 1]', (name, value) => {
    expect(errorOf({ [name]: value }).message).toBe(`invalid value "${value}" for ${name}: expected a number between 0 and 1`);
  });

  it('NEAR_LIMIT_RATIO and TRACING_SAMPLING_RATE accept the bounds', () => {
    const s = loadSettings({ NEAR_LIMIT_RATIO: '0', TRACING_SAMPLING_RATE: '0' });
    expect([s.cache.nearLimitRatio, s.tracing.samplingRate]).toEqual([0, 0]);
    expect(loadSettings({ NEAR_LIMIT_RATIO: '1' }).cache.nearLimitRatio).toBe(1);
  });

  it('REDIS_CLUSTER_PIPELINE_PARALLELISM and its twin must be >= 0', () => {
    expect(errorOf({ REDIS_CLUSTER_PIPELINE_PARALLELISM: '-1' }).message).toBe(
      'invalid value "-1" for REDIS_CLUSTER_PIPELINE_PARALLELISM: expected an integer >= 0',
    );
    expect(errorOf({ REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM: '-2' }).message).toContain('REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM');
    expect(loadSettings({ REDIS_CLUSTER_PIPELINE_PARALLELISM: '0' }).redis.clusterPipelineParallelism).toBe(0);
  });

  it('MEMORY_MAX_KEYS must be >= 1', () => {
    expect(loadSettings({ MEMORY_MAX_KEYS: '500' }).memory.maxKeys).toBe(500);
    expect(errorOf({ MEMORY_MAX_KEYS: '0' }).message).toBe('invalid value "0" for MEMORY_MAX_KEYS: expected an integer >= 1');
  });

  it('MEMORY_OVERFLOW_WIDTH must be a power of two >= 8', () => {
    expect(loadSettings({ MEMORY_OVERFLOW_WIDTH: '8' }).memory.overflowWidth).toBe(8);
    expect(loadSettings({ MEMORY_OVERFLOW_WIDTH: '1048576' }).memory.overflowWidth).toBe(1_048_576);
    expect(errorOf({ MEMORY_OVERFLOW_WIDTH: '4' }).message).toBe('invalid value "4" for MEMORY_OVERFLOW_WIDTH: expected an integer between 8 and 4194304');
    // 128 MiB a sketch at most.
    expect(errorOf({ MEMORY_OVERFLOW_WIDTH: '8388608' }).message).toBe('invalid value "8388608" for MEMORY_OVERFLOW_WIDTH: expected an integer between 8 and 4194304');
    expect(errorOf({ MEMORY_OVERFLOW_WIDTH: '30000' }).message).toBe(
      'invalid value "30000" for MEMORY_OVERFLOW_WIDTH: expected a power of two (8, 16, ..., 65536, 131072, ...)',
    );
  });

  it('MEMORY_CALLER_NEW_KEYS_PER_SECOND: 0 turns the bound off, below is an error', () => {
    expect(loadSettings({ MEMORY_CALLER_NEW_KEYS_PER_SECOND: '0' }).memory.callerNewKeysPerSecond).toBe(0);
    expect(errorOf({ MEMORY_CALLER_NEW_KEYS_PER_SECOND: '-1' }).message).toBe(
      'invalid value "-1" for MEMORY_CALLER_NEW_KEYS_PER_SECOND: expected an integer >= 0',
    );
  });
});

describe('enumerations', () => {
  it.each([
    ['CONFIG_TYPE', 'FILES', 'FILE, GRPC_XDS_SOTW'],
    ['BACKEND_TYPE', 'mongo', 'memory, redis, memcache, altstore'],
    ['REDIS_TYPE', 'master', 'single, sentinel, cluster'],
    ['REDIS_PERSECOND_TYPE', 'master', 'single, sentinel, cluster'],
    ['REDIS_SOCKET_TYPE', 'udp', 'tcp, unix'],
    ['REDIS_PERSECOND_SOCKET_TYPE', 'udp', 'tcp, unix'],
    ['LOG_LEVEL', 'verbose', 'trace, debug, info, warn, warning, error, fatal, panic'],
    ['LOG_FORMAT', 'yaml', 'text, json'],
    ['TRACING_EXPORTER_PROTOCOL', 'zipkin', 'http, grpc'],
    ['GRPC_TRANSPORT', 'netty', 'socket, grpc-js'],
    ['GRPC_TRANSPORT', 'http2', 'socket, grpc-js'],
  ])('%s=%s is rejected', (name, value, accepted) => {
    expect(errorOf({ [name]: value }).message).toBe(`invalid value "${value}" for ${name}: expected one of ${accepted}`);
  });

  it('the alias spelling is named when it holds the bad value', () => {
    expect(errorOf({ STORE_TYPE: 'master' }).message).toBe('invalid value "master" for STORE_TYPE: expected one of single, sentinel, cluster');
  });
});

describe('aliases (STORE_* = REDIS_*, ALTSTORE_* = MEMCACHE_*)', () => {
  it('reads the seed spellings', () => {
    const s = loadSettings({
      STORE_URL: 'redis:6379',
      STORE_SOCKET_TYPE: 'tcp',
      STORE_PERSECOND: 'true',
      STORE_PERSECOND_URL: 'redis-ps:6379',
      STORE_PERSECOND_SOCKET_TYPE: 'tcp',
      STORE_HEALTH_CHECK_ACTIVE_CONNECTION: 'true',
      STORE_POOL_SIZE: '20',
      ALTSTORE_HOST_PORT: 'mc:11211',
      ALTSTORE_MAX_IDLE_CONNS: '5',
    });
    expect(s.cache.backendType).toBe('redis');
    expect(s.redis.url).toBe('redis:6379');
    expect(s.redis.socketType).toBe('tcp');
    expect(s.redis.poolSize).toBe(20);
    expect(s.redis.healthCheckActiveConnection).toBe(true);
    expect(s.redis.perSecond).toMatchObject({ enabled: true, url: 'redis-ps:6379', socketType: 'tcp' });
    expect(s.memcache.hostPorts).toEqual(['mc:11211']);
    expect(s.memcache.maxIdleConns).toBe(5);
  });

  it('both spellings with the same value are fine', () => {
    expect(loadSettings({ REDIS_URL: 'r:6379', STORE_URL: 'r:6379' }).redis.url).toBe('r:6379');
  });

  it('one spelling empty and the other set uses the set one', () => {
    expect(loadSettings({ REDIS_URL: '', STORE_URL: 'r:6379' }).redis.url).toBe('r:6379');
    expect(loadSettings({ REDIS_URL: 'r:6379', STORE_URL: '' }).redis.url).toBe('r:6379');
  });

  it.each([
    ['REDIS_URL', 'STORE_URL', 'a:1', 'b:2'],
    ['REDIS_PERSECOND_URL', 'STORE_PERSECOND_URL', 'a:1', 'b:2'],
    ['REDIS_HEALTH_CHECK_ACTIVE_CONNECTION', 'STORE_HEALTH_CHECK_ACTIVE_CONNECTION', 'true', 'false'],
    ['MEMCACHE_HOST_PORT', 'ALTSTORE_HOST_PORT', 'a:1', 'b:2'],
    ['MEMCACHE_SRV_REFRESH', 'ALTSTORE_SRV_REFRESH', '1m', '2m'],
  ])('%s and %s set to different values is an error naming both', (name, alias, a, b) => {
    const err = errorOf({ [name]: a, [alias]: b });
    expect(err.message).toBe(`conflicting values for ${name} (${JSON.stringify(a)}) and its alias ${alias} (${JSON.stringify(b)}): set only one of them`);
  });

  it('a conflict is an error even when the values mean the same', () => {
    expect(errorOf({ REDIS_TLS: 'true', STORE_TLS: '1' }).message).toContain('REDIS_TLS');
  });

  it('a conflict never prints a secret', () => {
    const err = errorOf({ REDIS_AUTH: 'hunter2', STORE_AUTH: 'swordfish' });
    expect(err.message).toContain('REDIS_AUTH');
    expect(err.message).toContain('STORE_AUTH');
    expect(err.message).not.toMatch(/hunter2|swordfish/);
  });

  it.each([
    ['an item without ":"', 'authorization:Bearer s3cr3t,s3cr3t-token', 'expected comma-separated key:value pairs (item 2 has no ":")'],
    ['an empty key', ':Bearer s3cr3t', 'expected comma-separated key:value pairs (item 1 has an empty key)'],
    ['a value gRPC refuses', 'x-tenant:blue,authorization:Bearer s3cr3t\u00e9', 'the value of header "authorization" holds characters other than printable ASCII'],
    ['a name gRPC refuses', 'bad header:Bearer s3cr3t', 'header name "bad header" is not a gRPC metadata name (letters, digits, _ . - and not ending in -bin)'],
    ['a binary header', 'token-bin:s3cr3t', 'header name "token-bin" is not a gRPC metadata name (letters, digits, _ . - and not ending in -bin)'],
  ])('CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS is a secret, as REDIS_AUTH: %s names the header, never a value', (_what, text, why) => {
    const err = errorOf({ CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: text });
    expect(err.message).toBe(`invalid value "***" for CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: ${why}`);
    expect(err.message).not.toMatch(/s3cr3t|Bearer|blue/);
  });

  it('a conflict masks URL credentials', () => {
    const err = errorOf({ REDIS_URL: 'redis://u:secret@a:1', STORE_URL: 'redis://b:2' });
    expect(err.message).not.toContain('secret');
    expect(err.message).toContain('redis://***@a:1');
  });
});

describe('backend selection', () => {
  it('is memory when no store setting at all is present', () => {
    expect(loadSettings({}).cache).toMatchObject({
      backendType: 'memory',
      backendSource: 'default',
      backendReason: 'no BACKEND_TYPE, REDIS_* or MEMCACHE_* setting',
    });
    expect(loadSettings({ BACKEND_FAILURE_MODE: 'allow', MEMORY_MAX_KEYS: '10' }).cache.backendType).toBe('memory');
  });

  it('an upstream-style environment (REDIS_SOCKET_TYPE=unix, REDIS_POOL_SIZE=20) is redis at the nutcracker socket, as upstream', () => {
    const s = loadSettings({ REDIS_SOCKET_TYPE: 'unix', REDIS_POOL_SIZE: '20' });
    expect(s.cache).toMatchObject({
      backendType: 'redis',
      backendSource: 'store-settings',
      backendReason: "BACKEND_TYPE is unset and REDIS_SOCKET_TYPE, REDIS_POOL_SIZE are set: envoyproxy/ratelimit's default store",
    });
    expect(s.redis).toMatchObject({ socketType: 'unix', url: '/var/run/nutcracker/ratelimit.sock', poolSize: 20 });
    expect(s.redis.perSecond.url).toBe('/var/run/nutcracker/ratelimitpersecond.sock');
    expect(s.warnings).toEqual([]);
  });

  it.each([
    [{ REDIS_URL: 'localhost:6379' }, 'REDIS_URL'],
    [{ STORE_URL: 'localhost:6379' }, 'STORE_URL'],
    [{ REDIS_PERSECOND_URL: 'r:1' }, 'REDIS_PERSECOND_URL'],
    [{ STORE_PERSECOND: 'true' }, 'STORE_PERSECOND'],
    [{ REDIS_AUTH: 'secret' }, 'REDIS_AUTH'],
  ])('any Redis setting (%j) selects redis, naming it as spelled', (env, spelled) => {
    expect(loadSettings(env).cache).toMatchObject({
      backendType: 'redis',
      backendSource: 'store-settings',
      backendReason: `BACKEND_TYPE is unset and ${spelled} is set: envoyproxy/ratelimit's default store`,
    });
  });

  it('variables outside the table do not count (Kubernetes injects REDIS_PORT for a Service named redis)', () => {
    expect(loadSettings({ REDIS_PORT: 'tcp://10.0.0.1:6379', REDIS_SERVICE_HOST: '10.0.0.1', MEMCACHE_PORT: 'tcp://10.0.0.2:11211' }).cache.backendType).toBe('memory');
  });

  it.each([[{ MEMCACHE_HOST_PORT: 'mc:11211' }, 'MEMCACHE_HOST_PORT'], [{ ALTSTORE_SRV: '_mc._tcp.example' }, 'ALTSTORE_SRV']])(
    'Memcached settings alone (%j) select redis too, as upstream defaults BACKEND_TYPE to redis whatever else is set; the log and a warning say how to choose memcached',
    (env, spelled) => {
      const s = loadSettings(env);
      expect(s.cache).toMatchObject({
        backendType: 'redis',
        backendSource: 'store-settings',
        backendReason: `BACKEND_TYPE is unset and ${spelled} is set: envoyproxy/ratelimit's default store; BACKEND_TYPE=memcache selects memcached`,
      });
      expect(s.redis.url).toBe('/var/run/nutcracker/ratelimit.sock');
      expect(s.warnings).toEqual([
        `${spelled} is set but the counter store is redis (BACKEND_TYPE is unset: envoyproxy/ratelimit's default; BACKEND_TYPE=memcache selects memcache): ignored`,
      ]);
    },
  );

  it('Redis and Memcached settings together: redis, named by the Redis ones', () => {
    expect(loadSettings({ REDIS_URL: 'r:1', MEMCACHE_HOST_PORT: 'mc:1' }).cache.backendReason).toBe(
      "BACKEND_TYPE is unset and REDIS_URL is set: envoyproxy/ratelimit's default store",
    );
  });

  it('an implicit redis gets the checks of an explicit one (upstream checks what it builds)', () => {
    expect(errorOf({ REDIS_TYPE: 'sentinel' }).message).toContain('Expected master name and a list of urls for the sentinels');
  });

  it('an empty BACKEND_TYPE counts as unset', () => {
    expect(loadSettings({ BACKEND_TYPE: '' }).cache.backendSource).toBe('default');
    expect(loadSettings({ BACKEND_TYPE: '', REDIS_URL: 'r:1' }).cache.backendSource).toBe('store-settings');
  });

  it.each([
    ['memory', 'memory'],
    ['redis', 'redis'],
    ['memcache', 'memcache'],
    ['altstore', 'memcache'],
    ['REDIS', 'redis'],
    ['Memcache', 'memcache'],
    ['AltStore', 'memcache'],
    ['MEMORY', 'memory'],
  ])('BACKEND_TYPE=%s is %s (explicit)', (value, backend) => {
    expect(loadSettings({ BACKEND_TYPE: value, MEMCACHE_HOST_PORT: 'mc:11211' }).cache).toMatchObject({
      backendType: backend,
      backendSource: 'explicit',
      backendReason: `BACKEND_TYPE=${value}`,
    });
  });

  it('BACKEND_TYPE=memory with REDIS_URL set keeps the memory store, and says REDIS_URL is ignored', () => {
    const s = loadSettings({ BACKEND_TYPE: 'memory', REDIS_URL: 'r:1' });
    expect(s.cache).toMatchObject({ backendType: 'memory', backendSource: 'explicit', backendReason: 'BACKEND_TYPE=memory' });
    expect(s.warnings).toEqual(['REDIS_URL is set but the counter store is memory (BACKEND_TYPE=memory): ignored']);
  });

  it('BACKEND_TYPE=redis without REDIS_URL uses upstream default socket', () => {
    const s = loadSettings({ BACKEND_TYPE: 'redis' });
    expect(s.redis).toMatchObject({ url: '/var/run/nutcracker/ratelimit.sock', socketType: 'unix' });
  });
});

describe('the stats sink rule', () => {
  const message =
    'unable to use more than one stats sink at the same time. Set one of USE_DOG_STATSD, USE_STATSD, USE_PROMETHEUS.';

  it.each([
    [{ USE_PROMETHEUS: 'true' }],
    [{ USE_DOG_STATSD: 'true' }],
    [{ USE_DOG_STATSD: 'true', USE_PROMETHEUS: 'true', USE_STATSD: 'false' }],
    [{ USE_DOG_STATSD: 'true', USE_PROMETHEUS: 'true' }],
  ])('%j is an error with upstream text', (env) => {
    expect(errorOf(env).message).toBe(message);
  });

  it.each([
    [{}, 'statsd'],
    [{ USE_STATSD: 'false' }, 'logging'],
    [{ USE_STATSD: 'false', USE_PROMETHEUS: 'true' }, 'prometheus'],
    [{ USE_STATSD: 'false', USE_DOG_STATSD: 'true' }, 'dogstatsd'],
    [{ DISABLE_STATS: 'true', USE_PROMETHEUS: 'true' }, 'disabled'],
  ])('%j uses the %s sink', (env, sink) => {
    expect(loadSettings(env).stats.sink).toBe(sink);
  });
});

describe('DogStatsD mogrifiers', () => {
  const dog = { USE_STATSD: 'false', USE_DOG_STATSD: 'true' };
  const tag = {
    DOG_STATSD_MOGRIFIER_TAG_PATTERN: String.raw`^ratelimit\.service\.rate_limit\.(.*)\.(.*)\.(.*)$`,
    DOG_STATSD_MOGRIFIER_TAG_NAME: 'ratelimit.service.rate_limit.$3',
    DOG_STATSD_MOGRIFIER_TAG_TAGS: 'domain:$1,descriptor:$2',
  };

  it('loads each listed mogrifier from DOG_STATSD_MOGRIFIER_<NAME>_*', () => {
    const s = loadSettings({ ...dog, ...tag, USE_DOG_STATSD_MOGRIFIERS: 'tag' });
    expect(s.stats.dogStatsdMogrifierNames).toEqual(['tag']);
    expect(s.stats.dogStatsdMogrifiers).toEqual([
      {
        name: 'tag',
        pattern: tag.DOG_STATSD_MOGRIFIER_TAG_PATTERN,
        metricName: 'ratelimit.service.rate_limit.$3',
        tags: { domain: '$1', descriptor: '$2' },
      },
    ]);
    const re = new RegExp(s.stats.dogStatsdMogrifiers[0]!.pattern);
    expect(re.exec('ratelimit.service.rate_limit.mongo_cps.database_users.within_limit')?.slice(1)).toEqual([
      'mongo_cps',
      'database_users',
      'within_limit',
    ]);
  });

  it('tags are optional', () => {
    const { DOG_STATSD_MOGRIFIER_TAG_TAGS: _, ...noTags } = tag;
    expect(loadSettings({ ...dog, ...noTags, USE_DOG_STATSD_MOGRIFIERS: 'TAG' }).stats.dogStatsdMogrifiers[0]!.tags).toEqual({});
  });

  it("rewrites Go's (?P<name> groups for JavaScript", () => {
    const s = loadSettings({ ...dog, ...tag, DOG_STATSD_MOGRIFIER_TAG_PATTERN: '^(?P<d>[a-z]+)$', USE_DOG_STATSD_MOGRIFIERS: 'TAG' });
    expect(s.stats.dogStatsdMogrifiers[0]!.pattern).toBe('^(?<d>[a-z]+)$');
  });

  it('a missing pattern or name is an error', () => {
    expect(errorOf({ ...dog, USE_DOG_STATSD_MOGRIFIERS: 'TAG' }).message).toBe(
      'missing value for DOG_STATSD_MOGRIFIER_TAG_PATTERN: mogrifier "TAG" listed in USE_DOG_STATSD_MOGRIFIERS needs a regular expression',
    );
    expect(errorOf({ ...dog, ...tag, DOG_STATSD_MOGRIFIER_TAG_NAME: '', USE_DOG_STATSD_MOGRIFIERS: 'TAG' }).message).toContain(
      'DOG_STATSD_MOGRIFIER_TAG_NAME',
    );
  });

  it('a bad pattern or tag is an error', () => {
    expect(errorOf({ ...dog, ...tag, DOG_STATSD_MOGRIFIER_TAG_PATTERN: '(', USE_DOG_STATSD_MOGRIFIERS: 'TAG' }).message).toMatch(
      /^invalid value "\(" for DOG_STATSD_MOGRIFIER_TAG_PATTERN: expected a regular expression/,
    );
    expect(errorOf({ ...dog, ...tag, DOG_STATSD_MOGRIFIER_TAG_TAGS: 'domain:$1,descriptor:', USE_DOG_STATSD_MOGRIFIERS: 'TAG' }).message).toContain(
      'tag "descriptor" has none',
    );
    expect(errorOf({ ...dog, ...tag, DOG_STATSD_MOGRIFIER_TAG_TAGS: ':5', USE_DOG_STATSD_MOGRIFIERS: 'TAG' }).message).toContain('empty key');
  });

  it('are ignored with a warning when the sink is not dogstatsd', () => {
    const s = loadSettings({ USE_DOG_STATSD_MOGRIFIERS: 'TAG' });
    expect(s.stats.dogStatsdMogrifiers).toEqual([]);
    expect(s.warnings).toEqual(['USE_DOG_STATSD_MOGRIFIERS is set but the stats sink is statsd, not dogstatsd: the mogrifiers are ignored']);
  });
});

describe('the memcache rule', () => {
  it('MEMCACHE_HOST_PORT and MEMCACHE_SRV both set is an error with upstream text', () => {
    expect(errorOf({ BACKEND_TYPE: 'memcache', MEMCACHE_HOST_PORT: 'a:1', MEMCACHE_SRV: '_mc._tcp.example' }).message).toBe(
      'Both MEMCACHE_HOST_PORT and MEMCACHE_SRV are set',
    );
  });

  it('names the spellings used', () => {
    expect(errorOf({ BACKEND_TYPE: 'altstore', ALTSTORE_HOST_PORT: 'a:1', ALTSTORE_SRV: '_mc._tcp.example' }).message).toBe(
      'Both ALTSTORE_HOST_PORT and ALTSTORE_SRV are set',
    );
  });

  it('is only checked when memcache is the backend, as upstream', () => {
    const s = loadSettings({ MEMCACHE_HOST_PORT: 'a:1', MEMCACHE_SRV: '_mc._tcp.example' });
    expect(s.cache.backendType).toBe('redis');
    expect(s.warnings).toEqual([
      "MEMCACHE_HOST_PORT, MEMCACHE_SRV are set but the counter store is redis (BACKEND_TYPE is unset: envoyproxy/ratelimit's default; BACKEND_TYPE=memcache selects memcache): ignored",
    ]);
  });

  it('either one alone is fine', () => {
    expect(loadSettings({ BACKEND_TYPE: 'memcache', MEMCACHE_HOST_PORT: 'a:1,b:2' }).memcache.hostPorts).toEqual(['a:1', 'b:2']);
    expect(loadSettings({ BACKEND_TYPE: 'memcache', MEMCACHE_SRV: '_mc._tcp.example' }).memcache.srv).toBe('_mc._tcp.example');
  });

  it('neither is a warning', () => {
    expect(loadSettings({ BACKEND_TYPE: 'memcache' }).warnings).toEqual([
      'the memcache backend has no servers: neither MEMCACHE_HOST_PORT nor MEMCACHE_SRV is set',
    ]);
  });

  it('MEMCACHE_TIMEOUT is 500 ms by default (gomemcache\'s), a Go duration, and must be positive when memcache is the backend', () => {
    const env = { BACKEND_TYPE: 'memcache', MEMCACHE_HOST_PORT: 'a:1' };
    expect(loadSettings(env).memcache.timeoutMs).toBe(500);
    expect(loadSettings({ ...env, MEMCACHE_TIMEOUT: '1.5s' }).memcache.timeoutMs).toBe(1500);
    expect(loadSettings({ ...env, ALTSTORE_TIMEOUT: '250ms' }).memcache.timeoutMs).toBe(250);
    expect(errorOf({ ...env, MEMCACHE_TIMEOUT: '0' }).message).toBe('MEMCACHE_TIMEOUT must be greater than 0 (every memcached command needs a deadline)');
    expect(loadSettings({ BACKEND_TYPE: 'redis', MEMCACHE_TIMEOUT: '0' }).cache.backendType).toBe('redis');
  });
});

describe('the sentinel rule', () => {
  const message =
    'Expected master name and a list of urls for the sentinels, in the format: <redis master name>,<sentinel1>,...,<sentineln>';

  it('a sentinel URL with fewer than 2 items is an error with upstream text', () => {
    expect(errorOf({ REDIS_TYPE: 'sentinel', REDIS_URL: 'mymaster' }).message).toBe(`invalid value "mymaster" for REDIS_URL: ${message}`);
    expect(errorOf({ STORE_TYPE: 'SENTINEL', STORE_URL: 'mymaster' }).message).toBe(`invalid value "mymaster" for STORE_URL: ${message}`);
  });

  it('the default URL with sentinel type and an explicit redis backend is an error too', () => {
    expect(errorOf({ BACKEND_TYPE: 'redis', REDIS_TYPE: 'sentinel' }).message).toContain(message);
  });

  it('master plus sentinels is fine', () => {
    expect(loadSettings({ REDIS_TYPE: 'sentinel', REDIS_URL: 'mymaster,s1:26379,s2:26379' }).redis.type).toBe('sentinel');
  });

  it('the per-second URL is checked only when REDIS_PERSECOND is on', () => {
    const base = { REDIS_URL: 'r:6379', REDIS_PERSECOND_TYPE: 'sentinel', REDIS_PERSECOND_URL: 'mymaster' };
    expect(loadSettings(base).redis.perSecond.type).toBe('sentinel');
    expect(errorOf({ ...base, REDIS_PERSECOND: 'true' }).message).toBe(`invalid value "mymaster" for REDIS_PERSECOND_URL: ${message}`);
  });

  it('is not checked when redis is not the backend', () => {
    expect(loadSettings({ BACKEND_TYPE: 'memory', REDIS_TYPE: 'sentinel' }).cache.backendType).toBe('memory');
  });
});

describe('REDIS_POOL_ON_EMPTY_BEHAVIOR', () => {
  it.each(['WAIT', 'wait', 'Wait'])('%s is fine', (value) => {
    const s = loadSettings({ REDIS_URL: 'r:1', REDIS_POOL_ON_EMPTY_BEHAVIOR: value });
    expect(s.redis.poolOnEmptyBehavior).toBe('WAIT');
    expect(s.warnings).toEqual([]);
  });

  it.each(['CREATE', 'create', 'ERROR', 'Error'])('%s is rejected at start-up', (value) => {
    const err = errorOf({ REDIS_URL: 'r:1', REDIS_POOL_ON_EMPTY_BEHAVIOR: value });
    expect(err.message).toMatch(new RegExp(`^invalid value "${value}" for REDIS_POOL_ON_EMPTY_BEHAVIOR: expected WAIT: ${value.toUpperCase()} is not supported`));
  });

  it('CREATE on the per-second twin is rejected when that instance is used', () => {
    const env = { REDIS_URL: 'r:1', REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR: 'CREATE' };
    expect(loadSettings(env).redis.perSecond.poolOnEmptyBehavior).toBe('WAIT');
    expect(errorOf({ ...env, REDIS_PERSECOND: 'true' }).message).toContain('for REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR: expected WAIT');
    expect(errorOf({ ...env, REDIS_PERSECOND: 'true' }).message).toContain('REDIS_PERSECOND_POOL_SIZE');
  });

  it('anything else warns and means WAIT', () => {
    const s = loadSettings({ REDIS_URL: 'r:1', REDIS_POOL_ON_EMPTY_BEHAVIOR: 'BLOCK' });
    expect(s.redis.poolOnEmptyBehavior).toBe('WAIT');
    expect(s.warnings).toEqual([
      'REDIS_POOL_ON_EMPTY_BEHAVIOR="BLOCK" is not a known behaviour: using WAIT (the pool blocks until a connection is free)',
    ]);
  });

  it('is not checked when redis is not the backend', () => {
    expect(loadSettings({ BACKEND_TYPE: 'memory', REDIS_POOL_ON_EMPTY_BEHAVIOR: 'CREATE' }).redis.poolOnEmptyBehavior).toBe('WAIT');
  });
});

describe('TLS settings', () => {
  it('TLS on any port needs the certificate and key files', () => {
    expect(errorOf({ HTTP_SERVER_USE_TLS: 'true' }).message).toBe(
      'HTTP_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY (certificate chain and key files)',
    );
    expect(errorOf({ GRPC_SERVER_USE_TLS: 'true', DEBUG_SERVER_USE_TLS: 'true', GRPC_SERVER_TLS_CERT: 'c' }).message).toMatch(
      /^GRPC_SERVER_USE_TLS, DEBUG_SERVER_USE_TLS=true needs/,
    );
  });

  it('GRPC_CLIENT_TLS_SAN needs a client CA', () => {
    expect(errorOf({ GRPC_CLIENT_TLS_SAN: 'envoy' }).message).toMatch(/^GRPC_CLIENT_TLS_SAN needs GRPC_CLIENT_TLS_CACERT/);
  });
});

describe('WORKERS', () => {
  it('1 is one process; 0 is one per CPU; N is N', () => {
    const redis = { REDIS_URL: 'r:6379' };
    expect(loadSettings(redis).server.workers).toBe(1);
    expect(loadSettings({ ...redis, WORKERS: '0' }).server.workers).toBe(availableParallelism());
    expect(loadSettings({ ...redis, WORKERS: '3' }).server.workers).toBe(3);
    expect(loadSettings({ BACKEND_TYPE: 'memcache', MEMCACHE_HOST_PORT: 'm:1', WORKERS: '2' }).server.workers).toBe(2);
    expect(errorOf({ ...redis, WORKERS: '-1' }).variable).toBe('WORKERS');
  });

  it('more than one process needs a shared counter store', () => {
    expect(errorOf({ WORKERS: '4' }).message).toBe(
      'WORKERS=4 needs a shared counter store (BACKEND_TYPE=redis or memcache): the memory store counts per process',
    );
    // Refused whatever the CPU count, so the same setting does not start on one machine only.
    expect(errorOf({ BACKEND_TYPE: 'memory', WORKERS: '0' }).message).toMatch(/^WORKERS=0 needs a shared counter store/);
    expect(loadSettings({ BACKEND_TYPE: 'memory', WORKERS: '1' }).server.workers).toBe(1);
  });
});

describe('warnings', () => {
  it('REDIS_PIPELINE_LIMIT is a real setting here (upstream deprecated it): no warning', () => {
    const s = loadSettings({ REDIS_URL: 'r:1', REDIS_PIPELINE_LIMIT: '8' });
    expect(s.warnings).toEqual([]);
    expect(s.redis.pipelineLimit).toBe(8);
  });

  it('Redis settings without the redis backend are reported, as spelled', () => {
    expect(loadSettings({ BACKEND_TYPE: 'memory', STORE_POOL_SIZE: '5', REDIS_TYPE: 'cluster' }).warnings).toEqual([
      'REDIS_TYPE, STORE_POOL_SIZE are set but the counter store is memory (BACKEND_TYPE=memory): ignored',
    ]);
    expect(loadSettings({ BACKEND_TYPE: 'memcache', MEMCACHE_HOST_PORT: 'm:1', REDIS_URL: 'r:1' }).warnings).toEqual([
      'REDIS_URL is set but the counter store is memcache (BACKEND_TYPE=memcache): ignored',
    ]);
  });

  it('a clean configuration has none', () => {
    expect(loadSettings({ REDIS_URL: 'r:6379', REDIS_SOCKET_TYPE: 'tcp', REDIS_TYPE: 'single' }).warnings).toEqual([]);
  });
});

describe('loadReloadableFlags', () => {
  it('has the defaults', () => {
    expect(loadReloadableFlags({})).toEqual(DEFAULTS.reloadable);
  });

  it('reads the flags and header names', () => {
    const flags = loadReloadableFlags({
      SHADOW_MODE: 'true',
      QUOTA_MODE: '1',
      RESPONSE_DYNAMIC_METADATA: 'T',
      MERGE_DOMAIN_CONFIG: 'True',
      LIMIT_RESPONSE_HEADERS_ENABLED: 'TRUE',
      LIMIT_LIMIT_HEADER: 'X-Limit',
      LIMIT_REMAINING_HEADER: 'X-Remaining',
      LIMIT_RESET_HEADER: 'X-Reset',
    });
    expect(flags).toEqual({
      shadowMode: true,
      quotaMode: true,
      responseDynamicMetadata: true,
      mergeDomainConfig: true,
      responseHeaders: { enabled: true, limitHeader: 'X-Limit', remainingHeader: 'X-Remaining', resetHeader: 'X-Reset' },
    });
    expect(Object.isFrozen(flags.responseHeaders)).toBe(true);
  });

  it('uses the same parser and errors', () => {
    expect(() => loadReloadableFlags({ SHADOW_MODE: 'yes' })).toThrow(
      new SettingsError('invalid value "yes" for SHADOW_MODE: expected a boolean (true, false, 1, 0, t, f)'),
    );
  });

  it('ignores everything else, even invalid values', () => {
    expect(loadReloadableFlags({ PORT: 'x', SHADOW_MODE: 'true' }).shadowMode).toBe(true);
  });

  it('matches what loadSettings reads', () => {
    const env = { SHADOW_MODE: 'true', LIMIT_RESET_HEADER: 'X-Reset' };
    expect(loadReloadableFlags(env)).toEqual(loadSettings(env).reloadable);
  });
});
