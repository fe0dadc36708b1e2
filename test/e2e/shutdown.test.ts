/**
 * End to end: a stop is bounded whatever the store does (SHUTDOWN_DRAIN_TIMEOUT plus one second
 * from the signal to the exit), on both gRPC transports and in worker mode, and SHUTDOWN_DELAY
 * keeps serving with health unhealthy before the drain.
 */
import { MemcachedServer } from '../support/memcached';
import { type RedisServer, startRedis } from '../support/redis';
import { baseEnv, callGrpc, descriptor, grpcClient, httpGet, httpPost, runtimeDir, type Service, startService } from './harness';
import { waitFor } from '../support/wait';

const CONFIG = 'domain: bye\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 100}\n';
const REQUEST = JSON.stringify({ domain: 'bye', descriptors: [{ entries: [{ key: 'k', value: 'v' }] }] });
const DRAIN_MS = 1500;

/** Sends `signal` and resolves with the milliseconds until the process has exited, and its code. */
async function timeStop(svc: Service, signal: NodeJS.Signals = 'SIGTERM'): Promise<{ ms: number; code: number | null }> {
  const exited = new Promise<number | null>((resolve) => svc.proc.once('exit', (code) => resolve(code)));
  const started = performance.now();
  svc.proc.kill(signal);
  const code = await exited;
  return { ms: performance.now() - started, code };
}

/** A call that is in flight (its store hangs): resolves once the service has it, never settles after. */
async function hangingCalls(svc: Service): Promise<void> {
  const client = grpcClient(svc.grpc);
  void callGrpc(client, { domain: 'bye', descriptors: [descriptor('k', 'grpc')] }).catch(() => undefined);
  void httpPost(svc.http, '/json', REQUEST).catch(() => undefined);
  // The service has both once its gRPC counter shows the call (the HTTP one was sent first).
  await waitFor(async () => /ShouldRateLimit\.total_requests: [1-9]/.test((await httpGet(svc.debug, '/stats')).body), '/ShouldRateLimit\\.total_requests: [1-9]/.test((await httpGet(svc.de...');
}

describe('a stop takes at most SHUTDOWN_DRAIN_TIMEOUT + 1 s, whatever the store does', () => {
  let redis: RedisServer;
  beforeAll(async () => {
    redis = await startRedis();
  });
  afterAll(async () => {
    redis.resume();
    await redis.stop();
  });
  /** The service on this Redis, with a Redis timeout far beyond the drain. */
  const onHungRedis = (root: string): NodeJS.ProcessEnv => ({
    ...baseEnv(root),
    BACKEND_TYPE: 'redis',
    REDIS_SOCKET_TYPE: 'tcp',
    REDIS_URL: redis.address,
    REDIS_TIMEOUT: '30s',
    SHUTDOWN_DRAIN_TIMEOUT: `${DRAIN_MS}ms`,
  });

  test.each(['grpc-js', 'socket'])('Redis hung (SIGSTOP) with REDIS_TIMEOUT=30s, GRPC_TRANSPORT=%s', async (transport) => {
    const dir = runtimeDir({ 'a.yaml': CONFIG });
    const svc = await startService({ ...onHungRedis(dir.root), GRPC_TRANSPORT: transport });
    try {
      expect((await httpPost(svc.http, '/json', REQUEST)).status).toBe(200); // connected
      redis.pause();
      await hangingCalls(svc);
      const { ms, code } = await timeStop(svc);
      expect(code).toBe(0);
      expect(ms).toBeLessThan(DRAIN_MS + 1000);
      expect(svc.output()).toMatch(/in-flight calls did not finish within 1500 ms; closing them/);
    } finally {
      redis.resume();
      await svc.stop('SIGKILL');
    }
  });

  test('worker mode (WORKERS=2) with Redis hung: the primary and its workers are gone within the bound', async () => {
    const dir = runtimeDir({ 'a.yaml': CONFIG });
    const svc = await startService({ ...onHungRedis(dir.root), WORKERS: '2' });
    try {
      expect((await httpPost(svc.http, '/json', REQUEST)).status).toBe(200);
      redis.pause();
      void httpPost(svc.http, '/json', REQUEST).catch(() => undefined);
      void httpPost(svc.http, '/json', REQUEST).catch(() => undefined);
      const { ms } = await timeStop(svc);
      expect(ms).toBeLessThan(DRAIN_MS + 1000);
    } finally {
      redis.resume();
      await svc.stop('SIGKILL');
    }
  });

  test('Memcached hung (SIGSTOP) with MEMCACHE_TIMEOUT=30s', async () => {
    const mc = await MemcachedServer.start();
    const dir = runtimeDir({ 'a.yaml': CONFIG });
    const svc = await startService({
      ...baseEnv(dir.root),
      BACKEND_TYPE: 'memcache',
      MEMCACHE_HOST_PORT: mc.address,
      // Far beyond the drain, so the calls are still waiting when the stop begins.
      MEMCACHE_TIMEOUT: '30s',
      SHUTDOWN_DRAIN_TIMEOUT: `${DRAIN_MS}ms`,
    });
    try {
      expect((await httpPost(svc.http, '/json', REQUEST)).status).toBe(200);
      await mc.pause();
      await hangingCalls(svc);
      const { ms, code } = await timeStop(svc);
      expect(code).toBe(0);
      expect(ms).toBeLessThan(DRAIN_MS + 1000);
    } finally {
      await mc.kill();
      await svc.stop('SIGKILL');
    }
  });
});

describe('SHUTDOWN_DELAY', () => {
  test.each(['grpc-js', 'socket'])('health answers 500 / NOT_SERVING while /json and gRPC keep serving, then it drains and exits (%s)', async (transport) => {
    const dir = runtimeDir({ 'a.yaml': CONFIG });
    const svc = await startService({ ...baseEnv(dir.root), SHUTDOWN_DELAY: '3s', GRPC_TRANSPORT: transport });
    try {
      expect((await httpGet(svc.http, '/healthcheck')).status).toBe(200);
      const exited = new Promise<number | null>((resolve) => svc.proc.once('exit', (code) => resolve(code)));
      svc.proc.kill('SIGTERM');
      await waitFor(async () => (await httpGet(svc.http, '/healthcheck')).status === 500, '(await httpGet(svc.http, \'/healthcheck\')).status === 500');
      // Still serving on both ports while health is unhealthy.
      expect((await httpPost(svc.http, '/json', REQUEST)).status).toBe(200);
      const answer = await callGrpc(grpcClient(svc.grpc), { domain: 'bye', descriptors: [descriptor('k', 'v')] });
      expect(answer.overallCode).toBe(1); // OK
      expect(svc.output()).not.toMatch(/draining in-flight calls/);
      expect(await exited).toBe(0);
      expect(svc.output()).toMatch(/health answers unhealthy for 3000 ms before the drain[\s\S]*draining in-flight calls[\s\S]*stopped/);
    } finally {
      await svc.stop('SIGKILL');
    }
  });

  test('default 0: the drain starts at once', async () => {
    const dir = runtimeDir({ 'a.yaml': CONFIG });
    const svc = await startService(baseEnv(dir.root));
    expect(await svc.stop('SIGTERM')).toBe(0);
    expect(svc.output()).not.toMatch(/before the drain/);
    expect(svc.output()).toMatch(/draining in-flight calls/);
  });
});
