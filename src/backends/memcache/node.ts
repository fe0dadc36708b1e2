/**
 * One memcached node: a memjs Client holding one memjs Server (one TCP connection, every command
 * pipelined on it, reconnected on the next command after it breaks), driven through memjs's
 * binary-protocol primitives (`Server.onResponse/onError/write`) so that a multi-get is a single
 * write (GETKQ per key + NOOP) and a miss comes back as a status code, not a logged error string.
 *
 * memjs 1.3.2 has a few connection-lifecycle gaps this wrapper closes:
 * - a connection closed by the server (FIN, e.g. memcached shutting down) fails nothing: memjs
 *   forgets the socket but keeps the pending callbacks, whose timeout then never runs. Here the
 *   close of the live socket fails them at once.
 * - memjs's listeners stay on a socket it gave up (after a timeout it only `end()`s it): that
 *   socket's later `error` fails the callbacks of the live connection, its `close` clears the live
 *   socket and its connect timer, its late `data` is appended to the live response buffer. Here a
 *   given-up socket is detached and destroyed as soon as memjs opens the next one.
 * - its opaque counter turns negative after 2^31 commands (and `writeUInt32BE` then throws). Here
 *   the opaque is ours and wraps at 2^31.
 * - the server reads SASL credentials from MEMCACHE_USERNAME / MEMCACHE_PASSWORD; here they are
 *   cleared (upstream has no SASL either).
 * - its timeout is the socket's idle timeout, which every new write restarts: a hung memcached
 *   (SIGSTOP) under steady traffic never times out, and commands pile up behind it. Here each
 *   command has its own deadline (MEMCACHE_TIMEOUT after it was sent, connecting included, as
 *   gomemcache's per-operation timeout): the oldest one passing resets the connection and fails
 *   every command on it. And at most `maxInFlight` commands wait on a connection; more fail at once.
 */
import type { Socket } from 'node:net';
import * as memjs from 'memjs';
import type { Logger } from '../../telemetry/logger';

export const enum Status {
  OK = 0,
  NOT_FOUND = 1,
  EXISTS = 2,
  NOT_STORED = 5,
}

const OP_GET = 0x00;
const OP_ADD = 0x02;
const OP_INCREMENT = 0x05;
const OP_NOOP = 0x0a;
const OP_GETKQ = 0x0d;
/** Binary-protocol increment expiration that means "fail on a miss, do not create". */
const NO_AUTOVIVIFY = 0xffffffff;
const MAX_OPAQUE = 0x7fffffff;
const HEALTH_KEY = 'ratelimit_memcache_health_probe';

export interface NodeOptions {
  /** MEMCACHE_TIMEOUT: longest wait for a command's answer, connecting included. */
  timeoutMs: number;
  /** Commands that may wait for an answer at once; more fail at once. */
  maxInFlight: number;
  logger: Logger;
}

/** Receives a multi-get's hits and its end; implemented by the store's per-request state. */
export interface MultiGetSink {
  /** `index` is the op index (an entry of the `slots` given to getMulti). */
  hit(index: number, value: Buffer): void;
  /** Once, after the last hit: err set when the read failed (hits so far may still be used). */
  done(node: MemcacheNode, err: Error | undefined): void;
}

/** memjs internals this wrapper reads or repairs: memjs is pinned to 1.3.2 and test/backends/memcache/memjs-internals.test.ts checks them. */
interface ServerInternals {
  _socket: Socket | undefined;
  connected: boolean;
  timeoutSet: boolean;
  errorCallbacks: Record<number, unknown>;
  sock(sasl: boolean, go: (s: Socket) => void): void;
  username: string | undefined;
  password: string | undefined;
}

type Response = memjs.Response;

/** A response handler kept across several responses (memjs calls these "quiet"). */
type QuietHandler = ((r: Response) => void) & { quiet?: boolean };

/** Errors that mean the node answered (a protocol-level refusal), not that it is unreachable. */
export class ProtocolError extends Error {
  override readonly name = 'ProtocolError';
}

function asError(e: unknown): Error {
  return e instanceof Error ? e : new Error(String(e));
}

