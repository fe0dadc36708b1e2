/** RLQS: dividing a limit in whole tokens among Envoys by demand, and the token bucket a share goes out as. */
import { FLOOR_OF_EQUAL_SPLIT, divide, grainFor, tokenBucketFor, visibleChange, type Party } from '../../src/quota/shares';

const sum = (xs: number[]) => xs.reduce((s, x) => s + x, 0);
const stream = (demand: number): Party => (demand > 0 ? { demand, measured: 1, unmeasured: 0, idle: 0 } : { demand: 0, measured: 0, unmeasured: 0, idle: 1 });
const NEW: Party = { demand: 0, measured: 0, unmeasured: 1, idle: 0 };

describe('grainFor', () => {
  test('a whole-second fill interval, a multiple of the unit, with at least 1000 tokens and ten per stream', () => {
    expect(grainFor(10, 1, 3)).toEqual({ fillSeconds: 100, total: 1000 });
    expect(grainFor(60, 60, 3)).toEqual({ fillSeconds: 6000, total: 6000 });
    expect(grainFor(5000, 1, 3)).toEqual({ fillSeconds: 1, total: 5000 });
    expect(grainFor(10, 1, 1000)).toEqual({ fillSeconds: 1000, total: 10_000 });
  });
});

describe('divide', () => {
  test('shares of 15, 7.5 and 7.5 a second of a 10/s limit: 483, 259 and 258 tokens per 100 s, adding up to the limit exactly', () => {
    const g = grainFor(10, 1, 3);
    const t = divide(g.total, [stream(15), stream(7.5), stream(7.5)], g.fillSeconds);
    expect(t).toEqual([483, 259, 258]);
    expect(sum(t)).toBe(g.total);
  });

  test('the tokens always add up to the total, and each is within one of its exact share', () => {
    for (const n of [1, 2, 3, 7, 10, 99]) {
      const demands = Array.from({ length: n }, (_, i) => ((i * 7919) % 13) + 0.5);
      const g = grainFor(10, 1, n);
      const t = divide(g.total, demands.map(stream), g.fillSeconds);
      expect(sum(t)).toBe(g.total);
      expect(Math.min(...t)).toBeGreaterThanOrEqual(1);
    }
  });

  test('an idle stream keeps one token; its share goes to those with demand', () => {
    expect(divide(1000, [stream(10), stream(0), stream(10)], 100)).toEqual([500, 1, 499]);
  });

  test('a quiet stream gets its floor, not more than it can use; a stream below its floor gets its demand with headroom', () => {
    const [busy, quiet] = divide(1000, [stream(100), stream(1)], 100);
    // Floor: a tenth of an equal split (50 tokens = 0.5/s) plus its part of the rest.
    expect(quiet).toBeGreaterThanOrEqual(FLOOR_OF_EQUAL_SPLIT * 500);
    expect(busy! + quiet!).toBe(1000);
    // 0.1/s asked: 11 tokens per 100 s (10 % headroom), the rest to the busy one.
    expect(divide(1000, [stream(100), stream(0.1)], 100)).toEqual([989, 11]);
  });

  test('demands under the limit in total: nobody is capped, the spare goes by demand', () => {
    expect(divide(1000, [stream(2), stream(2)], 100)).toEqual([500, 500]);
  });

  test('a stream not measured yet counts as the mean of the measured ones; nobody measured: an equal split', () => {
    expect(divide(1000, [stream(3), stream(1), NEW], 100)).toEqual([483, 184, 333]);
    expect(divide(999, [NEW, NEW, NEW], 100)).toEqual([333, 333, 333]);
    expect(divide(1000, [stream(0), stream(0)], 100)).toEqual([500, 500]);
  });

  test("replicas: dividing among replicas' totals, then each its part among its streams, adds up to the total", () => {
    const a = [stream(15), stream(1)];
    const b = [stream(7.5), NEW];
    const total = (ps: Party[]): Party => ps.reduce((x, p) => ({ demand: x.demand + p.demand, measured: x.measured + p.measured, unmeasured: x.unmeasured + p.unmeasured, idle: x.idle + p.idle }));
    const mean = (15 + 1 + 7.5) / 3;
    const [qa, qb] = divide(1000, [total(a), total(b)], 100, mean);
    const tokens = [...divide(qa!, a, 100, mean), ...divide(qb!, b, 100, mean)];
    expect(sum(tokens)).toBe(1000);
    expect(tokens[0]).toBeGreaterThan(tokens[2]!);
  });
});

describe('tokenBucketFor', () => {
  test('burst: one second of the share (at least 2), never more than one second of the whole limit', () => {
    expect(tokenBucketFor(483, 100, 10, false)).toEqual({ tokensPerFill: 483, fillIntervalSeconds: 100, maxTokens: 4 });
    expect(tokenBucketFor(27, 100, 10, false).maxTokens).toBe(2);
    expect(tokenBucketFor(10_000, 100, 10, false).maxTokens).toBe(10);
    expect(tokenBucketFor(6000, 6000, 1, false).maxTokens).toBe(2);
  });

  test("a stream's first assignment holds a fifth of that burst, at least 1 (Envoy starts it full)", () => {
    expect(tokenBucketFor(1000, 100, 10, true).maxTokens).toBe(2);
    expect(tokenBucketFor(483, 100, 10, true).maxTokens).toBe(1);
  });
});

describe('visibleChange', () => {
  test('fill_interval never changes alone (Envoy would not see it): the same tokens and burst over another interval go out doubled', () => {
    const held = { tokensPerFill: 1, fillIntervalSeconds: 100, maxTokens: 2 };
    expect(visibleChange({ tokensPerFill: 1, fillIntervalSeconds: 1000, maxTokens: 2 }, held)).toEqual({ tokensPerFill: 2, fillIntervalSeconds: 2000, maxTokens: 2 });
    expect(visibleChange({ tokensPerFill: 3, fillIntervalSeconds: 1000, maxTokens: 2 }, held)).toEqual({ tokensPerFill: 3, fillIntervalSeconds: 1000, maxTokens: 2 });
    expect(visibleChange({ tokensPerFill: 1, fillIntervalSeconds: 100, maxTokens: 2 }, held)).toEqual(held);
    expect(visibleChange(held, undefined)).toEqual(held);
  });
});
