/**
 * The /json listener over a real socket: bodies in several chunks, a declared length over the
 * limit refused before reading, a client that leaves mid-body costing nothing, and the trace
 * headers handed to the tracing.
 */
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { MemoryStore } from '../../src/backends/memory';
import { loadConfig } from '../../src/config/load';
import { ManualClock } from '../../src/platform/clock';
import { RateLimitService } from '../../src/limiter/service';
import { Health } from '../../src/server/health';
import { createHttpHandler } from '../../src/server/http';
import { deciderOf } from '../support/grpc-service';
import type { Caller } from '../../src/core/store';
import { Code, type RateLimitResponse } from '../../src/core/rls';
import { type HttpSocketServer, httpSocketServer } from '../../src/server/http-socket';
import { StatsStore } from '../../src/stats/store';
import type { Logger } from '../../src/telemetry/logger';
import { NOOP_SPAN, type TraceCarrier, type Tracing } from '../../src/telemetry/tracing';

const quiet: Logger = { debug: () => {}, info: () => {}, warn: () => {}, error: () => {}, enabled: () => false };
const BODY = JSON.stringify({ domain: 'd', descriptors: [{ entries: [{ key: 'k', value: 'v' }] }] });

let server: HttpSocketServer;
let port: number;
/** The trace carriers the handler gave the tracing, one per /json request. */
const carriers: TraceCarrier[] = [];
const recordingTracing: Tracing = {
  enabled: true,
  startCallSpan: (carrier) => {
    carriers.push(carrier);
    return NOOP_SPAN;
  },
  startChildSpan: () => NOOP_SPAN,
  shutdown: () => Promise.resolve(),
};

beforeAll(async () => {
  const stats = new StatsStore();
  const config = loadConfig([{ name: 'd.yaml', content: 'domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 100}\n' }], {
    mergeDomainConfig: false,
    stats,
  });
  const flags = { shadowMode: false, quotaMode: false, responseDynamicMetadata: false, responseHeadersEnabled: false, limitHeader: '', remainingHeader: '', resetHeader: '' };
  const service = new RateLimitService({
    store: new MemoryStore({ maxKeys: 100 }),
    snapshot: () => ({ config, flags }),
    stats,
    clock: new ManualClock(),
    nearLimitRatio: 0.8,
    cacheKeyPrefix: '',
  });
  server = httpSocketServer(createHttpHandler({ service, health: new Health(), logger: quiet, maxBodyBytes: 1024, tracing: recordingTracing }), { logger: quiet });
  await new Promise<void>((resolve) => server.server.listen(0, '127.0.0.1', resolve));
  port = (server.server.address() as AddressInfo).port;
});

afterAll(async () => {
  server.forceClose();
  await server.drain();
});

/** Writes `parts` on a raw socket with a pause between them; resolves with the whole reply. */
function raw(parts: string[], end = true): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = net.connect(port, '127.0.0.1');
    let out = '';
    s.setEncoding('utf8');
    s.on('data', (c: string) => (out += c));
    s.on('error', reject);
    s.on('close', () => resolve(out));
    let i = 0;
    const next = (): void => {
      if (i < parts.length) {
        s.write(parts[i++]!);
        setTimeout(next, 20);
      } else if (end) s.end();
      else s.destroy();
    };
    next();
  });
}

const head = (length: number): string => `POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: ${length}\r\nConnection: close\r\n\r\n`;

