/**
 * A refused token, as `paper` child processes against the simulator behind a proxy (needs `npx
 * tsc -p tsconfig.json` first; issue 42, item 6): refused at the start, the run exits 4 saying the
 * broker refused the token; revoked during the run, it says so, stops after
 * --token-refused-timeout with exit 4, and the same --journal resumes it once the token works.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { BrokerSimulator } from '../../../../src/trading/simulator';
import { readJournal } from '../../../../src/trading/runner/journal/journal';
import { BrokerProxy } from '../../../support/broker-proxy';
import { waitFor } from '../../../support/wait';
import { startSim, TOKEN } from '../../helpers';
import { freshRunnerEnv } from '../helpers';

const CLI = path.join(__dirname, '../../../../dist/src/cli/runner.js');
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rr-operator-cli-'));

interface Exit {
  code: number | null;
  stdout: string;
  stderr: string;
}

function run(args: string[]): Promise<Exit> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [CLI, ...args], { env: freshRunnerEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const kill = setTimeout(() => child.kill('SIGKILL'), 30000);
    child.once('exit', (code) => {
      clearTimeout(kill);
      resolve({ code, stdout, stderr });
    });
  });
}

describe('a refused token', () => {
  let sim: BrokerSimulator;
  let proxy: BrokerProxy;
  beforeAll(async () => {
    sim = await startSim({ tickIntervalMs: 50 });
    proxy = new BrokerProxy();
    await proxy.start(sim.url);
  });
  afterAll(async () => {
    await proxy.stop();
    await sim.stop();
  });
  afterEach(() => proxy.reset());

  const strategy = path.join(dir, 'quiet.js');
  fs.writeFileSync(strategy, "module.exports = { name: 'quiet', symbols: ['EUR/USD'], onTick() {} };\n");
  const refusal = 'handshake refused: HTTP 403 {"code":4,"message":"Forbidden"}';

  test('at the start: exit 4, saying the broker refused the token', async () => {
    proxy.refuseToken();
    const r = await run(['paper', strategy, '--url', proxy.url, '--token', TOKEN, '--quiet', '--report', path.join(dir, 'start')]);
    expect(r.stderr).toBe(`ratelimit-runner paper: the broker refused the token (${refusal}): check --token or FXCM_TOKEN\n`);
    expect(r.code).toBe(4);
  });

  test('revoked during the run: said, stopped with exit 4 after --token-refused-timeout; the journal resumes it once the token works', async () => {
    const jdir = path.join(dir, 'j');
    const jfile = path.join(jdir, 'journal.jsonl');
    const args = (report: string, ...more: string[]) => ['paper', strategy, '--url', proxy.url, '--token', TOKEN, '--journal', jdir, '--report', path.join(dir, report), ...more];
    const first = run(args('r1', '--token-refused-timeout', '1'));
    await waitFor(() => readJournal(jfile).filter((l) => l.k === 'price').length >= 3, 'the run to go', 15_000);
    const t0 = Date.now();
    proxy.refuseToken();
    const r = await first;
    expect(Date.now() - t0).toBeLessThan(10_000);
    expect(r.code).toBe(4);
    expect(r.stderr).toContain('broker connection lost (transport close): reconnecting');
    expect(r.stderr).toContain(`the broker refused the token (${refusal}): it is revoked, expired or not this account's, or another session took it over; retrying, and stopping the run (resumable with the same journal) if it is still refused in 1 s`);
    expect(r.stderr.endsWith(`ratelimit-runner paper: the broker refused the token for 1 s (${refusal}): the run stopped there; run again with the same --journal once the token works\n`)).toBe(true);
    expect(r.stdout).toContain('report: ');

    proxy.acceptToken();
    const again = await run(args('r2', '--duration', '0.5', '--quiet'));
    expect(again.stderr).toBe('');
    expect(again.code).toBe(0);
    expect(again.stdout).toContain(`resuming from ${jfile}`);
  });

  test('--token-refused-timeout takes seconds above 0', async () => {
    const r = await run(['paper', strategy, '--url', proxy.url, '--token', TOKEN, '--token-refused-timeout', '0']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('--token-refused-timeout must be a number of seconds above 0, got "0"');
  });
});
