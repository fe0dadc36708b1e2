/**
 * scripts/test-servers.sh, which `make test` runs first: with stand-ins for `id` and `apt-get` on a
 * PATH that holds nothing else (and for the Python interpreter and the grpc-go sources, which it
 * finds by path), it installs what is missing as root, stops with the exact command otherwise,
 * and does nothing when every server and client is there.
 */
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

const SCRIPT = path.resolve(__dirname, '../../scripts/test-servers.sh');
const SERVERS = ['redis-server', 'redis-sentinel', 'redis-cli', 'memcached', 'openssl'];
/** The commands of the interop clients (besides Python and the grpc-go sources). */
const CLIENTS = ['go', 'h2load', 'nghttp', 'curl', 'wrk', 'prometheus', 'promtool', 'chromium'];
const bash = spawnSync('sh', ['-c', 'command -v bash'], { encoding: 'utf8' }).stdout.trim();

let bin: string;
let aptLog: string;
/** Where the script looks for the grpc-go sources: present unless a test removes it. */
let grpcGoDir: string;
beforeEach(() => {
  bin = fs.mkdtempSync(path.join(os.tmpdir(), 'rl-servers-'));
  aptLog = path.join(bin, 'apt.log');
  grpcGoDir = path.join(bin, 'gocode/src/google.golang.org/grpc');
  fs.mkdirSync(grpcGoDir, { recursive: true });
});
afterEach(() => fs.rmSync(bin, { recursive: true, force: true }));

function stub(name: string, body: string): void {
  fs.writeFileSync(path.join(bin, name), `#!${bash}\n${body}\n`, { mode: 0o755 });
}
/** A Python whose `import grpc` works (or not), as the script checks it. */
function python(hasGrpc: boolean): void {
  stub('python3', `[ "$*" = "-c import grpc" ] && exit ${hasGrpc ? 0 : 1}; exit 2`);
}
/** Every interop client present, so a test sees only the servers it leaves out. */
function clientsInstalled(): void {
  for (const c of CLIENTS) stub(c, 'exit 0');
  python(true);
}
function run(uid: number): { code: number | null; stdout: string; stderr: string } {
  stub('id', `echo ${uid}`);
  stub('apt-get', `echo "$*" >> ${aptLog}`);
  const env = { PATH: bin, TEST_SERVERS_PYTHON: path.join(bin, 'python3'), TEST_SERVERS_GRPC_GO_DIR: grpcGoDir };
  const r = spawnSync(bash, [SCRIPT], { env, encoding: 'utf8' });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}
const aptCalls = (): string[] => (fs.existsSync(aptLog) ? fs.readFileSync(aptLog, 'utf8').trim().split('\n') : []);

test('does nothing when every server and client is installed', () => {
  for (const s of SERVERS) stub(s, 'exit 0');
  clientsInstalled();
  expect(run(1000)).toMatchObject({ code: 0, stderr: '' });
  expect(aptCalls()).toEqual([]);
});

test('as root, installs the missing Debian packages', () => {
  stub('openssl', 'exit 0');
  stub('redis-cli', 'exit 0');
  clientsInstalled();
  expect(run(0).code).toBe(0);
  expect(aptCalls()).toEqual(['update -qq', 'install -y -qq redis-server redis-sentinel memcached']);
});

test('as another user, stops at once with the exact command to run', () => {
  stub('openssl', 'exit 0');
  clientsInstalled();
  const r = run(1000);
  expect(r.code).toBe(1);
  expect(r.stderr).toContain('  sudo apt-get install -y redis-server redis-sentinel redis-tools memcached\n');
  expect(aptCalls()).toEqual([]);
});

describe('the interop clients', () => {
  beforeEach(() => {
    for (const s of SERVERS) stub(s, 'exit 0');
  });

  test('as root, installs python3-grpcio, golang-go, golang-google-grpc-dev, nghttp2-client (once), curl, wrk, prometheus (once) and chromium', () => {
    fs.rmSync(grpcGoDir, { recursive: true });
    // No python3 at all: the package brings it.
    expect(run(0).code).toBe(0);
    expect(aptCalls()).toEqual(['update -qq', 'install -y -qq python3-grpcio golang-go golang-google-grpc-dev nghttp2-client curl wrk prometheus chromium']);
  });

  test('a Python without the grpc module needs python3-grpcio', () => {
    clientsInstalled();
    python(false);
    const r = run(1000);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('  sudo apt-get install -y python3-grpcio\n');
  });

  test('go without the grpc-go sources needs golang-google-grpc-dev', () => {
    clientsInstalled();
    fs.rmSync(grpcGoDir, { recursive: true });
    const r = run(1000);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('  sudo apt-get install -y golang-google-grpc-dev\n');
  });

  test('h2load without nghttp needs nghttp2-client', () => {
    clientsInstalled();
    fs.rmSync(path.join(bin, 'nghttp'));
    const r = run(1000);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('  sudo apt-get install -y nghttp2-client\n');
  });

  test('the HTTP/1.1 interop clients: curl and wrk', () => {
    clientsInstalled();
    fs.rmSync(path.join(bin, 'wrk'));
    const r = run(1000);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('  sudo apt-get install -y wrk\n');
  });

  test('promtool without prometheus needs the prometheus package', () => {
    clientsInstalled();
    fs.rmSync(path.join(bin, 'prometheus'));
    const r = run(1000);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('  sudo apt-get install -y prometheus\n');
  });
});

test('make test runs it before Jest', () => {
  const makefile = fs.readFileSync(path.resolve(__dirname, '../../Makefile'), 'utf8');
  const recipe = /^test:.*\n((?:\t.*\n)+)/m.exec(makefile)![1]!;
  expect(recipe.indexOf('scripts/test-servers.sh')).toBeGreaterThanOrEqual(0);
  expect(recipe.indexOf('scripts/test-servers.sh')).toBeLessThan(recipe.indexOf('jest'));
});
