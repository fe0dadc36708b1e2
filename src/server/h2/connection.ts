/**
 * The server side of one HTTP/2 connection (RFC 9113) on a socket, for request/response calls such
 * as unary gRPC: frames parsed straight from each socket read, header blocks decoded with HPACK,
 * and every frame the read produced written back in one socket write.
 *
 * What it defends against, since a default server faces any client: frames larger than announced,
 * header blocks past a size (CONTINUATION floods, HPACK bombs), streams beyond the concurrency
 * cap (refused), rapid resets (a token bucket of stream resets, nghttp2's defaults), floods of empty
 * frames, and peers that do not read (reading stops while the socket's write buffer is full; a
 * peer that never opens its flow-control window only holds its own streams).
 */
import type { Socket } from 'node:net';
import {
  CONNECTION_PREFACE,
  DEFAULT_MAX_FRAME_SIZE,
  DEFAULT_WINDOW,
  ErrorCode,
  Flag,
  FRAME_HEADER_BYTES,
  FrameType,
  MAX_FRAME_SIZE_LIMIT,
  MAX_WINDOW,
  Setting,
  writeFrameHeader,
} from './frames';
import { encodeHeaderBlock, HpackDecoder, HpackError } from './hpack';

/** What the application does with the streams of a connection. */
export interface StreamHandler {
  /** The request's headers have arrived (`stream.headers`). */
  opened(stream: H2Stream): void;
  /** Request body bytes were added to `stream.body`. */
  data(stream: H2Stream): void;
  /** The client has sent its whole request. */
  ended(stream: H2Stream): void;
  /** `stream.deadlineAt` has passed and the stream is not answered. */
  deadline(stream: H2Stream): void;
  /** The stream is over: answered and ended, reset, or its connection closed. */
  closed(stream: H2Stream): void;
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
  /** A connection without a stream for this long gets GOAWAY (0 = never). */
  maxIdleMs: number;
  /** The preface and the first SETTINGS must arrive within this. */
  handshakeTimeoutMs: number;
}

/** Node's timers cannot wait longer. */
const MAX_TIMER_MS = 2 ** 31 - 1;
/** Stream resets a client may cause: a burst, then a rate per second (nghttp2's defaults). */
const RESET_BURST = 1000;
const RESETS_PER_SECOND = 33;
/** Frames that carry nothing (empty DATA or CONTINUATION) a connection may send. */
const MAX_EMPTY_FRAMES = 1000;
/** Reading stops while more than this waits in the socket's write buffer. */
const WRITE_BUFFER_HIGH = 1 << 20;
/** Request body bytes a connection may hold before its window is no longer replenished. */
const MAX_BUFFERED_BODY = 16 << 20;
/** Window granted back once this much was consumed (half the default window). */
const WINDOW_UPDATE_THRESHOLD = DEFAULT_WINDOW >> 1;

/** The answer to a request whose header list is too large. */
const HEADERS_TOO_LARGE = encodeHeaderBlock([
  [':status', '431'],
  ['content-type', 'application/grpc'],
  ['grpc-status', '8'],
  ['grpc-message', 'request header list too large'],
]);

/** One request/response exchange. */
export class H2Stream {
  /** The request headers, names in lower case; repeated fields joined with ", ". */
  headers: Record<string, string> = {};
  /** The request body received so far, in order, and its length. */
  body: Buffer[] = [];
  received = 0;
  /** When the application must have answered (ms on `performance.now()`); 0 = no deadline. */
  deadlineAt = 0;
  timer: NodeJS.Timeout | undefined = undefined;
  /** The application's state of this stream. */
  state: unknown = undefined;
  remoteEnded = false;
  headersSent = false;
  localEnded = false;
  closed = false;
  sendWindow: number;
  recvWindow = DEFAULT_WINDOW;
  /** DATA waiting for flow-control window, and the trailers to send after it. */
  queued: Buffer[] | undefined = undefined;
  queuedTrailers: Buffer | undefined = undefined;

  constructor(
    readonly connection: H2Connection,
    readonly id: number,
  ) {
    this.sendWindow = connection.peerInitialWindow;
  }

  /** Live and not answered yet. */
  get open(): boolean {
    return !this.closed && !this.headersSent;
  }

  /** The whole request body as one buffer. */
  bodyBuffer(): Buffer {
    return this.body.length === 1 ? this.body[0]! : Buffer.concat(this.body, this.received);
  }

  /**
   * Takes the first `n` bytes of the body (a streaming call's message, once it is complete) and
   * gives their room back to the connection's bound on buffered bodies.
   */
  take(n: number): Buffer {
    const all = this.bodyBuffer();
    const out = all.subarray(0, n);
    this.body = all.length > n ? [all.subarray(n)] : [];
    this.received -= n;
    this.connection.released(n);
    return out;
  }

