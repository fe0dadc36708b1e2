/**
 * The sink of a worker process in worker mode (WORKERS ≠ 1): each flush becomes one batch handed
 * to `send` (an IPC message to the primary), which adds it into its own store (`../aggregate.ts`)
 * and runs the real sink on the totals. It runs whatever sink the primary has, even `disabled`,
 * because the primary's /stats page reads those totals.
 *
 * Every series is sent once even if it never moves (so the primary's /stats lists it, as a single
 * process's would); afterwards only counters and timers that moved travel, and every gauge.
 *
 * Timers always keep their samples here, so each batch carries the interval's exact count and sum
 * (the primary's /stats shows them); the samples themselves travel only when the primary's sink
 * uses them ({@link IpcStatsSink.forwardTimerSamples}).
 */
import type { TimerSamples } from '../store';
import type { StatsSink } from './types';

/** What one timer recorded during one flush interval. */
export interface TimerBatch {
  readonly name: string;
  readonly count: number;
  readonly sumMs: number;
  /** Kept samples (ms); empty when the primary's sink does not use them. */
  readonly samples: Float64Array;
}

/** One flush of one worker: counter deltas, gauge values, timer intervals. */
export interface StatsBatch {
  readonly counters: Array<[name: string, delta: number]>;
  readonly gauges: Array<[name: string, value: number]>;
  readonly timers: TimerBatch[];
  /** Gauges the worker removed (the primary drops its value from the sum). */
  retired?: string[];
}

const NO_SAMPLES = new Float64Array(0);

export class IpcStatsSink implements StatsSink {
  readonly kind = 'ipc' as const;
  readonly wantsTimerSamples = true;
  readonly wantsUnchanged = true;
  /** Whether batches carry timer samples; the primary says so once it knows its sink. */
  forwardTimerSamples = false;
  private batch: StatsBatch = emptyBatch();
  private readonly pending = new Set<Promise<void>>();
  private droppedEntries = 0;
  /** Series already sent once: unchanged ones need not travel again. */
  private readonly knownCounters = new Set<string>();
  private readonly knownTimers = new Set<string>();

  /** `send` resolves once the batch is handed to the channel and rejects if it cannot be. */
  constructor(private readonly send: (batch: StatsBatch) => Promise<void>) {}

  get dropped(): number {
    return this.droppedEntries;
  }

  async start(): Promise<void> {}

  counter(name: string, delta: number): void {
    if (delta === 0 && this.knownCounters.has(name)) return;
    this.knownCounters.add(name);
    this.batch.counters.push([name, delta]);
  }

  gauge(name: string, value: number): void {
    this.batch.gauges.push([name, value]);
  }

  retireGauge(name: string): void {
    (this.batch.retired ??= []).push(name);
  }

  timer(name: string, t: TimerSamples): void {
    if (t.count === 0 && this.knownTimers.has(name)) return;
    this.knownTimers.add(name);
    // `t.samples` views the timer's buffer, which the next recording overwrites: copy it.
    this.batch.timers.push({ name, count: t.count, sumMs: t.sumMs, samples: this.forwardTimerSamples ? t.samples.slice() : NO_SAMPLES });
  }

  endFlush(): void {
    const batch = this.batch;
    this.batch = emptyBatch();
    if (batch.counters.length === 0 && batch.gauges.length === 0 && batch.timers.length === 0 && batch.retired === undefined) return;
    const sent = this.send(batch).catch(() => {
      this.droppedEntries += batch.counters.length + batch.gauges.length + batch.timers.length;
    });
    this.pending.add(sent);
    void sent.finally(() => this.pending.delete(sent));
  }

  /** Waits until the last batches are handed over (a stopping worker's final flush must arrive). */
  async close(): Promise<void> {
    await Promise.all(this.pending);
  }
}

function emptyBatch(): StatsBatch {
  return { counters: [], gauges: [], timers: [] };
}
