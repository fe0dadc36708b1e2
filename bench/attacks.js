'use strict';
/**
 * How the service's own HTTP/2 gRPC server (GRPC_TRANSPORT=socket, the default) holds up under the
 * known HTTP/2 attacks (issue 28), see bench/README.md ("Attacks"). For each scenario a fresh
 * service (memory store, the one-rule config of bench/run.js) runs pinned to CPU 0; a good client
 * (bench/attack-client.js) sends ShouldRateLimit calls at a fixed rate from CPU 1 and records their
 * latency, while one attacker process (bench/attacker.js), also on CPU 1 but at a lower priority
 * (nice), attacks. The service's CPU, RSS and open sockets are read from /proc. Writes
 * bench/results/attacks.json and bench/results/attacks.md and prints the table.
 *
 * Environment: BENCH_ATTACK_SECONDS (measured seconds per scenario, default 10),
 * BENCH_ATTACK_WARMUP_SECONDS (default 1), BENCH_ATTACK_RATE (good client's calls per second,
 * default 200), BENCH_ATTACK_ACK_CONNECTIONS (connections of the ACK flood, default 200),
 * BENCH_ATTACK_BODY_CONNECTIONS (comma-separated connection counts of the body attack, default
 * 40,400), BENCH_ATTACK_BODY_STREAMS (streams per connection, default 16), BENCH_ATTACK_SETTLE_SECONDS
 * (wait after the attackers leave before the "after" RSS, default 2), BENCH_ATTACK_NICE (nice
 * level of the attackers, default 10; 0 runs them at the good client's priority),
 * BENCH_ATTACK_SCENARIOS (comma-separated ids to run, default all), BENCH_ATTACK_IDLE_CONNECTIONS
 * (connections the connection attackers hold, default 10000; the TLS ones hold half), BENCH_ATTACK_FRESH_MS
 * (how often a newcomer opens its own connection and makes one call, default 500),
 * BENCH_ATTACK_CPU_PROFILE_DIR (a CPU profile of the service's measured window per scenario,
 * bench/cpu-profile.js). The RLQS bucket
 * floods (issue 40) are measured the same way: the good client's ShouldRateLimit calls beside them.
 *
 * Needs a build (dist/): `make bench-attacks` builds first.
 */
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const {
  ROOT,
  intEnv,
  sh,
  NPROC,
  PIN,
  killChildren,
  cpuSample,
  cpuPercent,
  peakRssMiB,
  rssMiB,
  sleep,
  removeTmp,
  tmpDir,
  SERVICE_CONFIG,
  startService,
  spawnNode,
  builtMessages,
} = require('./processes.js');

const RESULTS = path.join(__dirname, 'results');
const { RateLimitRequest } = builtMessages();

const CFG = {
  seconds: intEnv('BENCH_ATTACK_SECONDS', 10, 1, 600),
  warmupSeconds: intEnv('BENCH_ATTACK_WARMUP_SECONDS', 1, 0, 60),
  rate: intEnv('BENCH_ATTACK_RATE', 200, 1, 10_000),
  ackConnections: intEnv('BENCH_ATTACK_ACK_CONNECTIONS', 200, 1, 5000),
  bodyConnections: (process.env['BENCH_ATTACK_BODY_CONNECTIONS'] || '40,400').split(',').map((x) => {
    const n = Number(x);
    if (!Number.isInteger(n) || n < 1 || n > 5000) throw new Error(`BENCH_ATTACK_BODY_CONNECTIONS: ${x} is not a connection count in [1, 5000]`);
    return n;
  }),
  bodyStreams: intEnv('BENCH_ATTACK_BODY_STREAMS', 16, 1, 1000),
  settleSeconds: intEnv('BENCH_ATTACK_SETTLE_SECONDS', 2, 0, 60),
  nice: intEnv('BENCH_ATTACK_NICE', 10, 0, 19),
  only: (process.env['BENCH_ATTACK_SCENARIOS'] || '').split(',').filter(Boolean),
  idleConnections: intEnv('BENCH_ATTACK_IDLE_CONNECTIONS', 10_000, 1, 15_000),
  freshMs: intEnv('BENCH_ATTACK_FRESH_MS', 500, 0, 60_000),
  profileDir: process.env['BENCH_ATTACK_CPU_PROFILE_DIR'] || '',
  /** The good client's call timeout. */
  callTimeoutMs: 5000,
  /** The body attack's declared message: REQUEST_MAX_BYTES's default (1 MiB). */
  declaredBytes: 1048576,
};
const NICE = CFG.nice > 0 && sh('nice', ['-n', '1', 'true']) !== null ? CFG.nice : 0;

