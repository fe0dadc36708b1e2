/**
 * Builds a config snapshot without holding the event loop: a worker thread reads, validates and
 * plans the config (config-worker.ts), then the main thread assembles the plan's records into the
 * immutable snapshot a slice at a time, letting calls be served between slices. Both providers
 * (files and xDS) build through it; small configs are built at once on the calling thread, where a
 * worker would cost more than it saves.
 *
 * Why this split: a snapshot is a graph of frozen objects bound to this thread's stats store, which
 * cannot cross threads; structured-cloning the whole plan at once would hold the loop for its
 * deserialisation (0.5-1 s for 100,000 descriptors). Slices of plain records cost a few
 * milliseconds each to receive and to assemble.
 *
 * The worker has its own heap limit: a config that needs more memory fails its load (the last
 * good config stays) instead of taking the process down.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { Worker } from 'node:worker_threads';
import { ConfigAssembly, type PlanOptions, type PlanRecord, loadConfig, loadConfigFromObjects } from '../config/load';
import { ConfigError, type RateLimitConfig } from '../config/types';
import { readListedFiles, type ListedFile } from './config-files';
import type { StatsStore } from '../stats/store';
import { decodeResource } from './xds/convert';

/** An xDS resource as it arrived (an Any): decoded where the config is built. */
export interface RawResource {
  readonly typeUrl: string;
  readonly value: Uint8Array;
}

export type BuildSource =
  /** `maxBytes`: CONFIG_MAX_BYTES, what the files may hold together when read (0 = no limit). */
  | { readonly kind: 'files'; readonly files: readonly ListedFile[]; readonly maxBytes?: number }
  | { readonly kind: 'resources'; readonly resources: readonly RawResource[] };

/** What the worker is given. */
export interface BuildJob {
  readonly source: BuildSource;
  readonly options: PlanOptions;
  readonly sliceRecords: number;
}

export type ToBuildWorker = { readonly type: 'next' };
export type FromBuildWorker =
  | { readonly type: 'error'; readonly message: string; readonly configError: boolean }
  | { readonly type: 'planned'; readonly ruleCount: number; readonly domainCount: number; readonly records: number }
  | { readonly type: 'records'; readonly records: PlanRecord[]; readonly last: boolean };

export interface ConfigBuilderOptions {
  readonly stats: StatsStore;
  /** Inputs up to this many bytes are built at once on the calling thread (default 64 KiB). */
  readonly inlineBytes?: number;
  /** Records per slice (default 1,000: a few milliseconds to receive and assemble). */
  readonly sliceRecords?: number;
  /** The worker's heap limit in MiB (default 192, CONFIG_BUILD_MAX_HEAP_MB); past it the load fails. */
  readonly maxHeapMb?: number;
}

const WORKER_FILE = 'config-worker.js';

/** The worker's script: beside this file when built; from dist/ when this runs from the sources (tests). */
function workerScript(): string {
  const beside = path.join(__dirname, WORKER_FILE);
  if (fs.existsSync(beside)) return beside;
  const built = path.resolve(__dirname, '..', '..', 'dist', 'src', 'providers', WORKER_FILE);
  if (fs.existsSync(built)) return built;
  throw new Error(`${beside} is missing: build the package (make build)`);
}

/** The size of a build's input in bytes (what CONFIG_MAX_BYTES bounds). */
export function sourceBytes(source: BuildSource): number {
  let n = 0;
  if (source.kind === 'files') for (const f of source.files) n += f.size;
  else for (const r of source.resources) n += r.value.byteLength;
  return n;
}

export class ConfigBuilder {
  private readonly stats: StatsStore;
  private readonly inlineBytes: number;
  private readonly sliceRecords: number;
  private readonly maxHeapMb: number;
  private readonly running = new Set<Worker>();
  private closed = false;

  constructor(opts: ConfigBuilderOptions) {
    this.stats = opts.stats;
    this.inlineBytes = opts.inlineBytes ?? 64 * 1024;
    this.sliceRecords = opts.sliceRecords ?? 1000;
    this.maxHeapMb = opts.maxHeapMb ?? 192;
  }

  /**
   * The config of `source`: at once (a small input) or as a promise (a worker builds it). Throws or
   * rejects with the load's ConfigError.
   */
  build(source: BuildSource, options: PlanOptions): RateLimitConfig | Promise<RateLimitConfig> {
    if (sourceBytes(source) <= this.inlineBytes) {
      const opts = { ...options, stats: this.stats };
      if (source.kind === 'files') return loadConfig(readListedFiles(source.files, source.maxBytes), opts);
      return loadConfigFromObjects(
        source.resources.map((r, i) => decodeResource(r, i)),
        opts,
      );
    }
    return this.buildOffThread({ source, options, sliceRecords: this.sliceRecords });
  }

  /** Ends any build in progress (its promise rejects); later builds fail at once. */
  close(): void {
    this.closed = true;
    for (const w of this.running) void w.terminate();
  }

  private buildOffThread(job: BuildJob): Promise<RateLimitConfig> {
    if (this.closed) return Promise.reject(new Error('the config builder is closed'));
    return new Promise((resolve, reject) => {
      const worker = new Worker(workerScript(), {
        workerData: job,
        resourceLimits: { maxOldGenerationSizeMb: this.maxHeapMb },
      });
      this.running.add(worker);
      let assembly: ConfigAssembly | undefined;
      let settled = false;
      const fail = (err: Error): void => {
        if (settled) return;
        settled = true;
        void worker.terminate();
        reject(err);
      };
      worker.on('message', (m: FromBuildWorker) => {
        if (settled) return;
        switch (m.type) {
          case 'error':
            fail(m.configError ? new ConfigError(m.message) : new Error(m.message));
            return;
          case 'planned':
            assembly = new ConfigAssembly(this.stats, m.ruleCount);
            if (m.records === 0) {
              settled = true;
              resolve(assembly.finish());
              return;
            }
            worker.postMessage({ type: 'next' } satisfies ToBuildWorker);
            return;
          case 'records':
            assembly!.add(m.records);
            if (m.last) {
              settled = true;
              resolve(assembly!.finish());
              return;
            }
            // The next slice after the loop has polled: calls that arrived meanwhile go first.
            setImmediate(() => {
              if (!settled) worker.postMessage({ type: 'next' } satisfies ToBuildWorker);
            });
            return;
        }
      });
      worker.on('error', (err) => {
        const oom = (err as NodeJS.ErrnoException).code === 'ERR_WORKER_OUT_OF_MEMORY';
        fail(
          oom
            ? new ConfigError(`the configuration needs more than ${this.maxHeapMb} MiB of memory to load; it was not loaded`)
            : err,
        );
      });
      worker.on('exit', (code) => {
        this.running.delete(worker);
        fail(new Error(this.closed ? 'the config build was stopped' : `the config build ended early (exit code ${code})`));
      });
    });
  }
}
