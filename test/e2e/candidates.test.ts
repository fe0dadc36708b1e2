/**
 * End to end, candidate limits (a rule's `candidate:` block) on the built service: counted beside
 * the enforced limit on the memory store, Redis and Memcached (real servers) without changing one
 * answer (every /json and gRPC response is compared with the same config's, in a domain without
 * the candidate), `candidate_would_limit` and /debug/candidates after a known sequence, the
 * candidate's own cache keys read from Redis and Memcached, /debug/explain, a bad candidate block
 * and a store that cannot count candidates refused at load with a clear error, bad query
 * parameters answered 400.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { MemcachedServer, incrementsProcessed, rawGet } from '../support/memcached';
import { freePort, startCluster, startRedis } from '../support/redis';
import { waitFor } from '../support/wait';
import { baseEnv, callGrpc, DIST, descriptor, grpcClient, httpGet, httpPost, run, runtimeDir, startService, type Service } from './harness';

/** The same rules in two domains; `cand`'s `user` carries a candidate of 2 a day beside 4 a day. */
const CONFIG = (domain: string, candidate: string): string => `
domain: ${domain}
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 4, name: per-user}
${candidate}
  - key: ip
    rate_limit: {unit: day, requests_per_unit: 100}
`;
const CANDIDATE = '    candidate: {unit: day, requests_per_unit: 2}';
const FILES = { 'cand.yaml': CONFIG('cand', CANDIDATE), 'plain.yaml': CONFIG('plain', '') };

const P = 'ratelimit.service.rate_limit.';

async function stat(svc: Service, name: string): Promise<number | undefined> {
  const body = (await httpGet(svc.debug, '/stats')).body;
  const line = body.split('\n').find((l) => l.startsWith(name + ': '));
  return line === undefined ? undefined : Number(line.slice(name.length + 2));
}

/** One call of the sequence: its descriptors (`user` and maybe `ip`), hits, and transport. */
interface Step {
  readonly user: string;
  readonly ip: boolean;
  readonly hits: number;
  readonly json: boolean;
}

/** alice 5 times (over 4 at the 5th, over the candidate's 2 from the 3rd), bob 2, carol 1, each with an ip; dave once with 3 hits. */
const SEQUENCE: Step[] = [
  ...['alice', 'alice', 'alice', 'alice', 'alice', 'bob', 'bob', 'carol'].map((user, i) => ({ user, ip: true, hits: 1, json: i % 2 === 0 })),
  { user: 'dave', ip: false, hits: 3, json: true },
  { user: 'dave', ip: false, hits: 1, json: false },
];

/** What the candidate saw after SEQUENCE: 10 calls, 12 hits; alice's 3rd to 5th and both of dave's over 2. */
const EXPECTED = { calls: 10, hits: 12, would_deny: 5, would_limit_hits: 5, uncounted_hits: 0, distinct_keys: 4, peak_used: 5, peak_utilization: 2.5 };

/**
 * A response as compared across the two domains, and its seconds until the reset (each status's
 * duration, the reset header) apart: they may differ by one between two calls a few ms apart.
 */
function comparable(text: string): { body: unknown; resets: number[] } {
  const resets: number[] = [];
  const body: unknown = JSON.parse(text, (k, v: unknown) => {
    if (k === 'durationUntilReset') {
      resets.push(typeof v === 'string' ? parseInt(v, 10) : Number((v as { seconds: string }).seconds));
      return '~';
    }
    const h = v as { key?: unknown; value?: unknown } | null;
    if (h !== null && typeof h === 'object' && typeof h.key === 'string' && /reset/i.test(h.key)) {
      resets.push(Number(h.value));
      return { ...h, value: '~' };
    }
    return v;
  });
  return { body, resets };
}

/**
 * Runs SEQUENCE in `cand` and in `plain`, one call each in turn, and expects each pair of answers
 * to be the same (code, statuses, limits, remaining, headers; the seconds until the reset within one).
 */
