/**
 * The known HTTP/2 abuses against our server (the socket gRPC listener, and H2Connection alone for
 * the handshake timeout): each is stopped without the server growing memory, and a well-behaved
 * connection opened alongside (a grpc-js client) is answered while the abuse goes on. All waits
 * are for events (a frame, a close, an answer); a PING round trip is how a test knows that nothing
 * more came (the server writes in order).
 */
import { unboundedAdmission } from '../../../src/server/admission';
import { PEER_BACKLOG_HIGH, serverBudgets } from '../../../src/server/byte-budget';
import { CONTROL_FRAMES, HEADER_WORK } from '../../../src/server/h2/budgets';
import { type StreamHandler, TURN_BYTES } from '../../../src/server/h2/connection';
import { ErrorCode, FrameType, Setting } from '../../../src/server/h2/frames';
import { encodeHeaderBlock } from '../../../src/server/h2/hpack';
import { RateLimitResponse, RateLimitResponse_Code } from '../../../generated/envoy/service/ratelimit/v3/rls';
import {
  closeRawClients,
  continuationFrame,
  dataFrame,
  frame,
  frameHeader,
  type Goaway,
  grpcStatusOf,
  headerBlockFrames,
  headersFrame,
  indexedField,
  literalWithIndexing,
  literalWithoutIndexing,
  pingFrame,
  PREFACE,
  RawH2Client,
  rateLimitCall,
  rateLimitMessage,
  requestBlock,
  rstStreamFrame,
  settingsFrame,
  windowUpdateFrame,
} from '../../support/h2-frames';
import { expectServed, rateLimitClient, startConnectionServer, startSocketServer, stopSocketServers } from '../../support/h2-server';

/** grpc-socket.ts: the largest header list, and so the largest header block. */
const MAX_HEADER_LIST_BYTES = 64 * 1024;

afterEach(async () => {
  closeRawClients();
  await stopSocketServers();
});

const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));
/** What one socket read hands the server (libuv reads 64 KiB). */
const ONE_READ = 64 * 1024;
/** The frames a connection handles in a loop turn, and one more frame: answered with as many bytes or fewer. */
const ONE_TURN = TURN_BYTES + 16 * 1024;

/**
 * The GOAWAY the server sent for everything before now, or undefined: a PING answered means the
 * server read it all and said nothing (so a missing defence fails at once, not after a timeout).
 */
async function goawayAfterAll(client: RawH2Client): Promise<Goaway | undefined> {
  try {
    await client.roundTrip();
  } catch {
    // Closed: the server ended the connection, after its GOAWAY.
  }
  return client.goaway();
}

test('rapid reset: streams opened and reset by the thousand end in GOAWAY ENHANCE_YOUR_CALM within the reset budget', async () => {
  const server = await startSocketServer();
  const good = rateLimitClient(server.address);
  await expectServed(good);
  const abuser = await RawH2Client.connect(server.port);
  const block = requestBlock();
  const started = performance.now();
  let streamId = 1;
  // At most 10000 streams; the budget (1000, then 33 a second) runs out long before.
  for (let batch = 0; batch < 50 && abuser.goaway() === undefined; batch++) {
    const frames: Buffer[] = [];
    for (let i = 0; i < 200; i++, streamId += 2) frames.push(headersFrame(streamId, block), rstStreamFrame(streamId, ErrorCode.CANCEL));
    abuser.send(Buffer.concat(frames));
    // The well-behaved connection is answered between the batches of the attack.
    await expectServed(good);
  }
  const goaway = await goawayAfterAll(abuser);
  const seconds = (performance.now() - started) / 1000;
  expect(goaway?.code).toBe(ErrorCode.ENHANCE_YOUR_CALM);
  // Bounded work: stream 2n - 1 carried the n-th reset, the one the budget refused. Each stream
  // is released by its RST_STREAM, so the abuser never holds more than one.
  const resets = (goaway!.lastStreamId + 1) / 2;
  expect(resets).toBeGreaterThan(1000);
  expect(resets).toBeLessThanOrEqual(1001 + Math.ceil(33 * seconds));
  await abuser.waitForClose();
  await expectServed(good);
  expect(server.stats.counter('ratelimit.server.budget_exceeded.__budget=resets.__listener=grpc').value).toBe(1);
});

