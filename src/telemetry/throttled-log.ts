/**
 * At most one line per interval for a message that repeats (a store failing on every request, a
 * full counter table), with the count of lines left out since the last one written.
 */
import { type Clock, systemClock } from '../platform/clock';

export class ThrottledLog {
  private nextMs = 0;
  private suppressed = 0;

  constructor(
    private readonly write: (msg: string) => void,
    private readonly intervalMs = 1000,
    private readonly clock: Clock = systemClock,
  ) {}

  log(msg: string): void {
    if (this.due()) this.emit(msg);
  }

  /**
   * As `log`, with the line made by `make(a, b)` only when it is written: a message repeated on
   * every request of a flood costs no text for the lines left out.
   */
  logWith(make: (a: string, b: string) => string, a: string, b = ''): void {
    if (this.due()) this.emit(make(a, b));
  }

  /** Whether a line may be written now; if not, one more is counted as left out. */
  private due(): boolean {
    const now = this.clock.nowMs();
    if (now < this.nextMs) {
      this.suppressed++;
      return false;
    }
    this.nextMs = now + this.intervalMs;
    return true;
  }

  private emit(msg: string): void {
    const s = this.suppressed;
    this.suppressed = 0;
    this.write(s > 0 ? `${msg} (${s} similar messages suppressed)` : msg);
  }
}
