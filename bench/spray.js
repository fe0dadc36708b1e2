'use strict';
/**
 * A key spray on the memory store (issue 40, item 4), see bench/README.md ("Key spray"). For each
 * scenario a fresh service (memory store, MEMORY_MAX_KEYS = BENCH_SPRAY_MAX_KEYS) runs pinned to
 * CPU 0; the good client of the attacks (bench/attack-client.js: ShouldRateLimit at a fixed rate,
 * one per-second key) runs on CPU 1 from 127.0.0.1, and the sprayer (bench/sprayer.js: requests of
 * BENCH_SPRAY_DESCRIPTORS new hourly values each, as fast as they are answered) on CPU 1 at a lower
 * priority from 127.0.0.2, so that the service sees two peers. A watched client from 127.0.0.3
 * asks a new key limited to 3 an hour five times (it must get OK three times, then OVER_LIMIT) at
 * the start of the spray, once the table is full, and at the end. The service's debug /stats is
 * read every second (its counters and gauges), its CPU and RSS from /proc. Writes
 * bench/results/spray.json and bench/results/spray.md and prints the table.
 *
 * Scenarios: `control` (the good client alone), `spray` (every setting at its default:
 * MEMORY_CALLER_NEW_KEYS_PER_SECOND bounds the sprayer), `spray-unbounded`
 * (MEMORY_CALLER_NEW_KEYS_PER_SECOND=0: the sprayer fills the table as fast as it can, as in the
 * issue).
 *
 * Environment: BENCH_SPRAY_SECONDS (the spray scenario, 60), BENCH_SPRAY_UNBOUNDED_SECONDS (30),
 * BENCH_SPRAY_CONTROL_SECONDS (20), BENCH_SPRAY_WARMUP_SECONDS (1), BENCH_SPRAY_RATE (the good
 * client's calls/s, 200), BENCH_SPRAY_DESCRIPTORS (1000), BENCH_SPRAY_IN_FLIGHT (4),
 * BENCH_SPRAY_MAX_KEYS (MEMORY_MAX_KEYS, 1,000,000), BENCH_SPRAY_NICE (10), BENCH_SPRAY_SCENARIOS
 * (ids, comma-separated; all by default). Needs a build (dist/): `make bench-attacks` builds first.
 */
const fs = require('node:fs');
const http2 = require('node:http2');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const { ROOT, intEnv, sh, NPROC, PIN, killChildren, cpuSample, cpuPercent, peakRssMiB, rssMiB, sleep, removeTmp, startService, spawnNode, builtMessages } = require('./processes.js');

const RESULTS = path.join(__dirname, 'results');
const { RateLimitRequest, RateLimitResponse } = builtMessages();

const CFG = {
  spraySeconds: intEnv('BENCH_SPRAY_SECONDS', 60, 1, 3000),
  unboundedSeconds: intEnv('BENCH_SPRAY_UNBOUNDED_SECONDS', 30, 1, 3000),
  controlSeconds: intEnv('BENCH_SPRAY_CONTROL_SECONDS', 20, 1, 3000),
  warmupSeconds: intEnv('BENCH_SPRAY_WARMUP_SECONDS', 1, 0, 60),
  rate: intEnv('BENCH_SPRAY_RATE', 200, 1, 10_000),
  descriptors: intEnv('BENCH_SPRAY_DESCRIPTORS', 1000, 1, 1000),
  inFlight: intEnv('BENCH_SPRAY_IN_FLIGHT', 4, 1, 1000),
  maxKeys: intEnv('BENCH_SPRAY_MAX_KEYS', 1_000_000, 1000, 100_000_000),
  nice: intEnv('BENCH_SPRAY_NICE', 10, 0, 19),
  only: (process.env['BENCH_SPRAY_SCENARIOS'] || '').split(',').filter(Boolean),
  callTimeoutMs: 5000,
};
const NICE = CFG.nice > 0 && sh('nice', ['-n', '1', 'true']) !== null ? CFG.nice : 0;

const CONFIG = `# bench/spray.js: the good client's per-second key, the sprayed hourly key, the watched key.
domain: bench
descriptors:
  - key: client_id
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
  - key: watched
    rate_limit: {unit: hour, requests_per_unit: 3}
`;

/** The good client's call: one descriptor, client_id = c1 (a new per-second key every second). */
const GOOD = (() => {
  const msg = Buffer.from(RateLimitRequest.encode({ domain: 'bench', descriptors: [{ entries: [{ key: 'client_id', value: 'c1' }], limit: undefined, hitsAddend: undefined }], hitsAddend: 0 }).finish());
  const out = Buffer.alloc(5 + msg.length);
  out.writeUInt32BE(msg.length, 1);
  msg.copy(out, 5);
  return out;
})();

