/**
 * The streams of one connection by id, the highest id the client has used (ids at or below it
 * that are not open are closed), and the ids we reset lately: frames the client sent before our
 * RST_STREAM reached it are ignored on those (RFC 9113 5.4.2), where on any other closed stream
 * they are an error.
 */
import type { H2Stream } from './stream';

/** How many recently reset ids are remembered. */
const RECENT_RESETS = 128;

export class StreamTable {
  private readonly live = new Map<number, H2Stream>();
  /** The highest stream id the client has opened (or tried to). */
  lastId = 0;
  private recentResets: Int32Array | undefined;
  private nextReset = 0;

  get size(): number {
    return this.live.size;
  }

  get(id: number): H2Stream | undefined {
    return this.live.get(id);
  }

  add(stream: H2Stream): void {
    this.live.set(stream.id, stream);
  }

  delete(id: number): void {
    this.live.delete(id);
  }

  values(): IterableIterator<H2Stream> {
    return this.live.values();
  }

  /** Never opened: above every id the client has used. */
  isIdle(id: number): boolean {
    return id > this.lastId;
  }

  /** We sent RST_STREAM on `id`. */
  noteReset(id: number): void {
    const ring = (this.recentResets ??= new Int32Array(RECENT_RESETS));
    ring[this.nextReset] = id;
    this.nextReset = (this.nextReset + 1) % RECENT_RESETS;
  }

  /** We reset `id` lately, so the client may not know yet that it is closed. */
  wasReset(id: number): boolean {
    return this.recentResets !== undefined && this.recentResets.includes(id);
  }
}
