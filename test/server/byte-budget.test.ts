/**
 * The process's byte budgets (src/server/byte-budget.ts) and the request bytes a server holds
 * (src/server/held-body.ts): ByteBudget's arithmetic and the share bodies may take; HeldBody's storage charged exactly (a lent
 * view never, owned storage always, given back whole); and PeerBacklog over real loopback sockets
 * whose client does not read: its unsent bytes are counted against the budget, given back on
 * drain and on close, refused when the budget cannot hold them, and a client that takes nothing
 * is closed after its period. Every wait is for an event (a connection, a catch-up, 'close').
 */
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { ANSWERS_MAX_BYTES, ByteBudget, PeerBacklog, serverBudgets, STALLED_PEER_MS } from '../../src/server/byte-budget';
import { HeldBody } from '../../src/server/held-body';
import { int, prng } from '../support/prng';

/** Longest any awaited event may take: far above what each needs, below Jest's test timeout. */
const SAFETY_MS = 10_000;

describe('ByteBudget', () => {
  test('takes up to its limit exactly, takes nothing past it, and gives back', () => {
    const budget = new ByteBudget(100);
    expect(budget.tryTake(60)).toBe(true);
    expect(budget.tryTake(41)).toBe(false);
    expect(budget.held).toBe(60);
    expect(budget.exhausted).toBe(false);
    expect(budget.tryTake(40)).toBe(true);
    expect(budget.held).toBe(100);
    expect(budget.exhausted).toBe(true);
    expect(budget.tryTake(1)).toBe(false);
    budget.give(70);
    expect(budget.held).toBe(30);
    expect(budget.exhausted).toBe(false);
  });

  test('request bodies take at most seven eighths; the last eighth stays for bytes any connection must hold (a frame cut by a read)', () => {
    const budget = new ByteBudget(800);
    expect(budget.bodyLimit).toBe(700);
    expect(budget.tryTakeForBody(701)).toBe(false);
    expect(budget.tryTakeForBody(700)).toBe(true);
    // Bodies are spent: exhausted, though 100 bytes remain for the rest.
    expect(budget.exhausted).toBe(true);
    expect(budget.tryTakeForBody(1)).toBe(false);
    expect(budget.tryTake(100)).toBe(true);
    expect(budget.tryTake(1)).toBe(false);
    budget.give(800);
    expect(budget.held).toBe(0);
  });

  test('serverBudgets: one budget for requests and one for answers (32 MiB unless told)', () => {
    const budgets = serverBudgets(4096);
    expect([budgets.requests.limit, budgets.answers.limit]).toEqual([4096, ANSWERS_MAX_BYTES]);
    expect(ANSWERS_MAX_BYTES).toBe(32 << 20);
    budgets.requests.tryTake(10);
    expect(budgets.answers.held).toBe(0);
    expect(serverBudgets(1, 2).answers.limit).toBe(2);
  });
});

