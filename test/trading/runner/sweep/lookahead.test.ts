/**
 * The lookahead and warm-up checks (sweep/lookahead.ts), their runs in this thread (the CLI's
 * worker threads are tested in test/trading/runner/cli/lookahead-cli.test.ts): planted peeks are
 * caught, through --candles in process.argv and through a --param; the bundled examples pass; a
 * strategy that needs more history than its warmup fails the warm-up check only; one that is not
 * deterministic fails the control run.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { candleProblems, readCandleFile, writeCandleFile, type CandleSeries } from '../../../../src/trading/fxcm/candle-file';
import { changedAfter, compareDecisions, cutPoints, renameArgs, runLookahead, runLookaheadJob, type LookaheadJob, type LookaheadPlan, type LookaheadRunner } from '../../../../src/trading/runner/sweep/lookahead';
import type { Intent } from '../../../../src/trading/runner/engine/backtest';
import { loadStrategy } from '../../../../src/trading/runner/engine/loader';
import { candle } from '../helpers';

const FIXTURES = path.join(__dirname, '../fixtures');
const EXAMPLES = path.join(__dirname, '../../../../examples/strategies');
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rr-lookahead-test-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const T0 = Date.UTC(2026, 10, 16) / 1000;

/** 1200 m1 candles of a wave with some noise, bid/ask 2 pips apart. */
function wavy(n = 1200): CandleSeries {
  const candles = [];
  let p = 1.1;
  for (let i = 0; i < n; i++) {
    const o = p;
    p = Math.round((p + 0.0004 * Math.sin(i / 7) + 0.0001 * Math.cos(i / 3) + 0.00015 * Math.sin(i * 1.3)) * 1e5) / 1e5;
    candles.push(candle(T0 + i * 60, o, Math.max(o, p) + 0.0001, Math.min(o, p) - 0.0001, p));
  }
  return { symbol: 'EUR/USD', timeframe: 'm1', candles };
}

const CANDLES = path.join(dir, 'eur.json');
const data = wavy();
writeCandleFile(CANDLES, data.symbol, data.timeframe, data.candles);

/** Runs the jobs here, one after another, each with its command line in process.argv (as a worker thread has it). */
const inThread: LookaheadRunner = {
  async run(jobs) {
    const out = [];
    for (const job of jobs) {
      const argv = process.argv;
      process.argv = [process.execPath, 'lookahead-worker.js', ...job.argv];
      try {
        out.push(await runLookaheadJob(job));
      } finally {
        process.argv = argv;
      }
    }
    return out;
  },
};

/** A plan for `strategy` over the candle file, its run given `extra` arguments. */
function plan(strategy: string, extra: string[] = [], o: Partial<LookaheadPlan> = {}): LookaheadPlan {
  const s = loadStrategy(strategy);
  const runArgs = [strategy, '--candles', CANDLES, ...extra];
  const params = Object.fromEntries(extra.filter((x, i) => extra[i - 1] === '--param').map((kv) => kv.split('=') as [string, string]));
  return {
    strategy: s.name ?? strategy,
    strategyFile: strategy,
    warmup: s.warmup ?? 0,
    timeframes: s.timeframes ?? [],
    candleFiles: [CANDLES],
    data: [readCandleFile(CANDLES)],
    cuts: 4,
    warmupCheck: true,
    dir: fs.mkdtempSync(path.join(dir, 'run-')),
    jobFor: (label, files, tradeFromTs): LookaheadJob => {
      const args = renameArgs(runArgs, files);
      const renamedParams = Object.fromEntries(Object.entries(params).map(([k, v]) => [k, renameArgs([v], files)[0]!]));
      return { label, strategyFile: strategy, candleFiles: [files.get(CANDLES) ?? CANDLES], fileOptions: {}, options: { params: renamedParams, tradeFromTs }, argv: ['backtest', ...args] };
    },
    ...o,
  };
}