/** The call of the good client and of the attackers: one descriptor, client_id = c1. */
const MESSAGE = Buffer.from(
  RateLimitRequest.encode({ domain: 'bench', descriptors: [{ entries: [{ key: 'client_id', value: 'c1' }], limit: undefined, hitsAddend: undefined }], hitsAddend: 0 }).finish(),
);
const FRAME = Buffer.concat([Buffer.from([0, 0, 0, 0, 0]), MESSAGE]);
FRAME.writeUInt32BE(MESSAGE.length, 1);

const SCENARIOS = [
  { id: 'control', label: 'no attacker' },
  { id: 'valid-flood', attack: 'valid', label: 'ShouldRateLimit calls (HEADERS + DATA, END_STREAM) back to back, connection window opened' },
  { id: 'ping-flood', attack: 'ping', label: 'PING frames' },
  { id: 'settings-flood', attack: 'settings', label: 'empty SETTINGS frames' },
  { id: 'priority-flood', attack: 'priority', label: 'PRIORITY frames on new stream ids, each depending on the one before' },
  { id: 'window-update-flood', attack: 'window-update', label: 'WINDOW_UPDATE of 1 on the connection' },
  { id: 'empty-data-flood', attack: 'empty-data', label: 'empty DATA frames on an open call' },
  { id: 'hpack-bomb', attack: 'hpack-bomb', label: 'a 4000-byte dynamic-table entry, then 60,000-byte header blocks of 0xbe (index 62)' },
  { id: `ack-flood-${CFG.ackConnections}`, attack: 'ack-flood', connections: CFG.ackConnections, label: `PING frames from ${CFG.ackConnections} connections that never read` },
  ...CFG.bodyConnections.map((n) => ({
    id: `body-hold-${n}`,
    attack: 'body',
    hold: true,
    connections: n,
    label: `${n} connections x ${CFG.bodyStreams} calls declaring ${CFG.declaredBytes} bytes, sent as far as the windows allow, never finished, held (nothing replaced)`,
  })),
  ...CFG.bodyConnections.map((n) => ({
    id: `body-churn-${n}`,
    attack: 'body',
    connections: n,
    label: `the same, each call the server ends replaced by a new one and each connection it closes reopened`,
  })),
  // Issue 40: one client holding connections (connection-attacker.js), from ten addresses of one
  // pod (each within GRPC_MAX_CONNECTIONS_PER_PEER) or from one; and TLS connections that never
  // finish their handshake. The newcomer's calls ("fresh") say whether a new client gets in.
  ...[10, 1].map((n) => ({
    id: `idle-${CFG.idleConnections}-from-${n}`,
    script: 'connection-attacker.js',
    attack: 'idle-h2',
    connections: CFG.idleConnections,
    addresses: loopbackAddresses(n),
    label: `${CFG.idleConnections} connections from ${n} address${n > 1 ? 'es' : ''} sending the preface and SETTINGS, then nothing; each one closed reopened`,
  })),
  { id: 'control-tls', tls: true, label: 'no attacker, over TLS' },
  ...['silent', 'half'].map((kind) => ({
    id: `tls-${kind}-${CFG.idleConnections / 2}`,
    script: 'connection-attacker.js',
    attack: `tls-${kind}`,
    tls: true,
    connections: CFG.idleConnections / 2,
    addresses: loopbackAddresses(5),
    label: `${CFG.idleConnections / 2} TCP connections to the TLS port from 5 addresses sending ${kind === 'silent' ? 'nothing' : 'the first 11 bytes of a ClientHello'}; each one closed reopened`,
  })),
  // RLQS (issue 40): distinct buckets, all reported again every second; an ended stream replaced by one with new buckets.
  { id: 'rlqs-flood', attack: 'rlqs', connections: 1, rlqs: { streams: 100, buckets: 10_000, perReport: 400 }, label: 'one connection, 100 RLQS streams of 10,000 distinct buckets each, in reports of 400 (12 KB: within a stream\'s first window)' },
  { id: 'rlqs-huge-stream', attack: 'rlqs', connections: 1, rlqs: { streams: 1, buckets: 1_000_000, perReport: 20_000 }, label: 'one RLQS stream reporting 1,000,000 distinct buckets, in reports of 20,000 (about 500 KB)' },
  { id: 'rlqs-flood-10', attack: 'rlqs', connections: 10, rlqs: { streams: 10, buckets: 10_000, perReport: 400 }, label: '10 connections x 10 RLQS streams of 10,000 distinct buckets each, in reports of 400' },
].filter((s) => CFG.only.length === 0 || CFG.only.includes(s.id));