const SCENARIOS = [
  { id: 'control', label: 'the good client alone', seconds: CFG.controlSeconds },
  { id: 'spray', label: `sprayer: ${CFG.descriptors} new hourly values per call, ${CFG.inFlight} calls in flight; every setting at its default`, seconds: CFG.spraySeconds, spray: true, env: {} },
  {
    id: 'spray-unbounded',
    label: 'the same with MEMORY_CALLER_NEW_KEYS_PER_SECOND=0 (no bound per caller: the sprayer fills the table as in the issue)',
    seconds: CFG.unboundedSeconds,
    spray: true,
    env: { MEMORY_CALLER_NEW_KEYS_PER_SECOND: '0' },
  },
].filter((s) => CFG.only.length === 0 || CFG.only.includes(s.id));

const log = (s) => console.error(`[spray] ${s}`);
process.on('exit', removeTmp);


/** The service's counters and gauges from its debug /stats. */
async function stats(srv) {
  const res = await fetch(`http://${srv.debugAddr}/stats`);
  const out = {};
  for (const line of (await res.text()).split('\n')) {
    const m = /^([\w.]+): (\d+)$/.exec(line);
    if (m) out[m[1]] = Number(m[2]);
  }
  return out;
}

/** Five calls of a new watched key (3 an hour) from 127.0.0.3: the overall codes, in order. */
async function watched(srv, value) {
  const [host, port] = [srv.grpcAddr.slice(0, srv.grpcAddr.lastIndexOf(':')), Number(srv.grpcAddr.slice(srv.grpcAddr.lastIndexOf(':') + 1))];
  const session = http2.connect(`http://${host}:${port}`, { createConnection: () => net.connect({ host, port, localAddress: '127.0.0.3' }) });
  session.on('error', () => {});
  const msg = Buffer.from(RateLimitRequest.encode({ domain: 'bench', descriptors: [{ entries: [{ key: 'watched', value }], limit: undefined, hitsAddend: undefined }], hitsAddend: 0 }).finish());
  const frame = Buffer.alloc(5 + msg.length);
  frame.writeUInt32BE(msg.length, 1);
  msg.copy(frame, 5);
  const codes = [];
  try {
    for (let i = 0; i < 5; i++) {
      codes.push(
        await new Promise((resolve) => {
          const stream = session.request({ ':method': 'POST', ':path': '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit', 'content-type': 'application/grpc', te: 'trailers' });
          const chunks = [];
          let status = null;
          stream.on('response', (h) => h['grpc-status'] !== undefined && (status = String(h['grpc-status'])));
          stream.on('trailers', (t) => (status = String(t['grpc-status'])));
          stream.on('data', (c) => chunks.push(c));
          stream.on('error', (err) => resolve(`error ${err.code ?? err.message}`));
          stream.on('close', () => {
            if (status !== '0') return resolve(`grpc-status ${status}`);
            const res = RateLimitResponse.decode(Buffer.concat(chunks).subarray(5));
            resolve(res.overallCode === 1 ? 'OK' : res.overallCode === 2 ? 'OVER_LIMIT' : `code ${res.overallCode}`);
          });
          stream.end(frame);
        }),
      );
    }
  } finally {
    session.close();
  }
  return codes;
}
const WATCHED_RIGHT = 'OK,OK,OK,OVER_LIMIT,OVER_LIMIT';

async function runScenario(s) {
  log(`${s.id}: ${s.label}`);
  // Every counter must stay live for the run: no hour may turn within it.
  const needMs = (CFG.warmupSeconds + s.seconds + 20) * 1000;
  const left = 3_600_000 - (Date.now() % 3_600_000);
  if (s.spray && left < needMs) {
    log(`the hour ends in ${Math.round(left / 1000)} s, within the run: waiting for it`);
    await sleep(left + 100);
  }
  const srv = await startService(`spray-${s.id}`, CONFIG, { GRPC_TRANSPORT: 'socket', MALLOC_MMAP_THRESHOLD_: '65536', MEMORY_MAX_KEYS: String(CFG.maxKeys), ...(s.env ?? {}) });
  try {
    return await measure(s, srv);
  } finally {
    await srv.stop();
  }
}

