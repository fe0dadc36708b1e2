/**
 * `ratelimit-runner candles download|check` as child processes against the in-process simulator
 * (needs `npx tsc -p tsconfig.json` first): several symbols and time frames into a store in one
 * command, a download stopped by SIGTERM that a second run completes, and `candles check`'s exit
 * status and report.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { readCandleFile } from '../../../../src/trading/fxcm/candle-file';
import type { BrokerSimulator } from '../../../../src/trading/simulator';
import { startSim, TOKEN } from '../../helpers';
import { tightBrokerLimits, freshRunnerEnv } from '../helpers';
import { waitFor } from '../../../support/wait';

const CLI = path.join(__dirname, '../../../../dist/src/cli/runner.js');
const EX = path.join(__dirname, '../../../../examples/strategies/ma-crossover.js');
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rr-candles-cli-'));
const env = { PATH: process.env.PATH };
const DAY = 86400;

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function run(args: string[], o: { env?: NodeJS.ProcessEnv; onSpawn?: (kill: (s: NodeJS.Signals) => void) => void } = {}): Promise<Run> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [CLI, ...args], { env: freshRunnerEnv(o.env ?? env), stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    p.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const t = setTimeout(() => p.kill('SIGKILL'), 25000);
    o.onSpawn?.((s) => p.kill(s));
    p.once('exit', (code) => {
      clearTimeout(t);
      resolve({ code, stdout, stderr });
    });
  });
}

describe('candles CLI', () => {
  let sim: BrokerSimulator;
  /** A candle budget a test can spend at once (the bundled one sends 2 a minute). */
  const loose = path.join(dir, 'loose.yaml');
  let to: number;
  beforeAll(async () => {
    sim = await startSim({ tickIntervalMs: 0 });
    fs.writeFileSync(loose, tightBrokerLimits({ endpoint: 'candles', unit: 'second', requestsPerUnit: 1000 })[0]!.content);
    to = Math.floor(Date.now() / 1000 / 3600) * 3600 - 2 * 3600;
  });
  afterAll(async () => {
    await sim.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  const broker = () => ['--url', sim.url, '--token', TOKEN, '--limits', loose];
  const candleRequests = () => sim.requestCounts()['/candles'] ?? 0;

  test('two symbols x two time frames in one command, into a store that backtest reads as it is', async () => {
    const store = path.join(dir, 'store');
    sim.resetCounters();
    const r = await run(['candles', 'download', ...broker(), '--symbol', 'EUR/USD,USD/JPY', '--timeframe', 'm5', '--timeframe', 'H1', '--from', String(to - 2 * DAY), '--to', String(to), '--store', store]);
    expect(r.code).toBe(0);
    const lines = r.stdout.trim().split('\n');
    expect(lines).toHaveLength(4);
    const files = { 'EUR/USD m5': 'EUR_USD/m5.json', 'EUR/USD H1': 'EUR_USD/H1.json', 'USD/JPY m5': 'USD_JPY/m5.json', 'USD/JPY H1': 'USD_JPY/H1.json' };
    Object.entries(files).forEach(([label, file], i) => {
      expect(lines[i]).toMatch(new RegExp(`^${label}: \\d+ candles in ${path.join(store, file)}, covering .* \\(1 candle requests\\)$`));
      const [symbol, timeframe] = label.split(' ');
      expect(readCandleFile(path.join(store, file))).toMatchObject({ symbol, timeframe });
    });
    expect(candleRequests()).toBe(4);
    // not a terminal: no progress bar, only the broker-limits warnings of the loose config
    expect(r.stderr).not.toContain('requests,');
    const bt = await run(['backtest', EX, '--candles', path.join(store, 'EUR_USD/m5.json'), '--quiet', '--report', path.join(dir, 'bt')]);
    expect(bt.code).toBe(0);
    const check = await run(['candles', 'check', store]);
    expect(check.code).toBe(0);
    expect(check.stdout).toContain(`${path.join(store, 'EUR_USD/H1.json')}: ok\n  EUR/USD H1, `);
    expect(check.stdout).toContain('4 files checked, 0 invalid');

    // the store in RATELIMIT_RUNNER_CANDLES when neither --out nor --store is given; it has the range already
    const again = await run(['candles', 'download', ...broker(), '--symbol', 'EUR/USD', '--timeframe', 'h1', '--from', String(to - DAY), '--to', String(to)], { env: { ...env, RATELIMIT_RUNNER_CANDLES: store } });
    expect(again.code).toBe(0);
    expect(again.stdout).toMatch(/^EUR\/USD H1: \d+ candles in .*EUR_USD\/H1\.json, covering .* \(0 candle requests\)\n$/);
    expect(candleRequests()).toBe(4);
  });

  test('usage: --out takes one symbol and one time frame; --out and --store together; no destination', async () => {
    const base = ['candles', 'download', ...broker(), '--from', String(to - DAY), '--to', String(to)];
    const two = await run([...base, '--symbol', 'EUR/USD,USD/JPY', '--timeframe', 'm5', '--out', path.join(dir, 'x.json')]);
    expect(two.code).toBe(2);
    expect(two.stderr).toContain('--out FILE takes one symbol and one time frame, not 2: use --store DIR for several');
    const both = await run([...base, '--symbol', 'EUR/USD', '--timeframe', 'm5', '--out', 'x.json', '--store', dir]);
    expect(both.stderr).toContain('give --out FILE or --store DIR, not both');
    const none = await run([...base, '--symbol', 'EUR/USD', '--timeframe', 'm5']);
    expect(none.code).toBe(2);
    expect(none.stderr).toContain('candles download needs --out FILE or --store DIR (or RATELIMIT_RUNNER_CANDLES=DIR)');
    const badTf = await run([...base, '--symbol', 'EUR/USD', '--timeframe', 'm5,m2', '--store', dir]);
    expect(badTf.stderr).toContain('--timeframe m2: not a time frame');
    expect((await run(['candles', '--help'])).stdout).toContain('ratelimit-runner candles check [FILE|DIR...]');
    expect((await run(['candles', 'check', '--help'])).stdout).toContain('Exit status: 0 every file valid');
  });

  test('stopped by SIGTERM mid-way: the store keeps what was fetched, valid; the same command again completes it', async () => {
    const store = path.join(dir, 'interrupted');
    const from = to - 15 * DAY; // m1: 3 requests
    const args = ['candles', 'download', ...broker(), '--symbol', 'EUR/USD', '--timeframe', 'm1', '--from', String(from), '--to', String(to)];
    sim.resetCounters();
    sim.faults.slowResponses('/candles', 300);
    const stopped = await run([...args, '--store', store], {
      onSpawn: (kill) => {
        // the second request is sent once the first answer is saved
        void waitFor(() => candleRequests() >= 2, 'the second candle request', 15_000).then(() => kill('SIGTERM'));
      },
    });
    sim.faults.reset();
    expect(stopped.code).toBe(143);
    expect(stopped.stderr).toMatch(/EUR\/USD m1: stopped by SIGTERM; the store keeps \d+ candles in .*m1\.json, covering .*: the same command again completes it/);
    const file = path.join(store, 'EUR_USD/m1.json');
    const partial = readCandleFile(file);
    expect(partial.candles.length).toBeGreaterThanOrEqual(10000);
    const sentBefore = candleRequests();
    expect(sentBefore).toBeLessThan(3);

    const done = await run([...args, '--store', store]);
    // (the whole answer on a failure: its stderr says why)
    expect(done).toMatchObject({ code: 0 });
    expect(candleRequests() - sentBefore).toBe(3 - sentBefore);
    const whole = path.join(dir, 'whole.json');
    const one = await run([...args, '--out', whole]);
    expect(one).toMatchObject({ code: 0 });
    expect(readCandleFile(file).candles).toEqual(readCandleFile(whole).candles);
  });

  test('candles check: a bad file is named with its line (exit 1), beside a good one', async () => {
    const good = path.join(dir, 'good.csv');
    fs.writeFileSync(good, 'ts,bidopen,bidclose,bidhigh,bidlow,askopen,askclose,askhigh,asklow\n1709631000,1,1,1,1,1,1,1,1\n1709631060,1,1,1,1,1,1,1,1\n');
    const bad = path.join(dir, 'bad.csv');
    fs.writeFileSync(bad, 'ts,bidopen,bidclose,bidhigh,bidlow,askopen,askclose,askhigh,asklow\n1709631000,1,1,1,1,1,1,1,1\n1709631000,1,1,1,1,1,1,1,1\n');
    const r = await run(['candles', 'check', good, bad, '--symbol', 'EUR/USD', '--timeframe', 'm1']);
    expect(r.stdout).toContain(`${good}: ok\n  EUR/USD m1, 2 candles`);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain(`${bad}: INVALID: 1 bad row (1 duplicate)\n`);
    expect(r.stdout).toContain(`${bad}:3: the candle at 2024-03-05T09:30:00Z is not after the one before it`);
    expect(r.stdout).toContain('2 files checked, 1 invalid');
    const missing = await run(['candles', 'check', path.join(dir, 'nope.json')]);
    expect(missing.code).toBe(1);
    expect(missing.stdout).toContain('nope.json: INVALID: ENOENT');
    expect((await run(['candles', 'check'])).code).toBe(2);
  });
});
