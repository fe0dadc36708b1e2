/**
 * The operator's actions on a paper run (run-controls.ts), against the simulator: pause and stop
 * lock new entries at once, an entry already waiting for broker budget included (it never reaches
 * the simulator); a close of one of the run's trades is recorded with the reason `operator`, one of
 * another's or an unknown id is refused with nothing sent; flatten leaves the broker flat and
 * entries locked, and a resume of the journal after a kill keeps the lock (nothing re-opened)
 * until the operator resumes. Each action is in the journal, and a replay gives the same intents.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { readJournal } from '../../../../src/trading/runner/journal/journal';
import { LiveEngine } from '../../../../src/trading/runner/engine/live';
import { ActionRefused } from '../../../../src/trading/runner/engine/run-controls';
import type { Strategy, StrategyContext } from '../../../../src/trading/runner/strategy';
import { waitFor } from '../../../support/wait';
import { TOKEN } from '../../helpers';
import { tightBrokerLimits } from '../helpers';
import { simBehindProxy, startProxiedRun } from './proxied-run';

const SYM = 'EUR/USD';
type Ctx = StrategyContext<Record<string, unknown>>;
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rr-controls-'));

/** open_trade once an hour: a second entry waits for budget for as long as the test needs. */
const ONE_A_MINUTE = tightBrokerLimits({ endpoint: 'open_trade', unit: 'hour', requestsPerUnit: 1 });