test('rapid reset provoked by the server: malformed requests it must reset count against the same budget', async () => {
  const server = await startSocketServer();
  const good = rateLimitClient(server.address);
  const abuser = await RawH2Client.connect(server.port);
  // Upper-case names are malformed (RFC 9113 8.2.1): each stream is refused with RST_STREAM.
  const malformed = requestBlock([['X-Upper', 'v']]);
  let streamId = 1;
  for (let batch = 0; batch < 50 && abuser.goaway() === undefined; batch++) {
    const frames: Buffer[] = [];
    for (let i = 0; i < 200; i++, streamId += 2) frames.push(headersFrame(streamId, malformed, { endStream: true }));
    abuser.send(Buffer.concat(frames));
    await expectServed(good);
  }
  expect((await goawayAfterAll(abuser))?.code).toBe(ErrorCode.ENHANCE_YOUR_CALM);
  expect(abuser.streams.get(1)?.reset).toBe(ErrorCode.PROTOCOL_ERROR);
});

describe('CONTINUATION flood', () => {
  test('endless CONTINUATION frames without END_HEADERS: GOAWAY ENHANCE_YOUR_CALM once the block passes 64 KiB', async () => {
    const server = await startSocketServer();
    const good = rateLimitClient(server.address);
    const abuser = await RawH2Client.connect(server.port);
    abuser.send(headersFrame(1, requestBlock(), { endStream: true, endHeaders: false }));
    const filler = Buffer.alloc(16_384, 0x61);
    // Up to 4 MiB, and a good call every four frames (64 KiB).
    for (let i = 0; i < 256 && abuser.goaway() === undefined; i++) {
      abuser.send(continuationFrame(1, filler, false));
      if (i % 4 === 3) await expectServed(good);
    }
    // Were the block still open, this PING would interrupt it: PROTOCOL_ERROR, not ENHANCE_YOUR_CALM.
    abuser.send(pingFrame());
    const goaway = await abuser.waitForGoaway();
    expect(goaway.code).toBe(ErrorCode.ENHANCE_YOUR_CALM);
    expect(goaway.lastStreamId).toBe(0); // the stream never opened
    await expectServed(good);
  });

  /** A valid request block of exactly `size` octets: the request and one literal of padding. */
  function blockOfSize(size: number): Buffer {
    const base = requestBlock();
    for (let padding = size - base.length - 7; padding > 0; padding--) {
      const block = Buffer.concat([base, literalWithoutIndexing('x-pad', 'p'.repeat(padding))]);
      if (block.length === size) return block;
    }
    throw new Error(`no block of ${size} octets`);
  }

  test('the limit is exact: a 64 KiB block is decoded (answered 431, its list being larger); 64 KiB + 1 octet is ENHANCE_YOUR_CALM', async () => {
    const server = await startSocketServer();
    const atLimit = await RawH2Client.connect(server.port);
    atLimit.send(...headerBlockFrames(1, blockOfSize(MAX_HEADER_LIST_BYTES), true));
    const answer = await atLimit.answer(1);
    expect(answer.headers?.[':status']).toBe('431');
    expect(grpcStatusOf(answer)).toBe('8');
    await atLimit.roundTrip();
    expect(atLimit.goaway()).toBeUndefined();

    const overLimit = await RawH2Client.connect(server.port);
    overLimit.send(...headerBlockFrames(1, blockOfSize(MAX_HEADER_LIST_BYTES + 1), true));
    expect((await goawayAfterAll(overLimit))?.code).toBe(ErrorCode.ENHANCE_YOUR_CALM);
    await overLimit.waitForClose();
  });
});

