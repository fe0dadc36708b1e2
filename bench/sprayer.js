'use strict';
/**
 * The key sprayer of bench/spray.js: ShouldRateLimit calls of `descriptors` descriptors each, every
 * value new (`<key>` = `<prefix><n>`), as fast as the service answers them, `inFlight` at a time on
 * one node:http2 connection from `localAddress` (so the service sees it as its own peer), for
 * `seconds`. Prints `ready` on stderr once connected, then one JSON line on stdout:
 *   {"calls","answered","ok","overLimit","errors","firstError","keysSent","seconds","keysPerSecond"}
 *
 *   node bench/sprayer.js '{"host","port","localAddress","seconds","descriptors","inFlight","domain","key","prefix"}'
 */
const http2 = require('node:http2');
const net = require('node:net');
const path = require('node:path');

const { RateLimitRequest, RateLimitResponse } = require(path.join(__dirname, '../dist/generated/envoy/service/ratelimit/v3/rls.js'));

const o = JSON.parse(process.argv[2]);
if (o.host !== '127.0.0.1') throw new Error(`refusing host ${o.host}`);
const HEADERS = { ':method': 'POST', ':path': '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit', 'content-type': 'application/grpc', te: 'trailers' };

const session = http2.connect(`http://${o.host}:${o.port}`, {
  createConnection: () => net.connect({ host: o.host, port: o.port, localAddress: o.localAddress }),
  settings: { enablePush: false },
});
let firstError = null;
session.on('error', (err) => (firstError ??= `session: ${err.message}`));

let next = 0;
/** One request's frame: `descriptors` new values. */
function frame() {
  const descriptors = [];
  for (let i = 0; i < o.descriptors; i++) descriptors.push({ entries: [{ key: o.key, value: `${o.prefix}${next++}` }], limit: undefined, hitsAddend: undefined });
  const msg = RateLimitRequest.encode({ domain: o.domain, descriptors, hitsAddend: 0 }).finish();
  const out = Buffer.allocUnsafe(5 + msg.length);
  out[0] = 0;
  out.writeUInt32BE(msg.length, 1);
  out.set(msg, 5);
  return out;
}

let calls = 0;
let answered = 0;
let ok = 0;
let overLimit = 0;
let errors = 0;
let start = 0;
let stopAt = 0;
let inFlight = 0;
let done = false;

function one() {
  if (performance.now() >= stopAt) {
    if (inFlight === 0) finish();
    return;
  }
  calls++;
  inFlight++;
  const stream = session.request(HEADERS, { endStream: false });
  const chunks = [];
  let grpcStatus = null;
  let settled = false;
  const settle = (err) => {
    if (settled) return;
    settled = true;
    inFlight--;
    if (err || grpcStatus !== '0') {
      errors++;
      firstError ??= err ? err.message : `grpc-status ${grpcStatus}`;
    } else {
      answered++;
      const res = RateLimitResponse.decode(Buffer.concat(chunks).subarray(5));
      if (res.overallCode === 1) ok++;
      else overLimit++;
    }
    one();
  };
  stream.on('response', (h) => {
    if (h['grpc-status'] !== undefined) grpcStatus = String(h['grpc-status']);
  });
  stream.on('trailers', (t) => (grpcStatus = String(t['grpc-status'])));
  stream.on('data', (c) => chunks.push(c));
  stream.on('close', () => settle(null));
  stream.on('error', settle);
  stream.end(frame());
}

function finish() {
  if (done) return;
  done = true;
  const seconds = (performance.now() - start) / 1000;
  process.stdout.write(
    `${JSON.stringify({ calls, answered, ok, overLimit, errors, firstError, keysSent: next, seconds, keysPerSecond: Math.round(next / seconds) })}\n`,
    () => process.exit(0),
  );
  session.destroy();
}

session.once('connect', () => {
  console.error('ready');
  start = performance.now();
  stopAt = start + o.seconds * 1000;
  for (let k = 0; k < o.inFlight; k++) one();
});
// Never outlive the run by more than 15 s.
setTimeout(() => {
  firstError ??= 'calls still in flight 15 s after the time cap';
  finish();
}, o.seconds * 1000 + 15_000).unref();
