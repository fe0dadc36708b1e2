'use strict';
/**
 * RLQS at fleet scale on one replica: STREAMS Envoys, each with its one StreamRateLimitQuotas
 * stream, each reporting the same BUCKETS buckets (so every bucket is divided among all of them)
 * the way Envoy's filter does: a report of one bucket with time_elapsed 0 when the bucket is new,
 * then a report of every bucket every 5 s, the fleet's timers spread over the 5 s. The demand per
 * bucket varies by ±20 % from report to report, so shares move and are pushed. The service
 * (memory store) runs on CPU 0, the Envoys on this process (run it on CPU 1: `taskset -c 1`).
 *
 * After the fleet has started and a warm-up, over SECONDS: service CPU per report and per bucket
 * reported, resident memory per stream, and the time from a report to its assignment, p50 / p99 /
 * max: PROBES more Envoys each report a new bucket every second (an assignment is then due at
 * once), timed to the answer that carries it, in the same event loop as the fleet's reports.
 *
 *   flock /work/bench.lock taskset -c 1 node bench/rlqs.js [streams] [buckets] [seconds]   (defaults 1000 100 30)
 *
 * Needs a build (`make build`). Prints one JSON line and a table; bench/README.md ("RLQS") records a run.
 */
const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const { ROOT, startService, cpuTicks, rssMiB, sleep, removeTmp } = require('./processes');

const { RateLimitQuotaServiceClient } = require(path.join(ROOT, 'dist/generated/envoy/service/rate_limit_quota/v3/rlqs.js'));
const { mulberry32 } = require(path.join(ROOT, 'dist/src/platform/random.js'));

// The same demands in every run (a seeded generator): runs differ by the service, not the load.
const random = mulberry32(1);

const STREAMS = Number(process.argv[2] ?? 1000);
const BUCKETS = Number(process.argv[3] ?? 100);
const SECONDS = Number(process.argv[4] ?? 30);
const REPORT_MS = 5000; // Envoy's filter_persistence.cc
const STREAMS_PER_CONNECTION = 50; // each Envoy would have its own; 50 per HTTP/2 connection keeps the client light
// The fleet settles in some 40 s (bursts grow twofold per report, demands are smoothed): measured after.
const WARMUP_MS = 45_000;
const PROBES = 10;

// Per bucket the fleet asks some 5,500 a second (1 to 10 per Envoy): the limit binds, the division matters.
const CONFIG = `domain: bench
descriptors:
  - key: api
    rate_limit: {unit: second, requests_per_unit: 3000}
`;

/** Bucket j's demand per stream: 1 to 10 requests a second. */
const demandOf = (j) => 1 + (j % 10);

