/**
 * The operator is told the truth (issue 42, item 6), against the simulator behind a proxy: a
 * revoked token (401 on every call, 403 at every handshake) is said as the broker refusing the
 * token, and halts the run after tokenRefusedTimeoutMs with its journal resumable; a silent outage
 * (a frozen connection) is seen within a few ping intervals and reported with its real length;
 * after a resume onReconnect counts what the run holds; a call refused while disconnected spends
 * no budget.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { systemClock } from '../../../../src/platform/clock';
import type { BrokerSimulator } from '../../../../src/trading/simulator';
import { FxcmNotConnectedError } from '../../../../src/trading/fxcm/errors';
import { finishedRunOf, readJournal } from '../../../../src/trading/runner/journal/journal';
import { BrokerCallBudget, accountKey, inProcessDecider } from '../../../../src/trading/runner/broker/call-budget';
import { type LiveResult } from '../../../../src/trading/runner/engine/live';
import { replayJournal } from '../../../../src/trading/runner/cli/live-cli';
import type { ReconnectEvent, Strategy } from '../../../../src/trading/runner/strategy';
import { BrokerProxy, REFUSED_TOKEN_BODY } from '../../../support/broker-proxy';
import { waitFor } from '../../../support/wait';
import { newClient, once, TOKEN } from '../../helpers';
import { tightBrokerLimits } from '../helpers';
import { simBehindProxy, startProxiedRun } from './proxied-run';

const SYM = 'EUR/USD';
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rr-operator-'));
const PING_MS = 300;

const startRun = (o: { sim: BrokerSimulator; proxy: BrokerProxy; strategy: Strategy<Record<string, unknown>>; jfile?: string; tokenRefusedTimeoutMs?: number }) =>
  startProxiedRun({ ...o, connectMs: 2000, requestMs: 2000, engine: { tokenRefusedTimeoutMs: o.tokenRefusedTimeoutMs } });

/** `p`, or a rejection naming what did not come within `ms`. */
function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms)));
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

