/**
 * What `candles download` shows on a terminal while it works: one bar for the symbol and time frame
 * being downloaded, redrawn in place, with the requests and candles so far and, while the rate
 * limiter holds the next request back, how long and why (a long download is mostly waiting):
 *
 *   EUR/USD m1 [###.......] 2/7 requests, 20000 candles, waiting 28 s for the broker's candle budget (2/minute)
 *
 * (on a narrow terminal: `…, waiting 28 s (2/minute)`).
 *
 * The bar is cleared when its download ends: the command's result line (stdout) takes its place.
 * Off a terminal nothing is drawn, and the result lines are the only output, one per symbol and
 * time frame.
 */
import { systemClock } from '../../../platform/clock';

export interface ProgressStream {
  write(text: string): unknown;
  isTTY?: boolean;
  columns?: number;
}

/** Characters of the bar itself. */
const BAR = 10;

export class DownloadProgress {
  private label = '';
  private planned = 0;
  private done = 0;
  private candles = 0;
  private waitUntilMs: number | undefined;
  private ticker: NodeJS.Timeout | undefined;

  /** The candle limit, e.g. "2/minute" (describeLimit), named while waiting. */
  budget: string | undefined;

  constructor(
    private readonly stream: ProgressStream,
    private readonly nowMs: () => number = () => systemClock.nowMs(),
  ) {}

  private get drawn(): boolean {
    return this.stream.isTTY === true;
  }

  /** A symbol and time frame starts: the requests it needs, the candles it has already. */
  start(label: string, requests: number, candles: number): void {
    this.label = label;
    this.planned = requests;
    this.done = 0;
    this.candles = candles;
    this.draw();
  }

  /** A request was answered: the candles so far. */
  answered(candles: number): void {
    this.done++;
    this.candles = candles;
    this.stopWaiting();
    this.draw();
  }

  /** The limiter holds the next request back for `seconds`; counted down once a second. */
  waiting(seconds: number): void {
    this.waitUntilMs = this.nowMs() + seconds * 1000;
    if (this.drawn && this.ticker === undefined) {
      this.ticker = setInterval(() => this.draw(), 1000);
      this.ticker.unref();
    }
    this.draw();
  }

  /** The download of this symbol and time frame ended (done or not): the bar is cleared. */
  finish(): void {
    this.stopWaiting();
    if (this.drawn) this.stream.write('\r\x1b[K');
  }

  /** The bar's text, at most `width` characters when it can (the wait is said shorter to fit). */
  line(width = Infinity): string {
    const fill = this.planned ? Math.round((Math.min(this.done, this.planned) / this.planned) * BAR) : BAR;
    const text = `${this.label} [${'#'.repeat(fill)}${'.'.repeat(BAR - fill)}] ${this.done}/${this.planned} requests, ${this.candles} candles`;
    const s = this.waitUntilMs === undefined ? 0 : Math.ceil((this.waitUntilMs - this.nowMs()) / 1000);
    if (s <= 0) return text;
    const budget = this.budget ? ` (${this.budget})` : '';
    const long = `${text}, waiting ${s} s for the broker's candle budget${budget}`;
    return long.length <= width ? long : `${text}, waiting ${s} s${budget}`;
  }

  private stopWaiting(): void {
    this.waitUntilMs = undefined;
    if (this.ticker !== undefined) clearInterval(this.ticker);
    this.ticker = undefined;
  }

  /** Redraws in place, cut to the terminal's width: a wrapped line would not be redrawn. */
  private draw(): void {
    if (!this.drawn) return;
    const width = (this.stream.columns || 80) - 1;
    this.stream.write(`\r${this.line(width).slice(0, width)}\x1b[K`);
  }
}
