import * as fs from 'node:fs';
import * as net from 'node:net';
import * as path from 'node:path';
import type { ConfigFile } from '../../src/config/types';
import type { ListedFile } from '../../src/providers/config-files';
import { CONFIG_LOAD_ERROR, CONFIG_LOAD_SUCCESS, ConfigStore } from '../../src/providers/config-store';
import { FileProvider, type FileProviderOptions } from '../../src/providers/file-provider';
import { StatsStore } from '../../src/stats/store';
import { CapturingLogger, type FakeConfig, fakeLoader, makeTmpDir, swapSymlink, writeTree } from './helpers';
import { quietFor, waitFor } from '../support/wait';

const DEBOUNCE_MS = 30;
/** Long enough for any stray second reload of a burst to have happened. */
const SETTLE_MS = 250;

type Flags = { readonly loadedAt: number };

let tmp: string;
let watchersAtStart = 0;
const providers: Array<FileProvider<Flags>> = [];

beforeEach(() => {
  tmp = makeTmpDir();
  watchersAtStart = countResources('FSEventWrap');
});

// Every test checks that stop() releases every fs.watch handle it opened (closing is asynchronous).
afterEach(async () => {
  for (const p of providers.splice(0)) p.stop();
  fs.rmSync(tmp, { recursive: true, force: true });
  await waitFor(() => countResources('FSEventWrap') <= watchersAtStart, 'every watcher closed', 1000);
});

function setup(opts: Partial<FileProviderOptions<Flags>> & { root: string }) {
  const stats = new StatsStore();
  const logger = new CapturingLogger();
  const store = new ConfigStore<Flags>({ stats, logger, readFlags: () => ({ loadedAt: Date.now() }) });
  const loaderCalls: Array<{ files: ListedFile[]; merge: boolean }> = [];
  const provider = new FileProvider<Flags>({
    subdirectory: 'ratelimit',
    appDirectory: 'config',
    ignoreDotFiles: false,
    watchRoot: true,
    mergeDomainConfig: () => false,
    loader: (files, merge) => {
      loaderCalls.push({ files, merge });
      return fakeLoader(files, merge);
    },
    store,
    logger,
    debounceMs: DEBOUNCE_MS,
    retryMs: 50,
    ...opts,
  });
  providers.push(provider);
  const files = (): readonly ConfigFile[] => (store.current()?.config as FakeConfig | undefined)?.files ?? [];
  return {
    stats,
    logger,
    store,
    provider,
    loaderCalls,
    successes: () => stats.counter(CONFIG_LOAD_SUCCESS).value,
    errors: () => stats.counter(CONFIG_LOAD_ERROR).value,
    names: () => files().map((f) => f.name),
    content: (name: string) => files().find((f) => f.name === name)?.content,
  };
}

function countResources(kind: string): number {
  return process.getActiveResourcesInfo().filter((r) => r === kind).length;
}

