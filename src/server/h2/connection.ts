/**
 * The server side of one HTTP/2 connection (RFC 9113) on a socket, for gRPC calls: frames parsed
 * straight from each socket read, header blocks decoded with HPACK, and every frame a read
 * produced written back in one socket write. The parts live beside it: the stream and its states
 * (stream.ts), the stream table (streams.ts), receive flow control (flow.ts), the output buffer
 * (writer.ts), request header rules (request-headers.ts) and the abuse budgets (budgets.ts).
 *
 * Every cost a client can cause is bounded, per stream, per connection and per process:
 * - request bodies: a stream's window opens only as far as the application accepts (a unary
 *   message: its declared length) and only against storage taken from the process's request
 *   budget, a connection holds at most `maxHeldBodyBytes` (its window is not given back past
 *   that), the process at most the request budget (a stream whose bytes it cannot hold is
 *   aborted), and a request must arrive whole within `bodyTimeoutMs`;
 * - header blocks: frames above 16 KiB and blocks above the header list limit end the connection,
 *   a larger decoded list is answered 431, and decoding work beyond what requests need comes out
 *   of a budget (HPACK bombs);
 * - frames that carry no request, and resets a client sends or provokes, come out of budgets
 *   (floods, rapid reset);
 * - output: a client that does not read stops being read, is closed once it leaves 1000
 *   acknowledgements unread (as nghttp2) or takes nothing for 30 s, and the process holds a
 *   bounded total of unsent answers (byte-budget.ts);
 * - the event loop: a connection handles at most 16 KiB of frames per loop turn, then waits for
 *   the next turn, so one client's flood cannot hold the others' answers back.
 *
 * Protocol errors are values (errors.ts): each frame handler returns a ConnectionError or a
 * StreamError, or undefined when the frame was fine, and `handleError` is the one place that acts
 * on them (GOAWAY and the end of the connection; RST_STREAM, counted against the reset budget).
 * The frame loop hands it what a frame returned, and goes on with the next frame after a stream
 * error. Errors found outside a frame (a read the request budget cannot hold) go to it too.
 */
import type { Socket } from 'node:net';
import type { AdmittedConnection, BudgetName } from '../admission';
import { PEER_BACKLOG_HIGH, PeerBacklog, type ServerBudgets } from '../byte-budget';
import { TokenBucket } from '../../platform/token-bucket';
import { CONTROL_FRAMES, HEADER_WORK, RESETS } from './budgets';
import { ConnectionInflow } from './flow';
import {
  CONNECTION_PREFACE,
  DEFAULT_MAX_FRAME_SIZE,
  DEFAULT_WINDOW,
  STREAM_WINDOW,
  ErrorCode,
  Flag,
  FRAME_HEADER_BYTES,
  FrameType,
  MAX_FRAME_SIZE_LIMIT,
  MAX_WINDOW,
  Setting,
} from './frames';
import { ConnectionError, type H2Error, StreamError } from './errors';
import { encodeHeaderBlock, HpackDecoder, HpackError } from './hpack';
import { requestHeaders, validTrailers } from './request-headers';
import { type AbortReason, H2Stream, NO_CALL, ResponseState, type StreamCall, type StreamOwner, StreamState } from './stream';
import { StreamTable } from './streams';
import { FrameWriter } from './writer';
import { MAX_TIMER_MS } from '../../platform/clock';
import { EMPTY_BUFFER } from '../../platform/bytes';

/** What the application does with the streams of a connection. */
export interface StreamHandler {
  /** A request's headers have arrived: the call that handles the stream (undefined when it was answered at once). */
  open(stream: H2Stream): StreamCall | undefined;
}

export interface ConnectionOptions {
  /** SETTINGS_MAX_CONCURRENT_STREAMS: more open streams are refused (REFUSED_STREAM). */
  maxConcurrentStreams: number;
  /** Largest request header list (RFC 7541 sizes); a larger one is answered 431. */
  maxHeaderListBytes: number;
  /** A connection silent for this long is pinged (0 = never). */
  keepaliveTimeMs: number;
  /** ...and closed when the ping is not answered within this. */
  keepaliveTimeoutMs: number;
  /** A request must arrive whole within this (a long-lived stream: each message); 0 = no limit. */
  bodyTimeoutMs: number;
  /** Request body bytes one connection holds before the window of more is not given back. */
  maxHeldBodyBytes: number;
  /** The process's budgets, shared by every connection. */
  budgets: ServerBudgets;
}

/**
 * Frame bytes one connection may handle in a loop turn before it lets the others run (and one
 * frame more). Smaller turns also answer sooner: h2load with 1000 calls in flight measured 10-40 %
 * more calls a second at 16 KiB than at 64 KiB (bench/README.md, "Attacks").
 */
export const TURN_BYTES = 16 * 1024;
/** A stream's window is opened in updates of at least this, unless it is nearly shut. */
const STREAM_UPDATE_THRESHOLD = STREAM_WINDOW >> 1;
/** Acknowledgements (of SETTINGS and PING) left unread before the connection is closed: nghttp2's bound. */
const MAX_QUEUED_ACKS = 1000;

/** The answer to a request whose header list is too large. */
const HEADERS_TOO_LARGE = encodeHeaderBlock([
  [':status', '431'],
  ['content-type', 'application/grpc'],
  ['grpc-status', '8'],
  ['grpc-message', 'request header list too large'],
]);


/** Why reading is paused: bits, so that one reason ending does not resume what another paused. */
const enum Paused {
  Backlog = 1,
  Turn = 2,
}

// One loop turn is the time between two setImmediate callbacks: libuv reads a socket up to 32
// times in a turn, so a connection counts what it handled in the current turn, not per read.
// Module-wide on purpose: one setImmediate a turn tells every connection, not one per connection.
let turnNumber = 0;
let turnCounting = false;
function currentTurn(): number {
  if (!turnCounting) {
    turnCounting = true;
    setImmediate(nextTurn);
  }
  return turnNumber;
}
function nextTurn(): void {
  turnNumber++;
  turnCounting = false;
}

