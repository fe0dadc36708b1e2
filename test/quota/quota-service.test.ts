/**
 * The RLQS engine without a transport, on a manual clock: assignments from the rules, whole-token
 * division by demand across streams, time to live against the stream's cadence, stable
 * assignments, release on end and on idleness, abandons, config changes, and what a stream may
 * report (absurd figures are clamped, a bucket budget refuses buckets, not the stream).
 */
import { ManualClock } from '../../src/platform/clock';
import type { RateLimitConfig } from '../../src/config/types';
import { MemoryDemandStore } from '../../src/quota/demand';
import { QuotaService, type QuotaStream } from '../../src/quota/quota-service';
import { quotaBudgets } from '../../src/quota/admission';
import type { BucketAction, QuotaStrategy } from '../../src/quota/types';
import { StatsStore } from '../../src/stats/store';
import { load } from '../config/helpers';

const YAML = `domain: d
descriptors:
  - key: api
    value: search
    rate_limit: {unit: second, requests_per_unit: 100}
  - key: api
    value: small
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: api
    value: free
    rate_limit: {unlimited: true}
  - key: api
    value: shadow
    rate_limit: {unit: second, requests_per_unit: 1}
    shadow_mode: true
  - key: api
    value: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: api
    value: open
`;

function setup(yaml = YAML, maxBucketsPerStream = 3) {
  const clock = new ManualClock(1_000_000);
  let config: RateLimitConfig = load(yaml);
  const stats = new StatsStore();
  const service = new QuotaService({ config: () => config, demand: new MemoryDemandStore(), clock, unmatched: { strategy: 'allow-all', ttlSeconds: 5 }, budgets: quotaBudgets({ streamBuckets: maxBucketsPerStream }), stats });
  const stream = () => {
    const sent: BucketAction[][] = [];
    const s = service.open((a) => sent.push(a));
    /** The latest assignment of a bucket (by its api value). */
    const latest = (api: string): { strategy: QuotaStrategy; ttlSeconds: number } | undefined => {
      for (let i = sent.length - 1; i >= 0; i--) for (const a of sent[i]!) if (a.bucket.get('api') === api && 'assign' in a) return a.assign;
      return undefined;
    };
    return { s, sent, latest, rate: (api: string) => rateOf(latest(api)?.strategy) };
  };
  /** Moves the clock (running the service's pushes and exchanges). */
  const advance = async (ms: number) => {
    clock.advance(ms);
    await service.settled();
    clock.advance(0);
  };
  return { clock, service, stats, stream, advance, setConfig: (y: string) => (config = load(y)) };
}

const api = (v: string) => new Map([['api', v]]);
const report = (s: QuotaStream, bucket: Map<string, string>, elapsedSeconds: number, allowed: number, denied = 0, domain = 'd') =>
  s.report({ domain, usages: [{ bucket, elapsedSeconds, allowed, denied }] });
const rateOf = (st: QuotaStrategy | undefined) => (st?.kind === 'token-bucket' ? st.tokensPerFill / st.fillIntervalSeconds : NaN);

test("a bucket's first report (time_elapsed 0, as Envoy sends it) is answered at once: half the limit in whole tokens and a small burst until a rate is reported, 20 s to live", async () => {
  const { stream, advance } = setup();
  const a = stream();
  report(a.s, api('search'), 0, 1);
  expect(a.sent).toEqual([[{ bucket: api('search'), assign: { ttlSeconds: 20, strategy: { kind: 'token-bucket', tokensPerFill: 500, fillIntervalSeconds: 10, maxTokens: 10 } } }]]);
  await advance(5000);
  report(a.s, api('search'), 5, 250);
  expect(a.latest('search')?.strategy).toEqual({ kind: 'token-bucket', tokensPerFill: 1000, fillIntervalSeconds: 10, maxTokens: 20 });
});

test("the time to live covers four of the stream's report intervals: 20 s at Envoy's 5 s, 4 s for a client reporting every second", async () => {
  const { stream, advance } = setup();
  const a = stream();
  report(a.s, api('search'), 0, 1);
  expect(a.latest('search')?.ttlSeconds).toBe(20);
  // A shorter time to live goes out with the next assignment (the 15 s one runs until then).
  for (let i = 0; i < 16; i++) {
    await advance(1000);
    report(a.s, api('search'), 1, 50);
  }
  expect(a.latest('search')?.ttlSeconds).toBeLessThanOrEqual(5);
  expect(a.latest('search')?.ttlSeconds).toBeGreaterThanOrEqual(4);
});

