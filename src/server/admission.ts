/**
 * Connection admission: the one place per listener that decides which connections the process
 * holds, and for how long. A connection is admitted at accept, before TLS and before any byte of
 * its protocol, and followed through the phases a client can stall it in:
 *
 * | phase      | what it waits for                                   | bound                          |
 * |------------|-----------------------------------------------------|--------------------------------|
 * | handshake  | the TLS handshake; on HTTP/2 the preface + SETTINGS | `handshakeTimeoutMs`, closed   |
 * | waiting    | ready, no whole request yet                         | `firstRequestTimeoutMs`, closed gracefully |
 * | busy       | a request in flight                                 | the protocol's own (body timeout, deadline) |
 * | idle       | every request answered                              | `idleTimeoutMs`, closed gracefully |
 *
 * Budgets, each with a stat and a log line when reached:
 * - per peer address, per listener (`maxPerPeer`): a peer's connection beyond it is closed at
 *   accept. Only that peer is refused.
 * - per listener (`maxConnections`) and per process (all listeners, bounded by the open-file
 *   limit): at the cap the newcomer is admitted and the connection that costs most and serves
 *   least is closed: the highest (connections its peer holds) x (time since its last whole
 *   request, or since accept). A peer holding many connections that send nothing loses them
 *   first; a busy client that sends requests all the time is the last to go. Refusing the
 *   newcomer instead would let whoever came first keep the slots for ever. A newcomer whose peer
 *   already holds its share of the cap (the cap over the peers holding connections) takes the
 *   place of its own peer's worst, so that peers at their share cannot make the others'
 *   connections churn; a peer may replace its own so at most OWN_REPLACEMENTS (a burst, then a few
 *   a second), and past that its newcomers are refused at accept as at its bound.
 * - Refusals happen before node makes a Socket of the connection where the listening handle allows
 *   it (refuseBeforeSocket): an attacker that reconnects as fast as it is refused costs an accept
 *   and a close.
 * - TLS handshakes under way, per process (`maxTlsHandshakes`): past it the oldest is closed.
 *
 * Time is read once per sweep (a timer per listener, not one per connection): a bound is applied
 * up to one sweep interval late.
 */
import type net from 'node:net';
import type { Counter, Gauge, StatsStore } from '../stats/store';
import type { Logger } from '../telemetry/logger';
import { TokenBucket } from '../platform/token-bucket';
import { ThrottledLog } from '../telemetry/throttled-log';

/**
 * The listen backlog of every port: connections the kernel completes before the process accepts
 * them. node's default (511) fills within a burst of reconnects, and a newcomer's SYN is then
 * dropped and retried a second later; the kernel caps it at net.core.somaxconn (4096 on Linux
 * since 5.4).
 */
export const LISTEN_BACKLOG = 4096;

/** What a protocol connection shows admission. */
export interface AdmittedConnection {
  /** Still in its protocol's handshake (the HTTP/2 preface and first SETTINGS). */
  readonly handshaking: boolean;
  /** Requests begun and not yet answered (a long-lived stream counts while it is open). */
  readonly callsInFlight: number;
  /** performance.now() of the last request that arrived whole (a streaming call: message); 0 before one. */
  readonly lastRequestAt: number;
  /** Closes gracefully: no new requests, those in flight finish (GOAWAY; HTTP/1.1: close when idle). */
  close(reason: string): void;
  /** Closes at once, telling the peer where the protocol can (GOAWAY). */
  shed(reason: string): void;
  /** The protocol's own time bounds, applied at each sweep (wall clock, ms). */
  sweep?(nowWallMs: number): void;
}

/** One listener's bounds (0: none, for each number but maxConnections). */
export interface AdmissionLimits {
  /** The port, in logs and stats: grpc, http, debug, metrics. */
  readonly listener: string;
  readonly maxConnections: number;
  /** The setting that sets maxConnections, named in the log line at the cap. */
  readonly maxConnectionsSetting: string;
  readonly maxPerPeer: number;
  readonly maxPerPeerSetting: string;
  readonly handshakeTimeoutMs: number;
  readonly firstRequestTimeoutMs: number;
  readonly idleTimeoutMs: number;
}

export type TimedOutPhase = 'handshake' | 'first_request' | 'idle';

