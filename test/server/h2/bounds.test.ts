/**
 * What a client can make our HTTP/2 server hold, and for how long: unfinished request bodies (per
 * stream, per connection, per process), requests that never finish arriving, connections beyond
 * the cap, and a flood of calls on one connection while another waits. Each test watches what the
 * server lets through (windows it grants, frames it sends, bytes its budgets hold) and waits for
 * events; none measures time.
 */
import net from 'node:net';
import type { RateLimitRequest } from '../../../src/core/rls';
import { serverBudgets } from '../../../src/server/byte-budget';
import { ErrorCode, STREAM_WINDOW } from '../../../src/server/h2/frames';
import type { Decider } from '../../../src/server/http';
import { StatsStore } from '../../../src/stats/store';
import {
  closeRawClients,
  dataFrame,
  grpcMessage,
  grpcStatusOf,
  headersFrame,
  RawH2Client,
  rateLimitCall,
  rateLimitMessage,
  requestBlock,
  PREFACE,
  rstStreamFrame,
  settingsAckFrame,
  settingsFrame,
  windowUpdateFrame,
} from '../../support/h2-frames';
import { memoryRateLimitService } from '../../support/grpc-service';
import { expectServed, rateLimitClient, startSocketServer, stopSocketServers } from '../../support/h2-server';

afterEach(async () => {
  closeRawClients();
  await stopSocketServers();
});

const WINDOW = 65_535;
const MAX_FRAME = 16_384;

/** Sends what the windows allow of `bytes[from...]` on `streamId`, then a round trip (the updates that answer it are in). */
async function sendWithinWindows(client: RawH2Client, streamId: number, bytes: Buffer, from: number): Promise<number> {
  const n = client.sendWhatWindowsAllow(streamId, bytes, from);
  await client.roundTrip();
  return n;
}

/** A valid RateLimitRequest message of about `size` bytes: an unknown field (number 15) pads it. */
function paddedMessage(size: number): Buffer {
  const base = rateLimitMessage().subarray(5);
  const padLength = size - base.length - 5;
  const pad = Buffer.alloc(padLength, 0x61);
  const header = Buffer.from([0x7a, 0x80 | (padLength & 0x7f), 0x80 | ((padLength >> 7) & 0x7f), (padLength >> 14) & 0x7f]);
  return grpcMessage(Buffer.concat([base, header, pad]));
}

/** `bytes` as DATA frames of at most 16 KiB on `streamId`, the last one ending the stream. */
function framed(streamId: number, bytes: Buffer): Buffer[] {
  const frames: Buffer[] = [];
  for (let at = 0; at < bytes.length; at += MAX_FRAME) {
    const end = Math.min(bytes.length, at + MAX_FRAME);
    frames.push(dataFrame(streamId, bytes.subarray(at, end), end === bytes.length));
  }
  return frames;
}

