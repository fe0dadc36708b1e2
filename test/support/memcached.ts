/**
 * Real memcached processes for tests: each listens on 127.0.0.1 on a free port (TCP only, 16 MB),
 * is ready once it answers `version`, and is stopped by the test. A missing binary is an error
 * with the fix in its text, never a skip. Every wait is bounded.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import net from 'node:net';

export const MEMCACHED_BIN = process.env.MEMCACHED_BIN ?? 'memcached';

/** The memcached binary is not installed: the tests that need it fail with this, never skip. */
export class MemcachedMissingError extends Error {
  override readonly name = 'MemcachedMissingError';
}

export interface MemcachedOptions {
  /** Port to listen on; default a free one (picked again if memcached cannot bind it). */
  port?: number;
  /** Longest wait for `version` to answer (default 5 s). */
  readyTimeoutMs?: number;
}

/** Children still alive, killed when the test process exits whatever happened to the test. */
const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const c of live) c.kill('SIGKILL');
});

import { freePort } from './ports';

export { freePort };
function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Sends one text-protocol command and resolves with the reply once it ends with `until`. */
export function rawCommand(port: number, command: string, until: RegExp, timeoutMs = 1000): Promise<string> {
  return new Promise((resolve, reject) => {
    let buf = '';
    const sock = net.connect(port, '127.0.0.1');
    const timer = setTimeout(() => {
      sock.destroy();
      reject(new Error(`memcached 127.0.0.1:${port}: no reply to ${JSON.stringify(command)} in ${timeoutMs} ms`));
    }, timeoutMs);
    sock.setEncoding('latin1');
    sock.once('error', (err) => {
      clearTimeout(timer);
      sock.destroy();
      reject(err);
    });
    sock.on('data', (chunk: string) => {
      buf += chunk;
      if (until.test(buf)) {
        clearTimeout(timer);
        sock.destroy();
        resolve(buf);
      }
    });
    sock.write(command);
  });
}

/** How many `incr` commands memcached has processed (hits and misses): one per counted request. */
export async function incrementsProcessed(port: number): Promise<number> {
  const stats = await rawCommand(port, 'stats\r\n', /END\r\n$/);
  const stat = (name: string): number => Number(new RegExp(`^STAT ${name} (\\d+)\r$`, 'm').exec(stats)?.[1] ?? NaN);
  return stat('incr_hits') + stat('incr_misses');
}

/** `get key` over a raw socket: the stored value as text, or undefined on a miss. */
export async function rawGet(port: number, key: string): Promise<string | undefined> {
  const reply = await rawCommand(port, `get ${key}\r\n`, /(^|\r\n)END\r\n$/);
  const m = /^VALUE \S+ \d+ (\d+)\r\n/.exec(reply);
  if (m === null) return undefined;
  const start = m[0].length;
  return reply.slice(start, start + Number(m[1]));
}

/** `mg key t v`: the value and its remaining TTL in seconds (-1 = never expires), or undefined on a miss. */
export async function rawGetWithTtl(port: number, key: string): Promise<{ value: string; ttl: number } | undefined> {
  const reply = await rawCommand(port, `mg ${key} t v\r\n`, /^(EN\r\n|VA \d+ [^\r]*\r\n[\s\S]*\r\n)$/);
  const m = /^VA (\d+) t(-?\d+)\r\n/.exec(reply);
  if (m === null) return undefined;
  const start = m[0].length;
  return { value: reply.slice(start, start + Number(m[1])), ttl: Number(m[2]) };
}

/** `set key 0 <ttl> value` over a raw socket. */
export async function rawSet(port: number, key: string, value: string, ttlSeconds = 0): Promise<void> {
  const reply = await rawCommand(port, `set ${key} 0 ${ttlSeconds} ${Buffer.byteLength(value)}\r\n${value}\r\n`, /\r\n$/);
  if (reply !== 'STORED\r\n') throw new Error(`memcached set ${key}: ${reply.trim()}`);
}

export class MemcachedServer {
  private child: ChildProcess | undefined;
  private exited: Promise<void> = Promise.resolve();
  private stderr = '';

  private constructor(
    public port: number,
    private readonly readyTimeoutMs: number,
    private readonly fixedPort: boolean,
  ) {}

  static async start(opts: MemcachedOptions = {}): Promise<MemcachedServer> {
    const fixed = opts.port !== undefined;
    const s = new MemcachedServer(opts.port ?? (await freePort()), opts.readyTimeoutMs ?? 5000, fixed);
    await s.launch();
    return s;
  }

  get host(): string {
    return '127.0.0.1';
  }

  /** `127.0.0.1:<port>`, as MEMCACHE_HOST_PORT lists it. */
  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  get running(): boolean {
    return this.child !== undefined;
  }

