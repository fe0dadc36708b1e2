/**
 * End to end: start-up rules, health, watch-root reloads, the CLIs and shutdown, each against the
 * real programs.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import * as grpc from '@grpc/grpc-js';
import { HealthClient, HealthCheckResponse_ServingStatus } from '../../generated/grpc/health/v1/health';
import path from 'node:path';
import { baseEnv, callGrpc, descriptor, DIST, grpcClient, httpGet, ROOT, run, runtimeDir, startService } from './harness';
import { freePort } from '../support/ports';
import { waitFor } from '../support/wait';

const CONFIG = 'domain: life\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10}\n';

/** upstream's default Redis address, dialled when the store is redis and REDIS_URL is unset */
const NUTCRACKER = '/var/run/nutcracker/ratelimit.sock';

/** The service's environment without BACKEND_TYPE (baseEnv sets the memory store). */
function envWithoutBackend(root: string, extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...baseEnv(root), ...extra };
  delete env['BACKEND_TYPE'];
  return env;
}

/**
 * Starts the service, and once its output matches `until` (a start-up that does not end by itself,
 * e.g. retrying a store for ever) sends SIGTERM; resolves with everything it wrote.
 */
function outputUntil(env: NodeJS.ProcessEnv, until: RegExp): Promise<string> {
  return new Promise((resolve, reject) => {
    const proc = spawn(process.execPath, [path.join(DIST, 'ratelimit.js')], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    const timer = setTimeout(() => proc.kill('SIGKILL'), 15_000);
    const take = (d: Buffer): void => {
      out += d.toString();
      if (until.test(out) && proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
    };
    proc.stdout.on('data', take);
    proc.stderr.on('data', take);
    proc.once('exit', () => {
      clearTimeout(timer);
      if (until.test(out)) resolve(out);
      else reject(new Error(`the service ended before writing ${String(until)}:\n${out}`));
    });
  });
}

/** Connects to 127.0.0.1:`port` (resolves) or fails with the socket's error. */
function connect(port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1', () => {
      socket.destroy();
      resolve();
    });
    socket.once('error', reject);
  });
}

