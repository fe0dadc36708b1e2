/**
 * Worker mode's totals: the primary applies each worker's flushed batch (`sinks/ipc.ts`) to its own
 * store, which its real sink and the debug /stats page then read as if one process had counted:
 * - counters add the worker's deltas,
 * - a gauge is the sum over the live workers of each one's latest value (a worker's new value
 *   replaces its previous one; a worker that exits no longer counts), except a limit's headroom
 *   gauges that are not counts: `limit`, `window_used` and `utilization` take the largest value
 *   (the workers share the store, so each saw the shared count; `window_keys` and
 *   `window_keys_over_limit` add up, as each worker counts the keys it saw first or go over),
 *   and the loaded config's gauges (`ratelimit.config.*`: rules, domains, the version's info
 *   series), which take the largest too: every worker loads the same config, so a sum would
 *   double it and a worker's restart would look like rules dropped at a reload,
 * - timers add the interval's count and sum, and its samples when the sink keeps them;
 * - a gauge a worker retired leaves the merge, and the store once no worker has it.
 */
import type { StatsBatch } from './sinks/ipc';
import { splitTags } from './tags';
import { RULE_STATS_PREFIX, type StatsStore } from './store';

/** The headroom gauges merged by their largest value over the workers (src/stats/limits/book.ts). */
const MAX_OVER_WORKERS = /\.(limit|window_used|utilization)$/;

/** The loaded config's gauges (src/config/, src/providers/config-history.ts), the same in every worker. */
const CONFIG_PREFIX = 'ratelimit.config.';

function mergedByMax(name: string): boolean {
  if (name.startsWith(CONFIG_PREFIX)) return true;
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
    for (const name of batch.retired ?? []) {
      this.gaugesByWorker.get(worker)?.delete(name);
      this.resum(name, true);
    }
  }

  /** A worker exited: its gauges leave the sums (its counters and timers stay counted). */
  removeWorker(worker: number): void {
    const mine = this.gaugesByWorker.get(worker);
    if (mine === undefined) return;
    this.gaugesByWorker.delete(worker);
    for (const name of mine.keys()) this.resum(name);
  }

  /** Recomputed rather than adjusted by differences, so fractional gauges do not drift. */
  private resum(name: string, retired = false): void {
    const byMax = mergedByMax(name);
    let merged = 0;
    let held = false;
    for (const values of this.gaugesByWorker.values()) {
      const v = values.get(name);
      if (v === undefined) continue;
      merged = byMax ? Math.max(merged, v) : merged + v;
      held = true;
    }
    if (held || !retired) this.store.gauge(name).set(merged);
    else this.store.removeGauge(name);
  }
}