/** 127.0.0.2, 127.0.0.3, ...: the addresses of one attacking pod. */
function loopbackAddresses(n) {
  return Array.from({ length: n }, (_, i) => `127.0.0.${2 + i}`);
}

/** A CA and a server certificate for localhost (openssl), for the TLS scenarios; made once. */
let tlsFiles = null;
function tlsCertificates() {
  if (tlsFiles !== null) return tlsFiles;
  const dir = path.join(tmpDir(), 'tls');
  fs.mkdirSync(dir, { recursive: true });
  const f = (name) => path.join(dir, name);
  const run = (args) => {
    if (sh('openssl', args) === null) throw new Error(`openssl ${args.join(' ')} failed`);
  };
  run(['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', f('ca.key'), '-out', f('ca.crt'), '-days', '2', '-subj', '/CN=bench-ca']);
  run(['req', '-newkey', 'rsa:2048', '-nodes', '-keyout', f('server.key'), '-out', f('server.csr'), '-subj', '/CN=localhost']);
  fs.writeFileSync(f('ext.cnf'), 'subjectAltName=DNS:localhost\n');
  run(['x509', '-req', '-in', f('server.csr'), '-CA', f('ca.crt'), '-CAkey', f('ca.key'), '-CAcreateserial', '-out', f('server.crt'), '-days', '2', '-extfile', f('ext.cnf')]);
  tlsFiles = { ca: f('ca.crt'), cert: f('server.crt'), key: f('server.key') };
  return tlsFiles;
}

const log = (s) => console.error(`[attacks] ${s}`);
process.on('exit', removeTmp); // also when a signal ends the run

// ---------------------------------------------------------------------------------------------
// Children


/** Open sockets of a process (listeners included), from /proc/<pid>/fd; null when it is gone. */
function socketCount(pid) {
  try {
    let n = 0;
    for (const fd of fs.readdirSync(`/proc/${pid}/fd`)) {
      try {
        if (fs.readlinkSync(`/proc/${pid}/fd/${fd}`).startsWith('socket:')) n++;
      } catch {
        /* closed meanwhile */
      }
    }
    return n;
  } catch {
    return null;
  }
}

/** Log lines of the service at warn level or above (text or JSON format), counted, the first few kept. */
function watchServiceLog(srv) {
  const seen = { count: 0, first: [] };
  let partial = '';
  const onData = (d) => {
    const lines = (partial + d.toString()).split('\n');
    partial = lines.pop();
    for (const line of lines) {
      if (!/level=(warn|warning|error|fatal|panic)\b|"level":"(warn|warning|error|fatal|panic)"/.test(line)) continue;
      seen.count++;
      if (seen.first.length < 5) seen.first.push(line.slice(0, 300));
    }
  };
  srv.proc.stdout.on('data', onData);
  srv.proc.stderr.on('data', onData);
  return seen;
}

// ---------------------------------------------------------------------------------------------
// One scenario

async function runScenario(s) {
  log(`${s.id}: ${s.label}`);
  // The service's own event-loop delay over the measured window (bench/loop-delay.js).
  const loopDelay = { file: path.join(tmpDir(), `loop-delay-${s.id}.json`), start: path.join(tmpDir(), `loop-delay-${s.id}.start`) };
  const tls = s.tls ? tlsCertificates() : null;
  const srv = await startService(`attack-${s.id}`, SERVICE_CONFIG, {
    ...(tls ? { GRPC_SERVER_USE_TLS: 'true', GRPC_SERVER_TLS_CERT: tls.cert, GRPC_SERVER_TLS_KEY: tls.key } : {}),
    GRPC_TRANSPORT: 'socket',
    // As the container image runs it (deploy/Dockerfile).
    MALLOC_MMAP_THRESHOLD_: '65536',
    NODE_OPTIONS: `--require ${path.join(__dirname, 'loop-delay.js')}${CFG.profileDir ? ` --require ${path.join(__dirname, 'cpu-profile.js')}` : ''}`,
    ...(CFG.profileDir ? { BENCH_CPU_PROFILE_DIR: CFG.profileDir, BENCH_CPU_PROFILE_NAME: s.id } : {}),
    BENCH_LOOP_DELAY_FILE: loopDelay.file,
    BENCH_LOOP_DELAY_START: loopDelay.start,
  });
  let r;
  try {
    r = await measure(s, srv, loopDelay.start);
  } finally {
    // SIGTERM: the service stops gracefully, waiting (up to its own bound) for connections still open.
    const t = performance.now();
    await srv.stop();
    if (r?.service) {
      r.service.stopMs = performance.now() - t;
      r.service.loopDelayMs = fs.existsSync(loopDelay.file) ? JSON.parse(fs.readFileSync(loopDelay.file, 'utf8')) : null;
    }
  }
  return r;
}

