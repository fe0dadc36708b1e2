/**
 * `ratelimit-runner sweep`: a parameter sweep with walk-forward (out-of-sample) checking, its
 * table on stdout, PATH.json with every result and the chosen sets' out-of-sample report.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { UsageError, flag, isSet, list, parseCommandArgs, wantsHelp, type ParsedArgs } from '../../../platform/argv';
import { SWEEP_OPTIONS, num, parseParams, protectionsOf, realismOf, safetyOf } from './args';
import { readCandleFile } from '../../fxcm/candle-file';
import { REALISM_USAGE, loadForCommand, progressBar, strategyAndCandles } from './cli';
import { MIN_DAILY_RETURNS, writeReport } from '../report/report';
import type { RunError } from '../results';
import { LUCK_ALPHA } from '../report/luck';
import { BacktestPool } from '../sweep/sweep-pool';
import {
  MAX_PARAMETER_SETS,
  MIN_EFFICIENCY,
  OBJECTIVES,
  checkAxes,
  checkDeclared,
  isObjective,
  parseGrid,
  parseRange,
  runSweep,
  splitTimeline,
  type FoldResult,
  type Objective,
  type SetMetrics,
  type SetResult,
  type SweepResult,
  type Totals,
} from '../sweep/sweep';

export const SWEEP_USAGE = `Usage: ratelimit-runner sweep <strategy.js|strategy.ts> --candles FILE
         (--grid KEY=V1,V2,... | --range KEY=FROM:TO:STEP)... [options]

Backtests every combination of parameter values, walk-forward: the candle timeline (all symbols
together) is cut into --folds consecutive windows of equal numbers of candle times; in each, the
first --in-sample percent chooses the best parameter set by --objective, and the rest of the window
tests that set out of sample. Prints each fold's table of sets (best marked *), its choice and how
that choice did out of sample, then the chosen sets' out-of-sample figures joined beside their
in-sample ones, and says so when out of sample is much worse (overfitting) or when the result is
indistinguishable from luck: the best of many sets looks good even where no set has an edge, so
each fold's best is tested against the best of that many sets on a market without edge (White's
reality check, a seeded bootstrap of every set's P/L per period; folds combined by Fisher's
method), and the joined out-of-sample P/L against chance; p below 0.05 is more than luck. The
backtests run on worker threads; the results are the same whatever their number.

Parameters:
  --grid KEY=V1,V2,...      values of a strategy parameter (numbers and true/false are parsed); repeatable
  --range KEY=FROM:TO:STEP  FROM, FROM+STEP, ... up to TO (included when a step lands on it); repeatable
  --param KEY=VALUE         a fixed strategy parameter; repeatable
                            Every key must be one the strategy declares in its params. Sets are
                            numbered over the --grid keys then the --range keys, as given, the last
                            varying fastest; at most ${MAX_PARAMETER_SETS} sets.
Walk-forward:
  --folds N                 consecutive windows (default 1: one in-sample/out-of-sample split)
  --in-sample PCT           share of each window's candle times that chooses (default 70)
  --objective NAME          what is best: netPL (default), returnPct, plPips, winRate, sharpe,
                            sortino, profitFactor (higher is better), maxDrawdown, maxDrawdownPct
                            (lower is better). Ties go to the lower set number; a set whose
                            objective is n/a (Sharpe below 20 days of data, profit factor without
                            a losing trade) is never chosen
  --min-trades N            a set with fewer in-sample trades is never chosen (default 1)
Backtests:
  --candles FILE            candle file (JSON from 'candles download', or CSV); repeat for several symbols
  --symbol SYM, --timeframe TF   symbol and time frame of a CSV / bare-array candle file
  --balance N, --currency CCY, --commission N, --leverage N   as for backtest
${REALISM_USAGE}
  --max-position K, --max-daily-loss N, --min-usable-margin-pct P   safety limits, as for backtest
  --protections FILE        protections from a JSON file, as for backtest
  --workers N               worker threads (default: the CPUs node may use, os.availableParallelism())
Output:
  --report PATH             PATH.json (every result) and PATH-oos.json + PATH-oos.html, the report of
                            the chosen sets' out-of-sample runs joined (default ./sweep)
  --top N                   rows of each fold's table (default 20; 0 for all)
  --quiet                   no progress bar
  -h, --help                this help

Every window starts from the same balance with no position, warmed up like paper and live: the
candles before the window that make warmup bars of each of the strategy's time frames (fewer where
the data starts later) are in ctx.candles at onStart, so an indicator over N bars can trade from
the window's first bar when warmup is at least N. Trades and figures count the window alone. Each
run loads a fresh copy of the strategy module; ctx.log is silent in a sweep.
Exit status: 0 ok (sets that failed are in the table and PATH.json), 1 the strategy failed to load
or every backtest failed, 2 usage.
`;

/** A whole-number option of at least `min`. */
function whole(p: ParsedArgs, name: string, otherwise: number, min: number): number {
  const n = num(p, name) ?? otherwise;
  if (!Number.isInteger(n) || n < min) throw new UsageError(`--${name} must be a whole number of at least ${min}, got "${flag(p, name)}"`);
  return n;
}

