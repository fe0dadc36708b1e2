'use strict';
/**
 * RLQS against RLS at the same request rate: what the service spends when every request asks it
 * (ShouldRateLimit, h2load at a fixed rate) and when Envoys decide locally and only report their
 * usage (StreamRateLimitQuotas, one report per bucket per reporting interval per Envoy). The
 * service runs on CPU 0 (memory store), the load on CPU 1; its CPU time is read from /proc over
 * the measured window. Needs a build (`make build`) and h2load.
 *
 *   node bench/rlqs.js [requests-per-second] [envoys] [seconds]     (defaults 20000 10 10)
 *
 * Prints one JSON line and a table; bench/README.md ("RLQS") records a run.
 */
const { spawn, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const grpc = require('@grpc/grpc-js');

const ROOT = path.join(__dirname, '..');
const { RateLimitRequest } = require(path.join(ROOT, 'dist/generated/envoy/service/ratelimit/v3/rls.js'));
const { RateLimitQuotaServiceClient } = require(path.join(ROOT, 'dist/generated/envoy/service/rate_limit_quota/v3/rlqs.js'));

const RATE = Number(process.argv[2] ?? 20000);
const ENVOYS = Number(process.argv[3] ?? 10);
const SECONDS = Number(process.argv[4] ?? 10);
const TICK_HZ = 100; // /proc/<pid>/stat counts in clock ticks of 1/100 s here

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'rl-rlqs-bench-'));
const configDir = path.join(tmp, 'ratelimit', 'config');
fs.mkdirSync(configDir, { recursive: true });
// One rule both ways: RLS counts each request against it; RLQS divides it among the Envoys.
fs.writeFileSync(path.join(configDir, 'bench.yaml'), 'domain: bench\ndescriptors:\n  - key: api\n    rate_limit: {unit: second, requests_per_unit: 1000000}\n');

function cpuTicks(pid) {
  const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return Number(f[11]) + Number(f[12]);
}

function startService() {
  const env = {
    PATH: process.env.PATH,
    BACKEND_TYPE: 'memory',
    RUNTIME_ROOT: tmp,
    RUNTIME_SUBDIRECTORY: 'ratelimit',
    RUNTIME_WATCH_ROOT: 'false',
    USE_STATSD: 'false',
    LOG_LEVEL: 'info',
    HOST: '127.0.0.1',
    PORT: '0',
    GRPC_HOST: '127.0.0.1',
    GRPC_PORT: '0',
    DEBUG_HOST: '127.0.0.1',
    DEBUG_PORT: '0',
  };
  const proc = spawn('taskset', ['-c', '0', process.execPath, path.join(ROOT, 'dist/src/cli/ratelimit.js')], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  return new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`service did not start: ${out}`)), 15000);
    proc.stderr.on('data', (d) => {
      out += d;
      const m = /listening: gRPC (\S+), HTTP/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve({ proc, grpc: m[1] });
      }
    });
  });
}

/** Service CPU (% of one core) while `load` runs for SECONDS, after a second of warm-up. */
async function measure(pid, load) {
  const running = load();
  await new Promise((r) => setTimeout(r, 1000));
  const t0 = cpuTicks(pid);
  const w0 = Date.now();
  await new Promise((r) => setTimeout(r, SECONDS * 1000));
  const cpu = ((cpuTicks(pid) - t0) / TICK_HZ / ((Date.now() - w0) / 1000)) * 100;
  await running.stop();
  return cpu;
}