/**
 * A per-connection (or per-stream) budget a client went past, as its protocol handler reports it:
 * counted in `ratelimit.server.budget_exceeded.__budget=<name>.__listener=<port>` and logged.
 */
export const BUDGETS = {
  control_frames: 'frames without requests (SETTINGS, PING, PRIORITY, WINDOW_UPDATE, empty DATA): closed with ENHANCE_YOUR_CALM',
  resets: 'stream resets (rapid reset): closed with ENHANCE_YOUR_CALM',
  header_work: 'HPACK decoding work: closed with ENHANCE_YOUR_CALM',
  header_block: 'a header block larger than the header list limit: closed with ENHANCE_YOUR_CALM',
  request_bytes: 'REQUEST_MAX_BUFFERED_BYTES (request bytes all connections may hold): the request answered RESOURCE_EXHAUSTED or 503, or the connection closed',
  answer_bytes: 'the answer bytes all slow clients may hold (32 MiB): closed',
  unread_acks: '1000 acknowledgements of SETTINGS or PING left unread: closed',
  slow_reader: '30 s without taking any of its answers: closed',
} as const;
export type BudgetName = keyof typeof BUDGETS;

/** One connection as admission holds it, from accept until it closes. */
export class Admission {
  connection: AdmittedConnection | undefined;
  /** Closed, shed or refused: no longer counted. */
  released = false;
  /** Closed gracefully for a bound (its answers still going out): counted until it closes, not timed again. */
  closing = false;

  constructor(
    readonly listener: ListenerAdmission,
    readonly socket: net.Socket,
    readonly peer: string,
    readonly acceptedAt: number,
  ) {}

  get handshaking(): boolean {
    return this.connection === undefined || this.connection.handshaking;
  }

  /** Since when it has served nothing: its last whole request, or its accept. */
  get servedAt(): number {
    const last = this.connection?.lastRequestAt ?? 0;
    return last > 0 ? last : this.acceptedAt;
  }

  /** The connection went past one of its protocol's budgets: counted and logged (throttled). */
  exceeded(budget: BudgetName): void {
    this.listener.exceeded(this, budget);
  }

  /** Closes at once (a deadline passed, or room was needed). */
  shed(reason: string): void {
    this.listener.release(this);
    if (this.connection !== undefined) this.connection.shed(reason);
    else this.socket.destroy();
  }
}

/** The peer a socket's connections count against: its address (IPv4-mapped IPv6 as IPv4); '' for a unix socket. */
export function peerOf(socket: net.Socket): string {
  return peerAddress(socket.remoteAddress);
}

function peerAddress(address: string | undefined): string {
  if (address === undefined) return '';
  return address.startsWith('::ffff:') && address.includes('.') ? address.slice(7) : address;
}

/** What node's accept hands its server: libuv's connection before a Socket is made of it. */
interface AcceptedHandle {
  getpeername?(out: { address?: string }): number;
  close(): void;
}
type OnConnection = (this: unknown, err: number, handle: AcceptedHandle | undefined) => void;

/**
 * Refuses a peer over its bound as node accepts its connection, before a Socket, its streams and
 * the 'connection' event are made of it: a refusal then costs the accept and the close (about half
 * of what it costs once a Socket exists, measured in bench/README.md), which matters when an
 * attacker reconnects as fast as it is refused. Node has no public hook there: its listening
 * handle's `onconnection` is wrapped (node 20 to 26 call it for every accepted connection). Where
 * it is missing (a server that does not own its listening socket), `accept` refuses the same peers
 * after node made the Socket.
 */
export function refuseBeforeSocket(server: net.Server, admission: ListenerAdmission): void {
  const wrap = (): void => {
    const handle = (server as unknown as { _handle?: { onconnection?: OnConnection } | null })._handle;
    const original = handle?.onconnection;
    if (handle === undefined || handle === null || typeof original !== 'function') return;
    handle.onconnection = function (this: unknown, err: number, accepted: AcceptedHandle | undefined) {
      if (err === 0 && accepted !== undefined && typeof accepted.getpeername === 'function') {
        const info: { address?: string } = {};
        accepted.getpeername(info);
        if (info.address !== undefined && admission.refuses(peerAddress(info.address))) {
          accepted.close();
          return;
        }
      }
      original.call(this, err, accepted);
    };
  };
  if (server.listening) wrap();
  else server.on('listening', wrap);
}

