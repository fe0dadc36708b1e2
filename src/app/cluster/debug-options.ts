/**
 * The primary's debug page in worker mode: the same handler as a single process (`../debug.ts`),
 * with /stats read from the summed store after a fresh flush of every worker, /rlconfig (pulled
 * from one worker piece by piece), /debug/explain and CPU profiles answered by one worker over
 * IPC (503 when none answers), and
 * the RLQS pages (/debug/rlqs, /debug/explain?bucket=) gathered from every worker (/debug/rlqs
 * pulled from each in turn, piece by piece, as /rlconfig). /debug/hotkeys, /debug/candidates and /debug/limits
 * merge every worker's part (src/stats/limits/pages.ts) as if one process had counted;
 * /debug/denials merges the workers' rings newest first, each denial naming its worker;
 * /debug/config-history is one worker's (each loads the same files or xDS responses itself).
 * A merged page says which workers it merges and which did not answer.
 */
import { WORKER_HEADER } from '../app';
import { DebugHttpError, type DebugServerOptions } from '../../server/debug';
import type { StatsStore } from '../../stats/store';
import type { LimitsViewSettings } from '../../settings/settings';
import { parseDenialsQuery } from '../../telemetry/denials';
import { parseHistoryQuery } from '../../providers/config-history';
import { candidatesPage, hotKeysPage, limitsPage, type CandidatesPart, type HotKeysPart, type LimitsPart, type PageSettings } from '../../stats/limits/pages';
import type { WorkerQuery } from './messages';
import { type WorkerPool, WorkerUnavailableError } from './pool';

/** How long a worker may take to answer /rlconfig or /debug/explain (and beyond a profile's length). */
export const QUERY_TIMEOUT_MS = 5_000;
/** How long /stats and a Prometheus scrape wait for the workers' fresh stats. */
export const REFRESH_TIMEOUT_MS = 2_000;

/** What the debug page needs of the workers. */
export type WorkerQueries = Pick<WorkerPool, 'query' | 'flushAll'>;

/** Each worker's answer to `query` (the same for all, or made per worker), or why it gave none, by worker number from 1. */
async function askEveryWorker(
  pool: WorkerQueries,
  query: WorkerQuery | ((worker: number) => WorkerQuery),
  workers: number,
): Promise<Array<{ worker: number; value: string } | { worker: number; error: string }>> {
  const queryOf = typeof query === 'function' ? query : () => query;
  const answers = await Promise.allSettled(Array.from({ length: workers }, (_, i) => pool.query(queryOf(i + 1), QUERY_TIMEOUT_MS, i + 1)));
  return answers.map((a, i) => (a.status === 'fulfilled' ? { worker: i + 1, value: a.value.value } : { worker: i + 1, error: (a.reason as Error)?.message ?? String(a.reason) }));
}

/** The 503 of a merged page when no worker answered. */
function noWorkerAnswered(unanswered: WorkersMerged['unanswered']): DebugHttpError {
  return new DebugHttpError(503, `no worker answered: ${unanswered.map((u) => `worker ${u.worker}: ${u.error}`).join('; ')}`);
}

/**
 * Each worker's answer under its number: RLQS streams are spread over the workers, so a page
 * about them is the pages of all of them. A worker that does not answer is said so.
 */
async function fromEveryWorker(pool: WorkerQueries, query: WorkerQuery, workers: number): Promise<string> {
  const answers = await askEveryWorker(pool, query, workers);
  return answers.map((a) => `worker ${a.worker}:\n${'value' in a ? a.value : `  no answer (${a.error})\n`}`).join('');
}

/** What a merged page says of the workers: those it merges and those that gave nothing. */
interface WorkersMerged {
  merged: number[];
  unanswered: Array<{ worker: number; error: string }>;
}

/**
 * Every worker's part of a merged page (hot keys, candidates): a query a worker refuses is a 400
 * with its reason; when no worker answers, a 503.
 */
async function everyWorkerPart<P>(pool: WorkerQueries, query: WorkerQuery, workers: number): Promise<{ parts: P[]; workers: WorkersMerged }> {
  const parts: P[] = [];
  const seen: WorkersMerged = { merged: [], unanswered: [] };
  for (const a of await askEveryWorker(pool, query, workers)) {
    if ('error' in a) {
      seen.unanswered.push(a);
      continue;
    }
    const answer = JSON.parse(a.value) as { part: P } | { refused: string };
    if ('refused' in answer) throw new DebugHttpError(400, answer.refused);
    parts.push(answer.part);
    seen.merged.push(a.worker);
  }
  if (parts.length === 0) throw noWorkerAnswered(seen.unanswered);
  return { parts, workers: seen };
}