describe('the operator is told the truth', () => {
  // the broker's documented 60 s pingTimeout, scaled down: far longer than its ping interval
  const env = simBehindProxy({ pingIntervalMs: PING_MS, pingTimeoutMs: 20 * PING_MS });
  let runs = 0;
  const jfileOf = () => path.join(dir, `run-${++runs}`, 'journal.jsonl');

  test('a revoked token: said as refused, not as a lost connection; the run halts after the setting, resumable; a call refused with 401 is said too', async () => {
    const { sim, proxy } = env;
    let started = false;
    const strategy: Strategy<Record<string, unknown>> = { name: 'quiet', symbols: [SYM], onStart: () => void (started = true) };
    const jfile = jfileOf();
    const r = await startRun({ sim, proxy, strategy, jfile, tokenRefusedTimeoutMs: 1500 });
    await waitFor(() => started, 'onStart');
    // one call refused with 401, then accepted again
    proxy.inject('/trading/get_model', { status: 401, body: REFUSED_TOKEN_BODY });
    await expect(r.client.getModel('Account')).rejects.toThrow('The access token is not valid for this.');
    await r.client.getModel('Account');
    expect(r.lines).toContain(
      'error the broker refused the token (/trading/get_model: The access token is not valid for this.): it is revoked, expired or not this account\'s, or another session took it over; retrying, and stopping the run (resumable with the same journal) if it is still refused in 2 s',
    );
    expect(r.lines).toContain('info the broker accepts the token again');
    // revoked: every handshake 403, the stream cut
    const t0 = Date.now();
    proxy.refuseToken();
    let result: LiveResult;
    try {
      result = await within(r.running, 10_000, 'the run to halt');
    } finally {
      r.engine.stop();
      await r.close();
    }
    const tookMs = Date.now() - t0;
    expect(tookMs).toBeGreaterThanOrEqual(1400);
    expect(tookMs).toBeLessThan(8000);
    const refusal = 'handshake refused: HTTP 403 {"code":4,"message":"Forbidden"}';
    expect(r.lines).toContain(
      `error the broker refused the token (${refusal}): it is revoked, expired or not this account's, or another session took it over; retrying, and stopping the run (resumable with the same journal) if it is still refused in 2 s`,
    );
    expect(r.lines).toContain(`error the broker refused the token for 2 s (${refusal}): stopping the run; what it holds stays open at the broker, and a run with the same journal goes on from here`);
    expect(result.halted).toEqual({ reason: 'token', message: `the broker refused the token for 2 s (${refusal})` });
    expect(result.error).toBeUndefined();
    const lines = readJournal(jfile);
    expect(lines.filter((l) => l.k === 'halted')).toHaveLength(1);
    expect(lines.some((l) => l.k === 'stop')).toBe(false);
    expect(finishedRunOf(lines)).toBeUndefined();
    // the journal replays, and once the token works a run with it goes on
    const replay = await replayJournal(strategy, jfile);
    expect(JSON.stringify(replay.replayed)).toBe(JSON.stringify(replay.recorded));
    proxy.acceptToken();
    const again = await startRun({ sim, proxy, strategy, jfile });
    const resumed = await again.finish();
    expect(resumed.resumed).toBe(true);
    expect(resumed.halted).toBeUndefined();
  }, 30_000);

  test('a frozen connection is seen within a few ping intervals, and the outage reported from when the broker went silent', async () => {
    const { sim, proxy } = env;
    const reconnects: ReconnectEvent[] = [];
    let started = false;
    const strategy: Strategy<Record<string, unknown>> = {
      name: 'quiet',
      symbols: [SYM],
      onStart: () => void (started = true),
      onReconnect: (_ctx, e) => void reconnects.push(e),
    };
    const r = await startRun({ sim, proxy, strategy });
    let result: LiveResult;
    let frozenAt = 0;
    let reconciledAt = 0;
    try {
      await waitFor(() => started, 'onStart');
      const down = once(r.client, 'disconnected', 20 * PING_MS);
      frozenAt = Date.now();
      proxy.freeze();
      const [reason] = await down;
      const seenAfter = Date.now() - frozenAt;
      expect(reason).toBe('ping timeout');
      // a ping interval, then one more for its pong at most (the broker's pingTimeout is 20 of them)
      expect(seenAfter).toBeLessThan(3 * PING_MS + 500);
      await new Promise((res) => setTimeout(res, 4 * PING_MS)); // the outage goes on
      proxy.thaw();
      await once(r.client, 'reconciled', 10_000);
      reconciledAt = Date.now();
      await waitFor(() => reconnects.length === 1, 'onReconnect');
    } finally {
      result = await r.finish();
    }
    const outage = reconciledAt - frozenAt;
    // from the last thing heard (at most a ping interval before the freeze) to the reconciliation
    expect(reconnects[0]!.downMs).toBeGreaterThanOrEqual(outage - 50);
    expect(reconnects[0]!.downMs).toBeLessThanOrEqual(outage + PING_MS + 200);
    expect(r.lines.some((l) => l.startsWith(`info reconciled with the broker after the reconnect (${(reconnects[0]!.downMs! / 1000).toFixed(1)} s away)`))).toBe(true);
    expect(result.error).toBeUndefined();
  }, 30_000);

  test('a resume whose claims the kill left unjournaled: onReconnect counts the position and the order the run holds', async () => {
    const { sim, proxy } = env;
    const jfile = jfileOf();
    let placed = false;
    const rate = Math.round((sim.market.quote(SYM)!.ask + 0.01) * 1e5) / 1e5;
    const first: Strategy<Record<string, unknown>> = {
      name: 'holder',
      symbols: [SYM],
      async onStart(ctx) {
        await ctx.openTrade({ symbol: SYM, isBuy: true, amount: 10 });
        await ctx.createEntryOrder({ symbol: SYM, isBuy: true, amount: 10, rate });
        placed = true;
      },
    };
    const r = await startRun({ sim, proxy, strategy: first, jfile });
    await waitFor(() => placed, 'both orders answered');
    await r.close(); // kill -9: nothing more reaches the journal
    r.engine.stop();
    await r.running;
    // as if it had died right after the answers: their claims never reached the journal
    const lines = readJournal(jfile);
    expect(lines.filter((l) => l.k === 'own')).toHaveLength(2);
    fs.writeFileSync(jfile, lines.filter((l) => l.k !== 'own' && l.k !== 'stop').map((l) => JSON.stringify(l) + '\n').join(''));

    const reconnects: ReconnectEvent[] = [];
    let held: { positions: number; orders: number } | undefined;
    const second: Strategy<Record<string, unknown>> = {
      ...first,
      onReconnect(ctx, e) {
        reconnects.push(e);
        held = { positions: ctx.positions().length, orders: ctx.orders().length };
      },
    };
    const again = await startRun({ sim, proxy, strategy: second, jfile });
    let result: LiveResult;
    try {
      await waitFor(() => reconnects.length === 1, 'onReconnect after the resume');
    } finally {
      result = await again.finish();
    }
    expect(reconnects[0]).toMatchObject({ reason: 'resume', positions: 1, orders: 1 });
    expect(held).toEqual({ positions: 1, orders: 1 });
    expect(again.lines.some((l) => l.startsWith('info reconciled with the broker after the restart: ') && l.endsWith('1 positions and 1 entry orders open'))).toBe(true);
    expect(result.leftOpen?.positions).toHaveLength(1);
    expect(result.leftOpen?.orders).toHaveLength(1);
  }, 30_000);

  test('a call refused while the connection is down is not budget spent', async () => {
    const { sim, proxy } = env;
    const { decider } = inProcessDecider(tightBrokerLimits({ endpoint: 'get_model', unit: 'hour', requestsPerUnit: 10 }), systemClock);
    const limiter = new BrokerCallBudget({ decider, account: accountKey(TOKEN), clock: systemClock });
    const client = newClient(sim, { baseUrl: proxy.url, beforeRequest: limiter.beforeRequest, reconnect: false });
    try {
      await client.connect();
      await client.getModel('Account');
      expect(limiter.budget().find((b) => b.endpoint === 'get_model')?.sent).toBe(1);
      const down = once(client, 'disconnected');
      proxy.cutStreams();
      await down;
      await expect(client.getModel('Account')).rejects.toBeInstanceOf(FxcmNotConnectedError);
      await expect(client.openTrade({ symbol: SYM, isBuy: true, amount: 10, accountId: '1' })).rejects.toBeInstanceOf(FxcmNotConnectedError);
      expect(limiter.budget().find((b) => b.endpoint === 'get_model')?.sent).toBe(1);
      expect(limiter.budget().find((b) => b.endpoint === 'open_trade')).toBeUndefined();
      expect(limiter.budget().find((b) => b.endpoint === 'trading_subscribe')).toBeUndefined();
    } finally {
      await client.close();
      await limiter.close();
    }
  });
});
