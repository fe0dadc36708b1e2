/**
 * The broker's limits hold over every window of their length (issue: with a 3-per-minute fixed
 * window, six candle calls went out within 33 s, 3 at hh:11:27 and 3 at hh:12:00): the start-up
 * check's worst case per algorithm, checked against the real algorithms; the bundled config; the
 * issue's burst through the BrokerCallBudget; and the paper command's refusal / --allow-over-budget.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ManualClock } from '../../../../src/platform/clock';
import { mulberry32 } from '../../../../src/platform/random';
import type { RateLimitRule } from '../../../../src/core/rule';
import { paperCommand } from '../../../../src/trading/runner/cli/live-cli';
import { BrokerCallBudget, DOCUMENTED_LIMITS, budgetProblems, checkBudget, inProcessDecider, retryAfterS, worstCaseOfLimit } from '../../../../src/trading/runner/broker/call-budget';
import { startSim, TOKEN } from '../../helpers';

const BUNDLED_FILE = path.join(__dirname, '../../../../examples/runner/broker-limits.yaml');
const BUNDLED = fs.readFileSync(BUNDLED_FILE, 'utf8');
const CANDLES_RULE = 'rate_limit: {unit: minute, requests_per_unit: 2, algorithm: token_bucket, burst: 2}';
const OPEN_POSITION_RULE = 'rate_limit: {unit: hour, requests_per_unit: 45, algorithm: token_bucket, burst: 5}';
const MIN = 60_000;

/** The bundled config with one rule line replaced. */
function bundledWith(rule: string, by: string): { name: string; content: string }[] {
  expect(BUNDLED).toContain(rule);
  return [{ name: 'limits.yaml', content: BUNDLED.replace(rule, by) }];
}

function check(files: { name: string; content: string }[]) {
  const clock = new ManualClock(0);
  const { decider, config } = inProcessDecider(files, clock);
  const limiter = new BrokerCallBudget({ decider, account: 'A1', clock });
  return { problems: budgetProblems(config, limiter), lines: checkBudget(config, limiter), config, limiter };
}

