/**
 * A raw HTTP/2 client for tests of our HTTP/2 server: frames built byte by byte (any type, flags,
 * stream id and payload, valid or not), HPACK representations written by hand, and a reader that
 * parses the server's frames from the socket so a test can wait for exactly the frame it expects.
 */
import net from 'node:net';
import { RateLimitRequest } from '../../generated/envoy/service/ratelimit/v3/rls';
import { CONNECTION_PREFACE, Flag, FrameType } from '../../src/server/h2/frames';
import { encodeHeaderBlock, HpackDecoder } from '../../src/server/h2/hpack';
import { HUFFMAN_CODES, HUFFMAN_LENGTHS } from '../../src/server/h2/huffman';

export const SHOULD_RATE_LIMIT = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';
export const PREFACE = CONNECTION_PREFACE;
const EMPTY = Buffer.alloc(0);

// ---- frames ----

/** Any frame: the 9-byte header (length from the payload) and the payload. */
export function frame(type: number, flags: number, streamId: number, payload: Uint8Array = EMPTY): Buffer {
  const out = Buffer.allocUnsafe(9 + payload.length);
  out.writeUIntBE(payload.length, 0, 3);
  out[3] = type;
  out[4] = flags;
  out.writeUInt32BE(streamId >>> 0, 5);
  out.set(payload, 9);
  return out;
}

/** A frame header alone, declaring `length` bytes that may never follow. */
export function frameHeader(length: number, type: number, flags: number, streamId: number): Buffer {
  const out = Buffer.allocUnsafe(9);
  out.writeUIntBE(length, 0, 3);
  out[3] = type;
  out[4] = flags;
  out.writeUInt32BE(streamId >>> 0, 5);
  return out;
}

export function settingsFrame(entries: ReadonlyArray<readonly [number, number]> = []): Buffer {
  const payload = Buffer.allocUnsafe(entries.length * 6);
  entries.forEach(([key, value], i) => {
    payload.writeUInt16BE(key, i * 6);
    payload.writeUInt32BE(value, i * 6 + 2);
  });
  return frame(FrameType.SETTINGS, 0, 0, payload);
}

export function settingsAckFrame(): Buffer {
  return frame(FrameType.SETTINGS, Flag.ACK, 0);
}

export function pingFrame(data: Buffer = Buffer.alloc(8), ack = false): Buffer {
  return frame(FrameType.PING, ack ? Flag.ACK : 0, 0, data);
}

export function windowUpdateFrame(streamId: number, increment: number): Buffer {
  const payload = Buffer.allocUnsafe(4);
  payload.writeUInt32BE(increment);
  return frame(FrameType.WINDOW_UPDATE, 0, streamId, payload);
}

export function rstStreamFrame(streamId: number, code: number): Buffer {
  const payload = Buffer.allocUnsafe(4);
  payload.writeUInt32BE(code);
  return frame(FrameType.RST_STREAM, 0, streamId, payload);
}

export function goawayFrame(lastStreamId: number, code: number): Buffer {
  const payload = Buffer.allocUnsafe(8);
  payload.writeUInt32BE(lastStreamId, 0);
  payload.writeUInt32BE(code, 4);
  return frame(FrameType.GOAWAY, 0, 0, payload);
}

export function headersFrame(streamId: number, block: Uint8Array, { endStream = false, endHeaders = true } = {}): Buffer {
  const flags = (endStream ? Flag.END_STREAM : 0) | (endHeaders ? Flag.END_HEADERS : 0);
  return frame(FrameType.HEADERS, flags, streamId, block);
}

export function continuationFrame(streamId: number, fragment: Uint8Array, endHeaders: boolean): Buffer {
  return frame(FrameType.CONTINUATION, endHeaders ? Flag.END_HEADERS : 0, streamId, fragment);
}

export function dataFrame(streamId: number, payload: Uint8Array, endStream = false): Buffer {
  return frame(FrameType.DATA, endStream ? Flag.END_STREAM : 0, streamId, payload);
}

/** A header block split into HEADERS and CONTINUATION frames of at most `maxFragment` bytes. */
export function headerBlockFrames(streamId: number, block: Buffer, endStream: boolean, maxFragment = 16_384): Buffer[] {
  const frames: Buffer[] = [];
  for (let from = 0; from === 0 || from < block.length; from += maxFragment) {
    const fragment = block.subarray(from, from + maxFragment);
    const last = from + maxFragment >= block.length;
    frames.push(from === 0 ? headersFrame(streamId, fragment, { endStream, endHeaders: last }) : continuationFrame(streamId, fragment, last));
  }
  return frames;
}

