/**
 * At most one line per interval, with the count of those left out; `logWith` makes a line only
 * when it is written.
 */
import { ManualClock } from '../../src/platform/clock';
import { ThrottledLog } from '../../src/telemetry/throttled-log';

describe('ThrottledLog', () => {
  test('one line per interval, the next one saying how many were left out; logWith builds only the lines written', () => {
    const clock = new ManualClock(0);
    const lines: string[] = [];
    const log = new ThrottledLog((m) => lines.push(m), 1000, clock);
    let made = 0;
    const make = (a: string, b: string): string => {
      made++;
      return `full: ${a} ${b}`;
    };
    log.logWith(make, 'k1', 'x');
    log.log('plain');
    for (let i = 0; i < 100; i++) log.logWith(make, `k${i}`);
    clock.set(1000);
    log.logWith(make, 'last');
    expect(lines).toEqual(['full: k1 x', 'full: last  (101 similar messages suppressed)']);
    expect(made).toBe(2);
  });
});