describe('start-up', () => {
  test.each([
    ['USE_STATSD', 'maybe', /USE_STATSD/],
    ['BACKEND_TYPE', 'mongo', /BACKEND_TYPE.*memory, redis, memcache/],
    ['GRPC_PORT', 'eighty', /GRPC_PORT/],
    ['NEAR_LIMIT_RATIO', '2', /NEAR_LIMIT_RATIO/],
  ])('a bad %s=%s stops start-up with one line naming it', async (name, value, pattern) => {
    const dir = runtimeDir({ 'a.yaml': CONFIG });
    const res = await run('ratelimit.js', [], { ...baseEnv(dir.root), [name]: value });
    expect(res.code).toBe(1);
    const lines = res.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(pattern);
  });

  test('with no store setting at all the memory store is chosen, and one info line says so and how to share counts', async () => {
    const dir = runtimeDir({ 'a.yaml': CONFIG });
    const svc = await startService(envWithoutBackend(dir.root, {}));
    try {
      const lines = svc.output().split('\n').filter((l) => l.includes('counter store'));
      expect(lines).toEqual([
        expect.stringContaining(
          'level=info msg="counter store: memory (no BACKEND_TYPE, REDIS_* or MEMCACHE_* setting): counts are per process; BACKEND_TYPE=redis or memcache shares them across replicas"',
        ),
      ]);
      expect(svc.output()).not.toMatch(/level=warning/);
    } finally {
      expect(await svc.stop()).toBe(0);
    }
  });

  test('an upstream-style environment (REDIS_SOCKET_TYPE=unix, REDIS_POOL_SIZE=20, nothing else) dials Redis at the nutcracker socket, names it, suggests tcp, and never listens', async () => {
    const dir = runtimeDir({ 'a.yaml': CONFIG });
    const env = envWithoutBackend(dir.root, { REDIS_SOCKET_TYPE: 'unix', REDIS_POOL_SIZE: '20' });
    const out = await outputUntil(env, /failed to connect to redis on .* \(attempt 1\)/);
    expect(out).toContain(`counter store: redis (BACKEND_TYPE is unset and REDIS_SOCKET_TYPE, REDIS_POOL_SIZE are set: envoyproxy/ratelimit's default store)`);
    expect(out).toContain(
      `failed to connect to redis on ${NUTCRACKER} (attempt 1): connect ENOENT ${NUTCRACKER} (Connection is closed.); REDIS_SOCKET_TYPE is unix: for Redis on host:port set REDIS_SOCKET_TYPE=tcp and REDIS_URL=host:port; retrying in`,
    );
    expect(out).not.toContain('listening:');
  });

  test('the same start-up, bounded by REDIS_STARTUP_MAX_ELAPSED_TIME, exits 1 with one line naming the address and why Redis', async () => {
    const dir = runtimeDir({ 'a.yaml': CONFIG });
    const env = envWithoutBackend(dir.root, {
      REDIS_SOCKET_TYPE: 'unix',
      REDIS_POOL_SIZE: '20',
      REDIS_STARTUP_INITIAL_INTERVAL: '20ms',
      REDIS_STARTUP_MAX_ELAPSED_TIME: '100ms',
    });
    const res = await run('ratelimit.js', [], env);
    expect(res.code).toBe(1);
    expect(res.stderr.trimEnd().split('\n').pop()).toBe(
      'ratelimit: cannot connect the redis store (BACKEND_TYPE is unset and REDIS_SOCKET_TYPE, REDIS_POOL_SIZE, REDIS_STARTUP_INITIAL_INTERVAL, REDIS_STARTUP_MAX_ELAPSED_TIME are set: ' +
        `envoyproxy/ratelimit's default store): timed out waiting for Redis connection to ${NUTCRACKER}: connect ENOENT ${NUTCRACKER}; ` +
        'REDIS_SOCKET_TYPE is unix: for Redis on host:port set REDIS_SOCKET_TYPE=tcp and REDIS_URL=host:port',
    );
    expect(res.stderr).not.toContain('listening:');
  });

  test('MEMCACHE_HOST_PORT alone selects redis, as upstream does, and the log says how to select memcached', async () => {
    const dir = runtimeDir({ 'a.yaml': CONFIG });
    const out = await outputUntil(envWithoutBackend(dir.root, { MEMCACHE_HOST_PORT: '127.0.0.1:11211' }), /failed to connect to redis on .* \(attempt 1\)/);
    expect(out).toContain(
      "counter store: redis (BACKEND_TYPE is unset and MEMCACHE_HOST_PORT is set: envoyproxy/ratelimit's default store; BACKEND_TYPE=memcache selects memcached)",
    );
    expect(out).toContain(
      "MEMCACHE_HOST_PORT is set but the counter store is redis (BACKEND_TYPE is unset: envoyproxy/ratelimit's default; BACKEND_TYPE=memcache selects memcache): ignored",
    );
    expect(out).toContain(`failed to connect to redis on ${NUTCRACKER} (attempt 1)`);
  });

  test('BACKEND_TYPE=memory with REDIS_URL set keeps the memory store; REDIS_URL is reported ignored', async () => {
    const dir = runtimeDir({ 'a.yaml': CONFIG });
    const svc = await startService({ ...baseEnv(dir.root), REDIS_URL: '127.0.0.1:1' });
    try {
      expect(svc.output()).toContain('counter store: memory (BACKEND_TYPE=memory): counts are per process');
      expect(svc.output()).toContain('REDIS_URL is set but the counter store is memory (BACKEND_TYPE=memory): ignored');
      expect(svc.output()).not.toContain('connecting to redis');
    } finally {
      expect(await svc.stop()).toBe(0);
    }
  });

  test('a first configuration that fails to load: no port listens, the error line says why, the stats show it; the fixed file starts the service', async () => {
    const dir = runtimeDir({ 'a.yaml': 'domain: [' });
    const ports = { PORT: await freePort(), GRPC_PORT: await freePort(), DEBUG_PORT: await freePort() };
    const metrics = await freePort();
    let waiting!: () => void;
    const sawWaiting = new Promise<void>((resolve) => (waiting = resolve));
    const started = startService(
      {
        ...baseEnv(dir.root),
        PORT: String(ports.PORT),
        GRPC_PORT: String(ports.GRPC_PORT),
        DEBUG_PORT: String(ports.DEBUG_PORT),
        USE_PROMETHEUS: 'true',
        PROMETHEUS_ADDR: `127.0.0.1:${metrics}`,
      },
      60_000,
      undefined,
      (out) => {
        if (out.includes('not listening on the gRPC and HTTP ports')) waiting();
      },
    );
    // A service that listens at once (the old behaviour) ends the race: stopped, and the test fails.
    const first = await Promise.race([sawWaiting.then(() => undefined), started]);
    if (first !== undefined) expect(await first.stop()).toBe('listening before a configuration loaded');
    for (const port of Object.values(ports)) await expect(connect(port)).rejects.toMatchObject({ code: 'ECONNREFUSED' });
    // The stats sink runs meanwhile: the failed load is counted, and no rule is loaded.
    const scrape = (await httpGet(`127.0.0.1:${metrics}`, '/metrics')).body;
    expect(scrape).toMatch(/^ratelimit_service_config_load_error 1$/m);
    expect(scrape).toMatch(/^ratelimit_config_rules 0$/m);
    fs.writeFileSync(path.join(dir.configDir, 'a.yaml'), CONFIG);
    const svc = await started;
    const client = grpcClient(svc.grpc);
    try {
      const out = svc.output();
      const failed = out.indexOf('Error loading new configuration: a.yaml: error loading config file: yaml: line 1:');
      const why = out.indexOf(
        'level=error msg="the first configuration failed to load (a.yaml: error loading config file: yaml: line 1:',
      );
      const loaded = out.indexOf('a configuration loaded: starting the listeners');
      const listening = out.indexOf('listening: gRPC');
      expect({ failed: failed >= 0, why: why > failed, loaded: loaded > why, listening: listening > loaded }).toEqual({ failed: true, why: true, loaded: true, listening: true });
      expect(out).toContain(
        'not listening on the gRPC and HTTP ports until one loads (FORCE_START_WITHOUT_INITIAL_CONFIG is false); the config files are watched: fixing them starts the service"',
      );
      expect(svc.grpc).toBe(`127.0.0.1:${ports.GRPC_PORT}`);
      expect((await callGrpc(client, { domain: 'life', descriptors: [descriptor('k', 'v')] })).overallCode).toBe(1);
    } finally {
      client.close();
      expect(await svc.stop()).toBe(0);
    }
  });

  test('SIGTERM while waiting for a first configuration that loads: a clean exit', async () => {
    const dir = runtimeDir({ 'a.yaml': 'domain: [' });
    const out = await outputUntil(baseEnv(dir.root), /not listening on the gRPC and HTTP ports/);
    expect(out).toContain('received SIGTERM');
    expect(out).not.toContain('listening: gRPC');
  });

  test('MEMCACHE_TLS=true is refused (memjs has no TLS) rather than connecting in plaintext', async () => {
    const dir = runtimeDir({ 'a.yaml': CONFIG });
    const res = await run('ratelimit.js', [], {
      ...baseEnv(dir.root),
      BACKEND_TYPE: 'memcache',
      MEMCACHE_HOST_PORT: '127.0.0.1:1',
      MEMCACHE_TLS: 'true',
    });
    expect(res.code).toBe(1);
    expect(res.stderr).toMatch(/^ratelimit: MEMCACHE_TLS=true: .*no TLS support/m);
  });

  test('FORCE_START_WITHOUT_INITIAL_CONFIG with a broken config serves errors until a good one loads', async () => {
    const dir = runtimeDir({ 'a.yaml': 'domain: [' });
    const svc = await startService({ ...baseEnv(dir.root), FORCE_START_WITHOUT_INITIAL_CONFIG: 'true' });
    const client = grpcClient(svc.grpc);
    try {
      await expect(callGrpc(client, { domain: 'life', descriptors: [descriptor('k', 'v')] })).rejects.toMatchObject({
        details: 'no rate limit configuration loaded',
      });
      fs.writeFileSync(path.join(dir.configDir, 'a.yaml'), CONFIG);
      await waitFor(async () => {
        try {
          return (await callGrpc(client, { domain: 'life', descriptors: [descriptor('k', 'v')] })).overallCode === 1;
        } catch {
          return false;
        }
      }, '{ try { return (await callGrpc(client, { domain: \'life\', descriptor...');
    } finally {
      client.close();
      expect(await svc.stop()).toBe(0);
    }
  });

  test('HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: unhealthy with no domain, healthy once one loads', async () => {
    const dir = runtimeDir({});
    const svc = await startService({ ...baseEnv(dir.root), HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: 'true' });
    try {
      expect(await httpGet(svc.http, '/healthcheck')).toEqual({ status: 500, body: '' });
      fs.writeFileSync(path.join(dir.configDir, 'a.yaml'), CONFIG);
      await waitFor(async () => (await httpGet(svc.http, '/healthcheck')).status === 200, '(await httpGet(svc.http, \'/healthcheck\')).status === 200');
    } finally {
      expect(await svc.stop()).toBe(0);
    }
  });
});

