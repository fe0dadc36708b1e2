/**
 * One runner per journal, as child processes against the simulator (needs `npx tsc -p
 * tsconfig.json` first; issue 42, item 4): a second `paper` run on a journal whose runner is
 * alive is refused (exit 2) with a message naming that runner's pid and the journal, and writes
 * nothing to it; once the first is killed with kill -9, a resume takes the lock over and goes on.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { BrokerSimulator } from '../../../../src/trading/simulator';
import { readJournal } from '../../../../src/trading/runner/journal/journal';
import { startSim, TOKEN } from '../../helpers';
import { waitFor } from '../../../support/wait';
import { freshRunnerEnv } from '../helpers';

const CLI = path.join(__dirname, '../../../../dist/src/cli/runner.js');
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rr-journal-lock-cli-'));

interface Exit {
  code: number | null;
  stdout: string;
  stderr: string;
}

function start(args: string[]): { child: ChildProcess; exited: Promise<Exit> } {
  const child = spawn(process.execPath, [CLI, ...args], { env: freshRunnerEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const kill = setTimeout(() => child.kill('SIGKILL'), 30000);
  const exited = new Promise<Exit>((resolve) =>
    child.once('exit', (code) => {
      clearTimeout(kill);
      resolve({ code, stdout, stderr });
    }),
  );
  return { child, exited };
}

describe('one runner per journal', () => {
  let sim: BrokerSimulator;
  beforeAll(async () => {
    sim = await startSim({ tickIntervalMs: 25 });
  });
  afterAll(async () => {
    await sim.stop();
  });

  test("a second runner on a live runner's journal is refused, naming its pid; after kill -9 a resume takes the lock over", async () => {
    const f = path.join(dir, 'quiet.js');
    fs.writeFileSync(f, "module.exports = { name: 'quiet', symbols: ['EUR/USD'], onTick() {} };\n");
    const jdir = path.join(dir, 'j');
    const jfile = path.join(jdir, 'journal.jsonl');
    const args = (report: string, ...more: string[]) => ['paper', f, '--url', sim.url, '--token', TOKEN, '--journal', jdir, '--quiet', '--report', path.join(dir, report), ...more];
    const first = start(args('r1'));
    await waitFor(() => readJournal(jfile).some((l) => l.k === 'start'), 'the first run to start', 15_000);

    const second = await start(args('r2', '--duration', '0.5')).exited;
    expect(second.code).toBe(2);
    expect(second.stderr).toBe(
      `ratelimit-runner paper: the journal ${jfile} is in use by process ${first.child.pid} on ${os.hostname()} (since ${JSON.parse(fs.readFileSync(`${jfile}.lock`, 'utf8')).since}): a second runner must not write to it; stop that one first, or give this run another --journal\n`,
    );
    expect(second.stdout).toBe('');
    // the first run goes on, alone in its journal
    const before = readJournal(jfile).filter((l) => l.k === 'price').length;
    await waitFor(() => readJournal(jfile).filter((l) => l.k === 'price').length > before + 2, 'more ticks of the first run', 15_000);
    expect(readJournal(jfile).filter((l) => l.k === 'run' || l.k === 'resume')).toHaveLength(1);

    first.child.kill('SIGKILL');
    await first.exited;
    expect(fs.existsSync(`${jfile}.lock`)).toBe(true); // a killed process releases nothing
    const third = await start(args('r3', '--duration', '0.5')).exited;
    expect(third.stderr).toBe('');
    expect(third.code).toBe(0);
    expect(third.stdout).toContain(`the journal's lock named process ${first.child.pid} (since `);
    expect(third.stdout).toContain('which is no longer running: taken over');
    expect(third.stdout).toContain(`resuming from ${jfile}`);
    expect(fs.existsSync(`${jfile}.lock`)).toBe(false); // released when it ended
  });
});
