'use strict';
/**
 * Big configs under load (issue 30, item 1): the service serves about 200 calls a second on
 * `POST /json` while a big config file is added to its config directory and removed again. For
 * each scenario: the calls that failed (an error, or no answer within 2 s), the slowest answer,
 * the service's peak resident set (VmHWM, threads included) and its resident set after the
 * load and after the removal, how long the load took, and what /stats and /rlconfig say.
 *
 *   flock /work/bench.lock node bench/big-config.js        (needs `make build`)
 *
 * Scenarios (BIG_CONFIG_SCENARIOS=a,b to run some):
 * - `descriptors-100k`: a 99,999-descriptor file (about 10.8 MB; with the base rule, exactly
 *   CONFIG_MAX_DESCRIPTORS) added, then removed;
 * - `comments-50mb`: 50 MB of comments around one rule, with the default CONFIG_MAX_BYTES
 *   (refused) and with CONFIG_MAX_BYTES=0 (loaded);
 * - `descriptors-50mb`: 476,626 descriptors (about 51 MB), with the default limits (refused) and
 *   with both limits off (CONFIG_MAX_BYTES=0, CONFIG_MAX_DESCRIPTORS=0);
 * - `over-descriptors` (issue 40): 200,000 descriptors (21.6 MB, under CONFIG_MAX_BYTES) in block
 *   style, then in one-line flow style (19 MB), with CONFIG_MAX_DESCRIPTORS=100000 set;
 * - `reload-100k`: the service starts on 99,999 descriptors and a file of 99,999 others replaces
 *   them (a reload at the cap holds two configs);
 * - `xds-over-resources` (issue 40): over ADS, 1,000,000 resources of a domain each (87 MB) and
 *   240,000 resources of one descriptor each (27 MB), with XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES at
 *   512 MiB (the caps, not gRPC's 4 MiB, are what is measured);
 * - `xds-max`: 9,999 resources of 10 descriptors each (99,990 descriptors, 3.6 MB), under every cap.
 * The figures go to bench/results/big-config.json and are printed as a markdown table; xDS
 * scenarios have no removal (the base config is pushed again after an accepted one).
 */
const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');
const { ROOT, startService, rssMiB, peakRssMiB, sleep, tmpDir, removeTmp } = require('./processes');

const RATE = 200;
const DEADLINE_MS = 2000;
const RESULTS = process.env['BIG_CONFIG_RESULTS'] ?? path.join(ROOT, 'bench', 'results', 'big-config.json');

/** One descriptor per client, 108 bytes each (95 in flow style); values from `prefix`. */
function descriptorsYaml(n, style = 'block', prefix = 'client_', domain = 'big') {
  const parts = [`domain: ${domain}\ndescriptors:\n`];
  for (let i = 0; i < n; i++) {
    const value = `${prefix}${String(i).padStart(6, '0')}`;
    parts.push(
      style === 'flow'
        ? `  - {key: client_id, value: ${value}, rate_limit: {unit: second, requests_per_unit: ${100 + (i % 50)}}}\n`
        : `  - key: client_id\n    value: ${value}\n    rate_limit:\n      unit: second\n      requests_per_unit: ${100 + (i % 50)}\n`,
    );
  }
  return parts.join('');
}

/** One rule inside `mb` MB of comment lines. */
function commentsYaml(mb) {
  const line = `# ${'x'.repeat(77)}\n`;
  const half = line.repeat(Math.floor((mb * 1e6) / line.length / 2));
  return `${half}domain: big\ndescriptors:\n  - key: client_id\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n${half}`;
}

