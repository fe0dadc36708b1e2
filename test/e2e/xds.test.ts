/**
 * End to end: the shipped `ratelimit-xds-server` serving a directory of YAML files drives a
 * running `ratelimit` in CONFIG_TYPE=GRPC_XDS_SOTW mode; a file edit reaches the service.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { baseEnv, callGrpc, descriptor, DIST, grpcClient, httpGet, startService } from './harness';
import { waitFor } from '../support/wait';

const CONFIG = 'domain: xds\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 4}\n';

function startXdsServer(dir: string) {
  const proc = spawn(process.execPath, [path.join(DIST, 'xds-server.js'), '-config_dir', dir, '-port', '0'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  proc.stdout.on('data', (d: Buffer) => (out += d.toString()));
  proc.stderr.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((resolve) => proc.once('exit', resolve));
  const address = new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`xds server did not start:\n${out}`)), 10_000);
    proc.stdout.on('data', () => {
      const m = /ratelimit-xds-server listening on (\S+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    });
  });
  return {
    address,
    output: () => out,
    stop: async () => {
      proc.kill('SIGTERM');
      return exited;
    },
  };
}

test('ratelimit-xds-server drives a running ratelimit over ADS', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rl-xds-e2e-'));
  fs.writeFileSync(path.join(dir, 'xds.yaml'), CONFIG);
  const server = startXdsServer(dir);
  const address = await server.address;
  const env = {
    ...baseEnv('/nonexistent'),
    CONFIG_TYPE: 'GRPC_XDS_SOTW',
    CONFIG_GRPC_XDS_SERVER_URL: address,
    CONFIG_GRPC_XDS_NODE_ID: 'e2e-node',
    XDS_CLIENT_BACKOFF_INITIAL_INTERVAL: '100ms',
  };
  const svc = await startService(env);
  const client = grpcClient(svc.grpc);
  try {
    const minute = (): number => Math.floor(Date.now() / 60_000);
    const res = await callGrpc(client, { domain: 'xds', descriptors: [descriptor('k', 'v')] });
    const firstMinute = minute();
    expect(res.statuses[0]!.currentLimit?.requestsPerUnit).toBe(4);
    expect(res.statuses[0]!.limitRemaining).toBe(3);

    fs.writeFileSync(path.join(dir, 'xds.yaml'), CONFIG.replace('4}', '9}'));
    await waitFor(async () => (await httpGet(svc.debug, '/rlconfig')).body.includes('requests_per_unit=9'), '(await httpGet(svc.debug, \'/rlconfig\')).body.includes(\'requests_per...');
    const secondMinute = minute();
    const after = await callGrpc(client, { domain: 'xds', descriptors: [descriptor('k', 'v')] });
    // The counter outlives the reload (its key names the unit, not the limit): 9 - 2, or 9 - 1
    // when the minute turned between the two calls (a new window).
    expect(after.statuses[0]!.currentLimit?.requestsPerUnit).toBe(9);
    expect(after.statuses[0]!.limitRemaining).toBe(secondMinute === firstMinute ? 7 : 8);
    expect(server.output()).toMatch(/e2e-node/);
    // The config history names the xDS versions and what the reload changed.
    await waitFor(async () => (JSON.parse((await httpGet(svc.debug, '/debug/config-history')).body) as { history: unknown[] }).history.length === 2, 'two loads in the history');
    const h = JSON.parse((await httpGet(svc.debug, '/debug/config-history')).body) as {
      history: Array<{ source: { xds_version: string }; version: string; previous_version: string | null; diff: { changed: number; limits: Array<{ rule: string }> } }>;
    };
    const [second, first] = h.history;
    expect(first!.source.xds_version).not.toBe('');
    expect(second!.source.xds_version).not.toBe(first!.source.xds_version);
    expect(second).toMatchObject({ previous_version: first!.version, diff: { changed: 1, limits: [{ rule: 'xds.k' }] } });
    expect(svc.output()).toContain(`config version ${second!.version} loaded (was ${first!.version}): 1 limits in 1 domains, 0 added, 0 removed, 1 changed (xDS version ${second!.source.xds_version})`);
  } finally {
    client.close();
    expect(await svc.stop()).toBe(0);
    expect(await server.stop()).toBe(0);
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
