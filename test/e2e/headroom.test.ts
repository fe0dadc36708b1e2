/**
 * End to end, the headroom gauges of every loaded limit (src/stats/limits/) on the built service:
 * after a known sequence of hits over /json and gRPC, on the memory store, Redis and Memcached
 * (real servers), on /stats and on a Prometheus scrape; after a reload that changes a limit (the
 * new limit shows at once, the window's figures carry on) and removes one (its gauges go).
 */
import fs from 'node:fs';
import path from 'node:path';
import { incrementsProcessed, MemcachedServer } from '../support/memcached';
import { freePort, startRedis } from '../support/redis';
import { waitFor } from '../support/wait';
import { baseEnv, callGrpc, descriptor, grpcClient, httpGet, httpPost, runtimeDir, startService, type Service } from './harness';

const config = (perUser: number): string => `
domain: hr
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: ${perUser}, name: per-user}
  - key: ip
    rate_limit: {unit: day, requests_per_unit: 100}
`;

const P = 'ratelimit.service.rate_limit.';

/** The value of one series on /stats. */
async function stat(svc: Service, name: string): Promise<number | undefined> {
  const body = (await httpGet(svc.debug, '/stats')).body;
  const line = body.split('\n').find((l) => l.startsWith(name + ': '));
  return line === undefined ? undefined : Number(line.slice(name.length + 2));
}

async function userGauges(svc: Service): Promise<Record<string, number | undefined>> {
  const out: Record<string, number | undefined> = {};
  for (const s of ['limit', 'window_used', 'window_keys', 'window_keys_over_limit', 'utilization']) {
    out[s] = await stat(svc, `${P}hr.user.${s}.__name=per-user`);
  }
  return out;
}

/**
 * alice 5 hits (over the limit of 3 from the 4th), bob 2, carol 1, half over /json, half over
 * gRPC; one `ip` hit. `settle` runs after each call (Memcached counts asynchronously).
 */
async function knownSequence(svc: Service, settle: () => Promise<void> = async () => {}): Promise<void> {
  const client = grpcClient(svc.grpc);
  try {
    let i = 0;
    for (const user of ['alice', 'alice', 'alice', 'alice', 'alice', 'bob', 'bob', 'carol']) {
      if (i++ % 2 === 0) {
        const res = await httpPost(svc.http, '/json', JSON.stringify({ domain: 'hr', descriptors: [{ entries: [{ key: 'user', value: user }] }] }));
        expect(res.status === 200 || res.status === 429).toBe(true);
      } else {
        await callGrpc(client, { domain: 'hr', descriptors: [descriptor('user', user)] });
      }
      await settle();
    }
    await callGrpc(client, { domain: 'hr', descriptors: [descriptor('ip', '10.0.0.1')] });
    await settle();
  } finally {
    client.close();
  }
}

const AFTER_SEQUENCE = { limit: 3, window_used: 5, window_keys: 3, window_keys_over_limit: 1, utilization: (100 * 5) / 3 };

async function reloadWith(svc: Service, configDir: string, text: string, loads: number): Promise<void> {
  fs.writeFileSync(path.join(configDir, 'hr.yaml'), text);
  await waitFor(async () => (await stat(svc, 'ratelimit.service.config_load_success')) === loads, `config load ${loads}`);
}

