/**
 * Our own gRPC transport (GRPC_TRANSPORT=socket, the default) on loopback, against the grpc-js
 * transport:
 * the same rate limit service behind each, the same requests, the same answers (decoded messages,
 * status codes and texts). Raw node:http2 clients send what grpc-js clients cannot: malformed
 * bytes, split DATA frames, wrong content types, compressed messages.
 */
import fs from 'node:fs';
import http2 from 'node:http2';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import nodeTls from 'node:tls';
import zlib from 'node:zlib';
import * as grpc from '@grpc/grpc-js';
import { ExportResultCode } from '@opentelemetry/core';
import type { ReadableSpan, SpanExporter } from '@opentelemetry/sdk-trace-base';
import {
  RateLimitRequest as ProtoRequest,
  RateLimitResponse as ProtoResponse,
  RateLimitServiceClient,
} from '../../generated/envoy/service/ratelimit/v3/rls';
import {
  HealthCheckResponse,
  HealthCheckResponse_ServingStatus as Serving,
  HealthClient,
  type HealthListResponse,
} from '../../generated/grpc/health/v1/health';
import type { RateLimitRequest, RateLimitResponse } from '../../src/core/rls';
import type { Caller } from '../../src/core/store';
import { percentEncode } from '../../src/server/grpc-common';
import { Health } from '../../src/server/health';
import type { Decider } from '../../src/server/http';
import { CertificateSource } from '../../src/server/tls';
import { StatsStore } from '../../src/stats/store';
import { silentLogger } from '../../src/telemetry/logger';
import { setupTracing } from '../../src/telemetry/tracing';
import { CLIENT_SAN, type CertPair, testCerts } from '../support/certs';
import { deciderOf, memoryRateLimitService } from '../support/grpc-service';
import { type GrpcTransport, type TestListener, type TestListenerOptions, rateLimitRequest as request, startFrameCountingProxy, startGrpcListener } from '../support/h2-server';
import { waitFor } from '../support/wait';

const CONFIG = `
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: team
    metadata: {owner: platform}
    rate_limit: {unit: hour, requests_per_unit: 100}
`;

const SHOULD_RATE_LIMIT = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';

const running = new Set<TestListener>();
const clients = new Set<{ close(): void }>();

async function start(transport: GrpcTransport, over: Omit<TestListenerOptions, 'config' | 'transport'> = {}): Promise<TestListener> {
  const r = await startGrpcListener({ ...over, transport, config: CONFIG });
  running.add(r);
  return r;
}

async function stop(r: TestListener): Promise<void> {
  running.delete(r);
  r.listener.endWatches();
  r.listener.forceClose();
  await r.listener.drain();
}

afterEach(async () => {
  for (const c of clients) c.close();
  clients.clear();
  await Promise.all([...running].map(stop));
});

function rlClient(address: string, credentials = grpc.credentials.createInsecure(), options: grpc.ClientOptions = {}): RateLimitServiceClient {
  const c = new RateLimitServiceClient(address, credentials, options);
  clients.add(c);
  return c;
}

function healthClient(address: string): HealthClient {
  const c = new HealthClient(address, grpc.credentials.createInsecure());
  clients.add(c);
  return c;
}

type Outcome = { response: ProtoResponse } | { code: number; details: string };

function call(client: RateLimitServiceClient, req: ProtoRequest, metadata = new grpc.Metadata()): Promise<Outcome> {
  return new Promise((resolve) =>
    client.shouldRateLimit(req, metadata, { deadline: Date.now() + 5000 }, (err, response) =>
      resolve(err ? { code: err.code, details: err.details } : { response }),
    ),
  );
}

interface RawAnswer {
  status: number;
  headers: http2.IncomingHttpHeaders;
  grpcStatus: string | undefined;
  grpcMessage: string | undefined;
  body: Buffer;
}

/**
 * One call with a raw node:http2 client: `parts` are written as separate DATA frames, a tick
 * apart. Trailers-only answers carry grpc-status in the headers.
 */
