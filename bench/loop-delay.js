'use strict';
/**
 * Preloaded into the service by bench/attacks.js (NODE_OPTIONS=--require): how long the service's
 * event loop was held, which is how long any client's call could wait behind an attack, measured
 * inside the service (the good client's latency also holds its own core's scheduling). Sampling
 * starts at BENCH_LOOP_DELAY_START (a file the bench creates when the measured window begins) and
 * the percentiles are written to BENCH_LOOP_DELAY_FILE when the process exits.
 */
const fs = require('node:fs');
const { monitorEventLoopDelay } = require('node:perf_hooks');

const out = process.env['BENCH_LOOP_DELAY_FILE'];
const start = process.env['BENCH_LOOP_DELAY_START'];
if (out && start) {
  const h = monitorEventLoopDelay({ resolution: 1 });
  const poll = setInterval(() => {
    if (!fs.existsSync(start)) return;
    clearInterval(poll);
    h.enable();
  }, 20);
  poll.unref();
  process.on('exit', () => {
    const ms = (ns) => Math.round(ns / 1e4) / 100;
    fs.writeFileSync(out, JSON.stringify({ p50: ms(h.percentile(50)), p99: ms(h.percentile(99)), p999: ms(h.percentile(99.9)), max: ms(h.max), samples: h.count }));
  });
}
