import { Backoff } from '../../../src/platform/backoff';
import { RESTART_DELAYS, restartDelay, STABLE_RUN_MS } from '../../../src/app/cluster/pool';

describe('worker restart delays', () => {
  test('100 ms, doubling while workers die young, up to 30 s', () => {
    const delays = new Backoff(RESTART_DELAYS);
    const seen = Array.from({ length: 11 }, () => restartDelay(delays, 50));
    expect(seen).toEqual([100, 200, 400, 800, 1600, 3200, 6400, 12_800, 25_600, 30_000, 30_000]);
  });

  test('a worker that ran 60 s before dying restarts after the first delay again', () => {
    expect(STABLE_RUN_MS).toBe(60_000);
    const delays = new Backoff(RESTART_DELAYS);
    restartDelay(delays, 0);
    restartDelay(delays, 0);
    expect(restartDelay(delays, STABLE_RUN_MS - 1)).toBe(400);
    expect(restartDelay(delays, STABLE_RUN_MS)).toBe(100);
    expect(restartDelay(delays, 0)).toBe(200);
  });

  test('a long crash loop stays at the cap (no overflow)', () => {
    const delays = new Backoff(RESTART_DELAYS);
    let last = 0;
    for (let i = 0; i < 2000; i++) last = restartDelay(delays, 0);
    expect(last).toBe(30_000);
  });
});
