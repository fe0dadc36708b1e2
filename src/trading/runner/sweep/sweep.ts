/**
 * Parameter sweeps with walk-forward checking (`ratelimit-runner sweep`): the parameter sets from
 * --grid and --range, the folds of the candle timeline, the ranking by an objective, and the
 * out-of-sample figures a trader compares with the in-sample ones. The backtests run elsewhere (a
 * {@link JobRunner}: worker threads in the CLI) and come back in job order, so the result does not
 * depend on how many run at once.
 */
import { isoUtcMinutes } from '../../../platform/time-text';
import { PERIOD_SECONDS } from '../../fxcm/candles';
import { clean } from '../../execution/instruments';
import { UsageError } from '../../../platform/argv';
import type { CandleSeries } from '../../fxcm/candle-file';
import { RATIO_METHOD, buildReport, type Metrics, type RunReport } from '../report/report';
import type { EquityPoint, RunError, RunResult } from '../results';
import { LUCK_ALPHA, LUCK_METHOD, LUCK_SEED, fisherCombined, periodPL, realityCheck } from '../report/luck';
import { windowOf, type JobOutcome, type SweepJob, type SweepSetup } from './sweep-job';

/** More sets than this is a mistake (a step too fine) more often than a plan. */
export const MAX_PARAMETER_SETS = 10_000;

/**
 * Out-of-sample P/L per bar below this share of the in-sample one reads as overfitting (the usual
 * bar for walk-forward efficiency is 50–60%).
 */
export const MIN_EFFICIENCY = 0.5;

/** The objectives a sweep can rank by, and which way is better. */
export const OBJECTIVES = {
  netPL: 'higher',
  returnPct: 'higher',
  plPips: 'higher',
  winRate: 'higher',
  sharpe: 'higher',
  sortino: 'higher',
  profitFactor: 'higher',
  maxDrawdown: 'lower',
  maxDrawdownPct: 'lower',
} as const satisfies Partial<Record<keyof Metrics, 'higher' | 'lower'>>;

export type Objective = keyof typeof OBJECTIVES;

export const isObjective = (s: string): s is Objective => Object.hasOwn(OBJECTIVES, s);

/** One swept parameter: its values in the order given, and the flag that gave them (for messages). */
export interface ParamAxis {
  key: string;
  values: unknown[];
  flag: string;
}

/** A parameter value from the command line (--param, --grid): numbers and true/false are parsed, the rest stays text. */
export function paramValue(v: string): unknown {
  return v === 'true' ? true : v === 'false' ? false : v !== '' && Number.isFinite(Number(v)) ? Number(v) : v;
}

/** `--grid KEY=V1,V2,...`: values parsed like --param. */
export function parseGrid(arg: string): ParamAxis {
  const flag = `--grid ${arg}`;
  const i = arg.indexOf('=');
  if (i <= 0) throw new UsageError(`--grid needs KEY=V1,V2,..., got "${arg}"`);
  const texts = arg.slice(i + 1).split(',').map((v) => v.trim());
  if (texts.some((v) => v === '')) throw new UsageError(`${flag}: an empty value (values are separated by single commas)`);
  const values = texts.map(paramValue);
  const twice = values.find((v, k) => values.indexOf(v) !== k);
  if (twice !== undefined) throw new UsageError(`${flag}: ${String(twice)} is listed twice`);
  return { key: arg.slice(0, i), values, flag };
}

/** `--range KEY=FROM:TO:STEP`: FROM, FROM+STEP, ... up to TO, included when a step lands on it. */
export function parseRange(arg: string): ParamAxis {
  const flag = `--range ${arg}`;
  const i = arg.indexOf('=');
  const parts = i > 0 ? arg.slice(i + 1).split(':') : [];
  if (parts.length !== 3) throw new UsageError(`--range needs KEY=FROM:TO:STEP, got "${arg}"`);
  const [from, to, step] = parts.map((p) => (p.trim() === '' ? NaN : Number(p))) as [number, number, number];
  if (![from, to, step].every(Number.isFinite)) throw new UsageError(`${flag}: FROM, TO and STEP must be numbers`);
  if (step <= 0) throw new UsageError(`${flag}: the step must be above 0`);
  if (to < from) throw new UsageError(`${flag}: TO is below FROM`);
  // the tolerance keeps TO when binary fractions fall just short of it (0.1:0.3:0.1)
  const count = Math.floor((to - from) / step + 1e-9) + 1;
  if (count > MAX_PARAMETER_SETS) throw new UsageError(`${flag}: ${count} values, more than the ${MAX_PARAMETER_SETS} sets a sweep runs; use a larger step`);
  // 12 significant digits: 0.1 + 2 * 0.1 is 0.3, not 0.30000000000000004
  const values = Array.from({ length: count }, (_, k) => Number((from + k * step).toPrecision(12)));
  return { key: arg.slice(0, i), values, flag };
}

