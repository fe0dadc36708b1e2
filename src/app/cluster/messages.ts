/**
 * The IPC messages between the primary and its workers in worker mode (WORKERS ≠ 1). The channel
 * uses Node's `advanced` serialization, so timer samples travel as typed arrays.
 */
import type { StatsBatch } from '../../stats/sinks/ipc';

/** What the primary asks a worker, answered by one {@link Reply} with the same id. */
export type WorkerQuery =
  /** Starts /rlconfig listing `listing` (numbered by the primary); answered by its first piece, '' = the end. */
  | { readonly op: 'rlconfig'; readonly listing: number }
  /** The next piece of a listing (of /rlconfig or /debug/rlqs), '' at its end. */
  | { readonly op: 'rlconfig-next'; readonly listing: number }
  /** The listing's client left before its end (a listing of either page). */
  | { readonly op: 'rlconfig-end'; readonly listing: number }
  | { readonly op: 'explain'; readonly domain: string; readonly descriptors: string[] }
  | { readonly op: 'profile'; readonly ms: number }
  /** Starts listing `listing` of the worker's live RLQS streams and buckets (/debug/rlqs), as 'rlconfig' does. */
  | { readonly op: 'rlqs'; readonly listing: number }
  /** How the worker places, limits and divides one RLQS bucket (`k=v,k2=v2`). */
  | { readonly op: 'explain-bucket'; readonly domain: string; readonly bucket: string }
  /** /debug/denials of the worker for a query the primary has checked (its JSON page). */
  | { readonly op: 'denials'; readonly query: string }
  /**
   * The worker's part of /debug/hotkeys, /debug/candidates or /debug/limits for the query (JSON
   * `{"part":...}`, merged by the primary), or `{"refused":"<reason>"}` when the query is refused.
   */
  | { readonly op: 'hotkeys' | 'candidates' | 'limits'; readonly query: string }
  /** /debug/config-history of the worker, as 'denials'. */
  | { readonly op: 'config-history'; readonly query: string }
  /** Flush the stats now; the batch is sent before the reply, on the same ordered channel. */
  | { readonly op: 'flush' };

/** Primary → worker. */
export type ToWorker =
  /** Sent right after the fork; the worker starts once it has it. */
  | { readonly type: 'init'; readonly slot: number; readonly forwardTimerSamples: boolean }
  | { readonly type: 'query'; readonly id: number; readonly query: WorkerQuery };

export type Reply =
  | { readonly type: 'reply'; readonly id: number; readonly ok: true; readonly value: string }
  | { readonly type: 'reply'; readonly id: number; readonly ok: false; readonly error: string };

/** Worker → primary. */
export type FromWorker =
  | { readonly type: 'listening'; readonly grpc: string; readonly http: string }
  /** The worker's start-up failed for a reason the operator must fix; it exits 1 next. */
  | { readonly type: 'startup-error'; readonly message: string }
  | { readonly type: 'stats'; readonly batch: StatsBatch }
  | Reply;

/** True for a message of ours (cluster's own messages never reach the `message` listeners). */
export function isMessage<T extends { type: string }>(m: unknown): m is T {
  return typeof m === 'object' && m !== null && typeof (m as { type?: unknown }).type === 'string';
}