/** The good client and the attacker against a started service. */
async function measure(s, srv, loopDelayStart) {
  const problems = [];
  const serviceLog = watchServiceLog(srv);
  const port = Number(srv.grpcAddr.split(':').pop());
  const windowMs = (CFG.warmupSeconds + CFG.seconds) * 1000;
  const rssBeforeMiB = rssMiB(srv.pid);
  const socketsBefore = socketCount(srv.pid);
  const client = spawnNode([path.join(__dirname, 'attack-client.js'), srv.grpcAddr, String(CFG.rate), String(CFG.warmupSeconds), String(CFG.seconds), FRAME.toString('hex'), String(CFG.callTimeoutMs)], {
    timeoutMs: windowMs + CFG.callTimeoutMs + 30_000,
    env: { BENCH_CLIENT_FRESH_MS: String(CFG.freshMs), ...(s.tls ? { BENCH_CLIENT_CA: tlsCertificates().ca } : {}) },
  });
  if (!(await client.ready)) {
    const r = await client.result();
    problems.push(`good client did not start (exit ${r.code}): ${r.text ?? ''}`.trim());
    return { ...meta(s), problems };
  }
  const t0 = performance.now();
  const attacker = s.attack
    ? spawnNode(
        [
          path.join(__dirname, s.script ?? 'attacker.js'),
          JSON.stringify({
            scenario: s.attack,
            mode: s.attack,
            addresses: s.addresses,
            host: '127.0.0.1',
            port,
            seconds: CFG.warmupSeconds + CFG.seconds + 0.2,
            connections: s.connections ?? 1,
            message: MESSAGE.toString('hex'),
            streams: CFG.bodyStreams,
            declared: CFG.declaredBytes,
            hold: s.hold === true,
            ...(s.rlqs ? { ...s.rlqs, domain: 'bench', key: 'client_id' } : {}),
          }),
        ],
        { nice: NICE, timeoutMs: windowMs + 30_000 },
      )
    : null;
  const pids = [srv.pid, client.pid, ...(attacker ? [attacker.pid] : [])];
  // RSS every 250 ms: its highest sample over the measured window, and the last one.
  const rssSamples = [];
  const sampler = setInterval(() => rssSamples.push({ t: performance.now() - t0, mib: rssMiB(srv.pid) }), 250);
  await sleep(CFG.warmupSeconds * 1000);
  fs.writeFileSync(loopDelayStart, '');
  const c0 = cpuSample(pids);
  const g0 = Date.now();
  await sleep(CFG.seconds * 1000);
  const c1 = cpuSample(pids);
  const g1 = Date.now();
  const rssEndMiB = rssMiB(srv.pid);
  const socketsEnd = socketCount(srv.pid);
  const cr = await client.result();
  const ar = attacker ? await attacker.result() : null;
  clearInterval(sampler);
  const alive = srv.proc.exitCode === null && srv.proc.signalCode === null;
  if (!alive) problems.push(`the service exited (${srv.proc.exitCode ?? srv.proc.signalCode}) during the attack`);
  const rssPeakMiB = alive ? peakRssMiB(srv.pid) : null;
  await sleep(CFG.settleSeconds * 1000);
  const rssAfterMiB = alive ? rssMiB(srv.pid) : null;
  const socketsAfter = alive ? socketCount(srv.pid) : null;
  if (!cr.out) problems.push(`good client printed no result (exit ${cr.code}): ${cr.text}`);
  if (ar && !ar.out) problems.push(`attacker printed no result (exit ${ar.code}): ${ar.text}`);
  const measured = rssSamples.filter((x) => x.t >= CFG.warmupSeconds * 1000 && x.mib != null).map((x) => x.mib);
  const good = cr.out ? { ...cr.out, timeline: undefined, held: heldPhase(cr.out.timeline, ar?.out?.filledAt, g0) } : cr.out;
  return {
    ...meta(s),
    client: good,
    attacker: ar?.out ?? null,
    service: {
      cpuPercent: cpuPercent(c0, c1, 0),
      rssBeforeMiB,
      rssMaxSampledMiB: measured.length ? Math.max(...measured) : null,
      rssEndMiB,
      rssPeakMiB,
      rssAfterMiB,
      worstGcPauseMs: srv.worstGcPause(g0, g1),
      // Listeners, the good client's connection, and whatever of the attacker's is left.
      socketsBefore,
      socketsEnd,
      socketsAfter,
      warnings: serviceLog,
      alive,
    },
    clientCpuPercent: cpuPercent(c0, c1, 1),
    attackerCpuPercent: attacker ? cpuPercent(c0, c1, 2) : null,
    problems,
  };
}

