'use strict';
/**
 * Distinct-values stream (bench/run.js `distinct` scenario): ShouldRateLimit calls whose one
 * descriptor (`user` = `u<i>`, domain `distinct`) is new on every call, i = 0 .. count-1, with
 * `concurrency` calls in flight over `channels` HTTP/2 connections, until all `count` were sent or
 * `seconds` elapsed. Raw node:http2 with each request frame built by hand (a grpc-js client tops
 * out near 7k calls/s on one core, too slow to send ten million values in minutes). A call counts
 * as OK only with HTTP 200 and `grpc-status: 0`. Prints one JSON line:
 *   {"sent","ok","errors","firstError","seconds","rps"}
 *
 *   node bench/distinct-load.js <127.0.0.1:port> <count> <seconds> <concurrency> <channels>
 */
const http2 = require('node:http2');

const [target, countArg, secondsArg, concArg, chanArg] = process.argv.slice(2);
if (!/^127\.0\.0\.1:\d+$/.test(target ?? '')) throw new Error(`refusing target ${target}`);
const count = Number(countArg);
const stopAt = performance.now() + Number(secondsArg) * 1000;
const concurrency = Number(concArg);
const PATH = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';
const HEADERS = { ':method': 'POST', ':path': PATH, 'content-type': 'application/grpc', te: 'trailers' };

/** protobuf: a length-delimited field (all lengths here are < 128, one-byte varints). */
const field = (tag, bytes) => Buffer.concat([Buffer.from([tag, bytes.length]), bytes]);
const DOMAIN = field(0x0a, Buffer.from('distinct')); // RateLimitRequest.domain = 1
const KEY = field(0x0a, Buffer.from('user')); // Entry.key = 1

/** The gRPC frame of a request with one descriptor, user = u<i>. */
function frame(i) {
  const entry = Buffer.concat([KEY, field(0x12, Buffer.from(`u${i}`))]); // Entry.value = 2
  const descriptor = field(0x0a, entry); // RateLimitDescriptor.entries = 1
  const msg = Buffer.concat([DOMAIN, field(0x12, descriptor)]); // RateLimitRequest.descriptors = 2
  const out = Buffer.allocUnsafe(5 + msg.length);
  out[0] = 0;
  out.writeUInt32BE(msg.length, 1);
  msg.copy(out, 5);
  return out;
}

const sessions = Array.from({ length: Number(chanArg) }, () => {
  const s = http2.connect(`http://${target}`, { settings: { enablePush: false } });
  s.on('error', (err) => {
    firstError ??= `session: ${err.message}`;
  });
  return s;
});

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
  const stream = sessions[i % sessions.length].request(HEADERS, { endStream: false });
  let status = 0;
  let grpcStatus = null;
  let settled = false;
  const settle = (err) => {
    if (settled) return;
    settled = true;
    inFlight--;
    if (err || status !== 200 || grpcStatus !== '0') {
      errors++;
      firstError ??= err ? err.message : `HTTP ${status}, grpc-status ${grpcStatus}`;
    } else ok++;
    one();
  };
  stream.on('response', (h) => {
    status = h[':status'];
    if (h['grpc-status'] !== undefined) grpcStatus = h['grpc-status']; // trailers-only error
  });
  stream.on('trailers', (t) => {
    grpcStatus = t['grpc-status'];
  });
  stream.on('data', () => {});
  stream.on('close', () => settle(null));
  stream.on('error', settle);
  stream.end(frame(i));
}

function finish() {
  if (done) return;
  done = true;
  const seconds = (performance.now() - start) / 1000;
  console.log(JSON.stringify({ sent: next, ok, errors, firstError, seconds, rps: (ok + errors) / seconds }));
  for (const s of sessions) s.destroy();
  process.exit(0);
}

for (let k = 0; k < concurrency; k++) one();
// Hard bound: never outlive the time cap by more than 15 s.
setTimeout(() => {
  firstError ??= 'calls still in flight 15 s after the time cap';
  finish();
}, Number(secondsArg) * 1000 + 15_000).unref();
