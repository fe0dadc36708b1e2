/**
 * One check for every mode (engine/pre-trade.ts): a table of bad orders, run in a backtest and in a
 * paper run against the simulated broker over the same prices, gets the same outcome for every row
 * (the error's class and rule, or success), and nothing the check refuses reaches the broker.
 * Then the broker's own refusal (when the runner lets a request through) is the same class.
 */
import { systemClock } from '../../../../src/platform/clock';
import { runBacktest } from '../../../../src/trading/runner/engine/backtest';
import { BrokerCallBudget, accountKey, inProcessDecider } from '../../../../src/trading/runner/broker/call-budget';
import { LiveEngine } from '../../../../src/trading/runner/engine/live';
import type { SafetyLimits } from '../../../../src/trading/runner/protections/safety';
import type { Strategy, StrategyContext, Tick } from '../../../../src/trading/runner/strategy';
import { waitFor } from '../../../support/wait';
import { newClient, startSim, TOKEN } from '../../helpers';
import { flat } from '../helpers';

const SYMBOL = 'EUR/USD';
const BID = 1.1;
const ASK = 1.1002;
/** The simulator's account: 50,000 USD, leverage 50 (mmr 0.02); the backtest's the same. */
const BALANCE = 50_000;
const SAFETY: SafetyLimits = { maxPosition: 500, minUsableMarginPct: 80 };

type Ctx = StrategyContext<Record<string, unknown>>;
type Outcome = 'ok' | { name: string; rule?: string };

interface Row {
  what: string;
  /** The trade (a 10K buy) and the entry order (a 10K buy far below) opened before the table. */
  run: (ctx: Ctx, ids: { tradeId: string; orderId: string }) => Promise<unknown>;
  outcome: Outcome;
}

const open = (ctx: Ctx, req: Record<string, unknown>) => ctx.openTrade({ symbol: SYMBOL, isBuy: true, amount: 10, ...req } as never);
const entry = (ctx: Ctx, req: Record<string, unknown>) => ctx.createEntryOrder({ symbol: SYMBOL, isBuy: true, amount: 10, rate: 1.05, ...req } as never);

/** With the trade and the order open: 10K bought, 10K more pending; 50,000 USD of equity, 220 of it in margin. */
const TABLE: Row[] = [
  { what: 'an amount that is not a multiple of 10', run: (ctx) => open(ctx, { amount: 15 }), outcome: { name: 'OrderRejectedError', rule: 'amount' } },
  { what: 'an amount above the broker maximum (1e15)', run: (ctx) => open(ctx, { amount: 1e15 }), outcome: { name: 'OrderRejectedError', rule: 'amount' } },
  { what: 'an order whose margin (880,000) the account does not have', run: (ctx) => open(ctx, { amount: 40_000 }), outcome: { name: 'OrderRejectedError', rule: 'margin' } },
  { what: 'an amount given as text', run: (ctx) => open(ctx, { amount: '10' }), outcome: { name: 'InvalidRequestError', rule: 'amount' } },
  { what: 'no side', run: (ctx) => open(ctx, { isBuy: undefined }), outcome: { name: 'InvalidRequestError', rule: 'isBuy' } },
  { what: 'a trailing step of 5', run: (ctx) => open(ctx, { stop: -20, isInPips: true, trailingStep: 5 }), outcome: { name: 'OrderRejectedError', rule: 'trailing_step' } },
  { what: 'a symbol the strategy does not trade', run: (ctx) => open(ctx, { symbol: 'GBP/USD' }), outcome: { name: 'SafetyError', rule: 'symbol' } },
  { what: "a buy's stop above the price", run: (ctx) => open(ctx, { stop: 1.2 }), outcome: { name: 'InvalidRequestError', rule: 'stop' } },
  { what: 'past the position limit (10 open + 10 pending + 490 > 500)', run: (ctx) => open(ctx, { amount: 490 }), outcome: { name: 'SafetyError', rule: 'maxPosition' } },
  { what: 'a sell the limits let through (0 + 300 of 500; 86% of equity usable after it)', run: (ctx) => open(ctx, { isBuy: false, amount: 300 }).then(() => undefined), outcome: 'ok' },
  {
    what: 'usable margin after the order below 80% (78%; 86% before it)',
    run: (ctx) => open(ctx, { isBuy: false, amount: 200 }),
    outcome: { name: 'SafetyError', rule: 'minUsableMarginPct' },
  },
  { what: 'closing 15 of a 10K trade', run: (ctx, ids) => ctx.closeTrade(ids.tradeId, 15), outcome: { name: 'OrderRejectedError', rule: 'amount' } },
  { what: 'closing 20 of a 10K trade', run: (ctx, ids) => ctx.closeTrade(ids.tradeId, 20), outcome: { name: 'OrderRejectedError', rule: 'amount' } },
  { what: 'closing 0 of it', run: (ctx, ids) => ctx.closeTrade(ids.tradeId, 0), outcome: { name: 'InvalidRequestError', rule: 'amount' } },
  { what: 'an entry order of 15', run: (ctx) => entry(ctx, { amount: 15 }), outcome: { name: 'OrderRejectedError', rule: 'amount' } },
  { what: 'an entry order whose margin the account does not have', run: (ctx) => entry(ctx, { amount: 40_000 }), outcome: { name: 'OrderRejectedError', rule: 'margin' } },
  { what: 'an entry order past the position limit', run: (ctx) => entry(ctx, { amount: 490 }), outcome: { name: 'SafetyError', rule: 'maxPosition' } },
  { what: 'an entry order with a trailing step of 3', run: (ctx) => entry(ctx, { stop: -20, isInPips: true, trailingStep: 3 }), outcome: { name: 'OrderRejectedError', rule: 'trailing_step' } },
  { what: 'an OCO of 15', run: (ctx) => ctx.createOco({ symbol: SYMBOL, amount: 15, first: { isBuy: true, rate: 1.15 }, second: { isBuy: false, rate: 1.05 } }), outcome: { name: 'OrderRejectedError', rule: 'amount' } },
  { what: 'changing the entry order to 15', run: (ctx, ids) => ctx.changeOrder(ids.orderId, 1.05, 15), outcome: { name: 'OrderRejectedError', rule: 'amount' } },
  { what: 'changing it past the position limit', run: (ctx, ids) => ctx.changeOrder(ids.orderId, 1.05, 500), outcome: { name: 'SafetyError', rule: 'maxPosition' } },
  { what: 'a trailing stop step of 5', run: (ctx, ids) => ctx.setStop(ids.tradeId, -20, { isInPips: true, trailingStep: 5 }), outcome: { name: 'OrderRejectedError', rule: 'trailing_step' } },
  { what: 'a valid order', run: (ctx) => open(ctx, { isBuy: false, amount: 10 }).then(() => undefined), outcome: 'ok' },
  { what: 'closing all of the trade', run: (ctx, ids) => ctx.closeTrade(ids.tradeId, 10), outcome: 'ok' },
];

