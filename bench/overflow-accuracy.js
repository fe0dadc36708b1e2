'use strict';
/**
 * How often the memory store's overflow sketches (src/backends/overflow-sketch.ts) count a key
 * above its own hits, at a given width: `n` keys of one rule overflow in one hourly window, each
 * sending 1 to 5 hits in a random order, after `spray` values of another rule (1 hit each) or of
 * the same rule. For each case, the share of increments that read more than the key's own count,
 * and the share that a limit of 3 a window refuses although the key's own count is within it.
 * Prints one JSON line per case. Needs a build (dist/).
 *
 *   node bench/overflow-accuracy.js [width=65536] [seed=1]
 */
const { OverflowSketches } = require('../dist/src/backends/overflow-sketch');
const { mulberry32 } = require('../dist/src/platform/random');

const width = Number(process.argv[2] ?? 65536);
const seed = Number(process.argv[3] ?? 1);
const HOUR = 3600;
const NOW = Date.UTC(2026, 11, 1, 12, 10);

function run(n, spray, sprayGroup) {
  const rng = mulberry32(seed);
  const sketch = new OverflowSketches(width, rng);
  for (let i = 0; i < spray; i++) sketch.fixedAdd(`bench_user_s${i}_`, sprayGroup, HOUR, NOW, 1);
  const own = new Int32Array(n);
  const order = [];
  for (let i = 0; i < n; i++) for (let h = 1 + Math.floor(rng() * 5); h > 0; h--) order.push(i);
  for (let j = order.length - 1; j > 0; j--) {
    const r = Math.floor(rng() * (j + 1));
    [order[j], order[r]] = [order[r], order[j]];
  }
  let over = 0;
  let refused = 0;
  for (const i of order) {
    const mine = ++own[i];
    const got = sketch.fixedAdd(`bench_ip_10.0.${i >> 8}.${i & 255}_`, 2, HOUR, NOW, 1);
    if (got < mine) throw new Error(`under-counted: ${got} < ${mine}`);
    if (got > mine) over++;
    if (mine <= 3 && got > 3) refused++;
  }
  return { width, n, spray, sprayed: spray === 0 ? '-' : sprayGroup === 2 ? 'same rule' : 'other rule', increments: order.length, overCountedPercent: +((100 * over) / order.length).toFixed(2), refusedWithinLimitPercent: +((100 * refused) / order.length).toFixed(2) };
}

for (const n of [1000, 10_000, 30_000]) {
  for (const [spray, group] of [[0, 1], [1_000_000, 1], [1_000_000, 2]]) console.log(JSON.stringify(run(n, spray, group)));
}