test('an unchanged assignment is sent again only when the next report could come after it expires (every third report at 5 s)', async () => {
  const { stream, advance } = setup();
  const a = stream();
  report(a.s, api('search'), 0, 1);
  const sentAt: number[] = [];
  for (let t = 5; t <= 80; t += 5) {
    await advance(5000);
    const before = a.sent.length;
    report(a.s, api('search'), 5, 250 + (t % 10)); // 50/s, give or take a request
    if (a.sent.length > before) sentAt.push(t);
  }
  // The full share at 5 s, its burst doubling at each report (5, 10, 15 s: 20, 40, 80 tokens);
  // from then on every third report, the same bucket.
  const steady = sentAt.filter((t) => t > 20);
  expect(steady).toEqual([30, 45, 60, 75]);
  expect(a.sent).toHaveLength(1 + sentAt.length);
  expect(new Set(a.sent.slice(-steady.length - 1).map((x) => JSON.stringify('assign' in x[0]! && x[0].assign.strategy))).size).toBe(1);
});

test('shares follow demand, add up to the limit exactly, and stay put while demand moves by less than a tenth', async () => {
  const { stream, advance } = setup();
  const streams = [stream(), stream(), stream()];
  for (const x of streams) report(x.s, api('search'), 0, 1);
  const demands = [10, 20, 70];
  // Enough rounds for the bursts to grow (twofold per assignment) to a second of each share.
  for (let round = 0; round < 6; round++) {
    await advance(5000);
    streams.forEach((x, i) => report(x.s, api('search'), 5, 5 * demands[i]!));
  }
  await advance(100);
  const rates = streams.map((x) => x.rate('search'));
  expect(rates[0]).toBeLessThan(rates[1]!);
  expect(rates[1]).toBeLessThan(rates[2]!);
  expect(rates[0]).toBeGreaterThanOrEqual(10 * 0.9); // demand under its share: it gets its demand and more
  expect(rates.reduce((s, r) => s + r, 0)).toBeCloseTo(100, 9);
  const held = streams.map((x) => x.latest('search')?.strategy);
  // 5 % more demand: not material; what is sent (a time to live renewed) is the same bucket.
  await advance(5000);
  streams.forEach((x, i) => report(x.s, api('search'), 5, Math.round(5 * demands[i]! * 1.05)));
  await advance(100);
  expect(streams.map((x) => x.latest('search')?.strategy)).toEqual(held);
});

test('drifting demand is divided again a second after the last push in a small bucket, up to 2.5 s after it in a bucket of a thousand streams', async () => {
  for (const [n, everyMs] of [
    [2, 1000],
    [1000, 2500],
  ] as const) {
    const { stream, advance } = setup();
    const streams = Array.from({ length: n }, () => stream());
    for (const x of streams) report(x.s, api('search'), 0, 1);
    for (let round = 0; round < 3; round++) {
      await advance(5000);
      for (const x of streams) report(x.s, api('search'), 5, 500);
    }
    await advance(5000);
    // (each asks 100 a second, more than its share: its share follows its demand)
    // Half the streams triple their demand: the other half is told its smaller share at the next push ...
    const [moving, steady] = [streams.slice(0, n / 2), streams.slice(n / 2)];
    for (const x of moving) report(x.s, api('search'), 5, 1500);
    for (const x of steady) report(x.s, api('search'), 5, 500);
    const told = () => steady.reduce((k, x) => k + x.sent.length, 0);
    await advance(100);
    const afterFirst = told();
    // ... and when the movers drop back half a second later, the steady half is told again only
    // once the bucket's drift interval has passed since that push.
    await advance(500);
    for (const x of moving) report(x.s, api('search'), 0.5, 50);
    await advance(everyMs - 600);
    expect([n, told()]).toEqual([n, afterFirst]);
    await advance(150);
    expect(told()).toBeGreaterThan(afterFirst);
  }
});

test('a stream that ends keeps its share reserved for most of an interval (Envoy may reopen), then the others get it at once', async () => {
  const { stream, advance } = setup();
  const [a, b] = [stream(), stream()];
  for (const x of [a, b]) report(x.s, api('search'), 0, 1);
  await advance(5000);
  for (const x of [a, b]) report(x.s, api('search'), 5, 500);
  await advance(100);
  expect(a.rate('search')).toBe(50);
  b.s.close();
  await advance(2900);
  expect(a.rate('search')).toBe(50);
  await advance(200);
  expect(a.rate('search')).toBe(100);
});

