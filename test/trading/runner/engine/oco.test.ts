/**
 * OCO semantics, the same in a backtest and against the broker (simulator): the first leg to fill
 * cancels the other; deleting one leg deletes the group (as the broker's delete_order does); an
 * operation on an order that no longer exists rejects with OrderGoneError, which a strategy can
 * catch, and the run goes on.
 */
import { systemClock } from '../../../../src/platform/clock';
import { runBacktest } from '../../../../src/trading/runner/engine/backtest';
import { BrokerCallBudget, accountKey, inProcessDecider } from '../../../../src/trading/runner/broker/call-budget';
import { LiveEngine } from '../../../../src/trading/runner/engine/live';
import type { OrderEvent, Strategy, StrategyContext } from '../../../../src/trading/runner/strategy';
import { newClient, startSim, TOKEN } from '../../helpers';
import { flat } from '../helpers';

type S = Strategy<Record<string, unknown>>;
type Ctx = StrategyContext<Record<string, unknown>>;
const T0 = 1_700_000_040;

/** Deletes the first leg, then the second: what the strategy saw. */
async function deleteBothLegs(ctx: Ctx, seen: { second?: string; cancelled: string[] }): Promise<void> {
  const [a, b] = ctx.orders('EUR/USD');
  await ctx.deleteOrder(a!.orderId);
  expect(ctx.orders('EUR/USD')).toEqual([]);
  try {
    await ctx.deleteOrder(b!.orderId);
    seen.second = 'deleted';
  } catch (e) {
    seen.second = `${(e as Error).name}: ${(e as Error).message}`;
  }
}

const legs = (ctx: Ctx) => {
  const q = ctx.price('EUR/USD')!;
  return ctx.createOco({ symbol: 'EUR/USD', amount: 10, first: { isBuy: true, rate: Math.round((q.ask + 0.01) * 1e5) / 1e5 }, second: { isBuy: false, rate: Math.round((q.bid - 0.01) * 1e5) / 1e5 } });
};

test('backtest: deleting one leg deletes the group; deleting the other then rejects with a catchable OrderGoneError', async () => {
  const seen: { second?: string; cancelled: string[] } = { cancelled: [] };
  let bars = 0;
  const s: S = {
    symbols: ['EUR/USD'],
    async onBar(ctx) {
      bars++;
      if (bars === 1) await legs(ctx);
      if (bars === 2) await deleteBothLegs(ctx, seen);
    },
    onOrder(_ctx, e: OrderEvent) {
      if (e.status === 'cancelled') seen.cancelled.push(e.orderId);
    },
  };
  const r = await runBacktest({ strategy: s, data: [{ symbol: 'EUR/USD', timeframe: 'm1', candles: flat(T0, [1.1, 1.1, 1.1, 1.1]) }] });
  expect(r.error).toBeUndefined();
  expect(bars).toBe(4); // the run went on
  expect(seen.cancelled).toHaveLength(2);
  expect(seen.second).toMatch(/^OrderGoneError: order \S+ no longer exists/);
});

test('paper: the same against the simulator, where the broker deletes the group and its pushes come after the hook', async () => {
  const sim = await startSim({ tickIntervalMs: 20 });
  const { decider } = inProcessDecider([{ name: 'none.yaml', content: 'domain: fxcm\n' }], systemClock);
  const limiter = new BrokerCallBudget({ decider, account: accountKey(TOKEN), clock: systemClock });
  const client = newClient(sim, { beforeRequest: limiter.beforeRequest, reconnect: false });
  const seen: { second?: string; cancelled: string[] } = { cancelled: [] };
  let accepted = 0;
  let placed = false;
  let engine: LiveEngine | undefined;
  const s: S = {
    symbols: ['EUR/USD'],
    async onTick(ctx) {
      if (!placed) {
        placed = true;
        await legs(ctx);
      }
    },
    async onOrder(ctx, e) {
      if (e.status === 'accepted' && ++accepted === 2) await deleteBothLegs(ctx, seen);
      if (e.status === 'cancelled' && seen.cancelled.push(e.orderId) === 2) engine!.stop();
    },
  };
  engine = new LiveEngine({ mode: 'paper', strategy: s, client, limiter, durationMs: 10000 });
  try {
    await client.connect();
    const result = await engine.run();
    expect(result.error).toBeUndefined();
    expect(seen.second).toMatch(/^OrderGoneError: order \S+ no longer exists/);
    expect(seen.cancelled).toHaveLength(2);
    expect(sim.requestCounts()['/trading/delete_order']).toBe(1);
    expect(sim.engine.snapshot(TOKEN, 'Order').filter((o) => o.isEntryOrder === true)).toEqual([]);
  } finally {
    await client.close();
    await limiter.close();
    await sim.stop();
  }
});

test("paper: a trade the broker closed before the runner heard of it: the broker's 'not found' is OrderGoneError, as in a backtest", async () => {
  const sim = await startSim();
  const { decider } = inProcessDecider([{ name: 'none.yaml', content: 'domain: fxcm\n' }], systemClock);
  const limiter = new BrokerCallBudget({ decider, account: accountKey(TOKEN), clock: systemClock });
  const client = newClient(sim, { beforeRequest: limiter.beforeRequest, reconnect: false });
  const seen: string[] = [];
  let engine: LiveEngine | undefined;
  const s: S = {
    symbols: ['EUR/USD'],
    async onStart(ctx) {
      await ctx.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 10, stop: -20, isInPips: true });
    },
    async onTrade(ctx, e) {
      if (e.kind !== 'opened') return;
      // the broker stops the trade out and its pushes are lost: the runner still lists it
      const [open] = sim.engine.snapshot(TOKEN, 'OpenPosition') as Array<{ stop: number }>;
      sim.faults.dropPushes(Infinity, (event) => event !== 'EUR/USD');
      sim.market.setPrice('EUR/USD', open!.stop - 0.0005);
      expect(ctx.positions().map((p) => p.tradeId)).toEqual([e.tradeId]);
      for (const act of [() => ctx.setStop(e.tradeId, -10, { isInPips: true }), () => ctx.closeTrade(e.tradeId)]) {
        await act().catch((err: Error) => seen.push(`${err.name}: ${err.message}`));
      }
      engine!.stop();
    },
  };
  engine = new LiveEngine({ mode: 'paper', strategy: s, client, limiter, durationMs: 10000 });
  try {
    await client.connect();
    const result = await engine.run();
    expect(result.error).toBeUndefined();
    const tradeId = String((sim.engine.snapshot(TOKEN, 'ClosedPosition')[0] as { tradeId: string }).tradeId);
    expect(seen).toEqual([`OrderGoneError: trade ${tradeId} no longer exists (closed)`, `OrderGoneError: trade ${tradeId} no longer exists (closed)`]);
  } finally {
    await client.close();
    await limiter.close();
    await sim.stop();
  }
});
