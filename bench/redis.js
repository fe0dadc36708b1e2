'use strict';
/**
 * Redis servers for the benchmark (plain JS twin of test/support/redis.ts): `redis-server` on free
 * 127.0.0.1 ports, each in a fresh temp dir, no persistence; `startCluster()` joins 3 masters with
 * `redis-cli --cluster create --cluster-replicas 0 --cluster-yes`. Every `stop()` sends SIGTERM,
 * then SIGKILL after a bounded wait, and removes the dir; anything still running when this process
 * exits is killed (SIGKILL) and its dir removed.
 *
 *   const r = await startRedis();        // r.address = '127.0.0.1:<port>'; r.pid
 *   await commandStats([r]);             // { incrby: calls, expire: calls, ... } summed over nodes
 *   await r.stop();
 *   const c = await startCluster(3);     // c.url = 'h:p,h:p,h:p'; c.nodes; c.stop()
 *   startCluster(3, { extraArgs: ['--cluster-node-timeout', '15000'] })   // appended to each node's
 *   const s = await startSentinelSet();  // master + replica + 3 sentinels; s.url = 'mymaster,h:p,…'
 */
const { execFile, spawn, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');

const HOST = '127.0.0.1';
const running = new Set();
const dirs = new Set();
process.on('exit', () => {
  for (const p of running) {
    try {
      p.kill('SIGKILL');
    } catch {
      /* gone */
    }
  }
  for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
});

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function available() {
  for (const b of ['redis-server', 'redis-cli']) {
    const r = spawnSync(b, ['--version'], { encoding: 'utf8', timeout: 10_000 });
    if (r.error || r.status !== 0) return `${b} not runnable${r.error ? ` (${r.error.message})` : ''}`;
  }
  return null;
}

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.once('error', reject);
    srv.listen(0, HOST, () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

function cli(address, args, timeoutMs = 15_000) {
  const [h, p] = address.split(':');
  return new Promise((resolve, reject) => {
    execFile('redis-cli', ['-h', h, '-p', p, ...args], { timeout: timeoutMs, encoding: 'utf8', maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`redis-cli ${args.join(' ')}: ${err.message}\n${stderr}`));
      else resolve(stdout);
    });
  });
}