test('a stream that reports no request gives its share back at once (the others are told); it keeps one token', async () => {
  const { stream, advance } = setup();
  const [a, b] = [stream(), stream()];
  for (const x of [a, b]) report(x.s, api('search'), 0, 1);
  await advance(5000);
  for (const x of [a, b]) report(x.s, api('search'), 5, 500);
  await advance(5000);
  report(b.s, api('search'), 5, 0);
  await advance(100);
  expect(b.latest('search')?.strategy).toMatchObject({ kind: 'token-bucket', tokensPerFill: 1, fillIntervalSeconds: 10 });
  expect(a.rate('search')).toBeCloseTo(99.9, 9);
});

test('a bucket with no request for six reports is abandoned (Envoy then stops reporting it); its share goes back', async () => {
  const { stream, advance, stats } = setup();
  const a = stream();
  report(a.s, api('search'), 0, 1);
  for (let i = 0; i < 5; i++) {
    await advance(5000);
    report(a.s, api('search'), 5, 0);
  }
  expect(a.s.bucketCount).toBe(1);
  await advance(5000);
  report(a.s, api('search'), 5, 0);
  expect(a.sent[a.sent.length - 1]).toEqual([{ bucket: api('search'), abandon: true }]);
  expect(a.s.bucketCount).toBe(0);
  expect(stats.counter('ratelimit.rlqs.abandons').value).toBe(1);
});

test('unlimited and shadow-mode rules and whitelisting descriptors allow all; requests_per_unit 0 denies all; an unplaced bucket gets the default for at least four intervals', () => {
  const { stream } = setup(YAML, 10);
  const x = stream();
  for (const v of ['free', 'shadow', 'blocked', 'open']) report(x.s, api(v), 0, 1);
  expect(['free', 'shadow', 'blocked', 'open'].map((v) => x.latest(v)?.strategy.kind)).toEqual(['allow-all', 'allow-all', 'deny-all', 'allow-all']);
  report(x.s, new Map([['colour', 'red']]), 0, 1);
  expect(x.sent[x.sent.length - 1]![0]).toMatchObject({ assign: { strategy: { kind: 'allow-all' }, ttlSeconds: 20 } });
});

test('a config change re-assigns: a new limit is sent, a removed rule abandons its buckets', async () => {
  const { stream, service, setConfig } = setup();
  const a = stream();
  report(a.s, api('search'), 0, 1);
  report(a.s, api('free'), 0, 1);
  setConfig(YAML.replace('requests_per_unit: 100', 'requests_per_unit: 40'));
  await service.configChanged();
  expect(a.rate('search')).toBe(20); // half, until the stream reports a rate
  setConfig('domain: d\ndescriptors:\n  - key: other\n    rate_limit: {unit: second, requests_per_unit: 1}\n');
  await service.configChanged();
  expect(a.sent[a.sent.length - 1]).toEqual([
    { bucket: api('search'), abandon: true },
    { bucket: api('free'), abandon: true },
  ]);
  expect(a.s.bucketCount).toBe(0);
});

test('a report with the domain and no usage (Envoy with no bucket left) keeps the stream; it may even come first', () => {
  const { stream } = setup();
  const a = stream();
  a.s.report({ domain: 'd', usages: [] });
  report(a.s, api('search'), 0, 1);
  a.s.report({ domain: '', usages: [] });
  expect(a.rate('search')).toBe(50);
});

test('streams that join a bucket: the others are divided again at once, so the shares never add up to more than the limit', async () => {
  const { stream, advance } = setup();
  const all = Array.from({ length: 10 }, () => stream());
  const total = () => all.reduce((sum, x) => sum + (x.sent.length ? x.rate('search') : 0), 0);
  for (const x of all) {
    report(x.s, api('search'), 0, 1);
    await advance(100);
    expect(total()).toBeLessThanOrEqual(100 + 1e-9);
  }
  // An equal split, each holding half of its part until it reports a rate (a part that moved by less than a tenth is not sent again).
  for (const x of all) expect([x.rate('search'), x.rate('search') >= 5 && x.rate('search') <= 5.5]).toEqual([x.rate('search'), true]);
});

