/**
 * The socket gRPC transport (src/server/grpc-socket.ts on our own HTTP/2 code, src/server/h2)
 * with clients of other implementations than grpc-js (which grpc-transports.test.ts covers): the
 * C-core client of Debian's python3-grpcio and grpc-go of Debian's golang-google-grpc-dev, driven
 * by test/support/interop/client.{py,go}, then nghttp2's h2load and nghttp.
 *
 * Every client is a child process talking to a listener in this process: children are spawned
 * asynchronously (a synchronous spawn would block the very server they call), each with a time
 * limit, and killed after each test. A missing tool fails the tests with the Debian package to
 * install (scripts/test-servers.sh installs them all).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { status } from '@grpc/grpc-js';
import {
  RateLimitRequest as ProtoRequest,
  RateLimitResponse as ProtoResponse,
  RateLimitResponse_Code as Code,
} from '../../generated/envoy/service/ratelimit/v3/rls';
import { HealthCheckRequest, HealthCheckResponse, HealthCheckResponse_ServingStatus as Serving } from '../../generated/grpc/health/v1/health';
import type { RateLimitRequest, RateLimitResponse } from '../../src/core/rls';
import type { Decider } from '../../src/server/http';
import { StatsStore } from '../../src/stats/store';
import { NOOP_SPAN, type Tracing } from '../../src/telemetry/tracing';
import { killChildren, runOk, run } from '../support/child-run';
import { memoryRateLimitService } from '../support/grpc-service';
import { type FrameCountingProxy, type TestListener, type TestListenerOptions, rateLimitRequest, startFrameCountingProxy, startGrpcListener } from '../support/h2-server';

const CONFIG = `
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
`;

const SHOULD_RATE_LIMIT = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';
const HEALTH_CHECK = '/grpc.health.v1.Health/Check';
const TOTAL_REQUESTS = 'ratelimit_server.ShouldRateLimit.total_requests';

const INTEROP_DIR = path.resolve(__dirname, '../support/interop');
const PYTHON = '/usr/bin/python3';
const GRPC_GO_SOURCE = '/usr/share/gocode/src/google.golang.org/grpc';
/** Longest the Go client's build may take (about 6 s with a cold cache here). */
const GO_BUILD_TIMEOUT_MS = 170_000;

// ---- the server ----

const running = new Set<TestListener>();
/** Things to undo after each test (proxies, held deciders). */
const cleanups: Array<() => void | Promise<void>> = [];

async function start(over: Omit<TestListenerOptions, 'config' | 'transport' | 'grpc'> = {}): Promise<TestListener> {
  const r = await startGrpcListener({ ...over, config: CONFIG });
  running.add(r);
  return r;
}

/**
 * A decider that holds the calls for `user: slow` until the test ends (`started` resolves when
 * the first arrives) and decides the others with the real service.
 */
function slowUserDecider(stats: StatsStore): Decider & { started: Promise<void> } {
  const real = memoryRateLimitService(stats, CONFIG);
  let reached!: () => void;
  const started = new Promise<void>((resolve) => (reached = resolve));
  const held: Array<() => void> = [];
  const response: RateLimitResponse = { overallCode: 1, statuses: [{ code: 1, limitRemaining: 0 }], responseHeadersToAdd: [] };
  cleanups.push(() => held.splice(0).forEach((answer) => answer()));
  return {
    started,
    decideInto(req, span, caller, transport, ctx, answer) {
      if (req.descriptors[0]?.entries[0]?.value !== 'slow') real.decideInto(req, span, caller, transport, ctx, answer);
      else {
        reached();
        held.push(() => answer.decided(ctx, response));
      }
    },
  };
}

/**
 * A decider that answers nothing until `count` calls are waiting at once, then all of them:
 * the calls can only finish if the client really has them all in flight together.
 */
function gatheringDecider(stats: StatsStore, count: number): Decider {
  const real = memoryRateLimitService(stats, CONFIG);
  const waiting: Array<() => void> = [];
  cleanups.push(() => waiting.splice(0).forEach((go) => go()));
  return {
    decideInto(req, span, caller, transport, ctx, answer) {
      waiting.push(() => real.decideInto(req, span, caller, transport, ctx, answer));
      if (waiting.length === count) waiting.splice(0).forEach((go) => go());
    },
  };
}

