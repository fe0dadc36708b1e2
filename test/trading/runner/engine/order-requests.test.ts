/**
 * Malformed order requests are refused alike in a backtest and in a paper run, with an error naming
 * the field, and nothing is sent or booked; rates go out rounded to the instrument's precision.
 */
import { systemClock } from '../../../../src/platform/clock';
import { runBacktest } from '../../../../src/trading/runner/engine/backtest';
import { BrokerCallBudget, accountKey, inProcessDecider } from '../../../../src/trading/runner/broker/call-budget';
import { LiveEngine } from '../../../../src/trading/runner/engine/live';
import { checkEntryOrder, checkOpenTrade, checkTradeLevel, InvalidRequestError } from '../../../../src/trading/runner/engine/order-requests';
import type { Strategy, StrategyContext, Tick } from '../../../../src/trading/runner/strategy';
import { waitFor } from '../../../support/wait';
import { newClient, startSim, TOKEN } from '../../helpers';
import { flat, tightBrokerLimits } from '../helpers';

type S = Strategy<Record<string, unknown>>;
type Ctx = StrategyContext<Record<string, unknown>>;
const SYM = 'EUR/USD';

/** Each bad request (given the quote it meets) and the error it must get. */
const BAD: { what: string; send: (ctx: Ctx, q: Tick) => Promise<unknown>; error: RegExp }[] = [
  { what: 'amount as a string', send: (ctx) => ctx.openTrade({ symbol: SYM, isBuy: true, amount: '10' as unknown as number }), error: /^amount must be a positive number, got '10'$/ },
  { what: 'stop NaN', send: (ctx) => ctx.openTrade({ symbol: SYM, isBuy: true, amount: 10, stop: NaN }), error: /^stop must be a finite number, got NaN$/ },
  { what: "a buy's stop above the price", send: (ctx, q) => ctx.openTrade({ symbol: SYM, isBuy: true, amount: 10, stop: q.ask + 0.001 }), error: /^stop must be below the price for the stop of a buy \(bid [0-9.]+\), got [0-9.]+$/ },
  { what: "a sell's stop below the price", send: (ctx, q) => ctx.openTrade({ symbol: SYM, isBuy: false, amount: 10, stop: q.bid - 0.001 }), error: /^stop must be above the price for the stop of a sell \(ask [0-9.]+\), got [0-9.]+$/ },
  { what: "a buy's limit below the price", send: (ctx, q) => ctx.openTrade({ symbol: SYM, isBuy: true, amount: 10, limit: q.bid - 0.001 }), error: /^limit must be above the price for the limit of a buy/ },
  { what: 'a stop in pips that is positive', send: (ctx) => ctx.openTrade({ symbol: SYM, isBuy: true, amount: 10, stop: 20, isInPips: true }), error: /^stop must be a negative distance in pips/ },
  { what: 'a missing isBuy', send: (ctx) => ctx.openTrade({ symbol: SYM, amount: 10 } as never), error: /^isBuy must be true or false, got undefined$/ },
  { what: 'entry rate NaN', send: (ctx) => ctx.createEntryOrder({ symbol: SYM, isBuy: true, amount: 10, rate: NaN }), error: /^rate must be a positive number, got NaN$/ },
  { what: 'entry rate -1', send: (ctx) => ctx.createEntryOrder({ symbol: SYM, isBuy: true, amount: 10, rate: -1 }), error: /^rate must be a positive number, got -1$/ },
  { what: 'entry rate Infinity', send: (ctx) => ctx.createEntryOrder({ symbol: SYM, isBuy: true, amount: 10, rate: Infinity }), error: /^rate must be a positive number, got Infinity$/ },
  { what: "an entry buy's stop above its rate", send: (ctx) => ctx.createEntryOrder({ symbol: SYM, isBuy: true, amount: 10, rate: 1.05, stop: 1.06 }), error: /^stop must be below the price for the stop of a buy \(rate 1.05\), got 1.06$/ },
  { what: 'an OCO leg without isBuy', send: (ctx) => ctx.createOco({ symbol: SYM, amount: 10, first: { isBuy: true, rate: 1.2 }, second: { rate: 1.0 } as never }), error: /^second.isBuy must be true or false, got undefined$/ },
  { what: 'a missing request', send: (ctx) => ctx.openTrade(undefined as never), error: /^openTrade request must be an object, got undefined$/ },
];

/** A strategy that sends every bad request on its first tick and records what each got. */
function tryAll(seen: Map<string, string>): S {
  let done = false;
  return {
    name: 'malformed',
    symbols: [SYM],
    async onTick(ctx, q) {
      if (done) return;
      done = true;
      for (const b of BAD) {
        try {
          await b.send(ctx, q);
          seen.set(b.what, 'accepted');
        } catch (e) {
          seen.set(b.what, `${(e as Error).name}: ${(e as Error).message}`);
        }
      }
    },
  };
}

function expectAllRefused(seen: Map<string, string>): void {
  for (const b of BAD) {
    const got = seen.get(b.what) ?? 'not tried';
    expect({ what: b.what, name: got.split(': ')[0] }).toEqual({ what: b.what, name: 'InvalidRequestError' });
    expect(got.slice('InvalidRequestError: '.length)).toMatch(b.error);
  }
}

