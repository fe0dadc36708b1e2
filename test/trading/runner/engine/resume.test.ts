/**
 * Resuming a paper run from its journal, as child processes against the simulator (needs
 * `npx tsc -p tsconfig.json` first): a journal that ended cleanly is refused, a trade the broker
 * closed while the runner was away is counted with the broker's close, and a run whose flatten
 * failed says so and is flattened by its resume.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { BrokerSimulator } from '../../../../src/trading/simulator';
import { readJournal, type JournalLine } from '../../../../src/trading/runner/journal/journal';
import { startSim, TOKEN } from '../../helpers';
import { waitFor } from '../../../support/wait';
import { freshRunnerEnv } from '../helpers';

const CLI = path.join(__dirname, '../../../../dist/src/cli/runner.js');
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rr-resume-'));
const env = { PATH: process.env.PATH };

interface Exit {
  code: number | null;
  stdout: string;
  stderr: string;
}

function start(args: string[]): { child: ChildProcess; exited: Promise<Exit> } {
  const child = spawn(process.execPath, [CLI, ...args], { env: freshRunnerEnv(env), stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const kill = setTimeout(() => child.kill('SIGKILL'), 30000);
  const exited = new Promise<Exit>((resolve) =>
    child.once('exit', (code) => {
      clearTimeout(kill);
      resolve({ code, stdout, stderr });
    }),
  );
  return { child, exited };
}

const run = (args: string[]): Promise<Exit> => start(args).exited;

/** Waits until the journal holds what `ready` looks for. */
const journalHas = (jfile: string, ready: (lines: JournalLine[]) => boolean): Promise<void> =>
  waitFor(() => ready(readJournal(jfile)), `the journal ${jfile} to hold what the test waits for`, 15_000);

const tableEvent = (model: string) => (lines: JournalLine[]) => lines.some((l) => l.k === 'table' && l.model === model && l.action === 'I');
const report = (name: string) => JSON.parse(fs.readFileSync(path.join(dir, `${name}.json`), 'utf8')) as {
  trades: Array<{ tradeId: string; reason: string; closeRate: number; pl: number }>;
  error?: { notFlattened?: string[] };
};