/** Steady calls at RATE per second until stop(); every call's latency, and the failures. */
function load(httpAddr) {
  const [host, port] = [httpAddr.slice(0, httpAddr.lastIndexOf(':')), Number(httpAddr.slice(httpAddr.lastIndexOf(':') + 1))];
  // Idle sockets closed after 3 s, before the server's 5 s keep-alive bound (else a reused one may meet its close).
  const agent = new http.Agent({ keepAlive: true, maxSockets: 64, timeout: 3000 });
  const body = JSON.stringify({ domain: 'bench', descriptors: [{ entries: [{ key: 'client_id', value: 'c1' }] }] });
  const latencies = [];
  const failures = [];
  let inFlight = 0;
  let stopped = false;
  const one = () => {
    const t0 = performance.now();
    inFlight++;
    let done = false;
    const finish = (ok, why) => {
      if (done) return;
      done = true;
      inFlight--;
      const ms = performance.now() - t0;
      latencies.push(ms);
      if (!ok) failures.push({ at: Date.now(), why, ms: Math.round(ms) });
    };
    const req = http.request({ host, port, path: '/json', method: 'POST', agent, headers: { 'content-type': 'application/json' } }, (res) => {
      res.resume();
      res.on('end', () => finish(res.statusCode === 200, `status ${res.statusCode}`));
    });
    req.setTimeout(DEADLINE_MS, () => {
      finish(false, `no answer within ${DEADLINE_MS} ms`);
      req.destroy();
    });
    req.on('error', (e) => finish(false, e.message));
    req.end(body);
  };
  const t0 = performance.now();
  let sent = 0;
  let markAt = 0;
  const timer = setInterval(() => {
    // Open loop: catch up with the schedule, whatever the answers do.
    const due = Math.floor(((performance.now() - t0) / 1000) * RATE);
    while (sent < due && !stopped) {
      sent++;
      one();
    }
  }, 5);
  return {
    /** p99 and max of the calls answered since the previous mark (the machine's own noise, before a load). */
    mark() {
      const window = latencies.slice(markAt).sort((a, b) => a - b);
      markAt = latencies.length;
      return { p99Ms: window[Math.floor(0.99 * window.length)] ?? null, maxMs: window[window.length - 1] ?? null };
    },
    async stop() {
      stopped = true;
      clearInterval(timer);
      for (let i = 0; i < 100 && inFlight > 0; i++) await sleep(50);
      agent.destroy();
      const sorted = [...latencies].sort((a, b) => a - b);
      const q = (p) => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] : null);
      return { calls: sent, failed: failures.length, firstFailures: failures.slice(0, 3), p99Ms: q(0.99), maxMs: sorted.length ? sorted[sorted.length - 1] : null };
    },
  };
}

function get(addr, p) {
  return new Promise((resolve, reject) => {
    const req = http.get(`http://${addr}${p}`, (res) => {
      let bytes = 0;
      const keep = [];
      res.on('data', (d) => {
        bytes += d.length;
        if (bytes < 1e6) keep.push(d);
      });
      res.on('end', () => resolve({ status: res.statusCode, bytes, text: Buffer.concat(keep).toString() }));
    });
    req.on('error', reject);
  });
}

async function stat(debugAddr, name) {
  const { text } = await get(debugAddr, '/stats');
  const m = new RegExp(`^${name.replace(/\./g, '\\.')}: (\\d+)$`, 'm').exec(text);
  return m ? Number(m[1]) : null;
}

/** Waits until the stat differs from `from` (at most `ms`); its value, or null on time out. */
async function statChange(debugAddr, name, from, ms) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    const v = await stat(debugAddr, name);
    if (v !== null && v !== from) return v;
    await sleep(100);
  }
  return null;
}

const BASE = `domain: bench
descriptors:
  - key: client_id
    rate_limit:
      unit: second
      requests_per_unit: 1000000000
`;

/**
 * The service under load; `content` added as a second config file, then removed. With
 * `replaces`, the service starts on `replaces` as a second file and `content` takes its place.
 */