describe('the lookahead check', () => {
  test('a strategy that reads the next close from the file named by --candles in its arguments is caught at every cut', async () => {
    const r = await runLookahead(plan(path.join(FIXTURES, 'peek-next-close.js')), inThread);
    expect(r.error).toBeUndefined();
    expect(r.control).toMatchObject({ changed: 0 });
    expect(r.lookaheadOk).toBe(false);
    expect(r.cuts).toHaveLength(4);
    for (const c of r.cuts) {
      // the decision at the cut peeked at the first changed candle: it went the other way
      expect(c.changed).toBeGreaterThan(0);
      const [first] = c.first!;
      expect(first!.before!.ts).toBeLessThanOrEqual(c.at * 1000);
      expect(first!.before).toMatchObject({ op: 'openTrade' });
      expect((first!.after!.args as { isBuy: boolean }).isBuy).toBe(!(first!.before!.args as { isBuy: boolean }).isBuy);
    }
  });

  test('the same peek through a --param naming the candle file is caught too (the argument is renamed)', async () => {
    const r = await runLookahead(plan(path.join(FIXTURES, 'peek-param.js'), ['--param', `data=${CANDLES}`]), inThread);
    expect(r.error).toBeUndefined();
    expect(r.lookaheadOk).toBe(false);
    expect(r.cuts.every((c) => (c.changed ?? 0) > 0)).toBe(true);
  });

  test.each(['ma-crossover.js', 'ma-crossover.ts'])('the bundled example %s passes both checks', async (file) => {
    const r = await runLookahead(plan(path.join(EXAMPLES, file)), inThread);
    expect(r.error).toBeUndefined();
    expect(r.decisions).toBeGreaterThan(50);
    expect(r.cuts.map((c) => c.changed)).toEqual([0, 0, 0, 0]);
    expect(r.cuts.every((c) => c.atDecision !== undefined && c.compared! >= c.atDecision)).toBe(true);
    expect(r.lookaheadOk).toBe(true);
    expect(r.warmup).toMatchObject({ warmupBars: 20, shortHistory: 20, longHistory: 600, changed: 0 });
    expect(r.warmup!.compared).toBeGreaterThan(20);
    expect(r.warmupOk).toBe(true);
  });

  test('a strategy that needs more history than its warmup fails the warm-up check, and passes the lookahead check', async () => {
    const r = await runLookahead(plan(path.join(FIXTURES, 'short-warmup.js')), inThread);
    expect(r.lookaheadOk).toBe(true);
    expect(r.warmupOk).toBe(false);
    expect(r.warmup).toMatchObject({ warmupBars: 10, shortHistory: 10, longHistory: 600 });
    expect(r.warmup!.changed).toBeGreaterThan(0);
  });

  test('a strategy that is not deterministic fails the control run: the cuts cannot tell', async () => {
    const r = await runLookahead(plan(path.join(FIXTURES, 'coin.js'), [], { warmupCheck: false }), inThread);
    expect(r.control!.changed).toBeGreaterThan(0);
    expect(r.lookaheadOk).toBe(false);
    expect(r.warmup).toBeUndefined();
  });
});

describe('the lookahead check across time frames', () => {
  test('a strategy on EUR/USD m1 that reads the USD/JPY H1 candles and price sees no future (each candle comes at its close)', async () => {
    const usdjpy: CandleSeries = {
      symbol: 'USD/JPY',
      timeframe: 'H1',
      candles: Array.from({ length: 20 }, (_, i) => {
        const o = 150 + 0.4 * Math.sin(i * 1.7);
        const c = 150 + 0.4 * Math.sin((i + 1) * 1.7);
        return candle(T0 + i * 3600, o, Math.max(o, c) + 0.05, Math.min(o, c) - 0.05, c, 0.02);
      }),
    };
    const jpyFile = path.join(dir, 'usdjpy.json');
    writeCandleFile(jpyFile, usdjpy.symbol, usdjpy.timeframe, usdjpy.candles);
    const strategy = path.join(dir, 'cross-tf.js');
    fs.writeFileSync(
      strategy,
      `module.exports = {
  name: 'cross-tf', symbols: ['EUR/USD', 'USD/JPY'],
  async onBar(ctx, bar) {
    if (bar.symbol !== 'EUR/USD') return;
    const q = ctx.price('USD/JPY');
    const [last] = ctx.candles('USD/JPY', 'H1', 1);
    if (!q || !last) return;
    const want = q.bid > last.bidOpen;
    const [open] = ctx.positions('EUR/USD');
    if (open && open.isBuy === want) return;
    await ctx.closeAll('EUR/USD');
    await ctx.openTrade({ symbol: 'EUR/USD', isBuy: want, amount: 10 });
  },
};
`,
    );
    const files = [CANDLES, jpyFile];
    const r = await runLookahead(
      {
        ...plan(strategy, [], { warmupCheck: false }),
        candleFiles: files,
        data: files.map((f) => readCandleFile(f)),
        cuts: 6,
        jobFor: (label, copies) => ({ label, strategyFile: strategy, candleFiles: files.map((f) => copies.get(f) ?? f), fileOptions: {}, options: {}, argv: ['backtest', strategy] }),
      },
      inThread,
    );
    expect(r.error).toBeUndefined();
    expect(r.decisions).toBeGreaterThan(10);
    expect(r.cuts.map((c) => c.changed)).toEqual([0, 0, 0, 0, 0, 0]);
    expect(r.lookaheadOk).toBe(true);
  });
});

