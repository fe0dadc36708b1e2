/**
 * One request/response stream of a server connection: its state (RFC 9113 5.1), the request body
 * it holds, and what the application does with it.
 *
 * States, as a server that answers requests sees them (no server push, so no reserved states):
 *
 *            HEADERS             END_STREAM from the client
 *   idle ──────────────► open ─────────────────────────────► half-closed (remote)
 *                          │                                         │
 *                          │ we end our side first: RST_STREAM       │ we end our side,
 *                          │ NO_ERROR cuts the rest (RFC 9113 8.1)   │ or either side resets
 *                          ▼                                         ▼
 *                        closed ◄────────────────────────────────────┘
 *
 * A server that ends its side first always resets the rest, so half-closed (local) is never held.
 * Beside the state, the response moves from none to started (HEADERS sent) to ending (trailers
 * queued behind flow control); its end closes the stream.
 */
import type { ByteBudget } from '../byte-budget';
import { HeldBody } from '../held-body';
import { ErrorCode, STREAM_WINDOW } from './frames';

export const enum StreamState {
  Open,
  HalfClosedRemote,
  Closed,
}

export const enum ResponseState {
  None,
  Started,
  Ending,
}

/** Why a stream must end before its application answered it. */
export type AbortReason = 'deadline' | 'body-timeout' | 'buffer-full';

/** What the application does with one stream. */
export interface StreamCall {
  /** Request body bytes were added to `stream.body`. */
  data(): void;
  /** The client has sent its whole request. */
  ended(): void;
  /**
   * The stream must end now: its deadline passed, its request did not arrive whole within the
   * body timeout, or the process cannot hold its bytes. The call answers with its status; a call
   * that does not is reset.
   */
  abort(reason: AbortReason): void;
  /** The stream is over: answered and ended, reset, or its connection closed. */
  closed(): void;
}

/** What the connection asks of the stream's owner (the connection itself). */
export interface StreamOwner {
  writeHeaders(stream: H2Stream, block: Buffer, endStream: boolean): void;
  writeAnswer(stream: H2Stream, headers: Buffer, payload: Buffer, trailers: Buffer): void;
  writeData(stream: H2Stream, payload: Buffer | undefined, trailers: Buffer | undefined): void;
  resetStream(stream: H2Stream, code: ErrorCode): void;
  /** The application gave back held body bytes (`take`), or changed how many it accepts. */
  bodyChanged(stream: H2Stream): void;
  /** A streaming call's message arrived whole (the connection is serving its client). */
  requestArrived(): void;
  readonly peerInitialWindow: number;
  /** What the client may send on a new stream before we open its window. */
  readonly streamRecvWindow: number;
}

/** One request/response exchange. */
export class H2Stream {
  state = StreamState.Open;
  response = ResponseState.None;
  /** The request headers, names in lower case; repeated fields joined with ", " (cookie "; "). */
  headers: Record<string, string> = NO_HEADERS;
  readonly body: HeldBody;
  /** The held bytes the connection's flow control counts for this stream. */
  heldCounted = 0;
  /** Request body bytes received in all (taken or not). */
  received = 0;
  /** What the application does with the stream (set when it opens). */
  call: StreamCall = NO_CALL;
  /** A stream of messages that lives as long as the client wants (health Watch, RLQS). */
  longLived = false;
  /** When the application must have answered (ms on `performance.now()`); 0 = no deadline. */
  deadlineAt = 0;
  /** When the body timeout started counting: the stream opened, or (long-lived) a message began. */
  waitingSince = 0;
  timer: NodeJS.Timeout | undefined = undefined;
  timerAt = 0;
  /** The most body bytes the application holds at once: the stream's window is opened up to it. */
  bodyLimit = STREAM_WINDOW;
  /** What the client may still send on the stream. */
  recvWindow: number;
  /** What we may still send. */
  sendWindow: number;
  /** DATA waiting for flow-control window, and the trailers to send after it. */
  queued: Buffer[] | undefined = undefined;
  queuedTrailers: Buffer | undefined = undefined;

  constructor(
    readonly owner: StreamOwner,
    readonly id: number,
    budget: ByteBudget,
  ) {
    this.sendWindow = owner.peerInitialWindow;
    this.recvWindow = owner.streamRecvWindow;
    this.body = new HeldBody(budget);
  }

  get closed(): boolean {
    return this.state === StreamState.Closed;
  }

  /** The client has ended its side. */
  get remoteEnded(): boolean {
    return this.state !== StreamState.Open;
  }

  /** Live and not answered yet. */
  get open(): boolean {
    return this.state !== StreamState.Closed && this.response === ResponseState.None;
  }

  /** Response DATA written but not yet sent for lack of flow-control window. */
  get unsent(): number {
    return this.queued?.length ?? 0;
  }

  /** The first `n` held body bytes (a message), no longer held; valid until the callback returns. */
  take(n: number): Buffer {
    const out = this.body.take(n);
    this.owner.bodyChanged(this);
    return out;
  }

  /** A streaming call's message arrived whole: the connection is in use (admission's idle bounds). */
  messageArrived(): void {
    this.owner.requestArrived();
  }

  /** The most body bytes the application will hold at once (the stream window follows it). */
  acceptBody(limit: number): void {
    this.bodyLimit = limit;
    this.owner.bodyChanged(this);
  }

  /** Ends the stream with RST_STREAM ENHANCE_YOUR_CALM: for a peer that cannot take trailers (it does not read). */
  reset(): void {
    this.owner.resetStream(this, ErrorCode.ENHANCE_YOUR_CALM);
  }

  /** Response headers (an HPACK block); `endStream` makes it a headers-only answer. */
  respond(block: Buffer, endStream: boolean): void {
    this.owner.writeHeaders(this, block, endStream);
  }

  /** One whole answer: headers, one DATA payload, trailers, in one write. */
  answer(headers: Buffer, payload: Buffer, trailers: Buffer): void {
    this.owner.writeAnswer(this, headers, payload, trailers);
  }

  /** More response body (after {@link respond}). */
  write(payload: Buffer): void {
    this.owner.writeData(this, payload, undefined);
  }

  /** The trailers that end the response. */
  end(trailers: Buffer): void {
    this.owner.writeData(this, undefined, trailers);
  }
}

const NO_HEADERS: Record<string, string> = Object.freeze(Object.create(null) as Record<string, string>);

/** The call of a stream its application answered at once, or has not been given one. */
export const NO_CALL: StreamCall = Object.freeze({
  data() {},
  ended() {},
  abort() {},
  closed() {},
});
