'use strict';
/**
 * What the Redis store loses and fails when its Redis changes under load, measured against real
 * servers and two processes of the built service (as an SRE would run it):
 *
 * - `planned`: a master, a replica and three sentinels; 500 calls/s over 500 counters through two
 *   services (REDIS_TYPE=sentinel), `SENTINEL FAILOVER` after 5 s, 12 s more. Increments lost =
 *   per counter, the calls answered OK minus the count the new master holds; also when the old
 *   master got its last INCRBY, from the sentinels' `+switch-master`.
 * - `kill`: the same set, the master killed (SIGKILL) instead; calls failed and for how long.
 * - `cluster`: three masters (cluster-node-timeout 15 s, Redis's default, so the cluster does
 *   not mark the node failed within the window), 1,000 calls/s over keys on every shard, one
 *   master killed after 3 s; per shard for 6.5 s: calls, failed, and those that waited at least
 *   half of REDIS_TIMEOUT.
 * - `memory`: one Redis, 100,000 new counters through the service; used_memory per counter, for
 *   values of 12 and 40 characters (sizes the manifests' maxmemory).
 * - `password`: one Redis with a password, one service (REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true)
 *   at 500 calls/s over 500 counters; after 3 s Redis is restarted on its port with a new
 *   password, 10 s later again with the old one, 5 s more. Calls failed; when the log named the
 *   refusal (and how many times), when /healthcheck stopped answering 200; after the second
 *   restart, when calls succeed and health is 200 again.
 * - `evictions`: one Redis with `maxmemory 2mb`, `allkeys-lru` then `noeviction`, one service
 *   (REDIS_EVICTION_CHECK_INTERVAL=1s); its start-up warning; 20 counters spent to their limit
 *   (3 an hour), then distinct counters sprayed until Redis evicts (or refuses) and as many again;
 *   how many of the 20 were reset (their next call OK), what the spray's calls got, and the
 *   service's `ratelimit.redis.evicted_keys` / `may_evict` / `oom` (its /stats).
 *
 *   flock /work/bench.lock node bench/redis-failover.js [planned|kill|cluster|memory|password|evictions ...]   (default: all)
 *   BENCH_SERVICE=/path/to/dist/src/cli/ratelimit.js …   another build (e.g. the one before a change)
 *
 * Needs a build (`make build`), redis-server, redis-sentinel and redis-cli. Prints one JSON line
 * per scenario and a table; bench/README.md ("Redis failover") records a run.
 */
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const http = require('node:http');
const net = require('node:net');
const path = require('node:path');
const { ROOT, tmpDir, removeTmp, sleep, serviceEnv, startProcess } = require('./processes');
const { available, startRedis, startCluster, startSentinelSet, commandStats, cli, waitFor } = require('./redis');
const calculateSlot = require('cluster-key-slot');

const SERVICE = process.env['BENCH_SERVICE'] ?? path.join(ROOT, 'dist/src/cli/ratelimit.js');
const TIMEOUT_MS = 500;
const DOMAIN = 'bench';
const CONFIG = `domain: ${DOMAIN}
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
`;
/** `evictions`: the counters to spend (3 an hour) beside the spray's `user`. */
const SPENT_LIMIT = 3;
const EVICTION_CONFIG = `${CONFIG}  - key: spent
    rate_limit: {unit: hour, requests_per_unit: ${SPENT_LIMIT}}
`;

// ---------------------------------------------------------------------------------------------
// The service

