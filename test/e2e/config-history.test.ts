/**
 * End to end, on the memory store and on a real Redis: every config load is in
 * /debug/config-history with its source, its version and its diff against the load before (limits
 * added, removed and changed, with the old and new limit, algorithm and shadow mode); the same
 * rules get the same version whatever the order of the files and of the descriptors; a failed
 * load is there with its error; each load writes an info line; the version is the label of the
 * info series (the old version's series leaves the Prometheus scrape); bad query parameters are a
 * 400 with a one-line reason.
 */
import fs from 'node:fs';
import path from 'node:path';
import { freePort } from '../support/ports';
import { MemcachedServer } from '../support/memcached';
import { type RedisServer, startRedis } from '../support/redis';
import { baseEnv, httpGet, runtimeDir, type Service, startService } from './harness';
import { waitFor } from '../support/wait';

const A1 = `
domain: ch
descriptors:
  - key: k1
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: k2
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: k3
    rate_limit: {unit: minute, requests_per_unit: 3}
`;
const B = `
domain: other
descriptors:
  - key: o
    rate_limit: {unit: second, requests_per_unit: 10}
`;
/** k1 removed, k2's limit changed, k3's algorithm and shadow mode changed, k4 added. */
const A2 = `
domain: ch
descriptors:
  - key: k2
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: k3
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: sliding_window}
  - key: k4
    rate_limit: {unit: hour, requests_per_unit: 4}
`;
/** A2's rules, the descriptors and their fields in another order. */
const A2_REORDERED = `
descriptors:
  - key: k4
    rate_limit: {requests_per_unit: 4, unit: hour}
  - rate_limit: {algorithm: sliding_window, requests_per_unit: 3, unit: minute}
    shadow_mode: true
    key: k3
  - key: k2
    rate_limit: {requests_per_unit: 5, unit: minute}
domain: ch
`;
const BAD = `
domain: ch
descriptors:
  - key: k1
    rate_limit: {unit: fortnight, requests_per_unit: 1}
`;

interface LimitView {
  requests_per_unit: number;
  unit: string;
  algorithm: string;
  shadow_mode: boolean;
}
interface Load {
  seq: number;
  time: string;
  outcome: 'loaded' | 'failed';
  source?: { files?: string[]; xds_version?: string };
  version?: string;
  previous_version?: string | null;
  version_in_use?: string | null;
  error?: string;
  limits?: number;
  domains?: number;
  diff?: { added: number; removed: number; changed: number; limits: Array<{ change: string; rule: string; old?: LimitView; new?: LimitView }>; not_listed?: number };
}
interface History {
  size: number;
  loads: number;
  version: string | null;
  history: Load[];
  next_before?: number;
}

async function history(svc: Service, query = ''): Promise<History> {
  const res = await httpGet(svc.debug, `/debug/config-history${query}`);
  expect(res.status).toBe(200);
  return JSON.parse(res.body) as History;
}

/**
 * Replaces a config file in one step (written beside, then renamed in): a reload never reads it
 * half written, so every load in the history is one the test made.
 */
function put(dir: ReturnType<typeof runtimeDir>, name: string, content: string): void {
  const tmp = path.join(dir.base, `${name}.next`);
  fs.writeFileSync(tmp, content);
  fs.renameSync(tmp, path.join(dir.configDir, name));
}

/** Waits until a load moved the version away from `from`, and returns that load. */
async function loadAfter(svc: Service, from: string): Promise<Load> {
  let found: Load | undefined;
  await waitFor(async () => {
    found = (await history(svc)).history.find((l) => l.outcome === 'loaded' && l.previous_version === from && l.version !== from);
    return found !== undefined;
  }, `a load replacing version ${from}`);
  return found!;
}

