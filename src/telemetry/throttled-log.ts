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
    const now = this.clock.nowMs();
    if (now < this.nextMs) {
      this.suppressed++;
      return;
    }
    this.nextMs = now + this.intervalMs;
    const s = this.suppressed;
    this.suppressed = 0;
    this.write(s > 0 ? `${msg} (${s} similar messages suppressed)` : msg);
  }
}