/** Starts the built service on Redis (`env` on top), waits for its listening line; keeps all its output. */
async function startService(name, env, config = CONFIG) {
  const root = path.join(tmpDir(), `runtime-${name}-${Date.now()}`, 'current');
  fs.mkdirSync(path.join(root, 'ratelimit', 'config'), { recursive: true });
  fs.writeFileSync(path.join(root, 'ratelimit', 'config', 'bench.yaml'), config);
  const proc = spawn(process.execPath, [SERVICE], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: serviceEnv(root, {
      BACKEND_TYPE: 'redis',
      REDIS_SOCKET_TYPE: 'tcp',
      REDIS_TIMEOUT: `${TIMEOUT_MS}ms`,
      EXPIRATION_JITTER_MAX_SECONDS: '0',
      LOG_FORMAT: 'json',
      ...env,
    }),
  });
  let out = '';
  const collect = (d) => {
    out += d.toString();
  };
  proc.stdout.on('data', collect);
  proc.stderr.on('data', collect);
  const exited = new Promise((resolve) => proc.once('exit', resolve));
  await waitFor(`the service ${name} to listen`, () => {
    if (proc.exitCode !== null) throw new Error(`the service exited:\n${out}`);
    return /listening: gRPC \S+, HTTP \S+, debug [^\s"\\]+/.test(out);
  }, 30_000);
  const [, httpAddr, debugAddr] = /listening: gRPC \S+, HTTP (\S+), debug ([^\s"\\,]+)/.exec(out);
  return {
    http: httpAddr.replace(/,$/, ''),
    debug: debugAddr,
    output: () => out,
    /** Its JSON log lines matching `re`, each with `at` (ms) from its @timestamp. */
    lines: (re) =>
      out
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l))
        .filter((l) => re.test(l['@message']))
        .map((l) => ({ at: Date.parse(l['@timestamp']), message: l['@message'] })),
    async stop() {
      proc.kill('SIGTERM');
      const t = setTimeout(() => proc.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(t);
    },
  };
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 256 });

/** POST /json for `key` = `value`: { status (0: no answer), body }. */
function post(address, value, key = 'user') {
  const [host, port] = address.split(':');
  const body = JSON.stringify({ domain: DOMAIN, descriptors: [{ entries: [{ key, value }] }] });
  return new Promise((resolve) => {
    const req = http.request({ host, port: Number(port), path: '/json', method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
      let b = '';
      res.on('data', (d) => (b += d));
      res.on('end', () => resolve({ status: res.statusCode, body: b }));
    });
    req.on('error', (err) => resolve({ status: 0, body: err.message }));
    req.end(body);
  });
}

/** POST /json for `key` = `value`: 'ok', 'over' (429), 'failed' (the service answered an error) or 'error' (no answer). */
async function call(address, value, key = 'user') {
  const { status } = await post(address, value, key);
  return status === 200 ? 'ok' : status === 429 ? 'over' : status === 0 ? 'error' : 'failed';
}

/** GET /healthcheck on the HTTP port: its status, 0 without an answer. */
function healthStatus(address) {
  const [host, port] = address.split(':');
  return new Promise((resolve) => {
    const req = http.get({ host, port: Number(port), path: '/healthcheck', agent, timeout: 2000 }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode));
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve(0));
  });
}

/** Polls /healthcheck every 20 ms; `changes` is [{ at, status }] each time the status changed. */
function watchHealth(svc) {
  const changes = [];
  let stopped = false;
  const done = (async () => {
    while (!stopped) {
      const at = Date.now();
      const status = await healthStatus(svc.http);
      if (changes.length === 0 || changes[changes.length - 1].status !== status) changes.push({ at, status });
      await sleep(20);
    }
  })();
  return {
    changes,
    /** The first change after `from` to a status that `ok` (200) is or is not. */
    first: (from, ok) => changes.find((c) => c.at >= from && (c.status === 200) === ok),
    stop: async () => {
      stopped = true;
      await done;
    },
  };
}

/** The service's /stats as name → value. */
async function stats(svc) {
  const [host, port] = svc.debug.split(':');
  const text = await new Promise((resolve, reject) => {
    http.get({ host, port: Number(port), path: '/stats' }, (res) => {
      let b = '';
      res.on('data', (d) => (b += d));
      res.on('end', () => resolve(b));
    }).on('error', reject);
  });
  const o = {};
  for (const m of text.matchAll(/^(\S+): (-?[\d.]+)$/gm)) o[m[1]] = Number(m[2]);
  return o;
}

