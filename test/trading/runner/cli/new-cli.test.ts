/**
 * `ratelimit-runner new NAME` and `--log-level`, as a user runs them (child processes; needs
 * `npx tsc -p tsconfig.json` first): the template and its test are written, the test passes with
 * `node --test`, nothing is overwritten by accident, and ctx.log.debug shows only when asked.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const CLI = path.join(__dirname, '../../../../dist/src/cli/runner.js');
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rr-new-'));
const runner = (...args: string[]) => spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', cwd: dir });

describe('ratelimit-runner new', () => {
  test('writes a strategy and its test; the test passes with node --test and fails when the strategy stops trading', () => {
    const r = runner('new', 'breakout', '--dir', 'strategies');
    expect(r.status).toBe(0);
    const js = path.join(dir, 'strategies/breakout.js');
    const testFile = path.join(dir, 'strategies/breakout.test.js');
    expect(r.stdout).toContain(`wrote ${js} and ${testFile}`);
    const t = spawnSync(process.execPath, ['--test', '--test-reporter=tap', testFile], { encoding: 'utf8', cwd: dir });
    expect(t.stdout).toMatch(/^# pass 2$/m);
    expect(t.stdout).toMatch(/^# fail 0$/m);
    expect(t.status).toBe(0);
    // The template's test checks what the strategy does: a strategy that never trades fails it.
    fs.writeFileSync(js, fs.readFileSync(js, 'utf8').replace('const isBuy = bar.bidClose > high;', 'const isBuy = false && bar.bidClose > high;'));
    expect(spawnSync(process.execPath, ['--test', '--test-reporter=tap', testFile], { encoding: 'utf8', cwd: dir }).status).not.toBe(0);
  });

  test('existing files are kept unless --force; a name that is not one is a usage error', () => {
    expect(runner('new', 'keep').status).toBe(0);
    const file = path.join(dir, 'keep.js');
    fs.writeFileSync(file, '// mine\n');
    const again = runner('new', 'keep');
    expect(again.status).toBe(2);
    expect(again.stderr).toContain('already exist (--force overwrites)');
    expect(fs.readFileSync(file, 'utf8')).toBe('// mine\n');
    expect(runner('new', 'keep', '--force').status).toBe(0);
    expect(fs.readFileSync(file, 'utf8')).toContain("name: 'keep'");
    const bad = runner('new', '../escape');
    expect(bad.status).toBe(2);
    expect(bad.stderr).toContain('is not a usable name');
    expect(runner('new').stderr).toContain('new needs a NAME');
  });
});

describe('--log-level', () => {
  const strategy = path.join(dir, 'chatty.js');
  const candles = path.join(dir, 'flat.csv');
  beforeAll(() => {
    fs.writeFileSync(strategy, "module.exports = { name: 'chatty', symbols: ['EUR/USD'], onBar(ctx) { ctx.log.debug('debug line'); ctx.log.info('info line'); ctx.log.warn('warn line'); } };\n");
    const rows = [0, 1, 2].map((i) => `${1_700_000_040 + 60 * i},1.1,1.1,1.1,1.1,1.1002,1.1002,1.1002,1.1002,5`);
    fs.writeFileSync(candles, ['ts,bidopen,bidclose,bidhigh,bidlow,askopen,askclose,askhigh,asklow,tickqty', ...rows].join('\n') + '\n');
  });
  const backtest = (...extra: string[]) => runner('backtest', strategy, '--candles', candles, '--symbol', 'EUR/USD', '--timeframe', 'm1', '--report', path.join(dir, 'r'), ...extra);

  test('info by default; debug shows ctx.log.debug; warn hides info; a wrong level is a usage error', () => {
    const byDefault = backtest();
    expect(byDefault.status).toBe(0);
    expect(byDefault.stderr).toContain('[info] info line');
    expect(byDefault.stderr).not.toContain('debug line');
    expect(backtest('--log-level', 'debug').stderr).toContain('[debug] debug line');
    const warn = backtest('--log-level', 'warn').stderr;
    expect(warn).toContain('[warn] warn line');
    expect(warn).not.toContain('info line');
    expect(backtest('--quiet', '--log-level', 'debug').stderr).toBe('');
    const wrong = backtest('--log-level', 'loud');
    expect(wrong.status).toBe(2);
    expect(wrong.stderr).toContain('--log-level must be one of debug, info, warn, error, got "loud"');
  });
});
