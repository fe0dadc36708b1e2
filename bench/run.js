'use strict';
/**
 * Benchmark suite (see bench/README.md). Starts each server pinned to CPU 0 and drives it from
 * CPU 1 with h2load (gRPC) or wrk (HTTP /json), all on 127.0.0.1, then writes
 * bench/results/latest.json and bench/results/latest.md and prints the table.
 *
 * Every scenario is run twice: at peak (closed loop, as many requests as the server answers), then
 * at a fixed rate of half that peak (h2load --rps, or wrk with a per-connection delay) for the
 * p50/p99 latency. Redis scenarios (single server and a 3-master cluster, started here via
 * bench/redis.js) also report INFO commandstats per request. The `distinct` scenario streams
 * BENCH_DISTINCT distinct descriptor values (bench/distinct-load.js) and samples the service's RSS.
 *
 * Environment: BENCH_SECONDS (measured seconds per scenario, default 10), BENCH_WARMUP_SECONDS
 * (default 5), BENCH_CONNECTIONS (default 5), BENCH_STREAMS (in-flight requests per connection,
 * default 10; wrk opens CONNECTIONS*STREAMS HTTP/1.1 connections), BENCH_FORCE_NODE_LOADGEN=1
 * (use the Node fallback load generator instead of h2load and wrk), BENCH_DISTINCT (distinct
 * values to send, default 10,000,000; 0 skips the scenario), BENCH_DISTINCT_SECONDS (time cap,
 * default 900), BENCH_MEMORY_MAX_KEYS (MEMORY_MAX_KEYS of the distinct run; default 1,000,000, or
 * BENCH_DISTINCT / 4 when that is smaller, so the cap is reached), BENCH_REDIS=0 (skip Redis),
 * BENCH_SCENARIOS (scenario ids to run, comma-separated, e.g. service-grpc-1,go-rls-grpc-1; all
 * when unset).
 *
 * The Go programs under bench/ (openloop, the half-load generator, and go-rls, a Go rate limit
 * service measured beside ours for the CPU per call) are built with Debian's Go in GOPATH mode.
 *
 * Needs a build (dist/): `make bench` builds first. Process helpers (pinning, children, the
 * service, /proc readings) are in bench/processes.js, shared with bench/attacks.js.
 */
const { spawn, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const http2 = require('node:http2');
const os = require('node:os');
const path = require('node:path');
const {
  ROOT,
  SERVICE,
  intEnv,
  sh,
  NPROC,
  PIN,
  pinned,
  track,
  killChildren,
  startServer,
  startProcess,
  cpuSample,
  cpuPercent,
  peakRssMiB,
  rssMiB,
  sleep,
  tmpDir,
  removeTmp,
  SERVICE_CONFIG,
  startService,
} = require('./processes.js');

const GENERATED = path.join(ROOT, 'dist/generated/envoy/service/ratelimit/v3/rls.js');
const RESULTS = path.join(__dirname, 'results');
const GRPC_PATH = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';

for (const f of [GENERATED, SERVICE]) {
  if (!fs.existsSync(f)) {
    console.error(`missing ${path.relative(ROOT, f)}: build first (make bench builds, or make build)`);
    process.exit(2);
  }
}
const grpc = require('@grpc/grpc-js');
const { RateLimitRequest, RateLimitResponse, RateLimitServiceClient } = require(GENERATED);
const redisLib = require('./redis.js');
const { commandStats } = redisLib;

const CFG = {
  seconds: intEnv('BENCH_SECONDS', 10, 1, 300),
  warmupSeconds: intEnv('BENCH_WARMUP_SECONDS', 5, 0, 60),
  connections: intEnv('BENCH_CONNECTIONS', 5, 1, 64),
  streams: intEnv('BENCH_STREAMS', 10, 1, 100),
  /** Half-load gRPC runs: this many connections with one stream each. */
  halfLoadConnections: intEnv('BENCH_HALF_LOAD_CONNECTIONS', 50, 1, 500),
  distinct: intEnv('BENCH_DISTINCT', 10_000_000, 0, 1_000_000_000),
  distinctSeconds: intEnv('BENCH_DISTINCT_SECONDS', 900, 1, 3600),
  redis: process.env['BENCH_REDIS'] !== '0',
  /** BENCH_SCENARIOS: the scenario ids to run, comma-separated; every scenario when unset. */
  scenarios: (process.env['BENCH_SCENARIOS'] ?? '').split(',').map((id) => id.trim()).filter(Boolean),
};
/** Whether scenario `id` runs (BENCH_SCENARIOS). */
const want = (id) => CFG.scenarios.length === 0 || CFG.scenarios.includes(id);
CFG.memoryMaxKeys = intEnv('BENCH_MEMORY_MAX_KEYS', Math.max(1000, Math.min(1_000_000, Math.floor(CFG.distinct / 4))), 1, 1_000_000_000);
/**
 * Targets, as ratios and latencies measured in one run (see bench/README.md), for the default
 * settings: memory ≥ 2.0 / 1.8 (1 / 5 descriptors) and Redis with upstream's command stream ≥ 1.1 /
 * 1.0 of the grpc-js ceiling; /json ≥ 0.9 of bare node:http; p99 at half load with a load that is
 * not bursty ≤ 2 ms (memory), ≤ 3 ms (Redis).
 */
const TARGETS = {
  memoryRatio: { 1: 2.0, 5: 1.8 },
  redisRatio: { 1: 1.1, 5: 1.0 },
  jsonRatio: 0.9,
  p99HalfMemoryMs: 2,
  p99HalfRedisMs: 3,
  /** Memory store at MEMORY_MAX_KEYS = 1,000,000, full: RSS at the end (MB) and peak / end. */
  distinctRssMB: 300,
  distinctPeakOverEnd: 1.3,
};
const CONCURRENCY = CFG.connections * CFG.streams;
const TMP = tmpDir();

// ---------------------------------------------------------------------------------------------
// Machine, tools, pinning

const cpuModel = (/^model name\s*:\s*(.+)$/m.exec(fs.readFileSync('/proc/cpuinfo', 'utf8')) ?? [])[1] ?? 'unknown';
const H2LOAD = process.env['BENCH_FORCE_NODE_LOADGEN'] === '1' ? null : sh('h2load', ['--version']);
/** bench/openloop, built in main() when Go and grpc-go are there: the half-load generator for gRPC. */
let OPENLOOP = null;
/**
 * Above this rate openloop's grpc-go client, on its one core, is the bottleneck (at 50,000 calls/s
 * here its p50 was seconds and calls missed their deadline), so h2load --rps runs instead.
 */
const OPENLOOP_MAX_RPS = 15_000;
const WRK = process.env['BENCH_FORCE_NODE_LOADGEN'] === '1' ? null : sh('wrk', ['-v']) ?? (spawnSync('wrk', ['-v'], { encoding: 'utf8' }).stdout || null);
const machine = {
  nproc: NPROC,
  cpuModel,
  node: process.version,
  kernel: os.release(),
  date: new Date().toISOString(),
  pinning: PIN ? 'servers: taskset -c 0; load generator: taskset -c 1' : 'none (taskset missing or < 2 CPUs)',
  h2load: H2LOAD ? H2LOAD.split('\n')[0] : null,
  wrk: WRK ? WRK.split('\n')[0].replace(/\s*Copyright.*$/, '') : null,
  go: sh('go', ['version']),
};

/**
 * Runs a load generator on CPU 1 to completion (killed after `timeoutMs`), sampling the CPU time
 * of the server and of the generator between `measureFrom` and `measureTo` seconds after start.
 */
async function runLoad(cmd, args, { env, serverPid, measureFrom, measureTo, timeoutMs, extraPids = [] }) {
  const [c, a] = pinned(1, cmd, args);
  const proc = track(spawn(c, a, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'], cwd: ROOT }));
  let stdout = '';
  let stderr = '';
  proc.stdout.on('data', (d) => (stdout += d));
  proc.stderr.on('data', (d) => (stderr += d));
  const killer = setTimeout(() => proc.kill('SIGKILL'), timeoutMs);
  const exited = new Promise((resolve) => proc.once('exit', (code, signal) => resolve(code ?? signal)));
  let s0 = null;
  let s1 = null;
  const sampler = (async () => {
    await sleep(measureFrom * 1000);
    s0 = cpuSample([serverPid, proc.pid, ...extraPids]);
    await sleep((measureTo - measureFrom) * 1000);
    s1 = cpuSample([serverPid, proc.pid, ...extraPids]);
  })();
  const code = await exited;
  clearTimeout(killer);
  await Promise.race([sampler, sleep(0)]);
  const extraCpu = extraPids.map((_, i) => cpuPercent(s0, s1, 2 + i));
  return { code, stdout, stderr, serverCpu: cpuPercent(s0, s1, 0), genCpu: cpuPercent(s0, s1, 1), extraCpu };
}

// ---------------------------------------------------------------------------------------------
// Requests

function grpcRequest(n) {
  return {
    domain: 'bench',
    descriptors: Array.from({ length: n }, (_, i) => ({
      entries: [{ key: 'client_id', value: `c${i + 1}` }],
      limit: undefined,
      hitsAddend: undefined,
    })),
    hitsAddend: 0,
  };
}
/** The gRPC length-prefixed message: flag 0 (uncompressed), 4-byte big-endian length, bytes. */
function grpcFrame(request) {
  const msg = Buffer.from(RateLimitRequest.encode(request).finish());
  const head = Buffer.alloc(5);
  head.writeUInt32BE(msg.length, 1);
  return Buffer.concat([head, msg]);
}
const JSON_BODY = JSON.stringify({ domain: 'bench', descriptors: [{ entries: [{ key: 'client_id', value: 'c1' }] }] });

function writeTmp(name, data) {
  const f = path.join(TMP, name);
  fs.writeFileSync(f, data);
  return f;
}

/** `code`: the expected overall and per-status code (1 = OK, 2 = OVER_LIMIT). */
function checkResponse(res, descriptors, via, code = 1) {
  const problems = [];
  if (res.overallCode !== code) problems.push(`${via}: overallCode ${res.overallCode}, want ${code}`);
  if (res.statuses.length !== descriptors) problems.push(`${via}: ${res.statuses.length} statuses, want ${descriptors}`);
  else if (res.statuses.some((s) => s.code !== code)) problems.push(`${via}: a status code is not ${code}`);
  return problems;
}

/**
 * Sends the exact frame bytes the load generator sends (node:http2, h2load's headers) and, as a
 * second opinion, the same request through a grpc-js client. Returns the response frame length.
 */
async function verifyGrpc(addr, frameFile, request, statuses = request.descriptors.length, code = 1) {
  const frame = fs.readFileSync(frameFile);
  const raw = await new Promise((resolve, reject) => {
    const session = http2.connect(`http://${addr}`);
    session.on('error', reject);
    const req = session.request({ ':method': 'POST', ':path': GRPC_PATH, 'content-type': 'application/grpc', te: 'trailers' });
    const timer = setTimeout(() => req.close(http2.constants.NGHTTP2_CANCEL), 5000);
    let headers;
    let trailers = {};
    const chunks = [];
    req.on('response', (h) => (headers = h));
    req.on('trailers', (t) => (trailers = t));
    req.on('data', (d) => chunks.push(d));
    req.on('error', reject);
    req.on('close', () => {
      clearTimeout(timer);
      session.close();
      resolve({ headers: headers ?? {}, trailers: { ...(headers ?? {}), ...trailers }, body: Buffer.concat(chunks) });
    });
    req.end(frame);
  });
  const problems = [];
  if (raw.headers[':status'] !== 200) problems.push(`raw frame: HTTP status ${raw.headers[':status']}`);
  if (raw.trailers['grpc-status'] !== '0') problems.push(`raw frame: grpc-status ${raw.trailers['grpc-status']} ${raw.trailers['grpc-message'] ?? ''}`);
  let frameLength = null;
  if (raw.body.length >= 5 && raw.body[0] === 0 && raw.body.length === 5 + raw.body.readUInt32BE(1)) {
    frameLength = raw.body.length;
    problems.push(...checkResponse(RateLimitResponse.decode(raw.body.subarray(5)), statuses, 'raw frame', code));
  } else {
    problems.push(`raw frame: malformed response body (${raw.body.length} bytes)`);
  }
  const client = new RateLimitServiceClient(addr, grpc.credentials.createInsecure());
  try {
    const res = await new Promise((resolve, reject) =>
      client.shouldRateLimit(request, { deadline: Date.now() + 5000 }, (err, r) => (err ? reject(err) : resolve(r))),
    );
    problems.push(...checkResponse(res, statuses, 'grpc-js client', code));
  } catch (err) {
    problems.push(`grpc-js client: ${err.message}`);
  } finally {
    client.close();
  }
  return { problems, frameLength };
}

async function verifyJson(addr) {
  const problems = [];
  const res = await fetch(`http://${addr}/json`, { method: 'POST', body: JSON_BODY, signal: AbortSignal.timeout(5000) });
  const text = await res.text();
  if (res.status !== 200) problems.push(`/json: HTTP ${res.status} ${text.slice(0, 200)}`);
  else {
    const body = JSON.parse(text);
    if (body.overallCode !== 'OK' || body.statuses?.length !== 1) problems.push(`/json: unexpected body ${text.slice(0, 200)}`);
  }
  return { problems, body: text };
}

// ---------------------------------------------------------------------------------------------
// Load generators and their output

/** '2.19ms' | '423us' | '1.2s' -> milliseconds. */
function toMs(s) {
  const m = /^([\d.]+)(us|ms|s|m)$/.exec(s);
  if (!m) return null;
  return Number(m[1]) * { us: 0.001, ms: 1, s: 1000, m: 60_000 }[m[2]];
}

/** Percentile `q` (0..1) of an ascending array, nearest rank. */
function pct(sorted, q) {
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))] : null;
}