/** The swept parameters, checked against each other and the fixed --param ones, and their count. */
export function checkAxes(axes: readonly ParamAxis[], fixed: Record<string, unknown>): void {
  if (axes.length === 0) throw new UsageError('sweep needs at least one --grid KEY=V1,V2,... or --range KEY=FROM:TO:STEP');
  for (const [k, a] of axes.entries()) {
    const earlier = axes.slice(0, k).find((b) => b.key === a.key);
    if (earlier) throw new UsageError(`${a.key} is swept twice (${earlier.flag} and ${a.flag})`);
    if (Object.hasOwn(fixed, a.key)) throw new UsageError(`${a.key} is both a fixed --param and swept (${a.flag})`);
  }
  const sets = axes.reduce((n, a) => n * a.values.length, 1);
  if (sets > MAX_PARAMETER_SETS) {
    throw new UsageError(
      `${sets} parameter sets (${axes.map((a) => `${a.key} ${a.values.length}`).join(' × ')}), more than the ${MAX_PARAMETER_SETS} a sweep runs; use fewer values or larger steps`,
    );
  }
}

/**
 * Every swept or fixed key must be a parameter the strategy declares: a key it does not declare is
 * a typo more often than not, and sweeping it would run the same backtest again and again.
 */
export function checkDeclared(axes: readonly ParamAxis[], fixed: Record<string, unknown>, declared: readonly string[]): void {
  const known = declared.length ? `its parameters: ${declared.join(', ')}` : 'it declares no params';
  for (const a of axes) if (!declared.includes(a.key)) throw new UsageError(`${a.flag}: the strategy has no parameter ${a.key} (${known})`);
  for (const key of Object.keys(fixed)) if (!declared.includes(key)) throw new UsageError(`--param ${key}: the strategy has no parameter ${key} (${known})`);
}

/** Every combination, numbered in order of the axes with the last one varying fastest. */
export function parameterSets(axes: readonly ParamAxis[]): Record<string, unknown>[] {
  let sets: Record<string, unknown>[] = [{}];
  for (const a of axes) sets = sets.flatMap((s) => a.values.map((v) => ({ ...s, [a.key]: v })));
  return sets;
}

/** A window of the timeline, epoch seconds: candles with from <= ts < to. */
export interface Window {
  from: number;
  to: number;
  /** Candle times in it (a time shared by several symbols counts once). */
  bars: number;
  /** Candles of every symbol in it (the progress bar counts these). */
  candles: number;
}

export interface Fold {
  inSample: Window;
  outOfSample: Window;
}

/**
 * Cuts the timeline (the candle times of every symbol together) into `folds` consecutive windows
 * of equal numbers of candle times, so weekends and gaps make no empty windows; the first
 * `inSamplePct` percent of each window's times are its in-sample part. Every symbol the strategy
 * trades must have candles in every part.
 */
export function splitTimeline(data: readonly CandleSeries[], folds: number, inSamplePct: number, symbols: readonly string[]): Fold[] {
  const times = [...new Set(data.flatMap((s) => s.candles.map((c) => c.ts)))].sort((a, b) => a - b);
  const end = Math.max(...data.filter((s) => s.candles.length).map((s) => s.candles[s.candles.length - 1]!.ts + PERIOD_SECONDS[s.timeframe]));
  const window = (a: number, b: number): Window => {
    const from = times[a]!;
    const to = b < times.length ? times[b]! : end;
    return { from, to, bars: b - a, candles: windowOf(data, from, to).reduce((n, s) => n + s.candles.length, 0) };
  };
  const out: Fold[] = [];
  for (let k = 0; k < folds; k++) {
    const start = Math.floor((k * times.length) / folds);
    const stop = Math.floor(((k + 1) * times.length) / folds);
    if (stop - start < 2) {
      throw new UsageError(`${times.length} candle times cannot make ${folds} folds with an in-sample and an out-of-sample part each; use fewer --folds`);
    }
    const cut = start + Math.min(stop - start - 1, Math.max(1, Math.round(((stop - start) * inSamplePct) / 100)));
    out.push({ inSample: window(start, cut), outOfSample: window(cut, stop) });
  }
  out.forEach((f, k) => {
    for (const [part, w] of [['in-sample', f.inSample], ['out-of-sample', f.outOfSample]] as const) {
      const present = new Set(windowOf(data, w.from, w.to).filter((s) => s.candles.length).map((s) => s.symbol));
      const missing = symbols.filter((s) => !present.has(s));
      if (missing.length) {
        throw new UsageError(`fold ${k + 1}'s ${part} part (${windowTime(w.from)} to ${windowTime(w.to)}) has no candles of ${missing.join(', ')}, which the strategy trades`);
      }
    }
  });
  return out;
}