/**
 * An open loop of `rate` calls a second spread over `values`, alternating between `services`;
 * each outcome is recorded per value with when it was sent and how long it took.
 */
function load(services, values, rate) {
  const t0 = Date.now();
  let sent = 0;
  let stopped = false;
  const pending = new Set();
  const ok = new Map(values.map((v) => [v, 0]));
  const outcomes = [];
  const tick = () => {
    if (stopped) return;
    const due = Math.floor(((Date.now() - t0) * rate) / 1000);
    while (sent < due) {
      const v = values[sent % values.length];
      const svc = services[sent % services.length];
      sent++;
      const at = Date.now();
      const p = call(svc.http, v).then((r) => {
        outcomes.push({ at, ms: Date.now() - at, value: v, r });
        if (r === 'ok') ok.set(v, ok.get(v) + 1);
        pending.delete(p);
      });
      pending.add(p);
    }
    setTimeout(tick, 1);
  };
  tick();
  return {
    ok,
    outcomes,
    async stop() {
      stopped = true;
      await Promise.all(pending);
    },
  };
}

/** The Redis key of `key` = `value` now (hour window, no prefix): upstream's format. */
function keyOf(value, key = 'user') {
  const now = Math.floor(Date.now() / 1000);
  return `${DOMAIN}_${key}_${value}_${now - (now % 3600)}`;
}

/** Σ over values of max(0, calls answered OK − the count `address` holds). */
async function lostIncrements(address, ok) {
  let lost = 0;
  let held = 0;
  const values = [...ok.keys()];
  for (let i = 0; i < values.length; i += 100) {
    const batch = values.slice(i, i + 100);
    const out = (await cli(address, ['MGET', ...batch.map(keyOf)])).split('\n');
    batch.forEach((v, j) => {
      const n = Number(out[j] || 0);
      held += n;
      lost += Math.max(0, ok.get(v) - n);
    });
  }
  return { lost, held };
}