/**
 * h2load run. `rpsPerClient`: fixed rate (h2load --rps, per connection) and no warm-up (the
 * half-load run follows a peak run on the same warm server); otherwise closed loop with warm-up.
 */
async function h2loadScenario(
  url,
  frameFile,
  serverPid,
  expectedFrameLength,
  { rpsPerClient = null, extraPids = [], connections = CFG.connections, streams = CFG.streams } = {},
) {
  const logFile = path.join(TMP, `h2load-${Date.now()}.log`);
  const warmup = rpsPerClient ? 0 : CFG.warmupSeconds;
  const args = [
    '-t', '1',
    '-c', String(connections),
    '-m', String(streams),
    '-D', String(CFG.seconds),
    ...(warmup > 0 ? [`--warm-up-time=${warmup}`] : []),
    ...(rpsPerClient ? [`--rps=${rpsPerClient.toFixed(2)}`] : []),
    '-d', frameFile,
    '-H', 'content-type: application/grpc',
    '-H', 'te: trailers',
    `--log-file=${logFile}`,
    url,
  ];
  const r = await runLoad('h2load', args, {
    serverPid,
    extraPids,
    measureFrom: warmup + 0.5,
    measureTo: warmup + CFG.seconds - 0.3,
    timeoutMs: (warmup + CFG.seconds + 30) * 1000,
  });
  const out = r.stdout;
  const problems = [];
  const fin = /finished in ([\d.]+)s, ([\d.]+) req\/s/.exec(out);
  const req = /requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout/.exec(out);
  const codes = /status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx/.exec(out);
  const traffic = /traffic: .*?\((\d+)\) data/.exec(out);
  const time = /time for request:\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)/.exec(out);
  if (r.code !== 0 || !fin || !req || !codes || !time) {
    problems.push(`h2load exited ${r.code}; output not understood: ${(out + r.stderr).slice(-500)}`);
    return { problems, raw: out };
  }
  const [succeeded, failed, errored, timeout] = [4, 5, 6, 7].map((i) => Number(req[i]));
  if (failed || errored || timeout) problems.push(`h2load: ${failed} failed, ${errored} errored, ${timeout} timeout`);
  // h2load's status-code tally can trail `succeeded` by the few streams still open when the run stops.
  if (Number(codes[2]) || Number(codes[3]) || Number(codes[4]) || Number(codes[1]) === 0) problems.push(`h2load ${codes[0]}`);
  if (succeeded === 0) problems.push('h2load: no request succeeded');
  // h2load does not read grpc-status, and a gRPC error is an HTTP 200 with no DATA. Every OK answer
  // is one `expectedFrameLength`-byte frame. h2load's DATA total also counts warm-up traffic, so it
  // can only be a lower bound check: at least one full OK frame per counted response.
  const dataPerResponse = traffic && succeeded ? Number(traffic[1]) / succeeded : null;
  if (expectedFrameLength && dataPerResponse !== null && dataPerResponse < expectedFrameLength) {
    problems.push(`h2load: ${dataPerResponse.toFixed(1)} DATA bytes per response, fewer than one ${expectedFrameLength}-byte OK frame`);
  }
  // p99 from the per-request log (h2load prints no percentiles). Only the measured phase is logged.
  const durations = fs
    .readFileSync(logFile, 'utf8')
    .split('\n')
    .filter((l) => l)
    .map((l) => l.split('\t'))
    .filter((f) => f[1] !== '-1')
    .map((f) => Number(f[2]) / 1000)
    .sort((a, b) => a - b);
  fs.rmSync(logFile, { force: true });
  return {
    problems,
    tool: 'h2load',
    requests: succeeded,
    seconds: Number(fin[1]),
    rps: Number(fin[2]),
    meanMs: toMs(time[3]),
    p50Ms: pct(durations, 0.5),
    p99Ms: pct(durations, 0.99),
    p999Ms: pct(durations, 0.999),
    p99Source: `h2load --log-file (${durations.length} rows)`,
    dataBytesPerResponse: dataPerResponse,
    serverCpu: r.serverCpu,
    genCpu: r.genCpu,
    extraCpu: r.extraCpu,
    raw: out.trim(),
  };
}

/**
 * wrk run. `delayMs` (with `connections`): each connection waits that long between a response and
 * its next request (bench/post.lua), for a fixed rate and no warm-up; otherwise closed loop.
 */
