/**
 * RLQS accuracy on the running service, with Envoys played by EnvoyQuotaClient (a faithful
 * stand-in for Envoy's rate_limit_quota filter: it enforces the token buckets it is assigned and
 * reports its usage every reporting interval). Requests arrive from timers at fixed rates; what
 * each client admitted is timestamped on its own clock, and counted per sliding 1-second window
 * (the service never sees single requests). The scenarios run at the same time, each on its own
 * bucket of one rule (60 per second), for 30 seconds:
 *
 * - one client asking 3x the limit;
 * - three clients asking 10, 40 and 120 per second;
 * - ten clients asking 15 per second each (2.5x their fair share);
 * - three clients asking 40 per second each, one of which stops half-way (its share goes to the
 *   others).
 *
 * docs/rlqs.md promises: the Envoys together admit at most the limit per unit plus one reporting
 * interval's worth (the token buckets' burst), the limit is divided in proportion to demand with a
 * floor of a tenth of an equal split, and a stream that ends releases its share.
 *
 * The last two tests state what the service gets wrong today (Envoys joining together get more
 * than the limit; the empty report Envoy sends once its buckets are all abandoned ends its
 * stream): they fail until the service is fixed. RLQS_ACCURACY_LOG=1 prints the numbers measured.
 */
import fs from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { EnvoyQuotaClient } from '../support/envoy-quota-client';
import { waitFor } from '../support/wait';
import { baseEnv, runtimeDir, startService, type Service } from './harness';

const LIMIT = 60; // per second
const INTERVAL_MS = 1000; // the clients' reporting interval
const RUN_MS = 30_000;
/** Admitted at most in any 1-second window: the limit, plus one reporting interval's worth of burst. */
const WINDOW_BOUND = LIMIT + (LIMIT * INTERVAL_MS) / 1000;
/** Windows from here on are past the joins: every client has had two reports answered. */
const SETTLED_MS = 3 * INTERVAL_MS;

const CONFIG = `domain: quota
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: ${LIMIT}}
`;
/** At first, also a rule the last test removes (its bucket is then abandoned). */
const CONFIG_WITH_LEGACY = `${CONFIG}  - key: api
    value: legacy
    rate_limit: {unit: second, requests_per_unit: 5}
`;

/** One client sending to one bucket at a fixed rate between two times (client clock, ms). */
interface Source {
  readonly name: string;
  readonly client: EnvoyQuotaClient;
  readonly bucket: Record<string, string>;
  readonly rate: number;
  readonly startMs: number;
  readonly stopMs: number;
  /** Called once the source has sent its last request (the client may be closed there). */
  readonly onStop?: () => void;
  sent: number;
  /** When each admitted request was decided. */
  readonly admitted: number[];
  /** Admitted while the bucket had no assignment yet (the service cannot bound those). */
  admittedWithoutAssignment: number;
  done: boolean;
}

/** Drives every source from one 2 ms timer: the k-th request of a source is due at start + k / rate. */
function drive(sources: Source[]): { finished: Promise<void>; stop: () => void } {
  let timer: NodeJS.Timeout | undefined;
  let resolve!: () => void;
  const finished = new Promise<void>((r) => (resolve = r));
  const stop = (): void => {
    clearInterval(timer);
    timer = undefined;
    resolve();
  };
  timer = setInterval(() => {
    const now = performance.now();
    for (const s of sources) {
      if (s.done || now < s.startMs) continue;
      const due = Math.floor(((Math.min(now, s.stopMs) - s.startMs) * s.rate) / 1000) + 1;
      while (s.sent < due) {
        s.sent++;
        const assigned = s.client.bucket(s.bucket)?.assignment.source;
        if (s.client.request(s.bucket)) {
          s.admitted.push(now);
          if (assigned === undefined || assigned === 'no-assignment') s.admittedWithoutAssignment++;
        }
      }
      if (now >= s.stopMs) {
        s.done = true;
        s.onStop?.();
      }
    }
    if (sources.every((s) => s.done)) stop();
  }, 2);
  return { finished, stop };
}

