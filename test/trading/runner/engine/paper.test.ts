/** Paper mode against the in-process simulator: limiter, fatal errors, journal + replay. */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { systemClock } from '../../../../src/platform/clock';
import { Journal, readJournal } from '../../../../src/trading/runner/journal/journal';
import { BrokerCallBudget, accountKey, inProcessDecider } from '../../../../src/trading/runner/broker/call-budget';
import { LiveEngine } from '../../../../src/trading/runner/engine/live';
import { replayJournal } from '../../../../src/trading/runner/cli/live-cli';
import { loadStrategy } from '../../../../src/trading/runner/engine/loader';
import type { Strategy } from '../../../../src/trading/runner/strategy';
import type { Faults } from '../../../../src/trading/simulator/faults';
import { newClient, startSim, TOKEN } from '../../helpers';
import { tightBrokerLimits } from '../helpers';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rr-paper-'));

/** open_trade: `perSecond` a second, per account. */
const limits = (perSecond: number) => tightBrokerLimits({ endpoint: 'open_trade', unit: 'second', requestsPerUnit: perSecond });

async function paper(strategy: Strategy<Record<string, unknown>>, o: { perSecond?: number; durationMs: number; journal?: Journal; strategyFile?: string; tickMs?: number; faults?: (f: Faults) => void }) {
  const sim = await startSim({ tickIntervalMs: o.tickMs ?? 20 });
  o.faults?.(sim.faults);
  const { decider } = inProcessDecider(limits(o.perSecond ?? 1000), systemClock);
  const limiter = new BrokerCallBudget({ decider, account: accountKey(TOKEN), clock: systemClock });
  const client = newClient(sim, { beforeRequest: limiter.beforeRequest, reconnect: false });
  const sent: number[] = [];
  const engine = new LiveEngine({ mode: 'paper', strategy, strategyFile: o.strategyFile, client, limiter, journal: o.journal, durationMs: o.durationMs });
  try {
    await client.connect();
    const result = await engine.run();
    return { sim, result, limiter, sent, counts: sim.requestCounts(), openTrades: sim.engine.snapshot(TOKEN, 'OpenPosition') };
  } finally {
    await client.close();
    await limiter.close();
    await sim.stop();
  }
}

