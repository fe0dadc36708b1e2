/**
 * What RLQS streams may make the process hold (src/quota/admission.ts, asked by the engine before
 * it tracks a bucket), on a manual clock: a stream over its own or its connection's budget is
 * answered, then ended RESOURCE_EXHAUSTED naming the setting; a bucket over the process's budget
 * is answered untracked (deny all under a limit) and its stream goes on; what is let go comes
 * back; bucket ids beyond REQUEST_MAX_ENTRIES / REQUEST_MAX_ENTRY_LENGTH end the stream unanswered;
 * /debug/rlqs is made in bounded pieces.
 */
import { ManualClock } from '../../src/platform/clock';
import { BUCKET_BYTES, NAME_BYTES, quotaBudgets } from '../../src/quota/admission';
import { MemoryDemandStore } from '../../src/quota/demand';
import { QuotaService, type QuotaStream } from '../../src/quota/quota-service';
import type { BucketAction, QuotaStrategy } from '../../src/quota/types';
import { StatsStore } from '../../src/stats/store';
import type { Logger } from '../../src/telemetry/logger';
import { load } from '../config/helpers';

const YAML = `domain: d
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 100}
  - key: free
    rate_limit: {unlimited: true}
`;

function setup(budgets: Parameters<typeof quotaBudgets>[0], limits: { maxEntries?: number; maxEntryLength?: number } = {}) {
  const clock = new ManualClock(1_000_000);
  const config = load(YAML);
  const stats = new StatsStore();
  const warnings: string[] = [];
  const logger: Logger = { debug: () => {}, info: () => {}, warn: (m) => warnings.push(m), error: () => {}, enabled: () => true };
  const service = new QuotaService({
    config: () => config,
    demand: new MemoryDemandStore(),
    clock,
    unmatched: { strategy: 'allow-all', ttlSeconds: 5 },
    budgets: quotaBudgets(budgets),
    ...limits,
    stats,
    logger,
  });
  const stream = (connection?: unknown) => {
    const sent: BucketAction[][] = [];
    const s = service.open((a) => sent.push(a), connection);
    /** The latest assignment of a bucket (by its first value). */
    const latest = (value: string): QuotaStrategy | undefined => {
      for (let i = sent.length - 1; i >= 0; i--) for (const a of sent[i]!) if ([...a.bucket.values()][0] === value && 'assign' in a) return a.assign.strategy;
      return undefined;
    };
    return { s, sent, latest };
  };
  const advance = async (ms: number) => {
    clock.advance(ms);
    await service.settled();
    clock.advance(0);
  };
  return { clock, service, stats, stream, advance, warnings };
}

/** A report of these buckets (`key=value` each), one allowed request each. */
const reportOf = (buckets: Array<[string, string]>, elapsedSeconds = 0) => ({
  domain: 'd',
  usages: buckets.map(([k, v]) => ({ bucket: new Map([[k, v]]), elapsedSeconds, allowed: 1, denied: 0 })),
});
const users = (from: number, to: number): Array<[string, string]> => Array.from({ length: to - from }, (_, i) => ['user', `u${from + i}`]);
const exhausted = (message: string) => expect.objectContaining({ name: 'QuotaStreamError', code: 8, message });

