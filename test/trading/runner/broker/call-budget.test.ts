import fs from 'node:fs';
import path from 'node:path';
import { ManualClock } from '../../../../src/platform/clock';
import { BrokerCallBudget, accountKey, checkBudget, endpointName, inProcessDecider, worstCaseInSlidingWindow, type LimitDecider } from '../../../../src/trading/runner/broker/call-budget';
import { IntentExpiredError } from '../../../../src/trading/runner/errors';
import { newClient, startSim, TOKEN } from '../../helpers';
import { tightBrokerLimits } from '../helpers';

const BUNDLED = path.join(__dirname, '../../../../examples/runner/broker-limits.yaml');
const bundled = () => [{ name: BUNDLED, content: fs.readFileSync(BUNDLED, 'utf8') }];
const HOUR = 3600_000;

/** get_model OpenPosition snapshots: `perHour` an hour, per account. */
const tightConfig = (perHour: number) => tightBrokerLimits({ endpoint: 'get_model', model: 'OpenPosition', unit: 'hour', requestsPerUnit: perHour });

describe('broker-call budget: descriptors, start-up check', () => {
  test('endpoint names and descriptors', () => {
    expect(endpointName('/trading/open_trade')).toBe('open_trade');
    expect(endpointName('/candles/1/m1')).toBe('candles');
    expect(endpointName('/trading/get_model/')).toBe('get_model');
    const clock = new ManualClock(0);
    const { decider } = inProcessDecider(bundled(), clock);
    const l = new BrokerCallBudget({ decider, account: 'A1', clock });
    expect(l.descriptorsFor('/trading/get_model', { models: ['Order', 'OpenPosition'] }).map((d) => d.entries.map((e) => `${e.key}=${e.value}`).join(','))).toEqual([
      'broker=fxcm,account=A1,endpoint=get_model',
      'broker=fxcm,account=A1,endpoint=get_model,model=Order',
      'broker=fxcm,account=A1,endpoint=get_model,model=OpenPosition',
    ]);
    expect(accountKey(TOKEN)).toMatch(/^tok-[0-9a-f]{12}$/);
  });

  test('the bundled config passes; a config that could exceed the documented limits is reported', () => {
    expect(worstCaseInSlidingWindow(25, 3600, 3600)).toBe(50);
    expect(worstCaseInSlidingWindow(1, 60, 3600)).toBe(61);
    const clock = new ManualClock(0);
    const ok = inProcessDecider(bundled(), clock);
    const l = new BrokerCallBudget({ decider: ok.decider, account: 'A1', clock });
    expect(checkBudget(ok.config, l)).toEqual([]);
    const bad = inProcessDecider(tightConfig(50), clock);
    const problems = checkBudget(bad.config, l);
    expect(problems).toHaveLength(4); // candles has no limit there either
    expect(problems[0]).toContain('{unit: hour, requests_per_unit: 50} (fixed window) can send up to 100 calls within 3600 s; the broker allows 50');
    expect(problems[1]).toMatch(/Order \(Cmd=46\): no limit configured/);
  });
});