export class MemcacheNode {
  readonly host: string;
  readonly port: number;
  /** Whether the node answered last time it was asked: undefined until the first answer. */
  up: boolean | undefined;
  lastError = '';
  changedAtMs = Date.now();
  /** A health probe is in flight. */
  probing = false;
  private readonly client: memjs.Client;
  private readonly server: memjs.Server;
  private readonly internals: ServerInternals;
  private opaque = 0;
  /** Commands written and not answered yet. */
  private inflight = 0;
  /**
   * When each of them is due, in the order sent (a ring from `dueHead`, `inflight` long): memcached
   * answers in order on a connection, so the oldest is the first to answer or to be late.
   */
  private readonly dueAt: Float64Array;
  private dueHead = 0;
  private deadlineTimer: NodeJS.Timeout | undefined;
  /** A deadline passed: judged after the loop's reads (see checkDeadline). */
  private lateCheck: NodeJS.Immediate | undefined;
  private readonly sockets = new Set<Socket>();
  private newest: Socket | undefined;
  private closed = false;

  constructor(
    readonly name: string,
    private readonly opts: NodeOptions,
    /** Told about every answer (true) or connection failure (false, with the error). */
    private readonly onState: (node: MemcacheNode, up: boolean, err: Error | undefined) => void,
  ) {
    const i = name.lastIndexOf(':');
    this.host = name.slice(0, i).replace(/^\[(.*)\]$/, '$1');
    this.port = Number(name.slice(i + 1));
    this.dueAt = new Float64Array(opts.maxInFlight);
    const serverOptions: memjs.ServerOptions = {
      timeout: opts.timeoutMs / 1000,
      conntimeout: opts.timeoutMs / 1000,
      keepAlive: true,
      keepAliveDelay: 30,
    };
    this.server = new memjs.Server(this.host, this.port, undefined, undefined, serverOptions);
    this.internals = this.server as unknown as ServerInternals;
    this.internals.username = undefined;
    this.internals.password = undefined;
    this.client = new memjs.Client([this.server], {
      retries: 1,
      failover: false,
      logger: { log: (...args: unknown[]) => opts.logger.debug(`memjs: ${args.join(' ')}`) },
    });
    // Track every socket memjs opens, to repair its lifecycle gaps and to destroy them on close.
    const internals = this.internals;
    const sock = internals.sock;
    internals.sock = (sasl, go) => {
      const before = internals._socket;
      sock.call(internals, sasl, go);
      const s = internals._socket;
      if (s !== undefined && s !== before) this.adopt(s);
    };
  }

  /** Reads `ops[slots[j]].key` for every j with one write; hits and the end go to `sink`. */
  getMulti(ops: readonly { readonly key: string }[], slots: readonly number[], sink: MultiGetSink): void {
    const n = slots.length;
    let size = 24;
    for (let j = 0; j < n; j++) size += 24 + Buffer.byteLength(ops[slots[j]!]!.key);
    const buf = Buffer.allocUnsafe(size);
    const seq = this.nextOpaque();
    let off = 0;
    for (let j = 0; j < n; j++) off = writeRequest(buf, off, OP_GETKQ, ops[slots[j]!]!.key, 0, seq);
    writeHeader(buf, off, OP_NOOP, 0, 0, 0, seq);

    let cursor = 0;
    let failure: Error | undefined;
    let finished = false;
    const handler: QuietHandler = (r) => {
      if (finished) return;
      if (r.header.opcode === OP_NOOP) {
        finished = true;
        this.answered();
        sink.done(this, failure);
        return;
      }
      if (r.header.status !== Status.OK) {
        if (r.header.status !== Status.NOT_FOUND && failure === undefined) {
          failure = new ProtocolError(`GETKQ failed with status ${r.header.status}: ${r.val.toString()}`);
        }
        return;
      }
      // Hits come back in request order: scan forward from the last one.
      const key = r.key.toString();
      for (let j = cursor; j < n; j++) {
        if (ops[slots[j]!]!.key === key) {
          cursor = j + 1;
          sink.hit(slots[j]!, r.val);
          return;
        }
      }
    };
    handler.quiet = true;
    this.send(seq, buf, handler, (err) => {
      if (finished) return;
      finished = true;
      sink.done(this, err);
    });
  }