describe('request bodies', () => {
  test("a stream's window opens only as far as the message it declares, and the whole message is answered", async () => {
    const server = await startSocketServer();
    const client = await RawH2Client.connect(server.port);
    const message = paddedMessage(200_000);
    const declared = message.length;
    client.send(headersFrame(1, requestBlock()));
    let at = 0;
    while (at < message.length) {
      const n = await sendWithinWindows(client, 1, message, at);
      expect(n).toBeGreaterThan(0);
      at += n;
    }
    // Exactly the message: the initial window and the updates add up to its length, no more.
    expect(client.serverStreamWindow()).toBe(STREAM_WINDOW);
    expect(STREAM_WINDOW + client.granted(1)).toBe(declared);
    client.send(dataFrame(1, Buffer.alloc(0), true));
    const answer = await client.answer(1);
    expect(grpcStatusOf(answer)).toBe('0');

    // A small message needs no update at all.
    client.send(rateLimitCall(3));
    expect(grpcStatusOf(await client.answer(3))).toBe('0');
    expect(client.granted(3)).toBe(0);
    expect(server.budgets.requests.held).toBe(0);
  });

  test('a client that sent under the default window before it took our SETTINGS gets the window back when it acknowledges them', async () => {
    const server = await startSocketServer();
    const client = await RawH2Client.connect(server.port, { handshake: false });
    const message = paddedMessage(100_000);
    // Preface, SETTINGS and a whole default window of the message before reading anything.
    client.send(PREFACE, settingsFrame(), headersFrame(1, requestBlock()));
    for (let at = 0; at < WINDOW; at += MAX_FRAME) client.send(dataFrame(1, message.subarray(at, Math.min(WINDOW, at + MAX_FRAME))));
    await client.waitForFrame((f) => f.type === 0x4 && (f.flags & 0x1) === 0, "the server's SETTINGS");
    const before = client.granted(1);
    // Now it applies them: its window on stream 1 shrinks by the difference, then it says so.
    client.send(settingsAckFrame());
    const shrunk = WINDOW + before - WINDOW - (WINDOW - STREAM_WINDOW);
    await client.waitFor(() => shrunk + client.granted(1) - before >= message.length - WINDOW, 'window for the rest of the message');
    for (let at = WINDOW; at < message.length; at += MAX_FRAME) client.send(dataFrame(1, message.subarray(at, at + MAX_FRAME), at + MAX_FRAME >= message.length));
    expect(grpcStatusOf(await client.answer(1))).toBe('0');
  });

  test('a connection holds at most 1 MiB and one window of unfinished bodies, however many streams it opens', async () => {
    const server = await startSocketServer();
    const client = await RawH2Client.connect(server.port);
    const message = paddedMessage(1 << 20);
    const streams = Array.from({ length: 32 }, (_, i) => 1 + 2 * i);
    for (const id of streams) client.send(headersFrame(id, requestBlock()));
    // Round robin over the streams until the server grants nothing more (at most 64 rounds).
    for (let round = 0; round < 64; round++) {
      let progress = 0;
      for (const id of streams) progress += await sendWithinWindows(client, id, message, client.sentWithinWindows(id));
      if (progress === 0) break;
    }
    const total = client.sentWithinWindows(0);
    // The connection's held bytes: REQUEST_MAX_BYTES + 5 (the listener's 1 MiB), then one window.
    expect(total).toBeLessThanOrEqual((1 << 20) + 5 + WINDOW);
    expect(total).toBeGreaterThan(1 << 20);
    expect(server.budgets.requests.held).toBeGreaterThan(0);
    // The streams end: every byte goes back to the process.
    client.send(...streams.map((id) => rstStreamFrame(id, ErrorCode.CANCEL)));
    await client.roundTrip();
    expect(server.budgets.requests.held).toBe(0);
  });

  test("the process budget: a stream's window opens only against storage the budget holds for it; a full budget still serves whole calls and answers a stream whose bytes it cannot hold RESOURCE_EXHAUSTED", async () => {
    const small = paddedMessage(30_000);
    const big = paddedMessage(28_000);
    // Bodies may hold 35,000 bytes (seven eighths): the first message, not the second beside it.
    const server = await startSocketServer({}, { budgets: serverBudgets(40_000) });
    const budget = server.budgets.requests;
    const good = rateLimitClient(server.address);
    await expectServed(good);
    const abuser = await RawH2Client.connect(server.port);
    // A message the budget can hold: its stream's window opens once its storage is taken.
    abuser.send(headersFrame(1, requestBlock()), dataFrame(1, small.subarray(0, 100)));
    await abuser.roundTrip();
    expect(budget.held).toBe(small.length);
    expect(abuser.granted(1)).toBe(small.length - STREAM_WINDOW);
    // A message the budget cannot hold now: no window beyond the first, only its first bytes kept.
    abuser.send(headersFrame(3, requestBlock()), dataFrame(3, big.subarray(0, 100)));
    await abuser.roundTrip();
    expect(abuser.granted(3)).toBe(0);
    expect(budget.held).toBe(small.length + 512);
    // Another stream's first bytes take exactly what bodies have left: the budget is spent.
    const fill = budget.bodyLimit - budget.held;
    abuser.send(headersFrame(5, requestBlock()), dataFrame(5, paddedMessage(30_000).subarray(0, fill)));
    await abuser.roundTrip();
    expect(budget.exhausted).toBe(true);
    // A whole call is still served, on its own connection and beside the held streams.
    await expectServed(good);
    abuser.send(rateLimitCall(7));
    expect(grpcStatusOf(await abuser.answer(7))).toBe('0');
    // A call whose bytes cannot be held is answered, its bytes dropped.
    abuser.send(headersFrame(9, requestBlock()), dataFrame(9, rateLimitMessage().subarray(0, 8)));
    const refused = await abuser.answer(9);
    expect(grpcStatusOf(refused)).toBe('8');
    expect(refused.headers?.['grpc-message']).toContain('REQUEST_MAX_BUFFERED_BYTES');
    // The first message arrives whole within its window and is answered; stream 5 is cancelled;
    // their storage goes back, and the waiting stream 3 gets its window at the next read.
    abuser.send(...framed(1, small.subarray(100)), rstStreamFrame(5, ErrorCode.CANCEL));
    expect(grpcStatusOf(await abuser.answer(1))).toBe('0');
    await abuser.roundTrip();
    expect(abuser.granted(3)).toBe(big.length - STREAM_WINDOW);
    abuser.send(...framed(3, big.subarray(100)));
    expect(grpcStatusOf(await abuser.answer(3))).toBe('0');
    await abuser.roundTrip();
    expect(budget.held).toBe(0);
    await expectServed(good);
    abuser.close();
  });

  test('GRPC_REQUEST_BODY_TIMEOUT: a request that stops arriving is answered DEADLINE_EXCEEDED whatever its deadline, its bytes released', async () => {
    const server = await startSocketServer({ requestBodyTimeoutMs: 200 });
    const client = await RawH2Client.connect(server.port);
    const message = rateLimitMessage();
    // Half a message, and a deadline of an hour.
    client.send(headersFrame(1, requestBlock([['grpc-timeout', '1H']])), dataFrame(1, message.subarray(0, 8)));
    // Headers alone.
    client.send(headersFrame(3, requestBlock()));
    // A whole call on the same connection is not affected.
    client.send(rateLimitCall(5));
    expect(grpcStatusOf(await client.answer(5))).toBe('0');
    for (const id of [1, 3]) {
      const answer = await client.answer(id);
      expect(grpcStatusOf(answer)).toBe('4');
      expect(answer.headers?.['grpc-message']).toContain('GRPC_REQUEST_BODY_TIMEOUT');
    }
    await client.roundTrip();
    expect(server.budgets.requests.held).toBe(0);
    expect(client.goaway()).toBeUndefined();
  });

  test('GRPC_MAX_CONNECTIONS: a connection beyond the cap is served and the one that served least is closed with GOAWAY', async () => {
    const server = await startSocketServer({ maxConnections: 2 });
    const first = await RawH2Client.connect(server.port);
    const second = await RawH2Client.connect(server.port);
    second.send(rateLimitCall(1));
    expect(grpcStatusOf(await second.answer(1))).toBe('0');
    const third = await RawH2Client.connect(server.port);
    third.send(rateLimitCall(1));
    expect(grpcStatusOf(await third.answer(1))).toBe('0');
    // The first had made no call: it goes, told why.
    await first.waitForClose();
    expect(first.goaway()).toMatchObject({ code: ErrorCode.NO_ERROR, debug: 'evicted' });
    second.send(rateLimitCall(3));
    expect(grpcStatusOf(await second.answer(3))).toBe('0');
    expect(server.stats.counter('ratelimit.server.connections_evicted.__listener=grpc').value).toBe(1);
  });

  test('GRPC_MAX_CONNECTIONS_PER_PEER: a third connection from one address is closed at once; one leaving makes room', async () => {
    const server = await startSocketServer({ maxConnectionsPerPeer: 2 });
    const first = await RawH2Client.connect(server.port);
    const second = await RawH2Client.connect(server.port);
    const third = await RawH2Client.connect(server.port, { handshake: false });
    await third.waitForClose();
    first.close();
    await waitForServerSockets(server.serverSockets, 1);
    const fourth = await RawH2Client.connect(server.port);
    fourth.send(rateLimitCall(1));
    expect(grpcStatusOf(await fourth.answer(1))).toBe('0');
    second.send(rateLimitCall(1));
    expect(grpcStatusOf(await second.answer(1))).toBe('0');
    expect(server.stats.counter('ratelimit.server.connections_refused.__listener=grpc').value).toBe(1);
  });
});

