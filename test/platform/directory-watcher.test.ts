import * as fs from 'node:fs';
import * as path from 'node:path';
import { DirectoryWatcher, type DirectoryWatcherOptions } from '../../src/platform/directory-watcher';
import { quietFor, waitFor } from '../support/wait';
import { CapturingLogger, makeTmpDir, swapSymlink, writeTree } from '../providers/helpers';

const DEBOUNCE_MS = 30;

let tmp: string;
let handlesAtStart = 0;
const watchers: DirectoryWatcher[] = [];

function fsWatchHandles(): number {
  return process.getActiveResourcesInfo().filter((r) => r === 'FSEventWrap').length;
}

beforeEach(() => {
  tmp = makeTmpDir();
  handlesAtStart = fsWatchHandles();
});

// Every test checks that close() releases every fs.watch handle (closing is asynchronous).
afterEach(async () => {
  for (const w of watchers.splice(0)) w.close();
  fs.rmSync(tmp, { recursive: true, force: true });
  await waitFor(() => fsWatchHandles() <= handlesAtStart, 'every fs.watch handle closed', 1000);
});

function setup(opts: Partial<DirectoryWatcherOptions> = {}) {
  const logger = new CapturingLogger();
  let changes = 0;
  const watcher = new DirectoryWatcher({
    onChange: () => {
      changes++;
    },
    logger,
    debounceMs: DEBOUNCE_MS,
    retryMs: 50,
    ...opts,
  });
  watchers.push(watcher);
  return { watcher, logger, changes: () => changes };
}

/**
 * Resolves once every event `dir` has had so far went through the debounce of the watchers under
 * test: a second watcher on `dir`, with twice their debounce, is sent one more event (`.fence`), which
 * the watchers under test get in the same order after the earlier ones; its onChange comes last.
 */
async function fence(dir: string): Promise<void> {
  let fired = false;
  const f = new DirectoryWatcher({ onChange: () => (fired = true), logger: new CapturingLogger(), debounceMs: 2 * DEBOUNCE_MS });
  watchers.push(f);
  f.watch(dir);
  fs.writeFileSync(path.join(dir, '.fence'), String(Date.now()));
  await waitFor(() => fired, 'the fence event');
  f.close();
}

function mkdir(name: string): string {
  const dir = path.join(tmp, name);
  fs.mkdirSync(dir);
  return dir;
}

test('a burst of events is one onChange, after the last event', async () => {
  const dir = mkdir('d');
  let writes = 0;
  const writesSeen: number[] = [];
  const t = setup({ debounceMs: 150, onChange: () => writesSeen.push(writes) });
  t.watcher.watch(dir);
  // 40 writes 10 ms apart: one burst that lasts longer than the debounce, never quiet for as long.
  await new Promise<void>((resolve) => {
    const writer = setInterval(() => {
      fs.writeFileSync(path.join(dir, `f${writes}.yaml`), 'v');
      if (++writes === 40) {
        clearInterval(writer);
        resolve();
      }
    }, 10);
  });
  await waitFor(() => writesSeen.length >= 1, 'the onChange of the burst');
  expect(writesSeen).toEqual([40]);
  // One more event, ordered after the whole burst: a burst that was split would show here as a third.
  fs.writeFileSync(path.join(dir, 'marker.yaml'), 'm');
  await waitFor(() => writesSeen.length >= 2, 'the onChange of the marker');
  expect(writesSeen).toEqual([40, 40]);
});

test('events that never stop still call onChange within 10 × debounce', async () => {
  const dir = mkdir('d');
  const t = setup({ debounceMs: 100 });
  t.watcher.watch(dir);
  // A write every 10 ms, far inside the debounce: a plain trailing debounce would wait for the end.
  let writes = 0;
  const writer = setInterval(() => fs.writeFileSync(path.join(dir, 'busy.yaml'), String(writes++)), 10);
  try {
    await waitFor(() => t.changes() > 0, 'an onChange while the writes go on', 5000);
  } finally {
    clearInterval(writer);
  }
});