describe.each(['memory', 'redis', 'memcache'] as const)('config history on the %s store', (store) => {
  let redis: RedisServer | undefined;
  let memcached: MemcachedServer | undefined;
  const services: Service[] = [];
  const dirs: Array<ReturnType<typeof runtimeDir>> = [];

  const start = async (files: Record<string, string>, extra: Record<string, string> = {}): Promise<{ svc: Service; dir: ReturnType<typeof runtimeDir> }> => {
    const dir = runtimeDir(files);
    dirs.push(dir);
    const env: NodeJS.ProcessEnv = { ...baseEnv(dir.root), ...extra };
    if (store === 'redis') Object.assign(env, { BACKEND_TYPE: 'redis', REDIS_SOCKET_TYPE: 'tcp', REDIS_URL: redis!.address });
    if (store === 'memcache') Object.assign(env, { BACKEND_TYPE: 'memcache', MEMCACHE_HOST_PORT: memcached!.address });
    const svc = await startService(env);
    services.push(svc);
    return { svc, dir };
  };

  beforeAll(async () => {
    if (store === 'redis') redis = await startRedis();
    if (store === 'memcache') memcached = await MemcachedServer.start();
  });
  afterEach(async () => {
    for (const s of services.splice(0)) expect(await s.stop()).toBe(0);
    for (const d of dirs.splice(0)) fs.rmSync(d.base, { recursive: true, force: true });
  });
  afterAll(async () => {
    await redis?.stop();
    await memcached?.stop();
  });

  test('a reload that adds, removes and changes limits: its diff, version, line and info series', async () => {
    const promPort = await freePort();
    const { svc, dir } = await start({ 'a.yaml': A1, 'b.yaml': B }, { USE_PROMETHEUS: 'true', PROMETHEUS_ADDR: `127.0.0.1:${promPort}` });
    const scrape = async (): Promise<string> => (await httpGet(`127.0.0.1:${promPort}`, '/metrics')).body;

    await waitFor(async () => (await history(svc)).version !== null, 'the first load in the history');
    const first = await history(svc);
    const v1 = first.version!;
    expect(v1).toMatch(/^[0-9a-f]{12}$/);
    expect(first.history).toHaveLength(1);
    expect(first.history[0]).toMatchObject({
      seq: 1,
      outcome: 'loaded',
      source: { files: ['a.yaml', 'b.yaml'] },
      version: v1,
      previous_version: null,
      limits: 4,
      domains: 2,
      diff: { added: 4, removed: 0, changed: 0 },
    });
    expect(first.history[0]!.diff!.limits.map((l) => l.rule)).toEqual(['ch.k1', 'ch.k2', 'ch.k3', 'other.o']);
    expect(await scrape()).toMatch(new RegExp(`^ratelimit_config_info\\{version="${v1}"\\} 1$`, 'm'));

    put(dir, 'a.yaml', A2);
    const load = await loadAfter(svc, v1);
    const v2 = load.version!;
    expect(v2).toMatch(/^[0-9a-f]{12}$/);
    expect(load).toMatchObject({ outcome: 'loaded', source: { files: ['a.yaml', 'b.yaml'] }, limits: 4, domains: 2, diff: { added: 1, removed: 1, changed: 2 } });
    expect(load.diff!.not_listed).toBeUndefined();
    expect(load.diff!.limits).toEqual([
      { change: 'removed', rule: 'ch.k1', old: { requests_per_unit: 1, unit: 'MINUTE', algorithm: 'fixed_window', shadow_mode: false } },
      {
        change: 'changed',
        rule: 'ch.k2',
        old: { requests_per_unit: 2, unit: 'MINUTE', algorithm: 'fixed_window', shadow_mode: false },
        new: { requests_per_unit: 5, unit: 'MINUTE', algorithm: 'fixed_window', shadow_mode: false },
      },
      {
        change: 'changed',
        rule: 'ch.k3',
        old: { requests_per_unit: 3, unit: 'MINUTE', algorithm: 'fixed_window', shadow_mode: false },
        new: { requests_per_unit: 3, unit: 'MINUTE', algorithm: 'sliding_window', shadow_mode: true },
      },
      { change: 'added', rule: 'ch.k4', new: { requests_per_unit: 4, unit: 'HOUR', algorithm: 'fixed_window', shadow_mode: false } },
    ]);
    expect(svc.output()).toContain(`config version ${v2} loaded (was ${v1}): 4 limits in 2 domains, 1 added, 1 removed, 2 changed (2 files: a.yaml, b.yaml)`);

    // The info series follows the version: the old one leaves /stats and the scrape.
    const stats = (await httpGet(svc.debug, '/stats')).body;
    expect(stats).toContain(`ratelimit.config.info.__version=${v2}: 1\n`);
    expect(stats).not.toContain(v1);
    const body = await scrape();
    expect(body).toMatch(new RegExp(`^ratelimit_config_info\\{version="${v2}"\\} 1$`, 'm'));
    expect(body).not.toContain(v1);

    // The same rules in another order: the same version, nothing changed.
    put(dir, 'a.yaml', A2_REORDERED);
    await waitFor(async () => (await history(svc)).history.some((l) => l.previous_version === v2), 'the reordered load');
    const same = (await history(svc)).history.find((l) => l.previous_version === v2)!;
    expect(same).toMatchObject({ outcome: 'loaded', version: v2, diff: { added: 0, removed: 0, changed: 0, limits: [] } });

    // A failed load: kept with its error; the version in use stays.
    const before = (await history(svc)).loads;
    put(dir, 'a.yaml', BAD);
    await waitFor(async () => (await history(svc)).history.some((l) => l.outcome === 'failed' && /fortnight/.test(l.error!)), 'the failed load');
    const h = await history(svc);
    const failed = h.history.find((l) => l.outcome === 'failed')!;
    expect(failed.seq).toBeGreaterThan(before);
    expect(failed).toMatchObject({ source: { files: ['a.yaml', 'b.yaml'] }, version_in_use: v2 });
    expect(failed.error).toMatch(/^a\.yaml: .*fortnight/);
    expect(h.version).toBe(v2);
    expect((await httpGet(svc.debug, '/stats')).body).toContain(`ratelimit.config.info.__version=${v2}: 1\n`);

    // Pages: newest first, then older from next_before.
    const p1 = await history(svc, '?limit=2');
    expect(p1.history.map((l) => l.seq)).toEqual([h.history[0]!.seq, h.history[1]!.seq]);
    const p2 = await history(svc, `?limit=2&before=${p1.next_before!}`);
    expect(p2.history[0]!.seq).toBeLessThan(p1.history[1]!.seq);
    expect(p2.history.at(-1)!.seq).toBe(1);
  });

  test('the same rules in other files, in another order, get the same version', async () => {
    const one = await start({ 'a.yaml': A2, 'b.yaml': B });
    const two = await start({ '0.yaml': B, 'z.yaml': A2_REORDERED });
    await waitFor(async () => (await history(one.svc)).version !== null && (await history(two.svc)).version !== null, 'both first loads');
    const [h1, h2] = [await history(one.svc), await history(two.svc)];
    expect(h2.history[0]!.source).toEqual({ files: ['0.yaml', 'z.yaml'] });
    expect(h2.version).toBe(h1.version);
    // And different rules another version.
    const three = await start({ 'a.yaml': A1, 'b.yaml': B });
    await waitFor(async () => (await history(three.svc)).version !== null, 'the third first load');
    expect((await history(three.svc)).version).not.toBe(h1.version);
  });

  test('a failed first load is in the history; bad query parameters are a 400 with one line', async () => {
    const { svc } = await start({ 'a.yaml': BAD }, { FORCE_START_WITHOUT_INITIAL_CONFIG: 'true', DEBUG_CONFIG_HISTORY_SIZE: '5' });
    await waitFor(async () => (await history(svc)).history.length === 1, 'the failed load');
    const h = await history(svc);
    expect(h).toMatchObject({ size: 5, loads: 1, version: null });
    expect(h.history[0]).toMatchObject({ seq: 1, outcome: 'failed', version_in_use: null, source: { files: ['a.yaml'] } });
    expect(h.history[0]!.error).toMatch(/fortnight/);

    const cases: Array<[string, RegExp]> = [
      ['?limit=0', /^limit must be a whole number from 1 to 5 \(DEBUG_CONFIG_HISTORY_SIZE\), not '0'$/],
      ['?limit=6', /^limit must be a whole number from 1 to 5/],
      ['?before=x', /^before must be a load's sequence number/],
      ['?version=abc', /^unknown query parameter 'version' \(expected limit, before\)$/],
      ['?before=1&before=2', /^query parameter 'before' is given more than once$/],
    ];
    for (const [query, reason] of cases) {
      const res = await httpGet(svc.debug, `/debug/config-history${query}`);
      expect([query, res.status]).toEqual([query, 400]);
      expect(res.body.trimEnd().split('\n')).toHaveLength(1);
      expect(res.body.trimEnd()).toMatch(reason);
    }
  });
});
