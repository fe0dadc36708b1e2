import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { AggregatedDiscoveryServiceClient } from '../../generated/envoy/service/discovery/v3/ads';
import { DiscoveryRequest, type DiscoveryResponse } from '../../generated/envoy/service/discovery/v3/discovery';
import { RateLimitConfig as RateLimitConfigProto, RateLimitUnit } from '../../generated/ratelimit/config/ratelimit/v3/rls_conf';
import { UsageError } from '../../src/platform/argv';
import { runXdsServer } from '../../src/cli/xds-server';
import { silentLogger } from '../../src/telemetry/logger';
import {
  DirectoryPublisher,
  loadConfigDirectory,
  ManagementServer,
  type ManagementServerLogger,
} from '../../src/xds-server/management-server';
import { RATE_LIMIT_CONFIG_TYPE_URL } from '../../src/providers/xds/provider';
import { testCerts } from '../support/certs';
import { CapturingLogger, makeTmpDir, writeTree } from '../providers/helpers';
import { onCleanup, runCleanups, setupProvider, xdsSettings } from '../providers/xds/helpers';
import { quietFor, waitFor } from '../support/wait';

const A = 'domain: dom-a\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n';
const B = 'domain: dom-b\ndescriptors:\n  - key: k\n    rate_limit: {unit: week, requests_per_unit: 2}\n';

let tmp: string;
beforeEach(() => {
  tmp = makeTmpDir();
});
afterEach(async () => {
  await runCleanups();
  fs.rmSync(tmp, { recursive: true, force: true });
});

function entries(...kv: Array<[string, string]>) {
  return { entries: kv.map(([key, value]) => ({ key, value })) };
}

async function serve(dir: string, logger: ManagementServerLogger, debounceMs = 30) {
  const server = new ManagementServer({ logger });
  const publisher = new DirectoryPublisher({ dir, server, logger, debounceMs });
  onCleanup(() => server.stop());
  onCleanup(() => publisher.stop());
  publisher.start();
  await server.start();
  return { server, publisher };
}

/** A raw ADS stream, to talk to the server without the provider. */
function rawStream(address: string) {
  const client = new AggregatedDiscoveryServiceClient(address, grpc.credentials.createInsecure());
  const call = client.streamAggregatedResources();
  const responses: DiscoveryResponse[] = [];
  call.on('data', (r: DiscoveryResponse) => responses.push(r));
  call.on('error', () => {});
  onCleanup(() => {
    call.cancel();
    client.close();
  });
  const send = (fields: Partial<DiscoveryRequest>) =>
    call.write(DiscoveryRequest.fromPartial({ node: { id: 'raw-node' }, typeUrl: RATE_LIMIT_CONFIG_TYPE_URL, ...fields }));
  return { client, call, responses, send };
}

describe('loadConfigDirectory', () => {
  test('every *.yaml/*.yml file is one resource named after the file', () => {
    writeTree(tmp, { 'a.yaml': A, 'b.yml': B, 'notes.txt': 'not yaml', '.hidden.yaml': 'bad', 'sub/c.yaml': 'bad' });
    const { files, resources } = loadConfigDirectory(tmp, false);
    expect(files).toEqual(['a.yaml', 'b.yml']);
    expect(resources.map((r) => [r.name, r.domain])).toEqual([
      ['a', 'dom-a'],
      ['b', 'dom-b'],
    ]);
    expect(resources[1]!.descriptors[0]!.rateLimit?.unit).toBe(RateLimitUnit.WEEK);
  });

  test('a bad file, a duplicate domain (unless merging), a duplicate resource name: left out by name, the rest served', () => {
    const served = (merge = false, previous?: Map<string, RateLimitConfigProto>) => {
      const r = loadConfigDirectory(tmp, merge, previous);
      return { files: r.files, problems: r.problems.map((p) => `${p.keptPrevious ? 'kept' : 'left out'}: ${p.error}`) };
    };
    writeTree(tmp, { 'a.yaml': A, 'b.yaml': 'domain: dom-b\ndescriptors:\n  - key: k\n    ratelimit: {}\n' });
    expect(served()).toEqual({ files: ['a.yaml'], problems: ["left out: b.yaml: config error, unknown key 'ratelimit'"] });
    writeTree(tmp, { 'b.yaml': A });
    expect(served()).toEqual({ files: ['a.yaml'], problems: ["left out: b.yaml: duplicate domain 'dom-a' in config file"] });
    writeTree(tmp, { 'b.yaml': A.replace('key: k', 'key: other') });
    expect(served(true)).toEqual({ files: ['a.yaml', 'b.yaml'], problems: [] });
    fs.rmSync(path.join(tmp, 'b.yaml'));
    writeTree(tmp, { 'a.yml': B });
    expect(served()).toEqual({ files: ['a.yaml'], problems: ["left out: a.yml: resource name 'a' is already used by a.yaml"] });
    // A file that turns invalid keeps the version given as previous.
    fs.rmSync(path.join(tmp, 'a.yml'));
    const before = loadConfigDirectory(tmp, false);
    writeTree(tmp, { 'a.yaml': 'domain: dom-a\ndescriptors: [{key: k, rate_limit: {unit: fortnight}}]\n' });
    const after = loadConfigDirectory(tmp, false, new Map([['a.yaml', before.resources[0]!]]));
    expect(after.resources).toEqual(before.resources);
    expect(after.problems).toEqual([{ file: 'a.yaml', error: "a.yaml: invalid rate limit unit 'fortnight'", keptPrevious: true }]);
  });
});

