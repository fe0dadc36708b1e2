/**
 * The install side of deploy/Dockerfile, for real (Docker itself is not available here): the build
 * stage's COPY and RUN steps run in a clean temp directory (`npm ci`, the compile, the prune to
 * production dependencies), the runtime stage's files are copied out of it as the image would hold
 * them, and the pruned program must start and answer. A dependency the program needs but
 * package.json does not declare for production fails here.
 *
 * Beside it, two fast checks on the manifests themselves: the lock file holds every platform's
 * optional packages (npm 11's `npm ci` refuses a lock without them), and every package the code
 * requires is a declared production dependency (not one that only resolves through another's).
 */
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import { builtinModules } from 'node:module';
import * as os from 'node:os';
import * as path from 'node:path';
import { LOOPBACK_LISTENERS, type Service, httpPost, startService } from '../e2e/harness';
import { type Stage, parseCopy, parseDockerfile, parseEnv } from './dockerfile';
import { ROOT } from './helpers';

const PKG = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8'));
const LOCK = JSON.parse(fs.readFileSync(path.join(ROOT, 'package-lock.json'), 'utf8'));

describe('package-lock.json', () => {
  test('lists every optional (platform) package of every locked package, so npm ci works with npm 10 and 11', () => {
    const packages = LOCK.packages as Record<string, { optionalDependencies?: Record<string, string> }>;
    const missing: string[] = [];
    for (const [where, entry] of Object.entries(packages)) {
      for (const name of Object.keys(entry.optionalDependencies ?? {})) {
        // npm resolves from the package's own node_modules up to the root, as Node does.
        const candidates: string[] = [];
        for (let dir = where; ; dir = dir.replace(/\/?node_modules\/(@[^/]+\/)?[^/]+$/, '')) {
          candidates.push(`${dir === '' ? '' : dir + '/'}node_modules/${name}`);
          if (dir === '') break;
        }
        if (!candidates.some((c) => c in packages)) missing.push(`${name} (optional dependency of ${where || 'the root'})`);
      }
    }
    expect(missing).toEqual([]);
  });

  test('is in step with package.json', () => {
    const root = LOCK.packages[''];
    expect(root.dependencies).toEqual(PKG.dependencies);
    expect(root.optionalDependencies).toEqual(PKG.optionalDependencies);
    expect(root.devDependencies).toEqual(PKG.devDependencies);
  });
});

/** The runner's code: its packages may be optional dependencies (the service's image leaves them out). */
const RUNNER_CODE = /^src\/(trading\/|cli\/runner)/;

/**
 * Package names that `src/` and `generated/` import or require, with the first file of each;
 * `only` keeps the files it accepts (a path relative to the repository).
 */
function requiredPackages(only: (file: string) => boolean = () => true): Map<string, string> {
  const found = new Map<string, string>();
  const builtins = new Set(builtinModules);
  const walk = (dir: string): void => {
    for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
      const full = path.join(dir, e.name);
      if (e.isDirectory()) walk(full);
      else if (e.name.endsWith('.ts') && only(path.relative(ROOT, full))) {
        const text = fs.readFileSync(full, 'utf8');
        for (const m of text.matchAll(/(?:^import\s[^;]*?\bfrom\s+|^export\s[^;]*?\bfrom\s+|\brequire\(\s*|\bimport\(\s*)'((?:@[\w.-]+\/)?[\w][\w.-]*(?:\/[^']*)?)'/gm)) {
          const spec = m[1]!;
          if (spec.startsWith('node:') || builtins.has(spec)) continue;
          const name = spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : spec.split('/')[0]!;
          if (!found.has(name)) found.set(name, path.relative(ROOT, full));
        }
      }
    }
  };
  walk(path.join(ROOT, 'src'));
  walk(path.join(ROOT, 'generated'));
  return found;
}

test('every package the service requires is a production dependency; the runner\'s may be optional ones', () => {
  // An optional peer (typescript: TypeScript strategies load when it is installed) is declared too.
  const optionalPeers = Object.keys(PKG.peerDependenciesMeta ?? {}).filter((n) => PKG.peerDependenciesMeta[n].optional);
  const runnerOptional = Object.keys(PKG.optionalDependencies ?? {});
  const undeclared = [...requiredPackages()]
    .filter(([name, file]) => !(name in PKG.dependencies) && !optionalPeers.includes(name) && !(RUNNER_CODE.test(file) && runnerOptional.includes(name)))
    .map(([name, file]) => `${name} (required by ${file})`);
  expect(undeclared).toEqual([]);
  // And the service's code needs none of the runner's packages.
  const serviceUsesRunnerPackage = [...requiredPackages((file) => !RUNNER_CODE.test(file))].filter(([name]) => runnerOptional.includes(name)).map(([name, file]) => `${name} (${file})`);
  expect(serviceUsesRunnerPackage).toEqual([]);
});