  /** Ends the stream with RST_STREAM ENHANCE_YOUR_CALM: for a peer that cannot take trailers (it does not read). */
  reset(): void {
    this.connection.resetStream(this, ErrorCode.ENHANCE_YOUR_CALM);
  }

  /** Response DATA written but not yet sent for lack of flow-control window. */
  get unsent(): number {
    return this.queued?.length ?? 0;
  }

  /** Response headers (an HPACK block); `endStream` makes it a headers-only answer. */
  respond(block: Buffer, endStream: boolean): void {
    this.connection.writeHeaders(this, block, endStream);
  }

  /** One whole answer: headers, one DATA payload, trailers, in one write. */
  answer(headers: Buffer, payload: Buffer, trailers: Buffer): void {
    this.connection.writeAnswer(this, headers, payload, trailers);
  }

  /** More response body (after {@link respond}). */
  write(payload: Buffer): void {
    this.connection.writeData(this, payload, undefined);
  }

  /** The trailers that end the response. */
  end(trailers: Buffer): void {
    this.connection.writeData(this, undefined, trailers);
  }
}

/** One HTTP/2 connection. */
export class H2Connection {
  private readonly streams = new Map<number, H2Stream>();
  private readonly decoder = new HpackDecoder();
  private readonly fields: string[] = [];
  private stash: Buffer | undefined;
  private prefaceSeen = false;
  private settingsSeen = false;
  private lastStreamId = 0;
  /** A header block being received in CONTINUATION frames. */
  private continuationOf = 0;
  private headerParts: Buffer[] = [];
  private headerBytes = 0;
  private headerEndStream = false;
  /** Flow control: what we may send, what the peer may still send, what we have yet to grant. */
  private sendWindow = DEFAULT_WINDOW;
  private recvConsumed = 0;
  private bufferedBody = 0;
  private readonly blocked = new Set<H2Stream>();
  peerInitialWindow = DEFAULT_WINDOW;
  private peerMaxFrameSize = DEFAULT_MAX_FRAME_SIZE;
  /** The reset budget (tokens) and when it was last refilled. */
  private resetTokens = RESET_BURST;
  private resetRefilledAt = performance.now();
  private emptyFrames = 0;
  /** Output of the current turn, written in one piece. */
  private out = Buffer.allocUnsafe(16 * 1024);
  private outLength = 0;
  private flushQueued = false;
  private reading = false;
  private awaitingDeadline: H2Stream[] = [];
  /** GOAWAY sent: no new streams; the connection ends when the last one does. */
  private closing = false;
  private dead = false;
  private activity = false;
  private readonly timers: NodeJS.Timeout[] = [];
  private idleTimer: NodeJS.Timeout | undefined;
  /** The keepalive PING in flight: the connection is destroyed when its ACK does not come. */
  private pingDeadline: NodeJS.Timeout | undefined;

  constructor(
    private readonly socket: Socket,
    private readonly handler: StreamHandler,
    private readonly options: ConnectionOptions,
  ) {
    socket.on('data', (chunk: Buffer) => this.onData(chunk));
    socket.on('close', () => this.onClose());
    socket.on('error', () => socket.destroy());
    this.writeSettings();
    const handshake = setTimeout(() => {
      if (!this.settingsSeen) this.destroy();
    }, Math.min(options.handshakeTimeoutMs, MAX_TIMER_MS));
    handshake.unref();
    this.timers.push(handshake);
    this.startKeepalive();
    this.armIdle();
    this.flush();
  }

  // ---- reading ----

  private onData(chunk: Buffer): void {
    if (this.dead) return;
    this.activity = true;
    const buf = this.stash === undefined ? chunk : Buffer.concat([this.stash, chunk]);
    this.stash = undefined;
    let pos = 0;
    if (!this.prefaceSeen) {
      const n = Math.min(buf.length, CONNECTION_PREFACE.length);
      if (buf.compare(CONNECTION_PREFACE, 0, n, 0, n) !== 0) {
        this.fail(ErrorCode.PROTOCOL_ERROR, 'not an HTTP/2 connection preface');
        return;
      }
      if (n < CONNECTION_PREFACE.length) {
        this.stash = buf;
        return;
      }
      this.prefaceSeen = true;
      pos = n;
    }
    this.reading = true;
    const end = buf.length;
    while (end - pos >= FRAME_HEADER_BYTES) {
      const length = (buf[pos]! << 16) | (buf[pos + 1]! << 8) | buf[pos + 2]!;
      if (length > DEFAULT_MAX_FRAME_SIZE) {
        this.fail(ErrorCode.FRAME_SIZE_ERROR, `a frame of ${length} bytes, above SETTINGS_MAX_FRAME_SIZE`);
        return;
      }
      const payload = pos + FRAME_HEADER_BYTES;
      if (end - payload < length) break;
      const type = buf[pos + 3]!;
      const flags = buf[pos + 4]!;
      const id = buf.readUInt32BE(pos + 5) & 0x7fffffff;
      this.onFrame(type, flags, id, buf, payload, payload + length);
      if (this.dead) return;
      pos = payload + length;
    }
    if (pos < end) this.stash = pos === 0 ? buf : buf.subarray(pos);
    this.reading = false;
    this.armDeadlines();
    this.flush();
  }