describe.each([
  { kind: 'SETTINGS', flood: settingsFrame(), acks: (c: RawH2Client) => c.settingsAcks - 1 },
  { kind: 'PING', flood: pingFrame(), acks: (c: RawH2Client) => c.pingAcks },
])('$kind flood', ({ kind, flood, acks }) => {
  test(`from a client that reads: ${CONTROL_FRAMES.burst} (and ${CONTROL_FRAMES.perSecond} a second) are acknowledged, then GOAWAY ENHANCE_YOUR_CALM`, async () => {
    const server = await startSocketServer();
    const good = rateLimitClient(server.address);
    const abuser = await RawH2Client.connect(server.port);
    const started = performance.now();
    const batch = Buffer.concat(Array.from({ length: 1000 }, () => flood));
    for (let i = 0; i < 20 && abuser.goaway() === undefined; i++) {
      abuser.send(batch);
      await expectServed(good);
    }
    const goaway = await goawayAfterAll(abuser);
    const seconds = (performance.now() - started) / 1000;
    expect(goaway?.code).toBe(ErrorCode.ENHANCE_YOUR_CALM);
    expect(goaway?.debug).toBe('too many frames without requests');
    // The handshake spent two (SETTINGS and its ACK): the budget is exact, give or take the refill.
    expect(acks(abuser)).toBeGreaterThanOrEqual(CONTROL_FRAMES.burst - 2);
    expect(acks(abuser)).toBeLessThanOrEqual(CONTROL_FRAMES.burst + Math.ceil(CONTROL_FRAMES.perSecond * seconds));
    await expectServed(good);
    expect(kind).toBeDefined();
    expect(server.stats.counter('ratelimit.server.budget_exceeded.__budget=control_frames.__listener=grpc').value).toBe(1);
  });

  /**
   * A client that does not read: what the server buffers for it is measured on the server side of
   * its socket. Calls are mixed in (each earns the budget 10 frames), so that the bound reached is
   * the queue of unsent acknowledgements, not the budget: 1000, as nghttp2.
   */
  test('from a client that does not read: closed once 1000 acknowledgements wait unsent, at most one turn of answers past 64 KiB', async () => {
    const server = await startSocketServer();
    const good = rateLimitClient(server.address);
    await expectServed(good);
    const abuser = await RawH2Client.connect(server.port);
    const serverSide = server.serverSocketOf(abuser.socket);
    let serverClosed = false;
    serverSide.once('close', () => (serverClosed = true));
    // All the connection window it may ever need: answers never wait for flow control.
    abuser.send(windowUpdateFrame(0, 2 ** 31 - 1 - 65_535));
    abuser.socket.pause(); // never reads again
    let streamId = 1;
    let most = 0;
    for (let batch = 0; batch < 5000 && !serverClosed; batch++) {
      const frames: Buffer[] = [];
      for (let i = 0; i < 100; i++, streamId += 2) frames.push(rateLimitCall(streamId));
      for (let i = 0; i < 500; i++) frames.push(flood);
      abuser.send(Buffer.concat(frames));
      await turn();
      most = Math.max(most, serverSide.writableLength);
    }
    expect(serverClosed).toBe(true);
    // Below the point where it would stop reading the client, give or take one turn's answers.
    expect(most).toBeLessThanOrEqual(PEER_BACKLOG_HIGH + ONE_TURN);
    expect(server.budgets.answers.held).toBe(0);
    await expectServed(good);
    expect(server.stats.counter('ratelimit.server.budget_exceeded.__budget=unread_acks.__listener=grpc').value).toBe(1);
  });

  // The server gathers a turn's frames in a 16 KiB buffer that grows; 4000 frames in one write
  // make one turn answer more than that (a read holds up to 64 KiB).
  test('a burst of 4000 in one write, whose acknowledgements outgrow the output buffer in one turn, is acknowledged intact', async () => {
    const server = await startSocketServer();
    const client = await RawH2Client.connect(server.port);
    const before = client.bytesReceived;
    client.send(Buffer.concat(Array.from({ length: 4000 }, () => flood)));
    const expected = before + 4000 * flood.length;
    await client.waitFor(() => client.bytesReceived >= expected, `${4000 * flood.length} octets of acknowledgements`, 5000);
    expect(client.bytesReceived).toBe(expected);
    expect(acks(client)).toBe(4000);
    // Nothing but acknowledgements after the server's SETTINGS.
    expect(client.frames.map((f) => f.type)).toEqual([FrameType.SETTINGS]);
  });
});

/**
 * A 16 KiB SETTINGS frame holds 2730 entries; applying each INITIAL_WINDOW_SIZE to every open
 * stream would let a peer keep the server busy, so only a frame's last value is applied (once).
 * What a client can tell: the window after such a frame is the last value's.
 */
