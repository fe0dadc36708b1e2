/**
 * One execution model: a backtest and a paper run against the simulated broker, of the same
 * strategy over the same prices, open and close the same trades at the same rates for the same
 * reasons (market orders, entry stop and limit orders, stops and limits in pips, fixed and
 * dynamic trailing stops).
 */
import { systemClock } from '../../../../src/platform/clock';
import { runBacktest } from '../../../../src/trading/runner/engine/backtest';
import type { ClosedTrade } from '../../../../src/trading/runner/results';
import { BrokerCallBudget, accountKey, inProcessDecider } from '../../../../src/trading/runner/broker/call-budget';
import { LiveEngine } from '../../../../src/trading/runner/engine/live';
import type { Strategy, StrategyContext, Tick } from '../../../../src/trading/runner/strategy';
import { waitFor } from '../../../support/wait';
import { newClient, startSim, TOKEN } from '../../helpers';
import { flat } from '../helpers';

const SYMBOL = 'EUR/USD';
const SPREAD = 0.0002;
const r5 = (x: number) => Math.round(x * 1e5) / 1e5;
/** Bids that swing about ±33 pips, a few pips a tick, so stops, limits, entries and trailing stops all trigger. */
const BIDS = Array.from({ length: 160 }, (_, k) => r5(1.1 + 0.003 * Math.sin(k / 12) + 0.0003 * Math.sin(k * 1.7)));

type Ctx = StrategyContext<Record<string, unknown>>;

/** Decides on ticks only (a backtest's tick is its candle's close), from the tick count and the positions. */
function strategy(): Strategy<Record<string, unknown>> & { ctx?: Ctx; handled: number } {
  const s = {
    name: 'every-order-kind',
    symbols: [SYMBOL],
    handled: 0,
    ctx: undefined as Ctx | undefined,
    onStart(ctx: Ctx) {
      s.ctx = ctx;
    },
    async onTick(ctx: Ctx, t: Tick) {
      const k = s.handled;
      if (k === 0) {
        await ctx.openTrade({ symbol: SYMBOL, isBuy: true, amount: 10, stop: -20, limit: 30, isInPips: true });
        await ctx.openTrade({ symbol: SYMBOL, isBuy: false, amount: 10, stop: -15, isInPips: true, trailingStep: 10 });
        await ctx.openTrade({ symbol: SYMBOL, isBuy: true, amount: 30, stop: -10, isInPips: true, trailingStep: 1 });
        await ctx.createEntryOrder({ symbol: SYMBOL, isBuy: true, amount: 10, rate: r5(t.ask + 0.001), stop: -10, limit: 10, isInPips: true });
        await ctx.createEntryOrder({ symbol: SYMBOL, isBuy: false, amount: 20, rate: r5(t.bid + 0.0008), stop: -12, isInPips: true });
      } else if (k === 20) {
        // near the top: the stop follows the fall in 10-pip steps
        await ctx.openTrade({ symbol: SYMBOL, isBuy: false, amount: 10, stop: -15, isInPips: true, trailingStep: 10 });
      } else if (k === 57) {
        // near the bottom: the stop follows the rise by tenths of a pip
        await ctx.openTrade({ symbol: SYMBOL, isBuy: true, amount: 40, stop: -10, isInPips: true, trailingStep: 1 });
      } else if (k === BIDS.length - 3) {
        await ctx.openTrade({ symbol: SYMBOL, isBuy: false, amount: 10 });
      } else if (k === BIDS.length - 1) {
        await ctx.closeAll();
      } else if (k % 10 === 0 && ctx.positions().length === 0) {
        await ctx.openTrade({ symbol: SYMBOL, isBuy: k % 20 === 0, amount: 10, stop: -8, limit: 8, isInPips: true });
      }
      s.handled++;
    },
  };
  return s;
}

const fills = (trades: ClosedTrade[]) =>
  trades
    .map((t) => ({ isBuy: t.isBuy, amount: t.amount, openRate: t.openRate, closeRate: t.closeRate, reason: t.reason, plPips: Math.round(t.plPips * 10) / 10, pl: Math.round(t.pl * 100) / 100 }))
    .sort((a, b) => a.openRate - b.openRate || a.closeRate - b.closeRate || a.amount - b.amount);

/** 0.3 pip and a quarter of the spread worse on market orders, stops and stop entries. */
const SLIPPAGE = { pips: 0.3, spreadShare: 0.25 };

async function backtestFills(slippage?: typeof SLIPPAGE) {
  const s = strategy();
  const result = await runBacktest({ strategy: s, data: [{ symbol: SYMBOL, timeframe: 'm1', candles: flat(1_700_000_040, BIDS, SPREAD) }], balance: 50000, slippage });
  expect(result.error).toBeUndefined();
  return fills(result.trades);
}

async function paperFills(slippage?: typeof SLIPPAGE) {
  const sim = await startSim({ tickIntervalMs: 0, slippage });
  const { decider } = inProcessDecider([{ name: 'open.yaml', content: 'domain: fxcm\n' }], systemClock);
  const limiter = new BrokerCallBudget({ decider, account: accountKey(TOKEN), clock: systemClock });
  const client = newClient(sim, { beforeRequest: limiter.beforeRequest, reconnect: false });
  const s = strategy();
  const engine = new LiveEngine({ mode: 'paper', strategy: s, client, limiter });
  const ids = (xs: string[]) => xs.sort().join();
  // the runner sees what the broker holds: its trades, its resting entry orders, its closed trades
  const inStep = () =>
    ids(s.ctx!.positions().map((p) => p.tradeId)) === ids([...sim.engine.trades.keys()]) &&
    ids(s.ctx!.orders().map((o) => o.orderId)) === ids([...sim.engine.orders.values()].filter((o) => o.isEntry).map((o) => o.orderId)) &&
    closedSeen === sim.engine.closed.length;
  let closedSeen = 0;
  s.onTrade = (_ctx, e) => {
    if (e.kind === 'closed') closedSeen++;
  };
  try {
    await client.connect();
    const run = engine.run();
    await waitFor(() => s.ctx !== undefined, 'the paper run to start');
    for (let k = 0; k < BIDS.length; k++) {
      sim.market.setPrice(SYMBOL, BIDS[k]!, r5(BIDS[k]! + SPREAD));
      await waitFor(() => s.handled === k + 1 && inStep(), `the runner to handle tick ${k}`);
    }
    engine.stop();
    const result = await run;
    expect(result.error).toBeUndefined();
    return fills(result.trades);
  } finally {
    await client.close();
    await limiter.close();
    await sim.stop();
  }
}

test('a backtest and a paper run of one strategy over the same prices fill the same trades', async () => {
  const backtest = await backtestFills();
  const paper = await paperFills();
  expect(new Set(backtest.map((t) => t.reason))).toEqual(new Set(['stop', 'limit', 'trailing', 'close']));
  expect(paper).toEqual(backtest);
}, 60_000);

test('with slippage too: the one fill model slips market orders, stops and stop entries alike in both', async () => {
  const backtest = await backtestFills(SLIPPAGE);
  expect(backtest).not.toEqual(await backtestFills());
  expect(await paperFills(SLIPPAGE)).toEqual(backtest);
}, 60_000);
