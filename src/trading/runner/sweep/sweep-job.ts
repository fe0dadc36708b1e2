/**
 * One backtest of a parameter sweep: a parameter set over one window of the candles, warmed up
 * with the strategy's `warmup` candles before the window. It runs in a worker thread
 * (sweep-worker.ts) and never throws: a strategy that throws, or a run the engine refuses, is an
 * error in the outcome, and the sweep goes on with the other sets.
 */
import path from 'node:path';
import type { CandleSeries } from '../../fxcm/candle-file';
import { PERIOD_SECONDS } from '../../fxcm/candles';
import type { Period } from '../../fxcm/types';
import { runBacktest, type BacktestOptions } from '../engine/backtest';
import { runErrorOf } from '../errors';
import { loadStrategy } from '../engine/loader';
import { periodPL } from '../report/luck';
import { computeMetrics, type Metrics } from '../report/report';
import type { RunError, RunResult } from '../results';
import type { SafetyLimits } from '../protections/safety';
import type { ProtectionRules } from '../strategy';

/** What every backtest of a sweep shares (sent once to each worker thread). */
export interface SweepSetup {
  strategyFile: string;
  data: CandleSeries[];
  balance?: number;
  currency?: string;
  commissionPerK?: number;
  leverage?: number;
  /** Slippage and rollover (absent: none). */
  realism?: Pick<BacktestOptions, 'slippage' | 'rollover'>;
  safety: SafetyLimits;
  /** A --protections file's, instead of the strategy's. */
  protections?: ProtectionRules;
}

export interface SweepJob {
  /** The window, epoch seconds: candles with from <= ts < to. */
  from: number;
  to: number;
  params: Record<string, unknown>;
  /** Return the trades and equity too (the out-of-sample runs, for their report), not only the metrics. */
  keepRun: boolean;
}

export interface JobOutcome {
  /** Absent when no backtest ran (the engine refused the data, the worker died). */
  metrics?: Metrics;
  /** P/L per period of the run (report/luck.ts), for the test against luck; absent with an error. */
  periodPL?: number[];
  run?: RunResult;
  error?: RunError;
}

/** Index of the first candle at or after `ts` (candle files are in time order: fxcm/candle-file.ts checks it). */
function firstAtOrAfter(candles: CandleSeries['candles'], ts: number): number {
  let lo = 0;
  let hi = candles.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (candles[mid]!.ts < ts) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * The candles of the window [from, to) (epoch seconds), every series cut at the same times, each
 * with the candles before `from` that make `warmup` bars of every time frame in `timeframes`
 * (default: the series' own), as paper and live load them; fewer where the series starts later.
 */
export function windowOf(data: readonly CandleSeries[], from: number, to: number, warmup = 0, timeframes: readonly Period[] = []): CandleSeries[] {
  return data.map((s) => {
    const base = PERIOD_SECONDS[s.timeframe];
    const longest = Math.max(base, ...timeframes.map((tf) => PERIOD_SECONDS[tf]));
    const before = warmup * Math.ceil(longest / base);
    return { ...s, candles: s.candles.slice(Math.max(0, firstAtOrAfter(s.candles, from) - before), firstAtOrAfter(s.candles, to)) };
  });
}

/**
 * A fresh copy of the strategy module for every run: what a module keeps between hooks (counters,
 * caches) must not leak from one parameter set into the next, or a result would depend on which
 * runs its worker did before. (A .ts strategy is transpiled once; each load runs it afresh.)
 */
export function freshStrategy(file: string): ReturnType<typeof loadStrategy> {
  delete require.cache[require.resolve(path.resolve(file))];
  return loadStrategy(file);
}

export async function runSweepJob(setup: SweepSetup, job: SweepJob): Promise<JobOutcome> {
  try {
    const strategyModule = freshStrategy(setup.strategyFile);
    // The window starts warm, as paper and live do: its trades and metrics start at `from`.
    const result = await runBacktest({
      strategy: strategyModule,
      strategyFile: setup.strategyFile,
      data: windowOf(setup.data, job.from, job.to, strategyModule.warmup ?? 0, strategyModule.timeframes ?? []),
      tradeFromTs: job.from,
      params: job.params,
      balance: setup.balance,
      currency: setup.currency,
      commissionPerK: setup.commissionPerK,
      leverage: setup.leverage,
      ...setup.realism,
      safety: setup.safety,
      protections: setup.protections,
    });
    const { strategy, mode, currency, startBalance, startTime, trades, equity, approximateCurrency, error } = result;
    return {
      metrics: computeMetrics(trades, equity, startBalance, startTime),
      periodPL: error ? undefined : periodPL(equity, startBalance),
      error,
      run: job.keepRun ? { strategy, mode, currency, startBalance, startTime, trades, equity, approximateCurrency, error } : undefined,
    };
  } catch (e) {
    return { error: runErrorOf(e) };
  }
}
