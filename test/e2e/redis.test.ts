/**
 * End to end with a real Redis: the service counts in Redis with upstream's keys, two instances
 * share one budget, a Redis outage is answered per BACKEND_FAILURE_MODE within REDIS_TIMEOUT, and
 * counting resumes exactly when Redis returns, without restarting the service.
 */
import fs from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import { RateLimitQuotaServiceClient } from '../../generated/envoy/service/rate_limit_quota/v3/rlqs';
import { type RedisServer, startCluster, startRedis } from '../support/redis';
import { openQuotaStream } from '../support/rlqs-stream';
import { baseEnv, callGrpc, descriptor, grpcClient, httpGet, httpPost, runtimeDir, type Service, startService } from './harness';
import { inOneWindow, waitFor } from '../support/wait';

const CONFIG = `
domain: rd
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 100}
`;

function redisEnv(root: string, redis: { address: string }, extra: Record<string, string> = {}) {
  const env: NodeJS.ProcessEnv = { ...baseEnv(root), REDIS_SOCKET_TYPE: 'tcp', REDIS_URL: redis.address, REDIS_TIMEOUT: '500ms', ...extra };
  delete env['BACKEND_TYPE'];
  return env;
}

const json = (v: string) => JSON.stringify({ domain: 'rd', descriptors: [{ entries: [{ key: 'user', value: v }] }] });