test('an event the filter rejects calls no onChange; the one it accepts does (a symlink swap seen from the parent)', async () => {
  const parent = mkdir('runtime');
  mkdir('runtime/v1');
  mkdir('runtime/v2');
  fs.symlinkSync('v1', path.join(parent, 'current'));
  const t = setup();
  t.watcher.watch(parent, (f) => f === null || f === 'current');

  fs.writeFileSync(path.join(parent, 'unrelated.txt'), 'x');
  await fence(parent);
  expect(t.changes()).toBe(0);

  swapSymlink(path.join(parent, 'current'), 'v2');
  await waitFor(() => t.changes() === 1, 'the onChange of the swap');
});

test('a directory replaced by another one is watched again (and reported, changes may have been missed)', async () => {
  const dir = mkdir('d');
  const t = setup();
  t.watcher.watch(dir);
  writeTree(path.join(tmp, 'd.new'), { 'a.yaml': 'a' });
  fs.rmSync(dir, { recursive: true });
  fs.renameSync(path.join(tmp, 'd.new'), dir);
  await waitFor(() => t.changes() >= 1, 'the onChange of the replacement');
  const before = t.changes();
  fs.writeFileSync(path.join(dir, 'b.yaml'), 'b');
  await waitFor(() => t.changes() > before, 'an onChange from the new directory');
});

test('a directory that does not exist is polled; once created it is watched and reported', async () => {
  const dir = path.join(tmp, 'later');
  const t = setup();
  t.watcher.watch(dir);
  expect(fsWatchHandles()).toBe(handlesAtStart);
  fs.mkdirSync(dir);
  await waitFor(() => t.changes() === 1, 'the onChange of the created directory');
  fs.writeFileSync(path.join(dir, 'a.yaml'), 'a');
  await waitFor(() => t.changes() === 2, 'an onChange from the created directory');
  expect(t.logger.lines).toEqual([]);
});

test('a removed directory is polled until it comes back', async () => {
  const dir = mkdir('d');
  const t = setup();
  t.watcher.watch(dir);
  fs.rmSync(dir, { recursive: true });
  await waitFor(() => t.changes() === 1, 'the onChange of the removal');
  fs.mkdirSync(dir);
  await waitFor(() => t.changes() === 2, 'the onChange of the recreated directory');
  fs.writeFileSync(path.join(dir, 'a.yaml'), 'a');
  await waitFor(() => t.changes() === 3, 'an onChange from the recreated directory');
});

test('unwatchExcept stops watching the other directories', async () => {
  const kept = mkdir('kept');
  const dropped = mkdir('dropped');
  const t = setup();
  t.watcher.watch(kept);
  t.watcher.watch(dropped);
  expect(fsWatchHandles()).toBe(handlesAtStart + 2);
  t.watcher.unwatchExcept(new Set([kept]));
  await waitFor(() => fsWatchHandles() === handlesAtStart + 1, 'the dropped watch closed');
  fs.writeFileSync(path.join(dropped, 'a.yaml'), 'a');
  await fence(dropped);
  expect(t.changes()).toBe(0);
  fs.writeFileSync(path.join(kept, 'a.yaml'), 'a');
  await waitFor(() => t.changes() === 1, 'the onChange from the kept directory');
});

test('close() cancels a pending onChange and closes every watch', async () => {
  const dir = mkdir('d');
  const t = setup({ debounceMs: 200 });
  t.watcher.watch(dir);
  fs.writeFileSync(path.join(dir, 'a.yaml'), 'a');
  await waitFor(() => t.watcher.changePending, 'the event, its onChange due');
  t.watcher.close();
  expect(t.watcher.changePending).toBe(false);
  await waitFor(() => fsWatchHandles() === handlesAtStart, 'the watch closed');
  t.watcher.watch(dir); // no-op once closed
  expect(fsWatchHandles()).toBe(handlesAtStart);
  // Node runs timers of equal duration in the order they were set: this one ends after the
  // debounce timer would have fired.
  await quietFor(200);
  expect(t.changes()).toBe(0);
});