/** The sweep's interval: a tenth of the shortest phase bound, within 50 ms..1 s. */
function sweepInterval(limits: AdmissionLimits): number {
  const phases = [limits.handshakeTimeoutMs, limits.firstRequestTimeoutMs, limits.idleTimeoutMs].filter((t) => t > 0).map((t) => t / 10);
  return Math.max(50, Math.min(1000, ...phases));
}

/** Victims found by one scan, used until stale or spent (a scan is a pass over every connection). */
const VICTIMS_PER_SCAN = 32;
const VICTIMS_FRESH_MS = 250;

class VictimCache {
  private list: Array<{ admission: Admission; servedAt: number }> = [];
  private at = -Infinity;

  /** The connection to close for room, among `candidates`; undefined when there is none. */
  take(candidates: () => Iterable<Admission>, now: number, excluded: Admission): Admission | undefined {
    for (let attempt = 0; attempt < 2; attempt++) {
      if (now - this.at > VICTIMS_FRESH_MS || this.list.length === 0) {
        this.list = worstConnections(candidates(), now, VICTIMS_PER_SCAN, excluded);
        this.at = now;
      }
      while (this.list.length > 0) {
        const { admission, servedAt } = this.list.shift()!;
        // Closed meanwhile, or it has served since the scan: no longer what the scan found.
        if (!admission.released && admission.servedAt === servedAt && admission !== excluded) return admission;
      }
      this.at = -Infinity;
    }
    return undefined;
  }

  clear(): void {
    this.list = [];
    this.at = -Infinity;
  }
}

/**
 * The `k` connections that cost most and serve least, worst first: highest (its peer's
 * connections on that listener) x (ms since it last served, at least 1).
 */
export function worstConnections(candidates: Iterable<Admission>, now: number, k: number, excluded?: Admission): Array<{ admission: Admission; servedAt: number }> {
  const found: Array<{ admission: Admission; servedAt: number; score: number }> = [];
  let floor = -1;
  for (const a of candidates) {
    if (a.released || a === excluded) continue;
    const servedAt = a.servedAt;
    const score = a.listener.peerCount(a.peer) * Math.max(1, now - servedAt);
    if (found.length >= k && score <= floor) continue;
    found.push({ admission: a, servedAt, score });
    if (found.length > k) {
      found.sort((x, y) => y.score - x.score);
      found.length = k;
      floor = found[k - 1]!.score;
    }
  }
  found.sort((x, y) => y.score - x.score);
  return found.map(({ admission, servedAt }) => ({ admission, servedAt }));
}

/** What every listener of the process shares: the count of open connections and its cap, and the TLS handshakes under way. */
export class ConnectionAdmission {
  private readonly listeners = new Set<ListenerAdmission>();
  private open = 0;
  private readonly victims = new VictimCache();
  /** Connections whose TLS handshake has begun (their ClientHello arrives) and not finished, oldest first. */
  private readonly tlsHandshakes = new Set<Admission>();
  private readonly tlsLog: ThrottledLog;

  /**
   * @param maxConnections connections all listeners together may hold (the process's open files
   *   bound it: see openFileLimit); Infinity for none.
   * @param maxTlsHandshakes TLS handshakes under way at once (each holds some 50 KB of OpenSSL's
   *   state); past it the oldest is closed.
   */
  constructor(
    readonly maxConnections: number,
    private readonly stats: StatsStore | undefined,
    private readonly logger: Logger | undefined,
    readonly now: () => number = () => performance.now(),
    readonly maxTlsHandshakes = Infinity,
  ) {
    this.tlsLog = new ThrottledLog((msg) => logger?.warn(msg), 10_000);
  }

  /** @internal A connection's TLS handshake has begun: past the budget the oldest one under way goes. */
  tlsBegun(admission: Admission): void {
    this.tlsHandshakes.add(admission);
    if (this.tlsHandshakes.size <= this.maxTlsHandshakes) return;
    const oldest = this.tlsHandshakes.values().next().value as Admission;
    this.tlsHandshakes.delete(oldest);
    const owner = oldest.listener;
    owner.countEvicted();
    this.tlsLog.log(
      `${this.maxTlsHandshakes} TLS handshakes under way (TLS_MAX_HANDSHAKES): closed the oldest, a ${owner.limits.listener} connection of ${oldest.peer} ` +
        `begun ${Math.round(this.now() - oldest.acceptedAt)} ms ago, for one of ${admission.peer}`,
    );
    oldest.shed('tls_handshakes');
  }