async function runCompared(svc: Service, settle: (incrs: number) => Promise<void> = async () => {}): Promise<void> {
  const client = grpcClient(svc.grpc);
  let incrs = 0;
  try {
    for (const step of SEQUENCE) {
      const answers: Array<{ body: unknown }> = [];
      const resets: number[][] = [];
      for (const domain of ['cand', 'plain']) {
        const entries = [[{ key: 'user', value: step.user }], ...(step.ip ? [[{ key: 'ip', value: '10.0.0.1' }]] : [])];
        if (step.json) {
          const res = await httpPost(svc.http, '/json', JSON.stringify({ domain, hits_addend: step.hits, descriptors: entries.map((e) => ({ entries: e })) }));
          // The body holds the statuses and the headers to add (responseHeadersToAdd).
          const c = comparable(res.body);
          answers.push({ body: { status: res.status, body: c.body } });
          resets.push(c.resets);
        } else {
          const res = await callGrpc(client, { domain, hitsAddend: step.hits, descriptors: entries.map((e) => descriptor(...e.flatMap((x) => [x.key, x.value]))) });
          const c = comparable(JSON.stringify(res, (_k, v: unknown) => (typeof v === 'bigint' ? String(v) : v)));
          answers.push({ body: c.body });
          resets.push(c.resets);
        }
        // Memcached counts after answering: one increment per key with hits (the candidate's too).
        incrs += entries.length + (domain === 'cand' ? 1 : 0);
        await settle(incrs);
      }
      expect(answers[0]).toEqual(answers[1]);
      expect(resets[0]!.length).toBe(resets[1]!.length);
      // A status's reset and the reset header each (LIMIT_RESPONSE_HEADERS_ENABLED in every test).
      expect(resets[0]!.length).toBeGreaterThan(1);
      resets[0]!.forEach((r, i) => expect(Math.abs(r - resets[1]![i]!)).toBeLessThanOrEqual(1));
    }
  } finally {
    client.close();
  }
}

