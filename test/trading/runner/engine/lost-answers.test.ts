/**
 * Order calls whose answer is lost (issue 42, item 1), against the simulator behind a proxy that
 * withholds answers, fails calls after the broker ran them and cuts what it pushes: the call is
 * settled from the broker's pushes since it was sent, else from one snapshot within the call
 * budget; what it placed is claimed (positions, events, what the run leaves open, the report), the
 * strategy is told what happened, nothing is resent, and the journal replays the same decisions.
 * Every kind of order the runner sends: market (also requoted), entry, OCO, close, delete.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { BrokerSimulator } from '../../../../src/trading/simulator';
import { readJournal, type JournalLine } from '../../../../src/trading/runner/journal/journal';
import { LiveEngine, type LiveResult } from '../../../../src/trading/runner/engine/live';
import { replayJournal } from '../../../../src/trading/runner/cli/live-cli';
import type { ConfigFile } from '../../../../src/config/types';
import type { OrderEvent, ReconnectEvent, Strategy, StrategyContext, TradeEvent } from '../../../../src/trading/runner/strategy';
import { BrokerProxy } from '../../../support/broker-proxy';
import { waitFor } from '../../../support/wait';
import { once, TOKEN } from '../../helpers';
import { tightBrokerLimits } from '../helpers';
import { simBehindProxy, startProxiedRun } from './proxied-run';

const SYM = 'EUR/USD';
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rr-lost-'));
/** The client's request timeout: a withheld answer becomes a timeout this soon. */
const REQUEST_MS = 800;

type Ctx = StrategyContext<Record<string, unknown>>;

interface Seen {
  /** What each call of `act` resolved with, or the error it rejected with. */
  outcomes: Array<{ value?: unknown; error?: Error }>;
  trades: TradeEvent[];
  orders: OrderEvent[];
  reconnects: ReconnectEvent[];
}

/** A strategy that runs `act` once in onStart (recording its outcome) and records what it hears. */
function acting(seen: Seen, act: (ctx: Ctx) => Promise<unknown>): Strategy<Record<string, unknown>> {
  return {
    name: 'lost',
    symbols: [SYM],
    async onStart(ctx) {
      try {
        seen.outcomes.push({ value: await act(ctx) });
      } catch (e) {
        seen.outcomes.push({ error: e as Error });
      }
    },
    onTrade(_ctx, e) {
      seen.trades.push(e);
    },
    onOrder(_ctx, e) {
      seen.orders.push(e);
    },
    onReconnect(_ctx, e) {
      seen.reconnects.push(e);
    },
  };
}

const startRun = (o: { sim: BrokerSimulator; proxy: BrokerProxy; strategy: Strategy<Record<string, unknown>>; jfile: string; limits?: ConfigFile[]; lostSnapshotTtlMs?: number }) =>
  startProxiedRun({ ...o, requestMs: REQUEST_MS, engine: { lostSnapshotTtlMs: o.lostSnapshotTtlMs } });

const answerOf = (jfile: string, id: number): JournalLine | undefined => readJournal(jfile).find((l) => l.k === 'answer' && l.id === id);
const positions = (sim: BrokerSimulator) => sim.engine.snapshot(TOKEN, 'OpenPosition') as Array<{ tradeId: string; orderId: string; amountK: number }>;
const entryRate = (sim: BrokerSimulator, pips: number) => Math.round((sim.market.quote(SYM)!.ask + pips * 0.0001) * 1e5) / 1e5;

/** The decisions of the journal replayed are the recorded ones, and so are the trades. */
async function expectReplays(strategy: Strategy<Record<string, unknown>>, jfile: string, result: LiveResult): Promise<void> {
  const replay = await replayJournal(strategy, jfile);
  expect(JSON.stringify(replay.replayed)).toBe(JSON.stringify(replay.recorded));
  expect(replay.result.trades).toEqual(result.trades);
}