describe('ManagementServer + DirectoryPublisher', () => {
  test('files → resources; a change pushes a new version; a file turned invalid is named and keeps its last version', async () => {
    writeTree(tmp, { 'a.yaml': A, 'b.yml': B });
    const log = new CapturingLogger();
    const { server, publisher } = await serve(tmp, log);
    expect(publisher.version).toBe('1');
    expect(server.snapshot()!.resources.map((r) => RateLimitConfigProto.decode(r.value).name)).toEqual(['a', 'b']);

    const p = setupProvider(xdsSettings({ serverUrl: server.address, nodeId: 'node-1' }));
    p.provider.start();
    await p.store.waitForFirst();
    expect(p.config()!.getLimit('dom-b', entries(['k', 'x']))?.limit).toEqual({ name: '', requestsPerUnit: 2, unit: RateLimitUnit.WEEK });
    await waitFor(() => log.messages('info').some((m) => m.includes("node 'node-1': ACK version '1'")), 'the ACK logged');

    writeTree(tmp, { 'a.yaml': A.replace('requests_per_unit: 1', 'requests_per_unit: 5') });
    await waitFor(() => p.provider.lastAckedVersion === '2', 'version 2 accepted');
    expect(p.config()!.getLimit('dom-a', entries(['k', 'x']))?.limit.requestsPerUnit).toBe(5);
    await waitFor(() => log.messages('info').some((m) => m.includes("node 'node-1': ACK version '2'")), 'the ACK of 2 logged');

    writeTree(tmp, { 'b.yml': 'domain: dom-b\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n' });
    await waitFor(() => log.messages('error').length > 0, 'the invalid file logged');
    expect(log.messages('error')[0]).toBe(
      `config directory ${tmp}: b.yml keeps its previous version: b.yml: invalid rate limit unit 'fortnight'`,
    );
    await waitFor(() => log.messages('info').some((m) => m.endsWith("unchanged; still serving version '2'")), 'the unchanged set noted');
    expect(publisher.version).toBe('2');
    expect(p.provider.lastAckedVersion).toBe('2');
    expect(p.errors()).toBe(0);

    // Removing the bad file publishes the remaining set.
    fs.rmSync(path.join(tmp, 'b.yml'));
    await waitFor(() => p.provider.lastAckedVersion === '3', 'version 3 accepted');
    expect(p.config()!.domainCount).toBe(1);
  });

  test('value_to_metric and share_threshold are served (extension fields), beside a bad file that is named and left out', async () => {
    writeTree(tmp, {
      'vtm.yaml': 'domain: d\ndescriptors:\n  - key: route\n    value_to_metric: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n',
      'st.yaml': 'domain: s\ndescriptors:\n  - key: files\n    value: "a*"\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n',
      'zz-bad.yaml': 'domain: z\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n',
    });
    const log = new CapturingLogger();
    const { server, publisher } = await serve(tmp, log);
    expect(publisher.version).toBe('1');
    const resources = server.snapshot()!.resources.map((r) => RateLimitConfigProto.decode(r.value));
    expect(resources.map((r) => r.name)).toEqual(['st', 'vtm']);
    expect(resources[0]!.descriptors[0]!.shareThreshold).toBe(true);
    expect(resources[1]!.descriptors[0]!.valueToMetric).toBe(true);
    expect(log.messages('error')).toEqual([`config directory ${tmp}: zz-bad.yaml left out: zz-bad.yaml: invalid rate limit unit 'fortnight'`]);
  });

  test('ACKs and NACKs are logged with node, version and error; other types and stale nonces are ignored', async () => {
    const log = new CapturingLogger();
    const server = new ManagementServer({ logger: log });
    onCleanup(() => server.stop());
    await server.start();
    server.setSnapshot('7', [RateLimitConfigProto.fromPartial({ name: 'x', domain: 'd' })]);
    const raw = rawStream(server.address);

    raw.send({ typeUrl: 'type.googleapis.com/envoy.config.cluster.v3.Cluster' });
    await waitFor(() => log.lines.length >= 1, 'the request logged');
    expect(raw.responses).toHaveLength(0);

    raw.send({ versionInfo: '' });
    await waitFor(() => raw.responses.length === 1, 'the snapshot');
    expect(raw.responses[0]).toMatchObject({ versionInfo: '7', typeUrl: RATE_LIMIT_CONFIG_TYPE_URL });
    const nonce = raw.responses[0]!.nonce;

    raw.send({ versionInfo: '', responseNonce: nonce, errorDetail: { code: 3, message: 'x: boom', details: [] } });
    raw.send({ versionInfo: '7', responseNonce: 'old' });
    raw.send({ versionInfo: '7', responseNonce: nonce });
    await waitFor(() => log.lines.length >= 5, 'all requests logged');
    const lines = log.lines.map((l) => `${l.level} ${l.msg}`);
    expect(lines).toEqual([
      expect.stringMatching(/^info stream \d+, node 'raw-node': ignoring a request for type "type.googleapis.com\/envoy.config.cluster.v3.Cluster"$/),
      expect.stringMatching(/^info stream \d+, node 'raw-node': subscribed \(version_info ''\)$/),
      expect.stringMatching(new RegExp(`^warn stream \\d+, node 'raw-node': NACK nonce ${nonce}, still at version '': code 3: x: boom$`)),
      expect.stringMatching(/^info stream \d+, node 'raw-node': ACK version '7' nonce old \(stale\)$/),
      expect.stringMatching(new RegExp(`^info stream \\d+, node 'raw-node': ACK version '7' nonce ${nonce}$`)),
    ]);
    await quietFor(50);
    expect(raw.responses).toHaveLength(1); // a NACK of the current version does not resend it
  });

  test('DeltaAggregatedResources answers UNIMPLEMENTED', async () => {
    const server = new ManagementServer();
    onCleanup(() => server.stop());
    await server.start();
    const client = new AggregatedDiscoveryServiceClient(server.address, grpc.credentials.createInsecure());
    onCleanup(() => client.close());
    const call = client.deltaAggregatedResources();
    const status = await new Promise<grpc.StatusObject>((resolve) => {
      call.on('error', () => {});
      call.on('data', () => {});
      call.on('status', resolve);
    });
    expect(status.code).toBe(grpc.status.UNIMPLEMENTED);
  });
});