describe('per stream', () => {
  test.each([
    ['in one report', [[0, 12]]],
    ['in reports that add up', [[0, 4], [4, 8], [8, 12]]],
  ])('more buckets than RLQS_MAX_BUCKETS_PER_STREAM %s: answered, then RESOURCE_EXHAUSTED naming it', (_name, reports) => {
    const { stream, stats, warnings } = setup({ streamBuckets: 10 });
    const a = stream();
    const last = reports.length - 1;
    reports.forEach(([from, to], i) => {
      if (i < last) a.s.report(reportOf(users(from!, to!)));
      else expect(() => a.s.report(reportOf(users(from!, to!)))).toThrow(exhausted('this stream would track more than 10 buckets (RLQS_MAX_BUCKETS_PER_STREAM)'));
    });
    expect(a.s.bucketCount).toBe(10);
    // Every bucket answered: the ten tracked with a share, the two beyond denied (a limit applies).
    expect(users(0, 10).map(([, u]) => a.latest(u)?.kind)).toEqual(Array(10).fill('token-bucket'));
    expect(users(10, 12).map(([, u]) => a.latest(u)?.kind)).toEqual(['deny-all', 'deny-all']);
    expect(stats.counter('ratelimit.rlqs.stream_budget_exhausted').value).toBe(1);
    expect(stats.counter('ratelimit.rlqs.refused_buckets').value).toBe(2);
    expect(warnings).toEqual([expect.stringMatching(/^RLQS stream \S+ ended: this stream would track more than 10 buckets \(RLQS_MAX_BUCKETS_PER_STREAM\)$/)]);
  });

  test('bucket ids whose bytes pass RLQS_MAX_BUCKET_BYTES_PER_STREAM: RESOURCE_EXHAUSTED naming it; a bucket of an allow-all rule is answered with allow all', () => {
    // Three buckets of ~1 KB ids, each its own name: about 3 x (640 + 1,920 + 3 x 1,000) bytes.
    const { stream, stats } = setup({ streamBytes: 12_000 });
    const a = stream();
    const big = (i: number): [string, string] => ['user', `${i}-${'x'.repeat(1000)}`];
    a.s.report(reportOf([big(1)]));
    a.s.report(reportOf([big(2)]));
    expect(() => a.s.report(reportOf([big(3), ['free', 'yes']]))).toThrow(exhausted('this stream would hold more than 12000 bytes of buckets (RLQS_MAX_BUCKET_BYTES_PER_STREAM)'));
    expect(a.s.bucketCount).toBe(2);
    expect(a.latest(big(3)[1])?.kind).toBe('deny-all');
    expect(a.latest('yes')?.kind).toBe('allow-all');
    expect(stats.counter('ratelimit.rlqs.stream_budget_exhausted').value).toBe(1);
  });
});

test('per connection: the stream whose report takes its connection over RLQS_MAX_BUCKETS_PER_CONNECTION ends; its connection\'s other streams and other connections go on', async () => {
  const { stream, service, stats, advance } = setup({ connectionBuckets: 10 });
  const conn = {};
  const [a, b, other] = [stream(conn), stream(conn), stream({})];
  a.s.report(reportOf(users(0, 6)));
  expect(() => b.s.report(reportOf(users(100, 106)))).toThrow(exhausted('the streams of this connection would track more than 10 buckets (RLQS_MAX_BUCKETS_PER_CONNECTION)'));
  expect(b.latest('u103')?.kind).toBe('token-bucket');
  expect(b.latest('u104')?.kind).toBe('deny-all');
  // The transport closes the stream that went over (QuotaCalls): its four buckets come back to the
  // connection once their shares are no longer reserved (Envoy may reopen the stream: 0.6 of its 5 s).
  b.s.close();
  expect(() => a.s.report(reportOf(users(6, 10)))).toThrow(exhausted('the streams of this connection would track more than 10 buckets (RLQS_MAX_BUCKETS_PER_CONNECTION)'));
  a.s.close();
  await advance(3000);
  const a2 = stream(conn);
  a2.s.report(reportOf(users(0, 10)));
  expect(a2.s.bucketCount).toBe(10);
  other.s.report(reportOf(users(200, 210)));
  expect(other.s.bucketCount).toBe(10);
  expect(stats.counter('ratelimit.rlqs.connection_budget_exhausted').value).toBe(2);
  expect(service.admission.connectionCount).toBe(2);
});

