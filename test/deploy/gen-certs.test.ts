/**
 * envoy/gen-certs.sh: run into a temporary directory, then inspect the result with the openssl
 * command line (SANs, extended key usages, chain) and with node's TLS (a real mTLS handshake as
 * the service and Envoy would make it). Also checks it is idempotent and its default output is
 * git-ignored.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as tls from 'node:tls';
import { ENVOY_CLIENT_SAN, GEN_CERTS, ROOT } from './helpers';

// openssl is required (installed by .ci/run): a missing one fails here, never skips.
if (spawnSync('openssl', ['version'], { encoding: 'utf8' }).status !== 0) throw new Error('openssl is required by these tests');

const PAIRS = ['ca', 'ratelimit', 'envoy', 'intruder'] as const;

function run(dir: string, env: NodeJS.ProcessEnv = {}): string {
  return execFileSync('bash', [GEN_CERTS, dir], { encoding: 'utf8', env: { ...process.env, ...env }, timeout: 60_000 });
}

function ext(cert: string): { san: string; eku: string } {
  const out = execFileSync('openssl', ['x509', '-in', cert, '-noout', '-ext', 'subjectAltName,extendedKeyUsage'], { encoding: 'utf8' });
  const section = (title: string): string => {
    const m = new RegExp(`X509v3 ${title}:[^\\n]*\\n\\s+([^\\n]*)`).exec(out);
    return m ? m[1]!.trim() : '';
  };
  return { san: section('Subject Alternative Name'), eku: section('Extended Key Usage') };
}

function verify(ca: string, cert: string): { status: number | null; out: string } {
  const r = spawnSync('openssl', ['verify', '-CAfile', ca, cert], { encoding: 'utf8' });
  return { status: r.status, out: (r.stdout + r.stderr).trim() };
}

describe('envoy/gen-certs.sh', () => {
  let dir: string;
  let firstOutput: string;
  const file = (name: string): string => path.join(dir, name);

  beforeAll(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ratelimit-gen-certs-'));
    firstOutput = run(dir);
  });

  afterAll(() => {
    fs.rmSync(dir, { recursive: true, force: true });
  });

  test('writes the CA, the server, Envoy and intruder certificates and says so', () => {
    for (const p of PAIRS) {
      for (const suffix of ['crt', 'key']) {
        expect(fs.existsSync(file(`${p}.${suffix}`))).toBe(true);
        expect(firstOutput).toContain(`wrote ${file(`${p}.${suffix}`)}`);
      }
      // Private keys are not world-readable.
      expect(fs.statSync(file(`${p}.key`)).mode & 0o077).toBe(0);
    }
  });

  test('server certificate: the service names and serverAuth', () => {
    const e = ext(file('ratelimit.crt'));
    expect(e.san.split(', ').sort()).toEqual(
      ['DNS:ratelimit', 'DNS:ratelimit.default.svc.cluster.local', 'DNS:localhost', 'IP Address:127.0.0.1'].sort(),
    );
    expect(e.eku).toBe('TLS Web Server Authentication');
  });

  test('client certificates: their SAN and clientAuth', () => {
    expect(ext(file('envoy.crt'))).toEqual({ san: `DNS:${ENVOY_CLIENT_SAN}`, eku: 'TLS Web Client Authentication' });
    expect(ext(file('intruder.crt'))).toEqual({ san: 'DNS:intruder.ratelimit.test', eku: 'TLS Web Client Authentication' });
  });

  test('openssl verify accepts every leaf against the CA', () => {
    for (const p of ['ratelimit', 'envoy', 'intruder']) {
      expect(verify(file('ca.crt'), file(`${p}.crt`))).toEqual({ status: 0, out: `${file(`${p}.crt`)}: OK` });
    }
  });

  test('a certificate from another CA is not accepted (the check can fail)', () => {
    const other = fs.mkdtempSync(path.join(os.tmpdir(), 'ratelimit-gen-certs-other-'));
    try {
      run(other);
      expect(verify(file('ca.crt'), path.join(other, 'envoy.crt')).status).not.toBe(0);
    } finally {
      fs.rmSync(other, { recursive: true, force: true });
    }
  });

  test('a second run keeps every file', () => {
    const before = PAIRS.flatMap((p) => [fs.readFileSync(file(`${p}.crt`)), fs.readFileSync(file(`${p}.key`))]);
    const out = run(dir);
    for (const p of PAIRS) expect(out).toContain(`kept  ${file(`${p}.crt`)}`);
    expect(out).not.toContain('wrote ');
    const after = PAIRS.flatMap((p) => [fs.readFileSync(file(`${p}.crt`)), fs.readFileSync(file(`${p}.key`))]);
    expect(after).toEqual(before);
  });

  test('a missing key is regenerated with its certificate, the rest kept', () => {
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ratelimit-gen-certs-partial-'));
    try {
      for (const f of fs.readdirSync(dir)) fs.copyFileSync(file(f), path.join(tmp, f));
      fs.rmSync(path.join(tmp, 'envoy.key'));
      const out = run(tmp);
      expect(out).toContain(`wrote ${path.join(tmp, 'envoy.crt')}`);
      expect(out).toContain(`kept  ${path.join(tmp, 'ca.crt')}`);
      expect(out).toContain(`kept  ${path.join(tmp, 'ratelimit.crt')}`);
      expect(verify(path.join(tmp, 'ca.crt'), path.join(tmp, 'envoy.crt')).status).toBe(0);
    } finally {
      fs.rmSync(tmp, { recursive: true, force: true });
    }
  });

  test('RATELIMIT_EXTRA_SANS adds server names (and replaces a server certificate without them)', () => {
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ratelimit-gen-certs-extra-'));
    try {
      for (const f of fs.readdirSync(dir)) fs.copyFileSync(file(f), path.join(tmp, f));
      const out = run(tmp, { RATELIMIT_EXTRA_SANS: 'DNS:ratelimit.prod.svc.cluster.local' });
      expect(out).toContain(`wrote ${path.join(tmp, 'ratelimit.crt')}`);
      expect(out).toContain(`kept  ${path.join(tmp, 'envoy.crt')}`);
      expect(ext(path.join(tmp, 'ratelimit.crt')).san).toContain('DNS:ratelimit.prod.svc.cluster.local');
    } finally {
      fs.rmSync(tmp, { recursive: true, force: true });
    }
  });

  test('mTLS handshake: Envoy verifies SAN `ratelimit`, the service tells envoy from intruder by SAN', async () => {
    const read = (n: string): Buffer => fs.readFileSync(file(n));
    const server = tls.createServer(
      { cert: read('ratelimit.crt'), key: read('ratelimit.key'), ca: read('ca.crt'), requestCert: true, rejectUnauthorized: true, ALPNProtocols: ['h2'] },
      (socket) => {
        const peer = socket.getPeerCertificate();
        // GRPC_CLIENT_TLS_SAN: the client certificate must be valid for the DNS name.
        const sanOk = tls.checkServerIdentity(ENVOY_CLIENT_SAN, peer) === undefined;
        socket.end(JSON.stringify({ san: peer.subjectaltname, sanOk }));
      },
    );
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as { port: number }).port;
    const connect = (who: string) =>
      new Promise<{ authorized: boolean; alpn: string | false | null; body: { san: string; sanOk: boolean } }>((resolve, reject) => {
        const s = tls.connect({ host: '127.0.0.1', port, servername: 'ratelimit', ca: read('ca.crt'), cert: read(`${who}.crt`), key: read(`${who}.key`), ALPNProtocols: ['h2'] });
        let data = '';
        s.on('data', (d) => (data += String(d)));
        s.on('end', () => resolve({ authorized: s.authorized, alpn: s.alpnProtocol, body: JSON.parse(data) }));
        s.on('error', reject);
      });
    try {
      expect(await connect('envoy')).toEqual({ authorized: true, alpn: 'h2', body: { san: `DNS:${ENVOY_CLIENT_SAN}`, sanOk: true } });
      expect(await connect('intruder')).toEqual({ authorized: true, alpn: 'h2', body: { san: 'DNS:intruder.ratelimit.test', sanOk: false } });
    } finally {
      server.close();
    }
  });
});

test('envoy/certs (the default output) is git-ignored', () => {
  const ignore = fs.readFileSync(path.join(ROOT, 'envoy', '.gitignore'), 'utf8');
  expect(ignore.split('\n').map((l) => l.trim())).toContain('certs/');
  const git = spawnSync('git', ['check-ignore', '-q', 'envoy/certs/ca.key'], { cwd: ROOT });
  if (git.error === undefined && git.status !== 128) expect(git.status).toBe(0);
});

test('gen-certs.sh is executable and strict bash', () => {
  const text = fs.readFileSync(GEN_CERTS, 'utf8');
  expect(text.startsWith('#!/usr/bin/env bash\n')).toBe(true);
  expect(text).toContain('set -euo pipefail');
  expect(fs.statSync(GEN_CERTS).mode & 0o111).not.toBe(0);
  expect(spawnSync('bash', ['-n', GEN_CERTS]).status).toBe(0);
});