const outcomeOf = (e: unknown): Outcome => {
  const err = e as { name: string; rule?: unknown; field?: unknown };
  const rule = typeof err.rule === 'string' ? err.rule : typeof err.field === 'string' ? err.field : undefined;
  return rule === undefined ? { name: err.name } : { name: err.name, rule };
};

/** Opens the trade and the order, then runs one row a tick (the table's calls never overlap). */
function tableStrategy(rows: readonly Row[]): Strategy<Record<string, unknown>> & { outcomes: Outcome[]; done: boolean; started: boolean; handled: number } {
  const s = {
    name: 'bad-orders',
    symbols: [SYMBOL],
    outcomes: [] as Outcome[],
    done: false,
    started: false,
    handled: 0,
    onStart() {
      s.started = true;
    },
    async onTick(ctx: Ctx, _t: Tick) {
      try {
        if (s.handled === 0) {
          await ctx.openTrade({ symbol: SYMBOL, isBuy: true, amount: 10 });
          await ctx.createEntryOrder({ symbol: SYMBOL, isBuy: true, amount: 10, rate: 1.05 });
          return;
        }
        const [trade] = ctx.positions(SYMBOL);
        const [order] = ctx.orders(SYMBOL);
        if (s.outcomes.length >= rows.length || !trade || !order) return;
        const row = rows[s.outcomes.length]!;
        try {
          await row.run(ctx, { tradeId: trade.tradeId, orderId: order.orderId });
          s.outcomes.push('ok');
        } catch (e) {
          s.outcomes.push(outcomeOf(e));
        }
        if (s.outcomes.length === rows.length) s.done = true;
      } finally {
        s.handled++;
      }
    },
  };
  return s;
}

async function inBacktest(rows: readonly Row[]): Promise<Outcome[]> {
  const s = tableStrategy(rows);
  const r = await runBacktest({ strategy: s, data: [{ symbol: SYMBOL, timeframe: 'm1', candles: flat(1_700_000_040, Array(rows.length + 20).fill(BID), ASK - BID) }], balance: BALANCE, safety: SAFETY });
  expect(r.error).toBeUndefined();
  expect(s.done).toBe(true);
  return s.outcomes;
}