describe('POST /json', () => {
  test('a body that arrives in several chunks is read whole', async () => {
    const reply = await raw([head(BODY.length), BODY.slice(0, 10), BODY.slice(10, 40), BODY.slice(40)]);
    expect(reply).toMatch(/^HTTP\/1.1 200 OK/);
    expect(reply).toContain('"overallCode":"OK"');
  });

  test('a decision is framed by Content-Length, as upstream sends it, not chunked', async () => {
    const reply = await raw([head(BODY.length) + BODY]);
    const [headers, body] = reply.split('\r\n\r\n');
    expect(headers).not.toMatch(/transfer-encoding/i);
    expect(headers).toMatch(new RegExp(`\r\nContent-Length: ${Buffer.byteLength(body!)}(\r\n|$)`, 'i'));
    expect(JSON.parse(body!)).toMatchObject({ overallCode: 'OK' });
  });

  test('a declared Content-Length over the limit is 413 before any body is read', async () => {
    const reply = await raw([head(5000)]);
    expect(reply).toMatch(/^HTTP\/1.1 413/);
    expect(reply).toContain('request body of 5000 bytes exceeds the limit of 1024');
  });

  test('a chunked body over the limit is 413', async () => {
    const chunk = 'x'.repeat(700);
    const reply = await raw([
      'POST /json HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n',
      `${chunk.length.toString(16)}\r\n${chunk}\r\n`,
      `${chunk.length.toString(16)}\r\n${chunk}\r\n0\r\n\r\n`,
    ]);
    expect(reply).toMatch(/^HTTP\/1.1 413/);
  });

  test('a client that leaves mid-body gets nothing and the listener keeps serving', async () => {
    expect(await raw([head(BODY.length), BODY.slice(0, 20)], false)).toBe('');
    const res = await fetch(`http://127.0.0.1:${port}/json`, { method: 'POST', body: BODY });
    expect(res.status).toBe(200);
  });

  test('the caller\'s trace headers reach the tracing, by lower-case name, repeated ones joined; `constructor` and `__proto__` are names like any other', async () => {
    carriers.length = 0;
    const reply = await raw([
      `POST /json HTTP/1.1\r\nHost: x\r\nTraceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n` +
        `baggage: a=1\r\nBaggage: b=2\r\nconstructor: abc\r\n__proto__: x\r\nContent-Length: ${BODY.length}\r\nConnection: close\r\n\r\n${BODY}`,
    ]);
    expect(reply).toMatch(/^HTTP\/1.1 200/);
    expect(carriers).toHaveLength(1);
    const carrier = carriers[0] as Record<string, unknown>;
    expect(carrier).toMatchObject({ traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', baggage: 'a=1, b=2', host: 'x' });
    // Own properties with exactly the values sent (not joined to Object, not swallowed as the prototype).
    expect(Object.getOwnPropertyDescriptor(carrier, 'constructor')?.value).toBe('abc');
    expect(Object.getOwnPropertyDescriptor(carrier, '__proto__')?.value).toBe('x');
    expect(Object.keys(carrier).sort()).toEqual(['__proto__', 'baggage', 'connection', 'constructor', 'content-length', 'host', 'traceparent']);
  });
});

describe('the caller of /json', () => {
  test('the service is told the peer address, one Caller object for the requests of a connection', async () => {
    const seen: Array<Caller | undefined> = [];
    const recording = deciderOf((_request, caller) => {
      seen.push(caller);
      return { overallCode: Code.OK, statuses: [], responseHeadersToAdd: [], dynamicMetadata: undefined };
    });
    const own = httpSocketServer(createHttpHandler({ service: recording, health: new Health(), logger: quiet, maxBodyBytes: 1024 }), { logger: quiet });
    await new Promise<void>((resolve) => own.server.listen(0, '127.0.0.1', resolve));
    const ownPort = (own.server.address() as AddressInfo).port;
    try {
      const reply = await new Promise<string>((resolve, reject) => {
        const s = net.connect({ host: '127.0.0.1', port: ownPort, localAddress: '127.0.0.5' });
        let out = '';
        s.setEncoding('utf8');
        s.on('data', (c: string) => (out += c));
        s.on('error', reject);
        s.on('close', () => resolve(out));
        const req = `POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: ${BODY.length}\r\n\r\n${BODY}`;
        s.end(req + req.replace('Host: x', 'Host: x\r\nConnection: close'));
      });
      expect(reply.match(/HTTP\/1.1 200/g)).toHaveLength(2);
    } finally {
      own.forceClose();
      await own.drain();
    }
    expect(seen.map((c) => c?.address)).toEqual(['127.0.0.5', '127.0.0.5']);
    expect(seen[1]).toBe(seen[0]);
  });
});
