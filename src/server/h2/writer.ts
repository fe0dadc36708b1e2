/**
 * The frames a connection writes in one turn, gathered in one buffer and handed to the socket in
 * one write. The buffer starts small (an idle connection holds a few hundred bytes), grows as a
 * turn needs, and shrinks back once a large turn is written.
 */
import { ErrorCode, Flag, FRAME_HEADER_BYTES, FrameType, Setting, writeFrameHeader } from './frames';

const INITIAL_BYTES = 256;
/** Storage above this is not kept after a write. */
const KEEP_BYTES = 16 * 1024;

export class FrameWriter {
  private out = Buffer.allocUnsafe(INITIAL_BYTES);
  /** Bytes gathered and not yet taken. */
  length = 0;

  /** Room for `bytes` more; returns the position to write at. */
  reserve(bytes: number): number {
    const pos = this.length;
    if (pos + bytes > this.out.length) {
      const bigger = Buffer.allocUnsafe(Math.max(this.out.length * 2, pos + bytes));
      this.out.copy(bigger, 0, 0, pos);
      this.out = bigger;
    }
    this.length = pos + bytes;
    return pos;
  }

  /** The buffer a reserved position refers to (valid until the next reserve). */
  get buffer(): Buffer {
    return this.out;
  }

  /**
   * Reserves a frame of `length` payload bytes and writes its header; returns where the payload
   * goes. (Reserving first matters: it may replace the buffer.)
   */
  frameHeader(length: number, type: FrameType, flags: number, id: number): number {
    const pos = this.reserve(FRAME_HEADER_BYTES + length);
    return writeFrameHeader(this.out, pos, length, type, flags, id);
  }

  frame(type: FrameType, flags: number, id: number, payload: Buffer | undefined): void {
    const pos = this.frameHeader(payload === undefined ? 0 : payload.length, type, flags, id);
    if (payload !== undefined) payload.copy(this.out, pos);
  }

  /** Our SETTINGS: the stream cap, the initial stream window and the header list limit (the others are the defaults). */
  settings(maxConcurrentStreams: number, initialWindow: number, maxHeaderListBytes: number): void {
    const pos = this.frameHeader(18, FrameType.SETTINGS, 0, 0);
    this.out.writeUInt16BE(Setting.MAX_CONCURRENT_STREAMS, pos);
    this.out.writeUInt32BE(maxConcurrentStreams, pos + 2);
    this.out.writeUInt16BE(Setting.INITIAL_WINDOW_SIZE, pos + 6);
    this.out.writeUInt32BE(initialWindow, pos + 8);
    this.out.writeUInt16BE(Setting.MAX_HEADER_LIST_SIZE, pos + 12);
    this.out.writeUInt32BE(maxHeaderListBytes, pos + 14);
  }

  windowUpdate(id: number, increment: number): void {
    const pos = this.frameHeader(4, FrameType.WINDOW_UPDATE, 0, id);
    this.out.writeUInt32BE(increment, pos);
  }

  rstStream(id: number, code: ErrorCode): void {
    const pos = this.frameHeader(4, FrameType.RST_STREAM, 0, id);
    this.out.writeUInt32BE(code, pos);
  }

  goaway(lastId: number, code: ErrorCode, debug: string): void {
    const text = Buffer.from(debug, 'utf8');
    const pos = this.frameHeader(8 + text.length, FrameType.GOAWAY, 0, 0);
    this.out.writeUInt32BE(lastId, pos);
    this.out.writeUInt32BE(code, pos + 4);
    text.copy(this.out, pos + 8);
  }

  /** A header block in one HEADERS frame, or HEADERS and CONTINUATIONs past `maxFrame`. */
  headerBlock(id: number, block: Buffer, endStream: boolean, maxFrame: number): void {
    const endFlag = endStream ? Flag.END_STREAM : 0;
    if (block.length <= maxFrame) {
      const pos = this.frameHeader(block.length, FrameType.HEADERS, endFlag | Flag.END_HEADERS, id);
      block.copy(this.out, pos);
      return;
    }
    for (let from = 0; from < block.length; from += maxFrame) {
      const to = Math.min(from + maxFrame, block.length);
      const type = from === 0 ? FrameType.HEADERS : FrameType.CONTINUATION;
      const flags = (from === 0 ? endFlag : 0) | (to === block.length ? Flag.END_HEADERS : 0);
      const pos = this.frameHeader(to - from, type, flags, id);
      block.copy(this.out, pos, from, to);
    }
  }

  /** A whole answer in one reserve: HEADERS, one DATA frame, trailers (the caller checked the windows). */
  answer(id: number, headers: Buffer, payload: Buffer, trailers: Buffer): void {
    const length = payload.length;
    let pos = this.reserve(3 * FRAME_HEADER_BYTES + headers.length + length + trailers.length);
    const out = this.out;
    pos = writeFrameHeader(out, pos, headers.length, FrameType.HEADERS, Flag.END_HEADERS, id);
    headers.copy(out, pos);
    pos = writeFrameHeader(out, pos + headers.length, length, FrameType.DATA, 0, id);
    payload.copy(out, pos);
    pos = writeFrameHeader(out, pos + length, trailers.length, FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, id);
    trailers.copy(out, pos);
  }

  /** DATA of `payload[from, to)`. */
  data(id: number, payload: Buffer, from: number, to: number): void {
    const pos = this.frameHeader(to - from, FrameType.DATA, 0, id);
    payload.copy(this.out, pos, from, to);
  }

  /** The gathered bytes as a buffer of their own (for the socket), and an empty writer. */
  take(): Buffer {
    const chunk = Buffer.allocUnsafe(this.length);
    this.out.copy(chunk, 0, 0, this.length);
    this.length = 0;
    if (this.out.length > KEEP_BYTES) this.out = Buffer.allocUnsafe(INITIAL_BYTES);
    return chunk;
  }

  /** Forgets what was gathered. */
  clear(): void {
    this.length = 0;
  }
}