describe('start-up check: worst case over any window of the documented length', () => {
  test('the bundled config holds every documented limit (candles included) with token buckets', () => {
    const { problems, config, limiter } = check([{ name: BUNDLED_FILE, content: BUNDLED }]);
    expect(problems).toEqual([]);
    expect(DOCUMENTED_LIMITS.map((d) => [d.what, d.max, d.windowS])).toEqual([
      ['get_model OpenPosition (Cmd=44)', 50, 3600],
      ['get_model Order (Cmd=46)', 1500, 3600],
      ['update_subscriptions (Cmd=24)', 500, 3600],
      ['candles', 3, 60],
    ]);
    expect(DOCUMENTED_LIMITS[3]!.source).toContain('#179');
    // every documented limit has a token-bucket rule whose worst case fits
    const worst = DOCUMENTED_LIMITS.map((d) => {
      const rules = limiter.descriptorsFor(d.endpoint, d.params).map((x) => config.getLimit('fxcm', x)).filter((r): r is RateLimitRule => r !== undefined);
      expect(rules.map((r) => r.algorithm)).toEqual(['token_bucket']);
      return worstCaseOfLimit(rules[0]!, d.windowS);
    });
    expect(worst).toEqual([49, 1499, 499, 3]);
  });

  test('a fixed-window 3/minute candles rule (the issue) is reported with its worst case and the fix', () => {
    const { problems, lines } = check(bundledWith(CANDLES_RULE, 'rate_limit: {unit: minute, requests_per_unit: 3}'));
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatchObject({ worst: 6, limit: { what: 'candles', max: 3, windowS: 60 } });
    expect(lines).toEqual([
      'candles: rule fxcm.broker_fxcm.account.endpoint_candles {unit: minute, requests_per_unit: 3} (fixed window) can send up to 6 calls within 60 s; ' +
        'the broker allows 3 per 60 s (FXCM staff, RestAPI issue #179: "the maximum frequency is 3 request per min"). ' +
        'Fix: use algorithm: token_bucket with requests_per_unit + burst - 1 <= 3 per minute, e.g. {unit: minute, requests_per_unit: 3, algorithm: token_bucket, burst: 1}',
    ]);
    // today's halved hourly limit in fixed windows is still within the hour (25 + 25), candles are not
    expect(check(bundledWith(OPEN_POSITION_RULE, 'rate_limit: {unit: hour, requests_per_unit: 25}')).problems).toEqual([]);
    expect(check(bundledWith(OPEN_POSITION_RULE, 'rate_limit: {unit: hour, requests_per_unit: 26}')).problems.map((p) => p.worst)).toEqual([52]);
  });

  test('a token bucket that is too generous is reported (rate + burst - 1 over the limit; burst defaults to the rate)', () => {
    let r = check(bundledWith(CANDLES_RULE, 'rate_limit: {unit: minute, requests_per_unit: 3, algorithm: token_bucket}'));
    expect(r.problems.map((p) => [p.limit.what, p.worst])).toEqual([['candles', 5]]);
    expect(r.lines[0]).toContain('{unit: minute, requests_per_unit: 3, algorithm: token_bucket, burst: 3} can send up to 5 calls within 60 s; the broker allows 3 per 60 s');
    r = check(bundledWith(OPEN_POSITION_RULE, 'rate_limit: {unit: hour, requests_per_unit: 46, algorithm: token_bucket, burst: 6}'));
    expect(r.problems.map((p) => [p.limit.what, p.worst, p.rule?.fullKey])).toEqual([['get_model OpenPosition (Cmd=44)', 51, 'fxcm.broker_fxcm.account.endpoint_get_model.model_OpenPosition']]);
    expect(r.lines[0]).toContain('Fix: use algorithm: token_bucket with requests_per_unit + burst - 1 <= 50 per hour, e.g. {unit: hour, requests_per_unit: 46, algorithm: token_bucket, burst: 5}');
    // exactly at the limit passes
    expect(check(bundledWith(OPEN_POSITION_RULE, 'rate_limit: {unit: hour, requests_per_unit: 46, algorithm: token_bucket, burst: 5}')).problems).toEqual([]);
    // a unit other than the documented window: a per-second bucket over an hour
    r = check(bundledWith(OPEN_POSITION_RULE, 'rate_limit: {unit: second, requests_per_unit: 1, algorithm: token_bucket, burst: 1}'));
    expect(r.problems.map((p) => p.worst)).toEqual([3600]);
    // ... and a daily one: ceil(3600 × 50 / 86400) = 3, + burst 1 - 1
    expect(check(bundledWith(OPEN_POSITION_RULE, 'rate_limit: {unit: day, requests_per_unit: 50, algorithm: token_bucket, burst: 1}')).problems).toEqual([]);
  });

  test('sliding windows: the fixed-window bound less one', () => {
    expect(check(bundledWith(CANDLES_RULE, 'rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding_window}')).problems).toEqual([]);
    const r = check(bundledWith(CANDLES_RULE, 'rate_limit: {unit: minute, requests_per_unit: 3, algorithm: sliding_window}'));
    expect(r.problems.map((p) => p.worst)).toEqual([5]);
    expect(r.lines[0]).toContain('{unit: minute, requests_per_unit: 3, algorithm: sliding_window} can send up to 5 calls within 60 s');
  });

  test('several limits (rate_limits) and several descriptors of a call: the tightest counts', () => {
    // a loose per-second limit plus a tight per-minute bucket on the same descriptor: fine
    expect(
      check(bundledWith(CANDLES_RULE, `rate_limit: {unit: second, requests_per_unit: 10}\n            rate_limits:\n              - {unit: minute, requests_per_unit: 2, algorithm: token_bucket, burst: 2}`)).problems,
    ).toEqual([]);
    // two loose ones: the tighter is the one reported
    const r = check(
      bundledWith(CANDLES_RULE, `rate_limit: {unit: second, requests_per_unit: 10}\n            rate_limits:\n              - {unit: minute, requests_per_unit: 3, algorithm: sliding_window}`),
    );
    expect(r.problems.map((p) => [p.worst, p.rule?.fullKey])).toEqual([[5, 'fxcm.broker_fxcm.account.endpoint_candles.limit_2']]);
    // get_model: a tight endpoint-level rule covers a loose model-level one
    const files = bundledWith(OPEN_POSITION_RULE, 'rate_limit: {unit: hour, requests_per_unit: 500}');
    files[0]!.content = files[0]!.content.replace(
      '            value: get_model\n',
      '            value: get_model\n            rate_limit: {unit: hour, requests_per_unit: 40, algorithm: token_bucket, burst: 5}\n',
    );
    expect(check(files).problems).toEqual([]);
  });

  test('no limit, or only a shadow-mode one: reported as no limit', () => {
    const r = check(bundledWith(`            value: candles\n            ${CANDLES_RULE}`, '            value: candles\n            shadow_mode: true\n            rate_limit: {unit: minute, requests_per_unit: 1}'));
    expect(r.lines).toEqual([
      'candles: no limit configured; the broker allows 3 per 60 s (FXCM staff, RestAPI issue #179: "the maximum frequency is 3 request per min"). ' +
        'Fix: add a rule for it and use algorithm: token_bucket with requests_per_unit + burst - 1 <= 3 per minute, e.g. {unit: minute, requests_per_unit: 3, algorithm: token_bucket, burst: 1}',
    ]);
  });
});