test('a SETTINGS frame packed with INITIAL_WINDOW_SIZE changes: the last one is the window', async () => {
  const server = await startSocketServer();
  const packed = (last: number) =>
    settingsFrame([...Array.from({ length: 2729 }, (_, i) => [Setting.INITIAL_WINDOW_SIZE, i % 2 === 0 ? 1_000_000 : 0] as const), [Setting.INITIAL_WINDOW_SIZE, last]]);
  const client = await RawH2Client.connect(server.port, { settings: [[Setting.INITIAL_WINDOW_SIZE, 0]] });
  client.send(rateLimitCall(1));
  await client.waitFor(() => client.streams.get(1)?.headers !== undefined, 'the answer\'s HEADERS');
  // Ends at 0: the answer's DATA still waits.
  client.send(packed(0));
  await client.roundTrip();
  expect(client.streams.get(1)!.data).toHaveLength(0);
  // Ends at 65535: the DATA and the trailers come.
  client.send(packed(65_535));
  await client.waitFor(() => client.streams.get(1)?.ended === true, 'the end of the answer');
  expect(client.streams.get(1)!.data.length).toBeGreaterThan(0);
});

test('a peer that never opens its window: answers wait after their HEADERS, streams beyond the cap are refused, WINDOW_UPDATE completes them', async () => {
  const server = await startSocketServer({ maxConcurrentStreams: 8 });
  const good = rateLimitClient(server.address);
  const abuser = await RawH2Client.connect(server.port, { settings: [[Setting.INITIAL_WINDOW_SIZE, 0]] });
  const admitted = [1, 3, 5, 7, 9, 11, 13, 15];
  const beyondCap = [17, 19, 21];
  abuser.send(...[...admitted, ...beyondCap].map((id) => rateLimitCall(id)));
  const all = [...admitted, ...beyondCap];
  await abuser.waitFor(
    () => all.every((id) => abuser.streams.get(id)?.headers !== undefined || abuser.streams.get(id)?.reset !== undefined),
    'HEADERS or RST_STREAM on every stream',
  );
  for (const id of beyondCap) expect(abuser.streams.get(id)?.reset).toBe(ErrorCode.REFUSED_STREAM);
  // Memory: a stream without window holds only its queued answer, and no more than
  // SETTINGS_MAX_CONCURRENT_STREAMS of them exist; a well-behaved connection is served meanwhile.
  await expectServed(good);
  await abuser.roundTrip();
  for (const id of admitted) {
    const s = abuser.streams.get(id)!;
    expect(s.headers?.[':status']).toBe('200');
    expect(s.data).toEqual([]);
    expect(s.ended).toBe(false);
  }
  expect(abuser.goaway()).toBeUndefined();

  // Window for each stream: the answers complete.
  abuser.send(...admitted.map((id) => windowUpdateFrame(id, 65_535)));
  for (const id of admitted) {
    const s = await abuser.answer(id);
    expect(grpcStatusOf(s)).toBe('0');
    const body = Buffer.concat(s.data);
    expect(RateLimitResponse.decode(body.subarray(5)).overallCode).toBe(RateLimitResponse_Code.OK);
  }
  // The streams are done: new ones are admitted, and with a window they are answered at once.
  abuser.send(settingsFrame([[Setting.INITIAL_WINDOW_SIZE, 65_535]]), rateLimitCall(23));
  expect(grpcStatusOf(await abuser.answer(23))).toBe('0');
});

test('HPACK bomb: one 4 KiB table entry referenced 60000 times is answered 431, and the connection goes on in step', async () => {
  const server = await startSocketServer();
  const good = rateLimitClient(server.address);
  const abuser = await RawH2Client.connect(server.port);
  const big = 'b'.repeat(4000);
  // Stream 1: a normal call that also puts one 4038-octet entry into the dynamic table.
  abuser.send(rateLimitCall(1, Buffer.concat([requestBlock(), literalWithIndexing('x-bomb', big)])));
  expect(grpcStatusOf(await abuser.answer(1))).toBe('0');

  // Stream 3: a 60 KB block (HEADERS and CONTINUATIONs) of references to it, 242 MB of header list.
  // Memory: the decoder keeps fields only up to the 64 KiB limit (hpack.test.ts checks the count).
  const bomb = Buffer.concat([requestBlock(), Buffer.alloc(60_000, 0xbe)]);
  abuser.send(...headerBlockFrames(3, bomb, false), dataFrame(3, rateLimitMessage(), true));
  const refused = await abuser.answer(3);
  expect(refused.headers?.[':status']).toBe('431');
  expect(grpcStatusOf(refused)).toBe('8');
  await expectServed(good);

  // The table stayed in step: a call that references the entry once is answered normally.
  abuser.send(rateLimitCall(5, Buffer.concat([requestBlock(), indexedField(62)])));
  const after = await abuser.answer(5);
  expect(after.headers?.[':status']).toBe('200');
  expect(grpcStatusOf(after)).toBe('0');
  expect(abuser.goaway()).toBeUndefined();
});