/** A tracing stand-in that keeps the request headers of each ShouldRateLimit call (its trace carrier). */
function headerRecorder(): Tracing & { seen: Array<Record<string, unknown>> } {
  const seen: Array<Record<string, unknown>> = [];
  return {
    enabled: true,
    seen,
    startCallSpan: (carrier) => {
      seen.push({ ...(carrier as Record<string, unknown>) });
      return NOOP_SPAN;
    },
    startChildSpan: () => NOOP_SPAN,
    shutdown: async () => {},
  };
}

/** A frame-counting proxy closed after the test. */
async function frameCountingProxy(target: string): Promise<FrameCountingProxy> {
  const proxy = await startFrameCountingProxy(target);
  cleanups.push(() => proxy.close());
  return proxy;
}

afterEach(async () => {
  killChildren();
  for (const undo of cleanups.splice(0)) await undo();
  await Promise.all(
    [...running].map(async (r) => {
      running.delete(r);
      r.listener.forceClose();
      await r.listener.drain();
    }),
  );
});

let workDir: string;
beforeAll(() => {
  workDir = fs.mkdtempSync(path.join(os.tmpdir(), 'rl-h2-interop-'));
});
afterAll(() => {
  killChildren(); // a build cut short by its beforeAll's timeout
  fs.rmSync(workDir, { recursive: true, force: true });
});

// ---- requests ----

/** Encoded: the interop clients and nghttp2 tools send bytes. */
function request(...descriptors: Array<Record<string, string>>): Buffer {
  return Buffer.from(ProtoRequest.encode(rateLimitRequest(...descriptors)).finish());
}

/** A message with its 5-byte gRPC prefix, as h2load and nghttp post it. */
function framed(message: Buffer): Buffer {
  const prefix = Buffer.alloc(5);
  prefix.writeUInt32BE(message.length, 1);
  return Buffer.concat([prefix, message]);
}

function writeWorkFile(name: string, content: Buffer): string {
  const file = path.join(workDir, name);
  fs.writeFileSync(file, content);
  return file;
}

// ---- the gRPC clients ----

interface Call {
  method: string;
  request: Buffer;
  timeoutMs?: number;
  metadata?: Array<[string, string]>;
}

/** One call's end as the client saw it (test/support/interop/client.*). */
interface Outcome {
  code: number;
  details: string;
  response: string | null;
  trailers: Array<[string, string]>;
}

interface InteropClient {
  /** Checks or builds the client (once); fails naming the missing Debian package. */
  prepare(): Promise<void>;
  /** Runs `calls` on one channel, at most `concurrency` at once. */
  calls(address: string, calls: Call[], concurrency?: number): Promise<Outcome[]>;
  /** The details the client itself gives a call whose deadline it saw pass. */
  localDeadlineDetails: string;
  /** Its user-agent: the implementation the server really talked to. */
  userAgent: RegExp;
}

async function runCalls(command: string, args: string[], calls: Call[], concurrency: number): Promise<Outcome[]> {
  const input = JSON.stringify({
    concurrency,
    calls: calls.map((c) => ({ method: c.method, request: c.request.toString('hex'), timeoutMs: c.timeoutMs ?? 10_000, metadata: c.metadata ?? [] })),
  });
  const { stdout } = await runOk(command, args, { input });
  const outcomes = stdout
    .trim()
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => JSON.parse(line) as Outcome);
  expect(outcomes).toHaveLength(calls.length);
  return outcomes;
}

const pythonClient: InteropClient = {
  async prepare() {
    const check = await run(PYTHON, ['-c', 'import grpc']);
    if (check.code !== 0) {
      throw new Error(`${PYTHON} cannot import grpc: install the Debian package python3-grpcio (bash scripts/test-servers.sh does)\n${check.stderr}`);
    }
  },
  calls: (address, calls, concurrency = 1) => runCalls(PYTHON, [path.join(INTEROP_DIR, 'client.py'), address], calls, concurrency),
  localDeadlineDetails: 'Deadline Exceeded',
  userAgent: /^grpc-python\/\S+ grpc-c\//,
};

