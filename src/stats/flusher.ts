/**
 * The stats flusher: every STATS_FLUSH_INTERVAL it hands the store's series to the one sink in use,
 * as gostats' store flush does upstream:
 * - counters as the increase since the previous flush (counters that did not move are skipped),
 * - gauges as their current value (every gauge, every time); a gauge removed from the store is
 *   retired once (`retireGauge`: statsd sends it a last 0, Prometheus drops its series),
 * - timers as the samples recorded since the previous flush.
 * Generators registered with {@link StatsFlusher.onFlush} run first (e.g. the local cache
 * publishing its gauges). The timer is unref'd; {@link StatsFlusher.stop} flushes once more and
 * closes the sink. With the `disabled` sink nothing runs at all.
 *
 * A sink read on demand (a Prometheus scrape) asks for a flush; `refresh`, when given, runs first
 * (in worker mode: collect fresh batches from the workers) so the answer is current.
 */
import type { Logger } from '../telemetry/logger';
import type { StatsSink } from './sinks/types';
import type { StatsStore } from './store';
import { errorMessage } from '../platform/errors';

/** Counts what a sink could not send (lines or events), so it shows on /stats and in the next flush. */
export const SINK_DROPPED = 'ratelimit.stats.sink_dropped';

export class StatsFlusher {
  private timer: NodeJS.Timeout | undefined;
  private readonly generators: Array<() => void> = [];
  private readonly active: boolean;
  private stopped = false;
  private flushing = false;
  private lastDropped = 0;
  private failureLogged = false;

  constructor(
    private readonly store: StatsStore,
    private readonly sink: StatsSink,
    intervalMs: number,
    private readonly logger: Logger,
    refresh?: () => Promise<void>,
  ) {
    this.active = sink.kind !== 'disabled';
    if (!this.active) return;
    if (sink.wantsTimerSamples) store.enableTimerSamples(true);
    store.trackRetiredGauges();
    sink.attachFlush?.(refresh === undefined ? () => this.flush() : () => refresh().then(() => this.flush()));
    const every = Number.isFinite(intervalMs) && intervalMs >= 1 ? intervalMs : 1;
    this.timer = setInterval(() => this.flush(), every);
    this.timer.unref();
  }

  /** Registers a function run at the start of every flush (to refresh gauges). */
  onFlush(generator: () => void): void {
    this.generators.push(generator);
  }

  /** Sends everything now. Never throws. */
  flush(): void {
    if (!this.active || this.flushing) return;
    this.flushing = true;
    try {
      for (const g of this.generators) {
        try {
          g();
        } catch (err) {
          this.logger.warn(`stats: a flush generator failed: ${errorMessage(err)}`);
        }
      }
      const dropped = this.sink.dropped;
      if (dropped > this.lastDropped) {
        this.store.counter(SINK_DROPPED).inc(dropped - this.lastDropped);
        this.lastDropped = dropped;
      }
      const sink = this.sink;
      const all = sink.wantsUnchanged === true;
      const some = typeof sink.wantsUnchanged === 'function' ? sink.wantsUnchanged : undefined;
      for (const c of this.store.counterList()) {
        const d = c.latch();
        if (d !== 0 || all || (some !== undefined && some(c.name))) sink.counter(c.name, d);
      }
      for (const g of this.store.gaugeList()) sink.gauge(g.name, g.value);
      for (const name of this.store.takeRetiredGauges()) sink.retireGauge?.(name);
      if (sink.wantsTimerSamples) {
        for (const t of this.store.timerList()) {
          const s = t.drain();
          if (s.count > 0 || all) sink.timer(t.name, s);
        }
      }
      sink.endFlush();
      this.failureLogged = false;
    } catch (err) {
      if (!this.failureLogged) {
        this.failureLogged = true;
        this.logger.error(`stats: flush to the ${this.sink.kind} sink failed: ${errorMessage(err)}`);
      }
    } finally {
      this.flushing = false;
    }
  }

  /** Stops the timer, flushes once more and closes the sink (bounded by the sink's own waits). */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
    this.flush();
    try {
      await this.sink.close();
    } catch (err) {
      this.logger.warn(`stats: closing the ${this.sink.kind} sink failed: ${errorMessage(err)}`);
    }
  }
}
