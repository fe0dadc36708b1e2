/**
 * scripts/test-servers.sh, which `make test` runs first: with stand-ins for `id` and `apt-get` on a
 * PATH that holds nothing else, it installs what is missing as root, stops with the exact command
 * otherwise, and does nothing when every server is there.
 */
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

const SCRIPT = path.resolve(__dirname, '../../scripts/test-servers.sh');
const SERVERS = ['redis-server', 'redis-sentinel', 'redis-cli', 'memcached', 'openssl'];
const bash = spawnSync('sh', ['-c', 'command -v bash'], { encoding: 'utf8' }).stdout.trim();

let bin: string;
let aptLog: string;
beforeEach(() => {
  bin = fs.mkdtempSync(path.join(os.tmpdir(), 'rl-servers-'));
  aptLog = path.join(bin, 'apt.log');
});
afterEach(() => fs.rmSync(bin, { recursive: true, force: true }));

function stub(name: string, body: string): void {
  fs.writeFileSync(path.join(bin, name), `#!${bash}\n${body}\n`, { mode: 0o755 });
}
function run(uid: number): { code: number | null; stdout: string; stderr: string } {
  stub('id', `echo ${uid}`);
  stub('apt-get', `echo "$*" >> ${aptLog}`);
  const r = spawnSync(bash, [SCRIPT], { env: { PATH: bin }, encoding: 'utf8' });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}
const aptCalls = (): string[] => (fs.existsSync(aptLog) ? fs.readFileSync(aptLog, 'utf8').trim().split('\n') : []);

test('does nothing when every server is installed', () => {
  for (const s of SERVERS) stub(s, 'exit 0');
  expect(run(1000)).toMatchObject({ code: 0, stderr: '' });
  expect(aptCalls()).toEqual([]);
});

test('as root, installs the missing Debian packages', () => {
  stub('openssl', 'exit 0');
  stub('redis-cli', 'exit 0');
  expect(run(0).code).toBe(0);
  expect(aptCalls()).toEqual(['update -qq', 'install -y -qq redis-server redis-sentinel memcached']);
});

test('as another user, stops at once with the exact command to run', () => {
  stub('openssl', 'exit 0');
  const r = run(1000);
  expect(r.code).toBe(1);
  expect(r.stderr).toContain('  sudo apt-get install -y redis-server redis-sentinel redis-tools memcached\n');
  expect(aptCalls()).toEqual([]);
});

test('make test runs it before Jest', () => {
  const makefile = fs.readFileSync(path.resolve(__dirname, '../../Makefile'), 'utf8');
  const recipe = /^test:.*\n((?:\t.*\n)+)/m.exec(makefile)![1]!;
  expect(recipe.indexOf('scripts/test-servers.sh')).toBeGreaterThanOrEqual(0);
  expect(recipe.indexOf('scripts/test-servers.sh')).toBeLessThan(recipe.indexOf('jest'));
});
