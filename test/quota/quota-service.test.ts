/**
 * The RLQS engine without a transport: assignments from the rules, division by demand across
 * streams, release on close and on expiry, config changes, and the reports a stream ends on.
 */
import { ManualClock } from '../../src/core/clock';
import type { RateLimitConfig } from '../../src/config/types';
import { MemoryDemandStore } from '../../src/quota/demand';
import { QuotaService, type QuotaStream } from '../../src/quota/quota-service';
import type { BucketAction, QuotaStrategy } from '../../src/quota/types';
import { load } from '../config/helpers';

const YAML = `domain: d
descriptors:
  - key: api
    value: search
    rate_limit: {unit: second, requests_per_unit: 100}
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

function setup(yaml = YAML) {
  const clock = new ManualClock(1_000_000);
  let config: RateLimitConfig = load(yaml);
  const demand = new MemoryDemandStore();
  const service = new QuotaService({ config: () => config, demand, clock, unmatched: { strategy: 'allow-all', ttlSeconds: 5 }, maxBucketsPerStream: 3 });
  const stream = () => {
    const sent: BucketAction[][] = [];
    const s = service.open((a) => sent.push(a));
    return { s, sent, last: () => sent[sent.length - 1] };
  };
  return { clock, service, demand, stream, setConfig: (y: string) => (config = load(y)) };
}

const api = (v: string) => new Map([['api', v]]);
const report = (s: QuotaStream, bucket: Map<string, string>, elapsedSeconds: number, allowed: number, denied = 0, domain = 'd') =>
  s.report({ domain, usages: [{ bucket, elapsedSeconds, allowed, denied }] });
const strategyOf = (actions: BucketAction[] | undefined): QuotaStrategy | undefined => {
  const a = actions?.[0];
  return a !== undefined && 'assign' in a ? a.assign.strategy : undefined;
};
const rate = (st: QuotaStrategy | undefined) => (st?.kind === 'token-bucket' ? st.tokensPerFill / st.fillIntervalSeconds : NaN);

test("a bucket's first report (time_elapsed 0, as Envoy sends it) is answered at once; one stream gets the whole limit", async () => {
  const { stream } = setup();
  const a = stream();
  await report(a.s, api('search'), 0, 1);
  expect(a.sent).toHaveLength(1);
  expect(a.last()![0]).toMatchObject({ bucket: api('search'), assign: { ttlSeconds: 3 } });
  expect(rate(strategyOf(a.last()))).toBe(100);
});

test('the limit is divided by demand with a floor each; the rates add up to no more than the limit', async () => {
  const { stream } = setup();
  const streams = [stream(), stream(), stream()];
  for (const x of streams) await report(x.s, api('search'), 0, 1);
  const demands = [10, 20, 70];
  for (let round = 0; round < 3; round++) for (let i = 0; i < 3; i++) await report(streams[i]!.s, api('search'), 1, demands[i]!);
  // Every stream reports again so each sees the final division.
  for (let i = 0; i < 3; i++) await report(streams[i]!.s, api('search'), 1, demands[i]!);
  const rates = streams.map((x) => rate(strategyOf(x.last())));
  expect(rates[0]).toBeLessThan(rates[1]!);
  expect(rates[1]).toBeLessThan(rates[2]!);
  expect(rates[0]).toBeGreaterThanOrEqual(3); // the floor: a tenth of an equal split (3.33)
  expect(rates.reduce((s, r) => s + r, 0)).toBeLessThanOrEqual(100);
  expect(rates.reduce((s, r) => s + r, 0)).toBeGreaterThanOrEqual(97);
});

test('a stream that ends gives its share back at once; one that stops reporting, after its demand expires', async () => {
  const { stream, clock } = setup();
  const [a, b, c] = [stream(), stream(), stream()];
  for (const x of [a, b, c]) await report(x.s, api('search'), 0, 1);
  // Two rounds: in the first, each sees the demand of those that reported before it.
  for (let round = 0; round < 2; round++) for (const x of [a, b, c]) await report(x.s, api('search'), 1, 50);
  expect(rate(strategyOf(a.last()))).toBeLessThanOrEqual(34);
  c.s.close();
  await report(a.s, api('search'), 1, 50);
  expect(rate(strategyOf(a.last()))).toBe(50);
  // b stops reporting: two intervals (and a second of slack) later a has it all.
  clock.advance(3_100);
  await report(a.s, api('search'), 3, 150);
  expect(rate(strategyOf(a.last()))).toBe(100);
});

test('unlimited and shadow-mode rules and whitelisting descriptors allow all; requests_per_unit 0 denies all; an unplaced bucket gets the default', async () => {
  const { stream } = setup();
  for (const [v, kind] of [['free', 'allow-all'], ['shadow', 'allow-all'], ['blocked', 'deny-all'], ['open', 'allow-all']] as const) {
    const x = stream(); // at most 3 buckets per stream here
    await report(x.s, api(v), 0, 1);
    expect(strategyOf(x.last())).toEqual({ kind });
  }
  const b = stream();
  await report(b.s, new Map([['colour', 'red']]), 0, 1);
  expect(b.last()![0]).toMatchObject({ assign: { strategy: { kind: 'allow-all' }, ttlSeconds: 5 } });
});

test('an unchanged assignment is not sent again until half its time to live has passed', async () => {
  const { stream, clock } = setup();
  const a = stream();
  await report(a.s, api('search'), 0, 1);
  await report(a.s, api('search'), 1, 10);
  const n = a.sent.length;
  await report(a.s, api('search'), 1, 10);
  expect(a.sent).toHaveLength(n);
  clock.advance(1600); // ttl 3 s: half is 1.5 s
  await report(a.s, api('search'), 1, 10);
  expect(a.sent).toHaveLength(n + 1);
});

test('a config change re-assigns: a new limit is sent, a removed rule abandons its buckets', async () => {
  const { stream, service, setConfig } = setup();
  const a = stream();
  await report(a.s, api('search'), 0, 1);
  await report(a.s, api('free'), 0, 1);
  setConfig(YAML.replace('requests_per_unit: 100', 'requests_per_unit: 40'));
  await service.configChanged();
  expect(rate(strategyOf(a.last()))).toBe(40);
  setConfig('domain: d\ndescriptors:\n  - key: other\n    rate_limit: {unit: second, requests_per_unit: 1}\n');
  await service.configChanged();
  expect(a.last()).toEqual([
    { bucket: api('search'), abandon: true },
    { bucket: api('free'), abandon: true },
  ]);
  expect(a.s.bucketCount).toBe(0);
});

test('a report with the domain and no usage (Envoy with no bucket left) keeps the stream; it may even come first', async () => {
  const { stream } = setup();
  const a = stream();
  await a.s.report({ domain: 'd', usages: [] });
  await report(a.s, api('search'), 0, 1);
  await a.s.report({ domain: '', usages: [] });
  expect(rate(strategyOf(a.last()))).toBe(100);
});

test('streams that join a bucket: the ones already there are divided again at once, so the shares never add up to more than the limit', async () => {
  const { stream } = setup();
  const all = Array.from({ length: 10 }, () => stream());
  const total = () => all.reduce((sum, x) => sum + (x.sent.length ? rate(strategyOf(x.last())) : 0), 0);
  for (const x of all) {
    await report(x.s, api('search'), 0, 1);
    await new Promise((r) => setImmediate(r)); // the others' re-division runs in the next turns
    await new Promise((r) => setImmediate(r));
    expect(total()).toBeLessThanOrEqual(100);
  }
  // Ten first reports with no rate yet: an equal split.
  expect(all.map((x) => rate(strategyOf(x.last())))).toEqual(Array(10).fill(10));
  // One leaves: the nine left share its part at once.
  all[9]!.s.close();
  for (let i = 0; i < 3; i++) await new Promise((r) => setImmediate(r));
  expect(all.slice(0, 9).every((x) => rate(strategyOf(x.last())) === 11)).toBe(true);
});

test('a stream whose rate is not measured yet counts as the mean of the measured ones, not as zero', async () => {
  const { stream } = setup();
  const [a, b] = [stream(), stream()];
  await report(a.s, api('search'), 0, 1);
  await report(a.s, api('search'), 1, 80);
  await report(b.s, api('search'), 0, 1); // b's first report: no rate yet
  for (let i = 0; i < 3; i++) await new Promise((r) => setImmediate(r));
  expect(rate(strategyOf(b.last()))).toBe(50);
  expect(rate(strategyOf(a.last()))).toBe(50);
});

describe('reports a stream ends on', () => {
  const cases: Array<[string, (s: QuotaStream) => Promise<void>, number, RegExp]> = [
    ['no domain in the first report', (s) => report(s, api('search'), 0, 1, 0, ''), 3, /must name its domain/],
    ['an empty bucket id', (s) => report(s, new Map(), 0, 1), 3, /at least one key\/value pair/],
    ['an empty key', (s) => report(s, new Map([['', 'x']]), 0, 1), 3, /must not be empty/],
    ['a negative time_elapsed', (s) => report(s, api('search'), -1, 1), 3, /zero or more, got -1 s/],
    ['a second domain', async (s) => (await report(s, api('search'), 0, 1), report(s, api('search'), 1, 1, 0, 'e')), 3, /one domain: got 'e' after 'd'/],
    ['more new buckets than allowed', async (s) => { for (let i = 0; i < 4; i++) await report(s, api(`b${i}`), 0, 1); }, 8, /more than 3 buckets \(RLQS_MAX_BUCKETS_PER_STREAM\)/],
  ];
  test.each(cases)('%s', async (_name, send, code, message) => {
    const { stream } = setup();
    await expect(send(stream().s)).rejects.toMatchObject({ name: 'QuotaStreamError', code, message: expect.stringMatching(message) });
  });
});
