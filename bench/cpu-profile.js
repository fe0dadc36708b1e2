'use strict';
/**
 * Preloaded into the service by bench/attacks.js when BENCH_ATTACK_CPU_PROFILE_DIR is set
 * (`--cpu-prof` is not allowed in NODE_OPTIONS): a V8 CPU profile of the measured window, from
 * BENCH_LOOP_DELAY_START (the file the bench creates when the window begins) to the process's
 * exit, written as `<scenario>.cpuprofile` into that directory (open it in Chrome's DevTools, or
 * sum its self times by function).
 */
const fs = require('node:fs');
const path = require('node:path');
const inspector = require('node:inspector');

const dir = process.env['BENCH_CPU_PROFILE_DIR'];
const start = process.env['BENCH_LOOP_DELAY_START'];
const name = process.env['BENCH_CPU_PROFILE_NAME'] || String(process.pid);
if (dir && start) {
  const session = new inspector.Session();
  session.connect();
  let started = false;
  const poll = setInterval(() => {
    if (!fs.existsSync(start)) return;
    clearInterval(poll);
    session.post('Profiler.enable', () => session.post('Profiler.setSamplingInterval', { interval: 200 }, () => session.post('Profiler.start', () => (started = true))));
  }, 20);
  poll.unref();
  process.on('exit', () => {
    if (!started) return;
    // An in-thread session answers synchronously: the profile is written before the process ends.
    session.post('Profiler.stop', (err, result) => {
      if (err) return;
      fs.mkdirSync(dir, { recursive: true });
      fs.writeFileSync(path.join(dir, `${name}.cpuprofile`), JSON.stringify(result.profile));
    });
  });
}