/** Resolves once at most `open` of the server's sockets are still open. */
async function waitForServerSockets(sockets: net.Socket[], open: number): Promise<void> {
  const live = sockets.filter((s) => !s.destroyed);
  if (live.length <= open) return;
  await Promise.race(live.map((s) => new Promise((resolve) => s.once('close', resolve))));
  await waitForServerSockets(sockets, open);
}

/**
 * One connection sending calls as fast as it can must not hold another's call back: the server
 * handles at most 16 KiB of a connection's frames per loop turn, then lets the others run. The
 * proof is the order of decisions: the good call, sent when the flood's first call is decided,
 * is decided after at most a few turns' worth of the flood, not after all of it.
 */
test('a flood of calls on one connection: another connection\'s call is decided within a few turns, not after the flood', async () => {
  const stats = new StatsStore();
  const inner = memoryRateLimitService(stats, 'domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n');
  const decided: string[] = [];
  let onFirstFlood: (() => void) | undefined;
  const service: Decider = {
    decideInto(request, span, caller, transport, ctx, answer) {
      const user = request.descriptors[0]?.entries[0]?.value ?? '';
      decided.push(user);
      if (user === 'flood' && onFirstFlood !== undefined) {
        const send = onFirstFlood;
        onFirstFlood = undefined;
        send();
      }
      inner.decideInto(request, span, caller, transport, ctx, answer);
    },
  };
  const server = await startSocketServer({}, { service });
  const flooder = await RawH2Client.connect(server.port);
  const good = await RawH2Client.connect(server.port);
  const CALLS = 20_000;
  const flood: Buffer[] = [];
  for (let i = 0; i < CALLS; i++) flood.push(headersFrame(1 + 2 * i, requestBlock()), dataFrame(1 + 2 * i, rateLimitMessage({ user: 'flood' }), true));
  // All the connection window the answers need.
  flooder.send(windowUpdateFrame(0, 2 ** 31 - 1 - WINDOW));
  onFirstFlood = () => good.send(headersFrame(1, requestBlock()), dataFrame(1, rateLimitMessage({ user: 'good' }), true));
  flooder.send(Buffer.concat(flood));
  expect(grpcStatusOf(await good.answer(1))).toBe('0');
  const position = decided.indexOf('good');
  // A turn holds about 130 of these calls; without turns the good call waits for all.
  expect(position).toBeGreaterThan(0);
  expect(position).toBeLessThan(CALLS / 4);
  await flooder.waitFor(() => (flooder.streams.get(2 * CALLS - 1)?.ended ?? false), 'the last flood answer', 20_000);
  expect(flooder.streams.get(2 * CALLS - 1)?.trailers?.['grpc-status']).toBe('0');
});
