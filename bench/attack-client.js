'use strict';
/**
 * The good client of bench/attacks.js: one node:http2 session sending ShouldRateLimit calls (the
 * gRPC frame given in hex, content-type application/grpc, te trailers) at a fixed rate, open loop:
 * call i is sent at start + i / rate whether or not the earlier ones were answered. It first makes
 * one call (an error there exits 1), prints `ready` on stderr, then sends for `warmup` seconds
 * (not recorded) and `seconds` more (recorded). A call's latency runs from its send to its
 * trailers; it counts as OK only with HTTP 200 and grpc-status 0 within `timeout` ms. A call still
 * unanswered then fails ("timeout"). When the server closes the session, the next call opens a new
 * one (counted in `reconnects`).
 *
 * BENCH_CLIENT_CA (a CA file): the port is TLS (server name localhost). BENCH_CLIENT_FRESH_MS: every
 * so many ms of the measured window, a newcomer also opens a connection of its own and makes one
 * call on it (connect, TLS, call): the time from its connect to the answer, and whether it came
 * within `timeout`, is recorded apart ("fresh").
 *
 * Prints one JSON line on stdout:
 *   {"p50","p90","p99","max","mean","calls","ok","failed","failures":{reason:count},"firstError",
 *    "reconnects","maxSendLagMs","fresh":{"n","ok","p50","p99","max","failures"},
 *    "timeline":[[sent at (Date.now()), latency ms], ...] (the measured calls answered OK)}
 *
 *   node bench/attack-client.js <127.0.0.1:port> <calls-per-second> <warmup-s> <seconds> <frame-hex> [timeout-ms]
 */
const fs = require('node:fs');
const http2 = require('node:http2');

const [target, rateArg, warmupArg, secondsArg, frameHex, timeoutArg] = process.argv.slice(2);
if (!/^127\.0\.0\.1:\d+$/.test(target ?? '')) throw new Error(`refusing target ${target}`);
const RATE = Number(rateArg);
const WARMUP_MS = Number(warmupArg) * 1000;
const MEASURE_MS = Number(secondsArg) * 1000;
const FRAME = Buffer.from(frameHex, 'hex');
const TIMEOUT_MS = Number(timeoutArg ?? 5000);
const HEADERS = {
  ':method': 'POST',
  ':path': '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit',
  'content-type': 'application/grpc',
  te: 'trailers',
};

const CA = process.env['BENCH_CLIENT_CA'] ? fs.readFileSync(process.env['BENCH_CLIENT_CA']) : undefined;
const FRESH_MS = Number(process.env['BENCH_CLIENT_FRESH_MS'] ?? 0);
/** A new session to the target. */
const connect = () =>
  CA === undefined
    ? http2.connect(`http://${target}`, { settings: { enablePush: false } })
    : http2.connect(`https://${target}`, { settings: { enablePush: false }, ca: CA, servername: 'localhost' });

let session = null;
let sessions = 0;
let sessionError = null;
function currentSession() {
  if (session === null || session.closed || session.destroyed) {
    sessions++;
    const s = connect();
    s.on('error', (err) => {
      sessionError = err.code ?? err.message;
    });
    s.on('goaway', () => {
      if (session === s) session = null;
    });
    s.on('close', () => {
      if (session === s) session = null;
    });
    session = s;
  }
  return session;
}

/** One call (on `on`, default the shared session); `done(latencyMs | null, failureReason | null)`. */
function call(done, on = currentSession) {
  const t0 = performance.now();
  let status = null;
  let grpcStatus = null;
  let answeredAt = null;
  let settled = false;
  let req;
  const settle = (reason) => {
    if (settled) return;
    settled = true;
    clearTimeout(timer);
    if (reason === null && status === 200 && grpcStatus === '0') done(answeredAt - t0, null);
    else done(null, reason ?? (status !== 200 ? `HTTP ${status}` : `grpc-status ${grpcStatus}`));
  };
  const timer = setTimeout(() => {
    settle('timeout');
    req?.close(http2.constants.NGHTTP2_CANCEL);
  }, TIMEOUT_MS);
  try {
    req = on().request(HEADERS, { endStream: false });
  } catch (err) {
    settle(`request: ${err.code ?? err.message}`);
    return;
  }
  req.on('response', (h) => {
    status = h[':status'];
    if (h['grpc-status'] !== undefined) {
      grpcStatus = h['grpc-status']; // trailers-only
      answeredAt = performance.now();
    }
  });
  req.on('trailers', (t) => {
    grpcStatus = t['grpc-status'];
    answeredAt = performance.now();
  });
  req.on('data', () => {});
  req.on('error', (err) => settle(err.code === 'ERR_HTTP2_STREAM_ERROR' ? `stream reset (${req.rstCode})` : (err.code ?? err.message)));
  req.on('close', () => settle(answeredAt === null ? `closed unanswered (rst ${req.rstCode})` : null));
  req.end(FRAME);
}