async function wrkScenario(url, bodyFile, serverPid, { connections = CONCURRENCY, delayMs = 0, extraPids = [] } = {}) {
  const lua = path.join(__dirname, 'post.lua');
  const env = { BENCH_BODY_FILE: bodyFile, BENCH_DELAY_MS: String(delayMs) };
  const base = ['-t', '1', '-c', String(connections), '--timeout', '10s', '-s', lua];
  if (CFG.warmupSeconds > 0 && !delayMs) {
    await runLoad('wrk', [...base, '-d', `${CFG.warmupSeconds}s`, url], {
      env,
      serverPid,
      measureFrom: 0,
      measureTo: 0,
      timeoutMs: (CFG.warmupSeconds + 30) * 1000,
    });
  }
  const r = await runLoad('wrk', [...base, '-d', `${CFG.seconds}s`, '--latency', url], {
    env,
    serverPid,
    extraPids,
    measureFrom: 0.5,
    measureTo: CFG.seconds - 0.3,
    timeoutMs: (CFG.seconds + 30) * 1000,
  });
  const out = r.stdout;
  const problems = [];
  const lat = /Latency\s+(\S+)\s+(\S+)\s+(\S+)/.exec(out);
  const p99 = /^\s*99%\s+(\S+)/m.exec(out);
  const p50 = /^\s*50%\s+(\S+)/m.exec(out);
  // bench/post.lua's done() hook: wrk --latency prints no percentile above 99.
  const p999 = /^p99\.9_us (\d+)/m.exec(out);
  const total = /(\d+) requests in ([\d.]+\w+)/.exec(out);
  const rps = /Requests\/sec:\s+([\d.]+)/.exec(out);
  if (r.code !== 0 || !lat || !p99 || !total || !rps) {
    problems.push(`wrk exited ${r.code}; output not understood: ${(out + r.stderr).slice(-500)}`);
    return { problems, raw: out };
  }
  const sock = /Socket errors: (.*)/.exec(out);
  if (sock) problems.push(`wrk socket errors: ${sock[1]}`);
  const non2xx = /Non-2xx or 3xx responses: (\d+)/.exec(out);
  if (non2xx) problems.push(`wrk: ${non2xx[1]} non-2xx/3xx responses`);
  if (Number(total[1]) === 0) problems.push('wrk: no request completed');
  return {
    problems,
    tool: 'wrk',
    requests: Number(total[1]),
    seconds: toMs(total[2]) / 1000,
    rps: Number(rps[1]),
    meanMs: toMs(lat[1]),
    p50Ms: p50 ? toMs(p50[1]) : null,
    p99Ms: toMs(p99[1]),
    p999Ms: p999 ? Number(p999[1]) / 1000 : null,
    p99Source: 'wrk --latency',
    serverCpu: r.serverCpu,
    genCpu: r.genCpu,
    extraCpu: r.extraCpu,
    raw: out.trim(),
  };
}

async function nodeScenario(mode, target, file, serverPid) {
  const r = await runLoad(
    process.execPath,
    [path.join(__dirname, 'node-load.js'), mode, target, file, String(CFG.connections), String(CFG.streams), String(CFG.warmupSeconds), String(CFG.seconds)],
    {
      serverPid,
      measureFrom: CFG.warmupSeconds + 0.5,
      measureTo: CFG.warmupSeconds + CFG.seconds - 0.3,
      timeoutMs: (CFG.warmupSeconds + CFG.seconds + 30) * 1000,
    },
  );
  const problems = [];
  let res;
  try {
    res = JSON.parse(r.stdout.trim().split('\n').pop());
  } catch {
    problems.push(`node-load exited ${r.code}: ${(r.stdout + r.stderr).slice(-500)}`);
    return { problems };
  }
  if (res.errors) problems.push(`node-load: ${res.errors} failed requests`);
  if (!res.requests) problems.push('node-load: no request completed');
  return {
    problems,
    tool: `node-load ${mode === 'grpc' ? 'grpc-js client' : 'node:http'} (FALLBACK)`,
    requests: res.requests,
    seconds: res.seconds,
    rps: res.rps,
    meanMs: res.meanMs,
    p99Ms: res.p99Ms,
    p99Source: 'node-load (all measured calls)',
    serverCpu: r.serverCpu,
    genCpu: r.genCpu,
  };
}

function grpcLoad(addr, frameFile, serverPid, frameLength, extraPids = []) {
  return H2LOAD
    ? h2loadScenario(`http://${addr}${GRPC_PATH}`, frameFile, serverPid, frameLength, { extraPids })
    : nodeScenario('grpc', addr, frameFile, serverPid);
}
function jsonLoad(addr, bodyFile, serverPid, extraPids = []) {
  return WRK ? wrkScenario(`http://${addr}/json`, bodyFile, serverPid, { extraPids }) : nodeScenario('http', `http://${addr}/json`, bodyFile, serverPid);
}

/**
 * wrk has no rate option: `connections` connections each waiting `delayMs` between requests give
 * about connections * 1000 / (delayMs + latency) requests/s. Picks the pair closest to `target`
 * (latency assumed 0.2 ms at half load), delay 1..50 ms, 1..4*CONCURRENCY connections.
 */
function wrkRatePlan(target, latencyMs = 0.2) {
  let best = null;
  for (let d = 1; d <= 50; d++) {
    const c = Math.round((target * (d + latencyMs)) / 1000);
    if (c < 1 || c > 4 * CONCURRENCY) continue;
    const err = Math.abs((c * 1000) / (d + latencyMs) - target) / target;
    if (!best || err < best.err - 0.005) best = { connections: c, delayMs: d, err };
  }
  return best;
}

/**
 * The fixed-rate run at half of `peak.rps` (p50/p99 at half load). Returns { targetRps, rps, p50Ms,
 * p99Ms, meanMs, serverCpu, genCpu, method, problems } or { skipped } for the Node fallback.
 */
async function halfLoad(peak, { grpc: isGrpc, addr, frameFile, serverPid, frameLength, bodyFile, extraPids = [], worstGcPause }) {
  if (!peak.rps) return { skipped: 'no peak' };
  const targetRps = peak.rps / 2;
  const from = Date.now();
  let r;
  let method;
  if (isGrpc && OPENLOOP && targetRps <= OPENLOOP_MAX_RPS) {
    method = `openloop (grpc-go, Poisson arrivals) x ${CFG.halfLoadConnections} connections`;
    r = await openloopScenario(addr, frameFile, serverPid, targetRps, extraPids);
  } else if (isGrpc) {
    if (!H2LOAD) return { skipped: 'node-load fallback has no fixed-rate mode' };
    // Not bursty, as Envoy's workers send: many connections, one stream each, each at a fixed rate
    // (h2load's --rps with 10 streams per connection sends in small bursts).
    const perClient = targetRps / CFG.halfLoadConnections;
    method = `h2load --rps=${perClient.toFixed(2)} x ${CFG.halfLoadConnections} connections x 1 stream`;
    r = await h2loadScenario(`http://${addr}${GRPC_PATH}`, frameFile, serverPid, frameLength, {
      rpsPerClient: perClient,
      extraPids,
      connections: CFG.halfLoadConnections,
      streams: 1,
    });
  } else {
    if (!WRK) return { skipped: 'node-load fallback has no fixed-rate mode' };
    let plan = wrkRatePlan(targetRps);
    if (!plan) return { skipped: `no wrk connection/delay plan for ${targetRps.toFixed(0)} req/s` };
    r = await wrkScenario(`http://${addr}/json`, bodyFile, serverPid, { ...plan, extraPids });
    // The rate depends on the latency at that rate: when more than 5 % off, plan again with the
    // measured mean latency and run once more (that run is the one reported).
    if (r.rps && r.meanMs != null && Math.abs(r.rps / targetRps - 1) > 0.05) {
      const again = wrkRatePlan(targetRps, r.meanMs);
      if (again) {
        plan = again;
        r = await wrkScenario(`http://${addr}/json`, bodyFile, serverPid, { ...plan, extraPids });
      }
    }
    method = `wrk ${plan.connections} connections x ${plan.delayMs} ms delay`;
  }
  const { raw, ...rest } = r;
  const gcPauseMs = worstGcPause ? worstGcPause(from, Date.now()) : null;
  return { targetRps, method, ...rest, gcPauseMs, rateError: r.rps ? r.rps / targetRps - 1 : null, toolOutput: raw };
}

/**
 * The half-load run on gRPC with bench/openloop: each connection sends at its own Poisson arrival
 * times, answered or not (open loop), so the latencies are not shaped by the generator's bursts.
 */
async function openloopScenario(addr, frameFile, serverPid, rate, extraPids) {
  const warmup = 1;
  const run = await runLoad(OPENLOOP, ['-addr', addr, '-frame', frameFile, '-rate', rate.toFixed(0), '-c', String(CFG.halfLoadConnections), '-seconds', String(CFG.seconds), '-warmup', String(warmup)], {
    serverPid,
    extraPids,
    // Connections are dialled first (well under a second), then the warm-up.
    measureFrom: warmup + 1,
    measureTo: warmup + CFG.seconds,
    timeoutMs: (CFG.seconds + warmup + 60) * 1000,
  });
  const raw = run.stdout + run.stderr;
  const problems = [];
  let out = null;
  try {
    out = JSON.parse(run.stdout.trim().split('\n').pop());
  } catch {
    problems.push(`openloop printed no result (exit ${run.code}): ${run.stderr.trim().slice(0, 300)}`);
  }
  if (out?.errors) problems.push(`${out.errors} of ${out.sent} calls failed (first: ${out.firstError})`);
  return {
    tool: 'openloop',
    problems,
    raw,
    rps: out?.achievedRps ?? null,
    requests: out?.ok ?? 0,
    p50Ms: out?.p50Ms ?? null,
    p99Ms: out?.p99Ms ?? null,
    p999Ms: out?.p999Ms ?? null,
    maxMs: out?.maxMs ?? null,
    p99SendLagMs: out?.p99SendLagMs ?? null,
    serverCpu: run.serverCpu,
    genCpu: run.genCpu,
  };
}

