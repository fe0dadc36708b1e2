/**
 * RLQS admission end to end on the running service (on the default transport, and on grpc-js in
 * the second pass of the suite), each client on a connection of its own unless said:
 * - a stream over RLQS_MAX_BUCKETS_PER_STREAM is answered, then ended RESOURCE_EXHAUSTED naming
 *   it, whether its buckets come in one report or in several;
 * - streams of one connection over RLQS_MAX_BUCKETS_PER_CONNECTION: the one that goes over ends,
 *   the others (and other connections) go on; an ended stream's buckets stay counted while its
 *   shares are reserved (Envoy may reopen it);
 * - buckets of streams on several connections over RLQS_MAX_BUCKETS: the ones beyond are denied
 *   (a limit applies) and not tracked, their stream goes on, earlier buckets keep their shares, and
 *   room that comes back is used;
 * - bucket ids beyond REQUEST_MAX_ENTRIES / REQUEST_MAX_ENTRY_LENGTH end the stream INVALID_ARGUMENT
 *   naming them, nothing echoed;
 * - a big report is answered in parts, the messages behind it waiting;
 * - /debug/rlqs of 20,000 buckets is streamed in pieces, taken as the client reads.
 */
import http from 'node:http';
import * as grpc from '@grpc/grpc-js';
import { RateLimitQuotaServiceClient, type RateLimitQuotaResponse, type RateLimitQuotaUsageReports } from '../../generated/envoy/service/rate_limit_quota/v3/rlqs';
import { waitFor } from '../support/wait';
import { baseEnv, httpGet, runtimeDir, startService, type Service } from './harness';

const CONFIG = `domain: gw
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 100}
`;

const clients: RateLimitQuotaServiceClient[] = [];

/** A client on its own HTTP/2 connection (grpc-js shares one between clients of the same options otherwise). */
function connection(svc: Service): RateLimitQuotaServiceClient {
  const c = new RateLimitQuotaServiceClient(svc.grpc, grpc.credentials.createInsecure(), { 'grpc.use_local_subchannel_pool': 1, 'grpc.max_receive_message_length': 64 << 20 });
  clients.push(c);
  return c;
}

afterAll(() => {
  for (const c of clients) c.close();
});

/** A report of users `from`..`to - 1`, each one allowed request. */
const users = (from: number, to: number, elapsedSeconds = 0): RateLimitQuotaUsageReports => ({
  domain: 'gw',
  bucketQuotaUsages: Array.from({ length: to - from }, (_, i) => ({
    bucketId: { bucket: { user: `u${from + i}` } },
    timeElapsed: { seconds: BigInt(elapsedSeconds), nanos: 0 },
    numRequestsAllowed: 1n,
    numRequestsDenied: 0n,
  })),
});

/** A stream: its responses as they come, the latest strategy per user, and its status once it ends. */
function stream(client: RateLimitQuotaServiceClient) {
  const call = client.streamRateLimitQuotas();
  const responses: RateLimitQuotaResponse[] = [];
  const latest = new Map<string, string>();
  let status: grpc.StatusObject | undefined;
  call.on('data', (r: RateLimitQuotaResponse) => {
    responses.push(r);
    for (const a of r.bucketAction) {
      const s = a.quotaAssignmentAction?.rateLimitStrategy;
      latest.set(a.bucketId!.bucket['user']!, s?.tokenBucket !== undefined ? 'token-bucket' : s?.blanketRule === 1 ? 'deny-all' : 'allow-all');
    }
  });
  call.on('error', () => undefined); // the status event carries it
  const ended = new Promise<grpc.StatusObject>((resolve) => call.on('status', (s: grpc.StatusObject) => resolve((status = s))));
  /** Waits until every one of `names` has an answer. */
  const answered = (names: string[]) => waitFor(() => names.every((n) => latest.has(n)), `answers for ${names.length} buckets`);
  return { call, responses, latest, ended, answered, status: () => status };
}
const names = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => `u${from + i}`);

