/**
 * `paper --notify URL` as a trader runs it (a child process against the simulator; needs `npx tsc
 * -p tsconfig.json` first; issue 45, item 3): a webhook sink receives each event of the run in
 * order (started, entry sent, filled, exit with its reason, disconnected, reconnected, the
 * operator's action, the end with its summary) while a second sink that never answers changes
 * nothing: the fills come as fast as without it, the journal has no line of it, and the status
 * shows its requests waiting.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { BrokerSimulator } from '../../../../src/trading/simulator';
import { waitFor } from '../../../support/wait';
import { startSim, TOKEN } from '../../helpers';
import { freshRunnerEnv } from '../helpers';

const CLI = path.join(__dirname, '../../../../dist/src/cli/runner.js');
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rr-notify-cli-'));

/** Opens a trade, closes it once filled, and says how long each fill took after its call. */
const STRATEGY = `module.exports = {
  name: 'round-trip',
  symbols: ['EUR/USD'],
  async onStart(ctx) {
    this.opened = Date.now();
    await ctx.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 10 });
  },
  async onTrade(ctx, e) {
    if (e.kind !== 'opened') return;
    ctx.log.info('filled after ' + (Date.now() - this.opened) + ' ms');
    await ctx.closeTrade(e.tradeId);
  },
};
`;

interface Sink {
  url: string;
  events: Array<{ kind: string; seq: number; [k: string]: unknown }>;
  close: () => Promise<void>;
}

/** A webhook receiver on loopback: records each event (`hang`: never answers). */
async function startSink(hang = false): Promise<Sink> {
  const events: Sink['events'] = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (d: Buffer) => (body += d.toString()));
    req.on('end', () => {
      events.push(JSON.parse(body) as Sink['events'][number]);
      if (!hang) res.end('ok');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`,
    events,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

describe('paper --notify', () => {
  let sim: BrokerSimulator;
  let sink: Sink;
  let hung: Sink;
  let runner: ChildProcess;
  let stdout = '';
  let exited: Promise<number | null>;
  beforeAll(async () => {
    sim = await startSim({ tickIntervalMs: 50 });
    sink = await startSink();
    hung = await startSink(true);
  });
  afterAll(async () => {
    if (runner && runner.exitCode === null) runner.kill('SIGKILL');
    await sink.close();
    await hung.close();
    await sim.stop();
  });

  test('each event in order at the sink; the hanging sink changes nothing in the run', async () => {
    const file = path.join(dir, 'round-trip.js');
    fs.writeFileSync(file, STRATEGY);
    const journal = path.join(dir, 'journal');
    runner = spawn(process.execPath, [CLI, 'paper', file, '--url', sim.url, '--token', TOKEN, '--notify', hung.url, '--notify', sink.url, '--control', '127.0.0.1:0', '--journal', journal, '--report', path.join(dir, 'report')], {
      env: freshRunnerEnv(),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    runner.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
    runner.stderr!.on('data', (d: Buffer) => (stdout += d.toString()));
    exited = new Promise((resolve) => runner.once('exit', (code) => resolve(code)));
    const kinds = () => sink.events.map((e) => e.kind);
    await waitFor(() => kinds().includes('exit'), 'the exit at the sink', 20_000);
    // The hanging sink holds its first request (5 s of timeout) while the fills came at once.
    expect(hung.events.length).toBeGreaterThanOrEqual(1);
    const filled = Number(/filled after (\d+) ms/.exec(stdout)?.[1]);
    expect(filled).toBeLessThan(2000);
    const m = /control: (http:\/\/\S+\/)#token=(\S+)/.exec(stdout)!;
    const status = (await (await fetch(`${m[1]}api/status`, { headers: { Authorization: `Bearer ${m[2]}` } })).json()) as { notifications: Array<{ url: string; sent: number; inFlight: boolean; queued: number }> };
    expect(status.notifications.map((n) => n.url)).toEqual([hung.url, sink.url]);
    expect(status.notifications[0]).toMatchObject({ sent: 0, inFlight: true });
    expect(status.notifications[0]!.queued).toBeGreaterThanOrEqual(1);
    expect(status.notifications[1]!.sent).toBeGreaterThanOrEqual(4);

    // A cut connection: disconnected, then reconnected and reconciled.
    expect(sim.faults.disconnect(TOKEN)).toBeGreaterThan(0);
    await waitFor(() => kinds().includes('reconnected'), 'the reconnect at the sink', 20_000);
    const pause = await fetch(`${m[1]}api/pause`, { method: 'POST', headers: { Authorization: `Bearer ${m[2]}` } });
    expect(pause.status).toBe(200);
    await waitFor(() => kinds().includes('operator'), "the operator's pause at the sink", 10_000);
    runner.kill('SIGTERM');
    expect(await exited).toBe(0);

    const events = sink.events;
    expect(events.map((e) => e.seq)).toEqual([...events.map((e) => e.seq)].sort((a, b) => a - b));
    const order = events.map((e) => e.kind).filter((k) => k !== 'heartbeat');
    expect(order).toEqual(['run_started', 'entry_sent', 'filled', 'exit', 'disconnected', 'reconnected', 'operator', 'run_ended']);
    const byKind = Object.fromEntries(events.map((e) => [e.kind, e]));
    expect(byKind.run_started).toMatchObject({ run: { strategy: 'round-trip', mode: 'paper' }, resumed: false });
    expect(byKind.entry_sent).toMatchObject({ op: 'openTrade', request: { symbol: 'EUR/USD', isBuy: true, amount: 10 } });
    expect(byKind.filled).toMatchObject({ symbol: 'EUR/USD', isBuy: true, amount: 10 });
    expect(byKind.exit).toMatchObject({ tradeId: byKind.filled!.tradeId, reason: 'close' });
    expect(byKind.operator).toMatchObject({ action: 'pause', message: 'new entries are paused' });
    expect(byKind.run_ended).toMatchObject({ trades: 1, currency: 'USD', resumed: false });
    // Nothing of the notifications is in the journal.
    expect(fs.readFileSync(path.join(journal, 'journal.jsonl'), 'utf8')).not.toContain('/hook');
  }, 60_000);

  test('a --notify that is not an http(s) URL is a usage error', async () => {
    const r = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
      const c = spawn(process.execPath, [CLI, 'paper', path.join(dir, 'round-trip.js'), '--url', sim.url, '--token', TOKEN, '--notify', 'ftp://example.invalid/x'], { env: freshRunnerEnv(), stdio: ['ignore', 'ignore', 'pipe'] });
      let stderr = '';
      c.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
      c.once('exit', (code) => resolve({ code, stderr }));
    });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('--notify ftp://example.invalid/x');
  }, 20_000);
});