/** One HTTP/2 connection. */
export class H2Connection implements StreamOwner, AdmittedConnection {
  private readonly streams = new StreamTable();
  private readonly decoder = new HpackDecoder();
  private readonly fields: string[] = [];
  private readonly writer = new FrameWriter();
  private readonly inflow: ConnectionInflow;
  private readonly backlog: PeerBacklog;
  /** Bytes received and not yet handled (an incomplete frame, or the rest of a turn). */
  private input: Buffer = EMPTY_BUFFER;
  private prefaceSeen = false;
  private settingsSeen = false;
  /** A header block being received in CONTINUATION frames. */
  private continuationOf = 0;
  private headerParts: Buffer[] = [];
  private headerBytes = 0;
  private headerEndStream = false;
  private headerDependency = 0;
  /** What we may still send on the connection. */
  private sendWindow = DEFAULT_WINDOW;
  private readonly blocked = new Set<H2Stream>();
  /** Streams whose window waits for room in the request budget. */
  private readonly waitingForRoom = new Set<H2Stream>();
  peerInitialWindow = DEFAULT_WINDOW;
  /** What the client may send on a new stream: the default until it acknowledges our SETTINGS. */
  streamRecvWindow = DEFAULT_WINDOW;
  private peerMaxFrameSize = DEFAULT_MAX_FRAME_SIZE;
  private readonly resets = new TokenBucket(RESETS.burst, RESETS.perSecond);
  private readonly controlFrames = new TokenBucket(CONTROL_FRAMES.burst, CONTROL_FRAMES.perSecond);
  private readonly headerWork = new TokenBucket(HEADER_WORK.burst, HEADER_WORK.perSecond);
  /** Bytes charged to the request budget for what one read left to the next. */
  private carried = 0;
  private turn = -1;
  private turnBytes = 0;
  private paused = 0;
  /** Acknowledgements gathered for the next write, and those written that the client has not taken. */
  private acksGathered = 0;
  private queuedAcks = 0;
  private flushQueued = false;
  private reading = false;
  /** When the current read began (performance.now()). */
  private readAt = 0;
  /** The stream whose DATA is being handled (its held bytes are settled afterwards). */
  private inData: H2Stream | undefined;
  /** Streams that may need a timer, gathered while a read is handled. */
  private touched: H2Stream[] = [];
  /** GOAWAY sent: no new streams; the connection ends when the last one does. */
  private closing = false;
  private dead = false;
  private activity = false;
  private readonly timers: NodeJS.Timeout[] = [];
  /** When the last request arrived whole (a unary call's end of stream, a streaming call's message). */
  lastRequestAt = 0;
  /** The keepalive PING in flight: its payload, and the timer that destroys the connection without its ACK. */
  private pingPayload: Buffer | undefined;
  private pingDeadline: NodeJS.Timeout | undefined;

  constructor(
    private readonly socket: Socket,
    private readonly handler: StreamHandler,
    private readonly options: ConnectionOptions,
    /** Told of each budget the client goes past (admission counts and logs it). */
    private readonly exceeded: (budget: BudgetName) => void = () => {},
  ) {
    this.inflow = new ConnectionInflow(options.maxHeldBodyBytes, options.budgets.requests);
    this.backlog = new PeerBacklog(
      socket,
      options.budgets.answers,
      () => {
        this.queuedAcks = 0;
        this.unpause(Paused.Backlog);
      },
      undefined,
      () => exceeded('slow_reader'),
    );
    socket.on('data', (chunk: Buffer) => this.onData(chunk));
    socket.on('close', () => this.onClose());
    socket.on('error', () => socket.destroy());
    this.writer.settings(options.maxConcurrentStreams, STREAM_WINDOW, options.maxHeaderListBytes);
    this.startKeepalive();
    this.flush();
  }

  // ---- what admission sees (admission.ts applies the handshake, first-request and idle bounds) ----

  /** Until the preface and the first SETTINGS have arrived. */
  get handshaking(): boolean {
    return !this.settingsSeen;
  }

  get callsInFlight(): number {
    return this.streams.size;
  }

  /** A request (or a streaming call's message) arrived whole during the current read. */
  requestArrived(): void {
    this.lastRequestAt = this.readAt;
  }

  /** Closes at once with GOAWAY, written before the socket closes (eviction, a deadline). */
  shed(reason: string): void {
    if (this.dead) return;
    this.writer.goaway(this.streams.lastId, ErrorCode.NO_ERROR, reason);
    if (this.socket.writable) this.socket.write(this.writer.take());
    this.destroy();
  }

  // ---- reading ----

  private onData(chunk: Buffer): void {
    if (this.dead) return;
    this.activity = true;
    const held = this.input;
    if (held.length === 0) this.input = chunk;
    else if (this.prefaceSeen && (this.paused & Paused.Turn) === 0) {
      // What the last read left is the start of one frame (the rest of a turn is read before the
      // socket is): that frame is completed on its own, and the chunk read in place, not copied.
      const need = frameRemainder(held, chunk);
      if (need >= 0) {
        this.input = chunk.subarray(need);
        this.readFrames(Buffer.concat([held, chunk.subarray(0, need)]));
        return;
      }
      this.input = Buffer.concat([held, chunk]);
    } else this.input = Buffer.concat([held, chunk]);
    if ((this.paused & Paused.Turn) === 0) this.readFrames();
  }

  /** What the last read left is being read now: not held any more (chargeCarried counts what is left after). */
  private uncharge(): void {
    this.options.budgets.requests.give(this.carried);
    this.carried = 0;
  }

