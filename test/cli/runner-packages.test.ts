/**
 * The runner's packages are optional dependencies (the service's image leaves them out): where
 * they are missing, the runner says so and how to get them, instead of a module-not-found trace.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const BUILT = path.join(__dirname, '..', '..', 'dist', 'src', 'cli', 'runner-packages.js');

test('with ws and socket.io missing, the check exits 1 naming both and `npm ci`', () => {
  // The check resolves from its own file, so a copy outside the repository finds no packages.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'runner-packages-'));
  try {
    const copy = path.join(dir, 'runner-packages.js');
    fs.copyFileSync(BUILT, copy);
    const r = spawnSync(process.execPath, [copy], { encoding: 'utf8' });
    expect(r.status).toBe(1);
    expect(r.stderr).toBe(
      'ratelimit-runner: ws and socket.io are not installed: the runner\'s packages are optional dependencies, left out by `npm ci --omit=optional` (the service\'s image); install them with `npm ci`\n',
    );
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('where they are installed, the runner starts as before', () => {
  const r = spawnSync(process.execPath, [path.join(path.dirname(BUILT), 'runner.js'), '--help'], { encoding: 'utf8' });
  expect(r.status).toBe(0);
  expect(r.stdout).toContain('Usage: ratelimit-runner <command> [options]');
});
