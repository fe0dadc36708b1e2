/**
 * `ratelimit-runner lookahead`: the lookahead and warm-up checks of sweep/lookahead.ts on a
 * strategy and its candle files, each run a backtest on a worker thread whose command line names
 * the check's copies of the candle files; the findings on stdout (and PATH.json with --report).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { UsageError, flag, list, parseCommandArgs, wantsHelp, type ParsedArgs } from '../../../platform/argv';
import { readCandleFile } from '../../fxcm/candle-file';
import { isoUtc } from '../../../platform/time-text';
import { LOOKAHEAD_OPTIONS, LOOKAHEAD_OWN_OPTIONS, LOOKAHEAD_RUN_OPTIONS, backtestRunOf, num } from './args';
import { REALISM_USAGE, loadForCommand, strategyAndCandles } from './cli';
import { DEFAULT_CUTS, renameArgs, runLookahead, type Comparison, type DecisionChange, type LookaheadJob, type LookaheadResult } from '../sweep/lookahead';
import { LookaheadPool } from '../sweep/lookahead-pool';
import type { Intent } from '../engine/backtest';
import type { RunError } from '../results';

export const LOOKAHEAD_USAGE = `Usage: ratelimit-runner lookahead <strategy.js|strategy.ts> --candles FILE [options]

Checks that a strategy's backtest cannot see the future, and that its results do not depend on
more history than its warmup.

Lookahead: the backtest runs once on all the candles, then once per cut point with every candle
that closes after the cut changed (mirrored about the last close before it: rises become falls).
The changed candles are written to new files in a temporary directory, and the run's arguments
name them wherever they named the originals (--candles, a --param that names a candle file), so a
strategy that reads the file named in its arguments reads the changed one. A decision made up to
a cut can only depend on candles that closed by then, which did not change; a decision that
changed saw the future. The cuts are at decisions spread over the first run. A control run on
unchanged copies must make the same decisions (a strategy that does not is not deterministic, or
reads where its files are, and the cuts cannot tell).

Warm-up: the second half of the candles is traded twice, from the first candle time at their
middle: after the strategy's warmup bars of history (what paper and live load before onStart,
and a sweep's windows) and after all the candles before it. Different decisions mean the results
depend on more history than the strategy declares.

Options:
  --candles FILE        candle file (JSON from 'candles download', or CSV); repeat for several symbols
  --symbol SYM, --timeframe TF   symbol and time frame of a CSV / bare-array candle file
  --param KEY=VALUE     strategy parameter; repeatable (a value naming a candle file is renamed too)
  --balance N, --currency CCY, --commission N, --leverage N   as for backtest
${REALISM_USAGE}
  --max-position K, --max-daily-loss N, --min-usable-margin-pct P   safety limits, as for backtest
  --protections FILE    protections from a JSON file, as for backtest
  --cuts N              cut points (default ${DEFAULT_CUTS})
  --no-warmup-check     only the lookahead check
  --workers N           worker threads (default: the CPUs node may use, os.availableParallelism())
  --report PATH         also write PATH.json: every run's findings
  -h, --help            this help

Each run is a backtest on a worker thread with a fresh copy of the strategy module, whose
process.argv is 'backtest <strategy> <its options>' with the copies' names; ctx.log is silent.
Exit status: 0 both checks passed, 1 a decision changed in either (or the control run differed,
or the strategy failed to load or its first run failed), 2 usage.
`;

/** The argv without `lookahead`'s own options (`--cuts 5`, `--cuts=5`, `--no-warmup-check`): what each run is given. */
function runArgsOf(argv: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const m = /^--([^=]+)(=.*)?$/.exec(argv[i]!);
    const spec = m ? LOOKAHEAD_OWN_OPTIONS[m[1]!] : undefined;
    if (!spec) {
      out.push(argv[i]!);
      continue;
    }
    if (spec.type === 'string' && m![2] === undefined) i++;
  }
  return out;
}

