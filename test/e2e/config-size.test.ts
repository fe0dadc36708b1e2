/**
 * End to end (issue 40): a config over its caps arrives at the running service (a file renamed
 * into the config directory, an xDS response over ADS) and is refused by the cap's name before
 * the memory it would take is spent: the service's peak resident set (VmHWM of /proc/<pid>/status,
 * its threads included) stays far below what loading it took before; the last good config stays.
 * And a first config that is refused keeps the ports closed until one loads (xDS here; files in
 * lifecycle.test.ts).
 */
import fs from 'node:fs';
import path from 'node:path';
import { RateLimitUnit } from '../../generated/ratelimit/config/ratelimit/v3/rls_conf';
import { baseEnv, callGrpc, descriptor, grpcClient, httpGet, runtimeDir, type Service, startService } from './harness';
import { rlc, TestXdsServer } from '../support/xds';
import { inOneWindow, waitFor } from '../support/wait';

const ONE_A_MINUTE = 'domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n';
const MiB = 1024 * 1024;

const services: Service[] = [];
const servers: TestXdsServer[] = [];
afterEach(async () => {
  for (const s of services.splice(0)) await s.stop();
  for (const s of servers.splice(0)) await s.stop();
});

/** The service's peak resident set in MiB. */
function peakRssMiB(svc: Service): number {
  const m = /^VmHWM:\s+(\d+) kB/m.exec(fs.readFileSync(`/proc/${svc.proc.pid}/status`, 'utf8'));
  return Number(m![1]) / 1024;
}

async function stat(svc: Service, name: string): Promise<number | undefined> {
  const m = new RegExp(`^${name.replace(/\./g, '\\.')}: (\\d+)$`, 'm').exec((await httpGet(svc.debug, '/stats')).body);
  return m ? Number(m[1]) : undefined;
}

/** Whether two calls on domain `a` find its limit of 1 a minute. */
async function limited(svc: Service): Promise<boolean> {
  const client = grpcClient(svc.grpc);
  try {
    // Both calls in one minute of the 1-a-minute limit (CI: the minute turned between them).
    await inOneWindow(60_000, 5_000);
    const req = { domain: 'a', descriptors: [descriptor('k', String(Math.random()))] };
    await callGrpc(client, req);
    return (await callGrpc(client, req)).overallCode === 2;
  } finally {
    client.close();
  }
}

/** `n` block-style descriptors of one limit each (108 bytes each). */
function descriptorsYaml(n: number): string {
  const parts = ['domain: big\ndescriptors:\n'];
  for (let i = 0; i < n; i++) {
    parts.push(`  - key: client_id\n    value: client_${String(i).padStart(6, '0')}\n    rate_limit:\n      unit: second\n      requests_per_unit: ${100 + (i % 50)}\n`);
  }
  return parts.join('');
}

/** Writes `content` beside the config directory, then renames it in: the service sees it whole. */
function dropIn(configDir: string, name: string, content: string): void {
  const staged = path.join(configDir, '..', `${name}.staged`);
  fs.writeFileSync(staged, content);
  fs.renameSync(staged, path.join(configDir, name));
}

test('a YAML file over CONFIG_MAX_DESCRIPTORS is refused by name before its tree is built; the last good config stays', async () => {
  const dir = runtimeDir({ 'a.yaml': ONE_A_MINUTE });
  const svc = await startService({ ...baseEnv(dir.root), CONFIG_MAX_DESCRIPTORS: '100000', MALLOC_MMAP_THRESHOLD_: '65536' });
  services.push(svc);
  // 200,000 descriptors, 21.6 MB (under CONFIG_MAX_BYTES). Loading it took the service to 900 MiB,
  // and refusing it after its decode (the old count) about as much.
  dropIn(dir.configDir, 'big.yaml', descriptorsYaml(200_000));
  await waitFor(async () => (await stat(svc, 'ratelimit.service.config_load_error')) === 1, 'the refused load', 60_000);
  expect(peakRssMiB(svc)).toBeLessThan(400);
  expect(svc.output()).toContain(
    'Error loading new configuration: big.yaml: the configuration has up to 2200005 YAML nodes, more than the 1599986 left of 1600000 (16 for each of the 100000 descriptors CONFIG_MAX_DESCRIPTORS allows); it was not loaded',
  );

  // Past the text's bound but within its nodes: the reader stops at the descriptor past the cap.
  fs.rmSync(path.join(dir.configDir, 'big.yaml'));
  await waitFor(async () => (await stat(svc, 'ratelimit.service.config_load_success')) === 2, 'the removal');
  dropIn(dir.configDir, 'big.yaml', descriptorsYaml(120_000));
  await waitFor(async () => (await stat(svc, 'ratelimit.service.config_load_error')) === 2, 'the second refused load', 60_000);
  expect(svc.output()).toContain(
    'Error loading new configuration: big.yaml: the configuration has more than 100000 descriptors, the limit set by CONFIG_MAX_DESCRIPTORS; it was not loaded',
  );
  expect(peakRssMiB(svc)).toBeLessThan(400);
  expect(await stat(svc, 'ratelimit.config.rules')).toBe(1);
  expect(await limited(svc)).toBe(true);
}, 120_000);