// ---- requests ----

/** The header block of a gRPC ShouldRateLimit call (literals, no table state), plus `extra` fields. */
export function requestBlock(extra: ReadonlyArray<readonly [string, string]> = [], path = SHOULD_RATE_LIMIT): Buffer {
  return encodeHeaderBlock([
    [':method', 'POST'],
    [':scheme', 'http'],
    [':path', path],
    [':authority', '127.0.0.1'],
    ['content-type', 'application/grpc'],
    ['te', 'trailers'],
    ...extra,
  ]);
}

/** A message with its 5-byte gRPC prefix (uncompressed). */
export function grpcMessage(message: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(5 + message.length);
  out[0] = 0;
  out.writeUInt32BE(message.length, 1);
  out.set(message, 5);
  return out;
}

/** A ShouldRateLimit request for one descriptor, framed for gRPC. */
export function rateLimitMessage(entries: Record<string, string> = { user: 'alice' }, domain = 'd'): Buffer {
  const request: RateLimitRequest = {
    domain,
    descriptors: [{ entries: Object.entries(entries).map(([key, value]) => ({ key, value })), limit: undefined, hitsAddend: undefined }],
    hitsAddend: 0,
  };
  return grpcMessage(RateLimitRequest.encode(request).finish());
}

/** A whole unary call on `streamId`: HEADERS, then the message in DATA with END_STREAM. */
export function rateLimitCall(streamId: number, block: Buffer = requestBlock()): Buffer {
  return Buffer.concat([headersFrame(streamId, block), dataFrame(streamId, rateLimitMessage(), true)]);
}

// ---- HPACK by hand (RFC 7541 section 5 and 6) ----

/** An integer with an N-bit prefix; `firstBits` are the representation's bits above the prefix. */
export function hpackInteger(value: number, prefixBits: number, firstBits = 0): Buffer {
  const mask = (1 << prefixBits) - 1;
  if (value < mask) return Buffer.from([firstBits | value]);
  const bytes = [firstBits | mask];
  let rest = value - mask;
  while (rest >= 128) {
    bytes.push((rest % 128) | 0x80);
    rest = Math.floor(rest / 128);
  }
  bytes.push(rest);
  return Buffer.from(bytes);
}

/** A string literal, plain or Huffman-coded. */
export function hpackString(text: string, huffman = false): Buffer {
  const octets = huffman ? huffmanEncode(text) : Buffer.from(text, 'latin1');
  return Buffer.concat([hpackInteger(octets.length, 7, huffman ? 0x80 : 0), octets]);
}

/** Indexed field (6.1). */
export function indexedField(index: number): Buffer {
  return hpackInteger(index, 7, 0x80);
}

/** Literal with incremental indexing and a new name (6.2.1): the field enters the dynamic table. */
export function literalWithIndexing(name: string, value: string, huffman = false): Buffer {
  return Buffer.concat([Buffer.from([0x40]), hpackString(name, huffman), hpackString(value, huffman)]);
}

/** Literal with incremental indexing whose name is table entry `nameIndex`. */
export function literalWithIndexingIndexedName(nameIndex: number, value: string, huffman = false): Buffer {
  return Buffer.concat([hpackInteger(nameIndex, 6, 0x40), hpackString(value, huffman)]);
}

/** Literal without indexing and a new name (6.2.2). */
export function literalWithoutIndexing(name: string, value: string, huffman = false): Buffer {
  return Buffer.concat([Buffer.from([0x00]), hpackString(name, huffman), hpackString(value, huffman)]);
}

/** Dynamic table size update (6.3). */
export function tableSizeUpdate(size: number): Buffer {
  return hpackInteger(size, 5, 0x20);
}