describe('one check of order requests for every mode', () => {
  test('backtest: every malformed request is refused naming its field; nothing is booked', async () => {
    const seen = new Map<string, string>();
    const r = await runBacktest({ strategy: tryAll(seen), data: [{ symbol: SYM, timeframe: 'm1', candles: flat(1_700_000_040, [1.1, 1.1, 1.1]) }] });
    expect(r.error).toBeUndefined();
    expectAllRefused(seen);
    expect(r.trades).toEqual([]);
    expect(r.intents.filter((i) => i.result === 'ok')).toEqual([]);
  });

  test('paper: the same requests are refused the same way; the broker receives none of them', async () => {
    const sim = await startSim({ tickIntervalMs: 20 });
    const { decider } = inProcessDecider(tightBrokerLimits({ endpoint: 'open_trade', unit: 'second', requestsPerUnit: 1000 }), systemClock);
    const limiter = new BrokerCallBudget({ decider, account: accountKey(TOKEN), clock: systemClock });
    const client = newClient(sim, { beforeRequest: limiter.beforeRequest, reconnect: false });
    const seen = new Map<string, string>();
    const strategy = tryAll(seen);
    const engine = new LiveEngine({ mode: 'paper', strategy, client, limiter });
    const tried = new Promise<void>((resolve) => {
      const onTick = strategy.onTick!;
      strategy.onTick = async (ctx, t) => {
        await onTick.call(strategy, ctx, t);
        if (seen.size === BAD.length) resolve();
      };
    });
    try {
      await client.connect();
      const run = engine.run();
      await tried;
      engine.stop();
      const result = await run;
      expect(result.error).toBeUndefined();
      expectAllRefused(seen);
      const counts = sim.requestCounts();
      for (const ep of ['/trading/open_trade', '/trading/create_entry_order', '/trading/simple_oco']) expect(counts[ep] ?? 0).toBe(0);
    } finally {
      await client.close();
      await limiter.close();
      await sim.stop();
    }
  });

  test('paper: rates go to the broker rounded to the instrument precision', async () => {
    const sim = await startSim({ tickIntervalMs: 20 });
    const { decider } = inProcessDecider(tightBrokerLimits({ endpoint: 'open_trade', unit: 'second', requestsPerUnit: 1000 }), systemClock);
    const limiter = new BrokerCallBudget({ decider, account: accountKey(TOKEN), clock: systemClock });
    const client = newClient(sim, { beforeRequest: limiter.beforeRequest, reconnect: false });
    let sent: (() => void) | undefined;
    const placed = new Promise<void>((r) => (sent = r));
    let stop = 0;
    let rate = 0;
    const strategy: S = {
      name: 'unrounded',
      symbols: [SYM],
      async onTick(ctx, q) {
        if (!sent) return;
        const go = sent;
        sent = undefined;
        // float noise of the kind arithmetic makes: 1.0899900000000001 and the like
        stop = q.bid - 0.01 + 1e-17 * 3 + 0.000001 / 3;
        rate = q.ask - 0.02 + 0.000001 / 3;
        await ctx.openTrade({ symbol: SYM, isBuy: true, amount: 10, stop });
        await ctx.createEntryOrder({ symbol: SYM, isBuy: true, amount: 10, rate });
        go();
      },
    };
    const engine = new LiveEngine({ mode: 'paper', strategy, client, limiter });
    try {
      await client.connect();
      const run = engine.run();
      await placed;
      const round5 = (x: number) => Math.round(x * 1e5) / 1e5;
      expect(round5(stop)).not.toBe(stop);
      expect(round5(rate)).not.toBe(rate);
      await waitFor(() => sim.engine.snapshot(TOKEN, 'OpenPosition').length > 0, 'the trade at the simulator');
      const trades = sim.engine.snapshot(TOKEN, 'OpenPosition');
      expect(trades[0]!.stop).toBe(round5(stop));
      const orders = sim.engine.snapshot(TOKEN, 'Order').filter((o) => o.isEntryOrder === true);
      expect(orders.map((o) => o.buy)).toEqual([round5(rate)]);
      engine.stop();
      await run;
    } finally {
      await client.close();
      await limiter.close();
      await sim.stop();
    }
  });

  test('the checks themselves: values rounded, quotes optional, a stop removed with 0', () => {
    const quote = () => ({ bid: 1.1, ask: 1.1002 });
    expect(checkOpenTrade({ symbol: SYM, isBuy: true, amount: 10, stop: 1.0899900000000001 }, quote).stop).toBe(1.08999);
    expect(checkOpenTrade({ symbol: 'USD/JPY', isBuy: false, amount: 10, stop: 150.12345 }, () => ({ bid: 145, ask: 145.03 })).stop).toBe(150.123);
    // without a quote yet, the side of a market order's stop cannot be checked (the type still is)
    expect(checkOpenTrade({ symbol: SYM, isBuy: true, amount: 10, stop: 1.3 }, () => undefined).stop).toBe(1.3);
    expect(checkEntryOrder({ symbol: SYM, isBuy: false, amount: 10, rate: 1.2, stop: -15, limit: 30, isInPips: true })).toMatchObject({ rate: 1.2, stop: -15, limit: 30 });
    expect(checkTradeLevel('stop', { symbol: SYM, isBuy: true }, 0, undefined, quote())).toEqual({ rate: 0, opts: {} });
    expect(() => checkTradeLevel('stop', { symbol: SYM, isBuy: true }, 1.1001, undefined, quote())).toThrow(new InvalidRequestError('rate', 'rate must be below the price for the stop of a buy (bid 1.1), got 1.1001'));
    expect(() => checkTradeLevel('stop', { symbol: SYM, isBuy: false }, 1.2, { trailingStep: '10' }, quote())).toThrow(new InvalidRequestError('trailingStep', "trailingStep must be a finite number, got '10'"));
  });
});