function whole(p: ParsedArgs, name: string, otherwise: number, min: number): number {
  const n = num(p, name) ?? otherwise;
  if (!Number.isInteger(n) || n < min) throw new UsageError(`--${name} must be a whole number of at least ${min}, got "${flag(p, name)}"`);
  return n;
}

/** One run's job: its command line with the candle files renamed, and the options read from it. */
function jobOf(strategyFile: string, runArgs: readonly string[], label: string, files: ReadonlyMap<string, string>, tradeFromTs?: number): LookaheadJob {
  const args = renameArgs(runArgs, files);
  const p = parseCommandArgs(args, LOOKAHEAD_RUN_OPTIONS, { positionals: 1, usage: LOOKAHEAD_USAGE });
  return {
    label,
    strategyFile,
    candleFiles: list(p, 'candles'),
    fileOptions: { symbol: flag(p, 'symbol'), timeframe: flag(p, 'timeframe') },
    options: {
      ...backtestRunOf(p),
      ...(tradeFromTs !== undefined ? { tradeFromTs } : {}),
    },
    argv: ['backtest', ...args],
  };
}

const when = (ms: number) => isoUtc(ms);
const errorText = (e: RunError) => `${e.hook === 'runner' || e.hook === 'worker' ? '' : `strategy error in ${e.hook}: `}${e.message}${e.location ? ` (at ${e.location})` : ''}`;
const decision = (d: Intent | undefined) =>
  d === undefined ? 'no decision' : `${d.op} ${JSON.stringify(d.args)}${d.result === 'rejected' ? ` (refused: ${d.detail ?? ''})` : ''} at ${when(d.ts)}`;
const plural = (n: number, what: string) => `${n} ${what}${n === 1 ? '' : 's'}`;

function changes(c: Comparison): string[] {
  const lines = c.first.map((x: DecisionChange) => `    decision ${x.index}: ${decision(x.before)}\n      became: ${decision(x.after)}`);
  if (c.changed > c.first.length) lines.push(`    … and ${c.changed - c.first.length} more`);
  return lines;
}