/**
 * Empty frames carry nothing and cost the server a frame each: they come out of the budget of
 * frames without requests (the handshake spent 2 of it, the stream earned 10, and the PING of a
 * round trip takes one).
 */
/**
 * Frames that carry no request and need no acknowledgement: each costs the server a frame's work
 * and nothing else, so the same budget ends a flood of them.
 */
test(`HPACK bomb flood: the budget of decoding work (${HEADER_WORK.burst} representations, then ${HEADER_WORK.perSecond} a second) ends the connection`, async () => {
  const server = await startSocketServer();
  const good = rateLimitClient(server.address);
  const abuser = await RawH2Client.connect(server.port);
  abuser.send(rateLimitCall(1, Buffer.concat([requestBlock(), literalWithIndexing('x-bomb', 'b'.repeat(4000))])));
  expect(grpcStatusOf(await abuser.answer(1))).toBe('0');
  const references = 60_000;
  const work = references + 6 - HEADER_WORK.freePerBlock; // the request's own 6 fields too
  const started = performance.now();
  let streamId = 3;
  for (let i = 0; i < 20 && abuser.goaway() === undefined; i++, streamId += 2) {
    abuser.send(...headerBlockFrames(streamId, Buffer.concat([requestBlock(), Buffer.alloc(references, 0xbe)]), true));
    await expectServed(good);
  }
  const goaway = await goawayAfterAll(abuser);
  const seconds = (performance.now() - started) / 1000;
  expect(goaway?.code).toBe(ErrorCode.ENHANCE_YOUR_CALM);
  expect(goaway?.debug).toBe('too much header decoding work');
  // Each bomb up to the last stream GOAWAY names was decoded and answered 431 (the next one was not).
  const answered = [...abuser.streams.values()].filter((s) => s.headers?.[':status'] === '431').length;
  expect(answered).toBe((goaway!.lastStreamId - 1) / 2);
  expect(answered).toBeGreaterThanOrEqual(Math.floor(HEADER_WORK.burst / work));
  expect(answered).toBeLessThanOrEqual(Math.floor((HEADER_WORK.burst + HEADER_WORK.perSecond * seconds) / work));
  await expectServed(good);
  expect(server.stats.counter('ratelimit.server.budget_exceeded.__budget=header_work.__listener=grpc').value).toBe(1);
});

describe.each([
  { kind: 'PRIORITY', flood: frame(FrameType.PRIORITY, 0, 3, Buffer.from([0, 0, 0, 1, 16])) },
  { kind: 'WINDOW_UPDATE of 1 on the connection', flood: windowUpdateFrame(0, 1) },
  { kind: 'an unknown frame type', flood: frame(0x42, 0, 0, Buffer.alloc(4)) },
])('$kind flood', ({ flood }) => {
  test(`GOAWAY ENHANCE_YOUR_CALM once past the budget (${CONTROL_FRAMES.burst}, then ${CONTROL_FRAMES.perSecond} a second); others are served meanwhile`, async () => {
    const server = await startSocketServer();
    const good = rateLimitClient(server.address);
    const abuser = await RawH2Client.connect(server.port);
    const batch = Buffer.concat(Array.from({ length: 1000 }, () => flood));
    // Just below the budget (the handshake spent 2, the round trip's PING takes 1): still served.
    abuser.send(...Array.from({ length: 4 }, () => batch), Buffer.concat(Array.from({ length: CONTROL_FRAMES.burst - 4000 - 3 }, () => flood)));
    await abuser.roundTrip();
    expect(abuser.goaway()).toBeUndefined();
    for (let i = 0; i < 20 && abuser.goaway() === undefined; i++) {
      abuser.send(batch);
      await expectServed(good);
    }
    const goaway = await goawayAfterAll(abuser);
    expect(goaway?.code).toBe(ErrorCode.ENHANCE_YOUR_CALM);
    expect(goaway?.debug).toBe('too many frames without requests');
    await expectServed(good);
  });
});

/**
 * A connection the server ends for abuse must go: its socket is destroyed within a second even
 * when the client neither reads nor closes (else it would hold a place under GRPC_MAX_CONNECTIONS
 * for ever), and what the client goes on sending is not read.
 */
