/**
 * `ratelimit-runner lookahead`: does a strategy's backtest see the future, and do its results
 * depend on how much history it is given? (freqtrade's lookahead and recursive analyses, for
 * the runner's backtests.)
 *
 * The lookahead check runs the backtest once on all the data, then again with the candles after
 * each of several cut points changed: the changed candles are written to new files in a
 * temporary directory, and the run's arguments name them where they named the originals (its
 * `--candles`, a `--param` that names a candle file), so a strategy that reads the file named in
 * its arguments reads the changed one. A decision made at or before a cut (its time is not after
 * it) can only depend on candles that closed by then, which are the same in both runs; one that
 * changed saw what came after. The cuts are at decisions of the first run, spread over it (the
 * decision at a cut is the last one compared, and the candle after it is the first changed), then
 * at times spread over the data when there are too few decisions. A control run on unchanged
 * copies must give every decision of the first: otherwise the strategy is not deterministic, or
 * reads where its files are, and no cut can tell.
 *
 * The candles after a cut are mirrored about the last close before it (bid about the bid close,
 * ask about that plus the widest spread of the mirrored candles, so the ask stays above the bid;
 * highs and lows swap): rises become falls, so a strategy that peeks at the next close decides the
 * other way. The candles up to the cut are byte for byte the same.
 *
 * The warm-up check trades the second half of the data (from the first candle time at its middle)
 * twice: with the strategy's declared `warmup` bars of history before it (what paper and live load,
 * and a sweep's windows), and with all the candles before it. Different decisions mean the results
 * depend on more history than the strategy declares (an indicator over more bars than `warmup`,
 * one started from the first bar it was given, a count of all the bars).
 *
 * The backtests run elsewhere (a {@link LookaheadRunner}: a worker thread per run in the CLI, whose
 * process.argv is the run's command line).
 */
import fs from 'node:fs';
import path from 'node:path';
import { PERIOD_SECONDS } from '../../fxcm/candles';
import { readCandleFile, writeCandleFile, type CandleSeries } from '../../fxcm/candle-file';
import type { Candle, Period } from '../../fxcm/types';
import { runErrorOf } from '../errors';
import type { RunError } from '../results';
import { runBacktest, type BacktestOptions, type Intent } from '../engine/backtest';
import { freshStrategy, windowOf } from './sweep-job';

/** What a run of the check is given besides its candles: the backtest's options, serialisable. */
export type LookaheadOptions = Pick<BacktestOptions, 'params' | 'balance' | 'currency' | 'commissionPerK' | 'leverage' | 'slippage' | 'rollover' | 'safety' | 'protections' | 'tradeFromTs'>;

/** One backtest of the check. */
export interface LookaheadJob {
  /** `run`, `control`, `cut 2`, `warm-up declared`, … */
  label: string;
  strategyFile: string;
  /** The candle files it reads (the run's own, or the check's copies), with --symbol / --timeframe. */
  candleFiles: string[];
  fileOptions: { symbol?: string; timeframe?: string };
  options: LookaheadOptions;
  /** Its command line as the strategy sees it (process.argv after node and the program): `backtest STRATEGY …`. */
  argv: string[];
}

export interface LookaheadOutcome {
  decisions?: Intent[];
  trades?: number;
  netPL?: number;
  error?: RunError;
}

/** Runs the check's backtests; the outcomes in the order of the jobs. */
export interface LookaheadRunner {
  run(jobs: LookaheadJob[]): Promise<LookaheadOutcome[]>;
}

/** One backtest, from its files, of a fresh copy of the strategy module (never throws: its error is in the outcome). */
export async function runLookaheadJob(job: LookaheadJob): Promise<LookaheadOutcome> {
  try {
    const data = job.candleFiles.map((f) => readCandleFile(f, job.fileOptions));
    const r = await runBacktest({ ...job.options, strategy: freshStrategy(job.strategyFile), strategyFile: job.strategyFile, data });
    return { decisions: r.intents, trades: r.trades.length, netPL: r.trades.reduce((s, t) => s + t.pl, 0), error: r.error };
  } catch (e) {
    return { error: runErrorOf(e) };
  }
}