function rawCall(
  address: string,
  parts: Buffer[],
  headers: http2.OutgoingHttpHeaders = {},
  connectOptions: http2.SecureClientSessionOptions = {},
  scheme = 'http',
): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`${scheme}://${address}`, connectOptions);
    session.on('error', reject);
    const req = session.request({
      ':method': 'POST',
      ':path': SHOULD_RATE_LIMIT,
      'content-type': 'application/grpc',
      te: 'trailers',
      ...headers,
    });
    let responseHeaders: http2.IncomingHttpHeaders = {};
    let trailers: http2.IncomingHttpHeaders = {};
    const chunks: Buffer[] = [];
    req.on('response', (h) => (responseHeaders = h));
    req.on('trailers', (t) => (trailers = t));
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('error', reject);
    req.on('close', () => {
      session.close();
      const pick = (name: string): string | undefined => (trailers[name] ?? responseHeaders[name]) as string | undefined;
      const message = pick('grpc-message');
      resolve({
        status: Number(responseHeaders[':status']),
        headers: responseHeaders,
        grpcStatus: pick('grpc-status'),
        grpcMessage: message === undefined ? undefined : decodeURIComponent(message),
        body: Buffer.concat(chunks),
      });
    });
    void (async () => {
      // Each part leaves in its own write, after the previous one reached the socket.
      for (const part of parts) await new Promise((r) => req.write(part, r));
      req.end();
    })();
  });
}

/** A message with its 5-byte gRPC prefix. */
function framed(message: Uint8Array, compressed = false): Buffer {
  const prefix = Buffer.alloc(5);
  prefix[0] = compressed ? 1 : 0;
  prefix.writeUInt32BE(message.length, 1);
  return Buffer.concat([prefix, message]);
}

function encodeRequest(req: ProtoRequest): Buffer {
  return Buffer.from(ProtoRequest.encode(req).finish());
}

function decodeResponse(body: Buffer): ProtoResponse {
  expect(body.readUInt32BE(1)).toBe(body.length - 5);
  return ProtoResponse.decode(body.subarray(5));
}