test('a connection ended for abuse is closed within a second, however the client behaves, and no longer read', async () => {
  const server = await startSocketServer();
  const abuser = await RawH2Client.connect(server.port);
  const serverSide = server.serverSocketOf(abuser.socket);
  const closed = new Promise<void>((resolve) => serverSide.once('close', () => resolve()));
  // Most of the budget first, so that the end comes early in a turn of what follows.
  abuser.send(Buffer.concat(Array.from({ length: CONTROL_FRAMES.burst - 500 }, () => pingFrame())));
  await abuser.roundTrip();
  abuser.socket.pause(); // reads nothing, so it never sees the FIN and never closes its side
  const flood = Buffer.concat(Array.from({ length: 3 * CONTROL_FRAMES.burst }, () => pingFrame()));
  const before = serverSide.bytesRead;
  abuser.send(flood, flood);
  await closed;
  // The rest of the budget, the read under way and at most one read Node had buffered; not the flood.
  expect(serverSide.bytesRead - before).toBeLessThanOrEqual(3 * ONE_READ);
  expect(serverSide.bytesRead - before).toBeLessThan(flood.length);
  expect(server.budgets.requests.held).toBe(0);
});

describe('empty frame flood', () => {
  const allowed = CONTROL_FRAMES.burst - 2;

  test('empty DATA frames: the budget is tolerated, far more is GOAWAY ENHANCE_YOUR_CALM', async () => {
    const server = await startSocketServer();
    const good = rateLimitClient(server.address);
    const abuser = await RawH2Client.connect(server.port);
    abuser.send(headersFrame(1, requestBlock()));
    const empties = (n: number): Buffer => Buffer.concat(Array.from({ length: n }, () => dataFrame(1, Buffer.alloc(0))));
    abuser.send(empties(allowed - 1));
    await abuser.roundTrip();
    expect(abuser.goaway()).toBeUndefined();
    await expectServed(good);
    // No refill in a test's time covers this many.
    abuser.send(empties(4 * CONTROL_FRAMES.burst));
    expect((await goawayAfterAll(abuser))?.code).toBe(ErrorCode.ENHANCE_YOUR_CALM);
    await abuser.waitForClose();
    await expectServed(good);
  });

  test('empty CONTINUATION frames: the budget is tolerated, far more is GOAWAY ENHANCE_YOUR_CALM', async () => {
    const server = await startSocketServer();
    const good = rateLimitClient(server.address);
    const empties = (n: number): Buffer => Buffer.concat(Array.from({ length: n }, () => continuationFrame(1, Buffer.alloc(0), false)));

    const tolerated = await RawH2Client.connect(server.port);
    tolerated.send(headersFrame(1, requestBlock(), { endStream: true, endHeaders: false }), empties(allowed), continuationFrame(1, Buffer.alloc(0), true));
    // The request (no message) is answered: the connection went through the empty frames.
    expect(grpcStatusOf(await tolerated.answer(1))).toBe('12');
    expect(tolerated.goaway()).toBeUndefined();

    const flooding = await RawH2Client.connect(server.port);
    flooding.send(headersFrame(1, requestBlock(), { endStream: true, endHeaders: false }), empties(4 * CONTROL_FRAMES.burst));
    // Were the block still open, the PING would interrupt it: PROTOCOL_ERROR.
    expect((await goawayAfterAll(flooding))?.code).toBe(ErrorCode.ENHANCE_YOUR_CALM);
    await expectServed(good);
  });
});

test('a frame above 16384 octets: GOAWAY FRAME_SIZE_ERROR as soon as its header arrives, its payload never buffered', async () => {
  const server = await startSocketServer();
  const good = rateLimitClient(server.address);

  // A header announcing 16 MiB, and no payload: the server must not wait for it.
  const announced = await RawH2Client.connect(server.port);
  announced.send(frameHeader(2 ** 24 - 1, FrameType.DATA, 0, 1));
  expect((await announced.waitForGoaway(5000)).code).toBe(ErrorCode.FRAME_SIZE_ERROR);
  await announced.waitForClose();

  // One octet over, payload included (an unknown type, which is otherwise ignored), then a PING.
  const oneOver = await RawH2Client.connect(server.port);
  oneOver.send(frame(0xfa, 0, 0, Buffer.alloc(16_385)), pingFrame());
  const first = await oneOver.waitForFrame((f) => f.type === FrameType.GOAWAY || oneOver.pingAcks > 0, 'GOAWAY or a PING ACK');
  expect(first.type).toBe(FrameType.GOAWAY);
  expect(oneOver.goawayCode()).toBe(ErrorCode.FRAME_SIZE_ERROR);

  // The maximum itself is fine.
  const atMax = await RawH2Client.connect(server.port);
  atMax.send(frame(0xfa, 0, 0, Buffer.alloc(16_384)));
  await atMax.roundTrip();
  expect(atMax.goaway()).toBeUndefined();
  await expectServed(good);
});

