/**
 * Starts the real `ratelimit` program (the built dist/ output) as a child process on free
 * loopback ports and talks to it over gRPC and HTTP. Every process is killed in `stop()`.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { waitFor } from '../support/wait';
import {
  RateLimitServiceClient,
  type RateLimitRequest as ProtoRequest,
  type RateLimitResponse as ProtoResponse,
} from '../../generated/envoy/service/ratelimit/v3/rls';

export const ROOT = path.resolve(__dirname, '../..');
export const DIST = path.join(ROOT, 'dist/src/cli');

export interface Service {
  proc: ChildProcess;
  grpc: string;
  http: string;
  debug: string;
  output: () => string;
  stop: (signal?: NodeJS.Signals) => Promise<number | null>;
}

/** A runtime tree under a fresh temp dir: <root>/current/ratelimit/config/<files>. */
export function runtimeDir(files: Record<string, string>): { root: string; configDir: string; base: string } {
  const base = fs.mkdtempSync(path.join(os.tmpdir(), 'rl-e2e-'));
  const root = path.join(base, 'current');
  const configDir = path.join(root, 'ratelimit', 'config');
  fs.mkdirSync(configDir, { recursive: true });
  for (const [name, content] of Object.entries(files)) fs.writeFileSync(path.join(configDir, name), content);
  return { root, configDir, base };
}

/**
 * The gRPC transport every e2e service runs on unless a test sets its own: the default (http2), or
 * grpc-js in the second pass of the suite (jest.config.js sets E2E_GRPC_TRANSPORT).
 */
export const E2E_GRPC_TRANSPORT = process.env['E2E_GRPC_TRANSPORT'] ?? 'socket';

/** Every listener on a free loopback port (the real ones are logged in the `listening:` line). */
export const LOOPBACK_LISTENERS = {
  HOST: '127.0.0.1',
  PORT: '0',
  GRPC_HOST: '127.0.0.1',
  GRPC_PORT: '0',
  DEBUG_HOST: '127.0.0.1',
  DEBUG_PORT: '0',
} as const;

export function baseEnv(root: string): NodeJS.ProcessEnv {
  return {
    GRPC_TRANSPORT: E2E_GRPC_TRANSPORT,
    PATH: process.env['PATH'],
    BACKEND_TYPE: 'memory',
    RUNTIME_ROOT: root,
    RUNTIME_SUBDIRECTORY: 'ratelimit',
    RUNTIME_APPDIRECTORY: 'config',
    RUNTIME_WATCH_ROOT: 'false',
    USE_STATSD: 'false',
    LOG_LEVEL: 'info',
    ...LOOPBACK_LISTENERS,
  };
}

const LISTENING = /listening: gRPC (\S+), HTTP (\S+), debug ([^\s"\\]+)/;

/** Spawns the service and resolves once it logs its listening addresses (rejects on exit). */
export function startService(
  env: NodeJS.ProcessEnv,
  timeoutMs = 15_000,
  program = path.join(DIST, 'ratelimit.js'),
  /** Told the whole output so far at every chunk (to wait for a line before it listens). */
  onOutput?: (outputSoFar: string) => void,
): Promise<Service> {
  const proc = spawn(process.execPath, [program], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  const take = (d: Buffer): void => {
    out += d.toString();
    onOutput?.(out);
  };
  proc.stdout!.on('data', take);
  proc.stderr!.on('data', take);
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  const stop = async (signal: NodeJS.Signals = 'SIGTERM'): Promise<number | null> => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal);
    const timer = setTimeout(() => proc.kill('SIGKILL'), 15_000);
    const code = await exited;
    clearTimeout(timer);
    return code;
  };
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      void stop('SIGKILL');
      reject(new Error(`service did not start within ${timeoutMs} ms:\n${out}`));
    }, timeoutMs);
    const onData = (): void => {
      const m = LISTENING.exec(out);
      if (m) {
        clearTimeout(timer);
        proc.stderr!.off('data', onData);
        resolve({ proc, grpc: m[1]!, http: m[2]!, debug: m[3]!, output: () => out, stop });
      }
    };
    proc.stderr!.on('data', onData);
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`service exited with ${code} before listening:\n${out}`));
    });
  });
}

/**
 * Waits for `text` in the service's output: its stdout is read as it comes, so a stat can be seen
 * before the log line written with it. Fails with the whole output beside the text.
 */
export async function expectLogged(svc: Pick<Service, 'output'>, text: string, timeoutMs = 10_000): Promise<void> {
  await waitFor(() => svc.output().includes(text), 'a log line', timeoutMs).catch(() => undefined);
  expect(svc.output()).toContain(text);
}

/** Runs a program to completion and returns its exit code and output. */
export function run(
  script: string,
  args: string[],
  env: NodeJS.ProcessEnv = { PATH: process.env['PATH'] },
  timeoutMs = 15_000,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const proc = spawn(process.execPath, [path.join(DIST, script), ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    proc.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    proc.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => proc.kill('SIGKILL'), timeoutMs);
    proc.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

export function grpcClient(address: string): RateLimitServiceClient {
  return new RateLimitServiceClient(address, grpc.credentials.createInsecure());
}

export function callGrpc(client: RateLimitServiceClient, req: Partial<ProtoRequest>): Promise<ProtoResponse> {
  const full: ProtoRequest = { domain: '', descriptors: [], hitsAddend: 0, ...req };
  return new Promise((resolve, reject) =>
    client.shouldRateLimit(full, new grpc.Metadata(), { deadline: Date.now() + 5000 }, (err, res) =>
      err ? reject(err) : resolve(res),
    ),
  );
}

export function descriptor(...kv: string[]) {
  return {
    entries: Array.from({ length: kv.length / 2 }, (_, i) => ({ key: kv[2 * i]!, value: kv[2 * i + 1]! })),
    limit: undefined,
    hitsAddend: undefined,
  };
}

export async function httpPost(
  address: string,
  pathName: string,
  body: string | Buffer,
): Promise<{ status: number; body: string; headers: Headers }> {
  const res = await fetch(`http://${address}${pathName}`, { method: 'POST', body });
  return { status: res.status, body: await res.text(), headers: res.headers };
}

export async function httpGet(address: string, pathName: string): Promise<{ status: number; body: string }> {
  const res = await fetch(`http://${address}${pathName}`);
  return { status: res.status, body: await res.text() };
}

/** A config of `n` rules under one key with distinct values (`c0`..), each its own limit per second. */
export function manyDescriptors(domain: string, n: number): string {
  let s = `domain: ${domain}\ndescriptors:\n`;
  for (let i = 0; i < n; i++) s += `  - key: client\n    value: c${i}\n    rate_limit:\n      unit: second\n      requests_per_unit: ${i + 1}\n`;
  return s;
}
