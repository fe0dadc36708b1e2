/**
 * `ratelimit-runner backtest` writes the full report: trade statistics, a price chart of the
 * candles with the trades' markers, and the projected budget of a live run under the bundled
 * limits instead of "no broker calls". Needs `npx tsc -p tsconfig.json` (dist/) first.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { candleToRow } from '../../../../src/trading/fxcm/candles';
import { wave } from '../helpers';

const CLI = path.join(__dirname, '../../../../dist/src/cli/runner.js');
const EX = path.join(__dirname, '../../../../examples/strategies/ma-crossover.js');

test('the backtest report has the statistics, a price chart with markers and the projected budget', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rr-report-'));
  const candles = path.join(dir, 'eurusd.json');
  fs.writeFileSync(candles, JSON.stringify({ symbol: 'EUR/USD', timeframe: 'm1', candles: wave(1_700_000_040, 400).map(candleToRow) }));
  const out = path.join(dir, 'rep');
  const r = spawnSync(process.execPath, [CLI, 'backtest', EX, '--candles', candles, '--report', out, '--quiet', '--param', 'slow=15'], { encoding: 'utf8', timeout: 20000 });
  expect(r.stderr).toBe('');
  expect(r.status).toBe(0);
  const rep = JSON.parse(fs.readFileSync(`${out}.json`, 'utf8'));
  const trades = rep.metrics.trades as number;
  expect(trades).toBeGreaterThan(0);
  expect(rep.budget).toEqual([]);
  expect(rep.metrics.long.trades + rep.metrics.short.trades).toBe(trades);
  expect(rep.prices[0]).toMatchObject({ symbol: 'EUR/USD', source: 'bars' });
  expect(rep.prices[0].points).toHaveLength(400);
  const p = rep.projectedBudget;
  expect(p.limitsFile).toMatch(/examples[\\/]runner[\\/]broker-limits\.yaml$/);
  const open = p.limits.find((l: { endpoint: string }) => l.endpoint === 'open_trade');
  expect(open.calls).toBe(rep.trades.length);
  const html = fs.readFileSync(`${out}.html`, 'utf8');
  expect(html).toContain('Projected rate-limit budget of a live run');
  expect(html).not.toContain('no broker calls');
  expect(html).toContain('Expectancy per trade');
  expect((html.match(/class="marker entry /g) ?? []).length).toBe(trades);
});
