/**
 * The rules of the house about dependencies (docs/architecture.md): each folder of src/ imports only the
 * folders listed for it here, so arrows point one way, down the pipeline.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';

const SRC = path.join(__dirname, '..', 'src');

/** What each concern may import, besides itself (and generated/ and packages). */
const ALLOWED: Readonly<Record<string, readonly string[]>> = {
  /** The domain vocabulary: RLS types, rules, the counter-store port, algorithm maths. */
  core: [],
  /** Platform helpers: clock, backoff, directory watcher, PRNG, argv, time text (node:* only). */
  platform: [],
  settings: ['core', 'platform'],
  telemetry: ['settings', 'core', 'platform'],
  stats: ['telemetry', 'settings', 'core', 'platform'],
  config: ['stats', 'core', 'platform'],
  backends: ['stats', 'telemetry', 'settings', 'core', 'platform'],
  limiter: ['backends', 'config', 'stats', 'telemetry', 'settings', 'core', 'platform'],
  providers: ['config', 'stats', 'telemetry', 'settings', 'core', 'platform'],
  /** RLQS: dividing the limits among the Envoys that report a bucket. */
  quota: ['config', 'stats', 'telemetry', 'settings', 'core', 'platform'],
  server: ['quota', 'limiter', 'config', 'stats', 'telemetry', 'settings', 'core', 'platform'],
  client: ['core', 'platform'],
  trading: ['limiter', 'client', 'telemetry', 'settings', 'core', 'platform'],
  'xds-server': ['providers', 'config', 'stats', 'telemetry', 'settings', 'core', 'platform'],
  app: ['server', 'quota', 'providers', 'limiter', 'backends', 'config', 'stats', 'telemetry', 'settings', 'core', 'platform'],
  cli: ['app', 'trading', 'xds-server', 'client', 'server', 'quota', 'providers', 'limiter', 'config', 'stats', 'telemetry', 'settings', 'core', 'platform'],
};

/**
 * Within trading: the strategy runner and the simulated broker share the broker client's
 * vocabulary (fxcm) and one execution model (execution), never each other's code.
 */
const TRADING_ALLOWED: Readonly<Record<string, readonly string[]>> = {
  execution: [],
  fxcm: [],
  simulator: ['execution', 'fxcm'],
  runner: ['execution', 'fxcm'],
};

/**
 * Within server: the protocol machines (HTTP/2 in h2/, HTTP/1.1 in http1/) know nothing of gRPC,
 * the services or each other; they share only the process budgets, the held request bytes and
 * the HTTP text helpers.
 */
const PROTOCOL_ALLOWED: Readonly<Record<string, readonly string[]>> = {
  h2: ['admission', 'byte-budget', 'held-body'],
  http1: ['admission', 'byte-budget', 'held-body', 'http-util'],
};

/**
 * Within the runner: one room per concern, arrows one way (cli on top; no room imports cli). The
 * runner's top holds only the strategy API every room speaks (strategy.ts, errors.ts, and
 * results.ts, what a run produces) and index.ts, the public surface that re-exports the rooms:
 * the API imports no room, and no room imports index.ts.
 */
const RUNNER_ALLOWED: Readonly<Record<string, readonly string[]>> = {
  /** Run reports: metrics, charts, the test against luck. */
  report: [],
  /** The local candle store, its check and the download bar. */
  candles: [],
  /** The broker-call budget: every broker call through the rate limiter, its state and limits. */
  broker: ['report'],
  /** What locks new entries, the same in every mode: the safety limits and the protections. */
  protections: [],
  /** A paper or live run's journal on disk and its one-writer lock. */
  journal: [],
  /** Making a paper or live run's view agree with the broker: its broker state, snapshots, claims and watches, lost answers, a restart's orphans. */
  reconcile: ['journal'],
  /** Running a strategy: backtest, paper/live/replay, and what they share. */
  engine: ['reconcile', 'journal', 'protections', 'broker', 'report'],
  /** Many backtests of one strategy: sweeps over parameters and windows, the lookahead and warm-up checks, their worker threads. */
  sweep: ['engine', 'protections', 'report'],
  /** Webhook notifications of a paper or live run (the engine's events): queued, bounded, never in the way of trading. */
  notify: ['engine', 'protections'],
  /** Watching and steering a paper or live run from outside: its control API and dashboard. */
  control: ['notify', 'engine', 'journal', 'protections', 'broker', 'report'],
  /** The `ratelimit-runner` commands and their options. */
  cli: ['control', 'notify', 'sweep', 'engine', 'journal', 'protections', 'broker', 'report', 'candles'],
};
const RUNNER_API = ['errors.ts', 'results.ts', 'strategy.ts'];