describe('an order call whose answer is lost', () => {
  const env = simBehindProxy();
  let runs = 0;
  const jfileOf = () => path.join(dir, `run-${++runs}`, 'journal.jsonl');

  test('openTrade: settled from the pushes that came, the trade claimed, the strategy told; nothing resent; the journal replays', async () => {
    const { sim, proxy } = env;
    const seen: Seen = { outcomes: [], trades: [], orders: [], reconnects: [] };
    const strategy = acting(seen, (ctx) => ctx.openTrade({ symbol: SYM, isBuy: true, amount: 10, stop: -20, isInPips: true }));
    proxy.withhold('/trading/open_trade');
    const jfile = jfileOf();
    const r = await startRun({ sim, proxy, strategy, jfile });
    let result: LiveResult;
    try {
      await waitFor(() => seen.outcomes.length === 1 && seen.trades.length === 1, 'the call settled and its trade opened');
    } finally {
      result = await r.finish();
    }
    const [trade] = positions(sim);
    expect(trade).toBeDefined();
    expect(seen.outcomes[0]!.error).toBeUndefined();
    const value = seen.outcomes[0]!.value as { orderId: string; settled: string };
    expect(value.orderId).toBe(trade!.orderId);
    expect(value.settled).toBe(
      `openTrade buy 10 EUR/USD got no answer from the broker (POST /trading/open_trade timed out after ${REQUEST_MS} ms); the broker's pushes since the call show order ${trade!.orderId} (trade ${trade!.tradeId})`,
    );
    expect(seen.trades).toEqual([expect.objectContaining({ kind: 'opened', tradeId: trade!.tradeId, orderId: trade!.orderId })]);
    expect(result.leftOpen?.positions.map((p) => p.tradeId)).toEqual([trade!.tradeId]);
    expect(r.lines).toContain(`warn intent 1: ${value.settled}: claimed by this run`);
    expect(proxy.seen['/trading/open_trade']).toBe(1);
    expect(sim.requestCounts()['/trading/open_trade']).toBe(1);
    // no snapshot was needed
    expect(sim.requestCounts()['/trading/get_model:OpenPosition']).toBe(1);
    expect(answerOf(jfile, 1)).toMatchObject({ ok: true, value: { orderId: trade!.orderId }, claims: [trade!.orderId], lost: 'pushes' });
    await expectReplays(acting({ outcomes: [], trades: [], orders: [], reconnects: [] }, (ctx) => ctx.openTrade({ symbol: SYM, isBuy: true, amount: 10, stop: -20, isInPips: true })), jfile, result);
  });

  test('openTrade answered HTTP 500 after the broker ran it: settled the same way', async () => {
    const { sim, proxy } = env;
    const seen: Seen = { outcomes: [], trades: [], orders: [], reconnects: [] };
    const strategy = acting(seen, (ctx) => ctx.openTrade({ symbol: SYM, isBuy: false, amount: 20 }));
    proxy.inject('/trading/open_trade', { status: 500, body: 'Internal Server Error', headers: { 'content-type': 'text/plain' }, afterBroker: true });
    const r = await startRun({ sim, proxy, strategy, jfile: jfileOf() });
    let result: LiveResult;
    try {
      await waitFor(() => seen.outcomes.length === 1 && seen.trades.length === 1, 'the call settled and its trade opened');
    } finally {
      result = await r.finish();
    }
    const [trade] = positions(sim);
    expect((seen.outcomes[0]!.value as { orderId: string }).orderId).toBe(trade!.orderId);
    expect((seen.outcomes[0]!.value as { settled: string }).settled).toMatch(/^openTrade sell 20 EUR\/USD got no answer from the broker \(POST \/trading\/open_trade: HTTP 500: Internal Server Error\); the broker's pushes since the call show order /);
    expect(result.leftOpen?.positions.map((p) => p.tradeId)).toEqual([trade!.tradeId]);
  });

  test("openTrade requoted by the broker, its answer lost: the order is the run's, and onOrder says it was rejected (requoted)", async () => {
    const { sim, proxy } = env;
    const seen: Seen = { outcomes: [], trades: [], orders: [], reconnects: [] };
    const strategy = acting(seen, (ctx) => ctx.openTrade({ symbol: SYM, isBuy: true, amount: 10 }));
    sim.faults.requoteNext();
    proxy.withhold('/trading/open_trade');
    const r = await startRun({ sim, proxy, strategy, jfile: jfileOf() });
    try {
      await waitFor(() => seen.outcomes.length === 1 && seen.orders.length === 1, 'the call settled and the requote heard');
    } finally {
      await r.finish();
    }
    const value = seen.outcomes[0]!.value as { orderId: string; settled: string };
    expect(value.settled).toMatch(/the broker's pushes since the call show order \d+, requoted by the broker without a trade$/);
    expect(seen.orders).toEqual([expect.objectContaining({ orderId: value.orderId, status: 'rejected', reason: 'requoted' })]);
    expect(positions(sim)).toEqual([]);
  });

  test('createEntryOrder and createOco: the orders their pushes show are claimed (onOrder accepted, ctx.orders())', async () => {
    const { sim, proxy } = env;
    const seen: Seen = { outcomes: [], trades: [], orders: [], reconnects: [] };
    let listed: string[] = [];
    const rates = { entry: entryRate(sim, 100), up: entryRate(sim, 150), down: entryRate(sim, -150) };
    const strategy = acting(seen, async (ctx) => {
      const entry = await ctx.createEntryOrder({ symbol: SYM, isBuy: true, amount: 10, rate: rates.entry });
      const oco = await ctx.createOco({ symbol: SYM, amount: 10, first: { isBuy: true, rate: rates.up }, second: { isBuy: false, rate: rates.down } });
      return { entry, oco };
    });
    strategy.onTimer = undefined;
    const onOrder = strategy.onOrder!;
    strategy.onOrder = (ctx, e) => {
      onOrder.call(strategy, ctx, e);
      listed = ctx.orders().map((o) => o.orderId);
    };
    proxy.withhold('/trading/create_entry_order');
    proxy.withhold('/trading/simple_oco');
    const r = await startRun({ sim, proxy, strategy, jfile: jfileOf() });
    let result: LiveResult;
    try {
      await waitFor(() => seen.outcomes.length === 1 && seen.orders.length === 3, 'both calls settled and their orders accepted');
    } finally {
      result = await r.finish();
    }
    const broker = (sim.engine.snapshot(TOKEN, 'Order') as Array<{ orderId: string; ocoBulkId: number }>).map((o) => o.orderId);
    expect(broker).toHaveLength(3);
    const value = seen.outcomes[0]!.value as { entry: { orderId: string; settled: string }; oco: { orderIds: string[]; settled: string } };
    expect(value.entry.orderId).toBe(broker[0]);
    expect(value.entry.settled).toBe(
      `createEntryOrder buy 10 EUR/USD at ${rates.entry} got no answer from the broker (POST /trading/create_entry_order timed out after ${REQUEST_MS} ms); the broker's pushes since the call show entry order ${broker[0]}`,
    );
    expect(value.oco.orderIds).toEqual([]);
    expect(value.oco.settled).toMatch(new RegExp(`the broker's pushes since the call show OCO orders ${broker[1]} and ${broker[2]}$`));
    expect(seen.orders.map((o) => [o.orderId, o.status])).toEqual(broker.map((id) => [id, 'accepted']));
    expect(listed.sort()).toEqual([...broker].sort());
    expect(result.leftOpen?.orders.map((o) => o.orderId).sort()).toEqual([...broker].sort());
    expect(proxy.seen['/trading/create_entry_order']).toBe(1);
    expect(proxy.seen['/trading/simple_oco']).toBe(1);
  });

  test('closeTrade and deleteOrder: settled from their pushes (the trade closed for the run, the order gone)', async () => {
    const { sim, proxy } = env;
    const seen: Seen = { outcomes: [], trades: [], orders: [], reconnects: [] };
    const rate = entryRate(sim, 100);
    let step = 0;
    const strategy: Strategy<Record<string, unknown>> = {
      name: 'close',
      symbols: [SYM],
      async onStart(ctx) {
        await ctx.openTrade({ symbol: SYM, isBuy: true, amount: 10 });
        await ctx.createEntryOrder({ symbol: SYM, isBuy: true, amount: 10, rate });
      },
      async onTrade(ctx, e) {
        seen.trades.push(e);
        if (e.kind !== 'opened') return;
        proxy.withhold('/trading/close_trade');
        try {
          seen.outcomes.push({ value: await ctx.closeTrade(e.tradeId) });
        } catch (err) {
          seen.outcomes.push({ error: err as Error });
        }
      },
      async onOrder(ctx, e) {
        seen.orders.push(e);
        if (e.status !== 'accepted' || step++ > 0) return;
        proxy.withhold('/trading/delete_order');
        try {
          seen.outcomes.push({ value: await ctx.deleteOrder(e.orderId) });
        } catch (err) {
          seen.outcomes.push({ error: err as Error });
        }
      },
    };
    const r = await startRun({ sim, proxy, strategy, jfile: jfileOf() });
    let result: LiveResult;
    try {
      await waitFor(() => seen.outcomes.length === 2 && seen.trades.length === 2 && seen.orders.filter((o) => o.kind === 'entry').length === 2, 'both calls settled and their ends heard');
    } finally {
      result = await r.finish();
    }
    expect(seen.outcomes.map((o) => o.error)).toEqual([undefined, undefined]);
    expect(seen.trades.map((t) => [t.kind, t.kind === 'closed' ? t.reason : undefined])).toEqual([
      ['opened', undefined],
      ['closed', 'close'],
    ]);
    expect(seen.orders.filter((o) => o.kind === 'entry').map((o) => o.status)).toEqual(['accepted', 'cancelled']);
    expect(result.trades).toHaveLength(1);
    expect(result.leftOpen).toEqual({ positions: [], orders: [] });
    expect(r.lines.filter((l) => / got no answer from the broker /.test(l))).toEqual([
      expect.stringMatching(/^warn intent \d: (closeTrade of trade \d+ got no answer from the broker \(POST \/trading\/close_trade timed out after \d+ ms\); the broker's pushes since the call show trade \d+ closed|deleteOrder of order \d+ got no answer from the broker \(POST \/trading\/delete_order timed out after \d+ ms\); the broker's pushes since the call show order \d+ deleted)$/),
      expect.stringMatching(/^warn intent \d: (closeTrade|deleteOrder) of /),
    ]);
    expect(sim.requestCounts()['/trading/close_trade']).toBe(1);
    expect(sim.requestCounts()['/trading/delete_order']).toBe(1);
  });

  test('the pushes dropped as well: settled from one snapshot (within the budget), the trade claimed from its record', async () => {
    const { sim, proxy } = env;
    const seen: Seen = { outcomes: [], trades: [], orders: [], reconnects: [] };
    const strategy = acting(seen, (ctx) => ctx.openTrade({ symbol: SYM, isBuy: true, amount: 10, limit: 30, isInPips: true }));
    proxy.withhold('/trading/open_trade');
    const jfile = jfileOf();
    // lost from the start (onStart's call may go out before a fault installed later)
    sim.faults.dropPushes(Infinity, (event) => event === 'Order' || event === 'OpenPosition');
    const r = await startRun({ sim, proxy, strategy, jfile });
    let result: LiveResult;
    try {
      await waitFor(() => sim.requestCounts()['/trading/get_model:OpenPosition'] === 1, 'the start-up snapshot');
      await waitFor(() => seen.outcomes.length === 1 && seen.trades.length === 1, 'the call settled and its trade opened');
    } finally {
      result = await r.finish();
    }
    const [trade] = positions(sim);
    const value = seen.outcomes[0]!.value as { orderId: string; settled: string };
    expect(value.orderId).toBe(trade!.orderId);
    expect(value.settled).toMatch(new RegExp(`; the broker's snapshot shows order ${trade!.orderId} \\(trade ${trade!.tradeId}\\)$`));
    expect(seen.trades).toEqual([expect.objectContaining({ kind: 'opened', tradeId: trade!.tradeId })]);
    expect(result.leftOpen?.positions.map((p) => p.tradeId)).toEqual([trade!.tradeId]);
    expect(sim.requestCounts()['/trading/get_model:OpenPosition']).toBe(2);
    expect(answerOf(jfile, 1)).toMatchObject({ ok: true, claims: [trade!.orderId], lost: 'snapshot' });
    await expectReplays(acting({ outcomes: [], trades: [], orders: [], reconnects: [] }, (ctx) => ctx.openTrade({ symbol: SYM, isBuy: true, amount: 10, limit: 30, isInPips: true })), jfile, result);
  });

  test('no pushes and no budget for a snapshot: the strategy hears it may have executed; the budget is kept; the resume claims the trade', async () => {
    const { sim, proxy } = env;
    const seen: Seen = { outcomes: [], trades: [], orders: [], reconnects: [] };
    const act = (ctx: Ctx) => ctx.openTrade({ symbol: SYM, isBuy: true, amount: 10 });
    const strategy = acting(seen, act);
    proxy.withhold('/trading/open_trade');
    const jfile = jfileOf();
    // one OpenPosition snapshot an hour: the start-up snapshot takes it
    const limits = tightBrokerLimits({ endpoint: 'get_model', model: 'OpenPosition', unit: 'hour', requestsPerUnit: 1 });
    // the order's pushes are lost from the start: onStart's call may go out as soon as the start-up
    // snapshot is answered, before a test could install the fault after it
    sim.faults.dropPushes(Infinity, (event) => event === 'Order' || event === 'OpenPosition');
    const r = await startRun({ sim, proxy, strategy, jfile, limits, lostSnapshotTtlMs: 300 });
    let first: LiveResult;
    try {
      await waitFor(() => sim.requestCounts()['/trading/get_model:OpenPosition'] === 1, 'the start-up snapshot');
      await waitFor(() => seen.outcomes.length === 1, 'the call settled');
    } finally {
      first = await r.finish();
    }
    const [trade] = positions(sim);
    expect(trade).toBeDefined();
    const error = seen.outcomes[0]!.error!;
    expect(error.name).toBe('AnswerLostError');
    expect(error.message).toMatch(
      new RegExp(
        `^openTrade buy 10 EUR/USD got no answer from the broker \\(POST /trading/open_trade timed out after ${REQUEST_MS} ms\\) and may have executed: its pushes since show nothing, and no snapshot could be taken \\(intent for get_model expired after waiting \\d+ ms for rate-limit budget; not sent\\); it is not resent: the next reconciliation with the broker \\(after a reconnect or a restart\\) claims what it placed, if anything$`,
      ),
    );
    expect(r.lines).toContain(`error intent 1: ${error.message}`);
    expect(sim.requestCounts()['/trading/get_model:OpenPosition']).toBe(1); // never over the budget
    expect(seen.trades).toEqual([]);
    expect(answerOf(jfile, 1)).toMatchObject({ ok: false, error: { name: 'AnswerLostError' }, watch: { lost: { id: 1, op: 'openTrade', awaitsSnapshot: true } } });
    // the run ended with it unsettled: said, and its journal is not "ended cleanly"
    expect(first.unsettled).toEqual(['intent 1 (openTrade buy 10 EUR/USD)']);
    expect(first.leftOpen).toEqual({ positions: [], orders: [] });

    // run again with the journal (a fresh budget): the reconciliation finds the trade, the run's
    sim.faults.reset();
    const resumed = await startRun({ sim, proxy, strategy: acting({ outcomes: [], trades: [], orders: [], reconnects: [] }, act), jfile });
    const result = await resumed.running.finally(() => resumed.finish());
    expect(resumed.lines).toContain(`warn the reconciliation finds what intent 1 (openTrade buy 10 EUR/USD) placed, though its answer was lost: order ${trade!.orderId}, claimed by this run`);
    expect(result.leftOpen?.positions.map((p) => p.tradeId)).toEqual([trade!.tradeId]);
    expect(result.unsettled).toBeUndefined();
    expect(readJournal(jfile).filter((l) => l.k === 'watched')).toEqual([expect.objectContaining({ id: 1, outcome: `claimed order ${trade!.orderId}` })]);
    expect(sim.requestCounts()['/trading/open_trade']).toBe(1);
    // its watch, the claim of the reconciliation and the 'watched' line replay
    const replay = await replayJournal(acting({ outcomes: [], trades: [], orders: [], reconnects: [] }, act), jfile);
    expect(JSON.stringify(replay.replayed)).toBe(JSON.stringify(replay.recorded));
    expect(replay.result.leftOpen).toBeUndefined();
  });

  test('killed while the answer is withheld (kill -9): the resume settles the call from its snapshot, claims the trade, sends nothing again', async () => {
    const { sim, proxy } = env;
    const act = (ctx: Ctx) => ctx.openTrade({ symbol: SYM, isBuy: false, amount: 30, stop: -25, isInPips: true });
    const seen: Seen = { outcomes: [], trades: [], orders: [], reconnects: [] };
    proxy.withhold('/trading/open_trade');
    const jfile = jfileOf();
    const withheld = once(proxy, 'withheld');
    const r = await startRun({ sim, proxy, strategy: acting(seen, act), jfile });
    try {
      await withheld;
    } finally {
      // nothing more reaches the journal or the broker from this process
      r.journal!.close();
      await r.client.close();
      await r.limiter.close();
      r.engine.stop();
      await r.running.catch(() => undefined);
    }
    const [trade] = positions(sim);
    expect(readJournal(jfile).filter((l) => l.k === 'answer')).toEqual([]);

    const again: Seen = { outcomes: [], trades: [], orders: [], reconnects: [] };
    const resumed = await startRun({ sim, proxy, strategy: acting(again, act), jfile });
    let result: LiveResult;
    try {
      await waitFor(() => again.reconnects.length === 1, 'onReconnect after the resume');
    } finally {
      result = await resumed.finish();
    }
    expect(again.reconnects[0]).toMatchObject({ reason: 'resume', positions: 1 });
    expect(result.leftOpen?.positions.map((p) => p.tradeId)).toEqual([trade!.tradeId]);
    expect(answerOf(jfile, 1)).toMatchObject({ ok: true, value: { orderId: trade!.orderId }, claims: [trade!.orderId] });
    expect(sim.requestCounts()['/trading/open_trade']).toBe(1);
  });

  test('a call that never reached the broker (HTTP 500 before it): not found, said, and nothing is claimed', async () => {
    const { sim, proxy } = env;
    const seen: Seen = { outcomes: [], trades: [], orders: [], reconnects: [] };
    const strategy = acting(seen, (ctx) => ctx.openTrade({ symbol: SYM, isBuy: true, amount: 10 }));
    proxy.inject('/trading/open_trade', { status: 502, body: 'Bad Gateway', headers: { 'content-type': 'text/plain' } });
    const jfile = jfileOf();
    const r = await startRun({ sim, proxy, strategy, jfile });
    let result: LiveResult;
    try {
      await waitFor(() => seen.outcomes.length === 1, 'the call settled');
    } finally {
      result = await r.finish();
    }
    expect(positions(sim)).toEqual([]);
    expect(seen.outcomes[0]!.error?.message).toBe(
      "openTrade buy 10 EUR/USD got no answer from the broker (POST /trading/open_trade: HTTP 502: Bad Gateway) and may have executed: neither the broker's pushes since nor a snapshot show it (no order at the broker matches it); it is not resent, and an order matching it that shows up later is claimed by this run (onOrder / onTrade)",
    );
    // the gateway's status reaches the strategy, and a replay gives it back the same
    expect(seen.outcomes[0]!.error).toMatchObject({ name: 'AnswerLostError', httpStatus: 502 });
    expect(result.leftOpen).toEqual({ positions: [], orders: [] });
    expect(sim.requestCounts()['/trading/open_trade']).toBeUndefined();
    const replayedSeen: Seen = { outcomes: [], trades: [], orders: [], reconnects: [] };
    await new LiveEngine({ mode: 'replay', strategy: acting(replayedSeen, (ctx) => ctx.openTrade({ symbol: SYM, isBuy: true, amount: 10 })), recorded: readJournal(jfile) }).replay();
    expect(replayedSeen.outcomes[0]!.error).toMatchObject({ name: 'AnswerLostError', httpStatus: 502 });
  });
});
