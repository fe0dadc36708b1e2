'use strict';
/**
 * Benchmark suite (see bench/README.md). Starts each server pinned to CPU 0 and drives it from
 * CPU 1 with h2load (gRPC) or wrk (HTTP /json), all on 127.0.0.1, then writes
 * bench/results/latest.json and bench/results/latest.md and prints the table.
 *
 * Environment: BENCH_SECONDS (measured seconds per scenario, default 10), BENCH_WARMUP_SECONDS
 * (default 5), BENCH_CONNECTIONS (default 5), BENCH_STREAMS (in-flight requests per connection,
 * default 10; wrk opens CONNECTIONS*STREAMS HTTP/1.1 connections), BENCH_FORCE_NODE_LOADGEN=1
 * (use the Node fallback load generator instead of h2load and wrk).
 *
 * Needs a build (dist/): `make bench` builds first.
 */
const { spawn, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const http2 = require('node:http2');
const os = require('node:os');
const path = require('node:path');

const ROOT = path.resolve(__dirname, '..');
const GENERATED = path.join(ROOT, 'dist/generated/envoy/service/ratelimit/v3/rls.js');
const SERVICE = path.join(ROOT, 'dist/src/cli/ratelimit.js');
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

function intEnv(name, def, min, max) {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return def;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min || n > max) throw new Error(`${name} must be an integer in [${min}, ${max}], got ${raw}`);
  return n;
}

const CFG = {
  seconds: intEnv('BENCH_SECONDS', 10, 1, 300),
  warmupSeconds: intEnv('BENCH_WARMUP_SECONDS', 5, 0, 60),
  connections: intEnv('BENCH_CONNECTIONS', 5, 1, 64),
  streams: intEnv('BENCH_STREAMS', 10, 1, 100),
};
const CONCURRENCY = CFG.connections * CFG.streams;
const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'rl-bench-'));

// ---------------------------------------------------------------------------------------------
// Machine, tools, pinning

function sh(cmd, args) {
  const r = spawnSync(cmd, args, { encoding: 'utf8' });
  return r.status === 0 ? `${r.stdout}${r.stderr}`.trim() : null;
}
const NPROC = Number(sh('nproc', [])) || os.cpus().length;
const cpuModel = (/^model name\s*:\s*(.+)$/m.exec(fs.readFileSync('/proc/cpuinfo', 'utf8')) ?? [])[1] ?? 'unknown';
const PIN = NPROC >= 2 && sh('taskset', ['-c', '1', 'true']) !== null;
const H2LOAD = process.env['BENCH_FORCE_NODE_LOADGEN'] === '1' ? null : sh('h2load', ['--version']);
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
};

/** [cmd, args] run on `cpu` when pinning is possible. */
function pinned(cpu, cmd, args) {
  return PIN ? ['taskset', ['-c', String(cpu), cmd, ...args]] : [cmd, args];
}

// ---------------------------------------------------------------------------------------------
// Processes

const children = new Set();
function track(proc) {
  children.add(proc);
  proc.once('exit', () => children.delete(proc));
  return proc;
}
function killChildren() {
  for (const p of children) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
}
process.on('exit', killChildren);
for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => process.exit(130));

/** Starts a server on CPU 0 and waits until its output matches `ready`. */
function startServer(name, args, env, ready, timeoutMs = 20_000) {
  const [cmd, argv] = pinned(0, process.execPath, args);
  const proc = track(spawn(cmd, argv, { env, stdio: ['ignore', 'pipe', 'pipe'], cwd: ROOT }));
  let out = '';
  const exited = new Promise((resolve) => proc.once('exit', (code, signal) => resolve(code ?? signal)));
  const stop = async () => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
    const t = setTimeout(() => proc.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(t);
  };
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      void stop();
      reject(new Error(`${name} did not start within ${timeoutMs} ms:\n${out}`));
    }, timeoutMs);
    const onData = (d) => {
      out += d.toString();
      const m = ready.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve({ name, proc, pid: proc.pid, match: m, stop, output: () => out });
      }
    };
    proc.stdout.on('data', onData);
    proc.stderr.on('data', onData);
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`${name} exited (${code}) before it was ready:\n${out}`));
    });
  });
}

