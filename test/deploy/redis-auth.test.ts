/**
 * The manifests' Redis, run for real: for each pattern, a real redis-server on a free loopback port
 * with the redis container's own arguments, the Secret's value put where the kubelet would put it
 * (`$(VAR)` from `secretKeyRef`; each key of the pattern's Secret template gets a fresh random value,
 * as `openssl rand -hex` would). It must refuse a client without the password, let in the service
 * configured by each ratelimit container's environment (REDIS_AUTH from the same Secret), and its
 * readiness probe must pass only with the password.
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as path from 'node:path';
import { RedisConnection } from '../../src/backends/redis/connection';
import { loadSettings } from '../../src/settings';
import { silentLogger } from '../../src/telemetry/logger';
import { HOST, makeTempDir, requireBinary, startRedis } from '../support/redis';
import type { RedisServer } from '../support/redis';
import { K8S_DIR, expandVars, isRatelimitContainer, loadDocs, podSpecs, rel, yamlFiles } from './helpers';
import type { Json } from './helpers';

const OBJECTS = yamlFiles(K8S_DIR)
  .flatMap(loadDocs)
  .filter((d) => d.value.kind !== 'Kustomization');
const PODS = podSpecs(OBJECTS);
const PATTERNS = fs
  .readdirSync(K8S_DIR, { withFileTypes: true })
  .filter((e) => e.isDirectory())
  .map((e) => [e.name, path.join(K8S_DIR, e.name)] as [string, string]);

/** A fresh value for every key of the Secret templates of `dir`, by `<secret>/<key>`. */
function secretValues(dir: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const { file, value } of OBJECTS) {
    if (path.dirname(file) !== dir || value.kind !== 'Secret') continue;
    for (const key of [...Object.keys(value.stringData ?? {}), ...Object.keys(value.data ?? {})]) {
      out.set(`${value.metadata.name}/${key}`, randomBytes(32).toString('hex'));
    }
  }
  return out;
}

/** A container's environment as the kubelet gives it: literal values and Secret keys (`omitSecrets`: without the latter). */
function containerEnvironment(c: Json, secrets: Map<string, string>, where: string, omitSecrets = false): Record<string, string> {
  const env: Record<string, string> = {};
  for (const e of c.env ?? []) {
    if (typeof e.value === 'string') env[e.name] = expandVars(e.value, env);
    const ref = e.valueFrom?.secretKeyRef;
    if (ref === undefined || omitSecrets) continue;
    const v = secrets.get(`${ref.name}/${ref.key}`);
    if (v === undefined) throw new Error(`${where}: ${e.name} takes Secret ${ref.name} key ${ref.key}, which no Secret template beside it defines`);
    env[e.name] = v;
  }
  return env;
}

/** The first reply line to one RESP command on a fresh connection. */
function firstReply(port: number, parts: readonly string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const sock = net.connect({ host: HOST, port }, () => {
      sock.write(`*${parts.length}\r\n` + parts.map((p) => `$${Buffer.byteLength(p)}\r\n${p}\r\n`).join(''));
    });
    let buf = '';
    sock.setTimeout(5000, () => sock.destroy(new Error(`no reply to ${parts[0]} within 5 s`)));
    sock.on('data', (d: Buffer) => {
      buf += d.toString();
      const end = buf.indexOf('\r\n');
      if (end >= 0) {
        sock.destroy();
        resolve(buf.slice(0, end));
      }
    });
    sock.on('error', reject);
  });
}

describe.each(PATTERNS)('deploy/kubernetes/%s: Redis run with the manifest\'s arguments', (_name, dir) => {
  const redisPod = PODS.find((p) => path.dirname(p.file) === dir && (p.spec.containers ?? []).some((c: Json) => c.name === 'redis'))!;
  const container: Json = redisPod?.spec.containers.find((c: Json) => c.name === 'redis');
  const where = `${rel(redisPod?.file ?? dir)} ${redisPod?.name}/redis`;
  const ratelimits = PODS.filter((p) => path.dirname(p.file) === dir).flatMap((p) =>
    (p.spec.containers ?? []).filter(isRatelimitContainer).map((c: Json) => ({ c, where: `${rel(p.file)} ${p.name}/${c.name}` })),
  );
  const secrets = secretValues(dir);
  let server: RedisServer | undefined;

  beforeAll(async () => {
    expect(container).toBeDefined();
    const env = containerEnvironment(container, secrets, where);
    let argv: string[] = [...(container.command ?? []), ...(container.args ?? [])].map((a: string) => expandVars(String(a), env));
    // The image's entrypoint runs `redis-server <args>` when the first argument is an option.
    if (argv[0] === 'redis-server') argv = argv.slice(1);
    expect(argv[0]).toMatch(/^-/);
    // The helper's readiness check logs in as an ACL user of its own, so the default user's password
    // comes from the manifest's arguments alone.
    server = await startRedis({ aclUser: { name: 'deploy-test', password: randomBytes(16).toString('hex') }, extraArgs: argv });
  });

  afterAll(async () => {
    await server?.stop();
  });

  test('a client without the password, or with another one, is refused', async () => {
    expect(await firstReply(server!.port, ['PING'])).toMatch(/^-NOAUTH/);
    expect(await firstReply(server!.port, ['AUTH', randomBytes(32).toString('hex')])).toMatch(/^-WRONGPASS/);
  });

  test('each ratelimit container\'s REDIS_AUTH, read by the service\'s settings, opens it', async () => {
    expect(ratelimits.length).toBeGreaterThan(0);
    for (const { c, where: w } of ratelimits) {
      const env = containerEnvironment(c, secrets, w);
      expect({ where: w, REDIS_AUTH: typeof env.REDIS_AUTH }).toEqual({ where: w, REDIS_AUTH: 'string' });
      // Only the address differs from the pod (there it is the Service `redis`).
      const settings = loadSettings({ ...env, REDIS_URL: server!.address, REDIS_POOL_SIZE: '1', REDIS_STARTUP_MAX_ELAPSED_TIME: '5s' });
      const conn = new RedisConnection({ settings: settings.redis, shared: settings.redis, logger: silentLogger });
      try {
        await conn.connect();
        expect(await conn.client().ping()).toBe('PONG');
      } finally {
        await conn.close();
      }
    }
  });

  test('the readiness probe passes with the password and fails without it', () => {
    const probe: string[] = container.readinessProbe?.exec?.command ?? [];
    expect(probe.length).toBeGreaterThan(0);
    // The probe runs in the pod, where Redis is on 127.0.0.1:6379; here a redis-cli first on the
    // PATH points it at the test server instead.
    requireBinary('redis-cli');
    const real = spawnSync('sh', ['-c', 'command -v redis-cli'], { encoding: 'utf8' }).stdout.trim();
    const bin = makeTempDir('rl-probe-');
    fs.writeFileSync(path.join(bin, 'redis-cli'), `#!/bin/sh\nexec '${real}' -h ${HOST} -p ${server!.port} "$@"\n`, { mode: 0o755 });
    const run = (env: Record<string, string>): number | null =>
      spawnSync(probe[0]!, probe.slice(1), { env: { ...env, PATH: `${bin}:${process.env.PATH}` }, encoding: 'utf8', timeout: 10_000 }).status;
    try {
      expect(run(containerEnvironment(container, secrets, where))).toBe(0);
      expect(run(containerEnvironment(container, secrets, where, true))).not.toBe(0);
    } finally {
      fs.rmSync(bin, { recursive: true, force: true });
    }
  });
});
