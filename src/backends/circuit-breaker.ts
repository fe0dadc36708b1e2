/**
 * A circuit breaker in front of a remote counter store: after `failures` transient errors in a
 * row the circuit opens and every request fails at once (no connect or timeout wait) for
 * `openMs`; then one probe request is let through, and its success closes the circuit. So a dead
 * Redis costs Envoy one REDIS_TIMEOUT per open period, not one per request.
 */
import type { Counter, Gauge } from '../stats/store';
import { StoreError } from '../core/store';
import type { Clock } from '../platform/clock';
import type { CounterOp, CounterStore, IncrementContext } from '../core/store';

export interface CircuitBreakerOptions {
  /** Consecutive transient failures that open the circuit; 0 disables the breaker. */
  failures: number;
  openMs: number;
  clock: Clock;
  /** Counts each time the circuit opens. */
  opened?: Counter;
  /** 1 while open, 0 while closed. */
  openGauge?: Gauge;
  onStateChange?: (open: boolean, reason: string) => void;
}

export class CircuitBreakerStore implements CounterStore {
  readonly kind: string;
  readonly restrictions: CounterStore['restrictions'];
  private consecutive = 0;
  private openUntilMs = 0;
  private open = false;
  private probing = false;
  private lastError = '';

  constructor(
    readonly inner: CounterStore,
    private readonly opts: CircuitBreakerOptions,
  ) {
    this.kind = inner.kind;
    this.restrictions = inner.restrictions;
  }

  get isOpen(): boolean {
    return this.open;
  }

  increment(ops: readonly CounterOp[], nowMs: number, context?: IncrementContext): Promise<number[]> {
    if (this.open) {
      if (this.probing || this.opts.clock.nowMs() < this.openUntilMs) {
        return Promise.reject(new StoreError(`${this.kind} circuit open after repeated failures: ${this.lastError}`, true));
      }
      this.probing = true;
    }
    return this.inner.increment(ops, nowMs, context).then(
      (counts) => {
        this.succeeded();
        return counts;
      },
      (err: unknown) => {
        this.failed(err);
        throw err;
      },
    );
  }

  isHealthy(): boolean {
    return this.inner.isHealthy();
  }

  close(): Promise<void> {
    return this.inner.close();
  }

  private succeeded(): void {
    this.consecutive = 0;
    this.probing = false;
    if (this.open) {
      this.open = false;
      this.opts.openGauge?.set(0);
      this.opts.onStateChange?.(false, 'a probe request succeeded');
    }
  }

  private failed(err: unknown): void {
    this.probing = false;
    if (!(err instanceof StoreError) || !err.transient || this.opts.failures <= 0) return;
    this.lastError = err.message;
    this.consecutive++;
    if (this.open || this.consecutive >= this.opts.failures) {
      this.openUntilMs = this.opts.clock.nowMs() + this.opts.openMs;
      if (!this.open) {
        this.open = true;
        this.opts.opened?.inc();
        this.opts.openGauge?.set(1);
        this.opts.onStateChange?.(true, err.message);
      }
    }
  }
}
