/**
 * `ratelimit-runner backtest` (and the shared option parsing of the strategy modes).
 */
import fs from 'node:fs';
import { runBacktest } from './backtest';
import { readCandleFile } from './candles-file';
import { StrategyError, describeStrategyError, strategyErrorLine } from './errors';
import { loadStrategy } from './loader';
import { buildReport, writeReport } from './report';
import type { SafetyLimits } from './safety';
import type { StrategyLogger } from './strategy';

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
  --leverage N          leverage for margin checks (default 50)
  --max-position K      safety: maximum position per symbol and side, in K units
  --max-daily-loss N    safety: flatten and stop opening when the UTC day's loss reaches N
  --report PATH         write PATH.json and PATH.html (default ./report)
  --quiet               no strategy log output and no progress bar
  -h, --help            this help

Strategies are CommonJS modules (.js/.cjs) exporting a strategy object, or TypeScript (.ts)
transpiled on load when the 'typescript' package is installed. See examples/strategies/.
Exit status: 0 ok, 1 the strategy failed (the report still lists the error and its line), 2 usage.
`;

export class UsageError extends Error {}

export interface ParsedArgs {
  positional: string[];
  flags: Map<string, string[]>;
}

const BOOL_FLAGS = new Set(['quiet', 'help', 'h', 'allow-over-budget', 'resume']);

export function parseArgs(argv: string[]): ParsedArgs {
  const positional: string[] = [];
  const flags = new Map<string, string[]>();
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a.startsWith('-')) {
      let name = a.replace(/^--?/, '');
      let value: string | undefined;
      const eq = name.indexOf('=');
      if (eq >= 0) {
        value = name.slice(eq + 1);
        name = name.slice(0, eq);
      } else if (BOOL_FLAGS.has(name)) value = 'true';
      else {
        value = argv[++i];
        if (value === undefined) throw new UsageError(`--${name} needs a value`);
      }
      flags.set(name, [...(flags.get(name) ?? []), value]);
    } else positional.push(a);
  }
  return { positional, flags };
}

export function flag(p: ParsedArgs, name: string): string | undefined {
  const v = p.flags.get(name);
  return v ? v[v.length - 1] : undefined;
}

export function num(p: ParsedArgs, name: string): number | undefined {
  const v = flag(p, name);
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isFinite(n)) throw new UsageError(`--${name} must be a number, got "${v}"`);
  return n;
}

export function parseParams(p: ParsedArgs): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const kv of p.flags.get('param') ?? []) {
    const i = kv.indexOf('=');
    if (i <= 0) throw new UsageError(`--param needs KEY=VALUE, got "${kv}"`);
    const k = kv.slice(0, i);
    const v = kv.slice(i + 1);
    out[k] = v === 'true' ? true : v === 'false' ? false : v !== '' && Number.isFinite(Number(v)) ? Number(v) : v;
  }
  return out;
}

export function safetyOf(p: ParsedArgs): SafetyLimits {
  return { maxPosition: num(p, 'max-position'), maxDailyLoss: num(p, 'max-daily-loss'), minUsableMarginPct: num(p, 'min-usable-margin-pct') };
}

export function consoleLogger(quiet: boolean): StrategyLogger {
  const w = (lvl: string) => (msg: string, meta?: Record<string, unknown>) => {
    if (quiet) return;
    process.stderr.write(`[${lvl}] ${msg}${meta && Object.keys(meta).length ? ' ' + JSON.stringify(meta) : ''}\n`);
  };
  return { debug: () => {}, info: w('info'), warn: w('warn'), error: w('error') };
}

export function progressBar(stream: NodeJS.WriteStream): (done: number, total: number) => void {
  let last = -1;
  return (done, total) => {
    const pct = total ? Math.floor((done / total) * 100) : 100;
    if (pct === last) return;
    last = pct;
    const w = 30;
    const fill = Math.round((pct / 100) * w);
    stream.write(`\r[${'#'.repeat(fill)}${'.'.repeat(w - fill)}] ${pct}% ${done}/${total} candles`);
    if (done >= total) stream.write('\n');
  };
}

export async function backtestCommand(argv: string[]): Promise<number> {
  const p = parseArgs(argv);
  if (p.flags.has('help') || p.flags.has('h')) {
    process.stdout.write(BACKTEST_USAGE);
    return 0;
  }
  const file = p.positional[0];
  if (!file) throw new UsageError('backtest needs a strategy file');
  const candleFiles = p.flags.get('candles') ?? [];
  if (!candleFiles.length) throw new UsageError('backtest needs --candles FILE');
  for (const f of candleFiles) if (!fs.existsSync(f)) throw new UsageError(`candle file not found: ${f}`);
  const quiet = flag(p, 'quiet') === 'true';
  const data = candleFiles.map((f) => readCandleFile(f, { symbol: flag(p, 'symbol'), timeframe: flag(p, 'timeframe') }));
  let strategy;
  try {
    strategy = loadStrategy(file);
  } catch (e) {
    if (e instanceof StrategyError) {
      process.stderr.write(`ratelimit-runner: ${describeStrategyError(e)}\n`);
      return 1;
    }
    throw e;
  }
  const started = process.hrtime.bigint();
  const result = await runBacktest({
    strategy,
    strategyFile: file,
    data,
    params: parseParams(p),
    balance: num(p, 'balance'),
    currency: flag(p, 'currency'),
    commissionPerK: num(p, 'commission'),
    leverage: num(p, 'leverage'),
    safety: safetyOf(p),
    logger: consoleLogger(quiet),
    onProgress: !quiet && process.stderr.isTTY ? progressBar(process.stderr) : undefined,
  });
  const secs = Number(process.hrtime.bigint() - started) / 1e9;
  const report = buildReport({ ...result, budget: [] });
  const out = writeReport(report, flag(p, 'report') ?? 'report');
  const m = report.metrics;
  process.stdout.write(
    `${result.strategy}: ${result.candles} candles in ${secs.toFixed(2)} s; ${m.trades} trades, win rate ${(m.winRate * 100).toFixed(1)}%, ` +
      `net P/L ${m.netPL.toFixed(2)} ${report.currency} (${m.plPips.toFixed(1)} pips), max drawdown ${m.maxDrawdown.toFixed(2)}, Sharpe ${m.sharpe.toFixed(2)}\n` +
      `report: ${out.json} ${out.html}\n`,
  );
  if (result.error) {
    process.stderr.write(strategyErrorLine(result.error));
    return 1;
  }
  return 0;
}