  /** @internal The handshake finished, or the connection closed. */
  tlsEnded(admission: Admission): void {
    this.tlsHandshakes.delete(admission);
  }

  get handshakesUnderWay(): number {
    return this.tlsHandshakes.size;
  }

  /** The admission of one listener, sharing this process's cap. */
  listener(limits: AdmissionLimits): ListenerAdmission {
    const l = new ListenerAdmission(limits, this, this.stats, this.logger);
    this.listeners.add(l);
    return l;
  }

  get connections(): number {
    return this.open;
  }

  /** @internal A listener admitted one. */
  added(): void {
    this.open++;
  }

  /** @internal A listener released one. */
  removed(): void {
    this.open--;
  }

  /** @internal The process is at its cap: the worst connection of any listener, or undefined. */
  victim(now: number, newcomer: Admission): Admission | undefined {
    if (this.open < this.maxConnections) return undefined;
    const all = this.listeners;
    return this.victims.take(
      function* () {
        for (const l of all) yield* l.admissions();
      },
      now,
      newcomer,
    );
  }

  /** @internal Peers holding connections, counted per listener. */
  peers(): number {
    let n = 0;
    for (const l of this.listeners) n += l.peerTotal;
    return Math.max(1, n);
  }

  /** @internal */
  forget(listener: ListenerAdmission): void {
    this.listeners.delete(listener);
  }
}

/** One listener's connections: admitted at accept, followed by the sweep, drained at the end. */
export class ListenerAdmission {
  private readonly open = new Set<Admission>();
  /** Each peer's connections, oldest first. */
  private readonly perPeer = new Map<string, Set<Admission>>();
  /** What the peers over their share at a cap may still replace of their own (only peers holding connections). */
  private readonly replacements = new Map<string, TokenBucket>();
  /** TLS connections in their handshake, by remote address and port (the TLS socket is another object than the accepted one). */
  private readonly handshaking = new Map<string, Admission>();
  private readonly victims = new VictimCache();
  private draining = false;
  private sweeper: NodeJS.Timeout | undefined;
  private sweepEveryMs: number;
  /** Connections past a bound and their phase, in pairs, closed from `dueAt` on (closeDue). */
  private readonly due: Array<Admission | TimedOutPhase> = [];
  private dueAt = 0;
  private dripping = false;
  private readonly gauge: Gauge | undefined;
  private readonly refused: Counter | undefined;
  private readonly evicted: Counter | undefined;
  private readonly timedOut: Readonly<Record<TimedOutPhase, Counter | undefined>>;
  private readonly refusedLog: ThrottledLog;
  private readonly evictedLog: ThrottledLog;
  private readonly budgetLog: ThrottledLog;
  private readonly budgetCounters = new Map<BudgetName, Counter | undefined>();
  private readonly stats: StatsStore | undefined;

  constructor(
    readonly limits: AdmissionLimits,
    private readonly process: ConnectionAdmission,
    stats: StatsStore | undefined,
    logger: Logger | undefined,
  ) {
    this.stats = stats;
    this.sweepEveryMs = sweepInterval(limits);
    const tag = `.__listener=${limits.listener}`;
    this.gauge = stats?.gauge(`ratelimit.server.connections${tag}`);
    this.refused = stats?.counter(`ratelimit.server.connections_refused${tag}`);
    this.evicted = stats?.counter(`ratelimit.server.connections_evicted${tag}`);
    const timedOut = (phase: TimedOutPhase): Counter | undefined => stats?.counter(`ratelimit.server.connections_timed_out${tag}.__phase=${phase}`);
    this.timedOut = { handshake: timedOut('handshake'), first_request: timedOut('first_request'), idle: timedOut('idle') };
    const warn = (msg: string): void => logger?.warn(msg);
    this.refusedLog = new ThrottledLog(warn, 10_000);
    this.evictedLog = new ThrottledLog(warn, 10_000);
    this.budgetLog = new ThrottledLog(warn, 10_000);
  }