describe('budgets', () => {
  let svc: Service;
  beforeAll(async () => {
    const dirs = runtimeDir({ 'gw.yaml': CONFIG });
    svc = await startService({
      ...baseEnv(dirs.root),
      RLQS_MAX_BUCKETS_PER_STREAM: '50',
      RLQS_MAX_BUCKETS_PER_CONNECTION: '80',
      RLQS_MAX_BUCKETS: '200',
      REQUEST_MAX_ENTRIES: '4',
      REQUEST_MAX_ENTRY_LENGTH: '64',
    });
  });
  afterAll(async () => {
    await svc?.stop();
  });
  const stat = async (name: string) => Number(new RegExp(`^${name.replace(/\./g, '\\.')}: (\\d+)$`, 'm').exec((await httpGet(svc.debug, '/stats')).body)?.[1] ?? NaN);
  /** Every test starts with nothing tracked (an ended stream's buckets are let go at once). */
  beforeEach(() => waitFor(async () => (await stat('ratelimit.rlqs.buckets')) === 0, 'no bucket tracked'));

  test.each([
    ['one report of 60 buckets', [[0, 60]]],
    ['reports of 20 buckets adding up to 60', [[0, 20], [20, 40], [40, 60]]],
  ])('a stream over RLQS_MAX_BUCKETS_PER_STREAM (50) is answered, then ends RESOURCE_EXHAUSTED naming it: %s', async (_name, reports) => {
    const s = stream(connection(svc));
    for (const [from, to] of reports) s.call.write(users(from!, to!));
    const st = await s.ended;
    expect(st.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
    expect(st.details).toBe('this stream would track more than 50 buckets (RLQS_MAX_BUCKETS_PER_STREAM)');
    // Answered before its end: the 50 it held with a share, those beyond denied (a limit applies).
    expect(names(0, 50).every((n) => s.latest.get(n) === 'token-bucket')).toBe(true);
    expect(names(50, 60).map((n) => s.latest.get(n))).toEqual(Array(10).fill('deny-all'));
    expect(svc.output()).toMatch(/RLQS stream \S+ ended: this stream would track more than 50 buckets \(RLQS_MAX_BUCKETS_PER_STREAM\)/);
  });

  test('streams of one connection over RLQS_MAX_BUCKETS_PER_CONNECTION (80): the one that goes over ends naming it; the others and other connections go on', async () => {
    const shared = connection(svc);
    const a = stream(shared);
    a.call.write(users(0, 40));
    await a.answered(names(0, 40));
    const b = stream(shared);
    b.call.write(users(100, 145));
    const st = await b.ended;
    expect(st.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
    expect(st.details).toBe('the streams of this connection would track more than 80 buckets (RLQS_MAX_BUCKETS_PER_CONNECTION)');
    expect(names(100, 140).every((n) => b.latest.get(n) === 'token-bucket')).toBe(true);
    expect(names(140, 145).map((n) => b.latest.get(n))).toEqual(Array(5).fill('deny-all'));
    // b's buckets come back to the connection once no longer reserved (0.6 of Envoy's 5 s: it may
    // reopen the stream): then another stream of it may take 40; another connection its own 50.
    await waitFor(async () => (await stat('ratelimit.rlqs.buckets')) === 40, "b's reserved buckets let go");
    const c = stream(shared);
    c.call.write(users(300, 340));
    const other = stream(connection(svc));
    other.call.write(users(200, 250));
    await c.answered(names(300, 340));
    await other.answered(names(200, 250));
    expect([...a.latest, ...c.latest, ...other.latest].filter(([, k]) => k !== 'token-bucket')).toEqual([]);
    expect(await stat('ratelimit.rlqs.connection_budget_exhausted')).toBe(1);
    for (const x of [a, c, other]) x.call.end();
    expect((await Promise.all([a, c, other].map((x) => x.ended))).map((x) => x.code)).toEqual([0, 0, 0]);
  });

  test('buckets over RLQS_MAX_BUCKETS (200) across connections are denied untracked, their stream goes on; earlier buckets keep their shares; room that comes back is used', async () => {
    const streams = [0, 1, 2, 3].map(() => stream(connection(svc)));
    for (let i = 0; i < 4; i++) {
      streams[i]!.call.write(users(i * 100, i * 100 + 45));
      await streams[i]!.answered(names(i * 100, i * 100 + 45));
    }
    expect(await stat('ratelimit.rlqs.buckets')).toBe(180);
    const late = stream(connection(svc));
    late.call.write(users(900, 945));
    await late.answered(names(900, 945));
    expect(names(900, 920).every((n) => late.latest.get(n) === 'token-bucket')).toBe(true);
    expect(names(920, 945).map((n) => late.latest.get(n))).toEqual(Array(25).fill('deny-all'));
    expect(late.status()).toBeUndefined();
    expect(await stat('ratelimit.rlqs.buckets')).toBe(200);
    expect(await stat('ratelimit.rlqs.process_budget_exhausted')).toBeGreaterThanOrEqual(25);
    expect(svc.output()).toMatch(/RLQS: the process would track more than 200 buckets \(RLQS_MAX_BUCKETS\): new buckets get their rule's answer without a share/);
    // The earlier streams were told nothing of it: every answer they had is a share.
    for (const s of streams) expect([...s.latest.values()].every((k) => k === 'token-bucket')).toBe(true);
    // One of them ends: at its next report the late stream's refused buckets are tracked, with a share.
    streams[0]!.call.end();
    await streams[0]!.ended;
    await waitFor(async () => (await stat('ratelimit.rlqs.buckets')) === 155, 'the ended stream let go');
    late.call.write(users(900, 945, 1));
    await waitFor(() => names(920, 945).every((n) => late.latest.get(n) === 'token-bucket'), 'shares for the buckets refused before');
    for (const s of [...streams.slice(1), late]) s.call.end();
    await Promise.all([...streams.slice(1), late].map((s) => s.ended));
  });

  test.each([
    ['5 pairs (REQUEST_MAX_ENTRIES 4)', { a: '1', b: '2', c: '3', d: '4', e: '5' }, 'bucket_quota_usages[1].bucket_id: 5 entries, more than 4 (REQUEST_MAX_ENTRIES)'],
    ['a value of 900,000 characters (REQUEST_MAX_ENTRY_LENGTH 64)', { user: 'v'.repeat(900_000) }, "bucket_quota_usages[1].bucket_id: the value of 'user' is 900000 characters long, more than 64 (REQUEST_MAX_ENTRY_LENGTH)"],
  ])('a bucket id of %s ends the stream INVALID_ARGUMENT naming the setting; nothing of the report is answered', async (_name, bucket, details) => {
    const s = stream(connection(svc));
    s.call.write({
      domain: 'gw',
      bucketQuotaUsages: [users(0, 1).bucketQuotaUsages[0]!, { bucketId: { bucket }, timeElapsed: { seconds: 0n, nanos: 0 }, numRequestsAllowed: 1n, numRequestsDenied: 0n }],
    });
    const st = await s.ended;
    expect(st.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(st.details).toBe(details);
    expect(s.responses).toEqual([]);
  });
});

test('a report of 5,000 buckets is answered in parts (a turn of the event loop each); the report behind it, and the end of the stream right after, wait for it', async () => {
  const dirs = runtimeDir({ 'gw.yaml': CONFIG });
  const svc = await startService(baseEnv(dirs.root));
  try {
    const s = stream(connection(svc));
    s.call.write(users(0, 5000));
    s.call.write(users(5000, 5010));
    s.call.end();
    expect((await s.ended).code).toBe(grpc.status.OK);
    expect(s.latest.size).toBe(5010);
    // 1,000 buckets a part: five responses for the first report, then the second's.
    expect(s.responses.map((r) => r.bucketAction.length)).toEqual([1000, 1000, 1000, 1000, 1000, 10]);
    expect(s.responses[5]!.bucketAction[0]!.bucketId!.bucket['user']).toBe('u5000');
  } finally {
    await svc.stop();
  }
});

test('/debug/rlqs of 20,000 buckets is streamed in pieces as the client reads them (chunked), and the debug port answers meanwhile', async () => {
  const dirs = runtimeDir({ 'gw.yaml': CONFIG });
  const svc = await startService(baseEnv(dirs.root));
  try {
    const streams = [0, 1, 2, 3].map(() => stream(connection(svc)));
    for (let i = 0; i < 4; i++) {
      streams[i]!.call.write(users(i * 5000, (i + 1) * 5000));
      await streams[i]!.answered(names(i * 5000, (i + 1) * 5000));
    }
    const { port } = new URL(`http://${svc.debug}`);
    const res = await new Promise<http.IncomingMessage>((resolve) => http.get({ host: '127.0.0.1', port, path: '/debug/rlqs' }, resolve));
    expect(res.statusCode).toBe(200);
    expect(res.headers['transfer-encoding']).toBe('chunked');
    const chunks: Buffer[] = [await new Promise<Buffer>((resolve) => res.once('data', resolve))];
    // The client stops reading: the service waits for it, serving others meanwhile.
    res.pause();
    expect((await httpGet(svc.debug, '/stats')).body).toMatch(/^ratelimit\.rlqs\.buckets: 20000$/m);
    res.on('data', (c: Buffer) => chunks.push(c));
    res.resume();
    await new Promise((resolve) => res.once('end', resolve));
    const text = Buffer.concat(chunks).toString();
    expect(text.match(/^stream \S+ domain 'gw': 5000 buckets, reports every 5\.0 s$/gm)).toHaveLength(4);
    expect(text.match(/^ {2}\[\["user","u\d+"\]\]: demand not measured yet, assigned token bucket/gm)).toHaveLength(20_000);
    for (const s of streams) s.call.end();
    await Promise.all(streams.map((s) => s.ended));
  } finally {
    await svc.stop();
  }
}, 60_000);