describe('resuming a paper run from its journal', () => {
  let sim: BrokerSimulator;
  beforeAll(async () => {
    sim = await startSim({ tickIntervalMs: 25 });
  });
  afterAll(async () => {
    await sim.stop();
  });
  /** Closes the account's EUR/USD positions at the broker, so that each test starts flat. */
  afterEach(() => {
    sim.faults.reset();
    const accountId = sim.engine.account(TOKEN).accountId;
    sim.engine.closeAllForSymbol(TOKEN, { account_id: accountId, symbol: 'EUR/USD', order_type: 'AtMarket', time_in_force: 'GTC' });
  });

  test('a journal whose run ended cleanly (SIGTERM) is refused with the reason: no zombie run, no broker call', async () => {
    const f = path.join(dir, 'quiet.js');
    fs.writeFileSync(f, "module.exports = { name: 'quiet', symbols: ['EUR/USD'], onTick() {}, onStop(ctx) { ctx.log.info('stopping'); } };\n");
    const jdir = path.join(dir, 'clean');
    const jfile = path.join(jdir, 'journal.jsonl');
    const first = start(['paper', f, '--url', sim.url, '--token', TOKEN, '--journal', jdir, '--quiet', '--report', path.join(dir, 'clean-r1')]);
    await journalHas(jfile, (l) => l.filter((x) => x.k === 'price').length >= 3);
    first.child.kill('SIGTERM');
    expect((await first.exited).code).toBe(0);
    const lines = fs.readFileSync(jfile, 'utf8');
    expect(readJournal(jfile).some((l) => l.k === 'stop')).toBe(true);
    sim.resetCounters();

    const again = await run(['paper', f, '--url', sim.url, '--token', TOKEN, '--journal', jdir, '--quiet', '--report', path.join(dir, 'clean-r2')]);
    expect(again.code).toBe(2);
    expect(again.stderr).toContain("the journal's run ended cleanly at");
    expect(again.stderr).toContain('there is nothing to resume; start a new run with another --journal');
    expect(again.stdout).not.toContain('started');
    expect(fs.readFileSync(jfile, 'utf8')).toBe(lines);
    expect(Object.keys(sim.requestCounts())).toEqual([]);
  });

  test('a trade the broker closed while the runner was away is counted with the broker close, reason and P/L', async () => {
    const f = path.join(dir, 'take-profit.js');
    fs.writeFileSync(
      f,
      `module.exports = {
  name: 'take-profit', symbols: ['EUR/USD'],
  async onStart(ctx) {
    if (!ctx.positions().length) await ctx.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 10, limit: 20, isInPips: true });
  },
};
`,
    );
    const jdir = path.join(dir, 'away');
    const jfile = path.join(jdir, 'journal.jsonl');
    const first = start(['paper', f, '--url', sim.url, '--token', TOKEN, '--journal', jdir, '--quiet', '--report', path.join(dir, 'away-r1')]);
    await journalHas(jfile, tableEvent('OpenPosition'));
    first.child.kill('SIGKILL');
    await first.exited;
    // While the runner is away the price reaches the trade's limit: the broker closes it.
    const [open] = sim.engine.snapshot(TOKEN, 'OpenPosition') as Array<{ tradeId: string; limit: number }>;
    expect(open).toBeDefined();
    sim.market.setPrice('EUR/USD', open!.limit + 0.0005);
    const closed = (sim.engine.snapshot(TOKEN, 'ClosedPosition') as Array<{ tradeId: string; close: number; grossPL: number; com: number }>).find((c) => c.tradeId === open!.tradeId);
    expect(closed).toBeDefined();

    const again = await run(['paper', f, '--url', sim.url, '--token', TOKEN, '--journal', jdir, '--duration', '0.5', '--quiet', '--report', path.join(dir, 'away-r2')]);
    expect(again.stderr).toBe('');
    expect(again.code).toBe(0);
    expect(again.stdout).toContain('1 closed trades');
    const r = report('away-r2');
    expect(r.trades).toHaveLength(1);
    expect(r.trades[0]).toMatchObject({ tradeId: open!.tradeId, reason: 'limit', closeRate: closed!.close });
    expect(r.trades[0]!.pl).toBeCloseTo(closed!.grossPL - closed!.com, 9);
  });

  test('the broker restarts while the run is live: it logs the outage, reconciles, and counts the trade stopped meanwhile', async () => {
    const f = path.join(dir, 'stopped-away.js');
    fs.writeFileSync(
      f,
      `module.exports = {
  name: 'stopped-away', symbols: ['EUR/USD'],
  async onStart(ctx) { await ctx.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 10, stop: -20, isInPips: true }); },
  onTrade(ctx, e) { if (e.kind === 'closed') ctx.log.info('strategy heard: ' + e.tradeId + ' closed by ' + e.reason + ', P/L ' + e.pl.toFixed(2)); },
  onReconnect(ctx, e) { ctx.log.info('strategy heard: reconnect, ' + ctx.positions().length + ' positions'); },
};
`,
    );
    const jdir = path.join(dir, 'restart');
    const jfile = path.join(jdir, 'journal.jsonl');
    const runner = start(['paper', f, '--url', sim.url, '--token', TOKEN, '--journal', jdir, '--report', path.join(dir, 'restart-r')]);
    await journalHas(jfile, tableEvent('OpenPosition'));
    const [open] = sim.engine.snapshot(TOKEN, 'OpenPosition') as Array<{ tradeId: string; stop: number }>;
    await sim.restart(() => {
      sim.market.setPrice('EUR/USD', open!.stop - 0.0005);
    });
    const closed = (sim.engine.snapshot(TOKEN, 'ClosedPosition') as Array<{ tradeId: string; close: number; grossPL: number; com: number }>).find((c) => c.tradeId === open!.tradeId);
    expect(closed).toBeDefined();
    await journalHas(jfile, (lines) => lines.some((l) => l.k === 'snapshot' && l.reason === 'reconnect'));
    runner.child.kill('SIGTERM');
    const done = await runner.exited;
    expect(done.code).toBe(0);
    const pl = (closed!.grossPL - closed!.com).toFixed(2);
    expect(done.stderr).toMatch(/broker connection lost \(.*\): reconnecting/);
    expect(done.stderr).toContain(`trade ${open!.tradeId} was closed while the runner was away: stop at ${closed!.close}, P/L ${pl}`);
    expect(done.stderr).toContain(`strategy heard: ${open!.tradeId} closed by stop, P/L ${pl}`);
    expect(done.stderr).toMatch(/reconciled with the broker after the reconnect \([\d.]+ s away\): 1 of its trades closed, 0 opened meanwhile; 0 positions and 0 entry orders open/);
    expect(done.stderr).toContain('strategy heard: reconnect, 0 positions');
    expect(done.stdout).toContain(`1 closed trades, net P/L ${pl} USD`);
    expect(report('restart-r').trades).toEqual([expect.objectContaining({ tradeId: open!.tradeId, reason: 'stop', closeRate: closed!.close })]);
  });

  test('a flatten that fails is reported as such, never as done; the resumed run reconciles and flattens', async () => {
    const f = path.join(dir, 'throws.js');
    fs.writeFileSync(
      f,
      `let n = 0;
module.exports = {
  name: 'throws', symbols: ['EUR/USD'],
  async onStart(ctx) { if (!ctx.positions().length) await ctx.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 10 }); },
  onTick(ctx) { if (ctx.positions().length && ++n > 3) throw new Error('boom'); },
};
`,
    );
    const jdir = path.join(dir, 'fatal');
    // The broker refuses the runner's close (as when it cannot be reached).
    sim.faults.failNext('/trading/close_trade', 'Service unavailable', 5);
    const first = await run(['paper', f, '--url', sim.url, '--token', TOKEN, '--journal', jdir, '--quiet', '--report', path.join(dir, 'fatal-r1')]);
    expect(first.code).toBe(1);
    const [open] = sim.engine.snapshot(TOKEN, 'OpenPosition') as Array<{ tradeId: string }>;
    expect(open).toBeDefined();
    expect(first.stderr).toContain('strategy error in onTick: boom');
    expect(first.stderr).toContain(`flattening FAILED, still open at the broker: trade ${open!.tradeId}:`);
    expect(first.stderr).not.toContain("all of the run's positions were flattened");
    expect(report('fatal-r1').error?.notFlattened).toEqual([expect.stringContaining(`trade ${open!.tradeId}: `)]);
    expect(fs.readFileSync(path.join(dir, 'fatal-r1.html'), 'utf8')).toContain('flattening FAILED');

    sim.faults.reset();
    // Meanwhile someone else opens a trade on the account: the resumed run knows from its journal
    // which trade is its own, and flattens only that one.
    const { accountId } = sim.engine.account(TOKEN);
    sim.engine.openTrade(TOKEN, { account_id: accountId, symbol: 'EUR/USD', is_buy: 'false', amount: '20', order_type: 'AtMarket', time_in_force: 'GTC' });
    await waitFor(() => sim.engine.snapshot(TOKEN, 'OpenPosition').length === 2, "the other client's trade");
    const foreign = (sim.engine.snapshot(TOKEN, 'OpenPosition') as Array<{ tradeId: string }>).find((t) => t.tradeId !== open!.tradeId)!;
    sim.resetCounters();
    const again = await run(['paper', f, '--url', sim.url, '--token', TOKEN, '--journal', jdir, '--quiet', '--report', path.join(dir, 'fatal-r2')]);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('strategy error in onTick: boom');
    expect(again.stderr).toContain("all of the run's positions were flattened");
    expect((sim.engine.snapshot(TOKEN, 'OpenPosition') as Array<{ tradeId: string }>).map((t) => t.tradeId)).toEqual([foreign.tradeId]);
    expect(sim.requestCounts()['/trading/close_trade']).toBe(1);
    expect(sim.requestCounts()['/trading/open_trade']).toBeUndefined();
    const r = report('fatal-r2');
    expect(r.trades).toEqual([expect.objectContaining({ tradeId: open!.tradeId, reason: 'flatten' })]);
    expect(r.error?.notFlattened).toBeUndefined();
  });
});
