/**
 * The config history (`/debug/config-history`, DEBUG_CONFIG_HISTORY_SIZE): the last N loads, each
 * with its time, its source (the files, or the xDS version) and its outcome.
 *
 * - A successful load gets a version: 12 hex digits of a SHA-256 over its limits, each as one
 *   line of every field that decides what it does (stats key, unit, requests per unit, name,
 *   unlimited, shadow and quota mode, algorithm, burst, replaces, metadata), in /rlconfig order:
 *   the same rules give the same version whatever the order of the files or resources. Its diff
 *   against the load before: limits added, removed and changed (old and new limit, algorithm,
 *   shadow mode and the other fields), found by walking both configs' sorted limits side by side
 *   at the swap, so no earlier config is kept for it. The counts are exact; the first
 *   {@link MAX_LISTED} limits of the diff are listed.
 * - A failed load is kept with its error (the version in use stays).
 * - A successful load writes an info line with its version and counts, and moves the info gauge
 *   `ratelimit.config.info.__version=<v>` (1) to the new version, retiring the old series (statsd
 *   `ratelimit.config.info.__version=<v>`, Prometheus `ratelimit_config_info{version="<v>"}`).
 *
 * A big config is walked in slices of {@link SLICE_RULES} limits, a turn of the event loop each;
 * loads are handled in order (a load's entry appears once its walk is done, and the two configs
 * it compares are let go then).
 */
import { createHash, type Hash } from 'node:crypto';
import { compareDumpKeys } from '../config/load';
import type { RateLimitConfig } from '../config/types';
import type { RateLimitRule } from '../core/rule';
import { UNIT_NAMES } from '../core/rls';
import { isoUtc } from '../platform/time-text';
import type { Clock } from '../platform/clock';
import type { StatsStore } from '../stats/store';
import type { Logger } from '../telemetry/logger';

/** Where a load came from. */
export type LoadSource =
  /** The config files read (names relative to the config directory), in the order read. */
  | { readonly kind: 'files'; readonly files: readonly string[] }
  /** An xDS response's version_info. */
  | { readonly kind: 'xds'; readonly version: string };

/** Limits listed in one load's diff (added, removed and changed together); the counts stay exact. */
export const MAX_LISTED = 250;
/** Files named in one load's source; the count stays exact. */
export const MAX_FILES_LISTED = 50;
/** Characters of an error, a file name or an xDS version kept. */
const MAX_TEXT = 1000;
/** Limits walked per turn of the event loop. */
export const SLICE_RULES = 5000;
/** Most loads on one page. */
export const DEFAULT_PAGE = 10;

export const CONFIG_INFO_GAUGE = 'ratelimit.config.info';

/** One limit as the diff shows it. */
interface LimitView {
  readonly requests_per_unit: number;
  readonly unit: string;
  readonly algorithm: string;
  readonly shadow_mode: boolean;
  readonly quota_mode?: true;
  readonly unlimited?: true;
  readonly name?: string;
  readonly burst?: number;
}

type DiffLine =
  | { readonly change: 'added'; readonly rule: string; readonly new: LimitView }
  | { readonly change: 'removed'; readonly rule: string; readonly old: LimitView }
  | { readonly change: 'changed'; readonly rule: string; readonly old: LimitView; readonly new: LimitView };

interface Entry {
  readonly seq: number;
  readonly atMs: number;
  readonly source: LoadSource | undefined;
  readonly ok: boolean;
  /** The version loaded (ok), or the one still in use (failed; undefined before any load). */
  readonly version: string | undefined;
  readonly previous: string | undefined;
  readonly error?: string;
  readonly rules?: number;
  readonly domains?: number;
  readonly added?: number;
  readonly removed?: number;
  readonly changed?: number;
  readonly listed?: readonly DiffLine[];
}

export interface ConfigHistoryOptions {
  /** Loads kept (DEBUG_CONFIG_HISTORY_SIZE, > 0). */
  readonly size: number;
  readonly clock: Clock;
  readonly stats: StatsStore;
  readonly logger: Pick<Logger, 'info'>;
}

export interface HistoryQuery {
  readonly limit: number;
  readonly before: number | undefined;
}