  /** @internal */
  exceeded(admission: Admission, budget: BudgetName): void {
    let counter = this.budgetCounters.get(budget);
    if (counter === undefined) {
      counter = this.stats?.counter(`ratelimit.server.budget_exceeded.__budget=${budget}.__listener=${this.limits.listener}`);
      this.budgetCounters.set(budget, counter);
    }
    counter?.inc();
    this.budgetLog.log(`${this.limits.listener} port: a connection of ${admission.peer || 'a unix socket peer'} went past ${BUDGETS[budget]}`);
  }

  get size(): number {
    return this.open.size;
  }

  /** The protocol's own bounds need a sweep at least this often (within 50 ms..1 s). */
  sweepAtLeastEvery(ms: number): void {
    this.sweepEveryMs = Math.min(this.sweepEveryMs, Math.max(50, ms));
  }

  /** Peers holding connections. */
  get peerTotal(): number {
    return this.perPeer.size;
  }

  peerCount(peer: string): number {
    return this.perPeer.get(peer)?.size ?? 0;
  }

  admissions(): IterableIterator<Admission> {
    return this.open.values();
  }

  /**
   * A socket was accepted: admitted (undefined when it is refused, and then destroyed). At a cap
   * another connection is closed to make room.
   */
  accept(socket: net.Socket, tlsHandshake = false): Admission | undefined {
    const peer = peerOf(socket);
    if (this.refuses(peer)) {
      socket.destroy();
      return undefined;
    }
    const now = this.process.now();
    const admission = new Admission(this, socket, peer, now);
    this.open.add(admission);
    let own = this.perPeer.get(peer);
    if (own === undefined) this.perPeer.set(peer, (own = new Set()));
    own.add(admission);
    this.process.added();
    this.gauge?.set(this.open.size);
    socket.once('close', () => this.release(admission));
    if (tlsHandshake && socket.remotePort !== undefined) {
      const key = handshakeKey(socket);
      this.handshaking.set(key, admission);
      socket.once('close', () => {
        if (this.handshaking.get(key) === admission) this.handshaking.delete(key);
      });
    }
    this.makeRoom(now, admission);
    this.startSweeping();
    return admission;
  }

  /**
   * A connection of `peer` is not taken: the listener drains, or the peer holds its bound (counted
   * and logged). Asked at accept, before node makes a Socket where it can (refuseBeforeSocket).
   */
  refuses(peer: string): boolean {
    if (this.draining) return true;
    if (peer === '') return false;
    const { limits } = this;
    const held = this.peerCount(peer);
    if (limits.maxPerPeer > 0 && held >= limits.maxPerPeer) {
      this.refused?.inc();
      this.refusedLog.log(`${limits.listener} port: ${peer} holds ${held} connections (${limits.maxPerPeerSetting}=${limits.maxPerPeer}); its new connections are closed`);
      return true;
    }
    if (held === 0) return false;
    // As makeRoom would find it once this newcomer is counted.
    const past = this.capPast(this.open.size + 1, this.process.connections + 1, held + 1);
    if (past === undefined || !past.overShare || this.replacements.get(peer)?.has(1, this.process.now()) !== false) return false;
    this.refused?.inc();
    this.refusedLog.log(
      `${limits.listener} port at ${past.cap}: ${peer} holds ${held} connections, more than its share, and replaced ${OWN_REPLACEMENTS.burst} of its own ` +
        `(at most ${OWN_REPLACEMENTS.perSecond} a second); its new connections are closed`,
    );
    return true;
  }

  /**
   * The cap that `open` connections on this listener and `processOpen` in the process are past
   * (undefined: none), and whether a peer holding `own` of them is past its share of it (the cap
   * over the peers holding connections): its newcomer may then only take the place of its own.
   */
  private capPast(open: number, processOpen: number, own: number): { cap: string; processWide: boolean; overShare: boolean } | undefined {
    const { limits } = this;
    if (open > limits.maxConnections) {
      return { cap: `${limits.maxConnectionsSetting}=${limits.maxConnections}`, processWide: false, overShare: own > limits.maxConnections / this.perPeer.size };
    }
    const max = this.process.maxConnections;
    if (processOpen > max) return { cap: `the process's ${max} connections (open-file limit)`, processWide: true, overShare: own > max / this.process.peers() };
    return undefined;
  }