async function scenario(id, content, env, replaces) {
  // As the image runs it (deploy/Dockerfile): big buffers come from mmap and go back when freed.
  const dir = path.join(tmpDir(), `runtime-${id}`, 'current', 'ratelimit', 'config');
  if (replaces !== undefined) {
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(path.join(dir, 'big.yaml'), replaces);
  }
  const srv = await startService(id, BASE, { MALLOC_MMAP_THRESHOLD_: '65536', ...env }, '0,1');
  const result = { id, env, bytes: Buffer.byteLength(content) };
  // Written beside the directory before the calls start (writing 50 MB holds this process's own
  // loop, which would show as the service's latency), then renamed into it: the service sees the
  // whole file at once.
  const staged = path.join(dir, '..', 'big.yaml.staged');
  fs.writeFileSync(staged, content);
  try {
    const calls = load(srv.httpAddr);
    await sleep(1000);
    calls.mark();
    await sleep(4000);
    const baseline = calls.mark();
    result.baselineP99Ms = baseline.p99Ms;
    result.baselineMaxMs = baseline.maxMs;
    result.rssBeforeMiB = Math.round(rssMiB(srv.pid));
    const successes = await stat(srv.debugAddr, 'ratelimit.service.config_load_success');
    const errors = await stat(srv.debugAddr, 'ratelimit.service.config_load_error');
    const t0 = Date.now();
    fs.renameSync(staged, path.join(dir, 'big.yaml'));
    // Loaded (a success) or refused (an error): whichever moves first.
    const outcome = await Promise.race([
      statChange(srv.debugAddr, 'ratelimit.service.config_load_success', successes, 180_000).then((v) => (v === null ? null : 'loaded')),
      statChange(srv.debugAddr, 'ratelimit.service.config_load_error', errors, 180_000).then((v) => (v === null ? null : 'refused')),
    ]);
    result.outcome = outcome ?? 'no answer within 180 s';
    result.loadSeconds = (Date.now() - t0) / 1000;
    result.peakAtOutcomeMiB = Math.round(peakRssMiB(srv.pid));
    await sleep(1000);
    result.rules = await stat(srv.debugAddr, 'ratelimit.config.rules');
    result.rssLoadedMiB = Math.round(rssMiB(srv.pid));
    const dump = await get(srv.debugAddr, '/rlconfig');
    result.rlconfigBytes = dump.bytes;
    result.rssAfterRlconfigMiB = Math.round(rssMiB(srv.pid));
    const before = await stat(srv.debugAddr, 'ratelimit.service.config_load_success');
    // Moved out rather than deleted (unlinking 50 MB takes a while in this process).
    fs.renameSync(path.join(dir, 'big.yaml'), staged);
    if (outcome === 'loaded') await statChange(srv.debugAddr, 'ratelimit.service.config_load_success', before, 60_000);
    await sleep(5000);
    result.rulesAfterRemoval = await stat(srv.debugAddr, 'ratelimit.config.rules');
    result.rssAfterRemovalMiB = Math.round(rssMiB(srv.pid));
    await sleep(25_000);
    result.rss30sAfterRemovalMiB = Math.round(rssMiB(srv.pid));
    result.peakRssMiB = Math.round(peakRssMiB(srv.pid));
    Object.assign(result, await calls.stop());
    result.alive = srv.proc.exitCode === null && srv.proc.signalCode === null;
  } finally {
    await srv.stop();
  }
  return result;
}

const TYPE_URL = 'type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig';

/** `n` resources as Any values: `perResource` descriptors each (0: a domain alone). */
function xdsResources(n, perResource) {
  const { RateLimitConfig } = require(path.join(ROOT, 'dist/generated/ratelimit/config/ratelimit/v3/rls_conf'));
  const out = new Array(n);
  for (let i = 0; i < n; i++) {
    const descriptors = Array.from({ length: perResource }, (_, j) => ({ key: 'client_id', value: `c${i}_${j}`, rateLimit: { unit: 1, requestsPerUnit: 100 } }));
    out[i] = { typeUrl: TYPE_URL, value: Buffer.from(RateLimitConfig.encode(RateLimitConfig.fromPartial({ name: `r${i}`, domain: `d${i}`, descriptors })).finish()) };
  }
  return out;
}

