/**
 * The README tells the truth: its settings table is generated from src/settings/table.ts, and its
 * examples, run exactly as written (the built programs in dist/), print what it shows.
 */
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { renderSettingsMarkdown } from '../src/settings';
import { httpPost } from './e2e/harness';

const ROOT = path.join(__dirname, '..');
const README = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');

/** The first ```sh block after the heading `## <title>`. */
function shellBlock(title: string): string[] {
  const section = README.indexOf(`\n## ${title}\n`);
  expect(section).toBeGreaterThanOrEqual(0);
  const m = /```sh\n([\s\S]*?)```/.exec(README.slice(section));
  return m![1]!.trimEnd().split('\n');
}

/** Shell lines up to the first comment, continuation lines joined. */
function command(lines: readonly string[]): string {
  const end = lines.findIndex((l) => l.startsWith('#'));
  return lines.slice(0, end < 0 ? lines.length : end).join('\n');
}

test('README settings table matches the settings table (run `make settings-table`)', () => {
  const m = /<!-- settings:start -->\n([\s\S]*?)<!-- settings:end -->/.exec(README);
  expect(m).not.toBeNull();
  expect(m![1]!.trimEnd()).toBe(renderSettingsMarkdown().trimEnd());
});

test('the explain example prints exactly the output shown (the window start in cache keys aside)', () => {
  const lines = shellBlock('Explaining a decision');
  const shown = lines.filter((l) => l.startsWith('# ')).map((l) => l.slice(2));
  expect(shown.length).toBeGreaterThan(10);
  const r = spawnSync('bash', ['-c', command(lines)], { cwd: ROOT, encoding: 'utf8' });
  expect(r.status).toBe(0);
  const windowStart = (text: string): string => text.replace(/^( {2}cache key: \S+_)\d+$/gm, '$1<window start>');
  expect(windowStart(r.stdout.trimEnd())).toBe(windowStart(shown.join('\n')));
});

test('the xDS example works as written: the server publishes the example directory, the service loads it and answers', async () => {
  const lines = shellBlock('Configuration from an xDS management server');
  const at = (marker: string): number => lines.findIndex((l) => l.startsWith(marker));
  const serverCommand = command(lines.slice(at('# terminal 1') + 1));
  const serviceCommand = command(lines.slice(at('# terminal 2') + 1));
  const curl = command(lines.slice(at('# terminal 3') + 1));
  const shownAnswer = lines[at('# terminal 3') + 2]!.replace(/^# → /, '');

  const started: Array<ReturnType<typeof spawn>> = [];
  const start = (cmd: string, ready: RegExp): Promise<string> =>
    new Promise((resolve, reject) => {
      // Its own process group, so that stopping it stops the program bash started.
      const proc = spawn('bash', ['-c', cmd], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
      started.push(proc);
      let out = '';
      const onData = (d: Buffer): void => {
        out += d.toString();
        if (ready.test(out)) resolve(out);
      };
      proc.stdout!.on('data', onData);
      proc.stderr!.on('data', onData);
      proc.once('exit', (code) => reject(new Error(`${cmd} exited with ${code}:\n${out}`)));
    });
  try {
    const serverOut = await start(serverCommand, /listening on 127\.0\.0\.1:18000/);
    expect(serverOut).toContain(lines[at('# terminal 1') + 2]!.replace(/^# → /, ''));
    const serviceOut = await start(serviceCommand, /listening: gRPC/);
    expect(serviceOut).toContain('xDS config version 1 accepted');
    expect(serviceOut).toContain('listening: gRPC 0.0.0.0:8091, HTTP 0.0.0.0:8090, debug 0.0.0.0:6071');
    const body = /-d '([^']+)'/.exec(curl)![1]!;
    expect(curl).toContain('localhost:8090/json');
    const res = await httpPost('127.0.0.1:8090', '/json', body);
    expect(res.status).toBe(200);
    // The README shows the answer up to the time-dependent fields.
    expect(res.body.startsWith(shownAnswer.replace(/,…}]}$/, ''))).toBe(true);
  } finally {
    for (const p of started) if (p.exitCode === null && p.signalCode === null) process.kill(-p.pid!, 'SIGTERM');
    await Promise.all(started.map((p) => (p.exitCode !== null || p.signalCode !== null ? undefined : new Promise((r) => p.once('exit', r)))));
  }
}, 30_000);