test('a push of many groups is cut into turns of the event loop (reports are read in between), and every stream is told', async () => {
  /** A manual clock that numbers the timer callbacks it runs: one per turn of the event loop. */
  class TurnClock extends ManualClock {
    turn = 0;
    override setTimeout(fn: () => void, ms: number): unknown {
      return super.setTimeout(() => {
        this.turn++;
        fn();
      }, ms);
    }
  }
  const clock = new TurnClock(1_000_000);
  const yaml = ['domain: d', 'descriptors:', ...['a', 'b', 'c'].map((v) => `  - key: api\n    value: ${v}\n    rate_limit: {unit: second, requests_per_unit: 100000}`)].join('\n');
  const config = load(yaml);
  const service = new QuotaService({ config: () => config, demand: new MemoryDemandStore(), clock, unmatched: { strategy: 'allow-all', ttlSeconds: 5 }, budgets: quotaBudgets({ streamBuckets: 3 }) });
  const turnsOf = new Map<string, Set<number>>(); // bucket -> turns its pushes went out in
  const told = new Set<string>();
  const streams = Array.from({ length: 6000 }, (_, i) =>
    service.open((actions) => {
      for (const a of actions) {
        const v = a.bucket.get('api')!;
        let t = turnsOf.get(v);
        if (t === undefined) turnsOf.set(v, (t = new Set()));
        t.add(clock.turn);
        told.add(`${i}/${v}`);
      }
    }),
  );
  // Every stream's first report of the three buckets, all at once: the groups are divided again at the next push.
  for (const s of streams) s.report({ domain: 'd', usages: ['a', 'b', 'c'].map((v) => ({ bucket: api(v), elapsedSeconds: 0, allowed: 1, denied: 0 })) });
  const turn0 = clock.turn;
  turnsOf.clear();
  told.clear();
  clock.advance(100);
  const pushTurns = new Set([...turnsOf.values()].flatMap((t) => [...t]));
  expect(pushTurns.size).toBe(2); // 18,000 streams of groups: 10,000 or so per turn
  expect(Math.min(...pushTurns)).toBeGreaterThan(turn0);
  for (const t of turnsOf.values()) expect(t.size).toBe(1); // a group is told in one turn
  // The streams that joined first held more than an equal part: each of them is told its new one.
  expect(told.size).toBeGreaterThan(3 * 3000);
});

test('an exchange of thousands of groups (buckets of their own) is cut into slices of 5,000, one demand-store call and one turn of the event loop each', async () => {
  const clock = new ManualClock(1_000_000);
  const config = load('domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 100}\n');
  // A tick per turn of the event loop: the turn each call of the demand store was made in.
  let ticks = 0;
  let ticking = true;
  const tick = (): void => {
    ticks++;
    if (ticking) setImmediate(tick);
  };
  setImmediate(tick);
  const calls: Array<{ groups: number; tick: number }> = [];
  const inner = new MemoryDemandStore();
  const demand = {
    exchange: (...args: Parameters<MemoryDemandStore['exchange']>) => {
      calls.push({ groups: args[1].size, tick: ticks });
      return inner.exchange(...args);
    },
    release: inner.release.bind(inner),
  };
  const quota = new QuotaService({ config: () => config, demand, clock, unmatched: { strategy: 'allow-all', ttlSeconds: 5 }, budgets: quotaBudgets({}) });
  try {
    const s = quota.open(() => undefined);
    s.report({ domain: 'd', usages: Array.from({ length: 12_000 }, (_, i) => ({ bucket: new Map([['user', `u${i}`]]), elapsedSeconds: 0, allowed: 1, denied: 0 })) });
    clock.advance(0); // streams joining: the exchange comes at once
    await quota.settled();
    expect(calls.map((c) => c.groups)).toEqual([5000, 5000, 2000]);
    expect(new Set(calls.map((c) => c.tick)).size).toBe(3);
  } finally {
    ticking = false;
    quota.close();
  }
});

test('a stream that stops reporting a bucket (its stream still open) is left out of the division after two of its intervals and a second, found within 5 s more', async () => {
  const { stream, advance } = setup();
  const [a, b] = [stream(), stream()];
  report(a.s, api('search'), 0, 1);
  report(b.s, api('search'), 0, 1);
  for (let i = 0; i < 4; i++) {
    await advance(5000);
    report(a.s, api('search'), 5, 5 * 90);
    report(b.s, api('search'), 5, 5 * 90);
  }
  await advance(100);
  expect(a.rate('search')).toBeLessThan(60); // both ask for 90/s of 100: about half each
  // b falls silent; a goes on reporting every 5 s.
  const aRates: number[] = [];
  for (let t = 5; t <= 20; t += 5) {
    await advance(5000);
    report(a.s, api('search'), 5, 5 * 90);
    await advance(100);
    aRates.push(a.rate('search'));
  }
  expect(aRates[1]).toBeLessThan(60); // 10 s after b's last report: b still counts
  expect(aRates[3]).toBeGreaterThan(85); // by 20 s (stale at 11 s, found within 5 s more): a gets what b left
});

