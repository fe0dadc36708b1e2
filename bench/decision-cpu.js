/**
 * CPU per decision in process (no transport): `node bench/decision-cpu.js <repo root with dist/>
 * <ok1|ok5|over1> [calls]` drives RateLimitService.decideInto (decideNow on builds before it) on the memory store with 64 requests
 * of 1 or 5 descriptors (8 values); `ok*` under a limit of 10^9 a second (every answer OK),
 * `over1` under 1 a second (every answer OVER_LIMIT). A build with the denial ring
 * (src/telemetry/denials.ts) records into one of 1,000 slots, as the service does by default.
 * Prints one JSON line with the user+system CPU per call in microseconds. For A/B runs of two
 * builds alternate them under `flock /work/bench.lock taskset -c 0` (bench/README.md).
 */
const path = require('path');
const root = path.resolve(process.argv[2] ?? '.');
const scenario = process.argv[3];
const calls = Number(process.argv[4] || 1000000);
const d = (p) => require(path.join(root, 'dist/src', p));
const { loadConfig } = d('config/load');
const { MemoryStore } = d('backends/memory');
const { RateLimitService } = d('limiter/service');
const { StatsStore } = d('stats/store');
const { systemClock } = d('platform/clock');
const { Caller } = d('core/store');
let denials;
try { const { DenialRing } = d('telemetry/denials'); denials = new DenialRing({ size: 1000, clock: systemClock, logPerSecond: 0, logger: { info() {} }, privacy: 'plain' }); } catch { denials = undefined; }
const stats = new StatsStore();
const over = scenario.startsWith('over');
const yaml = `domain: bench\ndescriptors:\n  - key: client_id\n    rate_limit: {unit: second, requests_per_unit: ${over ? 1 : 1000000000}}\n`;
const config = loadConfig([{ name: 'b.yaml', content: yaml }], { stats, mergeDomainConfig: false });
const store = new MemoryStore({ maxKeys: 1000000, clock: systemClock });
const flags = { shadowMode: false, quotaMode: false, responseDynamicMetadata: false, responseHeadersEnabled: false, limitHeader: 'a', remainingHeader: 'b', resetHeader: 'c' };
const snap = { config, flags };
const svc = new RateLimitService({ store, snapshot: () => snap, stats, clock: systemClock, nearLimitRatio: 0.8, cacheKeyPrefix: '', denials });
const n = scenario.endsWith('5') ? 5 : 1;
const caller = new Caller('127.0.0.1');
const reqs = [];
for (let r = 0; r < 64; r++) reqs.push({ domain: 'bench', hitsAddend: 0, descriptors: Array.from({ length: n }, (_, i) => ({ entries: [{ key: 'client_id', value: 'c' + ((r + i) % 8) }] })) });
// The answer sums the codes, so the work cannot be skipped; one object for every call, as the listeners have.
let x = 0;
const answer = { decided(_ctx, res) { x += res.overallCode; }, failed(_ctx, err) { throw err; } };
const decideOne = typeof svc.decideInto === 'function'
  ? (req) => svc.decideInto(req, undefined, caller, 'grpc', undefined, answer)
  : (req) => { x += svc.decideNow(req, undefined, caller, 'grpc').overallCode; };
function run(k) { for (let i = 0; i < k; i++) decideOne(reqs[i & 63]); return x; }
run(200000);
const t0 = process.cpuUsage();
run(calls);
const t = process.cpuUsage(t0);
console.log(JSON.stringify({ scenario, denials: denials !== undefined, usPerCall: (t.user + t.system) / calls }));