  private onFrame(type: number, flags: number, id: number, buf: Buffer, start: number, end: number): void {
    if (!this.settingsSeen && type !== FrameType.SETTINGS) {
      this.fail(ErrorCode.PROTOCOL_ERROR, 'the first frame is not SETTINGS');
      return;
    }
    if (this.continuationOf !== 0 && (type !== FrameType.CONTINUATION || id !== this.continuationOf)) {
      this.fail(ErrorCode.PROTOCOL_ERROR, 'a header block interrupted by another frame');
      return;
    }
    switch (type) {
      case FrameType.DATA:
        this.onDataFrame(flags, id, buf, start, end);
        break;
      case FrameType.HEADERS:
        this.onHeadersFrame(flags, id, buf, start, end);
        break;
      case FrameType.CONTINUATION:
        this.onContinuation(flags, id, buf, start, end);
        break;
      case FrameType.PRIORITY:
        if (id === 0) this.fail(ErrorCode.PROTOCOL_ERROR, 'PRIORITY on stream 0');
        else if (end - start !== 5) this.streamError(id, ErrorCode.FRAME_SIZE_ERROR);
        break;
      case FrameType.RST_STREAM:
        this.onResetFrame(id, buf, start, end);
        break;
      case FrameType.SETTINGS:
        this.onSettings(flags, id, buf, start, end);
        break;
      case FrameType.PUSH_PROMISE:
        this.fail(ErrorCode.PROTOCOL_ERROR, 'PUSH_PROMISE from a client');
        break;
      case FrameType.PING:
        this.onPing(flags, id, buf, start, end);
        break;
      case FrameType.GOAWAY:
        if (id !== 0) this.fail(ErrorCode.PROTOCOL_ERROR, 'GOAWAY on a stream');
        else this.close();
        break;
      case FrameType.WINDOW_UPDATE:
        this.onWindowUpdate(id, buf, start, end);
        break;
      default:
        break; // unknown frame types are ignored (RFC 9113 4.1)
    }
  }

  /** The payload of a padded frame, or undefined after a protocol error. */
  private unpadded(flags: number, buf: Buffer, start: number, end: number): number | undefined {
    if ((flags & Flag.PADDED) === 0) return end;
    if (start >= end) {
      this.fail(ErrorCode.FRAME_SIZE_ERROR, 'a padded frame without its pad length');
      return undefined;
    }
    const pad = buf[start]!;
    if (pad >= end - start) {
      this.fail(ErrorCode.PROTOCOL_ERROR, 'padding longer than the frame');
      return undefined;
    }
    return end - pad;
  }

  private onDataFrame(flags: number, id: number, buf: Buffer, start: number, end: number): void {
    if (id === 0) {
      this.fail(ErrorCode.PROTOCOL_ERROR, 'DATA on stream 0');
      return;
    }
    const length = end - start;
    // The whole frame counts against the connection's window, whatever becomes of the stream.
    this.recvConsumed += length;
    if (this.recvConsumed > DEFAULT_WINDOW) {
      this.fail(ErrorCode.FLOW_CONTROL_ERROR, 'DATA beyond the connection window');
      return;
    }
    const dataEnd = this.unpadded(flags, buf, start, end);
    if (dataEnd === undefined) return;
    const dataStart = (flags & Flag.PADDED) !== 0 ? start + 1 : start;
    const stream = this.streams.get(id);
    if (stream === undefined) {
      if (id > this.lastStreamId) this.fail(ErrorCode.PROTOCOL_ERROR, 'DATA on an idle stream');
      // A stream already closed (answered early or reset): its data is dropped.
      this.grantConnectionWindow();
      return;
    }
    if (stream.remoteEnded) {
      this.streamError(id, ErrorCode.STREAM_CLOSED);
      return;
    }
    stream.recvWindow -= length;
    if (stream.recvWindow < 0) {
      this.streamError(id, ErrorCode.FLOW_CONTROL_ERROR);
      return;
    }
    const endStream = (flags & Flag.END_STREAM) !== 0;
    if (dataEnd > dataStart) {
      // A copy: a slice would keep the whole socket read (up to 64 KiB) alive while the call runs.
      stream.body.push(Buffer.from(buf.subarray(dataStart, dataEnd)));
      stream.received += dataEnd - dataStart;
      this.bufferedBody += dataEnd - dataStart;
      this.handler.data(stream);
    } else if (!endStream && ++this.emptyFrames > MAX_EMPTY_FRAMES) {
      this.fail(ErrorCode.ENHANCE_YOUR_CALM, 'too many empty frames');
      return;
    }
    if (endStream) {
      stream.remoteEnded = true;
      this.handler.ended(stream);
      this.finishIfDone(stream);
    } else if (!stream.closed && DEFAULT_WINDOW - stream.recvWindow >= WINDOW_UPDATE_THRESHOLD) {
      this.writeWindowUpdate(id, DEFAULT_WINDOW - stream.recvWindow);
      stream.recvWindow = DEFAULT_WINDOW;
    }
    this.grantConnectionWindow();
  }

