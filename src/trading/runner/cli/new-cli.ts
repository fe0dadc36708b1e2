/**
 * `ratelimit-runner new NAME`: writes a strategy to start from (NAME.js) and its test
 * (NAME.test.js, run with `node --test`), which backtests it on made-up candles through this
 * installation's runner, so a trader changes the strategy and the test together.
 */
import fs from 'node:fs';
import path from 'node:path';
import { UsageError, parseCommandArgs, wantsHelp } from '../../../platform/argv';

export const NEW_USAGE = `Usage: ratelimit-runner new NAME [--dir DIR] [--force]

Writes DIR/NAME.js, a breakout strategy with a stop, a trailing stop and parameters, and
DIR/NAME.test.js, its test (node --test DIR/NAME.test.js): it backtests the strategy on made-up
candles and checks what it does on a breakout and on a flat market.

Options:
  --dir DIR             where to write (default: the current directory)
  --force               overwrite existing files
  -h, --help            this help
`;

const strategyTemplate = (name: string): string => `// ${name}: a breakout strategy to start from (written by 'ratelimit-runner new').
// Backtest: ratelimit-runner backtest ${name}.js --candles FILE
// Test:     node --test ${name}.test.js
'use strict';

const strategy = {
  name: '${name}',
  symbols: ['EUR/USD'],
  timeframes: ['m1'],
  // Defaults; override with --param lookback=30 (numbers and true/false are parsed).
  params: { lookback: 20, amount: 10, stopPips: 15, trailingStep: 10 },
  // Bars of history loaded before onStart in paper and live (and a sweep's windows): lookback.
  // 'ratelimit-runner lookahead' checks that this is enough, and that no decision sees the future.
  warmup: 20,

  // Called once a bar has closed (bars: ctx.candles(symbol, timeframe, count), oldest first).
  async onBar(ctx, bar) {
    const { lookback, amount, stopPips, trailingStep } = ctx.params;
    const bars = ctx.candles(bar.symbol, bar.timeframe, lookback + 1);
    if (bars.length < lookback + 1 || ctx.positions(bar.symbol).length > 0) return;
    const before = bars.slice(0, -1);
    const high = Math.max(...before.map((b) => b.bidHigh));
    const low = Math.min(...before.map((b) => b.bidLow));
    const isBuy = bar.bidClose > high;
    if (!isBuy && bar.bidClose >= low) return;
    try {
      // Stops in pips are negative distances; the trailing stop follows by whole steps
      // (the broker takes a step of 1, dynamic, or of 10 pips and more).
      await ctx.openTrade({ symbol: bar.symbol, isBuy, amount, stop: -stopPips, trailingStep, isInPips: true });
    } catch (e) {
      // SafetyError (--max-position, --min-usable-margin-pct), OrderRejectedError (the broker's
      // rules, e.g. not enough margin, or the broker said no) and IntentExpiredError (no
      // rate-limit budget in time) can be caught; anything else thrown from a hook stops the run
      // and flattens.
      ctx.log.warn('not opened: ' + e.message);
    }
  },

  onTrade(ctx, t) {
    if (t.kind === 'closed') ctx.log.info('closed', { tradeId: t.tradeId, reason: t.reason, pips: t.plPips });
  },

  async onStop(ctx) {
    await ctx.closeAll();
  },

  // Paper/live: what the strategy keeps between hooks, for a resume from the journal's
  // checkpoint. It reads everything from ctx, so there is nothing: a strategy that keeps
  // counters or indicator windows returns them here and takes them back in restoreState.
  saveState() {
    return null;
  },
  restoreState() {},
};

module.exports = strategy;
`;

const testTemplate = (name: string, runner: string): string => `// The test of ${name}.js (written by 'ratelimit-runner new'): node --test ${name}.test.js
'use strict';
const test = require('node:test');
const assert = require('node:assert');
// This installation's runner; change the path if it moves.
const { runBacktest } = require(${JSON.stringify(runner)});
const strategy = require('./${name}.js');

const T0 = Date.UTC(2026, 0, 5, 9, 0) / 1000; // a Monday, 09:00 UTC, in epoch seconds
const SPREAD = 0.0002;

/** One m1 candle per close: bid OHLC from the closes, ask = bid + spread. */
function candles(closes) {
  return closes.map((c, i) => {
    const open = i === 0 ? c : closes[i - 1];
    const [hi, lo] = [Math.max(open, c), Math.min(open, c)];
    return { ts: T0 + 60 * i, bidOpen: open, bidClose: c, bidHigh: hi, bidLow: lo, askOpen: open + SPREAD, askClose: c + SPREAD, askHigh: hi + SPREAD, askLow: lo + SPREAD, tickqty: 10 };
  });
}

const backtest = (closes) => runBacktest({ strategy, data: [{ symbol: 'EUR/USD', timeframe: 'm1', candles: candles(closes) }] });

test('a breakout above the range opens a long that the trailing stop closes', async () => {
  const range = Array.from({ length: 30 }, (_, i) => 1.1 + (i % 2 ? 0.0005 : -0.0005));
  const up = Array.from({ length: 20 }, (_, i) => 1.101 + 0.0004 * i);
  const back = Array.from({ length: 20 }, (_, i) => 1.1086 - 0.0006 * i);
  const r = await backtest([...range, ...up, ...back]);
  assert.strictEqual(r.error, undefined);
  assert.ok(r.trades.length >= 1, 'no trade');
  assert.strictEqual(r.trades[0].isBuy, true);
  assert.ok(['trailing', 'stop'].includes(r.trades[0].reason), r.trades[0].reason);
  assert.ok(r.trades[0].plPips > 0, 'the trailing stop should keep part of the move');
});

test('a flat market opens nothing', async () => {
  const r = await backtest(Array.from({ length: 60 }, () => 1.1));
  assert.strictEqual(r.error, undefined);
  assert.strictEqual(r.trades.length, 0);
});
`;

/** The runner's entry point in this installation (dist/src/trading/runner/index.js). */
function runnerEntry(): string {
  return path.resolve(__dirname, '..', 'index.js');
}

export async function newCommand(argv: string[]): Promise<number> {
  const p = parseCommandArgs(argv, { dir: { type: 'string' }, force: { type: 'boolean' } }, { positionals: 1, usage: NEW_USAGE });
  if (wantsHelp(p)) {
    process.stdout.write(NEW_USAGE);
    return 0;
  }
  const name = p.positional[0];
  if (!name) throw new UsageError('new needs a NAME (letters, digits, - and _)');
  if (!/^[A-Za-z][A-Za-z0-9_-]*$/.test(name)) throw new UsageError(`new: "${name}" is not a usable name (letters, digits, - and _, starting with a letter)`);
  const dir = path.resolve(typeof p.values.dir === 'string' ? p.values.dir : '.');
  const files = [path.join(dir, `${name}.js`), path.join(dir, `${name}.test.js`)];
  const existing = files.filter((f) => fs.existsSync(f));
  if (existing.length && p.values.force !== true) throw new UsageError(`new: ${existing.join(' and ')} already exist (--force overwrites)`);
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(files[0]!, strategyTemplate(name));
  fs.writeFileSync(files[1]!, testTemplate(name, runnerEntry()));
  process.stdout.write(`wrote ${files[0]} and ${files[1]}\ntest it: node --test ${files[1]}\n`);
  return 0;
}
