/**
 * End to end over mTLS: the gRPC port requires a client certificate from the configured CA with
 * the configured SAN (as Envoy's cluster presents it); wrong SAN, no certificate or another CA
 * are refused. The HTTP port can use the same TLS; certificates reload without a restart.
 */
import fs from 'node:fs';
import https from 'node:https';
import path from 'node:path';
import tls from 'node:tls';
import * as grpc from '@grpc/grpc-js';
import { RateLimitServiceClient } from '../../generated/envoy/service/ratelimit/v3/rls';
import { CLIENT_SAN, type CertPair, testCerts } from '../support/certs';
import { baseEnv, callGrpc, descriptor, run, runtimeDir, type Service, startService } from './harness';
import { waitFor } from '../support/wait';

const CONFIG = 'domain: tls\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 10}\n';

/** The client's flags for a client certificate. */
const certFlags = (pair: CertPair): string[] => ['-grpc-cert-file', pair.cert, '-grpc-key-file', pair.key];

describe('mTLS', () => {
  const certs = testCerts();
  let svc: Service;
  let dir: ReturnType<typeof runtimeDir>;
  let serverCert: string;
  let serverKey: string;

  const clientFor = (pair: CertPair | undefined, ca = certs.ca.cert) =>
    new RateLimitServiceClient(
      svc.grpc,
      grpc.credentials.createSsl(
        fs.readFileSync(ca),
        pair ? fs.readFileSync(pair.key) : null,
        pair ? fs.readFileSync(pair.cert) : null,
      ),
      { 'grpc.ssl_target_name_override': 'localhost' },
    );

  beforeAll(async () => {
    dir = runtimeDir({ 'tls.yaml': CONFIG });
    // The server's files live in their own directory, so a rotation can be simulated.
    const certDir = path.join(dir.base, 'certs');
    fs.mkdirSync(certDir);
    serverCert = path.join(certDir, 'tls.crt');
    serverKey = path.join(certDir, 'tls.key');
    fs.copyFileSync(certs.server.cert, serverCert);
    fs.copyFileSync(certs.server.key, serverKey);
    svc = await startService({
      ...baseEnv(dir.root),
      GRPC_SERVER_USE_TLS: 'true',
      GRPC_SERVER_TLS_CERT: serverCert,
      GRPC_SERVER_TLS_KEY: serverKey,
      GRPC_CLIENT_TLS_CACERT: certs.ca.cert,
      GRPC_CLIENT_TLS_SAN: CLIENT_SAN,
      HTTP_SERVER_USE_TLS: 'true',
      TLS_RELOAD_INTERVAL: '200ms',
    });
  });

  afterAll(async () => {
    if (svc) expect(await svc.stop()).toBe(0);
    fs.rmSync(dir.base, { recursive: true, force: true });
  });

  test('a client certificate from the CA with the right SAN is served', async () => {
    const client = clientFor(certs.client);
    const res = await callGrpc(client, { domain: 'tls', descriptors: [descriptor('k', 'v')] });
    client.close();
    expect(res.statuses[0]!.limitRemaining).toBe(9);
  });

  test.each([
    ['a wrong SAN', () => certs.client2],
    ['no certificate', () => undefined],
    ['a certificate from another CA', () => certs.rogueClient],
  ])('a client with %s is refused', async (_name, pair) => {
    const client = clientFor(pair());
    await expect(callGrpc(client, { domain: 'tls', descriptors: [descriptor('k', 'v')] })).rejects.toMatchObject({
      code: grpc.status.UNAVAILABLE,
    });
    client.close();
  });

  test('plaintext gRPC is refused', async () => {
    const client = new RateLimitServiceClient(svc.grpc, grpc.credentials.createInsecure());
    await expect(callGrpc(client, { domain: 'tls', descriptors: [descriptor('k', 'v')] })).rejects.toMatchObject({
      code: grpc.status.UNAVAILABLE,
    });
    client.close();
  });

  test('ratelimit-client speaks TLS with a client certificate', async () => {
    const res = await run('client.js', [
      '-dial_string', svc.grpc,
      '-grpc-use-tls',
      '-grpc-server-ca-file', certs.ca.cert,
      '-grpc-cert-file', certs.client.cert,
      '-grpc-key-file', certs.client.key,
      '-grpc-server-name', 'localhost',
      '-domain', 'tls',
      '-descriptors', 'k=cli',
    ]);
    expect(res.stderr).toBe('');
    expect(res.code).toBe(0);
    expect(res.stdout).toContain('"limitRemaining": 9');
  });

  test.each([
    ['no certificate', () => [], /: the server requires a client certificate \(TLS alert "certificate required"\): give -grpc-cert-file and -grpc-key-file$/],
    ['a wrong SAN', () => certFlags(certs.client2), /: the server refused the client certificate: /],
    ['a certificate from another CA', () => certFlags(certs.rogueClient), /: the server refused the client certificate/],
    ['a server CA that does not sign the server', () => [...certFlags(certs.client), '-grpc-server-ca-file', certs.otherCa.cert], /: the server certificate did not verify: self-signed certificate in certificate chain/],
  ])('ratelimit-client with %s says what TLS refused, not "is the service listening?"', async (_name, flags, problem) => {
    const res = await run('client.js', [
      '-dial_string', svc.grpc,
      '-grpc-use-tls',
      '-grpc-server-ca-file', certs.ca.cert,
      '-grpc-server-name', 'localhost',
      ...flags(),
      '-domain', 'tls',
      '-descriptors', 'k=cli',
    ]);
    expect(res.code).toBe(1);
    const lines = res.stderr.trimEnd().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(new RegExp(`^request error: UNAVAILABLE: TLS with ${svc.grpc.replace(/\./g, '\\.')} failed`));
    expect(lines[0]).toMatch(problem);
    expect(lines[0]).not.toContain('listening');
  });

  test('ratelimit-client in plaintext against the TLS port: told that the service speaks TLS, and which flags to add', async () => {
    const res = await run('client.js', ['-dial_string', svc.grpc, '-domain', 'tls', '-descriptors', 'k=cli', '-timeout', '3000']);
    expect(res.code).toBe(1);
    expect(res.stderr).toBe(
      `request error: UNAVAILABLE: TLS with ${svc.grpc} failed: the service speaks TLS (GRPC_SERVER_USE_TLS) and this call did not: add -grpc-use-tls and -grpc-server-ca-file (and -grpc-cert-file, -grpc-key-file for mTLS)\n`,
    );
  });

  const httpsJson = (pair: CertPair | undefined) =>
    new Promise<number>((resolve, reject) => {
      const [host, port] = svc.http.split(':');
      const req = https.request(
        {
          host,
          port: Number(port),
          path: '/json',
          method: 'POST',
          ca: fs.readFileSync(certs.ca.cert),
          cert: pair ? fs.readFileSync(pair.cert) : undefined,
          key: pair ? fs.readFileSync(pair.key) : undefined,
          servername: 'localhost',
        },
        (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        },
      );
      req.on('error', reject);
      req.end(JSON.stringify({ domain: 'tls', descriptors: [{ entries: [{ key: 'k', value: 'https' }] }] }));
    });

  test('HTTP_SERVER_USE_TLS: /json over mTLS, refused without a certificate', async () => {
    expect(await httpsJson(certs.client)).toBe(200);
    await expect(httpsJson(undefined)).rejects.toThrow();
    await expect(httpsJson(certs.client2)).rejects.toThrow();
  });

  test('a rotated server certificate is served without a restart', async () => {
    const fingerprint = () =>
      new Promise<string>((resolve, reject) => {
        const [host, port] = svc.grpc.split(':');
        const socket = tls.connect(
          {
            host,
            port: Number(port),
            servername: 'localhost',
            rejectUnauthorized: false,
            cert: fs.readFileSync(certs.client.cert),
            key: fs.readFileSync(certs.client.key),
            ALPNProtocols: ['h2'],
          },
          () => {
            const fp = socket.getPeerCertificate().fingerprint256;
            socket.destroy();
            resolve(fp);
          },
        );
        socket.on('error', reject);
      });
    const before = await fingerprint();
    // cert-manager style: write the new pair next to the old, then rename over it.
    fs.copyFileSync(certs.rogueServer.cert, serverCert + '.new');
    fs.copyFileSync(certs.rogueServer.key, serverKey + '.new');
    fs.renameSync(serverKey + '.new', serverKey);
    fs.renameSync(serverCert + '.new', serverCert);
    await waitFor(async () => (await fingerprint()) !== before, '(await fingerprint()) !== before');
    expect(svc.output()).toContain('TLS certificates reloaded');
  });
});