describe("deploy/Dockerfile's install and build steps, run for real", () => {
  const { stages } = parseDockerfile(fs.readFileSync(path.join(ROOT, 'deploy', 'Dockerfile'), 'utf8'));
  const build = stages[0]!;
  const runtime = stages[stages.length - 1]!;
  const workdirOf = (stage: Stage): string => stage.instructions.filter((i) => i.op === 'WORKDIR').map((i) => i.args).pop() ?? '/';
  let base: string;
  let service: Service | undefined;

  beforeAll(() => {
    base = fs.mkdtempSync(path.join(os.tmpdir(), 'rl-docker-'));
  });
  afterAll(async () => {
    await service?.stop();
    fs.rmSync(base, { recursive: true, force: true });
  });

  test('npm ci, compile and prune in a clean copy; the pruned program starts and answers', async () => {
    // Build stage: the image's WORKDIR becomes a temp directory; COPY takes from the repository.
    const buildDir = path.join(base, 'build');
    fs.mkdirSync(buildDir);
    for (const i of build.instructions) {
      if (i.op === 'COPY') {
        const c = parseCopy(i.args);
        for (const s of c.sources) {
          const dest = c.dest.endsWith('/') ? path.join(buildDir, c.dest, path.basename(s)) : path.join(buildDir, c.dest);
          fs.cpSync(path.join(ROOT, s), dest, { recursive: true });
        }
      } else if (i.op === 'RUN') {
        execFileSync('sh', ['-c', i.args], { cwd: buildDir, stdio: 'pipe', env: { PATH: process.env['PATH'], HOME: process.env['HOME'] } });
      }
    }
    expect(fs.existsSync(path.join(buildDir, 'node_modules', 'typescript'))).toBe(false); // pruned
    // The service alone: neither the runner's packages nor its code.
    for (const name of Object.keys(PKG.optionalDependencies)) expect(fs.existsSync(path.join(buildDir, 'node_modules', name))).toBe(false);
    expect(fs.existsSync(path.join(buildDir, 'dist', 'src', 'trading'))).toBe(false);
    expect(fs.existsSync(path.join(buildDir, 'dist', 'src', 'cli', 'runner.js'))).toBe(false);

    // Runtime stage: only what it copies. Its RUN steps create the user and /data (system paths,
    // not needed to start the program); the config comes from the bundled examples, as the
    // Dockerfile's `docker run -e RUNTIME_ROOT=/app/examples/runtime` shows.
    const appDir = path.join(base, 'app');
    fs.mkdirSync(appDir);
    let env: Record<string, string> = {};
    const buildWorkdir = workdirOf(build);
    for (const i of runtime.instructions) {
      if (i.op === 'ENV') env = { ...env, ...parseEnv(i.args) };
      if (i.op !== 'COPY') continue;
      const c = parseCopy(i.args);
      for (const s of c.sources) {
        const from = c.from === undefined ? path.join(ROOT, s) : path.join(buildDir, path.posix.relative(buildWorkdir, s));
        fs.cpSync(from, path.join(appDir, c.dest), { recursive: true });
      }
    }
    const entry = JSON.parse(runtime.instructions.find((i) => i.op === 'ENTRYPOINT')!.args) as string[];
    expect(entry[0]).toBe('node');
    service = await startService(
      {
        ...env,
        PATH: process.env['PATH'],
        RUNTIME_ROOT: path.join(appDir, 'examples', 'runtime'),
        LOG_LEVEL: 'info',
        ...LOOPBACK_LISTENERS,
      },
      30_000,
      path.join(appDir, entry[1]!),
    );
    const res = await httpPost(
      service.http,
      '/json',
      JSON.stringify({ domain: 'example', descriptors: [{ entries: [{ key: 'remote_address', value: '192.0.2.7' }] }] }),
    );
    expect(res.status).toBe(200);
    expect(JSON.parse(res.body).overallCode).toBe('OK');
  }, 300_000);
});