  /** Graceful stop (SIGTERM, SIGKILL after 2 s); resolves once the process is gone. */
  async stop(): Promise<void> {
    await this.signal('SIGTERM', 2000);
  }

  /** Abrupt death (SIGKILL), as a crashed node. */
  async kill(): Promise<void> {
    await this.signal('SIGKILL', 2000);
  }

  /** SIGSTOP: the node hangs (connections stay open, nothing is answered) until resume(). */
  async pause(): Promise<void> {
    const child = this.child;
    if (child === undefined) return;
    child.kill('SIGSTOP');
    // The signal is delivered asynchronously: wait (bounded) until the process shows as stopped.
    const deadline = Date.now() + 1000;
    while (Date.now() < deadline) {
      if (/^State:\s+T/m.test(await readFile(`/proc/${child.pid}/status`, 'utf8').catch(() => ''))) return;
      await sleep(5);
    }
  }

  /** SIGCONT after pause(). */
  resume(): void {
    this.child?.kill('SIGCONT');
  }

  /** Stops the process if it runs and starts a fresh one (empty cache) on the same port. */
  async restart(): Promise<void> {
    if (this.child !== undefined) await this.stop();
    await this.launch(true);
  }

  private async launch(samePort = false): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      try {
        await this.spawnOnce();
        await this.waitReady();
        return;
      } catch (err) {
        await this.signal('SIGKILL', 2000);
        // A port picked free may have been taken meanwhile: pick another (not for a fixed port).
        const canRetry = !this.fixedPort && !samePort && attempt < 2 && !(err instanceof MemcachedMissingError);
        if (!canRetry) throw err;
        this.port = await freePort();
      }
    }
  }

  private spawnOnce(): Promise<void> {
    const args = ['-l', '127.0.0.1', '-p', String(this.port), '-U', '0', '-m', '16', '-t', '2', '-c', '256'];
    // memcached refuses to run as root without -u.
    if (typeof process.getuid === 'function' && process.getuid() === 0) args.push('-u', 'nobody');
    this.stderr = '';
    return new Promise((resolve, reject) => {
      const child = spawn(MEMCACHED_BIN, args, { stdio: ['ignore', 'ignore', 'pipe'] });
      let settled = false;
      child.stderr!.setEncoding('utf8');
      child.stderr!.on('data', (d: string) => {
        this.stderr = (this.stderr + d).slice(-2000);
      });
      this.exited = new Promise<void>((done) => {
        child.once('exit', () => {
          live.delete(child);
          if (this.child === child) this.child = undefined;
          done();
        });
        child.once('error', (err: NodeJS.ErrnoException) => {
          live.delete(child);
          if (this.child === child) this.child = undefined;
          done();
          if (!settled) {
            settled = true;
            reject(
              err.code === 'ENOENT'
                ? new MemcachedMissingError(
                    `memcached binary not found (${MEMCACHED_BIN}): install it (Debian: apt-get install memcached) or set MEMCACHED_BIN`,
                  )
                : err,
            );
          }
        });
      });
      child.once('spawn', () => {
        live.add(child);
        this.child = child;
        if (!settled) {
          settled = true;
          resolve();
        }
      });
    });
  }

  private async waitReady(): Promise<void> {
    const deadline = Date.now() + this.readyTimeoutMs;
    let last: unknown;
    while (Date.now() < deadline) {
      if (this.child === undefined) {
        throw new Error(`memcached on 127.0.0.1:${this.port} exited at start-up: ${this.stderr.trim() || '(no output)'}`);
      }
      try {
        await rawCommand(this.port, 'version\r\n', /^VERSION .*\r\n$/, 500);
        return;
      } catch (err) {
        last = err;
        await sleep(25);
      }
    }
    throw new Error(
      `memcached on 127.0.0.1:${this.port} not ready in ${this.readyTimeoutMs} ms: ${String(last)} ${this.stderr.trim()}`,
    );
  }

  private async signal(sig: NodeJS.Signals, graceMs: number): Promise<void> {
    const child = this.child;
    if (child === undefined) return;
    const exited = this.exited;
    child.kill(sig);
    if (sig !== 'SIGKILL') child.kill('SIGCONT'); // a paused process acts on SIGTERM only once continued
    let timer: NodeJS.Timeout | undefined;
    const timedOut = await Promise.race([
      exited.then(() => false),
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(true), graceMs);
      }),
    ]);
    clearTimeout(timer);
    if (timedOut) {
      child.kill('SIGKILL');
      await Promise.race([exited, sleep(graceMs)]);
    }
  }
}

/** Starts `count` servers at once. */
export function startMemcachedServers(count: number, opts: MemcachedOptions = {}): Promise<MemcachedServer[]> {
  return Promise.all(Array.from({ length: count }, () => MemcachedServer.start(opts)));
}