/**
 * The good client once the attacker's connections are all held (after the fill): its p99 over the
 * calls sent from then on, and how long into the measured window (from `windowStart`) the fill
 * lasted. Null when the attacker never filled, or filled too late to leave 100 calls.
 */
function heldPhase(timeline, filledAt, windowStart) {
  if (!Array.isArray(timeline) || typeof filledAt !== 'number') return null;
  const after = timeline.filter(([at]) => at >= filledAt).map(([, ms]) => ms).sort((a, b) => a - b);
  if (after.length < 100) return null;
  return { calls: after.length, p99: after[Math.ceil(0.99 * after.length) - 1], filledAfterMs: Math.max(0, filledAt - windowStart) };
}

function heldCell(h, control) {
  if (!h) return '—';
  const ratio = control?.client?.p99 ? ` (${(h.p99 / control.client.p99).toFixed(1)}x)` : '';
  return `${fmtMs(h.p99)}${ratio}: ${fmt(h.calls)}, filled ${(h.filledAfterMs / 1000).toFixed(1)} s into the window`;
}

const meta = (s) => ({ id: s.id, label: s.label, attack: s.attack ?? null, connections: s.attack ? (s.connections ?? 1) : 0 });

/** What stands out in a scenario, compared with the control run. */
function notesFor(r, control) {
  const notes = [];
  const c = r.client;
  if (c?.failed) notes.push(`good client: ${c.failed} of ${c.calls} calls failed (${Object.entries(c.failures).map(([k, v]) => `${k}: ${v}`).join(', ')})`);
  if (c?.reconnects) notes.push(`good client reconnected ${c.reconnects} times`);
  if (c && control?.client?.p99 != null && c.p99 != null && c.p99 > 5 && c.p99 > 5 * control.client.p99) notes.push(`good client p99 ${(c.p99 / control.client.p99).toFixed(0)}x the control's`);
  if (c && c.maxSendLagMs > 50) notes.push(`good client sent up to ${c.maxSendLagMs.toFixed(0)} ms late (client-side delay)`);
  const a = r.attacker;
  if (a) {
    if (a.closedByServer === 0 && r.attack !== 'rlqs') notes.push('the server never closed an attacker connection');
    if (r.attack === 'ack-flood' && a.firstConnections.stillOpen > 0) {
      const fins = a.firstFinMs?.n ?? 0;
      notes.push(`${a.firstConnections.stillOpen} of ${a.firstConnections.n} first connections still open at the end${fins ? ` (${fins} of them had the server's FIN: ended, but still read by the server)` : ''}`);
    }
    if (a.connectErrors) notes.push(`${a.connectErrors} attacker connects failed (${a.lastError})`);
  }
  if (r.attackerCpuPercent != null && r.attackerCpuPercent < 20 && r.attack !== 'ack-flood' && r.attack !== 'body' && r.attack !== 'rlqs') notes.push(`attacker used only ${r.attackerCpuPercent.toFixed(0)} % CPU`);
  const sv = r.service;
  if (sv?.socketsAfter != null && sv.socketsBefore != null && sv.socketsAfter > sv.socketsBefore) {
    // Before: the listeners only (the clients start after); after: both clients have exited.
    notes.push(`${sv.socketsAfter - sv.socketsBefore} connections still open in the service ${CFG.settleSeconds} s after the clients exited`);
  }
  if (sv?.stopMs > 2000) notes.push(`the service took ${(sv.stopMs / 1000).toFixed(1)} s to stop on SIGTERM`);
  if (r.service?.warnings?.count) notes.push(`service logged ${r.service.warnings.count} warnings or errors`);
  return notes;
}

// ---------------------------------------------------------------------------------------------
// Report

const fmt = (n, digits = 0) => (n === null || n === undefined || Number.isNaN(n) ? 'n/a' : n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits }));
const fmtMs = (n) => (n === null || n === undefined ? 'n/a' : n < 10 ? `${n.toFixed(2)} ms` : `${n.toFixed(1)} ms`);
const fmtPct = (n) => (n == null ? 'n/a' : `${n.toFixed(0)} %`);
const fmtMiB = (n) => (n == null ? 'n/a' : n.toFixed(0));
const fmtBytes = (n) => (n == null ? 'n/a' : n >= 1 << 30 ? `${(n / (1 << 30)).toFixed(2)} GiB` : n >= 1 << 20 ? `${(n / (1 << 20)).toFixed(1)} MiB` : `${(n / 1024).toFixed(0)} KiB`);
const codes = (obj) => Object.entries(obj ?? {}).map(([k, v]) => `${k} ${fmt(v)}`).join(', ');