/** The page's query, or the one-line reason it is refused (a 400). */
export function parseHistoryQuery(q: URLSearchParams, size: number): HistoryQuery | string {
  for (const key of q.keys()) {
    if (key !== 'limit' && key !== 'before') return `unknown query parameter '${clip(key)}' (expected limit, before)`;
    if (q.getAll(key).length > 1) return `query parameter '${key}' is given more than once`;
  }
  const limitText = q.get('limit');
  let limit = Math.min(DEFAULT_PAGE, size);
  if (limitText !== null) {
    limit = Number(limitText);
    if (!/^\d+$/.test(limitText) || limit < 1 || limit > size) return `limit must be a whole number from 1 to ${size} (DEBUG_CONFIG_HISTORY_SIZE), not '${clip(limitText)}'`;
  }
  const beforeText = q.get('before');
  let before: number | undefined;
  if (beforeText !== null) {
    before = Number(beforeText);
    if (!/^\d+$/.test(beforeText) || !Number.isSafeInteger(before) || before < 1) return `before must be a load's sequence number (a whole number from 1), not '${clip(beforeText)}'`;
  }
  return { limit, before };
}

function clip(text: string, max = 40): string {
  return text.length > max ? `${text.slice(0, max)}...` : text;
}

/** A limit's line in the version digest: every field that decides what it does. */
function fingerprint(r: RateLimitRule): string {
  return (
    `${r.fullKey}\t${r.limit.unit}\t${r.limit.requestsPerUnit}\t${r.limit.name}\t${r.unlimited}\t${r.shadowMode}\t${r.quotaMode}\t` +
    `${r.algorithm ?? ''}\t${r.burst ?? ''}\t${r.replaces.join(',')}\t${r.metadata === undefined ? '' : JSON.stringify(r.metadata)}\n`
  );
}

function view(r: RateLimitRule): LimitView {
  return {
    requests_per_unit: r.limit.requestsPerUnit,
    unit: UNIT_NAMES[r.limit.unit] ?? String(r.limit.unit),
    algorithm: r.algorithm ?? 'fixed_window',
    shadow_mode: r.shadowMode,
    ...(r.quotaMode ? { quota_mode: true as const } : {}),
    ...(r.unlimited ? { unlimited: true as const } : {}),
    ...(r.limit.name !== '' ? { name: r.limit.name } : {}),
    ...(r.burst !== undefined ? { burst: r.burst } : {}),
  };
}

export class ConfigHistory {
  private readonly entries: Entry[] = [];
  private seq = 0;
  private current: string | undefined;
  private infoGauge: string | undefined;
  /** The loads being walked, in order. */
  private queue: Promise<void> = Promise.resolve();

  constructor(private readonly opts: ConfigHistoryOptions) {}

  /** The version in use (undefined before the first load's walk is done). */
  get version(): string | undefined {
    return this.current;
  }

  /** A successful load replaced `before` (undefined: the first load) with `next`. */
  loaded(before: RateLimitConfig | undefined, next: RateLimitConfig, source: LoadSource | undefined): void {
    const seq = ++this.seq;
    const atMs = this.opts.clock.nowMs();
    this.queue = this.queue.then(() => this.walk(seq, atMs, before, next, source));
  }

  /** A load failed with `message`; the config in use stays. */
  failed(message: string, source: LoadSource | undefined): void {
    const seq = ++this.seq;
    const atMs = this.opts.clock.nowMs();
    this.queue = this.queue.then(() => {
      this.push({ seq, atMs, source, ok: false, version: this.current, previous: this.current, error: clip(message, MAX_TEXT) });
    });
  }

  /** Resolves once every load told so far is in the history (tests, and a page that must be current). */
  settled(): Promise<void> {
    return this.queue;
  }

  /** The page: newest first, `limit` loads at most, and where the next (older) page starts. */
  async page(query: HistoryQuery): Promise<string> {
    await this.settled();
    const newest = this.entries.length - 1;
    let i = newest;
    if (query.before !== undefined) while (i >= 0 && this.entries[i]!.seq >= query.before) i--;
    const out: string[] = [];
    for (; i >= 0 && out.length < query.limit; i--) out.push(JSON.stringify(describe(this.entries[i]!)));
    const next = i >= 0 ? this.entries[i + 1]!.seq : undefined;
    return (
      `{"size":${this.opts.size},"loads":${this.seq},"version":${JSON.stringify(this.current ?? null)},"history":[${out.join(',')}]` +
      (next !== undefined ? `,"next_before":${next}` : '') +
      '}\n'
    );
  }