/** A window's bound (epoch seconds) as text, to the minute when whole. */
const windowTime = (sec: number): string => isoUtcMinutes(sec * 1000);

/** What runs the backtests: the outcomes in the order of the jobs, whatever order they finish in. */
export interface JobRunner {
  run(jobs: SweepJob[], onDone?: (index: number) => void): Promise<JobOutcome[]>;
}

export interface SweepPlan {
  strategy: string;
  setup: SweepSetup;
  axes: ParamAxis[];
  fixed: Record<string, unknown>;
  folds: Fold[];
  inSamplePct: number;
  objective: Objective;
  minTrades: number;
}

/** Metrics without the Sharpe method's description, which the sweep's result carries once. */
export type SetMetrics = Omit<Metrics, 'ratioMethod'>;

/** ranked: eligible and ranked; the others are never chosen. */
export type SetStatus = 'ranked' | 'objective n/a' | 'too few trades' | 'error';

export interface SetResult {
  set: number;
  status: SetStatus;
  /** 1 is the best; null when not ranked. */
  rank: number | null;
  /** The objective's value; null when n/a or failed. */
  objective: number | null;
  metrics?: SetMetrics;
  error?: RunError;
}

export interface WindowResult {
  from: string;
  to: string;
  bars: number;
  candles: number;
}

export interface FoldResult {
  fold: number;
  inSample: WindowResult;
  outOfSample: WindowResult;
  /** In-sample results, in set order. */
  results: SetResult[];
  /** The chosen set, or null when none qualified. */
  best: number | null;
  outOfSampleRun: { metrics?: SetMetrics; error?: RunError } | null;
  /**
   * The reality check of this fold's in-sample runs: the chance that the best of `sets` parameter
   * sets does at least this well on a market where none has an edge (null: nothing moved).
   */
  luck: { sets: number; pValue: number | null };
}

/** Figures of several windows taken together. */
export interface Totals {
  netPL: number;
  trades: number;
  wins: number;
  winRate: number;
  /** Out of sample: of the joined equity curve; in sample: the worst fold's. */
  maxDrawdown: number;
  bars: number;
}

export type Verdict = 'held up' | 'overfitted' | 'luck' | 'no in-sample profit' | 'nothing chosen';

export interface SweepResult {
  strategy: string;
  objective: Objective;
  better: 'higher' | 'lower';
  inSamplePct: number;
  minTrades: number;
  /** The backtest options given (absent: the backtest's default). */
  settings: { balance?: number; currency?: string; commissionPerK?: number; leverage?: number; realism?: SweepSetup['realism']; safety: SweepSetup['safety'] };
  fixedParams: Record<string, unknown>;
  axes: { key: string; values: unknown[] }[];
  sets: { set: number; params: Record<string, unknown> }[];
  folds: FoldResult[];
  summary: {
    /** The chosen sets' in-sample figures, over the folds that chose one. */
    inSample: Totals;
    /** The chosen sets' out-of-sample runs joined. */
    outOfSample: Totals;
    /** Out-of-sample P/L per bar over in-sample P/L per bar; null without in-sample profit. */
    efficiency: number | null;
    /** p-values against luck (report/luck.ts): the folds' reality checks combined, and the joined out-of-sample P/L. */
    luck: { inSample: number | null; outOfSample: number | null; method: string };
    verdict: Verdict;
  };
  ratioMethod: string;
}

export interface SweepOutcome {
  result: SweepResult;
  /** The chosen sets' out-of-sample runs joined into one report; null when no fold chose a set. */
  outOfSampleReport: RunReport | null;
}

function setMetrics(m: Metrics | undefined): SetMetrics | undefined {
  if (m === undefined) return undefined;
  const { ratioMethod: _described, ...rest } = m;
  return rest;
}

/** Ranks one fold's in-sample outcomes; ties go to the lower set number. */
function rankFold(outcomes: readonly JobOutcome[], objective: Objective, minTrades: number): SetResult[] {
  const results: SetResult[] = outcomes.map((o, i) => {
    const set = i + 1;
    if (o.error || !o.metrics) return { set, status: 'error', rank: null, objective: null, error: o.error };
    const value = o.metrics[objective];
    const status: SetStatus = o.metrics.trades < minTrades ? 'too few trades' : value === null ? 'objective n/a' : 'ranked';
    return { set, status, rank: null, objective: value, metrics: setMetrics(o.metrics) };
  });
  const sign = OBJECTIVES[objective] === 'higher' ? -1 : 1;
  results
    .filter((r) => r.status === 'ranked')
    .sort((a, b) => sign * (a.objective! - b.objective!) || a.set - b.set)
    .forEach((r, k) => (r.rank = k + 1));
  return results;
}

