/**
 * RLQS accuracy on the running service over gRPC, in real time, with Envoys played by
 * EnvoyQuotaClient (faithful to Envoy's filter: a report every 5 s, token buckets enforced
 * locally). The exact figures come from the simulated-clock tests (test/quota/rlqs-accuracy.test.ts);
 * this one checks that the same behaviour holds through the real transport and process, with
 * tolerances that hold on a loaded two-core machine: three Envoys asking 30, 15 and 15 a second of a
 * 20/s rule for 16 s, the third leaving at 8.5 s.
 */
import { systemClock } from '../../src/platform/clock';
import { EnvoyQuotaClient, grpcTransport } from '../support/envoy-quota-client';
import { baseEnv, runtimeDir, startService, type Service } from './harness';

const LIMIT = 20;
const RUN_MS = 16_000;
const LEAVE_MS = 8_500;
const CONFIG = `domain: quota
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: ${LIMIT}}
`;
const BUCKET = { tenant: 'shared' };

let svc: Service;
let transport: ReturnType<typeof grpcTransport>;

beforeAll(async () => {
  const dirs = runtimeDir({ 'quota.yaml': CONFIG });
  svc = await startService({ ...baseEnv(dirs.root), RUNTIME_WATCH_ROOT: 'false' });
  transport = grpcTransport(svc.grpc);
});

afterAll(async () => {
  transport?.close();
  await svc?.stop();
});

interface Driven {
  readonly envoy: EnvoyQuotaClient;
  readonly rate: number;
  readonly stopMs: number;
  sent: number;
  readonly admitted: number[];
}

test('three Envoys over gRPC: about the limit in total, shares by demand, the one that leaves has its share taken up', async () => {
  const t0 = systemClock.nowMs() + 50;
  const driven: Driven[] = [
    { rate: 30, stopMs: t0 + RUN_MS },
    { rate: 15, stopMs: t0 + RUN_MS },
    { rate: 15, stopMs: t0 + LEAVE_MS },
  ].map((d) => ({ ...d, envoy: new EnvoyQuotaClient({ transport, clock: systemClock, domain: 'quota' }), sent: 0, admitted: [] }));
  // Requests from one 5 ms timer: the k-th of an Envoy is due at t0 + k / rate (a late timer catches up).
  await new Promise<void>((resolve) => {
    const timer = setInterval(() => {
      const now = systemClock.nowMs();
      for (const d of driven) {
        if (now < t0 || d.sent < 0) continue;
        const due = Math.floor(((Math.min(now, d.stopMs) - t0) * d.rate) / 1000) + 1;
        while (d.sent < due) {
          d.sent++;
          if (d.envoy.request(BUCKET)) d.admitted.push(now);
        }
        if (now >= d.stopMs) {
          d.sent = -1;
          if (d.stopMs < t0 + RUN_MS) d.envoy.close();
        }
      }
      if (driven.every((d) => d.sent < 0)) {
        clearInterval(timer);
        resolve();
      }
    }, 5);
  });
  for (const d of driven) d.envoy.close();
  const perSecond = (ts: number[], from: number, to: number) => ts.filter((t) => t >= t0 + from && t < t0 + to).length / ((to - from) / 1000);
  const all = driven.flatMap((d) => d.admitted);
  // From the second report on (5 s), until the third leaves: shares by demand, about the limit.
  const before = perSecond(all, 5_000, LEAVE_MS);
  const rates = driven.map((d) => perSecond(d.admitted, 5_000, LEAVE_MS));
  // After it left and its reserve ran out (0.8 of an interval) and a second of slack: the two take all.
  const after = perSecond(all, LEAVE_MS + 5_000, RUN_MS);
  const near = (x: number) => x > 0.85 * LIMIT && x < 1.1 * LIMIT;
  expect({ before, after, near: near(before) && near(after) }).toEqual({ before, after, near: true });
  expect(rates[0]).toBeGreaterThan(rates[1]!);
  for (const d of driven) expect({ errors: d.envoy.errors, expiries: d.envoy.expiries }).toEqual({ errors: [], expiries: [] });
  expect(driven.slice(0, 2).map((d) => d.envoy.streamEnds)).toEqual([[], []]);
});
