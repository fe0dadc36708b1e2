/**
 * End to end, on the memory store and on a real Redis (and a known sequence on Memcached): /debug/denials keeps the last
 * DEBUG_DENIALS_SIZE OVER_LIMIT decisions of /json and gRPC calls (newest first, paged, with
 * their rule, values, hits, limit, reset, transport and caller), DEBUG_VALUES hashes or hides the
 * values and addresses, the line per denial is capped at DEBUG_DENIALS_LOG_PER_SECOND with one
 * line telling the number left out, and bad query parameters are a 400 with a one-line reason.
 */
import fs from 'node:fs';
import { incrementsProcessed, MemcachedServer } from '../support/memcached';
import { type RedisServer, startRedis } from '../support/redis';
import { baseEnv, callGrpc, descriptor, grpcClient, httpGet, httpPost, runtimeDir, type Service, startService } from './harness';
import { inOneWindow, waitFor } from '../support/wait';

const CONFIG = `
domain: dn
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: free
    rate_limit: {unit: hour, requests_per_unit: 1000000}
`;

interface Denial {
  seq: number;
  time: string;
  domain: string;
  rule: string;
  descriptor?: Array<{ key: string; value: string }>;
  descriptor_omitted?: string;
  hits: number;
  limit: { requests_per_unit: number; unit: string };
  reset_seconds: number;
  transport: string;
  caller?: string;
  answered: string;
}
interface Page {
  size: number;
  recorded: number;
  kept: number;
  denials: Denial[];
  next_before?: number;
}

/** RateLimitResponse.Code on the wire. */
const OK = 1;
const OVER_LIMIT = 2;

const json = (user: string) => JSON.stringify({ domain: 'dn', descriptors: [{ entries: [{ key: 'user', value: user }] }] });

async function page(svc: Service, query = ''): Promise<Page> {
  const res = await httpGet(svc.debug, `/debug/denials${query}`);
  expect(res.status).toBe(200);
  return JSON.parse(res.body) as Page;
}

/** The lines of the output the service wrote about denials. */
function denialLines(out: string): { each: string[]; leftOut: number[] } {
  const each = out.split('\n').filter((l) => l.includes('msg="over limit"'));
  const leftOut = [...out.matchAll(/over limit: (\d+) more denials in that second were not logged/g)].map((m) => Number(m[1]));
  return { each, leftOut };
}

