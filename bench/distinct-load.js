'use strict';
/**
 * Distinct-values stream (bench/run.js `distinct` scenario): a grpc-js client that sends
 * ShouldRateLimit calls whose one descriptor (`user` = `u<i>`, domain `distinct`) is new on every
 * call, i = 0 .. count-1, with `concurrency` calls in flight over `channels` HTTP/2 connections,
 * until all `count` were sent or `seconds` elapsed. Prints one JSON line:
 *   {"sent","ok","errors","firstError","seconds","rps"}
 *
 *   node bench/distinct-load.js <127.0.0.1:port> <count> <seconds> <concurrency> <channels>
 */
const grpc = require('@grpc/grpc-js');
const { RateLimitServiceClient } = require('../dist/generated/envoy/service/ratelimit/v3/rls.js');

const [target, countArg, secondsArg, concArg, chanArg] = process.argv.slice(2);
if (!/^127\.0\.0\.1:\d+$/.test(target ?? '')) throw new Error(`refusing target ${target}`);
const count = Number(countArg);
const stopAt = performance.now() + Number(secondsArg) * 1000;
const concurrency = Number(concArg);
const clients = Array.from(
  { length: Number(chanArg) },
  (_, i) => new RateLimitServiceClient(target, grpc.credentials.createInsecure(), { 'bench.channel': i }),
);

const start = performance.now();
let next = 0;
let ok = 0;
let errors = 0;
let firstError = null;
let inFlight = 0;
let done = false;

function one() {
  if (next >= count || performance.now() >= stopAt) {
    if (inFlight === 0) finish();
    return;
  }
  const i = next++;
  inFlight++;
  const request = { domain: 'distinct', descriptors: [{ entries: [{ key: 'user', value: `u${i}` }] }], hitsAddend: 0 };
  clients[i % clients.length].shouldRateLimit(request, { deadline: Date.now() + 10_000 }, (err, res) => {
    inFlight--;
    if (err || res.overallCode !== 1) {
      errors++;
      firstError ??= err ? err.message : `overallCode ${res.overallCode}`;
    } else ok++;
    one();
  });
}

function finish() {
  if (done) return;
  done = true;
  const seconds = (performance.now() - start) / 1000;
  console.log(JSON.stringify({ sent: next, ok, errors, firstError, seconds, rps: (ok + errors) / seconds }));
  for (const c of clients) c.close();
  process.exit(0);
}

for (let k = 0; k < concurrency; k++) one();
// Hard bound: never outlive the time cap by more than 15 s.
setTimeout(() => {
  firstError ??= 'calls still in flight 15 s after the time cap';
  finish();
}, Number(secondsArg) * 1000 + 15_000).unref();
