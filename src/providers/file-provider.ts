/**
 * The file provider (upstream `provider/file_provider.go` on top of goruntime): reads the YAML
 * config files from disk, hands them to the config loader, and reports every load to the
 * ConfigStore; watches the file system and reloads everything on change.
 *
 * Two modes, as upstream:
 *
 * - Watch-root mode (`watchRoot: true`, RUNTIME_WATCH_ROOT default): every file under
 *   `<root>/<subdirectory>` (recursive, any extension) is read; its config name is the path
 *   relative to that directory with `/` replaced by `.` and the extension kept
 *   (`config/basic.yaml` → `config.basic.yaml`); only names starting with `<appDirectory>.` are
 *   loaded. `root` is resolved (realpath) at each load, so a load reads through the current target
 *   of a `current -> vN` symlink. A reload happens only when the root path itself changes in its
 *   parent directory (the symlink swap: `ln -s vN tmp && mv -T tmp current`); edits inside the
 *   target do not reload, as upstream.
 *
 * - Directory mode (`watchRoot: false`): every file under `<root>/<subdirectory>/<appDirectory>`
 *   (recursive) is read; the name is the path relative to that directory with `/` replaced by `.`
 *   (`basic.yaml`, `sub/x.yaml` → `sub.x.yaml`: goruntime builds keys the same way in both modes,
 *   and names prefix every error message). Any event in that directory (write, create, chmod,
 *   remove, rename: node reports them all as `change`/`rename`) reloads. Unlike upstream, the
 *   subdirectories that are loaded are watched too, and so is the root path in its parent (a root
 *   symlink swap also reloads in this mode).
 *
 * Common to both modes:
 * - Dot files and dot directories are loaded unless `ignoreDotFiles` (RUNTIME_IGNOREDOTFILES).
 * - Directories whose name starts with `..` are never descended: they are the Kubernetes ConfigMap
 *   internals (`..data -> ..2026_01_01_…`, a directory of the real files) whose files are already
 *   visible through the top-level `a.yaml -> ..data/a.yaml` links; upstream loads them a second
 *   time (issue #367: duplicate domains). A symlink to a file is read through; a symlink to a
 *   directory is not followed (upstream's filepath.Walk does not follow it either) and a dangling
 *   symlink is skipped, both with a warning.
 * - Files are sorted by name before loading (upstream's order is random).
 * - A file that exists but cannot be read (permission, not a regular file such as a FIFO or socket)
 *   fails the load with `<name>: error loading config file: <reason>` (a ConfigError; upstream only
 *   logs a warning and drops the file, which silently drops its domain). The previous snapshot
 *   stays.
 * - A missing directory at start-up loads as zero files (an empty config) with a warning, as
 *   upstream. A directory that disappears later (or a root link swapped to a target without it)
 *   keeps the last loaded config and counts a load error (upstream loads an empty config: every
 *   limit gone, counted as a success): a directory vanishes far more often by accident (a volume
 *   or ConfigMap unmounted, a half-done deploy) than to lift every limit, which an empty directory
 *   still does. Either way the provider keeps watching (and polls every `retryMs` for directories
 *   it cannot watch yet), so creating the directory or swapping the root link later loads it.
 * - CONFIG_MAX_BYTES (`maxBytes`) bounds the bytes of all files of one load, and
 *   CONFIG_MAX_RESOURCES (`maxFiles`) their number: a load past either fails as the files are
 *   listed (nothing is read; the reader stops at the limit too, for a file that grew since) and the
 *   last good config stays.
 * - An empty RUNTIME_SUBDIRECTORY in watch-root mode (an empty RUNTIME_APPDIRECTORY in directory
 *   mode, an empty RUNTIME_ROOT) is goruntime's nil loader: an empty config, never reloaded, with a
 *   warning naming the variable.
 * - Every reload re-reads all files and builds a whole new config; MERGE_DOMAIN_CONFIG is read via
 *   `mergeDomainConfig()` at each load. Watching, coalescing bursts of events into one reload
 *   (`debounceMs` after the last event, at most `10 × debounceMs` after the first), re-arming
 *   watches of replaced directories and polling missing ones are the DirectoryWatcher's
 *   (directory-watcher.ts, with the fs.watch facts this relies on).
 *
 * Files are listed synchronously (node:fs sync calls) and read by the loader, on the thread that
 * builds the config (a worker for a big one). The loader may
 * answer at once (then `start()` returns after the store had its first event) or with a promise
 * (the config builder's worker thread for a big config): one load runs at a time, and changes seen
 * meanwhile reload once it is done. `stop()` closes every watcher and timer.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { ConfigError, type RateLimitConfig } from '../config/types';
import { fileLoadError as loadError, type ListedFile, tooManyBytes } from './config-files';
import type { ConfigStore, ProviderLogger } from './config-store';
import type { LoadSource } from './config-history';
import { DirectoryWatcher, errCode, type EventFilter, fsReason, isMissing } from '../platform/directory-watcher';

/**
 * The config loader, injected (normally the config builder bound to the stats store): reads the
 * listed files (`readListedFiles`) and loads them, at once or as a promise.
 */
