/**
 * Every program answers -h, -help and --help with its usage on stdout and exit 0 (as Go's flag
 * package), before it does anything else; and the client's failed-call line is complete.
 */
import net from 'node:net';
import { run } from '../e2e/harness';
import { freePort } from '../support/ports';

const GO_STYLE = ['client.js', 'config-check.js', 'xds-server.js'];

describe.each(['-h', '-help', '--help'])('%s', (flag) => {
  test.each(GO_STYLE)('%s prints its flags and exits 0', async (program) => {
    const r = await run(program, [flag]);
    expect(r).toMatchObject({ code: 0, stderr: '' });
    expect(r.stdout).toMatch(/^Usage of ratelimit-[\w-]+:\n {2}-\w+/);
  });
});

test.each(['-h', '--help'])('ratelimit %s lists every setting with its default, and starts nothing even on a busy port', async (flag) => {
  const busy = net.createServer();
  await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', resolve));
  const port = String((busy.address() as net.AddressInfo).port);
  try {
    const r = await run('ratelimit.js', [flag], { PATH: process.env['PATH'], PORT: port, GRPC_PORT: port, DEBUG_PORT: port });
    expect(r).toMatchObject({ code: 0, stderr: '' });
    expect(r.stdout).toMatch(/^Usage: ratelimit/);
    expect(r.stdout).toContain('  REDIS_URL (or STORE_URL)  default: /var/run/nutcracker/ratelimit.sock\n');
    expect(r.stdout).toContain('  NEAR_LIMIT_RATIO  default: 0.8\n');
    expect(r.stdout).toContain('See docs/settings.md for details.');
    expect(r.stdout).not.toContain('listening');
  } finally {
    busy.close();
  }
});

test.each([[[]], [['backtest']], [['lookahead']], [['paper']], [['live']], [['replay']], [['sim']], [['candles', 'download']]])(
  'ratelimit-runner %j --help prints its usage and exits 0',
  async (command) => {
    for (const flag of ['-h', '--help']) {
      const r = await run('runner.js', [...command, flag]);
      expect(r.code).toBe(0);
      expect(r.stdout).toMatch(/ratelimit-runner/);
    }
  },
);

test('a refused connection gives one complete line: status, cause and a hint, no empty resolution note', async () => {
  const port = await freePort();
  const r = await run('client.js', ['-dial_string', `127.0.0.1:${port}`, '-domain', 'd', '-descriptors', 'k=v', '-timeout', '3000']);
  expect(r.code).toBe(1);
  expect(r.stderr).toMatch(new RegExp(`^request error: UNAVAILABLE: .*ECONNREFUSED.* \\(is the rate limit service listening on 127\\.0\\.0\\.1:${port}\\?\\)\\n$`));
  expect(r.stderr).not.toMatch(/Resolution note/);
});
