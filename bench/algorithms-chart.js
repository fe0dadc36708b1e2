'use strict';
/**
 * Prints the algorithm chart of docs/configuration.md: the same arrival pattern (a burst of 15 requests at
 * t = 0.9 s, then a steady 40 requests/s) against a 10 per second limit under each algorithm, on the memory
 * store with a manual clock, as admitted requests per 250 ms. Run after `make build`:
 *   node bench/algorithms-chart.js
 */
const { loadConfig } = require('../dist/src/config');
const { StatsStore } = require('../dist/src/stats/store');
const { MemoryStore } = require('../dist/src/backends/memory');
const { RateLimitService } = require('../dist/src/limiter/service');
const { ManualClock } = require('../dist/src/platform/clock');

const FLAGS = { shadowMode: false, quotaMode: false, responseDynamicMetadata: false, responseHeadersEnabled: false, limitHeader: '', remainingHeader: '', resetHeader: '' };
const ALGORITHMS = ['fixed_window', 'sliding_window', 'token_bucket'];
const BUCKET_MS = 250;
const DURATION_MS = 3000;

function arrivals() {
  const times = [];
  for (let i = 0; i < 15; i++) times.push(900); // a burst just before a window edge
  for (let t = 1000; t < DURATION_MS; t += 25) times.push(t); // then 40 per second
  return times;
}

async function run(algorithm) {
  const stats = new StatsStore();
  const yaml = `domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10, algorithm: ${algorithm}}\n`;
  const config = loadConfig([{ name: 'a.yaml', content: yaml }], { mergeDomainConfig: false, stats });
  const clock = new ManualClock(1_700_000_000_000);
  const start = clock.nowMs();
  const snapshot = { config, flags: FLAGS };
  const svc = new RateLimitService({ store: new MemoryStore({ maxKeys: 1000 }), snapshot: () => snapshot, stats, clock, nearLimitRatio: 0.8, cacheKeyPrefix: '' });
  const buckets = new Array(DURATION_MS / BUCKET_MS).fill(0);
  for (const t of arrivals()) {
    clock.set(start + t);
    const res = await svc.shouldRateLimit({ domain: 'd', descriptors: [{ entries: [{ key: 'k', value: 'v' }] }], hitsAddend: 0 });
    if (res.overallCode === 1) buckets[Math.floor(t / BUCKET_MS)]++;
  }
  return buckets;
}

(async () => {
  const header = ['time (s)', ...ALGORITHMS];
  const rows = [];
  const results = {};
  for (const a of ALGORITHMS) results[a] = await run(a);
  for (let i = 0; i < DURATION_MS / BUCKET_MS; i++) {
    const label = `${((i * BUCKET_MS) / 1000).toFixed(2)}–${(((i + 1) * BUCKET_MS) / 1000).toFixed(2)}`;
    rows.push([label, ...ALGORITHMS.map((a) => `${'█'.repeat(results[a][i])} ${results[a][i]}`)]);
  }
  console.log(`| ${header.join(' | ')} |`);
  console.log(`|${header.map(() => '---').join('|')}|`);
  for (const r of rows) console.log(`| ${r.join(' | ')} |`);
})();
