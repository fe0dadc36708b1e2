/**
 * The HTTP port (httpSocketServer + createHttpHandler, deciding with a real RateLimitService on a
 * MemoryStore) with real clients: curl, python3's http.client, Node's http client with a
 * keep-alive Agent, fetch, and wrk. Each client is a child process (spawned asynchronously, so
 * the server in this process keeps serving) with a time limit, killed after each test.
 *
 * A missing tool fails its test, naming the Debian package (`make test` installs them).
 */
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Health } from '../../src/server/health';
import { createHttpHandler } from '../../src/server/http';
import type { ExchangeHandler } from '../../src/server/http1/connection';
import { type HttpSocketServer, httpSocketServer } from '../../src/server/http-socket';
import { StatsStore } from '../../src/stats/store';
import type { Logger } from '../../src/telemetry/logger';
import { killChildren, runOk } from '../support/child-run';
import { memoryRateLimitService } from '../support/grpc-service';

const quiet: Logger = { debug: () => {}, info: () => {}, warn: () => {}, error: () => {}, enabled: () => false };

const CONFIG = `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1000000}
  - key: low
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: wrk
    rate_limit: {unit: minute, requests_per_unit: 1000}
`;
const WRK_LIMIT = 1000;

const bodyFor = (key: string, value = 'v'): string => JSON.stringify({ domain: 'd', descriptors: [{ entries: [{ key, value }] }] });
const BODY = bodyFor('k');

// ---- tools ----

const ROOT = path.resolve(__dirname, '../..');

// ---- the server ----

interface Seen {
  method: string;
  path: string;
  minor: number;
  contentLength: number;
  expectContinue: boolean;
  status?: number;
}

let srv: HttpSocketServer;
let base: string;
/** Every request the server read, with the status it answered. */
let seen: Seen[] = [];
let connections = 0;
let tmp: string;

beforeAll(async () => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'http-interop-'));
  const inner = createHttpHandler({ service: memoryRateLimitService(new StatsStore(), CONFIG), health: new Health(), logger: quiet, maxBodyBytes: 64 * 1024 });
  // The real handler, recording what it was asked and what it answered.
  const recording: ExchangeHandler = {
    plan: (head) => inner.plan(head),
    handle(head, body, exchange) {
      const entry: Seen = { method: head.method, path: head.path, minor: head.minor, contentLength: head.contentLength, expectContinue: head.expectContinue };
      seen.push(entry);
      const answer = exchange.answer.bind(exchange);
      exchange.answer = (status, headers, text) => {
        entry.status = status;
        answer(status, headers, text);
      };
      inner.handle(head, body, exchange);
    },
  };
  srv = httpSocketServer(recording, { logger: quiet });
  srv.server.on('connection', (_s: net.Socket) => connections++);
  await new Promise<void>((resolve) => srv.server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(srv.server.address() as AddressInfo).port}`;
});

beforeEach(() => {
  seen = [];
  connections = 0;
});

afterEach(() => {
  killChildren();
});

afterAll(async () => {
  srv.forceClose();
  await srv.drain();
  fs.rmSync(tmp, { recursive: true, force: true });
});

function writeTemp(name: string, content: string): string {
  const file = path.join(tmp, name);
  fs.writeFileSync(file, content);
  return file;
}

// ---------------------------------------------------------------------------------------------

describe('curl', () => {
  test('two URLs in one invocation reuse one keep-alive connection (200, 200, then 429 over the limit)', async () => {
    const { stdout, stderr } = await runOk('curl', [
      '-sS',
      '-v',
      '-H',
      'Content-Type: application/json',
      '--data-binary',
      bodyFor('low', 'curl'),
      '-w',
      '\n<%{http_code} %{num_connects}>\n',
      `${base}/json`,
      `${base}/json`,
      `${base}/json`,
    ]);
    expect([...stdout.matchAll(/<(\d+) (\d+)>/g)].map((m) => [m[1], m[2]])).toEqual([
      ['200', '1'],
      ['200', '0'],
      ['429', '0'],
    ]);
    expect(stdout).toContain('"overallCode":"OVER_LIMIT"');
    expect(stderr).toMatch(/Re-using existing connection/);
    expect(connections).toBe(1);
    expect(seen.map((s) => s.status)).toEqual([200, 200, 429]);
  });

  test('a chunked request body (-H "Transfer-Encoding: chunked")', async () => {
    const { stdout } = await runOk('curl', [
      '-sS',
      '-H',
      'Transfer-Encoding: chunked',
      '-H',
      'Content-Type: application/json',
      '--data-binary',
      BODY,
      '-w',
      '\n<%{http_code}>',
      `${base}/json`,
    ]);
    expect(stdout).toMatch(/"overallCode":"OK"[\s\S]*\n<200>$/);
    expect(seen).toEqual([expect.objectContaining({ method: 'POST', path: '/json', contentLength: -1, status: 200 })]);
  });

  test('a body over 1 KiB with "Expect: 100-continue": the 100 comes, then the answer', async () => {
    // Valid JSON padded with blanks to 2000 bytes.
    const body = BODY + ' '.repeat(2000 - BODY.length);
    const file = writeTemp('expect.json', body);
    const { stdout, stderr } = await runOk('curl', [
      '-sS',
      '-v',
      '-H',
      'Expect: 100-continue',
      '-H',
      'Content-Type: application/json',
      '--data-binary',
      `@${file}`,
      '-w',
      '\n<%{http_code}>',
      `${base}/json`,
    ]);
    expect(stderr).toMatch(/> Expect: 100-continue/);
    expect(stderr).toMatch(/< HTTP\/1\.1 100 Continue/);
    expect(stdout).toMatch(/"overallCode":"OK"[\s\S]*\n<200>$/);
    expect(seen).toEqual([expect.objectContaining({ contentLength: 2000, expectContinue: true, status: 200 })]);
  });

  test('--http1.0: answered, and the connection closed after', async () => {
    const { stdout } = await runOk('curl', ['-sS', '-i', '--http1.0', '-H', 'Content-Type: application/json', '--data-binary', BODY, `${base}/json`]);
    expect(stdout).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
    expect(stdout).toMatch(/\r\nConnection: close\r\n/i);
    expect(stdout).toContain('"overallCode":"OK"');
    expect(seen).toEqual([expect.objectContaining({ minor: 0, status: 200 })]);
  });

  test('-I: a HEAD answer with the Content-Length and no body', async () => {
    const { stdout } = await runOk('curl', ['-sS', '-I', `${base}/healthcheck`]);
    expect(stdout).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
    expect(stdout).toMatch(/\r\nContent-Length: 2\r\n/i);
    expect(stdout.endsWith('\r\n\r\n')).toBe(true);
    expect(seen).toEqual([expect.objectContaining({ method: 'HEAD', path: '/healthcheck', status: 200 })]);
  });
});

const PYTHON_CLIENT = `
import http.client, json, sys
port, body = int(sys.argv[1]), sys.argv[2].encode()
c = http.client.HTTPConnection('127.0.0.1', port, timeout=10)
out = []
def ask(method, url, **kw):
    c.request(method, url, **kw)
    r = c.getresponse()
    data = r.read().decode()
    out.append([r.status, r.getheader('Content-Type'), data])