const money = (n: number) => n.toFixed(2);
const pct = (n: number) => `${(n * 100).toFixed(1)}%`;
const orNa = (n: number | null) => (n === null ? 'n/a' : n.toFixed(2));
const tradeCount = (n: number) => `${n} trade${n === 1 ? '' : 's'}`;

/** The table's metric columns, and how each shows a value. */
const COLUMNS: [keyof SetMetrics, (m: SetMetrics) => string][] = [
  ['netPL', (m) => money(m.netPL)],
  ['trades', (m) => String(m.trades)],
  ['winRate', (m) => pct(m.winRate)],
  ['maxDrawdown', (m) => money(m.maxDrawdown)],
  ['sharpe', (m) => orNa(m.sharpe)],
  ['profitFactor', (m) => orNa(m.profitFactor)],
];

const STATUS_ORDER: SetResult['status'][] = ['ranked', 'objective n/a', 'too few trades', 'error'];

const errorText = (e: RunError) => `${e.hook === 'worker' ? '' : `strategy error in ${e.hook}: `}${e.message}${e.location ? ` (at ${e.location})` : ''}`;

/** Columns padded to their widest cell; numbers right-aligned, the last column (notes) left. */
function alignRows(rows: string[][]): string[] {
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => r[c]!.length)));
  return rows.map((r) => r.map((cell, c) => (c === r.length - 1 ? cell : cell.padStart(widths[c]!))).join('  ').trimEnd());
}

function foldTable(r: SweepResult, f: FoldResult, top: number, reportJson: string): string[] {
  const keys = r.axes.map((a) => a.key);
  const objectiveShown = COLUMNS.some(([k]) => k === r.objective);
  const head = ['', 'rank', 'set', ...keys, ...(objectiveShown ? [] : [r.objective]), ...COLUMNS.map(([k]) => k), ''];
  const sorted = [...f.results].sort(
    (a, b) => STATUS_ORDER.indexOf(a.status) - STATUS_ORDER.indexOf(b.status) || (a.rank ?? 0) - (b.rank ?? 0) || a.set - b.set,
  );
  const shown = top === 0 ? sorted : sorted.slice(0, top);
  const rows = shown.map((s) => {
    const params = r.sets[s.set - 1]!.params;
    const m = s.metrics;
    return [
      s.set === f.best ? '*' : '',
      s.rank === null ? '-' : String(s.rank),
      String(s.set),
      ...keys.map((k) => String(params[k])),
      ...(objectiveShown ? [] : [m ? orNa(m[r.objective]) : '-']),
      ...COLUMNS.map(([, show]) => (m ? show(m) : '-')),
      s.status === 'ranked' ? '' : s.error ? errorText(s.error) : s.status,
    ];
  });
  const lines = alignRows([head, ...rows]).map((l) => `  ${l}`);
  if (shown.length < sorted.length) lines.push(`  ... ${sorted.length - shown.length} more sets in ${reportJson}`);
  return lines;
}

function describeSet(r: SweepResult, set: number): string {
  const params = r.sets[set - 1]!.params;
  return `set ${set} (${Object.entries(params)
    .map(([k, v]) => `${k}=${String(v)}`)
    .join(' ')})`;
}

/** When an objective is n/a. */
const NA_REASONS: Partial<Record<Objective, string>> = {
  sharpe: `it needs ${MIN_DAILY_RETURNS} daily returns`,
  sortino: `it needs ${MIN_DAILY_RETURNS} daily returns`,
  profitFactor: 'no losing trade',
};

/** Why a fold chose nothing: how many sets fell out for each reason. */
function nothingChosen(f: FoldResult, r: SweepResult): string {
  const why: Record<Exclude<SetResult['status'], 'ranked'>, string> = {
    'objective n/a': `with ${r.objective} n/a${NA_REASONS[r.objective] ? ` (${NA_REASONS[r.objective]})` : ''}`,
    'too few trades': `with fewer than ${tradeCount(r.minTrades)}`,
    error: 'failed',
  };
  const counts = (['objective n/a', 'too few trades', 'error'] as const)
    .map((s) => [why[s], f.results.filter((x) => x.status === s).length] as const)
    .filter(([, n]) => n > 0)
    .map(([reason, n]) => `${n} ${reason}`);
  return `  nothing chosen: no set qualified (${counts.join(', ')})`;
}

