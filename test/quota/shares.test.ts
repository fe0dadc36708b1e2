/** RLQS: dividing a limit among Envoys by demand, and the token bucket each share goes out as. */
import { FLOOR_OF_EQUAL_SPLIT, NOT_MEASURED, divide, tokenBucketFor } from '../../src/quota/shares';

const sum = (xs: number[]) => xs.reduce((s, x) => s + x, 0);

describe('divide', () => {
  test('shares follow demand above a floor, and add up to the limit', () => {
    const s = divide(100, [30, 10, 0]);
    expect(sum(s)).toBeCloseTo(100, 9);
    const floor = (100 * FLOOR_OF_EQUAL_SPLIT) / 3;
    expect(s[2]).toBeCloseTo(floor, 9); // a new Envoy (no demand yet) still gets its floor
    expect(s[0]! - floor).toBeCloseTo(3 * (s[1]! - floor), 9);
  });

  test('nobody has demand yet: an equal split; one Envoy gets the whole limit', () => {
    expect(divide(90, [0, 0, 0])).toEqual([30, 30, 30]);
    expect(divide(7, [123])).toEqual([7]);
    expect(divide(7, [])).toEqual([]);
  });

  test('a demand not measured yet counts as the mean of the measured ones; all unmeasured: an equal split', () => {
    const s = divide(100, [30, 10, NOT_MEASURED]);
    expect(s[2]).toBeCloseTo(100 / 3, 9);
    expect(sum(s)).toBeCloseTo(100, 9);
    expect(divide(90, [NOT_MEASURED, NOT_MEASURED, NOT_MEASURED])).toEqual([30, 30, 30]);
  });

  test('bad demand figures count as none', () => {
    const s = divide(10, [Number.NaN, -5, Infinity, 5]);
    expect(sum(s)).toBeCloseTo(10, 9);
    expect(s[0]).toBe(s[1]);
    expect(s[3]).toBeGreaterThan(s[0]!);
  });
});

describe('tokenBucketFor', () => {
  test('a share of whole requests per unit: that many per unit, burst of one reporting interval', () => {
    expect(tokenBucketFor(30.7, 60, 10)).toEqual({ tokensPerFill: 30, fillIntervalSeconds: 60, maxTokens: 5 });
    expect(tokenBucketFor(500, 1, 1)).toEqual({ tokensPerFill: 500, fillIntervalSeconds: 1, maxTokens: 500 });
  });

  test('below one request per unit: one token per longer whole-second interval, never faster than the share', () => {
    const b = tokenBucketFor(0.4, 60, 10)!;
    expect(b).toEqual({ tokensPerFill: 1, fillIntervalSeconds: 150, maxTokens: 1 });
    expect(b.tokensPerFill / b.fillIntervalSeconds).toBeLessThanOrEqual(0.4 / 60);
  });

  test('no share, or one too small to express: undefined (the caller denies)', () => {
    expect(tokenBucketFor(0, 60, 1)).toBeUndefined();
    expect(tokenBucketFor(1e-9, 86400, 1)).toBeUndefined();
  });

  test('the rates of the divided shares never add up to more than the limit', () => {
    for (const [limit, unit] of [[100, 60], [7, 1], [3, 3600], [1000, 86400]] as const) {
      const shares = divide(limit, [5, 1, 0, 40, 2]);
      let rate = 0;
      for (const s of shares) {
        const b = tokenBucketFor(s, unit, 5);
        if (b) rate += b.tokensPerFill / b.fillIntervalSeconds;
      }
      expect(rate).toBeLessThanOrEqual(limit / unit + 1e-12);
    }
  });
});
