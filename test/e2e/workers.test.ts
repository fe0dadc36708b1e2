/**
 * Worker mode end to end (WORKERS=2, real Redis or memcached): one `listening:` line, both workers
 * serving, every hit counted once across them, totals on the primary's /stats and Prometheus
 * scrape, /rlconfig answered through the primary, a killed worker restarted, a clean SIGTERM, and
 * the start-up refusals (memory store, a worker that cannot start) ending with exit 1.
 */
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { RateLimitQuotaServiceClient } from '../../generated/envoy/service/rate_limit_quota/v3/rlqs';
import { openQuotaStream } from '../support/rlqs-stream';
import { incrementsProcessed, MemcachedServer } from '../support/memcached';
import { freePort } from '../support/ports';
import { type RedisServer, startRedis } from '../support/redis';
import { baseEnv, callGrpc, descriptor, grpcClient, httpGet, manyDescriptors, run, runtimeDir, type Service, startService } from './harness';
import { inOneWindow, waitFor } from '../support/wait';

const CONFIG = `
domain: wk
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
`;
/** A second domain for the merged pages: a candidate of 5 a minute beside the limit of 10. */
const HOT_CONFIG = `
domain: hk
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
    candidate: {unit: minute, requests_per_unit: 5}
`;
const json = (v: string): string => JSON.stringify({ domain: 'wk', descriptors: [{ entries: [{ key: 'user', value: v }] }] });

/** One request on its own connection: cluster hands each new connection to the next worker. */
function fresh(address: string, pathName: string, body?: string): Promise<{ status: number; worker: string | undefined; body: string }> {
  const [host, port] = [address.slice(0, address.lastIndexOf(':')), Number(address.slice(address.lastIndexOf(':') + 1))];
  return new Promise((resolve, reject) => {
    const req = http.request({ host, port, path: pathName, method: body === undefined ? 'GET' : 'POST', agent: false }, (res) => {
      let text = '';
      res.on('data', (d: Buffer) => (text += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode!, worker: res.headers['x-ratelimit-worker'] as string | undefined, body: text }));
    });
    req.on('error', reject);
    req.setTimeout(5000, () => req.destroy(new Error('timeout')));
    req.end(body);
  });
}