function percentile(sorted, p) {
  if (sorted.length === 0) return null;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

function fleet(addr) {
  const clients = [];
  const envoys = [];
  let reports = 0;
  let buckets = 0;
  let actions = 0;
  let measuring = false;
  const latencies = [];
  const firstAssignments = [];
  for (let i = 0; i < STREAMS; i++) {
    if (i % STREAMS_PER_CONNECTION === 0) {
      // A channel of its own (its own connection) for each group of streams.
      clients.push(new RateLimitQuotaServiceClient(addr, grpc.credentials.createInsecure(), { 'grpc.use_local_subchannel_pool': 1, 'grpc.max_receive_message_length': 64 << 20 }));
    }
    const client = clients[clients.length - 1];
    const envoy = { call: undefined, timers: [], firstAt: undefined, assigned: 0, ended: false };
    envoys.push(envoy);
    const start = setTimeout(() => {
      const call = client.streamRateLimitQuotas();
      envoy.call = call;
      call.on('data', (r) => {
        const now = performance.now();
        const n = r.bucketAction.length;
        if (measuring) actions += n;
        if (envoy.assigned < BUCKETS) {
          envoy.assigned += n;
          if (envoy.assigned >= BUCKETS && envoy.firstAt !== undefined) firstAssignments.push(now - envoy.firstAt);
        }
      });
      call.on('error', () => undefined);
      call.on('status', () => (envoy.ended = true));
      // Each bucket's first request: a report of that bucket alone, time_elapsed 0.
      envoy.firstAt = performance.now();
      for (let j = 0; j < BUCKETS; j++) {
        call.write({ domain: 'bench', bucketQuotaUsages: [{ bucketId: { bucket: { api: `b${j}` } }, timeElapsed: { seconds: 0n, nanos: 0 }, numRequestsAllowed: 1n, numRequestsDenied: 0n }] });
      }
      const tick = () => {
        const usages = [];
        for (let j = 0; j < BUCKETS; j++) {
          const n = Math.round(demandOf(j) * (REPORT_MS / 1000) * (0.8 + 0.4 * random()));
          usages.push({ bucketId: { bucket: { api: `b${j}` } }, timeElapsed: { seconds: 5n, nanos: 0 }, numRequestsAllowed: BigInt(n), numRequestsDenied: 0n });
        }
        call.write({ domain: 'bench', bucketQuotaUsages: usages });
        if (measuring) {
          reports++;
          buckets += BUCKETS;
        }
      };
      envoy.timers.push(setInterval(tick, REPORT_MS));
    }, (i * REPORT_MS) / STREAMS);
    envoy.timers.push(start);
  }
  // Probes: a new bucket a second each; the time to the answer that names it.
  for (let i = 0; i < PROBES; i++) {
    const client = clients[i % clients.length];
    const envoy = { call: client.streamRateLimitQuotas(), timers: [], ended: false };
    envoys.push(envoy);
    const sent = new Map();
    let n = 0;
    envoy.call.on('data', (r) => {
      const now = performance.now();
      for (const a of r.bucketAction) {
        const key = a.bucketId?.bucket?.probe;
        const at = sent.get(key);
        if (at === undefined) continue;
        sent.delete(key);
        if (measuring) latencies.push(now - at);
      }
    });
    envoy.call.on('error', () => undefined);
    envoy.call.on('status', () => (envoy.ended = true));
    envoy.timers.push(
      setInterval(() => {
        const key = `p${i}-${++n}`;
        sent.set(key, performance.now());
        envoy.call.write({ domain: 'bench', bucketQuotaUsages: [{ bucketId: { bucket: { probe: key } }, timeElapsed: { seconds: 0n, nanos: 0 }, numRequestsAllowed: 1n, numRequestsDenied: 0n }] });
      }, 1000),
    );
  }
  return {
    startMeasuring() {
      measuring = true;
    },
    stopMeasuring() {
      measuring = false;
      return { reports, buckets, actions, latencies: latencies.sort((a, b) => a - b), firstAssignments: firstAssignments.sort((a, b) => a - b), ended: envoys.filter((e) => e.ended).length };
    },
    stop() {
      for (const e of envoys) {
        for (const t of e.timers) clearTimeout(t);
        e.call?.cancel();
      }
      for (const c of clients) c.close();
    },
  };
}

async function main() {
  const svc = await startService('rlqs', CONFIG);
  const pid = svc.proc.pid;
  try {
    await sleep(1000);
    const rssIdle = rssMiB(pid);
    const f = fleet(svc.grpcAddr);
    await sleep(REPORT_MS + WARMUP_MS);
    f.startMeasuring();
    const t0 = performance.now();
    const g0 = Date.now();
    const c0 = cpuTicks(pid);
    await sleep(SECONDS * 1000);
    const c1 = cpuTicks(pid);
    const worstGcPauseMs = svc.worstGcPause(g0, Date.now());
    const wall = (performance.now() - t0) / 1000;
    const m = f.stopMeasuring();
    const rssLoaded = rssMiB(pid);
    // What the RLQS budgets refused (issue 40): nothing, at the fleet's size.
    const stats = await fetch(`http://${svc.debugAddr}/stats`).then((res) => res.text());
    const stat = (name) => Number(new RegExp(`^${name.replace(/\./g, '\\.')}: (\\d+)$`, 'm').exec(stats)?.[1] ?? 0);
    f.stop();
    const cpuS = (c1 - c0) / 100;
    const r = (x) => (x === null ? null : Math.round(x * 10) / 10);
    const result = {
      streams: STREAMS,
      bucketsPerStream: BUCKETS,
      seconds: SECONDS,
      reportsPerSecond: r(m.reports / wall),
      bucketsReportedPerSecond: Math.round(m.buckets / wall),
      assignmentsPerSecond: Math.round(m.actions / wall),
      serviceCpuPct: r((cpuS / wall) * 100),
      cpuMicrosPerReport: r((cpuS * 1e6) / m.reports),
      cpuMicrosPerBucket: Math.round(((cpuS * 1e6) / m.buckets) * 100) / 100,
      rssIdleMiB: r(rssIdle),
      rssLoadedMiB: r(rssLoaded),
      rssKiBPerStream: r(((rssLoaded - rssIdle) * 1024) / STREAMS),
      reportToAnswerMs: { samples: m.latencies.length, p50: r(percentile(m.latencies, 50)), p99: r(percentile(m.latencies, 99)), max: r(m.latencies[m.latencies.length - 1] ?? null) },
      firstReportsToAllAssignedMs: { p50: r(percentile(m.firstAssignments, 50)), p99: r(percentile(m.firstAssignments, 99)) },
      streamsEnded: m.ended,
      worstGcPauseMs: r(worstGcPauseMs),
      bucketsTracked: stat('ratelimit.rlqs.buckets'),
      bucketBytes: stat('ratelimit.rlqs.bucket_bytes'),
      refusedBuckets: stat('ratelimit.rlqs.refused_buckets'),
    };
    process.stdout.write(`${JSON.stringify(result)}\n`);
    process.stdout.write(
      `| ${STREAMS} streams × ${BUCKETS} buckets, a report per stream every 5 s | |\n|---|---:|\n` +
        `| reports / buckets reported per second | ${result.reportsPerSecond} / ${result.bucketsReportedPerSecond} |\n` +
        `| service CPU | ${result.serviceCpuPct} % of a core |\n` +
        `| CPU per report / per bucket | ${result.cpuMicrosPerReport} µs / ${result.cpuMicrosPerBucket} µs |\n` +
        `| resident memory: idle → loaded (per stream) | ${result.rssIdleMiB} → ${result.rssLoadedMiB} MiB (${result.rssKiBPerStream} KiB) |\n` +
        `| report → answer p50 / p99 / max | ${result.reportToAnswerMs.p50} / ${result.reportToAnswerMs.p99} / ${result.reportToAnswerMs.max} ms |\n` +
        `| assignments sent per second | ${result.assignmentsPerSecond} |\n` +
        `| longest garbage-collection pause | ${result.worstGcPauseMs} ms |\n` +
        `| buckets tracked (bytes counted) / refused by the budgets | ${result.bucketsTracked} (${(result.bucketBytes / 2 ** 20).toFixed(1)} MiB) / ${result.refusedBuckets} |\n`,
    );
  } finally {
    svc.proc.kill('SIGTERM');
    removeTmp();
  }
}

main().catch((err) => {
  process.stderr.write(`${err.stack ?? err}\n`);
  process.exit(1);
});
