'use strict';
/**
 * Fallback load generator, used only when h2load (gRPC) or wrk (HTTP) is missing or cannot be
 * used. Keeps `connections * streams` calls in flight for `warmup` seconds (not recorded), then
 * for `seconds` seconds (recorded), and prints one JSON line:
 *   {"requests","errors","seconds","rps","meanMs","p99Ms"}
 *
 *   node bench/node-load.js grpc <host:port> <frame-file> <connections> <streams> <warmup> <seconds>
 *   node bench/node-load.js http <url> <body-file> <connections> <streams> <warmup> <seconds>
 *
 * grpc: `frame-file` is the length-prefixed gRPC frame h2load would send; it is decoded back into
 * a RateLimitRequest and sent with grpc-js clients (one channel per connection). Targets must be
 * on 127.0.0.1.
 */
const fs = require('node:fs');
const http = require('node:http');

const [mode, target, file, c, m, w, s] = process.argv.slice(2);
const connections = Number(c);
const streams = Number(m);
const warmupMs = Number(w) * 1000;
const measureMs = Number(s) * 1000;
if (!/^(127\.0\.0\.1:\d+|http:\/\/127\.0\.0\.1:\d+\/.*)$/.test(target)) throw new Error(`refusing target ${target}`);

let send; // (done: (err) => void) => void
if (mode === 'grpc') {
  const grpc = require('@grpc/grpc-js');
  const { RateLimitRequest, RateLimitServiceClient } = require('../dist/generated/envoy/service/ratelimit/v3/rls.js');
  const frame = fs.readFileSync(file);
  const request = RateLimitRequest.decode(frame.subarray(5, 5 + frame.readUInt32BE(1)));
  const clients = Array.from(
    { length: connections },
    // A distinct channel option keeps grpc-js from sharing one subchannel (one connection).
    (_, i) => new RateLimitServiceClient(target, grpc.credentials.createInsecure(), { 'bench.channel': i }),
  );
  let next = 0;
  send = (done) => {
    const client = clients[next++ % clients.length];
    client.shouldRateLimit(request, { deadline: Date.now() + 10_000 }, (err, res) =>
      done(err ?? (res.overallCode === 1 ? null : new Error(`overallCode ${res.overallCode}`))),
    );
  };
} else if (mode === 'http') {
  const body = fs.readFileSync(file);
  const agent = new http.Agent({ keepAlive: true, maxSockets: connections * streams });
  send = (done) => {
    const req = http.request(target, { method: 'POST', agent, headers: { 'content-type': 'application/json' }, timeout: 10_000 }, (res) => {
      res.resume();
      res.on('end', () => done(res.statusCode === 200 ? null : new Error(`HTTP ${res.statusCode}`)));
    });
    req.on('error', done);
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.end(body);
  };
} else {
  throw new Error(`unknown mode ${mode}`);
}

const start = performance.now();
const measureFrom = start + warmupMs;
const stopAt = measureFrom + measureMs;
const latencies = [];
let errors = 0;
let inFlight = 0;

function loop() {
  const t0 = performance.now();
  if (t0 >= stopAt) {
    if (--inFlight === 0) finish();
    return;
  }
  send((err) => {
    const t1 = performance.now();
    if (t0 >= measureFrom && t1 <= stopAt) {
      if (err) errors++;
      else latencies.push(t1 - t0);
    }
    loop();
  });
}

function finish() {
  latencies.sort((a, b) => a - b);
  const n = latencies.length;
  const mean = n ? latencies.reduce((a, b) => a + b, 0) / n : NaN;
  const p99 = n ? latencies[Math.min(n - 1, Math.ceil(0.99 * n) - 1)] : NaN;
  console.log(JSON.stringify({ requests: n, errors, seconds: measureMs / 1000, rps: n / (measureMs / 1000), meanMs: mean, p99Ms: p99 }));
  process.exit(0);
}

for (let i = 0; i < connections * streams; i++) {
  inFlight++;
  loop();
}
// Hard bound: never outlive the run by more than 15 s.
setTimeout(() => {
  console.error('node-load: calls still in flight 15 s after the end; giving up');
  finish();
}, warmupMs + measureMs + 15_000).unref();