  /**
   * Handles the frames of `input`, up to this turn's share; the rest waits for the next turn.
   * `first`: one whole frame, read before `input`.
   */
  private readFrames(first?: Buffer): void {
    let buf = this.input;
    let pos = 0;
    if (!this.prefaceSeen) {
      const n = Math.min(buf.length, CONNECTION_PREFACE.length);
      if (buf.compare(CONNECTION_PREFACE, 0, n, 0, n) !== 0) {
        this.handleError(new ConnectionError(ErrorCode.PROTOCOL_ERROR, 'not an HTTP/2 connection preface'));
        return;
      }
      if (n < CONNECTION_PREFACE.length) return;
      this.prefaceSeen = true;
      buf = buf.subarray(n);
    }
    this.uncharge();
    const turn = currentTurn();
    if (turn !== this.turn) {
      this.turn = turn;
      this.turnBytes = 0;
    }
    this.reading = true;
    this.readAt = performance.now();
    if (first !== undefined) {
      this.turnBytes += first.length;
      const error = this.onFrame(first[3]!, first[4]!, first.readUInt32BE(5) & 0x7fffffff, first, FRAME_HEADER_BYTES, first.length);
      if (error !== undefined && this.handleError(error)) return;
    }
    const end = buf.length;
    while (end - pos >= FRAME_HEADER_BYTES) {
      if (this.turnBytes >= TURN_BYTES) {
        this.pause(Paused.Turn);
        setImmediate(continueReading, this);
        break;
      }
      const length = (buf[pos]! << 16) | (buf[pos + 1]! << 8) | buf[pos + 2]!;
      if (length > DEFAULT_MAX_FRAME_SIZE) {
        this.handleError(new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, `a frame of ${length} bytes, above SETTINGS_MAX_FRAME_SIZE`));
        return;
      }
      const payload = pos + FRAME_HEADER_BYTES;
      if (end - payload < length) break;
      this.turnBytes += FRAME_HEADER_BYTES + length;
      const type = buf[pos + 3]!;
      const flags = buf[pos + 4]!;
      const id = buf.readUInt32BE(pos + 5) & 0x7fffffff;
      const error = this.onFrame(type, flags, id, buf, payload, payload + length);
      // Only handleError ends the connection during a read (no callback of a frame destroys it).
      if (error !== undefined && this.handleError(error)) return;
      pos = payload + length;
    }
    this.input = pos === end ? EMPTY_BUFFER : buf.subarray(pos);
    this.reading = false;
    const overBudget = this.chargeCarried();
    if (overBudget !== undefined) {
      this.handleError(overBudget);
      return;
    }
    for (const stream of this.waitingForRoom) this.openStreamWindow(stream);
    this.armTimers();
    this.flush();
  }

  /**
   * What a read leaves for the next because the client has not sent the rest (an unfinished
   * frame, a header block in CONTINUATIONs) is request bytes held too: copied, so it does not pin
   * the socket read, and charged to the process's budget; a connection error when the budget
   * cannot hold it. The rest of a read left for the next turn waits for the server, not the
   * client: it is not charged (at most one socket read per connection, for one turn).
   */
  private chargeCarried(): ConnectionError | undefined {
    const waitingForClient = (this.paused & Paused.Turn) === 0;
    if (waitingForClient && this.input.length > 0) this.input = Buffer.from(this.input);
    const carried = (waitingForClient ? this.input.length : 0) + (this.continuationOf !== 0 ? this.headerBytes : 0);
    if (!this.options.budgets.requests.tryTake(carried)) {
      this.exceeded('request_bytes');
      return new ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, 'the server holds too many incomplete requests');
    }
    this.carried = carried;
    return undefined;
  }

  /** The next turn: the rest of the input, then the socket again. */
  continueReading(): void {
    if (this.dead) return;
    this.paused &= ~Paused.Turn;
    if (this.input.length > 0) this.readFrames();
    if (this.paused === 0 && !this.dead) this.socket.resume();
  }

  private pause(reason: Paused): void {
    if (this.paused === 0) this.socket.pause();
    this.paused |= reason;
  }

  private unpause(reason: Paused): void {
    if ((this.paused & reason) === 0) return;
    this.paused &= ~reason;
    if (this.paused === 0 && !this.dead) this.socket.resume();
  }

  /** Handles one frame: the protocol error it makes, if any (handleError acts on it). */
  private onFrame(type: number, flags: number, id: number, buf: Buffer, start: number, end: number): H2Error | undefined {
    if (!this.settingsSeen && type !== FrameType.SETTINGS) {
      return new ConnectionError(ErrorCode.PROTOCOL_ERROR, 'the first frame is not SETTINGS');
    }
    if (this.continuationOf !== 0 && (type !== FrameType.CONTINUATION || id !== this.continuationOf)) {
      return new ConnectionError(ErrorCode.PROTOCOL_ERROR, 'a header block interrupted by another frame');
    }
    switch (type) {
      case FrameType.DATA:
        return this.onDataFrame(flags, id, buf, start, end);
      case FrameType.HEADERS:
        return this.onHeadersFrame(flags, id, buf, start, end);
      case FrameType.CONTINUATION:
        return this.onContinuation(flags, id, buf, start, end);
      case FrameType.PRIORITY:
        return this.spendControl() ?? this.onPriority(id, buf, start, end);
      case FrameType.RST_STREAM:
        return this.onResetFrame(id, start, end);
      case FrameType.SETTINGS:
        return this.spendControl() ?? this.onSettings(flags, id, buf, start, end);
      case FrameType.PUSH_PROMISE:
        return new ConnectionError(ErrorCode.PROTOCOL_ERROR, 'PUSH_PROMISE from a client');
      case FrameType.PING:
        return this.spendControl() ?? this.onPing(flags, id, buf, start, end);
      case FrameType.GOAWAY:
        if (id !== 0) return new ConnectionError(ErrorCode.PROTOCOL_ERROR, 'GOAWAY on a stream');
        this.close();
        return undefined;
      case FrameType.WINDOW_UPDATE:
        return this.spendControl() ?? this.onWindowUpdate(id, buf, start, end);
      default:
        return this.spendControl(); // unknown frame types are ignored (RFC 9113 4.1), but not for free
    }
  }

  /** One frame that carries no request; a connection error past the budget. */
  private spendControl(): ConnectionError | undefined {
    if (this.controlFrames.spend(1, this.readAt)) return undefined;
    this.exceeded('control_frames');
    return new ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, 'too many frames without requests');
  }

  private onDataFrame(flags: number, id: number, buf: Buffer, start: number, end: number): H2Error | undefined {
    if (id === 0) return new ConnectionError(ErrorCode.PROTOCOL_ERROR, 'DATA on stream 0');
    const length = end - start;
    // The whole frame counts against the connection's window, whatever becomes of the stream.
    if (!this.inflow.receive(length)) return new ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, 'DATA beyond the connection window');
    const dataEnd = unpadded(flags, buf, start, end);
    if (typeof dataEnd !== 'number') return dataEnd;
    const dataStart = (flags & Flag.PADDED) !== 0 ? start + 1 : start;
    const stream = this.streams.get(id);
    if (stream === undefined || stream.remoteEnded) {
      this.inflow.settle(length, 0);
      if (stream === undefined && this.streams.isIdle(id)) return new ConnectionError(ErrorCode.PROTOCOL_ERROR, 'DATA on an idle stream');
      // A stream we reset lately: the client sent this before it knew. Any other: closed (RFC 9113 5.1).
      if (stream !== undefined || !this.streams.wasReset(id)) return new StreamError(id, ErrorCode.STREAM_CLOSED);
      return undefined;
    }
    stream.recvWindow -= length;
    if (stream.recvWindow < 0) {
      this.inflow.settle(length, 0);
      return new StreamError(id, ErrorCode.FLOW_CONTROL_ERROR);
    }
    const endStream = (flags & Flag.END_STREAM) !== 0;
    const n = dataEnd - dataStart;
    if (n === 0 && !endStream) {
      const overBudget = this.spendControl();
      if (overBudget !== undefined) return overBudget;
    }
    const body = stream.body;
    const heldBefore = body.length;
    this.inData = stream;
    if (n > 0) {
      stream.received += n;
      if (!body.receive(buf, dataStart, dataEnd, stream.bodyLimit)) this.abortStream(stream, 'buffer-full');
      if (!stream.closed) stream.call.data();
    }
    if (endStream && !stream.closed) this.remoteEnd(stream);
    if (!stream.closed && !body.keep(stream.bodyLimit)) this.abortStream(stream, 'buffer-full');
    this.inData = undefined;
    this.settleHeld(stream, length);
    if (stream.closed) return undefined;
    if (stream.longLived && body.length > 0 && (heldBefore === 0 || body.length < heldBefore + n)) {
      // A message began (none was held, or the application took the ones before it): the body
      // timeout counts from here.
      stream.waitingSince = this.readAt;
      this.touched.push(stream);
    }
    this.openStreamWindow(stream);
    return undefined;
  }

  /** Tells the connection's flow control how the stream's held bytes changed, `n` octets having arrived. */
  private settleHeld(stream: H2Stream, n: number): void {
    const held = stream.closed ? 0 : stream.body.length;
    const delta = held - stream.heldCounted;
    stream.heldCounted = held;
    this.inflow.settle(n, delta);
  }

  /** The application took held bytes, or accepts a different amount: flow control follows. */
  bodyChanged(stream: H2Stream): void {
    if (stream === this.inData || stream.closed) return;
    this.settleHeld(stream, 0);
    this.openStreamWindow(stream);
    if (stream.longLived) {
      // The application moved on: what it holds now has a body timeout of its own.
      const now = performance.now();
      stream.waitingSince = now;
      this.armTimer(stream, now);
    }
    this.scheduleFlush();
  }

  /**
   * Opens the stream's window up to what the application accepts, in updates worth a frame. A
   * window is a promise: storage for every byte it lets the client send is taken from the
   * process's request budget first, so nothing sent within it is refused and thrown away (a
   * client cannot make the process take and drop more than the budget). When the budget cannot
   * hold it, the window stays as it is and the stream waits for room, tried again at each read of
   * the connection, within its body timeout.
   */
  private openStreamWindow(stream: H2Stream): void {
    if (stream.remoteEnded) return;
    const room = stream.bodyLimit - stream.body.length - stream.recvWindow;
    if (room <= 0 || (room < STREAM_UPDATE_THRESHOLD && stream.recvWindow >= STREAM_UPDATE_THRESHOLD)) return;
    if (!stream.body.ensureRoom(stream.bodyLimit)) {
      this.waitingForRoom.add(stream);
      return;
    }
    this.waitingForRoom.delete(stream);
    stream.recvWindow += room;
    this.writer.windowUpdate(stream.id, room);
    this.scheduleFlush();
  }

  private onHeadersFrame(flags: number, id: number, buf: Buffer, start: number, end: number): H2Error | undefined {
    if (id === 0 || id % 2 === 0) return new ConnectionError(ErrorCode.PROTOCOL_ERROR, `HEADERS on stream ${id}`);
    const fragmentEnd = unpadded(flags, buf, start, end);
    if (typeof fragmentEnd !== 'number') return fragmentEnd;
    let fragmentStart = (flags & Flag.PADDED) !== 0 ? start + 1 : start;
    let dependency = 0;
    if ((flags & Flag.PRIORITY) !== 0) {
      if (fragmentStart + 5 > fragmentEnd) return new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, 'HEADERS shorter than its priority fields');
      dependency = buf.readUInt32BE(fragmentStart) & 0x7fffffff;
      fragmentStart += 5;
    }
    const endStream = (flags & Flag.END_STREAM) !== 0;
    if ((flags & Flag.END_HEADERS) !== 0) return this.onHeaderBlock(id, endStream, dependency, buf, fragmentStart, fragmentEnd);
    this.continuationOf = id;
    this.headerEndStream = endStream;
    this.headerDependency = dependency;
    // Copies: the block may span reads, and must not pin them.
    this.headerParts = [Buffer.from(buf.subarray(fragmentStart, fragmentEnd))];
    this.headerBytes = fragmentEnd - fragmentStart;
    return undefined;
  }

  private onContinuation(flags: number, id: number, buf: Buffer, start: number, end: number): H2Error | undefined {
    if (this.continuationOf === 0 || id !== this.continuationOf) {
      return new ConnectionError(ErrorCode.PROTOCOL_ERROR, 'CONTINUATION without HEADERS');
    }
    this.headerBytes += end - start;
    if (this.headerBytes > this.options.maxHeaderListBytes) {
      this.exceeded('header_block');
      return new ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, 'a header block larger than the header list limit');
    }
    if (end === start && (flags & Flag.END_HEADERS) === 0) {
      const overBudget = this.spendControl();
      if (overBudget !== undefined) return overBudget;
    }
    this.headerParts.push(Buffer.from(buf.subarray(start, end)));
    if ((flags & Flag.END_HEADERS) === 0) return undefined;
    this.continuationOf = 0;
    const block = Buffer.concat(this.headerParts, this.headerBytes);
    this.headerParts = [];
    return this.onHeaderBlock(id, this.headerEndStream, this.headerDependency, block, 0, block.length);
  }

  private onHeaderBlock(id: number, endStream: boolean, dependency: number, buf: Buffer, start: number, end: number): H2Error | undefined {
    // Every block is decoded, even a refused stream's: the dynamic table is the connection's.
    try {
      this.decoder.decode(buf, start, end, this.fields, this.options.maxHeaderListBytes);
    } catch (err) {
      if (err instanceof HpackError) return new ConnectionError(ErrorCode.COMPRESSION_ERROR, err.message);
      throw err;
    }
    const work = this.decoder.representations - HEADER_WORK.freePerBlock;
    if (work > 0 && !this.headerWork.spend(work, this.readAt)) {
      this.exceeded('header_work');
      return new ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, 'too much header decoding work');
    }
    const existing = this.streams.get(id);
    if (existing !== undefined) {
      // Trailers from the client: they must end the stream, and be well formed (a malformed
      // request is a stream error, RFC 9113 8.1.1).
      if (existing.remoteEnded) return new StreamError(id, ErrorCode.STREAM_CLOSED);
      if (!endStream || this.decoder.tooLarge || !validTrailers(this.fields)) return new StreamError(id, ErrorCode.PROTOCOL_ERROR);
      this.remoteEnd(existing);
      return undefined;
    }
    if (!this.streams.isIdle(id)) {
      // A stream id at or below one already used, and not open (RFC 9113 5.1.1): a connection
      // error, as nghttp2 and Go answer; unless we reset that stream lately and the client sent
      // this before it knew (5.4.2).
      if (!this.streams.wasReset(id)) return new ConnectionError(ErrorCode.PROTOCOL_ERROR, `HEADERS on closed stream ${id}`);
      return undefined;
    }
    this.streams.lastId = id;
    if (this.closing) return undefined; // after GOAWAY: the client retries elsewhere
    // The stream errors below refuse a stream that was never opened.
    if (dependency === id) return new StreamError(id, ErrorCode.PROTOCOL_ERROR); // a stream cannot depend on itself (5.3.1)
    // A full request budget does not refuse a stream: a request that arrives whole needs none of
    // it; one that must wait for more bytes is answered RESOURCE_EXHAUSTED when they cannot be held.
    if (this.streams.size >= this.options.maxConcurrentStreams) return new StreamError(id, ErrorCode.REFUSED_STREAM);
    if (this.decoder.tooLarge) {
      this.writer.headerBlock(id, HEADERS_TOO_LARGE, true, this.peerMaxFrameSize);
      // Answered: a reset all the same, and the rest of an unfinished request is cut (RFC 9113 8.1).
      return endStream ? this.spendReset() : new StreamError(id, ErrorCode.NO_ERROR);
    }
    const headers = requestHeaders(this.fields);
    if (headers === undefined) return new StreamError(id, ErrorCode.PROTOCOL_ERROR);
    const stream = new H2Stream(this, id, this.options.budgets.requests);
    stream.headers = headers;
    stream.waitingSince = this.readAt;
    this.streams.add(stream);
    this.controlFrames.earn(CONTROL_FRAMES.perStream);
    if (endStream) {
      stream.state = StreamState.HalfClosedRemote;
      this.lastRequestAt = this.readAt;
    }
    stream.call = this.handler.open(stream) ?? NO_CALL;
    if (stream.closed) return undefined;
    if (endStream) {
      stream.call.ended();
      if (stream.closed) return undefined;
    }
    this.touched.push(stream);
    return undefined;
  }

  /** The client ended its side of an open stream. */
  private remoteEnd(stream: H2Stream): void {
    stream.state = StreamState.HalfClosedRemote;
    this.lastRequestAt = this.readAt;
    stream.call.ended();
  }

  private onPriority(id: number, buf: Buffer, start: number, end: number): H2Error | undefined {
    if (id === 0) return new ConnectionError(ErrorCode.PROTOCOL_ERROR, 'PRIORITY on stream 0');
    if (end - start !== 5) return new StreamError(id, ErrorCode.FRAME_SIZE_ERROR);
    if ((buf.readUInt32BE(start) & 0x7fffffff) === id) return new StreamError(id, ErrorCode.PROTOCOL_ERROR); // 5.3.1
    return undefined;
  }

  private onResetFrame(id: number, start: number, end: number): ConnectionError | undefined {
    if (end - start !== 4) return new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, 'RST_STREAM of the wrong size');
    if (id === 0 || this.streams.isIdle(id)) return new ConnectionError(ErrorCode.PROTOCOL_ERROR, 'RST_STREAM on an idle stream');
    const stream = this.streams.get(id);
    if (stream === undefined) return undefined;
    this.closeStream(stream);
    return this.spendReset();
  }

  /** Takes one reset from the budget; an empty budget is a connection error (rapid reset). */
  private spendReset(): ConnectionError | undefined {
    if (this.resets.spend(1)) return undefined;
    this.exceeded('resets');
    return new ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, 'too many stream resets');
  }

  private onSettings(flags: number, id: number, buf: Buffer, start: number, end: number): ConnectionError | undefined {
    if (id !== 0) return new ConnectionError(ErrorCode.PROTOCOL_ERROR, 'SETTINGS on a stream');
    if ((flags & Flag.ACK) !== 0) {
      if (end !== start) return new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, 'a SETTINGS acknowledgement with a payload');
      if (this.streamRecvWindow !== STREAM_WINDOW) {
        // Our only SETTINGS now applies: the streams' windows shrink by the difference (6.9.2),
        // and a stream whose application accepts more is opened again (its client may wait).
        const delta = this.streamRecvWindow - STREAM_WINDOW;
        this.streamRecvWindow = STREAM_WINDOW;
        for (const stream of this.streams.values()) {
          stream.recvWindow -= delta;
          this.openStreamWindow(stream);
        }
      }
      return undefined;
    }
    if ((end - start) % 6 !== 0) return new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, 'SETTINGS of a wrong size');
    this.settingsSeen = true;
    // Only the last INITIAL_WINDOW_SIZE of a frame counts: applied once, not once per entry
    // (a frame full of them would otherwise walk every open stream thousands of times).
    let initialWindow = -1;
    for (let p = start; p < end; p += 6) {
      const key = buf.readUInt16BE(p);
      const value = buf.readUInt32BE(p + 2);
      if (key === Setting.ENABLE_PUSH && value > 1) return new ConnectionError(ErrorCode.PROTOCOL_ERROR, 'SETTINGS_ENABLE_PUSH not 0 or 1');
      if (key === Setting.INITIAL_WINDOW_SIZE) {
        if (value > MAX_WINDOW) return new ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, 'SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1');
        initialWindow = value;
      } else if (key === Setting.MAX_FRAME_SIZE) {
        if (value < DEFAULT_MAX_FRAME_SIZE || value > MAX_FRAME_SIZE_LIMIT) {
          return new ConnectionError(ErrorCode.PROTOCOL_ERROR, 'SETTINGS_MAX_FRAME_SIZE out of range');
        }
        this.peerMaxFrameSize = value;
      }
      // HEADER_TABLE_SIZE: our encoder never indexes. The others do not concern a server.
    }
    if (initialWindow >= 0 && initialWindow !== this.peerInitialWindow) {
      const delta = initialWindow - this.peerInitialWindow;
      this.peerInitialWindow = initialWindow;
      for (const stream of this.streams.values()) {
        stream.sendWindow += delta;
        if (stream.sendWindow > MAX_WINDOW) return new ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, 'a stream window above 2^31-1');
      }
    }
    this.writeAck(FrameType.SETTINGS, undefined);
    this.sendBlocked();
    return undefined;
  }

  private onPing(flags: number, id: number, buf: Buffer, start: number, end: number): ConnectionError | undefined {
    if (end - start !== 8) return new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, 'PING of the wrong size');
    if (id !== 0) return new ConnectionError(ErrorCode.PROTOCOL_ERROR, 'PING on a stream');
    if ((flags & Flag.ACK) === 0) {
      this.writeAck(FrameType.PING, buf.subarray(start, end));
      return undefined;
    }
    // Only the acknowledgement of our own PING answers it; any other is ignored.
    const ours = this.pingPayload;
    if (ours !== undefined && buf.compare(ours, 0, 8, start, end) === 0) {
      clearTimeout(this.pingDeadline);
      this.pingDeadline = undefined;
      this.pingPayload = undefined;
    }
    return undefined;
  }

  private onWindowUpdate(id: number, buf: Buffer, start: number, end: number): H2Error | undefined {
    if (end - start !== 4) return new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, 'WINDOW_UPDATE of the wrong size');
    const increment = buf.readUInt32BE(start) & 0x7fffffff;
    if (id === 0) {
      if (increment === 0) return new ConnectionError(ErrorCode.PROTOCOL_ERROR, 'a WINDOW_UPDATE of 0');
      if ((this.sendWindow += increment) > MAX_WINDOW) return new ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, 'a connection window above 2^31-1');
      this.sendBlocked();
      return undefined;
    }
    const stream = this.streams.get(id);
    if (stream === undefined) {
      if (this.streams.isIdle(id)) return new ConnectionError(ErrorCode.PROTOCOL_ERROR, 'WINDOW_UPDATE on an idle stream');
      return undefined;
    }
    if (increment === 0) return new StreamError(id, ErrorCode.PROTOCOL_ERROR);
    if ((stream.sendWindow += increment) > MAX_WINDOW) return new StreamError(id, ErrorCode.FLOW_CONTROL_ERROR);
    this.sendBlocked();
    return undefined;
  }

  // ---- writing ----

  private scheduleFlush(): void {
    if (this.reading || this.flushQueued) return;
    this.flushQueued = true;
    process.nextTick(flushConnection, this);
  }

  /** Writes what this turn produced in one piece. */
  flush(): void {
    this.flushQueued = false;
    if (this.dead) return;
    if (this.closing && this.streams.size === 0) {
      this.end();
      return;
    }
    const increment = this.inflow.takeUpdate();
    if (increment > 0) this.writer.windowUpdate(0, increment);
    if (this.writer.length === 0) return;
    const socket = this.socket;
    if (!socket.writable) {
      this.writer.clear(); // the peer is gone: nothing can be written any more
      return;
    }
    const held = this.backlog.write(this.writer.take());
    // Acknowledgements in a write the client is not keeping up with wait unread (until it catches up).
    if (this.backlog.behind) this.queuedAcks += this.acksGathered;
    this.acksGathered = 0;
    if (!held || this.queuedAcks > MAX_QUEUED_ACKS) {
      // The process holds too many unsent answers, or the client does not read its acknowledgements.
      this.exceeded(held ? 'unread_acks' : 'answer_bytes');
      this.destroy();
      return;
    }
    // A client that does not read: stop reading its requests until it does.
    if (socket.writableLength > PEER_BACKLOG_HIGH) this.pause(Paused.Backlog);
  }

  /** A SETTINGS or PING acknowledgement (counted: a client that does not read them is closed). */
  private writeAck(type: FrameType, payload: Buffer | undefined): void {
    this.writer.frame(type, Flag.ACK, 0, payload);
    this.acksGathered++;
  }

  writeHeaders(stream: H2Stream, block: Buffer, endStream: boolean): void {
    if (stream.closed || stream.response !== ResponseState.None) return;
    stream.response = ResponseState.Started;
    this.writer.headerBlock(stream.id, block, endStream, this.peerMaxFrameSize);
    this.scheduleFlush();
    if (endStream) this.endedLocally(stream);
  }

  /** The common answer: all three frames in one reserve when the windows allow. */
  writeAnswer(stream: H2Stream, headers: Buffer, payload: Buffer, trailers: Buffer): void {
    if (stream.closed || stream.response !== ResponseState.None) return;
    const length = payload.length;
    if (length > this.sendWindow || length > stream.sendWindow || length > this.peerMaxFrameSize) {
      this.writeHeaders(stream, headers, false);
      this.writeData(stream, payload, trailers);
      return;
    }
    stream.response = ResponseState.Started;
    this.sendWindow -= length;
    stream.sendWindow -= length;
    this.writer.answer(stream.id, headers, payload, trailers);
    this.scheduleFlush();
    this.endedLocally(stream);
  }

  /** Response DATA (queued behind flow control), then optionally the trailers that end it. */
  writeData(stream: H2Stream, payload: Buffer | undefined, trailers: Buffer | undefined): void {
    if (stream.closed || stream.response === ResponseState.Ending) return;
    if (payload !== undefined && payload.length > 0) (stream.queued ??= []).push(payload);
    if (trailers !== undefined) {
      stream.queuedTrailers = trailers;
      stream.response = ResponseState.Ending;
    }
    this.sendQueued(stream);
  }

  /** Sends what the windows allow of a stream's queued DATA, and its trailers once all is sent. */
  private sendQueued(stream: H2Stream): void {
    const queued = stream.queued;
    while (queued !== undefined && queued.length > 0) {
      const next = queued[0]!;
      const room = Math.min(this.sendWindow, stream.sendWindow, this.peerMaxFrameSize);
      if (room <= 0) {
        this.blocked.add(stream);
        // What was framed before the window ran out goes now (outside a read nothing else flushes it).
        this.scheduleFlush();
        return;
      }
      const take = Math.min(room, next.length);
      this.writer.data(stream.id, next, 0, take);
      this.sendWindow -= take;
      stream.sendWindow -= take;
      if (take === next.length) queued.shift();
      else queued[0] = next.subarray(take);
    }
    this.blocked.delete(stream);
    this.scheduleFlush();
    const trailers = stream.queuedTrailers;
    if (trailers !== undefined) {
      stream.queuedTrailers = undefined;
      this.writer.headerBlock(stream.id, trailers, true, this.peerMaxFrameSize);
      this.endedLocally(stream);
    }
  }

  private sendBlocked(): void {
    for (const stream of this.blocked) {
      if (this.sendWindow <= 0) return;
      this.sendQueued(stream);
    }
  }

  /** The application ends a stream it will not answer further (not a reset the peer provoked). */
  resetStream(stream: H2Stream, code: ErrorCode): void {
    if (stream.closed) return;
    this.writer.rstStream(stream.id, code);
    this.streams.noteReset(stream.id);
    this.scheduleFlush();
    this.closeStream(stream);
  }

  /** We sent END_STREAM: an answer before the whole request (an error) cuts the rest (RFC 9113 8.1). */
  private endedLocally(stream: H2Stream): void {
    if (stream.state === StreamState.Open) {
      this.writer.rstStream(stream.id, ErrorCode.NO_ERROR);
      this.streams.noteReset(stream.id);
    }
    this.closeStream(stream);
  }

  private closeStream(stream: H2Stream): void {
    if (stream.closed) return;
    stream.state = StreamState.Closed;
    this.streams.delete(stream.id);
    this.blocked.delete(stream);
    this.waitingForRoom.delete(stream);
    stream.queued = undefined;
    stream.queuedTrailers = undefined;
    stream.body.free();
    if (stream.heldCounted > 0) {
      this.inflow.release(stream.heldCounted);
      stream.heldCounted = 0;
      this.scheduleFlush();
    }
    if (stream.timer !== undefined) clearTimeout(stream.timer);
    stream.call.closed();
    if (this.streams.size === 0 && this.closing) this.scheduleFlush();
  }

  /** The stream must end unanswered: the application answers it, or it is reset. */
  private abortStream(stream: H2Stream, reason: AbortReason): void {
    if (stream.closed) return;
    if (reason === 'buffer-full') this.exceeded('request_bytes');
    stream.body.free();
    stream.call.abort(reason);
    if (!stream.closed) this.resetStream(stream, reason === 'buffer-full' ? ErrorCode.ENHANCE_YOUR_CALM : ErrorCode.CANCEL);
  }

  // ---- stream timers: the deadline, and the time the request may take to arrive ----

  /** When the stream must be answered or aborted; 0 for never. */
  private dueAt(stream: H2Stream): number {
    let due = stream.deadlineAt;
    const timeout = this.options.bodyTimeoutMs;
    // A long-lived stream: while part of a message waits for the client (not while the
    // application holds whole messages back with the window shut).
    const waiting = stream.longLived ? stream.body.length > 0 && stream.bodyLimit > stream.body.length : !stream.remoteEnded;
    if (timeout > 0 && waiting) {
      const bodyDue = stream.waitingSince + timeout;
      if (due === 0 || bodyDue < due) due = bodyDue;
    }
    return due;
  }

  /** The streams of this read still waiting get a timer for their next due time. */
  private armTimers(): void {
    const touched = this.touched;
    if (touched.length === 0) return;
    this.touched = [];
    for (const stream of touched) this.armTimer(stream, this.readAt);
  }

  /** Answered, or answering: no timer, but for a long-lived stream, whose messages keep coming. */
  private untimed(stream: H2Stream): boolean {
    return stream.closed || (stream.response !== ResponseState.None && !stream.longLived);
  }

  private armTimer(stream: H2Stream, now: number): void {
    if (this.untimed(stream)) return;
    const due = this.dueAt(stream);
    if (due === 0 || (stream.timer !== undefined && stream.timerAt <= due)) return;
    clearTimeout(stream.timer);
    stream.timerAt = due;
    stream.timer = setTimeout(() => this.streamTimerFired(stream), Math.min(Math.max(0, due - now), MAX_TIMER_MS));
  }

  private streamTimerFired(stream: H2Stream): void {
    stream.timer = undefined;
    if (this.untimed(stream)) return;
    const now = performance.now();
    const due = this.dueAt(stream);
    if (due === 0) return;
    if (due > now) {
      this.armTimer(stream, now);
      return;
    }
    this.abortStream(stream, stream.deadlineAt !== 0 && stream.deadlineAt <= now ? 'deadline' : 'body-timeout');
    this.scheduleFlush();
  }

  // ---- connection lifecycle ----

  /** Graceful close: GOAWAY naming the last stream, the streams in flight finish, then the socket ends. */
  close(debug = ''): void {
    if (this.closing || this.dead) return;
    this.closing = true;
    this.writer.goaway(this.streams.lastId, ErrorCode.NO_ERROR, debug);
    this.scheduleFlush();
  }

  /**
   * The one place that acts on a protocol error; true when the connection is over. A stream
   * error: RST_STREAM, and the stream (if open) is over; the reset counts against the budget
   * (provoked resets count too, "MadeYouReset"), and past it becomes a connection error. A
   * connection error: GOAWAY with the code, then the socket ends. Nothing more is read: what an
   * abusive client goes on sending is of no use, and reading it would cost the others.
   */
  private handleError(error: H2Error): boolean {
    if (error instanceof StreamError) {
      const { id } = error;
      const stream = this.streams.get(id);
      this.writer.rstStream(id, error.code);
      this.streams.noteReset(id);
      if (stream !== undefined) this.closeStream(stream);
      const overBudget = this.spendReset();
      if (overBudget === undefined) return false;
      error = overBudget;
    }
    this.writer.goaway(this.streams.lastId, error.code, error.debug);
    this.reading = false;
    this.end();
    this.socket.pause();
    return true;
  }

  /** Writes what is left and FIN; a client that does not close its side within a second is cut off. */
  private end(): void {
    this.dead = true;
    this.flushQueued = true; // nothing more is written
    this.input = EMPTY_BUFFER;
    const socket = this.socket;
    this.closeAll();
    if (!socket.destroyed) {
      if (this.writer.length > 0 && socket.writable) socket.end(this.writer.take());
      else socket.end();
      // Not among this.timers: closeAll clears those, and this one must outlive it.
      setTimeout(destroySocket, CLOSE_LINGER_MS, socket).unref();
    }
    this.writer.clear();
  }

  /** Closes the socket at once. */
  destroy(): void {
    this.dead = true;
    this.input = EMPTY_BUFFER;
    this.writer.clear();
    this.socket.destroy();
    this.closeAll();
  }

  private onClose(): void {
    this.dead = true;
    this.input = EMPTY_BUFFER;
    this.closeAll();
  }

  private closeAll(): void {
    for (const stream of [...this.streams.values()]) this.closeStream(stream);
    this.uncharge();
    this.headerParts = [];
    for (const timer of this.timers) clearTimeout(timer);
    clearTimeout(this.pingDeadline);
    this.timers.length = 0;
  }

  /** Sends a PING; the connection is destroyed when its ACK does not come in time. */
  private ping(timeoutMs: number): void {
    this.pingDeadline = setTimeout(() => this.destroy(), Math.min(timeoutMs, MAX_TIMER_MS));
    this.pingDeadline.unref();
    const payload = Buffer.alloc(8);
    payload.writeDoubleBE(performance.now());
    this.pingPayload = payload;
    this.writer.frame(FrameType.PING, 0, 0, payload);
    this.scheduleFlush();
  }

  /** grpc-go's keepalive: ping a connection silent for keepaliveTimeMs; no answer closes it. */
  private startKeepalive(): void {
    const { keepaliveTimeMs, keepaliveTimeoutMs } = this.options;
    if (keepaliveTimeMs <= 0 || keepaliveTimeMs >= MAX_TIMER_MS) return;
    const timer = setInterval(() => {
      if (this.dead) return;
      if (this.activity || this.pingDeadline !== undefined) {
        this.activity = false;
        return;
      }
      this.ping(keepaliveTimeoutMs);
    }, keepaliveTimeMs);
    timer.unref();
    this.timers.push(timer);
  }
}

