/**
 * One circuit: the state machine of a circuit breaker, shared by the breaker in front of a whole
 * store (circuit-breaker.ts) and the Redis store's circuit per node (a single or sentinel
 * instance is one node, a cluster has one per master).
 *
 * - Closed: requests go. `failures` transient failures in a row open it (0: never by counting).
 * - Open: requests fail at once for `openMs`; then one request is let through as the probe
 *   (`admit`), and only one at a time. Its success closes the circuit, its failure opens it for
 *   another `openMs`.
 * - A state the store follows (a node's connection lost, or ready again) opens or closes it at
 *   once (`openNow`, `closeNow`), without waiting for failures to add up.
 * - `onChange` is told each change once (for the log line and the stats).
 */
import type { Clock } from '../platform/clock';

export interface CircuitOptions {
  /** Consecutive transient failures that open the circuit; 0: failures never open it. */
  failures: number;
  openMs: number;
  clock: Clock;
  onChange?: ((open: boolean, reason: string) => void) | undefined;
}

export class Circuit {
  private consecutive = 0;
  private openUntilMs = 0;
  private probing = false;
  private openNowState = false;
  /** Why it opened (the failure's text, or the state that opened it), kept while it stays open. */
  reason = '';

  constructor(private readonly opts: CircuitOptions) {}

  get isOpen(): boolean {
    return this.openNowState;
  }

  /**
   * Whether a request may go now, without changing anything: the circuit is closed, or open with
   * its probe due and no probe under way.
   */
  wouldAdmit(): boolean {
    if (!this.openNowState) return true;
    return !this.probing && this.opts.clock.nowMs() >= this.openUntilMs;
  }

  /** The same, and a request let through while open becomes the probe. */
  admit(): boolean {
    if (!this.openNowState) return true;
    if (!this.wouldAdmit()) return false;
    this.probing = true;
    return true;
  }

  /** A request (or a batch of them) was answered. */
  succeeded(): void {
    this.consecutive = 0;
    this.probing = false;
    if (this.openNowState) this.setClosed('a probe request succeeded');
  }

  /** A transient failure (lost connection, timeout). */
  failed(reason: string): void {
    this.probing = false;
    if (this.opts.failures <= 0) return;
    this.consecutive++;
    if (this.openNowState || this.consecutive >= this.opts.failures) this.openFor(reason);
  }

  /** A failure that says nothing about the store (a reply error): only ends a probe. */
  answeredWithError(): void {
    this.probing = false;
  }

  /**
   * A state followed elsewhere says the node cannot answer: open at once, with the first probe
   * due after `probeAfterMs` (default the open period).
   */
  openNow(reason: string, probeAfterMs = this.opts.openMs): void {
    this.probing = false;
    this.openFor(reason, probeAfterMs);
  }

  /** A state followed elsewhere says the node answers again: close at once. */
  closeNow(reason: string): void {
    this.consecutive = 0;
    this.probing = false;
    if (this.openNowState) this.setClosed(reason);
  }

  private openFor(reason: string, ms = this.opts.openMs): void {
    this.openUntilMs = this.opts.clock.nowMs() + ms;
    if (!this.openNowState) {
      this.reason = reason;
      this.openNowState = true;
      this.opts.onChange?.(true, reason);
    }
  }

  private setClosed(reason: string): void {
    this.openNowState = false;
    this.opts.onChange?.(false, reason);
  }
}
