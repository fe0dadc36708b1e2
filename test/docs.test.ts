/**
 * The documentation tells the truth: every ```sh block of README.md and docs/*.md runs here as a
 * reader would type it, and prints what the page shows.
 *
 * How a ```sh block reads:
 * - Consecutive command lines are one step, run by one `bash` (so `\` continuations and loops
 *   work); a comment line ends the step.
 * - `# → text` lines after a step are lines its output (stdout and stderr, in order) must contain,
 *   in that order, each a whole line (surrounding spaces aside); `…` stands for any text.
 *   `# → exit status N` expects that exit status; otherwise a step must exit 0.
 * - A step whose last line ends with `# runs until Ctrl-C` keeps running: it starts in its own
 *   process group, its `# →` lines are waited for (its "listening" line), and the blocks after
 *   it run while it does. At the end of its section (the next heading) it gets SIGINT, as from
 *   Ctrl-C, and the test waits until every process of the group has gone.
 * - A ```text block or a markdown table right after a ```sh block is the whole output of the
 *   block's last step, line for line (`…` again stands for any text).
 *
 * Every block runs in a scratch directory that links the repository's top-level entries, so files
 * the examples write (candles.json, out/, certs/, …) land there and not in the repository. Ports
 * are the ones the pages show; this file is the only test that uses them, and its sections run
 * one after another. `make` runs with `-o build`: the suite has built dist/ already, and a second
 * compile would rewrite dist/ under the programs other test files are starting.
 *
 * Beside the blocks: the settings table of docs/settings.md is the generated one and
 * `make settings-table` writes it; links between the pages resolve; docs/architecture.md names
 * every folder of src/; docs/migrating.md lists exactly the variables that are this project's.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { SETTINGS_TABLE, renderSettingsMarkdown } from '../src/settings';
import { requireBinary } from './support/redis';
import { inOneWindow } from './support/wait';

const ROOT = path.join(__dirname, '..');
const PAGES = ['README.md', ...fs.readdirSync(path.join(ROOT, 'docs')).filter((f) => f.endsWith('.md')).sort().map((f) => `docs/${f}`)];
const read = (page: string): string => fs.readFileSync(path.join(ROOT, page), 'utf8');

/** The ports the pages' examples listen on (README "Run the tests" names them). */
const DOC_PORTS = [6070, 6071, 6379, 8080, 8081, 8090, 8091, 8099, 8500, 9090, 18000];

const FOREGROUND_TIMEOUT_MS = 90_000;
const READY_TIMEOUT_MS = 90_000;
const STOP_TIMEOUT_MS = 15_000;
const BACKGROUND = /#\s*runs until Ctrl-C\s*$/;

// ---------------------------------------------------------------------------------------------
// Reading the pages

interface Step {
  /** The command text, as shown (several lines for a continuation or a loop). */
  command: string;
  /** `# →` lines. */
  expect: string[];
  /** From `# → exit status N`. */
  exitStatus: number;
  background: boolean;
  /** The whole output, from a ```text block or a table after the sh block (last step only). */
  output?: string[];
}

interface Block {
  page: string;
  line: number;
  steps: Step[];
}

interface Section {
  page: string;
  heading: string;
  blocks: Block[];
}

interface Fence {
  lang: string;
  start: number;
  /** Index of the closing fence line. */
  end: number;
  body: string[];
}

function fences(lines: string[]): Fence[] {
  const out: Fence[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(\S*)\s*$/.exec(lines[i]!);
    if (open === null) continue;
    let j = i + 1;
    while (j < lines.length && lines[j] !== '```') j++;
    if (j === lines.length) throw new Error(`unclosed code fence at line ${i + 1}`);
    out.push({ lang: open[1]!, start: i, end: j, body: lines.slice(i + 1, j) });
    i = j;
  }
  return out;
}

