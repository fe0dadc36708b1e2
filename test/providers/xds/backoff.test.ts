import { Backoff } from '../../../src/providers/xds/backoff';

function seq(b: Backoff, n: number): number[] {
  return Array.from({ length: n }, () => b.next());
}

describe('xDS reconnect backoff', () => {
  test('without jitter: doubles from the initial interval and caps at the max', () => {
    const b = new Backoff({ initialIntervalMs: 100, maxIntervalMs: 1000, randomFactor: 0.5, jitter: false });
    expect(seq(b, 6)).toEqual([100, 200, 400, 800, 1000, 1000]);
    expect(b.attempts).toBe(6);
  });

  test('the random factor is a jitter fraction around the base: base × (1 ± f·r)', () => {
    const values = [0, 0.5, 0.999999, 0.25];
    let i = 0;
    const b = new Backoff({ initialIntervalMs: 1000, maxIntervalMs: 60_000, randomFactor: 0.5, jitter: true, random: () => values[i++]! });
    // r = 0 → base × 0.5; r = 0.5 → base; r → 1 → base × 1.5; r = 0.25 → base × 0.75
    expect(seq(b, 4)).toEqual([500, 2000, 6000, 6000]);
  });

  test('upstream defaults (10 s / 60 s / 0.5) grow instead of staying at 10 s', () => {
    const b = new Backoff({ initialIntervalMs: 10_000, maxIntervalMs: 60_000, randomFactor: 0.5, jitter: true, random: () => 0.5 });
    expect(seq(b, 5)).toEqual([10_000, 20_000, 40_000, 60_000, 60_000]);
  });

  test('jittered waits never exceed the max interval and stay within the band', () => {
    const b = new Backoff({ initialIntervalMs: 100, maxIntervalMs: 400, randomFactor: 0.5, jitter: true });
    for (let n = 0; n < 50; n++) {
      const base = b.base(b.attempts);
      const w = b.next();
      expect(w).toBeGreaterThanOrEqual(Math.floor(base * 0.5));
      expect(w).toBeLessThanOrEqual(Math.min(400, Math.ceil(base * 1.5)));
    }
  });

  test('reset starts over at the initial interval', () => {
    const b = new Backoff({ initialIntervalMs: 50, maxIntervalMs: 1000, randomFactor: 0, jitter: true });
    expect(seq(b, 3)).toEqual([50, 100, 200]);
    b.reset();
    expect(b.attempts).toBe(0);
    expect(b.next()).toBe(50);
  });

  test('out-of-range settings are clamped', () => {
    // factor > 1 acts as 1 (never negative waits); max below initial is raised to initial
    const b = new Backoff({ initialIntervalMs: 100, maxIntervalMs: 10, randomFactor: 3, jitter: true, random: () => 0 });
    expect(b.next()).toBe(0);
    const c = new Backoff({ initialIntervalMs: 0, maxIntervalMs: 0, randomFactor: -1, jitter: true });
    expect(seq(c, 3)).toEqual([1, 1, 1]);
    const d = new Backoff({ initialIntervalMs: 1, maxIntervalMs: 5000, randomFactor: 0, jitter: false });
    for (let i = 0; i < 2000; i++) d.next();
    expect(d.next()).toBe(5000);
  });
});
