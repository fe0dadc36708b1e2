/**
 * Receive-side flow control of one connection (RFC 9113 5.2, 6.9): what the peer may still send,
 * and when the window it used is given back. Bytes the application consumed at once, or that were
 * dropped, are given back; bytes held in stream bodies (a request still arriving) are given back
 * only while the connection holds at most `heldLimit` of them and the process's request budget
 * is not spent. Past that the peer's window shrinks by what it sends, so a connection never holds
 * more than `heldLimit` plus one window, however many streams it opens (Go's x/net/http2 holds at
 * most 1 MiB per connection the same way), and while the process is full, clients wait instead
 * of sending what could only be refused.
 */
import type { ByteBudget } from '../byte-budget';
import { DEFAULT_WINDOW } from './frames';

/** Window is given back in WINDOW_UPDATEs of at least this (half the initial window)... */
export const WINDOW_UPDATE_THRESHOLD = DEFAULT_WINDOW >> 1;

export class ConnectionInflow {
  /** What the peer may still send on the connection. */
  private window = DEFAULT_WINDOW;
  /** Body bytes held in the connection's streams. */
  private heldBytes = 0;
  /** Of those, the bytes whose window was not given back. */
  private unreturned = 0;
  /** Window to give back in the next WINDOW_UPDATE. */
  private pending = 0;

  constructor(
    private readonly heldLimit: number,
    private readonly budget: ByteBudget,
  ) {}

  /** A DATA frame of `n` octets (padding included) arrives: false when it exceeds the window. */
  receive(n: number): boolean {
    this.window -= n;
    return this.window >= 0;
  }

  /**
   * After the frame's bytes were handled: of its `n` octets, `heldDelta` more are held by its
   * stream than before (negative when the stream gave back older bytes).
   */
  settle(n: number, heldDelta: number): void {
    if (heldDelta > 0) {
      this.pending += n - heldDelta;
      this.heldBytes += heldDelta;
      this.unreturned += heldDelta;
    } else {
      this.pending += n;
      if (heldDelta < 0) this.releaseHeld(-heldDelta);
    }
    this.rebalance();
  }

  /** Held bytes are no longer held (consumed, or their stream closed). */
  release(n: number): void {
    if (n <= 0) return;
    this.releaseHeld(n);
    this.rebalance();
  }

  /** The increment of the WINDOW_UPDATE to send now, 0 when none is due. */
  takeUpdate(): number {
    const pending = this.pending;
    if (pending === 0 || (pending < WINDOW_UPDATE_THRESHOLD && this.window >= WINDOW_UPDATE_THRESHOLD)) return 0;
    this.pending = 0;
    this.window += pending;
    return pending;
  }

  private releaseHeld(n: number): void {
    this.heldBytes -= n;
    if (this.unreturned > this.heldBytes) {
      this.pending += this.unreturned - this.heldBytes;
      this.unreturned = this.heldBytes;
    }
  }

  /** Gives back the window of held bytes while the held bytes already given back stay within the limit. */
  private rebalance(): void {
    if (this.unreturned === 0 || this.budget.exhausted) return;
    const room = this.heldLimit - (this.heldBytes - this.unreturned);
    if (room <= 0) return;
    const n = Math.min(room, this.unreturned);
    this.unreturned -= n;
    this.pending += n;
  }
}