describe('FileProvider, watch-root mode', () => {
  /** runtime/{v1,v2}/ratelimit/..., runtime/current -> v1 */
  function layout() {
    const runtime = path.join(tmp, 'runtime');
    writeTree(path.join(runtime, 'v1'), {
      'ratelimit/config/basic.yaml': 'v1-basic',
      'ratelimit/config/sub/nested.yaml': 'v1-nested',
      'ratelimit/config.top.yaml': 'v1-top',
      'ratelimit/reload.yaml': 'outside',
      'ratelimit/other/x.yaml': 'outside',
      'ratelimit/configuration/y.yaml': 'outside',
    });
    writeTree(path.join(runtime, 'v2'), {
      'ratelimit/config/basic.yaml': 'v2-basic',
      'ratelimit/config/reload.yaml': 'v2-reload',
    });
    fs.symlinkSync('v1', path.join(runtime, 'current'));
    return { runtime, current: path.join(runtime, 'current') };
  }

  test('initial load: every file under root/subdirectory named with dots, only <appdir>.*', () => {
    const { current } = layout();
    const t = setup({ root: current });
    t.provider.start();
    // start() is synchronous: the first event has happened when it returns.
    expect(t.store.hasFirstEvent).toBe(true);
    expect(t.names()).toEqual(['config.basic.yaml', 'config.sub.nested.yaml', 'config.top.yaml']);
    expect(t.content('config.basic.yaml')).toBe('v1-basic');
    expect(t.successes()).toBe(1);
    expect(t.errors()).toBe(0);
    expect(t.logger.messages('info')).toContain('Successfully loaded new configuration');
  });

  test('a symlink swap of the root reloads through the new target', async () => {
    const { current } = layout();
    const t = setup({ root: current });
    t.provider.start();
    const firstFlags = t.store.current()?.flags;

    swapSymlink(current, 'v2');
    await waitFor(() => t.content('config.basic.yaml') === 'v2-basic', 'the v2 config');
    expect(t.names()).toEqual(['config.basic.yaml', 'config.reload.yaml']);
    expect(t.successes()).toBe(2);
    // Flags are re-read with each load and swapped with the config.
    expect(t.store.current()?.flags).not.toBe(firstFlags);

    swapSymlink(current, 'v1');
    await waitFor(() => t.content('config.basic.yaml') === 'v1-basic', 'the v1 config again');
    expect(t.successes()).toBe(3);
  });

  test('edits inside the current target do not reload (only the root swap does)', async () => {
    const { runtime, current } = layout();
    const t = setup({ root: current });
    t.provider.start();
    fs.writeFileSync(path.join(runtime, 'v1/ratelimit/config/basic.yaml'), 'v1-edited');
    fs.writeFileSync(path.join(runtime, 'v1/ratelimit/config/new.yaml'), 'v1-new');
    await quietFor(SETTLE_MS);
    expect(t.successes()).toBe(1);
    expect(t.content('config.basic.yaml')).toBe('v1-basic');

    // Re-pointing the link at the same target is a swap too: the edits are picked up.
    swapSymlink(current, 'v1');
    await waitFor(() => t.content('config.basic.yaml') === 'v1-edited', 'the edited config');
    expect(t.names()).toContain('config.new.yaml');
  });

  test('a missing root loads an empty config, and creating the link later loads it', async () => {
    const { runtime, current } = layout();
    fs.unlinkSync(current);
    const t = setup({ root: current });
    t.provider.start();
    expect(t.successes()).toBe(1);
    expect(t.store.current()?.config.domainCount).toBe(0);
    expect(t.logger.messages('warn').some((m) => m.includes(current) && m.includes('does not exist'))).toBe(true);

    fs.symlinkSync('v2', path.join(runtime, 'current'));
    await waitFor(() => t.content('config.basic.yaml') === 'v2-basic', 'the config after the link is created');
  });

  test('the parent of the root removed and recreated: the watch is re-armed', async () => {
    const { runtime, current } = layout();
    const t = setup({ root: current });
    t.provider.start();

    const loaded = t.names();
    fs.rmSync(runtime, { recursive: true, force: true });
    // A directory that disappears keeps the last loaded config, and says so as a load error.
    await waitFor(() => t.errors() >= 1, 'the load error after removal');
    expect(t.successes()).toBe(1);
    expect(t.names()).toEqual(loaded);
    expect(t.logger.messages('error').some((m) => m.includes(current) && m.includes('keeping the last loaded configuration'))).toBe(true);

    writeTree(path.join(runtime, 'v3'), { 'ratelimit/config/basic.yaml': 'v3-basic' });
    fs.symlinkSync('v3', current);
    await waitFor(() => t.content('config.basic.yaml') === 'v3-basic', 'the v3 config after recreation');

    // And the new parent directory is watched: a further swap reloads.
    writeTree(path.join(runtime, 'v4'), { 'ratelimit/config/basic.yaml': 'v4-basic' });
    swapSymlink(current, 'v4');
    await waitFor(() => t.content('config.basic.yaml') === 'v4-basic', 'the v4 config');
  });

  test('an empty RUNTIME_SUBDIRECTORY is the nil loader: empty config, warning, no watchers', () => {
    const { current } = layout();
    const before = countResources('FSEventWrap');
    const t = setup({ root: current, subdirectory: '' });
    t.provider.start();
    expect(t.successes()).toBe(1);
    expect(t.store.current()?.config.domainCount).toBe(0);
    expect(t.loaderCalls).toEqual([{ files: [], merge: false }]);
    expect(t.logger.messages('warn').some((m) => m.includes('RUNTIME_SUBDIRECTORY'))).toBe(true);
    expect(countResources('FSEventWrap')).toBe(before);
  });

  test('a bad file fails the load; a swap to a good target loads again', async () => {
    const { runtime, current } = layout();
    writeTree(path.join(runtime, 'bad'), { 'ratelimit/config/basic.yaml': 'bad' });
    const t = setup({ root: current });
    t.provider.start();
    const good = t.store.current();

    swapSymlink(current, 'bad');
    await waitFor(() => t.errors() === 1, 'config_load_error');
    expect(t.store.current()).toBe(good);
    expect(t.logger.messages('error')).toContain(
      'Error loading new configuration: config.basic.yaml: config file cannot have empty domain',
    );

    swapSymlink(current, 'v2');
    await waitFor(() => t.content('config.basic.yaml') === 'v2-basic', 'the v2 config');
    expect(t.successes()).toBe(2);
  });
});

