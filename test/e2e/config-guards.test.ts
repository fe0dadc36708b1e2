/**
 * End to end (issue 30): the guard rails around config loads of the real service. Limits on a
 * load's size refuse it and keep the last good config; a load that loses rules, a vanished config
 * directory and a failed first load show in the logs and the gauges; /rlconfig streams.
 */
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { baseEnv, callGrpc, expectLogged, descriptor, grpcClient, httpGet, manyDescriptors, runtimeDir, type Service, startService } from './harness';
import { waitFor } from '../support/wait';

const ONE_A_MINUTE = (domain: string) => `domain: ${domain}\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n`;

const services: Service[] = [];
afterEach(async () => {
  for (const s of services.splice(0)) await s.stop();
});

async function start(files: Record<string, string>, env: NodeJS.ProcessEnv = {}) {
  const dir = runtimeDir(files);
  const svc = await startService({ ...baseEnv(dir.root), ...env });
  services.push(svc);
  const stat = async (name: string): Promise<number | undefined> => {
    const m = new RegExp(`^${name.replace(/\./g, '\\.')}: (\\d+)$`, 'm').exec((await httpGet(svc.debug, '/stats')).body);
    return m ? Number(m[1]) : undefined;
  };
  return { svc, dir, stat };
}

/** Whether two calls on `domain` k=v find the limit of 1 a minute (the second is over it). */
async function limited(svc: Service, domain: string): Promise<boolean> {
  const client = grpcClient(svc.grpc);
  try {
    const req = { domain, descriptors: [descriptor('k', String(Math.random()))] };
    await callGrpc(client, req);
    return (await callGrpc(client, req)).overallCode === 2;
  } finally {
    client.close();
  }
}

test('CONFIG_MAX_BYTES and CONFIG_MAX_DESCRIPTORS refuse a bigger config by name; the last good config stays', async () => {
  const { svc, dir, stat } = await start({ 'a.yaml': ONE_A_MINUTE('a') }, { CONFIG_MAX_BYTES: '4096', CONFIG_MAX_DESCRIPTORS: '20' });
  expect(await stat('ratelimit.config.rules')).toBe(1);

  fs.writeFileSync(path.join(dir.configDir, 'big.yaml'), manyDescriptors('big', 100)); // about 9 KB
  await waitFor(async () => (await stat('ratelimit.service.config_load_error')) === 1, 'the refused load');
  await expectLogged(
    svc,
    'Error loading new configuration: big.yaml: the configuration files hold more than the 4096 bytes set by CONFIG_MAX_BYTES; they were not loaded',
  );

  fs.writeFileSync(path.join(dir.configDir, 'big.yaml'), manyDescriptors('big', 21)); // under 4096 bytes, 21 descriptors
  await waitFor(async () => (await stat('ratelimit.service.config_load_error')) === 2, 'the second refused load');
  await expectLogged(
    svc,
    'Error loading new configuration: big.yaml: the configuration has more than 20 descriptors, the limit set by CONFIG_MAX_DESCRIPTORS; it was not loaded',
  );

  expect(await stat('ratelimit.service.config_load_success')).toBe(1);
  expect(await stat('ratelimit.config.rules')).toBe(1);
  expect((await httpGet(svc.debug, '/rlconfig')).body).toBe('a.k: unit=MINUTE requests_per_unit=1, shadow_mode: false, quota_mode: false\n');
  expect(await limited(svc, 'a')).toBe(true);
});

test('rules that drop (to none as well) are an error line and show in the gauges; a vanished directory keeps the config', async () => {
  const { svc, dir, stat } = await start({ 'a.yaml': ONE_A_MINUTE('a'), 'b.yaml': ONE_A_MINUTE('b') });
  expect([await stat('ratelimit.config.domains'), await stat('ratelimit.config.rules')]).toEqual([2, 2]);

  fs.rmSync(path.join(dir.configDir, 'b.yaml'));
  await waitFor(async () => (await stat('ratelimit.config.rules')) === 1, 'one rule left');
  await expectLogged(svc, 'level=error msg="the new configuration has 1 rate limit rules (1 domains), the one it replaces had 2 (2 domains)"');

  fs.rmSync(path.join(dir.configDir, 'a.yaml'));
  await waitFor(async () => (await stat('ratelimit.config.rules')) === 0, 'no rule left');
  expect(await stat('ratelimit.config.domains')).toBe(0);
  await expectLogged(
    svc,
    'level=error msg="the new configuration has 0 rate limit rules (0 domains), the one it replaces had 1 (1 domains): no request is limited any more"',
  );

  fs.writeFileSync(path.join(dir.configDir, 'a.yaml'), ONE_A_MINUTE('a'));
  await waitFor(async () => (await stat('ratelimit.config.rules')) === 1, 'the rule back');
  const errors = await stat('ratelimit.service.config_load_error');
  fs.rmSync(dir.configDir, { recursive: true });
  await waitFor(async () => (await stat('ratelimit.service.config_load_error')) === errors! + 1, 'the load error of the vanished directory');
  await expectLogged(svc, `Error loading new configuration: directory ${dir.configDir} does not exist; keeping the last loaded configuration`);
  expect(await stat('ratelimit.config.rules')).toBe(1);
  expect(await limited(svc, 'a')).toBe(true);
});

test('a failed first load with FORCE_START_WITHOUT_INITIAL_CONFIG: listening with 0 rules in the gauge and the error counted', async () => {
  const { svc, stat } = await start(
    { 'bad.yaml': 'domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n' },
    { FORCE_START_WITHOUT_INITIAL_CONFIG: 'true' },
  );
  await expectLogged(svc, "Error loading new configuration: bad.yaml: invalid rate limit unit 'fortnight'");
  expect(await stat('ratelimit.service.config_load_error')).toBe(1);
  expect(await stat('ratelimit.config.rules')).toBe(0);
  expect(await stat('ratelimit.config.domains')).toBe(0);
});

test('/rlconfig of a big config streams every line in order', async () => {
  const n = 20_000; // about 2 MB of YAML: built off the event loop, listed in pieces
  const { svc, stat } = await start({ 'big.yaml': manyDescriptors('big', n) });
  expect(await stat('ratelimit.config.rules')).toBe(n);
  const { headers, body } = await new Promise<{ headers: http.IncomingHttpHeaders; body: string }>((resolve, reject) => {
    http
      .get(`http://${svc.debug}/rlconfig`, (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (text += d));
        res.on('end', () => resolve({ headers: res.headers, body: text }));
      })
      .on('error', reject);
  });
  expect(headers['transfer-encoding']).toBe('chunked');
  const lines = body.trimEnd().split('\n');
  expect(lines).toHaveLength(n);
  expect(lines[0]).toBe('big.client_c0: unit=SECOND requests_per_unit=1, shadow_mode: false, quota_mode: false');
  expect([...lines].sort()).toEqual(lines);
  expect(lines).toContain('big.client_c19999: unit=SECOND requests_per_unit=20000, shadow_mode: false, quota_mode: false');
}, 60_000);
