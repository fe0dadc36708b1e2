/**
 * Connection admission (src/server/admission.ts) on real sockets with stand-in protocol
 * connections and a clock the test moves: the per-peer bound, the caps that make room by closing
 * the connection that costs most and serves least, the phase bounds (handshake, first request,
 * idle), the drain and the forced close, and the stats and log lines at each budget.
 */
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { type Admission, type AdmittedConnection, ConnectionAdmission, type AdmissionLimits, OWN_REPLACEMENTS, peerOf, refuseBeforeSocket, worstConnections } from '../../src/server/admission';
import { StatsStore } from '../../src/stats/store';
import { type Logger, silentLogger } from '../../src/telemetry/logger';
import { waitFor } from '../support/wait';

/** A protocol connection as admission sees it, driven by the test. */
class Stub implements AdmittedConnection {
  handshaking = false;
  callsInFlight = 0;
  lastRequestAt = 0;
  closed: string | undefined;
  shedFor: string | undefined;

  constructor(readonly socket: net.Socket) {}

  close(reason: string): void {
    this.closed = reason;
    this.socket.end();
  }

  shed(reason: string): void {
    this.shedFor = reason;
    this.socket.destroy();
  }
}

const LIMITS: AdmissionLimits = {
  listener: 'grpc',
  maxConnections: 100,
  maxConnectionsSetting: 'GRPC_MAX_CONNECTIONS',
  maxPerPeer: 0,
  maxPerPeerSetting: 'GRPC_MAX_CONNECTIONS_PER_PEER',
  handshakeTimeoutMs: 0,
  firstRequestTimeoutMs: 0,
  idleTimeoutMs: 0,
};

/** What a test opened, closed after it whatever its outcome. */
const opened: Array<net.Server | net.Socket> = [];
afterEach(async () => {
  const all = opened.splice(0);
  // Clients first: a server closes once its connections have.
  for (const o of all) if (o instanceof net.Socket) o.destroy();
  for (const o of all) if (o instanceof net.Server) await new Promise((resolve) => (o.listening ? o.close(resolve) : resolve(undefined)));
});

interface Served {
  readonly process: ConnectionAdmission;
  readonly stats: StatsStore;
  readonly warnings: string[];
  /** Moves admission's clock on (ms). */
  advance(ms: number): void;
  /** Stops admission's clock where it is (advance still moves it). */
  freeze(): void;
  listener(limits: Partial<AdmissionLimits>, handshaking?: boolean): Promise<Listener>;
}

interface Listener {
  readonly admission: ReturnType<ConnectionAdmission['listener']>;
  readonly server: net.Server;
  /** The stub of each admitted connection, in accept order. */
  readonly stubs: Stub[];
  /** Connects from `from` (a loopback address); resolves once the server has taken or refused it. */
  connect(from?: string): Promise<net.Socket>;
}