  /** Binary increment that fails with NOT_FOUND on a miss (never creates the key). */
  incr(key: string, amount: number, cb: (err: Error | undefined, status: number) => void): void {
    const keyLen = Buffer.byteLength(key);
    const buf = Buffer.allocUnsafe(24 + 20 + keyLen);
    const seq = this.nextOpaque();
    writeHeader(buf, 0, OP_INCREMENT, keyLen, 20, 0, seq);
    buf.writeUInt32BE(Math.floor(amount / 0x100000000) >>> 0, 24);
    buf.writeUInt32BE(amount >>> 0, 28);
    buf.writeUInt32BE(0, 32); // initial (unused: no autovivify)
    buf.writeUInt32BE(0, 36);
    buf.writeUInt32BE(NO_AUTOVIVIFY, 40);
    buf.write(key, 44, keyLen, 'utf8');
    this.single(seq, buf, cb);
  }

  /** Binary add of `value` with `expiration` (seconds, or a Unix time past 30 days). */
  add(key: string, value: string, expiration: number, cb: (err: Error | undefined, status: number) => void): void {
    const keyLen = Buffer.byteLength(key);
    const valueLen = Buffer.byteLength(value);
    const buf = Buffer.allocUnsafe(24 + 8 + keyLen + valueLen);
    const seq = this.nextOpaque();
    writeHeader(buf, 0, OP_ADD, keyLen, 8, valueLen, seq);
    buf.writeUInt32BE(0, 24); // flags
    buf.writeUInt32BE(expiration >>> 0, 28);
    buf.write(key, 32, keyLen, 'utf8');
    buf.write(value, 32 + keyLen, valueLen, 'utf8');
    this.single(seq, buf, cb);
  }

  /** A light liveness check: `get` of a constant key (a miss is an answer). */
  probe(cb: (err: Error | undefined) => void): void {
    const seq = this.nextOpaque();
    const buf = Buffer.allocUnsafe(24 + HEALTH_KEY.length);
    writeRequest(buf, 0, OP_GET, HEALTH_KEY, 0, seq);
    this.single(seq, buf, (err) => cb(err));
  }

  /** Commands waiting for an answer. */
  get inFlight(): number {
    return this.inflight;
  }

  /** Fails whatever is pending and destroys every socket; nothing of this node keeps the loop alive. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.deadlineTimer);
    this.deadlineTimer = undefined;
    if (this.lateCheck !== undefined) clearImmediate(this.lateCheck);
    this.lateCheck = undefined;
    this.client.close();
    this.reset(new Error(`memcached ${this.name}: client closed`));
  }

  get isClosed(): boolean {
    return this.closed;
  }

  private nextOpaque(): number {
    this.opaque = this.opaque >= MAX_OPAQUE ? 1 : this.opaque + 1;
    return this.opaque;
  }

  private single(seq: number, buf: Buffer, cb: (err: Error | undefined, status: number) => void): void {
    let finished = false;
    this.send(
      seq,
      buf,
      (r) => {
        if (finished) return;
        finished = true;
        this.answered();
        cb(undefined, r.header.status);
      },
      (err) => {
        if (finished) return;
        finished = true;
        cb(err, -1);
      },
    );
  }

  private send(seq: number, buf: Buffer, onResponse: (r: Response) => void, onError: (err: Error) => void): void {
    if (this.closed) {
      onError(new Error(`memcached ${this.name}: client closed`));
      return;
    }
    const cap = this.dueAt.length;
    if (this.inflight >= cap) {
      onError(new Error(`memcached ${this.name}: ${cap} commands already wait for an answer`));
      return;
    }
    this.dueAt[(this.dueHead + this.inflight) % cap] = Date.now() + this.opts.timeoutMs;
    this.inflight++;
    if (this.deadlineTimer === undefined && this.lateCheck === undefined) this.armDeadline(this.opts.timeoutMs);
    let failed = false;
    this.server.onResponse(seq, onResponse);
    this.server.onError(seq, (e: unknown) => {
      if (failed) return;
      failed = true;
      // memjs fails every pending command at once, so which entry goes does not matter.
      this.settleOldest();
      const err = asError(e);
      this.lastError = err.message;
      this.onState(this, false, err);
      onError(err);
    });
    this.server.write(buf);
  }

  /** A command got its final answer: the oldest one, as memcached answers in order. */
  private answered(): void {
    this.settleOldest();
    if (this.up !== true) this.onState(this, true, undefined);
  }

  private settleOldest(): void {
    if (this.inflight === 0) return;
    this.dueHead = (this.dueHead + 1) % this.dueAt.length;
    this.inflight--;
  }