  /** A stream handed `n` bytes of its body to the application: they are no longer held here. */
  released(n: number): void {
    this.bufferedBody -= n;
    this.grantConnectionWindow();
  }

  /** Gives the connection's window back once half is used, unless too much body is held. */
  private grantConnectionWindow(): void {
    if (this.recvConsumed >= WINDOW_UPDATE_THRESHOLD && this.bufferedBody < MAX_BUFFERED_BODY) {
      this.writeWindowUpdate(0, this.recvConsumed);
      this.recvConsumed = 0;
    }
  }

  private onHeadersFrame(flags: number, id: number, buf: Buffer, start: number, end: number): void {
    if (id === 0 || id % 2 === 0) {
      this.fail(ErrorCode.PROTOCOL_ERROR, `HEADERS on stream ${id}`);
      return;
    }
    const fragmentEnd = this.unpadded(flags, buf, start, end);
    if (fragmentEnd === undefined) return;
    let fragmentStart = (flags & Flag.PADDED) !== 0 ? start + 1 : start;
    if ((flags & Flag.PRIORITY) !== 0) fragmentStart += 5;
    if (fragmentStart > fragmentEnd) {
      this.fail(ErrorCode.FRAME_SIZE_ERROR, 'HEADERS shorter than its priority fields');
      return;
    }
    const endStream = (flags & Flag.END_STREAM) !== 0;
    if ((flags & Flag.END_HEADERS) !== 0) {
      this.onHeaderBlock(id, endStream, buf, fragmentStart, fragmentEnd);
      return;
    }
    this.continuationOf = id;
    this.headerEndStream = endStream;
    this.headerParts = [buf.subarray(fragmentStart, fragmentEnd)];
    this.headerBytes = fragmentEnd - fragmentStart;
  }

  private onContinuation(flags: number, id: number, buf: Buffer, start: number, end: number): void {
    if (this.continuationOf === 0 || id !== this.continuationOf) {
      this.fail(ErrorCode.PROTOCOL_ERROR, 'CONTINUATION without HEADERS');
      return;
    }
    this.headerBytes += end - start;
    if (this.headerBytes > this.options.maxHeaderListBytes) {
      this.fail(ErrorCode.ENHANCE_YOUR_CALM, 'a header block larger than the header list limit');
      return;
    }
    if (end === start && (flags & Flag.END_HEADERS) === 0 && ++this.emptyFrames > MAX_EMPTY_FRAMES) {
      this.fail(ErrorCode.ENHANCE_YOUR_CALM, 'too many empty frames');
      return;
    }
    this.headerParts.push(buf.subarray(start, end));
    if ((flags & Flag.END_HEADERS) === 0) return;
    this.continuationOf = 0;
    const block = Buffer.concat(this.headerParts, this.headerBytes);
    this.headerParts = [];
    this.onHeaderBlock(id, this.headerEndStream, block, 0, block.length);
  }

  private onHeaderBlock(id: number, endStream: boolean, buf: Buffer, start: number, end: number): void {
    // Every block is decoded, even a refused stream's: the dynamic table is the connection's.
    try {
      this.decoder.decode(buf, start, end, this.fields, this.options.maxHeaderListBytes);
    } catch (err) {
      if (err instanceof HpackError) {
        this.fail(ErrorCode.COMPRESSION_ERROR, err.message);
        return;
      }
      throw err;
    }
    const existing = this.streams.get(id);
    if (existing !== undefined) {
      // Trailers from the client: they must end the stream.
      if (existing.remoteEnded) this.streamError(id, ErrorCode.STREAM_CLOSED);
      else if (!endStream) this.streamError(id, ErrorCode.PROTOCOL_ERROR);
      else {
        existing.remoteEnded = true;
        this.handler.ended(existing);
        this.finishIfDone(existing);
      }
      return;
    }
    if (id <= this.lastStreamId) return; // a stream already closed by us: dropped
    this.lastStreamId = id;
    if (this.closing) return; // after GOAWAY: the client retries elsewhere
    if (this.streams.size >= this.options.maxConcurrentStreams) {
      this.refuse(id, ErrorCode.REFUSED_STREAM);
      return;
    }
    if (this.decoder.tooLarge) {
      this.writeHeaderFrame(id, HEADERS_TOO_LARGE, true);
      if (!endStream) this.refuse(id, ErrorCode.NO_ERROR);
      return;
    }
    const stream = new H2Stream(this, id);
    if (!this.readHeaders(stream.headers)) {
      this.refuse(id, ErrorCode.PROTOCOL_ERROR);
      return;
    }
    this.streams.set(id, stream);
    if (this.streams.size === 1) this.disarmIdle();
    stream.remoteEnded = endStream;
    this.handler.opened(stream);
    if (endStream && !stream.closed) {
      this.handler.ended(stream);
      this.finishIfDone(stream);
    }
    if (!stream.closed && stream.deadlineAt !== 0) this.awaitingDeadline.push(stream);
  }