/**
 * Builds the Go programs under bench/ (`names`: bench/<name>/main.go, e.g. openloop and go-rls)
 * with Debian's golang-go and golang-google-grpc-dev (GOPATH mode, no network). Returns, per name,
 * { binary } or { missing: why it could not be built }.
 */
function buildGoPrograms(names) {
  const gopath = '/usr/share/gocode';
  const built = {};
  for (const name of names) {
    if (!fs.existsSync(path.join(gopath, 'src/google.golang.org/grpc'))) {
      built[name] = { missing: 'grpc-go sources missing (Debian golang-google-grpc-dev)' };
      continue;
    }
    const binary = path.join(TMP, name);
    const r = spawnSync('go', ['build', '-o', binary, 'main.go'], {
      cwd: path.join(__dirname, name),
      env: { ...process.env, GO111MODULE: 'off', GOPATH: gopath, GOCACHE: path.join(TMP, 'gocache') },
      encoding: 'utf8',
    });
    if (r.status === 0) built[name] = { binary };
    else if (r.error?.code === 'ENOENT') built[name] = { missing: 'go not found (Debian golang-go)' };
    else built[name] = { missing: `go build failed (${r.error?.message ?? r.stderr.trim()})` };
  }
  return built;
}

// ---------------------------------------------------------------------------------------------
// Service

async function fetchStats(debugAddr) {
  const res = await fetch(`http://${debugAddr}/stats`, { signal: AbortSignal.timeout(5000) });
  const stats = {};
  for (const line of (await res.text()).split('\n')) {
    const m = /^(\S+): (-?[\d.]+)$/.exec(line);
    if (m) stats[m[1]] = Number(m[2]);
  }
  return stats;
}

/**
 * Checks the service's own counters over a scenario (warm-up included, so >= the tool's count).
 * `over`: every hit must be over the limit and served from the local over-limit cache.
 */
function statsProblems(before, after, { grpc: isGrpc, descriptors, requests, over = false }) {
  const d = (k) => (after[k] ?? 0) - (before[k] ?? 0);
  const p = 'ratelimit.service.rate_limit.bench.client_id.';
  const problems = [];
  const mustStay = [`${p}near_limit`, 'ratelimit.service.call.should_rate_limit.service_error', over ? `${p}within_limit` : `${p}over_limit`];
  for (const k of mustStay) {
    if (d(k) !== 0) problems.push(`service stat ${k} grew by ${d(k)}`);
  }
  if (!over && d(`${p}within_limit`) !== d(`${p}total_hits`)) problems.push('service: not every hit was within the limit');
  if (over && d(`${p}over_limit`) !== d(`${p}total_hits`)) problems.push('service: not every hit was over the limit');
  if (over && d(`${p}over_limit_with_local_cache`) !== d(`${p}total_hits`)) {
    problems.push(`service: ${d(`${p}over_limit_with_local_cache`)} of ${d(`${p}total_hits`)} hits served from the local cache, want all`);
  }
  if (d(`${p}total_hits`) < requests * descriptors) {
    problems.push(`service counted ${d(`${p}total_hits`)} hits, fewer than ${requests} requests x ${descriptors} descriptors`);
  }
  if (isGrpc && d('ratelimit_server.ShouldRateLimit.total_requests') < requests) {
    problems.push(`service counted ${d('ratelimit_server.ShouldRateLimit.total_requests')} gRPC calls, fewer than ${requests}`);
  }
  return {
    problems,
    hits: d(`${p}total_hits`),
    calls: d(isGrpc ? 'ratelimit_server.ShouldRateLimit.total_requests' : `${p}total_hits`) / (isGrpc ? 1 : descriptors),
    localCacheHits: d(`${p}over_limit_with_local_cache`),
  };
}

const LOCAL_CACHE_CONFIG = `# Local over-limit cache benchmark: 1 per day, so every hit after the first is over the limit.
domain: bench
descriptors:
  - key: client_id
    rate_limit:
      unit: day
      requests_per_unit: 1
`;

const DISTINCT_CONFIG = `# Distinct-values benchmark: every value is its own counter (1e9 per day: never over, and
# counters live for the day, so MEMORY_MAX_KEYS is what bounds them; an hour would end mid-run).
domain: distinct
descriptors:
  - key: user
    rate_limit:
      unit: day
      requests_per_unit: 1000000000
`;

/** One grpc-js call (used to spend the 1-per-day budget before the local-cache run). */
async function grpcCall(addr, request) {
  const client = new RateLimitServiceClient(addr, grpc.credentials.createInsecure());
  try {
    return await new Promise((resolve, reject) =>
      client.shouldRateLimit(request, { deadline: Date.now() + 5000 }, (err, r) => (err ? reject(err) : resolve(r))),
    );
  } finally {
    client.close();
  }
}

/** Commands the service did not send for rate limiting: our INFO reads, ioredis's CLUSTER/PING/… */
const BOOKKEEPING = /^(info|ping|cluster|command|client|hello|select|config|readonly|auth)\b/;
function commandDelta(before, after) {
  const delta = {};
  for (const [k, v] of Object.entries(after)) if (v - (before[k] ?? 0) > 0) delta[k] = v - (before[k] ?? 0);
  const total = Object.entries(delta).filter(([k]) => !BOOKKEEPING.test(k)).reduce((a, [, v]) => a + v, 0);
  return { delta, total, incrby: delta['incrby'] ?? 0, expire: delta['expire'] ?? 0 };
}

// ---------------------------------------------------------------------------------------------
// Targets

/** [{ name, pass, value }] for a scenario (empty for ceilings). */
function targetsFor(s) {
  const t = [];
  const ratio = (min) => t.push({ name: `>= ${min} of ${s.ceilingId}`, pass: s.ratio != null && s.ratio >= min, value: s.ratio == null ? 'n/a' : s.ratio.toFixed(2) });
  const p99 = (max) => t.push({ name: `p99 @ half load < ${max} ms`, pass: s.half?.p99Ms != null && s.half.p99Ms < max, value: fmtMs(s.half?.p99Ms) });
  if (s.store === 'memory') {
    ratio(s.grpc ? TARGETS.memoryRatio[s.descriptors] : TARGETS.jsonRatio);
    p99(TARGETS.p99HalfMemoryMs);
  } else if (s.store === 'local-cache') {
    p99(TARGETS.p99HalfMemoryMs);
  } else if (s.store.startsWith('redis')) {
    // Worker mode uses two CPUs: its ratio to the one-CPU ceiling is shown, its target is scaling.
    // The target is for the default settings on Redis single; the other setups show their ratio.
    if (s.store === 'redis') ratio(TARGETS.redisRatio[s.descriptors]);
    p99(TARGETS.p99HalfRedisMs);
    // One INCRBY + one EXPIRE per descriptor, nothing else (a GET or a second pass would show here);
    // with REDIS_BATCH_SCRIPT also the EVALs (at most one per request; commandstats counts the
    // commands a script calls too).
    const per = s.redis?.perRequest;
    const max = 2 * s.descriptors + (s.store.includes('-script') ? 1 : 0);
    t.push({
      name: `<= ${max} Redis commands/request`,
      pass: per != null && per.total <= max * 1.01 && per.incrby <= s.descriptors * 1.01,
      value: per ? per.total.toFixed(2) : 'n/a',
    });
  }
  return t;
}

// ---------------------------------------------------------------------------------------------
// Main

const fmt = (n, digits = 0) => (n === null || n === undefined || Number.isNaN(n) ? 'n/a' : n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits }));
const fmtMs = (n) => (n === null || n === undefined ? 'n/a' : n < 10 ? `${n.toFixed(2)} ms` : `${n.toFixed(1)} ms`);
const fmtPct = (n) => (n == null ? 'n/a' : `${n.toFixed(0)} %`);
const fmtUs = (n) => (n == null ? 'n/a' : `${n.toFixed(1)} µs`);
/**
 * Server CPU time per call in µs: CPU seconds per second over the measured window (`cpuPercent`
 * / 100) divided by calls answered per second. Null without both.
 */
const cpuPerCallUs = (cpuPercent, rps) => (cpuPercent != null && rps ? (cpuPercent / 100 / rps) * 1e6 : null);
const log = (s) => console.error(`[bench] ${s}`);

