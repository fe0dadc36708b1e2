/**
 * End to end: the real `ratelimit` program on the memory store, over gRPC (both transports), /json,
 * the debug port, with file reloads, bad input and a graceful SIGTERM.
 */
import fs from 'node:fs';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { HealthClient, HealthCheckResponse_ServingStatus } from '../../generated/grpc/health/v1/health';
import { baseEnv, callGrpc, descriptor, grpcClient, httpGet, httpPost, E2E_GRPC_TRANSPORT, runtimeDir, type Service, startService } from './harness';
import { inOneWindow, waitFor } from '../support/wait';

const CONFIG = `
domain: e2e
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 3
  - key: banned
    rate_limit:
      unit: second
      requests_per_unit: 0
  - key: free
    rate_limit:
      unlimited: true
`;

const CODE = { OK: 1, OVER_LIMIT: 2 };
const MINUTE = 2;

// The whole e2e suite runs on both gRPC transports (jest.config.js: the default, then grpc-js).
describe(`ratelimit service end to end, GRPC_TRANSPORT=${E2E_GRPC_TRANSPORT} (memory store)`, () => {
  const transport = E2E_GRPC_TRANSPORT;
  let svc: Service;
  let dir: ReturnType<typeof runtimeDir>;
  let client: ReturnType<typeof grpcClient>;

  beforeAll(async () => {
    dir = runtimeDir({ 'e2e.yaml': CONFIG });
    svc = await startService({ ...baseEnv(dir.root), LIMIT_RESPONSE_HEADERS_ENABLED: 'true' });
    client = grpcClient(svc.grpc);
  });

  afterAll(async () => {
    client?.close();
    if (svc) expect(await svc.stop()).toBe(0);
    fs.rmSync(dir.base, { recursive: true, force: true });
  });

  test('the start-up log names the store and why', () => {
    expect(svc.output()).toContain('counter store: memory (BACKEND_TYPE=memory): counts are per process');
    expect(svc.output()).toContain(`(GRPC_TRANSPORT=${transport})`);
  });

  test('gRPC counts per value and answers OVER_LIMIT past the limit', async () => {
    await inOneWindow(60_000);
    const req = { domain: 'e2e', descriptors: [descriptor('user', 'alice')] };
    const remaining: number[] = [];
    for (let i = 0; i < 3; i++) {
      const res = await callGrpc(client, req);
      expect(res.overallCode).toBe(CODE.OK);
      expect(res.statuses[0]!.currentLimit).toEqual({ name: '', requestsPerUnit: 3, unit: MINUTE });
      remaining.push(res.statuses[0]!.limitRemaining);
    }
    expect(remaining).toEqual([2, 1, 0]);
    const over = await callGrpc(client, req);
    expect(over.overallCode).toBe(CODE.OVER_LIMIT);
    expect(over.statuses[0]!.code).toBe(CODE.OVER_LIMIT);
    const reset = Number(over.statuses[0]!.durationUntilReset!.seconds);
    expect(reset).toBeGreaterThanOrEqual(1);
    expect(reset).toBeLessThanOrEqual(60);
    expect(over.responseHeadersToAdd.map((h) => [h.key, h.value])).toEqual([
      ['RateLimit-Limit', '3'],
      ['RateLimit-Remaining', '0'],
      ['RateLimit-Reset', String(reset)],
    ]);
    // Another value has its own counter.
    const bob = await callGrpc(client, { domain: 'e2e', descriptors: [descriptor('user', 'bob')] });
    expect(bob.statuses[0]!.limitRemaining).toBe(2);
  });

  test('unlimited, banned, unknown descriptors and unknown domains', async () => {
    const res = await callGrpc(client, {
      domain: 'e2e',
      descriptors: [descriptor('free', 'x'), descriptor('nothing', 'x'), descriptor('banned', 'x')],
    });
    expect(res.overallCode).toBe(CODE.OVER_LIMIT);
    expect(res.statuses[0]).toMatchObject({ code: CODE.OK, limitRemaining: 4294967295, currentLimit: undefined });
    expect(res.statuses[1]).toMatchObject({ code: CODE.OK, limitRemaining: 0, currentLimit: undefined });
    expect(res.statuses[2]!.code).toBe(CODE.OVER_LIMIT);
    const unknown = await callGrpc(client, { domain: 'nope', descriptors: [descriptor('user', 'a')] });
    expect(unknown.overallCode).toBe(CODE.OK);
  });

  test('gRPC errors are UNKNOWN with upstream messages, and the service keeps serving', async () => {
    await expect(callGrpc(client, { domain: '', descriptors: [descriptor('user', 'a')] })).rejects.toMatchObject({
      code: grpc.status.UNKNOWN,
      details: 'rate limit domain must not be empty',
    });
    await expect(callGrpc(client, { domain: 'e2e', descriptors: [] })).rejects.toMatchObject({
      code: grpc.status.UNKNOWN,
      details: 'rate limit descriptor list must not be empty',
    });
    // An override with unit UNKNOWN crashes upstream; here it is an error answer.
    const bad = { ...descriptor('user', 'override'), limit: { requestsPerUnit: 5, unit: 0 } };
    await expect(callGrpc(client, { domain: 'e2e', descriptors: [bad] })).rejects.toMatchObject({
      code: grpc.status.UNKNOWN,
      details: expect.stringContaining("invalid rate limit unit 'UNKNOWN'"),
    });
    const good = { ...descriptor('user', 'override'), limit: { requestsPerUnit: 5, unit: 1 } };
    const res = await callGrpc(client, { domain: 'e2e', descriptors: [good] });
    expect(res.statuses[0]!.currentLimit).toEqual({ name: '', requestsPerUnit: 5, unit: 1 });
  });

  test('garbage on the gRPC wire is answered with an error, not a crash', async () => {
    const raw = new grpc.Client(svc.grpc, grpc.credentials.createInsecure());
    const err = await new Promise<grpc.ServiceError | null>((resolve) =>
      raw.makeUnaryRequest(
        '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit',
        (b: Buffer) => b,
        (b: Buffer) => b,
        Buffer.from([0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f]),
        (e) => resolve(e),
      ),
    );
    raw.close();
    expect(err).not.toBeNull();
    const ok = await callGrpc(client, { domain: 'e2e', descriptors: [descriptor('user', 'after-garbage')] });
    expect(ok.overallCode).toBe(CODE.OK);
  });

  test('gRPC health: "" and "ratelimit" serve, other names are NOT_FOUND', async () => {
    const health = new HealthClient(svc.grpc, grpc.credentials.createInsecure());
    const check = (service: string) =>
      new Promise<{ status?: number; err?: grpc.ServiceError }>((resolve) =>
        health.check({ service }, (err, res) => resolve(err ? { err } : { status: res.status })),
      );
    expect(await check('')).toEqual({ status: HealthCheckResponse_ServingStatus.SERVING });
    expect(await check('ratelimit')).toEqual({ status: HealthCheckResponse_ServingStatus.SERVING });
    expect((await check('other')).err?.code).toBe(grpc.status.NOT_FOUND);
    health.close();
  });

  test('/json answers 200, 429 and proto3 JSON bodies', async () => {
    await inOneWindow(60_000);
    const body = (v: string) => JSON.stringify({ domain: 'e2e', descriptors: [{ entries: [{ key: 'user', value: v }] }] });
    const ok = await httpPost(svc.http, '/json', body('json-user'));
    expect(ok.status).toBe(200);
    expect(ok.headers.get('content-type')).toBe('application/json');
    const parsed = JSON.parse(ok.body);
    expect(parsed.overallCode).toBe('OK');
    expect(parsed.statuses[0]).toMatchObject({
      code: 'OK',
      currentLimit: { requestsPerUnit: 3, unit: 'MINUTE' },
      limitRemaining: 2,
    });
    expect(parsed.statuses[0].durationUntilReset).toMatch(/^\d+s$/);
    await httpPost(svc.http, '/json', body('json-user'));
    await httpPost(svc.http, '/json', body('json-user'));
    const over = await httpPost(svc.http, '/json', body('json-user'));
    expect(over.status).toBe(429);
    expect(JSON.parse(over.body).overallCode).toBe('OVER_LIMIT');
    const snake = await httpPost(
      svc.http,
      '/json',
      '{"domain":"e2e","hits_addend":0,"descriptors":[{"entries":[{"key":"user","value":"snake"}],"hits_addend":"0"}]}',
    );
    expect(JSON.parse(snake.body).statuses[0].limitRemaining).toBe(3);
  });

  test.each([
    ['empty body', ''],
    ['invalid JSON', '{"domain":'],
    ['unknown field', '{"domain":"e2e","descriptors":[],"bogus":1}'],
    ['wrong type', '{"domain":5}'],
    ['not an object', '[]'],
    ['empty domain', '{"domain":"","descriptors":[{"entries":[{"key":"user","value":"x"}]}]}'],
    ['no descriptors', '{"domain":"e2e","descriptors":[]}'],
    ['invalid UTF-8', Buffer.from([0x7b, 0x22, 0x64, 0x6f, 0x6d, 0x61, 0x69, 0x6e, 0x22, 0x3a, 0x22, 0xff, 0x22, 0x7d])],
  ])('/json answers 400 for %s', async (_name, body) => {
    const res = await httpPost(svc.http, '/json', body);
    expect(res.status).toBe(400);
    expect(res.body).toBe('Bad Request\n');
    expect(res.headers.get('x-error-detail')).toBeTruthy();
  });

  test('/json refuses an oversized body with 413, and unknown paths are 404', async () => {
    const res = await httpPost(svc.http, '/json', 'x'.repeat(2 * 1024 * 1024));
    expect(res.status).toBe(413);
    const missing = await httpGet(svc.http, '/nope');
    expect(missing).toEqual({ status: 404, body: '404 page not found\n' });
  });

  test('/healthcheck answers 200 OK', async () => {
    expect(await httpGet(svc.http, '/healthcheck')).toEqual({ status: 200, body: 'OK' });
  });

  test('debug port: index, /rlconfig and /stats with the rate limit counters', async () => {
    const index = await httpGet(svc.debug, '/');
    expect(index.body).toContain('/rlconfig: print out the currently loaded configuration for debugging\n');
    expect(index.body).toContain('/stats: print out stats\n');
    const other = await httpGet(svc.debug, '/whatever');
    expect(other.body).toBe(index.body);
    const cfg = await httpGet(svc.debug, '/rlconfig');
    expect(cfg.body).toContain('e2e.user: unit=MINUTE requests_per_unit=3, shadow_mode: false, quota_mode: false\n');
    expect(cfg.body).toContain('e2e.free: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false\n');
    const stats = await httpGet(svc.debug, '/stats');
    expect(stats.body).toMatch(/^ratelimit\.service\.rate_limit\.e2e\.user\.total_hits: \d+$/m);
    expect(stats.body).toMatch(/^ratelimit\.service\.config_load_success: 1$/m);
    expect(stats.body).toMatch(/^ratelimit_server\.ShouldRateLimit\.total_requests: \d+$/m);
    expect(stats.body).toMatch(/^ratelimit\.service\.call\.should_rate_limit\.service_error: \d+$/m);
  });

  test('debug port records a CPU profile', async () => {
    const res = await httpGet(svc.debug, '/debug/pprof/profile?seconds=0.2');
    expect(res.status).toBe(200);
    expect(JSON.parse(res.body)).toHaveProperty('nodes');
    expect((await httpGet(svc.debug, '/debug/pprof/profile?seconds=abc')).status).toBe(400);
  });

  test('editing the config reloads it; a bad edit keeps the previous config', async () => {
    const file = path.join(dir.configDir, 'e2e.yaml');
    fs.writeFileSync(file, CONFIG.replace('requests_per_unit: 3', 'requests_per_unit: 7'));
    await waitFor(async () => (await httpGet(svc.debug, '/rlconfig')).body.includes('e2e.user: unit=MINUTE requests_per_unit=7'), '(await httpGet(svc.debug, \'/rlconfig\')).body.includes(\'e2e.user: un...');
    const res = await callGrpc(client, { domain: 'e2e', descriptors: [descriptor('user', 'reloaded')] });
    expect(res.statuses[0]!.limitRemaining).toBe(6);

    fs.writeFileSync(path.join(dir.configDir, 'broken.yaml'), 'domain: other\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight}\n');
    await waitFor(async () => /config_load_error: 1$/m.test((await httpGet(svc.debug, '/stats')).body), '/config_load_error: 1$/m.test((await httpGet(svc.debug, \'/stats\'))....');
    expect(svc.output()).toContain("Error loading new configuration: broken.yaml: invalid rate limit unit 'fortnight'");
    const still = await callGrpc(client, { domain: 'e2e', descriptors: [descriptor('user', 'reloaded')] });
    // The limit of the edited config (its window may have turned since the first call: a
    // remaining count would depend on the minute).
    expect(still.statuses[0]!.currentLimit?.requestsPerUnit).toBe(7);

    fs.rmSync(path.join(dir.configDir, 'broken.yaml'));
    await waitFor(async () => /config_load_success: 3$/m.test((await httpGet(svc.debug, '/stats')).body), '/config_load_success: 3$/m.test((await httpGet(svc.debug, \'/stats\')...');
  });
});