describe('its parts', () => {
  test('the candles after a cut are mirrored (rises become falls), valid, and those up to it are the same', () => {
    const cut = T0 + 100 * 60;
    const changed = changedAfter(data, cut, 'eur.json');
    expect(changed.candles.slice(0, 100)).toEqual(data.candles.slice(0, 100));
    expect(changed.candles[100]).not.toEqual(data.candles[100]);
    expect(candleProblems(changed.candles, (i) => `candles[${i}]`)).toEqual([]);
    for (let i = 101; i < 200; i++) {
      const was = data.candles[i]!.bidClose - data.candles[i - 1]!.bidClose;
      const now = changed.candles[i]!.bidClose - changed.candles[i - 1]!.bidClose;
      expect(now).toBeCloseTo(-was, 8);
    }
    // the ask keeps the spread of a constant-spread series
    expect(changed.candles[150]!.askClose - changed.candles[150]!.bidClose).toBeCloseTo(0.0002, 8);
  });

  test('cut points at decisions spread over the run, then at times spread over the data', () => {
    const d = (sec: number): Intent => ({ ts: sec * 1000, op: 'openTrade', args: {}, result: 'ok' });
    const decisions = [d(T0 + 60), d(T0 + 60), d(T0 + 600), d(T0 + 6000), d(T0 + 60_000), d(T0 + 1200 * 60)];
    expect(cutPoints(decisions, [data], 3)).toEqual([
      { at: T0 + 60, atDecision: 2 },
      { at: T0 + 6000, atDecision: 4 },
      { at: T0 + 60_000, atDecision: 5 },
    ]);
    // the decision at the last close has nothing after it: not a cut; too few decisions: times of the data
    const few = cutPoints([d(T0 + 1200 * 60)], [data], 2);
    expect(few).toHaveLength(2);
    expect(few.every((c) => c.atDecision === undefined && c.at < T0 + 1200 * 60)).toBe(true);
  });

  test('decisions compared up to a time; the first few that differ, then a count', () => {
    const d = (sec: number, isBuy: boolean): Intent => ({ ts: sec * 1000, op: 'openTrade', args: { isBuy }, result: 'ok' });
    const a = [d(1, true), d(2, true), d(3, true), d(4, true), d(5, true), d(9, true)];
    const b = [d(1, true), d(2, false), d(3, false), d(4, false), d(5, false), d(9, false)];
    expect(compareDecisions(a, b, 5000)).toMatchObject({ compared: 5, changed: 4, first: [{ index: 2 }, { index: 3 }, { index: 4 }] });
    expect(compareDecisions(a, a)).toMatchObject({ compared: 6, changed: 0, first: [] });
    expect(compareDecisions(a, a.slice(0, 4))).toMatchObject({ changed: 2, first: [{ index: 5, after: undefined }, { index: 6 }] });
  });

  test("the run's arguments name the copies wherever they named a candle file: --candles F, --candles=F, --param K=F, by full path too", () => {
    const files = new Map([['data/eur.json', '/tmp/x/f1/eur.json']]);
    expect(renameArgs(['s.js', '--candles', 'data/eur.json', '--candles=data/eur.json', '--param', `k=${path.resolve('data/eur.json')}`, '--param', 'n=10', '--balance', '5'], files)).toEqual([
      's.js',
      '--candles',
      '/tmp/x/f1/eur.json',
      '--candles=/tmp/x/f1/eur.json',
      '--param',
      'k=/tmp/x/f1/eur.json',
      '--param',
      'n=10',
      '--balance',
      '5',
    ]);
  });
});