/**
 * The service under load on xDS (a ManagementServer in this process): version 1 is BASE, version
 * 2 is `resources` (with BASE's resource first); the run waits for version 2's ACK or NACK.
 */
async function xdsScenario(id, resources, env) {
  const { ManagementServer } = require(path.join(ROOT, 'dist/src/xds-server/management-server'));
  const { RateLimitConfig } = require(path.join(ROOT, 'dist/generated/ratelimit/config/ratelimit/v3/rls_conf'));
  const base = RateLimitConfig.fromPartial({ name: 'bench', domain: 'bench', descriptors: [{ key: 'client_id', rateLimit: { unit: 1, requestsPerUnit: 1e9 } }] });
  const ms = new ManagementServer({ host: '127.0.0.1', port: 0 });
  await ms.start();
  const answers = [];
  ms.onRequest((r) => answers.push(r));
  ms.setSnapshot('1', [base]);
  const srv = await startService(id, BASE, {
    MALLOC_MMAP_THRESHOLD_: '65536',
    CONFIG_TYPE: 'GRPC_XDS_SOTW',
    CONFIG_GRPC_XDS_SERVER_URL: ms.address,
    XDS_CLIENT_BACKOFF_INITIAL_INTERVAL: '100ms',
    ...env,
  }, '0,1');
  const bytes = resources.reduce((n, r) => n + r.value.length + r.typeUrl.length + 4, 0);
  const result = { id, env, bytes, resources: resources.length };
  try {
    const calls = load(srv.httpAddr);
    await sleep(1000);
    calls.mark();
    await sleep(4000);
    const baseline = calls.mark();
    result.baselineP99Ms = baseline.p99Ms;
    result.baselineMaxMs = baseline.maxMs;
    result.rssBeforeMiB = Math.round(rssMiB(srv.pid));
    const t0 = Date.now();
    const from = answers.length;
    ms.setSnapshot('2', [base, ...resources]);
    let answer;
    while (Date.now() - t0 < 180_000) {
      answer = answers.slice(from).find((r) => r.kind !== 'subscribe' && !r.stale && (r.request.versionInfo === '2' || r.kind === 'nack'));
      if (answer !== undefined || srv.proc.exitCode !== null || srv.proc.signalCode !== null) break;
      await sleep(50);
    }
    result.outcome = answer === undefined ? 'no ACK or NACK within 180 s' : answer.kind === 'ack' ? 'ACKed' : `NACKed (${answer.request.errorDetail?.message ?? ''})`;
    result.loadSeconds = (Date.now() - t0) / 1000;
    result.peakAtOutcomeMiB = Math.round(peakRssMiB(srv.pid));
    await sleep(1000);
    result.rules = await stat(srv.debugAddr, 'ratelimit.config.rules');
    result.rssLoadedMiB = Math.round(rssMiB(srv.pid));
    if (answer?.kind === 'ack') {
      ms.setSnapshot('3', [base]);
      await statChange(srv.debugAddr, 'ratelimit.config.rules', result.rules, 60_000);
    }
    await sleep(5000);
    result.rssAfterRemovalMiB = Math.round(rssMiB(srv.pid));
    await sleep(25_000);
    result.rss30sAfterRemovalMiB = Math.round(rssMiB(srv.pid));
    result.peakRssMiB = Math.round(peakRssMiB(srv.pid));
    Object.assign(result, await calls.stop());
    result.alive = srv.proc.exitCode === null && srv.proc.signalCode === null;
  } finally {
    await srv.stop();
    await ms.stop();
  }
  return result;
}

/** The xDS runs' receive limit: the caps, not gRPC's 4 MiB default, are what they measure. */
const BIG_XDS_MESSAGES = { XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES: String(512 * 1024 * 1024) };

