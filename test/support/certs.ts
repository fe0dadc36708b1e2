/**
 * Test certificates, generated with the `openssl` command line (P-256 keys, 10 years):
 *
 * - `ca`: the test CA (`ca.crt`, `ca.key`);
 * - `server`: signed by `ca`, serverAuth, SANs `DNS:localhost, IP:127.0.0.1, IP:::1,
 *   DNS:server.ratelimit.test` (the last one for SAN-override tests);
 * - `client`: signed by `ca`, clientAuth, SAN `DNS:client.ratelimit.test`, CN `client`;
 * - `client2`: signed by `ca`, clientAuth, SAN `DNS:other-client.ratelimit.test`, CN `client2`;
 * - `otherCa` + `rogueClient` / `rogueServer`: a second CA and certs it signed (same SANs as
 *   `client` / `server`), to test rejection.
 *
 * `testCerts()` generates the set once and reuses it: the files live in
 * `<tmpdir>/ratelimit-test-certs-<recipe hash>` (written to a fresh directory, then renamed into
 * place, so parallel Jest workers never see a half-written set). `generateCerts(dir)` writes a
 * fresh set into a given directory.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

export interface CertPair {
  readonly cert: string;
  readonly key: string;
}

export interface TestCerts {
  readonly dir: string;
  readonly ca: CertPair;
  readonly server: CertPair;
  readonly client: CertPair;
  readonly client2: CertPair;
  readonly otherCa: CertPair;
  readonly rogueClient: CertPair;
  readonly rogueServer: CertPair;
}

export const SERVER_SAN_DNS = 'server.ratelimit.test';
export const CLIENT_SAN = 'client.ratelimit.test';
export const CLIENT2_SAN = 'other-client.ratelimit.test';

interface LeafSpec {
  readonly name: keyof Omit<TestCerts, 'dir' | 'ca' | 'otherCa'>;
  readonly signer: 'ca' | 'otherCa';
  readonly cn: string;
  readonly ext: string;
}

const SERVER_EXT = [
  'basicConstraints=critical,CA:FALSE',
  'keyUsage=critical,digitalSignature',
  'extendedKeyUsage=serverAuth',
  `subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1,DNS:${SERVER_SAN_DNS}`,
].join('\n');

function clientExt(san: string): string {
  return ['basicConstraints=critical,CA:FALSE', 'keyUsage=critical,digitalSignature', 'extendedKeyUsage=clientAuth', `subjectAltName=DNS:${san}`].join(
    '\n',
  );
}

const CAS = [
  { name: 'ca', cn: 'ratelimit test CA' },
  { name: 'otherCa', cn: 'ratelimit other test CA' },
] as const;

const LEAVES: readonly LeafSpec[] = [
  { name: 'server', signer: 'ca', cn: 'localhost', ext: SERVER_EXT },
  { name: 'client', signer: 'ca', cn: 'client', ext: clientExt(CLIENT_SAN) },
  { name: 'client2', signer: 'ca', cn: 'client2', ext: clientExt(CLIENT2_SAN) },
  { name: 'rogueClient', signer: 'otherCa', cn: 'client', ext: clientExt(CLIENT_SAN) },
  { name: 'rogueServer', signer: 'otherCa', cn: 'localhost', ext: SERVER_EXT },
];

const RECIPE = createHash('sha256')
  .update(JSON.stringify({ v: 1, CAS, LEAVES }))
  .digest('hex')
  .slice(0, 12);

function paths(dir: string): TestCerts {
  const pair = (n: string): CertPair => ({ cert: path.join(dir, `${n}.crt`), key: path.join(dir, `${n}.key`) });
  return {
    dir,
    ca: pair('ca'),
    server: pair('server'),
    client: pair('client'),
    client2: pair('client2'),
    otherCa: pair('otherCa'),
    rogueClient: pair('rogueClient'),
    rogueServer: pair('rogueServer'),
  };
}

function openssl(args: string[], cwd: string): void {
  execFileSync('openssl', args, { cwd, stdio: ['ignore', 'pipe', 'pipe'], timeout: 20_000 });
}

/** Writes a complete fresh set into `dir` (created if needed) and returns the paths. */
export function generateCerts(dir: string): TestCerts {
  fs.mkdirSync(dir, { recursive: true });
  const newKey = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  for (const ca of CAS) {
    openssl(
      [
        'req', '-x509', ...newKey, '-keyout', `${ca.name}.key`, '-out', `${ca.name}.crt`, '-days', '3650',
        '-subj', `/CN=${ca.cn}`,
        '-addext', 'basicConstraints=critical,CA:TRUE',
        '-addext', 'keyUsage=critical,keyCertSign,cRLSign',
      ],
      dir,
    );
  }
  for (const leaf of LEAVES) {
    fs.writeFileSync(path.join(dir, `${leaf.name}.ext`), leaf.ext + '\n');
    openssl(['req', '-new', ...newKey, '-keyout', `${leaf.name}.key`, '-out', `${leaf.name}.csr`, '-subj', `/CN=${leaf.cn}`], dir);
    openssl(
      [
        'x509', '-req', '-in', `${leaf.name}.csr`, '-CA', `${leaf.signer}.crt`, '-CAkey', `${leaf.signer}.key`,
        '-set_serial', String(0x1000 + LEAVES.indexOf(leaf)), '-days', '3650', '-sha256',
        '-extfile', `${leaf.name}.ext`, '-out', `${leaf.name}.crt`,
      ],
      dir,
    );
    fs.rmSync(path.join(dir, `${leaf.name}.csr`));
    fs.rmSync(path.join(dir, `${leaf.name}.ext`));
  }
  return paths(dir);
}

function complete(c: TestCerts): boolean {
  return [c.ca, c.server, c.client, c.client2, c.otherCa, c.rogueClient, c.rogueServer].every(
    (p) => fs.existsSync(p.cert) && fs.existsSync(p.key),
  );
}

let cached: TestCerts | undefined;

/** The shared test certificate set (generated on first use; see the file comment). */
export function testCerts(): TestCerts {
  if (cached !== undefined) return cached;
  const uid = typeof process.getuid === 'function' ? process.getuid() : 0;
  const dir = path.join(os.tmpdir(), `ratelimit-test-certs-${uid}-${RECIPE}`);
  const existing = paths(dir);
  if (!complete(existing)) {
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ratelimit-test-certs-tmp-'));
    try {
      generateCerts(tmp);
      try {
        fs.renameSync(tmp, dir);
      } catch (err) {
        // Another worker won the race (ENOTEMPTY/EEXIST), or a broken set is in the way.
        const code = (err as NodeJS.ErrnoException).code;
        if (code !== 'ENOTEMPTY' && code !== 'EEXIST') throw err;
        if (!complete(existing)) {
          fs.rmSync(dir, { recursive: true, force: true });
          fs.renameSync(tmp, dir);
        }
      }
    } finally {
      fs.rmSync(tmp, { recursive: true, force: true });
    }
  }
  cached = paths(dir);
  return cached;
}

/** The contents of a cert/key pair (PEM buffers). */
export function readPair(p: CertPair): { cert: Buffer; key: Buffer } {
  return { cert: fs.readFileSync(p.cert), key: fs.readFileSync(p.key) };
}
