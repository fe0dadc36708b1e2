/**
 * A paper run whose broker stream drops (or whose broker restarts) while its trades live on: the
 * reconnect reconciles with the broker like a resume does, journals it, logs it and tells the
 * strategy (onTrade closed with the broker's P/L, onOrder filled / onTrade opened for an entry
 * order that filled meanwhile, onReconnect), and the report counts what happened while away.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { systemClock } from '../../../../src/platform/clock';
import type { LogWriter } from '../../../../src/telemetry/logger';
import type { BrokerSimulator } from '../../../../src/trading/simulator';
import { Journal, readJournal } from '../../../../src/trading/runner/journal/journal';
import { BrokerCallBudget, accountKey, inProcessDecider } from '../../../../src/trading/runner/broker/call-budget';
import { LiveEngine, type LiveResult } from '../../../../src/trading/runner/engine/live';
import { replayJournal } from '../../../../src/trading/runner/cli/live-cli';
import type { OrderEvent, Position, ReconnectEvent, Strategy, TradeEvent } from '../../../../src/trading/runner/strategy';
import { waitFor } from '../../../support/wait';
import { newClient, startSim, TOKEN } from '../../helpers';
import { tightBrokerLimits } from '../helpers';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rr-reconnect-'));
const START_BALANCE = 50000;

interface Seen {
  trades: TradeEvent[];
  orders: OrderEvent[];
  reconnects: ReconnectEvent[];
  /** ctx.positions() in onReconnect. */
  positionsThen: Position[][];
}

/** Opens a buy with a 20-pip stop and, with `entryRate`, a buy stop entry order; records what it hears. */
function awayStrategy(seen: Seen): Strategy<Record<string, unknown>> {
  return {
    name: 'away',
    symbols: ['EUR/USD'],
    async onStart(ctx) {
      await ctx.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 10, stop: -20, isInPips: true });
      const entryRate = ctx.params.entryRate as number | undefined;
      if (entryRate) await ctx.createEntryOrder({ symbol: 'EUR/USD', isBuy: true, amount: 10, rate: entryRate });
    },
    onTrade(_ctx, e) {
      seen.trades.push(e);
    },
    onOrder(_ctx, e) {
      seen.orders.push(e);
    },
    onReconnect(ctx, e) {
      seen.reconnects.push(e);
      seen.positionsThen.push(ctx.positions());
    },
  };
}