/** Within trading, the limiter is reached only through its public surface. */
const TRADING_LIMITER_API = new Set(['limiter', 'limiter/index']);

function sourceFiles(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) return sourceFiles(p);
    return e.name.endsWith('.ts') ? [p] : [];
  });
}

/** Every relative module specifier of a file (imports, re-exports, dynamic imports). */
function specifiers(text: string): string[] {
  const out: string[] = [];
  const re = /(?:from|import)\s*\(?\s*'(\.{1,2}\/[^']*)'/g;
  for (let m = re.exec(text); m !== null; m = re.exec(text)) out.push(m[1]!);
  return out;
}

interface Edge {
  readonly file: string;
  readonly from: string;
  readonly to: string;
  readonly target: string;
}

function edges(): Edge[] {
  const all: Edge[] = [];
  for (const file of sourceFiles(SRC)) {
    const from = path.relative(SRC, file).split(path.sep)[0]!;
    for (const spec of specifiers(fs.readFileSync(file, 'utf8'))) {
      const target = path.relative(SRC, path.resolve(path.dirname(file), spec)).split(path.sep).join('/');
      if (target.startsWith('..')) continue; // generated/ or package.json
      const to = target.split('/')[0]!;
      if (to !== from) all.push({ file: path.relative(SRC, file), from, to, target });
    }
  }
  return all;
}

describe('dependency direction', () => {
  const found = edges();

  it('scans real imports (the scanner itself works)', () => {
    expect(found.some((e) => e.from === 'limiter' && e.to === 'core')).toBe(true);
    expect(found.some((e) => e.from === 'cli' && e.to === 'app')).toBe(true);
  });

  it('every folder of src/ has its rule', () => {
    const folders = fs
      .readdirSync(SRC, { withFileTypes: true })
      .filter((e) => e.isDirectory())
      .map((e) => e.name)
      .sort();
    expect(folders).toEqual(Object.keys(ALLOWED).sort());
  });

  it('no folder imports a concern above it', () => {
    const wrong = found.filter((e) => !(ALLOWED[e.from] ?? []).includes(e.to)).map((e) => `${e.file} -> ${e.target}`);
    expect(wrong).toEqual([]);
  });

  it('the core vocabulary and the platform helpers import nothing of ours', () => {
    expect(found.filter((e) => e.from === 'core' || e.from === 'platform')).toEqual([]);
  });

  it('within trading, the runner and the simulator depend only on fxcm and the execution model', () => {
    const TRADING = path.join(SRC, 'trading');
    const folders = fs.readdirSync(TRADING, { withFileTypes: true }).filter((e) => e.isDirectory()).map((e) => e.name).sort();
    expect(folders).toEqual(Object.keys(TRADING_ALLOWED).sort());
    const wrong: string[] = [];
    for (const file of sourceFiles(TRADING)) {
      const from = path.relative(TRADING, file).split(path.sep)[0]!;
      for (const spec of specifiers(fs.readFileSync(file, 'utf8'))) {
        const target = path.relative(TRADING, path.resolve(path.dirname(file), spec)).split(path.sep).join('/');
        const to = target.split('/')[0]!;
        if (target.startsWith('..') || to === from) continue;
        if (!(TRADING_ALLOWED[from] ?? []).includes(to)) wrong.push(`trading/${path.relative(TRADING, file)} -> ${target}`);
      }
    }
    expect(wrong).toEqual([]);
  });

  it('the runner is rooms: only index.ts and the strategy API sit at its top', () => {
    const RUNNER = path.join(SRC, 'trading', 'runner');
    const entries = fs.readdirSync(RUNNER, { withFileTypes: true });
    expect(entries.filter((e) => e.isDirectory()).map((e) => e.name).sort()).toEqual(Object.keys(RUNNER_ALLOWED).sort());
    expect(entries.filter((e) => e.isFile() && e.name.endsWith('.ts')).map((e) => e.name).sort()).toEqual(['index.ts', ...RUNNER_API].sort());
    // the table lists each room after those it may import, so the rooms cannot import in a circle
    const order = Object.keys(RUNNER_ALLOWED);
    const upwards = order.flatMap((room, i) => RUNNER_ALLOWED[room]!.filter((to) => !order.slice(0, i).includes(to)).map((to) => `${room} -> ${to}`));
    expect(upwards).toEqual([]);
  });

  it('within the runner, a room imports only the rooms below it, the API imports no room, and nothing imports index.ts', () => {
    const RUNNER = path.join(SRC, 'trading', 'runner');
    const wrong: string[] = [];
    let crossing = 0;
    for (const file of sourceFiles(RUNNER)) {
      const rel = path.relative(RUNNER, file).split(path.sep).join('/');
      const from = rel.includes('/') ? rel.split('/')[0]! : null; // null: a file at the top
      for (const spec of specifiers(fs.readFileSync(file, 'utf8'))) {
        const target = path.relative(RUNNER, path.resolve(path.dirname(file), spec)).split(path.sep).join('/');
        if (target.startsWith('..')) continue; // fxcm, execution, the service: the rules above
        const to = target.includes('/') ? target.split('/')[0]! : null;
        if (to === from) continue;
        crossing++;
        const ok =
          to === null
            ? target !== 'index' // the strategy API, which every room may use
            : from === null
              ? rel === 'index.ts' // only the public surface re-exports the rooms
              : RUNNER_ALLOWED[from]!.includes(to);
        if (!ok) wrong.push(`trading/runner/${rel} -> ${target}`);
      }
    }
    expect(crossing).toBeGreaterThan(50); // the scan sees the real imports
    expect(wrong).toEqual([]);
  });

  it('within server, the HTTP/2 and HTTP/1.1 machines use only the shared budgets and helpers', () => {
    const SERVER = path.join(SRC, 'server');
    const wrong: string[] = [];
    let scanned = 0;
    for (const [folder, allowed] of Object.entries(PROTOCOL_ALLOWED)) {
      for (const file of sourceFiles(path.join(SERVER, folder))) {
        for (const spec of specifiers(fs.readFileSync(file, 'utf8'))) {
          scanned++;
          const target = path.relative(SERVER, path.resolve(path.dirname(file), spec)).split(path.sep).join('/');
          // Within the machine, or platform's primitives (every folder may use them).
          if (target.startsWith(`${folder}/`) || target.startsWith('../platform/')) continue;
          if (!allowed.includes(target)) wrong.push(`server/${path.relative(SERVER, file)} -> ${target}`);
        }
      }
    }
    expect(scanned).toBeGreaterThan(10);
    expect(wrong).toEqual([]);
  });

  it('trading reaches the limiter only through its public API', () => {
    const wrong = found
      .filter((e) => e.from === 'trading' && e.to === 'limiter' && !TRADING_LIMITER_API.has(e.target))
      .map((e) => `${e.file} -> ${e.target}`);
    expect(wrong).toEqual([]);
  });
});

