/** `ratelimit-runner sim` starts the simulated broker; a client can connect and trade on it. */
import { spawn } from 'node:child_process';
import path from 'node:path';
import { FxcmClient } from '../../src/trading/fxcm';
import { DIST, run } from './harness';

test('ratelimit-runner sim serves the broker API until SIGTERM', async () => {
  const proc = spawn(process.execPath, [path.join(DIST, 'runner.js'), 'sim', '--token', 'tok123', '--always-open', '--tick-ms', '0'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  proc.stdout.on('data', (d: Buffer) => (out += d.toString()));
  proc.stderr.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((resolve) => proc.once('exit', resolve));
  try {
    const url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`sim did not start:\n${out}`)), 10_000);
      proc.stdout.on('data', () => {
        const m = /listening on (\S+)/.exec(out);
        if (m) {
          clearTimeout(timer);
          resolve(m[1]!);
        }
      });
    });
    const client = new FxcmClient({ baseUrl: url, token: 'tok123' });
    await client.connect();
    const accountId = await client.getAccountId();
    expect(accountId).toMatch(/^\d+$/);
    client.close();
  } finally {
    proc.kill('SIGTERM');
    expect(await exited).toBe(0);
  }
});

test('ratelimit-runner rejects unknown commands and shows help', async () => {
  const bad = await run('runner.js', ['fly']);
  expect(bad.code).toBe(2);
  expect(bad.stderr).toContain('unknown command "fly"');
  const help = await run('runner.js', ['sim', '--help']);
  expect(help.stdout).toContain('--token TOKEN');
  const noToken = await run('runner.js', ['sim']);
  expect(noToken.code).toBe(2);
});