// ---------------------------------------------------------------- the bounds against the algorithms

/** Most of `times` (ascending) in any half-open window [s, s + w). */
function maxInWindow(times: readonly number[], w: number): number {
  let best = 0;
  let j = 0;
  for (let i = 0; i < times.length; i++) {
    if (j < i) j = i;
    while (j < times.length && times[j]! < times[i]! + w) j++;
    best = Math.max(best, j - i);
  }
  return best;
}

/** One rule on descriptor k=v; asks at each of `at` (ascending); returns the admitted times and the rule. */
async function admitted(rateLimit: string, at: readonly number[]): Promise<{ times: number[]; rule: RateLimitRule }> {
  const clock = new ManualClock(0);
  const { decider, config } = inProcessDecider([{ name: 'r.yaml', content: `domain: d\ndescriptors:\n  - key: k\n    rate_limit: ${rateLimit}\n` }], clock);
  const descriptor = { entries: [{ key: 'k', value: 'v' }] };
  const times: number[] = [];
  for (const t of at) {
    clock.set(t);
    const res = await decider.shouldRateLimit({ domain: 'd', descriptors: [descriptor], hitsAddend: 1 });
    if (res.overallCode === 1) times.push(t);
  }
  return { times, rule: config.getLimit('d', descriptor)! };
}

const BASE = Date.UTC(2024, 0, 10, 14, 0, 0);