test('TLS without a certificate file is a start-up error naming the variables', async () => {
  const dir = runtimeDir({ 'tls.yaml': CONFIG });
  const res = await run('ratelimit.js', [], { ...baseEnv(dir.root), GRPC_SERVER_USE_TLS: 'true' });
  expect(res.code).toBe(1);
  expect(res.stderr.trim()).toBe(
    'ratelimit: GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY (certificate chain and key files)',
  );
});

describe('the certificates of envoy/gen-certs.sh', () => {
  test('Envoy\'s client certificate is served; the intruder\'s (wrong SAN) and none are refused', async () => {
    const { execFileSync } = await import('node:child_process');
    const dir = runtimeDir({ 'tls.yaml': CONFIG });
    const out = path.join(dir.base, 'certs');
    execFileSync('bash', [path.join(__dirname, '../../envoy/gen-certs.sh'), out], { stdio: 'ignore', timeout: 60_000 });
    const pair = (name: string) => ({ cert: path.join(out, `${name}.crt`), key: path.join(out, `${name}.key`) });
    const svc = await startService({
      ...baseEnv(dir.root),
      GRPC_SERVER_USE_TLS: 'true',
      GRPC_SERVER_TLS_CERT: pair('ratelimit').cert,
      GRPC_SERVER_TLS_KEY: pair('ratelimit').key,
      GRPC_CLIENT_TLS_CACERT: path.join(out, 'ca.crt'),
      GRPC_CLIENT_TLS_SAN: 'envoy.ratelimit.test',
    });
    const client = (p: { cert: string; key: string } | undefined) =>
      new RateLimitServiceClient(
        svc.grpc,
        grpc.credentials.createSsl(fs.readFileSync(path.join(out, 'ca.crt')), p ? fs.readFileSync(p.key) : null, p ? fs.readFileSync(p.cert) : null),
        { 'grpc.ssl_target_name_override': 'ratelimit' },
      );
    try {
      const envoy = client(pair('envoy'));
      let code = 0;
      await waitFor(async () => {
        try {
          code = (await callGrpc(envoy, { domain: 'tls', descriptors: [descriptor('k', 'envoy')] })).overallCode;
          return true;
        } catch (err) {
          // Surface anything but a reset connection (retried: a loaded CI machine).
          if ((err as grpc.ServiceError).code !== grpc.status.UNAVAILABLE) throw err;
          return false;
        }
      }, '{ try { code = (await callGrpc(envoy, { domain: \'tls\', descriptors:...', 5000);
      expect(code).toBe(1);
      envoy.close();
      for (const p of [pair('intruder'), undefined]) {
        const c = client(p);
        await expect(callGrpc(c, { domain: 'tls', descriptors: [descriptor('k', 'x')] })).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
        c.close();
      }
      expect(svc.output()).toMatch(/refused a TLS client .*do not include envoy\.ratelimit\.test/);
    } finally {
      expect(await svc.stop()).toBe(0);
      fs.rmSync(dir.base, { recursive: true, force: true });
    }
  });
});