  private push(entry: Entry): void {
    this.entries.push(entry);
    if (this.entries.length > this.opts.size) this.entries.shift();
  }

  /** Digest and diff of one load, a slice of limits per turn of the event loop. */
  private async walk(seq: number, atMs: number, before: RateLimitConfig | undefined, next: RateLimitConfig, source: LoadSource | undefined): Promise<void> {
    const hash: Hash = createHash('sha256');
    const old = before?.rules ?? [];
    const now = next.rules;
    const listed: DiffLine[] = [];
    let added = 0;
    let removed = 0;
    let changed = 0;
    const list = (line: DiffLine): void => {
      if (listed.length < MAX_LISTED) listed.push(line);
    };
    let i = 0;
    let j = 0;
    let steps = 0;
    while (i < old.length || j < now.length) {
      if (++steps % SLICE_RULES === 0) await new Promise((resolve) => setImmediate(resolve));
      const a = old[i];
      const b = now[j];
      const order = a === undefined ? 1 : b === undefined ? -1 : compareDumpKeys(a.fullKey, b.fullKey);
      if (order < 0) {
        removed++;
        list({ change: 'removed', rule: a!.fullKey, old: view(a!) });
        i++;
        continue;
      }
      const fb = fingerprint(b!);
      hash.update(fb);
      if (order > 0) {
        added++;
        list({ change: 'added', rule: b!.fullKey, new: view(b!) });
      } else {
        if (fingerprint(a!) !== fb) {
          changed++;
          list({ change: 'changed', rule: b!.fullKey, old: view(a!), new: view(b!) });
        }
        i++;
      }
      j++;
    }
    const version = hash.digest('hex').slice(0, 12);
    const previous = this.current;
    this.current = version;
    this.push({ seq, atMs, source, ok: true, version, previous, rules: next.ruleCount, domains: next.domainCount, added, removed, changed, listed });
    this.moveInfoGauge(version);
    this.opts.logger.info(
      `config version ${version} loaded${previous === undefined ? '' : ` (was ${previous})`}: ${next.ruleCount} limits in ${next.domainCount} domains, ` +
        `${added} added, ${removed} removed, ${changed} changed${sourceText(source)}`,
    );
  }

  private moveInfoGauge(version: string): void {
    const name = `${CONFIG_INFO_GAUGE}.__version=${version}`;
    if (name === this.infoGauge) return;
    if (this.infoGauge !== undefined) this.opts.stats.removeGauge(this.infoGauge);
    this.opts.stats.gauge(name).set(1);
    this.infoGauge = name;
  }
}

function sourceText(source: LoadSource | undefined): string {
  if (source === undefined) return '';
  if (source.kind === 'xds') return ` (xDS version ${clip(source.version, 100)})`;
  const n = source.files.length;
  return n === 0 ? ' (no files)' : ` (${n} file${n === 1 ? '' : 's'}: ${source.files.slice(0, 5).map((f) => clip(f, 100)).join(', ')}${n > 5 ? ', ...' : ''})`;
}

function describeSource(source: LoadSource | undefined): Record<string, unknown> | undefined {
  if (source === undefined) return undefined;
  if (source.kind === 'xds') return { xds_version: clip(source.version, MAX_TEXT) };
  const files = source.files;
  return {
    files: files.slice(0, MAX_FILES_LISTED).map((f) => clip(f, MAX_TEXT)),
    ...(files.length > MAX_FILES_LISTED ? { files_not_listed: files.length - MAX_FILES_LISTED } : {}),
  };
}

function describe(e: Entry): Record<string, unknown> {
  const out: Record<string, unknown> = { seq: e.seq, time: isoUtc(e.atMs), outcome: e.ok ? 'loaded' : 'failed' };
  const source = describeSource(e.source);
  if (source !== undefined) out['source'] = source;
  if (!e.ok) {
    out['error'] = e.error;
    out['version_in_use'] = e.version ?? null;
    return out;
  }
  out['version'] = e.version;
  out['previous_version'] = e.previous ?? null;
  out['limits'] = e.rules;
  out['domains'] = e.domains;
  const listed = e.listed ?? [];
  const total = (e.added ?? 0) + (e.removed ?? 0) + (e.changed ?? 0);
  out['diff'] = {
    added: e.added,
    removed: e.removed,
    changed: e.changed,
    limits: listed,
    ...(total > listed.length ? { not_listed: total - listed.length } : {}),
  };
  return out;
}
