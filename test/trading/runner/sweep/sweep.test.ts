/**
 * `ratelimit-runner sweep`: parameter sets, walk-forward windows, ranking and the out-of-sample
 * summary in process (the backtests run in this thread), then the command as a child process
 * (needs `npx tsc -p tsconfig.json` first: the worker threads run dist/).
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { candleToRow } from '../../../../src/trading/fxcm/candles';
import { UsageError } from '../../../../src/platform/argv';
import type { CandleSeries } from '../../../../src/trading/fxcm/candle-file';
import type { Period } from '../../../../src/trading/fxcm/types';
import { runBacktest } from '../../../../src/trading/runner/engine/backtest';
import { loadStrategy } from '../../../../src/trading/runner/engine/loader';
import {
  MAX_PARAMETER_SETS,
  checkAxes,
  checkDeclared,
  parameterSets,
  parseGrid,
  parseRange,
  runSweep,
  splitTimeline,
  type JobRunner,
  type Objective,
  type SweepPlan,
} from '../../../../src/trading/runner/sweep/sweep';
import { runSweepJob, windowOf, type SweepJob, type SweepSetup } from '../../../../src/trading/runner/sweep/sweep-job';
import { flat, wave } from '../helpers';
import { prng } from '../../../support/prng';
import { fisherCombined, realityCheck } from '../../../../src/trading/runner/report/luck';

const T0 = 1_700_000_040; // a whole minute
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rr-sweep-'));
const seen = globalThis as { sweepSeen?: string[] };

/**
 * Opens one trade on the window's first EUR/USD bar (buy when `long`), closes it at the end: its
 * P/L is the window's move times `amount`; `tag` changes nothing (ties); `boom` throws on the
 * third bar. Every bar it sees goes to globalThis.sweepSeen.
 */
const TREND = path.join(dir, 'trend.js');
fs.writeFileSync(
  TREND,
  `module.exports = {
  name: 'trend',
  symbols: ['EUR/USD'],
  params: { long: true, amount: 10, tag: 0, boom: 0 },
  async onBar(ctx, bar) {
    (globalThis.sweepSeen ??= []).push(bar.symbol + '@' + bar.ts);
    if (bar.symbol !== 'EUR/USD') return;
    const n = ctx.candles('EUR/USD', 'm1').length;
    if (ctx.params.boom && n === 3) throw new Error('boom');
    if (n === 1) await ctx.openTrade({ symbol: 'EUR/USD', isBuy: ctx.params.long, amount: ctx.params.amount });
  },
  async onStop(ctx) {
    await ctx.closeAll();
  },
};
`,
);

/**
 * Declares `warmup`; records how many EUR/USD and GBP/USD bars ctx.candles holds at onStart and
 * at its first EUR/USD bar, where it buys `amount`; closes at the end: its P/L is the window's move.
 */
function warmStrategy(warmup: number): string {
  const file = path.join(dir, `warm-${warmup}.js`);
  fs.writeFileSync(
    file,
    `let traded;
const held = (ctx) => ctx.candles('EUR/USD', 'm1').length + '/' + ctx.candles('GBP/USD', 'm1').length;
module.exports = {
  name: 'warm',
  symbols: ['EUR/USD'],
  warmup: ${warmup},
  params: { amount: 10 },
  onStart(ctx) {
    traded = false; // the in-thread runs share the module (jest keeps it)
    (globalThis.sweepSeen ??= []).push('start ' + held(ctx));
  },
  async onBar(ctx, bar) {
    if (bar.symbol !== 'EUR/USD' || traded) return;
    traded = true;
    globalThis.sweepSeen.push('first bar ' + bar.ts + ' ' + held(ctx));
    await ctx.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: ctx.params.amount });
  },
  async onStop(ctx) {
    await ctx.closeAll();
  },
};
`,
  );
  return file;
}

/** 70 bars rising a pip each, then 30 falling a pip each (bid closes; the spread is 2 pips). */
const RISE_THEN_FALL = Array.from({ length: 100 }, (_, i) => Math.round((i < 70 ? 1.1 + 0.0001 * i : 1.1069 - 0.0001 * (i - 69)) * 1e5) / 1e5);
const eur = (closes: number[]): CandleSeries[] => [{ symbol: 'EUR/USD', timeframe: 'm1', candles: flat(T0, closes) }];