export type ConfigLoaderFn = (files: ListedFile[], mergeDomainConfig: boolean) => RateLimitConfig | Promise<RateLimitConfig>;

export interface FileProviderOptions<F> {
  /** RUNTIME_ROOT, e.g. `/srv/runtime_data/current` (often a symlink). */
  root: string;
  /** RUNTIME_SUBDIRECTORY. */
  subdirectory: string;
  /** RUNTIME_APPDIRECTORY (default `config` upstream). */
  appDirectory: string;
  /** RUNTIME_IGNOREDOTFILES. */
  ignoreDotFiles: boolean;
  /** RUNTIME_WATCH_ROOT. */
  watchRoot: boolean;
  /** MERGE_DOMAIN_CONFIG, read at each load (upstream re-reads it from the environment). */
  mergeDomainConfig: () => boolean;
  loader: ConfigLoaderFn;
  store: ConfigStore<F>;
  logger: ProviderLogger;
  /** Quiet time after the last event before reloading (default 100 ms). */
  debounceMs?: number;
  /** Poll interval for watched directories that do not exist (default 1000 ms). */
  retryMs?: number;
  /** Whether the watchers keep the process alive (fs.watch `persistent`, default true). */
  persistent?: boolean;
  /** CONFIG_MAX_BYTES: most bytes all files of one load may hold; 0 (default) = no limit. */
  maxBytes?: number;
  /** CONFIG_MAX_RESOURCES: most files one load may hold; 0 (default) = no limit. */
  maxFiles?: number;
}

/** The config directory is not there (or not a directory). */
class MissingDirectory extends Error {}

export class FileProvider<F> {
  private readonly root: string;
  private readonly subdirectory: string;
  private readonly appDirectory: string;
  private readonly ignoreDotFiles: boolean;
  private readonly watchRoot: boolean;
  private readonly mergeDomainConfig: () => boolean;
  private readonly loader: ConfigLoaderFn;
  private readonly store: ConfigStore<F>;
  private readonly logger: ProviderLogger;
  /** Directory mode: `<root>/<subdirectory>/<appDirectory>`. */
  private readonly appDirPath: string;

  private readonly watcher: DirectoryWatcher;
  /** Watches kept whatever a load finds (the root's parent; the app directory in directory mode). */
  private readonly fixedWatches: Array<{ dir: string; relevant?: EventFilter }> = [];
  private started = false;
  private stopped = false;
  private readonly maxBytes: number;
  private readonly maxFiles: number;
  /** A load's promise is pending; `reloadAgain`: something changed meanwhile. */
  private loading = false;
  private reloadAgain = false;

  constructor(opts: FileProviderOptions<F>) {
    this.root = opts.root === '' ? '' : path.resolve(opts.root);
    this.subdirectory = opts.subdirectory;
    this.appDirectory = opts.appDirectory;
    this.ignoreDotFiles = opts.ignoreDotFiles;
    this.watchRoot = opts.watchRoot;
    this.mergeDomainConfig = opts.mergeDomainConfig;
    this.loader = opts.loader;
    this.store = opts.store;
    this.logger = opts.logger;
    this.watcher = new DirectoryWatcher({
      onChange: () => this.reload(),
      logger: opts.logger,
      logPrefix: 'runtime: ',
      debounceMs: opts.debounceMs,
      retryMs: opts.retryMs,
      persistent: opts.persistent,
    });
    this.appDirPath = path.resolve(opts.root, opts.subdirectory, opts.appDirectory);
    this.maxBytes = opts.maxBytes ?? 0;
    this.maxFiles = opts.maxFiles ?? 0;
  }