/**
 * The out-of-sample runs one after the other, as if traded in sequence: each window started from
 * the same balance, so each is shifted by the P/L of the windows before it. Trade ids get their
 * fold (F2-T5), being unique only within a run.
 */
function joinRuns(runs: readonly { fold: number; run: RunResult }[], mode: string): RunResult {
  const first = runs[0]!.run;
  let carried = 0;
  const equity: EquityPoint[] = [];
  for (const { run } of runs) {
    for (const p of run.equity) equity.push({ ts: p.ts, balance: clean(p.balance + carried), equity: clean(p.equity + carried) });
    const last = run.equity[run.equity.length - 1];
    if (last) carried += last.equity - run.startBalance;
  }
  return {
    strategy: first.strategy,
    mode,
    currency: first.currency,
    startBalance: first.startBalance,
    startTime: first.startTime,
    trades: runs.flatMap(({ fold, run }) => run.trades.map((t) => ({ ...t, tradeId: `F${fold}-${t.tradeId}` }))),
    equity,
    approximateCurrency: [...new Set(runs.flatMap(({ run }) => run.approximateCurrency ?? []))].sort(),
    error: runs.find(({ run }) => run.error)?.run.error,
  };
}

function windowResult(w: Window): WindowResult {
  return { from: windowTime(w.from), to: windowTime(w.to), bars: w.bars, candles: w.candles };
}

/**
 * The reality check of one fold: every set that ran, each as its P/L per period (runs of the same
 * window have the same bars; a set whose curve differs in length, which a strategy error ends
 * early, is left out).
 */
function foldLuck(outcomes: readonly JobOutcome[], fold: number): FoldResult['luck'] {
  const series = outcomes.flatMap((o) => (o.periodPL ? [o.periodPL] : []));
  const count = (n: number) => series.filter((s) => s.length === n).length;
  const common = series.map((s) => s.length).reduce((a, b) => (count(b) > count(a) ? b : a), 0);
  const same = series.filter((s) => s.length === common);
  return { sets: same.length, pValue: same.length ? realityCheck(same, LUCK_SEED + fold) : null };
}

/**
 * The verdict: luck first (the chosen sets did no better in sample than the best of that many does
 * without an edge, or out of sample no better than chance), then the walk-forward efficiency.
 */
function verdictOf(chosen: number, efficiency: number | null, luck: SweepResult['summary']['luck']): Verdict {
  if (chosen === 0) return 'nothing chosen';
  if (efficiency === null) return 'no in-sample profit';
  if (luck.inSample === null || luck.inSample >= LUCK_ALPHA) return 'luck';
  if (efficiency < MIN_EFFICIENCY) return 'overfitted';
  if (luck.outOfSample === null || luck.outOfSample >= LUCK_ALPHA) return 'luck';
  return 'held up';
}

