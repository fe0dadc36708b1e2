'use strict';
/**
 * What one tracked RLQS bucket costs in memory: the quota engine (dist/src/quota) fed real report
 * bytes through the codec (dist/src/server/quota-codec.js), as the transports feed it, on a manual
 * clock (no timers run), with the in-process demand store and one exchange done. The heap is
 * measured after a full garbage collection before and after, with the transports left out (their
 * per-stream cost is bounded by the stream caps, not by buckets). Shapes:
 *
 * - fleet: STREAMS streams reporting the same BUCKETS buckets (bench/rlqs.js: 1,000 Envoys x 100),
 *   so a bucket's name, placement and group are shared by all its streams;
 * - distinct: every bucket of every stream its own (the bucket flood of bench/attacks.js);
 * - fat: distinct buckets whose id holds one value of VALUE_BYTES bytes.
 *
 *   flock /work/bench.lock node --expose-gc bench/rlqs-memory.js [streams] [buckets] [valueBytes]   (defaults 1000 100 1000)
 *
 * Needs a build (`make build`). Prints a line per shape: heap bytes per tracked bucket, and per
 * byte of the ids (RLQS_MAX_BUCKET_BYTES counts the bytes of each id as sent, once per stream).
 */
const path = require('node:path');
const { ROOT } = require('./processes');

if (typeof global.gc !== 'function') {
  console.error('run with node --expose-gc');
  process.exit(2);
}
const dist = (p) => require(path.join(ROOT, 'dist', p));
const { QuotaService } = dist('src/quota/quota-service.js');
const { quotaBudgets } = dist('src/quota/admission.js');
const { MemoryDemandStore } = dist('src/quota/demand.js');
const { ManualClock } = dist('src/platform/clock.js');
const { loadConfig } = dist('src/config/index.js');
const { StatsStore } = dist('src/stats/store.js');
const { decodeUsageReports } = dist('src/server/quota-codec.js');
const { RateLimitQuotaUsageReports } = dist('generated/envoy/service/rate_limit_quota/v3/rlqs.js');

const STREAMS = Number(process.argv[2] ?? 1000);
const BUCKETS = Number(process.argv[3] ?? 100);
const VALUE_BYTES = Number(process.argv[4] ?? 1000);

const CONFIG = `domain: bench
descriptors:
  - key: api
    rate_limit: {unit: second, requests_per_unit: 3000}
`;

const config = () => loadConfig([{ name: 'bench.yaml', content: CONFIG }], { mergeDomainConfig: false, stats: new StatsStore() });

const heap = () => {
  for (let i = 0; i < 3; i++) global.gc();
  return process.memoryUsage().heapUsed;
};

/** Report bytes of stream `s`: BUCKETS buckets, their ids from `idOf(s, j)`. */
function reportBytes(s, idOf) {
  const usages = [];
  for (let j = 0; j < BUCKETS; j++) usages.push({ bucketId: { bucket: idOf(s, j) }, timeElapsed: { seconds: 0n, nanos: 0 }, numRequestsAllowed: 1n, numRequestsDenied: 0n });
  return Buffer.from(RateLimitQuotaUsageReports.encode({ domain: 'bench', bucketQuotaUsages: usages }).finish());
}

function shape(name, idOf) {
  const cfg = config();
  const clock = new ManualClock(1_000_000);
  const service = new QuotaService({ config: () => cfg, demand: new MemoryDemandStore(), clock, unmatched: { strategy: 'allow-all', ttlSeconds: 10 }, budgets: quotaBudgets({}) });
  const streams = [];
  let idBytes = 0;
  let sent = 0;
  const reports = Array.from({ length: STREAMS }, (_, s) => reportBytes(s, idOf));
  const before = heap();
  let busyMs = 0;
  for (let s = 0; s < STREAMS; s++) {
    const stream = service.open((actions) => (sent += actions.length));
    const t0 = performance.now();
    const r = decodeUsageReports(reports[s]);
    stream.report(r);
    busyMs += performance.now() - t0;
    for (const u of r.usages) idBytes += u.wire.length;
    streams.push(stream);
  }
  clock.advance(1000); // the push and one exchange
  const after = heap();
  const tracked = STREAMS * BUCKETS;
  const perBucket = (after - before) / tracked;
  console.log(
    `${name}: ${STREAMS} streams x ${BUCKETS} buckets = ${tracked.toLocaleString('en-US')} tracked, ids ${(idBytes / tracked).toFixed(0)} bytes each: ` +
      `heap +${((after - before) / 2 ** 20).toFixed(1)} MiB, ${perBucket.toFixed(0)} bytes per tracked bucket (${sent.toLocaleString('en-US')} actions sent); ` +
      `first reports ${((busyMs * 1000) / tracked).toFixed(1)} µs per new bucket (decode and report)`,
  );
  for (const st of streams) st.close();
  service.close();
  return { name, tracked, idBytesPerBucket: idBytes / tracked, heapBytesPerBucket: perBucket, usPerNewBucket: (busyMs * 1000) / tracked };
}

const out = [];
out.push(shape('fleet', (_s, j) => ({ api: `bucket-${j}` })));
out.push(shape('distinct', (s, j) => ({ api: `s${s}-b${j}` })));
out.push(shape('fat', (s, j) => ({ api: `s${s}-b${j}-${'x'.repeat(VALUE_BYTES)}` })));
const fat = out[2];
const distinct = out[1];
console.log(`per id byte (fat - distinct): ${((fat.heapBytesPerBucket - distinct.heapBytesPerBucket) / (fat.idBytesPerBucket - distinct.idBytesPerBucket)).toFixed(2)} heap bytes`);
console.log(JSON.stringify(out));
