/**
 * End to end with real memcached: BACKEND_TYPE=memcache (and the seed's altstore spelling),
 * health that turns healthy (upstream never does), fail-open reads while the node is down,
 * recovery without a restart, keys memcached cannot hold answered with a clear error, and a hung
 * memcached answered per BACKEND_FAILURE_MODE within MEMCACHE_TIMEOUT.
 */
import fs from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import { RateLimitQuotaServiceClient } from '../../generated/envoy/service/rate_limit_quota/v3/rlqs';
import { incrementsProcessed, MemcachedServer } from '../support/memcached';
import { openQuotaStream } from '../support/rlqs-stream';
import { baseEnv, httpGet, httpPost, runtimeDir, startService } from './harness';
import { waitFor } from '../support/wait';

const CONFIG = `
domain: mc
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 5}
`;
const json = (v: string) => JSON.stringify({ domain: 'mc', descriptors: [{ entries: [{ key: 'user', value: v }] }] });
const remaining = async (address: string, v: string): Promise<number | undefined> =>
  JSON.parse((await httpPost(address, '/json', json(v))).body).statuses[0].limitRemaining;

test('ratelimit on memcached: counting, health, fail-open outage, recovery, invalid keys', async () => {
  const mc = await MemcachedServer.start();
  const dir = runtimeDir({ 'mc.yaml': CONFIG });
  const svc = await startService({
    ...baseEnv(dir.root),
    BACKEND_TYPE: 'altstore',
    ALTSTORE_HOST_PORT: `127.0.0.1:${mc.port}`,
  });
  try {
    expect(svc.output()).toContain('counter store: memcache (BACKEND_TYPE=altstore)');
    expect(await httpGet(svc.http, '/healthcheck')).toEqual({ status: 200, body: 'OK' });
    // Increments are asynchronous (as upstream): wait for each one to land before the next read.
    const seen: Array<number | undefined> = [];
    for (let i = 0; i < 3; i++) {
      seen.push(await remaining(svc.http, 'alice'));
      await waitFor(async () => (await incrementsProcessed(mc.port)) === i + 1, `increment ${i + 1} to land in memcached`);
    }
    expect(seen).toEqual([4, 3, 2]);

    await mc.kill();
    await waitFor(async () => (await httpGet(svc.http, '/healthcheck')).status === 500, '(await httpGet(svc.http, \'/healthcheck\')).status === 500');
    // Upstream's fail-open: counts read as 0, so every request is allowed with remaining 4.
    expect(await remaining(svc.http, 'alice')).toBe(4);
    expect((await httpGet(svc.debug, '/stats')).body).toMatch(/^ratelimit\.memcache\.multiget\.__code=error: [1-9]\d*$/m);

    await mc.restart();
    await waitFor(async () => (await httpGet(svc.http, '/healthcheck')).status === 200, '(await httpGet(svc.http, \'/healthcheck\')).status === 200');
    expect(await remaining(svc.http, 'bob')).toBe(4);

    const bad = await httpPost(svc.http, '/json', json('has space'));
    expect(bad.status).toBe(400);
    expect(bad.headers.get('x-error-detail')).toMatch(/memcached key .* is invalid: it contains whitespace/);
  } finally {
    expect(await svc.stop()).toBe(0);
    await mc.stop();
    fs.rmSync(dir.base, { recursive: true, force: true });
  }
});