describe('worstCaseOfLimit is a bound of the real algorithms, reached by the worst arrivals', () => {
  const RULES = [
    '{unit: minute, requests_per_unit: 3}',
    '{unit: minute, requests_per_unit: 3, algorithm: sliding_window}',
    '{unit: minute, requests_per_unit: 2, algorithm: token_bucket, burst: 2}',
    '{unit: minute, requests_per_unit: 3, algorithm: token_bucket, burst: 1}',
    '{unit: minute, requests_per_unit: 5, algorithm: token_bucket, burst: 4}',
    '{unit: second, requests_per_unit: 1, algorithm: token_bucket, burst: 3}',
  ];
  test.each(RULES)('%s: random arrivals never exceed the bound in windows of 0.5, 1, 2.5 and 10 units', async (rl) => {
    const next = mulberry32(RULES.indexOf(rl) + 1);
    const unitMs = rl.includes('second') ? 1000 : MIN;
    const at: number[] = [];
    // bursts and gaps over 40 units, at times that are not whole milliseconds apart from edges only
    for (let t = BASE + Math.floor(next() * unitMs); t < BASE + 40 * unitMs; ) {
      const burst = next() < 0.2 ? 1 + Math.floor(next() * 6) : 1;
      for (let i = 0; i < burst; i++) at.push(t);
      t += 1 + Math.floor(next() * next() * unitMs * 0.6);
    }
    const { times, rule } = await admitted(rl, at);
    expect(times.length).toBeGreaterThan(20);
    for (const f of [0.5, 1, 2.5, 10]) {
      const windowS = (f * unitMs) / 1000;
      expect(maxInWindow(times, f * unitMs)).toBeLessThanOrEqual(worstCaseOfLimit(rule, windowS)!);
    }
  });

  test('fixed window: L at the end of a window and L at the start of the next (2L within 1 ms)', async () => {
    const edge = BASE + 11 * MIN;
    const { times, rule } = await admitted('{unit: minute, requests_per_unit: 3}', [edge - 1, edge - 1, edge - 1, edge - 1, edge, edge, edge, edge]);
    expect(times).toEqual([edge - 1, edge - 1, edge - 1, edge, edge, edge]);
    expect(maxInWindow(times, MIN)).toBe(worstCaseOfLimit(rule, 60));
    expect(worstCaseOfLimit(rule, 60)).toBe(6);
  });

  test('sliding window: L at the end of a window after an empty one, then L - 1 just before the next edge (2L - 1)', async () => {
    const edge = BASE + 11 * MIN;
    const late = edge + MIN - 1000; // 1/60 of the window left: the previous 3 weigh 0.05
    const { times, rule } = await admitted('{unit: minute, requests_per_unit: 3, algorithm: sliding_window}', [edge - 1, edge - 1, edge - 1, late, late, late]);
    expect(times).toEqual([edge - 1, edge - 1, edge - 1, late, late]);
    expect(maxInWindow(times, MIN)).toBe(5);
    expect(worstCaseOfLimit(rule, 60)).toBe(5);
  });

  test('token bucket: burst at once, then one per emission interval (rate + burst - 1 per unit)', async () => {
    const t0 = BASE + 11 * MIN + 27_000;
    const { times, rule } = await admitted('{unit: minute, requests_per_unit: 2, algorithm: token_bucket, burst: 2}', [t0, t0, t0, t0 + 29_999, t0 + 30_000, t0 + 59_999, t0 + 60_000]);
    expect(times).toEqual([t0, t0, t0 + 30_000, t0 + 60_000]);
    expect(maxInWindow(times, MIN)).toBe(3);
    expect(worstCaseOfLimit(rule, 60)).toBe(3);
    // over a longer window: burst - 1 + ceil(W × rate / unit)
    expect(worstCaseOfLimit(rule, 150)).toBe(1 + 5);
  });
});

// ---------------------------------------------------------------- end to end through the BrokerCallBudget

const AT_11_27 = Date.UTC(2024, 0, 10, 14, 11, 27);
const AT_12_00 = Date.UTC(2024, 0, 10, 14, 12, 0);

/**
 * Candle calls through a BrokerCallBudget on the in-process service and a ManualClock: `batches` are
 * [time, calls] asked at that time; the limiter's waits are timers of the clock, which the test
 * moves from one event to the next. Returns the times the calls were sent.
 */
async function candleCalls(files: { name: string; content: string }[], batches: [number, number][]): Promise<number[]> {
  const clock = new ManualClock(batches[0]![0] - 1000);
  const { decider } = inProcessDecider(files, clock);
  const wakes: number[] = [];
  const sent: number[] = [];
  const limiter = new BrokerCallBudget({
    decider,
    account: 'A1',
    clock,
    sleep: (ms) => {
      wakes.push(clock.nowMs() + ms);
      return new Promise<void>((r) => clock.setTimeout(r, ms));
    },
    onSent: (endpoint) => {
      expect(endpoint).toBe('candles');
      sent.push(clock.nowMs());
    },
  });
  const settle = async () => {
    for (let i = 0; i < 3; i++) await new Promise((r) => setImmediate(r));
  };
  const calls: Promise<void>[] = [];
  const pending = [...batches];
  let total = 0;
  for (const [, n] of batches) total += n;
  while (sent.length < total) {
    const future = [...pending.map(([t]) => t), ...wakes].filter((t) => t > clock.nowMs());
    if (!future.length) throw new Error(`stuck: ${sent.length} of ${total} calls sent`);
    clock.set(Math.min(...future));
    while (pending.length && pending[0]![0] <= clock.nowMs()) {
      const [, n] = pending.shift()!;
      for (let i = 0; i < n; i++) calls.push(limiter.acquire('/candles/1/m1', {}));
    }
    await settle();
  }
  await Promise.all(calls);
  await limiter.close();
  return sent;
}

