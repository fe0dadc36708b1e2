/**
 * Worker mode's totals: the primary applies each worker's flushed batch (`sinks/ipc.ts`) to its own
 * store, which its real sink and the debug /stats page then read as if one process had counted:
 * - counters add the worker's deltas,
 * - a gauge is the sum over the live workers of each one's latest value (a worker's new value
 *   replaces its previous one; a worker that exits no longer counts), except a limit's headroom
 *   gauges that are not counts: `limit`, `window_used` and `utilization` take the largest value
 *   (the workers share the store, so each saw the shared count; `window_keys` and
 *   `window_keys_over_limit` add up, as each worker counts the keys it saw first or go over),
 * - timers add the interval's count and sum, and its samples when the sink keeps them.
 */
import type { StatsBatch } from './sinks/ipc';
import { splitTags } from './tags';
import { RULE_STATS_PREFIX, type StatsStore } from './store';

/** The headroom gauges merged by their largest value over the workers (src/stats/limits/book.ts). */
const MAX_OVER_WORKERS = /\.(limit|window_used|utilization)$/;

function mergedByMax(name: string): boolean {
  return name.startsWith(RULE_STATS_PREFIX) && MAX_OVER_WORKERS.test(splitTags(name).base);
}

export class StatsAggregator {
  /** Each live worker's latest gauge values, by worker id. */
  private readonly gaugesByWorker = new Map<number, Map<string, number>>();

  constructor(private readonly store: StatsStore) {}

  apply(worker: number, batch: StatsBatch): void {
    for (const [name, delta] of batch.counters) this.store.counter(name).inc(delta);
    if (batch.gauges.length > 0) {
      let mine = this.gaugesByWorker.get(worker);
      if (mine === undefined) {
        mine = new Map();
        this.gaugesByWorker.set(worker, mine);
      }
      for (const [name, value] of batch.gauges) {
        mine.set(name, value);
        this.resum(name);
      }
    }
    for (const t of batch.timers) this.store.timer(t.name).merge(t.count, t.sumMs, t.samples);
  }

  /** A worker exited: its gauges leave the sums (its counters and timers stay counted). */
  removeWorker(worker: number): void {
    const mine = this.gaugesByWorker.get(worker);
    if (mine === undefined) return;
    this.gaugesByWorker.delete(worker);
    for (const name of mine.keys()) this.resum(name);
  }

  /** Recomputed rather than adjusted by differences, so fractional gauges do not drift. */
  private resum(name: string): void {
    if (mergedByMax(name)) {
      let max = 0;
      for (const values of this.gaugesByWorker.values()) max = Math.max(max, values.get(name) ?? 0);
      this.store.gauge(name).set(max);
      return;
    }
    let sum = 0;
    for (const values of this.gaugesByWorker.values()) sum += values.get(name) ?? 0;
    this.store.gauge(name).set(sum);
  }
}
