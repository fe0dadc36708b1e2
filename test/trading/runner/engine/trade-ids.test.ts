/**
 * How a strategy finds the trade an order opened: openTrade resolves with the order id, and the
 * trade's `opened` event carries it beside the trade id — in a backtest and against the broker.
 */
import { systemClock } from '../../../../src/platform/clock';
import { runBacktest } from '../../../../src/trading/runner/engine/backtest';
import { BrokerCallBudget, accountKey, inProcessDecider } from '../../../../src/trading/runner/broker/call-budget';
import { LiveEngine } from '../../../../src/trading/runner/engine/live';
import type { Strategy, TradeEvent } from '../../../../src/trading/runner/strategy';
import { newClient, startSim, TOKEN } from '../../helpers';
import { flat } from '../helpers';

type S = Strategy<Record<string, unknown>>;

/** A strategy that opens one trade and records what openTrade answered and what onTrade said. */
function opener(done?: () => void): { strategy: S; seen: { orderId?: string; opened?: TradeEvent } } {
  const seen: { orderId?: string; opened?: TradeEvent } = {};
  const strategy: S = {
    symbols: ['EUR/USD'],
    async onTick(ctx) {
      if (seen.orderId !== undefined) return;
      seen.orderId = 'pending';
      seen.orderId = (await ctx.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 10 })).orderId;
    },
    onTrade(ctx, e) {
      if (e.kind !== 'opened') return;
      seen.opened = e;
      expect(ctx.positions().map((p) => p.tradeId)).toContain(e.tradeId);
      done?.();
    },
  };
  return { strategy, seen };
}

test('backtest: the opened event names the order openTrade answered with', async () => {
  const { strategy, seen } = opener();
  const r = await runBacktest({ strategy, data: [{ symbol: 'EUR/USD', timeframe: 'm1', candles: flat(1_700_000_040, [1.1, 1.1]) }] });
  expect(r.error).toBeUndefined();
  expect(seen.orderId).toMatch(/\S/);
  expect(seen.opened).toMatchObject({ orderId: seen.orderId, tradeId: expect.any(String) });
});

test('paper: the same against the simulator', async () => {
  const sim = await startSim({ tickIntervalMs: 20 });
  const { decider } = inProcessDecider([{ name: 'none.yaml', content: 'domain: fxcm\n' }], systemClock);
  const limiter = new BrokerCallBudget({ decider, account: accountKey(TOKEN), clock: systemClock });
  const client = newClient(sim, { beforeRequest: limiter.beforeRequest, reconnect: false });
  let engine: LiveEngine | undefined;
  const { strategy, seen } = opener(() => engine!.stop());
  engine = new LiveEngine({ mode: 'paper', strategy, client, limiter, durationMs: 10000 });
  try {
    await client.connect();
    const result = await engine.run();
    expect(result.error).toBeUndefined();
    expect(seen.orderId).toMatch(/^\d+$/);
    expect(seen.opened).toMatchObject({ orderId: seen.orderId, tradeId: expect.stringMatching(/^\d+$/) });
  } finally {
    await client.close();
    await limiter.close();
    await sim.stop();
  }
});