  /**
   * Loads the config once (synchronously: the store has its first event when this returns) and
   * starts watching. Calling it again is a no-op; after stop() it throws.
   */
  start(): void {
    if (this.stopped) throw new Error('FileProvider: start() after stop()');
    if (this.started) return;
    this.started = true;

    const nilVariable = this.nilLoaderVariable();
    if (nilVariable !== undefined) {
      this.logger.warn(
        `${nilVariable} is empty: no runtime configuration (nil loader); loading an empty rate limit configuration, never reloaded`,
      );
      this.load([]);
      return;
    }

    const parent = path.dirname(this.root);
    if (this.root !== '' && parent !== this.root) {
      const linkName = path.basename(this.root);
      this.fixedWatches.push({ dir: parent, relevant: (f) => f === null || f === linkName });
    }
    if (!this.watchRoot) this.fixedWatches.push({ dir: this.appDirPath });
    this.reload();
  }

  /** Closes every watcher and timer; no further loads happen. Idempotent. */
  stop(): void {
    this.stopped = true;
    this.watcher.close();
  }

  /** An fs event arrived and the reload it calls for is still due (or a load is still running). */
  get reloadPending(): boolean {
    return this.watcher.changePending || this.loading;
  }

  /**
   * Re-reads every file now and reports the result to the store (also what each debounced event
   * burst does). Re-arms the watchers first, so no change made after the read is missed.
   */
  reload(): void {
    if (this.stopped || !this.started) return;
    if (this.nilLoaderVariable() !== undefined) return;
    if (this.loading) {
      this.reloadAgain = true;
      return;
    }

    for (const f of this.fixedWatches) this.watcher.watch(f.dir, f.relevant);
    const seen = new Set<string>(this.fixedWatches.map((f) => f.dir));
    let files: ListedFile[];
    try {
      files = this.readFiles(seen);
    } catch (err) {
      if (err instanceof MissingDirectory) {
        this.watcher.unwatchExcept(seen);
        if (this.store.current() !== undefined) {
          this.store.fail(new ConfigError(`${err.message}; keeping the last loaded configuration`));
          return;
        }
        this.logger.warn(`runtime: ${err.message}; loading an empty configuration`);
        this.load([]);
        return;
      }
      this.store.fail(err);
      return;
    }
    this.watcher.unwatchExcept(seen);
    this.load(files);
  }

  private nilLoaderVariable(): string | undefined {
    if (this.watchRoot) {
      if (this.root === '') return 'RUNTIME_ROOT';
      if (this.subdirectory === '') return 'RUNTIME_SUBDIRECTORY';
    } else {
      if (this.root === '' && this.subdirectory === '') return 'RUNTIME_ROOT';
      if (this.appDirectory === '') return 'RUNTIME_APPDIRECTORY';
    }
    return undefined;
  }

  private load(files: ListedFile[]): void {
    const source: LoadSource = { kind: 'files', files: files.map((f) => f.name) };
    let config: RateLimitConfig | Promise<RateLimitConfig>;
    try {
      config = this.loader(files, this.mergeDomainConfig());
    } catch (err) {
      this.store.fail(err, source);
      return;
    }
    if (!(config instanceof Promise)) {
      this.store.update(config, source);
      return;
    }
    this.loading = true;
    config
      .then(
        (c) => {
          if (!this.stopped) this.store.update(c, source);
        },
        (err: unknown) => {
          if (!this.stopped) this.store.fail(err, source);
        },
      )
      .finally(() => {
        this.loading = false;
        if (this.reloadAgain) {
          this.reloadAgain = false;
          this.reload();
        }
      });
  }