async function measure(s, srv) {
  const problems = [];
  const port = Number(srv.grpcAddr.split(':').pop());
  const windowMs = (CFG.warmupSeconds + s.seconds) * 1000;
  const rssBeforeMiB = rssMiB(srv.pid);
  const client = spawnNode([path.join(__dirname, 'attack-client.js'), srv.grpcAddr, String(CFG.rate), String(CFG.warmupSeconds), String(s.seconds), GOOD.toString('hex'), String(CFG.callTimeoutMs)], {
    timeoutMs: windowMs + CFG.callTimeoutMs + 30_000,
  });
  if (!(await client.ready)) {
    const r = await client.result();
    return { id: s.id, label: s.label, problems: [`good client did not start (exit ${r.code}): ${r.text ?? ''}`] };
  }
  const sprayer = s.spray
    ? spawnNode(
        [
          path.join(__dirname, 'sprayer.js'),
          JSON.stringify({ host: '127.0.0.1', port, localAddress: '127.0.0.2', seconds: CFG.warmupSeconds + s.seconds, descriptors: CFG.descriptors, inFlight: CFG.inFlight, domain: 'bench', key: 'user', prefix: 's' }),
        ],
        { nice: NICE, timeoutMs: windowMs + 30_000 },
      )
    : null;
  const pids = [srv.pid, client.pid, ...(sprayer ? [sprayer.pid] : [])];
  const t0 = performance.now();
  const samples = [];
  const checks = [];
  let fullAtS = null;
  let checkedFull = false;
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      const t = (performance.now() - t0) / 1000;
      try {
        const st = await stats(srv);
        const sample = {
          t,
          rssMiB: rssMiB(srv.pid),
          keys: st['ratelimit.memory.keys'] ?? null,
          overflowed: st['ratelimit.memory.keys_overflowed'] ?? null,
          overCallerBudget: st['ratelimit.memory.keys_over_caller_budget'] ?? null,
          overflowBytes: st['ratelimit.memory.overflow_bytes'] ?? null,
          overflowFill: st['ratelimit.memory.overflow_fill'] ?? null,
        };
        samples.push(sample);
        if (fullAtS === null && sample.keys !== null && sample.keys >= CFG.maxKeys) fullAtS = t;
        if (s.spray && fullAtS !== null && !checkedFull) {
          checkedFull = true;
          checks.push({ when: 'table full', t, codes: await watched(srv, `full-${Date.now()}`) });
        }
      } catch (err) {
        problems.push(`stats at ${t.toFixed(1)} s: ${err.message}`);
      }
      await sleep(1000);
    }
  })();
  await sleep(CFG.warmupSeconds * 1000);
  if (s.spray) checks.push({ when: 'spray started', t: (performance.now() - t0) / 1000, codes: await watched(srv, `start-${Date.now()}`) });
  const c0 = cpuSample(pids);
  await sleep(Math.max(0, t0 + windowMs - performance.now()));
  const c1 = cpuSample(pids);
  if (s.spray) checks.push({ when: 'end', t: (performance.now() - t0) / 1000, codes: await watched(srv, `end-${Date.now()}`) });
  sampling = false;
  await sampler;
  const end = await stats(srv);
  const cr = await client.result();
  const sr = sprayer ? await sprayer.result() : null;
  const alive = srv.proc.exitCode === null && srv.proc.signalCode === null;
  if (!alive) problems.push('the service exited during the run');
  if (!cr.out) problems.push(`good client printed no result (exit ${cr.code}): ${cr.text}`);
  if (sprayer && !sr.out) problems.push(`sprayer printed no result (exit ${sr.code}): ${sr.text}`);
  for (const c of checks) if (c.codes.join(',') !== WATCHED_RIGHT) problems.push(`watched key (${c.when}): ${c.codes.join(', ')}, not ${WATCHED_RIGHT}`);
  return {
    id: s.id,
    label: s.label,
    seconds: s.seconds,
    env: s.env ?? {},
    client: cr.out,
    sprayer: sr?.out ?? null,
    checks,
    tableFullAtS: fullAtS,
    end: {
      keys: end['ratelimit.memory.keys'] ?? null,
      overflowed: end['ratelimit.memory.keys_overflowed'] ?? null,
      overCallerBudget: end['ratelimit.memory.keys_over_caller_budget'] ?? null,
      overflowBytes: end['ratelimit.memory.overflow_bytes'] ?? null,
      overflowFill: end['ratelimit.memory.overflow_fill'] ?? null,
    },
    service: { cpuPercent: cpuPercent(c0, c1, 0), rssBeforeMiB, rssPeakMiB: alive ? peakRssMiB(srv.pid) : null, rssEndMiB: rssMiB(srv.pid), worstGcPauseMs: srv.worstGcPause(Date.now() - windowMs, Date.now()) },
    samples,
    problems,
  };
}

const fmt = (n, digits = 0) => (n === null || n === undefined || Number.isNaN(n) ? 'n/a' : n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits }));
const fmtMs = (n) => (n === null || n === undefined ? 'n/a' : n < 10 ? `${n.toFixed(2)} ms` : `${n.toFixed(1)} ms`);

