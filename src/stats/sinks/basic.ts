/**
 * The two sinks that send nothing:
 * - `logging` (USE_STATSD, USE_DOG_STATSD and USE_PROMETHEUS all false): upstream's gostats logging
 *   sink. Each flushed value is written to the log at debug level; the counters stay visible on
 *   the debug listener's /stats page either way.
 * - `disabled` (DISABLE_STATS): nothing is flushed at all (the flusher does not even run).
 */
import type { Logger } from '../../telemetry/logger';
import type { TimerSamples } from '../store';
import { TagNamer } from '../tags';
import { formatNumber, type StatsSink } from './types';

export class NullSink implements StatsSink {
  readonly kind = 'disabled' as const;
  readonly wantsTimerSamples = false;
  readonly dropped = 0;
  async start(): Promise<void> {}
  counter(): void {}
  gauge(): void {}
  timer(): void {}
  endFlush(): void {}
  async close(): Promise<void> {}
}

export class LoggingSink implements StatsSink {
  readonly kind = 'logging' as const;
  readonly dropped = 0;
  private readonly namer: TagNamer;

  constructor(
    private readonly logger: Logger,
    extraTags: Readonly<Record<string, string>> = {},
  ) {
    this.namer = new TagNamer(extraTags);
  }

  /** Samples are only worth keeping when they will be logged. */
  get wantsTimerSamples(): boolean {
    return this.logger.enabled('debug');
  }

  async start(): Promise<void> {}

  counter(name: string, delta: number): void {
    this.log('counter', name, formatNumber(delta));
  }

  gauge(name: string, value: number): void {
    this.log('gauge', name, formatNumber(value));
  }

  timer(name: string, t: TimerSamples): void {
    if (!this.logger.enabled('debug')) return;
    for (const v of t.samples) this.log('timer', name, formatNumber(v));
  }

  endFlush(): void {}

  async close(): Promise<void> {}

  private log(type: string, name: string, value: string): void {
    if (this.logger.enabled('debug')) {
      this.logger.debug(`stats: flushing ${type} ${this.namer.resolve(name).serialized} = ${value}`);
    }
  }
}
