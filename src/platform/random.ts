/**
 * The one sequential seeded PRNG of the project (mulberry32): the simulator's fault draws, the
 * sweep's bootstrap and the tests' random cases take their numbers from it, so a run is replayed
 * from its seed.
 */

/** Bound once: inside a vm context (Jest) every global lookup in a hot loop is slow (twice the fuzz tests' time). */
const { imul } = Math;

export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = imul(t ^ (t >>> 15), t | 1);
    t ^= t + imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
