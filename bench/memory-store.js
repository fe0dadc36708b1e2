'use strict';
/**
 * The memory store's footprint at a million live counters, without the server around it (the
 * `distinct` scenario of bench/run.js measures the same through gRPC, in minutes rather than
 * seconds). Streams `count` distinct keys, built like the service's cache keys, through
 * MemoryStore.incrementSync with MEMORY_MAX_KEYS = `maxKeys` (day windows: past the cap the new keys
 * are counted in the overflow sketches), one request of `batch` keys at a time, and samples this process's RSS. Prints one
 * JSON line: ops/s, RSS at the cap, peak and end, and peak / steady.
 *
 *   node bench/memory-store.js [count=5000000] [maxKeys=1000000] [batch=1]
 */
const { MemoryStore } = require('../dist/src/backends/memory');

const count = Number(process.argv[2] ?? 5_000_000);
const maxKeys = Number(process.argv[3] ?? 1_000_000);
const batch = Number(process.argv[4] ?? 1);
const MiB = 1024 * 1024;

const rule = { limit: { requestsPerUnit: 1_000_000_000, unit: 'DAY' } };
const store = new MemoryStore({ maxKeys });
const nowMs = Date.UTC(2026, 10, 24, 12);
const windowStart = Math.floor(nowMs / 1000 / 86400) * 86400;
const prefix = 'distinct_user_';

let rssPeak = 0;
let rssAtCap = null;
const samples = [];
const t0 = performance.now();
const ops = new Array(batch);
for (let i = 0; i < count; i += batch) {
  for (let j = 0; j < batch; j++) ops[j] = { key: prefix + 'u' + (i + j) + '_' + windowStart, hits: 1, windowSeconds: 86400, rule };
  store.incrementSync(ops, nowMs);
  if (i % 50_000 < batch) {
    const rss = process.memoryUsage.rss() / MiB;
    rssPeak = Math.max(rssPeak, rss);
    if (rssAtCap === null && store.size >= maxKeys) rssAtCap = rss;
    if (i % 500_000 < batch) samples.push({ sent: i, keys: store.size, rssMiB: Math.round(rss) });
  }
}
const seconds = (performance.now() - t0) / 1000;
const rssEnd = process.memoryUsage.rss() / MiB;
rssPeak = Math.max(rssPeak, rssEnd);
// Steady: what the process holds once the stream stops and a full collection has run.
if (global.gc) global.gc();
const rssSteady = process.memoryUsage.rss() / MiB;
console.log(
  JSON.stringify({
    count,
    maxKeys,
    batch,
    keys: store.size,
    opsPerSecond: Math.round(count / seconds),
    rssAtCapMiB: rssAtCap === null ? null : Math.round(rssAtCap),
    rssPeakMiB: Math.round(rssPeak),
    rssEndMiB: Math.round(rssEnd),
    rssSteadyMiB: Math.round(rssSteady),
    peakOverSteady: Number((rssPeak / rssSteady).toFixed(2)),
    samples,
  }),
);
