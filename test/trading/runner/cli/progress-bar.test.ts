/** The backtest's progress bar: one line, ended once, also when the run stopped before its last candle. */
import { progressBar } from '../../../../src/trading/runner/cli/cli';

function bar() {
  const out: string[] = [];
  const stream = { write: (s: string) => out.push(s) } as unknown as NodeJS.WriteStream;
  return { progress: progressBar(stream), text: () => out.join('') };
}

test('a run to its last candle ends the line once, however often the end is reported', () => {
  const b = bar();
  b.progress(500, 1000);
  b.progress(1000, 1000);
  b.progress(1000, 1000, true);
  expect(b.text()).toBe('\r[###############...............] 50% 500/1000 candles\r[##############################] 100% 1000/1000 candles\n');
});

test('a run stopped early (a strategy error) ends the line at its last report', () => {
  const b = bar();
  b.progress(300, 1000);
  b.progress(302, 1000, true); // same percentage: no new bar, but the line ends
  expect(b.text()).toBe('\r[#########.....................] 30% 300/1000 candles\n');
});