/** utime+stime of a process in clock ticks (USER_HZ = 100 on Linux), or null. */
function cpuTicks(pid) {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return Number(f[11]) + Number(f[12]);
  } catch {
    return null;
  }
}
function cpuSample(pids) {
  return { t: performance.now(), ticks: pids.map(cpuTicks) };
}
function cpuPercent(a, b, i) {
  if (!a || !b || a.ticks[i] === null || b.ticks[i] === null) return null;
  return ((b.ticks[i] - a.ticks[i]) / 100 / ((b.t - a.t) / 1000)) * 100;
}

/** VmHWM (peak resident set) of a live process in MiB. */
function peakRssMiB(pid) {
  const m = /^VmHWM:\s+(\d+) kB/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : null;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * Runs a load generator on CPU 1 to completion (killed after `timeoutMs`), sampling the CPU time
 * of the server and of the generator between `measureFrom` and `measureTo` seconds after start.
 */
async function runLoad(cmd, args, { env, serverPid, measureFrom, measureTo, timeoutMs }) {
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
    s0 = cpuSample([serverPid, proc.pid]);
    await sleep((measureTo - measureFrom) * 1000);
    s1 = cpuSample([serverPid, proc.pid]);
  })();
  const code = await exited;
  clearTimeout(killer);
  await Promise.race([sampler, sleep(0)]);
  return { code, stdout, stderr, serverCpu: cpuPercent(s0, s1, 0), genCpu: cpuPercent(s0, s1, 1) };
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

function checkResponse(res, descriptors, via) {
  const problems = [];
  if (res.overallCode !== 1) problems.push(`${via}: overallCode ${res.overallCode}, want OK (1)`);
  if (res.statuses.length !== descriptors) problems.push(`${via}: ${res.statuses.length} statuses, want ${descriptors}`);
  else if (res.statuses.some((s) => s.code !== 1)) problems.push(`${via}: a status is not OK`);
  return problems;
}

/**
 * Sends the exact frame bytes the load generator sends (node:http2, h2load's headers) and, as a
 * second opinion, the same request through a grpc-js client. Returns the response frame length.
 */
