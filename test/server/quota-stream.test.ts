/**
 * StreamRateLimitQuotas on our own gRPC transport, read as raw HTTP/2 (node:http2 client): messages
 * split across DATA frames or several in one, and the inputs a stream ends on — too large,
 * malformed, compressed, cut off by the client's end, and a client that never reads.
 */
import http2 from 'node:http2';
import {
  RateLimitQuotaResponse,
  RateLimitQuotaUsageReports,
} from '../../generated/envoy/service/rate_limit_quota/v3/rlqs';
import { ManualClock } from '../../src/platform/clock';
import { MemoryDemandStore } from '../../src/quota/demand';
import { QuotaService } from '../../src/quota/quota-service';
import { quotaBudgets } from '../../src/quota/admission';
import { MAX_UNREAD_RESPONSES, STREAM_RATE_LIMIT_QUOTAS_PATH } from '../../src/server/quota-calls';
import { load } from '../config/helpers';
import { closeRawClients, dataFrame, grpcStatusOf, headersFrame, RawH2Client, requestBlock, windowUpdateFrame } from '../support/h2-frames';
import { startGrpcListener, type TestListener } from '../support/h2-server';

const CONFIG = 'domain: d\ndescriptors:\n  - key: api\n    rate_limit: {unit: second, requests_per_unit: 50}\n';

const frame = (m: RateLimitQuotaUsageReports, flag = 0): Buffer => {
  const body = Buffer.from(RateLimitQuotaUsageReports.encode(m).finish());
  const head = Buffer.alloc(5);
  head[0] = flag;
  head.writeUInt32BE(body.length, 1);
  return Buffer.concat([head, body]);
};
const report = (api: string): RateLimitQuotaUsageReports => ({
  domain: 'd',
  bucketQuotaUsages: [{ bucketId: { bucket: { api } }, timeElapsed: { seconds: 0n, nanos: 0 }, numRequestsAllowed: 1n, numRequestsDenied: 0n }],
});

/** The responses of a stream (decoded) and its grpc-status / grpc-message. */
function readAll(stream: http2.ClientHttp2Stream): Promise<{ responses: RateLimitQuotaResponse[]; status: string; message: string }> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let head: http2.IncomingHttpHeaders = {};
    stream.on('response', (h) => (head = h));
    stream.on('data', (c: Buffer) => chunks.push(c));
    let trailers: http2.IncomingHttpHeaders = {};
    stream.on('trailers', (t) => (trailers = t));
    stream.on('error', reject);
    stream.on('close', () => {
      const all = Buffer.concat(chunks);
      const responses: RateLimitQuotaResponse[] = [];
      for (let at = 0; at + 5 <= all.length; ) {
        const n = all.readUInt32BE(at + 1);
        responses.push(RateLimitQuotaResponse.decode(all.subarray(at + 5, at + 5 + n)));
        at += 5 + n;
      }
      const st = trailers['grpc-status'] ?? head['grpc-status'];
      resolve({ responses, status: String(st), message: decodeURIComponent(String(trailers['grpc-message'] ?? head['grpc-message'] ?? '')) });
    });
  });
}