/** The most timestamps in any window [t, t + 1 s) with t ≥ fromMs. */
function maxPerWindow(timestamps: readonly number[], fromMs = -Infinity): number {
  const ts = timestamps.filter((t) => t >= fromMs).sort((a, b) => a - b);
  let best = 0;
  for (let i = 0, j = 0; i < ts.length; i++) {
    // ts[j..i]: the timestamps of the 1 s window that ends at ts[i].
    while (ts[i]! - ts[j]! >= 1000) j++;
    best = Math.max(best, i - j + 1);
  }
  return best;
}

/** Admitted per second between two times. */
const ratePerSecond = (timestamps: readonly number[], fromMs: number, toMs: number): number =>
  timestamps.filter((t) => t >= fromMs && t < toMs).length / ((toMs - fromMs) / 1000);

/** docs/rlqs.md's division, written out independently of src/quota/shares.ts: a floor, the rest by demand. */
function expectedShares(limit: number, demands: readonly number[]): number[] {
  const floor = (limit * 0.1) / demands.length;
  const total = demands.reduce((a, b) => a + b, 0);
  return demands.map((d) => floor + (limit - floor * demands.length) * (d / total));
}

const round = (x: number, digits = 1): number => Math.round(x * 10 ** digits) / 10 ** digits;

/** The numbers measured, printed at the end when RLQS_ACCURACY_LOG is set. */
const measured: Record<string, unknown> = {};

let svc: Service;
let configDir: string;
const clients: EnvoyQuotaClient[] = [];
let traffic: { finished: Promise<void>; stop: () => void } | undefined;
let t0 = 0;
const scenarios: Record<'one' | 'three' | 'ten' | 'release', Source[]> = { one: [], three: [], ten: [], release: [] };
/** The release scenario's measurements, once the stopped client's share went to the others. */
let released: Promise<{ beforeRates: number[]; releaseMs: number; afterRates: number[] }>;

function newClient(reportingIntervalMs = INTERVAL_MS): EnvoyQuotaClient {
  const client = new EnvoyQuotaClient({ address: svc.grpc, domain: 'quota', reportingIntervalMs });
  clients.push(client);
  return client;
}

function source(group: keyof typeof scenarios, name: string, rate: number, stopMs = t0 + RUN_MS, onStop?: (c: EnvoyQuotaClient) => void): Source {
  const client = newClient();
  const s: Source = {
    name,
    client,
    bucket: { tenant: group },
    rate,
    startMs: t0,
    stopMs,
    onStop: onStop && (() => onStop(client)),
    sent: 0,
    admitted: [],
    admittedWithoutAssignment: 0,
    done: false,
  };
  scenarios[group].push(s);
  return s;
}

beforeAll(async () => {
  const dirs = runtimeDir({ 'quota.yaml': CONFIG_WITH_LEGACY });
  configDir = dirs.configDir;
  svc = await startService({ ...baseEnv(dirs.root), RUNTIME_WATCH_ROOT: 'false' });
  t0 = performance.now() + 100;

  source('one', 'one', 3 * LIMIT);
  for (const rate of [10, 40, 120]) source('three', `three@${rate}`, rate);
  for (let i = 0; i < 10; i++) source('ten', `ten#${i}`, 15);
  // The third client stops half-way, half an interval off the reporting ticks (they start at t0).
  let stoppedAt: number | undefined;
  let beforeRates: number[] = [];
  const [stays1, stays2] = [source('release', 'release#1', 40), source('release', 'release#2', 40)];
  const rateOf = (s: Source): number => s.client.tokensPerSecond(s.bucket) ?? 0;
  source('release', 'release#3 (stops)', 40, t0 + RUN_MS / 2 + INTERVAL_MS / 2, (c) => {
    // Read before the close: the service may push the others their larger shares at once.
    beforeRates = [rateOf(stays1), rateOf(stays2)];
    c.close();
    stoppedAt = performance.now();
  });
  released = (async () => {
    await waitFor(() => stoppedAt !== undefined, 'the release scenario to stop its third client', RUN_MS + 5000);
    const closedAt = stoppedAt!;
    await waitFor(
      () => rateOf(stays1) > beforeRates[0]! && rateOf(stays2) > beforeRates[1]!,
      "the remaining clients' token buckets to grow after the third one stopped",
      4 * INTERVAL_MS,
    );
    return { beforeRates, releaseMs: performance.now() - closedAt, afterRates: [rateOf(stays1), rateOf(stays2)] };
  })();
  released.catch(() => undefined); // awaited by its test
  traffic = drive(Object.values(scenarios).flat());
});