/** How many cuts when none is asked for. */
export const DEFAULT_CUTS = 5;
/** Decisions shown per cut (the rest are counted). */
const SHOWN = 3;

export interface LookaheadPlan {
  strategy: string;
  strategyFile: string;
  warmup: number;
  timeframes: readonly Period[];
  /** The candle files as the run's arguments name them, and what is in them. */
  candleFiles: string[];
  data: CandleSeries[];
  cuts: number;
  warmupCheck: boolean;
  /** Where the changed copies go (a fresh directory; the caller removes it). */
  dir: string;
  /** The run with its candle files at these paths (the originals when `files` is empty), from tradeFromTs when given. */
  jobFor(label: string, files: ReadonlyMap<string, string>, tradeFromTs?: number): LookaheadJob;
}

/** A decision that differs between two runs: its place among them, and each run's (absent: that run has none there). */
export interface DecisionChange {
  index: number;
  before?: Intent;
  after?: Intent;
}

export interface Comparison {
  /** Decisions compared (those of the first run within the range). */
  compared: number;
  changed: number;
  /** The first few that changed. */
  first: DecisionChange[];
}

export interface CutResult extends Partial<Comparison> {
  label: string;
  /** Epoch seconds: the candles that close after it are changed in this run. */
  at: number;
  /** The last decision at the cut's time (1-based among the first run's), when it is at one. */
  atDecision?: number;
  error?: RunError;
}

export interface WarmupResult extends Partial<Comparison> {
  /** Epoch seconds: the first traded candle time of both runs. */
  from: number;
  warmupBars: number;
  /** Candles before `from` in the short run (the declared warm-up) and in the long run (all of them). */
  shortHistory: number;
  longHistory: number;
  /** Why it was not checked. */
  skipped?: string;
  error?: RunError;
  short?: { trades: number; netPL: number };
  long?: { trades: number; netPL: number };
}

export interface LookaheadResult {
  strategy: string;
  candles: number;
  /** The first run's decisions; its error, when it failed (then nothing else ran). */
  decisions: number;
  error?: RunError;
  control?: Comparison & { error?: RunError };
  cuts: CutResult[];
  warmup?: WarmupResult;
  /** No decision before a cut changed, and the control run matched. */
  lookaheadOk: boolean;
  warmupOk: boolean;
}

const same = (a: Intent | undefined, b: Intent | undefined): boolean => JSON.stringify(a) === JSON.stringify(b);

/** The decisions of two runs compared one by one, those of time <= `untilMs` (all when undefined). */
export function compareDecisions(before: readonly Intent[], after: readonly Intent[], untilMs = Infinity): Comparison {
  const a = before.filter((d) => d.ts <= untilMs);
  const b = after.filter((d) => d.ts <= untilMs);
  const first: DecisionChange[] = [];
  let changed = 0;
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    if (same(a[i], b[i])) continue;
    changed++;
    if (first.length < SHOWN) first.push({ index: i + 1, before: a[i], after: b[i] });
  }
  return { compared: a.length, changed, first };
}

const closeOf = (s: CandleSeries, c: Candle) => c.ts + PERIOD_SECONDS[s.timeframe];
const round = (x: number) => Math.round(x * 1e8) / 1e8;

/**
 * The series with every candle that closes after `cut` (epoch s) mirrored about the last close
 * before it: a rise becomes a fall of the same size. Throws when a price would not stay positive.
 */
export function changedAfter(s: CandleSeries, cut: number, file: string): CandleSeries {
  const at = s.candles.findIndex((c) => closeOf(s, c) > cut);
  if (at < 0) return s;
  const ref = at > 0 ? s.candles[at - 1]! : undefined;
  const rb = ref ? ref.bidClose : s.candles[at]!.bidOpen;
  const later = s.candles.slice(at);
  let spread = 0;
  for (const c of later) spread = Math.max(spread, c.askOpen - c.bidOpen, c.askClose - c.bidClose, c.askHigh - c.bidHigh, c.askLow - c.bidLow);
  const ra = rb + spread;
  const mirrored = later.map((c): Candle => {
    const m: Candle = {
      ts: c.ts,
      bidOpen: round(2 * rb - c.bidOpen),
      bidClose: round(2 * rb - c.bidClose),
      bidHigh: round(2 * rb - c.bidLow),
      bidLow: round(2 * rb - c.bidHigh),
      askOpen: round(2 * ra - c.askOpen),
      askClose: round(2 * ra - c.askClose),
      askHigh: round(2 * ra - c.askLow),
      askLow: round(2 * ra - c.askHigh),
      tickQty: c.tickQty,
    };
    if (m.bidLow <= 0) throw new Error(`${file}: the candles after ${new Date(cut * 1000).toISOString()} cannot be changed by mirroring them (a price would fall to ${m.bidLow})`);
    return m;
  });
  return { ...s, candles: [...s.candles.slice(0, at), ...mirrored] };
}