function totalsLine(label: string, t: Totals, currency: string, drawdownNote: string): string {
  return `${label} net P/L ${money(t.netPL)} ${currency} over ${t.bars} bars, ${tradeCount(t.trades)}, win rate ${pct(t.winRate)}, max drawdown ${money(t.maxDrawdown)}${drawdownNote}`;
}

const pValue = (p: number | null) => (p === null ? 'n/a' : p < 0.001 ? '< 0.001' : p.toFixed(3));

/** The p-values against luck, always shown beside the efficiency. */
function luckLine(r: SweepResult): string {
  const { luck } = r.summary;
  const folds = r.folds.filter((f) => f.best !== null).length;
  return (
    `Luck: in sample p = ${pValue(luck.inSample)} (reality check over the ${r.sets.length} sets${folds > 1 ? `, ${folds} folds combined` : ''}), ` +
    `out of sample p = ${pValue(luck.outOfSample)} (chance that a strategy with no edge does as well); below ${LUCK_ALPHA} is more than luck`
  );
}

function verdictLine(r: SweepResult): string {
  const { efficiency, verdict, luck } = r.summary;
  const eff = efficiency === null ? '' : `Walk-forward efficiency ${(efficiency * 100).toFixed(0)}% (out-of-sample P/L per bar against in-sample): `;
  switch (verdict) {
    case 'nothing chosen':
      return 'No fold chose a parameter set: nothing ran out of sample.';
    case 'no in-sample profit':
      return 'The chosen sets made no money in sample: there is no edge to check out of sample.';
    case 'overfitted':
      return `${eff}OVERFITTED: out of sample is much worse than in sample (below ${MIN_EFFICIENCY * 100}%); the in-sample figures overstate what these parameters do on new data.`;
    case 'held up':
      return `${eff}out of sample held up (${MIN_EFFICIENCY * 100}% or more), and neither in nor out of sample is it luck. A strategy that sees the future holds up too: check it with 'ratelimit-runner lookahead'.`;
    case 'luck': {
      const why =
        luck.inSample === null || luck.inSample >= LUCK_ALPHA
          ? `in sample the chosen sets did no better than the best of ${r.sets.length} sets does on a market where none has an edge`
          : 'out of sample the P/L is within what a strategy with no edge makes by chance';
      return `${eff}INDISTINGUISHABLE FROM LUCK: ${why}; these figures say nothing about the parameters.`;
    }
  }
}

/** The console text of a sweep's result. */
function formatSweep(r: SweepResult, currency: string, top: number, reportJson: string): string {
  const out: string[] = [];
  const fixed = Object.entries(r.fixedParams).map(([k, v]) => `${k}=${String(v)}`);
  out.push(
    `${r.strategy}: ${r.sets.length} parameter sets (${r.axes.map((a) => a.key).join(' × ')}: ${r.axes.map((a) => a.values.length).join(' × ')}${fixed.length ? `; fixed ${fixed.join(' ')}` : ''}), ` +
      `${r.folds.length} fold${r.folds.length > 1 ? 's' : ''}, in-sample ${r.inSamplePct}%, objective ${r.objective} (${r.better} is better), at least ${tradeCount(r.minTrades)}`,
  );
  for (const f of r.folds) {
    out.push(
      '',
      `Fold ${f.fold} of ${r.folds.length}: in-sample ${f.inSample.from} to ${f.inSample.to} (${f.inSample.bars} bars), out-of-sample to ${f.outOfSample.to} (${f.outOfSample.bars} bars)`,
      ...foldTable(r, f, top, reportJson),
    );
    if (f.best === null) {
      out.push(nothingChosen(f, r));
      continue;
    }
    const run = f.outOfSampleRun!;
    const m = run.metrics;
    const figures = m
      ? `net P/L ${money(m.netPL)}, ${tradeCount(m.trades)}, win rate ${pct(m.winRate)}, max drawdown ${money(m.maxDrawdown)}` +
        (['netPL', 'winRate', 'maxDrawdown'].includes(r.objective) ? '' : `, ${r.objective} ${orNa(m[r.objective])}`)
      : 'no result';
    out.push(`  chosen: ${describeSet(r, f.best)}; out of sample: ${figures}${run.error ? `; FAILED: ${errorText(run.error)}` : ''}`);
    out.push(`  the best of ${f.luck.sets} sets by luck alone: p = ${pValue(f.luck.pValue)}`);
  }
  const s = r.summary;
  out.push('');
  if (s.verdict !== 'nothing chosen') {
    const joined = r.folds.length > 1 ? ` (${r.folds.filter((f) => f.best !== null).length} folds joined)` : '';
    out.push(
      totalsLine('Chosen sets in sample:     ', s.inSample, currency, r.folds.length > 1 ? ' (worst fold)' : ''),
      totalsLine('Chosen sets out of sample: ', s.outOfSample, currency, joined),
      luckLine(r),
    );
  }
  out.push(verdictLine(r));
  return out.join('\n') + '\n';
}