/**
 * The rest of /rlconfig listing `listing` after its `first` piece, pulled from the same worker one
 * piece at a time as the HTTP client takes them; a client that leaves early ends it in the worker.
 */
async function* pulledListing(pool: WorkerQueries, listing: number, first: { slot: number; value: string }): AsyncGenerator<string> {
  let ended = false;
  try {
    for (let piece = first.value; piece !== ''; piece = (await pool.query({ op: 'rlconfig-next', listing }, QUERY_TIMEOUT_MS, first.slot)).value) {
      yield piece;
    }
    ended = true;
  } finally {
    if (!ended) pool.query({ op: 'rlconfig-end', listing }, QUERY_TIMEOUT_MS, first.slot).catch(() => undefined);
  }
}

/**
 * /debug/rlqs in worker mode: each worker's listing under its number, pulled piece by piece; a
 * worker that does not answer (or stops answering) is said so, and the next one follows.
 */
async function* everyWorkerListing(pool: WorkerQueries, workers: number, nextListing: () => number): AsyncGenerator<string> {
  for (let slot = 1; slot <= workers; slot++) {
    yield `worker ${slot}:\n`;
    const listing = nextListing();
    try {
      const first = await pool.query({ op: 'rlqs', listing }, QUERY_TIMEOUT_MS, slot);
      yield* pulledListing(pool, listing, first);
    } catch (err) {
      yield `  no answer (${(err as Error)?.message ?? String(err)})\n`;
    }
  }
}

/** One denial of a worker's page, as much as the merge reads of it. */
interface WorkerDenial {
  seq: number;
  time: string;
  [field: string]: unknown;
}

/** A worker's /debug/denials page (src/telemetry/denials.ts). */
interface WorkerDenialsPage {
  size: number;
  recorded: number;
  kept: number;
  denials: WorkerDenial[];
  next_before?: number;
}

/**
 * `before` in worker mode: a merged page's `next_before`, each worker's place as `worker:seq`
 * pairs (`1:520,2:611`): the older denials of the workers it names. Undefined: from the newest.
 */
function parseWorkersCursor(text: string | null, workers: number): Map<number, number> | undefined {
  if (text === null) return undefined;
  const places = new Map<number, number>();
  for (const pair of text.split(',')) {
    const m = /^(\d{1,4}):(\d{1,15})$/.exec(pair);
    const worker = Number(m?.[1]);
    const seq = Number(m?.[2]);
    if (m === null || worker < 1 || worker > workers || seq < 1 || places.has(worker)) {
      throw new DebugHttpError(400, `before must be a merged page's next_before in worker mode: worker:seq pairs joined by ',' (workers 1 to ${workers}), not '${text.length > 40 ? `${text.slice(0, 40)}...` : text}'`);
    }
    places.set(worker, seq);
  }
  return places;
}

/**
 * /debug/denials in worker mode: the workers' rings merged, newest first, `limit` at most; each
 * denial says its worker, and `next_before` holds each worker's place for the next page.
 */
async function mergedDenials(pool: WorkerQueries, query: URLSearchParams, workers: number): Promise<string> {
  if (query.getAll('before').length > 1) throw new DebugHttpError(400, "query parameter 'before' is given more than once");
  const own = new URLSearchParams(query);
  own.delete('before');
  const q = parseDenialsQuery(own);
  if (typeof q === 'string') throw new DebugHttpError(400, q);
  const places = parseWorkersCursor(query.get('before'), workers);
  // Every worker, for its ring's figures; one the cursor leaves out has nothing older (before=1).
  const answers = await askEveryWorker(
    pool,
    (w) => {
      const before = places === undefined ? undefined : places.get(w) ?? 1;
      return { op: 'denials', query: before === undefined ? own.toString() : `${own.toString()}${own.size > 0 ? '&' : ''}before=${before}` };
    },
    workers,
  );
  const seen: WorkersMerged = { merged: [], unanswered: [] };
  const pages = new Map<number, WorkerDenialsPage>();
  const all: Array<{ worker: number; at: number; d: WorkerDenial }> = [];
  for (const a of answers) {
    if ('error' in a) {
      seen.unanswered.push(a);
      continue;
    }
    const page = JSON.parse(a.value) as WorkerDenialsPage;
    pages.set(a.worker, page);
    seen.merged.push(a.worker);
    for (const d of page.denials) all.push({ worker: a.worker, at: Date.parse(d.time), d });
  }
  if (pages.size === 0) throw noWorkerAnswered(seen.unanswered);
  all.sort((a, b) => b.at - a.at || a.worker - b.worker || b.d.seq - a.d.seq);
  const shown = all.slice(0, q.limit);
  // Each worker's place: before its oldest denial shown, or where it was when none of it was shown.
  const next: string[] = [];
  for (let worker = 1; worker <= workers; worker++) {
    const page = pages.get(worker);
    if (page === undefined) {
      // It did not answer this time: its place is kept for the next page.
      const place = places?.get(worker);
      if (place !== undefined) next.push(`${worker}:${place}`);
      continue;
    }
    const mine = shown.filter((x) => x.worker === worker);
    const more = page.denials.length > mine.length || page.next_before !== undefined;
    if (!more) continue;
    const place = mine.length > 0 ? mine[mine.length - 1]!.d.seq : page.denials[0]!.seq + 1;
    next.push(`${worker}:${place}`);
  }
  const sum = (f: 'size' | 'recorded' | 'kept'): number => [...pages.values()].reduce((n, p) => n + p[f], 0);
  return (
    `{"workers":${JSON.stringify(seen)},"size":${sum('size')},"recorded":${sum('recorded')},"kept":${sum('kept')},` +
    `"denials":[${shown.map((x) => JSON.stringify({ worker: x.worker, ...x.d })).join(',')}]` +
    (next.length > 0 ? `,"next_before":${JSON.stringify(next.join(','))}` : '') +
    '}\n'
  );
}