async function main() {
  const goWanted = ['go-rls-grpc-1', 'go-rls-grpc-5'].some(want);
  const goBuilt = buildGoPrograms([...(process.env['BENCH_FORCE_NODE_LOADGEN'] === '1' ? [] : ['openloop']), ...(goWanted ? ['go-rls'] : [])]);
  OPENLOOP = goBuilt['openloop']?.binary ?? null;
  if (goBuilt['openloop']?.missing) log(`openloop: ${goBuilt['openloop'].missing}; half load on gRPC uses h2load --rps`);
  const req1 = grpcRequest(1);
  const req5 = grpcRequest(5);
  const frame1 = writeTmp('frame-1.bin', grpcFrame(req1));
  const frame5 = writeTmp('frame-5.bin', grpcFrame(req5));
  const jsonFile = writeTmp('body.json', JSON_BODY);
  const scenarios = [];
  const rss = {};
  const allProblems = [];
  let distinct = null;

  const record = (s) => {
    s.cpuPerCallUs = cpuPerCallUs(s.serverCpu, s.rps);
    if (s.half) s.half.cpuPerCallUs = cpuPerCallUs(s.half.serverCpu, s.half.rps);
    // A ratio only means something when the server, not the load generator, is the bottleneck.
    s.notes = [];
    if (s.genCpu != null && s.genCpu >= 90) s.notes.push('load generator saturated');
    if (s.serverCpu != null && s.serverCpu < 85) s.notes.push('server core not saturated');
    if (s.half?.rateError != null && Math.abs(s.half.rateError) > 0.1) s.notes.push(`half-load rate off by ${(s.half.rateError * 100).toFixed(0)} %`);
    if (s.half?.skipped) s.notes.push(`no half-load run: ${s.half.skipped}`);
    s.targets = targetsFor(s);
    scenarios.push(s);
    for (const p of s.problems) allProblems.push(`${s.id}: ${p}`);
    log(
      `${s.id}: ${fmt(s.rps)} req/s, mean ${fmtMs(s.meanMs)}, p99 ${fmtMs(s.p99Ms)}; half load ${fmt(s.half?.rps)} req/s: ` +
        `p50 ${fmtMs(s.half?.p50Ms)}, p99 ${fmtMs(s.half?.p99Ms)}` +
        `${s.redis ? `; Redis ${s.redis.perRequest.total.toFixed(2)} commands/request` : ''}` +
        `${s.problems.length ? `  PROBLEMS: ${s.problems.join('; ')}` : ''}`,
    );
  };

  /** Verify, peak run, half-load run, service counters (and Redis commandstats) for one scenario. */
  const serviceScenario = async (svc, s, redisNodes = null) => {
    log(`${s.id}: ${s.label}`);
    const code = s.store === 'local-cache' ? 2 : 1;
    const v = s.grpc ? await verifyGrpc(svc.grpcAddr, s.frame, s.req, s.n, code) : await verifyJson(svc.httpAddr);
    let r = { problems: v.problems };
    let half = null;
    let redis = null;
    if (!v.problems.length) {
      const extraPids = redisNodes ? redisNodes.map((n) => n.pid) : [];
      const cmd0 = redisNodes ? await commandStats(redisNodes) : null;
      const before = await fetchStats(svc.debugAddr);
      r = s.grpc ? await grpcLoad(svc.grpcAddr, s.frame, svc.pid, v.frameLength, extraPids) : await jsonLoad(svc.httpAddr, jsonFile, svc.pid, extraPids);
      if (!r.problems.length) {
        log(`${s.id}: half load (${fmt((r.rps ?? 0) / 2)} req/s)`);
        half = await halfLoad(r, {
          grpc: s.grpc,
          addr: s.grpc ? svc.grpcAddr : svc.httpAddr,
          frameFile: s.frame,
          serverPid: svc.pid,
          frameLength: v.frameLength,
          bodyFile: jsonFile,
          extraPids,
          worstGcPause: svc.worstGcPause,
        });
      }
      const after = await fetchStats(svc.debugAddr);
      const cmd1 = redisNodes ? await commandStats(redisNodes) : null;
      const st = statsProblems(before, after, {
        grpc: s.grpc,
        descriptors: s.n,
        requests: (r.requests ?? 0) + (half?.requests ?? 0),
        over: s.store === 'local-cache',
      });
      r.problems.push(...st.problems, ...(half?.problems ?? []).map((p) => `half load: ${p}`));
      Object.assign(r, { serviceHits: st.hits, serviceCalls: st.calls, localCacheHits: st.localCacheHits });
      if (cmd0 && cmd1 && st.calls > 0) {
        const cd = commandDelta(cmd0, cmd1);
        redis = {
          nodes: redisNodes.length,
          serviceCalls: st.calls,
          commands: cd.delta,
          perRequest: { total: cd.total / st.calls, incrby: cd.incrby / st.calls, expire: cd.expire / st.calls },
          cpuPeakPercent: r.extraCpu?.every((c) => c != null) ? r.extraCpu.reduce((a, b) => a + b, 0) : null,
        };
      }
    }
    const ceiling = scenarios.find((c) => c.id === s.ceiling);
    const ratio = ceiling?.rps && r.rps ? r.rps / ceiling.rps : null;
    const { req, frame, n, ...meta } = s;
    record({ ...meta, kind: 'service', descriptors: n, ceilingId: s.ceiling, ratio, ...r, half, redis, peakRssMiBSoFar: peakRssMiB(svc.pid) });
  };

  /**
   * A gRPC server without the service's /stats (the bare ceiling, the Go service): verify, peak
   * run, half-load run. `statuses`: how many statuses its answer holds; `ceiling`: the ratio's base.
   */
  const plainGrpcScenario = async (srv, addr, s) => {
    log(`${s.id}: ${s.label}`);
    const v = await verifyGrpc(addr, s.frame, s.req, s.statuses);
    const r = v.problems.length ? { problems: v.problems } : await grpcLoad(addr, s.frame, srv.pid, v.frameLength);
    const half =
      v.problems.length || r.problems.length
        ? null
        : await halfLoad(r, { grpc: true, addr, frameFile: s.frame, serverPid: srv.pid, frameLength: v.frameLength, worstGcPause: srv.worstGcPause });
    if (half?.problems) r.problems.push(...half.problems.map((p) => `half load: ${p}`));
    const { req, frame, statuses, ceiling, ...meta } = s;
    const base = ceiling ? scenarios.find((c) => c.id === ceiling) : undefined;
    const vs = ceiling ? { ceilingId: ceiling, ratio: base?.rps && r.rps ? r.rps / base.rps : null } : {};
    record({ ...meta, grpc: true, ...vs, ...r, half, peakRssMiBSoFar: peakRssMiB(srv.pid) });
  };

  log(`${machine.nproc} CPUs, ${machine.cpuModel}, Node ${machine.node}; pinning: ${machine.pinning}`);
  log(`load: ${machine.h2load ?? 'node-load (fallback)'} for gRPC, ${machine.wrk ?? 'node-load (fallback)'} for /json; ` +
    `${CFG.warmupSeconds} s warm-up + ${CFG.seconds} s measured (+ ${CFG.seconds} s at half load), ${CFG.connections} connections x ${CFG.streams} streams`);

  const frames = [[1, req1, frame1], [5, req5, frame5]];

  // a. bare gRPC ceiling
  if (want('bare-grpc-1') || want('bare-grpc-5')) {
    const srv = await startServer('bare gRPC', [path.join(__dirname, 'bare-grpc.js')], { PATH: process.env['PATH'] }, /listening (\d+)/);
    const addr = `127.0.0.1:${srv.match[1]}`;
    try {
      for (const [n, req, frame] of frames.filter(([n]) => want(`bare-grpc-${n}`))) {
        // The bare server always answers one status.
        await plainGrpcScenario(srv, addr, { id: `bare-grpc-${n}`, label: `Bare grpc-js ceiling, ${n}-descriptor request`, kind: 'ceiling', store: 'none', descriptors: n, statuses: 1, req, frame });
      }
      rss['bare-grpc'] = peakRssMiB(srv.pid);
    } finally {
      await srv.stop();
    }
  }

  // c (ceiling). bare node:http
  if (want('bare-json')) {
    const srv = await startServer('bare HTTP', [path.join(__dirname, 'bare-http.js')], { PATH: process.env['PATH'] }, /listening (\d+)/);
    const addr = `127.0.0.1:${srv.match[1]}`;
    try {
      log('bare-json: bare node:http server, POST /json');
      const v = await verifyJson(addr);
      const r = v.problems.length ? { problems: v.problems } : await jsonLoad(addr, jsonFile, srv.pid);
      const half = v.problems.length || r.problems.length ? null : await halfLoad(r, { grpc: false, addr, serverPid: srv.pid, bodyFile: jsonFile, worstGcPause: srv.worstGcPause });
      if (half?.problems) r.problems.push(...half.problems.map((p) => `half load: ${p}`));
      record({ id: 'bare-json', label: 'Bare node:http ceiling, POST /json', kind: 'ceiling', store: 'none', grpc: false, descriptors: 1, ...r, half, peakRssMiBSoFar: peakRssMiB(srv.pid) });
      rss['bare-http'] = peakRssMiB(srv.pid);
    } finally {
      await srv.stop();
    }
  }

  // b + c. the real service, memory store
  if (want('service-grpc-1') || want('service-grpc-5')) {
    const srv = await startService('memory', SERVICE_CONFIG);
    try {
      if (want('service-grpc-1')) {
        await serviceScenario(srv, { id: 'service-grpc-1', ceiling: 'bare-grpc-1', label: 'Service gRPC, 1 descriptor, memory store', store: 'memory', grpc: true, n: 1, req: req1, frame: frame1 });
      }
      if (want('service-grpc-5')) {
        await serviceScenario(srv, { id: 'service-grpc-5', ceiling: 'bare-grpc-5', label: 'Service gRPC, 5 descriptors, memory store', store: 'memory', grpc: true, n: 5, req: req5, frame: frame5 });
      }
      rss['service-memory'] = peakRssMiB(srv.pid);
    } finally {
      await srv.stop();
    }
  }
  // b2. a Go service doing the same work (bench/go-rls), one core as the service: the same frames,
  // load and half-load run as service-grpc-N, for the CPU per call of each.
  if (goWanted) {
    const ids = frames.map(([n]) => `go-rls-grpc-${n}`).filter(want);
    const { binary, missing } = goBuilt['go-rls'];
    let srv = null;
    try {
      if (!binary) throw new Error(missing);
      srv = await startProcess('go-rls', binary, ['-addr', '127.0.0.1:0'], { PATH: process.env['PATH'], GOMAXPROCS: '1' }, /listening (\S+)/);
      for (const [n, req, frame] of frames.filter(([n]) => want(`go-rls-grpc-${n}`))) {
        await plainGrpcScenario(srv, srv.match[1], {
          id: `go-rls-grpc-${n}`,
          ceiling: `bare-grpc-${n}`,
          label: `Go service (bench/go-rls: grpc-go, GOMAXPROCS=1), ${n} descriptor${n > 1 ? 's' : ''}, map in memory`,
          kind: 'go',
          store: 'go-memory',
          descriptors: n,
          statuses: n,
          req,
          frame,
        });
      }
      rss['go-rls'] = peakRssMiB(srv.pid);
    } catch (err) {
      for (const id of ids) allProblems.push(`${id}: ${err.message.split('\n')[0]}`);
      log(`go-rls: ${binary ? err.stack : err.message}`);
    } finally {
      if (srv) await srv.stop();
    }
  }
  // /json on a fresh process, as its ceiling runs.
  if (want('service-json')) {
    const srv = await startService('memory-json', SERVICE_CONFIG);
    try {
      await serviceScenario(srv, { id: 'service-json', ceiling: 'bare-json', label: 'Service POST /json, 1 descriptor, memory store', store: 'memory', grpc: false, n: 1 });
      rss['service-memory-json'] = peakRssMiB(srv.pid);
    } finally {
      await srv.stop();
    }
  }
  // The other gRPC transport on the memory store, for comparison with the default (socket):
  // grpc-js (the gRPC library's server).
  for (const [transport, short] of [['grpc-js', 'grpcjs']]) {
    if (!want(`service-${short}-grpc-1`) && !want(`service-${short}-grpc-5`)) continue;
    const srv = await startService(`memory-${short}`, SERVICE_CONFIG, { GRPC_TRANSPORT: transport });
    try {
      for (const [n, req, frame] of frames.filter(([n]) => want(`service-${short}-grpc-${n}`))) {
        await serviceScenario(srv, {
          id: `service-${short}-grpc-${n}`,
          ceiling: `bare-grpc-${n}`,
          label: `Service gRPC, ${n} descriptor${n > 1 ? 's' : ''}, memory store, GRPC_TRANSPORT=${transport}`,
          store: `memory-${short}`,
          grpc: true,
          n,
          req,
          frame,
        });
      }
      rss[`service-memory-${short}`] = peakRssMiB(srv.pid);
    } finally {
      await srv.stop();
    }
  }

  // d. local over-limit cache: 1 per day, the first call spends it, everything after is cached.
  if (want('service-local-cache-1')) {
    const srv = await startService('local-cache', LOCAL_CACHE_CONFIG, { LOCAL_CACHE_SIZE_IN_BYTES: '1048576' });
    try {
      const first = await grpcCall(srv.grpcAddr, req1);
      if (first.overallCode !== 1) allProblems.push(`service-local-cache-1: the first call was not OK (${first.overallCode})`);
      await serviceScenario(srv, {
        id: 'service-local-cache-1',
        ceiling: 'bare-grpc-1',
        label: 'Service gRPC, 1 descriptor, over limit from the local cache (memory store)',
        store: 'local-cache',
        grpc: true,
        n: 1,
        req: req1,
        frame: frame1,
      });
      rss['service-local-cache'] = peakRssMiB(srv.pid);
    } finally {
      await srv.stop();
    }
  }

  // e. Redis: single server, then a 3-master cluster (Redis on the load generator's CPU 1).
  if (CFG.redis) {
    const missing = redisLib.available();
    const wrap = (c, a) => pinned(1, c, a);
    const setups = [
      { key: 'redis', label: 'Redis single', start: () => redisLib.startRedis({ wrap }), env: (r) => ({ REDIS_URL: r.address }), nodes: (r) => [r] },
      {
        key: 'redis-cluster',
        label: 'Redis cluster (3 masters)',
        start: () => redisLib.startCluster(3, { wrap }),
        env: (c) => ({ REDIS_TYPE: 'cluster', REDIS_URL: c.url }),
        nodes: (c) => c.nodes,
      },
    ];
    // The same two with REDIS_BATCH_SCRIPT (one EVAL per pipeline instead of INCRBY + EXPIRE pairs).
    for (const base of setups.slice()) {
      setups.push({
        ...base,
        key: `${base.key}-script`,
        label: `${base.label}, REDIS_BATCH_SCRIPT`,
        env: (r) => ({ ...base.env(r), REDIS_BATCH_SCRIPT: 'true' }),
      });
    }
    // Redis single on the gRPC library's server, for comparison with the default transport.
    setups.push({
      ...setups[0],
      key: 'redis-grpcjs',
      label: 'Redis single, GRPC_TRANSPORT=grpc-js',
      env: (r) => ({ ...setups[0].env(r), GRPC_TRANSPORT: 'grpc-js' }),
    });
    for (const setup of setups) {
      if (!want(`${setup.key}-grpc-1`) && !want(`${setup.key}-grpc-5`)) continue;
      if (missing) {
        allProblems.push(`${setup.key}: ${missing}`);
        continue;
      }
      let redis = null;
      let srv = null;
      try {
        redis = await setup.start();
        srv = await startService(setup.key, SERVICE_CONFIG, { BACKEND_TYPE: 'redis', REDIS_SOCKET_TYPE: 'tcp', ...setup.env(redis) });
        for (const [n, req, frame] of frames.filter(([n]) => want(`${setup.key}-grpc-${n}`))) {
          await serviceScenario(
            srv,
            {
              id: `${setup.key}-grpc-${n}`,
              ceiling: `bare-grpc-${n}`,
              label: `Service gRPC, ${n} descriptor${n > 1 ? 's' : ''}, ${setup.label}`,
              store: setup.key,
              grpc: true,
              n,
              req,
              frame,
            },
            setup.nodes(redis),
          );
        }
        rss[`service-${setup.key}`] = peakRssMiB(srv.pid);
      } catch (err) {
        allProblems.push(`${setup.key}: ${err.message.split('\n')[0]}`);
        log(`${setup.key}: ${err.stack}`);
      } finally {
        if (srv) await srv.stop();
        if (redis) await redis.stop();
      }
    }
  }

  // e2. Worker mode (WORKERS=N, node:cluster) on Redis single: the service may use CPUs 0 and 1
  // (the load generator and Redis stay on CPU 1), once with one process, once with two workers.
  if (CFG.redis && !redisLib.available() && PIN && machine.nproc >= 2 && (want('redis-workers-1-grpc-1') || want('redis-workers-2-grpc-1'))) {
    const wrap = (c, a) => pinned(1, c, a);
    let redis = null;
    try {
      redis = await redisLib.startRedis({ wrap });
      for (const workers of [1, 2].filter((w) => want(`redis-workers-${w}-grpc-1`))) {
        const srv = await startService(`redis-workers-${workers}`, SERVICE_CONFIG, { BACKEND_TYPE: 'redis', REDIS_SOCKET_TYPE: 'tcp', REDIS_URL: redis.address, WORKERS: String(workers) }, '0,1');
        try {
          await serviceScenario(
            srv,
            {
              id: `redis-workers-${workers}-grpc-1`,
              ceiling: 'bare-grpc-1',
              label: `Service gRPC, 1 descriptor, Redis single, WORKERS=${workers} (service on CPUs 0-1)`,
              store: 'redis-workers',
              grpc: true,
              n: 1,
              req: req1,
              frame: frame1,
            },
            [redis],
          );
          rss[`service-redis-workers-${workers}`] = peakRssMiB(srv.pid);
        } finally {
          await srv.stop();
        }
      }
    } catch (err) {
      allProblems.push(`redis-workers: ${err.message.split('\n')[0]}`);
      log(`redis-workers: ${err.stack}`);
    } finally {
      if (redis) await redis.stop();
    }
  }

  // f. a stream of distinct descriptor values: memory must stay bounded (MEMORY_MAX_KEYS).
  if (CFG.distinct > 0 && want('distinct')) {
    log(`distinct: up to ${fmt(CFG.distinct)} distinct values in at most ${CFG.distinctSeconds} s, MEMORY_MAX_KEYS=${CFG.memoryMaxKeys}`);
    const srv = await startService('distinct', DISTINCT_CONFIG, { MEMORY_MAX_KEYS: String(CFG.memoryMaxKeys) });
    try {
      distinct = await distinctScenario(srv);
      for (const p of distinct.problems) allProblems.push(`distinct: ${p}`);
      rss['service-distinct'] = peakRssMiB(srv.pid);
    } finally {
      await srv.stop();
    }
  }

  for (const id of CFG.scenarios) {
    if (!scenarios.some((s) => s.id === id) && !(id === 'distinct' && distinct) && !allProblems.some((p) => p.startsWith(`${id}:`))) {
      allProblems.push(`BENCH_SCENARIOS: ${id} did not run (unknown id, or skipped by another setting)`);
    }
  }

  // Output
  const results = {
    machine,
    settings: { ...CFG, concurrency: CONCURRENCY, wrkConnections: CONCURRENCY, h2loadThreads: 1, wrkThreads: 1, redisPinning: PIN ? 'taskset -c 1 (with the load generator)' : 'none' },
    targets: TARGETS,
    scenarios: scenarios.map(({ raw, ...s }) => ({ ...s, toolOutput: raw })),
    distinct,
    peakRssMiB: rss,
    problems: allProblems,
  };
  const md = markdown(scenarios, distinct, rss, allProblems);
  fs.mkdirSync(RESULTS, { recursive: true });
  fs.writeFileSync(path.join(RESULTS, 'latest.json'), `${JSON.stringify(results, null, 2)}\n`);
  fs.writeFileSync(path.join(RESULTS, 'latest.md'), md);
  console.log(md);
  if (allProblems.length) process.exitCode = 1;
}