describe('HeldBody', () => {
  test('received into an empty body, bytes are a lent view: not charged, shows the lender\'s bytes, and free after lend gives nothing back', () => {
    const budget = new ByteBudget(1000);
    const body = new HeldBody(budget);
    const read = Buffer.from('..hello..');
    body.receive(read, 2, 7, 4096);
    expect(budget.held).toBe(0);
    expect(body.bytes().toString()).toBe('hello');
    // A view: the socket read's memory, not a copy.
    read[2] = 0x48;
    expect(body.bytes().toString()).toBe('Hello');
    body.free();
    expect(budget.held).toBe(0);
    expect(body.length).toBe(0);
  });

  test('keep copies a lent view into owned storage, charged (at least 512 bytes, at most the hint), and free gives it back', () => {
    const budget = new ByteBudget(1000);
    const body = new HeldBody(budget);
    const read = Buffer.from('..hello..');
    body.receive(read, 2, 7, 4096);
    expect(body.keep(4096)).toBe(true);
    expect(budget.held).toBe(512);
    read.fill(0);
    expect(body.bytes().toString()).toBe('hello');
    body.free();
    expect(budget.held).toBe(0);
    body.receive(read, 0, 5, 5);
    expect(body.keep(5)).toBe(true);
    expect(budget.held).toBe(5);
    body.free();
    expect(budget.held).toBe(0);
  });

  test('keep that the budget cannot hold is refused, taking nothing; the view stays lent', () => {
    const budget = new ByteBudget(100);
    const body = new HeldBody(budget);
    body.receive(Buffer.from('hello'), 0, 5, 4096);
    expect(body.keep(4096)).toBe(false);
    expect(budget.held).toBe(0);
    expect(body.bytes().toString()).toBe('hello');
    body.free();
    expect(budget.held).toBe(0);
  });

  test('append grows its storage by doubling up to the hint, charging exactly what it allocates; a refused append changes nothing', () => {
    const budget = new ByteBudget(2000);
    const body = new HeldBody(budget);
    expect(body.append(Buffer.alloc(100, 'a'), 0, 100, 1500)).toBe(true);
    expect(budget.held).toBe(512);
    expect(body.append(Buffer.alloc(500, 'b'), 0, 500, 1500)).toBe(true);
    expect(budget.held).toBe(1024);
    // Past the hint: exactly what is needed.
    expect(body.append(Buffer.alloc(1000, 'c'), 0, 1000, 1500)).toBe(true);
    expect(budget.held).toBe(1600);
    expect(body.append(Buffer.alloc(500, 'd'), 0, 500, 1500)).toBe(false);
    expect(budget.held).toBe(1600);
    expect(body.bytes().toString()).toBe('a'.repeat(100) + 'b'.repeat(500) + 'c'.repeat(1000));
    body.free();
    expect(budget.held).toBe(0);
  });

  test('ensureRoom takes exactly the room promised from the budget (no doubling); bytes received then land in it, charging nothing more', () => {
    const budget = new ByteBudget(10_000);
    const body = new HeldBody(budget);
    expect(body.ensureRoom(3000)).toBe(true);
    expect(budget.held).toBe(3000);
    // Storage owned: what arrives is copied into it, never lent.
    const read = Buffer.alloc(1000, 'x');
    expect(body.receive(read, 0, 1000, 3000)).toBe(true);
    read.fill(0);
    expect(body.receive(Buffer.alloc(2000, 'y'), 0, 2000, 3000)).toBe(true);
    expect(budget.held).toBe(3000);
    expect(body.bytes().toString()).toBe('x'.repeat(1000) + 'y'.repeat(2000));
    // More than the budget can hold: refused, nothing changes.
    expect(body.ensureRoom(20_000)).toBe(false);
    expect(budget.held).toBe(3000);
    expect(body.length).toBe(3000);
    body.free();
    expect(budget.held).toBe(0);
  });

  test('take hands out the first bytes; emptied, the storage goes back and the view taken stays valid', () => {
    const budget = new ByteBudget(1000);
    const body = new HeldBody(budget);
    body.append(Buffer.from('abcdef'), 0, 6, 1000);
    expect(body.take(2).toString()).toBe('ab');
    expect(budget.held).toBe(512);
    const rest = body.take(4);
    expect(budget.held).toBe(0);
    expect(rest.toString()).toBe('cdef');
    expect(body.length).toBe(0);
  });

  test('seeded random receive, keep, append, ensureRoom, take and free on bodies sharing a budget: the bytes are right, a lent body is never charged, an owned one covers its bytes, and each gives back exactly what it took', () => {
    const rng = prng(0xb0d1);
    const budget = new ByteBudget(6000);
    const HINT = 3000;
    const bodies = Array.from({ length: 3 }, () => ({ body: new HeldBody(budget), model: '', lent: false, charged: 0 }));
    const text = (n: number): string => Array.from({ length: n }, () => String.fromCharCode(97 + int(rng, 26))).join('');
    for (let step = 0; step < 2000; step++) {
      const b = bodies[int(rng, bodies.length)]!;
      const before = budget.held;
      const op = int(rng, 6);
      if (op === 0 && b.model === '') {
        const s = text(1 + int(rng, 700));
        const read = Buffer.from(`..${s}..`);
        // Lent when the body owns no storage (none promised by ensureRoom); else copied into it.
        const owned = b.charged > 0;
        if (b.body.receive(read, 2, 2 + s.length, HINT)) {
          b.model = s;
          b.lent = !owned;
        }
      } else if (op === 1) {
        if (b.body.keep(HINT)) b.lent = false;
      } else if (op === 2) {
        const s = text(1 + int(rng, 700));
        if (b.body.append(Buffer.from(s), 0, s.length, HINT)) {
          b.model += s;
          b.lent = false;
        }
      } else if (op === 3 && b.model !== '') {
        const n = 1 + int(rng, b.model.length);
        expect(b.body.take(n).toString()).toBe(b.model.slice(0, n));
        b.model = b.model.slice(n);
        if (b.model === '') b.lent = false;
      } else if (op === 5) {
        if (b.body.ensureRoom(b.model.length + int(rng, 1500))) b.lent = false;
      } else if (op === 4) {
        b.body.free();
        b.model = '';
        b.lent = false;
        // Everything it was charged comes back.
        expect(before - budget.held).toBe(b.charged);
      }
      b.charged += budget.held - before;
      expect(b.body.bytes().toString()).toBe(b.model);
      expect(b.body.length).toBe(b.model.length);
      if (b.lent) expect(b.charged).toBe(0);
      else expect(b.charged).toBeGreaterThanOrEqual(b.model.length);
      expect(budget.held).toBe(bodies.reduce((sum, x) => sum + x.charged, 0));
      expect(budget.held).toBeLessThanOrEqual(budget.limit);
    }
    for (const b of bodies) b.body.free();
    expect(budget.held).toBe(0);
  });
});