/** Where the payload of a padded frame ends (its padding cut off), or the connection error it makes. */
function unpadded(flags: number, buf: Buffer, start: number, end: number): number | ConnectionError {
  if ((flags & Flag.PADDED) === 0) return end;
  if (start >= end) return new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, 'a padded frame without its pad length');
  const pad = buf[start]!;
  if (pad >= end - start) return new ConnectionError(ErrorCode.PROTOCOL_ERROR, 'padding longer than the frame');
  return end - pad;
}

/**
 * How many bytes of `next` complete the frame whose start is `start` (its header may be cut too):
 * -1 when `next` does not complete it, or it declares more than a frame may hold (then reading
 * both together fails it as it should).
 */
function frameRemainder(start: Buffer, next: Buffer): number {
  const have = start.length;
  if (have + next.length < FRAME_HEADER_BYTES) return -1;
  const at = (i: number): number => (i < have ? start[i]! : next[i - have]!);
  const length = (at(0) << 16) | (at(1) << 8) | at(2);
  if (length > DEFAULT_MAX_FRAME_SIZE) return -1;
  const need = FRAME_HEADER_BYTES + length - have;
  return need <= next.length ? need : -1;
}

/** How long an ended connection waits for the client to close its side. */
const CLOSE_LINGER_MS = 1000;

function destroySocket(socket: Socket): void {
  socket.destroy();
}

function flushConnection(connection: H2Connection): void {
  connection.flush();
}

function continueReading(connection: H2Connection): void {
  connection.continueReading();
}
