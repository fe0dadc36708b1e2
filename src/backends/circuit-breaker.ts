/**
 * A circuit breaker in front of a remote counter store: after `failures` transient errors in a
 * row the circuit opens and every request fails at once (no connect or timeout wait) for
 * `openMs`; then one probe request is let through, and its success closes the circuit. So a dead
 * store costs Envoy one timeout per open period, not one per request. The state machine is
 * circuit.ts; the Redis store keeps one per node itself instead (src/backends/redis/nodes.ts).
 */
import type { Counter, Gauge } from '../stats/store';
import { StoreError } from '../core/store';
import type { Clock } from '../platform/clock';
import { Circuit } from './circuit';
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
  private readonly circuit: Circuit;

  constructor(
    readonly inner: CounterStore,
    opts: CircuitBreakerOptions,
  ) {
    this.kind = inner.kind;
    this.restrictions = inner.restrictions;
    this.circuit = new Circuit({
      failures: opts.failures,
      openMs: opts.openMs,
      clock: opts.clock,
      onChange: (open, reason) => {
        if (open) opts.opened?.inc();
        opts.openGauge?.set(open ? 1 : 0);
        opts.onStateChange?.(open, reason);
      },
    });
  }

  get isOpen(): boolean {
    return this.circuit.isOpen;
  }

  increment(ops: readonly CounterOp[], nowMs: number, context?: IncrementContext): Promise<number[]> {
    if (!this.circuit.admit()) {
      return Promise.reject(new StoreError(`${this.kind} circuit open after repeated failures: ${this.circuit.reason}`, true));
    }
    let answer: Promise<number[]>;
    try {
      answer = this.inner.increment(ops, nowMs, context);
    } catch (err) {
      // A store that throws instead of rejecting must not leave a probe under way for good.
      answer = Promise.reject(err);
    }
    return answer.then(
      (counts) => {
        this.circuit.succeeded();
        return counts;
      },
      (err: unknown) => {
        if (err instanceof StoreError && err.transient) this.circuit.failed(err.message);
        else this.circuit.answeredWithError();
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
}
