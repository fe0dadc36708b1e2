/**
 * `ratelimit-runner backtest`, and the console output the strategy modes share.
 */
import fs from 'node:fs';
import { createLogger, silentLogger } from '../../../telemetry/logger';
import { runBacktest } from '../engine/backtest';
import { projectBudget } from '../engine/budget-projection';
import { readCandleFile } from '../../fxcm/candle-file';
import { StrategyError, describeStrategyError, strategyErrorLine } from '../errors';
import { bundledLimitsFile } from '../broker/limits-file';
import { loadStrategy } from '../engine/loader';
import { UsageError, flag, isSet, list, parseCommandArgs, wantsHelp, type ParsedArgs } from '../../../platform/argv';
import { BACKTEST_OPTIONS, backtestRunOf, logLevelOf, type StrategyLogLevel } from './args';
import { buildReport, writeReport } from '../report/report';
import type { Strategy, StrategyLogger } from '../strategy';

/** The realism options of backtest and sweep (none is on by default: results stay as they were). */
export const REALISM_USAGE = `  --slippage PIPS       market orders, stops and stop entries fill PIPS worse (default 0; limits never slip)
  --slippage-spread F   ... and F times the spread at the fill worse (default 0)
  --rollover            charge daily rollover (swap) at 17:00 New York, Wednesday three days, at
                        typical rates per symbol (docs/runner.md); booked into P/L, shown in the report
  --rollover-rate SYM=LONG,SHORT  the broker's rollB/rollS for SYM, per 10K units per day, account
                        currency (+ earned, - paid); repeatable; implies --rollover
  Gaps need nothing: a stop or entry the candle opens beyond fills at the open, not at its level.`;

export const BACKTEST_USAGE = `Usage: ratelimit-runner backtest <strategy.js|strategy.ts> --candles FILE [options]

Runs a strategy over bid/ask candles, deterministically, and writes a report.

Options:
  --candles FILE        candle file (JSON from 'candles download', or CSV); repeat for several symbols
  --symbol SYM          symbol of a CSV / bare-array candle file (e.g. EUR/USD)
  --timeframe TF        time frame of a CSV / bare-array candle file (m1 m5 m15 m30 H1 … D1)
  --param KEY=VALUE     strategy parameter (numbers and true/false are parsed); repeatable
  --balance N           starting balance (default 10000)
  --currency CCY        account currency (default USD)
  --commission N        commission per side per 1K units, account currency (default 0)
  --leverage N          leverage for margin checks (default 50): an order needs its notional / N
                        of usable margin, as at the broker (the pre-trade check of every mode)
${REALISM_USAGE}
  --max-position K      safety: maximum position per symbol and side, in K units
  --max-daily-loss N    safety: flatten and stop opening when the UTC day's loss reaches N
  --min-usable-margin-pct P  safety: refuse to open when the usable margin left after the order
                        would be below P% of equity
  --protections FILE    protections (stop-loss guard, max drawdown, cooldown, daily loss) from
                        a JSON file, instead of the strategy's \`protections\`
  --report PATH         write PATH.json and PATH.html (default ./report)
  --log-level LEVEL     strategy log output from LEVEL up: debug, info (default), warn, error
  --quiet               no strategy log output and no progress bar
  -h, --help            this help

Strategies are CommonJS modules (.js/.cjs) exporting a strategy object, or TypeScript (.ts)
transpiled on load when the 'typescript' package is installed. See examples/strategies/.
Exit status: 0 ok, 1 the strategy failed (the report still lists the error and its line), 2 usage.
`;

/** ctx.log on stderr, from `level` up (`[debug] message {fields}`): the service's logger in its plain format. */
export function consoleLogger(level: StrategyLogLevel): StrategyLogger {
  return level === 'silent' ? silentLogger : createLogger({ level, format: 'plain' });
}