describe('broker-call budget: waiting, priority, expiry', () => {
  test('over-limit calls wait for the reset and are served by priority; expired intents are dropped', async () => {
    const clock = new ManualClock(10_000);
    let allow = false;
    const asked: string[] = [];
    const decider: LimitDecider = {
      async shouldRateLimit(req) {
        const ep = req.descriptors[0]!.entries[2]!.value;
        asked.push(ep);
        return { overallCode: allow ? 1 : 2, statuses: [{ code: allow ? 1 : 2, durationUntilReset: 30, limitRemaining: 0 }], responseHeadersToAdd: [] };
      },
    };
    const l = new BrokerCallBudget({ decider, account: 'A', clock, marginMs: 0, sleep: async (ms) => { allow = true; clock.advance(ms); } });
    const served: string[] = [];
    const track = (p: Promise<void>, name: string) => p.then(() => void served.push(name), (e: Error) => void served.push(`${name}:${e.name}`));
    const all = [
      track(l.acquire('/candles/1/m1'), 'candles'),
      track(l.acquire('/trading/open_trade', {}, { deadlineMs: 20_000 }), 'open-expiring'),
      track(l.acquire('/trading/open_trade'), 'open'),
      track(l.acquire('/trading/close_trade'), 'close'),
      track(l.acquire('/trading/get_model', { models: ['Order'] }), 'snapshot'),
    ];
    await Promise.all(all);
    expect(served).toEqual(['open-expiring:IntentExpiredError', 'close', 'open', 'snapshot', 'candles']);
    expect(clock.nowMs()).toBeGreaterThanOrEqual(40_000);
    const b = Object.fromEntries(l.budget().map((x) => [x.endpoint, x]));
    expect(b.open_trade).toMatchObject({ sent: 1, expired: 1, waited: 1 });
    expect(b.close_trade!.waitMs).toBeGreaterThanOrEqual(30_000);
    expect(new IntentExpiredError('x', 1)).toBeInstanceOf(Error);
  });

  test("an intent's signal: aborted before, it is refused at once; aborted while it waits, it leaves the queue with the reason and is never sent", async () => {
    const clock = new ManualClock(0);
    let asked = 0;
    // every answer over the limit for an hour: a call waits until it is cut
    const decider: LimitDecider = { shouldRateLimit: async () => (asked++, { overallCode: 2, statuses: [{ code: 2, durationUntilReset: 3600, limitRemaining: 0 }], responseHeadersToAdd: [] }) };
    const l = new BrokerCallBudget({ decider, account: 'A', clock, sleep: (_ms, stop) => new Promise((r) => stop.addEventListener('abort', () => r(), { once: true })) });
    const cut = new AbortController();
    const waiting = l.acquire('/trading/open_trade', {}, { signal: cut.signal });
    await new Promise((r) => setImmediate(r));
    expect([asked, l.waiting]).toEqual([1, 1]);
    cut.abort(new Error('entries are locked'));
    await expect(waiting).rejects.toThrow('entries are locked');
    expect(l.waiting).toBe(0);
    await expect(l.acquire('/trading/open_trade', {}, { signal: cut.signal })).rejects.toThrow('entries are locked');
    expect(asked).toBe(1);
    expect(l.budget().find((u) => u.endpoint === 'open_trade')?.sent ?? 0).toBe(0);
    await l.close();
  });

  test('a limiter error fails the call (never sent unaccounted)', async () => {
    const clock = new ManualClock(0);
    const l = new BrokerCallBudget({ decider: { shouldRateLimit: () => Promise.reject(new Error('down')) }, account: 'A', clock });
    await expect(l.acquire('/trading/open_trade')).rejects.toThrow('down');
  });
});

describe('broker-call budget in front of the broker client, against the simulator', () => {
  test('hits the broker limit: every call waits for budget, none is over the limit on the simulator side', async () => {
    const start = Math.floor(Date.UTC(2024, 0, 10, 12) / HOUR) * HOUR + 40 * 60_000; // 40 min into an hour
    const clock = new ManualClock(start);
    const sim = await startSim({ clock, limits: { openPositionSnapshotsPerHour: 10 } });
    const { decider } = inProcessDecider(tightConfig(5), clock);
    const limiter = new BrokerCallBudget({ decider, account: accountKey(TOKEN), clock, sleep: async (ms) => clock.advance(ms) });
    const client = newClient(sim, { beforeRequest: limiter.beforeRequest, reconnect: false });
    try {
      await client.connect();
      const times: number[] = [];
      for (let i = 0; i < 32; i++) {
        const before = sim.requestCounts()['/trading/get_model:OpenPosition'] ?? 0;
        await client.getOpenPositions();
        expect(sim.requestCounts()['/trading/get_model:OpenPosition']).toBe(before + 1);
        times.push(clock.nowMs());
      }
      expect(sim.requestCounts()['/trading/get_model:OpenPosition']).toBe(32);
      // simulator-side sliding hour: never more than its limit (10), and the limiter did wait
      for (let i = 0; i < times.length; i++) expect(times.filter((t) => t > times[i]! - HOUR && t <= times[i]!).length).toBeLessThanOrEqual(10);
      expect(clock.nowMs() - start).toBeGreaterThan(5 * HOUR);
      expect(limiter.budget().find((b) => b.endpoint === 'get_model')).toMatchObject({ sent: 32 });

      // control: without the limiter the same burst is refused by the broker
      const raw = newClient(sim, { token: TOKEN, reconnect: false });
      await client.close();
      await raw.connect();
      let refused = 0;
      for (let i = 0; i < 12; i++) await raw.getOpenPositions().catch((e: Error) => (/ORA-20301/.test(e.message) ? refused++ : Promise.reject(e)));
      expect(refused).toBeGreaterThan(0);
      await raw.close();
    } finally {
      await client.close();
      await sim.stop();
    }
  });
});

describe('broker-call budget: an intent\'s time to live', () => {
  test('counts on the limiter\'s clock, not the wall clock (a virtual clock far from now)', async () => {
    const clock = new ManualClock(1_000); // far behind Date.now(): a wall-clock deadline would never pass
    const decider: LimitDecider = {
      async shouldRateLimit() {
        return { overallCode: 2, statuses: [{ code: 2, durationUntilReset: 3600, limitRemaining: 0 }], responseHeadersToAdd: [] };
      },
    };
    let slept = 0;
    const l = new BrokerCallBudget({ decider, account: 'A', clock, marginMs: 0, sleep: async (ms) => { slept += ms; clock.advance(ms); } });
    const outcome = await l.withIntent({ ttlMs: 5_000 }, () => l.acquire('/trading/open_trade')).then(
      () => 'sent',
      (e: Error) => e.name,
    );
    expect(outcome).toBe('IntentExpiredError');
    expect(slept).toBeLessThanOrEqual(5_001); // dropped at its deadline, not after the hour's reset
  });
});

