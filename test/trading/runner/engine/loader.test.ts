/**
 * The strategy loader's TypeScript path (the built program: under Jest, ts-jest loads .ts files
 * instead): a file is transpiled once and then only when it changes, and every load still runs
 * the module afresh, so no state leaks from one sweep run into the next.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const LOADER = path.join(__dirname, '../../../../dist/src/trading/runner/engine/loader.js');

const strategy = (name: string): string => `let runs = 0;\nexport default { symbols: ['EUR/USD'], name: '${name}', bump(): number { return ++runs; } };\n`;

test('a .ts strategy is transpiled once, again when edited, and each load is a fresh module', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rl-loader-'));
  try {
    const file = path.join(dir, 'strategy.ts');
    fs.writeFileSync(file, strategy('first'));
    // A whole-second time, so that the child can set exactly the same one again.
    fs.utimesSync(file, 1_700_000_000, 1_700_000_000);
    // 'first' and 'other' have the same length: an edit that keeps size and time is not seen
    // (the transpiled text is reused); a new modification time is.
    const child = `
      const fs = require('node:fs');
      const { loadStrategy } = require(${JSON.stringify(LOADER)});
      const file = ${JSON.stringify(file)};
      const a = loadStrategy(file);
      const b = loadStrategy(file);
      const seen = { fresh: a !== b, runs: [a.bump(), a.bump(), b.bump()] };
      fs.writeFileSync(file, ${JSON.stringify(strategy('other'))});
      fs.utimesSync(file, 1700000000, 1700000000);
      seen.sameStamp = loadStrategy(file).name;
      fs.utimesSync(file, 1700000000, 1700000005);
      seen.newStamp = loadStrategy(file).name;
      console.log(JSON.stringify(seen));
    `;
    // Not a Jest worker: the loader transpiles .ts itself only outside Jest.
    const { JEST_WORKER_ID: _worker, ...env } = process.env;
    const r = spawnSync(process.execPath, ['-e', child], { encoding: 'utf8', cwd: path.join(__dirname, '../../../..'), env });
    expect(r.stderr).toBe('');
    expect(JSON.parse(r.stdout)).toEqual({ fresh: true, runs: [1, 2, 1], sameStamp: 'first', newStamp: 'other' });
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