describe('per process', () => {
  test('a bucket that would take the process over RLQS_MAX_BUCKETS is not tracked: its rule\'s answer without a share (deny all under a limit), at each report; its stream goes on; earlier buckets keep theirs; room that comes back is used', async () => {
    const { stream, stats, warnings, advance } = setup({ processBuckets: 5 });
    const [a, b] = [stream({}), stream({})];
    a.s.report(reportOf(users(0, 3)));
    const held = a.latest('u0');
    b.s.report(reportOf([...users(10, 12), ...users(12, 14), ['free', 'f'], ['nothing', 'n']]));
    expect(b.s.bucketCount).toBe(2);
    expect(b.latest('u12')?.kind).toBe('deny-all');
    expect(b.latest('f')?.kind).toBe('allow-all'); // unlimited
    expect(b.latest('n')?.kind).toBe('allow-all'); // RLQS_UNMATCHED_ACTION
    expect(stats.counter('ratelimit.rlqs.process_budget_exhausted').value).toBe(4);
    expect(stats.gauge('ratelimit.rlqs.buckets').value).toBe(5);
    expect(warnings).toEqual([expect.stringContaining('RLQS: the process would track more than 5 buckets (RLQS_MAX_BUCKETS): new buckets get their rule\'s answer without a share (deny all under a limit)')]);
    // a's buckets are untouched by b's refusals.
    expect(a.sent.flat().filter((x) => x.bucket.get('user') === 'u0')).toHaveLength(1);
    expect(a.latest('u0')).toEqual(held);
    // Refused again at b's next report (answered again, still untracked) ...
    await advance(5000);
    b.s.report(reportOf(users(10, 14), 5));
    expect(b.s.bucketCount).toBe(2);
    expect(stats.counter('ratelimit.rlqs.process_budget_exhausted').value).toBe(6);
    // ... until a leaves: then tracked and given a share.
    a.s.close();
    await advance(5000);
    b.s.report(reportOf(users(10, 14), 5));
    expect(b.s.bucketCount).toBe(4);
    expect(b.latest('u13')?.kind).toBe('token-bucket');
  });

  test('RLQS_MAX_BUCKET_BYTES: a bucket whose id would take the process over is refused; a bucket whose name the process holds already costs less', () => {
    // 'shared' twice (its name once) and 'y' fit in three buckets' worth; an id of 1,000 bytes does not.
    const { stream, stats, service } = setup({ processBytes: 3 * (BUCKET_BYTES + NAME_BYTES) });
    const [a, b] = [stream({}), stream({})];
    a.s.report(reportOf([['user', 'shared']]));
    const one = service.admission.process.bytes;
    b.s.report(reportOf([['user', 'shared']])); // the same bucket: its name is held once
    expect(service.admission.process.bytes - one).toBeLessThan(BUCKET_BYTES + 100);
    a.s.report(reportOf([['user', 'x'.repeat(1000)]]));
    expect(a.latest('x'.repeat(1000))?.kind).toBe('deny-all');
    a.s.report(reportOf([['user', 'y']]));
    expect(a.latest('y')?.kind).toBe('token-bucket');
    expect(stats.counter('ratelimit.rlqs.process_budget_exhausted').value).toBe(1);
  });
});

test('streams opened and ended in a loop hold no more than the budgets: an ended stream\'s buckets, reserved a while, stay counted on its connection and the process', async () => {
  const { stream, service, advance } = setup({ connectionBuckets: 30, processBuckets: 50 });
  const conn = {};
  let tracked = 0;
  for (let i = 0; i < 20; i++) {
    const s = stream(i < 10 ? conn : {});
    try {
      s.s.report(reportOf(users(i * 100, i * 100 + 10)));
    } catch {
      // over the connection's budget: ended
    }
    tracked += s.s.bucketCount;
    s.s.close();
  }
  expect(tracked).toBe(30 + 20); // 30 on the shared connection, then 20 more elsewhere up to the process's 50
  expect(service.admission.process.buckets).toBe(50);
  await advance(3000);
  expect(service.admission.process.buckets).toBe(0);
});

test('what streams hold comes back when they end or abandon their buckets: the process, its connections, the gauges at 0', async () => {
  const { stream, service, stats, advance } = setup({});
  const conn = {};
  const [a, b] = [stream(conn), stream(conn)];
  a.s.report(reportOf(users(0, 50)));
  b.s.report(reportOf(users(25, 75)));
  expect(service.admission.process.buckets).toBe(100);
  const bytes = service.admission.process.bytes;
  // 75 names, 100 buckets, ids of 10-12 bytes as the engine sees them without wire bytes (their canonical key).
  expect(bytes).toBeGreaterThan(100 * BUCKET_BYTES + 75 * NAME_BYTES);
  expect(stats.gauge('ratelimit.rlqs.bucket_bytes').value).toBe(bytes);
  // b's idle buckets are abandoned after six reports without a request; a ends.
  for (let i = 0; i < 6; i++) {
    await advance(5000);
    b.s.report({ domain: 'd', usages: users(25, 75).map(([k, v]) => ({ bucket: new Map([[k, v]]), elapsedSeconds: 5, allowed: 0, denied: 0 })) });
  }
  expect(b.s.bucketCount).toBe(0);
  a.s.close();
  b.s.close();
  // a's buckets are reserved for 0.6 of its report interval (Envoy may reopen the stream): still held, still counted.
  expect({ buckets: service.admission.process.buckets, connections: service.admission.connectionCount }).toEqual({ buckets: 50, connections: 1 });
  await advance(3000);
  expect({ buckets: service.admission.process.buckets, bytes: service.admission.process.bytes, connections: service.admission.connectionCount }).toEqual({ buckets: 0, bytes: 0, connections: 0 });
  expect(stats.gauge('ratelimit.rlqs.buckets').value).toBe(0);
  expect(stats.gauge('ratelimit.rlqs.bucket_bytes').value).toBe(0);
});

