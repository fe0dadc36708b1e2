/** Shared pieces of the Redis store tests: servers, settings, ops, a recording logger. */
import { Redis } from 'ioredis';
import { RedisStore, type RedisStoreOptions } from '../../../src/backends/redis/store';
import type { CounterOp } from '../../../src/core/store';
import type { RateLimitRule } from '../../../src/core/rule';
import type { RedisConnectionSettings, RedisSettings } from '../../../src/settings/settings';
import { StatsStore } from '../../../src/stats/store';
import type { Logger } from '../../../src/telemetry/logger';
import { Unit } from '../../../src/core/rls';
import { rule } from '../../limiter/helpers';
import { WirePipeline } from '../../../src/backends/redis/wire';
import { startRedis, type RedisServer } from '../../support/redis';

type ConnOverrides = Partial<RedisConnectionSettings>;

export function connectionSettings(over: ConnOverrides = {}): RedisConnectionSettings {
  return {
    socketType: 'tcp',
    type: 'single',
    url: '127.0.0.1:6379',
    poolSize: 2,
    auth: '',
    sentinelAuth: '',
    tls: false,
    pipelineWindowMs: 0,
    pipelineLimit: 0,
    clusterPipelineParallelism: 1,
    timeoutMs: 2000,
    poolOnEmptyBehavior: 'WAIT',
    ...over,
  };
}

/** RedisSettings with test-friendly defaults (fast start-up retry bounded at 5 s). */
export function redisSettings(
  over: Partial<Omit<RedisSettings, 'perSecond' | 'startup'>> & {
    perSecond?: ConnOverrides & { enabled?: boolean };
    startup?: Partial<RedisSettings['startup']>;
  } = {},
): RedisSettings {
  const { perSecond, startup, ...rest } = over;
  return {
    ...connectionSettings(rest),
    tlsClientCertFile: '',
    tlsClientKeyFile: '',
    tlsCaCertFile: '',
    tlsSkipHostnameVerification: false,
    healthCheckActiveConnection: false,
    batchScript: false,
    evictionCheckIntervalMs: 0,
    ...rest,
    startup: { initialIntervalMs: 50, maxIntervalMs: 200, maxElapsedTimeMs: 5000, ...startup },
    perSecond: { ...connectionSettings(perSecond), enabled: perSecond?.enabled ?? false },
  };
}

export interface LogLine {
  level: string;
  msg: string;
}

export function recordingLogger(): Logger & { lines: LogLine[] } {
  const lines: LogLine[] = [];
  const at =
    (level: string) =>
    (msg: string): void => {
      lines.push({ level, msg });
    };
  return { lines, debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error'), enabled: () => true };
}

export const stats = new StatsStore();

export function ruleOf(requestsPerUnit: number, unit: number = Unit.HOUR, key = `d.k${requestsPerUnit}`): RateLimitRule {
  return rule(stats, key, requestsPerUnit, unit);
}

const defaultRule = ruleOf(1000, Unit.MINUTE, 'd.default');

export function op(key: string, hits = 1, windowSeconds = 60, r: RateLimitRule = defaultRule): CounterOp {
  return { key, hits, windowSeconds, rule: r };
}

export function storeOptions(settings: RedisSettings, over: Partial<RedisStoreOptions> = {}): RedisStoreOptions {
  return {
    settings,
    jitterMaxSeconds: 0,
    stopIncrementWhenOverLimit: false,
    stats: new StatsStore(),
    logger: recordingLogger(),
    ...over,
  };
}

export function connectStore(settings: RedisSettings, over: Partial<RedisStoreOptions> = {}): Promise<RedisStore> {
  return RedisStore.connect(storeOptions(settings, over));
}

/** Awaits `p` and returns how long it took (ms) and its settlement. */
export async function timed<T>(p: Promise<T>): Promise<{ ms: number; value?: T; error?: unknown }> {
  const t0 = Date.now();
  try {
    const value = await p;
    return { ms: Date.now() - t0, value };
  } catch (error) {
    return { ms: Date.now() - t0, error };
  }
}

let seq = 0;
/** A key unique in this process (tests that share one server do not collide). */
export function uniqueKey(name: string): string {
  return `${name}_${process.pid}_${++seq}`;
}

/**
 * Counts the pipelines the store writes to a single or sentinel Redis: one call, one write, one
 * round trip. (A cluster's pipelines go through ioredis's Pipeline.exec instead.)
 */
export function pipelineSpy(): jest.SpyInstance {
  return jest.spyOn(WirePipeline.prototype, 'send');
}

/** A redis-server, a second one for the per-second instance, and a client reading the first directly. */
export interface RedisWithPerSecond {
  redis: RedisServer;
  second: RedisServer;
  reader: Redis;
}

export async function startRedisWithPerSecond(): Promise<RedisWithPerSecond> {
  const [redis, second] = await Promise.all([startRedis(), startRedis()]);
  const reader = new Redis({ host: redis.host, port: redis.port, lazyConnect: true });
  try {
    await reader.connect();
  } catch (error) {
    // The caller gets nothing to stop: stop the servers here.
    await stopRedisWithPerSecond({ redis, second, reader });
    throw error;
  }
  return { redis, second, reader };
}

/** Takes a partial set: an afterAll runs even when its beforeAll failed. */
export async function stopRedisWithPerSecond({ redis, second, reader }: Partial<RedisWithPerSecond>): Promise<void> {
  reader?.disconnect();
  await Promise.all([redis?.stop(), second?.stop()]);
}
