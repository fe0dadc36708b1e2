/**
 * A key spray on the memory store (issue 40, item 4), end to end on the built service over gRPC.
 * One client address fills the table (MEMORY_MAX_KEYS) with live hourly counters and sprays on;
 * a new client's watched key at 3 an hour is then limited as its limit says: 3 OK, then
 * OVER_LIMIT (before the fix: allowed for ever, or with BACKEND_FAILURE_MODE=deny refused from the
 * first call). With a small MEMORY_CALLER_NEW_KEYS_PER_SECOND the sprayer's new keys past its
 * budget overflow, and another address still gets counters. Clients bind distinct loopback
 * addresses (127.0.0.x) so that the service sees distinct peers.
 */
import fs from 'node:fs';
import http2 from 'node:http2';
import net from 'node:net';
import {
  RateLimitRequest as ProtoRequest,
  RateLimitResponse as ProtoResponse,
  RateLimitResponse_Code as ProtoCode,
} from '../../generated/envoy/service/ratelimit/v3/rls';
import { inOneWindow, waitFor } from '../support/wait';
import { baseEnv, descriptor, httpGet, runtimeDir, type Service, startService } from './harness';

const CONFIG = `
domain: spray
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
  - key: watched
    rate_limit: {unit: hour, requests_per_unit: 3}
`;
const PATH = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';
const HOUR_MS = 3_600_000;

/**
 * A gRPC client over node:http2 whose connection comes from `localAddress`, made at its first call
 * and made again once the server closed it, as gRPC clients do (the service closes a connection
 * that makes no call within GRPC_FIRST_REQUEST_TIMEOUT).
 */
function clientFrom(target: string, localAddress: string) {
  const colon = target.lastIndexOf(':');
  let current: http2.ClientHttp2Session | undefined;
  const connected = (): http2.ClientHttp2Session => {
    if (current === undefined || current.closed || current.destroyed) {
      current = http2.connect(`http://${target}`, {
        createConnection: () => net.connect({ host: target.slice(0, colon), port: Number(target.slice(colon + 1)), localAddress }),
      });
      current.on('error', () => {});
      current.on('goaway', function (this: http2.ClientHttp2Session) {
        this.close();
      });
    }
    return current;
  };
  const call = (req: Partial<ProtoRequest>): Promise<ProtoResponse> =>
    new Promise((resolve, reject) => {
      const msg = ProtoRequest.encode({ domain: 'spray', descriptors: [], hitsAddend: 0, ...req }).finish();
      const frame = Buffer.alloc(5 + msg.length);
      frame.writeUInt32BE(msg.length, 1);
      frame.set(msg, 5);
      const stream = connected().request({ ':method': 'POST', ':path': PATH, 'content-type': 'application/grpc', te: 'trailers' });
      const chunks: Buffer[] = [];
      let grpcStatus: string | undefined;
      let message = '';
      const note = (h: http2.IncomingHttpHeaders): void => {
        if (h['grpc-status'] !== undefined) grpcStatus = String(h['grpc-status']);
        if (h['grpc-message'] !== undefined) message = decodeURIComponent(String(h['grpc-message']));
      };
      stream.on('response', note);
      stream.on('trailers', note);
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('error', reject);
      stream.on('close', () => {
        if (grpcStatus !== '0') reject(new Error(`grpc-status ${grpcStatus ?? 'none'}: ${message}`));
        else resolve(ProtoResponse.decode(Buffer.concat(chunks).subarray(5)));
      });
      stream.end(frame);
    });
  return { call, close: () => current?.close() };
}

const users = (from: number, n: number) => Array.from({ length: n }, (_, i) => descriptor('user', `u${from + i}`));

async function stat(svc: Service, name: string): Promise<number> {
  const body = (await httpGet(svc.debug, '/stats')).body;
  const m = new RegExp(`^${name.replace(/\./g, '\\.')}: (\\d+)$`, 'm').exec(body);
  if (m === null) throw new Error(`no ${name} in /stats`);
  return Number(m[1]);
}