function markdown(results, machine, problems) {
  const control = results.find((r) => r.id === 'control');
  const lines = [
    '# Key spray on the memory store',
    '',
    `${machine.date}; ${machine.nproc} CPUs, ${machine.cpuModel}; Node ${machine.node}; ${machine.pinning}. MEMORY_MAX_KEYS=${fmt(CFG.maxKeys)}; good client ${CFG.rate} calls/s from 127.0.0.1; sprayer from 127.0.0.2, ${CFG.descriptors} new hourly values per call, ${CFG.inFlight} in flight; watched key (3 an hour) from 127.0.0.3.`,
    '',
    '| Scenario | Seconds | Good client OK / calls | p50 / p99 / max (p99 vs control) | Sprayer keys sent (per s) | Table full after | keys / overflowed / over caller budget (end) | Overflow MiB / fill % (end) | Watched key: start, full, end | Service CPU | RSS MiB before / peak / end |',
    '|---|---:|---:|---|---:|---:|---|---|---|---:|---|',
  ];
  for (const r of results) {
    const c = r.client;
    const ratio = c && control?.client?.p99 ? ` (${(c.p99 / control.client.p99).toFixed(1)}x)` : '';
    const watchedCell = r.checks?.length ? r.checks.map((x) => (x.codes.join(',') === WATCHED_RIGHT ? 'right' : x.codes.join(' '))).join(', ') : '—';
    lines.push(
      `| \`${r.id}\` | ${fmt(r.seconds)} | ${c ? `${fmt(c.ok)} / ${fmt(c.calls)}` : 'n/a'} | ${c ? `${fmtMs(c.p50)} / ${fmtMs(c.p99)} / ${fmtMs(c.max)}${ratio}` : 'n/a'} | ` +
        `${r.sprayer ? `${fmt(r.sprayer.keysSent)} (${fmt(r.sprayer.keysPerSecond)})` : '—'} | ${r.tableFullAtS != null ? `${r.tableFullAtS.toFixed(0)} s` : r.sprayer ? 'never' : '—'} | ` +
        `${r.end ? `${fmt(r.end.keys)} / ${fmt(r.end.overflowed)} / ${fmt(r.end.overCallerBudget)}` : 'n/a'} | ${r.end ? `${fmt((r.end.overflowBytes ?? 0) / 1048576, 0)} / ${fmt(r.end.overflowFill)}` : 'n/a'} | ${watchedCell} | ` +
        `${r.service ? `${fmt(r.service.cpuPercent)} %` : 'n/a'} | ${r.service ? `${fmt(r.service.rssBeforeMiB)} / ${fmt(r.service.rssPeakMiB)} / ${fmt(r.service.rssEndMiB)}` : 'n/a'} |`,
    );
  }
  lines.push('', '"right": OK, OK, OK, OVER_LIMIT, OVER_LIMIT, as its limit says.');
  if (problems.length) lines.push('', '## Problems', '', ...problems.map((p) => `- ${p}`));
  return lines.join('\n');
}

async function main() {
  const machine = {
    nproc: NPROC,
    cpuModel: os.cpus()[0]?.model ?? 'unknown',
    node: process.version,
    date: new Date().toISOString(),
    pinning: PIN ? `service: taskset -c 0; clients: taskset -c 1${NICE ? `, the sprayer at nice ${NICE}` : ''}` : 'none (taskset missing or < 2 CPUs)',
  };
  log(`${machine.nproc} CPUs, ${machine.cpuModel}, Node ${machine.node}; pinning: ${machine.pinning}`);
  const results = [];
  const problems = [];
  for (const s of SCENARIOS) {
    let r;
    try {
      r = await runScenario(s);
    } catch (err) {
      r = { id: s.id, label: s.label, problems: [err.message.split('\n')[0]] };
    }
    results.push(r);
    for (const p of r.problems) problems.push(`${r.id}: ${p}`);
    const c = r.client;
    log(
      `${r.id}: good client ${c?.ok ?? 'n/a'} OK of ${c?.calls ?? 'n/a'}, p50 ${fmtMs(c?.p50)}, p99 ${fmtMs(c?.p99)}; ` +
        `${r.sprayer ? `sprayer ${fmt(r.sprayer.keysSent)} keys (${fmt(r.sprayer.keysPerSecond)}/s); table full ${r.tableFullAtS != null ? `at ${r.tableFullAtS.toFixed(0)} s` : 'never'}; ` : ''}` +
        `watched ${r.checks?.map((x) => `${x.when}: ${x.codes.join(' ')}`).join('; ') || '—'}; RSS peak ${fmt(r.service?.rssPeakMiB)} MiB` +
        `${r.problems.length ? `\n  PROBLEMS: ${r.problems.join('; ')}` : ''}`,
    );
  }
  fs.mkdirSync(RESULTS, { recursive: true });
  fs.writeFileSync(path.join(RESULTS, 'spray.json'), `${JSON.stringify({ machine, settings: { ...CFG, nice: NICE }, scenarios: results, problems }, null, 2)}\n`);
  const md = markdown(results, machine, problems);
  fs.writeFileSync(path.join(RESULTS, 'spray.md'), `${md}\n`);
  console.log(md);
  if (problems.length) process.exitCode = 1;
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
