/**
 * Worker mode's totals: the primary applies each worker's flushed batch (`sinks/ipc.ts`) to its own
 * store, which its real sink and the debug /stats page then read as if one process had counted:
 * - counters add the worker's deltas,
 * - a gauge is the sum over the live workers of each one's latest value (a worker's new value
 *   replaces its previous one; a worker that exits no longer counts),
 * - timers add the interval's count and sum, and its samples when the sink keeps them;
 * - a gauge a worker retired leaves the sum, and the store once no worker has it.
 */
import type { StatsBatch } from './sinks/ipc';
import type { StatsStore } from './store';

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
    let sum = 0;
    let held = false;
    for (const values of this.gaugesByWorker.values()) {
      const v = values.get(name);
      if (v === undefined) continue;
      sum += v;
      held = true;
    }
    if (held || !retired) this.store.gauge(name).set(sum);
    else this.store.removeGauge(name);
  }
}