describe("broker-call budget: the broker's 429", () => {
  /** The simulator behind a budget on a manual clock whose waits advance it; the budget allows everything. */
  async function setup() {
    const sim = await startSim();
    const clock = new ManualClock(1_000_000);
    const asked: string[] = [];
    const inner = inProcessDecider([{ name: 'open.yaml', content: 'domain: fxcm\n' }], clock).decider;
    const decider: LimitDecider = { shouldRateLimit: (r) => (asked.push(r.descriptors[0]!.entries[2]!.value), inner.shouldRateLimit(r)) };
    const sent: Array<[string, number]> = [];
    const held: Array<[string, number, number, boolean]> = [];
    const l = new BrokerCallBudget({
      decider,
      account: 'A',
      clock,
      marginMs: 0,
      sleep: async (ms) => void clock.advance(ms),
      onSent: (endpoint) => void sent.push([endpoint, clock.nowMs() - 1_000_000]),
      onThrottled: (endpoint, status, holdMs, fromRetryAfter) => void held.push([endpoint, status, holdMs, fromRetryAfter]),
    });
    const client = newClient(sim, { beforeRequest: l.beforeRequest, afterResponse: l.afterResponse });
    await client.connect();
    return { sim, clock, asked, sent, held, l, client };
  }

  test('a 429 with Retry-After holds the next call of its kind until then, and no other kind; the held call still asks the budget', async () => {
    const { sim, asked, sent, held, l, client } = await setup();
    try {
      await client.getAccountId();
      sim.faults.httpErrorNext('/trading/open_trade', { status: 429, retryAfter: '7' });
      const refused = client.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 10 });
      await expect(refused).rejects.toMatchObject({ name: 'FxcmRateLimitError', httpStatus: 429, retryAfterMs: 7000 });
      expect(held).toEqual([['open_trade', 429, 7000, true]]);
      sent.length = 0;
      asked.length = 0;
      const next = client.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 10 });
      const snapshot = client.getOpenPositions();
      await Promise.all([next, snapshot]);
      // the snapshot went at once; the order after the 7 s the broker asked for, having asked the budget
      expect(sent.find(([e]) => e === 'get_model')![1]).toBe(0);
      expect(sent.find(([e]) => e === 'open_trade')![1]).toBeGreaterThanOrEqual(7000);
      expect(asked).toContain('open_trade');
      expect(l.budget().find((b) => b.endpoint === 'open_trade')).toMatchObject({ sent: 2, throttled: 1 });
    } finally {
      await client.close();
      await sim.stop();
    }
  });

  test('429s without Retry-After back off 1 s, then 2 s in a row; an answer that passes ends the row', async () => {
    const { sim, sent, held, client } = await setup();
    try {
      sim.faults.httpErrorNext('/trading/get_model', { status: 429 }, 2);
      await expect(client.getOpenPositions()).rejects.toMatchObject({ httpStatus: 429, retryAfterMs: undefined });
      await expect(client.getOpenPositions()).rejects.toMatchObject({ httpStatus: 429 });
      await client.getOpenPositions();
      sim.faults.httpErrorNext('/trading/get_model', { status: 429 });
      await expect(client.getOpenPositions()).rejects.toMatchObject({ httpStatus: 429 });
      expect(held.map((h) => h[2])).toEqual([1000, 2000, 1000]);
      const at = sent.filter(([e]) => e === 'get_model').map(([, t]) => t);
      expect(at.slice(0, 3)).toEqual([0, 1000, 3000]);
    } finally {
      await client.close();
      await sim.stop();
    }
  });

  test('a 500 carries its status and is no reason to hold; a 503 with Retry-After holds as asked', async () => {
    const { sim, held, sent, client } = await setup();
    try {
      sim.faults.httpErrorNext('/trading/get_model', { status: 500 });
      await expect(client.getOpenPositions()).rejects.toMatchObject({ name: 'FxcmServerError', httpStatus: 500, retryAfterMs: undefined });
      expect(held).toEqual([]);
      sim.faults.httpErrorNext('/trading/get_model', { status: 503, retryAfter: '3' });
      await expect(client.getOpenPositions()).rejects.toMatchObject({ name: 'FxcmServerError', httpStatus: 503, retryAfterMs: 3000 });
      expect(held).toEqual([['get_model', 503, 3000, true]]);
      await client.getOpenPositions();
      expect(sent.filter(([e]) => e === 'get_model').map(([, t]) => t)).toEqual([0, 0, 3000]);
    } finally {
      await client.close();
      await sim.stop();
    }
  });
});