describe('paper mode against the simulator', () => {
  test('an aggressive strategy hits the limiter; the simulator never sees a call over the budget', async () => {
    // [before, after] each admitted call: the limiter decided somewhere in between.
    const times: Array<[number, number]> = [];
    let tries = 0;
    const strategy: Strategy<Record<string, unknown>> = {
      name: 'aggressive',
      symbols: ['EUR/USD'],
      async onTick(ctx) {
        tries++;
        try {
          const before = Date.now();
          await ctx.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 10, ttlMs: 30 });
          times.push([before, Date.now()]);
        } catch (e) {
          if ((e as Error).name !== 'IntentExpiredError') throw e;
        }
      },
    };
    const { counts, limiter, result } = await paper(strategy, { perSecond: 3, durationMs: 2500 });
    const n = counts['/trading/open_trade'] ?? 0;
    expect(result.error).toBeUndefined();
    expect(tries).toBeGreaterThan(n);
    expect(n).toBeGreaterThan(0);
    // Fixed one-second windows: at most 3 calls per window. A call that began and ended within one
    // wall-clock second was admitted in that second's window (one that straddles an edge may
    // belong to either, so it is counted in neither).
    const perSecond = new Map<number, number>();
    const seconds = new Set<number>();
    for (const [before, after] of times) {
      const s = Math.floor(before / 1000);
      seconds.add(s).add(Math.floor(after / 1000));
      if (Math.floor(after / 1000) === s) perSecond.set(s, (perSecond.get(s) ?? 0) + 1);
    }
    for (const c of perSecond.values()) expect(c).toBeLessThanOrEqual(3);
    expect(n).toBeLessThanOrEqual(3 * (seconds.size + 1));
    const use = limiter.budget().find((b) => b.endpoint === 'open_trade')!;
    expect(use.sent).toBe(n);
    expect(use.expired).toBeGreaterThan(0);
  });

  test('a strategy that throws: the error and its line are reported, every position is flattened', async () => {
    const f = path.join(dir, 'throws.js');
    fs.writeFileSync(
      f,
      "let n = 0;\nmodule.exports = {\n  name: 'throws', symbols: ['EUR/USD'],\n  async onStart(ctx) { await ctx.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 10 }); },\n  onTick(ctx) {\n    if (ctx.positions().length && ++n > 3) throw new Error('boom');\n  },\n};\n",
    );
    const { result, openTrades, counts } = await paper(loadStrategy(f), { durationMs: 3000, strategyFile: f });
    expect(result.error).toMatchObject({ hook: 'onTick', message: 'boom' });
    expect(result.error!.location?.startsWith(`${f}:6:`)).toBe(true);
    expect(counts['/trading/close_trade']).toBe(1);
    expect(openTrades).toEqual([]);
    expect(result.trades).toHaveLength(1);
    expect(result.trades[0]!.reason).toBe('flatten');
  });

  test('the journal of a paper run replays to the same decisions, bit for bit', async () => {
    const f = path.join(dir, 'decide.js');
    fs.writeFileSync(
      f,
      `module.exports = {
  name: 'decide', symbols: ['EUR/USD'], timeframes: ['m1'],
  onTick(ctx, t) {
    const mine = ctx.positions('EUR/USD');
    if (mine.length === 0 && ctx.orders().length < 2) return ctx.openTrade({ symbol: 'EUR/USD', isBuy: t.bid * 1e5 % 2 < 1, amount: 10, stop: -30, isInPips: true }).then(() => {});
    // a close can race the push of an earlier one: the broker's "not found" is OrderGoneError
    if (mine.length && ctx.now() % 3 === 0) return ctx.closeTrade(mine[0].tradeId).catch((e) => { if (e.name !== 'OrderGoneError') throw e; });
    if (ctx.orders().length === 0) return ctx.createEntryOrder({ symbol: 'EUR/USD', isBuy: true, amount: 10, rate: Math.round((t.ask - 0.005) * 1e5) / 1e5 }).then(() => {});
  },
};
`,
    );
    const jf = path.join(dir, 'decide', 'journal.jsonl');
    const journal = new Journal(jf);
    const { result } = await paper(loadStrategy(f), { durationMs: 2000, journal, strategyFile: f });
    journal.close();
    expect(result.error).toBeUndefined();
    expect(result.intents.length).toBeGreaterThan(5);
    const r = await replayJournal(loadStrategy(f), jf, { strategyFile: f });
    expect(JSON.stringify(r.replayed)).toBe(JSON.stringify(r.recorded));
    expect(r.recorded.length).toBe(result.intents.length);
    // a changed strategy gives different decisions
    const changed = loadStrategy(f);
    const orig = changed.onTick!;
    let k = 0;
    changed.onTick = (ctx, t) => (++k === 10 ? ctx.closeAll() : orig.call(changed, ctx, t));
    const r2 = await replayJournal(changed, jf);
    expect(JSON.stringify(r2.replayed)).not.toBe(JSON.stringify(r2.recorded));
    expect(readJournal(jf)[0]!.k).toBe('run');
  });

  test('--duration counts from onStart: a warm-up slower than the duration still leaves the whole duration to trade', async () => {
    let startedAt = 0;
    let stoppedAt = 0;
    const strategy: Strategy<Record<string, unknown>> = {
      name: 'warm',
      symbols: ['EUR/USD'],
      warmup: 3,
      onStart() {
        startedAt = Date.now();
      },
      onStop() {
        stoppedAt = Date.now();
      },
    };
    const began = Date.now();
    const { result } = await paper(strategy, { durationMs: 300, faults: (f) => f.slowResponses('/candles', 600) });
    expect(result.error).toBeUndefined();
    // Node's timers may fire a millisecond before Date.now() says their time is up.
    expect(startedAt - began).toBeGreaterThanOrEqual(600 - 2);
    expect(stoppedAt - startedAt).toBeGreaterThanOrEqual(300 - 2);
  });
});
