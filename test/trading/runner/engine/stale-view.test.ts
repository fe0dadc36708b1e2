/**
 * Hooks never run on a stale view (issue 42, item 2), against the simulator behind a proxy: the
 * firings of a timer that fall due while a hook runs are one firing with their count, and every
 * push, claim and reconciliation that arrived before a queued hook is handled before it runs —
 * with an answer withheld (the order call settled from its pushes, the coalesced firing sees its
 * trade and opens none) and with a frozen connection (the firings queued during the outage run
 * after the reconciliation, and see the trade the broker stopped out meanwhile as closed). The
 * timers run on a manual clock the test moves on; the network on real time.
 */
import { ManualClock } from '../../../../src/platform/clock';
import type { BrokerSimulator } from '../../../../src/trading/simulator';
import { type LiveResult } from '../../../../src/trading/runner/engine/live';
import type { Strategy, StrategyContext } from '../../../../src/trading/runner/strategy';
import { BrokerProxy } from '../../../support/broker-proxy';
import { waitFor } from '../../../support/wait';
import { once, TOKEN } from '../../helpers';
import { simBehindProxy, startProxiedRun } from './proxied-run';

const SYM = 'EUR/USD';
type Ctx = StrategyContext<Record<string, unknown>>;

/** What a timer firing saw: its count, the run's positions, and the events heard before it. */
interface Firing {
  count: number;
  positions: string[];
  heardBefore: string[];
}

const startRun = (sim: BrokerSimulator, proxy: BrokerProxy, clock: ManualClock, strategy: Strategy<Record<string, unknown>>, requestMs: number) =>
  startProxiedRun({ sim, proxy, strategy, requestMs, engine: { clock } });

/** Moves the timers' clock on by `ms`, one second at a time, letting I/O run in between. */
async function advance(clock: ManualClock, ms: number): Promise<void> {
  for (let done = 0; done < ms; done += 1000) {
    clock.advance(Math.min(1000, ms - done));
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe('hooks never run on a stale view', () => {
  const env = simBehindProxy();
  let clock: ManualClock;
  beforeEach(() => {
    clock = new ManualClock(Date.now());
  });

  test('an answer withheld while the timer falls due four times: one firing with count 4, after the claim and the pushes; one trade', async () => {
    const { sim, proxy } = env;
    const firings: Firing[] = [];
    const heard: string[] = [];
    let opening: Promise<unknown> | undefined;
    let started = false;
    const strategy: Strategy<Record<string, unknown>> = {
      name: 'one-position',
      symbols: [SYM],
      onStart(ctx) {
        ctx.setTimer('check', 1000);
        started = true;
      },
      async onTimer(ctx: Ctx, _name, count) {
        firings.push({ count, positions: ctx.positions().map((p) => p.tradeId), heardBefore: [...heard] });
        if (ctx.positions().length) return;
        opening = ctx.openTrade({ symbol: SYM, isBuy: true, amount: 10 }).catch((e: Error) => e);
        await opening;
      },
      onTrade(_ctx, e) {
        heard.push(`${e.kind} ${e.tradeId}`);
      },
    };
    proxy.withhold('/trading/open_trade');
    const r = await startRun(sim, proxy, clock, strategy, 1500);
    let result: LiveResult;
    try {
      await waitFor(() => started, 'onStart');
      const withheld = once(proxy, 'withheld');
      await advance(clock, 1000);
      await waitFor(() => firings.length === 1, 'the first firing');
      // the call is out, its answer withheld: the timer falls due four times while the hook waits
      await withheld;
      await advance(clock, 4000);
      expect(firings).toHaveLength(1);
      await waitFor(() => firings.length === 2, 'the coalesced firing');
      // nothing more is queued
      await new Promise((r2) => setTimeout(r2, 50));
    } finally {
      result = await r.finish();
    }
    const [trade] = sim.engine.snapshot(TOKEN, 'OpenPosition') as Array<{ tradeId: string }>;
    expect(firings).toEqual([
      { count: 1, positions: [], heardBefore: [] },
      { count: 4, positions: [trade!.tradeId], heardBefore: [`opened ${trade!.tradeId}`] },
    ]);
    expect(sim.engine.snapshot(TOKEN, 'OpenPosition')).toHaveLength(1);
    expect(sim.requestCounts()['/trading/open_trade']).toBe(1);
    expect(result.leftOpen?.positions.map((p) => p.tradeId)).toEqual([trade!.tradeId]);
  });

  test('a frozen connection: the firings queued during the outage run once, after the reconciliation, and see the trade stopped out meanwhile as closed', async () => {
    const { sim, proxy } = env;
    const firings: Firing[] = [];
    const heard: string[] = [];
    const strategy: Strategy<Record<string, unknown>> = {
      name: 'watcher',
      symbols: [SYM],
      async onStart(ctx) {
        await ctx.openTrade({ symbol: SYM, isBuy: true, amount: 10, stop: -20, isInPips: true });
        ctx.setTimer('check', 1000);
      },
      async onTimer(ctx: Ctx, _name, count) {
        firings.push({ count, positions: ctx.positions().map((p) => p.tradeId), heardBefore: [...heard] });
        if (firings.length !== 2) return;
        // this hook waits across the outage: its call's answer is withheld, then times out
        await ctx.setLimit(ctx.positions()[0]!.tradeId, 50, { isInPips: true }).catch((e: Error) => e);
      },
      onTrade(_ctx, e) {
        heard.push(`${e.kind} ${e.tradeId}${e.kind === 'closed' ? ` ${e.reason}` : ''}`);
      },
      onReconnect(_ctx, e) {
        heard.push(`reconnect ${e.reason} closed ${e.closed}`);
      },
    };
    const r = await startRun(sim, proxy, clock, strategy, 4000);
    let result: LiveResult;
    try {
      await waitFor(() => heard.length === 1, 'the trade to open');
      const [open] = sim.engine.snapshot(TOKEN, 'OpenPosition') as Array<{ tradeId: string; stop: number }>;
      await advance(clock, 1000);
      await waitFor(() => firings.length === 1, 'the first firing');
      proxy.withhold('/trading/change_trade_stop_limit');
      const withheld = once(proxy, 'withheld');
      await advance(clock, 1000);
      await withheld;
      // the outage: nothing moves either way; the broker stops the trade out, and nobody hears it
      const down = once(r.client, 'disconnected', 10_000);
      proxy.freeze();
      sim.market.setPrice(SYM, open!.stop - 0.0005);
      await advance(clock, 4000);
      const [reason] = await down;
      expect(reason).toBe('ping timeout');
      proxy.thaw();
      await once(r.client, 'reconciled', 10_000);
      await waitFor(() => firings.length === 3, 'the firing queued during the outage');
    } finally {
      result = await r.finish();
    }
    const [first] = result.trades;
    expect(first).toMatchObject({ reason: 'stop' });
    expect(firings).toEqual([
      { count: 1, positions: [first!.tradeId], heardBefore: [`opened ${first!.tradeId}`] },
      { count: 1, positions: [first!.tradeId], heardBefore: [`opened ${first!.tradeId}`] },
      { count: 4, positions: [], heardBefore: [`opened ${first!.tradeId}`, `closed ${first!.tradeId} stop`, 'reconnect reconnect closed 1'] },
    ]);
  }, 30_000);
});