/**
 * Streams distinct values through bench/distinct-load.js (CPU 1) while sampling the service's
 * VmRSS and its memory-store gauges every 2 s.
 */
async function distinctScenario(srv) {
  const problems = [];
  const samples = [];
  const t0 = performance.now();
  const sample = async () => {
    let st = {};
    try {
      st = await fetchStats(srv.debugAddr);
    } catch {
      /* keep the RSS sample */
    }
    samples.push({
      t: Number(((performance.now() - t0) / 1000).toFixed(1)),
      rssMiB: rssMiB(srv.pid),
      keys: st['ratelimit.memory.keys'] ?? null,
      overflowed: st['ratelimit.memory.keys_overflowed'] ?? null,
    });
  };
  await sample();
  const cpu0 = cpuSample([srv.pid]);
  const [c, a] = pinned(1, process.execPath, [path.join(__dirname, 'distinct-load.js'), srv.grpcAddr, String(CFG.distinct), String(CFG.distinctSeconds), '64', '4']);
  const proc = track(spawn(c, a, { stdio: ['ignore', 'pipe', 'pipe'], cwd: ROOT }));
  let stdout = '';
  let stderr = '';
  proc.stdout.on('data', (d) => (stdout += d));
  proc.stderr.on('data', (d) => (stderr += d));
  const killer = setTimeout(() => proc.kill('SIGKILL'), (CFG.distinctSeconds + 30) * 1000);
  let finished = false;
  const exited = new Promise((resolve) => proc.once('exit', (code, signal) => resolve(code ?? signal))).then((code) => {
    finished = true;
    return code;
  });
  while (!finished) {
    await Promise.race([exited, sleep(2000)]);
    if (!finished) await sample();
  }
  const code = await exited;
  clearTimeout(killer);
  const cpu1 = cpuSample([srv.pid]);
  await sample();
  let res = null;
  try {
    res = JSON.parse(stdout.trim().split('\n').pop());
  } catch {
    problems.push(`distinct-load exited ${code}: ${(stdout + stderr).slice(-500)}`);
  }
  if (res?.errors) problems.push(`${res.errors} failed calls (first: ${res.firstError})`);
  if (res && res.ok === 0) problems.push('no call succeeded');
  const rsses = samples.map((s) => s.rssMiB).filter((x) => x != null);
  const keys = samples.map((s) => s.keys).filter((x) => x != null);
  const end = samples[samples.length - 1];
  const maxKeys = keys.length ? Math.max(...keys) : null;
  if (maxKeys != null && maxKeys > CFG.memoryMaxKeys) problems.push(`ratelimit.memory.keys reached ${maxKeys} > MEMORY_MAX_KEYS ${CFG.memoryMaxKeys}`);
  const atCap = samples.find((s) => s.keys != null && s.keys >= CFG.memoryMaxKeys);
  const rssGrowthAfterCap = atCap?.rssMiB && end.rssMiB ? end.rssMiB / atCap.rssMiB - 1 : null;
  // V8 keeps growing its heap for a while after the live data stops growing (it collects less
  // often while it may), so the RSS right at the cap is not the plateau. Bounded means: flat over
  // the second half of the time after the cap.
  const mid = atCap ? samples.find((s) => s.t >= (atCap.t + end.t) / 2 && s.rssMiB != null) : undefined;
  const rssGrowthLateHalf = mid?.rssMiB && end.rssMiB && mid !== end ? end.rssMiB / mid.rssMiB - 1 : null;
  const sent = res?.sent ?? 0;
  // Bounded: the key count never passes the cap, the store counted new keys in its overflow once it was full, and the RSS
  // grew by at most 10 % over the second half of the time after the cap.
  const bounded =
    maxKeys != null &&
    maxKeys <= CFG.memoryMaxKeys &&
    (sent <= CFG.memoryMaxKeys || (end.overflowed ?? 0) > 0) &&
    (atCap == null || (rssGrowthLateHalf != null && rssGrowthLateHalf <= 0.1));
  const out = {
    requested: CFG.distinct,
    timeCapSeconds: CFG.distinctSeconds,
    memoryMaxKeys: CFG.memoryMaxKeys,
    sent,
    ok: res?.ok ?? 0,
    errors: res?.errors ?? null,
    seconds: res?.seconds ?? null,
    rps: res?.rps ?? null,
    serverCpu: cpuPercent(cpu0, cpu1, 0),
    rssStartMiB: samples[0].rssMiB,
    rssPeakMiB: rsses.length ? Math.max(...rsses) : null,
    rssEndMiB: end.rssMiB,
    rssAtCapMiB: atCap?.rssMiB ?? null,
    rssGrowthAfterCap,
    rssGrowthLateHalf,
    keysEnd: end.keys,
    keysMax: maxKeys,
    overflowedEnd: end.overflowed,
    vmHwmMiB: peakRssMiB(srv.pid),
    bounded,
    samples,
    problems,
  };
  log(
    `distinct: sent ${fmt(sent)} of ${fmt(CFG.distinct)} in ${fmt(out.seconds, 1)} s (${fmt(out.rps)} req/s); RSS start ${fmt(out.rssStartMiB, 1)} / ` +
      `peak ${fmt(out.rssPeakMiB, 1)} / end ${fmt(out.rssEndMiB, 1)} MiB; keys ${fmt(out.keysEnd)}, overflowed ${fmt(out.overflowedEnd)}`,
  );
  return out;
}