describe('watch-root mode', () => {
  test('swapping the root symlink reloads; edits inside the old target do not', async () => {
    const dir = runtimeDir({});
    const v1 = path.join(dir.base, 'v1');
    const v2 = path.join(dir.base, 'v2');
    for (const [v, n] of [
      [v1, 10],
      [v2, 20],
    ] as const) {
      fs.mkdirSync(path.join(v, 'ratelimit', 'config'), { recursive: true });
      fs.writeFileSync(path.join(v, 'ratelimit', 'config', 'a.yaml'), CONFIG.replace('10', String(n)));
    }
    const link = path.join(dir.base, 'runtime');
    fs.symlinkSync(v1, link);
    const svc = await startService({ ...baseEnv(link), RUNTIME_WATCH_ROOT: 'true' });
    try {
      const cfg = async () => (await httpGet(svc.debug, '/rlconfig')).body;
      expect(await cfg()).toContain('requests_per_unit=10');
      const tmp = path.join(dir.base, 'runtime.tmp');
      fs.symlinkSync(v2, tmp);
      fs.renameSync(tmp, link);
      await waitFor(async () => (await cfg()).includes('requests_per_unit=20'), '(await cfg()).includes(\'requests_per_unit=20\')');
    } finally {
      expect(await svc.stop()).toBe(0);
    }
  });
});

