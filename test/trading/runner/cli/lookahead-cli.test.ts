/**
 * `ratelimit-runner lookahead` as a user runs it (needs `npx tsc -p tsconfig.json`, dist/): each run
 * on a worker thread whose process.argv names the check's copies of the candle files. A planted
 * peek fails (exit 1, the decisions that changed on stdout); the bundled examples pass (exit 0);
 * the copies are removed; usage errors exit 2.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { candleToRow } from '../../../../src/trading/fxcm/candles';
import { candle } from '../helpers';

const CLI = path.join(__dirname, '../../../../dist/src/cli/runner.js');
const EXAMPLES = path.join(__dirname, '../../../../examples/strategies');
const FIXTURES = path.join(__dirname, '../fixtures');
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rr-lookahead-cli-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

/** The check's temporary directory: os.tmpdir() of the child, empty again after each run. */
const tmp = path.join(dir, 'tmp');
fs.mkdirSync(tmp);
const run = (args: string[]) => spawnSync(process.execPath, [CLI, 'lookahead', ...args], { encoding: 'utf8', timeout: 120_000, env: { PATH: process.env.PATH, TMPDIR: tmp }, cwd: dir });

const T0 = Date.UTC(2026, 10, 16) / 1000;
const rows = [];
let p = 1.1;
for (let i = 0; i < 1500; i++) {
  const o = p;
  p = Math.round((p + 0.0004 * Math.sin(i / 7) + 0.0001 * Math.cos(i / 3) + 0.00015 * Math.sin(i * 1.3)) * 1e5) / 1e5;
  rows.push(candleToRow(candle(T0 + i * 60, o, Math.max(o, p) + 0.0001, Math.min(o, p) - 0.0001, p)));
}
fs.writeFileSync(path.join(dir, 'eur.json'), JSON.stringify({ symbol: 'EUR/USD', timeframe: 'm1', candles: rows }));

describe('ratelimit-runner lookahead', () => {
  test('a strategy that reads the next close from the candle file named in its arguments: FAIL, exit 1, the changed decisions named', () => {
    const r = run([path.join(FIXTURES, 'peek-next-close.js'), '--candles', 'eur.json', '--cuts', '3', '--workers', '2', '--report', 'out/peek']);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(1);
    expect(r.stdout).toMatch(/^lookahead: peek-next-close over 1500 candles: \d+ decisions\n {2}control \(the same candles in new files\): the same \d+ decisions\n/);
    const cuts = r.stdout.split('\n').filter((l) => /^ {2}cut \d/.test(l));
    expect(cuts).toHaveLength(3);
    for (const c of cuts) expect(c).toMatch(/^ {2}cut \d at \S+Z \(at decision \d+ of \d+\): 1 of the \d+ decisions up to it changed when only the candles after it changed:$/);
    expect(r.stdout).toMatch(/ {4}decision \d+: openTrade \{"symbol":"EUR\/USD","isBuy":(true|false),"amount":10\} at \S+Z\n {6}became: openTrade \{"symbol":"EUR\/USD","isBuy":(true|false),"amount":10\} at \S+Z\n/);
    expect(r.stdout).toContain('lookahead: FAIL: decisions made before a cut changed when only the candles after it changed: the strategy sees the future');
    const findings = JSON.parse(fs.readFileSync(path.join(dir, 'out/peek.json'), 'utf8'));
    expect(findings).toMatchObject({ strategy: 'peek-next-close', lookaheadOk: false, warmupOk: true });
    expect(fs.readdirSync(tmp)).toEqual([]);
  });

  test.each(['ma-crossover.js', 'ma-crossover.ts'])('the bundled example %s: PASS on both checks, exit 0', (file) => {
    const r = run([path.join(EXAMPLES, file), '--candles=eur.json', '--commission', '0.04']);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('lookahead: PASS: no decision up to a cut changed when the candles after it changed (5 cuts)');
    expect(r.stdout).toMatch(/warm-up: trading from \S+Z after the strategy's warmup of 20 bars \(20 candles before it\) and after all 750 candles before it: the same \d+ decisions/);
    expect(r.stdout).toContain('warm-up: PASS');
    expect(fs.readdirSync(tmp)).toEqual([]);
  });

  test("the strategy 'ratelimit-runner new' writes passes both checks", () => {
    const made = spawnSync(process.execPath, [CLI, 'new', 'breakout', '--dir', 'new'], { encoding: 'utf8', cwd: dir });
    expect(made.status).toBe(0);
    const r = run([path.join(dir, 'new/breakout.js'), '--candles', 'eur.json', '--cuts', '3']);
    expect(r.stderr).toBe('');
    expect(r.stdout).toContain('lookahead: PASS');
    expect(r.stdout).toMatch(/warm-up: trading from \S+ after the strategy's warmup of 20 bars .*: the same \d+ decisions/);
    expect(r.status).toBe(0);
  });

  test('a strategy that needs more history than its warmup: the warm-up check fails, exit 1', () => {
    const r = run([path.join(FIXTURES, 'short-warmup.js'), '--candles', 'eur.json', '--cuts', '2']);
    expect(r.status).toBe(1);
    expect(r.stdout).toContain('lookahead: PASS');
    expect(r.stdout).toMatch(/warm-up: trading from \S+ after the strategy's warmup of 10 bars \(10 candles before it\) and after all 750 candles before it: \d+ of \d+ decisions differ/);
    expect(r.stdout).toContain("warm-up: FAIL: the results depend on more history than the strategy's warmup");
  });

  test('usage errors exit 2 with the reason', () => {
    const ex = path.join(EXAMPLES, 'ma-crossover.js');
    expect(run([]).stderr).toContain('ratelimit-runner lookahead: lookahead needs a strategy file');
    expect(run([ex]).stderr).toContain('lookahead needs --candles FILE');
    const cuts = run([ex, '--candles', 'eur.json', '--cuts', '0']);
    expect([cuts.status, cuts.stderr.split('\n')[0]]).toEqual([2, 'ratelimit-runner lookahead: --cuts must be a whole number of at least 1, got "0"']);
    const unknown = run([ex, '--candles', 'eur.json', '--cutz', '3']);
    expect([unknown.status, unknown.stderr.split('\n')[0]]).toEqual([2, "ratelimit-runner lookahead: Unknown option '--cutz'."]);
    expect(run([ex, '--candles', 'missing.json']).status).toBe(2);
  });
});
