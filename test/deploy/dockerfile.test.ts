/**
 * Static checks of deploy/Dockerfile (Docker is not available to build it here): multi-stage,
 * production-only dependencies, non-root user, health check, entry point, and every path it copies
 * exists in the repository (or is produced by the build stage) and is let through by
 * deploy/Dockerfile.dockerignore.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as vm from 'node:vm';
import { loadSettings } from '../../src/settings';
import { type Instruction, type Stage, parseCopy, parseDockerfile, parseEnv } from './dockerfile';
import { ROOT, isKnownSetting } from './helpers';

const DOCKERFILE = path.join(ROOT, 'deploy', 'Dockerfile');
const DOCKERIGNORE = path.join(ROOT, 'deploy', 'Dockerfile.dockerignore');

const TEXT = fs.readFileSync(DOCKERFILE, 'utf8');
const { stages: STAGES } = parseDockerfile(TEXT);
const FINAL = STAGES[STAGES.length - 1]!;
const ops = (stage: Stage, op: string): Instruction[] => stage.instructions.filter((i) => i.op === op);
const normalize = (p: string): string => path.posix.normalize(p).replace(/^\.\//, '').replace(/\/$/, '');

describe('deploy/Dockerfile', () => {
  test('is multi-stage on node:26 bookworm-slim (the current LTS line)', () => {
    expect(STAGES.length).toBeGreaterThanOrEqual(2);
    for (const s of STAGES) expect(s.from).toBe('node:26-bookworm-slim');
    expect(STAGES[0]!.name).toBeDefined();
  });

  test('the build stage installs with the lockfile, compiles, and keeps only production dependencies', () => {
    const build = STAGES[0]!;
    const runs = ops(build, 'RUN').map((r) => r.args).join('\n');
    expect(runs).toMatch(/\bnpm ci\b/);
    expect(runs).toMatch(/\btsc -p tsconfig\.json\b/);
    expect(runs).toMatch(/npm prune --omit=dev|npm ci [^\n]*--omit=dev|--production/);
    // The runtime stage installs nothing itself: it copies the pruned node_modules.
    expect(ops(FINAL, 'RUN').map((r) => r.args).join('\n')).not.toMatch(/\bnpm (ci|install)\b/);
    expect(ops(FINAL, 'COPY').map((c) => parseCopy(c.args)).find((c) => c.sources.some((s) => s.endsWith('node_modules')))?.from).toBe(build.name);
  });

  test('every path it copies exists in the repository or is produced by the build stage', () => {
    const tsconfig = JSON.parse(fs.readFileSync(path.join(ROOT, 'tsconfig.json'), 'utf8'));
    for (const stage of STAGES) {
      const workdir = ops(stage, 'WORKDIR').map((w) => w.args).pop() ?? '/';
      for (const c of ops(stage, 'COPY').map((i) => parseCopy(i.args))) {
        if (c.from !== undefined) {
          const src = STAGES.find((s) => s.name === c.from);
          expect({ from: c.from, stage: Boolean(src) }).toEqual({ from: c.from, stage: true });
          const srcWorkdir = ops(src!, 'WORKDIR').map((w) => w.args).pop() ?? '/';
          const produced = new Set<string>();
          for (const i of src!.instructions) {
            if (i.op === 'COPY') {
              const cc = parseCopy(i.args);
              if (cc.sources.length === 1 && !cc.dest.endsWith('/')) produced.add(normalize(cc.dest));
              else for (const s of cc.sources) produced.add(normalize(path.posix.join(cc.dest, path.posix.basename(s))));
            }
            if (i.op === 'RUN' && /\bnpm ci\b/.test(i.args)) produced.add('node_modules');
            if (i.op === 'RUN' && /\btsc -p tsconfig\.json\b/.test(i.args)) produced.add(normalize(tsconfig.compilerOptions.outDir));
          }
          for (const s of c.sources) {
            const relative = normalize(path.posix.relative(srcWorkdir, s));
            expect({ copy: s, produced: produced.has(relative) }).toEqual({ copy: s, produced: true });
          }
        } else {
          for (const s of c.sources) expect({ copy: s, exists: fs.existsSync(path.join(ROOT, s)) }).toEqual({ copy: s, exists: true });
        }
      }
      expect(workdir).toMatch(/^\//);
    }
  });

  test('the build stage copies everything tsconfig.json compiles', () => {
    const tsconfig = JSON.parse(fs.readFileSync(path.join(ROOT, 'tsconfig.json'), 'utf8'));
    const copied = new Set(ops(STAGES[0]!, 'COPY').flatMap((c) => parseCopy(c.args).sources.map(normalize)));
    for (const inc of tsconfig.include as string[]) expect(copied).toContain(inc.split('/')[0]);
    for (const f of ['package.json', 'package-lock.json', 'tsconfig.json']) expect(copied).toContain(f);
  });

  test('Dockerfile.dockerignore lets every copied path through and keeps the rest out', () => {
    const lines = fs
      .readFileSync(DOCKERIGNORE, 'utf8')
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l !== '' && !l.startsWith('#'));
    expect(lines[0]).toBe('*');
    const allowed = new Set(lines.filter((l) => l.startsWith('!')).map((l) => normalize(l.slice(1))));
    for (const stage of STAGES) {
      for (const c of ops(stage, 'COPY').map((i) => parseCopy(i.args))) {
        if (c.from === undefined) for (const s of c.sources) expect(allowed).toContain(normalize(s).split('/')[0]);
      }
    }
    for (const never of ['node_modules', 'dist', '.git', 'envoy', 'test']) expect(allowed).not.toContain(never);
  });

  test('runs as a fixed non-root user', () => {
    const users = ops(FINAL, 'USER').map((u) => u.args);
    expect(users.length).toBeGreaterThan(0);
    const user = users[users.length - 1]!;
    // Numeric, so Kubernetes can enforce runAsNonRoot.
    expect(user).toMatch(/^\d+(:\d+)?$/);
    expect(Number(user.split(':')[0])).toBeGreaterThan(0);
  });

  test('exposes the service ports', () => {
    const ports = ops(FINAL, 'EXPOSE').flatMap((e) => e.args.split(/\s+/).map((p) => Number(p.split('/')[0])));
    expect(ports).toEqual(expect.arrayContaining([8080, 8081, 6070]));
  });

  test('HEALTHCHECK calls /healthcheck on the HTTP port with node, and the script compiles', () => {
    const hc = ops(FINAL, 'HEALTHCHECK');
    expect(hc).toHaveLength(1);
    const m = /\bCMD\s+(\[[\s\S]*\])\s*$/.exec(hc[0]!.args);
    expect(m).not.toBeNull();
    const argv = JSON.parse(m![1]!) as string[];
    expect(argv[0]).toBe('node');
    expect(argv[1]).toBe('-e');
    const script = argv[2]!;
    expect(script).toContain('/healthcheck');
    expect(script).toMatch(/8080/);
    expect(script).toContain('127.0.0.1');
    expect(() => new vm.Script(script)).not.toThrow();
  });

  test('the entry point is the ratelimit program of package.json', () => {
    const ep = ops(FINAL, 'ENTRYPOINT');
    expect(ep).toHaveLength(1);
    const argv = JSON.parse(ep[0]!.args) as string[];
    const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8'));
    expect(argv).toEqual(['node', pkg.bin.ratelimit]);
    // dist/src/cli/ratelimit.js is compiled from src/cli/ratelimit.ts.
    expect(fs.existsSync(path.join(ROOT, pkg.bin.ratelimit.replace(/^dist\//, '').replace(/\.js$/, '.ts')))).toBe(true);
    expect(ops(FINAL, 'WORKDIR').map((w) => w.args).pop()).toBeDefined();
  });

  test('ENV defaults are settings the service reads, with values it accepts', () => {
    const env = Object.assign({}, ...ops(FINAL, 'ENV').map((e) => parseEnv(e.args))) as Record<string, string>;
    // Node's and glibc's own variables aside (MALLOC_*: glibc's allocator tuning).
    const service = Object.fromEntries(Object.entries(env).filter(([k]) => !k.startsWith('NODE_') && !k.startsWith('MALLOC_')));
    expect(Object.keys(service).filter((k) => !isKnownSetting(k))).toEqual([]);
    expect(service.USE_STATSD).toBe('false');
    const s = loadSettings(service);
    // The config directory the defaults point at exists in the image.
    const dir = path.posix.join(s.runtime.root, s.runtime.subdirectory, s.runtime.appDirectory);
    expect(ops(FINAL, 'RUN').map((r) => r.args).join('\n')).toContain(`mkdir -p ${dir}`);
  });
});