function markdown(scenarios, distinct, rss, allProblems) {
  const header = `Machine: ${machine.nproc} CPUs (nproc), ${machine.cpuModel}, Node ${machine.node}, Linux ${machine.kernel}, ${machine.date}`;
  const targetCell = (s) => (s.targets.length ? s.targets.map((t) => `${t.pass ? 'PASS' : 'FAIL'} ${t.name} (${t.value})`).join('<br>') : '—');
  const lines = [
    '# Rate limit service benchmark',
    '',
    header,
    '',
    `Load: ${machine.h2load ?? 'node-load grpc-js client (FALLBACK: h2load unavailable)'} for gRPC, ` +
      `${machine.wrk ?? 'node-load node:http (FALLBACK: wrk unavailable)'} for /json; ` +
      `${CFG.warmupSeconds} s warm-up + ${CFG.seconds} s measured at peak, then ${CFG.seconds} s at a fixed rate of half that peak ` +
      `(gRPC: ${OPENLOOP ? `bench/openloop, grpc-go, Poisson arrivals on each of ${CFG.halfLoadConnections} connections, up to ${fmt(OPENLOOP_MAX_RPS)} calls/s; above that ` : ''}h2load --rps on ${CFG.halfLoadConnections} connections of one stream; worst GC pause from the server's --trace-gc); ` +
      `${CONCURRENCY} requests in flight at peak (gRPC: ${CFG.connections} HTTP/2 connections x ${CFG.streams} streams; /json: ${CONCURRENCY} HTTP/1.1 connections), 1 client thread. ` +
      `Pinning: ${machine.pinning}${PIN ? '; Redis servers: CPU 1 (with the load generator)' : ''}. All traffic on 127.0.0.1.`,
    '',
    '| Scenario | Load generator | Peak req/s | vs ceiling | Half-load req/s | p50 @ half | p99 @ half | p99.9 @ half | Worst GC pause @ half | Mean / p99 at peak | Server CPU | Server CPU per call, peak / half | Generator CPU | Peak RSS | Targets | Checks |',
    '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|',
    ...scenarios.map(
      (s) =>
        `| ${s.label} | ${s.tool ?? 'n/a'} | ${fmt(s.rps)} | ` +
        `${s.kind === 'ceiling' ? '(ceiling)' : s.ratio == null ? 'n/a' : `${s.ratio.toFixed(2)} (${s.ceilingId})`} | ` +
        `${s.half?.rps != null ? `${fmt(s.half.rps)} (target ${fmt(s.half.targetRps)}; ${s.half.tool ?? ''})` : 'n/a'} | ${fmtMs(s.half?.p50Ms)} | ${fmtMs(s.half?.p99Ms)} | ${fmtMs(s.half?.p999Ms)} | ${fmtMs(s.half?.gcPauseMs)} | ` +
        `${fmtMs(s.meanMs)} / ${fmtMs(s.p99Ms)} | ${fmtPct(s.serverCpu)} | ${fmtUs(s.cpuPerCallUs)} / ${fmtUs(s.half?.cpuPerCallUs)} | ${fmtPct(s.genCpu)} | ${fmt(s.peakRssMiBSoFar, 1)} MiB | ${targetCell(s)} | ` +
        `${s.problems.length ? `FAILED: ${s.problems.join('; ').replace(/\|/g, '\\|')}` : 'ok'}${s.notes?.length ? ` (${s.notes.join('; ')})` : ''} |`,
    ),
    '',
  ];
  const goPairs = [1, 5]
    .map((n) => ({ n, svc: scenarios.find((s) => s.id === `service-grpc-${n}`), go: scenarios.find((s) => s.id === `go-rls-grpc-${n}`) }))
    .filter(({ svc, go }) => svc?.cpuPerCallUs && go?.cpuPerCallUs);
  if (goPairs.length) {
    const ratio = (a, b) => (a && b ? `${(a / b).toFixed(2)}×` : 'n/a');
    lines.push(
      '**CPU per call against a Go service doing the same work** (`bench/go-rls`: grpc-go, `GOMAXPROCS=1`, on CPU 0 as the service; ' +
        'the same frames, load and half-load run; server CPU time ÷ calls answered over the measured window): ' +
        goPairs
          .map(
            ({ n, svc, go }) =>
              `${n} descriptor${n > 1 ? 's' : ''}: service ${fmtUs(svc.cpuPerCallUs)}, Go ${fmtUs(go.cpuPerCallUs)}, **service ÷ Go ${ratio(svc.cpuPerCallUs, go.cpuPerCallUs)}** at peak ` +
              `(half load: ${fmtUs(svc.half?.cpuPerCallUs)} against ${fmtUs(go.half?.cpuPerCallUs)}, ${ratio(svc.half?.cpuPerCallUs, go.half?.cpuPerCallUs)})`,
          )
          .join('; ') +
        '. Below 1× the service spends less CPU per call than the Go service.',
      '',
    );
  }
  const redisRows = scenarios.filter((s) => s.redis);
  if (redisRows.length) {
    lines.push(
      '**Redis commands per request** (INFO commandstats before/after the peak and half-load runs, summed over the nodes; ' +
        'divided by the gRPC calls the service counted over the same window; our INFO reads and ioredis bookkeeping such as CLUSTER SLOTS are left out). ' +
        'Pipelines are not visible in commandstats: the service sends each request\'s commands as one pipeline (cluster: one per master node). ' +
        'With REDIS_BATCH_SCRIPT the INCRBY/EXPIRE pairs of a pipeline (the requests decided in one event-loop turn) run inside one EVAL; commandstats counts the EVAL and the commands it calls.',
      '',
      '| Scenario | Nodes | Calls | Commands / request | INCRBY / request | EXPIRE / request | Other commands | Redis CPU at peak (sum) |',
      '|---|---:|---:|---:|---:|---:|---|---:|',
      ...redisRows.map((s) => {
        const other = Object.entries(s.redis.commands).filter(([k]) => k !== 'incrby' && k !== 'expire').map(([k, v]) => `${k} ${v}`).join(', ') || '—';
        return `| ${s.label} | ${s.redis.nodes} | ${fmt(s.redis.serviceCalls)} | ${s.redis.perRequest.total.toFixed(3)} | ${s.redis.perRequest.incrby.toFixed(3)} | ${s.redis.perRequest.expire.toFixed(3)} | ${other} | ${fmtPct(s.redis.cpuPeakPercent)} |`;
      }),
      '',
    );
  }
  const w1 = scenarios.find((s) => s.id === 'redis-workers-1-grpc-1');
  const w2 = scenarios.find((s) => s.id === 'redis-workers-2-grpc-1');
  if (w1?.rps && w2?.rps) {
    lines.push(
      `**Worker mode** (WORKERS=2 against one process, Redis single, 1 descriptor; the service may run on CPUs 0 and 1, which it shares with the load generator and Redis on CPU 1): ` +
        `${fmt(w1.rps)} → ${fmt(w2.rps)} req/s, **${(w2.rps / w1.rps).toFixed(2)}×** (server CPU ${fmtPct(w1.serverCpu)} → ${fmtPct(w2.serverCpu)}, load generator ${fmtPct(w1.genCpu)} → ${fmtPct(w2.genCpu)}). ` +
        'On a machine with cores to spare for the load generator and Redis, the scaling is bounded by the cores given to the workers.',
      '',
    );
  }
  if (distinct) {
    const d = distinct;
    lines.push(
      `**Distinct values stream** (bench/distinct-load.js: raw node:http2 with hand-built frames, 64 calls in flight over 4 connections, to the service (default transport); domain \`distinct\`, one new \`user\` value per call, 1e9/day; MEMORY_MAX_KEYS=${fmt(d.memoryMaxKeys)}):`,
      '',
      '| Sent | Requested | Seconds | req/s | Errors | Server CPU | RSS start | RSS peak | RSS end | RSS when the cap was reached | RSS growth, 2nd half after the cap | memory.keys (end / max) | memory.keys_overflowed | Bounded (≤ 10 % late growth) |',
      '|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|',
      `| ${fmt(d.sent)} | ${fmt(d.requested)} (cap ${d.timeCapSeconds} s) | ${fmt(d.seconds, 1)} | ${fmt(d.rps)} | ${fmt(d.errors)} | ${fmtPct(d.serverCpu)} | ` +
        `${fmt(d.rssStartMiB, 1)} MiB | ${fmt(d.rssPeakMiB, 1)} MiB | ${fmt(d.rssEndMiB, 1)} MiB | ` +
        `${d.rssAtCapMiB == null ? 'cap not reached' : `${fmt(d.rssAtCapMiB, 1)} MiB (then ${d.rssGrowthAfterCap >= 0 ? '+' : ''}${(d.rssGrowthAfterCap * 100).toFixed(0)} %)`} | ` +
        `${d.rssGrowthLateHalf == null ? '—' : `${d.rssGrowthLateHalf >= 0 ? '+' : ''}${(d.rssGrowthLateHalf * 100).toFixed(1)} %`} | ` +
        `${fmt(d.keysEnd)} / ${fmt(d.keysMax)} | ${fmt(d.overflowedEnd)} | ${d.bounded ? 'PASS' : 'FAIL'} |`,
      '',
    );
  }
  const allTargets = [
    ...scenarios.flatMap((s) => s.targets.map((t) => ({ ...t, id: s.id }))),
    ...(distinct ? [{ id: 'distinct', name: 'memory bounded', pass: distinct.bounded }] : []),
    ...(distinct && distinct.memoryMaxKeys >= 1_000_000 && distinct.rssAtCapMiB != null
      ? [
          { id: 'distinct', name: `RSS at 1M counters <= ${TARGETS.distinctRssMB} MB`, pass: distinct.rssEndMiB * 1.048576 <= TARGETS.distinctRssMB },
          { id: 'distinct', name: `RSS peak <= ${TARGETS.distinctPeakOverEnd} x end`, pass: distinct.rssPeakMiB <= TARGETS.distinctPeakOverEnd * distinct.rssEndMiB },
        ]
      : []),
  ];
  lines.push(
    `Targets: ${allTargets.filter((t) => t.pass).length} of ${allTargets.length} pass` +
      (allTargets.some((t) => !t.pass) ? ` (failing: ${allTargets.filter((t) => !t.pass).map((t) => `${t.id} ${t.name}`).join('; ')})` : '') +
      '. Targets are reported, not enforced: only failed checks make the run exit 1.',
    '',
    `Peak RSS (VmHWM at the end of each server's run): ${Object.entries(rss).map(([k, v]) => `${k} ${fmt(v, 1)} MiB`).join('; ')}.`,
    '',
    "Peak req/s and mean are the tool's own numbers; p99 at peak is wrk's --latency 99 % line, and for h2load (which prints no " +
      'percentiles) the 99th percentile of its per-request --log-file; p50/p99 at half load come from a second run at a fixed rate of ' +
      'half the peak (h2load --rps per connection; wrk with a per-connection delay from bench/post.lua). ' +
      'CPU columns are CPU time / wall time of the server and load generator processes over the measured peak window (100 % = one core); ' +
      'CPU per call is that server CPU ÷ the calls answered per second, at peak and at half load.',
    ...(allProblems.length ? ['', '**Problems:**', '', ...allProblems.map((p) => `- ${p}`)] : []),
    '',
  );
  return lines.join('\n');
}

main()
  .catch((err) => {
    console.error(err);
    process.exitCode = 1;
  })
  .finally(() => {
    killChildren();
    removeTmp();
  });