describe('ratelimit-xds-server CLI', () => {
  test('serves the directory, prints the listening line, versions with the prefix', async () => {
    writeTree(tmp, { 'a.yaml': A });
    const out: string[] = [];
    const cli = await runXdsServer(['-config_dir', tmp, '-port=0', '-version_prefix', 'v'], { out: (l) => out.push(l), logger: silentLogger });
    onCleanup(() => cli.close());
    expect(out).toHaveLength(1);
    const m = /^ratelimit-xds-server listening on (127\.0\.0\.1:(\d+))$/.exec(out[0]!);
    expect(m).not.toBeNull();
    expect(Number(m![2])).toBeGreaterThan(0);
    const p = setupProvider(xdsSettings({ serverUrl: m![1] }));
    p.provider.start();
    await waitFor(() => p.provider.lastAckedVersion === 'v1', 'version v1 accepted');
  });

  test('mTLS flags', async () => {
    const certs = testCerts();
    writeTree(tmp, { 'a.yaml': A });
    const out: string[] = [];
    const cli = await runXdsServer(
      ['-config_dir', tmp, '-port', '0', '-host', 'localhost', '-tls_cert', certs.server.cert, '-tls_key', certs.server.key, '-client_ca', certs.ca.cert],
      { out: (l) => out.push(l), logger: silentLogger },
    );
    onCleanup(() => cli.close());
    expect(out[0]).toBe(`ratelimit-xds-server listening on ${cli.address}`);
    const tls = { enabled: true, serverCaFile: certs.ca.cert, clientCertFile: certs.client.cert, clientKeyFile: certs.client.key };
    const p = setupProvider(xdsSettings({ serverUrl: cli.address, tls }));
    p.provider.start();
    await waitFor(() => p.provider.lastAckedVersion === '1', 'version 1 accepted over mTLS');
  });

  test('usage errors', async () => {
    const io = { out: () => {}, logger: silentLogger };
    await expect(runXdsServer([], io)).rejects.toThrow(new UsageError('-config_dir is required'));
    await expect(runXdsServer(['-config_dir', path.join(tmp, 'missing')], io)).rejects.toThrow(/^-config_dir: ENOENT/);
    await expect(runXdsServer(['-config_dir', tmp, '-port', 'x'], io)).rejects.toThrow('-port: invalid port "x"');
    await expect(runXdsServer(['-config_dir', tmp, '-tls_cert', 'c'], io)).rejects.toThrow('-tls_cert and -tls_key must be given together');
    await expect(runXdsServer(['-config_dir', tmp, '-bogus'], io)).rejects.toThrow('flag provided but not defined: -bogus');
  });

  const built = path.resolve(__dirname, '../../dist/src/cli/xds-server.js');
  test('the built program exits 0 on SIGTERM', async () => {
    writeTree(tmp, { 'a.yaml': A });
    const proc = spawn(process.execPath, [built, '-config_dir', tmp, '-port', '0'], { stdio: ['ignore', 'pipe', 'pipe'] });
    const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
    onCleanup(async () => {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
      await exited;
    });
    let out = '';
    proc.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    proc.stderr!.on('data', () => {});
    await waitFor(() => /listening on 127\.0\.0\.1:\d+/.test(out), 'the listening line', 10_000);
    proc.kill('SIGTERM');
    expect(await exited).toBe(0);
  });
});
