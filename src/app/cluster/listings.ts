/**
 * A worker's /rlconfig and /debug/rlqs listings in progress. The primary pulls a listing piece by
 * piece (one query per piece), so neither process ever holds a big config's (or a hundred
 * thousand buckets') whole text, and the primary asks for the next piece only when its HTTP
 * client has taken the last one.
 */

/** A listing that is not pulled for this long is dropped (its client or the primary went away). */
export const LISTING_IDLE_MS = 30_000;
/** Listings open at once in one worker; the debug port is an operator's tool, not a hot path. */
export const MAX_OPEN_LISTINGS = 8;

interface Listing {
  readonly pieces: Iterator<string>;
  timer: NodeJS.Timeout;
}

export class Listings {
  private readonly open = new Map<number, Listing>();

  /** Starts listing `id` and returns its first piece ('' when it is empty, and then it is over). */
  start(id: number, pieces: Iterable<string>): string {
    if (this.open.has(id)) throw new Error(`listing ${id} is already open`);
    if (this.open.size >= MAX_OPEN_LISTINGS) throw new Error(`${MAX_OPEN_LISTINGS} listings (/rlconfig, /debug/rlqs) are in progress; try again when one ends`);
    const listing: Listing = { pieces: pieces[Symbol.iterator](), timer: this.idleTimer(id) };
    this.open.set(id, listing);
    return this.take(id, listing);
  }

  /** The next piece of listing `id`, '' at its end (the listing is then closed). */
  next(id: number): string {
    const listing = this.open.get(id);
    if (listing === undefined) throw new Error(`listing ${id} is not open (it ended, was idle for ${LISTING_IDLE_MS} ms, or this worker restarted)`);
    clearTimeout(listing.timer);
    listing.timer = this.idleTimer(id);
    return this.take(id, listing);
  }

  /** Drops listing `id` before its end (its client left). */
  end(id: number): void {
    const listing = this.open.get(id);
    if (listing === undefined) return;
    clearTimeout(listing.timer);
    this.open.delete(id);
    listing.pieces.return?.();
  }

  get size(): number {
    return this.open.size;
  }

  private take(id: number, listing: Listing): string {
    try {
      // '' means the end on the wire, so an empty piece is skipped rather than sent.
      for (let next = listing.pieces.next(); next.done !== true; next = listing.pieces.next()) if (next.value !== '') return next.value;
    } catch (err) {
      this.end(id);
      throw err;
    }
    this.end(id);
    return '';
  }

  private idleTimer(id: number): NodeJS.Timeout {
    const timer = setTimeout(() => this.end(id), LISTING_IDLE_MS);
    timer.unref();
    return timer;
  }
}