function capture(): { log: LogWriter; lines: string[] } {
  const lines: string[] = [];
  const at = (level: string) => (msg: string) => void lines.push(`${level} ${msg}`);
  return { lines, log: { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') } };
}

/** A paper run on a fresh simulator (no price ticks but the test's); `params` may read the market. */
async function paperRun(name: string, paramsOf: (sim: BrokerSimulator) => Record<string, unknown> = () => ({})) {
  const sim = await startSim();
  const params = paramsOf(sim);
  const { decider } = inProcessDecider(tightBrokerLimits({ endpoint: 'open_trade', unit: 'second', requestsPerUnit: 1000 }), systemClock);
  const limiter = new BrokerCallBudget({ decider, account: accountKey(TOKEN), clock: systemClock });
  const client = newClient(sim, { beforeRequest: limiter.beforeRequest });
  const jfile = path.join(dir, name, 'journal.jsonl');
  const journal = new Journal(jfile);
  const seen: Seen = { trades: [], orders: [], reconnects: [], positionsThen: [] };
  const { log, lines } = capture();
  const strategy = awayStrategy(seen);
  const engine = new LiveEngine({ mode: 'paper', strategy, params, client, limiter, journal, logger: log });
  await client.connect();
  const running = engine.run();
  const finish = async () => {
    try {
      engine.stop();
      return await running;
    } finally {
      journal.close();
      await client.close();
      await limiter.close();
      await sim.stop();
    }
  };
  return { sim, client, engine, seen, lines, jfile, strategy, params, finish };
}

type Closed = { tradeId: string; close: number; grossPL: number; com: number };

describe('a paper run across a broker outage', () => {
  test('dropped connection, trade stopped out meanwhile: closed event with the broker P/L, positions, journal, log, report', async () => {
    const r = await paperRun('drop');
    let stopped: Closed | undefined;
    let result: LiveResult;
    try {
      await waitFor(() => r.seen.trades.some((e) => e.kind === 'opened'), 'the trade to open');
      const [open] = r.sim.engine.snapshot(TOKEN, 'OpenPosition') as Array<{ tradeId: string; stop: number }>;
      // While the stream is down the price falls through the stop: the broker closes the trade and
      // its pushes reach nobody.
      r.client.once('disconnected', () => {
        r.sim.market.setPrice('EUR/USD', open!.stop - 0.0005);
        stopped = (r.sim.engine.snapshot(TOKEN, 'ClosedPosition') as Closed[]).find((c) => c.tradeId === open!.tradeId);
      });
      expect(r.sim.faults.disconnect()).toBe(1);
      await waitFor(() => r.seen.reconnects.length === 1, 'onReconnect');
      expect(stopped).toBeDefined();
      const closed = r.seen.trades.filter((e) => e.kind === 'closed');
      expect(closed).toEqual([expect.objectContaining({ tradeId: open!.tradeId, reason: 'stop', closeRate: stopped!.close })]);
      expect(closed[0]!.pl).toBeCloseTo(stopped!.grossPL - stopped!.com, 9);
      expect(r.seen.positionsThen).toEqual([[]]);
      expect(r.seen.reconnects[0]).toMatchObject({ reason: 'reconnect', closed: 1, opened: 0, positions: 0, orders: 0 });
      expect(r.lines.some((l) => l.startsWith('warn broker connection lost'))).toBe(true);
      expect(r.lines).toContain(`info trade ${open!.tradeId} was closed while the runner was away: stop at ${stopped!.close}, P/L ${(stopped!.grossPL - stopped!.com).toFixed(2)}`);
      expect(r.lines.some((l) => l.startsWith('info reconciled with the broker after the reconnect'))).toBe(true);
    } finally {
      result = await r.finish();
    }
    expect(result.error).toBeUndefined();
    expect(result.trades).toEqual([expect.objectContaining({ tradeId: stopped!.tradeId, reason: 'stop' })]);
    const balance = r.sim.account(TOKEN).balance;
    expect(balance).toBeLessThan(START_BALANCE);
    expect(result.trades[0]!.pl).toBeCloseTo(balance - START_BALANCE, 6);
    const lines = readJournal(r.jfile);
    expect(lines.some((l) => l.k === 'disconnected')).toBe(true);
    expect(lines.filter((l) => l.k === 'snapshot').map((l) => l.reason)).toEqual(['start', 'reconnect']);
    // a resume after the reconnect replays the reconciliation: the same decisions and the same close
    const replay = await replayJournal(r.strategy, r.jfile);
    expect(JSON.stringify(replay.replayed)).toBe(JSON.stringify(replay.recorded));
    expect(replay.result.trades).toEqual(result.trades);
  });

  test('broker restarted while away: the stopped trade is closed, the entry order that filled is reported as filled and opened', async () => {
    const r = await paperRun('restart', (sim) => ({ entryRate: Math.round((sim.market.quote('EUR/USD')!.ask + 0.001) * 1e5) / 1e5 }));
    const entryRate = r.params.entryRate as number;
    let result: LiveResult;
    try {
      await waitFor(() => r.seen.trades.some((e) => e.kind === 'opened') && r.seen.orders.some((e) => e.status === 'accepted'), 'the trade and the entry order');
      const [open] = r.sim.engine.snapshot(TOKEN, 'OpenPosition') as Array<{ tradeId: string; stop: number }>;
      const entryId = r.seen.orders.find((e) => e.status === 'accepted')!.orderId;
      await r.sim.restart(() => {
        r.sim.market.setPrice('EUR/USD', entryRate + 0.0005); // the entry order fills
        r.sim.market.setPrice('EUR/USD', open!.stop - 0.0005); // the first trade is stopped out
      });
      expect(r.sim.faults.fired.restarts).toBe(1);
      await waitFor(() => r.seen.reconnects.length === 1, 'onReconnect');
      const [filled] = r.sim.engine.snapshot(TOKEN, 'OpenPosition') as Array<{ tradeId: string; orderId: string }>;
      expect(filled!.orderId).toBe(entryId);
      expect(r.seen.trades.filter((e) => e.kind === 'closed').map((e) => [e.tradeId, e.reason])).toEqual([[open!.tradeId, 'stop']]);
      expect(r.seen.orders.filter((e) => e.status === 'filled' && e.kind === 'entry')).toEqual([expect.objectContaining({ orderId: entryId, tradeId: filled!.tradeId })]);
      expect(r.seen.trades.filter((e) => e.kind === 'opened').map((e) => [e.tradeId, e.orderId])).toEqual([
        [open!.tradeId, expect.any(String)],
        [filled!.tradeId, entryId],
      ]);
      expect(r.seen.reconnects[0]).toMatchObject({ reason: 'reconnect', closed: 1, opened: 1, positions: 1, orders: 0 });
      expect(r.seen.positionsThen[0]!.map((p) => p.tradeId)).toEqual([filled!.tradeId]);
    } finally {
      result = await r.finish();
    }
    expect(result.trades.map((t) => t.reason)).toEqual(['stop']);
    expect(result.leftOpen?.positions.map((p) => p.tradeId)).toEqual([r.seen.orders.find((e) => e.status === 'filled' && e.kind === 'entry')!.tradeId]);
  });
});