async function waitFor(what, check, timeoutMs = 10_000, intervalMs = 50) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      if (await check()) return;
    } catch (err) {
      last = err;
    }
    if (Date.now() >= deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? `: ${last.message}` : ''}`);
    await sleep(intervalMs);
  }
}

/** Starts one redis-server (optionally pinned via `wrap`: [cmd, args] => [cmd, args]) and waits for PING. */
async function startRedis({ extraArgs = [], wrap = (c, a) => [c, a] } = {}) {
  for (let attempt = 0; ; attempt++) {
    const port = await freePort();
    try {
      return await startOnce(port, extraArgs, wrap);
    } catch (err) {
      if (attempt >= 2 || !/Address already in use/i.test(String(err))) throw err;
    }
  }
}

async function startOnce(port, extraArgs, wrap) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rl-bench-redis-'));
  dirs.add(dir);
  const args = ['--bind', HOST, '--port', String(port), '--dir', dir, '--daemonize', 'no', '--save', '', '--appendonly', 'no', ...extraArgs];
  const [cmd, argv] = wrap('redis-server', args);
  const proc = spawn(cmd, argv, { stdio: ['ignore', 'pipe', 'pipe'] });
  running.add(proc);
  let out = '';
  const collect = (d) => {
    out = (out + d.toString()).slice(-65536);
  };
  proc.stdout.on('data', collect);
  proc.stderr.on('data', collect);
  const exited = new Promise((resolve) => {
    proc.once('exit', () => {
      running.delete(proc);
      resolve();
    });
    proc.once('error', (err) => {
      out += `\nspawn error: ${err.message}`;
      running.delete(proc);
      resolve();
    });
  });
  const address = `${HOST}:${port}`;
  const stop = async () => {
    if (running.has(proc)) {
      proc.kill('SIGTERM');
      const t = setTimeout(() => proc.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(t);
    }
    fs.rmSync(dir, { recursive: true, force: true });
    dirs.delete(dir);
  };
  try {
    await waitFor(`redis-server on ${address}`, async () => {
      if (!running.has(proc)) throw new Error(`exited:\n${out}`);
      return (await cli(address, ['PING'], 2000)).trim() === 'PONG';
    });
  } catch (err) {
    await stop();
    throw new Error(`${err.message}\n${out}`);
  }
  return { address, port, pid: proc.pid, stop, output: () => out };
}

/** `count` masters joined into one cluster covering all 16384 slots; waits for cluster_state:ok. `opts.extraArgs` go after the cluster's own. */
async function startCluster(count = 3, opts = {}) {
  const nodes = [];
  const stop = async () => {
    await Promise.all(nodes.map((n) => n.stop()));
  };
  try {
    for (let i = 0; i < count; i++) {
      const bus = await freePort();
      nodes.push(
        await startRedis({
          ...opts,
          extraArgs: ['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', '2000', '--cluster-port', String(bus), ...(opts.extraArgs ?? [])],
        }),
      );
    }
    const out = await cli(nodes[0].address, ['--cluster', 'create', ...nodes.map((n) => n.address), '--cluster-replicas', '0', '--cluster-yes'], 30_000);
    if (!/All 16384 slots covered/.test(out)) throw new Error(`redis-cli --cluster create:\n${out}`);
    await waitFor(
      'cluster_state:ok on every node',
      async () => {
        for (const n of nodes) if (!/cluster_state:ok/.test(await cli(n.address, ['CLUSTER', 'INFO']))) return false;
        return true;
      },
      20_000,
      100,
    );
  } catch (err) {
    await stop();
    throw err;
  }
  return { nodes, url: nodes.map((n) => n.address).join(','), stop };
}

/** INFO commandstats summed over `nodes`: { command: calls }. */
async function commandStats(nodes) {
  const sum = {};
  for (const n of nodes) {
    for (const m of (await cli(n.address, ['INFO', 'commandstats'])).matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
      sum[m[1]] = (sum[m[1]] ?? 0) + Number(m[2]);
    }
  }
  return sum;
}

/**
 * A master, one replica and three sentinels (quorum 2, down-after 1 s, failover-timeout 5 s), as
 * test/support/redis.ts's startSentinelSet; resolves once every sentinel knows the replica and the
 * other two. `master()` asks the sentinels; the servers are `servers` ([initial master, replica]).
 */
async function startSentinelSet(name = 'mymaster') {
  const started = [];
  const stop = async () => {
    await Promise.all(started.map((s) => s.stop()));
  };
  try {
    const master = await startRedis();
    started.push(master);
    const replica = await startRedis({ extraArgs: ['--replicaof', HOST, String(master.port)] });
    started.push(replica);
    await waitFor('the replica to sync', async () => /master_link_status:up/.test(await cli(replica.address, ['INFO', 'replication'])), 20_000);
    const sentinels = [];
    for (let i = 0; i < 3; i++) {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rl-bench-sentinel-'));
      dirs.add(dir);
      const conf = path.join(dir, 'sentinel.conf');
      fs.writeFileSync(
        conf,
        [`sentinel monitor ${name} ${HOST} ${master.port} 2`, `sentinel down-after-milliseconds ${name} 1000`, `sentinel failover-timeout ${name} 5000`, `sentinel parallel-syncs ${name} 1`, ''].join('\n'),
      );
      const s = await startRedis({ wrap: (_c, a) => ['redis-sentinel', [conf, ...a.filter((x, j) => !['--save', '--appendonly'].includes(x) && !['--save', '--appendonly'].includes(a[j - 1]))]] });
      sentinels.push(s);
      started.push(s);
    }
    await waitFor(
      'the sentinels to find each other and the replica',
      async () => {
        for (const s of sentinels) {
          const out = await cli(s.address, ['SENTINEL', 'MASTER', name]);
          if (!/num-other-sentinels\n2\n/.test(out) || !/num-slaves\n1\n/.test(out)) return false;
        }
        return true;
      },
      30_000,
      100,
    );
    const servers = [master, replica];
    const masterOf = async () => {
      const out = (await cli(sentinels[0].address, ['SENTINEL', 'GET-MASTER-ADDR-BY-NAME', name])).trim().split('\n');
      return servers.find((x) => x.port === Number(out[1]));
    };
    return { name, servers, sentinels, url: [name, ...sentinels.map((s) => s.address)].join(','), master: masterOf, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

module.exports = { available, startRedis, startCluster, startSentinelSet, commandStats, cli, waitFor };