/**
 * The cut points (epoch s): at `n` decisions spread over the run, of those with candles closing
 * after them, then at times spread over the data when there are fewer such decisions.
 */
export function cutPoints(decisions: readonly Intent[], data: readonly CandleSeries[], n: number): { at: number; atDecision?: number }[] {
  const closes = [...new Set(data.flatMap((s) => s.candles.map((c) => closeOf(s, c))))].sort((a, b) => a - b);
  if (closes.length < 2 || n < 1) return [];
  const last = closes[closes.length - 1]!;
  const times: number[] = [];
  const atDecision = new Map<number, number>();
  decisions.forEach((d, i) => {
    const sec = Math.floor(d.ts / 1000);
    if (sec >= last) return;
    // the last decision at that time: every one of them is compared
    if (!atDecision.has(sec)) times.push(sec);
    atDecision.set(sec, i + 1);
  });
  const chosen = new Set<number>();
  const k = Math.min(n, times.length);
  for (let i = 0; i < k; i++) chosen.add(times[Math.floor(((i + 0.5) * times.length) / k)]!);
  // too few decisions: times spread over the data (not its very end: some candles must follow)
  for (let i = 0; chosen.size < n && i < n; i++) chosen.add(closes[Math.floor(((i + 0.5) * (closes.length - 1)) / n)]!);
  return [...chosen].sort((a, b) => a - b).map((at) => ({ at, ...(atDecision.has(at) ? { atDecision: atDecision.get(at)! } : {}) }));
}

/** Writes `series` under `dir` as copies of `files` (same names, each in a folder of its own); returns original → copy. */
function writeCopies(dir: string, files: readonly string[], series: readonly CandleSeries[]): Map<string, string> {
  const out = new Map<string, string>();
  files.forEach((f, i) => {
    const copy = path.join(dir, `f${i + 1}`, path.basename(f));
    fs.mkdirSync(path.dirname(copy), { recursive: true });
    writeCandleFile(copy, series[i]!.symbol, series[i]!.timeframe, series[i]!.candles);
    out.set(f, copy);
  });
  return out;
}

/** The first candle time at the middle of the data (all series together), and the candles before it. */
function middleOf(data: readonly CandleSeries[]): number | undefined {
  const times = [...new Set(data.flatMap((s) => s.candles.map((c) => c.ts)))].sort((a, b) => a - b);
  return times.length >= 2 ? times[Math.floor(times.length / 2)] : undefined;
}

const before = (data: readonly CandleSeries[], ts: number) => data.reduce((n, s) => n + s.candles.filter((c) => c.ts < ts).length, 0);

