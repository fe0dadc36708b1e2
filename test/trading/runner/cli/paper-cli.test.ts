/**
 * `ratelimit-runner paper|live|replay|candles` as child processes (needs `npx tsc -p tsconfig.json`
 * first): a paper run killed with SIGKILL and restarted recovers from its journal without
 * duplicating orders, and its journal replays identically.
 */
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { BrokerSimulator } from '../../../../src/trading/simulator';
import { waitFor } from '../../../support/wait';
import { readJournal } from '../../../../src/trading/runner/journal/journal';
import { startSim, TOKEN } from '../../helpers';
import { freshRunnerEnv } from '../helpers';

const CLI = path.join(__dirname, '../../../../dist/src/cli/runner.js');
const EX = path.join(__dirname, '../../../../examples/strategies/ma-crossover.js');
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rr-paper-cli-'));
const env = { PATH: process.env.PATH };

function run(args: string[], timeout = 20000): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [CLI, ...args], { env: freshRunnerEnv(env), stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    p.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const t = setTimeout(() => p.kill('SIGKILL'), timeout);
    p.once('exit', (code) => {
      clearTimeout(t);
      resolve({ code, stdout, stderr });
    });
  });
}

const STRATEGY = `let ticks = 0;
module.exports = {
  name: 'once',
  symbols: ['EUR/USD'],
  async onStart(ctx) {
    if (!ctx.positions().length) await ctx.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 10 });
  },
  async onTick(ctx, t) {
    ticks++;
    if (ticks === 5) await ctx.createEntryOrder({ symbol: 'EUR/USD', isBuy: true, amount: 10, rate: Math.round((t.ask - 0.01) * 1e5) / 1e5 });
  },
};
`;

