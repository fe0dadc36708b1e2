/**
 * Two runs on one account, one after the other: a run sees and acts on the trades and orders its
 * own calls opened; another run's are visible only account-wide, refused without it, untouched by
 * closeAll and by the flatten after a strategy error, and absent from its report.
 */
import { systemClock } from '../../../../src/platform/clock';
import type { BrokerSimulator } from '../../../../src/trading/simulator';
import { BrokerCallBudget, accountKey, inProcessDecider } from '../../../../src/trading/runner/broker/call-budget';
import { LiveEngine, type LiveResult } from '../../../../src/trading/runner/engine/live';
import type { Strategy } from '../../../../src/trading/runner/strategy';
import { waitFor } from '../../../support/wait';
import { newClient, startSim, TOKEN } from '../../helpers';
import { tightBrokerLimits } from '../helpers';

/** Runs a strategy on the simulator until it stops itself (a strategy error) or `until` holds. */
async function runOn(sim: BrokerSimulator, strategy: Strategy<Record<string, unknown>>, until?: () => boolean): Promise<LiveResult> {
  const { decider } = inProcessDecider(tightBrokerLimits({ endpoint: 'open_trade', unit: 'second', requestsPerUnit: 1000 }), systemClock);
  const limiter = new BrokerCallBudget({ decider, account: accountKey(TOKEN), clock: systemClock });
  const client = newClient(sim, { beforeRequest: limiter.beforeRequest });
  const engine = new LiveEngine({ mode: 'paper', strategy, client, limiter });
  try {
    await client.connect();
    const running = engine.run();
    if (until) {
      await waitFor(until, `${strategy.name} to be done`);
      engine.stop();
    }
    return await running;
  } finally {
    await client.close();
    await limiter.close();
  }
}

describe('a run owns the trades and orders it opened', () => {
  let sim: BrokerSimulator;
  beforeAll(async () => {
    sim = await startSim();
  });
  afterAll(async () => {
    await sim.stop();
  });

  test("another run's trade and order: not in ctx.positions()/orders(), refused, left alone by closeAll and the flatten, not in the report", async () => {
    // Run A opens a trade and an entry order and leaves them open.
    let aDone = false;
    const entryRate = Math.round((sim.market.quote('EUR/USD')!.ask - 0.01) * 1e5) / 1e5;
    const a = await runOn(
      sim,
      {
        name: 'a',
        symbols: ['EUR/USD'],
        async onStart(ctx) {
          await ctx.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 10 });
          await ctx.createEntryOrder({ symbol: 'EUR/USD', isBuy: true, amount: 10, rate: entryRate });
        },
        onTrade() {
          aDone = true;
        },
      },
      () => aDone,
    );
    const [foreignTrade] = sim.engine.snapshot(TOKEN, 'OpenPosition') as Array<{ tradeId: string }>;
    const [foreignOrder] = sim.engine.snapshot(TOKEN, 'Order') as Array<{ orderId: string }>;
    expect(a.leftOpen).toEqual({
      positions: [expect.objectContaining({ tradeId: foreignTrade!.tradeId })],
      orders: [expect.objectContaining({ orderId: foreignOrder!.orderId, rate: entryRate })],
    });

    // Run B, on the same account, sees them only account-wide, is refused acting on them, closes
    // its own trade with closeAll, opens another and throws: the flatten closes only that one.
    sim.resetCounters();
    const seen: Record<string, unknown> = {};
    let opened = 0;
    const b = await runOn(sim, {
      name: 'b',
      symbols: ['EUR/USD'],
      async onStart(ctx) {
        seen.positions = ctx.positions();
        seen.orders = ctx.orders();
        seen.accountPositions = ctx.positions(undefined, { accountWide: true }).map((p) => p.tradeId);
        seen.accountOrders = ctx.orders('EUR/USD', { accountWide: true }).map((o) => o.orderId);
        const refusals: string[] = [];
        for (const act of [() => ctx.setStop(foreignTrade!.tradeId, -20, { isInPips: true }), () => ctx.closeTrade(foreignTrade!.tradeId), () => ctx.deleteOrder(foreignOrder!.orderId)]) {
          await act().catch((e: Error) => refusals.push(`${e.name}: ${e.message}`));
        }
        seen.refusals = refusals;
        await ctx.openTrade({ symbol: 'EUR/USD', isBuy: false, amount: 10 });
      },
      async onTrade(ctx, e) {
        if (e.kind !== 'opened') return;
        if (++opened === 1) {
          seen.ownAtFirstOpen = ctx.positions().map((p) => p.tradeId);
          await ctx.closeAll();
          await ctx.openTrade({ symbol: 'EUR/USD', isBuy: false, amount: 10 });
        } else throw new Error('boom');
      },
    });
    expect(seen.positions).toEqual([]);
    expect(seen.orders).toEqual([]);
    expect(seen.accountPositions).toEqual([foreignTrade!.tradeId]);
    expect(seen.accountOrders).toEqual([foreignOrder!.orderId]);
    expect(seen.refusals).toEqual([
      `SafetyError: trade ${foreignTrade!.tradeId} was not opened by this run (another run's, or opened outside the runner); pass { accountWide: true } to act on it`,
      `SafetyError: trade ${foreignTrade!.tradeId} was not opened by this run (another run's, or opened outside the runner); pass { accountWide: true } to act on it`,
      `SafetyError: order ${foreignOrder!.orderId} was not opened by this run (another run's, or opened outside the runner); pass { accountWide: true } to act on it`,
    ]);
    expect(seen.ownAtFirstOpen).toHaveLength(1);
    expect(seen.ownAtFirstOpen).not.toContain(foreignTrade!.tradeId);
    expect(b.error).toMatchObject({ hook: 'onTrade', message: 'boom' });
    expect(b.error!.notFlattened).toBeUndefined();
    // A's trade and order are still there; B's two trades were closed (closeAll, then the flatten)
    await waitFor(() => b.trades.length === 2, "B's two closes in its result");
    expect((sim.engine.snapshot(TOKEN, 'OpenPosition') as Array<{ tradeId: string }>).map((t) => t.tradeId)).toEqual([foreignTrade!.tradeId]);
    expect((sim.engine.snapshot(TOKEN, 'Order') as Array<{ orderId: string }>).map((o) => o.orderId)).toEqual([foreignOrder!.orderId]);
    expect(b.trades.map((t) => [t.isBuy, t.reason])).toEqual([
      [false, 'close'],
      [false, 'flatten'],
    ]);
    expect(b.trades.map((t) => t.tradeId)).not.toContain(foreignTrade!.tradeId);
    expect(b.leftOpen).toEqual({ positions: [], orders: [] });
    const counts = sim.requestCounts();
    expect(counts['/trading/change_trade_stop_limit']).toBeUndefined();
    expect(counts['/trading/delete_order']).toBeUndefined();
    expect(counts['/trading/close_all_for_symbol']).toBeUndefined();
    expect(counts['/trading/close_trade']).toBe(2);
  });
});