const transport = 'socket';
describe('StreamRateLimitQuotas on the socket transport', () => {
  let server: TestListener;
  let session: http2.ClientHttp2Session;
  beforeAll(async () => {
    const quota = new QuotaService({
      config: () => load(CONFIG),
      demand: new MemoryDemandStore(),
      clock: new ManualClock(0),
      unmatched: { strategy: 'allow-all', ttlSeconds: 5 },
      budgets: quotaBudgets({ streamBuckets: 100_000 }),
    });
    server = await startGrpcListener({ config: CONFIG, transport, quota, maxRequestBytes: 4096 });
    session = http2.connect(`http://${server.address}`);
  });
  afterAll(async () => {
    session.close();
    server.listener.forceClose();
    await server.listener.drain();
  });
  const open = () => session.request({ ':method': 'POST', ':path': STREAM_RATE_LIMIT_QUOTAS_PATH, 'content-type': 'application/grpc', te: 'trailers' });

  test('two messages in one write and one split across writes: each answered, then OK at the end', async () => {
    const s = open();
    const done = readAll(s);
    const two = Buffer.concat([frame(report('a')), frame(report('b'))]);
    s.write(two);
    const third = frame(report('c'));
    s.write(third.subarray(0, 3));
    s.write(third.subarray(3, 9));
    s.end(third.subarray(9));
    const r = await done;
    expect(r.status).toBe('0');
    expect(r.responses.map((x) => x.bucketAction[0]!.bucketId!.bucket['api'])).toEqual(['a', 'b', 'c']);
  });

  test.each([
    ['a declared length over REQUEST_MAX_BYTES', () => Buffer.from([0, 0, 0, 0x20, 0]), '8', 'Received message larger than max (8192 vs 4096)'],
    ['a message that is not protobuf', () => Buffer.from([0, 0, 0, 0, 2, 0x0a, 0x05]), '3', 'invalid RateLimitQuotaUsageReports:'],
    ['a compressed message', () => frame(report('a'), 1), '12', 'compressed messages are not accepted on StreamRateLimitQuotas'],
    ['a message cut off by the end of the stream', () => frame(report('a')).subarray(0, 8), '13', 'Received an incomplete request message'],
  ])('%s ends the stream with its status', async (_name, bytes, code, message) => {
    const s = open();
    const done = readAll(s);
    s.end(bytes());
    const r = await done;
    expect(r.status).toBe(code);
    expect(r.message).toContain(message);
  });

  test('a client that never reads its responses: its stream is reset (it cannot take a status) once the backlog is full; the server goes on', async () => {
    const lazy = http2.connect(`http://${server.address}`);
    const s = lazy.request({ ':method': 'POST', ':path': STREAM_RATE_LIMIT_QUOTAS_PATH, 'content-type': 'application/grpc', te: 'trailers' });
    s.pause(); // never read: the server's window for this stream runs out
    s.on('error', () => undefined);
    const closed = new Promise<number>((r) => s.on('close', () => r(s.rstCode ?? -1)));
    // Each report names a new bucket, so each gets a response (about 40 bytes): the 64 KiB window
    // holds some 1,600 of them, then the backlog grows.
    const batch: Buffer[] = [];
    for (let i = 0; i < 1700 + MAX_UNREAD_RESPONSES + 100; i++) batch.push(frame(report(`k${i}`)));
    s.write(Buffer.concat(batch));
    expect(await closed).toBe(http2.constants.NGHTTP2_ENHANCE_YOUR_CALM);
    lazy.destroy();
    // A well-behaved stream is still served.
    const other = open();
    const done = readAll(other);
    other.end(frame(report('other')));
    expect((await done).status).toBe('0');
  });
});

/**
 * RLQS streams live as long as Envoy wants, so GRPC_REQUEST_BODY_TIMEOUT counts from the first byte
 * of each message.
 */
describe('StreamRateLimitQuotas bounds on the socket transport', () => {
  let server: TestListener;
  beforeAll(async () => {
    const quota = new QuotaService({
      config: () => load(CONFIG),
      demand: new MemoryDemandStore(),
      clock: new ManualClock(0),
      unmatched: { strategy: 'allow-all', ttlSeconds: 5 },
      budgets: quotaBudgets({ streamBuckets: 100_000 }),
    });
    server = await startGrpcListener({ config: CONFIG, quota, maxRequestBytes: 4096, grpc: { requestBodyTimeoutMs: 300 } });
  });
  afterAll(async () => {
    closeRawClients();
    server.listener.forceClose();
    await server.listener.drain();
  });
  const quotaBlock = () => requestBlock([], STREAM_RATE_LIMIT_QUOTAS_PATH);

  test('part of a message left waiting ends the stream DEADLINE_EXCEEDED; a stream idle between whole messages lives on', async () => {
    const client = await RawH2Client.connect(server.port);
    // Stream 3: one whole report, then nothing (idle, not waiting for a message).
    client.send(headersFrame(3, quotaBlock()), dataFrame(3, frame(report('idle'))));
    await client.waitFor(() => (client.streams.get(3)?.data.length ?? 0) > 0, 'the response on stream 3');
    // Stream 5: a report cut short.
    client.send(headersFrame(5, quotaBlock()), dataFrame(5, frame(report('cut')).subarray(0, 7)));
    const cut = await client.answer(5);
    expect(grpcStatusOf(cut)).toBe('4');
    expect(cut.trailers?.['grpc-message'] ?? cut.headers?.['grpc-message']).toContain('GRPC_REQUEST_BODY_TIMEOUT');
    // Stream 3 has been idle longer than the timeout: still open, it answers and ends with OK.
    client.send(dataFrame(3, frame(report('again')), true));
    const idle = await client.answer(3);
    expect(grpcStatusOf(idle)).toBe('0');
    await client.roundTrip();
    expect(server.budgets.requests.held).toBe(0);
  });
});