const SCENARIOS = {
  // With the base rule: exactly CONFIG_MAX_DESCRIPTORS (100,000).
  'descriptors-100k': () => [['descriptors-100k', descriptorsYaml(99_999), {}]],
  'over-descriptors': () => [
    ['over-descriptors-200k', descriptorsYaml(200_000), { CONFIG_MAX_DESCRIPTORS: '100000' }],
    ['over-descriptors-200k-flow', descriptorsYaml(200_000, 'flow'), { CONFIG_MAX_DESCRIPTORS: '100000' }],
  ],
  'reload-100k': () => [['reload-100k', descriptorsYaml(99_999, 'block', 'next_'), {}, descriptorsYaml(99_999)]],
  'xds-over-resources': () => [
    ['xds-1m-resources', () => xdsResources(1_000_000, 0), BIG_XDS_MESSAGES],
    ['xds-240k-resources', () => xdsResources(240_000, 1), BIG_XDS_MESSAGES],
  ],
  'xds-max': () => [['xds-max', () => xdsResources(9_999, 10), {}]],
  'comments-50mb': () => {
    const c = commentsYaml(50);
    return [['comments-50mb', c, {}], ['comments-50mb-unlimited', c, { CONFIG_MAX_BYTES: '0' }]];
  },
  'descriptors-50mb': () => {
    const c = descriptorsYaml(476_626);
    return [['descriptors-50mb', c, {}], ['descriptors-50mb-unlimited', c, { CONFIG_MAX_BYTES: '0', CONFIG_MAX_DESCRIPTORS: '0' }]];
  },
};

async function main() {
  const wanted = (process.env['BIG_CONFIG_SCENARIOS'] ?? Object.keys(SCENARIOS).join(',')).split(',');
  const results = [];
  for (const name of wanted) {
    for (const [id, content, env, replaces] of SCENARIOS[name]()) {
      process.stderr.write(`${id}...\n`);
      const r = typeof content === 'function' ? await xdsScenario(id, content(), env) : await scenario(id, content, env, replaces);
      process.stderr.write(`${JSON.stringify(r)}\n`);
      results.push(r);
    }
  }
  fs.mkdirSync(path.dirname(RESULTS), { recursive: true });
  fs.writeFileSync(RESULTS, JSON.stringify({ date: new Date().toISOString(), rate: RATE, deadlineMs: DEADLINE_MS, results }, null, 2));
  const f = (v, d = 0) => (v === null || v === undefined ? '-' : typeof v === 'number' ? v.toFixed(d) : String(v));
  console.log('| Scenario | MB | Outcome | Load s | Rules | Calls | Failed | p99 ms (before) | Max ms (before) | RSS before | Peak at outcome | Peak RSS | RSS loaded | After /rlconfig | 5 s after removal | 30 s after |');
  console.log('|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|');
  for (const r of results) {
    console.log(
      `| ${r.id} | ${f(r.bytes / 1e6, 1)} | ${r.outcome}${r.alive ? '' : ' (process died)'} | ${f(r.loadSeconds, 1)} | ${f(r.rules)} | ${f(r.calls)} | ${f(r.failed)} | ${f(r.p99Ms)} (${f(r.baselineP99Ms)}) | ${f(r.maxMs)} (${f(r.baselineMaxMs)}) | ${f(r.rssBeforeMiB)} | ${f(r.peakAtOutcomeMiB)} | ${f(r.peakRssMiB)} | ${f(r.rssLoadedMiB)} | ${f(r.rssAfterRlconfigMiB)} | ${f(r.rssAfterRemovalMiB)} | ${f(r.rss30sAfterRemovalMiB)} |`,
    );
  }
}

main()
  .catch((e) => {
    console.error(e);
    process.exitCode = 1;
  })
  .finally(removeTmp);
