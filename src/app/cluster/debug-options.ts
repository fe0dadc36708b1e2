/**
 * The primary's debug page in worker mode: the same handler as a single process (`../debug.ts`),
 * with /stats read from the summed store after a fresh flush of every worker, /rlconfig (pulled
 * from one worker piece by piece), /debug/explain and CPU profiles answered by one worker over
 * IPC (503 when none answers), and
 * the RLQS pages (/debug/rlqs, /debug/explain?bucket=) gathered from every worker (/debug/rlqs
 * pulled from each in turn, piece by piece, as /rlconfig). /debug/denials is each worker's page
 * (each keeps the denials it answered) under its number; /debug/config-history is one worker's
 * (each loads the same files or xDS responses itself). Their queries are checked here first.
 */
import { WORKER_HEADER } from '../app';
import { DebugHttpError, type DebugServerOptions } from '../../server/debug';
import type { StatsStore } from '../../stats/store';
import type { LimitsViewSettings } from '../../settings/settings';
import { parseDenialsQuery } from '../../telemetry/denials';
import { parseHistoryQuery } from '../../providers/config-history';
import type { WorkerQuery } from './messages';
import { type WorkerPool, WorkerUnavailableError } from './pool';

/** How long a worker may take to answer /rlconfig or /debug/explain (and beyond a profile's length). */
export const QUERY_TIMEOUT_MS = 5_000;
/** How long /stats and a Prometheus scrape wait for the workers' fresh stats. */
export const REFRESH_TIMEOUT_MS = 2_000;

/** What the debug page needs of the workers. */
export type WorkerQueries = Pick<WorkerPool, 'query' | 'flushAll'>;

/**
 * Each worker's answer under its number: RLQS streams are spread over the workers, so a page
 * about them is the pages of all of them. A worker that does not answer is said so.
 */
async function fromEveryWorker(pool: WorkerQueries, query: WorkerQuery, workers: number): Promise<string> {
  const answers = await Promise.allSettled(Array.from({ length: workers }, (_, i) => pool.query(query, QUERY_TIMEOUT_MS, i + 1)));
  return answers.map((a, i) => `worker ${i + 1}:\n${a.status === 'fulfilled' ? a.value.value : `  no answer (${(a.reason as Error)?.message ?? String(a.reason)})\n`}`).join('');
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

/** /debug/denials in worker mode: `{"workers":[{"worker":1,"page":{...}},...]}`, a worker that does not answer said so. */
async function everyWorkerPage(pool: WorkerQueries, query: WorkerQuery, workers: number): Promise<string> {
  const answers = await Promise.allSettled(Array.from({ length: workers }, (_, i) => pool.query(query, QUERY_TIMEOUT_MS, i + 1)));
  const parts = answers.map((a, i) =>
    a.status === 'fulfilled'
      ? `{"worker":${i + 1},"page":${a.value.value.trimEnd()}}`
      : `{"worker":${i + 1},"error":${JSON.stringify((a.reason as Error)?.message ?? String(a.reason))}}`,
  );
  return `{"workers":[${parts.join(',')}]}\n`;
}

export function primaryDebugOptions(pool: WorkerQueries, stats: StatsStore, workers: number, view?: LimitsViewSettings): DebugServerOptions {
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
          denials: (query: URLSearchParams) => {
            const q = parseDenialsQuery(query);
            if (typeof q === 'string') throw new DebugHttpError(400, q);
            return everyWorkerPage(pool, { op: 'denials', query: query.toString() }, workers);
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