describe('connection preface', () => {
  const wrongLastOctet = Buffer.from(PREFACE);
  wrongLastOctet[wrongLastOctet.length - 1] = 0x0b;

  test.each([
    { what: 'an HTTP/1.1 request', bytes: Buffer.from('GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n', 'latin1') },
    { what: 'a preface wrong in its last octet', bytes: wrongLastOctet },
    { what: 'a TLS ClientHello', bytes: Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03]) },
  ])('$what: GOAWAY PROTOCOL_ERROR and the socket closed', async ({ bytes }) => {
    const server = await startSocketServer();
    const client = await RawH2Client.connect(server.port, { handshake: false });
    client.send(bytes);
    expect((await client.waitForGoaway(5000)).code).toBe(ErrorCode.PROTOCOL_ERROR);
    await client.waitForClose();
    await expectServed(rateLimitClient(server.address));
  });

  test('a first frame other than SETTINGS: GOAWAY PROTOCOL_ERROR', async () => {
    const server = await startSocketServer();
    const client = await RawH2Client.connect(server.port, { handshake: false });
    client.send(PREFACE, pingFrame());
    expect((await goawayAfterAll(client))?.code).toBe(ErrorCode.PROTOCOL_ERROR);
  });

  test('a valid preface arriving one octet at a time is accepted', async () => {
    const server = await startSocketServer();
    const client = await RawH2Client.connect(server.port, { handshake: false });
    for (const octet of PREFACE) {
      client.send(Buffer.from([octet]));
      await turn();
    }
    client.send(settingsFrame(), rateLimitCall(1));
    expect(grpcStatusOf(await client.answer(1))).toBe('0');
  });
});

describe('handshake timeout (H2Connection on a plain net.Server, through admission)', () => {
  const HANDSHAKE_TIMEOUT_MS = 200;
  const OK_HEADERS = encodeHeaderBlock([[':status', '200']]);
  const OK_TRAILERS = encodeHeaderBlock([['grpc-status', '0']]);
  /** Answers every request once it has ended. */
  const handler: StreamHandler = {
    open: (stream) => ({
      data: () => undefined,
      ended: () => stream.answer(OK_HEADERS, Buffer.from('pong'), OK_TRAILERS),
      abort: () => undefined,
      closed: () => undefined,
    }),
  };
  test('a connection without preface and SETTINGS in time is closed; one that completed them is not', async () => {
    const admission = unboundedAdmission({ listener: 'grpc', handshakeTimeoutMs: HANDSHAKE_TIMEOUT_MS });
    const port = await startConnectionServer(handler, {
      options: { maxHeaderListBytes: MAX_HEADER_LIST_BYTES, budgets: serverBudgets(32 << 20) },
      admit: (socket) => admission.accept(socket),
    });

    // Opened first, so its handshake bound passes before the others'.
    const completed = await RawH2Client.connect(port);
    const silent = await RawH2Client.connect(port, { handshake: false });
    const prefaceOnly = await RawH2Client.connect(port, { handshake: false });
    prefaceOnly.send(PREFACE);
    const started = performance.now();
    await Promise.all([silent.waitForClose(5000), prefaceOnly.waitForClose(5000)]);
    // Closed by the timer, not at once (a margin for the connect that preceded `started`).
    expect(performance.now() - started).toBeGreaterThanOrEqual(HANDSHAKE_TIMEOUT_MS - 50);

    // The completed connection outlived its own timer and is served.
    await completed.roundTrip();
    completed.send(rateLimitCall(1));
    const answer = await completed.answer(1);
    expect(Buffer.concat(answer.data).toString()).toBe('pong');
    expect(grpcStatusOf(answer)).toBe('0');
  });
});
