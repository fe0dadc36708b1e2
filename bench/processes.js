'use strict';
/**
 * Process helpers shared by the benchmark scripts (bench/run.js, bench/attacks.js): pinning to a
 * CPU with taskset, child processes killed when the script exits, starting a server and waiting
 * for its ready line, the real service on a one-rule config in a temp dir, and CPU time and
 * resident set of a process tree read from /proc.
 *
 * Loading this module installs the exit handlers: every tracked child is killed (SIGKILL) when the
 * script exits, and SIGINT/SIGTERM exit the script with 130. The temp dir is made on first use
 * (tmpDir()) and removed by removeTmp().
 */
const { spawn, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const ROOT = path.resolve(__dirname, '..');
const SERVICE = path.join(ROOT, 'dist/src/cli/ratelimit.js');

/** An integer setting from the environment: `def` when unset; outside [min, max] throws. */
function intEnv(name, def, min, max) {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return def;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min || n > max) throw new Error(`${name} must be an integer in [${min}, ${max}], got ${raw}`);
  return n;
}

// ---------------------------------------------------------------------------------------------
// Machine, pinning

/** Runs a command to completion: its output (stdout + stderr, trimmed), or null when it failed. */
function sh(cmd, args) {
  const r = spawnSync(cmd, args, { encoding: 'utf8' });
  return r.status === 0 ? `${r.stdout}${r.stderr}`.trim() : null;
}
const NPROC = Number(sh('nproc', [])) || os.cpus().length;
const PIN = NPROC >= 2 && sh('taskset', ['-c', '1', 'true']) !== null;

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

/** Starts a Node server on `cpus` (CPU 0 unless told) and waits until its output matches `ready`. */
function startServer(name, args, env, ready, timeoutMs = 20_000, cpus = '0') {
  // --trace-gc: V8 prints every collection with its pause, read below for the worst pause under load.
  return startProcess(name, process.execPath, ['--trace-gc', ...args], env, ready, timeoutMs, cpus);
}

/**
 * Starts any server program (`program` with `args`) on `cpus` and waits until its output matches
 * `ready`. Its worstGcPause reads V8's --trace-gc lines, so it is null for a program that prints none.
 */
