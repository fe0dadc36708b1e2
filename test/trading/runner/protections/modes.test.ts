/**
 * One price path, the same protections, in a backtest and in a paper run against the simulator
 * (issue 45, item 4): a strategy that buys with a 5-pip stop whenever it holds nothing, on a path
 * falling 10 pips a step, is stopped out three times; the stop-loss guard (3 stops) then locks its
 * entries, in both modes at the same point of the path: the same three trades closed by their
 * stop, then every entry refused with SafetyError `stopLossGuard`, and no open_trade reaching the
 * simulator during the lock. The lock is in the result (the report), in the paper run's view (the
 * control API's status) and in what the run tells (a notification).
 */
import type { BrokerSimulator } from '../../../../src/trading/simulator';
import { runBacktest } from '../../../../src/trading/runner/engine/backtest';
import { buildReport, renderHtml } from '../../../../src/trading/runner/report/report';
import type { Strategy, StrategyContext, Tick } from '../../../../src/trading/runner/strategy';
import { BrokerProxy } from '../../../support/broker-proxy';
import { waitFor } from '../../../support/wait';
import { startSim, TOKEN } from '../../helpers';
import { candle } from '../helpers';
import { closeOpenRuns, startProxiedRun } from '../engine/proxied-run';

const SYM = 'EUR/USD';
const STEPS = 12;
const START = 1.2;
const bidAt = (k: number) => Math.round((START - k * 0.001) * 1e5) / 1e5;

/** What the strategy did, in order: `open`, `stop` (a trade closed by its stop), `refused <rule>`. */
function stoppedOut(said: string[]): Strategy<Record<string, unknown>> {
  // what it holds by its own account: in paper a tick can come between an entry's answer and the
  // broker's push of its trade, when ctx.positions() does not list it yet
  let opening = false;
  let holding = false;
  return {
    name: 'stopped-out',
    symbols: [SYM],
    protections: { stopLossGuard: { stops: 3, withinMin: 600, lockMin: 600 } },
    async onTick(ctx: StrategyContext<Record<string, unknown>>, _t: Tick) {
      if (opening || holding || ctx.positions().length) return;
      opening = true;
      try {
        await ctx.openTrade({ symbol: SYM, isBuy: true, amount: 10, stop: -5, isInPips: true });
        holding = true;
        said.push('open');
      } catch (e) {
        said.push(`refused ${(e as { rule?: string }).rule ?? (e as Error).name}`);
      } finally {
        opening = false;
      }
    },
    onTrade(_ctx, e) {
      if (e.kind !== 'closed') return;
      holding = false;
      said.push(e.reason ?? 'closed');
    },
  };
}

/**
 * Where the lock fell: the entries and stop-outs before the first refusal, and what came after it.
 * (In paper a trade's stop-out and the next entry's answer may be told in either order.)
 */
function lockPoint(said: readonly string[]): { opens: number; stops: number; after: string[] } {
  const first = said.findIndex((x) => x.startsWith('refused'));
  const before = first < 0 ? said : said.slice(0, first);
  return { opens: before.filter((x) => x === 'open').length, stops: before.filter((x) => x === 'stop').length, after: first < 0 ? [] : [...new Set(said.slice(first))] };
}
const AT_THE_LOCK = { opens: 3, stops: 3, after: ['refused stopLossGuard'] };