function parseSteps(body: string[], where: string): Step[] {
  const steps: Step[] = [];
  let current: Step | undefined;
  let open = false; // the current step still takes command lines
  for (const line of body) {
    if (line.trim() === '') {
      open = false;
      continue;
    }
    if (line.startsWith('#')) {
      open = false;
      const m = /^# → (.*)$/.exec(line);
      if (m === null) continue; // a comment for the reader
      if (current === undefined) throw new Error(`${where}: "# →" before any command`);
      const status = /^exit status (\d+)$/.exec(m[1]!.trim());
      if (status !== null) current.exitStatus = Number(status[1]);
      else current.expect.push(m[1]!.trim());
      continue;
    }
    if (!open || current === undefined) {
      current = { command: line, expect: [], exitStatus: 0, background: false };
      steps.push(current);
      open = true;
    } else {
      current.command += `\n${line}`;
    }
    current.background = BACKGROUND.test(line);
  }
  for (const s of steps) {
    if (s.background && s.expect.length === 0) throw new Error(`${where}: a step that runs until Ctrl-C must show a line to wait for`);
  }
  return steps;
}

function sections(page: string): Section[] {
  const lines = read(page).split('\n');
  const out: Section[] = [];
  const blocks = fences(lines);
  const headingAt = (i: number): string => {
    for (let j = i; j >= 0; j--) if (/^#{1,6} /.test(lines[j]!) && !blocks.some((f) => f.start < j && j < f.end)) return lines[j]!.replace(/^#+ /, '');
    return '(top)';
  };
  for (const f of blocks) {
    if (f.lang !== 'sh') continue;
    const where = `${page}:${f.start + 1}`;
    const steps = parseSteps(f.body, where);
    if (steps.length === 0) throw new Error(`${where}: a sh block without a command`);
    // The output shown right after the block: a ```text block or a markdown table.
    let k = f.end + 1;
    while (k < lines.length && lines[k]!.trim() === '') k++;
    const last = steps[steps.length - 1]!;
    const next = blocks.find((g) => g.start === k);
    if (next !== undefined && next.lang === 'text') last.output = next.body;
    else if (lines[k]?.startsWith('|')) {
      const table: string[] = [];
      while (k < lines.length && lines[k]!.startsWith('|')) table.push(lines[k++]!);
      last.output = table;
    }
    const heading = headingAt(f.start);
    const section = out.find((s) => s.heading === heading) ?? (out.push({ page, heading, blocks: [] }), out[out.length - 1]!);
    section.blocks.push({ page, line: f.start + 1, steps });
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Matching output

const escape = (s: string): string => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const pattern = (expected: string): RegExp => new RegExp(`^${expected.split('…').map(escape).join('.*')}$`);
const outputLines = (out: string): string[] => out.replace(/\r/g, '').split('\n');

/** How many of `expected` match lines of `lines` in order (each `# →` line a whole, trimmed line). */
function matchedInOrder(lines: readonly string[], expected: readonly string[]): number {
  let n = 0;
  for (const line of lines) {
    if (n === expected.length) break;
    if (pattern(expected[n]!).test(line.trim())) n++;
  }
  return n;
}

function checkOutput(step: Step, out: string, where: string): void {
  const lines = outputLines(out);
  const n = matchedInOrder(lines, step.expect);
  if (n < step.expect.length) {
    throw new Error(`${where}: \`${step.command}\` did not print\n  ${step.expect[n]}\n(after ${n} shown line(s) matched); it printed:\n${out}`);
  }
  if (step.output !== undefined) {
    const got = lines.map((l) => l.trimEnd());
    while (got.length > 0 && got[got.length - 1] === '') got.pop();
    const want = step.output.map((l) => l.trimEnd());
    const bad = want.findIndex((w, i) => got[i] === undefined || !pattern(w).test(got[i]!));
    if (bad >= 0 || got.length !== want.length) {
      const at = bad >= 0 ? bad : Math.min(got.length, want.length);
      throw new Error(`${where}: \`${step.command}\` printed, at line ${at + 1}:\n  ${got[at] ?? '(nothing)'}\nwhere the page shows:\n  ${want[at] ?? '(nothing)'}\nwhole output:\n${out}`);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Running

/** A scratch directory linking the repository's top-level entries, and a `make` that does not compile. */
function workspace(): { dir: string; env: NodeJS.ProcessEnv } {
  const base = fs.mkdtempSync(path.join(os.tmpdir(), 'rl-docs-'));
  const dir = path.join(base, 'repo');
  fs.mkdirSync(dir);
  for (const entry of fs.readdirSync(ROOT)) {
    if (entry === '.git') continue;
    fs.symlinkSync(path.join(ROOT, entry), path.join(dir, entry));
  }
  const make = spawnSync('bash', ['-c', 'command -v make'], { encoding: 'utf8' }).stdout.trim();
  if (make === '') throw new Error('make is required by the documentation examples');
  const bin = path.join(base, 'bin');
  fs.mkdirSync(bin);
  fs.writeFileSync(path.join(bin, 'make'), `#!/bin/sh\nexec ${make} -o build "$@"\n`, { mode: 0o755 });
  // The reader's environment holds none of the service's settings (nor the runner's).
  const env: NodeJS.ProcessEnv = { ...process.env, PATH: `${bin}:${process.env['PATH']}` };
  const settingNames = new Set(SETTINGS_TABLE.flatMap((s) => (s.alias ? [s.name, s.alias] : [s.name])));
  for (const name of Object.keys(env)) {
    if (settingNames.has(name) || /^(DOG_STATSD_MOGRIFIER_|SIM_|RATELIMIT_RUNNER_|OTEL_)/.test(name) || name === 'FXCM_TOKEN') delete env[name];
  }
  // A reader's own state directory: the runner keeps its broker budget there between runs.
  env['XDG_STATE_HOME'] = path.join(base, 'state');
  return { dir, env };
}

interface Running {
  step: Step;
  proc: ChildProcess;
  output: () => string;
  /** Resolves once every process holding the output pipe has gone. */
  closed: Promise<void>;
  isClosed: () => boolean;
}

function start(step: Step, ws: { dir: string; env: NodeJS.ProcessEnv }): Running {
  // Its own process group (detached), stderr into the same pipe as stdout so the order holds.
  const proc = spawn('bash', ['-c', `exec 2>&1\n${step.command}`], { cwd: ws.dir, env: ws.env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let isClosed = false;
  proc.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  proc.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  const closed = new Promise<void>((resolve) => proc.once('close', () => resolve()));
  void closed.then(() => (isClosed = true));
  return { step, proc, output: () => out, closed, isClosed: () => isClosed };
}

function signalGroup(r: Running, signal: NodeJS.Signals): void {
  try {
    process.kill(-r.proc.pid!, signal);
  } catch {
    /* the group has gone */
  }
}

/** Waits for `p` or `ms`; true when `p` settled first. */
async function within(p: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), ms)));
  const done = await Promise.race([p.then(() => true), timeout]);
  clearTimeout(timer);
  return done;
}

/** Ctrl-C: SIGINT to the group, then SIGKILL if it has not gone in time. */
async function stop(r: Running): Promise<void> {
  if (r.isClosed()) return;
  signalGroup(r, 'SIGINT');
  if (await within(r.closed, STOP_TIMEOUT_MS)) return;
  signalGroup(r, 'SIGKILL');
  await r.closed;
}

async function runForeground(step: Step, ws: { dir: string; env: NodeJS.ProcessEnv }, where: string): Promise<void> {
  const r = start(step, ws);
  const exited = new Promise<number | null>((resolve) => r.proc.once('exit', (code) => resolve(code)));
  if (!(await within(r.closed, FOREGROUND_TIMEOUT_MS))) {
    signalGroup(r, 'SIGKILL');
    await r.closed;
    throw new Error(`${where}: \`${step.command}\` did not finish within ${FOREGROUND_TIMEOUT_MS / 1000} s; it printed:\n${r.output()}`);
  }
  const code = await exited;
  if (code !== step.exitStatus) {
    throw new Error(`${where}: \`${step.command}\` exited with ${code}, the page shows ${step.exitStatus}; it printed:\n${r.output()}`);
  }
  checkOutput(step, r.output(), where);
}

/** Starts a program that runs until Ctrl-C and waits for the lines the page shows. */
async function runBackground(step: Step, ws: { dir: string; env: NodeJS.ProcessEnv }, where: string, running: Running[]): Promise<void> {
  const r = start(step, ws);
  running.push(r);
  const ready = new Promise<void>((resolve, reject) => {
    const check = (): void => {
      const complete = outputLines(r.output()).slice(0, -1);
      if (matchedInOrder(complete, step.expect) === step.expect.length) resolve();
    };
    r.proc.stdout!.on('data', check);
    r.proc.stderr!.on('data', check);
    void r.closed.then(() => reject(new Error(`${where}: \`${step.command}\` ended before printing what the page shows; it printed:\n${r.output()}`)));
  });
  if (!(await within(ready, READY_TIMEOUT_MS))) {
    throw new Error(`${where}: \`${step.command}\` did not print what the page shows within ${READY_TIMEOUT_MS / 1000} s; it printed:\n${r.output()}`);
  }
}

/** The examples' fixed one-minute window a time falls in. */
const minuteOf = (ms: number): number => Math.floor(ms / 60_000);

async function runSection(section: Section, ws: { dir: string; env: NodeJS.ProcessEnv }): Promise<void> {
  const running: Running[] = [];
  try {
    for (const block of section.blocks) {
      for (const [i, step] of block.steps.entries()) {
        const where = `${block.page}:${block.line} (step ${i + 1})`;
        if (step.background) await runBackground(step, ws, where, running);
        else await runForeground(step, ws, where);
      }
    }
  } finally {
    // The end of the section: Ctrl-C for every program still running, the last started first.
    for (const r of running.reverse()) await stop(r);
  }
}

// ---------------------------------------------------------------------------------------------
// The tests

const ALL = PAGES.flatMap(sections);

beforeAll(async () => {
  // A port in use would make an example fail for a reason the page does not show.
  const busy: number[] = [];
  for (const port of DOC_PORTS) {
    const free = await new Promise<boolean>((resolve) => {
      const srv = net.createServer();
      srv.once('error', () => resolve(false));
      srv.listen(port, () => srv.close(() => resolve(true)));
    });
    if (!free) busy.push(port);
  }
  if (busy.length > 0) {
    throw new Error(`port(s) ${busy.join(', ')} in use: the documentation's examples run on the ports they show; stop what holds them (a \`make run\`?)`);
  }
});

describe('every sh block of the README and docs/ prints what the page shows', () => {
  it('the pages have examples, each in a ```sh block', () => {
    expect(ALL.length).toBeGreaterThan(10);
    // A shell block under another name (or none) would escape this test.
    const unnamed = PAGES.flatMap((page) =>
      fences(read(page).split('\n'))
        .filter((f) => /^(bash|shell|console|zsh|)$/.test(f.lang))
        .map((f) => `${page}:${f.start + 1}`),
    );
    expect(unnamed).toEqual([]);
  });

  for (const section of ALL) {
    const usesRedis = section.blocks.some((b) => b.steps.some((s) => /\bredis-(server|cli)\b/.test(s.command)));
    const longRunning = section.blocks.some((b) => b.steps.some((s) => s.background));
    test(`${section.page} › ${section.heading}`, async () => {
      if (usesRedis) {
        requireBinary('redis-server');
        requireBinary('redis-cli');
      }
      // The examples against a running service count in one-minute windows: such a section starts
      // early in a minute, and runs again (once, afresh) if it failed with a window edge inside it.
      for (let attempt = 1; ; attempt++) {
        if (longRunning) await inOneWindow(60_000, 20_000);
        const ws = workspace();
        const began = Date.now();
        try {
          await runSection(section, ws);
          return;
        } catch (err) {
          if (!longRunning || attempt > 1 || minuteOf(began) === minuteOf(Date.now())) throw err;
        } finally {
          fs.rmSync(path.dirname(ws.dir), { recursive: true, force: true });
        }
      }
    }, 300_000);
  }
});

describe('the pages', () => {
  it('docs/settings.md holds the generated settings table (run `make settings-table`)', () => {
    const m = /<!-- settings:start -->\n([\s\S]*?)<!-- settings:end -->/.exec(read('docs/settings.md'));
    expect(m).not.toBeNull();
    expect(m![1]!.trimEnd()).toBe(renderSettingsMarkdown().trimEnd());
  });

  it('`make settings-table` rewrites the table of docs/settings.md', () => {
    const base = fs.mkdtempSync(path.join(os.tmpdir(), 'rl-settings-table-'));
    try {
      for (const entry of ['Makefile', 'dist', 'node_modules']) fs.symlinkSync(path.join(ROOT, entry), path.join(base, entry));
      fs.mkdirSync(path.join(base, 'docs'));
      const current = read('docs/settings.md');
      const stale = current.replace(/(<!-- settings:start -->\n)[\s\S]*?(<!-- settings:end -->)/, '$1| stale |\n$2');
      expect(stale).not.toBe(current);
      fs.writeFileSync(path.join(base, 'docs/settings.md'), stale);
      const r = spawnSync('make', ['-o', 'build', 'settings-table'], { cwd: base, encoding: 'utf8' });
      expect(r.status).toBe(0);
      expect(fs.readFileSync(path.join(base, 'docs/settings.md'), 'utf8')).toBe(current);
      expect(fs.existsSync(path.join(base, 'README.md'))).toBe(false);
    } finally {
      fs.rmSync(base, { recursive: true, force: true });
    }
  });

  it('the README is short and links every page of docs/', () => {
    const readme = read('README.md');
    expect(readme.split('\n').length).toBeLessThan(150);
    for (const page of PAGES.filter((p) => p.startsWith('docs/'))) expect(readme).toContain(`](${page})`);
  });

  it('the README names the ports the examples use', () => {
    const m = /run as tests on the ports they show \(([^)]*)\)/.exec(read('README.md').replace(/\n/g, ' '));
    expect(m).not.toBeNull();
    const named = m![1]!.match(/\d+/g)!.map(Number).sort((a, b) => a - b);
    expect(named).toEqual([...DOC_PORTS].sort((a, b) => a - b));
  });

  it('every relative link and anchor between the pages resolves', () => {
    const slug = (heading: string): string =>
      heading
        .toLowerCase()
        .replace(/[^\p{L}\p{N}\s_-]/gu, '')
        .trim()
        .replace(/\s/g, '-');
    const anchors = (file: string): Set<string> => {
      const lines = fs.readFileSync(file, 'utf8').split('\n');
      const inFence = new Set(fences(lines).flatMap((f) => Array.from({ length: f.end - f.start + 1 }, (_, i) => f.start + i)));
      return new Set(lines.filter((l, i) => !inFence.has(i) && /^#{1,6} /.test(l)).map((l) => slug(l.replace(/^#+ /, ''))));
    };
    const broken: string[] = [];
    for (const page of PAGES) {
      const text = read(page);
      for (const m of text.matchAll(/\]\(([^)\s]+)\)/g)) {
        const link = m[1]!;
        if (/^[a-z]+:/.test(link)) continue; // https:, mailto:
        const [file, anchor] = link.split('#') as [string, string | undefined];
        const target = file === '' ? path.join(ROOT, page) : path.resolve(path.dirname(path.join(ROOT, page)), file);
        if (!fs.existsSync(target)) {
          broken.push(`${page}: ${link} (no such file)`);
          continue;
        }
        if (anchor !== undefined && target.endsWith('.md') && !anchors(target).has(anchor)) broken.push(`${page}: ${link} (no such heading)`);
      }
    }
    expect(broken).toEqual([]);
  });

  it('docs/architecture.md names every folder of src/ and its subfolders', () => {
    const doc = read('docs/architecture.md');
    const rows = new Map(
      doc
        .split('\n')
        .map((l) => /^\| `([\w-]+)` \| (.*) \|$/.exec(l))
        .filter((m): m is RegExpExecArray => m !== null)
        .map((m) => [m[1]!, m[2]!]),
    );
    const SRC = path.join(ROOT, 'src');
    const dirs = (d: string): string[] => fs.readdirSync(d, { withFileTypes: true }).filter((e) => e.isDirectory()).map((e) => e.name).sort();
    expect([...rows.keys()].sort()).toEqual(dirs(SRC));
    for (const folder of dirs(SRC)) {
      for (const sub of dirs(path.join(SRC, folder))) expect([folder, rows.get(folder)]).toEqual([folder, expect.stringContaining(`\`${sub}/\``)]);
    }
  });

  it("docs/migrating.md lists exactly the variables that are this project's", () => {
    const doc = read('docs/migrating.md');
    const section = doc.slice(doc.indexOf("### Variables that are this project's"), doc.indexOf('## Config files'));
    const listed = new Set([...section.matchAll(/`([A-Z][A-Z0-9_]+)`/g)].map((m) => m[1]!).filter((n) => n !== 'BACKEND_TYPE'));
    const ours = SETTINGS_TABLE.filter((s) => s.extension).map((s) => s.name);
    expect([...listed].sort()).toEqual([...ours].sort());
  });
});
