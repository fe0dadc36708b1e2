/**
 * The broker budget outlives the process (issue 32, item 3): paper runs restarted in quick
 * succession, and runs side by side, spend one budget kept in a file per broker and account; a run
 * whose start-up call is over budget says until when and waits, or exits 3 without calling
 * (`--if-no-budget exit`). Child processes of the compiled runner (`make build` first).
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { BrokerSimulator } from '../../../../src/trading/simulator';
import { waitFor } from '../../../support/wait';
import { startSim, TOKEN, TOKEN2 } from '../../helpers';

const CLI = path.join(__dirname, '../../../../dist/src/cli/runner.js');
const BUNDLED = path.join(__dirname, '../../../../examples/runner/broker-limits.yaml');
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rr-budget-state-'));
const stateDir = path.join(dir, 'state');
const env = { PATH: process.env.PATH, RATELIMIT_RUNNER_STATE: stateDir };

interface Child {
  exited: Promise<number | null>;
  stderr: () => string;
  kill: (s: NodeJS.Signals) => void;
}

function start(args: string[]): Child {
  const p = spawn(process.execPath, [CLI, ...args], { env, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  p.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const t = setTimeout(() => p.kill('SIGKILL'), 30_000);
  return {
    exited: new Promise((r) => p.once('exit', (code) => (clearTimeout(t), r(code)))),
    stderr: () => stderr,
    kill: (s) => p.kill(s),
  };
}

describe('the broker budget across processes', () => {
  let sim: BrokerSimulator;
  let limits: string;
  let strategy: string;
  beforeAll(async () => {
    sim = await startSim({ tickIntervalMs: 50 });
    // The bundled limits with an OpenPosition snapshot budget of 2 at once, then one an hour.
    limits = path.join(dir, 'limits.yaml');
    const bundled = fs.readFileSync(BUNDLED, 'utf8');
    const tight = bundled.replace('{unit: hour, requests_per_unit: 45, algorithm: token_bucket, burst: 5}', '{unit: hour, requests_per_unit: 1, algorithm: token_bucket, burst: 2}');
    expect(tight).not.toBe(bundled);
    fs.writeFileSync(limits, tight);
    strategy = path.join(dir, 'idle.js');
    fs.writeFileSync(strategy, "module.exports = { name: 'idle', symbols: ['EUR/USD'] };\n");
  });
  afterAll(async () => {
    await sim.stop();
  });

  // One streaming session per token: runs side by side have a token each and name one account.
  const paper = (...extra: string[]) => start(['paper', strategy, '--url', sim.url, '--token', TOKEN, '--account', 'acct-1', '--limits', limits, '--duration', '0', '--quiet', '--report', path.join(dir, 'report'), ...extra]);
  const snapshots = () => sim.requestCounts()['/trading/get_model'] ?? 0;

  test('two runs at once, then restarts: one budget; over it a run says until when and exits 3, or waits', async () => {
    const before = snapshots();
    const [a, b] = [paper(), paper('--token', TOKEN2)];
    expect([await a.exited, await b.exited]).toEqual([0, 0]);
    expect(snapshots() - before).toBe(2);
    const files = fs.readdirSync(stateDir);
    expect(files).toEqual([expect.stringMatching(/^budget-127\.0\.0\.1_\d+-acct-1\.json$/)]);

    // The third run cannot get its snapshot for an hour: it says so and exits without calling.
    const startedAt = Date.now();
    const c = paper('--if-no-budget', 'exit');
    expect(await c.exited).toBe(3);
    const m = /^ratelimit-runner paper: the broker budget for get_model OpenPosition is used up \(shared by every run on this account, kept in (.+)\); the next call is allowed at (\S+) \(in (\d+) s\): not calling the broker: exiting \(--if-no-budget exit\)\n$/.exec(c.stderr());
    expect(m).not.toBeNull();
    expect(m![1]).toBe(path.join(stateDir, files[0]!));
    const until = Date.parse(m![2]!);
    // one share of 1 an hour: about an hour after the first snapshot
    expect(until).toBeGreaterThan(startedAt + 3_500_000);
    expect(until).toBeLessThan(Date.now() + 3_601_000);
    expect(snapshots() - before).toBe(2);

    // By default it waits, saying until when; a signal stops the wait.
    const d = paper();
    await waitFor(() => d.stderr().includes('waiting (--if-no-budget exit stops instead)'), 'the waiting run to say until when');
    expect(d.stderr()).toContain(`the next call is allowed at `);
    d.kill('SIGTERM');
    expect(await d.exited).toBe(1);
    expect(d.stderr()).toContain('ratelimit-runner paper: stopped before the run started');
    expect(snapshots() - before).toBe(2);
  }, 90_000); // four runner processes one after the other: over 30 s once on a loaded machine

  test('--if-no-budget takes wait or exit only', async () => {
    const e = paper('--if-no-budget', 'later');
    expect(await e.exited).toBe(2);
    expect(e.stderr()).toContain('--if-no-budget must be wait or exit, got later');
  });
});