test('a hung memcached (SIGSTOP) under steady traffic: BACKEND_FAILURE_MODE=deny answers 429 within MEMCACHE_TIMEOUT (500 ms by default), and counting resumes after SIGCONT', async () => {
  const TIMEOUT_MS = 500;
  const MARGIN_MS = 1000; // a spawned service and HTTP on a loaded 2-core machine
  const mc = await MemcachedServer.start();
  const dir = runtimeDir({ 'mc.yaml': CONFIG });
  const svc = await startService({
    ...baseEnv(dir.root),
    BACKEND_TYPE: 'memcache',
    MEMCACHE_HOST_PORT: mc.address,
    BACKEND_FAILURE_MODE: 'deny',
    BACKEND_CIRCUIT_OPEN_DURATION: '200ms',
  });
  try {
    expect(await remaining(svc.http, 'carol')).toBe(4);
    await mc.pause();
    // A call every few milliseconds whatever the earlier ones do, as real traffic: memjs's own
    // timeout is an idle timeout that each write restarts, so only a per-command deadline ends it.
    const calls: Array<Promise<{ status: number; ms: number }>> = [];
    for (let i = 0; i < 150; i++) {
      const t0 = Date.now();
      calls.push(httpPost(svc.http, '/json', json('carol')).then((r) => ({ status: r.status, ms: Date.now() - t0 })));
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    const answers = await Promise.all(calls);
    expect(answers.filter((a) => a.status !== 429)).toEqual([]);
    expect(answers.filter((a) => a.ms >= TIMEOUT_MS + MARGIN_MS)).toEqual([]);
    expect((await httpGet(svc.debug, '/stats')).body).toMatch(/^ratelimit\.memcache\.multiget\.__code=error: [1-9]\d*$/m);

    mc.resume();
    await waitFor(async () => (await httpPost(svc.http, '/json', json('dave'))).status === 200, 'calls to be counted again after SIGCONT');
  } finally {
    mc.resume();
    expect(await svc.stop()).toBe(0);
    await mc.stop();
    fs.rmSync(dir.base, { recursive: true, force: true });
  }
});

test('a token_bucket rule is refused on memcached at load, with one clear line naming the rule', async () => {
  const mc = await MemcachedServer.start();
  const dir = runtimeDir({
    'tb.yaml': 'domain: tb\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5, algorithm: token_bucket}\n',
  });
  try {
    // Listening without a config (a refused first config otherwise keeps the ports closed).
    const svc = await startService({
      ...baseEnv(dir.root),
      BACKEND_TYPE: 'memcache',
      MEMCACHE_HOST_PORT: `127.0.0.1:${mc.port}`,
      FORCE_START_WITHOUT_INITIAL_CONFIG: 'true',
    });
    try {
      expect(svc.output()).toContain(
        "Error loading new configuration: tb.yaml: rate limit 'tb.k': algorithm token_bucket is not supported by the memcache store",
      );
      expect((await httpGet(svc.debug, '/rlconfig')).body).toBe('');
    } finally {
      expect(await svc.stop()).toBe(0);
    }
  } finally {
    await mc.stop();
    fs.rmSync(dir.base, { recursive: true, force: true });
  }
});

test('a memcached start says nothing about RLQS; the first RLQS stream warns, once, that limits are divided per process', async () => {
  const mc = await MemcachedServer.start();
  const dir = runtimeDir({ 'gw.yaml': 'domain: gw\ndescriptors:\n  - key: api\n    rate_limit: {unit: second, requests_per_unit: 100}\n' });
  const RLQS_WARNING = 'RLQS divides each limit among the streams of each process';
  try {
    const svc = await startService({ ...baseEnv(dir.root), BACKEND_TYPE: 'memcache', MEMCACHE_HOST_PORT: `127.0.0.1:${mc.port}` });
    const client = new RateLimitQuotaServiceClient(svc.grpc, grpc.credentials.createInsecure());
    try {
      // Everything logged before listening has been read with the `listening` line.
      expect(svc.output()).not.toContain('RLQS');
      const streams = [openQuotaStream(client), openQuotaStream(client)];
      for (const s of streams) {
        s.report('search', 0, 1);
        await s.next();
      }
      for (const s of streams) {
        s.call.end();
        await s.ended();
      }
    } finally {
      client.close();
      expect(await svc.stop()).toBe(0);
    }
    // The log is read whole once its last line, written after both streams, has come.
    await waitFor(() => svc.output().includes('msg="stopped"'), 'the last line of the log');
    expect(svc.output().split(RLQS_WARNING)).toHaveLength(2);
  } finally {
    await mc.stop();
    fs.rmSync(dir.base, { recursive: true, force: true });
  }
});