/** Starts the service on `env` and expects its first config load to fail with `message` (it then waits for a good config). */
async function refusedAtLoad(env: NodeJS.ProcessEnv, message: string): Promise<void> {
  const proc = spawn(process.execPath, [path.join(DIST, 'ratelimit.js')], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  proc.stdout.on('data', (d: Buffer) => (out += d.toString()));
  proc.stderr.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise((resolve) => proc.once('exit', resolve));
  try {
    await waitFor(() => out.includes('the first configuration failed to load'), 'the failed first load', 15_000).catch(() => undefined);
    expect(out).toContain(message);
  } finally {
    proc.kill('SIGKILL');
    await exited;
  }
}

async function candidatesPage(svc: Service, query = ''): Promise<{ status: number; body: string }> {
  return httpGet(svc.debug, '/debug/candidates' + query);
}

/** The figures /debug/candidates and the stats show after SEQUENCE, whatever the store. */
async function expectFigures(svc: Service): Promise<void> {
  const page = await candidatesPage(svc);
  expect(page.status).toBe(200);
  const json = JSON.parse(page.body) as { total: number; candidates: Array<Record<string, unknown>> };
  expect(json.total).toBe(1);
  const c = json.candidates[0]!;
  expect(c).toMatchObject({
    domain: 'cand',
    rule: 'cand.user',
    name: 'per-user',
    enforced: { requests_per_unit: 4, unit: 'DAY' },
    candidate: { requests_per_unit: 2, unit: 'DAY' },
    ...EXPECTED,
  });
  const top = c['top_keys'] as Array<Record<string, unknown>>;
  // Sampled one call in 16 (the default), so which keys are listed varies; each listed key is one of the sequence's.
  for (const t of top) expect(['user=alice', 'user=bob', 'user=carol', 'user=dave']).toContain(t['entries']);
  expect(await stat(svc, `${P}cand.user.candidate_would_limit`)).toBe(EXPECTED.would_limit_hits);
  // The enforced limit's stats are the same in both domains: the candidate counted nothing there.
  for (const s of ['total_hits', 'over_limit', 'near_limit', 'within_limit']) {
    expect(await stat(svc, `${P}cand.user.${s}`)).toBe(await stat(svc, `${P}plain.user.${s}`));
  }
  expect(await stat(svc, `${P}cand.user.over_limit`)).toBe(1);
}

describe('candidate limits', () => {
  test('memory store: counted without changing one answer over /json and gRPC; would_limit, /debug/candidates, Prometheus and explain', async () => {
    const dir = runtimeDir(FILES);
    const promPort = await freePort();
    const svc = await startService({ ...baseEnv(dir.root), USE_PROMETHEUS: 'true', PROMETHEUS_ADDR: `127.0.0.1:${promPort}`, LIMIT_RESPONSE_HEADERS_ENABLED: 'true', HOT_KEYS_SAMPLE_ONE_IN: '1' });
    try {
      await runCompared(svc);
      await expectFigures(svc);
      // Every call sampled (HOT_KEYS_SAMPLE_ONE_IN=1): the top keys are exact.
      const page = JSON.parse((await candidatesPage(svc, '?domain=cand&rule=per-user&k=2')).body) as { candidates: Array<{ top_keys: unknown[] }> };
      expect(page.candidates[0]!.top_keys).toEqual([
        expect.objectContaining({ entries: 'user=alice', hits: 5, would_limit_hits: 3, remaining: 0 }),
        expect.objectContaining({ entries: 'user=dave', hits: 4, would_limit_hits: 2, remaining: 0 }),
      ]);
      const scrape = (await httpGet(`127.0.0.1:${promPort}`, '/metrics')).body;
      expect(scrape).toMatch(/^ratelimit_service_rate_limit_candidate_would_limit\{domain="cand",key1="user"\} 5$/m);

      expect((await httpGet(svc.debug, '/rlconfig')).body).toContain(
        'cand.user: unit=DAY requests_per_unit=4, shadow_mode: false, quota_mode: false, candidate: unit=DAY requests_per_unit=2\n',
      );
      const explain = (await httpGet(svc.debug, '/debug/explain?domain=cand&descriptors=user=alice')).body;
      expect(explain).toContain('candidate: 2 per DAY: counted beside the rule, never changes the answer');
      expect(explain).toMatch(/candidate cache key: cand_user_alice_\d+_cand\n/);
      expect(explain).toContain('candidate count: 5 of 2');
      expect(explain).toContain('count: 5 of 4 in this window');
    } finally {
      expect(await svc.stop()).toBe(0);
      fs.rmSync(dir.base, { recursive: true, force: true });
    }
  }, 120_000);

  test('Redis (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT on): the same answers and figures; the candidate keys are its own, read from Redis', async () => {
    const redis = await startRedis();
    const dir = runtimeDir(FILES);
    const svc = await startService({
      ...baseEnv(dir.root),
      BACKEND_TYPE: 'redis',
      REDIS_SOCKET_TYPE: 'tcp',
      REDIS_URL: redis.address,
      LIMIT_RESPONSE_HEADERS_ENABLED: 'true',
      STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: 'true',
    });
    try {
      await runCompared(svc);
      await expectFigures(svc);
      const keys = (await redis.cli(['--raw', 'KEYS', '*'])).split('\n').filter((k) => k !== '').sort();
      const cand = keys.filter((k) => k.startsWith('cand_'));
      const plain = keys.filter((k) => k.startsWith('plain_'));
      // The enforced keys are upstream's, the same as the plain domain's; the candidate's end in _cand.
      expect(cand.filter((k) => !k.endsWith('_cand')).map((k) => k.replace(/^cand_/, ''))).toEqual(plain.map((k) => k.replace(/^plain_/, '')));
      const candidateKeys = cand.filter((k) => k.endsWith('_cand'));
      expect(candidateKeys.map((k) => k.replace(/_\d+_cand$/, ''))).toEqual(['cand_user_alice', 'cand_user_bob', 'cand_user_carol', 'cand_user_dave']);
      for (const k of candidateKeys) expect(cand).toContain(k.replace(/_cand$/, ''));
      expect(await redis.cli(['--raw', 'GET', candidateKeys[0]!])).toBe('5\n');
      const enforcedAlice = candidateKeys[0]!.replace(/_cand$/, '');
      // STOP_CACHE_KEY_INCREMENT: alice's enforced counter is charged as without the candidate.
      expect(await redis.cli(['--raw', 'GET', enforcedAlice])).toBe(await redis.cli(['--raw', 'GET', enforcedAlice.replace(/^cand_/, 'plain_')]));
      expect(Number(await redis.cli(['--raw', 'TTL', candidateKeys[0]!]))).toBeGreaterThan(0);
    } finally {
      expect(await svc.stop()).toBe(0);
      await redis.stop();
      fs.rmSync(dir.base, { recursive: true, force: true });
    }
  }, 120_000);

  test('Memcached: the same answers and figures; the candidate key is its own, read from memcached', async () => {
    const mc = await MemcachedServer.start();
    const dir = runtimeDir(FILES);
    const svc = await startService({ ...baseEnv(dir.root), BACKEND_TYPE: 'memcache', MEMCACHE_HOST_PORT: mc.address, LIMIT_RESPONSE_HEADERS_ENABLED: 'true' });
    try {
      // Increments are asynchronous (as upstream): each lands before the next read.
      await runCompared(svc, (n) => waitFor(async () => (await incrementsProcessed(mc.port)) >= n, `increment ${n} to land in memcached`));
      await expectFigures(svc);
      const explain = (await httpGet(svc.debug, '/debug/explain?domain=cand&descriptors=user=alice')).body;
      const key = /candidate cache key: (\S+)\n/.exec(explain)![1]!;
      expect(key).toMatch(/^cand_user_alice_\d+_cand$/);
      expect(await rawGet(mc.port, key)).toBe('5');
      expect(await rawGet(mc.port, key.replace(/_cand$/, ''))).toBe('5');
    } finally {
      expect(await svc.stop()).toBe(0);
      await mc.stop();
      fs.rmSync(dir.base, { recursive: true, force: true });
    }
  }, 120_000);

  test('Redis: a candidate goes to the instance of the limit it follows (REDIS_PERSECOND); Redis Cluster refuses candidates at load', async () => {
    const main = await startRedis();
    const perSecond = await startRedis();
    const dir = runtimeDir({
      'cand.yaml': 'domain: cand\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 100}\n    candidate: {unit: minute, requests_per_unit: 1}\n',
    });
    try {
      const svc = await startService({
        ...baseEnv(dir.root),
        BACKEND_TYPE: 'redis',
        REDIS_SOCKET_TYPE: 'tcp',
        REDIS_URL: main.address,
        REDIS_PERSECOND: 'true',
        REDIS_PERSECOND_SOCKET_TYPE: 'tcp',
        REDIS_PERSECOND_URL: perSecond.address,
      });
      try {
        const res = await httpPost(svc.http, '/json', JSON.stringify({ domain: 'cand', descriptors: [{ entries: [{ key: 'user', value: 'alice' }] }] }));
        expect(res.status).toBe(200);
        // The per-second limit's key and its per-minute candidate's, both on the per-second instance.
        const ps = (await perSecond.cli(['--raw', 'KEYS', '*'])).split('\n').filter((k) => k !== '').sort();
        expect(ps).toHaveLength(2);
        expect(ps.filter((k) => /^cand_user_alice_\d+_cand$/.test(k))).toHaveLength(1);
        expect(await main.cli(['--raw', 'DBSIZE'])).toBe('0\n');
      } finally {
        expect(await svc.stop()).toBe(0);
      }
    } finally {
      await main.stop();
      await perSecond.stop();
    }
    const cluster = await startCluster({ masters: 3 });
    try {
      await refusedAtLoad(
        { ...baseEnv(dir.root), BACKEND_TYPE: 'redis', REDIS_SOCKET_TYPE: 'tcp', REDIS_TYPE: 'cluster', REDIS_URL: cluster.url },
        "rate limit 'cand.user': candidate limits are not supported by the redis cluster store (a candidate's key may live on another node than its rule's",
      );
    } finally {
      await cluster.stop();
      fs.rmSync(dir.base, { recursive: true, force: true });
    }
  }, 120_000);

  test('a bad candidate block is refused with a clear error naming the rule, by the service and by ratelimit-config-check; a store that cannot count it refuses it at load', async () => {
    const bad: Array<[string, string]> = [
      ['    candidate: {unit: fortnight, requests_per_unit: 2}', "candidate of 'cand.user': invalid unit 'fortnight'"],
      ['    candidate: {unit: day, requests_per_unit: 2, name: x}', "candidate of 'cand.user': a candidate has no name"],
      ['    candidate: {unit: day, requests_per_unit: 2, algorithm: leaky}', "candidate of 'cand.user': invalid rate limit algorithm 'leaky'"],
    ];
    for (const [block, message] of bad) {
      const dir = runtimeDir({ 'cand.yaml': CONFIG('cand', block) });
      try {
        const checked = await run('config-check.js', ['-config_dir', dir.configDir]);
        expect(checked.code).toBe(1);
        expect(checked.stdout).toContain(message);
        await refusedAtLoad(baseEnv(dir.root), message);
      } finally {
        fs.rmSync(dir.base, { recursive: true, force: true });
      }
    }
    // No rate_limit beside it: nothing to count it beside.
    const lone = runtimeDir({ 'cand.yaml': 'domain: cand\ndescriptors:\n  - key: user\n    candidate: {unit: day, requests_per_unit: 2}\n' });
    try {
      await refusedAtLoad(baseEnv(lone.root), "candidate of 'cand.user': a candidate is counted beside a rate_limit, and this descriptor has none");
    } finally {
      fs.rmSync(lone.base, { recursive: true, force: true });
    }
    // The checker accepts a good one and shows it.
    const good = runtimeDir(FILES);
    try {
      const checked = await run('config-check.js', ['-config_dir', good.configDir]);
      expect(checked.code).toBe(0);
      expect(checked.stdout).toContain('candidate limit: cand.user: unit=DAY requests_per_unit=2 (beside unit=DAY requests_per_unit=4: counted, never enforced)');
    } finally {
      fs.rmSync(good.base, { recursive: true, force: true });
    }
    // Memcached has no atomic read-modify-write for a token bucket, a candidate's included.
    const mc = await MemcachedServer.start();
    const tb = runtimeDir({ 'cand.yaml': CONFIG('cand', '    candidate: {unit: day, requests_per_unit: 2, algorithm: token_bucket}') });
    try {
      await refusedAtLoad(
        { ...baseEnv(tb.root), BACKEND_TYPE: 'memcache', MEMCACHE_HOST_PORT: mc.address },
        "rate limit 'cand.user.candidate': algorithm token_bucket is not supported by the memcache store",
      );
    } finally {
      await mc.stop();
      fs.rmSync(tb.base, { recursive: true, force: true });
    }
  }, 120_000);

  test('/debug/candidates answers bad query parameters with a 400 and a one-line reason, and pages its answers', async () => {
    const many = Array.from({ length: 5 }, (_, i) => `  - key: k${i}\n    rate_limit: {unit: day, requests_per_unit: 4}\n    candidate: {unit: day, requests_per_unit: 2}\n`).join('');
    const dir = runtimeDir({ ...FILES, 'many.yaml': `domain: many\ndescriptors:\n${many}` });
    const svc = await startService(baseEnv(dir.root));
    try {
      const cases: Array<[string, RegExp]> = [
        ['?bogus=1', /^unknown parameter "bogus": candidates takes domain, rule, k, offset and limit$/],
        ['?k=0', /^k must be an integer from 1 to 10 \(HOT_KEYS_TOP_K\), not "0"$/],
        ['?k=11', /^k must be an integer from 1 to 10/],
        ['?limit=1001', /^limit must be an integer from 1 to 1000, not "1001"$/],
        ['?offset=-1', /^offset must be an integer from 0 to/],
        ['?domain=nope', /^domain "nope" has no candidate limits$/],
        ['?domain=cand&rule=ip', /^domain "cand" has no candidate limit on "ip"/],
        ['?rule=user', /^rule needs domain$/],
        ['?k=1&k=2', /^parameter "k" is given more than once$/],
      ];
      for (const [query, reason] of cases) {
        const res = await candidatesPage(svc, query);
        expect([query, res.status]).toEqual([query, 400]);
        expect(res.body.trimEnd()).toMatch(reason);
        expect(res.body.trimEnd().includes('\n')).toBe(false);
      }
      const first = JSON.parse((await candidatesPage(svc, '?limit=4')).body) as { total: number; next_offset?: number; candidates: Array<{ rule: string }> };
      expect(first.total).toBe(6);
      expect(first.candidates).toHaveLength(4);
      expect(first.next_offset).toBe(4);
      const rest = JSON.parse((await candidatesPage(svc, '?limit=4&offset=4')).body) as { next_offset?: number; candidates: Array<{ rule: string }> };
      expect(rest.candidates).toHaveLength(2);
      expect(rest.next_offset).toBeUndefined();
      expect(new Set([...first.candidates, ...rest.candidates].map((c) => c.rule)).size).toBe(6);
    } finally {
      expect(await svc.stop()).toBe(0);
      fs.rmSync(dir.base, { recursive: true, force: true });
    }
  }, 120_000);
});
