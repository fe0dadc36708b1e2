/**
 * Real Redis servers for tests: `redis-server`, `redis-sentinel` and `redis-cli` run as child
 * processes, each in a fresh temp dir, listening on 127.0.0.1 (or a unix socket in that dir) on
 * free ports. Every helper waits for readiness with a deadline and every `stop()` ends its
 * processes (SIGTERM, then SIGKILL after a bounded wait) and removes its dirs; anything still
 * running when the test process exits is killed.
 *
 *   const redis = await startRedis();                  // plain, 127.0.0.1:<free port>
 *   await redis.cli(['GET', 'k']);                     // redis-cli against it → stdout
 *   await redis.kill(); await redis.restart();         // outage: SIGKILL, then same port and options
 *   await redis.stop();
 *
 *   startRedis({ unixSocket: true, password: 'pw', aclUser: { name: 'u', password: 'p' } })
 *   startRedis({ tls: true })                          // TLS only (--port 0 --tls-port P), CA in .certs
 *   startRedis({ tls: { authClients: 'yes', cert: 'wrong-host' } })
 *   startSentinelSet()                                 // master + replica + 3 sentinels (quorum 2)
 *   startCluster({ masters: 3 })                       // 3 masters, all 16384 slots, cluster_state:ok
 *
 * A missing binary fails with a clear error (never a skip): CI must fail, not pass silently.
 */
import { type ChildProcess, execFile, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';

export const HOST = '127.0.0.1';

/** How long a server may take to answer PING after it is spawned. */
const READY_TIMEOUT_MS = 10_000;
/** How long `stop()` waits after SIGTERM before SIGKILL. */
const STOP_GRACE_MS = 5_000;

const running = new Set<ChildProcess>();
const tempDirs = new Set<string>();
process.once('exit', () => {
  for (const p of running) {
    try {
      p.kill('SIGKILL');
    } catch {
      /* already gone */
    }
  }
  for (const d of tempDirs) fs.rmSync(d, { recursive: true, force: true });
});

const checkedBinaries = new Set<string>();

/** Throws a clear error when `name` is not on PATH (the tests must fail, not skip). */
export function requireBinary(name: string): void {
  if (checkedBinaries.has(name)) return;
  const r = spawnSync(name, ['--version'], { encoding: 'utf8', timeout: 10_000 });
  if (r.error !== undefined) {
    throw new Error(
      `${name} is required by the Redis tests but could not be run (${r.error.message}); ` +
        'install Redis 7 (e.g. `apt-get install redis-server redis-tools redis-sentinel`) and openssl',
    );
  }
  checkedBinaries.add(name);
}

import { freePort } from './ports';
import { waitFor } from './wait';

export { freePort };
/** A fresh temp dir, removed by the owner's stop() (or at process exit). */
export function makeTempDir(prefix: string): string {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  tempDirs.add(d);
  return d;
}

function removeDir(d: string): void {
  fs.rmSync(d, { recursive: true, force: true });
  tempDirs.delete(d);
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

function run(file: string, args: string[], timeoutMs = 15_000): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    execFile(file, args, { timeout: timeoutMs, encoding: 'utf8', maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      if (err !== null && typeof err.code !== 'number') {
        reject(new Error(`${file} ${args.join(' ')}: ${err.message}\n${stderr}`));
        return;
      }
      resolve({ code: err === null ? 0 : (err.code as number), stdout, stderr });
    });
  });
}

// ---------------------------------------------------------------------------------------------
// TLS material

export interface TlsCerts {
  dir: string;
  /** CA certificate (PEM file) that signed every cert below. */
  ca: string;
  /** Server certificate for 127.0.0.1 and localhost, and its key. */
  cert: string;
  key: string;
  /** Server certificate whose only SAN is `DNS:redis.invalid` (for hostname-check tests). */
  wrongHostCert: string;
  wrongHostKey: string;
  /** Client certificate and key, signed by the CA (for `tls-auth-clients yes`). */
  clientCert: string;
  clientKey: string;
}