test('a YAML file over CONFIG_MAX_BYTES is refused by its size, unread', async () => {
  const dir = runtimeDir({ 'a.yaml': ONE_A_MINUTE });
  const svc = await startService({ ...baseEnv(dir.root), CONFIG_MAX_BYTES: String(4 * MiB), MALLOC_MMAP_THRESHOLD_: '65536' });
  services.push(svc);
  dropIn(dir.configDir, 'big.yaml', descriptorsYaml(400_000)); // 43 MB
  await waitFor(async () => (await stat(svc, 'ratelimit.service.config_load_error')) === 1, 'the refused load', 60_000);
  expect(svc.output()).toContain(
    'Error loading new configuration: big.yaml: the configuration files hold more than the 4194304 bytes set by CONFIG_MAX_BYTES; they were not loaded',
  );
  expect(peakRssMiB(svc)).toBeLessThan(200);
  expect(await limited(svc)).toBe(true);
}, 120_000);

function xdsEnv(address: string, extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  return {
    ...baseEnv('/nonexistent'),
    CONFIG_TYPE: 'GRPC_XDS_SOTW',
    CONFIG_GRPC_XDS_SERVER_URL: address,
    XDS_CLIENT_BACKOFF_INITIAL_INTERVAL: '100ms',
    MALLOC_MMAP_THRESHOLD_: '65536',
    ...extra,
  };
}

const A = rlc('a', 'a', [{ key: 'k', rateLimit: { unit: RateLimitUnit.MINUTE, requestsPerUnit: 1 } }]);

test('an xDS response over CONFIG_MAX_RESOURCES is NACKed at once by name, nothing decoded; the last good config stays', async () => {
  const xds = await TestXdsServer.start();
  servers.push(xds);
  xds.push('1', [A]);
  // A receive limit above the response (the operator's setting): the caps are what refuse it.
  const svc = await startService(xdsEnv(xds.address, { XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES: String(128 * MiB) }));
  services.push(svc);
  await xds.waitForRequest((r) => r.kind === 'ack' && r.request.versionInfo === '1');

  // 300,000 resources of one descriptor each (about 34 MB): decoded and built, they took the
  // service past 1 GiB before any ACK or NACK.
  const many = Array.from({ length: 300_000 }, (_, i) =>
    rlc(`r${i}`, `d${i}`, [{ key: 'client_id', value: `c${i}`, rateLimit: { unit: RateLimitUnit.SECOND, requestsPerUnit: 100 } }]),
  );
  const from = xds.requests.length;
  const pushed = Date.now();
  xds.push('2', many);
  const nack = await xds.waitForRequest((r) => r.kind === 'nack', 30_000, from);
  expect(Date.now() - pushed).toBeLessThan(20_000);
  expect(peakRssMiB(svc)).toBeLessThan(350);
  expect(nack.request.errorDetail?.message).toBe('the response has 300000 resources, more than the 10000 set by CONFIG_MAX_RESOURCES; it was not loaded');
  expect(nack.request.versionInfo).toBe('1');
  expect((await httpGet(svc.debug, '/rlconfig')).body).toBe('a.k: unit=MINUTE requests_per_unit=1, shadow_mode: false, quota_mode: false\n');
  expect(await limited(svc)).toBe(true);
}, 120_000);

test('a refused first xDS response keeps the ports closed; the next one that loads starts the service', async () => {
  const xds = await TestXdsServer.start();
  servers.push(xds);
  xds.push('1', [rlc('bad', 'a', [{ key: '', rateLimit: { unit: RateLimitUnit.MINUTE, requestsPerUnit: 1 } }])]);
  let waiting!: () => void;
  const sawWaiting = new Promise<void>((resolve) => (waiting = resolve));
  const started = startService(xdsEnv(xds.address), 60_000, undefined, (out) => {
    if (out.includes('not listening on the gRPC and HTTP ports')) waiting();
  }).then((svc) => {
    services.push(svc);
    return svc;
  });
  // A service that listens at once (the old behaviour) ends the race, and the test, here.
  expect(await Promise.race([sawWaiting.then(() => 'waiting'), started.then(() => 'listening')])).toBe('waiting');
  await xds.waitForRequest((r) => r.kind === 'nack');
  xds.push('2', [A]);
  const svc = await started;
  expect(svc.output()).toContain(
    'the first configuration failed to load (bad: descriptor has empty key): not listening on the gRPC and HTTP ports until one loads ' +
      '(FORCE_START_WITHOUT_INITIAL_CONFIG is false); the next xDS response that loads starts the service',
  );
  expect(svc.output().indexOf('a configuration loaded: starting the listeners')).toBeLessThan(svc.output().indexOf('listening: gRPC'));
  expect(await limited(svc)).toBe(true);
}, 90_000);