describe('shutdown', () => {
  test('SIGTERM turns health unhealthy, drains and exits 0', async () => {
    const dir = runtimeDir({ 'a.yaml': CONFIG });
    const svc = await startService(baseEnv(dir.root));
    expect(await svc.stop('SIGTERM')).toBe(0);
    expect(svc.output()).toMatch(/received SIGTERM/);
    expect(svc.output()).toMatch(/stopped/);
  });

  test('a health Watch sees NOT_SERVING on SIGTERM and does not hold the shutdown', async () => {
    const dir = runtimeDir({ 'a.yaml': CONFIG });
    const svc = await startService(baseEnv(dir.root));
    const health = new HealthClient(svc.grpc, grpc.credentials.createInsecure());
    const seen: number[] = [];
    const stream = health.watch({ service: 'ratelimit' });
    const ended = new Promise<void>((resolve) => {
      stream.on('data', (m: { status: number }) => seen.push(m.status));
      stream.on('end', () => resolve());
      stream.on('error', () => resolve());
    });
    await waitFor(() => seen.length > 0, 'seen.length > 0');
    const started = Date.now();
    expect(await svc.stop('SIGTERM')).toBe(0);
    await ended;
    health.close();
    expect(seen).toEqual([HealthCheckResponse_ServingStatus.SERVING, HealthCheckResponse_ServingStatus.NOT_SERVING]);
    expect(Date.now() - started).toBeLessThan(5000);
  });

  test('SIGINT and SIGHUP stop it too', async () => {
    for (const sig of ['SIGINT', 'SIGHUP'] as const) {
      const dir = runtimeDir({ 'a.yaml': CONFIG });
      const svc = await startService(baseEnv(dir.root));
      expect(await svc.stop(sig)).toBe(0);
    }
  });
});

describe('ratelimit-client', () => {
  test('prints the response of the service', async () => {
    const dir = runtimeDir({ 'a.yaml': CONFIG });
    const svc = await startService(baseEnv(dir.root));
    try {
      const res = await run('client.js', ['-dial_string', svc.grpc, '-domain', 'life', '-descriptors', 'k=v']);
      expect(res.code).toBe(0);
      expect(res.stdout).toContain('domain: life');
      expect(res.stdout).toContain('descriptor: k=v');
      const json = JSON.parse(res.stdout.slice(res.stdout.indexOf('response: ') + 10));
      expect(json).toMatchObject({ overallCode: 'OK', statuses: [{ code: 'OK', limitRemaining: 9 }] });
      const err = await run('client.js', [`-dial_string=${svc.grpc}`, '-domain=', '-descriptors=k=v']);
      expect(err.code).toBe(1);
      expect(err.stderr).toContain('rate limit domain must not be empty');
    } finally {
      expect(await svc.stop()).toBe(0);
    }
  });

  test('rejects malformed descriptors and unknown flags', async () => {
    expect((await run('client.js', ['-descriptors', 'novalue'])).code).toBe(2);
    expect((await run('client.js', ['-bogus'])).stderr).toContain('flag provided but not defined: -bogus');
  });
});

describe('ratelimit-config-check', () => {
  test('accepts the bundled example config', async () => {
    const res = await run('config-check.js', ['-config_dir', path.join(ROOT, 'examples/runtime/ratelimit/config')]);
    expect(res.stdout).toContain('all rate limit configs ok');
    expect(res.code).toBe(0);
  });

  test('reports the first error and exits 1', async () => {
    const dir = runtimeDir({ 'a.yaml': CONFIG, 'b.yaml': CONFIG });
    const res = await run('config-check.js', ['-config_dir', dir.configDir]);
    expect(res.code).toBe(1);
    expect(res.stdout).toContain(`error loading rate limit configs: ${path.join(dir.configDir, 'b.yaml')}: duplicate domain 'life' in config file`);
    const merged = await run('config-check.js', ['-config_dir', dir.configDir, '-merge_domain_configs']);
    expect(merged.stdout).toContain("duplicate descriptor composite key 'life.k'");
  });
});