afterAll(async () => {
  if (process.env['RLQS_ACCURACY_LOG']) process.stdout.write(`RLQS accuracy: ${JSON.stringify(measured)}\n`);
  traffic?.stop();
  for (const c of clients) c.close();
  await svc?.stop();
});

const RUN_TIMEOUT = RUN_MS + 30_000;
const all = (group: keyof typeof scenarios): number[] => scenarios[group].flatMap((s) => s.admitted);
const withoutAssignment = (group: keyof typeof scenarios): number => scenarios[group].reduce((n, s) => n + s.admittedWithoutAssignment, 0);

/** What the clients saw of the service: no stream ended, nothing Envoy would log as an error, a token bucket. */
function expectCleanStreams(group: keyof typeof scenarios): void {
  for (const s of scenarios[group]) {
    if (s.onStop !== undefined) continue;
    const strategy = s.client.bucket(s.bucket)?.assignment.strategy.kind;
    expect({ name: s.name, ends: s.client.streamEnds, errors: s.client.errors, strategy }).toEqual({ name: s.name, ends: [], errors: [], strategy: 'token-bucket' });
  }
}

test(
  'one client asking 3x the limit: each 1 s window within the limit plus one interval, about the limit on average',
  async () => {
    await traffic!.finished;
    const [s] = scenarios.one;
    const got = {
      perWindow: maxPerWindow(s!.admitted),
      bound: WINDOW_BOUND + s!.admittedWithoutAssignment,
      average: round(ratePerSecond(s!.admitted, t0 + 2000, t0 + RUN_MS)),
    };
    measured['one'] = got;
    expect(got.perWindow).toBeLessThanOrEqual(got.bound);
    expect(got.average).toBeGreaterThanOrEqual(0.9 * LIMIT);
    expect(got.average).toBeLessThanOrEqual(1.1 * LIMIT);
    expectCleanStreams('one');
  },
  RUN_TIMEOUT,
);

test(
  'three clients asking 10, 40 and 120 a second: shares follow demand, the quiet one is not starved, the total stays bounded',
  async () => {
    await traffic!.finished;
    const from = t0 + SETTLED_MS;
    const end = t0 + RUN_MS;
    const sources = scenarios.three;
    const shares = expectedShares(
      LIMIT,
      sources.map((s) => s.rate),
    );
    const rates = sources.map((s) => round(ratePerSecond(s.admitted, from, end)));
    const total = round(ratePerSecond(all('three'), from, end));
    const perWindow = maxPerWindow(all('three'), from);
    measured['three'] = { perWindow, total, rates, shares: shares.map((r) => round(r)) };
    expect(perWindow).toBeLessThanOrEqual(WINDOW_BOUND);
    expect(Math.abs(total - LIMIT)).toBeLessThanOrEqual(0.1 * LIMIT);
    // The busiest gets the most, the quietest the least.
    expect(rates[2]).toBeGreaterThan(rates[1]!);
    expect(rates[1]).toBeGreaterThan(rates[0]!);
    // Each about its share: not starved (at least what it asks when that is under its share),
    // and not more (the others' shares are theirs).
    const off = sources
      .map((s, i) => ({ name: s.name, rate: rates[i]!, share: round(shares[i]!) }))
      .filter((c, i) => c.rate < 0.9 * Math.min(sources[i]!.rate, shares[i]!) || c.rate > 1.1 * shares[i]!);
    expect(off).toEqual([]);
    expectCleanStreams('three');
  },
  RUN_TIMEOUT,
);

test(
  'ten clients each asking 2.5x its fair share: the total stays bounded and near the limit, none starved',
  async () => {
    await traffic!.finished;
    const from = t0 + SETTLED_MS;
    const end = t0 + RUN_MS;
    const perWindow = maxPerWindow(all('ten'), from);
    const total = round(ratePerSecond(all('ten'), from, end));
    const rates = scenarios.ten.map((s) => ({ name: s.name, rate: round(ratePerSecond(s.admitted, from, end)) }));
    measured['ten'] = { perWindow, total, rates: rates.map((r) => r.rate) };
    expect(perWindow).toBeLessThanOrEqual(WINDOW_BOUND);
    expect(Math.abs(total - LIMIT)).toBeLessThanOrEqual(0.1 * LIMIT);
    expect(rates.filter((r) => r.rate < 0.9 * (LIMIT / 10))).toEqual([]);
    expectCleanStreams('ten');
  },
  RUN_TIMEOUT,
);

