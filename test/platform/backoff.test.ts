import { Backoff } from '../../src/platform/backoff';

function seq(b: Backoff, n: number): number[] {
  return Array.from({ length: n }, () => b.next());
}

describe('the one retry backoff', () => {
  test('without jitter: doubles from the initial delay and caps at the max', () => {
    const b = new Backoff({ initialMs: 100, maxMs: 1000 });
    expect(seq(b, 6)).toEqual([100, 200, 400, 800, 1000, 1000]);
    expect(b.attempts).toBe(6);
  });

  test('spread jitter: base × (1 ± f·r), capped at the max', () => {
    const values = [0, 0.5, 0.999999, 0.25];
    let i = 0;
    const b = new Backoff({ initialMs: 1000, maxMs: 60_000, jitter: { spread: 0.5 }, random: () => values[i++]! });
    // r = 0 → base × 0.5; r = 0.5 → base; r → 1 → base × 1.5; r = 0.25 → base × 0.75
    expect(seq(b, 4)).toEqual([500, 2000, 6000, 6000]);
  });

  test('xDS defaults (10 s / 60 s / 0.5) grow instead of staying at 10 s (upstream used the factor as the multiplier)', () => {
    const b = new Backoff({ initialMs: 10_000, maxMs: 60_000, jitter: { spread: 0.5 }, random: () => 0.5 });
    expect(seq(b, 5)).toEqual([10_000, 20_000, 40_000, 60_000, 60_000]);
  });

  test('spread-jittered waits never exceed the max and stay within the band', () => {
    const b = new Backoff({ initialMs: 100, maxMs: 400, jitter: { spread: 0.5 } });
    for (let n = 0; n < 50; n++) {
      const base = b.base(b.attempts);
      const w = b.next();
      expect(w).toBeGreaterThanOrEqual(Math.floor(base * 0.5));
      expect(w).toBeLessThanOrEqual(Math.min(400, Math.ceil(base * 1.5)));
    }
  });

  test('from-initial jitter (jpillora/backoff): uniform in [initial, base]', () => {
    let r = 0;
    const b = new Backoff({ initialMs: 100, maxMs: 1000, jitter: 'from-initial', random: () => r });
    expect([0, 1, 2, 3, 4].map((n) => b.delay(n))).toEqual([100, 100, 100, 100, 100]);
    r = 0.999999;
    expect([0, 1, 2, 3, 4].map((n) => b.delay(n))).toEqual([100, 200, 400, 800, 1000]);
    r = 0.5;
    expect(b.delay(2)).toBe(250);
  });

  test('delay(n) does not move the attempt counter; next() does', () => {
    const b = new Backoff({ initialMs: 50, maxMs: 2000 });
    expect(b.delay(3)).toBe(400);
    expect(b.attempts).toBe(0);
    expect(b.delay(-1)).toBe(50);
  });

  test('reset starts over at the initial delay', () => {
    const b = new Backoff({ initialMs: 50, maxMs: 1000, jitter: { spread: 0 } });
    expect(seq(b, 3)).toEqual([50, 100, 200]);
    b.reset();
    expect(b.attempts).toBe(0);
    expect(b.next()).toBe(50);
  });

  test('out-of-range options are clamped; a huge attempt count stays at the max', () => {
    // spread > 1 acts as 1 (never negative waits); max below initial is raised to initial
    const b = new Backoff({ initialMs: 100, maxMs: 10, jitter: { spread: 3 }, random: () => 0 });
    expect(b.next()).toBe(0);
    const c = new Backoff({ initialMs: 0, maxMs: 0, jitter: { spread: -1 } });
    expect(seq(c, 3)).toEqual([1, 1, 1]);
    const d = new Backoff({ initialMs: 1, maxMs: 5000 });
    for (let i = 0; i < 2000; i++) d.next();
    expect(d.next()).toBe(5000);
    expect(new Backoff({ initialMs: Number.NaN, maxMs: Number.POSITIVE_INFINITY }).delay(0)).toBe(1);
  });

  test('a huge attempt number is the max in every mode (2ⁿ overflows to Infinity, min() caps it)', () => {
    for (const jitter of ['none', 'from-initial', { spread: 0.5 }] as const) {
      const b = new Backoff({ initialMs: 100, maxMs: 30_000, jitter, random: () => 0.999999 });
      expect(b.base(1e9)).toBe(30_000);
      expect(b.delay(Number.MAX_SAFE_INTEGER)).toBe(30_000);
    }
  });

  test('an injected random outside [0, 1) is clamped into the band', () => {
    const low = new Backoff({ initialMs: 100, maxMs: 1000, jitter: { spread: 0.5 }, random: () => -3 });
    expect(low.delay(1)).toBe(100);
    const high = new Backoff({ initialMs: 100, maxMs: 1000, jitter: 'from-initial', random: () => 7 });
    expect(high.delay(2)).toBe(400);
    const nan = new Backoff({ initialMs: 100, maxMs: 1000, jitter: { spread: Number.NaN }, random: () => 0 });
    expect(nan.delay(1)).toBe(200);
  });
});