/** Runs the sweep: every set on every fold's in-sample part, then each fold's best out of sample. */
export async function runSweep(plan: SweepPlan, runner: JobRunner, onProgress?: (done: number, total: number) => void): Promise<SweepOutcome> {
  const sets = parameterSets(plan.axes);
  const total = plan.folds.reduce((n, f) => n + f.inSample.candles * sets.length + f.outOfSample.candles, 0);
  let done = 0;
  const advance = (candles: number) => {
    done += candles;
    onProgress?.(done, total);
  };
  const job = (w: Window, params: Record<string, unknown>, keepRun: boolean): SweepJob => ({ from: w.from, to: w.to, params: { ...plan.fixed, ...params }, keepRun });

  const inSample = await runner.run(
    plan.folds.flatMap((f) => sets.map((s) => job(f.inSample, s, false))),
    (i) => advance(plan.folds[Math.floor(i / sets.length)]!.inSample.candles),
  );
  const ranked = plan.folds.map((_, k) => rankFold(inSample.slice(k * sets.length, (k + 1) * sets.length), plan.objective, plan.minTrades));
  const luckOfFold = plan.folds.map((_, k) => foldLuck(inSample.slice(k * sets.length, (k + 1) * sets.length), k + 1));
  const best = ranked.map((results) => results.find((r) => r.rank === 1)?.set ?? null);

  const chosen = plan.folds.map((f, k) => ({ fold: k + 1, f, set: best[k]! })).filter((c) => c.set !== null);
  for (const [k, f] of plan.folds.entries()) if (best[k] === null) advance(f.outOfSample.candles);
  const outOfSample = await runner.run(
    chosen.map((c) => job(c.f.outOfSample, sets[c.set - 1]!, true)),
    (i) => advance(chosen[i]!.f.outOfSample.candles),
  );
  const oosByFold = new Map(chosen.map((c, i) => [c.fold, outOfSample[i]!]));

  const folds: FoldResult[] = plan.folds.map((f, k) => {
    const o = oosByFold.get(k + 1);
    return {
      fold: k + 1,
      inSample: windowResult(f.inSample),
      outOfSample: windowResult(f.outOfSample),
      results: ranked[k]!,
      best: best[k]!,
      outOfSampleRun: o ? { metrics: setMetrics(o.metrics), error: o.error } : null,
      luck: luckOfFold[k]!,
    };
  });

  const runs = chosen.flatMap((c) => {
    const run = oosByFold.get(c.fold)!.run;
    return run ? [{ fold: c.fold, run }] : [];
  });
  const mode = plan.folds.length > 1 ? `walk-forward out-of-sample, ${plan.folds.length} folds` : 'out-of-sample';
  // the price chart of the report: the candles of the windows that ran out of sample
  const bars = plan.setup.data.map((s) => ({ ...s, candles: chosen.flatMap((c) => windowOf([s], c.f.outOfSample.from, c.f.outOfSample.to)[0]!.candles) }));
  const joinedRun = runs.length ? joinRuns(runs, mode) : null;
  // the windows' spans: the charts break their lines between them and shade what lies between
  const windows = chosen.map((c) => ({ from: c.f.outOfSample.from * 1000, to: c.f.outOfSample.to * 1000 }));
  const outOfSampleReport = joinedRun ? buildReport({ ...joinedRun, bars, ...(windows.length > 1 ? { windows } : {}) }) : null;

  const chosenIn = chosen.map((c) => ranked[c.fold - 1]![c.set - 1]!.metrics!);
  const inTotals: Totals = {
    netPL: clean(chosenIn.reduce((s, m) => s + m.netPL, 0)),
    trades: chosenIn.reduce((s, m) => s + m.trades, 0),
    wins: chosenIn.reduce((s, m) => s + m.wins, 0),
    winRate: 0,
    maxDrawdown: Math.max(0, ...chosenIn.map((m) => m.maxDrawdown)),
    bars: chosen.reduce((s, c) => s + c.f.inSample.bars, 0),
  };
  inTotals.winRate = inTotals.trades ? clean(inTotals.wins / inTotals.trades) : 0;
  const om = outOfSampleReport?.metrics;
  const outTotals: Totals = {
    netPL: om?.netPL ?? 0,
    trades: om?.trades ?? 0,
    wins: om?.wins ?? 0,
    winRate: om?.winRate ?? 0,
    maxDrawdown: om?.maxDrawdown ?? 0,
    bars: chosen.reduce((s, c) => s + c.f.outOfSample.bars, 0),
  };
  const efficiency = inTotals.netPL > 0 ? clean(outTotals.netPL / outTotals.bars / (inTotals.netPL / inTotals.bars)) : null;
  const chosenLuck = chosen.map((c) => luckOfFold[c.fold - 1]!.pValue);
  const joined = joinedRun ? periodPL(joinedRun.equity, joinedRun.startBalance) : [];
  const luck = {
    inSample: chosenLuck.length && chosenLuck.every((p) => p !== null) ? clean(fisherCombined(chosenLuck as number[])) : null,
    outOfSample: joined.length ? realityCheck([joined], LUCK_SEED) : null,
    method: LUCK_METHOD,
  };
  const verdict = verdictOf(chosen.length, efficiency, luck);

  const { setup } = plan;
  return {
    result: {
      strategy: plan.strategy,
      objective: plan.objective,
      better: OBJECTIVES[plan.objective],
      inSamplePct: plan.inSamplePct,
      minTrades: plan.minTrades,
      settings: { balance: setup.balance, currency: setup.currency, commissionPerK: setup.commissionPerK, leverage: setup.leverage, realism: setup.realism, safety: setup.safety },
      fixedParams: plan.fixed,
      axes: plan.axes.map((a) => ({ key: a.key, values: a.values })),
      sets: sets.map((params, i) => ({ set: i + 1, params })),
      folds,
      summary: { inSample: inTotals, outOfSample: outTotals, efficiency, luck, verdict },
      ratioMethod: RATIO_METHOD,
    },
    outOfSampleReport,
  };
}