async function verifyGrpc(addr, frameFile, request, statuses = request.descriptors.length) {
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
    problems.push(...checkResponse(RateLimitResponse.decode(raw.body.subarray(5)), statuses, 'raw frame'));
  } else {
    problems.push(`raw frame: malformed response body (${raw.body.length} bytes)`);
  }
  const client = new RateLimitServiceClient(addr, grpc.credentials.createInsecure());
  try {
    const res = await new Promise((resolve, reject) =>
      client.shouldRateLimit(request, { deadline: Date.now() + 5000 }, (err, r) => (err ? reject(err) : resolve(r))),
    );
    problems.push(...checkResponse(res, statuses, 'grpc-js client'));
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

async function h2loadScenario(url, frameFile, serverPid, expectedFrameLength) {
  const logFile = path.join(TMP, `h2load-${Date.now()}.log`);
  const args = [
    '-t', '1',
    '-c', String(CFG.connections),
    '-m', String(CFG.streams),
    '-D', String(CFG.seconds),
    ...(CFG.warmupSeconds > 0 ? [`--warm-up-time=${CFG.warmupSeconds}`] : []),
    '-d', frameFile,
    '-H', 'content-type: application/grpc',
    '-H', 'te: trailers',
    `--log-file=${logFile}`,
    url,
  ];
  const r = await runLoad('h2load', args, {
    serverPid,
    measureFrom: CFG.warmupSeconds + 0.5,
    measureTo: CFG.warmupSeconds + CFG.seconds - 0.3,
    timeoutMs: (CFG.warmupSeconds + CFG.seconds + 30) * 1000,
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
  const p99 = durations.length ? durations[Math.min(durations.length - 1, Math.ceil(0.99 * durations.length) - 1)] : null;
  return {
    problems,
    tool: 'h2load',
    requests: succeeded,
    seconds: Number(fin[1]),
    rps: Number(fin[2]),
    meanMs: toMs(time[3]),
    p99Ms: p99,
    p99Source: `h2load --log-file (${durations.length} rows)`,
    dataBytesPerResponse: dataPerResponse,
    serverCpu: r.serverCpu,
    genCpu: r.genCpu,
    raw: out.trim(),
  };
}

async function wrkScenario(url, bodyFile, serverPid) {
  const lua = path.join(__dirname, 'post.lua');
  const env = { BENCH_BODY_FILE: bodyFile };
  const base = ['-t', '1', '-c', String(CONCURRENCY), '--timeout', '10s', '-s', lua];
  if (CFG.warmupSeconds > 0) {
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
    measureFrom: 0.5,
    measureTo: CFG.seconds - 0.3,
    timeoutMs: (CFG.seconds + 30) * 1000,
  });
  const out = r.stdout;
  const problems = [];
  const lat = /Latency\s+(\S+)\s+(\S+)\s+(\S+)/.exec(out);
  const p99 = /^\s*99%\s+(\S+)/m.exec(out);
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
    p99Ms: toMs(p99[1]),
    p99Source: 'wrk --latency',
    serverCpu: r.serverCpu,
    genCpu: r.genCpu,
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

function grpcLoad(addr, frameFile, serverPid, frameLength) {
  return H2LOAD
    ? h2loadScenario(`http://${addr}${GRPC_PATH}`, frameFile, serverPid, frameLength)
    : nodeScenario('grpc', addr, frameFile, serverPid);
}
function jsonLoad(addr, bodyFile, serverPid) {
  return WRK ? wrkScenario(`http://${addr}/json`, bodyFile, serverPid) : nodeScenario('http', `http://${addr}/json`, bodyFile, serverPid);
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

/** Checks the service's own counters over a scenario (warm-up included, so >= the tool's count). */
function statsProblems(before, after, { grpc: isGrpc, descriptors, requests }) {
  const d = (k) => (after[k] ?? 0) - (before[k] ?? 0);
  const p = 'ratelimit.service.rate_limit.bench.client_id.';
  const problems = [];
  for (const k of [`${p}over_limit`, `${p}near_limit`, 'ratelimit.service.call.should_rate_limit.service_error']) {
    if (d(k) !== 0) problems.push(`service stat ${k} grew by ${d(k)}`);
  }
  if (d(`${p}within_limit`) !== d(`${p}total_hits`)) problems.push('service: not every hit was within the limit');
  if (d(`${p}total_hits`) < requests * descriptors) {
    problems.push(`service counted ${d(`${p}total_hits`)} hits, fewer than ${requests} requests x ${descriptors} descriptors`);
  }
  if (isGrpc && d('ratelimit_server.ShouldRateLimit.total_requests') < requests) {
    problems.push(`service counted ${d('ratelimit_server.ShouldRateLimit.total_requests')} gRPC calls, fewer than ${requests}`);
  }
  return { problems, hits: d(`${p}total_hits`) };
}

const SERVICE_CONFIG = `# Benchmark config: one wildcard key, a limit no run can reach (1e9 per second).
domain: bench
descriptors:
  - key: client_id
    rate_limit:
      unit: second
      requests_per_unit: 1000000000
`;

function serviceEnv(root) {
  return {
    PATH: process.env['PATH'],
    BACKEND_TYPE: 'memory',
    RUNTIME_ROOT: root,
    RUNTIME_SUBDIRECTORY: 'ratelimit',
    RUNTIME_APPDIRECTORY: 'config',
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
}

// ---------------------------------------------------------------------------------------------
// Main

const fmt = (n, digits = 0) => (n === null || n === undefined || Number.isNaN(n) ? 'n/a' : n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits }));
const fmtMs = (n) => (n === null || n === undefined ? 'n/a' : n < 10 ? `${n.toFixed(2)} ms` : `${n.toFixed(1)} ms`);

async function main() {
  const req1 = grpcRequest(1);
  const req5 = grpcRequest(5);
  const frame1 = writeTmp('frame-1.bin', grpcFrame(req1));
  const frame5 = writeTmp('frame-5.bin', grpcFrame(req5));
  const jsonFile = writeTmp('body.json', JSON_BODY);
  const scenarios = [];
  const rss = {};
  const allProblems = [];
  const log = (s) => console.error(`[bench] ${s}`);

  const record = (s) => {
    // A ratio only means something when the server, not the load generator, is the bottleneck.
    s.notes = [];
    if (s.genCpu != null && s.genCpu >= 90) s.notes.push('load generator saturated');
    if (s.serverCpu != null && s.serverCpu < 85) s.notes.push('server core not saturated');
    scenarios.push(s);
    for (const p of s.problems) allProblems.push(`${s.id}: ${p}`);
    log(`${s.id}: ${fmt(s.rps)} req/s, mean ${fmtMs(s.meanMs)}, p99 ${fmtMs(s.p99Ms)}${s.problems.length ? `  PROBLEMS: ${s.problems.join('; ')}` : ''}`);
  };

  log(`${machine.nproc} CPUs, ${machine.cpuModel}, Node ${machine.node}; pinning: ${machine.pinning}`);
  log(`load: ${machine.h2load ?? 'node-load (fallback)'} for gRPC, ${machine.wrk ?? 'node-load (fallback)'} for /json; ` +
    `${CFG.warmupSeconds} s warm-up + ${CFG.seconds} s measured, ${CFG.connections} connections x ${CFG.streams} streams`);

  // a. bare gRPC ceiling
  {
    const srv = await startServer('bare gRPC', [path.join(__dirname, 'bare-grpc.js')], { PATH: process.env['PATH'] }, /listening (\d+)/);
    const addr = `127.0.0.1:${srv.match[1]}`;
    try {
      for (const [n, req, frame] of [[1, req1, frame1], [5, req5, frame5]]) {
        const id = `bare-grpc-${n}`;
        log(`${id}: bare grpc-js server, ${n}-descriptor request frame`);
        const v = await verifyGrpc(addr, frame, req, 1); // the bare server always answers one status
        const r = v.problems.length ? { problems: v.problems } : await grpcLoad(addr, frame, srv.pid, v.frameLength);
        record({ id, label: `Bare grpc-js ceiling, ${n}-descriptor request`, kind: 'ceiling', descriptors: n, ...r });
      }
      rss['bare-grpc'] = peakRssMiB(srv.pid);
    } finally {
      await srv.stop();
    }
  }

  // c (ceiling). bare node:http
  {
    const srv = await startServer('bare HTTP', [path.join(__dirname, 'bare-http.js')], { PATH: process.env['PATH'] }, /listening (\d+)/);
    const addr = `127.0.0.1:${srv.match[1]}`;
    try {
      log('bare-json: bare node:http server, POST /json');
      const v = await verifyJson(addr);
      const r = v.problems.length ? { problems: v.problems } : await jsonLoad(addr, jsonFile, srv.pid);
      record({ id: 'bare-json', label: 'Bare node:http ceiling, POST /json', kind: 'ceiling', descriptors: 1, ...r });
      rss['bare-http'] = peakRssMiB(srv.pid);
    } finally {
      await srv.stop();
    }
  }

  // b + c. the real service
  {
    const root = path.join(TMP, 'runtime', 'current');
    fs.mkdirSync(path.join(root, 'ratelimit', 'config'), { recursive: true });
    fs.writeFileSync(path.join(root, 'ratelimit', 'config', 'bench.yaml'), SERVICE_CONFIG);
    const srv = await startServer('ratelimit service', [SERVICE], serviceEnv(root), /listening: gRPC (\S+), HTTP (\S+), debug ([^\s"\\]+)/);
    const [, grpcAddr, httpAddr, debugAddr] = srv.match;
    try {
      const service = [
        { id: 'service-grpc-1', ceiling: 'bare-grpc-1', label: 'Service gRPC ShouldRateLimit, 1 descriptor', grpc: true, n: 1, req: req1, frame: frame1 },
        { id: 'service-grpc-5', ceiling: 'bare-grpc-5', label: 'Service gRPC ShouldRateLimit, 5 descriptors', grpc: true, n: 5, req: req5, frame: frame5 },
        { id: 'service-json', ceiling: 'bare-json', label: 'Service HTTP POST /json, 1 descriptor', grpc: false, n: 1 },
      ];
      for (const s of service) {
        log(`${s.id}: ${s.label}`);
        const v = s.grpc ? await verifyGrpc(grpcAddr, s.frame, s.req) : await verifyJson(httpAddr);
        let r = { problems: v.problems };
        if (!v.problems.length) {
          const before = await fetchStats(debugAddr);
          r = s.grpc ? await grpcLoad(grpcAddr, s.frame, srv.pid, v.frameLength) : await jsonLoad(httpAddr, jsonFile, srv.pid);
          const after = await fetchStats(debugAddr);
          const st = statsProblems(before, after, { grpc: s.grpc, descriptors: s.n, requests: r.requests ?? 0 });
          r.problems.push(...st.problems);
          r.serviceHits = st.hits;
        }
        const ceiling = scenarios.find((c) => c.id === s.ceiling);
        const ratio = ceiling?.rps && r.rps ? r.rps / ceiling.rps : null;
        record({ id: s.id, label: s.label, kind: 'service', descriptors: s.n, ceilingId: s.ceiling, ratio, ...r, peakRssMiBSoFar: peakRssMiB(srv.pid) });
      }
      rss['service'] = peakRssMiB(srv.pid);
    } finally {
      await srv.stop();
    }
  }

  // Output
  const results = {
    machine,
    settings: { ...CFG, concurrency: CONCURRENCY, wrkConnections: CONCURRENCY, h2loadThreads: 1, wrkThreads: 1 },
    scenarios: scenarios.map(({ raw, ...s }) => ({ ...s, toolOutput: raw })),
    peakRssMiB: rss,
    problems: allProblems,
  };
  const header =
    `Machine: ${machine.nproc} CPUs (nproc), ${machine.cpuModel}, Node ${machine.node}, Linux ${machine.kernel}, ${machine.date}`;
  const lines = [
    '# Rate limit service benchmark',
    '',
    header,
    '',
    `Load: ${machine.h2load ?? 'node-load grpc-js client (FALLBACK: h2load unavailable)'} for gRPC, ` +
      `${machine.wrk ?? 'node-load node:http (FALLBACK: wrk unavailable)'} for /json; ` +
      `${CFG.warmupSeconds} s warm-up + ${CFG.seconds} s measured per scenario; ` +
      `${CONCURRENCY} requests in flight (gRPC: ${CFG.connections} HTTP/2 connections x ${CFG.streams} streams; /json: ${CONCURRENCY} HTTP/1.1 connections), 1 client thread. ` +
      `Pinning: ${machine.pinning}. All traffic on 127.0.0.1.`,
    '',
    '| Scenario | Load generator | Requests/s | Mean latency | p99 latency | vs ceiling | Server CPU | Generator CPU | Checks |',
    '|---|---|---:|---:|---:|---:|---:|---:|---|',
    ...scenarios.map(
      (s) =>
        `| ${s.label} | ${s.tool ?? 'n/a'} | ${fmt(s.rps)} | ${fmtMs(s.meanMs)} | ${fmtMs(s.p99Ms)} | ` +
        `${s.kind === 'ceiling' ? '(ceiling)' : s.ratio === null ? 'n/a' : `${(s.ratio * 100).toFixed(1)} % of ${s.ceilingId}`} | ` +
        `${s.serverCpu == null ? 'n/a' : `${s.serverCpu.toFixed(0)} %`} | ${s.genCpu == null ? 'n/a' : `${s.genCpu.toFixed(0)} %`} | ` +
        `${s.problems.length ? `FAILED: ${s.problems.join('; ').replace(/\|/g, '\\|')}` : 'ok'}${s.notes?.length ? ` (${s.notes.join('; ')})` : ''} |`,
    ),
    '',
    `Peak RSS (VmHWM at the end of the run): service ${fmt(rss['service'], 1)} MiB; bare grpc-js ${fmt(rss['bare-grpc'], 1)} MiB; bare node:http ${fmt(rss['bare-http'], 1)} MiB.`,
    '',
    'Mean latency is the tool\'s own mean (h2load "time for request", wrk "Latency Avg"); p99 is wrk\'s ' +
      '--latency 99 % line, and for h2load (which prints no percentiles) the 99th percentile of its per-request --log-file. ' +
      'CPU columns are CPU time / wall time of the server and load generator processes over the measured window (100 % = one core).',
    ...(allProblems.length ? ['', '**Problems:**', '', ...allProblems.map((p) => `- ${p}`)] : []),
    '',
  ];
  const md = lines.join('\n');
  fs.mkdirSync(RESULTS, { recursive: true });
  fs.writeFileSync(path.join(RESULTS, 'latest.json'), `${JSON.stringify(results, null, 2)}\n`);
  fs.writeFileSync(path.join(RESULTS, 'latest.md'), md);
  console.log(md);
  fs.rmSync(TMP, { recursive: true, force: true });
  if (allProblems.length) process.exitCode = 1;
}

main().catch((err) => {
  console.error(err);
  fs.rmSync(TMP, { recursive: true, force: true });
  process.exit(1);
});
