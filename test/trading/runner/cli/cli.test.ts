import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { candleToRow } from '../../../../src/trading/fxcm/candles';
import { wave } from '../helpers';

// needs `npx tsc -p tsconfig.json` (dist/) first
const CLI = path.join(__dirname, '../../../../dist/src/cli/runner.js');
const EX = path.join(__dirname, '../../../../examples/strategies/ma-crossover.js');
const run = (args: string[]) => spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 20000 });

describe('ratelimit-runner backtest (CLI)', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rr-cli-'));
  const candles = path.join(dir, 'eurusd.json');
  fs.writeFileSync(candles, JSON.stringify({ symbol: 'EUR/USD', timeframe: 'm1', candles: wave(1_700_000_040, 400).map(candleToRow) }));

  test('--help for the runner and the backtest command', () => {
    expect(run(['--help']).stdout).toContain('backtest');
    const h = run(['backtest', '--help']);
    expect(h.status).toBe(0);
    expect(h.stdout).toContain('--candles FILE');
  });

  test('runs the example and writes JSON + HTML', () => {
    const out = path.join(dir, 'rep');
    const r = run(['backtest', EX, '--candles', candles, '--report', out, '--quiet', '--param', 'slow=15']);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(r.stdout).toMatch(/400 candles/);
    const rep = JSON.parse(fs.readFileSync(`${out}.json`, 'utf8'));
    expect(rep.metrics.trades).toBeGreaterThan(0);
    expect(fs.readFileSync(`${out}.html`, 'utf8')).toContain('<svg');
  });

  test('--protections FILE replaces the strategy\'s: a cooldown after every close shows in the report; a bad file is a usage error; a bad declaration in the module fails its load', () => {
    const file = path.join(dir, 'protections.json');
    fs.writeFileSync(file, JSON.stringify({ cooldown: { minutes: 30 } }));
    const out = path.join(dir, 'rep-protected');
    const r = run(['backtest', EX, '--candles', candles, '--report', out, '--quiet', '--param', 'slow=15', '--protections', file]);
    expect([r.status, r.stderr]).toEqual([0, '']);
    const rep = JSON.parse(fs.readFileSync(`${out}.json`, 'utf8')) as { locks: Array<{ rule: string }>; metrics: { trades: number } };
    expect(rep.locks.length).toBeGreaterThan(0);
    expect(new Set(rep.locks.map((l) => l.rule))).toEqual(new Set(['cooldown']));
    fs.writeFileSync(file, '{"cooldown": {"minutes": 0}}');
    const bad = run(['backtest', EX, '--candles', candles, '--quiet', '--protections', file]);
    expect([bad.status, bad.stderr]).toEqual([2, expect.stringContaining(`--protections ${file}: cooldown.minutes must be a number above 0, got 0`)]);
    fs.writeFileSync(file, '{cooldown');
    expect(run(['backtest', EX, '--candles', candles, '--quiet', '--protections', file]).stderr).toContain(`--protections ${file}: not JSON`);
    const declared = path.join(dir, 'declared.js');
    fs.writeFileSync(declared, "module.exports = { symbols: ['EUR/USD'], protections: { maxDrawdown: { pct: 5 } } };\n");
    const load = run(['backtest', declared, '--candles', candles, '--quiet']);
    expect(load.status).toBe(1);
    expect(load.stderr).toContain(`${declared}: maxDrawdown.lockMin must be a number above 0, got undefined`);
  });

  test('usage errors exit 2; a strategy that fails to load exits 1 with its line', () => {
    expect(run(['backtest', EX]).status).toBe(2);
    const unknown = run(['backtest', EX, '--candles', candles, '--ballance', '5']);
    expect(unknown.status).toBe(2);
    expect(unknown.stderr).toContain("ratelimit-runner backtest: Unknown option '--ballance'.\n");
    const bad = path.join(dir, 'bad.js');
    fs.writeFileSync(bad, "module.exports = {\n  symbols: ['EUR/USD'],\n  onBar( {\n};\n");
    const r = run(['backtest', bad, '--candles', candles, '--quiet']);
    expect(r.status).toBe(1);
    expect(r.stderr).toContain(`${bad}:4`); // where node reports the syntax error
    const missing = run(['backtest', path.join(dir, 'nope.js'), '--candles', candles]);
    expect(missing.status).toBe(1);
    expect(missing.stderr).toContain('strategy file not found');
  });

  test('a strategy that throws: exit 1, error and script line, report still written', () => {
    const f = path.join(dir, 'throws.js');
    fs.writeFileSync(f, "module.exports = {\n  symbols: ['EUR/USD'],\n  onBar(ctx, bar) {\n    if (bar.ts > 1700000400) null.x;\n  },\n};\n");
    const out = path.join(dir, 'thr');
    const r = run(['backtest', f, '--candles', candles, '--quiet', '--report', out]);
    expect(r.status).toBe(1);
    expect(r.stdout).toMatch(/^strategy: 8 of 400 candles in /); // not the candles it never reached
    expect(r.stderr).toContain(`${f}:4:`);
    expect(JSON.parse(fs.readFileSync(`${out}.json`, 'utf8')).error.hook).toBe('onBar');
  });
});