describe('FileProvider, directory mode', () => {
  function layout(files: Record<string, string> = { 'basic.yaml': 'b1', 'sub/x.yaml': 'x1' }) {
    const root = path.join(tmp, 'root');
    const appDir = path.join(root, 'ratelimit', 'config');
    fs.mkdirSync(appDir, { recursive: true });
    writeTree(appDir, files);
    return { root, appDir };
  }

  function start(opts: Partial<FileProviderOptions<Flags>> & { root: string }) {
    const t = setup({ watchRoot: false, ...opts });
    t.provider.start();
    return t;
  }

  test('initial load: names relative to the app directory, sorted', () => {
    const { root } = layout({ 'b.yaml': 'b', 'a.yaml': 'a', 'sub/x.yaml': 'x', 'notes.txt': 'any extension' });
    const t = start({ root });
    expect(t.names()).toEqual(['a.yaml', 'b.yaml', 'notes.txt', 'sub.x.yaml']);
    expect(t.successes()).toBe(1);
  });

  test('an empty RUNTIME_SUBDIRECTORY reads <root>/<appdir> (no nil loader in this mode)', () => {
    const root = path.join(tmp, 'root');
    writeTree(path.join(root, 'config'), { 'basic.yaml': 'b' });
    const t = start({ root, subdirectory: '' });
    expect(t.names()).toEqual(['basic.yaml']);
  });

  test('write, create, chmod and remove each reload', async () => {
    const { root, appDir } = layout();
    const t = start({ root });
    const basic = path.join(appDir, 'basic.yaml');

    fs.writeFileSync(basic, 'b2');
    await waitFor(() => t.content('basic.yaml') === 'b2', 'reload after write');
    let n = t.successes();

    fs.writeFileSync(path.join(appDir, 'new.yaml'), 'n');
    await waitFor(() => t.names().includes('new.yaml'), 'reload after create');
    expect(t.successes()).toBeGreaterThan(n);
    n = t.successes();

    fs.chmodSync(basic, 0o600);
    await waitFor(() => t.successes() > n, 'reload after chmod');
    n = t.successes();

    fs.unlinkSync(path.join(appDir, 'new.yaml'));
    await waitFor(() => !t.names().includes('new.yaml'), 'reload after remove');
    expect(t.successes()).toBeGreaterThan(n);
    n = t.successes();

    // A change in a loaded subdirectory reloads too.
    fs.writeFileSync(path.join(appDir, 'sub/x.yaml'), 'x2');
    await waitFor(() => t.content('sub.x.yaml') === 'x2', 'reload after a write in a subdirectory');

    // A subdirectory created later is watched after the load that finds it.
    fs.mkdirSync(path.join(appDir, 'later'));
    await waitFor(() => t.successes() > n + 1, 'reload after mkdir');
    fs.writeFileSync(path.join(appDir, 'later/y.yaml'), 'y');
    await waitFor(() => t.content('later.y.yaml') === 'y', 'reload after a write in the new subdirectory');
  });

  test('a bad file keeps the previous snapshot and counts config_load_error', async () => {
    const { root, appDir } = layout();
    const t = start({ root });
    const good = t.store.current();
    fs.writeFileSync(path.join(appDir, 'basic.yaml'), 'bad');
    await waitFor(() => t.errors() === 1, 'config_load_error');
    expect(t.store.current()).toBe(good);
    expect(t.successes()).toBe(1);
    expect(t.logger.messages('error')).toEqual([
      'Error loading new configuration: basic.yaml: config file cannot have empty domain',
    ]);

    fs.writeFileSync(path.join(appDir, 'basic.yaml'), 'fixed');
    await waitFor(() => t.content('basic.yaml') === 'fixed', 'the fixed config');
    expect(t.errors()).toBe(1);
  });

  test('CONFIG_MAX_BYTES and CONFIG_MAX_RESOURCES (maxBytes, maxFiles): a load past either fails as the files are listed, nothing read', async () => {
    const { root, appDir } = layout({ 'a.yaml': 'a'.repeat(10), 'b.yaml': 'b'.repeat(10) });
    const t = start({ root, maxBytes: 25, maxFiles: 2 });
    expect(t.names()).toEqual(['a.yaml', 'b.yaml']);
    fs.writeFileSync(path.join(appDir, 'c.yaml'), 'c');
    await waitFor(() => t.errors() === 1, 'the refused third file');
    expect(t.logger.messages('error')).toEqual([
      'Error loading new configuration: c.yaml: the configuration has more than 2 files, the limit set by CONFIG_MAX_RESOURCES; they were not loaded',
    ]);
    fs.rmSync(path.join(appDir, 'c.yaml'));
    await waitFor(() => t.successes() === 2, 'the two files again');
    fs.writeFileSync(path.join(appDir, 'b.yaml'), 'b'.repeat(16));
    await waitFor(() => t.errors() === 2, 'the refused bigger file');
    expect(t.logger.messages('error')[1]).toBe(
      'Error loading new configuration: b.yaml: the configuration files hold more than the 25 bytes set by CONFIG_MAX_BYTES; they were not loaded',
    );
    // Neither refused load reached the loader (which reads the files).
    expect(t.loaderCalls).toHaveLength(2);
    expect(t.names()).toEqual(['a.yaml', 'b.yaml']);
  });

  test('a first load that fails leaves no config but resolves waitForFirst', async () => {
    const { root } = layout({ 'basic.yaml': 'bad' });
    const t = setup({ root, watchRoot: false });
    const first = t.store.waitForFirst();
    t.provider.start();
    await expect(first).resolves.toBeUndefined();
    expect(t.store.current()).toBeUndefined();
    expect(t.errors()).toBe(1);
  });

  test('dot files are loaded unless ignoreDotFiles', () => {
    const files = { 'a.yaml': 'a', '.hidden.yaml': 'h', '.dotdir/y.yaml': 'y' };
    const { root } = layout(files);
    const loaded = start({ root });
    expect(loaded.names()).toEqual(['.dotdir.y.yaml', '.hidden.yaml', 'a.yaml']);
    const ignored = start({ root, ignoreDotFiles: true });
    expect(ignored.names()).toEqual(['a.yaml']);
  });

  test('dot files in watch-root mode follow the same rule', () => {
    const runtime = path.join(tmp, 'runtime');
    writeTree(path.join(runtime, 'v1'), { 'ratelimit/config/a.yaml': 'a', 'ratelimit/config/.h.yaml': 'h' });
    fs.symlinkSync('v1', path.join(runtime, 'current'));
    const loaded = setup({ root: path.join(runtime, 'current') });
    loaded.provider.start();
    expect(loaded.names()).toEqual(['config..h.yaml', 'config.a.yaml']);
    const ignored = setup({ root: path.join(runtime, 'current'), ignoreDotFiles: true });
    ignored.provider.start();
    expect(ignored.names()).toEqual(['config.a.yaml']);
  });

  test('Kubernetes ConfigMap layout: each file once; a ..data swap reloads once with the new content', async () => {
    const { root, appDir } = layout({});
    writeTree(path.join(appDir, '..2026_01_01_00_00_00.1'), { 'a.yaml': 'a1', 'b.yaml': 'b1' });
    fs.symlinkSync('..2026_01_01_00_00_00.1', path.join(appDir, '..data'));
    fs.symlinkSync('..data/a.yaml', path.join(appDir, 'a.yaml'));
    fs.symlinkSync('..data/b.yaml', path.join(appDir, 'b.yaml'));
    const t = start({ root, debounceMs: 100 });
    expect(t.names()).toEqual(['a.yaml', 'b.yaml']);
    expect(t.content('a.yaml')).toBe('a1');

    // What kubelet's AtomicWriter does.
    writeTree(path.join(appDir, '..2026_01_01_00_01_00.2'), { 'a.yaml': 'a2', 'b.yaml': 'b2' });
    fs.symlinkSync('..2026_01_01_00_01_00.2', path.join(appDir, '..data_tmp'));
    fs.renameSync(path.join(appDir, '..data_tmp'), path.join(appDir, '..data'));
    fs.rmSync(path.join(appDir, '..2026_01_01_00_00_00.1'), { recursive: true });

    await waitFor(() => t.content('a.yaml') === 'a2', 'the swapped ConfigMap content');
    await quietFor(SETTLE_MS);
    expect(t.successes()).toBe(2);
    expect(t.errors()).toBe(0);
    expect(t.names()).toEqual(['a.yaml', 'b.yaml']);
    expect(t.content('b.yaml')).toBe('b2');
  });

  test('a burst of events is coalesced into one reload', async () => {
    const { root, appDir } = layout({});
    const t = start({ root, debounceMs: 100 });
    for (let i = 0; i < 20; i++) fs.writeFileSync(path.join(appDir, `f${String(i).padStart(2, '0')}.yaml`), `v${i}`);
    await waitFor(() => t.names().length === 20, 'all 20 files');
    await quietFor(SETTLE_MS);
    expect(t.successes()).toBe(2);
  });

  test('MERGE_DOMAIN_CONFIG is read at each load', async () => {
    const { root, appDir } = layout();
    let merge = false;
    const t = start({ root, mergeDomainConfig: () => merge });
    expect(t.loaderCalls.at(-1)?.merge).toBe(false);
    merge = true;
    fs.writeFileSync(path.join(appDir, 'basic.yaml'), 'b2');
    await waitFor(() => t.content('basic.yaml') === 'b2', 'the reload');
    expect(t.loaderCalls.at(-1)?.merge).toBe(true);
    expect((t.store.current()?.config as FakeConfig).merge).toBe(true);
  });

  test('a missing app directory loads an empty config; creating it later loads it', async () => {
    const root = path.join(tmp, 'root');
    fs.mkdirSync(root);
    const t = start({ root });
    expect(t.successes()).toBe(1);
    expect(t.store.current()?.config.domainCount).toBe(0);
    expect(t.logger.messages('warn').some((m) => m.includes('does not exist'))).toBe(true);

    writeTree(path.join(root, 'ratelimit', 'config'), { 'basic.yaml': 'b' });
    await waitFor(() => t.content('basic.yaml') === 'b', 'the config after the directory is created');
  });

  test('the app directory removed and recreated: watchers re-armed', async () => {
    const { root, appDir } = layout();
    const t = start({ root });
    const loaded = t.names();
    fs.rmSync(appDir, { recursive: true });
    await waitFor(() => t.errors() >= 1, 'the load error after removal');
    expect(t.names()).toEqual(loaded);
    expect(t.successes()).toBe(1);
    expect(t.logger.messages('error')).toContain(
      `Error loading new configuration: directory ${appDir} does not exist; keeping the last loaded configuration`,
    );

    writeTree(appDir, { 'basic.yaml': 'recreated' });
    await waitFor(() => t.content('basic.yaml') === 'recreated', 'the recreated config');
    // The new directory is watched.
    fs.writeFileSync(path.join(appDir, 'basic.yaml'), 'edited');
    await waitFor(() => t.content('basic.yaml') === 'edited', 'the edit in the recreated directory');
  });

  test('a root symlink swap reloads in this mode too', async () => {
    writeTree(path.join(tmp, 'v1'), { 'ratelimit/config/basic.yaml': 'v1' });
    writeTree(path.join(tmp, 'v2'), { 'ratelimit/config/basic.yaml': 'v2' });
    const current = path.join(tmp, 'current');
    fs.symlinkSync('v1', current);
    const t = start({ root: current });
    expect(t.content('basic.yaml')).toBe('v1');
    swapSymlink(current, 'v2');
    await waitFor(() => t.content('basic.yaml') === 'v2', 'the v2 config');
    // And the new target's directory is the one watched now.
    fs.writeFileSync(path.join(tmp, 'v2/ratelimit/config/basic.yaml'), 'v2-edited');
    await waitFor(() => t.content('basic.yaml') === 'v2-edited', 'the edit in v2');
  });

  test('a file that cannot be read fails the load with <name>: error loading config file', async () => {
    const { root, appDir } = layout();
    const sock = path.join(appDir, 'zz.sock');
    const server = net.createServer();
    await new Promise<void>((resolve) => server.listen(sock, resolve));
    try {
      const t = start({ root });
      expect(t.store.current()).toBeUndefined();
      expect(t.errors()).toBe(1);
      expect(t.logger.messages('error')).toEqual([
        `Error loading new configuration: zz.sock: error loading config file: read ${sock}: not a regular file`,
      ]);
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });

  test('dangling symlinks are skipped and symlinks to directories are not followed, with warnings', () => {
    const { root, appDir } = layout({ 'a.yaml': 'a', 'elsewhere/x.yaml': 'x' });
    fs.symlinkSync('missing.yaml', path.join(appDir, 'dangling.yaml'));
    fs.symlinkSync('elsewhere', path.join(appDir, 'linkdir'));
    const t = start({ root });
    expect(t.names()).toEqual(['a.yaml', 'elsewhere.x.yaml']);
    const warns = t.logger.messages('warn');
    expect(warns.some((m) => m.includes('dangling.yaml'))).toBe(true);
    expect(warns.some((m) => m.includes('linkdir'))).toBe(true);
  });

  test('stop() closes every watcher and cancels a pending reload', async () => {
    const { root, appDir } = layout();
    const watchersBefore = countResources('FSEventWrap');
    const t = start({ root, debounceMs: 200 });
    expect(countResources('FSEventWrap')).toBeGreaterThan(watchersBefore);
    // The event arrives and arms the debounce timer; stop() before it fires cancels the reload.
    fs.writeFileSync(path.join(appDir, 'basic.yaml'), 'b2');
    await waitFor(() => t.provider.reloadPending, 'the event, its reload due');
    t.provider.stop();
    expect(t.provider.reloadPending).toBe(false);
    await waitFor(() => countResources('FSEventWrap') === watchersBefore, 'watchers closed');
    fs.writeFileSync(path.join(appDir, 'basic.yaml'), 'b3');
    // Node runs timers of equal duration in the order they were set: this pause, begun after
    // stop(), ends after the debounce timer would have fired.
    await quietFor(200);
    expect(t.successes()).toBe(1);
    expect(t.content('basic.yaml')).toBe('b1');
    expect(() => t.provider.start()).toThrow();
  });

  test('stop() also cancels the retry poll for a missing directory', async () => {
    const root = path.join(tmp, 'root');
    fs.mkdirSync(root);
    const t = start({ root, retryMs: 50 });
    t.provider.stop();
    writeTree(path.join(root, 'ratelimit', 'config'), { 'basic.yaml': 'b' });
    await quietFor(200);
    expect(t.successes()).toBe(1);
    expect(t.names()).toEqual([]);
  });
});