async function serve(processCap = Infinity): Promise<Served> {
  const stats = new StatsStore();
  const warnings: string[] = [];
  const logger: Logger = { ...silentLogger, warn: (m: string) => warnings.push(m) };
  let ahead = 0;
  let frozenAt: number | undefined;
  const process = new ConnectionAdmission(processCap, stats, logger, () => (frozenAt ?? performance.now()) + ahead);
  return {
    process,
    stats,
    warnings,
    advance: (ms) => (ahead += ms),
    freeze: () => (frozenAt = performance.now()),
    async listener(over, handshaking = false) {
      const admission = process.listener({ ...LIMITS, ...over });
      const stubs: Stub[] = [];
      let decided = 0;
      const server = net.createServer((socket) => {
        const admitted = admission.accept(socket);
        if (admitted !== undefined) {
          const stub = new Stub(socket);
          stub.handshaking = handshaking;
          admitted.connection = stub;
          stubs.push(stub);
        }
        decided++;
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      opened.push(server);
      const port = (server.address() as AddressInfo).port;
      return {
        admission,
        server,
        stubs,
        async connect(from = '127.0.0.1') {
          const before = decided;
          const client = net.connect({ port, host: '127.0.0.1', localAddress: from });
          client.on('error', () => undefined);
          opened.push(client);
          await waitFor(() => decided > before, 'the server to decide on the connection');
          return client;
        },
      };
    },
  };
}

const closedSoon = (socket: net.Socket): Promise<void> =>
  socket.closed ? Promise.resolve() : new Promise<void>((resolve) => socket.once('close', () => resolve()));

describe('peers', () => {
  test('an IPv4-mapped IPv6 address is its IPv4 peer; a unix socket has none', () => {
    expect(peerOf({ remoteAddress: '::ffff:10.1.2.3' } as net.Socket)).toBe('10.1.2.3');
    expect(peerOf({ remoteAddress: '2001:db8::1' } as net.Socket)).toBe('2001:db8::1');
    expect(peerOf({ remoteAddress: undefined } as net.Socket)).toBe('');
  });

  test('a peer past its bound is closed at accept, counted and logged; other peers and its held ones are not touched', async () => {
    const s = await serve();
    const l = await s.listener({ maxPerPeer: 2 });
    const a = await l.connect('127.0.0.2');
    const b = await l.connect('127.0.0.2');
    const third = await l.connect('127.0.0.2');
    await closedSoon(third);
    const other = await l.connect('127.0.0.3');
    expect(l.stubs).toHaveLength(3);
    expect(l.admission.peerCount('127.0.0.2')).toBe(2);
    expect(l.admission.peerCount('127.0.0.3')).toBe(1);
    expect(a.closed || b.closed || other.closed).toBe(false);
    expect(s.stats.counter('ratelimit.server.connections_refused.__listener=grpc').value).toBe(1);
    expect(s.warnings).toEqual(['grpc port: 127.0.0.2 holds 2 connections (GRPC_MAX_CONNECTIONS_PER_PEER=2); its new connections are closed']);
    // One of its two closes: the peer may connect again.
    a.destroy();
    await waitFor(() => l.admission.peerCount('127.0.0.2') === 1, 'the closed connection released');
    await l.connect('127.0.0.2');
    expect(l.stubs).toHaveLength(4);
    expect(s.stats.gauge('ratelimit.server.connections.__listener=grpc').value).toBe(3);
  });

  test('refuseBeforeSocket: a peer past its bound is closed as it is accepted, before node makes a Socket of it (no connection event), counted once', async () => {
    const s = await serve();
    const l = await s.listener({ maxPerPeer: 2 });
    refuseBeforeSocket(l.server, l.admission);
    let events = 0;
    l.server.on('connection', () => events++);
    await l.connect('127.0.0.2');
    await l.connect('127.0.0.2');
    const port = (l.server.address() as AddressInfo).port;
    for (let i = 0; i < 3; i++) {
      const refused = net.connect({ port, host: '127.0.0.1', localAddress: '127.0.0.2' });
      refused.on('error', () => undefined);
      opened.push(refused);
      await closedSoon(refused);
    }
    await l.connect('127.0.0.3');
    expect(events).toBe(3);
    expect(l.stubs).toHaveLength(3);
    expect(s.stats.counter('ratelimit.server.connections_refused.__listener=grpc').value).toBe(3);
    expect(s.warnings).toEqual(['grpc port: 127.0.0.2 holds 2 connections (GRPC_MAX_CONNECTIONS_PER_PEER=2); its new connections are closed']);
  });
});

describe('at the cap a newcomer is taken and the connection that costs most and serves least goes', () => {
  test('the one that has served nothing for longest, weighted by how many its peer holds', async () => {
    const s = await serve();
    const l = await s.listener({ maxConnections: 4 });
    // 127.0.0.2 holds three connections that served a second ago; 127.0.0.3 one that served 3 s ago.
    await l.connect('127.0.0.3');
    for (let i = 0; i < 3; i++) await l.connect('127.0.0.2');
    const t = performance.now();
    l.stubs[0]!.lastRequestAt = t;
    for (const stub of l.stubs.slice(1)) stub.lastRequestAt = t + 2000;
    l.stubs[2]!.lastRequestAt = t + 1500;
    s.advance(3000);
    // 3 x 1.5 s beats 1 x 3 s: the second of 127.0.0.2 goes.
    const fresh = await l.connect('127.0.0.4');
    await closedSoon(l.stubs[2]!.socket);
    expect(l.stubs[2]!.shedFor).toBe('evicted');
    expect(fresh.closed).toBe(false);
    expect(l.stubs).toHaveLength(5);
    expect(l.admission.size).toBe(4);
    expect(s.stats.counter('ratelimit.server.connections_evicted.__listener=grpc').value).toBe(1);
    expect(s.warnings[0]).toMatch(/^grpc port at GRPC_MAX_CONNECTIONS=4: closed a grpc connection of 127\.0\.0\.2 \(it holds 3, nothing served for 2 s\) to admit one of 127\.0\.0\.4/);
  });

  test('a newcomer whose peer holds its share of the cap or more displaces that peer\'s own worst, not another peer\'s', async () => {
    const s = await serve();
    const l = await s.listener({ maxConnections: 4 });
    await l.connect('127.0.0.3');
    for (let i = 0; i < 3; i++) await l.connect('127.0.0.2');
    const t = performance.now();
    // 127.0.0.3's one connection has served nothing for far longer: the worst of all (1 x 10 s > 3 x 1 s).
    l.stubs[0]!.lastRequestAt = t;
    for (const stub of l.stubs.slice(1)) stub.lastRequestAt = t + 9000;
    l.stubs[1]!.lastRequestAt = t + 8500;
    s.advance(10_000);
    // 127.0.0.2 holds 3 of a cap of 4 shared by 2 peers: its newcomer takes the place of its own worst.
    await l.connect('127.0.0.2');
    await closedSoon(l.stubs[1]!.socket);
    expect(l.stubs.map((x) => x.shedFor)).toEqual([undefined, 'evicted', undefined, undefined, undefined]);
    // A newcomer of a peer below its share still displaces the worst of all.
    await l.connect('127.0.0.5');
    await closedSoon(l.stubs[0]!.socket);
    expect(l.stubs[0]!.shedFor).toBe('evicted');
  });

  test('a peer over its share replaces its own at most a burst and then a few a second; past that its newcomers are refused at accept', async () => {
    const s = await serve();
    const l = await s.listener({ maxConnections: 4 });
    await l.connect('127.0.0.3');
    for (let i = 0; i < 3; i++) await l.connect('127.0.0.2');
    // The clock stands still: no token comes back while the burst is spent.
    s.freeze();
    for (let i = 0; i < OWN_REPLACEMENTS.burst; i++) {
      const c = await l.connect('127.0.0.2');
      expect([i, c.closed]).toEqual([i, false]);
    }
    expect(s.stats.counter('ratelimit.server.connections_evicted.__listener=grpc').value).toBe(OWN_REPLACEMENTS.burst);
    const refused = await l.connect('127.0.0.2');
    await closedSoon(refused);
    expect(l.stubs).toHaveLength(4 + OWN_REPLACEMENTS.burst);
    expect(l.admission.peerCount('127.0.0.2')).toBe(3);
    expect(s.stats.counter('ratelimit.server.connections_refused.__listener=grpc').value).toBe(1);
    expect(s.warnings).toContain(
      `grpc port at GRPC_MAX_CONNECTIONS=4: 127.0.0.2 holds 3 connections, more than its share, and replaced ${OWN_REPLACEMENTS.burst} of its own (at most ${OWN_REPLACEMENTS.perSecond} a second); its new connections are closed`,
    );
    // A peer within its share is not held to it: its newcomer displaces the worst of all.
    const other = await l.connect('127.0.0.4');
    expect(other.closed).toBe(false);
    // A token back: one more replacement.
    s.advance(1000 / OWN_REPLACEMENTS.perSecond + 1);
    const again = await l.connect('127.0.0.2');
    expect(again.closed).toBe(false);
    expect(l.admission.peerCount('127.0.0.2')).toBeLessThanOrEqual(3);
  });

  test('a busy client that keeps sending requests is not the one closed, whoever came first', async () => {
    const s = await serve();
    const l = await s.listener({ maxConnections: 10 });
    const good = await l.connect('127.0.0.1');
    for (let i = 0; i < 9; i++) await l.connect('127.0.0.2');
    // A stream of newcomers: the good connection serves between each.
    for (let i = 0; i < 30; i++) {
      l.stubs[0]!.lastRequestAt = performance.now();
      await l.connect(`127.0.0.${3 + (i % 5)}`);
    }
    expect(good.closed).toBe(false);
    expect(l.stubs[0]!.shedFor).toBeUndefined();
    expect(l.admission.size).toBe(10);
  });

  test('the process cap is shared by the listeners: a newcomer on one may close the worst of another', async () => {
    const s = await serve(3);
    const grpc = await s.listener({ listener: 'grpc' });
    const http = await s.listener({ listener: 'http', maxConnectionsSetting: 'HTTP_MAX_CONNECTIONS' });
    await http.connect('127.0.0.2');
    await http.connect('127.0.0.2');
    await grpc.connect('127.0.0.1');
    grpc.stubs[0]!.lastRequestAt = performance.now();
    expect(s.process.connections).toBe(3);
    await grpc.connect('127.0.0.5');
    await waitFor(() => http.stubs.some((x) => x.shedFor === 'evicted'), 'an HTTP connection closed for room');
    expect(s.process.connections).toBe(3);
    expect(grpc.stubs[0]!.shedFor).toBeUndefined();
    expect(s.stats.counter('ratelimit.server.connections_evicted.__listener=http').value).toBe(1);
    expect(s.warnings[0]).toMatch(/^grpc port at the process's 3 connections \(open-file limit\): closed a http connection of 127\.0\.0\.2/);
  });

  test('worstConnections ranks by peer count x time since served, skipping the excluded and released', () => {
    const fake = (peer: string, servedAt: number, count: number, released = false): Admission =>
      ({ peer, servedAt, released, listener: { peerCount: () => count } }) as unknown as Admission;
    const a = fake('a', 0, 1); // 1 x 1000
    const b = fake('b', 900, 20); // 20 x 100
    const c = fake('c', 500, 2); // 2 x 500
    const gone = fake('d', 0, 100, true);
    const order = worstConnections([a, b, c, gone], 1000, 2, c).map((x) => x.admission);
    expect(order).toEqual([b, a]);
    expect(worstConnections([a, b, c], 1000, 10).map((x) => x.admission)).toEqual([b, a, c]);
  });
});

describe('TLS handshakes under way (TLS_MAX_HANDSHAKES)', () => {
  test('past the budget the oldest under way is closed, counted and logged; a finished one no longer counts', async () => {
    const stats = new StatsStore();
    const warnings: string[] = [];
    const process = new ConnectionAdmission(Infinity, stats, { ...silentLogger, warn: (m: string) => warnings.push(m) }, undefined, 2);
    const admission = process.listener(LIMITS);
    const server = net.createServer((socket) => {
      const admitted = admission.accept(socket)!;
      admitted.connection = new Stub(socket);
      accepted.push(admitted);
    });
    const accepted: Admission[] = [];
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    opened.push(server);
    const port = (server.address() as AddressInfo).port;
    for (let i = 0; i < 4; i++) {
      const c = net.connect(port, '127.0.0.1');
      c.on('error', () => undefined);
      opened.push(c);
    }
    await waitFor(() => accepted.length === 4, 'four connections');
    admission.tlsBegun(accepted[0]!);
    admission.tlsBegun(accepted[1]!);
    expect(process.handshakesUnderWay).toBe(2);
    // The first finishes: it no longer counts, and a third fits.
    process.tlsEnded(accepted[0]!);
    admission.tlsBegun(accepted[2]!);
    expect(accepted[1]!.released).toBe(false);
    // A fourth is one too many: the oldest under way (the second) goes.
    admission.tlsBegun(accepted[3]!);
    expect(accepted[1]!.released).toBe(true);
    expect((accepted[1]!.connection as Stub).shedFor).toBe('tls_handshakes');
    expect([accepted[0], accepted[2], accepted[3]].map((a) => a!.released)).toEqual([false, false, false]);
    expect(process.handshakesUnderWay).toBe(2);
    expect(stats.counter('ratelimit.server.connections_evicted.__listener=grpc').value).toBe(1);
    expect(warnings[0]).toMatch(/^2 TLS handshakes under way \(TLS_MAX_HANDSHAKES\): closed the oldest, a grpc connection of 127\.0\.0\.1 begun \d+ ms ago/);
  });
});

describe('phase bounds, applied by the sweep', () => {
  test('handshake: a connection still in its handshake past the bound is closed; a finished one is not', async () => {
    const s = await serve();
    const l = await s.listener({ handshakeTimeoutMs: 1000 }, true);
    const stalled = await l.connect();
    const done = await l.connect();
    l.stubs[1]!.handshaking = false;
    l.stubs[1]!.lastRequestAt = performance.now();
    s.advance(900);
    l.admission.sweep();
    expect(l.stubs[0]!.shedFor).toBeUndefined();
    s.advance(200);
    l.admission.sweep();
    await closedSoon(stalled);
    expect(l.stubs[0]!.shedFor).toBe('handshake_timeout');
    expect(done.closed).toBe(false);
    expect(s.stats.counter('ratelimit.server.connections_timed_out.__listener=grpc.__phase=handshake').value).toBe(1);
  });

  test('first request and idle: closed gracefully once past each bound, not while a call is in flight, counted once', async () => {
    const s = await serve();
    const l = await s.listener({ firstRequestTimeoutMs: 1000, idleTimeoutMs: 5000 });
    await l.connect(); // never calls
    await l.connect(); // called, then idle
    await l.connect(); // a call in flight
    const [never, idle, busy] = l.stubs;
    idle!.lastRequestAt = performance.now();
    busy!.lastRequestAt = performance.now();
    busy!.callsInFlight = 1;
    s.advance(1100);
    l.admission.sweep();
    expect([never!.closed, idle!.closed, busy!.closed]).toEqual(['first_request_timeout', undefined, undefined]);
    s.advance(5000);
    l.admission.sweep();
    l.admission.sweep();
    expect([idle!.closed, busy!.closed]).toEqual(['max_idle', undefined]);
    expect(s.stats.counter('ratelimit.server.connections_timed_out.__listener=grpc.__phase=first_request').value).toBe(1);
    expect(s.stats.counter('ratelimit.server.connections_timed_out.__listener=grpc.__phase=idle').value).toBe(1);
  });

  test('the sweep stops with the last connection and starts again with the next', async () => {
    const s = await serve();
    const l = await s.listener({ idleTimeoutMs: 500 });
    const c = await l.connect();
    c.destroy();
    await waitFor(() => l.admission.size === 0, 'the connection released');
    l.admission.sweep(); // finds none: stops its timer
    await l.connect();
    l.stubs[1]!.lastRequestAt = performance.now();
    // The real sweep (every 50 ms for a 500 ms bound) closes it.
    await waitFor(() => l.stubs[1]!.closed === 'max_idle', 'the idle bound applied by the restarted sweep', 5000);
  });
});

describe('drain and forced close', () => {
  test('a drain ends every connection and resolves once they and the listener have closed', async () => {
    const s = await serve();
    const l = await s.listener({});
    const client = await l.connect();
    client.on('end', () => client.end());
    let drained = false;
    const drain = l.admission.drain(l.server, (c) => c.close('draining')).then(() => (drained = true));
    expect(l.stubs[0]!.closed).toBe('draining');
    expect(drained).toBe(false);
    await drain;
    await waitFor(() => l.admission.size === 0, 'the closed connection released');
  });

  test('a connection that arrives during a drain is refused; a forced close destroys what is left', async () => {
    const s = await serve();
    const l = await s.listener({});
    const first = await l.connect();
    const early = l.admission.drain(l.server, () => undefined);
    // The listener is closed now; a socket the server had already accepted still reaches accept.
    const late = new net.Socket();
    opened.push(late);
    expect(l.admission.accept(late)).toBeUndefined();
    expect(late.destroyed).toBe(true);
    l.admission.forceClose();
    await closedSoon(first);
    expect(l.stubs[0]!.shedFor).toBe('shutdown');
    await early;
  });
});