/** The pid of each worker slot as last started, from the primary's `worker N started (pid P)` lines. */
function workerPids(output: string): Map<number, number> {
  const pids = new Map<number, number>();
  for (const m of output.matchAll(/worker (\d+) started \(pid (\d+)\)/g)) pids.set(Number(m[1]), Number(m[2]));
  return pids;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

function portIsFree(address: string): Promise<boolean> {
  const port = Number(address.slice(address.lastIndexOf(':') + 1));
  return new Promise((resolve) => {
    const srv = net.createServer();
    srv.once('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
  });
}

const stat = (stats: string, name: string): number | undefined => {
  const m = new RegExp(`^${name.replace(/\./g, '\\.')}: (\\S+)$`, 'm').exec(stats);
  return m === null ? undefined : Number(m[1]);
};

describe('worker mode on Redis', () => {
  let redis: RedisServer;
  let dir: ReturnType<typeof runtimeDir>;
  const services: Service[] = [];

  const env = (extra: Record<string, string> = {}, root = dir.root): NodeJS.ProcessEnv => ({
    ...baseEnv(root),
    BACKEND_TYPE: 'redis',
    REDIS_SOCKET_TYPE: 'tcp',
    REDIS_URL: redis.address,
    WORKERS: '2',
    ...extra,
  });

  beforeAll(async () => {
    redis = await startRedis();
    dir = runtimeDir({ 'wk.yaml': CONFIG, 'hk.yaml': HOT_CONFIG });
  });
  afterEach(async () => {
    for (const s of services.splice(0)) await s.stop('SIGKILL');
    await redis.cli(['FLUSHALL']);
  });
  afterAll(async () => {
    await redis.stop();
    fs.rmSync(dir.base, { recursive: true, force: true });
  });

  test('both workers serve; every hit counts once; /stats and /rlconfig through the primary; SIGTERM drains all', async () => {
    const svc = await startService(env());
    services.push(svc);
    const pids = workerPids(svc.output());
    expect(pids.size).toBe(2);

    // Both workers answer, and say so on /healthcheck.
    const seen = new Set<string>();
    for (let i = 0; i < 8; i++) {
      const r = await fresh(svc.http, '/healthcheck');
      expect(r.status).toBe(200);
      seen.add(r.worker!);
    }
    expect([...seen].sort()).toEqual(['1', '2']);

    // 15 hits on a limit of 10 a minute: 8 over /json (new connection each), 7 over gRPC (3 clients).
    await inOneWindow(60_000);
    const codes: string[] = [];
    for (let i = 0; i < 8; i++) {
      const r = await fresh(svc.http, '/json', json('alice'));
      codes.push(JSON.parse(r.body).overallCode);
    }
    const clients = [grpcClient(svc.grpc), grpcClient(svc.grpc), grpcClient(svc.grpc)];
    for (let i = 0; i < 7; i++) {
      const res = await callGrpc(clients[i % 3]!, { domain: 'wk', descriptors: [descriptor('user', 'alice')] });
      codes.push(res.overallCode === 1 ? 'OK' : res.overallCode === 2 ? 'OVER_LIMIT' : String(res.overallCode));
    }
    for (const c of clients) c.close();
    expect(codes).toEqual([...Array(10).fill('OK'), ...Array(5).fill('OVER_LIMIT')]);
    const keys = (await redis.cli(['KEYS', '*'])).trim().split('\n');
    expect(keys).toHaveLength(1);
    expect((await redis.cli(['GET', keys[0]!])).trim()).toBe('15');

    // The primary's /stats: totals over both workers, fresh (STATS_FLUSH_INTERVAL is 10 s).
    const stats = (await httpGet(svc.debug, '/stats')).body;
    expect(stat(stats, 'ratelimit.service.rate_limit.wk.user.total_hits')).toBe(15);
    expect(stat(stats, 'ratelimit.service.rate_limit.wk.user.within_limit')).toBe(10);
    expect(stat(stats, 'ratelimit.service.rate_limit.wk.user.over_limit')).toBe(5);
    expect(stat(stats, 'ratelimit_server.ShouldRateLimit.total_requests')).toBe(7);
    expect(stat(stats, 'ratelimit_server.ShouldRateLimit.response_time.count')).toBe(7);
    // Series that never moved are listed too, as in one process.
    expect(stat(stats, 'ratelimit.service.call.should_rate_limit.redis_error')).toBe(0);
    // Each worker keeps its own pool of REDIS_POOL_SIZE connections: the gauge is their sum.
    expect(stat(stats, 'ratelimit.redis_pool.cx_active')).toBe(20);

    expect((await httpGet(svc.debug, '/rlconfig')).body).toContain('wk.user: unit=MINUTE requests_per_unit=10');
    expect((await httpGet(svc.debug, '/debug/explain?domain=wk&descriptors=user=alice')).body).toContain('count: 15 of 10 in this window');

    expect(await svc.stop('SIGTERM')).toBe(0);
    expect(svc.output().match(/listening: gRPC/g)).toHaveLength(1);
    for (const pid of pids.values()) expect(alive(pid)).toBe(false);
    expect(await portIsFree(svc.http)).toBe(true);
    expect(await portIsFree(svc.grpc)).toBe(true);
    expect(await portIsFree(svc.debug)).toBe(true);
  });

  test('/rlconfig of a big config is pulled from a worker piece by piece: every line, in order', async () => {
    const n = 20_000; // about 1.6 MB of listing: 25 pieces over IPC
    const big = runtimeDir({ 'big.yaml': manyDescriptors('big', n) });
    try {
      const svc = await startService(env({}, big.root));
      services.push(svc);
      const res = await fetch(`http://${svc.debug}/rlconfig`);
      expect(res.status).toBe(200);
      expect(res.headers.get('transfer-encoding')).toBe('chunked');
      const lines = (await res.text()).trimEnd().split('\n');
      expect(lines).toHaveLength(n);
      expect(lines[0]).toBe('big.client_c0: unit=SECOND requests_per_unit=1, shadow_mode: false, quota_mode: false');
      expect([...lines].sort()).toEqual(lines);
      expect(lines).toContain('big.client_c19999: unit=SECOND requests_per_unit=20000, shadow_mode: false, quota_mode: false');
    } finally {
      fs.rmSync(big.base, { recursive: true, force: true });
    }
  }, 60_000);

  test('/debug/denials merges every worker\'s ring newest first, paged across them; /debug/config-history is a worker\'s; bad queries are a 400 from the primary', async () => {
    await inOneWindow(60_000, 20_000);
    const svc = await startService(env());
    services.push(svc);
    // 13 calls on fresh connections spread over both workers: the limit of 10 a minute denies 3.
    const answers = [];
    for (let i = 0; i < 13; i++) answers.push(await fresh(svc.http, '/json', json('den')));
    const denied = answers.filter((a) => a.status === 429);
    expect(denied).toHaveLength(3);
    const res = await httpGet(svc.debug, '/debug/denials');
    expect(res.status).toBe(200);
    type Page = { workers: { merged: number[]; unanswered: unknown[] }; recorded: number; denials: Array<{ worker: number; seq: number; time: string; rule: string; transport: string }>; next_before?: string };
    const page = JSON.parse(res.body) as Page;
    expect(page.workers).toEqual({ merged: [1, 2], unanswered: [] });
    expect(page.recorded).toBe(3);
    // Newest first over both workers (cluster hands new connections round robin), each denial saying whose it is.
    expect(new Set(page.denials.map((d) => d.worker)).size).toBe(2);
    const times = page.denials.map((d) => Date.parse(d.time));
    expect([...times].sort((a, b) => b - a)).toEqual(times);
    for (const d of page.denials) expect(d).toMatchObject({ rule: 'wk.user', transport: 'http' });
    expect(page.next_before).toBeUndefined();
    // One a page: the cursor carries each worker's place; three pages give the same three, then no more.
    const paged: Page['denials'] = [];
    let query = '?limit=1';
    for (let i = 0; i < 3; i++) {
      const p = JSON.parse((await httpGet(svc.debug, `/debug/denials${query}`)).body) as Page;
      expect(p.denials).toHaveLength(1);
      paged.push(...p.denials);
      if (i < 2) expect(p.next_before).toMatch(/^\d:\d+(,\d:\d+)?$/);
      else expect(p.next_before).toBeUndefined();
      query = `?limit=1&before=${p.next_before}`;
    }
    expect(paged).toEqual(page.denials);

    const history = JSON.parse((await httpGet(svc.debug, '/debug/config-history')).body) as { version: string; history: Array<{ outcome: string }> };
    expect(history.version).toMatch(/^[0-9a-f]{12}$/);
    expect(history.history[0]!.outcome).toBe('loaded');
    const bad = await httpGet(svc.debug, '/debug/denials?limit=0');
    expect(bad.status).toBe(400);
    expect(bad.body).toMatch(/^limit must be a whole number from 1 to 1000, not '0'\n$/);
    const badCursor = await httpGet(svc.debug, '/debug/denials?before=12');
    expect(badCursor).toMatchObject({ status: 400, body: expect.stringMatching(/^before must be a merged page's next_before in worker mode/) });
    expect((await httpGet(svc.debug, '/debug/denials?before=3:5')).status).toBe(400);
    expect((await httpGet(svc.debug, '/debug/config-history?x=1')).status).toBe(400);
  });

  test('/debug/hotkeys and /debug/candidates merge both workers\' counts as one process would have counted them', async () => {
    await inOneWindow(60_000, 20_000);
    // Every counted call sampled, so the lists are exact.
    const svc = await startService(env({ HOT_KEYS_SAMPLE_ONE_IN: '1' }));
    services.push(svc);
    const call = (v: string) => fresh(svc.http, '/json', JSON.stringify({ domain: 'hk', descriptors: [{ entries: [{ key: 'user', value: v }] }] }));
    // hot: 8 calls (the candidate of 5 would deny 3), warm: 4, cold: 1, on fresh connections that
    // cluster hands to the workers round robin: each worker saw hot and warm about half the time.
    for (const [v, n] of [['hot', 8], ['warm', 4], ['cold', 1]] as const) {
      for (let i = 0; i < n; i++) expect((await call(v)).status).toBe(200);
    }

    type Hot = { key: string; entries: string; hits: number; error: number; over_limit_hits: number; remaining: number };
    const res = await httpGet(svc.debug, '/debug/hotkeys?domain=hk&rule=user');
    expect(res.status).toBe(200);
    const hot = JSON.parse(res.body) as { workers: unknown; limit: unknown; minute: Hot[]; hour: Hot[] };
    expect(hot.workers).toEqual({ merged: [1, 2], unanswered: [] });
    expect(hot.limit).toMatchObject({ domain: 'hk', rule: 'hk.user', requests_per_unit: 10, unit: 'MINUTE' });
    for (const list of [hot.minute, hot.hour]) {
      expect(list.map((e) => [e.entries, e.hits, e.error])).toEqual([
        ['user=hot', 8, 0],
        ['user=warm', 4, 0],
        ['user=cold', 1, 0],
      ]);
      // The remaining count at the last sight, whichever worker saw it.
      expect(list[0]!.remaining).toBe(2);
    }
    const all = JSON.parse((await httpGet(svc.debug, '/debug/hotkeys?k=1')).body) as { minute: Hot[] };
    expect(all.minute.map((e) => e.entries)).toEqual(['user=hot']);

    type Cand = { rule: string; calls: number; hits: number; would_deny: number; would_limit_hits: number; distinct_keys: number; peak_used: number; peak_utilization: number; top_keys: Array<{ entries: string; hits: number; would_limit_hits: number }> };
    const cands = JSON.parse((await httpGet(svc.debug, '/debug/candidates?domain=hk')).body) as { workers: unknown; total: number; candidates: Cand[] };
    expect(cands.workers).toEqual({ merged: [1, 2], unanswered: [] });
    expect(cands.total).toBe(1);
    expect(cands.candidates).toHaveLength(1);
    const c = cands.candidates[0]!;
    // Sums of counts, the union of distinct keys (3, not one set per worker), the largest peak.
    expect(c).toMatchObject({ rule: 'hk.user', calls: 13, hits: 13, would_deny: 3, would_limit_hits: 3, distinct_keys: 3, peak_used: 8, peak_utilization: 8 / 5 });
    expect(c.top_keys.map((e) => [e.entries, e.hits, e.would_limit_hits])).toEqual([
      ['user=hot', 8, 3],
      ['user=warm', 4, 0],
      ['user=cold', 1, 0],
    ]);

    // /debug/limits: the busiest key's count is the shared one (the max), each key counted once by
    // the worker that saw its first hit (the sum), and the page names the workers merged.
    const limits = JSON.parse((await httpGet(svc.debug, '/debug/limits?domain=hk')).body) as { workers: unknown; total: number; limits: Array<Record<string, unknown>> };
    expect(limits.workers).toEqual({ merged: [1, 2], unanswered: [] });
    expect(limits.limits).toEqual([
      expect.objectContaining({ rule: 'hk.user', requests_per_unit: 10, window_used: 8, utilization: 0.8, window_keys: 3, window_keys_over_limit: 0 }),
    ]);

    // A refused query is the workers' 400, with their reason.
    expect(await httpGet(svc.debug, '/debug/hotkeys?domain=nope')).toMatchObject({ status: 400, body: 'domain "nope" has no loaded limits\n' });
    expect(await httpGet(svc.debug, '/debug/candidates?k=999')).toMatchObject({ status: 400, body: expect.stringMatching(/^k must be an integer from 1 to 10/) });
  });

  test('RLQS in worker mode: a stream is served by a worker; the primary\'s /debug/rlqs and bucket explanation gather every worker', async () => {
    const svc = await startService(env());
    services.push(svc);
    const client = new RateLimitQuotaServiceClient(svc.grpc, grpc.credentials.createInsecure());
    const s = openQuotaStream(client);
    try {
      s.report('alice', 0, 1, 'wk');
      const first = await s.next();
      expect(first.bucketAction[0]!.quotaAssignmentAction).toBeDefined();
      const live = (await httpGet(svc.debug, '/debug/rlqs')).body;
      expect(live).toMatch(/^worker 1:\n/);
      expect(live).toContain('worker 2:\n');
      expect(live).toMatch(/stream \S+ domain 'wk': 1 buckets/);
      const why = (await httpGet(svc.debug, '/debug/explain?domain=wk&bucket=api=alice')).body;
      expect(why.match(/^worker \d:$/gm)).toHaveLength(2);
      expect(why).toContain("bucket [[\"api\",\"alice\"]] in domain 'wk'");
    } finally {
      s.call.end();
      await s.ended();
      client.close();
    }
  });

  test('Prometheus on the primary shows the sum; gRPC over GRPC_UDS; a profile names its worker', async () => {
    const promPort = await freePort();
    const sock = path.join(dir.base, 'rl.sock');
    const svc = await startService(env({ USE_PROMETHEUS: 'true', PROMETHEUS_ADDR: `127.0.0.1:${promPort}`, GRPC_UDS: sock }));
    services.push(svc);
    expect(svc.grpc).toBe(`unix:${sock}`);
    // Several connections, so both workers count some of the hits.
    for (let i = 0; i < 6; i++) {
      const client = grpcClient(svc.grpc);
      await callGrpc(client, { domain: 'wk', descriptors: [descriptor('user', 'bob')] });
      client.close();
    }
    for (let i = 0; i < 4; i++) await fresh(svc.http, '/json', json('bob'));
    // The scrape asks the workers for a fresh flush first.
    const body = (await httpGet(`127.0.0.1:${promPort}`, '/metrics')).body;
    expect(body).toMatch(/^ratelimit_service_rate_limit_total_hits\{domain="wk",key1="user"\} 10$/m);
    expect(body).toMatch(/^ratelimit_service_total_requests\{grpc_method="ShouldRateLimit"\} 6$/m);
    expect(body).toMatch(/^ratelimit_service_response_time_seconds_count\{grpc_method="ShouldRateLimit"\} 6$/m);

    const prof = await fetch(`http://${svc.debug}/debug/pprof/profile?seconds=0.1&worker=2`);
    expect(prof.status).toBe(200);
    expect(prof.headers.get('x-ratelimit-worker')).toBe('2');
    expect(JSON.parse(await prof.text())).toHaveProperty('nodes');
    const bad = await fetch(`http://${svc.debug}/debug/pprof/profile?seconds=0.1&worker=3`);
    expect(bad.status).toBe(400);
    expect(await bad.text()).toBe('worker must be a number from 1 to 2\n');

    expect(await svc.stop('SIGTERM')).toBe(0);
    expect(await portIsFree(`127.0.0.1:${promPort}`)).toBe(true);
  });

  test('a worker killed with SIGKILL is restarted and the service goes on (stats disabled: /stats still sums)', async () => {
    const svc = await startService(env({ REDIS_POOL_SIZE: '2', DISABLE_STATS: 'true' }));
    services.push(svc);
    const before = workerPids(svc.output());
    process.kill(before.get(1)!, 'SIGKILL');
    await waitFor(() => /worker 1 \(pid \d+\) exited unexpectedly with signal SIGKILL; restarting it in \d+ ms/.test(svc.output()), '/worker 1 \\(pid \\d+\\) exited unexpectedly with signal SIGKILL; rest...');
    await waitFor(() => /worker 1 \(pid \d+\) is listening/.test(svc.output()), '/worker 1 \\(pid \\d+\\) is listening/.test(svc.output())');
    const after = workerPids(svc.output());
    expect(after.get(1)).not.toBe(before.get(1));
    expect(after.get(2)).toBe(before.get(2));

    const seen = new Set<string>();
    for (let i = 0; i < 8; i++) {
      const r = await fresh(svc.http, '/json', json('carol'));
      expect(r.status).toBe(200);
    }
    for (let i = 0; i < 6; i++) seen.add((await fresh(svc.http, '/healthcheck')).worker!);
    expect([...seen].sort()).toEqual(['1', '2']);
    const stats = (await httpGet(svc.debug, '/stats')).body;
    expect(stat(stats, 'ratelimit.service.rate_limit.wk.user.total_hits')).toBe(8);
    // The dead worker's gauges left the sum: two live pools of 2.
    expect(stat(stats, 'ratelimit.redis_pool.cx_active')).toBe(4);
    // The primary's own series: one restart, both workers listening again.
    expect(stat(stats, 'ratelimit.workers.restarts')).toBe(1);
    expect(stat(stats, 'ratelimit.workers.listening')).toBe(2);
    expect(svc.output().match(/listening: gRPC/g)).toHaveLength(1);
    expect(await svc.stop('SIGTERM')).toBe(0);
  });

  test('a worker that cannot start ends the program with its error, without a restart loop', async () => {
    const port = await freePort();
    const res = await run(
      'ratelimit.js',
      [],
      env({ REDIS_URL: `127.0.0.1:${port}`, REDIS_STARTUP_INITIAL_INTERVAL: '50ms', REDIS_STARTUP_MAX_ELAPSED_TIME: '300ms' }),
      20_000,
    );
    expect(res.code).toBe(1);
    expect(res.stderr).toMatch(/^ratelimit: .*timed out waiting for Redis connection to 127\.0\.0\.1:\d+$/m);
    expect(res.stderr.match(/worker \d started/g)).toHaveLength(2);
    expect(res.stderr).not.toMatch(/listening: gRPC/);
  });

  test('a refused first config: no worker listens and the primary announces nothing; the fixed file starts them all', async () => {
    const broken = runtimeDir({ 'wk.yaml': 'domain: [' });
    let waiting!: () => void;
    const sawWaiting = new Promise<void>((resolve) => (waiting = resolve));
    const started = startService(env({}, broken.root), 60_000, undefined, (out) => {
      if ((out.match(/worker \d: the first configuration failed to load .*not listening on the gRPC and HTTP ports/g) ?? []).length === 2) waiting();
    }).then((svc) => {
      services.push(svc);
      return svc;
    });
    try {
      // A service that listened at once (the old behaviour) ends the race, and the test, here.
      expect(await Promise.race([sawWaiting.then(() => 'waiting'), started.then(() => 'listening')])).toBe('waiting');
      fs.writeFileSync(path.join(broken.configDir, 'wk.yaml'), CONFIG);
      const svc = await started;
      expect(svc.output().match(/listening: gRPC/g)).toHaveLength(1);
      expect(svc.output().match(/worker \d: a configuration loaded: starting the listeners/g)).toHaveLength(2);
      expect((await fresh(svc.http, '/json', json('fixed'))).status).toBe(200);
    } finally {
      fs.rmSync(broken.base, { recursive: true, force: true });
    }
  });

  test('a port in use ends the program at once', async () => {
    const blocker = net.createServer();
    await new Promise<void>((r) => blocker.listen(0, '127.0.0.1', r));
    const port = (blocker.address() as net.AddressInfo).port;
    try {
      const res = await run('ratelimit.js', [], env({ PORT: String(port) }), 20_000);
      expect(res.code).toBe(1);
      expect(res.stderr).toMatch(new RegExp(`^ratelimit: cannot listen for HTTP on 127\\.0\\.0\\.1:${port}: .*EADDRINUSE`, 'm'));
    } finally {
      blocker.close();
    }
  });
});

test('WORKERS=2 with the memory store is refused with one line', async () => {
  const dir = runtimeDir({ 'wk.yaml': CONFIG, 'hk.yaml': HOT_CONFIG });
  try {
    const res = await run('ratelimit.js', [], { ...baseEnv(dir.root), WORKERS: '2' });
    expect(res.code).toBe(1);
    expect(res.stderr).toBe(
      'ratelimit: WORKERS=2 needs a shared counter store (BACKEND_TYPE=redis or memcache): the memory store counts per process\n',
    );
  } finally {
    fs.rmSync(dir.base, { recursive: true, force: true });
  }
});

test('worker mode on memcached counts each hit once across the workers', async () => {
  const mc = await MemcachedServer.start();
  const dir = runtimeDir({ 'wk.yaml': CONFIG, 'hk.yaml': HOT_CONFIG });
  // A generous MEMCACHE_TIMEOUT: on a loaded CI machine the default 500 ms can pass while an
  // increment is in flight, which then fails (as it should) and the count this test checks is short.
  const svc = await startService({ ...baseEnv(dir.root), BACKEND_TYPE: 'memcache', MEMCACHE_HOST_PORT: `127.0.0.1:${mc.port}`, MEMCACHE_TIMEOUT: '5s', WORKERS: '2' });
  try {
    const workers = new Set<string>();
    for (let i = 0; i < 4; i++) workers.add((await fresh(svc.http, '/healthcheck')).worker!);
    expect([...workers].sort()).toEqual(['1', '2']);
    // Consecutive connections go to alternate workers.
    await inOneWindow(60_000);
    const statuses: number[] = [];
    for (let i = 0; i < 12; i++) {
      statuses.push((await fresh(svc.http, '/json', json('dave'))).status);
      // Memcached increments land after the answer (as upstream): wait for each one.
      await waitFor(async () => (await incrementsProcessed(mc.port)) === i + 1, `increment ${i + 1} to land in memcached`);
    }
    expect(statuses).toEqual([...Array(10).fill(200), 429, 429]);
    const stats = (await httpGet(svc.debug, '/stats')).body;
    expect(stat(stats, 'ratelimit.service.rate_limit.wk.user.total_hits')).toBe(12);
    expect(stat(stats, 'ratelimit.service.rate_limit.wk.user.over_limit')).toBe(2);
  } finally {
    expect(await svc.stop()).toBe(0);
    await mc.stop();
    fs.rmSync(dir.base, { recursive: true, force: true });
  }
});