/** RFC 7541 Appendix B Huffman coding, padded with the most significant bits of EOS (all ones). */
export function huffmanEncode(text: string): Buffer {
  const bytes: number[] = [];
  // Pending bits as a number (at most 7 left over + a 30-bit code: exact in a double).
  let pending = 0;
  let bits = 0;
  for (let i = 0; i < text.length; i++) {
    const symbol = text.charCodeAt(i) & 0xff;
    const length = HUFFMAN_LENGTHS[symbol]!;
    pending = pending * 2 ** length + HUFFMAN_CODES[symbol]!;
    bits += length;
    while (bits >= 8) {
      const shift = 2 ** (bits - 8);
      bytes.push(Math.floor(pending / shift));
      pending %= shift;
      bits -= 8;
    }
  }
  if (bits > 0) bytes.push(pending * 2 ** (8 - bits) + (2 ** (8 - bits) - 1));
  return Buffer.from(bytes);
}

// ---- reading the server ----

export interface Frame {
  type: number;
  flags: number;
  streamId: number;
  payload: Buffer;
}

export interface Goaway {
  lastStreamId: number;
  code: number;
  debug: string;
}

/** What came back on one stream. */
export interface StreamAnswer {
  headers: Record<string, string> | undefined;
  trailers: Record<string, string> | undefined;
  data: Buffer[];
  ended: boolean;
  /** The RST_STREAM error code, when the server reset the stream. */
  reset: number | undefined;
}

/** The gRPC status of an answer: in the trailers, or in the headers of a trailers-only answer. */
export function grpcStatusOf(answer: StreamAnswer): string | undefined {
  return answer.trailers?.['grpc-status'] ?? answer.headers?.['grpc-status'];
}

interface Waiter {
  matches: (frame: Frame) => boolean;
  what: string;
  resolve: (frame: Frame) => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout;
}

const openClients = new Set<RawH2Client>();

/** Destroys every raw client still open (for afterEach). */
export function closeRawClients(): void {
  for (const client of openClients) client.close();
  openClients.clear();
}

export interface ConnectOptions {
  /** Send the preface and SETTINGS and wait for the server's SETTINGS and ACK (default true). */
  handshake?: boolean;
  /** Our SETTINGS entries. */
  settings?: ReadonlyArray<readonly [number, number]>;
}

/**
 * A raw HTTP/2 client connection. Every server frame is parsed, and kept in `frames` except the
 * acknowledgements of PING and SETTINGS, which are only counted (a flood test may provoke millions).
 */
export class RawH2Client {
  readonly frames: Frame[] = [];
  readonly streams = new Map<number, StreamAnswer>();
  pingAcks = 0;
  settingsAcks = 0;
  bytesReceived = 0;
  closed = false;
  /** Server header blocks that did not decode (a test may assert there are none). */
  readonly decodeErrors: string[] = [];
  private pending: Buffer = EMPTY;
  private readonly waiters = new Set<Waiter>();
  private readonly closeWaiters: Array<() => void> = [];
  private readonly decoder = new HpackDecoder();
  private blockStream = 0;
  private blockParts: Buffer[] = [];
  private blockEndStream = false;
  private pings = 0;
  /** DATA payload bytes sent by sendWithinWindows, per stream and in all (key 0). */
  private readonly dataSent = new Map<number, number>();

  private constructor(readonly socket: net.Socket) {
    openClients.add(this);
    socket.on('data', (chunk: Buffer) => this.onData(chunk));
    // Writes after the server closed fail with EPIPE or ECONNRESET: a normal end of an abuse.
    socket.on('error', () => undefined);
    socket.on('close', () => {
      this.closed = true;
      for (const waiter of this.waiters) {
        clearTimeout(waiter.timer);
        waiter.reject(new Error(`connection closed while waiting for ${waiter.what}`));
      }
      this.waiters.clear();
      for (const resolve of this.closeWaiters.splice(0)) resolve();
    });
  }