describe('end to end: the issue burst of candle calls across a minute boundary', () => {
  test('bundled config: at most 3 candle calls in any 60 s; a fixed 3/minute window sends 6 within 33 s', async () => {
    const burst: [number, number][] = [
      [AT_11_27, 3],
      [AT_12_00, 3],
    ];
    const sent = await candleCalls([{ name: BUNDLED_FILE, content: BUNDLED }], burst);
    expect(sent).toHaveLength(6);
    expect(maxInWindow(sent, MIN)).toBeLessThanOrEqual(3);
    expect(sent[0]).toBe(AT_11_27);

    // control: the config before the fix lets the issue happen (a regression to fixed windows fails above)
    const fixed = await candleCalls(bundledWith(CANDLES_RULE, 'rate_limit: {unit: minute, requests_per_unit: 3}'), burst);
    expect(fixed).toEqual([AT_11_27, AT_11_27, AT_11_27, AT_12_00, AT_12_00, AT_12_00]);
    expect(maxInWindow(fixed, MIN)).toBe(6);
  });

  test('bundled config: calls arriving at random over 10 minutes never exceed 3 in any 60 s', async () => {
    const next = mulberry32(179);
    const batches: [number, number][] = [];
    for (let t = AT_11_27; t < AT_11_27 + 10 * MIN; t += 1000 + Math.floor(next() * 20_000)) batches.push([t, 1 + Math.floor(next() * 2)]);
    const sent = await candleCalls([{ name: BUNDLED_FILE, content: BUNDLED }], batches);
    expect(sent.length).toBe(batches.reduce((n, [, k]) => n + k, 0));
    expect(maxInWindow(sent, MIN)).toBeLessThanOrEqual(3);
    expect(maxInWindow(sent, MIN)).toBeGreaterThanOrEqual(2);
  });
});

describe('waiting for budget', () => {
  test('a token bucket is asked again after one share (unit / rate), not when its whole burst is back', async () => {
    // Bundled candles: 2 per minute, burst 2. Four calls at once: two go, then one every 30 s.
    const sent = await candleCalls([{ name: BUNDLED_FILE, content: BUNDLED }], [[AT_11_27, 4]]);
    expect(sent.slice(0, 2)).toEqual([AT_11_27, AT_11_27]);
    // The 5 ms margin of each wait: the third call goes 30 s after the burst, the fourth 30 s later.
    expect(sent[2]! - AT_11_27).toBeGreaterThanOrEqual(30_000);
    expect(sent[2]! - AT_11_27).toBeLessThan(31_000);
    expect(sent[3]! - sent[2]!).toBeLessThan(31_000);
  });

  test('onWait hears each call held back, with its endpoint and the seconds until it is asked again', async () => {
    const clock = new ManualClock(AT_11_27);
    const { decider } = inProcessDecider([{ name: BUNDLED_FILE, content: BUNDLED }], clock);
    const waits: Array<[string, number]> = [];
    const limiter = new BrokerCallBudget({ decider, account: 'A1', clock, sleep: () => new Promise(() => undefined), onWait: (e, s) => waits.push([e, s]) });
    await limiter.acquire('/candles/1/m1', {});
    await limiter.acquire('/candles/1/m1', {});
    void limiter.acquire('/candles/1/m1', {}).catch(() => undefined); // the third waits
    for (let i = 0; i < 5 && waits.length === 0; i++) await new Promise((r) => setImmediate(r));
    expect(waits).toEqual([['candles', 30]]);
    await limiter.close();
  });

  test('retryAfterS: the earliest useful retry of each refusing limit, the latest of them, at least 1 s', () => {
    const over = (unit: number, requestsPerUnit: number, durationUntilReset: number) => ({ code: 2, currentLimit: { name: '', unit, requestsPerUnit }, limitRemaining: 0, durationUntilReset });
    const res = (...statuses: ReturnType<typeof over>[]) => ({ overallCode: 2, statuses, responseHeadersToAdd: [] });
    expect(retryAfterS(res(over(2, 2, 60)))).toBe(30); // 2 per minute: one share is 30 s
    expect(retryAfterS(res(over(2, 2, 10)))).toBe(10); // a fixed window resetting sooner
    expect(retryAfterS(res(over(3, 45, 400), over(2, 2, 60)))).toBe(80); // 45 per hour: 80 s
    expect(retryAfterS(res(over(1, 100, 1)))).toBe(1);
  });
});