  /** The admission of an accepted TLS socket, now that its handshake is done (undefined when it was closed meanwhile). */
  secured(tlsSocket: net.Socket): Admission | undefined {
    if (tlsSocket.remotePort === undefined) return undefined;
    const key = handshakeKey(tlsSocket);
    const admission = this.handshaking.get(key);
    if (admission === undefined) return undefined;
    this.handshaking.delete(key);
    this.process.tlsEnded(admission);
    // The accepted socket closes with its TLS socket: its 'close' releases the admission.
    return admission.released ? undefined : admission;
  }

  /** The TLS handshake of an admitted connection has begun (its first bytes arrived): it counts against the process's TLS_MAX_HANDSHAKES. */
  tlsBegun(admission: Admission): void {
    if (!admission.released) this.process.tlsBegun(admission);
  }

  /** @internal */
  countEvicted(): void {
    this.evicted?.inc();
  }

  /**
   * At the listener's or the process's cap: the worst other connection goes; when the newcomer's
   * peer already holds its share of the cap, the worst of that peer's own.
   */
  private makeRoom(now: number, newcomer: Admission): void {
    const { limits } = this;
    const own = this.perPeer.get(newcomer.peer)!;
    const past = this.capPast(this.open.size, this.process.connections, own.size);
    if (past === undefined) return;
    const { cap, overShare } = past;
    const victim = overShare ? worstOwn(own, now, newcomer) : past.processWide ? this.process.victim(now, newcomer) : this.victims.take(() => this.open.values(), now, newcomer);
    if (overShare && victim !== undefined && newcomer.peer !== '') {
      let bucket = this.replacements.get(newcomer.peer);
      if (bucket === undefined) this.replacements.set(newcomer.peer, (bucket = new TokenBucket(OWN_REPLACEMENTS.burst, OWN_REPLACEMENTS.perSecond, now)));
      bucket.spend(1, now);
    }
    if (victim === undefined) {
      newcomer.shed('no room'); // nothing else to close: the newcomer cannot stay
      return;
    }
    const idleSeconds = Math.round((now - victim.servedAt) / 1000);
    const owner = victim.listener;
    owner.countEvicted();
    owner.evictedLog.log(
      `${limits.listener} port at ${cap}: closed a ${owner.limits.listener} connection of ${victim.peer || 'a unix socket peer'} ` +
        `(it holds ${owner.peerCount(victim.peer)}, nothing served for ${idleSeconds} s) to admit one of ${newcomer.peer || 'a unix socket peer'}`,
    );
    victim.shed('evicted');
  }

  /** @internal The connection closed, or was shed: it counts no more. */
  release(admission: Admission): void {
    if (admission.released) return;
    admission.released = true;
    this.open.delete(admission);
    this.process.tlsEnded(admission);
    const own = this.perPeer.get(admission.peer);
    own?.delete(admission);
    if (own?.size === 0) {
      this.perPeer.delete(admission.peer);
      this.replacements.delete(admission.peer);
    }
    this.process.removed();
    this.gauge?.set(this.open.size);
  }

  private startSweeping(): void {
    if (this.sweeper !== undefined) return;
    this.sweeper = setInterval(() => this.sweep(), this.sweepEveryMs);
    this.sweeper.unref();
  }

  /** Applies the phase bounds, and the protocols' own, to every connection. */
  sweep(): void {
    if (this.open.size === 0) {
      clearInterval(this.sweeper);
      this.sweeper = undefined;
      this.victims.clear();
      return;
    }
    const now = this.process.now();
    const wall = Date.now();
    const { handshakeTimeoutMs, firstRequestTimeoutMs, idleTimeoutMs } = this.limits;
    const due = this.due;
    for (const a of this.open) {
      if (a.closing) continue;
      const c = a.connection;
      if (a.handshaking) {
        if (handshakeTimeoutMs > 0 && now - a.acceptedAt > handshakeTimeoutMs) due.push(a, 'handshake');
        continue;
      }
      c!.sweep?.(wall);
      if (a.released || c!.callsInFlight > 0) continue;
      const last = c!.lastRequestAt;
      if (last === 0) {
        if (firstRequestTimeoutMs > 0 && now - a.acceptedAt > firstRequestTimeoutMs) due.push(a, 'first_request');
      } else if (idleTimeoutMs > 0 && now - last > idleTimeoutMs) due.push(a, 'idle');
    }
    for (let i = this.dueAt; i < due.length; i += 2) (due[i] as Admission).closing = true;
    this.closeDue();
  }