describe("the operator's actions", () => {
  const env = simBehindProxy({ tickIntervalMs: 50 });

  /** Opens one trade, then a second that waits for budget; what the second got. */
  const twoEntries = (outcome: { error?: Error; waiting?: boolean }): Strategy<Record<string, unknown>> => ({
    name: 'two-entries',
    symbols: [SYM],
    async onStart(ctx: Ctx) {
      await ctx.openTrade({ symbol: SYM, isBuy: true, amount: 10 });
      outcome.waiting = true;
      await ctx.openTrade({ symbol: SYM, isBuy: true, amount: 10 }).catch((e: Error) => (outcome.error = e));
    },
  });

  test.each([
    ['pause', 'paused'],
    ['stop', 'stopping'],
  ] as const)('%s while an entry waits for budget: it never leaves, and the strategy is told why (SafetyError %s)', async (action, rule) => {
    const { sim, proxy } = env;
    const outcome: { error?: Error; waiting?: boolean } = {};
    const jfile = path.join(dir, `waiting-${action}.jsonl`);
    const run = await startProxiedRun({ sim, proxy, strategy: twoEntries(outcome), limits: ONE_A_MINUTE, jfile });
    await waitFor(() => outcome.waiting === true && run.limiter.budget().some((u) => u.endpoint === 'open_trade' && u.sent === 1), 'the second entry to wait for budget', 10_000);
    const done = await run.engine.act({ action });
    expect(done.lock?.by).toBe(action);
    await waitFor(() => outcome.error !== undefined, 'the waiting entry to be refused', 10_000);
    expect(outcome.error).toMatchObject({ name: 'SafetyError', rule });
    expect(sim.requestCounts()['/trading/open_trade']).toBe(1);
    if (action === 'pause') expect(run.engine.view().protections.locks.map((l) => l.rule)).toEqual([rule]);
    const result = await run.finish();
    expect(sim.requestCounts()['/trading/open_trade']).toBe(1);
    const lines = readJournal(jfile);
    expect(lines.filter((l) => l.k === 'control').map((l) => l.action)).toEqual([action]);
    // A replay of the journal makes the same decisions, the refusal included.
    const replayed = await new LiveEngine({ mode: 'replay', strategy: twoEntries({}), recorded: lines }).replay();
    expect(replayed.intents.map((i) => i.op)).toEqual(result.intents.map((i) => i.op));
  }, 30_000);

  test("close: one of the run's trades closes for the reason 'operator'; another's, an unknown one or more than it holds is refused, nothing sent", async () => {
    const { sim, proxy } = env;
    const { accountId } = sim.engine.account(TOKEN);
    sim.engine.openTrade(TOKEN, { account_id: accountId, symbol: SYM, is_buy: 'false', amount: '20', order_type: 'AtMarket', time_in_force: 'GTC' });
    await waitFor(() => sim.engine.snapshot(TOKEN, 'OpenPosition').length === 1, "the other client's trade");
    const [foreign] = sim.engine.snapshot(TOKEN, 'OpenPosition') as Array<{ tradeId: string }>;
    const strategy: Strategy<Record<string, unknown>> = {
      name: 'one',
      symbols: [SYM],
      async onStart(ctx: Ctx) {
        await ctx.openTrade({ symbol: SYM, isBuy: true, amount: 30 });
      },
    };
    const run = await startProxiedRun({ sim, proxy, strategy });
    await waitFor(() => run.engine.view().positions.length === 1, 'the run to hold its trade', 10_000);
    const own = run.engine.view().positions[0]!.tradeId;
    sim.resetCounters();
    const refused = async (a: Parameters<LiveEngine['act']>[0]) => run.engine.act(a).then(() => 'accepted', (e: unknown) => (e instanceof ActionRefused ? `${e.status} ${e.message}` : `thrown ${String(e)}`));
    expect(await refused({ action: 'close', tradeId: foreign!.tradeId })).toBe(`409 trade ${foreign!.tradeId} is not this run's (another run's, or the account's): the run leaves it alone`);
    expect(await refused({ action: 'close', tradeId: '999' })).toBe(`404 trade 999 is not one of this run's open trades (they are ${own})`);
    expect(await refused({ action: 'close', tradeId: own, amount: 40 })).toBe(`409 trade ${own} holds 30K: 40K cannot be closed`);
    expect(sim.requestCounts()['/trading/close_trade']).toBeUndefined();
    expect(await run.engine.act({ action: 'close', tradeId: own, amount: 10 })).toMatchObject({ message: `trade ${own}: 10K closed` });
    await waitFor(() => run.engine.view().positions[0]?.amount === 20, 'the partial close pushed', 10_000);
    expect(await run.engine.act({ action: 'close', tradeId: own })).toMatchObject({ message: `trade ${own}: 20K closed` });
    await waitFor(() => run.engine.view().positions.length === 0, 'the trade closed', 10_000);
    const result = await run.finish();
    expect(result.trades.map((t) => [t.tradeId, t.amount, t.reason])).toEqual([
      [own, 10, 'operator'],
      [own, 20, 'operator'],
    ]);
    expect(sim.engine.snapshot(TOKEN, 'OpenPosition')).toEqual([expect.objectContaining({ tradeId: foreign!.tradeId })]);
  }, 30_000);

  test('flatten: the broker flat and entries locked; a resume after a kill keeps the lock and re-opens nothing, until resume', async () => {
    const { sim, proxy } = env;
    const jfile = path.join(dir, 'flatten.jsonl');
    const attempts: string[] = [];
    /** Holds one trade: at every timer firing, opens one when it has none. */
    const keepOne = (): Strategy<Record<string, unknown>> => ({
      name: 'keep-one',
      symbols: [SYM],
      onStart(ctx: Ctx) {
        ctx.setTimer('check', 100);
      },
      async onTimer(ctx: Ctx) {
        if (ctx.positions().length) return;
        await ctx.openTrade({ symbol: SYM, isBuy: true, amount: 10 }).then(
          () => attempts.push('opened'),
          (e: Error & { rule?: string }) => attempts.push(`${e.name} ${e.rule ?? ''}`.trim()),
        );
      },
    });
    const first = await startProxiedRun({ sim, proxy, strategy: keepOne(), jfile });
    await waitFor(() => first.engine.view().positions.length === 1, 'the run to hold a trade', 10_000);
    const flat = await first.engine.act({ action: 'flatten' });
    expect(flat).toMatchObject({ action: 'flatten', message: 'flat: every trade of the run closed and its entry orders deleted', failed: [], lock: { by: 'flatten' } });
    await waitFor(() => sim.engine.snapshot(TOKEN, 'OpenPosition').length === 0 && first.engine.view().positions.length === 0, 'the broker flat', 10_000);
    const opened = sim.requestCounts()['/trading/open_trade'];
    const refusedBefore = attempts.length;
    await waitFor(() => attempts.length >= refusedBefore + 3, 'the strategy to try again three times', 10_000);
    expect(attempts.slice(refusedBefore)).toEqual(expect.arrayContaining(['SafetyError flattened']));
    expect(attempts.slice(refusedBefore).every((a) => a === 'SafetyError flattened')).toBe(true);
    expect(sim.requestCounts()['/trading/open_trade']).toBe(opened);
    const journaled = readJournal(jfile).filter((l) => l.k === 'control');
    expect(journaled.map((l) => l.action)).toEqual(['flatten']);
    const closes = readJournal(jfile).filter((l) => l.k === 'table' && l.model === 'ClosedPosition');
    expect(closes.length).toBe(1);
    await first.close(); // a kill -9: nothing more is written

    const second = await startProxiedRun({ sim, proxy, strategy: keepOne(), jfile });
    await waitFor(() => second.engine.view().phase === 'running', 'the resumed run to run', 10_000);
    attempts.length = 0; // the replay's hooks tried what the journal says (their answers are the journal's)
    await waitFor(() => attempts.length >= 3, 'the resumed run to try three times', 10_000);
    expect(attempts.every((a) => a === 'SafetyError flattened')).toBe(true);
    expect(sim.engine.snapshot(TOKEN, 'OpenPosition')).toEqual([]);
    expect(second.engine.view().protections.locks).toEqual([expect.objectContaining({ rule: 'flattened' })]);
    expect(await second.engine.act({ action: 'resume' })).toMatchObject({ message: 'new entries are allowed again' });
    await waitFor(() => sim.engine.snapshot(TOKEN, 'OpenPosition').length === 1, 'the strategy to open again once resumed', 10_000);
    const result = await second.finish();
    expect(result.trades.map((t) => t.reason)).toEqual(['operator']);
    expect(readJournal(jfile).filter((l) => l.k === 'control').map((l) => l.action)).toEqual(['flatten', 'resume']);
  }, 40_000);

  test('a hook that does not catch the refusal of a locked entry is no strategy error: the run goes on, nothing flattened', async () => {
    const { sim, proxy } = env;
    let tries = 0;
    const strategy: Strategy<Record<string, unknown>> = {
      name: 'uncaught',
      symbols: [SYM],
      onStart(ctx: Ctx) {
        ctx.setTimer('open', 100);
      },
      async onTimer(ctx: Ctx) {
        if (ctx.positions().length && ctx.params.paused !== true) return;
        tries++;
        await ctx.openTrade({ symbol: SYM, isBuy: true, amount: 10 }); // not caught
      },
    };
    const run = await startProxiedRun({ sim, proxy, strategy, engine: { params: { paused: true } } });
    await waitFor(() => run.engine.view().positions.length >= 1, 'a trade', 10_000);
    await run.engine.act({ action: 'pause' });
    const before = tries;
    await waitFor(() => tries >= before + 3, 'three refused tries', 10_000);
    const view = run.engine.view();
    expect([view.phase, view.error]).toEqual(['running', undefined]);
    expect(sim.engine.snapshot(TOKEN, 'OpenPosition').length).toBe(view.positions.length);
    expect(view.positions.length).toBeGreaterThanOrEqual(1);
    expect(run.lines.some((l) => l.startsWith('info onTimer ended on an entry refused: new entries are paused by the operator'))).toBe(true);
    const result = await run.finish();
    expect(result.error).toBeUndefined();
  }, 30_000);

  test('while starting only pause and stop apply; after the end nothing does', async () => {
    const { sim, proxy } = env;
    const run = await startProxiedRun({ sim, proxy, strategy: { name: 'idle', symbols: [SYM] } });
    await waitFor(() => run.engine.view().phase === 'running', 'the run to start', 10_000);
    await run.finish();
    await expect(run.engine.act({ action: 'pause' })).rejects.toMatchObject({ status: 409, message: 'the run has ended' });
    const fresh = new LiveEngine({ mode: 'paper', strategy: { name: 'idle', symbols: [SYM] } });
    await expect(fresh.act({ action: 'flatten' })).rejects.toMatchObject({ status: 409, message: "the run is starting (the broker's state is not in yet): flatten applies once it runs; stop applies now, and pause" });
    await expect(fresh.act({ action: 'pause' })).resolves.toMatchObject({ lock: { by: 'pause' } });
  }, 30_000);
});