describe('ratelimit on Redis', () => {
  let redis: RedisServer;
  let dir: ReturnType<typeof runtimeDir>;
  const services: Service[] = [];

  beforeAll(async () => {
    redis = await startRedis();
    dir = runtimeDir({ 'rd.yaml': CONFIG });
  });
  afterEach(async () => {
    for (const s of services.splice(0)) expect(await s.stop()).toBe(0);
    if (!redis.running) await redis.restart();
    await redis.cli(['FLUSHALL']);
  });
  afterAll(async () => {
    await redis.stop();
    fs.rmSync(dir.base, { recursive: true, force: true });
  });

  test('REDIS_URL selects Redis; keys, counts and TTLs are upstream\'s', async () => {
    const svc = await startService(redisEnv(dir.root, redis, { EXPIRATION_JITTER_MAX_SECONDS: '0', CACHE_KEY_PREFIX: 'p:' }));
    services.push(svc);
    expect(svc.output()).toContain("counter store: redis (BACKEND_TYPE is unset and REDIS_SOCKET_TYPE, REDIS_URL, REDIS_TIMEOUT are set: envoyproxy/ratelimit's default store)");
    const client = grpcClient(svc.grpc);
    const res = await callGrpc(client, { domain: 'rd', descriptors: [descriptor('user', 'alice'), descriptor('ip', '10.0.0.1')] });
    client.close();
    expect(res.statuses.map((s) => s.limitRemaining)).toEqual([4, 99]);
    const keys = (await redis.cli(['KEYS', '*'])).trim().split('\n').sort();
    const nowS = Math.floor(Date.now() / 1000);
    expect(keys).toHaveLength(2);
    const hourKey = keys.find((k) => k.startsWith('p:rd_user_alice_'))!;
    const minuteKey = keys.find((k) => k.startsWith('p:rd_ip_10.0.0.1_'))!;
    expect(Number(hourKey.split('_').pop()) % 3600).toBe(0);
    expect(Math.abs(Number(hourKey.split('_').pop()) - (nowS - (nowS % 3600)))).toBeLessThanOrEqual(3600);
    expect(Number(minuteKey.split('_').pop()) % 60).toBe(0);
    expect((await redis.cli(['GET', hourKey])).trim()).toBe('1');
    const ttl = Number((await redis.cli(['TTL', hourKey])).trim());
    expect(ttl).toBeGreaterThan(3590);
    expect(ttl).toBeLessThanOrEqual(3600);
    // A clean stop closes the store without calling it unhealthy.
    services.splice(services.indexOf(svc), 1);
    expect(await svc.stop()).toBe(0);
    expect(svc.output()).toContain('stopped');
    expect(svc.output()).not.toContain('store: unhealthy');
  });

  test('REDIS_BATCH_SCRIPT=true counts the same keys through one EVAL per pipeline', async () => {
    const svc = await startService(redisEnv(dir.root, redis, { REDIS_BATCH_SCRIPT: 'true', EXPIRATION_JITTER_MAX_SECONDS: '0' }));
    services.push(svc);
    await redis.cli(['CONFIG', 'RESETSTAT']);
    const client = grpcClient(svc.grpc);
    const remaining: number[][] = [];
    for (let i = 0; i < 6; i++) {
      const res = await callGrpc(client, { domain: 'rd', descriptors: [descriptor('user', 'scripted'), descriptor('ip', '10.0.0.2')] });
      remaining.push(res.statuses.map((st) => st.limitRemaining));
    }
    client.close();
    expect(remaining).toEqual([[4, 99], [3, 98], [2, 97], [1, 96], [0, 95], [0, 94]]);
    const keys = (await redis.cli(['KEYS', 'rd_user_scripted_*'])).trim();
    expect((await redis.cli(['GET', keys])).trim()).toBe('6');
    expect(Number((await redis.cli(['TTL', keys])).trim())).toBeGreaterThan(3590);
    const stats = (await redis.cli(['INFO', 'commandstats'])).replace(/\r/g, '');
    expect(stats).toMatch(/^cmdstat_eval:calls=6,/m);
    expect(stats).toMatch(/^cmdstat_incrby:calls=12,/m);
  });

  test('/debug/explain shows the count stored in Redis', async () => {
    const svc = await startService(redisEnv(dir.root, redis));
    services.push(svc);
    for (let i = 0; i < 2; i++) await httpPost(svc.http, '/json', json('explained'));
    const res = await httpGet(svc.debug, '/debug/explain?domain=rd&descriptors=user=explained');
    expect(res.body).toContain('count: 2 of 5 in this window');
  });

  test('RLQS opens its Redis connection with the first stream: one connection until then, two after', async () => {
    const gw = runtimeDir({ 'gw.yaml': 'domain: gw\ndescriptors:\n  - key: api\n    rate_limit: {unit: second, requests_per_unit: 100}\n' });
    const svc = await startService(redisEnv(gw.root, redis, { REDIS_POOL_SIZE: '1' }));
    services.push(svc);
    // The service's connections: every client but redis-cli's own, which is running CLIENT LIST.
    const connections = async (): Promise<number> =>
      (await redis.cli(['CLIENT', 'LIST'])).split('\n').filter((l) => l.startsWith('id=') && !/ cmd=client/.test(l)).length;
    // (waited for: the connections of the services stopped after the previous test may still be closing)
    await waitFor(async () => (await connections()) === 1, 'one connection, the counters\' pool of one');
    const client = new RateLimitQuotaServiceClient(svc.grpc, grpc.credentials.createInsecure());
    try {
      const stream = openQuotaStream(client);
      stream.report('search', 0, 1);
      await stream.next();
      await waitFor(async () => (await connections()) === 2, 'the RLQS connection');
      stream.call.end();
      await stream.ended();
    } finally {
      client.close();
      fs.rmSync(gw.base, { recursive: true, force: true });
    }
    // Opened on demand, it is announced at info level, not as a warning.
    await waitFor(() => /level=info msg="connecting to redis rlqs on /.test(svc.output()), 'the RLQS connection announced at info level');
  });

  test('two instances share one budget through Redis', async () => {
    const a = await startService(redisEnv(dir.root, redis));
    const b = await startService(redisEnv(dir.root, redis));
    services.push(a, b);
    await inOneWindow(3_600_000);
    const codes: number[] = [];
    for (let i = 0; i < 6; i++) codes.push((await httpPost(i % 2 === 0 ? a.http : b.http, '/json', json('shared'))).status);
    expect(codes).toEqual([200, 200, 200, 200, 200, 429]);
  });

  test.each([
    ['error', 400],
    ['allow', 200],
    ['deny', 429],
  ])('Redis down with BACKEND_FAILURE_MODE=%s answers %d within the timeout, and counting resumes after', async (mode, status) => {
    const svc = await startService(redisEnv(dir.root, redis, { BACKEND_FAILURE_MODE: mode, BACKEND_CIRCUIT_OPEN_DURATION: '200ms' }));
    services.push(svc);
    expect((await httpPost(svc.http, '/json', json('outage'))).status).toBe(200);
    await redis.kill();
    for (let i = 0; i < 8; i++) {
      const started = Date.now();
      const res = await httpPost(svc.http, '/json', json('outage'));
      expect(res.status).toBe(status);
      expect(Date.now() - started).toBeLessThan(1500);
    }
    const stats = (await httpGet(svc.debug, '/stats')).body;
    expect(stats).toMatch(/^ratelimit\.service\.call\.should_rate_limit\.redis_error: [1-9]\d*$/m);
    expect(stats).toMatch(/^ratelimit\.redis\.circuit_opened: [1-9]\d*$/m);
    await redis.restart();
    // Redis came back empty: after the circuit closes, each request counts exactly once.
    await waitFor(async () => {
      const r = await httpPost(svc.http, '/json', json('after'));
      return r.status === 200 && JSON.parse(r.body).statuses[0].currentLimit !== undefined;
    }, '{ const r = await httpPost(svc.http, \'/json\', json(\'after\')); retur...');
    const remaining: number[] = [];
    for (let i = 0; i < 3; i++) {
      remaining.push(JSON.parse((await httpPost(svc.http, '/json', json('after'))).body).statuses[0].limitRemaining);
    }
    expect(remaining).toEqual([3, 2, 1]);
  });

  test('start-up waits for Redis (no crash loop) and listens once it answers', async () => {
    const port = redis.port;
    await redis.kill();
    let retried!: () => void;
    const retrying = new Promise<void>((resolve) => (retried = resolve));
    const env = redisEnv(dir.root, { address: `127.0.0.1:${port}` }, { REDIS_STARTUP_INITIAL_INTERVAL: '100ms', REDIS_STARTUP_MAX_INTERVAL: '200ms' });
    const pending = startService(env, 15_000, undefined, (out) => {
      if (/\(attempt 2\): .*; retrying in \d+ ms/.test(out)) retried();
    });
    // It failed twice and is still trying (no exit, no crash loop) before Redis comes back.
    await retrying;
    await redis.restart();
    const svc = await pending;
    services.push(svc);
    const out = svc.output();
    expect(out).toMatch(new RegExp(`failed to connect to redis on 127\\.0\\.0\\.1:${port} \\(attempt 1\\): .*; retrying in \\d+ ms`));
    expect(out).toMatch(new RegExp(`msg="connected to redis on 127\\.0\\.0\\.1:${port}"`));
    expect(out.indexOf('connected to redis on')).toBeGreaterThan(out.indexOf('(attempt 2)'));
    expect((await httpPost(svc.http, '/json', json('late'))).status).toBe(200);
  });

  test('REDIS_STARTUP_MAX_ELAPSED_TIME gives up with a clear error', async () => {
    const port = redis.port;
    await redis.kill();
    const { run } = await import('./harness');
    const res = await run(
      'ratelimit.js',
      [],
      redisEnv(dir.root, { address: `127.0.0.1:${port}` }, { REDIS_STARTUP_INITIAL_INTERVAL: '50ms', REDIS_STARTUP_MAX_ELAPSED_TIME: '300ms' }),
    );
    expect(res.code).toBe(1);
    expect(res.stderr).toMatch(/timed out waiting for Redis connection to 127\.0\.0\.1:\d+/);
  });

  test('REDIS_HEALTH_CHECK_ACTIVE_CONNECTION: health follows the connection', async () => {
    const svc = await startService(redisEnv(dir.root, redis, { REDIS_HEALTH_CHECK_ACTIVE_CONNECTION: 'true' }));
    services.push(svc);
    expect((await httpGet(svc.http, '/healthcheck')).status).toBe(200);
    await redis.kill();
    await waitFor(async () => (await httpGet(svc.http, '/healthcheck')).status === 500, '(await httpGet(svc.http, \'/healthcheck\')).status === 500');
    await redis.restart();
    await waitFor(async () => (await httpGet(svc.http, '/healthcheck')).status === 200, '(await httpGet(svc.http, \'/healthcheck\')).status === 200');
  });
});

test('Redis restarted with a new password: named once in the log, health 500 with REDIS_HEALTH_CHECK_ACTIVE_CONNECTION, calls fail until it matches', async () => {
  const first = await startRedis({ password: 'old-pw' });
  const dir = runtimeDir({ 'rd.yaml': CONFIG });
  let second: RedisServer | undefined;
  const svc = await startService(redisEnv(dir.root, first, { REDIS_AUTH: 'old-pw', REDIS_HEALTH_CHECK_ACTIVE_CONNECTION: 'true' }));
  try {
    expect((await httpPost(svc.http, '/json', json('pw'))).status).toBe(200);
    await first.kill();
    second = await startRedis({ port: first.port, password: 'new-pw' });
    await waitFor(async () => (await httpGet(svc.http, '/healthcheck')).status === 500, 'health to go down');
    await waitFor(() => svc.output().includes('refuses our credentials'), 'the line naming the refusal');
    for (let i = 0; i < 5; i++) expect((await httpPost(svc.http, '/json', json('pw'))).status).toBe(400);
    const stats = (await httpGet(svc.debug, '/stats')).body;
    expect(stats).toMatch(/^ratelimit\.redis\.auth_failed: 1$/m);
    expect(svc.output().match(/refuses our credentials/g)).toHaveLength(1);
    expect(svc.output()).toContain(`msg="redis: ${first.address} refuses our credentials (WRONGPASS invalid username-password pair or user is disabled.): every call fails until REDIS_AUTH matches the server's password"`);
    expect(svc.output()).not.toMatch(/circuit opened/);
    await second.cli(['CONFIG', 'SET', 'requirepass', 'old-pw']);
    await waitFor(async () => (await httpGet(svc.http, '/healthcheck')).status === 200, 'health to be back');
    expect((await httpPost(svc.http, '/json', json('pw'))).status).toBe(200);
    expect(svc.output()).toContain(`msg="redis: ${first.address} accepts our credentials again"`);
  } finally {
    expect(await svc.stop()).toBe(0);
    await Promise.all([first.stop(), second?.stop()]);
    fs.rmSync(dir.base, { recursive: true, force: true });
  }
});

test('ratelimit on a three-master Redis Cluster counts keys of different slots in one request', async () => {
  const cluster = await startCluster({ masters: 3 });
  const dir = runtimeDir({ 'rd.yaml': CONFIG });
  const svc = await startService(redisEnv(dir.root, { address: cluster.url }, { REDIS_TYPE: 'cluster' }));
  try {
    const client = grpcClient(svc.grpc);
    const descriptors = ['a', 'b', 'c', 'd', 'e'].map((v) => descriptor('user', v));
    await callGrpc(client, { domain: 'rd', descriptors });
    const res = await callGrpc(client, { domain: 'rd', descriptors });
    client.close();
    expect(res.statuses.map((s) => s.limitRemaining)).toEqual([3, 3, 3, 3, 3]);
    const nowS = Math.floor(Date.now() / 1000);
    const slots = new Set<number>();
    for (const v of ['a', 'b', 'c', 'd', 'e']) {
      const key = `rd_user_${v}_${nowS - (nowS % 3600)}`;
      slots.add(await cluster.keySlot(key));
      const node = await cluster.nodeForKey(key);
      expect((await node.cli(['GET', key])).trim()).toBe('2');
    }
    expect(slots.size).toBeGreaterThan(1);
  } finally {
    expect(await svc.stop()).toBe(0);
    await cluster.stop();
    fs.rmSync(dir.base, { recursive: true, force: true });
  }
});