async function inPaper(rows: readonly Row[], beforeRows?: (sim: Awaited<ReturnType<typeof startSim>>) => void): Promise<{ outcomes: Outcome[]; counts: Record<string, number>; errors: unknown[] }> {
  const sim = await startSim({ tickIntervalMs: 0 });
  const { decider } = inProcessDecider([{ name: 'open.yaml', content: 'domain: fxcm\n' }], systemClock);
  const limiter = new BrokerCallBudget({ decider, account: accountKey(TOKEN), clock: systemClock });
  const client = newClient(sim, { beforeRequest: limiter.beforeRequest, reconnect: false });
  const s = tableStrategy(rows);
  const errors: unknown[] = [];
  const wrapped = { ...s, onTick: (ctx: Ctx, t: Tick) => Promise.resolve(s.onTick!(ctx, t)).catch((e: unknown) => void errors.push(e)) };
  const engine = new LiveEngine({ mode: 'paper', strategy: wrapped, client, limiter, safety: SAFETY });
  try {
    await client.connect();
    const run = engine.run();
    await waitFor(() => s.started, 'the paper run to start');
    sim.market.setPrice(SYMBOL, BID, ASK);
    await waitFor(() => s.handled >= 1, 'the first tick');
    beforeRows?.(sim);
    // a tick at a time, each handled before the next; the same prices as the backtest's
    for (let k = 1; !s.done && k < rows.length + 200; k++) {
      const handled = s.handled;
      sim.market.setPrice(SYMBOL, BID, ASK);
      await waitFor(() => s.handled > handled, `tick ${k}`);
    }
    engine.stop();
    const result = await run;
    expect(result.error).toBeUndefined();
    return { outcomes: s.outcomes, counts: sim.requestCounts(), errors };
  } finally {
    await client.close();
    await limiter.close();
    await sim.stop();
  }
}

describe('the pre-trade check of every mode', () => {
  test('the bad-order table: the same outcome in a backtest and in a paper run for every row; what the check refuses is never sent', async () => {
    const expected = TABLE.map((r) => r.outcome);
    const backtest = await inBacktest(TABLE);
    const paper = await inPaper(TABLE);
    const named = (o: Outcome[]) => o.map((x, i) => `${TABLE[i]!.what}: ${x === 'ok' ? 'ok' : `${x.name} ${x.rule ?? ''}`}`);
    expect(named(backtest)).toEqual(named(expected));
    expect(named(paper.outcomes)).toEqual(named(expected));
    expect(paper.errors).toEqual([]);
    // sent: the setup's trade and order, the two valid opens and the one close
    expect(paper.counts['/trading/open_trade']).toBe(3);
    expect(paper.counts['/trading/create_entry_order']).toBe(1);
    expect(paper.counts['/trading/close_trade']).toBe(1);
    expect(paper.counts['/trading/simple_oco']).toBeUndefined();
    expect(paper.counts['/trading/change_order']).toBeUndefined();
    expect(paper.counts['/trading/change_trade_stop_limit']).toBeUndefined();
  }, 60_000);

  test("the broker's own refusal of a request the runner let through is OrderRejectedError too, with its rule and code", async () => {
    const rows: Row[] = [
      { what: 'refused for margin by the broker', run: (ctx) => open(ctx, {}), outcome: { name: 'OrderRejectedError', rule: 'margin' } },
      { what: 'refused in plain text by the broker', run: (ctx) => open(ctx, {}), outcome: { name: 'OrderRejectedError', rule: 'broker' } },
      { what: 'a close refused by the broker', run: (ctx, ids) => ctx.closeTrade(ids.tradeId), outcome: { name: 'OrderRejectedError', rule: 'amount' } },
    ];
    const seen: unknown[] = [];
    const withCodes: Row[] = rows.map((r) => ({ ...r, run: (ctx, ids) => r.run(ctx, ids).catch((e) => (seen.push(e), Promise.reject(e))) }));
    const paper = await inPaper(withCodes, (sim) => {
      sim.faults.failNext('/trading/open_trade', { code: 3, message: 'Not enough usable margin', parameters: ['220.04', '100.00'] });
      sim.faults.failNext('/trading/open_trade', 'Market is closed');
      sim.faults.failNext('/trading/close_trade', { code: 3, message: 'Amount should be divisible by 10', parameters: ['10'] });
    });
    expect(paper.outcomes).toEqual(rows.map((r) => r.outcome));
    expect(seen.map((e) => [(e as Error).message, (e as { code?: number }).code, ((e as Error).cause as Error | undefined)?.name])).toEqual([
      ['the broker refused it: Not enough usable margin (220.04, 100.00)', 3, 'FxcmApiError'],
      ['the broker refused it: Market is closed', undefined, 'FxcmApiError'],
      ['the broker refused it: Amount should be divisible by 10 (10)', 3, 'FxcmApiError'],
    ]);
  }, 60_000);
});
