/**
 * Deterministic randomness for the simulated market. The price path draws each number from a hash
 * of its indices (seed, symbol, level, time index), not from a sequence, so a value never depends
 * on which other values were asked for first.
 */

/** Math's functions bound once: inside a vm context (Jest) every global lookup in a hot loop is slow. */
const { imul, log, sqrt, cos, sin, floor } = Math;
const TAU = 2 * Math.PI;

/** One murmur3 mixing round: folds `x` into the running hash `h`. */
function mix(h: number, x: number): number {
  x = imul(x | 0, 0xcc9e2d51);
  x = (x << 15) | (x >>> 17);
  x = imul(x, 0x1b873593);
  h ^= x;
  h = (h << 13) | (h >>> 19);
  return (imul(h, 5) + 0xe6546b64) | 0;
}

/** murmur3's finaliser: every input bit reaches every output bit. */
function finish(h: number): number {
  h ^= h >>> 16;
  h = imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

const TWO_32 = 4294967296;

/** A 32-bit key for a (seed, name) pair; seeds beyond 32 bits keep their high part. */
export function streamKey(seed: number, name: string): number {
  let h = mix(mix(0x2545f491, seed), floor(seed / TWO_32));
  for (let i = 0; i < name.length; i++) h = mix(h, name.charCodeAt(i));
  return finish(h) | 0;
}

/** Uniform in (0, 1) from the indices; never 0, so its logarithm is finite. */
export function uniformAt(key: number, a: number, b: number, c: number): number {
  return (finish(mix(mix(mix(key, a), b), c)) + 0.5) / TWO_32;
}

/** Standard normal from the indices (Box-Muller on two hashed uniforms). */
export function normalAt(key: number, a: number, b: number, c: number): number {
  const r = sqrt(-2 * log(uniformAt(key, a, b, 2 * c)));
  return r * cos(TAU * uniformAt(key, a, b, 2 * c + 1));
}

/** Fills `out` with standard normals indexed 0…n-1 under (key, a, b); each Box-Muller pair gives two. */
export function fillNormals(key: number, a: number, b: number, out: Float64Array): void {
  const prefix = mix(mix(key, a), b);
  for (let i = 0; i < out.length; i += 2) {
    const r = sqrt(-2 * log((finish(mix(prefix, i)) + 0.5) / TWO_32));
    const theta = (TAU * (finish(mix(prefix, i + 1)) + 0.5)) / TWO_32;
    out[i] = r * cos(theta);
    if (i + 1 < out.length) out[i + 1] = r * sin(theta);
  }
}

/** The sequential seeded PRNG (the project's one, platform/random.ts). */
export { mulberry32 } from '../../platform/random';