export function formatLookahead(r: LookaheadResult): string {
  const out: string[] = [];
  out.push(`lookahead: ${r.strategy} over ${r.candles} candles: ${plural(r.decisions, 'decision')}`);
  if (r.error) {
    out.push(`lookahead: the run failed, nothing to compare: ${errorText(r.error)}`);
    return out.join('\n') + '\n';
  }
  const control = r.control!;
  if (control.changed === 0 && !control.error) out.push(`  control (the same candles in new files): the same ${plural(control.compared, 'decision')}`);
  else {
    out.push(`  control (the same candles in new files): ${control.changed} of ${plural(control.compared, 'decision')} differ${control.error ? `; the run failed: ${errorText(control.error)}` : ''}`);
    out.push(...changes(control));
  }
  for (const c of r.cuts) {
    const at = `${c.label} at ${when(c.at * 1000)}${c.atDecision ? ` (at decision ${c.atDecision} of ${r.decisions})` : ''}`;
    if (c.compared === undefined) out.push(`  ${at}: the run failed: ${errorText(c.error!)}`);
    else if (c.changed === 0) out.push(`  ${at}: the ${plural(c.compared, 'decision')} up to it are unchanged${c.error ? ` (the run failed after it: ${errorText(c.error)})` : ''}`);
    else {
      out.push(`  ${at}: ${c.changed} of the ${plural(c.compared, 'decision')} up to it changed when only the candles after it changed:`);
      out.push(...changes(c as Comparison));
    }
  }
  if (r.lookaheadOk) out.push(`lookahead: PASS: no decision up to a cut changed when the candles after it changed (${plural(r.cuts.length, 'cut')})`);
  else if (control.changed > 0 || control.error) out.push('lookahead: FAIL: the strategy decides differently on the same candles in other files: it is not deterministic, or reads where its files are; the cuts cannot tell whether it sees the future');
  else out.push('lookahead: FAIL: decisions made before a cut changed when only the candles after it changed: the strategy sees the future (it reads candles that had not closed yet)');
  const w = r.warmup;
  if (w) {
    if (w.skipped) out.push(`warm-up: not checked: ${w.skipped}`);
    else {
      const runs = `trading from ${when(w.from * 1000)} after the strategy's warmup of ${plural(w.warmupBars, 'bar')} (${plural(w.shortHistory, 'candle')} before it) and after all ${plural(w.longHistory, 'candle')} before it`;
      if (w.error) out.push(`warm-up: ${runs}: a run failed: ${errorText(w.error)}`);
      else if (w.changed === 0) out.push(`warm-up: ${runs}: the same ${plural(w.compared!, 'decision')} (${plural(w.long!.trades, 'trade')}, net P/L ${w.long!.netPL.toFixed(2)} both)`);
      else {
        out.push(`warm-up: ${runs}: ${w.changed} of ${plural(w.compared!, 'decision')} differ (all history: ${plural(w.long!.trades, 'trade')}, net P/L ${w.long!.netPL.toFixed(2)}; the declared warm-up: ${plural(w.short!.trades, 'trade')}, net P/L ${w.short!.netPL.toFixed(2)}):`);
        out.push(...changes(w as Comparison).map((l) => l.replace('became:', 'with the warm-up only:')));
      }
      out.push(
        r.warmupOk
          ? 'warm-up: PASS: the results do not depend on more history than the warmup'
          : "warm-up: FAIL: the results depend on more history than the strategy's warmup: declare a larger `warmup` (the bars paper, live and a sweep's windows load before onStart), or compute its indicators from no more bars than that",
      );
    }
  }
  return out.join('\n') + '\n';
}

export async function lookaheadCommand(argv: string[]): Promise<number> {
  const p = parseCommandArgs(argv, LOOKAHEAD_OPTIONS, { positionals: 1, usage: LOOKAHEAD_USAGE });
  if (wantsHelp(p)) {
    process.stdout.write(LOOKAHEAD_USAGE);
    return 0;
  }
  const { file, candleFiles } = strategyAndCandles(p, 'lookahead');
  const cuts = whole(p, 'cuts', DEFAULT_CUTS, 1);
  const workers = whole(p, 'workers', os.availableParallelism(), 1);
  const runArgs = runArgsOf(argv);
  // the options each run takes are read (and refused) before anything runs
  jobOf(file, runArgs, 'run', new Map());
  const data = candleFiles.map((f) => readCandleFile(f, { symbol: flag(p, 'symbol'), timeframe: flag(p, 'timeframe') }));
  const strategy = loadForCommand(file);
  if (typeof strategy === 'number') return strategy;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rr-lookahead-'));
  let result: LookaheadResult;
  try {
    result = await runLookahead(
      {
        strategy: strategy.name ?? path.basename(file),
        strategyFile: file,
        warmup: strategy.warmup ?? 0,
        timeframes: strategy.timeframes ?? [],
        candleFiles,
        data,
        cuts,
        warmupCheck: p.values['no-warmup-check'] !== true,
        dir,
        jobFor: (label, files, tradeFromTs) => jobOf(file, runArgs, label, files, tradeFromTs),
      },
      new LookaheadPool(workers),
    );
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  process.stdout.write(formatLookahead(result));
  const report = flag(p, 'report');
  if (report !== undefined) {
    const json = `${report.replace(/\.json$/, '')}.json`;
    fs.mkdirSync(path.dirname(path.resolve(json)), { recursive: true });
    fs.writeFileSync(json, JSON.stringify(result, null, 2) + '\n');
    process.stdout.write(`findings: ${json}\n`);
  }
  return !result.error && result.lookaheadOk && result.warmupOk ? 0 : 1;
}