ask('GET', '/healthcheck')
first = c.sock
ask('POST', '/json', body=body, headers={'Content-Type': 'application/json'})
def pieces():
    yield body[:7]
    yield body[7:20]
    yield body[20:]
ask('POST', '/json', body=pieces(), headers={'Content-Type': 'application/json', 'Transfer-Encoding': 'chunked'}, encode_chunked=True)
ask('GET', '/nowhere')
ask('POST', '/json', body=b'{not json', headers={'Content-Type': 'application/json'})
print(json.dumps({'answers': out, 'same_socket': c.sock is first}))
c.close()
`;

describe('python3 http.client', () => {
  test('several requests on one keep-alive connection, one with a chunked body', async () => {
    const { stdout } = await runOk('python3', ['-c', PYTHON_CLIENT, String(new URL(base).port), BODY]);
    const result = JSON.parse(stdout) as { answers: Array<[number, string | null, string]>; same_socket: boolean };
    expect(result.same_socket).toBe(true);
    expect(result.answers.map(([status, type]) => [status, type])).toEqual([
      [200, 'text/plain; charset=utf-8'],
      [200, 'application/json'],
      [200, 'application/json'],
      [404, 'text/plain; charset=utf-8'],
      [400, 'text/plain; charset=utf-8'],
    ]);
    expect(result.answers[0]![2]).toBe('OK');
    expect(JSON.parse(result.answers[1]![2])).toMatchObject({ overallCode: 'OK' });
    expect(JSON.parse(result.answers[2]![2])).toMatchObject({ overallCode: 'OK' });
    expect(result.answers[3]![2]).toBe('404 page not found\n');
    expect(connections).toBe(1);
    expect(seen.map((s) => [s.path, s.contentLength])).toEqual([
      ['/healthcheck', 0],
      ['/json', BODY.length],
      ['/json', -1],
      ['/nowhere', 0],
      ['/json', 9],
    ]);
  });
});

/** One request through `agent`: status, body, and whether the agent reused a socket. */
function request(agent: http.Agent, method: string, url: string, body?: string): Promise<{ status: number; body: string; reused: boolean }> {
  return new Promise((resolve, reject) => {
    const req = http.request(`${base}${url}`, { method, agent, headers: body === undefined ? {} : { 'Content-Type': 'application/json' } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, body: Buffer.concat(chunks).toString(), reused: req.reusedSocket }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
}

describe("Node's clients", () => {
  test('http with a keep-alive Agent: sequential requests on one connection, concurrent ones on at most maxSockets', async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const answers = [];
      for (let i = 0; i < 5; i++) answers.push(await request(agent, 'POST', '/json', BODY));
      expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 200, 200]);
      expect(answers.map((a) => a.reused)).toEqual([false, true, true, true, true]);
      expect(JSON.parse(answers[4]!.body)).toMatchObject({ overallCode: 'OK' });
      expect(connections).toBe(1);
    } finally {
      agent.destroy();
    }
    const wide = new http.Agent({ keepAlive: true, maxSockets: 4 });
    try {
      connections = 0;
      const answers = await Promise.all(Array.from({ length: 40 }, (_, i) => request(wide, i % 2 === 0 ? 'POST' : 'GET', i % 2 === 0 ? '/json' : '/healthcheck', i % 2 === 0 ? BODY : undefined)));
      expect(answers.every((a) => a.status === 200)).toBe(true);
      expect(connections).toBeLessThanOrEqual(4);
    } finally {
      wide.destroy();
    }
  });

  test('fetch: /json, /healthcheck, a streamed (chunked) body, a 404 and a 429', async () => {
    const res = await fetch(`${base}/json`, { method: 'POST', body: BODY, headers: { 'Content-Type': 'application/json' } });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('application/json');
    expect(await res.json()).toMatchObject({ overallCode: 'OK' });

    const health = await fetch(`${base}/healthcheck`);
    expect([health.status, await health.text()]).toEqual([200, 'OK']);

    const encoder = new TextEncoder();
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(encoder.encode(BODY.slice(0, 5)));
        controller.enqueue(encoder.encode(BODY.slice(5)));
        controller.close();
      },
    });
    const streamed = await fetch(`${base}/json`, { method: 'POST', body: stream, duplex: 'half' } as RequestInit);
    expect(streamed.status).toBe(200);
    expect(await streamed.json()).toMatchObject({ overallCode: 'OK' });

    const missing = await fetch(`${base}/nowhere`);
    expect([missing.status, await missing.text()]).toEqual([404, '404 page not found\n']);

    const low = bodyFor('low', 'fetch');
    const statuses = [];
    for (let i = 0; i < 3; i++) {
      const r = await fetch(`${base}/json`, { method: 'POST', body: low });
      statuses.push(r.status);
      await r.arrayBuffer();
    }
    expect(statuses).toEqual([200, 200, 429]);
    expect(seen.find((s) => s.contentLength === -1)).toMatchObject({ path: '/json', status: 200 });
  });
});

describe('wrk', () => {
  test('wrk for 1 s on 10 connections with bench/post.lua: no socket errors, no answer other than 200 and 429', async () => {
    const file = writeTemp('wrk.json', bodyFor('wrk', 'w'));
    const { stdout } = await runOk('wrk', ['-t1', '-c10', '-d1s', '-s', path.join(ROOT, 'bench/post.lua'), `${base}/json`], { env: { ...process.env, BENCH_BODY_FILE: file } });
    const total = Number(/(\d+) requests in /.exec(stdout)?.[1] ?? NaN);
    expect(total).toBeGreaterThan(WRK_LIMIT);
    expect(stdout).not.toMatch(/Socket errors/);
    const non2xx = Number(/Non-2xx or 3xx responses: (\d+)/.exec(stdout)?.[1] ?? 0);

    const counts = new Map<number | undefined, number>();
    for (const s of seen) counts.set(s.status, (counts.get(s.status) ?? 0) + 1);
    // The server answered every request it read (none left without a status), each 200 or 429.
    expect([...counts.keys()].sort()).toEqual([200, 429]);
    expect(counts.get(200)).toBe(WRK_LIMIT);
    // wrk counts the answers that arrived within its second; the server may have answered a few more.
    expect(non2xx).toBeLessThanOrEqual(counts.get(429)!);
    expect(non2xx).toBe(total - WRK_LIMIT);
    // Its 10 connections, and the one wrk opens first to check the address.
    expect(connections).toBeGreaterThanOrEqual(10);
    expect(connections).toBeLessThanOrEqual(11);

    const after = await fetch(`${base}/healthcheck`);
    expect(after.status).toBe(200);
  });
});
