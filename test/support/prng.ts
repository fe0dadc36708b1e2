/**
 * The seeded PRNG of the tests (mulberry32, src/platform/random.ts), so that a failing random case can
 * be replayed from its seed, and the small draws the fuzz tests make with it.
 */
export { mulberry32 as prng } from '../../src/platform/random';

/** A generator of numbers in [0, 1). */
export type Rng = () => number;

/** Bound once: inside Jest's vm context a global lookup (Math) in a hot loop is slow. */
const { floor } = Math;

/** An integer in [0, n). */
export const int = (rng: Rng, n: number): number => floor(rng() * n);

/** One of `items`. */
export const pick = <T>(rng: Rng, items: readonly T[]): T => items[int(rng, items.length)]!;

/** Zipf(s) over n ranks by inversion of the cumulative weights. */
export function zipf(rng: Rng, n: number, s: number): () => number {
  const cum = new Float64Array(n);
  let total = 0;
  for (let i = 0; i < n; i++) cum[i] = total += 1 / (i + 1) ** s;
  return () => {
    const u = rng() * total;
    let lo = 0;
    let hi = n - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (cum[mid]! < u) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
}