export async function sweepCommand(argv: string[]): Promise<number> {
  const p = parseCommandArgs(argv, SWEEP_OPTIONS, { positionals: 1, usage: SWEEP_USAGE });
  if (wantsHelp(p)) {
    process.stdout.write(SWEEP_USAGE);
    return 0;
  }
  const { file, candleFiles } = strategyAndCandles(p, 'sweep');
  const axes = [...list(p, 'grid').map(parseGrid), ...list(p, 'range').map(parseRange)];
  const fixed = parseParams(p);
  checkAxes(axes, fixed);
  const folds = whole(p, 'folds', 1, 1);
  const inSamplePct = num(p, 'in-sample') ?? 70;
  if (!(inSamplePct > 0 && inSamplePct < 100)) throw new UsageError(`--in-sample must be a percentage above 0 and below 100, got "${flag(p, 'in-sample')}"`);
  const objective = flag(p, 'objective') ?? 'netPL';
  if (!isObjective(objective)) throw new UsageError(`--objective must be one of ${Object.keys(OBJECTIVES).join(', ')}, got "${objective}"`);
  const minTrades = whole(p, 'min-trades', 1, 0);
  const workers = whole(p, 'workers', os.availableParallelism(), 1);
  const top = whole(p, 'top', 20, 0);
  const balance = num(p, 'balance');
  const commissionPerK = num(p, 'commission');
  const leverage = num(p, 'leverage');
  const safety = safetyOf(p);
  const data = candleFiles.map((f) => readCandleFile(f, { symbol: flag(p, 'symbol'), timeframe: flag(p, 'timeframe') }));

  const strategy = loadForCommand(file);
  if (typeof strategy === 'number') return strategy;
  checkDeclared(axes, fixed, Object.keys(strategy.params ?? {}));
  const plan = {
    strategy: strategy.name ?? path.basename(file),
    setup: { strategyFile: file, data, balance, currency: flag(p, 'currency'), commissionPerK, leverage, realism: realismOf(p), safety, protections: protectionsOf(p) },
    axes,
    fixed,
    folds: splitTimeline(data, folds, inSamplePct, strategy.symbols),
    inSamplePct,
    objective,
    minTrades,
  };

  const started = process.hrtime.bigint();
  const pool = new BacktestPool(plan.setup, workers);
  let outcome;
  try {
    outcome = await runSweep(plan, pool, !isSet(p, 'quiet') && process.stderr.isTTY ? progressBar(process.stderr) : undefined);
  } finally {
    await pool.close();
  }
  const secs = Number(process.hrtime.bigint() - started) / 1e9;
  const { result, outOfSampleReport } = outcome;

  const base = (flag(p, 'report') ?? 'sweep').replace(/\.json$/, '');
  fs.mkdirSync(path.dirname(path.resolve(base)), { recursive: true });
  const json = `${base}.json`;
  fs.writeFileSync(json, JSON.stringify(result, null, 2) + '\n');
  const backtests = result.sets.length * result.folds.length + result.folds.filter((f) => f.best !== null).length;
  process.stdout.write(`${backtests} backtests in ${secs.toFixed(1)} s on ${Math.min(workers, result.sets.length * result.folds.length)} worker thread(s)\n`);
  process.stdout.write(formatSweep(result, outOfSampleReport?.currency ?? '', top, json));
  const oos = outOfSampleReport ? writeReport(outOfSampleReport, `${base}-oos`) : undefined;
  process.stdout.write(`results: ${json}${oos ? `; out-of-sample report: ${oos.json} ${oos.html}` : ''}\n`);

  const failed = result.folds.flatMap((f) => f.results.filter((s) => s.error).map((s) => ({ fold: f.fold, s })));
  const ran = result.sets.length * result.folds.length;
  if (failed.length) {
    const first = failed[0]!;
    process.stderr.write(
      `ratelimit-runner sweep: ${failed.length} of ${ran} in-sample backtests failed; the first: fold ${first.fold}, ${describeSet(result, first.s.set)}: ${errorText(first.s.error!)}\n`,
    );
  }
  for (const f of result.folds) {
    const error = f.outOfSampleRun?.error;
    if (error) process.stderr.write(`ratelimit-runner sweep: fold ${f.fold}'s chosen ${describeSet(result, f.best!)} failed out of sample: ${errorText(error)}\n`);
  }
  return failed.length === ran ? 1 : 0;
}