  private armDeadline(ms: number): void {
    this.deadlineTimer = setTimeout(this.checkDeadline, ms);
    this.deadlineTimer.unref();
  }

  private readonly checkDeadline = (): void => {
    this.deadlineTimer = undefined;
    if (this.inflight === 0 || this.closed) return;
    const wait = this.dueAt[this.dueHead]! - Date.now();
    if (wait > 0) return this.armDeadline(wait);
    // After the process itself stalled (CPU starved, a long GC), every deadline passes at once
    // while the answers already wait in the socket: timers run before the loop reads sockets, so
    // the verdict waits for this turn's reads (the check phase follows the poll phase).
    this.lateCheck = setImmediate(this.confirmLate);
  };

  /** The oldest command is still unanswered after the reads: the connection is reset and everything on it fails. */
  private readonly confirmLate = (): void => {
    this.lateCheck = undefined;
    if (this.inflight === 0 || this.closed) return;
    const wait = this.dueAt[this.dueHead]! - Date.now();
    if (wait > 0) return this.armDeadline(wait);
    this.reset(new Error(`memcached ${this.name} timed out: no answer within ${this.opts.timeoutMs} ms`));
  };

  /** No socket left behind, then memjs's failure path for everything pending. */
  private reset(err: Error): void {
    // Sockets first: a command sent from a failure callback below opens a fresh connection.
    for (const s of this.sockets) detach(s);
    this.sockets.clear();
    this.newest = undefined;
    this.internals._socket = undefined;
    this.internals.connected = false;
    this.internals.timeoutSet = false;
    // memjs's error(): fails every pending callback (each settles one command).
    this.server.error(err);
  }

  private adopt(s: Socket): void {
    // memjs opens a socket only once it gave up the previous one, after failing its callbacks
    // (error, timeout, or the close handled below): an older socket still open is of no use, but
    // memjs's listeners on it would still act on the live connection (its `error` fails the live
    // callbacks, its `close` clears the live socket and its connect timer, its late `data` joins
    // the live response buffer). Detach and destroy it.
    for (const old of this.sockets) detach(old);
    this.sockets.clear();
    this.sockets.add(s);
    this.newest = s;
    // Registered after memjs's own close handler, so it runs after it.
    s.once('close', () => {
      this.sockets.delete(s);
      if (s !== this.newest) return;
      this.newest = undefined;
        // The live connection ended (server gone, FIN): memjs forgets the socket but keeps the
      // callbacks, which would then wait for a timeout that no longer runs. Fail them now.
      if (hasKeys(this.internals.errorCallbacks)) this.server.error(new Error(`connection to memcached ${this.name} closed`));
    });
  }
}

/** Makes a socket inert (no memjs listener left) and destroys it. */
function detach(s: Socket): void {
  s.removeAllListeners('data');
  s.removeAllListeners('close');
  s.removeAllListeners('error');
  s.removeAllListeners('timeout');
  s.removeAllListeners('connect');
  s.on('error', () => {});
  s.setTimeout(0);
  s.destroy();
}

function hasKeys(o: Record<number, unknown>): boolean {
  for (const k in o) if (Object.prototype.hasOwnProperty.call(o, k)) return true;
  return false;
}

function writeHeader(
  buf: Buffer,
  off: number,
  opcode: number,
  keyLen: number,
  extrasLen: number,
  valueLen: number,
  opaque: number,
): number {
  buf[off] = 0x80; // request magic
  buf[off + 1] = opcode;
  buf.writeUInt16BE(keyLen, off + 2);
  buf[off + 4] = extrasLen;
  buf[off + 5] = 0; // data type
  buf.writeUInt16BE(0, off + 6); // vbucket
  buf.writeUInt32BE(keyLen + extrasLen + valueLen, off + 8);
  buf.writeUInt32BE(opaque, off + 12);
  buf.writeUInt32BE(0, off + 16); // cas
  buf.writeUInt32BE(0, off + 20);
  return off + 24;
}

/** A key-only request (get, getkq) at `off`; returns the offset after it. */
function writeRequest(buf: Buffer, off: number, opcode: number, key: string, extrasLen: number, opaque: number): number {
  const keyLen = Buffer.byteLength(key);
  off = writeHeader(buf, off, opcode, keyLen, extrasLen, 0, opaque);
  return off + buf.write(key, off, keyLen, 'utf8');
}
