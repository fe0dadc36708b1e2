/** The request bytes a connection holds for a request still arriving (HTTP/2 stream or HTTP/1.1 body). */
import type { ByteBudget } from './byte-budget';
import { EMPTY_BUFFER } from '../platform/bytes';

/** Owned storage starts at this and doubles, up to what the application accepts. */
const MIN_CAPACITY = 512;

/**
 * Request body bytes a server holds: received and not yet taken by the application. While the
 * application sees them (a callback) they may be a view of the socket read (lent); what it has
 * not taken when the callback returns is copied into storage of its own (`keep`), so a few bytes
 * never pin a whole socket read, and the storage is charged to the process's request budget.
 * Views returned by {@link bytes} and {@link take} are valid until the callback returns: copy
 * what must outlive it.
 */
export class HeldBody {
  private storage: Buffer = EMPTY_BUFFER;
  private start = 0;
  private lent = false;
  /** Bytes held. */
  length = 0;

  constructor(private readonly budget: ByteBudget) {}

  /** The bytes held, contiguous. */
  bytes(): Buffer {
    return this.length === 0 ? EMPTY_BUFFER : this.storage.subarray(this.start, this.start + this.length);
  }

  /** The first `n` bytes, no longer held. */
  take(n: number): Buffer {
    const out = this.storage.subarray(this.start, this.start + n);
    this.start += n;
    this.length -= n;
    // Emptied: its storage goes back (the view handed out stays valid).
    if (this.length === 0) this.free();
    return out;
  }

  /**
   * Received bytes `buf[from, to)`: held as a view while the application sees them when nothing
   * is held and no storage is owned (`keep` copies what is left), else appended. False, holding
   * nothing more, when the budget cannot hold them.
   */
  receive(buf: Buffer, from: number, to: number, hint: number): boolean {
    if (this.length > 0 || this.storage.length > 0) return this.append(buf, from, to, hint);
    this.storage = buf.subarray(from, to);
    this.start = 0;
    this.length = to - from;
    this.lent = true;
    return true;
  }

  /**
   * Owned storage for `total` bytes from the first held one, taken from the budget now (exactly,
   * no doubling): room promised before the bytes are sent. False, changing nothing, when the
   * budget cannot hold it.
   */
  ensureRoom(total: number): boolean {
    // A hint of the total itself: reserve grows to exactly that.
    return this.reserve(total, total);
  }

  /** Appends `buf[from, to)`; false, appending nothing, when the budget cannot hold it. `hint`: the most the application accepts. */
  append(buf: Buffer, from: number, to: number, hint: number): boolean {
    const n = to - from;
    if (!this.reserve(this.length + n, hint)) return false;
    buf.copy(this.storage, this.start + this.length, from, to);
    this.length += n;
    return true;
  }

  /** A lent view becomes owned storage; false when the budget cannot hold it. */
  keep(hint: number): boolean {
    return !this.lent || this.reserve(this.length, hint);
  }

  /** Drops what is held and gives its storage back. */
  free(): void {
    if (!this.lent) this.budget.give(this.storage.length);
    this.lent = false;
    this.storage = EMPTY_BUFFER;
    this.start = 0;
    this.length = 0;
  }

  /** Owned room for `total` bytes from the start of the storage (a lent view becomes owned). */
  private reserve(total: number, hint: number): boolean {
    const capacity = this.lent ? 0 : this.storage.length;
    if (total <= capacity - this.start) return true;
    if (total <= capacity) {
      this.storage.copy(this.storage, 0, this.start, this.start + this.length);
      this.start = 0;
      return true;
    }
    const size = Math.max(total, Math.min(Math.max(capacity * 2, MIN_CAPACITY), hint));
    if (!this.budget.tryTakeForBody(size - capacity)) return false;
    this.replaceStorage(Buffer.allocUnsafe(size));
    return true;
  }

  /** Moves what is held to the start of `bigger`, which becomes the storage (its charge already taken). */
  private replaceStorage(bigger: Buffer): void {
    this.storage.copy(bigger, 0, this.start, this.start + this.length);
    this.storage = bigger;
    this.start = 0;
    this.lent = false;
  }
}

