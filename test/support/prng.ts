/**
 * The seeded PRNG of the tests (mulberry32, the simulator's own), so that a failing random case can
 * be replayed from its seed.
 */
export { mulberry32 as prng } from '../../src/trading/simulator/market';