export function progressBar(stream: NodeJS.WriteStream): (done: number, total: number, final?: boolean) => void {
  let last = -1;
  let ended = false;
  return (done, total, final = false) => {
    const pct = total ? Math.floor((done / total) * 100) : 100;
    if (pct !== last) {
      last = pct;
      const w = 30;
      const fill = Math.round((pct / 100) * w);
      stream.write(`\r[${'#'.repeat(fill)}${'.'.repeat(w - fill)}] ${pct}% ${done}/${total} candles`);
    }
    // The line ends at the last candle, or earlier when the run stopped (a strategy error).
    if ((final || done >= total) && !ended) {
      ended = true;
      stream.write('\n');
    }
  };
}

/** The strategy in `file`, or exit code 1 after its load error's line on stderr (a syntax error, a missing hook). */
export function loadForCommand(file: string): Strategy<Record<string, unknown>> | number {
  try {
    return loadStrategy(file);
  } catch (e) {
    if (e instanceof StrategyError) {
      process.stderr.write(`ratelimit-runner: ${describeStrategyError(e)}\n`);
      return 1;
    }
    throw e;
  }
}

/** The strategy file and the candle files a backtest or a sweep runs (usage errors when missing). */
export function strategyAndCandles(p: ParsedArgs, command: string): { file: string; candleFiles: string[] } {
  const file = p.positional[0];
  if (!file) throw new UsageError(`${command} needs a strategy file`);
  const candleFiles = list(p, 'candles');
  if (!candleFiles.length) throw new UsageError(`${command} needs --candles FILE`);
  for (const f of candleFiles) if (!fs.existsSync(f)) throw new UsageError(`candle file not found: ${f}`);
  return { file, candleFiles };
}

export async function backtestCommand(argv: string[]): Promise<number> {
  const p = parseCommandArgs(argv, BACKTEST_OPTIONS, { positionals: 1, usage: BACKTEST_USAGE });
  if (wantsHelp(p)) {
    process.stdout.write(BACKTEST_USAGE);
    return 0;
  }
  const { file, candleFiles } = strategyAndCandles(p, 'backtest');
  const quiet = isSet(p, 'quiet');
  const data = candleFiles.map((f) => readCandleFile(f, { symbol: flag(p, 'symbol'), timeframe: flag(p, 'timeframe') }));
  const strategy = loadForCommand(file);
  if (typeof strategy === 'number') return strategy;
  const started = process.hrtime.bigint();
  const result = await runBacktest({
    strategy,
    strategyFile: file,
    data,
    ...backtestRunOf(p),
    logger: consoleLogger(logLevelOf(p)),
    onProgress: !quiet && process.stderr.isTTY ? progressBar(process.stderr) : undefined,
  });
  const secs = Number(process.hrtime.bigint() - started) / 1e9;
  const limitsFile = bundledLimitsFile();
  const projectedBudget = await projectBudget(
    { strategy, startTime: result.startTime ?? 0, intents: result.intents, trades: result.trades },
    { name: limitsFile, content: fs.readFileSync(limitsFile, 'utf8') },
  );
  const report = buildReport({ ...result, bars: data, projectedBudget });
  const out = writeReport(report, flag(p, 'report') ?? 'report');
  const m = report.metrics;
  process.stdout.write(
    `${result.strategy}: ${result.candles < result.candlesGiven ? `${result.candles} of ${result.candlesGiven}` : result.candles} candles in ${secs.toFixed(2)} s; ${m.trades} trades, win rate ${(m.winRate * 100).toFixed(1)}%, ` +
      `net P/L ${m.netPL.toFixed(2)} ${report.currency} (${m.plPips.toFixed(1)} pips), max drawdown ${m.maxDrawdown.toFixed(2)}${m.rollover ? `, rollover ${m.rollover.toFixed(2)}` : ''}, Sharpe ${m.sharpe === null ? `n/a (${m.dailyReturns} daily returns)` : m.sharpe.toFixed(2)}\n` +
      `report: ${out.json} ${out.html}\n`,
  );
  if (result.error) {
    process.stderr.write(strategyErrorLine(result.error));
    return 1;
  }
  return 0;
}