// ---------------------------------------------------------------- the paper command's start-up check

describe('paper: a config that could exceed a documented limit', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rr-budget-'));
  const EX = path.join(__dirname, '../../../../examples/strategies/ma-crossover.js');
  const fixedCandles = path.join(dir, 'fixed-candles.yaml');
  beforeAll(() => fs.writeFileSync(fixedCandles, bundledWith(CANDLES_RULE, 'rate_limit: {unit: minute, requests_per_unit: 3}')[0]!.content));

  async function paper(args: string[]): Promise<{ code: number; stderr: string; stdout: string }> {
    let stderr = '';
    let stdout = '';
    const err = jest.spyOn(process.stderr, 'write').mockImplementation((s: string | Uint8Array) => ((stderr += String(s)), true));
    const out = jest.spyOn(process.stdout, 'write').mockImplementation((s: string | Uint8Array) => ((stdout += String(s)), true));
    try {
      return { code: await paperCommand(args), stderr, stdout };
    } finally {
      err.mockRestore();
      out.mockRestore();
    }
  }

  test('is refused (exit 2) with the problem and its fix', async () => {
    const r = await paper([EX, '--url', 'http://127.0.0.1:9', '--token', TOKEN, '--limits', fixedCandles, '--quiet']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`ratelimit-runner paper: the rate limit config ${fixedCandles} could let calls exceed the broker's documented limits:\n  - candles: rule `);
    expect(r.stderr).toContain('can send up to 6 calls within 60 s; the broker allows 3 per 60 s');
    expect(r.stderr).toContain('Fix: use algorithm: token_bucket with requests_per_unit + burst - 1 <= 3 per minute');
    expect(r.stderr).toContain('refusing to start (fix the config, or pass --allow-over-budget)\n');
    expect(r.stderr).not.toContain('starting anyway');
  });

  test('starts with --allow-over-budget, and still prints the warning; the bundled config starts silently', async () => {
    const sim = await startSim({ tickIntervalMs: 25 });
    try {
      let r = await paper([EX, '--url', sim.url, '--token', TOKEN, '--limits', fixedCandles, '--allow-over-budget', '--duration', '0.3', '--quiet', '--report', path.join(dir, 'r1')]);
      expect(r.stderr).toContain('can send up to 6 calls within 60 s; the broker allows 3 per 60 s');
      expect(r.stderr).toContain('ratelimit-runner paper: starting anyway (--allow-over-budget): the broker may refuse calls over its limits\n');
      expect(r.stderr).not.toContain('refusing to start');
      expect(r.code).toBe(0);
      expect(r.stdout).toContain('paper run on');

      r = await paper([EX, '--url', sim.url, '--token', TOKEN, '--duration', '0.3', '--quiet', '--report', path.join(dir, 'r2')]);
      expect(r.stderr).toBe('');
      expect(r.code).toBe(0);
    } finally {
      await sim.stop();
    }
  });
});
