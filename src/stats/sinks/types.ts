/**
 * What the flusher hands a stats sink. One flush is: `counter()` for every counter that moved
 * (its delta since the previous flush), `gauge()` for every gauge (absolute value), `timer()` for
 * every timer that recorded samples, then `endFlush()`. Names are store names (gostats names, tags
 * as `.__k=v` suffixes); each sink applies EXTRA_TAGS and its own naming.
 */
import type { StatsSinkKind } from '../../settings/settings';
import type { TimerSamples } from '../store';

export type { StatsSinkKind };

export interface StatsSink {
  /**
   * Which sink this is (`disabled`, `logging`, `statsd`, `dogstatsd`, `prometheus`; `ipc` in a
   * worker process, which hands its stats to the primary).
   */
  readonly kind: StatsSinkKind | 'ipc';
  /** Whether this sink sends timer samples (if not, timers keep none). */
  readonly wantsTimerSamples: boolean;
  /**
   * Whether the flush also hands over counters and timers that did not move (delta 0, count 0):
   * `true` for all (the IPC sink announces each new series once, so the primary's /stats lists
   * every series), or a test of a counter's name for the counters alone (Prometheus).
   */
  readonly wantsUnchanged?: boolean | ((counter: string) => boolean);
  /** Opens what the sink needs (the Prometheus listener; a first statsd connection attempt). */
  start(): Promise<void>;
  counter(name: string, delta: number): void;
  gauge(name: string, value: number): void;
  /**
   * A gauge removed from the store (it will not be flushed again; e.g. a limit a reload removed):
   * a push sink sends it a last 0 (statsd keeps a gauge's last value), a pulled one stops exposing it.
   */
  retireGauge?(name: string): void;
  timer(name: string, samples: TimerSamples): void;
  /** The end of one flush: send what was buffered. */
  endFlush(): void;
  /** Sends what is left (bounded wait) and releases sockets and listeners. */
  close(): Promise<void>;
  /** Lines or events dropped so far because they could not be sent. */
  readonly dropped: number;
  /**
   * Called by the flusher with its flush function, for sinks that are read on demand (Prometheus
   * flushes before each scrape so a scrape sees current values). In worker mode the flush first
   * collects fresh batches from the workers, hence the promise.
   */
  attachFlush?(flush: () => void | Promise<void>): void;
}

/** Shortest decimal form without an exponent, as Go's `strconv.FormatFloat(v, 'f', -1, 64)`. */
export function formatNumber(v: number): string {
  const s = String(v);
  if (s.indexOf('e') < 0) return s;
  if (!Number.isFinite(v)) return s;
  // Exponent form: expand it without losing digits.
  const [mant, expPart] = s.split('e');
  const exp = Number(expPart);
  const neg = mant!.startsWith('-');
  const digits = mant!.replace('-', '').replace('.', '');
  const intLen = (mant!.replace('-', '').indexOf('.') < 0 ? mant!.replace('-', '').length : mant!.replace('-', '').indexOf('.')) + exp;
  let out: string;
  if (intLen <= 0) out = '0.' + '0'.repeat(-intLen) + digits;
  else if (intLen >= digits.length) out = digits + '0'.repeat(intLen - digits.length);
  else out = digits.slice(0, intLen) + '.' + digits.slice(intLen);
  return (neg ? '-' : '') + out;
}