test('the look for stale streams is spread: a fifth of the buckets at each once-a-second exchange, each bucket every 5 s', async () => {
  const { stream, advance } = setup('domain: d\ndescriptors:\n  - key: api\n    rate_limit: {unit: second, requests_per_unit: 100}\n', 20);
  const [a, b] = [stream(), stream()];
  const all = Array.from({ length: 10 }, (_, i) => `b${i}`);
  const both = (x: typeof a, elapsed: number, allowed: number) => x.s.report({ domain: 'd', usages: all.map((v) => ({ bucket: api(v), elapsedSeconds: elapsed, allowed, denied: 0 })) });
  both(a, 0, 1);
  both(b, 0, 1);
  for (let i = 0; i < 4; i++) {
    await advance(5000);
    both(a, 5, 5 * 90);
    both(b, 5, 5 * 90);
  }
  // b falls silent; a reports every 5 s. When does a get each bucket's whole limit?
  const takenAt = new Map<string, number>();
  for (let s = 1; s <= 25; s++) {
    await advance(1000);
    if (s % 5 === 0) both(a, 5, 5 * 90);
    for (const v of all) if (!takenAt.has(v) && a.rate(v) > 85) takenAt.set(v, s);
  }
  expect(takenAt.size).toBe(10);
  expect(Math.max(...takenAt.values())).toBeLessThanOrEqual(11 + 5 + 1);
  expect(new Set(takenAt.values()).size).toBeGreaterThanOrEqual(3); // not all in one pass
});

test("a bucket's name, pairs and placement are held once for all the streams that report it, and forgotten when the last lets it go", async () => {
  const { service, stream, advance } = setup();
  const byDomain = () => (service as unknown as { named: Map<string, Map<string, { streams: number }>> }).named;
  const named = () => new Map([...byDomain()].flatMap(([d, names]) => [...names].map(([k, n]) => [`${d}|${k}`, n] as const)));
  const [a, b] = [stream(), stream()];
  report(a.s, api('search'), 0, 1);
  report(b.s, new Map([['api', 'search']]), 0, 1); // another map with the same pairs
  report(b.s, api('small'), 0, 1);
  expect([...named().entries()].map(([k, n]) => [k, n.streams])).toEqual([
    ['d|[["api","search"]]', 2],
    ['d|[["api","small"]]', 1],
  ]);
  // b ends: its names are let go (after its shares' reserve), a's stays.
  b.s.close();
  await advance(5000);
  expect([...named().entries()].map(([k, n]) => [k, n.streams])).toEqual([['d|[["api","search"]]', 1]]);
  // a's bucket idle until abandoned (six reports with no request): nothing is left.
  for (let i = 0; i < 6; i++) {
    await advance(5000);
    report(a.s, api('search'), 5, 0);
  }
  expect(a.sent.at(-1)).toEqual([{ bucket: api('search'), abandon: true }]);
  expect(byDomain().size).toBe(0);
});

test('a stream whose rate is not measured yet counts as the mean of the measured ones, not as zero', async () => {
  const { stream, advance } = setup();
  const [a, b] = [stream(), stream()];
  report(a.s, api('search'), 0, 1);
  await advance(5000);
  report(a.s, api('search'), 5, 400);
  report(b.s, api('search'), 0, 1); // b's first report: no rate yet
  await advance(100);
  expect([a.rate('search'), b.rate('search')]).toEqual([50, 25]); // b: half its share of 50 until it reports a rate
});

test('absurd reports are clamped, never turned into more than the limit: time_elapsed of years, counts near 2^64', async () => {
  const { stream, advance } = setup();
  const [a, b] = [stream(), stream()];
  report(a.s, api('search'), 86400 * 365 * 30, 2 ** 64, 2 ** 64);
  report(b.s, api('search'), 0, 1);
  await advance(5000);
  report(b.s, api('search'), 5, 100);
  report(a.s, api('search'), 5, 2 ** 64);
  await advance(100);
  const [sa, sb] = [a.latest('search')!.strategy, b.latest('search')!.strategy];
  expect(sa.kind).toBe('token-bucket');
  expect(rateOf(sa) + rateOf(sb)).toBeCloseTo(100, 9);
  expect(rateOf(sb)).toBeGreaterThan(0);
  expect(Number.isInteger(sa.kind === 'token-bucket' && sa.tokensPerFill)).toBe(true);
});