describe('listeners', () => {
  test('GRPC_UDS serves gRPC on a unix socket', async () => {
    const dir = runtimeDir({ 'a.yaml': CONFIG });
    const sock = path.join(dir.base, 'rl.sock');
    const svc = await startService({ ...baseEnv(dir.root), GRPC_UDS: sock });
    const client = grpcClient(`unix:${sock}`);
    try {
      expect(svc.grpc).toBe(`unix:${sock}`);
      const res = await callGrpc(client, { domain: 'life', descriptors: [descriptor('k', 'v')] });
      expect(res.statuses[0]!.limitRemaining).toBe(9);
    } finally {
      client.close();
      expect(await svc.stop()).toBe(0);
    }
  });
});

describe('connection lifecycle', () => {
  test('GRPC_MAX_CONNECTION_AGE sends GOAWAY to old connections (±10% jitter)', async () => {
    const http2 = await import('node:http2');
    const dir = runtimeDir({ 'a.yaml': CONFIG });
    const svc = await startService({ ...baseEnv(dir.root), GRPC_MAX_CONNECTION_AGE: '500ms', GRPC_MAX_CONNECTION_AGE_GRACE: '300ms' });
    try {
      const session = http2.connect(`http://${svc.grpc}`);
      const started = Date.now();
      const goaway = await new Promise<number>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error('no GOAWAY within 3 s')), 3000);
        session.on('goaway', () => {
          clearTimeout(timer);
          resolve(Date.now() - started);
        });
        session.on('error', () => undefined);
      });
      session.destroy();
      expect(goaway).toBeGreaterThanOrEqual(400);
      expect(goaway).toBeLessThan(1500);
    } finally {
      expect(await svc.stop()).toBe(0);
    }
  });
});

describe('explain', () => {
  const EXPLAIN = `
domain: ex
descriptors:
  - key: user
    descriptors:
      - key: method
        value: POST
        rate_limit: {unit: minute, requests_per_unit: 10}
  - key: path
    value: /api/*
    rate_limit: {unit: second, requests_per_unit: 100}
  - key: plan
    value: free
    rate_limit: {name: weekly, unit: week, requests_per_unit: 1000}
    descriptors:
      - key: feature
        rate_limit:
          replaces: [{name: weekly}]
          unit: hour
          requests_per_unit: 3
`;
  test('ratelimit-config-check -explain says which rule matches and why', async () => {
    const dir = runtimeDir({ 'ex.yaml': EXPLAIN });
    const res = await run('config-check.js', [
      '-config_dir', dir.configDir, '--explain', '--domain', 'ex',
      '--descriptors', 'user=a,method=POST', '--descriptors', 'path=/api/x', '--descriptors', 'user=a',
      '--descriptors', 'plan=free', '--descriptors', 'plan=free,feature=f', '--descriptors', 'user=a,method=POST,x=1', '--descriptors', 'none=1',
    ]);
    expect(res.code).toBe(0);
    const out = res.stdout;
    expect(out).toContain('method=POST: exact value → method_POST (has rate_limit)');
    expect(out).toMatch(/cache key: ex_user_a_method_POST_\d+/);
    expect(out).toContain('stats key: ratelimit.service.rate_limit.ex.user.method_POST');
    expect(out).toContain('path=/api/x: wildcard → path_/api/*');
    expect(out).toContain('a placeholder');
    expect(out).toContain('outcome: replaced by ex.plan_free.feature');
    expect(out).toContain('(depth rule)');
    expect(out).toContain('no rule matches none=1 at depth 1');
  });

  test('/debug/explain shows the same against the running config, with current counts', async () => {
    const dir = runtimeDir({ 'ex.yaml': EXPLAIN });
    const svc = await startService(baseEnv(dir.root));
    const client = grpcClient(svc.grpc);
    try {
      await callGrpc(client, { domain: 'ex', descriptors: [descriptor('user', 'a', 'method', 'POST')] });
      const res = await httpGet(svc.debug, '/debug/explain?domain=ex&descriptors=user=a,method=POST');
      expect(res.status).toBe(200);
      expect(res.body).toContain('count: 1 of 10 in this window');
      expect((await httpGet(svc.debug, '/debug/explain')).status).toBe(400);
    } finally {
      client.close();
      expect(await svc.stop()).toBe(0);
    }
  });
});
