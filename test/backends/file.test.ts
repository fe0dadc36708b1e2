/**
 * The file counter store: counts outlive the process, several processes share them exactly, and a
 * process killed at any moment (holding the lock, or mid-write) leaves a state the next one uses.
 * The child processes run the compiled store (`make build` first).
 */
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { FileStore } from '../../src/backends/file';
import type { CounterOp } from '../../src/core/store';
import { Unit } from '../../src/core/rls';
import { StatsStore } from '../../src/stats/store';
import { rule } from '../limiter/helpers';
import { waitFor } from '../support/wait';

const DIST_STORE = path.join(__dirname, '../../dist/src/backends/file.js');
const stats = new StatsStore();
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rl-file-store-'));
let n = 0;
const fresh = () => path.join(dir, `s${++n}`, 'budget.json');
/** A token bucket of 5 at once, one more an hour: with the time held still, exactly 5 pass. */
const bucket = rule(stats, 'd.tb', 1, Unit.HOUR, { algorithm: 'token_bucket', burst: 5 });
const NOW = 1_800_000_000_000;
const take = (key = 'k'): CounterOp => ({ key, hits: 1, windowSeconds: 3600, rule: bucket });
const admitted = (counts: number[]) => counts[0]! <= 5;

/** A child process incrementing `key` `times` times on `file` (token bucket above, time held still); prints how many passed. */
const CHILD = `
const { FileStore } = require(process.argv[1]);
const [file, times, now] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4])];
const rule = { algorithm: 'token_bucket', burst: 5, limit: { requestsPerUnit: 1, unit: ${Unit.HOUR} } };
(async () => {
  const s = new FileStore({ path: file });
  let passed = 0;
  for (let i = 0; i < times; i++) if ((await s.increment([{ key: 'k', hits: 1, windowSeconds: 3600, rule }], now))[0] <= 5) passed++;
  process.stdout.write(String(passed));
})();
`;

/** A child that counts a fixed window up for ever, printing each count: killed with SIGKILL. */
const COUNTER = `
const { FileStore } = require(process.argv[1]);
const rule = { limit: { requestsPerUnit: 1e9, unit: ${Unit.HOUR} } };
const s = new FileStore({ path: process.argv[2] });
(async () => {
  for (;;) process.stdout.write((await s.increment([{ key: 'c', hits: 1, windowSeconds: 3600, rule }], ${NOW}))[0] + '\\n');
})();
`;

describe('file store', () => {
  test('a new store on the same file (a restart) continues the counts', async () => {
    const file = fresh();
    const first = new FileStore({ path: file });
    let passed = 0;
    for (let i = 0; i < 4; i++) if (admitted(await first.increment([take()], NOW))) passed++;
    await first.close();
    const second = new FileStore({ path: file });
    for (let i = 0; i < 4; i++) if (admitted(await second.increment([take()], NOW))) passed++;
    expect(passed).toBe(5);
    // an hour later (one share of the bucket) one more passes
    expect(admitted(await second.increment([take()], NOW + 3_600_000))).toBe(true);
  });

  test('four processes at once on one file admit exactly the bucket, not a bucket each', async () => {
    const file = fresh();
    const children = Array.from({ length: 4 }, () =>
      new Promise<number>((resolve, reject) => {
        const p = spawn(process.execPath, ['-e', CHILD, DIST_STORE, file, '10', String(NOW)], { stdio: ['ignore', 'pipe', 'pipe'] });
        let out = '';
        let err = '';
        p.stdout.on('data', (d: Buffer) => (out += d.toString()));
        p.stderr.on('data', (d: Buffer) => (err += d.toString()));
        p.once('exit', (code) => (code === 0 ? resolve(Number(out)) : reject(new Error(`child exited ${code}: ${err}`))));
      }),
    );
    const passed = await Promise.all(children);
    expect(passed.reduce((a, b) => a + b, 0)).toBe(5);
    expect(fs.existsSync(`${file}.lock`)).toBe(false);
  });

  test('kill -9 at any moment: the next process finds a whole state and goes on counting', async () => {
    const file = fresh();
    for (let round = 0; round < 4; round++) {
      const p = spawn(process.execPath, ['-e', COUNTER, DIST_STORE, file], { stdio: ['ignore', 'pipe', 'inherit'] });
      let lines: string[] = [];
      p.stdout.on('data', (d: Buffer) => (lines = lines.concat(d.toString().split('\n').filter(Boolean))));
      const exited = new Promise((r) => p.once('exit', r));
      await waitFor(() => lines.length >= 30, 'the counting child to count 30 times');
      p.kill('SIGKILL');
      await exited;
      const printed = Number(lines[lines.length - 1]);
      // the child may have written one more count than it printed before it died
      const next = (await new FileStore({ path: file }).increment([{ key: 'c', hits: 1, windowSeconds: 3600, rule: rule(stats, 'd.c', 1e9, Unit.HOUR) }], NOW))[0]!;
      expect(next === printed + 1 || next === printed + 2).toBe(true);
      expect(JSON.parse(fs.readFileSync(file, 'utf8')).counters).toBeDefined();
    }
  });

  test('a lock left by a dead process, or an empty one, is taken over', async () => {
    const file = fresh();
    fs.mkdirSync(path.dirname(file), { recursive: true });
    const dead = spawnSync(process.execPath, ['-e', '']).pid!;
    fs.writeFileSync(`${file}.lock`, `${dead}\n`);
    expect(admitted(await new FileStore({ path: file }).increment([take()], NOW))).toBe(true);
    fs.writeFileSync(`${file}.lock`, '');
    expect(admitted(await new FileStore({ path: file }).increment([take()], NOW))).toBe(true);
    expect(fs.existsSync(`${file}.lock`)).toBe(false);
  });

  test('a corrupt state file is set aside with a warning, and counting starts again', async () => {
    const file = fresh();
    fs.mkdirSync(path.dirname(file), { recursive: true });
    fs.writeFileSync(file, '{"version":1,"counters":{"k":[12');
    const warnings: string[] = [];
    const s = new FileStore({ path: file, onWarning: (m) => warnings.push(m) });
    expect(await s.increment([take()], NOW)).toEqual([1]);
    expect(warnings).toEqual([`${file} was not a budget state file (moved to ${file}.corrupt); counting from empty`]);
    expect(fs.readFileSync(`${file}.corrupt`, 'utf8')).toBe('{"version":1,"counters":{"k":[12');
  });

  test('the file holds only live counters, at most maxKeys', async () => {
    const file = fresh();
    const s = new FileStore({ path: file, maxKeys: 50 });
    const fixed = rule(stats, 'd.f', 10, Unit.SECOND);
    for (let sec = 0; sec < 5; sec++) {
      for (let i = 0; i < 20; i++) await s.increment([{ key: `k${sec}_${i}`, hits: 1, windowSeconds: 1, rule: fixed }], NOW + sec * 1000);
    }
    expect(Object.keys(JSON.parse(fs.readFileSync(file, 'utf8')).counters)).toHaveLength(20);
    for (let i = 0; i < 80; i++) await s.increment([{ key: `m${i}`, hits: 1, windowSeconds: 3600, rule: fixed }], NOW + 5000);
    expect(Object.keys(JSON.parse(fs.readFileSync(file, 'utf8')).counters)).toHaveLength(50);
  });
});