  private readFiles(seen: Set<string>): ListedFile[] {
    if (this.watchRoot) {
      let real: string;
      try {
        real = fs.realpathSync(this.root);
      } catch (err) {
        if (!isMissing(err)) throw loadError(this.root, fsReason(err));
        throw new MissingDirectory(`${this.root} does not exist`);
      }
      return this.scanTree(path.join(real, this.subdirectory), this.appDirectory + '.', undefined);
    }
    return this.scanTree(this.appDirPath, undefined, seen);
  }

  /**
   * Reads every file under `base`. `prefix`: keep only names starting with it (watch-root mode).
   * `watchDirs`: watch each directory before listing it, recording it in the set (directory mode).
   */
  private scanTree(base: string, prefix: string | undefined, watchDirs: Set<string> | undefined): ListedFile[] {
    let top: fs.Stats | undefined;
    try {
      top = fs.statSync(base, { throwIfNoEntry: false });
    } catch (err) {
      if (!isMissing(err)) throw loadError(base, fsReason(err));
    }
    if (top === undefined || !top.isDirectory()) {
      throw new MissingDirectory(`directory ${base} ${top === undefined ? 'does not exist' : 'is not a directory'}`);
    }

    const files: ListedFile[] = [];
    let bytes = 0;
    const walk = (dir: string, parts: string[]): void => {
      if (watchDirs !== undefined) {
        watchDirs.add(dir);
        this.watcher.watch(dir);
      }
      let entries: fs.Dirent[];
      try {
        entries = fs.readdirSync(dir, { withFileTypes: true });
      } catch (err) {
        // A subdirectory removed while we walk: its removal event reloads again.
        if (parts.length > 0 && isMissing(err)) return;
        throw loadError(parts.length > 0 ? parts.join('.') : dir, fsReason(err));
      }
      for (const entry of entries) {
        const name = entry.name;
        if (this.ignoreDotFiles && name.startsWith('.')) continue;
        const full = path.join(dir, name);
        const childParts = [...parts, name];
        const key = childParts.join('.');
        let kind: 'dir' | 'file' | 'other';
        let viaLink = false;
        if (entry.isSymbolicLink()) {
          viaLink = true;
          let st: fs.Stats;
          try {
            st = fs.statSync(full);
          } catch (err) {
            const code = errCode(err);
            if (code === 'ENOENT' || code === 'ENOTDIR' || code === 'ELOOP') {
              this.logger.warn(`runtime: skipping ${full}: dangling symlink`);
              continue;
            }
            throw loadError(key, fsReason(err));
          }
          kind = st.isDirectory() ? 'dir' : st.isFile() ? 'file' : 'other';
        } else {
          kind = entry.isDirectory() ? 'dir' : entry.isFile() ? 'file' : 'other';
        }

        if (kind === 'dir') {
          // ConfigMap internals (`..data`, `..2026_…`): their files are loaded via the top-level links.
          if (name.startsWith('..')) continue;
          if (viaLink) {
            this.logger.warn(`runtime: skipping ${full}: symlinks to directories are not followed`);
            continue;
          }
          if (prefix !== undefined) {
            const dirPrefix = key + '.';
            if (!dirPrefix.startsWith(prefix) && !prefix.startsWith(dirPrefix)) continue;
          }
          walk(full, childParts);
          continue;
        }
        if (prefix !== undefined && !key.startsWith(prefix)) continue;
        if (kind === 'other') throw loadError(key, `read ${full}: not a regular file`);
        let size: number;
        try {
          size = fs.statSync(full).size;
        } catch (err) {
          // Removed between listing and reading: its removal event reloads again.
          if (errCode(err) === 'ENOENT') continue;
          throw loadError(key, fsReason(err));
        }
        bytes += size;
        if (this.maxBytes > 0 && bytes > this.maxBytes) throw tooManyBytes(key, this.maxBytes);
        if (this.maxFiles > 0 && files.length >= this.maxFiles) {
          throw new ConfigError(
            `${key}: the configuration has more than ${this.maxFiles} files, the limit set by CONFIG_MAX_RESOURCES; they were not loaded`,
          );
        }
        files.push({ name: key, path: full, size });
      }
    };
    walk(base, []);
    files.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    return files;
  }
}