let goBinary = '';
const goClient: InteropClient = {
  async prepare() {
    if (!fs.existsSync(GRPC_GO_SOURCE)) {
      throw new Error(`${GRPC_GO_SOURCE} is missing: install the Debian package golang-google-grpc-dev (bash scripts/test-servers.sh does)`);
    }
    goBinary = path.join(workDir, 'interop-client');
    // GOPATH mode on the Debian sources: no module download, nothing from the network.
    const env = {
      ...process.env,
      GO111MODULE: 'off',
      GOPATH: '/usr/share/gocode',
      GOCACHE: path.join(workDir, 'go-cache'),
      GOFLAGS: '',
      GOPROXY: 'off',
    };
    await runOk('go', ['build', '-o', goBinary, path.join(INTEROP_DIR, 'client.go')], { env, timeoutMs: GO_BUILD_TIMEOUT_MS });
  },
  calls: (address, calls, concurrency = 1) => runCalls(goBinary, [address], calls, concurrency),
  localDeadlineDetails: 'context deadline exceeded',
  userAgent: /^grpc-go\//,
};

function decodeRateLimit(outcome: Outcome): ProtoResponse {
  expect(outcome).toMatchObject({ code: status.OK });
  return ProtoResponse.decode(Buffer.from(outcome.response!, 'hex'));
}

describe.each([
  ['python3-grpcio (C core)', pythonClient],
  ['grpc-go', goClient],
] as const)('%s client', (_name, client) => {
  beforeAll(() => client.prepare(), GO_BUILD_TIMEOUT_MS + 10_000);

  test('ShouldRateLimit: OK up to the limit, then OVER_LIMIT, on one channel', async () => {
    const server = await start();
    const calls = [1, 2, 3, 4].map(() => ({ method: SHOULD_RATE_LIMIT, request: request({ user: 'alice' }) }));
    const outcomes = await client.calls(server.address, calls);
    // The trailers hold grpc-status only, which the clients keep to themselves.
    expect(outcomes.map((o) => o.trailers)).toEqual([[], [], [], []]);
    const responses = outcomes.map(decodeRateLimit);
    expect(responses.map((r) => r.overallCode)).toEqual([Code.OK, Code.OK, Code.OK, Code.OVER_LIMIT]);
    expect(responses.map((r) => r.statuses.map((s) => [s.code, s.limitRemaining]))).toEqual([
      [[Code.OK, 2]],
      [[Code.OK, 1]],
      [[Code.OK, 0]],
      [[Code.OVER_LIMIT, 0]],
    ]);
    expect(responses[0]!.responseHeadersToAdd.map((h) => h.key)).toEqual(['RateLimit-Limit', 'RateLimit-Remaining', 'RateLimit-Reset']);
    expect(server.stats.counter(TOTAL_REQUESTS).value).toBe(4);
  });

  test('200 calls in flight at once on one connection are all answered', async () => {
    const CALLS = 200;
    const stats = new StatsStore();
    const server = await start({ stats, service: gatheringDecider(stats, CALLS) });
    const proxy = await frameCountingProxy(server.address);
    const calls = Array.from({ length: CALLS }, (_, i) => ({ method: SHOULD_RATE_LIMIT, request: request({ user: `user-${i}` }) }));
    const outcomes = await client.calls(proxy.address, calls, CALLS);
    expect(outcomes.map((o) => decodeRateLimit(o).statuses[0]!.limitRemaining)).toEqual(Array(CALLS).fill(2));
    expect(proxy.connections).toBe(1);
    expect(stats.counter(TOTAL_REQUESTS).value).toBe(CALLS);
  });

  test('grpc.health.v1.Health/Check: SERVING for "" and "ratelimit", NOT_FOUND for an unknown name', async () => {
    const server = await start();
    const check = (service: string): Call => ({ method: HEALTH_CHECK, request: Buffer.from(HealthCheckRequest.encode({ service }).finish()) });
    const [empty, ratelimit, unknown] = await client.calls(server.address, [check(''), check('ratelimit'), check('other')]);
    for (const answer of [empty!, ratelimit!]) {
      expect(answer.code).toBe(status.OK);
      expect(HealthCheckResponse.decode(Buffer.from(answer.response!, 'hex')).status).toBe(Serving.SERVING);
    }
    expect(unknown).toMatchObject({ code: status.NOT_FOUND, details: 'unknown service', response: null });
  });

  test('errors on one channel: UNIMPLEMENTED, RESOURCE_EXHAUSTED, INVALID_ARGUMENT, DEADLINE_EXCEEDED, then OK', async () => {
    const stats = new StatsStore();
    const slow = slowUserDecider(stats);
    const server = await start({ stats, service: slow, maxRequestBytes: 100 });
    const oversized = request({ user: 'y'.repeat(200) });
    const outcomes = await client.calls(server.address, [
      { method: '/some.Service/Method', request: Buffer.alloc(0) },
      { method: SHOULD_RATE_LIMIT, request: oversized },
      { method: SHOULD_RATE_LIMIT, request: Buffer.from([0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f]) },
      { method: SHOULD_RATE_LIMIT, request: Buffer.from([0x0a, 0x02, 0xc3, 0x28]) },
      { method: SHOULD_RATE_LIMIT, request: request({ user: 'slow' }), timeoutMs: 300 },
      { method: SHOULD_RATE_LIMIT, request: request({ user: 'after' }) },
    ]);
    const [unknownMethod, tooLarge, malformed, notUtf8, late, after] = outcomes as [Outcome, Outcome, Outcome, Outcome, Outcome, Outcome];
    // The texts grpc-transports.test.ts expects of the socket transport and grpc-js alike.
    expect(unknownMethod).toMatchObject({ code: status.UNIMPLEMENTED, details: 'The server does not implement the method /some.Service/Method' });
    expect(tooLarge).toMatchObject({ code: status.RESOURCE_EXHAUSTED, details: `Received message larger than max (${oversized.length} vs 100)` });
    expect(malformed.code).toBe(status.INVALID_ARGUMENT);
    expect(malformed.details).toMatch(/^invalid RateLimitRequest: truncated/);
    expect(notUtf8).toMatchObject({ code: status.INVALID_ARGUMENT, details: 'invalid RateLimitRequest: domain is not valid UTF-8' });
    await slow.started; // the slow call did reach the service
    // The server (grpc-timeout) and the client end the call at about the same time: either text.
    expect(late.code).toBe(status.DEADLINE_EXCEEDED);
    expect(['Deadline exceeded', client.localDeadlineDetails]).toContain(late.details);
    // The channel still serves after all of them.
    expect(decodeRateLimit(after).overallCode).toBe(Code.OK);
  });

  test('a 20 KB request header (HEADERS and CONTINUATION frames) is served and read whole', async () => {
    const tracing = headerRecorder();
    const server = await start({ tracing });
    const proxy = await frameCountingProxy(server.address);
    const big = 'v'.repeat(20 * 1024);
    const [answer] = await client.calls(proxy.address, [
      { method: SHOULD_RATE_LIMIT, request: request({ user: 'big-header' }), metadata: [['x-large', big]] },
    ]);
    expect(decodeRateLimit(answer!).overallCode).toBe(Code.OK);
    // The block is larger than the default 16 KiB frame: the client had to continue it.
    expect(proxy.clientFrameTypes.has(0x9)).toBe(true);
    expect(tracing.seen).toHaveLength(1);
    expect(tracing.seen[0]!['x-large']).toBe(big);
    expect(tracing.seen[0]!['user-agent']).toMatch(client.userAgent);
  });
});

