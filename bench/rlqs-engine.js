'use strict';
/**
 * The RLQS engine's steady-state cost without a transport: STREAMS streams reporting the same
 * BUCKETS known buckets (report bytes decoded by the codec, answers encoded) on a manual clock,
 * every stream once per round, pushes and exchanges run between rounds; prints the CPU time per
 * bucket reported. Takes the root of a built checkout, so two builds compare on the same load
 * (bench/README.md, "RLQS at fleet scale"):
 *
 *   flock /work/bench.lock taskset -c 1 node bench/rlqs-engine.js [root]   (default: this checkout)
 */
const path = require('node:path');

const root = process.argv[2] ?? path.join(__dirname, '..');
const d = (p) => require(path.join(root, 'dist', p));
const { QuotaService } = d('src/quota/quota-service.js');
const { MemoryDemandStore } = d('src/quota/demand.js');
const { ManualClock } = d('src/platform/clock.js');
const { loadConfig } = d('src/config/index.js');
const { StatsStore } = d('src/stats/store.js');
const { decodeUsageReports, encodeQuotaResponseFrame } = d('src/server/quota-codec.js');
const { RateLimitQuotaUsageReports } = d('generated/envoy/service/rate_limit_quota/v3/rlqs.js');
const { mulberry32 } = d('src/platform/random.js');

const STREAMS = 1000;
const BUCKETS = 100;
const ROUNDS = 20;
// A build before the RLQS budgets takes maxBucketsPerStream, one after takes budgets: both are given.
let budgets;
try {
  budgets = d('src/quota/admission.js').quotaBudgets({});
} catch {
  budgets = undefined;
}
const config = loadConfig([{ name: 'bench.yaml', content: 'domain: bench\ndescriptors:\n  - key: api\n    rate_limit: {unit: second, requests_per_unit: 3000}\n' }], { mergeDomainConfig: false, stats: new StatsStore() });
const clock = new ManualClock(1e6);
const service = new QuotaService({ config: () => config, demand: new MemoryDemandStore(), clock, unmatched: { strategy: 'allow-all', ttlSeconds: 10 }, maxBucketsPerStream: 1e9, budgets, stats: new StatsStore() });
const random = mulberry32(1);

/** A report of every bucket, each with 1 to 10 requests a second (±20 %) over `elapsed` seconds. */
const reportBytes = (elapsed) =>
  Buffer.from(
    RateLimitQuotaUsageReports.encode({
      domain: 'bench',
      bucketQuotaUsages: Array.from({ length: BUCKETS }, (_, j) => ({
        bucketId: { bucket: { api: `bucket-${j}` } },
        timeElapsed: { seconds: BigInt(elapsed), nanos: 0 },
        numRequestsAllowed: BigInt(Math.round(elapsed * (1 + (j % 10)) * (0.8 + 0.4 * random()))),
        numRequestsDenied: 0n,
      })),
    }).finish(),
  );

const streams = [];
for (let s = 0; s < STREAMS; s++) {
  const stream = service.open((actions) => encodeQuotaResponseFrame(actions));
  stream.report(decodeUsageReports(reportBytes(0)));
  streams.push(stream);
}
const periodic = Array.from({ length: 8 }, () => reportBytes(5));
let rounds = 0;
/** Every stream reports once, 5 ms of the clock apart (5 s a round), then the pushes and exchange settle. */
async function round() {
  for (let s = 0; s < STREAMS; s++) {
    clock.advance(5);
    streams[s].report(decodeUsageReports(periodic[(s + rounds) % periodic.length]));
  }
  rounds++;
  await service.settled();
}

(async () => {
  for (let i = 0; i < 12; i++) await round(); // the fleet settles
  const t0 = process.cpuUsage();
  for (let i = 0; i < ROUNDS; i++) await round();
  const used = process.cpuUsage(t0);
  console.log(`${root}: ${((used.user + used.system) / (ROUNDS * STREAMS * BUCKETS)).toFixed(3)} µs of CPU per bucket reported (engine and codec)`);
  service.close();
})();