// ---- PeerBacklog over loopback ----

const servers: net.Server[] = [];
const sockets: net.Socket[] = [];

afterEach(async () => {
  for (const s of sockets.splice(0)) s.destroy();
  await Promise.all(servers.splice(0).map((s) => new Promise<void>((resolve) => s.close(() => resolve()))));
});

/** A connected pair: the server's side, and a client that reads nothing until told. */
async function pair(): Promise<{ server: net.Socket; client: net.Socket }> {
  const srv = net.createServer();
  servers.push(srv);
  const accepted = new Promise<net.Socket>((resolve) => srv.once('connection', resolve));
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const client = net.connect((srv.address() as AddressInfo).port, '127.0.0.1');
  // Not flowing: it reads nothing until resumed.
  client.pause();
  client.on('error', () => {});
  sockets.push(client);
  const server = await accepted;
  server.on('error', () => {});
  sockets.push(server);
  return { server, client };
}

/**
 * Writes `chunk` until the kernel's buffers are full and some stays unsent, telling the backlog
 * after each write as a connection does; returns whether the backlog accepted every write.
 */
function fill(socket: net.Socket, backlog: PeerBacklog, chunk = Buffer.alloc(64 * 1024, 'x')): boolean {
  for (let written = 0; written < 256 << 20; written += chunk.length) {
    if (!backlog.write(chunk)) return false;
    if (socket.writableLength > 0) return true;
  }
  throw new Error('the kernel took 256 MiB from a client that does not read');
}

/** Resolves on the socket's next `event`, failing after SAFETY_MS. */
function next(socket: net.Socket, event: 'close', what: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`timed out after ${SAFETY_MS} ms waiting for ${what}`)), SAFETY_MS);
    socket.once(event, () => {
      clearTimeout(timer);
      resolve();
    });
  });
}

describe('PeerBacklog', () => {
  test('the period without progress after which a client is closed is 30 s', () => {
    expect(STALLED_PEER_MS).toBe(30_000);
  });

  test('unsent bytes are counted against the budget while the client is behind, and given back when it takes them', async () => {
    const budget = new ByteBudget(64 << 20);
    const { server, client } = await pair();
    let settled!: () => void;
    const caughtUp = new Promise<void>((resolve) => (settled = resolve));
    const backlog = new PeerBacklog(server, budget, () => settled());
    expect(fill(server, backlog)).toBe(true);
    expect(backlog.behind).toBe(true);
    expect(budget.held).toBe(server.writableLength);
    expect(budget.held).toBeGreaterThan(0);
    client.resume();
    await caughtUp;
    expect(server.writableLength).toBe(0);
    expect(backlog.behind).toBe(false);
    expect(budget.held).toBe(0);
    expect(server.destroyed).toBe(false);
  });

  test('the bytes are given back when the connection closes', async () => {
    const budget = new ByteBudget(64 << 20);
    const { server, client } = await pair();
    const backlog = new PeerBacklog(server, budget);
    fill(server, backlog);
    expect(budget.held).toBeGreaterThan(0);
    const closed = next(server, 'close', 'the server side to close');
    client.destroy();
    await closed;
    expect(budget.held).toBe(0);
  });

  test('write() is false, taking nothing, when the budget cannot hold the backlog', async () => {
    const budget = new ByteBudget(256 * 1024);
    const { server } = await pair();
    const backlog = new PeerBacklog(server, budget);
    expect(fill(server, backlog)).toBe(true);
    const held = budget.held;
    expect(held).toBe(server.writableLength);
    expect(backlog.write(Buffer.alloc(512 * 1024, 'y'))).toBe(false);
    expect(budget.held).toBe(held);
    // The caller closes the connection; the budget gets the rest back.
    const closed = next(server, 'close', 'the server side to close');
    server.destroy();
    await closed;
    expect(budget.held).toBe(0);
  });

  test('a client that takes nothing for the period is closed, not before, and the budget gets its bytes back', async () => {
    const STALLED_MS = 200;
    const budget = new ByteBudget(64 << 20);
    const { server } = await pair();
    const backlog = new PeerBacklog(server, budget, () => {}, STALLED_MS);
    const closed = next(server, 'close', 'the stalled client to be closed');
    const t0 = Date.now();
    fill(server, backlog);
    expect(budget.held).toBeGreaterThan(0);
    await closed;
    expect(Date.now() - t0).toBeGreaterThanOrEqual(STALLED_MS - 20);
    expect(budget.held).toBe(0);
  });
});