const latencies = [];
/** Each measured OK call: [Date.now() of its send, latency ms], to split the window where the attack's phases change. */
const timeline = [];
const failures = {};
let calls = 0;
let inFlight = 0;
let firstError = null;
let maxSendLagMs = 0;

let finished = false;
function finish() {
  if (finished) return;
  finished = true;
  const s = latencies.sort((a, b) => a - b);
  const at = (q) => (s.length ? s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))] : null);
  const failed = Object.values(failures).reduce((a, b) => a + b, 0);
  const out = {
    p50: at(0.5),
    p90: at(0.9),
    p99: at(0.99),
    max: s.length ? s[s.length - 1] : null,
    mean: s.length ? s.reduce((a, b) => a + b, 0) / s.length : null,
    calls,
    ok: s.length,
    failed,
    failures,
    firstError,
    reconnects: Math.max(0, sessions - 1),
    lastSessionError: sessionError,
    maxSendLagMs,
    fresh: freshSummary(),
    timeline,
  };
  process.stdout.write(`${JSON.stringify(out)}\n`, () => process.exit(0));
}

const fresh = { times: [], failures: {} };
/** A newcomer: its own connection, one call, then it leaves. */
function freshCall() {
  const t0 = performance.now();
  const own = connect();
  own.on('error', () => {});
  call((ms, reason) => {
    if (reason === null) fresh.times.push(performance.now() - t0);
    else fresh.failures[reason] = (fresh.failures[reason] ?? 0) + 1;
    own.close();
  }, () => own);
}

function freshSummary() {
  if (FRESH_MS <= 0) return null;
  const s = fresh.times.sort((a, b) => a - b);
  const at = (q) => (s.length ? s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))] : null);
  const failed = Object.values(fresh.failures).reduce((a, b) => a + b, 0);
  return { n: s.length + failed, ok: s.length, p50: at(0.5), p99: at(0.99), max: s.length ? s[s.length - 1] : null, failures: fresh.failures };
}

/** Date.now() at performance.now() time `t`. */
const EPOCH_OFFSET = Date.now() - performance.now();
const sentEpoch = (t) => EPOCH_OFFSET + t;

function run() {
  const start = performance.now();
  if (FRESH_MS > 0) {
    setTimeout(() => {
      const probe = setInterval(freshCall, FRESH_MS);
      // The last ones are answered (or time out) before the run ends.
      setTimeout(() => clearInterval(probe), Math.max(MEASURE_MS / 2, MEASURE_MS - TIMEOUT_MS));
    }, WARMUP_MS);
  }
  const total = Math.round(((WARMUP_MS + MEASURE_MS) / 1000) * RATE);
  let next = 0;
  const tick = () => {
    const now = performance.now();
    // Every call whose time has come (several when the loop was late: open loop, no skipping).
    while (next < total && start + (next * 1000) / RATE <= now) {
      const due = start + (next * 1000) / RATE;
      const measured = due >= start + WARMUP_MS;
      next++;
      maxSendLagMs = Math.max(maxSendLagMs, now - due);
      if (measured) calls++;
      inFlight++;
      call((ms, reason) => {
        inFlight--;
        if (measured) {
          if (reason === null) {
            latencies.push(ms);
            timeline.push([Math.round(sentEpoch(due)), Math.round(ms * 1000) / 1000]);
          }
          else {
            failures[reason] = (failures[reason] ?? 0) + 1;
            firstError ??= reason;
          }
        }
        if (next >= total && inFlight === 0) finish();
      });
    }
    if (next < total) setTimeout(tick, Math.max(0, start + (next * 1000) / RATE - performance.now()));
  };
  tick();
}

// One call first: the service must answer before the run starts.
call((ms, reason) => {
  if (reason !== null) {
    console.error(`first call failed: ${reason}`);
    process.exit(1);
  }
  console.error('ready');
  run();
});
// Never outlive the run by more than the call timeout and 10 s.
setTimeout(() => {
  firstError ??= 'still running after the time cap';
  finish();
}, WARMUP_MS + MEASURE_MS + TIMEOUT_MS + 10_000).unref();
