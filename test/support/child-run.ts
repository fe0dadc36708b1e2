/**
 * Runs the external clients of the interop tests (curl, wrk, python3, go, h2load, nghttp) without
 * blocking the test process, each bounded in time; killChildren() stops what is left.
 */
import { type ChildProcess, spawn } from 'node:child_process';

/** The Debian package of each program the tests run, for the message when one is missing. */
const PACKAGE_OF: Readonly<Record<string, string>> = {
  '/usr/bin/python3': 'python3-grpcio',
  python3: 'python3',
  go: 'golang-go',
  h2load: 'nghttp2-client',
  nghttp: 'nghttp2-client',
  curl: 'curl',
  wrk: 'wrk',
};

/** Longest a client may run by default: far above what each needs, below Jest's test timeout. */
const CHILD_TIMEOUT_MS = 20_000;

const children = new Set<ChildProcess>();

export function killChildren(): void {
  for (const child of children) child.kill('SIGKILL');
  children.clear();
}

export interface Finished {
  code: number | null;
  stdout: string;
  /** stdout as it came, for binary output. */
  stdoutBytes: Buffer;
  stderr: string;
}

export interface RunOptions {
  input?: string;
  env?: NodeJS.ProcessEnv;
  timeoutMs?: number;
}

/**
 * Runs a program to its end; rejects when it cannot start (naming the Debian package that
 * provides it) or outlives its time limit (it is then killed).
 */
export function run(command: string, args: string[], options: RunOptions = {}): Promise<Finished> {
  const timeoutMs = options.timeoutMs ?? CHILD_TIMEOUT_MS;
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { env: options.env ?? process.env, stdio: ['pipe', 'pipe', 'pipe'] });
    children.add(child);
    const stdout: Buffer[] = [];
    const stderr: Buffer[] = [];
    child.stdout!.on('data', (c: Buffer) => stdout.push(c));
    child.stderr!.on('data', (c: Buffer) => stderr.push(c));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${command} ${args.join(' ')} still running after ${timeoutMs} ms; stderr: ${Buffer.concat(stderr).toString()}`));
    }, timeoutMs);
    child.on('error', (err: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      children.delete(child);
      const pkg = PACKAGE_OF[command];
      reject(
        err.code === 'ENOENT' && pkg !== undefined
          ? new Error(`${command} is not installed: install the Debian package ${pkg} (bash scripts/test-servers.sh does)`)
          : err,
      );
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      children.delete(child);
      const stdoutBytes = Buffer.concat(stdout);
      resolve({ code, stdout: stdoutBytes.toString(), stdoutBytes, stderr: Buffer.concat(stderr).toString() });
    });
    child.stdin!.on('error', () => undefined); // a child that exits without reading its input
    child.stdin!.end(options.input ?? '');
  });
}

/** Runs and expects exit status 0, or fails with the child's output. */
export async function runOk(command: string, args: string[], options: RunOptions = {}): Promise<Finished> {
  const finished = await run(command, args, options);
  if (finished.code !== 0) {
    throw new Error(`${command} ${args.join(' ')} exited with ${finished.code}\nstdout: ${finished.stdout}\nstderr: ${finished.stderr}`);
  }
  return finished;
}