/** Runs the jobs one after the other in this thread, recording the bars each saw. */
function inThread(setup: SweepSetup, saw: { job: SweepJob; bars: string[] }[] = []): JobRunner {
  return {
    async run(jobs, onDone) {
      const out = [];
      for (const [i, job] of jobs.entries()) {
        seen.sweepSeen = [];
        out.push(await runSweepJob(setup, job));
        saw.push({ job, bars: seen.sweepSeen });
        onDone?.(i);
      }
      return out;
    },
  };
}

function plan(data: CandleSeries[], grids: string[], o: { folds?: number; inSamplePct?: number; objective?: Objective; minTrades?: number; strategyFile?: string } = {}): SweepPlan {
  const axes = grids.map(parseGrid);
  return {
    strategy: 'trend',
    setup: { strategyFile: o.strategyFile ?? TREND, data, safety: {} },
    axes,
    fixed: {},
    folds: splitTimeline(data, o.folds ?? 1, o.inSamplePct ?? 70, ['EUR/USD']),
    inSamplePct: o.inSamplePct ?? 70,
    objective: o.objective ?? 'netPL',
    minTrades: o.minTrades ?? 1,
  };
}

describe('parameter sets', () => {
  test('grids and ranges: values parsed like --param, numbered with the last key varying fastest', () => {
    expect(parseGrid('fast=3,5,8').values).toEqual([3, 5, 8]);
    expect(parseGrid('mode=trend, revert ,true').values).toEqual(['trend', 'revert', true]);
    expect(parseRange('slow=20:50:10').values).toEqual([20, 30, 40, 50]);
    expect(parseRange('slow=20:55:10').values).toEqual([20, 30, 40, 50]);
    expect(parseRange('k=0.1:0.3:0.1').values).toEqual([0.1, 0.2, 0.3]);
    expect(parseRange('k=5:5:1').values).toEqual([5]);
    expect(parameterSets([parseGrid('a=1,2'), parseRange('b=10:30:10')])).toEqual([
      { a: 1, b: 10 },
      { a: 1, b: 20 },
      { a: 1, b: 30 },
      { a: 2, b: 10 },
      { a: 2, b: 20 },
      { a: 2, b: 30 },
    ]);
  });

  test('bad grids and ranges, clashes and too many sets are usage errors that say why', () => {
    const bad: [() => unknown, string][] = [
      [() => parseGrid('fast'), '--grid needs KEY=V1,V2,..., got "fast"'],
      [() => parseGrid('fast='), '--grid fast=: an empty value'],
      [() => parseGrid('fast=1,,2'), '--grid fast=1,,2: an empty value'],
      [() => parseGrid('fast=3,5,3'), '--grid fast=3,5,3: 3 is listed twice'],
      [() => parseRange('slow=10-50'), '--range needs KEY=FROM:TO:STEP, got "slow=10-50"'],
      [() => parseRange('slow=10:x:5'), '--range slow=10:x:5: FROM, TO and STEP must be numbers'],
      [() => parseRange('slow=10:50:0'), '--range slow=10:50:0: the step must be above 0'],
      [() => parseRange('slow=50:10:5'), '--range slow=50:10:5: TO is below FROM'],
      [() => parseRange('slow=1:20000:1'), `--range slow=1:20000:1: 20000 values, more than the ${MAX_PARAMETER_SETS} sets a sweep runs`],
      [() => checkAxes([], {}), 'sweep needs at least one --grid KEY=V1,V2,... or --range KEY=FROM:TO:STEP'],
      [() => checkAxes([parseGrid('a=1,2'), parseRange('a=1:3:1')], {}), 'a is swept twice (--grid a=1,2 and --range a=1:3:1)'],
      [() => checkAxes([parseGrid('a=1,2')], { a: 3 }), 'a is both a fixed --param and swept (--grid a=1,2)'],
      [() => checkAxes([parseRange('a=1:200:1'), parseRange('b=1:51:1')], {}), `10200 parameter sets (a 200 × b 51), more than the ${MAX_PARAMETER_SETS} a sweep runs`],
      [() => checkDeclared([parseGrid('fsat=1,2')], {}, ['fast', 'slow']), '--grid fsat=1,2: the strategy has no parameter fsat (its parameters: fast, slow)'],
      [() => checkDeclared([parseGrid('fast=1,2')], { amt: 1 }, ['fast']), '--param amt: the strategy has no parameter amt (its parameters: fast)'],
      [() => checkDeclared([parseGrid('fast=1,2')], {}, []), 'the strategy has no parameter fast (it declares no params)'],
    ];
    for (const [f, message] of bad) {
      expect(f).toThrow(UsageError);
      expect(f).toThrow(message);
    }
    expect(() => checkAxes([parseRange('a=1:100:1'), parseRange('b=1:100:1')], {})).not.toThrow();
  });
});