describe('protections: the same path locks at the same point in backtest and paper', () => {
  let sim: BrokerSimulator;
  let proxy: BrokerProxy;
  beforeAll(async () => {
    sim = await startSim({ tickIntervalMs: undefined });
    proxy = new BrokerProxy();
    await proxy.start(sim.url);
  });
  afterAll(async () => {
    await closeOpenRuns();
    await proxy.stop();
    await sim.stop();
  });

  let backtestSaid: string[] = [];

  test('backtest: three stop-outs, then every entry refused by the stop-loss guard; the lock in the result and the report', async () => {
    const T0 = 1_700_000_040;
    const candles = Array.from({ length: STEPS }, (_, k) => candle(T0 + k * 60, bidAt(Math.max(0, k - 1)), bidAt(Math.max(0, k - 1)), bidAt(k), bidAt(k)));
    const said: string[] = [];
    const r = await runBacktest({ strategy: stoppedOut(said), data: [{ symbol: SYM, timeframe: 'm1', candles }] });
    expect(r.error).toBeUndefined();
    expect(lockPoint(said)).toEqual(AT_THE_LOCK);
    expect(said.filter((x) => x.startsWith('refused')).length).toBeGreaterThanOrEqual(3);
    expect(r.trades.map((t) => t.reason)).toEqual(['stop', 'stop', 'stop']);
    expect(r.locks).toEqual([expect.objectContaining({ rule: 'stopLossGuard', from: r.trades[2]!.closeTime, until: r.trades[2]!.closeTime + 600 * 60_000 })]);
    const html = renderHtml(buildReport(r));
    expect(html).toContain('<h2>Protections</h2>');
    expect(html).toContain('3 stop-outs within 600 min: no new entries for 600 min');
    backtestSaid = said;
  });

  test('paper, the same prices pushed by the simulator: the same trades and refusals, no open_trade during the lock', async () => {
    const said: string[] = [];
    const told: Array<{ kind: string; rule?: unknown }> = [];
    sim.market.setPrice(SYM, bidAt(0));
    const run = await startProxiedRun({ sim, proxy, strategy: stoppedOut(said), engine: { events: (kind, d) => told.push({ kind, rule: d.rule }) } });
    await waitFor(() => run.engine.view().phase === 'running', 'the run to start', 10_000);
    let sentAtLock: number | undefined;
    for (let k = 0; k < STEPS; k++) {
      const before = said.length;
      sim.market.setPrice(SYM, bidAt(k));
      // the step is done when the run's view agrees with the broker's and the strategy has acted on it
      await waitFor(() => run.engine.view().positions.length === sim.engine.snapshot(TOKEN, 'OpenPosition').length && (said.length > before || run.engine.view().positions.length > 0), `step ${k} handled`, 10_000);
      // a tick after a stop-out, as a backtest's hook runs after the candle's triggers; pushed again
      // until the strategy acts on it (a tick may come before the close it follows, or the
      // simulator may send two quick quotes as one)
      if (said[said.length - 1] === 'stop') {
        const again = said.length;
        for (let nudge = 0; nudge < 40 && said.length === again; nudge++) {
          sim.market.setPrice(SYM, bidAt(k));
          await waitFor(() => said.length > again, `the tick after the stop at step ${k}`, 500).catch(() => undefined);
        }
        expect(said.length).toBeGreaterThan(again);
      }
      if (sentAtLock === undefined && run.engine.view().protections.locks.length) sentAtLock = sim.requestCounts()['/trading/open_trade'];
    }
    const view = run.engine.view();
    expect(view.protections.locks).toEqual([expect.objectContaining({ rule: 'stopLossGuard', reason: '3 stop-outs within 600 min: no new entries for 600 min' })]);
    expect(told.filter((t) => t.kind === 'protection_locked')).toEqual([{ kind: 'protection_locked', rule: 'stopLossGuard' }]);
    const result = await run.finish();
    expect(lockPoint(said)).toEqual(AT_THE_LOCK);
    expect(lockPoint(said)).toEqual(lockPoint(backtestSaid));
    expect(said.filter((x) => x.startsWith('refused')).length).toBeGreaterThanOrEqual(3);
    expect(result.trades.map((t) => t.reason)).toEqual(['stop', 'stop', 'stop']);
    expect(result.locks).toHaveLength(1);
    expect(sentAtLock).toBe(3);
    expect(sim.requestCounts()['/trading/open_trade']).toBe(3);
  }, 60_000);
});