  /** Fills `headers` from the decoded fields; false when the request is malformed (RFC 9113 8.2, 8.3). */
  private readHeaders(headers: Record<string, string>): boolean {
    const fields = this.fields;
    let regular = false;
    for (let i = 0; i < fields.length; i += 2) {
      const name = fields[i]!;
      const value = fields[i + 1]!;
      if (name.charCodeAt(0) === 0x3a /* : */) {
        if (regular) return false;
        if (name !== ':method' && name !== ':path' && name !== ':scheme' && name !== ':authority') return false;
        if (headers[name] !== undefined) return false;
        headers[name] = value;
        continue;
      }
      regular = true;
      if (name.length === 0 || name === '__proto__') return false;
      for (let c = 0; c < name.length; c++) {
        const code = name.charCodeAt(c);
        if (code >= 0x41 && code <= 0x5a) return false; // upper case
      }
      if (name === 'connection' || name === 'keep-alive' || name === 'proxy-connection' || name === 'transfer-encoding' || name === 'upgrade') {
        return false;
      }
      if (name === 'te' && value !== 'trailers') return false;
      const before = headers[name];
      headers[name] = before === undefined ? value : `${before}${name === 'cookie' ? '; ' : ', '}${value}`;
    }
    const method = headers[':method'];
    if (method === undefined) return false;
    return method === 'CONNECT' || (headers[':scheme'] !== undefined && headers[':path'] !== undefined && headers[':path'] !== '');
  }

  private onResetFrame(id: number, _buf: Buffer, start: number, end: number): void {
    if (end - start !== 4) {
      this.fail(ErrorCode.FRAME_SIZE_ERROR, 'RST_STREAM of the wrong size');
      return;
    }
    if (id === 0 || id > this.lastStreamId) {
      this.fail(ErrorCode.PROTOCOL_ERROR, 'RST_STREAM on an idle stream');
      return;
    }
    const stream = this.streams.get(id);
    if (stream === undefined) return;
    this.closeStream(stream);
    this.spendReset();
  }

  /** Takes one reset from the budget; an empty budget ends the connection (rapid reset). */
  private spendReset(): void {
    const now = performance.now();
    this.resetTokens = Math.min(RESET_BURST, this.resetTokens + ((now - this.resetRefilledAt) / 1000) * RESETS_PER_SECOND);
    this.resetRefilledAt = now;
    if (this.resetTokens < 1) {
      this.fail(ErrorCode.ENHANCE_YOUR_CALM, 'too many stream resets');
      return;
    }
    this.resetTokens -= 1;
  }