describe('nghttp2 tools', () => {
  const url = (address: string): string => `http://${address}${SHOULD_RATE_LIMIT}`;
  const GRPC_HEADERS = ['-H', 'content-type: application/grpc', '-H', 'te: trailers'];
  const USER_STATS = 'ratelimit.service.rate_limit.d.user.';

  test('h2load: 3000 calls on 4 connections, 10 streams each, all succeed and are counted', async () => {
    const server = await start();
    // ~920 bytes a call, 690 KB a connection: ten times its initial window, so the server must
    // keep granting WINDOW_UPDATE for the load to finish.
    const body = writeWorkFile('h2load.bin', framed(request({ user: 'h2load-'.padEnd(900, 'x') })));
    const { stdout } = await runOk('h2load', ['-n', '3000', '-c', '4', '-m', '10', '-d', body, ...GRPC_HEADERS, url(server.address)]);
    expect(stdout).toMatch(/requests: 3000 total, 3000 started, 3000 done, 3000 succeeded, 0 failed, 0 errored, 0 timeout/);
    expect(stdout).toMatch(/status codes: 3000 2xx, 0 3xx, 0 4xx, 0 5xx/);
    const count = (name: string): number => server.stats.counter(name).value;
    expect(count(TOTAL_REQUESTS)).toBe(3000);
    // h2load cannot see grpc-status (a gRPC error is HTTP 200 too): every call was decided.
    expect([count(`${USER_STATS}total_hits`), count(`${USER_STATS}within_limit`), count(`${USER_STATS}over_limit`)]).toEqual([3000, 3, 2997]);
  });

  /** The frames nghttp -v reports, e.g. `recv DATA frame <length=20, flags=0x00, stream_id=13>`. */
  function framesOf(log: string): Array<{ direction: string; type: string; length: number; flags: number; stream: number }> {
    return [...log.matchAll(/\] (send|recv) (\w+) frame <length=(\d+), flags=0x([0-9a-f]{2}), stream_id=(\d+)>/g)].map((m) => ({
      direction: m[1]!,
      type: m[2]!,
      length: Number(m[3]),
      flags: parseInt(m[4]!, 16),
      stream: Number(m[5]),
    }));
  }

  /** The values of a response header field in nghttp -v's log, e.g. `recv (stream_id=13) grpc-status: 0`. */
  function received(log: string, name: string): string[] {
    return [...log.matchAll(/recv \(stream_id=\d+\) ([^:\s][^:]*|:[a-z]+): (.*)/g)].filter((m) => m[1] === name).map((m) => m[2]!);
  }

  /** What nghttp -v logs that a well-formed exchange never shows: errors, resets, GOAWAY with an error code. */
  const TROUBLE = /\[ERROR\]|RST_STREAM|error_code=(?!NO_ERROR)/;

  test('nghttp: a POST is answered with HEADERS, one DATA message and trailers grpc-status: 0', async () => {
    const server = await start();
    const body = writeWorkFile('nghttp.bin', framed(request({ user: 'nghttp' })));
    // Without -v, stdout is the response body: exactly one uncompressed gRPC message.
    const { stdoutBytes: answer } = await runOk('nghttp', ['-H', ':method: POST', ...GRPC_HEADERS, '-d', body, url(server.address)]);
    expect(answer[0]).toBe(0);
    expect(answer.readUInt32BE(1)).toBe(answer.length - 5);
    const decoded = ProtoResponse.decode(answer.subarray(5));
    expect([decoded.overallCode, decoded.statuses[0]!.limitRemaining]).toEqual([Code.OK, 2]);

    const { stdout: log } = await runOk('nghttp', ['-v', '-n', '-H', ':method: POST', ...GRPC_HEADERS, '-d', body, url(server.address)]);
    expect(log).not.toMatch(TROUBLE);
    const frames = framesOf(log).filter((f) => f.direction === 'recv' && f.stream !== 0);
    expect(frames.map((f) => [f.type, f.flags])).toEqual([
      ['HEADERS', 0x4], // END_HEADERS
      ['DATA', 0x0],
      ['HEADERS', 0x5], // END_STREAM | END_HEADERS: the trailers
    ]);
    expect(frames[1]!.length).toBe(answer.length);
    expect(received(log, ':status')).toEqual(['200']);
    expect(received(log, 'content-type')).toEqual(['application/grpc']);
    expect(received(log, 'grpc-status')).toEqual(['0']);
    expect(server.stats.counter(TOTAL_REQUESTS).value).toBe(2);
  });

  test('nghttp: padded DATA and a header block continued in CONTINUATION frames are served', async () => {
    const server = await start();
    const proxy = await frameCountingProxy(server.address);
    const body = writeWorkFile('nghttp-padded.bin', framed(request({ user: 'padded' })));
    // --continuation adds ~18 KB of headers: more than one 16 KiB frame.
    const { stdout: log } = await runOk('nghttp', ['-v', '-n', '--continuation', '-b', '255', ...GRPC_HEADERS, '-d', body, url(proxy.address)]);
    expect(proxy.clientFrameTypes.has(0x9)).toBe(true);
    expect(framesOf(log).some((f) => f.direction === 'send' && f.type === 'DATA' && (f.flags & 0x8) !== 0)).toBe(true); // PADDED
    expect(log).not.toMatch(TROUBLE);
    expect(received(log, 'grpc-status')).toEqual(['0']);
  });

  test('nghttp: a GET is HTTP 405 with the grpc-go text', async () => {
    const server = await start();
    const { stdout: log } = await runOk('nghttp', ['-v', '-n', '-H', ':method: GET', ...GRPC_HEADERS, url(server.address)]);
    expect(log).not.toMatch(TROUBLE);
    expect(received(log, ':status')).toEqual(['405']);
    expect(received(log, 'grpc-status')).toEqual([String(status.INTERNAL)]);
    expect(received(log, 'grpc-message')).toEqual(['Received a HEADERS frame with :method "GET" which should be POST']);
  });
});
