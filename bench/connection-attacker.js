'use strict';
/**
 * The connection attacker of bench/attacks.js (issue 40): holds `connections` connections to one
 * port open, spread over the loopback `addresses` it connects from (one pod of many addresses, or
 * one address), sending as good as nothing on them. Every connection the server closes is opened
 * again at once, as a real attacker would, so the pressure stays. After `seconds` it closes
 * everything, prints one JSON line of counters on stdout and exits.
 *
 *   node bench/connection-attacker.js '<json>'
 *     { "mode": "idle-h2" | "tls-silent" | "tls-half",
 *       "host": "127.0.0.1", "port": 8081, "seconds": 11, "connections": 10000,
 *       "addresses": ["127.0.0.2", ...] }
 *
 * `filledAt` (Date.now()) is when the server had answered as many connections as the target (its
 * first bytes, e.g. the HTTP/2 SETTINGS, on each): the end of the fill, null when it never came.
 *
 * Modes:
 * - idle-h2: the HTTP/2 connection preface and an empty SETTINGS, then nothing (what the server
 *   sends is read and dropped).
 * - tls-silent: a TCP connection that sends nothing (to a TLS port).
 * - tls-half: the first 11 bytes of a TLS ClientHello (a record header and the start of the
 *   handshake message), then nothing.
 */
const net = require('node:net');

const cfg = JSON.parse(process.argv[2] ?? '{}');
if (cfg.host !== '127.0.0.1') throw new Error(`refusing host ${cfg.host}`);
const MODES = ['idle-h2', 'tls-silent', 'tls-half'];
if (!MODES.includes(cfg.mode)) throw new Error(`unknown mode ${cfg.mode}`);
const ADDRESSES = cfg.addresses ?? ['127.0.0.2'];
if (!ADDRESSES.every((a) => /^127\.\d+\.\d+\.\d+$/.test(a))) throw new Error(`refusing addresses ${ADDRESSES}`);
const TARGET = cfg.connections ?? 1000;

const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');
const EMPTY_SETTINGS = Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0]);
const HELLO = {
  'idle-h2': Buffer.concat([PREFACE, EMPTY_SETTINGS]),
  'tls-silent': null,
  'tls-half': Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03]),
}[cfg.mode];

const counters = {
  opened: 0,
  connectErrors: 0,
  lastError: null,
  /** Closed by the server within 100 ms of its connect: refused at accept. */
  refusedAtOnce: 0,
  /** Closed by the server later: a bound, or room made for another. */
  closedLater: 0,
  maxOpen: 0,
  openAtEnd: 0,
  /** Date.now() when the server had answered (with its first bytes) as many connections as the target: the fill is over. */
  filledAt: null,
};
let answered = 0;
const lifetimesMs = [];
let open = 0;
let stopping = false;
let next = 0;
/** Connections to (re)open, spread over the loop turns so timers and reads still run. */
let owed = 0;

function openOne() {
  const from = ADDRESSES[next++ % ADDRESSES.length];
  const s = net.connect({ host: cfg.host, port: cfg.port, localAddress: from });
  let connectedAt = null;
  counters.opened++;
  s.setNoDelay(true);
  s.on('connect', () => {
    connectedAt = performance.now();
    open++;
    counters.maxOpen = Math.max(counters.maxOpen, open);
    if (HELLO !== null) s.write(HELLO);
  });
  let heard = false;
  s.on('data', () => {
    if (heard) return;
    heard = true;
    if (++answered === TARGET) counters.filledAt = Date.now();
  });
  s.on('error', (err) => {
    if (connectedAt === null) {
      counters.connectErrors++;
      counters.lastError = err.code ?? err.message;
    }
  });
  s.on('close', () => {
    if (connectedAt !== null) {
      open--;
      if (!stopping) {
        const lived = performance.now() - connectedAt;
        if (lived < 100) counters.refusedAtOnce++;
        else counters.closedLater++;
        if (lifetimesMs.length < 100_000) lifetimesMs.push(lived);
      }
    }
    if (!stopping) owe(1);
  });
  sockets.add(s);
  s.once('close', () => sockets.delete(s));
}

const sockets = new Set();
let pumping = false;
function owe(n) {
  owed += n;
  if (!pumping) {
    pumping = true;
    setImmediate(pump);
  }
}
function pump() {
  pumping = false;
  if (stopping) return;
  // At most 500 connects a turn.
  const n = Math.min(owed, 500);
  owed -= n;
  for (let i = 0; i < n; i++) openOne();
  if (owed > 0) owe(0);
}

owe(TARGET);
console.error('ready');
setTimeout(() => {
  stopping = true;
  counters.openAtEnd = open;
  const s = lifetimesMs.sort((a, b) => a - b);
  const at = (q) => (s.length ? s[Math.min(s.length - 1, Math.ceil(q * s.length) - 1)] : null);
  for (const x of sockets) x.destroy();
  // The fields every attacker reports (bench/attacks.js's tables): no frames are parsed here.
  const common = { closedByServer: counters.refusedAtOnce + counters.closedLater, reconnects: counters.opened - Math.min(counters.opened, TARGET), goaway: {}, goawayDebug: {} };
  process.stdout.write(`${JSON.stringify({ ...counters, ...common, lifetimesMs: { n: s.length, p50: at(0.5), p99: at(0.99), max: s.length ? s[s.length - 1] : null } })}\n`, () => process.exit(0));
}, cfg.seconds * 1000);