  private onSettings(flags: number, id: number, buf: Buffer, start: number, end: number): void {
    if (id !== 0) {
      this.fail(ErrorCode.PROTOCOL_ERROR, 'SETTINGS on a stream');
      return;
    }
    if ((flags & Flag.ACK) !== 0) {
      if (end !== start) this.fail(ErrorCode.FRAME_SIZE_ERROR, 'a SETTINGS acknowledgement with a payload');
      return;
    }
    if ((end - start) % 6 !== 0) {
      this.fail(ErrorCode.FRAME_SIZE_ERROR, 'SETTINGS of a wrong size');
      return;
    }
    this.settingsSeen = true;
    // Only the last INITIAL_WINDOW_SIZE of a frame counts: applied once, not once per entry
    // (a frame full of them would otherwise walk every open stream thousands of times).
    let initialWindow = -1;
    for (let p = start; p < end; p += 6) {
      const key = buf.readUInt16BE(p);
      const value = buf.readUInt32BE(p + 2);
      if (key === Setting.ENABLE_PUSH && value > 1) {
        this.fail(ErrorCode.PROTOCOL_ERROR, 'SETTINGS_ENABLE_PUSH not 0 or 1');
        return;
      }
      if (key === Setting.INITIAL_WINDOW_SIZE) {
        if (value > MAX_WINDOW) {
          this.fail(ErrorCode.FLOW_CONTROL_ERROR, 'SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1');
          return;
        }
        initialWindow = value;
      } else if (key === Setting.MAX_FRAME_SIZE) {
        if (value < DEFAULT_MAX_FRAME_SIZE || value > MAX_FRAME_SIZE_LIMIT) {
          this.fail(ErrorCode.PROTOCOL_ERROR, 'SETTINGS_MAX_FRAME_SIZE out of range');
          return;
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
        if (stream.sendWindow > MAX_WINDOW) {
          this.fail(ErrorCode.FLOW_CONTROL_ERROR, 'a stream window above 2^31-1');
          return;
        }
      }
    }
    this.writeFrame(FrameType.SETTINGS, Flag.ACK, 0, undefined);
    this.sendBlocked();
  }

  private onPing(flags: number, id: number, buf: Buffer, start: number, end: number): void {
    if (end - start !== 8) {
      this.fail(ErrorCode.FRAME_SIZE_ERROR, 'PING of the wrong size');
      return;
    }
    if (id !== 0) {
      this.fail(ErrorCode.PROTOCOL_ERROR, 'PING on a stream');
      return;
    }
    if ((flags & Flag.ACK) !== 0) {
      clearTimeout(this.pingDeadline);
      this.pingDeadline = undefined;
      return;
    }
    this.writeFrame(FrameType.PING, Flag.ACK, 0, buf.subarray(start, end));
  }

  private onWindowUpdate(id: number, buf: Buffer, start: number, end: number): void {
    if (end - start !== 4) {
      this.fail(ErrorCode.FRAME_SIZE_ERROR, 'WINDOW_UPDATE of the wrong size');
      return;
    }
    const increment = buf.readUInt32BE(start) & 0x7fffffff;
    if (id === 0) {
      if (increment === 0) this.fail(ErrorCode.PROTOCOL_ERROR, 'a WINDOW_UPDATE of 0');
      else if ((this.sendWindow += increment) > MAX_WINDOW) this.fail(ErrorCode.FLOW_CONTROL_ERROR, 'a connection window above 2^31-1');
      else this.sendBlocked();
      return;
    }
    const stream = this.streams.get(id);
    if (stream === undefined) {
      if (id > this.lastStreamId) this.fail(ErrorCode.PROTOCOL_ERROR, 'WINDOW_UPDATE on an idle stream');
      return;
    }
    if (increment === 0) this.streamError(id, ErrorCode.PROTOCOL_ERROR);
    else if ((stream.sendWindow += increment) > MAX_WINDOW) this.streamError(id, ErrorCode.FLOW_CONTROL_ERROR);
    else this.sendBlocked();
  }

  // ---- writing ----

  /** Room for `bytes` more output; returns the position to write at. */
  private reserve(bytes: number): number {
    const pos = this.outLength;
    if (pos + bytes > this.out.length) {
      const bigger = Buffer.allocUnsafe(Math.max(this.out.length * 2, pos + bytes));
      this.out.copy(bigger, 0, 0, pos);
      this.out = bigger;
    }
    this.outLength = pos + bytes;
    this.scheduleFlush();
    return pos;
  }

  /**
   * Reserves a frame of `length` payload bytes and writes its header; returns where the payload
   * goes. (Reserving first matters: it may replace `this.out`.)
   */
  private frameHeader(length: number, type: FrameType, flags: number, id: number): number {
    const pos = this.reserve(FRAME_HEADER_BYTES + length);
    return writeFrameHeader(this.out, pos, length, type, flags, id);
  }

  private scheduleFlush(): void {
    if (this.reading || this.flushQueued) return;
    this.flushQueued = true;
    process.nextTick(flushConnection, this);
  }

  /** Writes what this turn produced in one piece. */
  flush(): void {
    this.flushQueued = false;
    if (this.closing && this.streams.size === 0 && !this.dead) {
      this.end();
      return;
    }
    const length = this.outLength;
    if (length === 0) return;
    if (!this.socket.writable) {
      this.outLength = 0; // the peer is gone: nothing can be written any more
      return;
    }
    const chunk = Buffer.allocUnsafe(length);
    this.out.copy(chunk, 0, 0, length);
    this.outLength = 0;
    this.socket.write(chunk);
    if (this.socket.writableLength > WRITE_BUFFER_HIGH && !this.socket.isPaused()) {
      // A peer that does not read: stop reading its requests until it does.
      this.socket.pause();
      this.socket.once('drain', () => this.socket.resume());
    }
  }

  private writeFrame(type: FrameType, flags: number, id: number, payload: Buffer | undefined): void {
    const length = payload === undefined ? 0 : payload.length;
    const pos = this.frameHeader(length, type, flags, id);
    if (payload !== undefined) payload.copy(this.out, pos);
  }

  private writeSettings(): void {
    const payload = Buffer.allocUnsafe(12);
    payload.writeUInt16BE(Setting.MAX_CONCURRENT_STREAMS, 0);
    payload.writeUInt32BE(this.options.maxConcurrentStreams, 2);
    payload.writeUInt16BE(Setting.MAX_HEADER_LIST_SIZE, 6);
    payload.writeUInt32BE(this.options.maxHeaderListBytes, 8);
    this.writeFrame(FrameType.SETTINGS, 0, 0, payload);
  }

  private writeWindowUpdate(id: number, increment: number): void {
    const pos = this.frameHeader(4, FrameType.WINDOW_UPDATE, 0, id);
    this.out.writeUInt32BE(increment, pos);
  }

  private writeRstStream(id: number, code: ErrorCode): void {
    const pos = this.frameHeader(4, FrameType.RST_STREAM, 0, id);
    this.out.writeUInt32BE(code, pos);
  }

  private writeGoaway(lastId: number, code: ErrorCode, debug: string): void {
    const text = Buffer.from(debug, 'utf8');
    const pos = this.frameHeader(8 + text.length, FrameType.GOAWAY, 0, 0);
    this.out.writeUInt32BE(lastId, pos);
    this.out.writeUInt32BE(code, pos + 4);
    text.copy(this.out, pos + 8);
  }

  /** A header block in one HEADERS frame, or HEADERS and CONTINUATIONs past the peer's frame size. */
  private writeHeaderFrame(id: number, block: Buffer, endStream: boolean): void {
    const max = this.peerMaxFrameSize;
    const endFlag = endStream ? Flag.END_STREAM : 0;
    if (block.length <= max) {
      const pos = this.frameHeader(block.length, FrameType.HEADERS, endFlag | Flag.END_HEADERS, id);
      block.copy(this.out, pos);
      return;
    }
    for (let from = 0; from < block.length; from += max) {
      const to = Math.min(from + max, block.length);
      const type = from === 0 ? FrameType.HEADERS : FrameType.CONTINUATION;
      const flags = (from === 0 ? endFlag : 0) | (to === block.length ? Flag.END_HEADERS : 0);
      const pos = this.frameHeader(to - from, type, flags, id);
      block.copy(this.out, pos, from, to);
    }
  }

  writeHeaders(stream: H2Stream, block: Buffer, endStream: boolean): void {
    if (stream.closed || stream.headersSent) return;
    stream.headersSent = true;
    this.writeHeaderFrame(stream.id, block, endStream);
    if (endStream) this.endedLocally(stream);
  }

  /** The common answer: all three frames in one reserve when the window allows. */
  writeAnswer(stream: H2Stream, headers: Buffer, payload: Buffer, trailers: Buffer): void {
    if (stream.closed || stream.headersSent) return;
    const length = payload.length;
    if (length > this.sendWindow || length > stream.sendWindow || length > this.peerMaxFrameSize) {
      this.writeHeaders(stream, headers, false);
      this.writeData(stream, payload, trailers);
      return;
    }
    stream.headersSent = true;
    this.sendWindow -= length;
    stream.sendWindow -= length;
    const id = stream.id;
    let pos = this.reserve(3 * FRAME_HEADER_BYTES + headers.length + length + trailers.length);
    pos = writeFrameHeader(this.out, pos, headers.length, FrameType.HEADERS, Flag.END_HEADERS, id);
    headers.copy(this.out, pos);
    pos = writeFrameHeader(this.out, pos + headers.length, length, FrameType.DATA, 0, id);
    payload.copy(this.out, pos);
    pos = writeFrameHeader(this.out, pos + length, trailers.length, FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, id);
    trailers.copy(this.out, pos);
    this.endedLocally(stream);
  }

  /** Response DATA (queued behind flow control), then optionally the trailers that end it. */
  writeData(stream: H2Stream, payload: Buffer | undefined, trailers: Buffer | undefined): void {
    if (stream.closed || stream.localEnded || stream.queuedTrailers !== undefined) return;
    if (payload !== undefined && payload.length > 0) (stream.queued ??= []).push(payload);
    if (trailers !== undefined) stream.queuedTrailers = trailers;
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
        return;
      }
      const take = Math.min(room, next.length);
      const pos = this.frameHeader(take, FrameType.DATA, 0, stream.id);
      next.copy(this.out, pos, 0, take);
      this.sendWindow -= take;
      stream.sendWindow -= take;
      if (take === next.length) queued.shift();
      else queued[0] = next.subarray(take);
    }
    this.blocked.delete(stream);
    const trailers = stream.queuedTrailers;
    if (trailers !== undefined) {
      stream.queuedTrailers = undefined;
      this.writeHeaderFrame(stream.id, trailers, true);
      this.endedLocally(stream);
    }
  }

  private sendBlocked(): void {
    for (const stream of this.blocked) {
      if (this.sendWindow <= 0) return;
      this.sendQueued(stream);
    }
  }

  /** A stream error on `id`: RST_STREAM, and the stream (if open) is over. */
  private streamError(id: number, code: ErrorCode): void {
    const stream = this.streams.get(id);
    this.writeRstStream(id, code);
    if (stream !== undefined) this.closeStream(stream);
    this.spendReset(); // provoked resets count too ("MadeYouReset")
  }

  /** The application ends a stream it will not answer further (not a reset the peer provoked). */
  resetStream(stream: H2Stream, code: ErrorCode): void {
    if (stream.closed) return;
    this.writeRstStream(stream.id, code);
    this.closeStream(stream);
  }

  /** Refuses a stream that was never opened. */
  private refuse(id: number, code: ErrorCode): void {
    this.writeRstStream(id, code);
    this.spendReset();
  }

  /** We sent END_STREAM: the stream is over once the client has too; an early answer cuts the rest. */
  private endedLocally(stream: H2Stream): void {
    stream.localEnded = true;
    // An answer before the whole request (an error): the client need not send the rest.
    if (!stream.remoteEnded) this.writeRstStream(stream.id, ErrorCode.NO_ERROR);
    this.closeStream(stream);
  }

  private finishIfDone(stream: H2Stream): void {
    if (stream.localEnded && stream.remoteEnded) this.closeStream(stream);
  }

  private closeStream(stream: H2Stream): void {
    if (stream.closed) return;
    stream.closed = true;
    this.streams.delete(stream.id);
    this.blocked.delete(stream);
    stream.queued = undefined;
    stream.queuedTrailers = undefined;
    this.bufferedBody -= stream.received;
    stream.body = [];
    if (stream.timer !== undefined) clearTimeout(stream.timer);
    this.handler.closed(stream);
    if (this.recvConsumed >= WINDOW_UPDATE_THRESHOLD) this.grantConnectionWindow();
    if (this.streams.size === 0) {
      this.armIdle();
      if (this.closing) this.scheduleFlush();
    }
  }

  // ---- deadlines ----

  /** Streams opened in this read with a deadline and still unanswered get a timer. */
  private armDeadlines(): void {
    if (this.awaitingDeadline.length === 0) return;
    const now = performance.now();
    for (const stream of this.awaitingDeadline) {
      if (stream.closed || stream.headersSent) continue;
      stream.timer = setTimeout(deadlinePassed, Math.min(Math.max(0, stream.deadlineAt - now), MAX_TIMER_MS), stream);
    }
    this.awaitingDeadline = [];
  }

  /** Called by the deadline timer. */
  deadlinePassed(stream: H2Stream): void {
    stream.timer = undefined;
    if (stream.closed || stream.headersSent) return;
    this.handler.deadline(stream);
  }

  // ---- connection lifecycle ----

  /** Graceful close: GOAWAY naming the last stream, the streams in flight finish, then the socket ends. */
  close(debug = ''): void {
    if (this.closing || this.dead) return;
    this.closing = true;
    this.writeGoaway(this.lastStreamId, ErrorCode.NO_ERROR, debug);
    this.scheduleFlush();
  }

  /** A connection error: GOAWAY with the code, then the socket ends. */
  fail(code: ErrorCode, debug: string): void {
    if (this.dead) return;
    this.writeGoaway(this.lastStreamId, code, debug);
    this.reading = false;
    this.end();
  }

  private end(): void {
    this.dead = true;
    this.flushQueued = true; // nothing more is written
    const length = this.outLength;
    this.outLength = 0;
    if (!this.socket.destroyed) {
      if (length > 0) this.socket.end(Buffer.from(this.out.subarray(0, length)));
      else this.socket.end();
      const kill = setTimeout(() => this.socket.destroy(), 1000);
      kill.unref();
      this.timers.push(kill);
    }
    this.closeAll();
  }

  /** Closes the socket at once. */
  destroy(): void {
    this.dead = true;
    this.socket.destroy();
    this.closeAll();
  }

  private onClose(): void {
    this.dead = true;
    this.closeAll();
  }

  private closeAll(): void {
    for (const stream of [...this.streams.values()]) this.closeStream(stream);
    for (const timer of this.timers) clearTimeout(timer);
    clearTimeout(this.idleTimer);
    clearTimeout(this.pingDeadline);
    this.timers.length = 0;
  }

  /** Sends a PING; the connection is destroyed when its ACK does not come in time. */
  private ping(timeoutMs: number): void {
    this.pingDeadline = setTimeout(() => this.destroy(), Math.min(timeoutMs, MAX_TIMER_MS));
    this.pingDeadline.unref();
    const payload = Buffer.alloc(8);
    payload.writeDoubleBE(performance.now());
    this.writeFrame(FrameType.PING, 0, 0, payload);
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

  private armIdle(): void {
    const idleMs = this.options.maxIdleMs;
    if (idleMs <= 0 || idleMs >= MAX_TIMER_MS || this.dead || this.closing) return;
    clearTimeout(this.idleTimer);
    this.idleTimer = setTimeout(() => this.close('max_idle'), idleMs);
    this.idleTimer.unref();
  }

  private disarmIdle(): void {
    if (this.idleTimer === undefined) return;
    clearTimeout(this.idleTimer);
    this.idleTimer = undefined;
  }
}

function flushConnection(connection: H2Connection): void {
  connection.flush();
}

function deadlinePassed(stream: H2Stream): void {
  stream.connection.deadlinePassed(stream);
}