export function primaryDebugOptions(pool: WorkerQueries, stats: StatsStore, workers: number, view?: LimitsViewSettings, pages?: PageSettings): DebugServerOptions {
  let nextListing = 1;
  const ask = (query: WorkerQuery, timeoutMs: number, slot?: number): Promise<{ slot: number; value: string }> =>
    pool.query(query, timeoutMs, slot).catch((err: unknown) => {
      throw err instanceof WorkerUnavailableError ? new DebugHttpError(503, err.message) : err;
    });
  return {
    stats,
    dumpConfig: async () => {
      const listing = nextListing++;
      const first = await ask({ op: 'rlconfig', listing }, QUERY_TIMEOUT_MS);
      return pulledListing(pool, listing, first);
    },
    refreshGauges: () => pool.flushAll(REFRESH_TIMEOUT_MS),
    explain: async (domain, descriptors) => (await ask({ op: 'explain', domain, descriptors }, QUERY_TIMEOUT_MS)).value,
    quotaBuckets: async () => everyWorkerListing(pool, workers, () => nextListing++),
    explainBucket: (domain, bucket) => fromEveryWorker(pool, { op: 'explain-bucket', domain, bucket }, workers),
    ...(view !== undefined && view.denialsSize > 0
      ? {
          denials: (query: URLSearchParams) => mergedDenials(pool, query, workers),
        }
      : {}),
    ...(pages !== undefined
      ? {
          hotKeys: async (query: URLSearchParams) => {
            const { parts, workers: seen } = await everyWorkerPart<HotKeysPart>(pool, { op: 'hotkeys', query: query.toString() }, workers);
            return hotKeysPage(parts, pages, { workers: seen });
          },
          limits: async (query: URLSearchParams) => {
            const { parts, workers: seen } = await everyWorkerPart<LimitsPart>(pool, { op: 'limits', query: query.toString() }, workers);
            return limitsPage(parts, { workers: seen });
          },
          candidates: async (query: URLSearchParams) => {
            const { parts, workers: seen } = await everyWorkerPart<CandidatesPart>(pool, { op: 'candidates', query: query.toString() }, workers);
            return candidatesPage(parts, pages, Math.floor(Date.now() / 1000), { workers: seen });
          },
        }
      : {}),
    ...(view !== undefined && view.configHistorySize > 0
      ? {
          configHistory: async (query: URLSearchParams) => {
            const q = parseHistoryQuery(query, view.configHistorySize);
            if (typeof q === 'string') throw new DebugHttpError(400, q);
            return (await ask({ op: 'config-history', query: query.toString() }, QUERY_TIMEOUT_MS)).value;
          },
        }
      : {}),
    profile: async (ms, query) => {
      const slot = workerParam(query.get('worker'), workers);
      const answer = await ask({ op: 'profile', ms }, ms + QUERY_TIMEOUT_MS, slot);
      return { profile: answer.value, headers: { [WORKER_HEADER]: String(answer.slot) } };
    },
  };
}

/** `?worker=N`: 1..workers, or undefined (the first listening worker) when absent. */
function workerParam(text: string | null, workers: number): number | undefined {
  if (text === null) return undefined;
  const n = Number(text);
  if (!Number.isInteger(n) || n < 1 || n > workers) throw new DebugHttpError(400, `worker must be a number from 1 to ${workers}`);
  return n;
}