describe('paper CLI', () => {
  let sim: BrokerSimulator;
  beforeAll(async () => {
    sim = await startSim({ tickIntervalMs: 25 });
  });
  afterAll(async () => {
    await sim.stop();
  });

  test('--help for paper, live, replay, candles; a missing token or url is a usage error', async () => {
    for (const c of ['paper', 'live', 'replay']) {
      const h = spawnSync(process.execPath, [CLI, c, '--help'], { encoding: 'utf8', env });
      expect(h.status).toBe(0);
      expect(h.stdout).toContain(`ratelimit-runner ${c}`);
    }
    expect(spawnSync(process.execPath, [CLI, 'candles', '--help'], { encoding: 'utf8', env }).stdout).toContain('candles download');
    const live = await run(['live', EX, '--url', sim.url]);
    expect(live.code).toBe(2);
    expect(live.stderr).toContain('needs an API token: pass --token TOKEN or set FXCM_TOKEN');
    const paper = await run(['paper', EX, '--token', TOKEN]);
    expect(paper.code).toBe(2);
    expect(paper.stderr).toContain('--url');
  });

  test('a limits config that could exceed the broker limits is reported and refused (exit 2)', async () => {
    const lim = path.join(dir, 'loose.yaml');
    fs.writeFileSync(lim, 'domain: fxcm\ndescriptors:\n  - key: broker\n    value: fxcm\n');
    const r = await run(['paper', EX, '--url', sim.url, '--token', TOKEN, '--limits', lim, '--duration', '0.2', '--quiet']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('get_model OpenPosition (Cmd=44): no limit configured; the broker allows 50 per 3600 s');
    expect(r.stderr).toContain('--allow-over-budget');
  });

  test('a strategy that fails to load: exit 1 with the script line', async () => {
    const bad = path.join(dir, 'bad.js');
    fs.writeFileSync(bad, "module.exports = {\n  symbols: ['EUR/USD'],\n  onTick( {\n};\n");
    const r = await run(['paper', bad, '--url', sim.url, '--token', TOKEN]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`${bad}:4`);
  });

  test('kill -9 and restart: state rebuilt from the journal, no order sent twice; the journal replays identically', async () => {
    const f = path.join(dir, 'once.js');
    fs.writeFileSync(f, STRATEGY);
    const jdir = path.join(dir, 'j1');
    const jfile = path.join(jdir, 'journal.jsonl');
    sim.resetCounters();
    const child = spawn(process.execPath, [CLI, 'paper', f, '--url', sim.url, '--token', TOKEN, '--journal', jdir, '--quiet', '--report', path.join(dir, 'r1')], { env: freshRunnerEnv(env), stdio: 'ignore' });
    const exited = new Promise((r) => child.once('exit', r));
    // both intents answered (open_trade and create_entry_order), then some more ticks
    const answeredAt = (): number => {
      const lines = readJournal(jfile);
      let answers = 0;
      for (let i = 0; i < lines.length; i++) if (lines[i]!.k === 'answer' && ++answers === 2) return i;
      return -1;
    };
    await waitFor(() => answeredAt() >= 0, 'the paper run to journal both orders', 15_000);
    await waitFor(() => readJournal(jfile).slice(answeredAt()).filter((l) => l.k === 'price').length >= 3, 'three ticks after the orders', 15_000);
    child.kill('SIGKILL');
    await exited;
    expect(sim.requestCounts()['/trading/open_trade']).toBe(1);
    expect(sim.requestCounts()['/trading/create_entry_order']).toBe(1);
    const before = readJournal(jfile).length;
    // As if the kill had come in the middle of writing a line: the resume says so and drops it.
    const torn = '{"k":"price","t":17';
    fs.appendFileSync(jfile, torn);

    const r = await run(['paper', f, '--url', sim.url, '--token', TOKEN, '--journal', jdir, '--duration', '1', '--quiet', '--report', path.join(dir, 'r2')]);
    expect(r.stderr).toBe(
      `ratelimit-runner paper: ${jfile}: its last line was cut (${torn.length} bytes; the run stopped while writing it) and is dropped; resuming from the line before it\n`,
    );
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('resuming from');
    expect(r.stdout).toContain('(resumed)');
    expect(r.stdout).toMatch(/budget: get_model 1 \(45\/hour, 1400\/hour\)/);
    // nothing sent again: still one market order and one entry order at the broker
    expect(sim.requestCounts()['/trading/open_trade']).toBe(1);
    expect(sim.requestCounts()['/trading/create_entry_order']).toBe(1);
    expect(sim.engine.snapshot(TOKEN, 'OpenPosition')).toHaveLength(1);
    const lines = readJournal(jfile);
    expect(lines.length).toBeGreaterThan(before);
    expect(lines.filter((l) => l.k === 'resume')).toHaveLength(1);
    expect(JSON.parse(fs.readFileSync(path.join(dir, 'r2.json'), 'utf8')).budget.length).toBeGreaterThan(0);

    const rep = await run(['replay', f, '--journal', jdir]);
    expect(rep.stdout).toContain('replay: 2 decisions identical to the recorded run');
    expect(rep.code).toBe(0);
  });

  test('a strategy with saveState/restoreState: the journal is cut to checkpoints; killed mid-line, it resumes and replays from its checkpoint', async () => {
    const f = path.join(dir, 'kept.js');
    fs.writeFileSync(
      f,
      STRATEGY.replace("name: 'once'", "name: 'kept'").replace(
        /};\n$/,
        `  saveState() {
    return { ticks };
  },
  restoreState(ctx, state) {
    ticks = state.ticks;
  },
};
`,
      ),
    );
    const jdir = path.join(dir, 'j-kept');
    const jfile = path.join(jdir, 'journal.jsonl');
    sim.resetCounters();
    const child = spawn(process.execPath, [CLI, 'paper', f, '--url', sim.url, '--token', TOKEN, '--journal', jdir, '--journal-max-bytes', '4K', '--quiet', '--report', path.join(dir, 'kept-r1')], {
      env: freshRunnerEnv(env),
      stdio: 'ignore',
    });
    const exited = new Promise((r) => child.once('exit', r));
    // cut to a checkpoint taken after both orders (the entry order goes at the fifth tick)
    const checkpointed = () => {
      const lines = readJournal(jfile);
      return lines[1]?.k === 'checkpoint' && (lines[1].strategy as { ticks: number }).ticks >= 10 && lines.slice(2).filter((l) => l.k === 'price').length >= 3;
    };
    await waitFor(checkpointed, 'a checkpoint after both orders, and three ticks after it', 15_000);
    child.kill('SIGKILL');
    await exited;
    expect(fs.existsSync(path.join(jdir, 'journal.prev.jsonl'))).toBe(true);
    const torn = '{"k":"price","t":17';
    fs.appendFileSync(jfile, torn);

    const r = await run(['paper', f, '--url', sim.url, '--token', TOKEN, '--journal', jdir, '--journal-max-bytes', '4K', '--duration', '1', '--quiet', '--report', path.join(dir, 'kept-r2')]);
    expect(r.stderr).toBe(
      `ratelimit-runner paper: ${jfile}: its last line was cut (${torn.length} bytes; the run stopped while writing it) and is dropped; resuming from the line before it\n`,
    );
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`resuming from ${jfile} (its checkpoint of `);
    expect(r.stdout).toMatch(/ and the \d+ journal lines after it\)\n/);
    expect(r.stdout).toContain('2 decisions');
    expect(sim.requestCounts()['/trading/open_trade']).toBe(1);
    expect(sim.requestCounts()['/trading/create_entry_order']).toBe(1);

    const rep = await run(['replay', f, '--journal', jdir]);
    expect(rep.stdout).toMatch(/^replay: 0 decisions after its checkpoint of \S+Z identical to the recorded run\n$/);
    expect(rep.code).toBe(0);
  });

  /**
   * A run killed between sending an order and journaling the broker's answer leaves an intent with
   * no answer. On resume it is settled from the broker's snapshot (settleOrphans), never resent.
   */
  describe('an intent without an answer in the journal', () => {
    const ONCE = `module.exports = {
  name: 'orphan',
  symbols: ['EUR/USD'],
  async onStart(ctx) {
    if (ctx.positions().length) return;
    try {
      await ctx.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 10 });
    } catch (e) {
      ctx.log.warn('openTrade: ' + e.message);
    }
  },
};
`;
    const f = path.join(dir, 'orphan.js');

    /** A completed run whose journal is then cut right after its openTrade intent. */
    async function journalWithOrphan(name: string): Promise<{ jdir: string; jfile: string; intentId: unknown }> {
      fs.writeFileSync(f, ONCE);
      const jdir = path.join(dir, name);
      const jfile = path.join(jdir, 'journal.jsonl');
      const first = await run(['paper', f, '--url', sim.url, '--token', TOKEN, '--journal', jdir, '--duration', '0.5', '--quiet', '--report', path.join(dir, name + '-r1')]);
      expect(first.code).toBe(0);
      const lines = fs.readFileSync(jfile, 'utf8').split('\n').filter(Boolean);
      const at = lines.findIndex((l) => {
        const o = JSON.parse(l) as { k: string; op?: string };
        return o.k === 'intent' && o.op === 'openTrade';
      });
      expect(at).toBeGreaterThanOrEqual(0);
      fs.writeFileSync(jfile, lines.slice(0, at + 1).join('\n') + '\n');
      return { jdir, jfile, intentId: (JSON.parse(lines[at]!) as { id: unknown }).id };
    }

    /** Closes the account's EUR/USD positions at the broker, as another client would. */
    const flatten = (): void => {
      const accountId = sim.engine.account(TOKEN).accountId;
      sim.engine.closeAllForSymbol(TOKEN, { account_id: accountId, symbol: 'EUR/USD', order_type: 'AtMarket', time_in_force: 'GTC' });
    };
    beforeEach(flatten);
    afterEach(flatten);

    test('the broker has an order the journal never saw: the intent is answered with it', async () => {
      sim.resetCounters();
      const { jdir, jfile, intentId } = await journalWithOrphan('j-orphan-ok');
      const orderId = String(sim.engine.snapshot(TOKEN, 'OpenPosition')[0]!['orderId']);
      const r = await run(['paper', f, '--url', sim.url, '--token', TOKEN, '--journal', jdir, '--duration', '0.5', '--quiet', '--report', path.join(dir, 'orphan-ok-r2')]);
      expect(r.code).toBe(0);
      expect(r.stderr).toBe('');
      expect(sim.requestCounts()['/trading/open_trade']).toBe(1);
      const answers = readJournal(jfile).filter((l) => l.k === 'answer' && l.id === intentId);
      expect(answers).toEqual([{ k: 'answer', id: intentId, ok: true, value: { orderId }, claims: [orderId] }]);
    });

    test("another run's entry order at the broker is not taken for the orphaned market order", async () => {
      sim.resetCounters();
      const { jdir, jfile, intentId } = await journalWithOrphan('j-orphan-foreign');
      const mine = String(sim.engine.snapshot(TOKEN, 'OpenPosition')[0]!['orderId']);
      // placed by another client after the crash, before the resume: an order the journal never saw
      const { accountId } = sim.engine.account(TOKEN);
      const rate = String(Math.round((sim.market.quote('EUR/USD')!.ask - 0.01) * 1e5) / 1e5);
      const foreign = String(sim.engine.createEntryOrder(TOKEN, { account_id: accountId, symbol: 'EUR/USD', is_buy: 'true', amount: '10', rate, order_type: 'Entry', time_in_force: 'GTC', is_in_pips: 'false' }).orderId);
      try {
        const r = await run(['paper', f, '--url', sim.url, '--token', TOKEN, '--journal', jdir, '--duration', '0.5', '--quiet', '--report', path.join(dir, 'orphan-foreign-r2')]);
        expect(r.code).toBe(0);
        const answers = readJournal(jfile).filter((l) => l.k === 'answer' && l.id === intentId);
        expect(answers).toEqual([{ k: 'answer', id: intentId, ok: true, value: { orderId: mine }, claims: [mine] }]);
        expect(sim.requestCounts()['/trading/open_trade']).toBe(1);
        expect(sim.requestCounts()['/trading/create_entry_order']).toBeUndefined();
        // the resumed run owns its trade, not the other run's order
        const rep = JSON.parse(fs.readFileSync(path.join(dir, 'orphan-foreign-r2.json'), 'utf8')) as { leftOpen: { positions: Array<{ tradeId: string }>; orders: unknown[] } };
        expect(rep.leftOpen.positions.map((p) => p.tradeId)).toEqual([String(sim.engine.snapshot(TOKEN, 'OpenPosition')[0]!['tradeId'])]);
        expect(rep.leftOpen.orders).toEqual([]);
      } finally {
        sim.engine.deleteOrder(TOKEN, { order_id: foreign });
      }
    });

    test('the broker has no such order: the intent is rejected and not resent', async () => {
      sim.resetCounters();
      const { jdir, jfile, intentId } = await journalWithOrphan('j-orphan-gone');
      flatten();
      const r = await run(['paper', f, '--url', sim.url, '--token', TOKEN, '--journal', jdir, '--duration', '0.5', '--quiet', '--report', path.join(dir, 'orphan-gone-r2')]);
      expect(r.code).toBe(0);
      expect(sim.requestCounts()['/trading/open_trade']).toBe(1);
      const answers = readJournal(jfile).filter((l) => l.k === 'answer' && l.id === intentId);
      expect(answers).toEqual([
        {
          k: 'answer',
          id: intentId,
          ok: false,
          error: { name: 'OrderRejectedError', message: 'openTrade was interrupted by a restart before the broker answered and is not resent: market order buy 10 EUR/USD: no order at the broker matches it' },
        },
      ]);
    });
  });

  test('candles download through the limiter, against the simulator', async () => {
    const out = path.join(dir, 'c.json');
    const to = Math.floor(Date.now() / 1000 / 60) * 60 - 60;
    const r = await run(['candles', 'download', '--url', sim.url, '--token', TOKEN, '--symbol', 'EUR/USD', '--timeframe', 'm1', '--from', String(to - 3600), '--to', String(to), '--out', out]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const data = JSON.parse(fs.readFileSync(out, 'utf8'));
    expect(data.symbol).toBe('EUR/USD');
    expect(data.candles.length).toBeGreaterThan(30);
    expect(r.stdout).toMatch(/candles written to .* \(1 candle requests\)/);
    const bt = await run(['backtest', EX, '--candles', out, '--quiet', '--report', path.join(dir, 'bt')]);
    expect(bt.code).toBe(0);
  });
});