test(
  "a client that stops releases its share: within two reporting intervals the others' token buckets grow",
  async () => {
    const r = await released;
    measured['release'] = { ...r, releaseMs: Math.round(r.releaseMs) };
    expect(r.releaseMs).toBeLessThanOrEqual(2 * INTERVAL_MS);
    // Before: a third of the limit each (equal demands); after: more than that.
    for (const rate of r.beforeRates) expect(rate).toBeLessThanOrEqual(LIMIT / 3);
    for (const rate of r.afterRates) expect(rate).toBeGreaterThan(LIMIT / 3);
    await traffic!.finished;
    // The two that stay then admit about half the limit each, and together stay bounded.
    const from = scenarios.release[2]!.stopMs + 2 * INTERVAL_MS;
    const end = t0 + RUN_MS;
    const rates = scenarios.release.slice(0, 2).map((s) => round(ratePerSecond(s.admitted, from, end)));
    const perWindow = maxPerWindow(all('release'), t0 + SETTLED_MS);
    measured['release-after'] = { rates, perWindow };
    for (const rate of rates) expect(Math.abs(rate - LIMIT / 2)).toBeLessThanOrEqual(0.1 * (LIMIT / 2));
    expect(perWindow).toBeLessThanOrEqual(WINDOW_BOUND);
    expectCleanStreams('release');
  },
  RUN_TIMEOUT,
);

/*
 * Envoys that join a bucket together: each join re-divides the shares of those already there at
 * once, and a stream with no measured rate yet counts as the mean demand (before, the k-th got
 * L/k while the earlier ones kept theirs, about 2.9 L together for ten).
 */
test(
  'while the clients join, the total still stays within the limit plus one interval in every 1 s window',
  async () => {
    await traffic!.finished;
    const got = (['three', 'ten', 'release'] as const).map((g) => ({
      scenario: g,
      perWindow: maxPerWindow(all(g), t0),
      bound: WINDOW_BOUND + withoutAssignment(g),
      firstTokensPerSecond: scenarios[g].map((s) => s.client.actions[0]?.action.quotaAssignmentAction?.rateLimitStrategy?.tokenBucket?.tokensPerFill),
    }));
    measured['joins'] = got;
    expect(got.filter((g) => g.perWindow > g.bound)).toEqual([]);
  },
  RUN_TIMEOUT,
);

/*
 * Envoy's reporting timer keeps running once all its buckets are abandoned, and sends a report
 * with its domain and no usage every interval: that must not end the stream (before, it did, so
 * the stream was torn down and reopened every interval and a new bucket's first report was lost).
 */
test('an Envoy whose buckets were all abandoned keeps its stream: its empty reports do not end it', async () => {
  await traffic!.finished;
  const client = newClient(500);
  client.request({ api: 'legacy' });
  await waitFor(() => client.bucket({ api: 'legacy' })?.assignment.source === 'assignment', 'the legacy bucket to be assigned');
  fs.writeFileSync(path.join(configDir, 'quota.yaml'), CONFIG); // without the legacy rule
  await waitFor(() => client.bucket({ api: 'legacy' }) === undefined, 'the legacy bucket to be abandoned');
  const sentBefore = client.reports.length;
  await waitFor(() => client.reports.slice(sentBefore).some((r) => r.message.bucketQuotaUsages.length === 0), 'a report with no bucket');
  // The report after it: on the same stream, and answered.
  client.request({ tenant: 'after-abandon' });
  await waitFor(() => client.bucket({ tenant: 'after-abandon' })?.assignment.source === 'assignment' || client.streamEnds.length > 0, 'an answer or the end of the stream');
  expect({ ends: client.streamEnds, streams: client.streamsOpened }).toEqual({ ends: [], streams: 1 });
});
