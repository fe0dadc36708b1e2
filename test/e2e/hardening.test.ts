/**
 * Bad input end to end: each case gets a clear error and the service keeps answering good
 * requests; a flood of distinct values keeps memory bounded; a bounded fuzz run of random and
 * mutated messages on gRPC and /json never crashes it and every answer is well formed.
 */
import fs from 'node:fs';
import net from 'node:net';
import * as grpc from '@grpc/grpc-js';
import { RateLimitRequest as ProtoRequest } from '../../generated/envoy/service/ratelimit/v3/rls';
import { prng as rng } from '../support/prng';
import { baseEnv, callGrpc, descriptor, grpcClient, httpGet, httpPost, runtimeDir, type Service, startService } from './harness';

const CONFIG = `
domain: hard
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: any
    rate_limit: {unit: day, requests_per_unit: 1000000}
  - key: victim
    rate_limit: {unit: year, requests_per_unit: 100}
`;

const LIMITS = {
  REQUEST_MAX_BYTES: '65536',
  REQUEST_MAX_DESCRIPTORS: '20',
  REQUEST_MAX_ENTRIES: '8',
  REQUEST_MAX_ENTRY_LENGTH: '256',
  MEMORY_MAX_KEYS: '5000',
};

describe('hardening', () => {
  let svc: Service;
  let dir: ReturnType<typeof runtimeDir>;
  let client: ReturnType<typeof grpcClient>;
  const good = { domain: 'hard', descriptors: [descriptor('any', 'alive')] };
  const stillServes = async () => expect((await callGrpc(client, good)).overallCode).toBe(1);

  beforeAll(async () => {
    dir = runtimeDir({ 'hard.yaml': CONFIG });
    svc = await startService({ ...baseEnv(dir.root), ...LIMITS });
    client = grpcClient(svc.grpc);
  });
  afterAll(async () => {
    client?.close();
    if (svc) expect(await svc.stop()).toBe(0);
    fs.rmSync(dir.base, { recursive: true, force: true });
  });

  test.each([
    ['too many descriptors', { domain: 'hard', descriptors: Array.from({ length: 21 }, () => descriptor('k', 'v')) }, '21 descriptors, more than 20'],
    ['too many entries', { domain: 'hard', descriptors: [descriptor(...Array.from({ length: 18 }, (_, i) => String(i)))] }, 'descriptors[0]: 9 entries, more than 8'],
    ['an over-long value', { domain: 'hard', descriptors: [descriptor('k', 'x'.repeat(257))] }, 'descriptors[0].entries[0].value is longer than 256 characters'],
    ['an over-long key', { domain: 'hard', descriptors: [descriptor('k'.repeat(300), 'v')] }, 'descriptors[0].entries[0].key is longer than 256 characters'],
    ['an over-long domain', { domain: 'd'.repeat(300), descriptors: [descriptor('k', 'v')] }, 'domain is 300 characters long, more than 256'],
  ])('gRPC: %s is INVALID_ARGUMENT', async (_name, req, message) => {
    await expect(callGrpc(client, req)).rejects.toMatchObject({ code: grpc.status.INVALID_ARGUMENT, details: message });
    await stillServes();
  });

  test('the same limits on /json answer 400 with the reason', async () => {
    const body = JSON.stringify({ domain: 'hard', descriptors: Array.from({ length: 21 }, () => ({ entries: [{ key: 'k', value: 'v' }] })) });
    const res = await httpPost(svc.http, '/json', body);
    expect(res.status).toBe(400);
    expect(res.headers.get('x-error-detail')).toBe('21 descriptors, more than 20');
  });

  test('an oversized gRPC message is refused with RESOURCE_EXHAUSTED', async () => {
    const big = { domain: 'hard', descriptors: Array.from({ length: 10 }, () => descriptor('k', 'x'.repeat(10_000))) };
    await expect(callGrpc(client, big)).rejects.toMatchObject({ code: grpc.status.RESOURCE_EXHAUSTED });
    await stillServes();
  });

  test('an oversized /json body is 413', async () => {
    expect((await httpPost(svc.http, '/json', 'x'.repeat(70_000))).status).toBe(413);
  });

  test('deeply nested JSON is refused without harm', async () => {
    const deep = '{"domain":"hard","descriptors":' + '['.repeat(100_000) + ']'.repeat(100_000) + '}';
    expect((await httpPost(svc.http, '/json', deep)).status).toBe(413);
    const deepSmall = '{"bogus":' + '['.repeat(20_000) + ']'.repeat(20_000) + '}';
    expect((await httpPost(svc.http, '/json', deepSmall)).status).toBe(400);
    await stillServes();
  });

  test('invalid UTF-8 in a gRPC string is refused', async () => {
    // domain = "h\xffrd": field 1, length 4.
    const bytes = Buffer.from([0x0a, 0x04, 0x68, 0xff, 0x72, 0x64, 0x12, 0x05, 0x0a, 0x03, 0x0a, 0x01, 0x6b]);
    const raw = new grpc.Client(svc.grpc, grpc.credentials.createInsecure());
    const err = await new Promise<grpc.ServiceError | null>((resolve) =>
      raw.makeUnaryRequest('/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit', (b: Buffer) => b, (b: Buffer) => b, bytes, (e) =>
        resolve(e),
      ),
    );
    raw.close();
    expect(err?.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(err?.details).toMatch(/UTF-8/);
    await stillServes();
  });

  test('a huge hits_addend cannot wrap the uint32 arithmetic', async () => {
    const huge = { ...descriptor('k', 'huge'), hitsAddend: BigInt(Number.MAX_SAFE_INTEGER) };
    for (let i = 0; i < 2; i++) {
      const res = await callGrpc(client, { domain: 'hard', descriptors: [huge] });
      expect(res.overallCode).toBe(2);
      expect(res.statuses[0]!.limitRemaining).toBe(0);
    }
    const tooBig = { ...descriptor('k', 'huge'), hitsAddend: 2n ** 63n };
    await expect(callGrpc(client, { domain: 'hard', descriptors: [tooBig] })).rejects.toMatchObject({ code: grpc.status.INVALID_ARGUMENT });
    const max32 = await callGrpc(client, { domain: 'hard', descriptors: [descriptor('k', 'u32')], hitsAddend: 4294967295 });
    expect(max32.statuses[0]).toMatchObject({ code: 2, limitRemaining: 0 });
    await stillServes();
  });

  test('a flood of distinct descriptor values keeps the store bounded and cannot reset a live counter', async () => {
    const victim = { domain: 'hard', descriptors: [descriptor('victim', 'v')] };
    for (let i = 0; i < 3; i++) await callGrpc(client, victim);
    const batch = 20;
    for (let i = 0; i < 600; i++) {
      const descriptors = Array.from({ length: batch }, (_, j) => descriptor('any', `v${i * batch + j}`));
      const res = await callGrpc(client, { domain: 'hard', descriptors });
      // The values past the cap are counted in the overflow sketches: each is within its limit.
      expect(res.overallCode).toBe(1);
    }
    const stats = (await httpGet(svc.debug, '/stats')).body;
    const overflowed = Number(/^ratelimit\.memory\.keys_overflowed: (\d+)$/m.exec(stats)![1]);
    const keys = Number(/^ratelimit\.memory\.keys: (\d+)$/m.exec(stats)![1]);
    expect(keys).toBe(5000);
    expect(overflowed).toBeGreaterThanOrEqual(12_000 - 5000);
    expect(svc.output()).toContain('memory store: all MEMORY_MAX_KEYS=5000 counters are live, so new keys are counted in the overflow sketches');
    // The victim's counter survived the flood: its fourth hit leaves 96 of 100.
    expect((await callGrpc(client, victim)).statuses[0]!.limitRemaining).toBe(96);
    await stillServes();
  });

  test('fuzz: random and mutated messages on gRPC and /json never break the service', async () => {
    const seed = Number(process.env['FUZZ_SEED'] ?? Date.now() % 1_000_000);
    const rand = rng(seed);
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
    const validBytes = Buffer.from(
      ProtoRequest.encode({ domain: 'hard', descriptors: [descriptor('k', 'fuzz'), descriptor('any', 'x')], hitsAddend: 1 }).finish(),
    );
    const validJson = JSON.stringify({ domain: 'hard', descriptors: [{ entries: [{ key: 'k', value: 'fuzz' }], hitsAddend: '1' }] });
    const mutate = (b: Buffer): Buffer => {
      const out = Buffer.from(b);
      const n = 1 + Math.floor(rand() * 4);
      for (let i = 0; i < n; i++) {
        const op = rand();
        const at = Math.floor(rand() * out.length);
        if (op < 0.5) out[at] = Math.floor(rand() * 256);
        else if (op < 0.75) return Buffer.concat([out.subarray(0, at), out.subarray(at + 1)]);
        else return Buffer.concat([out.subarray(0, at), Buffer.from([Math.floor(rand() * 256)]), out.subarray(at)]);
      }
      return out;
    };
    const randomBytes = (): Buffer => Buffer.from(Array.from({ length: Math.floor(rand() * 64) }, () => Math.floor(rand() * 256)));
    const raw = new grpc.Client(svc.grpc, grpc.credentials.createInsecure());
    const deadline = Date.now() + 4000;
    let sent = 0;
    const wellFormedGrpc = new Set([grpc.status.OK, grpc.status.UNKNOWN, grpc.status.INVALID_ARGUMENT, grpc.status.RESOURCE_EXHAUSTED, grpc.status.INTERNAL]);
    while (Date.now() < deadline && sent < 5000) {
      sent++;
      if (rand() < 0.5) {
        const body = rand() < 0.8 ? mutate(validBytes) : randomBytes();
        const code = await new Promise<number>((resolve) =>
          raw.makeUnaryRequest('/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit', (b: Buffer) => b, (b: Buffer) => b, body, (e, res) => {
            if (e) return resolve(e.code);
            // An answer must decode as a RateLimitResponse.
            try {
              const { RateLimitResponse } = require('../../generated/envoy/service/ratelimit/v3/rls');
              RateLimitResponse.decode(res!);
              resolve(grpc.status.OK);
            } catch {
              resolve(-1);
            }
          }),
        );
        if (!wellFormedGrpc.has(code)) throw new Error(`seed ${seed}: gRPC answered ${code} for ${body.toString('hex')}`);
      } else {
        const body = rand() < 0.8 ? mutate(Buffer.from(validJson)) : pick([randomBytes(), Buffer.from('[]'), Buffer.from('null'), Buffer.from('{"domain":{}}')]);
        const res = await httpPost(svc.http, '/json', body);
        if (![200, 429, 400].includes(res.status)) throw new Error(`seed ${seed}: /json answered ${res.status} for ${body.toString('hex')}`);
        if (res.status !== 400) JSON.parse(res.body);
        else expect(res.body).toBe('Bad Request\n');
      }
    }
    raw.close();
    expect(sent).toBeGreaterThan(50);
    await stillServes();
    expect(svc.proc.exitCode).toBeNull();
  });
});

/** A raw HTTP/1.1 connection: what it has received, and whether the server closed it. */
function rawHttp(address: string): { socket: net.Socket; received: () => string; response: Promise<string>; closed: Promise<void> } {
  const [host, port] = [address.slice(0, address.lastIndexOf(':')), Number(address.slice(address.lastIndexOf(':') + 1))];
  const socket = net.connect(port, host);
  let data = '';
  let onResponse: (text: string) => void = () => {};
  const response = new Promise<string>((resolve) => (onResponse = resolve));
  socket.on('data', (d: Buffer) => {
    data += d.toString();
    if (/\r\n\r\n/.test(data)) onResponse(data);
  });
  socket.on('error', () => undefined);
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  return { socket, received: () => data, response, closed };
}

describe('slow and oversized HTTP bodies', () => {
  let svc: Service;
  let dir: ReturnType<typeof runtimeDir>;
  const BODY = JSON.stringify({ domain: 'hard', descriptors: [{ entries: [{ key: 'k', value: 'slow' }] }] });

  beforeAll(async () => {
    dir = runtimeDir({ 'hard.yaml': CONFIG });
    svc = await startService({ ...baseEnv(dir.root), HTTP_REQUEST_BODY_TIMEOUT: '400ms' });
  });
  afterAll(async () => {
    if (svc) expect(await svc.stop()).toBe(0);
    fs.rmSync(dir.base, { recursive: true, force: true });
  });

  test('a declared Content-Length over the limit is answered 413 from the header alone, and the connection closed', async () => {
    const c = rawHttp(svc.http);
    c.socket.write('POST /json HTTP/1.1\r\nHost: t\r\nContent-Length: 100000000\r\n\r\n');
    const response = await c.response; // no body byte was sent
    expect(response).toMatch(/^HTTP\/1\.1 413 /);
    expect(response).toMatch(/\r\nConnection: close\r\n/i);
    await c.closed;
  });

  test('a chunked body is refused with 413 as soon as it passes the limit', async () => {
    const c = rawHttp(svc.http);
    c.socket.write('POST /json HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n');
    const chunk = 'x'.repeat(256 * 1024);
    for (let i = 0; i < 5; i++) c.socket.write(`${chunk.length.toString(16)}\r\n${chunk}\r\n`); // 1.25 MiB, never finished
    expect(await c.response).toMatch(/^HTTP\/1\.1 413 /);
    await c.closed;
  });

  test('a body that never finishes is answered 408 after HTTP_REQUEST_BODY_TIMEOUT and its connection closed', async () => {
    const c = rawHttp(svc.http);
    c.socket.write(`POST /json HTTP/1.1\r\nHost: t\r\nContent-Length: ${BODY.length}\r\n\r\n${BODY.slice(0, 10)}`);
    expect(await c.response).toMatch(/^HTTP\/1\.1 408 /);
    await c.closed;
  });

  test('headers that never finish are answered 408 too', async () => {
    const c = rawHttp(svc.http);
    c.socket.write('POST /json HTTP/1.1\r\nHost: t\r\n');
    expect(await c.response).toMatch(/^HTTP\/1\.1 408 /);
    await c.closed;
  });

  test('keep-alive: requests on one connection spanning longer than the timeout are all answered', async () => {
    const c = rawHttp(svc.http);
    const request = `POST /json HTTP/1.1\r\nHost: t\r\nContent-Length: ${BODY.length}\r\n\r\n${BODY}`;
    let answered = 0;
    const started = Date.now();
    // Each request completes at once; the connection lives past the 400 ms bound.
    while (Date.now() - started < 1000) {
      c.socket.write(request);
      const target = ++answered;
      await new Promise<void>((resolve) => {
        const check = (): void => {
          if ((c.received().match(/HTTP\/1\.1 \d{3} /g) ?? []).length >= target) {
            c.socket.off('data', check);
            resolve();
          }
        };
        c.socket.on('data', check);
        check();
      });
    }
    expect(c.received().match(/HTTP\/1\.1 (\d{3}) /g)!.every((l) => l === 'HTTP/1.1 200 ' || l === 'HTTP/1.1 429 ')).toBe(true);
    expect(answered).toBeGreaterThan(10);
    expect(c.socket.destroyed).toBe(false);
    c.socket.destroy();
  });
});
