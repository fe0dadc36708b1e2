/**
 * What the servers may hold in memory for their clients, per process and shared by every
 * connection of both ports: request bytes held while their request is incomplete
 * (REQUEST_MAX_BUFFERED_BYTES), and answer bytes written for a client that does not take them.
 * Without a process-wide bound, enough connections each within its own bound would still exhaust
 * the heap; with it, what a connection may not hold is refused (a stream or request answered with
 * an error, a peer that does not read closed) instead of growing the process.
 */
import type net from 'node:net';

/** A count of bytes held against a limit. */
export class ByteBudget {
  private heldBytes = 0;
  /**
   * What request bodies may hold: all but the last eighth, which is kept for bytes that must be
   * held whatever the bodies hold (a frame or request head cut by a read). Without it, bodies
   * promised their room fill the budget to the byte, and every connection whose read ends in the
   * middle of a frame is closed (under reconnecting attackers, a reconnect storm).
   */
  readonly bodyLimit: number;

  constructor(readonly limit: number) {
    this.bodyLimit = limit - Math.floor(limit / 8);
  }

  get held(): number {
    return this.heldBytes;
  }

  /** No room left for request bodies. */
  get exhausted(): boolean {
    return this.heldBytes >= this.bodyLimit;
  }

  /** Takes `n` bytes; false, taking nothing, when that would pass the limit. */
  tryTake(n: number): boolean {
    if (this.heldBytes + n > this.limit) return false;
    this.heldBytes += n;
    return true;
  }

  /** Takes `n` bytes for a request body; false, taking nothing, when that would pass {@link bodyLimit}. */
  tryTakeForBody(n: number): boolean {
    if (this.heldBytes + n > this.bodyLimit) return false;
    this.heldBytes += n;
    return true;
  }

  give(n: number): void {
    this.heldBytes -= n;
  }
}

/** The budgets of one process's servers. */
export interface ServerBudgets {
  /** Request bytes held while their requests are incomplete (REQUEST_MAX_BUFFERED_BYTES). */
  readonly requests: ByteBudget;
  /** Answer bytes written for clients that have not taken them yet. */
  readonly answers: ByteBudget;
}

/** Unsent answers the process holds for all slow clients together before it closes the slowest. */
export const ANSWERS_MAX_BYTES = 32 << 20;

export function serverBudgets(requestBytes: number, answerBytes = ANSWERS_MAX_BYTES): ServerBudgets {
  return { requests: new ByteBudget(requestBytes), answers: new ByteBudget(answerBytes) };
}

/** A connection stops reading a client whose unsent answers pass this, until it takes them. */
export const PEER_BACKLOG_HIGH = 64 * 1024;
/** A client that takes none of its unsent answers for this long is closed. */
export const STALLED_PEER_MS = 30_000;

/**
 * The answers written to one socket, and those its client has not taken: what the kernel did not
 * take is counted against the process's answer budget while it waits. A client that does not read
 * costs its connection at most {@link PEER_BACKLOG_HIGH} plus one turn of answers (the connection
 * stops reading it), the process at most the budget, and is closed once it takes nothing for
 * {@link STALLED_PEER_MS}. What waits is read from the socket's buffer, not from write()'s answer,
 * whose high-water mark differs between Node versions (16 KiB in 20, 64 KiB from 22).
 */
export class PeerBacklog {
  private counted = 0;
  private stallTimer: NodeJS.Timeout | undefined;
  private lengthAtCheck = 0;
  /** Called by the socket once a write has gone to the kernel. */
  private readonly written = (): void => {
    if (this.socket.writableLength === 0) this.settle();
  };

  /** `settled`: called once the client has taken everything it was behind on; `stalled`: before a client that took nothing is closed. */
  constructor(
    private readonly socket: net.Socket,
    private readonly budget: ByteBudget,
    private readonly settled: () => void = () => {},
    private readonly stalledMs = STALLED_PEER_MS,
    private readonly stalled: () => void = () => {},
  ) {
    socket.once('close', () => this.settle());
  }

  /** True while the client has answers it has not taken. */
  get behind(): boolean {
    return this.counted > 0;
  }

  /** Writes `chunk`; false when the process cannot hold this client's backlog (the caller closes the connection). */
  write(chunk: Buffer | string): boolean {
    this.socket.write(chunk, this.written);
    const length = this.socket.writableLength;
    if (length === 0 && this.counted === 0) return true;
    const more = length - this.counted;
    if (more > 0 && !this.budget.tryTake(more)) return false;
    if (more < 0) this.budget.give(-more);
    this.counted = length;
    if (this.stallTimer === undefined && length > 0) this.watchStall();
    return true;
  }

  private watchStall(): void {
    this.lengthAtCheck = this.socket.writableLength;
    this.stallTimer = setTimeout(() => {
      this.stallTimer = undefined;
      const length = this.socket.writableLength;
      if (this.counted === 0 || this.socket.destroyed) return;
      // Progress (the client took some) earns another period; none closes the connection.
      if (length < this.lengthAtCheck) this.watchStall();
      else {
        this.stalled();
        this.socket.destroy();
      }
    }, this.stalledMs);
    this.stallTimer.unref();
  }

  /** Everything was taken, or the socket is gone: the bytes go back to the budget. */
  private settle(): void {
    const was = this.counted;
    if (was > 0) this.budget.give(was);
    this.counted = 0;
    clearTimeout(this.stallTimer);
    this.stallTimer = undefined;
    if (was > 0) this.settled();
  }
}