/**
 * The process belongs to the programs: signals, exit codes and node:cluster only in the entry
 * points (src/cli/) and the runner's command programs (trading/runner/cli/); the service
 * builds, runs and stops without touching `process` that way.
 */
const PROCESS_OWNERS = [/^cli\//, /^trading\/runner\/cli\/[a-z-]+\.ts$/];

/** A file's code without its comments (a rule about code must not trip on prose). */
function codeOf(text: string): string {
  return text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/^\s*\/\/.*$/gm, '');
}

describe('process concerns', () => {
  const PROCESS_USE = /process\.(exit|on|once|off)\(|from 'node:cluster'|require\('node:cluster'\)/;

  it('scans real code (the rule itself works)', () => {
    expect(PROCESS_USE.test(codeOf(fs.readFileSync(path.join(SRC, 'cli', 'service-process.ts'), 'utf8')))).toBe(true);
    expect(PROCESS_USE.test(codeOf('/** process.exit(1) in prose */\n// process.on(x)\nconst a = 1;'))).toBe(false);
  });

  it('signals, exits and node:cluster appear only in the entry points', () => {
    const wrong = sourceFiles(SRC)
      .map((file) => path.relative(SRC, file).split(path.sep).join('/'))
      .filter((rel) => !PROCESS_OWNERS.some((owner) => owner.test(rel)))
      .filter((rel) => PROCESS_USE.test(codeOf(fs.readFileSync(path.join(SRC, rel), 'utf8'))));
    expect(wrong).toEqual([]);
  });
});

describe('one name, one meaning', () => {
  it('no two files of src/ export a type, interface, class or enum of the same name', () => {
    const where = new Map<string, string[]>();
    for (const file of sourceFiles(SRC)) {
      const rel = path.relative(SRC, file).split(path.sep).join('/');
      for (const m of codeOf(fs.readFileSync(file, 'utf8')).matchAll(/^export (?:declare )?(?:abstract )?(?:interface|type|class|enum) ([A-Za-z0-9_]+)/gm)) {
        where.set(m[1]!, [...(where.get(m[1]!) ?? []), rel]);
      }
    }
    expect(where.size).toBeGreaterThan(100); // the scan sees the real exports
    const twice = [...where].filter(([, files]) => files.length > 1).map(([name, files]) => `${name}: ${files.join(', ')}`);
    expect(twice).toEqual([]);
  });
});