describe('walk-forward windows', () => {
  // EUR/USD on whole minutes, GBP/USD half a minute later: 200 candle times
  const two: CandleSeries[] = [
    { symbol: 'EUR/USD', timeframe: 'm1', candles: flat(T0, RISE_THEN_FALL) },
    { symbol: 'GBP/USD', timeframe: 'm1', candles: flat(T0 + 30, RISE_THEN_FALL.map((c) => c + 0.2)) },
  ];
  const eurAt = (i: number) => T0 + 60 * i;
  const gbpAt = (i: number) => T0 + 30 + 60 * i;

  test('folds of equal numbers of candle times, every symbol cut at the same times', () => {
    const folds = splitTimeline(two, 2, 70, ['EUR/USD']);
    expect(folds).toEqual([
      { inSample: { from: eurAt(0), to: eurAt(35), bars: 70, candles: 70 }, outOfSample: { from: eurAt(35), to: eurAt(50), bars: 30, candles: 30 } },
      { inSample: { from: eurAt(50), to: eurAt(85), bars: 70, candles: 70 }, outOfSample: { from: eurAt(85), to: gbpAt(99) + 60, bars: 30, candles: 30 } },
    ]);
    expect(splitTimeline(two, 3, 50, ['EUR/USD']).map((f) => [f.inSample.bars, f.outOfSample.bars])).toEqual([
      [33, 33],
      [34, 33],
      [34, 33],
    ]);
  });

  test('the warm-up gives `warmup` bars of the longest time frame the strategy asks for, as live loads them', () => {
    const from = eurAt(60);
    const to = eurAt(80);
    const cut = (warmup: number, timeframes: Period[] = []) => windowOf(two, from, to, warmup, timeframes).map((s) => s.candles[0]!.ts);
    expect(cut(0)).toEqual([eurAt(60), gbpAt(60)]);
    expect(cut(3)).toEqual([eurAt(57), gbpAt(57)]);
    // m5 bars from m1 candles: three m5 bars are fifteen candles.
    expect(cut(3, ['m1', 'm5'])).toEqual([eurAt(45), gbpAt(45)]);
    expect(windowOf(two, from, to, 3, ['m5']).map((s) => s.candles.length)).toEqual([35, 35]);
  });

  test('each run sees exactly its window: in-sample runs the first part, the chosen set the rest', async () => {
    const saw: { job: SweepJob; bars: string[] }[] = [];
    const p = plan(two, ['amount=10,20'], { folds: 2 });
    await runSweep(p, inThread(p.setup, saw));
    const bars = (from: number, to: number) => Array.from({ length: to - from }, (_, k) => [`EUR/USD@${eurAt(from + k)}`, `GBP/USD@${gbpAt(from + k)}`]).flat();
    // in sample: each set on each fold, in fold order; then each fold's chosen set out of sample
    expect(saw.map((s) => s.bars)).toEqual([bars(0, 35), bars(0, 35), bars(50, 85), bars(50, 85), bars(35, 50), bars(85, 100)]);
    expect(saw.map((s) => s.job.keepRun)).toEqual([false, false, false, false, true, true]);
  });

  test('the out-of-sample runs are joined in time order, each fold carrying on from the P/L of the folds before it', async () => {
    const p = plan(two, ['amount=10,20'], { folds: 2 });
    const { result, outOfSampleReport } = await runSweep(p, inThread(p.setup));
    const alone = await Promise.all(
      p.folds.map((f, k) => runBacktest({ strategy: loadStrategy(TREND), data: windowOf(two, f.outOfSample.from, f.outOfSample.to), params: result.sets[result.folds[k]!.best! - 1]!.params })),
    );
    const carried = alone[0]!.equity[alone[0]!.equity.length - 1]!.equity - 10_000;
    expect(carried).not.toBe(0);
    const expected = [...alone[0]!.equity, ...alone[1]!.equity.map((e) => ({ ...e, balance: e.balance + carried, equity: e.equity + carried }))];
    expect(outOfSampleReport!.equity.map((e) => e.equity)).toEqual(expected.map((e) => expect.closeTo(e.equity, 9)));
    expect(outOfSampleReport!.trades.map((t) => t.tradeId)).toEqual([...alone[0]!.trades.map((t) => `F1-${t.tradeId}`), ...alone[1]!.trades.map((t) => `F2-${t.tradeId}`)]);
    expect(outOfSampleReport!.metrics.netPL).toBeCloseTo(alone[0]!.trades[0]!.pl + alone[1]!.trades[0]!.pl, 9);
    expect(result.summary.outOfSample).toMatchObject({ trades: 2, bars: 60 });
    // The report knows its windows: its charts break their lines between them (the in-sample part of fold 2 lies there).
    expect(outOfSampleReport!.windows).toEqual(p.folds.map((f) => ({ from: f.outOfSample.from * 1000, to: f.outOfSample.to * 1000 })));
  });

  test('every window, in and out of sample, starts with the warmup candles of each series before it as history', async () => {
    const saw: { job: SweepJob; bars: string[] }[] = [];
    const p = plan(two, ['amount=10,20'], { folds: 2, strategyFile: warmStrategy(5) });
    const { result, outOfSampleReport } = await runSweep(p, inThread(p.setup, saw));
    const warm = (i: number) => ['start 5/5', `first bar ${eurAt(i)} 6/5`];
    // in sample: fold 1 (the data's first window: nothing before it), fold 2; then out of sample
    expect(saw.map((s) => s.bars)).toEqual([['start 0/0', `first bar ${eurAt(0)} 1/0`], ['start 0/0', `first bar ${eurAt(0)} 1/0`], warm(50), warm(50), warm(35), warm(85)]);
    // the warm-up neither trades nor counts: each run buys at its window's first bar
    const firstBuy = outOfSampleReport!.trades.map((t) => t.openTime / 1000 - 60);
    expect(firstBuy).toEqual([eurAt(35), eurAt(85)]);
    expect(outOfSampleReport!.startTime).toBe(eurAt(35) * 1000);
    expect(outOfSampleReport!.equity[0]!.ts).toBe((eurAt(35) + 60) * 1000);
    expect(result.folds.map((f) => f.results[0]!.metrics!.netPL)).toEqual([
      expect.closeTo((RISE_THEN_FALL[34]! - (RISE_THEN_FALL[0]! + 0.0002)) * 10_000, 6),
      expect.closeTo((RISE_THEN_FALL[84]! - (RISE_THEN_FALL[50]! + 0.0002)) * 10_000, 6),
    ]);
  });

  test('too few candle times for the folds, or a traded symbol missing from a window, is a usage error', () => {
    expect(() => splitTimeline(eur([1.1, 1.1, 1.1]), 2, 70, ['EUR/USD'])).toThrow('3 candle times cannot make 2 folds with an in-sample and an out-of-sample part each; use fewer --folds');
    const gbpLate: CandleSeries[] = [...eur(RISE_THEN_FALL), { symbol: 'GBP/USD', timeframe: 'm1', candles: flat(T0 + 60 * 80, [1.3, 1.3, 1.3]) }];
    expect(() => splitTimeline(gbpLate, 1, 70, ['EUR/USD', 'GBP/USD'])).toThrow(/^fold 1's in-sample part \(.*\) has no candles of GBP\/USD, which the strategy trades$/);
  });
});

describe('sweep: known answers', () => {
  const grids = ['long=true,false', 'amount=10,20', 'tag=3,1,2'];
  // sets 1-3 long 10, 4-6 long 20, 7-9 short 10, 10-12 short 20 (tag 3, 1, 2 each)
  const moveIn = 1.1069 - (1.1 + 0.0002); // bid at the end less the ask at the start
  const moveOut = 1.1039 - (1.1068 + 0.0002);

  test('the best in-sample set is chosen (ties to the lower set number), tested out of sample, and overfitting is called out', async () => {
    const p = plan(eur(RISE_THEN_FALL), grids);
    const progress: number[] = [];
    const { result, outOfSampleReport } = await runSweep(p, inThread(p.setup), (done, total) => progress.push(done / total));
    const fold = result.folds[0]!;
    expect(fold.inSample).toEqual({ from: '2023-11-14T22:14Z', to: '2023-11-14T23:24Z', bars: 70, candles: 70 });
    expect(fold.best).toBe(4);
    expect(result.sets[3]!.params).toEqual({ long: true, amount: 20, tag: 3 });
    expect(fold.results.map((r) => r.rank)).toEqual([4, 5, 6, 1, 2, 3, 7, 8, 9, 10, 11, 12]);
    expect(fold.results[3]!.metrics!.netPL).toBeCloseTo(moveIn * 20_000, 6);
    expect(fold.results[0]!.metrics!.netPL).toBeCloseTo(moveIn * 10_000, 6);
    expect(fold.results[9]!.metrics!.netPL).toBeCloseTo(-(1.1069 + 0.0002 - 1.1) * 20_000, 6);
    expect(fold.outOfSampleRun!.metrics!.netPL).toBeCloseTo(moveOut * 20_000, 6);
    expect(result.summary.verdict).toBe('overfitted');
    expect(result.summary.efficiency).toBeCloseTo((moveOut * 20_000) / 30 / ((moveIn * 20_000) / 70), 6);
    expect(progress[progress.length - 1]).toBe(1);
    expect(progress).toEqual([...progress].sort((a, b) => a - b));

    // the out-of-sample report is the chosen set's own backtest of that window
    const alone = await runBacktest({ strategy: loadStrategy(TREND), data: windowOf(p.setup.data, p.folds[0]!.outOfSample.from, p.folds[0]!.outOfSample.to), params: result.sets[3]!.params });
    expect(outOfSampleReport!.trades).toEqual(alone.trades.map((t) => ({ ...t, tradeId: `F1-${t.tradeId}` })));
    expect(outOfSampleReport!.equity.map((e) => e.equity)).toEqual(alone.equity.map((e) => e.equity));
  });

  test('a warmup longer than the data before a window gives the candles there are', async () => {
    const saw: { job: SweepJob; bars: string[] }[] = [];
    const p = plan(eur(RISE_THEN_FALL), ['amount=10,20'], { strategyFile: warmStrategy(100) });
    const { result } = await runSweep(p, inThread(p.setup, saw));
    expect(saw.map((s) => s.bars)).toEqual([
      ['start 0/0', `first bar ${T0} 1/0`],
      ['start 0/0', `first bar ${T0} 1/0`],
      ['start 70/0', `first bar ${T0 + 60 * 70} 71/0`],
    ]);
    expect(result.folds[0]!.results[1]!.metrics!.netPL).toBeCloseTo(moveIn * 20_000, 6);
    expect(result.folds[0]!.outOfSampleRun!.metrics!.netPL).toBeCloseTo(moveOut * 20_000, 6);
  });

  test('a trend that goes on holds up out of sample', async () => {
    const rising = Array.from({ length: 100 }, (_, i) => Math.round((1.1 + 0.0001 * i) * 1e5) / 1e5);
    const p = plan(eur(rising), grids);
    const { result } = await runSweep(p, inThread(p.setup));
    expect(result.folds[0]!.best).toBe(4);
    expect(result.summary.verdict).toBe('held up');
    expect(result.summary.efficiency).toBeCloseTo(((0.0029 - 0.0002) * 20_000) / 30 / (((0.0069 - 0.0002) * 20_000) / 70), 6);
  });

  test('lower is better for drawdown; too few trades and n/a objectives are never chosen', async () => {
    const p = plan(eur(RISE_THEN_FALL), grids, { objective: 'maxDrawdown' });
    expect((await runSweep(p, inThread(p.setup))).result.folds[0]!.best).toBe(1); // long, the smaller amount
    const few = plan(eur(RISE_THEN_FALL), grids, { minTrades: 2 });
    const r = (await runSweep(few, inThread(few.setup))).result;
    expect(r.folds[0]!.best).toBeNull();
    expect(r.folds[0]!.results.every((s) => s.status === 'too few trades')).toBe(true);
    expect(r.summary.verdict).toBe('nothing chosen');
    const losing = plan(eur(RISE_THEN_FALL), ['long=false', 'amount=10,20']);
    expect((await runSweep(losing, inThread(losing.setup))).result.summary).toMatchObject({ verdict: 'no in-sample profit', efficiency: null });
    const sharpe = plan(eur(RISE_THEN_FALL), grids, { objective: 'sharpe' });
    expect((await runSweep(sharpe, inThread(sharpe.setup))).result.folds[0]!.results.every((s) => s.status === 'objective n/a')).toBe(true);
  });

  test('a set whose strategy throws is recorded with its error; the others are ranked', async () => {
    const p = plan(eur(RISE_THEN_FALL), ['boom=1,0', 'amount=10,20']);
    const { result } = await runSweep(p, inThread(p.setup));
    const [b10, b20, ok10, ok20] = result.folds[0]!.results;
    for (const failed of [b10!, b20!]) {
      expect(failed).toMatchObject({ status: 'error', rank: null, error: { hook: 'onBar', message: 'boom' } });
      expect(failed.error!.location).toContain(`${TREND}:9:`);
    }
    expect([ok10!.rank, ok20!.rank]).toEqual([2, 1]);
    expect(result.folds[0]!.best).toBe(4);
  });
});

describe('sweep: luck', () => {
  /** Holds a position in direction `long` for `hold` bars, then opens a fresh one: always in the market. */
  const FLIP = path.join(dir, 'flip.js');
  fs.writeFileSync(
    FLIP,
    `module.exports = {
  name: 'flip',
  symbols: ['EUR/USD'],
  params: { long: true, hold: 5 },
  async onBar(ctx) {
    const n = ctx.candles('EUR/USD', 'm1').length;
    if (n % ctx.params.hold !== 1 && ctx.params.hold !== 1) return;
    await ctx.closeAll();
    await ctx.openTrade({ symbol: 'EUR/USD', isBuy: ctx.params.long, amount: 10 });
  },
  async onStop(ctx) {
    await ctx.closeAll();
  },
};
`,
  );
  /** Bid closes of a seeded walk: steps of `sd` pips (normal), plus `drift` pips a bar. */
  function walk(seed: number, bars: number, drift: number, sd = 1): number[] {
    const rng = prng(seed);
    let p = 1.1;
    return Array.from({ length: bars }, () => {
      const z = Math.sqrt(-2 * Math.log(1 - rng())) * Math.cos(2 * Math.PI * rng());
      p += (drift + sd * z) * 0.0001;
      return Math.round(p * 1e5) / 1e5;
    });
  }
  const grids = ['long=true,false', 'hold=2,3,5,8,13,21'];

  test('on a random walk, where no set can have an edge, the sweep says the result is indistinguishable from luck', async () => {
    // seed 5: the chosen sets keep 77% of their in-sample P/L per bar out of sample (one fold
    // losing), which walk-forward efficiency alone called "held up"
    const p = plan(eur(walk(5, 1500, 0)), grids, { folds: 2 });
    const { result } = await runSweep(p, inThread(p.setup));
    expect(result.summary.efficiency).toBeCloseTo(0.774, 3);
    expect(result.folds.map((f) => Math.sign(f.outOfSampleRun!.metrics!.netPL))).toEqual([1, -1]);
    expect(result.summary.verdict).toBe('luck');
    expect(result.summary.luck.inSample).toBeGreaterThan(0.05);
    expect(result.folds.map((f) => f.luck.sets)).toEqual([12, 12]);
  });

  test('a planted edge (a drift up) is not luck: it holds up, in sample after 12 sets and out of sample', async () => {
    const p = plan(eur(walk(5, 1500, 0.5)), grids, { folds: 2 });
    const { result } = await runSweep(p, inThread(p.setup));
    expect(result.folds.map((f) => result.sets[f.best! - 1]!.params.long)).toEqual([true, true]);
    expect(result.summary.luck.inSample).toBeLessThan(0.01);
    expect(result.summary.luck.outOfSample).toBeLessThan(0.01);
    expect(result.summary.verdict).toBe('held up');
  });

  test('the reality check grows with the number of sets tried; Fisher combines folds', () => {
    const rng = prng(7);
    const noise = (n: number) => Array.from({ length: 100 }, () => rng() - 0.5 + n);
    // one series with a small edge: alone it stands out; among 200 noise series its max does not
    const edge = noise(0.06);
    const alone = realityCheck([edge], 1)!;
    const among = realityCheck([edge, ...Array.from({ length: 200 }, () => noise(0))], 1)!;
    expect(alone).toBeLessThan(0.05);
    expect(among).toBeGreaterThan(0.05);
    expect(realityCheck([edge], 1)).toBe(alone); // seeded
    expect(realityCheck([[1, 1, 1]], 1)).toBeNull(); // nothing varies
    expect(fisherCombined([0.5])).toBeCloseTo(0.5, 12);
    expect(fisherCombined([0.04, 0.04])).toBeLessThan(0.04);
    expect(fisherCombined([0.3, 0.6, 0.9])).toBeGreaterThan(0.3);
  });
});

describe('ratelimit-runner sweep (CLI)', () => {
  const CLI = path.join(__dirname, '../../../../dist/src/cli/runner.js');
  const EX = path.join(__dirname, '../../../../examples/strategies/ma-crossover.js');
  const run = (args: string[]) => spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 60000 });
  const candles = path.join(dir, 'eurusd.json');
  fs.writeFileSync(candles, JSON.stringify({ symbol: 'EUR/USD', timeframe: 'm1', candles: wave(T0, 400).map(candleToRow) }));

  /**
   * Counts bars in a module-level variable: a run that inherited another's module would count on
   * from there and never trade. `pause` holds its thread up at the start (so runs finish out of
   * order on several workers), `boom` throws, `quit` ends the thread it runs in.
   */
  const STATEFUL = path.join(dir, 'stateful.js');
  fs.writeFileSync(
    STATEFUL,
    `let bars = 0;
module.exports = {
  name: 'stateful',
  symbols: ['EUR/USD'],
  params: { amount: 10, hold: 5, pause: 0, boom: 0, quit: 0 },
  onStart(ctx) {
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ctx.params.pause);
  },
  async onBar(ctx) {
    bars++;
    if (ctx.params.boom && bars === 3) throw new Error('boom');
    if (ctx.params.quit && bars === 3) process.exit(3);
    if (bars === 2) await ctx.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: ctx.params.amount });
    if (bars === 2 + ctx.params.hold) await ctx.closeAll();
  },
};
`,
  );

  test('--help, and the runner lists the command', () => {
    expect(run(['--help']).stdout).toContain('sweep');
    const h = run(['sweep', '--help']);
    expect(h.status).toBe(0);
    expect(h.stdout).toContain('--range KEY=FROM:TO:STEP');
    expect(h.stdout).toContain("warmed up like paper and live: the\ncandles before the window that make warmup bars of each of the strategy's time frames");
  });

  test('the example: a table, each fold\'s choice, the summary, PATH.json and the out-of-sample report', () => {
    const out = path.join(dir, 'ex');
    const r = run(['sweep', EX, '--candles', candles, '--grid', 'fast=3,5', '--range', 'slow=10:20:5', '--folds', '2', '--report', out]);
    expect(r.stderr).toBe(''); // no progress bar when stderr is not a terminal
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('ma-crossover: 6 parameter sets (fast × slow: 2 × 3), 2 folds, in-sample 70%, objective netPL (higher is better)');
    expect(r.stdout).toMatch(/Fold 2 of 2: in-sample \S+ to \S+ \(140 bars\), out-of-sample to \S+ \(60 bars\)/);
    expect(r.stdout).toMatch(/^ +rank +set +fast +slow +netPL +trades +winRate +maxDrawdown +sharpe +profitFactor$/m);
    expect(r.stdout).toMatch(/^ +\* +1 +\d +\d +\d+ /m);
    expect(r.stdout).toMatch(/Chosen sets out of sample: +net P\/L -?\d+\.\d\d USD over 120 bars/);
    expect(r.stdout).toMatch(/Walk-forward efficiency|made no money in sample/);
    const json = JSON.parse(fs.readFileSync(`${out}.json`, 'utf8'));
    expect(json.sets).toHaveLength(6);
    expect(json.folds.map((f: { results: unknown[] }) => f.results.length)).toEqual([6, 6]);
    expect(JSON.parse(fs.readFileSync(`${out}-oos.json`, 'utf8')).mode).toBe('walk-forward out-of-sample, 2 folds');
    expect(fs.readFileSync(`${out}-oos.html`, 'utf8')).toContain('<svg');
  });

  test('--workers 1 and --workers 2 write byte-identical results; every run starts from a fresh module', () => {
    const args = ['sweep', STATEFUL, '--candles', candles, '--grid', 'pause=100,0', '--grid', 'amount=10,20,30', '--folds', '2', '--quiet'];
    const one = run([...args, '--workers', '1', '--report', path.join(dir, 'w1')]);
    const two = run([...args, '--workers', '2', '--report', path.join(dir, 'w2')]);
    expect([one.status, two.status]).toEqual([0, 0]);
    expect(two.stdout).toContain('on 2 worker thread(s)');
    expect(fs.readFileSync(path.join(dir, 'w2.json'), 'utf8')).toBe(fs.readFileSync(path.join(dir, 'w1.json'), 'utf8'));
    expect(fs.readFileSync(path.join(dir, 'w2-oos.json'), 'utf8')).toBe(fs.readFileSync(path.join(dir, 'w1-oos.json'), 'utf8'));
    const json = JSON.parse(fs.readFileSync(path.join(dir, 'w1.json'), 'utf8'));
    for (const f of json.folds) expect(f.results.map((s: { metrics: { trades: number } }) => s.metrics.trades)).toEqual([1, 1, 1, 1, 1, 1]);
  });

  test('a set that throws or kills its worker is recorded; the others finish, whatever the workers', () => {
    const args = ['sweep', STATEFUL, '--candles', candles, '--grid', 'boom=0,1', '--grid', 'quit=0,1', '--quiet'];
    const two = run([...args, '--workers', '2', '--report', path.join(dir, 'f2')]);
    expect(two.status).toBe(0);
    expect(two.stderr).toContain(`ratelimit-runner sweep: 3 of 4 in-sample backtests failed; the first: fold 1, set 2 (boom=0 quit=1): the worker thread running this set died (exit code 3)`);
    const json = JSON.parse(fs.readFileSync(path.join(dir, 'f2.json'), 'utf8'));
    const results = json.folds[0].results;
    expect(results.map((s: { status: string }) => s.status)).toEqual(['ranked', 'error', 'error', 'error']);
    expect(results[2].error).toMatchObject({ hook: 'onBar', message: 'boom' });
    expect(results[2].error.location).toContain(`${STATEFUL}:11:`);
    expect(json.folds[0].best).toBe(1);
    expect(two.stdout).toMatch(/strategy error in onBar: boom \(at .*stateful\.js:11:\d+\)/);
    run([...args, '--workers', '1', '--report', path.join(dir, 'f1')]);
    expect(fs.readFileSync(path.join(dir, 'f1.json'), 'utf8')).toBe(fs.readFileSync(path.join(dir, 'f2.json'), 'utf8'));
  });

  test('bad arguments exit 2 with the reason; a strategy that fails to load exits 1 with its line', () => {
    const base = ['sweep', EX, '--candles', candles, '--report', path.join(dir, 'never')];
    const cases: [string[], string][] = [
      [['sweep', EX, '--grid', 'fast=3,5'], 'sweep needs --candles FILE'],
      [base, 'sweep needs at least one --grid KEY=V1,V2,... or --range KEY=FROM:TO:STEP'],
      [[...base, '--grid', 'fast='], '--grid fast=: an empty value'],
      [[...base, '--range', 'slow=50:10:5'], '--range slow=50:10:5: TO is below FROM'],
      [[...base, '--range', 'fast=1:200:1', '--range', 'slow=1:60:1'], '12000 parameter sets (fast 200 × slow 60), more than the 10000 a sweep runs'],
      [[...base, '--grid', 'fsat=3,5'], '--grid fsat=3,5: the strategy has no parameter fsat (its parameters: fast, slow, amount, stopPips)'],
      [[...base, '--grid', 'fast=3,5', '--folds', '0'], '--folds must be a whole number of at least 1, got "0"'],
      [[...base, '--grid', 'fast=3,5', '--in-sample', '100'], '--in-sample must be a percentage above 0 and below 100, got "100"'],
      [[...base, '--grid', 'fast=3,5', '--objective', 'profit'], '--objective must be one of netPL, returnPct, plPips, winRate, sharpe, sortino, profitFactor, maxDrawdown, maxDrawdownPct, got "profit"'],
      [[...base, '--grid', 'fast=3,5', '--workers', '1.5'], '--workers must be a whole number of at least 1, got "1.5"'],
      [[...base, '--grid', 'fast=3,5', '--folds', '300'], '400 candle times cannot make 300 folds'],
      [[...base, '--grid', 'fast=3,5', '--log-level', 'debug'], "Unknown option '--log-level'"],
    ];
    for (const [args, message] of cases) {
      const r = run(args);
      expect({ args, status: r.status }).toEqual({ args, status: 2 });
      expect(r.stderr).toContain(`ratelimit-runner sweep: ${message}`);
    }
    const bad = path.join(dir, 'bad.js');
    fs.writeFileSync(bad, "module.exports = {\n  symbols: ['EUR/USD'],\n  onBar( {\n};\n");
    const r = run(['sweep', bad, '--candles', candles, '--grid', 'fast=3,5']);
    expect(r.status).toBe(1);
    expect(r.stderr).toContain(`${bad}:4`);
  });
});