describe('a key spray on the memory store', () => {
  const dirs: string[] = [];
  afterAll(() => {
    for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
  });

  test.each([
    ['unset', {}],
    ['deny', { BACKEND_FAILURE_MODE: 'deny' }],
  ])(
    'BACKEND_FAILURE_MODE %s: after one address fills MEMORY_MAX_KEYS and sprays on, a new client\'s key at 3 an hour gets 3 OK, then OVER_LIMIT',
    async (_mode, extra) => {
      const dir = runtimeDir({ 'spray.yaml': CONFIG });
      dirs.push(dir.base);
      const svc = await startService({ ...baseEnv(dir.root), MEMORY_MAX_KEYS: '2000', ...extra });
      const sprayer = clientFrom(svc.grpc, '127.0.0.1');
      const newcomer = clientFrom(svc.grpc, '127.0.0.2');
      try {
        // The counters must all stay live until the watched key is asked (the hour must not turn).
        await inOneWindow(HOUR_MS, 30_000);
        for (let i = 0; i < 10; i++) {
          const res = await sprayer.call({ descriptors: users(500 * i, 500) });
          expect(res.overallCode).toBe(ProtoCode.OK);
        }
        expect(await stat(svc, 'ratelimit.memory.keys')).toBe(2000);
        expect(await stat(svc, 'ratelimit.memory.keys_overflowed')).toBe(3000);
        await waitFor(() => svc.output().includes('memory store: all MEMORY_MAX_KEYS=2000 counters are live, so new keys are counted in the overflow sketches'), 'the overflow warning');
        // An overflowed key is counted: its second hit leaves at most 10^9 - 2.
        const again = await sprayer.call({ descriptors: [descriptor('user', 'u4999')] });
        expect(again.statuses[0]!.limitRemaining).toBeLessThanOrEqual(1_000_000_000 - 2);

        const watched = [];
        for (let i = 0; i < 5; i++) watched.push(await newcomer.call({ descriptors: [descriptor('watched', 'newcomer')] }));
        expect(watched.map((r) => r.overallCode)).toEqual([ProtoCode.OK, ProtoCode.OK, ProtoCode.OK, ProtoCode.OVER_LIMIT, ProtoCode.OVER_LIMIT]);
        expect(watched.map((r) => r.statuses[0]!.limitRemaining)).toEqual([2, 1, 0, 0, 0]);
        expect(await stat(svc, 'ratelimit.memory.keys')).toBe(2000);
      } finally {
        sprayer.close();
        newcomer.close();
        expect(await svc.stop()).toBe(0);
      }
    },
    90_000,
  );

  test('past MEMORY_CALLER_NEW_KEYS_PER_SECOND the sprayer\'s new keys overflow; another address still gets counters', async () => {
    const dir = runtimeDir({ 'spray.yaml': CONFIG });
    dirs.push(dir.base);
    const svc = await startService({ ...baseEnv(dir.root), MEMORY_MAX_KEYS: '20000', MEMORY_CALLER_NEW_KEYS_PER_SECOND: '1000' });
    const sprayer = clientFrom(svc.grpc, '127.0.0.1');
    const other = clientFrom(svc.grpc, '127.0.0.3');
    try {
      await inOneWindow(HOUR_MS, 30_000);
      const t0 = Date.now();
      for (let i = 0; i < 10; i++) await sprayer.call({ descriptors: users(500 * i, 500) });
      const seconds = (Date.now() - t0) / 1000;
      const held = await stat(svc, 'ratelimit.memory.keys');
      // A second's worth at once, then 1,000 a second.
      expect(held).toBeGreaterThanOrEqual(1000);
      expect(held).toBeLessThanOrEqual(1000 + Math.ceil(1000 * seconds) + 1);
      expect(await stat(svc, 'ratelimit.memory.keys_over_caller_budget')).toBe(5000 - held);
      await waitFor(() => svc.output().includes('memory store: caller 127.0.0.1 added MEMORY_CALLER_NEW_KEYS_PER_SECOND=1000 new counters within a second'), 'the caller warning');
      // Another address has a budget of its own: its 200 new keys all get counters.
      await other.call({ descriptors: users(100_000, 200) });
      expect(await stat(svc, 'ratelimit.memory.keys')).toBe(held + 200);
      const watched = [];
      for (let i = 0; i < 4; i++) watched.push((await other.call({ descriptors: [descriptor('watched', 'w')] })).overallCode);
      expect(watched).toEqual([ProtoCode.OK, ProtoCode.OK, ProtoCode.OK, ProtoCode.OVER_LIMIT]);
    } finally {
      sprayer.close();
      other.close();
      expect(await svc.stop()).toBe(0);
    }
  }, 90_000);
});