/** Resolves with when `channel` is next published by the sentinel at `address`. */
function nextEvent(address, channel) {
  const [h, p] = address.split(':');
  const proc = spawn('redis-cli', ['-h', h, '-p', p, '--csv', 'SUBSCRIBE', channel], { stdio: ['ignore', 'pipe', 'ignore'] });
  let subscribed;
  const ready = new Promise((resolve) => (subscribed = resolve));
  const event = new Promise((resolve) => {
    let buf = '';
    proc.stdout.on('data', (d) => {
      buf += d.toString();
      if (/"subscribe"/.test(buf)) subscribed();
      const m = /"message","[^"]+","([^"]*)"/.exec(buf);
      if (m) {
        resolve({ at: Date.now(), message: m[1] });
        proc.kill('SIGKILL');
      }
    });
  });
  return { ready, event, stop: () => proc.kill('SIGKILL') };
}

/** Polls `address`'s INCRBY count every 10 ms; `last()` is when it last grew. */
function watchWrites(address) {
  let last = Date.now();
  let count = -1;
  let stopped = false;
  const loop = async () => {
    while (!stopped) {
      try {
        const n = (await commandStats([{ address }]))['incrby'] ?? 0;
        if (n !== count) {
          if (count >= 0) last = Date.now();
          count = n;
        }
      } catch {
        return; // gone (killed)
      }
      await sleep(10);
    }
  };
  const done = loop();
  return {
    last: () => last,
    stop: async () => {
      stopped = true;
      await done;
    },
  };
}

function summarize(outcomes, from, to) {
  const w = outcomes.filter((o) => o.at >= from && o.at < to);
  const failed = w.filter((o) => o.r !== 'ok');
  return {
    calls: w.length,
    failed: failed.length,
    failedSeconds: failed.length === 0 ? 0 : (Math.max(...failed.map((o) => o.at)) - Math.min(...failed.map((o) => o.at))) / 1000,
    slow: w.filter((o) => o.ms >= TIMEOUT_MS / 2).length,
  };
}

// ---------------------------------------------------------------------------------------------
// Scenarios

const values = (n, width = 12) => Array.from({ length: n }, (_, i) => `u${String(i).padStart(width - 1, '0')}`);

async function sentinelRun(kind) {
  const set = await startSentinelSet();
  const services = [];
  try {
    for (let i = 0; i < 2; i++) services.push(await startService(`${kind}${i}`, { REDIS_TYPE: 'sentinel', REDIS_URL: set.url }));
    const old = await set.master();
    const next = set.servers.find((s) => s !== old);
    const users = values(500);
    const calls = load(services, users, 500);
    await sleep(5000);
    const sub = nextEvent(set.sentinels[1].address, '+switch-master');
    await sub.ready;
    const writes = watchWrites(old.address);
    const switchAt = Date.now();
    if (kind === 'planned') await cli(set.sentinels[0].address, ['SENTINEL', 'FAILOVER', set.name]);
    else process.kill(old.pid, 'SIGKILL');
    const switched = await Promise.race([sub.event, sleep(30_000).then(() => undefined)]);
    if (switched === undefined) throw new Error('no +switch-master within 30 s');
    await sleep(12_000);
    await calls.stop();
    await writes.stop();
    const { lost, held } = await lostIncrements(next.address, calls.ok);
    const answered = [...calls.ok.values()].reduce((a, b) => a + b, 0);
    let maybeLost = 0;
    for (const s of services) maybeLost += (await stats(s))['ratelimit.redis.increments_maybe_lost'] ?? 0;
    const window = summarize(calls.outcomes, switchAt, switchAt + 15_000);
    return {
      scenario: kind,
      service: SERVICE,
      callsAnswered: answered,
      countedOnNewMaster: held,
      incrementsLost: lost,
      incrementsMaybeLostCounted: maybeLost,
      switchMasterAfterMs: switched.at - switchAt,
      // Positive: the old master still got INCRBYs that long after +switch-master.
      lastWriteToOldMasterVsSwitchMs: kind === 'planned' ? writes.last() - switched.at : null,
      callsFailed: window.failed,
      failedSeconds: window.failedSeconds,
    };
  } finally {
    await Promise.all(services.map((s) => s.stop()));
    await set.stop();
  }
}

async function clusterRun() {
  const cluster = await startCluster(3, { extraArgs: ['--cluster-node-timeout', '15000'] });
  const services = [];
  try {
    for (let i = 0; i < 2; i++) services.push(await startService(`cluster${i}`, { REDIS_TYPE: 'cluster', REDIS_URL: cluster.url }));
    // The slot ranges of each node, from CLUSTER SLOTS as redis-cli --csv prints it (start,end,"ip",port,"id" per range).
    const owner = new Map();
    const slots = (await cli(cluster.nodes[0].address, ['--csv', 'CLUSTER', 'SLOTS'])).trim();
    for (const m of slots.matchAll(/(\d+),(\d+),"127\.0\.0\.1",(\d+)/g)) owner.set(`${m[1]}-${m[2]}`, Number(m[3]));
    const shardOf = (value) => {
      const slot = calculateSlot(keyOf(value));
      for (const [range, port] of owner) {
        const [a, b] = range.split('-').map(Number);
        if (slot >= a && slot <= b) return port;
      }
      return -1;
    };
    const users = values(600);
    const calls = load(services, users, 1000);
    await sleep(3000);
    const dead = cluster.nodes[1];
    const killedAt = Date.now();
    process.kill(dead.pid, 'SIGKILL');
    await sleep(6500);
    await calls.stop();
    const shards = {};
    for (const n of cluster.nodes) {
      const mine = calls.outcomes.filter((o) => shardOf(o.value) === n.port);
      shards[n === dead ? `${n.port} (killed)` : String(n.port)] = summarize(mine, killedAt, killedAt + 6500);
    }
    return { scenario: 'cluster', service: SERVICE, window: '6.5 s after the kill', shards };
  } finally {
    await Promise.all(services.map((s) => s.stop()));
    await cluster.stop();
  }
}

async function memoryRun() {
  const results = [];
  for (const width of [12, 40]) {
    const redis = await startRedis();
    const svc = await startService(`memory${width}`, { REDIS_URL: redis.address });
    try {
      const info = async () => {
        const t = await cli(redis.address, ['INFO', 'memory']);
        return Number(/used_memory:(\d+)/.exec(t)[1]);
      };
      await call(svc.http, 'warm');
      const before = await info();
      const n = 100_000;
      const users = values(n, width);
      for (let i = 0; i < n; i += 200) await Promise.all(users.slice(i, i + 200).map((v) => call(svc.http, v)));
      const after = await info();
      const keys = Number((await cli(redis.address, ['DBSIZE'])).trim());
      results.push({ valueChars: width, keyBytes: keyOf(users[0]).length, counters: keys - 1, bytesPerCounter: Math.round((after - before) / (keys - 1)) });
    } finally {
      await svc.stop();
      await redis.stop();
    }
  }
  return { scenario: 'memory', results };
}

/** A free port on 127.0.0.1. */
function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

/** A redis-server on `port` (a fixed one: a restart keeps the address) with `password`; resolves once it accepts connections. */
async function redisOn(port, password) {
  const dir = fs.mkdtempSync(path.join(tmpDir(), 'redis-'));
  const args = ['--bind', '127.0.0.1', '--port', String(port), '--dir', dir, '--save', '', '--appendonly', 'no', '--requirepass', password];
  return startProcess(`redis-server :${port}`, 'redis-server', args, { PATH: process.env['PATH'] }, /Ready to accept connections/, 10_000, '0-1');
}

async function passwordRun() {
  const port = await freePort();
  const address = `127.0.0.1:${port}`;
  let redis = await redisOn(port, 'old-secret');
  const svc = await startService('password', { REDIS_URL: address, REDIS_AUTH: 'old-secret', REDIS_HEALTH_CHECK_ACTIVE_CONNECTION: 'true' });
  try {
    const health = watchHealth(svc);
    const calls = load([svc], values(500), 500);
    await sleep(3000);
    // Restarted with a new password: down from stopAt, refusing from upAt.
    const stopAt = Date.now();
    await redis.stop();
    redis = await redisOn(port, 'new-secret');
    const upAt = Date.now();
    await sleep(2000);
    const sample = await post(svc.http, 'sample');
    await sleep(8000);
    // Restarted with the old password again: accepting from backAt.
    const restoreAt = Date.now();
    await redis.stop();
    redis = await redisOn(port, 'old-secret');
    const backAt = Date.now();
    await sleep(5000);
    await calls.stop();
    await health.stop();
    const o = calls.outcomes;
    const refusals = svc.lines(/refuses our credentials/);
    const accepted = svc.lines(/accepts our credentials again/);
    const failed = o.filter((c) => c.r !== 'ok');
    const firstOkAfter = o.filter((c) => c.r === 'ok' && c.at >= backAt).sort((a, b) => a.at - b.at)[0];
    const lastFailed = failed.length === 0 ? undefined : failed.reduce((a, b) => (b.at > a.at ? b : a));
    const down = health.first(stopAt, false);
    const upAgain = health.first(backAt, true);
    const refusing = o.filter((c) => c.at >= upAt && c.at < restoreAt);
    return {
      scenario: 'password',
      service: SERVICE,
      restartMs: upAt - stopAt,
      wrongPasswordSeconds: (restoreAt - upAt) / 1000,
      calls: o.length,
      callsFailed: failed.length,
      callsFailedWhileRefused: refusing.filter((c) => c.r !== 'ok').length,
      callsWhileRefused: refusing.length,
      failedCallsFromStopSeconds: lastFailed === undefined ? 0 : (lastFailed.at - stopAt) / 1000,
      slowWhileRefused: refusing.filter((c) => c.ms >= TIMEOUT_MS / 2).length,
      sampleAnswer: `${sample.status} ${sample.body.trim().slice(0, 160)}`,
      refusalLines: refusals.length,
      refusalLineAfterNewRedisMs: refusals.length === 0 ? null : refusals[0].at - upAt,
      refusalLine: refusals[0]?.message ?? null,
      healthNot200AfterStopMs: down === undefined ? null : down.at - stopAt,
      healthNot200Status: down?.status ?? null,
      // /healthcheck back to 200 between going down and the old password's return (should be none).
      health200WhileRefused: health.changes.filter((c) => down !== undefined && c.at > down.at && c.at < backAt && c.status === 200).length,
      healthChanges: health.changes.map((c) => [c.at - stopAt, c.status]),
      acceptedLines: accepted.length,
      acceptedLineAfterOldRedisMs: accepted.length === 0 ? null : accepted[0].at - backAt,
      firstOkCallAfterOldRedisMs: firstOkAfter === undefined ? null : firstOkAfter.at - backAt,
      lastFailedCallAfterOldRedisMs: lastFailed === undefined || lastFailed.at < backAt ? null : lastFailed.at - backAt,
      health200AfterOldRedisMs: upAgain === undefined ? null : upAgain.at - backAt,
    };
  } finally {
    await svc.stop();
    await redis.stop();
  }
}

/** One Redis with maxmemory 2mb and `policy`: the start-up warning, 20 spent counters, a spray, what was reset. */
async function evictionRun(policy) {
  const redis = await startRedis({ extraArgs: ['--maxmemory', '2mb', '--maxmemory-policy', policy] });
  const spawnedAt = Date.now();
  const svc = await startService(`evictions-${policy}`, { REDIS_URL: redis.address, REDIS_EVICTION_CHECK_INTERVAL: '1s' }, EVICTION_CONFIG);
  try {
    const evictedInRedis = async () => Number(/evicted_keys:(\d+)/.exec(await cli(redis.address, ['INFO', 'stats']))[1]);
    const usedMemory = async () => Number(/used_memory:(\d+)/.exec(await cli(redis.address, ['INFO', 'memory']))[1]);
    await sleep(1500); // the start-up check, and one periodic check
    const listening = svc.lines(/listening: gRPC/)[0];
    const warning = svc.lines(/may evict counters/)[0];
    const memoryAtStart = await usedMemory();
    // 20 counters spent to their limit: SPENT_LIMIT calls OK, the next over the limit; then left idle.
    const spent = values(20).map((v) => `s${v}`);
    const spending = { ok: 0, over: 0, other: 0 };
    for (const v of spent) {
      for (let i = 0; i <= SPENT_LIMIT; i++) {
        const r = await call(svc.http, v, 'spent');
        spending[r === 'ok' || r === 'over' ? r : 'other']++;
      }
    }
    // The spray: distinct counters, 200 at a time, until Redis evicts (or a call fails), then as many again.
    const sprayed = { ok: 0, over: 0, failed: 0, error: 0 };
    const afterFull = { ok: 0, over: 0, failed: 0, error: 0 };
    const statuses = {};
    let n = 0;
    let untilFull;
    let sample;
    const cap = 200_000;
    while (n < cap && (untilFull === undefined || n < 2 * untilFull)) {
      const batch = Array.from({ length: 200 }, (_, i) => `x${String(n + i).padStart(11, '0')}`);
      n += batch.length;
      const answers = await Promise.all(batch.map((v) => post(svc.http, v)));
      let failedHere = 0;
      for (const a of answers) {
        const r = a.status === 200 ? 'ok' : a.status === 429 ? 'over' : a.status === 0 ? 'error' : 'failed';
        sprayed[r]++;
        if (untilFull !== undefined) afterFull[r]++;
        statuses[a.status] = (statuses[a.status] ?? 0) + 1;
        if (r === 'failed' || r === 'error') {
          failedHere++;
          sample ??= `${a.status} ${a.body.trim().slice(0, 160)}`;
        }
      }
      if (untilFull === undefined && (failedHere > 0 || (await evictedInRedis()) > 0)) untilFull = n;
    }
    await sleep(2500); // two eviction checks
    const evictedAfterSpray = await evictedInRedis();
    const held = (await cli(redis.address, ['MGET', ...spent.map((v) => keyOf(v, 'spent'))])).split('\n').slice(0, spent.length);
    const kept = held.filter((x) => Number(x) > SPENT_LIMIT).length;
    const after = { ok: 0, over: 0, failed: 0, error: 0 };
    for (const v of spent) after[await call(svc.http, v, 'spent')]++;
    await sleep(1500); // one more check
    // redis-cli's own connection costs Redis memory, so under allkeys-lru each read evicts keys too: the service's count is read a check later.
    const evictedAtEnd = await evictedInRedis();
    await sleep(1500);
    const st = await stats(svc);
    return {
      policy,
      usedMemoryAtStart: memoryAtStart,
      mayEvictWarningAfterListeningMs: warning === undefined ? null : warning.at - listening.at,
      mayEvictWarningAfterSpawnMs: warning === undefined ? null : warning.at - spawnedAt,
      mayEvictWarnings: svc.lines(/may evict counters/).length,
      spending,
      sprayCalls: n,
      sprayCallsUntilFull: untilFull ?? null,
      sprayed,
      sprayAfterFull: afterFull,
      sprayStatuses: statuses,
      sprayFailedSample: sample ?? null,
      redisEvictedKeysAfterSpray: evictedAfterSpray,
      spentCountersStillHeld: kept,
      spentCallsAfter: after,
      spentCountersReset: after.ok,
      redisEvictedKeys: evictedAtEnd,
      evictedKeysStat: st['ratelimit.redis.evicted_keys'] ?? null,
      mayEvictStat: st['ratelimit.redis.may_evict'] ?? null,
      oomStat: st['ratelimit.redis.oom'] ?? null,
      evictionWarnings: svc.lines(/evicted \d+ keys? since the last check/).map((l) => l.message),
      fullLines: svc.lines(/is full and refuses new counters/).length,
      roomAgainLines: svc.lines(/has room for new counters again/).length,
    };
  } finally {
    await svc.stop();
    await redis.stop();
  }
}

async function main() {
  const problem = available();
  if (problem !== null) throw new Error(problem);
  const wanted = process.argv.slice(2);
  const run = wanted.length === 0 ? ['planned', 'kill', 'cluster', 'memory', 'password', 'evictions'] : wanted;
  for (const s of run) {
    let r;
    if (s === 'planned' || s === 'kill') r = await sentinelRun(s);
    else if (s === 'cluster') r = await clusterRun();
    else if (s === 'memory') r = await memoryRun();
    else if (s === 'password') r = await passwordRun();
    else if (s === 'evictions') r = { scenario: 'evictions', service: SERVICE, results: [await evictionRun('allkeys-lru'), await evictionRun('noeviction')] };
    else throw new Error(`unknown scenario ${s}: planned, kill, cluster, memory, password or evictions`);
    console.log(JSON.stringify(r));
  }
}

main()
  .catch((err) => {
    console.error(err);
    process.exitCode = 1;
  })
  .finally(() => {
    agent.destroy();
    removeTmp();
  });