const lean = 'socket';
describe('GRPC_TRANSPORT=socket', () => {
  describe('answers identical to the grpc-js transport', () => {
    test('OK, OVER_LIMIT, response headers and dynamic metadata', async () => {
      const [h2, js] = await Promise.all([start(lean), start('grpc-js')]);
      const viaH2 = rlClient(h2.address);
      const viaJs = rlClient(js.address);
      const requests = [
        request({ user: 'alice' }),
        request({ user: 'alice' }, { team: 'core' }),
        request({ user: 'alice' }),
        request({ user: 'alice' }),
        request({ user: 'bob' }, { team: 'core' }, { nothing: 'x' }),
      ];
      const outcomes: Outcome[] = [];
      for (const req of requests) {
        const [a, b] = await Promise.all([call(viaH2, req), call(viaJs, req)]);
        expect(a).toEqual(b);
        outcomes.push(a);
      }
      const codes = outcomes.map((o) => ('response' in o ? o.response.overallCode : -1));
      expect(codes).toEqual([1, 1, 1, 2, 1]);
      const second = outcomes[1] as { response: ProtoResponse };
      expect(second.response.responseHeadersToAdd.map((h) => h.key)).toEqual(['RateLimit-Limit', 'RateLimit-Remaining', 'RateLimit-Reset']);
      expect(second.response.dynamicMetadata).toMatchObject({ domain: 'd', metadata: { owner: 'platform' } });
      expect(h2.stats.counter('ratelimit_server.ShouldRateLimit.total_requests').value).toBe(5);
      expect(h2.stats.timer('ratelimit_server.ShouldRateLimit.response_time').count).toBe(5);
    });

    test('decision errors: UNKNOWN with upstream text, INVALID_ARGUMENT past the request limits', async () => {
      const [h2, js] = await Promise.all([start(lean), start('grpc-js')]);
      const viaH2 = rlClient(h2.address);
      const viaJs = rlClient(js.address);
      const cases = [
        { ...request({ user: 'a' }), domain: '' },
        request(),
        request({ a: '1' }, { b: '2' }, { c: '3' }, { d: '4' }),
        { ...request({ ['user']: 'x'.repeat(2000) }) },
      ];
      const got: Outcome[] = [];
      for (const req of cases) {
        const [a, b] = await Promise.all([call(viaH2, req), call(viaJs, req)]);
        expect(a).toEqual(b);
        got.push(a);
      }
      expect(got[0]).toEqual({ code: grpc.status.UNKNOWN, details: 'rate limit domain must not be empty' });
      expect(got[1]).toEqual({ code: grpc.status.UNKNOWN, details: 'rate limit descriptor list must not be empty' });
      expect(got[2]).toMatchObject({ code: grpc.status.INVALID_ARGUMENT });
      expect(got[3]).toMatchObject({ code: grpc.status.INVALID_ARGUMENT });
    });

    test.each([
      ['malformed protobuf', Buffer.from([0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f]), /^invalid RateLimitRequest: truncated/],
      ['invalid UTF-8', Buffer.from([0x0a, 0x02, 0xc3, 0x28]), /^invalid RateLimitRequest: domain is not valid UTF-8$/],
    ])('%s: INVALID_ARGUMENT with the decoder reason', async (_name, bytes, reason) => {
      const [h2, js] = await Promise.all([start(lean), start('grpc-js')]);
      const [a, b] = await Promise.all([rawCall(h2.address, [framed(bytes)]), rawCall(js.address, [framed(bytes)])]);
      expect(a.status).toBe(200);
      expect(a.grpcStatus).toBe(String(grpc.status.INVALID_ARGUMENT));
      expect(a.grpcMessage).toMatch(reason);
      expect([a.grpcStatus, a.grpcMessage]).toEqual([b.grpcStatus, b.grpcMessage]);
    });

    test('an oversized message: RESOURCE_EXHAUSTED, as grpc-js with REQUEST_MAX_BYTES', async () => {
      const [h2, js] = await Promise.all([start(lean, { maxRequestBytes: 100 }), start('grpc-js', { maxRequestBytes: 100 })]);
      const req = request({ user: 'y'.repeat(200) });
      const size = encodeRequest(req).length;
      const [a, b] = await Promise.all([call(rlClient(h2.address), req), call(rlClient(js.address), req)]);
      expect(a).toEqual({ code: grpc.status.RESOURCE_EXHAUSTED, details: `Received message larger than max (${size} vs 100)` });
      expect(a).toEqual(b);
      // The connection still serves.
      expect(await call(rlClient(h2.address), request({ user: 'small' }))).toHaveProperty('response');
    });

    test('an unknown method: UNIMPLEMENTED', async () => {
      const [h2, js] = await Promise.all([start(lean), start('grpc-js')]);
      const unknown = (address: string) => {
        const client = new grpc.Client(address, grpc.credentials.createInsecure());
        clients.add(client);
        return new Promise<grpc.ServiceError | null>((resolve) =>
          client.makeUnaryRequest('/some.Service/Method', (b: Buffer) => b, (b: Buffer) => b, Buffer.alloc(0), (err) => resolve(err)),
        );
      };
      const [a, b] = await Promise.all([unknown(h2.address), unknown(js.address)]);
      expect(a).toMatchObject({ code: grpc.status.UNIMPLEMENTED, details: 'The server does not implement the method /some.Service/Method' });
      expect(a?.details).toBe(b?.details);
    });
  });

  describe('the wire', () => {
    test('a message split across several DATA frames', async () => {
      const h2 = await start(lean);
      const message = framed(encodeRequest(request({ user: 'split' }, { team: 't' })));
      const parts = [message.subarray(0, 3), message.subarray(3, 9), message.subarray(9)];
      const res = await rawCall(h2.address, parts);
      expect(res.status).toBe(200);
      expect(res.headers['content-type']).toBe('application/grpc');
      expect(res.grpcStatus).toBe('0');
      const decoded = decodeResponse(res.body);
      expect(decoded.overallCode).toBe(1);
      expect(decoded.statuses.map((s) => s.limitRemaining)).toEqual([2, 99]);
    });

    test('a wrong content-type is HTTP 415, a GET is 405', async () => {
      const h2 = await start(lean);
      const body = [framed(encodeRequest(request({ user: 'a' })))];
      const json = await rawCall(h2.address, body, { 'content-type': 'application/json' });
      expect(json.status).toBe(415);
      expect(json.grpcMessage).toBe('invalid gRPC request content-type "application/json"');
      const get = await rawCall(h2.address, [], { ':method': 'GET' });
      expect(get.status).toBe(405);
      // A subtype is gRPC too.
      expect((await rawCall(h2.address, body, { 'content-type': 'application/grpc+proto' })).grpcStatus).toBe('0');
    });

    test('no message, two messages, a truncated message', async () => {
      const h2 = await start(lean);
      const one = framed(encodeRequest(request({ user: 'a' })));
      const none = await rawCall(h2.address, []);
      expect([none.grpcStatus, none.grpcMessage]).toEqual([String(grpc.status.UNIMPLEMENTED), `Received no request message for method ${SHOULD_RATE_LIMIT}`]);
      const two = await rawCall(h2.address, [Buffer.concat([one, one])]);
      expect(two.grpcStatus).toBe(String(grpc.status.UNIMPLEMENTED));
      const truncated = await rawCall(h2.address, [one.subarray(0, one.length - 2)]);
      expect(truncated.grpcStatus).toBe(String(grpc.status.INTERNAL));
    });

    test('compressed messages: gzip and deflate are decompressed, other encodings UNIMPLEMENTED', async () => {
      const h2 = await start(lean, { maxRequestBytes: 1000 });
      const message = encodeRequest(request({ user: 'zipped' }));
      const gzip = await rawCall(h2.address, [framed(zlib.gzipSync(message), true)], { 'grpc-encoding': 'gzip' });
      expect(gzip.grpcStatus).toBe('0');
      expect(decodeResponse(gzip.body).statuses[0]!.limitRemaining).toBe(2);
      const deflate = await rawCall(h2.address, [framed(zlib.deflateSync(message), true)], { 'grpc-encoding': 'deflate' });
      expect(decodeResponse(deflate.body).statuses[0]!.limitRemaining).toBe(1);
      const snappy = await rawCall(h2.address, [framed(message, true)], { 'grpc-encoding': 'snappy' });
      expect([snappy.grpcStatus, snappy.grpcMessage]).toEqual([
        String(grpc.status.UNIMPLEMENTED),
        'Received message compressed with unsupported encoding "snappy"',
      ]);
      const unnamed = await rawCall(h2.address, [framed(message, true)]);
      expect(unnamed.grpcStatus).toBe(String(grpc.status.INTERNAL));
      const bomb = await rawCall(h2.address, [framed(zlib.gzipSync(Buffer.alloc(5000)), true)], { 'grpc-encoding': 'gzip' });
      expect([bomb.grpcStatus, bomb.grpcMessage]).toEqual([
        String(grpc.status.RESOURCE_EXHAUSTED),
        'Received message that decompresses to a size larger than 1000',
      ]);
    });

    test('a grpc-js client that compresses with gzip is served', async () => {
      const h2 = await start(lean);
      const client = rlClient(h2.address, undefined, { 'grpc.default_compression_algorithm': 2 });
      const res = await call(client, request({ user: 'gzip-client' }));
      expect(res).toMatchObject({ response: { overallCode: 1 } });
    });

    test('grpc-message is percent-encoded (non-ASCII, control characters and %), on the wire as grpc-js sends it', async () => {
      expect(percentEncode('plain text: ok')).toBe('plain text: ok');
      expect(percentEncode('100% é\n')).toBe('100%25 %C3%A9%0A');
      expect(decodeURIComponent(percentEncode('100% é\n'))).toBe('100% é\n');
      const failing = deciderOf(() => {
        throw new Error('100% é\n');
      });
      const [h2, js] = await Promise.all([start(lean, { service: failing }), start('grpc-js', { service: failing })]);
      const frame = framed(encodeRequest(request({ user: 'x' })));
      const [a, b] = await Promise.all([rawCall(h2.address, [frame]), rawCall(js.address, [frame])]);
      expect(a.headers['grpc-message']).toBe('100%25 %C3%A9%0A');
      expect(a.grpcMessage).toBe('100% é\n');
      expect([a.grpcStatus, a.grpcMessage]).toEqual([b.grpcStatus, b.grpcMessage]);
    });

    test('the caller\'s W3C trace context is the parent of the call span', async () => {
      // Keeps what it is given (the SDK's in-memory exporter forgets its spans at shutdown).
      const finished: ReadableSpan[] = [];
      const exporter: SpanExporter = {
        export: (spans, done) => {
          finished.push(...spans);
          done({ code: ExportResultCode.SUCCESS });
        },
        shutdown: () => Promise.resolve(),
      };
      const tracing = setupTracing(
        { enabled: true, serviceName: 'rl', serviceNamespace: '', serviceInstanceId: 'i', exporterProtocol: 'http', samplingRate: 1 },
        silentLogger,
        { exporter },
      );
      const stats = new StatsStore();
      const h2 = await start(lean, { service: memoryRateLimitService(stats, CONFIG, { tracing }), stats, tracing });
      const md = new grpc.Metadata();
      md.set('traceparent', '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01');
      expect(await call(rlClient(h2.address), request({ user: 'traced' }), md)).toHaveProperty('response');
      await tracing.shutdown();
      const span = finished.find((s) => s.name === 'ShouldRateLimit Execution')!;
      expect(span.spanContext().traceId).toBe('4bf92f3577b34da6a3ce929d0e0e4736');
      expect(span.parentSpanContext?.spanId).toBe('00f067aa0ba902b7');
      expect(span.attributes['domain']).toBe('d');
    });
  });

  describe('health', () => {
    const check = (client: HealthClient, service: string) =>
      new Promise<{ status?: Serving; code?: number; details?: string }>((resolve) =>
        client.check({ service }, (err, res) => resolve(err ? { code: err.code, details: err.details } : { status: res.status })),
      );

    test('Check and List, as the grpc-js transport', async () => {
      const [h2, js] = await Promise.all([start(lean), start('grpc-js')]);
      for (const r of [h2, js]) r.health.add('config', false);
      const viaH2 = healthClient(h2.address);
      const viaJs = healthClient(js.address);
      for (const name of ['', 'ratelimit', 'other']) expect(await check(viaH2, name)).toEqual(await check(viaJs, name));
      expect(await check(viaH2, '')).toEqual({ status: Serving.SERVING });
      expect(await check(viaH2, 'ratelimit')).toEqual({ status: Serving.NOT_SERVING });
      expect(await check(viaH2, 'other')).toEqual({ code: grpc.status.NOT_FOUND, details: 'unknown service' });
      expect(h2.stats.counter('ratelimit_server.Check.total_requests').value).toBe(6);
      const list = (client: HealthClient) =>
        new Promise<HealthListResponse>((resolve, reject) => client.list({}, (err, res) => (err ? reject(err) : resolve(res))));
      const listed = await list(viaH2);
      expect(listed).toEqual(await list(viaJs));
      expect(listed.statuses).toEqual({ '': { status: Serving.SERVING }, ratelimit: { status: Serving.NOT_SERVING } });
    });

    test('Watch follows the health, unknown names are SERVICE_UNKNOWN, a stop ends the stream OK', async () => {
      const h2 = await start(lean);
      const client = healthClient(h2.address);
      const seen: Serving[] = [];
      const watch = client.watch({ service: 'ratelimit' });
      const ended = new Promise<grpc.StatusObject>((resolve) => watch.on('status', resolve));
      watch.on('data', (m: HealthCheckResponse) => seen.push(m.status));
      watch.on('error', () => undefined);
      await waitFor(() => seen.length === 1, 'seen.length === 1');
      h2.health.set('store', false);
      await waitFor(() => seen.length === 2, 'seen.length === 2');
      h2.health.set('store', true);
      await waitFor(() => seen.length === 3, 'seen.length === 3');
      expect(seen).toEqual([Serving.SERVING, Serving.NOT_SERVING, Serving.SERVING]);

      const unknown: Serving[] = [];
      const other = client.watch({ service: 'other' });
      other.on('data', (m: HealthCheckResponse) => unknown.push(m.status));
      other.on('error', () => undefined);
      await waitFor(() => unknown.length === 1, 'unknown.length === 1');
      expect(unknown).toEqual([Serving.SERVICE_UNKNOWN]);

      h2.listener.endWatches();
      expect((await ended).code).toBe(grpc.status.OK);
    });

    test('a cancelled Watch stops following the health', async () => {
      const health = new Health();
      let following = 0;
      const onChange = health.onChange.bind(health);
      health.onChange = (listener) => {
        following++;
        const off = onChange(listener);
        return () => {
          following--;
          return off();
        };
      };
      const h2 = await start(lean, { health });
      const watch = healthClient(h2.address).watch({ service: 'ratelimit' });
      watch.on('error', () => undefined);
      await new Promise((resolve) => watch.once('data', resolve));
      expect(following).toBe(1);
      watch.cancel();
      await waitFor(() => following === 0, 'following === 0');
    });
  });

  /** A decider that answers after `ms` (or never, for Infinity). */
  /**
   * A decider that answers after `ms` (never for Infinity), or when `release()` is called;
   * `started` resolves when the first call reaches it.
   */
  function slowDecider(ms: number): Decider & { started: Promise<void>; release(): void } {
    const response: RateLimitResponse = { overallCode: 1, statuses: [{ code: 1, limitRemaining: 7 }], responseHeadersToAdd: [] };
    let reached!: () => void;
    const started = new Promise<void>((resolve) => (reached = resolve));
    const waiting: Array<() => void> = [];
    const decide = (_req: RateLimitRequest): Promise<RateLimitResponse> =>
      new Promise((resolve) => {
        reached();
        waiting.push(() => resolve(response));
        if (Number.isFinite(ms)) setTimeout(() => resolve(response), ms);
      });
    return { ...deciderOf(decide), started, release: () => waiting.splice(0).forEach((answer) => answer()) };
  }

  describe('connections', () => {
    test('GRPC_MAX_CONNECTION_AGE: GOAWAY after the age; calls in flight finish; the grace then closes', async () => {
      const h2 = await start(lean, { grpc: { maxConnectionAgeMs: 600, maxConnectionAgeGraceMs: 1500 }, service: slowDecider(900) });
      const session = http2.connect(`http://${h2.address}`);
      session.on('error', () => undefined);
      let goawayAt = 0;
      const goaway = new Promise<number>((resolve) =>
        session.once('goaway', (code: number) => {
          goawayAt = Date.now();
          resolve(code);
        }),
      );
      const closed = new Promise<void>((resolve) => session.once('close', resolve));
      // A call that starts before the age ends and outlives it.
      await new Promise((r) => session.once('connect', r));
      const req = session.request({ ':method': 'POST', ':path': SHOULD_RATE_LIMIT, 'content-type': 'application/grpc' });
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      let trailersAt = 0;
      const trailers = new Promise<http2.IncomingHttpHeaders>((resolve) =>
        req.once('trailers', (t) => {
          trailersAt = Date.now();
          resolve(t);
        }),
      );
      req.end(framed(encodeRequest(request({ user: 'inflight' }))));
      expect(await goaway).toBe(http2.constants.NGHTTP2_NO_ERROR);
      expect((await trailers)['grpc-status']).toBe('0');
      expect(trailersAt).toBeGreaterThanOrEqual(goawayAt);
      expect(decodeResponse(Buffer.concat(chunks)).statuses[0]!.limitRemaining).toBe(7);
      await closed;

      // A call longer than age + grace is cut.
      const slow = await start(lean, { grpc: { maxConnectionAgeMs: 200, maxConnectionAgeGraceMs: 200 }, service: slowDecider(Infinity) });
      const started = Date.now();
      const outcome = await call(rlClient(slow.address), request({ user: 'stuck' }));
      expect(outcome).toMatchObject({ code: grpc.status.UNAVAILABLE });
      expect(Date.now() - started).toBeLessThan(2000);
    });

    test('a grpc-js client reconnects after the GOAWAY', async () => {
      const h2 = await start(lean, { grpc: { maxConnectionAgeMs: 100, maxConnectionAgeGraceMs: 100 } });
      const proxy = await startFrameCountingProxy(h2.address);
      try {
        const client = rlClient(proxy.address);
        expect(await call(client, request({ user: 'before' }))).toHaveProperty('response');
        await proxy.firstGoaway;
        // The first connection was told to go: the next call succeeds on a new one. (On a loaded
        // machine the first call itself may already have met the 100 ms age and reconnected.)
        expect(await call(client, request({ user: 'after' }))).toHaveProperty('response');
        expect(proxy.connections).toBeGreaterThanOrEqual(2);
      } finally {
        await proxy.close();
      }
    });

    test('drain: in-flight calls finish, new connections are refused; forceClose cuts the rest', async () => {
      const held = slowDecider(Infinity);
      const h2 = await start(lean, { service: held });
      const client = rlClient(h2.address);
      const inflight = call(client, request({ user: 'inflight' }));
      await held.started;
      running.delete(h2);
      let drained = false;
      const drain = h2.listener.drain().then(() => (drained = true));
      // Let every pending event run: the drain must still be waiting for the call.
      for (let i = 0; i < 10; i++) await new Promise((r) => setImmediate(r));
      expect(drained).toBe(false);
      held.release();
      expect(await inflight).toMatchObject({ response: { overallCode: 1 } });
      await drain;
      const late = await call(rlClient(h2.address, undefined, { 'grpc.initial_reconnect_backoff_ms': 50 }), request({ user: 'late' }));
      expect(late).toMatchObject({ code: grpc.status.UNAVAILABLE });

      const stuckDecider = slowDecider(Infinity);
      const stuck = await start(lean, { service: stuckDecider });
      running.delete(stuck);
      const never = call(rlClient(stuck.address), request({ user: 'never' }));
      await stuckDecider.started;
      const stuckDrain = stuck.listener.drain();
      stuck.listener.forceClose();
      await stuckDrain;
      expect(await never).toMatchObject({ code: grpc.status.UNAVAILABLE });
    });

    test('a unix socket', async () => {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rl-h2-uds-'));
      try {
        const sock = path.join(dir, 'grpc.sock');
        const h2 = await start(lean, { grpc: { uds: sock } });
        expect(await call(rlClient(`unix:${sock}`), request({ user: 'uds' }))).toHaveProperty('response');
        await stop(h2);
      } finally {
        fs.rmSync(dir, { recursive: true, force: true });
      }
    });
  });

  describe('what a default transport must have, on both transports', () => {
    const transports = [lean, 'grpc-js'] as const;

    test.each(transports)('%s: the grpc-timeout deadline is the server\'s too: DEADLINE_EXCEEDED, and a late decision is dropped', async (transport) => {
      const server = await start(transport, { service: slowDecider(400) });
      const answer = await rawCall(server.address, [framed(encodeRequest(request({ user: 'late' })))], { 'grpc-timeout': '150m' });
      expect(answer.grpcStatus).toBe(String(grpc.status.DEADLINE_EXCEEDED));
      expect(answer.grpcMessage).toBe('Deadline exceeded');
      // The decision arrives after the deadline; the next call on a new stream is still served.
      const fast = await start(transport);
      expect(await call(rlClient(fast.address), request({ user: 'next' }))).toHaveProperty('response');
    });

    test('a malformed grpc-timeout is INTERNAL; none means no server deadline', async () => {
      const server = await start(lean, { service: slowDecider(200) });
      const bad = await rawCall(server.address, [framed(encodeRequest(request({ user: 'x' })))], { 'grpc-timeout': '12x' });
      expect(bad).toMatchObject({ grpcStatus: String(grpc.status.INTERNAL), grpcMessage: 'malformed grpc-timeout: 12x' });
      const none = await rawCall(server.address, [framed(encodeRequest(request({ user: 'x' })))]);
      expect(none.grpcStatus).toBe('0');
    });

    test.each(transports)('%s: GRPC_MAX_CONCURRENT_STREAMS is announced in SETTINGS', async (transport) => {
      const server = await start(transport, { grpc: { maxConcurrentStreams: 7 } });
      const session = http2.connect(`http://${server.address}`);
      clients.add(session);
      session.on('error', () => undefined);
      const settings = await new Promise<http2.Settings>((resolve) => session.once('remoteSettings', resolve));
      expect(settings.maxConcurrentStreams).toBe(7);
    });

    test.each(transports)('%s: GRPC_KEEPALIVE_TIME pings an idle connection; a peer that never answers is closed after GRPC_KEEPALIVE_TIMEOUT', async (transport) => {
      const server = await start(transport, { grpc: { keepaliveTimeMs: 150, keepaliveTimeoutMs: 150 } });
      const session = http2.connect(`http://${server.address}`);
      clients.add(session);
      session.on('error', () => undefined);
      await new Promise<void>((resolve) => session.once('ping', () => resolve()));
      // A peer that says hello and then answers nothing, not even a PING.
      const [host, port] = server.address.split(':');
      const silent = net.connect(Number(port), host);
      silent.on('error', () => undefined);
      silent.resume(); // read and drop what the server sends, so its close is seen
      silent.write(Buffer.concat([Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'), Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0])]));
      await new Promise<void>((resolve) => silent.once('close', () => resolve()));
    });

    test.each(transports)('%s: GRPC_MAX_CONNECTION_IDLE sends GOAWAY to a connection without calls', async (transport) => {
      const server = await start(transport, { grpc: { maxConnectionIdleMs: 200 } });
      const session = http2.connect(`http://${server.address}`);
      clients.add(session);
      session.on('error', () => undefined);
      const goaway = new Promise<void>((resolve) => session.once('goaway', () => resolve()));
      const answer = await new Promise<string | undefined>((resolve) => {
        const req = session.request({ ':method': 'POST', ':path': SHOULD_RATE_LIMIT, 'content-type': 'application/grpc', te: 'trailers' });
        req.on('trailers', (t) => resolve(t['grpc-status'] as string));
        req.on('data', () => undefined);
        req.end(framed(encodeRequest(request({ user: 'idle' }))));
      });
      expect(answer).toBe('0');
      await goaway;
    });
  });

  describe('TLS', () => {
    const certs = testCerts();
    const sources: CertificateSource[] = [];
    afterAll(() => sources.forEach((s) => s.stop()));

    function source(dir: string, clientCa: boolean): CertificateSource {
      const s = new CertificateSource(
        {
          certFile: path.join(dir, 'tls.crt'),
          keyFile: path.join(dir, 'tls.key'),
          clientCaFile: clientCa ? certs.ca.cert : '',
          clientSan: clientCa ? CLIENT_SAN : '',
          reloadIntervalMs: 0,
        },
        silentLogger,
      );
      sources.push(s);
      return s;
    }

    function serverFiles(): string {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rl-h2-tls-'));
      fs.copyFileSync(certs.server.cert, path.join(dir, 'tls.crt'));
      fs.copyFileSync(certs.server.key, path.join(dir, 'tls.key'));
      return dir;
    }

    const tlsClient = (address: string, pair: CertPair | undefined, ca = certs.ca.cert) =>
      rlClient(
        address,
        grpc.credentials.createSsl(fs.readFileSync(ca), pair ? fs.readFileSync(pair.key) : null, pair ? fs.readFileSync(pair.cert) : null),
        { 'grpc.ssl_target_name_override': 'localhost' },
      );

    /** A TLS client that negotiates no ALPN protocol: resolves when the server has closed it. */
    async function closedWithoutAlpn(address: string): Promise<void> {
      const port = Number(address.slice(address.lastIndexOf(':') + 1));
      const noAlpn = nodeTls.connect({ port, host: '127.0.0.1', ca: fs.readFileSync(certs.ca.cert), servername: 'localhost' });
      const handshake = new Promise<void>((resolve) => noAlpn.once('secureConnect', () => resolve()));
      const closed = new Promise<void>((resolve) => noAlpn.once('close', () => resolve()));
      noAlpn.on('error', () => undefined);
      await handshake;
      await closed;
    }

    test('TLS, with certificate reload', async () => {
      const dir = serverFiles();
      try {
        const certificates = source(dir, false);
        const tls = { enabled: true, certFile: '', keyFile: '', clientCaFile: '', clientSan: '' };
        const h2 = await start(lean, { grpc: { tls }, certificates });
        expect(await call(tlsClient(h2.address, undefined), request({ user: 'tls' }))).toHaveProperty('response');
        // Plaintext is refused.
        expect(await call(rlClient(h2.address), request({ user: 'plain' }))).toMatchObject({ code: grpc.status.UNAVAILABLE });
        // A TLS client that chose no ALPN protocol (so not HTTP/2) is closed after its handshake.
        await closedWithoutAlpn(h2.address);
        // A rotated certificate (another CA) is served to new connections.
        fs.copyFileSync(certs.rogueServer.cert, path.join(dir, 'tls.crt'));
        fs.copyFileSync(certs.rogueServer.key, path.join(dir, 'tls.key'));
        certificates.reload();
        expect(await call(tlsClient(h2.address, undefined, certs.otherCa.cert), request({ user: 'rotated' }))).toHaveProperty('response');
      } finally {
        fs.rmSync(dir, { recursive: true, force: true });
      }
    });

    test('mTLS with GRPC_CLIENT_TLS_SAN: the right client is served; a wrong SAN, no certificate, another CA are refused', async () => {
      const dir = serverFiles();
      try {
        const certificates = source(dir, true);
        const tls = { enabled: true, certFile: '', keyFile: '', clientCaFile: certs.ca.cert, clientSan: CLIENT_SAN };
        const h2 = await start(lean, { grpc: { tls }, certificates });
        expect(await call(tlsClient(h2.address, certs.client), request({ user: 'mtls' }))).toHaveProperty('response');
        for (const pair of [certs.client2, undefined, certs.rogueClient]) {
          expect(await call(tlsClient(h2.address, pair), request({ user: 'intruder' }))).toMatchObject({ code: grpc.status.UNAVAILABLE });
        }
        // ALPN h2 only, as gRPC needs.
        const raw = await rawCall(
          h2.address,
          [framed(encodeRequest(request({ user: 'raw-tls' })))],
          {},
          { ca: fs.readFileSync(certs.ca.cert), cert: fs.readFileSync(certs.client.cert), key: fs.readFileSync(certs.client.key), servername: 'localhost' },
          'https',
        );
        expect(raw.grpcStatus).toBe('0');
      } finally {
        fs.rmSync(dir, { recursive: true, force: true });
      }
    });
  });
});

describe('the caller, on both transports', () => {
  test.each([lean, 'grpc-js'] as const)('%s: the service is told the peer address, one Caller object for the calls of a connection', async (transport) => {
    const seen: Array<Caller | undefined> = [];
    const recording = deciderOf((_request, caller) => {
      seen.push(caller);
      return { overallCode: 1, statuses: [], responseHeadersToAdd: [], dynamicMetadata: undefined };
    });
    const server = await start(transport, { service: recording });
    const session = http2.connect(`http://${server.address}`, {
      createConnection: () => net.connect({ host: '127.0.0.1', port: server.port, localAddress: '127.0.0.4' }),
    });
    const one = (): Promise<void> =>
      new Promise((resolve, reject) => {
        const req = session.request({ ':method': 'POST', ':path': SHOULD_RATE_LIMIT, 'content-type': 'application/grpc', te: 'trailers' });
        req.on('data', () => {});
        req.on('error', reject);
        req.on('close', () => resolve());
        req.end(framed(encodeRequest(request({ user: 'who' }))));
      });
    try {
      await one();
      await one();
    } finally {
      session.close();
    }
    expect(seen.map((c) => c?.address)).toEqual(['127.0.0.4', '127.0.0.4']);
    // The socket transport makes it once per connection (grpc-js once per address).
    expect(seen[1]).toBe(seen[0]);
    expect(seen[0]!.notOverLimitElsewhere).toEqual({ overLimitElsewhere: false, caller: '127.0.0.4' });
  });
});