/** What the attacker sent and what it got back, in words. */
function attackerCell(r) {
  const a = r.attacker;
  if (!a) return '—';
  const sent = `${fmt(a.framesSent)} frames (${fmtBytes(a.bytesSent)})`;
  const answered = `${fmt(a.answers)} answered${a.answers ? ` (${codes(a.answerStatus)})` : ''}`;
  switch (r.attack) {
    case 'idle-h2':
    case 'tls-silent':
    case 'tls-half':
      return `${fmt(a.opened)} connects, at most ${fmt(a.maxOpen)} open, ${fmt(a.openAtEnd)} at the end`;
    case 'valid':
      return `${sent}; ${answered}, ${fmt(a.rstReceived?.REFUSED_STREAM ?? 0)} refused`;
    case 'ping':
    case 'settings':
      return `${sent}; ${fmt(a.framesReceived?.[r.attack === 'ping' ? 'PING' : 'SETTINGS'] ?? 0)} acks read`;
    case 'empty-data':
      return `${sent}; ${fmt(a.streamsOpened)} calls opened, ${answered}`;
    case 'hpack-bomb':
      return `${fmt(a.headerBlocksSent)} bomb blocks (${fmtBytes(a.bytesSent)}); ${answered}`;
    case 'ack-flood':
      return `${sent}, nothing read`;
    case 'body':
      return `${fmt(a.streamsOpened)} calls opened, ${fmtBytes(a.bodyBytesSent)} of bodies; ${answered}`;
    case 'rlqs':
      return `${fmt(a.streamsOpened)} streams, ${fmt(a.bucketsSent)} buckets in ${fmt(a.reportsSent)} reports (${fmtBytes(a.bytesSent)}); ${fmt(a.responses)} response chunks; ended: ${codes(a.streamEnds) || 'none'}`;
    default:
      return sent;
  }
}