  /**
   * Closes what the sweeps found past a bound, CLOSES_PER_TURN a loop turn: connections opened
   * together (a reconnecting attacker's) reach a bound together, and closing thousands in one
   * turn would hold every other client's answers back.
   */
  private closeDue(): void {
    const due = this.due;
    const end = Math.min(due.length, this.dueAt + 2 * CLOSES_PER_TURN);
    for (let i = this.dueAt; i < end; i += 2) this.timeOut(due[i] as Admission, due[i + 1] as TimedOutPhase);
    this.dueAt = end;
    if (end < due.length) {
      if (!this.dripping) {
        this.dripping = true;
        setImmediate(() => {
          this.dripping = false;
          this.closeDue();
        });
      }
      return;
    }
    due.length = 0;
    this.dueAt = 0;
  }

  private timeOut(a: Admission, phase: TimedOutPhase): void {
    if (a.released) return;
    this.timedOut[phase]?.inc();
    if (phase === 'handshake') {
      a.shed('handshake_timeout');
      return;
    }
    a.connection!.close(phase === 'idle' ? 'max_idle' : 'first_request_timeout');
  }

  /** Takes no new connections and ends the open ones with `end`; resolves once `server` has closed and they all have. */
  drain(server: net.Server, end: (connection: AdmittedConnection) => void): Promise<void> {
    this.draining = true;
    return new Promise<void>((resolve) => {
      if (!server.listening) resolve();
      else server.close(() => resolve());
      for (const a of [...this.open]) {
        if (a.connection === undefined) a.shed('draining');
        else end(a.connection);
      }
    });
  }

  /** Closes every connection at once (the drain took too long). */
  forceClose(): void {
    for (const a of [...this.open]) a.shed('shutdown');
  }

  /** The listener is gone for good. */
  close(): void {
    clearInterval(this.sweeper);
    this.sweeper = undefined;
    this.process.forget(this);
  }
}

/**
 * How many of its own connections a peer over its share of a full cap may replace by new ones: a
 * burst for a fleet behind one address that reconnects at once (a restart), then a few a second.
 * Past it the peer's newcomers are refused at accept, as at its bound: an attacker reconnecting as
 * fast as it can then costs an accept and a close each time, not a whole connection made and
 * another one closed.
 */
export const OWN_REPLACEMENTS = { burst: 100, perSecond: 10 } as const;

/** Connections past a bound closed in one loop turn. */
const CLOSES_PER_TURN = 128;

/** Connections of one peer looked at for the worst (oldest first): a bounded scan. */
const OWN_SCAN = 64;

/** The worst of a peer's own connections (the first OWN_SCAN, oldest first), other than `newcomer`. */
function worstOwn(own: Set<Admission>, now: number, newcomer: Admission): Admission | undefined {
  let worst: Admission | undefined;
  let worstIdle = -1;
  let seen = 0;
  for (const a of own) {
    if (a === newcomer || a.released) continue;
    const idle = now - a.servedAt;
    if (idle > worstIdle) {
      worst = a;
      worstIdle = idle;
    }
    if (++seen >= OWN_SCAN) break;
  }
  return worst;
}

function handshakeKey(socket: net.Socket): string {
  return `${socket.remoteAddress}|${socket.remotePort}`;
}

/** A listener's admission with no caps and only the bounds given: for a server embedded on its own (tests, tools). */
export function unboundedAdmission(limits: Partial<AdmissionLimits> & { listener: string }): ListenerAdmission {
  return new ConnectionAdmission(Infinity, undefined, undefined).listener({
    maxConnections: Infinity,
    maxConnectionsSetting: '',
    maxPerPeer: 0,
    maxPerPeerSetting: '',
    handshakeTimeoutMs: 0,
    firstRequestTimeoutMs: 0,
    idleTimeoutMs: 0,
    ...limits,
  });
}