test('a stream over its bucket budget: the report is answered (the excess denied under a limit, its rule\'s answer otherwise), then the stream ends RESOURCE_EXHAUSTED', () => {
  const { stream, stats } = setup(YAML, 2);
  const a = stream();
  const usages = ['search', 'small', 'blocked', 'free'].map((v) => ({ bucket: api(v), elapsedSeconds: 0, allowed: 1, denied: 0 }));
  expect(() => a.s.report({ domain: 'd', usages })).toThrow(
    expect.objectContaining({ name: 'QuotaStreamError', code: 8, message: 'this stream would track more than 2 buckets (RLQS_MAX_BUCKETS_PER_STREAM)' }),
  );
  expect(['search', 'small', 'blocked', 'free'].map((v) => a.latest(v)?.strategy.kind)).toEqual(['token-bucket', 'token-bucket', 'deny-all', 'allow-all']);
  expect(a.s.bucketCount).toBe(2);
  expect(stats.counter('ratelimit.rlqs.refused_buckets').value).toBe(2);
  expect(stats.counter('ratelimit.rlqs.stream_budget_exhausted').value).toBe(1);
});

test("a bucket sent again in the same bytes is found by them, its pairs not read; in other bytes, by its pairs; an abandoned bucket's bytes are forgotten", async () => {
  const { stream, advance } = setup();
  const a = stream();
  const unread = (wire: string, allowed: number) => ({
    wire,
    get bucket(): Map<string, string> {
      throw new Error('the pairs of a known bucket were read');
    },
    elapsedSeconds: 5,
    allowed,
    denied: 0,
  });
  a.s.report({ domain: 'd', usages: [{ bucket: api('search'), wire: 'W1', elapsedSeconds: 0, allowed: 1, denied: 0 }] });
  expect(a.sent[0]![0]!.wire).toBe('W1'); // answered with the bytes it came in
  await advance(5000);
  a.s.report({ domain: 'd', usages: [unread('W1', 250)] });
  expect(a.s.bucketCount).toBe(1);
  // The same pairs in other bytes (another map order): the same bucket.
  await advance(5000);
  a.s.report({ domain: 'd', usages: [{ bucket: api('search'), wire: 'W2', elapsedSeconds: 5, allowed: 250, denied: 0 }] });
  expect(a.s.bucketCount).toBe(1);
  // Idle until abandoned: its bytes name nothing any more, so the next report of them is read in full.
  for (let i = 0; i < 6; i++) {
    await advance(5000);
    a.s.report({ domain: 'd', usages: [unread('W1', 0)] });
  }
  expect(a.s.bucketCount).toBe(0);
  expect(() => a.s.report({ domain: 'd', usages: [unread('W1', 1)] })).toThrow('the pairs of a known bucket were read');
});

test('a bucket sent in ever other bytes is found by its pairs and adds nothing to what the stream holds', () => {
  const { stream } = setup(YAML, 2);
  const a = stream();
  for (let i = 0; i < 50; i++) a.s.report({ domain: 'd', usages: [{ bucket: api('search'), wire: `W${i}`, elapsedSeconds: 0, allowed: 1, denied: 0 }] });
  expect(a.s.bucketCount).toBe(1);
  expect((a.s as unknown as { byWire: Map<string, unknown> }).byWire.size).toBe(1);
});

describe('reports a stream ends on', () => {
  const cases: Array<[string, (s: QuotaStream) => void, RegExp]> = [
    ['no domain in the first report', (s) => report(s, api('search'), 0, 1, 0, ''), /must name its domain/],
    ['an empty bucket id', (s) => report(s, new Map(), 0, 1), /at least one key\/value pair/],
    ['an empty key', (s) => report(s, new Map([['', 'x']]), 0, 1), /must not be empty/],
    ['a negative time_elapsed', (s) => report(s, api('search'), -1, 1), /zero or more, got -1 s/],
    ['a second domain', (s) => (report(s, api('search'), 0, 1), report(s, api('search'), 1, 1, 0, 'e')), /one domain: got 'e' after 'd'/],
  ];
  test.each(cases)('%s', (_name, send, message) => {
    const { stream } = setup();
    expect(() => send(stream().s)).toThrow(expect.objectContaining({ name: 'QuotaStreamError', code: 3, message: expect.stringMatching(message) }));
  });
});