function startProcess(name, program, args, env, ready, timeoutMs = 20_000, cpus = '0') {
  const [cmd, argv] = pinned(cpus, program, args);
  const proc = track(spawn(cmd, argv, { env, stdio: ['ignore', 'pipe', 'pipe'], cwd: ROOT }));
  let out = '';
  let started = false;
  const gc = [];
  let partial = '';
  proc.stdout.on('data', (d) => {
    const lines = (partial + d.toString()).split('\n');
    partial = lines.pop();
    const now = Date.now();
    for (const line of lines) {
      const m = GC_LINE.exec(line);
      if (m) gc.push({ at: now, ms: Number(m[1]) });
    }
  });
  /** The longest GC pause seen between two Date.now() times (null when there was none). */
  const worstGcPause = (from, to) => gc.reduce((worst, e) => (e.at >= from && e.at <= to && (worst === null || e.ms > worst) ? e.ms : worst), null);
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
      if (started) return; // GC traces go on all run long: only the start-up is kept
      out += d.toString();
      const m = ready.exec(out);
      if (m) {
        started = true;
        clearTimeout(timer);
        resolve({ name, proc, pid: proc.pid, match: m, stop, output: () => out, worstGcPause });
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

/** A --trace-gc line: `... ms: Scavenge 4.2 (5.0) -> 3.9 (6.0) MB, 0.61 / 0.00 ms ...`; group 1 is the pause. */
const GC_LINE = /\d+ ms: [A-Za-z() -]+? [\d.]+ \([\d.]+\) -> [\d.]+ \([\d.]+\) MB, ([\d.]+) \/ [\d.]+ ms/;

/** A process and its direct children (WORKERS > 1: the primary and its workers). */
function processTree(pid) {
  const pids = [pid];
  try {
    for (const t of fs.readdirSync(`/proc/${pid}/task`)) {
      const kids = fs.readFileSync(`/proc/${pid}/task/${t}/children`, 'utf8').trim();
      if (kids) pids.push(...kids.split(/\s+/).map(Number));
    }
  } catch {
    /* gone: the pid alone */
  }
  return pids;
}

/** utime+stime of a process and its children in clock ticks (USER_HZ = 100 on Linux), or null. */
function cpuTicks(pid) {
  let sum = null;
  for (const p of processTree(pid)) {
    try {
      const stat = fs.readFileSync(`/proc/${p}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      sum = (sum ?? 0) + Number(f[11]) + Number(f[12]);
    } catch {
      /* a child that just exited */
    }
  }
  return sum;
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
  let sum = null;
  for (const p of processTree(pid)) {
    try {
      const m = /^VmHWM:\s+(\d+) kB/m.exec(fs.readFileSync(`/proc/${p}/status`, 'utf8'));
      if (m) sum = (sum ?? 0) + Number(m[1]) / 1024;
    } catch {
      /* a child that just exited */
    }
  }
  return sum;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------------------------------------
// Temp dir

let TMP = null;
/** The script's temp dir (rl-bench-*), made on the first call. */
function tmpDir() {
  TMP ??= fs.mkdtempSync(path.join(os.tmpdir(), 'rl-bench-'));
  return TMP;
}
/** Removes the temp dir (if one was made). */
function removeTmp() {
  if (TMP !== null) fs.rmSync(TMP, { recursive: true, force: true });
}

// ---------------------------------------------------------------------------------------------
// The real service

/** The memory-store runs' config (domain `bench`, any `client_id`): nothing ever goes over the limit. */
const SERVICE_CONFIG = `# Benchmark config: one wildcard key, a limit no run can reach (1e9 per second).
domain: bench
descriptors:
  - key: client_id
    rate_limit:
      unit: second
      requests_per_unit: 1000000000
`;

/** The service's environment: memory store, every port on 127.0.0.1 chosen by the kernel, the config under `root`; `extra` on top. */
function serviceEnv(root, extra = {}) {
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
    ...extra,
  };
}

/** Starts the real service with `config` as its only rule file (a fresh runtime root in TMP). */
async function startService(name, config, extraEnv = {}, cpus = '0') {
  const root = path.join(tmpDir(), `runtime-${name}`, 'current');
  fs.mkdirSync(path.join(root, 'ratelimit', 'config'), { recursive: true });
  fs.writeFileSync(path.join(root, 'ratelimit', 'config', `${name}.yaml`), config);
  const srv = await startServer(`ratelimit service (${name})`, [SERVICE], serviceEnv(root, extraEnv), /listening: gRPC (\S+), HTTP (\S+), debug ([^\s"\\]+)/, 20_000, cpus);
  const [, grpcAddr, httpAddr, debugAddr] = srv.match;
  return { ...srv, grpcAddr, httpAddr, debugAddr };
}

/** VmRSS (current resident set) of a live process in MiB. */
function rssMiB(pid) {
  try {
    const m = /^VmRSS:\s+(\d+) kB/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) / 1024 : null;
  } catch {
    return null;
  }
}

/**
 * Spawns `node <args>` on CPU 1 (at `nice` when given), killed after `timeoutMs`: `ready` when its
 * stderr says `ready` (false if it exits first), `result()` its exit and the last JSON line of its stdout.
 */
function spawnNode(args, { nice = 0, timeoutMs, env = {} }) {
  const [cmd, argv] = nice > 0 ? pinned(1, 'nice', ['-n', String(nice), process.execPath, ...args]) : pinned(1, process.execPath, args);
  const proc = track(spawn(cmd, argv, { stdio: ['ignore', 'pipe', 'pipe'], cwd: ROOT, env: { ...process.env, ...env } }));
  let stdout = '';
  let stderr = '';
  let onReady = null;
  const ready = new Promise((resolve) => (onReady = resolve));
  proc.stdout.on('data', (d) => (stdout += d));
  proc.stderr.on('data', (d) => {
    stderr += d;
    if (/^ready$/m.test(stderr)) onReady(true);
  });
  const killer = setTimeout(() => proc.kill('SIGKILL'), timeoutMs);
  const exited = new Promise((resolve) =>
    proc.once('exit', (code, signal) => {
      clearTimeout(killer);
      onReady(false);
      resolve(code ?? signal);
    }),
  );
  /** The last JSON line of its stdout, or null. */
  const result = async () => {
    const code = await exited;
    const line = stdout.trim().split('\n').pop();
    try {
      return { code, out: JSON.parse(line) };
    } catch {
      return { code, out: null, text: `${stdout}${stderr}`.slice(-500) };
    }
  };
  return { proc, pid: proc.pid, ready, exited, result };
}

/** The generated RLS messages of the build, or exit 2 naming what to build when it or the service is missing. */
function builtMessages() {
  const generated = path.join(ROOT, 'dist/generated/envoy/service/ratelimit/v3/rls.js');
  for (const f of [generated, SERVICE]) {
    if (!fs.existsSync(f)) {
      console.error(`missing ${path.relative(ROOT, f)}: build first (make bench-attacks builds, or make build)`);
      process.exit(2);
    }
  }
  return require(generated);
}

module.exports = {
  builtMessages,
  spawnNode,
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
  processTree,
  cpuTicks,
  cpuSample,
  cpuPercent,
  peakRssMiB,
  rssMiB,
  sleep,
  tmpDir,
  removeTmp,
  SERVICE_CONFIG,
  serviceEnv,
  startService,
};