/** ShouldRateLimit at RATE calls/s: h2load, 50 connections of one stream at a fixed rate each. */
function rlsLoad(addr) {
  const body = Buffer.from(RateLimitRequest.encode({ domain: 'bench', descriptors: [{ entries: [{ key: 'api', value: 'search' }] }], hitsAddend: 1 }).finish());
  const frame = Buffer.concat([Buffer.from([0, 0, 0, 0, 0]), body]);
  frame.writeUInt32BE(body.length, 1);
  const file = path.join(tmp, 'frame.bin');
  fs.writeFileSync(file, frame);
  return () => {
    const h = spawn('taskset', ['-c', '1', 'h2load', '-t1', '-c50', '-m1', `--rps=${(RATE / 50).toFixed(2)}`, '-D', String(SECONDS + 1), '-d', file, '-H', 'content-type: application/grpc', '-H', 'te: trailers',
      `http://${addr}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    h.stdout.on('data', (d) => (out += d));
    const ended = new Promise((r) => h.once('exit', () => r(out)));
    // h2load stops by itself after -D seconds (the warm-up second and the measured window).
    return { stop: async () => { rlsLoad.lastOutput = await ended; } };
  };
}

/**
 * ENVOYS Envoys sharing RATE requests/s among them: each decides locally and reports its one
 * bucket's usage every second over its stream, as Envoy's filter does.
 */
function rlqsLoad(addr) {
  return () => {
    const client = new RateLimitQuotaServiceClient(addr, grpc.credentials.createInsecure());
    const streams = [];
    let assignments = 0;
    for (let i = 0; i < ENVOYS; i++) {
      const call = client.streamRateLimitQuotas();
      call.on('data', () => assignments++);
      call.on('error', () => undefined);
      const report = (elapsed, allowed) =>
        call.write({ domain: 'bench', bucketQuotaUsages: [{ bucketId: { bucket: { api: 'search' } }, timeElapsed: { seconds: BigInt(elapsed), nanos: 0 }, numRequestsAllowed: BigInt(allowed), numRequestsDenied: 0n }] });
      report(0, 1);
      const timer = setInterval(() => report(1, Math.round(RATE / ENVOYS)), 1000);
      streams.push({ call, timer });
    }
    return {
      stop: async () => {
        for (const s of streams) {
          clearInterval(s.timer);
          s.call.end();
        }
        client.close();
        rlqsLoad.assignments = assignments;
      },
    };
  };
}

async function main() {
  if (spawnSync('h2load', ['--version']).status !== 0) throw new Error('h2load is needed (apt-get install nghttp2-client)');
  const svc = await startService();
  try {
    const idle = await measure(svc.proc.pid, () => ({ stop: async () => undefined }));
    const rls = await measure(svc.proc.pid, rlsLoad(svc.grpc));
    const done = /(\d+) succeeded/.exec(rlsLoad.lastOutput ?? '');
    const rlqs = await measure(svc.proc.pid, rlqsLoad(svc.grpc));
    const result = {
      requestsPerSecond: RATE,
      envoys: ENVOYS,
      seconds: SECONDS,
      idleServiceCpuPct: Number(idle.toFixed(2)),
      rlsServiceCpuPct: Number(rls.toFixed(1)),
      rlsCallsSucceeded: done ? Number(done[1]) : null,
      rlqsServiceCpuPct: Number(rlqs.toFixed(2)),
      rlqsReportsPerSecond: ENVOYS,
      rlqsAssignmentsSent: rlqsLoad.assignments,
      rlsCpuMicrosPerRequest: Number(((rls / 100) * 1e6 / RATE).toFixed(2)),
      rlqsCpuMicrosPerRequest: Number(((rlqs / 100) * 1e6 / RATE).toFixed(3)),
    };
    process.stdout.write(`${JSON.stringify(result)}\n`);
    process.stdout.write(
      `| path | service CPU at ${RATE} req/s | per request |\n|---|---:|---:|\n` +
        `| idle (no load) | ${result.idleServiceCpuPct} % | — |\n` +
        `| RLS (ShouldRateLimit per request) | ${result.rlsServiceCpuPct} % | ${result.rlsCpuMicrosPerRequest} µs |\n` +
        `| RLQS (${ENVOYS} Envoys, a report each per second) | ${result.rlqsServiceCpuPct} % | ${result.rlqsCpuMicrosPerRequest} µs |\n`,
    );
  } finally {
    svc.proc.kill('SIGTERM');
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

main().catch((err) => {
  process.stderr.write(`${err.stack ?? err}\n`);
  process.exit(1);
});