let certsPromise: Promise<TlsCerts> | undefined;

/** A CA, server and client certificates, generated with openssl once per test process. */
export function tlsCerts(): Promise<TlsCerts> {
  certsPromise ??= generateCerts();
  return certsPromise;
}

async function generateCerts(): Promise<TlsCerts> {
  requireBinary('openssl');
  const dir = makeTempDir('rl-redis-certs-');
  const f = (n: string): string => path.join(dir, n);
  const ssl = async (args: string[]): Promise<void> => {
    const r = await run('openssl', args);
    if (r.code !== 0) throw new Error(`openssl ${args.join(' ')} failed:\n${r.stderr}`);
  };
  const key = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  await ssl(['req', '-x509', ...key, '-keyout', f('ca.key'), '-out', f('ca.crt'), '-days', '2', '-subj', '/CN=rl-test-ca']);
  const leaf = async (name: string, cn: string, ext: string): Promise<void> => {
    fs.writeFileSync(f(`${name}.ext`), ext);
    await ssl(['req', ...key, '-keyout', f(`${name}.key`), '-out', f(`${name}.csr`), '-subj', `/CN=${cn}`]);
    await ssl([
      'x509', '-req', '-in', f(`${name}.csr`), '-CA', f('ca.crt'), '-CAkey', f('ca.key'), '-CAcreateserial',
      '-out', f(`${name}.crt`), '-days', '2', '-extfile', f(`${name}.ext`),
    ]);
  };
  await leaf('server', 'localhost', 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n');
  await leaf('wrong-host', 'redis.invalid', 'subjectAltName=DNS:redis.invalid\nextendedKeyUsage=serverAuth,clientAuth\n');
  await leaf('client', 'rl-test-client', 'extendedKeyUsage=clientAuth\n');
  return {
    dir,
    ca: f('ca.crt'),
    cert: f('server.crt'),
    key: f('server.key'),
    wrongHostCert: f('wrong-host.crt'),
    wrongHostKey: f('wrong-host.key'),
    clientCert: f('client.crt'),
    clientKey: f('client.key'),
  };
}

// ---------------------------------------------------------------------------------------------
// One redis-server

export interface TlsServerOptions {
  /** `--tls-auth-clients` (default `optional`: a client certificate is verified when sent). */
  authClients?: 'no' | 'optional' | 'yes';
  /** `wrong-host`: serve the certificate whose SAN does not include 127.0.0.1 / localhost. */
  cert?: 'default' | 'wrong-host';
}

export interface StartRedisOptions {
  /** Port to listen on (the TLS port with `tls`); a free one by default. */
  port?: number;
  /** Also listen on a unix socket in the temp dir (`socket` in the result). */
  unixSocket?: boolean;
  /** `--requirepass` (the default user's password). */
  password?: string;
  /** An ACL user with every permission (`--user <name> on ><password> ~* &* +@all`). */
  aclUser?: { name: string; password: string };
  /** TLS only: `--port 0 --tls-port <port>` with the test CA's server certificate. */
  tls?: boolean | TlsServerOptions;
  /** Appended to the command line (e.g. `['--replicaof', '127.0.0.1', '6379']`). */
  extraArgs?: string[];
  /** The program: `redis-server` (default) or `redis-sentinel`. */
  binary?: string;
  /** A config file to pass first (sentinels need one). Relative names are in the temp dir. */
  configFile?: { name: string; content: string };
}

export interface RedisServer {
  readonly host: string;
  /** The port clients connect to (the TLS port when the server is TLS-only). */
  readonly port: number;
  /** Set when started with `tls`: equals `port`. */
  readonly tlsPort?: number;
  /** The unix socket path (with `unixSocket`). */
  readonly socket?: string;
  /** The test CA and certificates (with `tls`). */
  readonly certs?: TlsCerts;
  /** `host:port`. */
  readonly address: string;
  /** The server's temp dir. */
  readonly dir: string;
  readonly options: Readonly<StartRedisOptions>;
  /** Whether the process is running. */
  readonly running: boolean;
  /** What the process wrote (last 64 KiB). */
  output(): string;
  /** SIGTERM, SIGKILL after a bounded wait; removes the temp dir. Idempotent. */
  stop(): Promise<void>;
  /** SIGKILL (an outage); the dir stays so `restart()` can bring it back. */
  kill(): Promise<void>;
  /** Starts it again on the same port with the same options and waits until it answers PING. */
  restart(): Promise<void>;
  /** Runs `redis-cli` against this server (auth and TLS applied) and returns its stdout. */
  cli(args: readonly string[]): Promise<string>;
  /** SIGSTOP: the server keeps its sockets open but answers nothing (timeout tests). */
  pause(): void;
  /** SIGCONT after `pause()`. */
  resume(): void;
  /** The process id (undefined when not running). */
  readonly pid: number | undefined;
}

/** Starts a redis-server and waits until it answers PING. */
export async function startRedis(options: StartRedisOptions = {}): Promise<RedisServer> {
  const binary = options.binary ?? 'redis-server';
  requireBinary(binary);
  const explicitPort = options.port !== undefined;
  for (let attempt = 0; ; attempt++) {
    const port = options.port ?? (await freePort());
    try {
      return await startOnce(binary, { ...options, port });
    } catch (err) {
      // Another process may have taken the free port between the probe and the bind: retry.
      if (explicitPort || attempt >= 2 || !/Address already in use/i.test(String(err))) throw err;
    }
  }
}

async function startOnce(binary: string, options: StartRedisOptions & { port: number }): Promise<RedisServer> {
  const dir = makeTempDir('rl-redis-');
  const port = options.port;
  const tlsOpts: TlsServerOptions | undefined =
    options.tls === undefined || options.tls === false ? undefined : options.tls === true ? {} : options.tls;
  const certs = tlsOpts === undefined ? undefined : await tlsCerts();
  const socket = options.unixSocket === true ? path.join(dir, 'redis.sock') : undefined;

  const args: string[] = [];
  if (options.configFile !== undefined) {
    const file = path.join(dir, options.configFile.name);
    fs.writeFileSync(file, options.configFile.content);
    args.push(file);
  }
  args.push('--bind', HOST, '--dir', dir, '--daemonize', 'no');
  if (binary === 'redis-server') args.push('--save', '', '--appendonly', 'no');
  if (tlsOpts !== undefined && certs !== undefined) {
    const wrong = tlsOpts.cert === 'wrong-host';
    args.push(
      '--port', '0',
      '--tls-port', String(port),
      '--tls-cert-file', wrong ? certs.wrongHostCert : certs.cert,
      '--tls-key-file', wrong ? certs.wrongHostKey : certs.key,
      '--tls-ca-cert-file', certs.ca,
      '--tls-auth-clients', tlsOpts.authClients ?? 'optional',
    );
  } else {
    args.push('--port', String(port));
  }
  if (socket !== undefined) args.push('--unixsocket', socket, '--unixsocketperm', '700');
  if (options.password !== undefined) args.push('--requirepass', options.password);
  if (options.aclUser !== undefined) {
    args.push('--user', options.aclUser.name, 'on', `>${options.aclUser.password}`, '~*', '&*', '+@all');
  }
  if (options.extraArgs !== undefined) args.push(...options.extraArgs);

  let proc: ChildProcess | undefined;
  let out = '';
  let exited: Promise<void> = Promise.resolve();
  let stopped = false;

  const spawnServer = (): void => {
    const p = spawn(binary, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    proc = p;
    running.add(p);
    const collect = (d: Buffer): void => {
      out += d.toString();
      if (out.length > 65536) out = out.slice(-65536);
    };
    p.stdout!.on('data', collect);
    p.stderr!.on('data', collect);
    exited = new Promise<void>((resolve) => {
      p.once('exit', () => {
        running.delete(p);
        resolve();
      });
      p.once('error', (err) => {
        out += `\nspawn error: ${err.message}`;
        running.delete(p);
        resolve();
      });
    });
  };
  const isRunning = (): boolean => proc !== undefined && proc.exitCode === null && proc.signalCode === null && running.has(proc);

  const auth = options.aclUser ?? (options.password !== undefined ? { name: undefined, password: options.password } : undefined);
  const waitReady = async (): Promise<void> => {
    const deadline = Date.now() + READY_TIMEOUT_MS;
    for (;;) {
      if (!isRunning()) {
        throw new Error(`${binary} ${args.join(' ')} exited before it was ready:\n${out}`);
      }
      if (await pingOnce({ port, auth, tls: certs, authClientsYes: tlsOpts?.authClients === 'yes' })) return;
      if (Date.now() >= deadline) {
        throw new Error(`${binary} on ${HOST}:${port} did not answer PING within ${READY_TIMEOUT_MS} ms:\n${out}`);
      }
      await sleep(50);
    }
  };
  let paused = false;
  const signalAndWait = async (signal: NodeJS.Signals): Promise<void> => {
    if (!isRunning()) return;
    if (paused) {
      proc!.kill('SIGCONT');
      paused = false;
    }
    proc!.kill(signal);
    let timer: NodeJS.Timeout | undefined;
    if (signal !== 'SIGKILL') timer = setTimeout(() => proc?.kill('SIGKILL'), STOP_GRACE_MS);
    await exited;
    if (timer !== undefined) clearTimeout(timer);
  };

  spawnServer();
  try {
    await waitReady();
  } catch (err) {
    await signalAndWait('SIGKILL');
    removeDir(dir);
    throw err;
  }

  const cliArgs: string[] = ['-h', HOST, '-p', String(port)];
  if (certs !== undefined) {
    cliArgs.push('--tls', '--cacert', certs.ca, '--cert', certs.clientCert, '--key', certs.clientKey);
    if (tlsOpts?.cert === 'wrong-host') cliArgs.push('--sni', 'redis.invalid');
  }
  if (options.aclUser !== undefined) {
    cliArgs.push('--user', options.aclUser.name, '--pass', options.aclUser.password, '--no-auth-warning');
  } else if (options.password !== undefined) {
    cliArgs.push('-a', options.password, '--no-auth-warning');
  }

  const server: RedisServer = {
    host: HOST,
    port,
    ...(certs !== undefined ? { tlsPort: port, certs } : {}),
    ...(socket !== undefined ? { socket } : {}),
    address: `${HOST}:${port}`,
    dir,
    options,
    get running() {
      return isRunning();
    },
    output: () => out,
    async stop() {
      if (stopped) return;
      stopped = true;
      await signalAndWait('SIGTERM');
      removeDir(dir);
    },
    async kill() {
      await signalAndWait('SIGKILL');
    },
    async restart() {
      if (stopped) throw new Error('restart() after stop()');
      await signalAndWait('SIGKILL');
      for (let attempt = 0; ; attempt++) {
        spawnServer();
        try {
          await waitReady();
          return;
        } catch (err) {
          // The old socket may linger for a moment after SIGKILL.
          if (attempt >= 20 || !/Address already in use/i.test(String(err))) throw err;
          await sleep(100);
        }
      }
    },
    get pid() {
      return isRunning() ? proc!.pid : undefined;
    },
    pause() {
      if (!isRunning()) throw new Error('pause(): the server is not running');
      proc!.kill('SIGSTOP');
      paused = true;
    },
    resume() {
      if (isRunning() && paused) proc!.kill('SIGCONT');
      paused = false;
    },
    async cli(cmd: readonly string[]) {
      requireBinary('redis-cli');
      const r = await run('redis-cli', [...cliArgs, ...cmd]);
      if (r.code !== 0) throw new Error(`redis-cli ${cmd.join(' ')} exited with ${r.code}: ${r.stderr}${r.stdout}`);
      return r.stdout;
    },
  };
  return server;
}

/** One RESP round trip: (AUTH) PING; true when the server answers +PONG. */
function pingOnce(o: {
  port: number;
  auth: { name: string | undefined; password: string } | undefined;
  tls: TlsCerts | undefined;
  authClientsYes: boolean;
}): Promise<boolean> {
  return new Promise((resolve) => {
    let done = false;
    let buf = '';
    const finish = (ok: boolean): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      sock.destroy();
      resolve(ok);
    };
    const onConnect = (): void => {
      let cmd = '';
      if (o.auth !== undefined) {
        const parts = o.auth.name === undefined ? ['AUTH', o.auth.password] : ['AUTH', o.auth.name, o.auth.password];
        cmd += resp(parts);
      }
      cmd += resp(['PING']);
      sock.write(cmd);
    };
    const sock: net.Socket =
      o.tls === undefined
        ? net.connect({ host: HOST, port: o.port }, onConnect)
        : tls.connect(
            {
              host: HOST,
              port: o.port,
              ca: fs.readFileSync(o.tls.ca),
              cert: fs.readFileSync(o.tls.clientCert),
              key: fs.readFileSync(o.tls.clientKey),
              // Readiness only: the wrong-host certificate must not make this fail.
              checkServerIdentity: () => undefined,
            },
            onConnect,
          );
    const timer = setTimeout(() => finish(false), 1000);
    sock.on('error', () => finish(false));
    sock.on('close', () => finish(false));
    const expected = o.auth === undefined ? 1 : 2;
    sock.on('data', (d: Buffer) => {
      buf += d.toString();
      if (buf.includes('+PONG\r\n')) finish(true);
      else if (buf.split('\r\n').length - 1 >= expected) finish(false);
    });
  });
}

function resp(parts: string[]): string {
  let s = `*${parts.length}\r\n`;
  for (const p of parts) s += `$${Buffer.byteLength(p)}\r\n${p}\r\n`;
  return s;
}

/** `key\nvalue\nkey\nvalue…` (redis-cli's rendering of a flat map) → object. */
export function parseFlatReply(text: string): Record<string, string> {
  const lines = text.split('\n').map((l) => l.trim());
  if (lines[lines.length - 1] === '') lines.pop();
  const o: Record<string, string> = {};
  for (let i = 0; i + 1 < lines.length; i += 2) o[lines[i]!] = lines[i + 1]!;
  return o;
}

/** `field:value` lines of INFO → object. */
export function parseInfo(text: string): Record<string, string> {
  const o: Record<string, string> = {};
  for (const line of text.split(/\r?\n/)) {
    const i = line.indexOf(':');
    if (i > 0 && !line.startsWith('#')) o[line.slice(0, i)] = line.slice(i + 1).trim();
  }
  return o;
}

/** Calls per command from `INFO commandstats` (e.g. `{ incrby: 5, expire: 5 }`). */
export async function commandStats(server: RedisServer): Promise<Record<string, number>> {
  const info = await server.cli(['INFO', 'commandstats']);
  const out: Record<string, number> = {};
  for (const m of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) out[m[1]!] = Number(m[2]);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Sentinel

/** A sentinel's pub/sub events as they come. */
export interface SentinelEvents {
  readonly seen: ReadonlyArray<{ channel: string; message: string; at: number }>;
  /** Resolves with the first event on `channel` (already seen, or to come). */
  next(channel: string, timeoutMs?: number): Promise<{ channel: string; message: string; at: number }>;
  stop(): void;
}

export interface StartSentinelOptions {
  /** Master name (default `mymaster`). */
  masterName?: string;
  /** requirepass / masterauth of the data nodes (and `sentinel auth-pass`). */
  password?: string;
  /** requirepass of the sentinels (and `sentinel sentinel-pass` between them). */
  sentinelPassword?: string;
}

export interface SentinelSet {
  readonly masterName: string;
  /** The data nodes: [initial master, replica]. */
  readonly servers: readonly RedisServer[];
  readonly sentinels: readonly RedisServer[];
  /** REDIS_URL for sentinel mode: `<master>,127.0.0.1:<s1>,127.0.0.1:<s2>,127.0.0.1:<s3>`. */
  readonly url: string;
  /** The master the sentinels report now. */
  master(): Promise<RedisServer>;
  /**
   * SIGKILLs the current master and waits until the sentinels agree on the promoted replica;
   * `afterKill` runs once the old master has exited and what it had sent before has been read
   * (an answer already on its way when the signal came is not "after the kill").
   */
  failover(afterKill?: () => void): Promise<RedisServer>;
  /**
   * A planned switch-over (`SENTINEL FAILOVER`, the old master stays up): waits until the
   * sentinels agree on the promoted replica and it reports the master role.
   */
  switchOver(): Promise<RedisServer>;
  /** Records every event the first running sentinel publishes (`PSUBSCRIBE *`), with when it came. */
  events(): Promise<SentinelEvents>;
  stop(): Promise<void>;
}

/**
 * A master, one replica and three sentinels (quorum 2, down-after 1 s, failover-timeout 5 s), so a
 * failover completes within a few seconds. Resolves once every sentinel knows the replica and the
 * two other sentinels.
 */
export async function startSentinelSet(options: StartSentinelOptions = {}): Promise<SentinelSet> {
  requireBinary('redis-server');
  requireBinary('redis-sentinel');
  requireBinary('redis-cli');
  const name = options.masterName ?? 'mymaster';
  const started: RedisServer[] = [];
  try {
    const master = await startRedis({
      password: options.password,
      extraArgs: options.password !== undefined ? ['--masterauth', options.password] : [],
    });
    started.push(master);
    const replica = await startRedis({
      password: options.password,
      extraArgs: [
        '--replicaof', HOST, String(master.port),
        ...(options.password !== undefined ? ['--masterauth', options.password] : []),
      ],
    });
    started.push(replica);
    await waitFor(async () => parseInfo(await replica.cli(['INFO', 'replication']))['master_link_status'] === 'up', 'the replica to sync');

    const sentinels: RedisServer[] = [];
    for (let i = 0; i < 3; i++) {
      const lines = [
        `sentinel monitor ${name} ${HOST} ${master.port} 2`,
        `sentinel down-after-milliseconds ${name} 1000`,
        `sentinel failover-timeout ${name} 5000`,
        `sentinel parallel-syncs ${name} 1`,
      ];
      if (options.password !== undefined) lines.push(`sentinel auth-pass ${name} ${options.password}`);
      if (options.sentinelPassword !== undefined) {
        lines.push(`requirepass ${options.sentinelPassword}`, `sentinel sentinel-pass ${options.sentinelPassword}`);
      }
      const s = await startRedis({
        binary: 'redis-sentinel',
        configFile: { name: 'sentinel.conf', content: lines.join('\n') + '\n' },
        password: options.sentinelPassword,
      });
      sentinels.push(s);
      started.push(s);
    }
    await waitFor(async () => {
        for (const s of sentinels) {
          const m = parseFlatReply(await s.cli(['SENTINEL', 'MASTER', name]));
          if (m['num-other-sentinels'] !== '2' || m['num-slaves'] !== '1') return false;
        }
        return true;
      }, 'the sentinels to discover each other and the replica', 20_000);

    const servers = [master, replica];
    const masterPort = async (): Promise<number> => {
      const counts = new Map<number, number>();
      for (const s of sentinels) {
        if (!s.running) continue;
        const out = (await s.cli(['SENTINEL', 'GET-MASTER-ADDR-BY-NAME', name])).trim().split('\n');
        const p = Number(out[1]);
        counts.set(p, (counts.get(p) ?? 0) + 1);
      }
      let best = 0;
      let bestCount = 0;
      for (const [p, c] of counts) if (c > bestCount) [best, bestCount] = [p, c];
      return best;
    };
    const byPort = (port: number): RedisServer => {
      const s = servers.find((x) => x.port === port);
      if (s === undefined) throw new Error(`the sentinels report an unknown master port ${port}`);
      return s;
    };
    const promoted = (next: RedisServer): Promise<void> =>
      waitFor(async () => {
          for (const s of sentinels) {
            if (!s.running) continue;
            const out = (await s.cli(['SENTINEL', 'GET-MASTER-ADDR-BY-NAME', name])).trim().split('\n');
            if (Number(out[1]) !== next.port) return false;
          }
          return parseInfo(await next.cli(['INFO', 'replication']))['role'] === 'master';
        }, 'the sentinels to promote the replica', 25_000);
    return {
      masterName: name,
      servers,
      sentinels,
      url: [name, ...sentinels.map((s) => s.address)].join(','),
      master: async () => byPort(await masterPort()),
      async failover(afterKill?: () => void) {
        const old = byPort(await masterPort());
        await old.kill();
        // two loop turns: the poll phase reads what the dead server's sockets still held
        await new Promise((resolve) => setImmediate(resolve));
        await new Promise((resolve) => setImmediate(resolve));
        afterKill?.();
        const next = servers.find((s) => s !== old)!;
        await promoted(next);
        return next;
      },
      async switchOver() {
        const old = byPort(await masterPort());
        const next = servers.find((s) => s !== old)!;
        const reply = await sentinels[0]!.cli(['SENTINEL', 'FAILOVER', name]);
        if (reply.trim() !== 'OK') throw new Error(`SENTINEL FAILOVER answered ${reply.trim()}`);
        await promoted(next);
        return next;
      },
      async events() {
        const s = sentinels.find((x) => x.running)!;
        const seen: Array<{ channel: string; message: string; at: number }> = [];
        const waiters: Array<{ channel: string; resolve: (e: { channel: string; message: string; at: number }) => void }> = [];
        // redis-cli --csv PSUBSCRIBE prints one line per message: "pmessage","*","<channel>","<message>".
        const args = ['-h', HOST, '-p', String(s.port), ...(options.sentinelPassword !== undefined ? ['-a', options.sentinelPassword, '--no-auth-warning'] : []), '--csv', 'PSUBSCRIBE', '*'];
        const proc = spawn('redis-cli', args, { stdio: ['ignore', 'pipe', 'ignore'] });
        running.add(proc);
        proc.once('exit', () => running.delete(proc));
        let buf = '';
        let subscribed!: () => void;
        const ready = new Promise<void>((resolve) => (subscribed = resolve));
        proc.stdout!.on('data', (d: Buffer) => {
          buf += d.toString();
          let nl: number;
          while ((nl = buf.indexOf('\n')) >= 0) {
            const line = buf.slice(0, nl).trim();
            buf = buf.slice(nl + 1);
            const f = [...line.matchAll(/"((?:[^"\\]|\\.)*)"/g)].map((m) => m[1]!);
            if (f[0] === 'psubscribe') subscribed();
            if (f[0] !== 'pmessage' || f.length < 4) continue;
            const e = { channel: f[2]!, message: f[3]!, at: Date.now() };
            seen.push(e);
            for (let i = waiters.length - 1; i >= 0; i--) {
              if (waiters[i]!.channel === e.channel) {
                waiters[i]!.resolve(e);
                waiters.splice(i, 1);
              }
            }
          }
        });
        await ready;
        return {
          seen,
          next(channel: string, timeoutMs = 25_000) {
            const had = seen.find((e) => e.channel === channel);
            if (had !== undefined) return Promise.resolve(had);
            return new Promise((resolve, reject) => {
              const t = setTimeout(() => reject(new Error(`no ${channel} event within ${timeoutMs} ms`)), timeoutMs);
              waiters.push({ channel, resolve: (e) => { clearTimeout(t); resolve(e); } });
            });
          },
          stop() {
            proc.kill('SIGKILL');
          },
        };
      },
      async stop() {
        await Promise.all(started.map((s) => s.stop()));
      },
    };
  } catch (err) {
    await Promise.all(started.map((s) => s.stop()));
    throw err;
  }
}

// ---------------------------------------------------------------------------------------------
// Cluster

export interface StartClusterOptions {
  /** Number of masters (default 3; at least 3 for redis-cli --cluster create). */
  masters?: number;
  /** requirepass / masterauth of every node. */
  password?: string;
  /** Appended to every node's command line (e.g. `['--cluster-require-full-coverage', 'no']`). */
  extraArgs?: string[];
}

export interface RedisClusterSet {
  readonly nodes: readonly RedisServer[];
  /** REDIS_URL for cluster mode: `127.0.0.1:<p1>,127.0.0.1:<p2>,…`. */
  readonly url: string;
  /** CLUSTER KEYSLOT of `key`. */
  keySlot(key: string): Promise<number>;
  /** The node that serves `key`'s slot. */
  nodeForKey(key: string): Promise<RedisServer>;
  stop(): Promise<void>;
}

/**
 * `masters` servers with `--cluster-enabled yes`, joined by `redis-cli --cluster create
 * --cluster-replicas 0 --cluster-yes`; resolves once every node reports `cluster_state:ok`.
 */
export async function startCluster(options: StartClusterOptions = {}): Promise<RedisClusterSet> {
  requireBinary('redis-server');
  requireBinary('redis-cli');
  const count = options.masters ?? 3;
  if (count < 3) throw new Error('startCluster: redis-cli --cluster create needs at least 3 masters');
  const nodes: RedisServer[] = [];
  try {
    for (let i = 0; i < count; i++) {
      const busPort = await freePort();
      nodes.push(
        await startRedis({
          password: options.password,
          extraArgs: [
            '--cluster-enabled', 'yes',
            '--cluster-config-file', 'nodes.conf',
            '--cluster-node-timeout', '2000',
            '--cluster-port', String(busPort),
            ...(options.password !== undefined ? ['--masterauth', options.password] : []),
            ...(options.extraArgs ?? []),
          ],
        }),
      );
    }
    const auth = options.password !== undefined ? ['-a', options.password, '--no-auth-warning'] : [];
    const r = await run(
      'redis-cli',
      [...auth, '--cluster', 'create', ...nodes.map((n) => n.address), '--cluster-replicas', '0', '--cluster-yes'],
      30_000,
    );
    if (r.code !== 0 || !/All 16384 slots covered/.test(r.stdout)) {
      throw new Error(`redis-cli --cluster create failed (${r.code}):\n${r.stdout}\n${r.stderr}`);
    }
    await waitFor(async () => {
        for (const n of nodes) {
          if (parseInfo(await n.cli(['CLUSTER', 'INFO']))['cluster_state'] !== 'ok') return false;
        }
        return true;
      }, 'cluster_state:ok on every node', 20_000);
    const keySlot = async (key: string): Promise<number> => Number((await nodes[0]!.cli(['CLUSTER', 'KEYSLOT', key])).trim());
    return {
      nodes,
      url: nodes.map((n) => n.address).join(','),
      keySlot,
      async nodeForKey(key: string) {
        const slot = await keySlot(key);
        for (const n of nodes) {
          // CLUSTER COUNTKEYSINSLOT answers on any node; ownership is in CLUSTER NODES ("myself").
          const lines = (await n.cli(['CLUSTER', 'NODES'])).split('\n');
          const me = lines.find((l) => l.includes('myself'));
          if (me === undefined) continue;
          for (const range of me.trim().split(' ').slice(8)) {
            const [a, b] = range.split('-').map(Number);
            if (slot >= a! && slot <= (b ?? a)!) return n;
          }
        }
        throw new Error(`no node owns slot ${slot}`);
      },
      async stop() {
        await Promise.all(nodes.map((n) => n.stop()));
      },
    };
  } catch (err) {
    await Promise.all(nodes.map((n) => n.stop()));
    throw err;
  }
}