describe.each(['memory', 'redis'] as const)('denials on the %s store', (store) => {
  let redis: RedisServer | undefined;
  let dir: ReturnType<typeof runtimeDir>;
  const services: Service[] = [];

  const env = (extra: Record<string, string>): NodeJS.ProcessEnv => {
    const e: NodeJS.ProcessEnv = { ...baseEnv(dir.root), ...extra };
    if (store === 'redis') Object.assign(e, { BACKEND_TYPE: 'redis', REDIS_SOCKET_TYPE: 'tcp', REDIS_URL: redis!.address });
    return e;
  };
  const start = async (extra: Record<string, string>): Promise<Service> => {
    const svc = await startService(env(extra));
    services.push(svc);
    return svc;
  };

  beforeAll(async () => {
    if (store === 'redis') redis = await startRedis();
    dir = runtimeDir({ 'dn.yaml': CONFIG });
  });
  afterEach(async () => {
    for (const s of services.splice(0)) expect(await s.stop()).toBe(0);
    await redis?.cli(['FLUSHALL']);
  });
  afterAll(async () => {
    await redis?.stop();
    fs.rmSync(dir.base, { recursive: true, force: true });
  });

  test('the ring keeps the last N denials of /json and gRPC, newest first, in pages', async () => {
    await inOneWindow(3_600_000, 60_000);
    const svc = await start({ DEBUG_DENIALS_SIZE: '3' });
    // alice over /json: 1 OK, then 2 denials; bob over gRPC: 1 OK, then 2 denials; a free call.
    const answers: number[] = [];
    for (let i = 0; i < 3; i++) answers.push((await httpPost(svc.http, '/json', json('alice'))).status);
    expect(answers).toEqual([200, 429, 429]);
    const client = grpcClient(svc.grpc);
    const codes: number[] = [];
    for (let i = 0; i < 3; i++) codes.push((await callGrpc(client, { domain: 'dn', descriptors: [descriptor('user', 'bob'), descriptor('free', 'x')] })).overallCode);
    client.close();
    expect(codes).toEqual([OK, OVER_LIMIT, OVER_LIMIT]);

    const all = await page(svc);
    expect(all).toMatchObject({ size: 3, recorded: 4, kept: 3 });
    expect(all.next_before).toBeUndefined();
    // Only what was denied: bob's `free` descriptor passed in the same calls and is not there.
    expect(all.denials.map((d) => [d.seq, d.descriptor?.[0]?.value, d.transport])).toEqual([
      [4, 'bob', 'grpc'],
      [3, 'bob', 'grpc'],
      [2, 'alice', 'http'],
    ]);
    for (const d of all.denials) {
      expect(d).toMatchObject({
        domain: 'dn',
        rule: 'dn.user',
        descriptor: [{ key: 'user', value: expect.any(String) }],
        hits: 1,
        limit: { requests_per_unit: 1, unit: 'HOUR' },
        caller: '127.0.0.1',
        answered: 'OVER_LIMIT',
      });
      expect(d.reset_seconds).toBeGreaterThan(0);
      expect(d.reset_seconds).toBeLessThanOrEqual(3600);
      expect(Math.abs(Date.parse(d.time) - Date.now())).toBeLessThan(60_000);
    }

    // Pages of 2: the first says where the next starts; the last says nothing.
    const first = await page(svc, '?limit=2');
    expect(first.denials.map((d) => d.seq)).toEqual([4, 3]);
    expect(first.next_before).toBe(3);
    const second = await page(svc, `?limit=2&before=${first.next_before}`);
    expect(second.denials.map((d) => d.seq)).toEqual([2]);
    expect(second.next_before).toBeUndefined();
    // Filters.
    expect((await page(svc, '?rule=dn.user&domain=dn')).denials).toHaveLength(3);
    expect((await page(svc, '?domain=other')).denials).toEqual([]);
  });

  test('DEBUG_VALUES=hash shows each value (and the caller) as the same hash; hide shows none', async () => {
    await inOneWindow(3_600_000, 60_000);
    const hashed = await start({ DEBUG_VALUES: 'hash', DEBUG_DENIALS_LOG_PER_SECOND: '10' });
    for (let i = 0; i < 3; i++) await httpPost(hashed.http, '/json', json('carol@example.com'));
    const h = await page(hashed);
    expect(h.denials).toHaveLength(2);
    const [a, b] = h.denials.map((d) => d.descriptor![0]!.value);
    expect(a).toMatch(/^#[0-9a-f]{16}$/);
    expect(b).toBe(a);
    expect(h.denials[0]!.caller).toMatch(/^#[0-9a-f]{16}$/);
    expect(hashed.output()).not.toContain('carol@example.com');
    await waitFor(() => denialLines(hashed.output()).each.length === 2, 'two denial lines');
    expect(denialLines(hashed.output()).each[0]).toContain(`descriptor="user=${a}"`);

    const hidden = await start({ DEBUG_VALUES: 'hide', DEBUG_DENIALS_LOG_PER_SECOND: '10' });
    for (let i = 0; i < 2; i++) await httpPost(hidden.http, '/json', json('dave'));
    const d = (await page(hidden)).denials;
    expect(d.map((x) => [x.descriptor, x.caller])).toEqual([[[{ key: 'user', value: '(hidden)' }], '(hidden)']]);
    await waitFor(() => denialLines(hidden.output()).each.length === 1, 'a denial line');
    expect(denialLines(hidden.output()).each[0]).toContain('descriptor="user=(hidden)" hits=1');
    expect(denialLines(hidden.output()).each[0]).toContain('caller="(hidden)"');
    expect(hidden.output()).not.toContain('dave');
  });

  test('the line per denial is capped per second, then one line tells how many were left out', async () => {
    await inOneWindow(3_600_000, 60_000);
    const svc = await start({ DEBUG_DENIALS_LOG_PER_SECOND: '2' });
    const client = grpcClient(svc.grpc);
    await callGrpc(client, { domain: 'dn', descriptors: [descriptor('user', 'eve')] });
    // 30 denials at once: the first second of lines is spent after 2.
    const denied = 30;
    const res = await Promise.all(Array.from({ length: denied }, () => callGrpc(client, { domain: 'dn', descriptors: [descriptor('user', 'eve')] })));
    client.close();
    expect(res.every((r) => r.overallCode === OVER_LIMIT)).toBe(true);
    // Every denial is either a line or counted in a left-out line, told when its second ends.
    await waitFor(() => {
      const { each, leftOut } = denialLines(svc.output());
      return each.length + leftOut.reduce((x, y) => x + y, 0) === denied;
    }, 'lines and left-out counts adding up to the denials');
    const { each, leftOut } = denialLines(svc.output());
    expect(leftOut.length).toBeGreaterThanOrEqual(1);
    // The second that left some out wrote exactly 2 lines before its left-out line (the burst came
    // at once: the first second is that one); the lines in all are 2 a second that had any.
    const ordered = svc.output().split('\n').filter((l) => l.includes('msg="over limit'));
    const firstLeftOut = ordered.findIndex((l) => l.includes('were not logged'));
    expect(firstLeftOut).toBe(2);
    expect(each.length).toBeLessThanOrEqual(2 * (leftOut.length + 1));
    expect(each[0]).toMatch(/level=info msg="over limit" domain=dn rule=dn\.user descriptor="user=eve" hits=1 limit=1\/HOUR reset_seconds=\d+ transport=grpc caller=127\.0\.0\.1 answered=OVER_LIMIT/);
    expect((await page(svc)).recorded).toBe(denied);
  });

  test('bad query parameters are answered 400 with a one-line reason', async () => {
    const svc = await start({});
    const cases: Array<[string, RegExp]> = [
      ['?limit=0', /^limit must be a whole number from 1 to 1000, not '0'$/],
      ['?limit=1001', /^limit must be a whole number from 1 to 1000/],
      ['?limit=abc', /^limit must be a whole number/],
      ['?before=-1', /^before must be a denial's sequence number/],
      ['?limit=1&limit=2', /^query parameter 'limit' is given more than once$/],
      ['?user=alice', /^unknown query parameter 'user' \(expected limit, before, domain, rule\)$/],
      ['?domain=', /^domain must not be empty$/],
    ];
    for (const [query, reason] of cases) {
      const res = await httpGet(svc.debug, `/debug/denials${query}`);
      expect([query, res.status]).toEqual([query, 400]);
      expect(res.body.endsWith('\n')).toBe(true);
      expect(res.body.trimEnd().split('\n')).toHaveLength(1);
      expect(res.body.trimEnd()).toMatch(reason);
    }
    // Off: the page says so.
    const off = await start({ DEBUG_DENIALS_SIZE: '0' });
    const res = await httpGet(off.debug, '/debug/denials');
    expect(res.status).toBe(404);
    expect(res.body).toContain('DEBUG_DENIALS_SIZE=0');
  });
});

test('Memcached: the denials of a known sequence, from the counts Memcached returns', async () => {
  await inOneWindow(3_600_000, 60_000);
  const mc = await MemcachedServer.start();
  const dir = runtimeDir({ 'dn.yaml': CONFIG });
  const svc = await startService({ ...baseEnv(dir.root), BACKEND_TYPE: 'memcache', MEMCACHE_HOST_PORT: mc.address });
  try {
    // Increments are asynchronous (as upstream): each lands before the next call reads.
    const answers: number[] = [];
    for (let i = 1; i <= 3; i++) {
      answers.push((await httpPost(svc.http, '/json', json('mallory'))).status);
      await waitFor(async () => (await incrementsProcessed(mc.port)) >= i, `increment ${i} to land in memcached`);
    }
    expect(answers).toEqual([200, 429, 429]);
    const all = await page(svc);
    expect(all).toMatchObject({ recorded: 2, kept: 2 });
    expect(all.denials.map((d) => [d.seq, d.descriptor?.[0]?.value, d.transport, d.rule, d.hits, d.answered])).toEqual([
      [2, 'mallory', 'http', 'dn.user', 1, 'OVER_LIMIT'],
      [1, 'mallory', 'http', 'dn.user', 1, 'OVER_LIMIT'],
    ]);
    expect(all.denials[0]!.limit).toEqual({ requests_per_unit: 1, unit: 'HOUR' });
  } finally {
    expect(await svc.stop()).toBe(0);
    await mc.stop();
    fs.rmSync(dir.base, { recursive: true, force: true });
  }
});