function markdown(results, machine, problems) {
  const lines = [
    `# Attacks on the gRPC port (GRPC_TRANSPORT=socket)`,
    '',
    `${machine.date}; ${machine.nproc} CPUs, ${machine.cpuModel}; Node ${machine.node}; ${machine.pinning}.`,
    `Good client: ${CFG.rate} calls/s open loop, ${CFG.warmupSeconds} s warm-up + ${CFG.seconds} s measured per scenario; a fresh service (memory store) per scenario.`,
    '',
    '| Scenario | Good client p50 / p99 / max | Service event-loop delay p99 / p99.9 / max | Failed / calls | Attacker sent | Closed by server (GOAWAY) | Reconnects | Service CPU | Service RSS MiB: before / end / peak / after | Service sockets: before / end / after | Attacker CPU |',
    '|---|---|---|---:|---|---|---:|---:|---|---|---:|',
  ];
  for (const r of results) {
    const c = r.client;
    const a = r.attacker;
    const sv = r.service;
    lines.push(
      `| \`${r.id}\` | ${c ? `${fmtMs(c.p50)} / ${fmtMs(c.p99)} / ${fmtMs(c.max)}` : 'n/a'} | ` +
        `${sv?.loopDelayMs ? `${fmtMs(sv.loopDelayMs.p99)} / ${fmtMs(sv.loopDelayMs.p999)} / ${fmtMs(sv.loopDelayMs.max)}` : 'n/a'} | ${c ? `${fmt(c.failed)} / ${fmt(c.calls)}` : 'n/a'} | ${attackerCell(r)} | ` +
        `${a ? `${fmt(a.closedByServer)}${Object.keys(a.goaway).length ? ` (${codes(a.goaway)})` : ''}` : '—'} | ${a ? fmt(a.reconnects) : '—'} | ${fmtPct(sv?.cpuPercent)} | ` +
        `${sv ? `${fmtMiB(sv.rssBeforeMiB)} / ${fmtMiB(sv.rssEndMiB)} / ${fmtMiB(sv.rssPeakMiB)} / ${fmtMiB(sv.rssAfterMiB)}` : 'n/a'} | ` +
        `${sv ? `${fmt(sv.socketsBefore)} / ${fmt(sv.socketsEnd)} / ${fmt(sv.socketsAfter)}` : 'n/a'} | ${fmtPct(r.attackerCpuPercent)} |`,
    );
  }
  const ack = results.filter((r) => r.attack === 'ack-flood' && r.attacker);
  if (ack.length) {
    lines.push(
      '',
      '## ACK flood: connections that never read',
      '',
      'FIN: the server ended the connection (GOAWAY and FIN, unread; seen as CLOSE_WAIT). Closed: the socket is gone (reset, or a write failed).',
      '',
      '| Scenario | First connections: FIN / closed / still open | Connect to FIN p50 / max | Connect to close p50 / p99 / max | All closed by the server | Open at the end (oldest) |',
      '|---|---|---|---|---:|---|',
    );
    for (const r of ack) {
      const a = r.attacker;
      const f = a.firstConnections;
      lines.push(
        `| \`${r.id}\` | ${fmt(a.firstFinMs?.n)} / ${fmt(f.closedByServer)} / ${fmt(f.stillOpen)} of ${fmt(f.n)} | ${fmtMs(a.firstFinMs?.p50)} / ${fmtMs(a.firstFinMs?.max)} | ` +
          `${fmtMs(f.lifetimesMs.p50)} / ${fmtMs(f.lifetimesMs.p99)} / ${fmtMs(f.lifetimesMs.max)} | ${fmt(a.closedByServer)} | ${fmt(a.openAtEnd)} (${fmtMs(a.openAtEndAgesMs.max)}) |`,
      );
    }
  }
  const body = results.filter((r) => r.attack === 'body' && r.attacker);
  if (body.length) {
    lines.push('', '## Body attack: calls that never finish', '', '| Scenario | RSS before / peak (VmHWM) / after, MiB | Calls opened / answered | Resets (RST_STREAM) | Body bytes sent | Good client p99 / failed |', '|---|---|---:|---|---:|---|');
    for (const r of body) {
      const a = r.attacker;
      lines.push(
        `| \`${r.id}\` | ${fmtMiB(r.service.rssBeforeMiB)} / ${fmtMiB(r.service.rssPeakMiB)} / ${fmtMiB(r.service.rssAfterMiB)} | ${fmt(a.streamsOpened)} / ${fmt(a.answers)}${a.answers ? ` (${codes(a.answerStatus)})` : ''} | ` +
          `${codes(a.rstReceived) || '0'} | ${fmtBytes(a.bodyBytesSent)} | ${fmtMs(r.client?.p99)} / ${fmt(r.client?.failed)} |`,
      );
    }
  }
  const held = results.filter((r) => r.client?.fresh);
  if (held.length) {
    lines.push(
      '',
      '## Newcomers: a new connection and one call every ' + `${CFG.freshMs} ms`,
      '',
      'Fresh: from the newcomer\'s connect to its answer (TCP, TLS where the port has it, HTTP/2 set-up, one call). Refused at once: closed by the server within 100 ms of connecting (a bound at accept); closed later: a phase bound or room made for another.',
      '',
      '| Scenario | Fresh calls ok / made | Fresh p50 / p99 / max | Good client p99 (x control) / failed | Good client p99 once the attacker holds its connections (x control): calls | Attacker: connects / refused at once / closed later / most open / open at the end | Service RSS MiB before / peak / after | Service CPU |',
      '|---|---:|---|---|---|---|---|---:|',
    );
    for (const r of held) {
      const f = r.client.fresh;
      const control = results.find((x) => x.id === (r.id.startsWith('tls-') ? 'control-tls' : 'control'));
      const ratio = control?.client?.p99 ? ` (${(r.client.p99 / control.client.p99).toFixed(1)}x)` : '';
      const a = r.attacker;
      lines.push(
        `| \`${r.id}\` | ${fmt(f.ok)} / ${fmt(f.n)}${Object.keys(f.failures).length ? ` (${codes(f.failures)})` : ''} | ${fmtMs(f.p50)} / ${fmtMs(f.p99)} / ${fmtMs(f.max)} | ` +
          `${fmtMs(r.client.p99)}${ratio} / ${fmt(r.client.failed)} | ${heldCell(r.client.held, control)} | ` +
          `${a && a.opened !== undefined ? `${fmt(a.opened)} / ${fmt(a.refusedAtOnce)} / ${fmt(a.closedLater)} / ${fmt(a.maxOpen)} / ${fmt(a.openAtEnd)}` : '—'} | ` +
          `${fmtMiB(r.service.rssBeforeMiB)} / ${fmtMiB(r.service.rssPeakMiB)} / ${fmtMiB(r.service.rssAfterMiB)} | ${fmtPct(r.service.cpuPercent)} |`,
      );
    }
  }
  const rlqs = results.filter((r) => r.attack === 'rlqs' && r.attacker);
  if (held.some((r) => r.client.held)) {
    lines.push('', 'Once the attacker holds its connections: from when the service had answered as many of its connections as its target (the fill, at most a few seconds into the window) to the end; the fill itself is in the whole-window p99.');
  }
  if (rlqs.length) {
    lines.push('', '## RLQS bucket floods', '', '| Scenario | Good client p99 / failed | RSS before / peak / after, MiB | Service CPU | Streams opened / ended (grpc-status) | Buckets reported | Why the streams ended |', '|---|---|---|---:|---|---:|---|');
    for (const r of rlqs) {
      const a = r.attacker;
      lines.push(
        `| \`${r.id}\` | ${fmtMs(r.client?.p99)} / ${fmt(r.client?.failed)} | ${fmtMiB(r.service.rssBeforeMiB)} / ${fmtMiB(r.service.rssPeakMiB)} / ${fmtMiB(r.service.rssAfterMiB)} | ${fmtPct(r.service.cpuPercent)} | ` +
          `${fmt(a.streamsOpened)} / ${codes(a.streamEnds) || '0'} | ${fmt(a.bucketsSent)} | ${Object.entries(a.endReasons ?? {}).map(([k, v]) => `"${k}" x ${fmt(v)}`).join('; ') || '—'} |`,
      );
    }
  }
  const noted = results.filter((r) => r.notes.length);
  if (noted.length) {
    lines.push('', '## Notes', '');
    for (const r of noted) lines.push(`- \`${r.id}\`: ${r.notes.join('; ')}`);
  }
  const goaways = results.filter((r) => r.attacker && Object.keys(r.attacker.goawayDebug).length);
  if (goaways.length) {
    lines.push('', '## GOAWAY reasons the attackers read', '');
    for (const r of goaways) lines.push(`- \`${r.id}\`: ${Object.entries(r.attacker.goawayDebug).map(([k, v]) => `"${k}" x ${fmt(v)}`).join('; ')}`);
  }
  if (problems.length) lines.push('', '## Problems', '', ...problems.map((p) => `- ${p}`));
  return lines.join('\n');
}