export async function runLookahead(plan: LookaheadPlan, runner: LookaheadRunner): Promise<LookaheadResult> {
  const candles = plan.data.reduce((n, s) => n + s.candles.length, 0);
  const [base] = await runner.run([plan.jobFor('run', new Map())]);
  const result: LookaheadResult = { strategy: plan.strategy, candles, decisions: base?.decisions?.length ?? 0, cuts: [], lookaheadOk: false, warmupOk: false };
  if (!base?.decisions || base.error) {
    result.error = base?.error ?? { message: 'the run gave no result', hook: 'runner' };
    return result;
  }
  const decisions = base.decisions;
  const cuts = cutPoints(decisions, plan.data, plan.cuts);
  const jobs: LookaheadJob[] = [plan.jobFor('control', writeCopies(path.join(plan.dir, 'control'), plan.candleFiles, plan.data))];
  cuts.forEach((c, i) => {
    const label = `cut ${i + 1}`;
    const changed = plan.data.map((s, k) => changedAfter(s, c.at, plan.candleFiles[k]!));
    jobs.push(plan.jobFor(label, writeCopies(path.join(plan.dir, `cut-${i + 1}`), plan.candleFiles, changed)));
  });
  // the warm-up check: the second half traded after the declared warm-up, and after all history
  let warmup: WarmupResult | undefined;
  const from = plan.warmupCheck ? middleOf(plan.data) : undefined;
  if (plan.warmupCheck && from === undefined) warmup = { from: 0, warmupBars: plan.warmup, shortHistory: 0, longHistory: 0, skipped: 'fewer than two candle times' };
  if (from !== undefined) {
    const short = windowOf(plan.data, from, Infinity, plan.warmup, plan.timeframes);
    warmup = { from, warmupBars: plan.warmup, shortHistory: before(short, from), longHistory: before(plan.data, from) };
    if (warmup.shortHistory >= warmup.longHistory) warmup.skipped = `the data before ${new Date(from * 1000).toISOString()} holds no more than the strategy's warmup of ${plan.warmup} bars`;
    else {
      jobs.push(plan.jobFor('warm-up declared', writeCopies(path.join(plan.dir, 'warmup-declared'), plan.candleFiles, short), from));
      jobs.push(plan.jobFor('warm-up all', writeCopies(path.join(plan.dir, 'warmup-all'), plan.candleFiles, plan.data), from));
    }
  }
  const outcomes = await runner.run(jobs);
  const control = outcomes[0]!;
  result.control = control.decisions ? { ...compareDecisions(decisions, control.decisions), error: control.error } : { compared: decisions.length, changed: decisions.length, first: [], error: control.error };
  result.cuts = cuts.map((c, i) => {
    const o = outcomes[1 + i]!;
    const r: CutResult = { label: `cut ${i + 1}`, ...c };
    if (!o.decisions) return { ...r, error: o.error };
    // a run the changed candles made fail after the cut still has its decisions before it
    return { ...r, ...compareDecisions(decisions, o.decisions, c.at * 1000), ...(o.error ? { error: o.error } : {}) };
  });
  const controlOk = result.control.changed === 0 && !result.control.error;
  result.lookaheadOk = controlOk && result.cuts.every((c) => c.changed === 0);
  if (warmup && !warmup.skipped) {
    const [s, l] = outcomes.slice(1 + cuts.length);
    if (!s?.decisions || !l?.decisions || s.error || l.error) warmup.error = s?.error ?? l?.error ?? { message: 'a run gave no result', hook: 'runner' };
    else {
      Object.assign(warmup, compareDecisions(l.decisions, s.decisions));
      warmup.short = { trades: s.trades ?? 0, netPL: s.netPL ?? 0 };
      warmup.long = { trades: l.trades ?? 0, netPL: l.netPL ?? 0 };
    }
  }
  result.warmup = warmup;
  result.warmupOk = !warmup || warmup.skipped !== undefined || (!warmup.error && warmup.changed === 0);
  return result;
}

/** A value that names one of the run's candle files (as given, or the same file by its full path), renamed to its copy. */
export function renamed(value: string, files: ReadonlyMap<string, string>): string | undefined {
  for (const [orig, copy] of files) if (value === orig || path.resolve(value) === path.resolve(orig)) return copy;
  return undefined;
}

/**
 * The run's command line with its candle files renamed to the copies wherever it names them: an
 * argument that is one (`--candles a.json`), or whose part after an `=` is one (`--candles=a.json`,
 * `--param data=a.json`).
 */
export function renameArgs(argv: readonly string[], files: ReadonlyMap<string, string>): string[] {
  if (!files.size) return [...argv];
  return argv.map((t) => {
    const whole = renamed(t, files);
    if (whole !== undefined) return whole;
    for (let i = t.indexOf('='); i >= 0; i = t.indexOf('=', i + 1)) {
      const copy = renamed(t.slice(i + 1), files);
      if (copy !== undefined) return `${t.slice(0, i + 1)}${copy}`;
    }
    return t;
  });
}