  static async connect(port: number, { handshake = true, settings = [] }: ConnectOptions = {}): Promise<RawH2Client> {
    const socket = net.connect(port, '127.0.0.1');
    socket.setNoDelay(true);
    const client = new RawH2Client(socket);
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', resolve);
      socket.once('error', reject);
    });
    if (handshake) {
      client.send(PREFACE, settingsFrame(settings));
      await client.waitForFrame((f) => f.type === FrameType.SETTINGS && (f.flags & Flag.ACK) === 0, "the server's SETTINGS");
      client.send(settingsAckFrame());
      await client.waitFor(() => client.settingsAcks > 0, 'the ACK of our SETTINGS');
    }
    return client;
  }

  send(...chunks: Buffer[]): void {
    if (!this.socket.destroyed) this.socket.write(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks));
  }

  close(): void {
    openClients.delete(this);
    this.socket.destroy();
  }

  /** The first frame (received so far or later) that matches; fails on close or after `timeoutMs`. */
  waitForFrame(matches: (frame: Frame) => boolean, what: string, timeoutMs = 10_000): Promise<Frame> {
    const seen = this.frames.find(matches);
    if (seen !== undefined) return Promise.resolve(seen);
    if (this.closed) return Promise.reject(new Error(`connection closed before ${what}`));
    return new Promise((resolve, reject) => {
      const waiter: Waiter = {
        matches,
        what,
        resolve,
        reject,
        timer: setTimeout(() => {
          this.waiters.delete(waiter);
          reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`));
        }, timeoutMs),
      };
      this.waiters.add(waiter);
    });
  }

  /** A condition over what was received, checked after each frame. */
  async waitFor(condition: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
    if (!condition()) await this.waitForFrame(() => condition(), what, timeoutMs);
  }

  waitForClose(timeoutMs = 10_000): Promise<void> {
    if (this.closed) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`timed out after ${timeoutMs} ms waiting for the server to close`)), timeoutMs);
      this.closeWaiters.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  goaway(): Goaway | undefined {
    const f = this.frames.find((x) => x.type === FrameType.GOAWAY);
    if (f === undefined) return undefined;
    return { lastStreamId: f.payload.readUInt32BE(0) & 0x7fffffff, code: f.payload.readUInt32BE(4), debug: f.payload.toString('utf8', 8) };
  }

  goawayCode(): number | undefined {
    return this.goaway()?.code;
  }

  async waitForGoaway(timeoutMs = 10_000): Promise<Goaway> {
    await this.waitForFrame((f) => f.type === FrameType.GOAWAY, 'GOAWAY', timeoutMs);
    return this.goaway()!;
  }

  /**
   * A PING and its ACK: the server writes in order, so everything it wrote before answering is in
   * once this resolves (the event-based way to say "nothing more came").
   */
  async roundTrip(timeoutMs = 10_000): Promise<void> {
    const payload = Buffer.alloc(8);
    payload.write('rt', 0, 'latin1');
    payload.writeUInt32BE(++this.pings, 4);
    this.send(pingFrame(payload));
    await this.waitForFrame((f) => f.type === FrameType.PING && (f.flags & Flag.ACK) !== 0 && f.payload.equals(payload), 'a PING ACK', timeoutMs);
  }

  /** The window the server granted on `streamId` (0: the connection) beyond the initial 65,535. */
  granted(streamId: number): number {
    let sum = 0;
    for (const f of this.frames) if (f.type === FrameType.WINDOW_UPDATE && f.streamId === streamId) sum += f.payload.readUInt32BE(0) & 0x7fffffff;
    return sum;
  }

  /**
   * Sends `bytes` on `streamId` as DATA frames of at most 16 KiB, within the windows the server
   * grants (65,535 for the connection, its SETTINGS' for a stream, at first), waiting for its
   * WINDOW_UPDATEs; `end` ends the stream.
   * Resolves once everything is sent.
   */
  async sendWithinWindows(streamId: number, bytes: Buffer, end = false): Promise<void> {
    let at = 0;
    for (;;) {
      const updates = this.frames.filter((f) => f.type === FrameType.WINDOW_UPDATE).length;
      at += this.sendWhatWindowsAllow(streamId, bytes, at);
      if (at === bytes.length) break;
      await this.waitFor(() => this.frames.filter((f) => f.type === FrameType.WINDOW_UPDATE).length > updates, `window on stream ${streamId}`);
    }
    if (end) this.send(dataFrame(streamId, EMPTY, true));
  }

  /** The server's SETTINGS_INITIAL_WINDOW_SIZE (what a new stream may carry before any update). */
  serverStreamWindow(): number {
    const settings = this.frames.find((f) => f.type === FrameType.SETTINGS && (f.flags & Flag.ACK) === 0);
    for (let p = 0; settings !== undefined && p + 6 <= settings.payload.length; p += 6) {
      if (settings.payload.readUInt16BE(p) === 0x4) return settings.payload.readUInt32BE(p + 2);
    }
    return 65_535;
  }

  /** Sends as much of `bytes[from...]` on `streamId` as the windows allow now; returns how much. */
  sendWhatWindowsAllow(streamId: number, bytes: Buffer, from: number): number {
    const sentOn = (id: number): number => this.dataSent.get(id) ?? 0;
    const room = Math.min(65_535 + this.granted(0) - sentOn(0), this.serverStreamWindow() + this.granted(streamId) - sentOn(streamId), bytes.length - from);
    for (let n = 0; n < room; n += 16_384) this.send(dataFrame(streamId, bytes.subarray(from + n, from + Math.min(room, n + 16_384))));
    const sent = Math.max(0, room);
    this.dataSent.set(0, sentOn(0) + sent);
    this.dataSent.set(streamId, sentOn(streamId) + sent);
    return sent;
  }

  /** DATA payload bytes sent within the windows on `streamId` (0: in all). */
  sentWithinWindows(streamId: number): number {
    return this.dataSent.get(streamId) ?? 0;
  }

  /** The answer on `streamId` once it has ended (END_STREAM) or been reset. */
  async answer(streamId: number, timeoutMs = 10_000): Promise<StreamAnswer> {
    const done = (): boolean => {
      const s = this.streams.get(streamId);
      return s !== undefined && (s.ended || s.reset !== undefined);
    };
    await this.waitFor(done, `the end of stream ${streamId}`, timeoutMs);
    return this.streams.get(streamId)!;
  }

  private stream(id: number): StreamAnswer {
    let s = this.streams.get(id);
    if (s === undefined) {
      s = { headers: undefined, trailers: undefined, data: [], ended: false, reset: undefined };
      this.streams.set(id, s);
    }
    return s;
  }

  private onData(chunk: Buffer): void {
    this.bytesReceived += chunk.length;
    const buf = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk]);
    let pos = 0;
    while (buf.length - pos >= 9) {
      const length = buf.readUIntBE(pos, 3);
      if (buf.length - pos - 9 < length) break;
      const f: Frame = {
        type: buf[pos + 3]!,
        flags: buf[pos + 4]!,
        streamId: buf.readUInt32BE(pos + 5) & 0x7fffffff,
        payload: buf.subarray(pos + 9, pos + 9 + length),
      };
      pos += 9 + length;
      this.onFrame(f);
    }
    this.pending = buf.subarray(pos);
  }

  private onFrame(f: Frame): void {
    const ack = (f.flags & Flag.ACK) !== 0;
    if (f.type === FrameType.PING && ack) this.pingAcks++;
    else if (f.type === FrameType.SETTINGS && ack) this.settingsAcks++;
    else this.frames.push(f);
    switch (f.type) {
      case FrameType.HEADERS:
        this.blockStream = f.streamId;
        this.blockParts = [f.payload];
        this.blockEndStream = (f.flags & Flag.END_STREAM) !== 0;
        if ((f.flags & Flag.END_HEADERS) !== 0) this.endBlock();
        break;
      case FrameType.CONTINUATION:
        this.blockParts.push(f.payload);
        if ((f.flags & Flag.END_HEADERS) !== 0) this.endBlock();
        break;
      case FrameType.DATA: {
        const s = this.stream(f.streamId);
        s.data.push(Buffer.from(f.payload));
        if ((f.flags & Flag.END_STREAM) !== 0) s.ended = true;
        break;
      }
      case FrameType.RST_STREAM:
        this.stream(f.streamId).reset = f.payload.readUInt32BE(0);
        break;
      default:
        break;
    }
    for (const waiter of this.waiters) {
      if (!waiter.matches(f)) continue;
      clearTimeout(waiter.timer);
      this.waiters.delete(waiter);
      waiter.resolve(f);
    }
  }

  /** Decodes a response header block: the first of a stream is its headers, a second its trailers. */
  private endBlock(): void {
    const block = Buffer.concat(this.blockParts);
    const fields: string[] = [];
    try {
      this.decoder.decode(block, 0, block.length, fields, Number.MAX_SAFE_INTEGER);
    } catch (err) {
      // Recorded, not thrown: a throw here would escape the socket's data handler.
      this.decodeErrors.push(`stream ${this.blockStream}: ${String(err)}`);
    }
    const decoded: Record<string, string> = {};
    for (let i = 0; i < fields.length; i += 2) decoded[fields[i]!] = fields[i + 1]!;
    const s = this.stream(this.blockStream);
    if (s.headers === undefined) s.headers = decoded;
    else s.trailers = decoded;
    if (this.blockEndStream) s.ended = true;
  }
}