// ---------------------------------------------------------------------------------------------
// Main

async function main() {
  const machine = {
    nproc: NPROC,
    cpuModel: os.cpus()[0]?.model ?? 'unknown',
    node: process.version,
    kernel: os.release(),
    date: new Date().toISOString(),
    pinning: PIN
      ? `service: taskset -c 0; good client and attackers: taskset -c 1${NICE ? `, attackers at nice ${NICE}` : ''}`
      : `none (taskset missing or < 2 CPUs)${NICE ? `; attackers at nice ${NICE}` : ''}`,
  };
  log(`${machine.nproc} CPUs, ${machine.cpuModel}, Node ${machine.node}; pinning: ${machine.pinning}`);
  log(`${SCENARIOS.length} scenarios, ${CFG.warmupSeconds} s + ${CFG.seconds} s each; good client ${CFG.rate} calls/s`);
  const results = [];
  const problems = [];
  for (const s of SCENARIOS) {
    let r;
    try {
      r = await runScenario(s);
    } catch (err) {
      r = { ...meta(s), problems: [err.message.split('\n')[0]] };
    }
    r.notes = notesFor(r, results.find((x) => x.id === 'control'));
    results.push(r);
    for (const p of r.problems) problems.push(`${r.id}: ${p}`);
    const c = r.client;
    log(
      `${r.id}: good client p50 ${fmtMs(c?.p50)}, p99 ${fmtMs(c?.p99)}, max ${fmtMs(c?.max)}, ${c?.failed ?? 'n/a'} failed of ${c?.calls ?? 'n/a'}; ` +
        `service CPU ${fmtPct(r.service?.cpuPercent)}, RSS peak ${fmtMiB(r.service?.rssPeakMiB)} MiB` +
        `${r.attacker ? `; attacker: ${attackerCell(r)}; closed by server ${r.attacker.closedByServer}` : ''}` +
        `${r.notes.length ? `\n  notes: ${r.notes.join('; ')}` : ''}${r.problems.length ? `\n  PROBLEMS: ${r.problems.join('; ')}` : ''}`,
    );
  }
  fs.mkdirSync(RESULTS, { recursive: true });
  const settings = { ...CFG, nice: NICE };
  fs.writeFileSync(path.join(RESULTS, 'attacks.json'), `${JSON.stringify({ machine, settings, scenarios: results, problems }, null, 2)}\n`);
  const md = markdown(results, machine, problems);
  fs.writeFileSync(path.join(RESULTS, 'attacks.md'), `${md}\n`);
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