describe('headroom gauges', () => {
  test('memory store: after a known sequence over /json and gRPC, on /stats and Prometheus; a reload shows a changed limit at once and drops a removed one', async () => {
    const dir = runtimeDir({ 'hr.yaml': config(3) });
    const promPort = await freePort();
    const svc = await startService({ ...baseEnv(dir.root), USE_PROMETHEUS: 'true', PROMETHEUS_ADDR: `127.0.0.1:${promPort}` });
    try {
      await knownSequence(svc);
      expect(await userGauges(svc)).toEqual(AFTER_SEQUENCE);
      expect(await stat(svc, `${P}hr.ip.window_used`)).toBe(1);
      expect(await stat(svc, `${P}hr.ip.utilization`)).toBe(1);

      const scrape = (await httpGet(`127.0.0.1:${promPort}`, '/metrics')).body;
      expect(scrape).toMatch(/^ratelimit_service_rate_limit_window_used\{domain="hr",key1="user",name="per-user"\} 5$/m);
      expect(scrape).toMatch(/^ratelimit_service_rate_limit_window_keys_over_limit\{domain="hr",key1="user",name="per-user"\} 1$/m);
      expect(scrape).toMatch(/^ratelimit_service_rate_limit_utilization\{domain="hr",key1="user",name="per-user"\} 1\.666/m);
      expect(scrape).toMatch(/^ratelimit_service_rate_limit_limit\{domain="hr",key1="ip"\} 100$/m);
      // One series per limit and stat, whatever the values.
      expect(scrape.match(/^ratelimit_service_rate_limit_window_keys\{/gm)).toHaveLength(2);

      // The limit of `user` goes to 10 and `ip` goes: shown at once, without a new hit.
      await reloadWith(svc, dir.configDir, config(10).replace(/  - key: ip\n.*\n/, ''), 2);
      // Alice (5) is not over the new limit: the keys over it start again from what is over it.
      expect(await userGauges(svc)).toEqual({ ...AFTER_SEQUENCE, limit: 10, window_keys_over_limit: 0, utilization: 50 });
      expect(await stat(svc, `${P}hr.ip.window_used`)).toBeUndefined();
      const after = (await httpGet(`127.0.0.1:${promPort}`, '/metrics')).body;
      expect(after).toMatch(/^ratelimit_service_rate_limit_limit\{domain="hr",key1="user",name="per-user"\} 10$/m);
      expect(after).not.toMatch(/^ratelimit_service_rate_limit_limit\{domain="hr",key1="ip"\}/m);
      // The window carries on across the reload: alice's next hit is her 6th.
      await httpPost(svc.http, '/json', JSON.stringify({ domain: 'hr', descriptors: [{ entries: [{ key: 'user', value: 'alice' }] }] }));
      expect(await stat(svc, `${P}hr.user.window_used.__name=per-user`)).toBe(6);
      expect(await stat(svc, `${P}hr.user.window_keys.__name=per-user`)).toBe(3);
    } finally {
      expect(await svc.stop()).toBe(0);
      fs.rmSync(dir.base, { recursive: true, force: true });
    }
  });

  test('Redis: the same figures from the counts Redis returns', async () => {
    const redis = await startRedis();
    const dir = runtimeDir({ 'hr.yaml': config(3) });
    const svc = await startService({ ...baseEnv(dir.root), BACKEND_TYPE: 'redis', REDIS_SOCKET_TYPE: 'tcp', REDIS_URL: redis.address });
    try {
      await knownSequence(svc);
      expect(await userGauges(svc)).toEqual(AFTER_SEQUENCE);
      // A second replica on the same Redis sees the counts of both: its used is the shared count.
      const dir2 = runtimeDir({ 'hr.yaml': config(3) });
      const other = await startService({ ...baseEnv(dir2.root), BACKEND_TYPE: 'redis', REDIS_SOCKET_TYPE: 'tcp', REDIS_URL: redis.address });
      try {
        await callGrpc(grpcClient(other.grpc), { domain: 'hr', descriptors: [descriptor('user', 'alice')] });
        expect(await stat(other, `${P}hr.user.window_used.__name=per-user`)).toBe(6);
        // It saw no key first nor go over: summed over replicas, keys and keys over stay exact.
        expect(await stat(other, `${P}hr.user.window_keys.__name=per-user`)).toBe(0);
        expect(await stat(other, `${P}hr.user.window_keys_over_limit.__name=per-user`)).toBe(0);
      } finally {
        expect(await other.stop()).toBe(0);
        fs.rmSync(dir2.base, { recursive: true, force: true });
      }
    } finally {
      expect(await svc.stop()).toBe(0);
      await redis.stop();
      fs.rmSync(dir.base, { recursive: true, force: true });
    }
  });

  test('Memcached: the same figures from the counts Memcached returns', async () => {
    const mc = await MemcachedServer.start();
    const dir = runtimeDir({ 'hr.yaml': config(3) });
    const svc = await startService({ ...baseEnv(dir.root), BACKEND_TYPE: 'memcache', MEMCACHE_HOST_PORT: mc.address });
    try {
      let landed = 0;
      // Increments are asynchronous (as upstream): each lands before the next read.
      await knownSequence(svc, async () => {
        landed++;
        await waitFor(async () => (await incrementsProcessed(mc.port)) >= landed, `increment ${landed} to land in memcached`);
      });
      expect(await userGauges(svc)).toEqual(AFTER_SEQUENCE);
    } finally {
      expect(await svc.stop()).toBe(0);
      await mc.stop();
      fs.rmSync(dir.base, { recursive: true, force: true });
    }
  });
});

describe('GET /debug/hotkeys', () => {
  test('lists the keys with most hits per limit, and answers bad input with a 400 and a reason', async () => {
    const dir = runtimeDir({ 'hr.yaml': config(3) });
    // Every call counted (the default samples one in 16): the counts are exact.
    const svc = await startService({ ...baseEnv(dir.root), HOT_KEYS_SAMPLE_ONE_IN: '1' });
    try {
      await knownSequence(svc);
      const res = await httpGet(svc.debug, '/debug/hotkeys?domain=hr&rule=per-user&k=2');
      expect(res.status).toBe(200);
      const page = JSON.parse(res.body) as { limit: { requests_per_unit: number }; minute: Array<Record<string, unknown>>; hour: unknown[] };
      expect(page.limit.requests_per_unit).toBe(3);
      expect(page.minute.map((e) => [e['entries'], e['hits'], e['over_limit_hits'], e['remaining']])).toEqual([
        ['user=alice', 5, 2, 0],
        ['user=bob', 2, 0, 1],
      ]);
      expect(page.hour).toHaveLength(2);
      // Over every limit: the ip hit too.
      const all = JSON.parse((await httpGet(svc.debug, '/debug/hotkeys')).body) as { minute: Array<{ rule: string }> };
      expect(all.minute.map((e) => e.rule).slice(0, 2)).toEqual(['hr.user', 'hr.user']);
      expect(all.minute.map((e) => e.rule).slice(2).sort()).toEqual(['hr.ip', 'hr.user']); // 1 hit each

      for (const [query, reason] of [
        ['?dommain=hr', /unknown parameter "dommain"/],
        ['?domain=nope', /domain "nope" has no loaded limits/],
        ['?domain=hr&rule=nope', /domain "hr" has no limit "nope"/],
        ['?rule=user', /rule needs domain/],
        ['?k=11', /k must be an integer from 1 to 10/],
        ['?k=0', /k must be an integer from 1 to 10/],
        ['?k=abc', /k must be an integer/],
      ] as const) {
        const bad = await httpGet(svc.debug, '/debug/hotkeys' + query);
        expect([query, bad.status]).toEqual([query, 400]);
        expect(bad.body).toMatch(reason);
        expect(bad.body.trimEnd().split('\n')).toHaveLength(1);
      }
    } finally {
      expect(await svc.stop()).toBe(0);
      fs.rmSync(dir.base, { recursive: true, force: true });
    }
  });

  test('DEBUG_VALUES=hash shows a digest stable in the process; hide shows counts only', async () => {
    const dir = runtimeDir({ 'hr.yaml': config(3) });
    for (const mode of ['hash', 'hide']) {
      const svc = await startService({ ...baseEnv(dir.root), DEBUG_VALUES: mode, HOT_KEYS_SAMPLE_ONE_IN: '1' });
      try {
        await knownSequence(svc);
        const read = async () => JSON.parse((await httpGet(svc.debug, '/debug/hotkeys?domain=hr&rule=user')).body) as { values: string; minute: Array<Record<string, unknown>> };
        const first = await read();
        expect(first.values).toBe(mode);
        expect(first.minute.map((e) => e['hits'])).toEqual([5, 2, 1]);
        expect(JSON.stringify(first)).not.toMatch(/alice|bob|carol/);
        if (mode === 'hash') {
          expect(first.minute[0]!['entries']).toMatch(/^#[0-9a-f]{16}$/);
          expect((await read()).minute[0]!['entries']).toBe(first.minute[0]!['entries']);
        } else {
          expect(first.minute[0]).not.toHaveProperty('entries');
        }
      } finally {
        expect(await svc.stop()).toBe(0);
      }
    }
    fs.rmSync(dir.base, { recursive: true, force: true });
  });
});
