/** The progress bar of `candles download` (candles-progress.ts) on a terminal, and its silence off one. */
import { DownloadProgress, type ProgressStream } from '../../../../src/trading/runner/candles/candles-progress';

function terminal(isTTY: boolean, columns = 200): ProgressStream & { out: string } {
  const s = {
    out: '',
    isTTY,
    columns,
    write(t: string) {
      s.out += t;
      return true;
    },
  };
  return s;
}

/** What the terminal shows last: the text after the last carriage return, without the clear-line code. */
const shown = (out: string) => out.slice(out.lastIndexOf('\r') + 1).replace('\x1b[K', '');

describe('candle download progress', () => {
  test('a bar per symbol and time frame: requests and candles so far, and the wait for the candle budget counted down', () => {
    let now = 1_000_000;
    const tty = terminal(true);
    const p = new DownloadProgress(tty, () => now);
    p.budget = '2/minute';
    p.start('EUR/USD m1', 4, 1200);
    expect(shown(tty.out)).toBe('EUR/USD m1 [..........] 0/4 requests, 1200 candles');
    p.answered(11200);
    expect(shown(tty.out)).toBe('EUR/USD m1 [###.......] 1/4 requests, 11200 candles');
    p.waiting(28);
    expect(shown(tty.out)).toBe("EUR/USD m1 [###.......] 1/4 requests, 11200 candles, waiting 28 s for the broker's candle budget (2/minute)");
    now += 10_500;
    expect(p.line()).toBe("EUR/USD m1 [###.......] 1/4 requests, 11200 candles, waiting 18 s for the broker's candle budget (2/minute)");
    p.answered(21200);
    expect(shown(tty.out)).toBe('EUR/USD m1 [#####.....] 2/4 requests, 21200 candles');
    p.finish();
    expect(tty.out.endsWith('\r\x1b[K')).toBe(true);
  });

  test('on a narrow terminal the wait is said shortly and the line is cut to the width', () => {
    const tty = terminal(true, 80);
    const p = new DownloadProgress(tty, () => 0);
    p.budget = '2/minute';
    p.start('EUR/USD m15', 7, 52000);
    p.waiting(28);
    expect(shown(tty.out)).toBe('EUR/USD m15 [..........] 0/7 requests, 52000 candles, waiting 28 s (2/minute)');
    p.start('A-VERY-LONG-SYMBOL-NAME/WITH-MORE m15', 7, 52000);
    expect(shown(tty.out)).toHaveLength(79);
    p.finish();
  });

  test('not a terminal: nothing is drawn', () => {
    const pipe = terminal(false);
    const p = new DownloadProgress(pipe);
    p.start('EUR/USD m1', 2, 0);
    p.waiting(30);
    p.answered(10);
    p.finish();
    expect(pipe.out).toBe('');
  });
});