describe('bucket ids are held to the request limits: the stream ends INVALID_ARGUMENT naming the setting, nothing of the report answered, the text clipped', () => {
  const cases: Array<[string, Map<string, string>, string, RegExp]> = [
    ['more pairs than REQUEST_MAX_ENTRIES', new Map(Array.from({ length: 5 }, (_, i) => [`k${i}`, 'v'])), 'd', /^bucket_quota_usages\[1\]\.bucket_id: 5 entries, more than 4 \(REQUEST_MAX_ENTRIES\)$/],
    ['a key longer than REQUEST_MAX_ENTRY_LENGTH', new Map([['k'.repeat(900_000), 'v']]), 'd', /^bucket_quota_usages\[1\]\.bucket_id: key 'k{64}… \(900000 characters\)' is 900000 characters long, more than 16 \(REQUEST_MAX_ENTRY_LENGTH\)$/],
    ['a value longer than REQUEST_MAX_ENTRY_LENGTH', new Map([['user', 'v'.repeat(900_000)]]), 'd', /^bucket_quota_usages\[1\]\.bucket_id: the value of 'user' is 900000 characters long, more than 16 \(REQUEST_MAX_ENTRY_LENGTH\)$/],
    ['a domain longer than REQUEST_MAX_ENTRY_LENGTH', new Map([['user', 'a']]), 'd'.repeat(17), /^domain is 17 characters long, more than 16 \(REQUEST_MAX_ENTRY_LENGTH\)$/],
  ];
  test.each(cases)('%s', (_name, bucket, domain, message) => {
    const { stream, service } = setup({}, { maxEntries: 4, maxEntryLength: 16 });
    const a = stream();
    const usages = [{ bucket: new Map([['user', 'ok']]), elapsedSeconds: 0, allowed: 1, denied: 0 }, { bucket, elapsedSeconds: 0, allowed: 1, denied: 0 }];
    let thrown: unknown;
    try {
      a.s.report({ domain, usages });
    } catch (err) {
      thrown = err;
    }
    expect(thrown).toMatchObject({ name: 'QuotaStreamError', code: 3, message: expect.stringMatching(message) });
    expect((thrown as Error).message.length).toBeLessThan(200);
    expect(a.sent).toEqual([]);
    a.s.close();
    expect(service.admission.process.buckets).toBe(0);
  });

  test('at the limits: accepted', () => {
    const { stream } = setup({}, { maxEntries: 4, maxEntryLength: 16 });
    const a = stream();
    a.s.report({ domain: 'd'.repeat(16), usages: [{ bucket: new Map(Array.from({ length: 4 }, (_, i) => [`k${i}`.padEnd(16, 'k'), 'v'.repeat(16)])), elapsedSeconds: 0, allowed: 1, denied: 0 }] });
    expect(a.s.bucketCount).toBe(1);
  });
});

test('/debug/rlqs is made in pieces of about 64 KiB, taken one at a time: 100,000 buckets are never one string; the text is today\'s', () => {
  const { stream, service } = setup({});
  const streams: QuotaStream[] = [];
  for (let i = 0; i < 20; i++) {
    const a = stream();
    a.s.report(reportOf(users(i * 5000, (i + 1) * 5000)));
    streams.push(a.s);
  }
  const pieces = service.describe();
  const first = pieces.next();
  expect(first.done).toBe(false);
  expect(first.value).toMatch(/^stream \S+ domain 'd': 5000 buckets, reports every 5\.0 s\n {2}\[\["user","u0"\]\]: demand not measured yet, assigned token bucket \(max \d+, \d+ tokens every \d+ s\) for 20 s\n/);
  let lines = first.value.split('\n').length - 1;
  let largest = first.value.length;
  let n = 1;
  for (let p = pieces.next(); p.done !== true; p = pieces.next()) {
    largest = Math.max(largest, p.value.length);
    lines += p.value.split('\n').length - 1;
    n++;
  }
  expect(lines).toBe(100_000 + 20);
  expect(n).toBeGreaterThan(100);
  expect(largest).toBeLessThan(64 * 1024 + 200);
  for (const s of streams) s.close();
  expect([...service.describe()]).toEqual(['no RLQS stream\n']);
});
