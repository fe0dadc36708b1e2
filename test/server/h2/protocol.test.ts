/**
 * The rules of RFC 9113 a client can break and our HTTP/2 server must answer as nghttp2 and Go do:
 * header field validity (8.2.1, 8.2.2, 8.3), stream identifiers (5.1.1) and states (5.1), a stream
 * depending on itself (5.3.1), and the acknowledgement of our own PING (6.7). Malformed requests
 * are stream errors (RST_STREAM PROTOCOL_ERROR) and the connection goes on; a stream id that goes
 * back is a connection error.
 */
import type { StreamHandler } from '../../../src/server/h2/connection';
import { ErrorCode, Flag, FrameType } from '../../../src/server/h2/frames';
import { encodeHeaderBlock } from '../../../src/server/h2/hpack';
import {
  closeRawClients,
  dataFrame,
  frame,
  grpcStatusOf,
  headersFrame,
  pingFrame,
  RawH2Client,
  rateLimitCall,
  rateLimitMessage,
  requestBlock,
  SHOULD_RATE_LIMIT,
} from '../../support/h2-frames';
import { startConnectionServer, startSocketServer, stopSocketServers } from '../../support/h2-server';

afterEach(async () => {
  closeRawClients();
  await stopSocketServers();
});

const PSEUDO: Array<[string, string]> = [
  [':method', 'POST'],
  [':scheme', 'http'],
  [':path', SHOULD_RATE_LIMIT],
  [':authority', '127.0.0.1'],
];

describe('header field validity (RFC 9113 8.2, 8.3): a malformed request is reset with PROTOCOL_ERROR, the connection goes on', () => {
  const cases: Array<[string, Array<[string, string]>]> = [
    ['a name with a space', [...PSEUDO, ['x y', 'v']]],
    ['a name with a character outside the token set', [...PSEUDO, ['x(y)', 'v']]],
    ['a name with a colon inside', [...PSEUDO, ['x:y', 'v']]],
    ['an upper-case name', [...PSEUDO, ['X-Upper', 'v']]],
    ['a name with a non-ASCII octet', [...PSEUDO, ['x\u00e9', 'v']]],
    ['an empty name', [...PSEUDO, ['', 'v']]],
    ['a value with NUL', [...PSEUDO, ['x-a', 'a\u0000b']]],
    ['a value with CR', [...PSEUDO, ['x-a', 'a\rb']]],
    ['a value with LF', [...PSEUDO, ['x-a', 'a\nb']]],
    ['a value with another control character', [...PSEUDO, ['x-a', 'a\u0001b']]],
    ['a value starting with a space', [...PSEUDO, ['x-a', ' a']]],
    ['a value ending with a tab', [...PSEUDO, ['x-a', 'a\t']]],
    ['a pseudo-header value with LF', [[':method', 'POST'], [':scheme', 'http'], [':path', `${SHOULD_RATE_LIMIT}\n`], [':authority', 'h']]],
    ['a pseudo-header after a regular field', [[':method', 'POST'], ['x-a', 'v'], [':scheme', 'http'], [':path', SHOULD_RATE_LIMIT]]],
    ['an unknown pseudo-header', [...PSEUDO, [':protocol', 'x']]],
    ['a repeated pseudo-header', [...PSEUDO, [':path', '/again']]],
    ['a response pseudo-header', [[':status', '200'], ...PSEUDO]],
    ['no :method', PSEUDO.slice(1)],
    ['an empty :path', [[':method', 'POST'], [':scheme', 'http'], [':path', '']]],
    ['a connection-specific field', [...PSEUDO, ['connection', 'keep-alive']]],
    ['transfer-encoding', [...PSEUDO, ['transfer-encoding', 'chunked']]],
    ['te other than trailers', [...PSEUDO, ['te', 'gzip']]],
    ['a method that is not a token', [[':method', 'PO ST'], ...PSEUDO.slice(1)]],
    ['CONNECT with a :path', [[':method', 'CONNECT'], [':authority', 'h:1'], [':path', '/']]],
  ];

  test.each(cases)('%s', async (_what, fields) => {
    const server = await startSocketServer();
    const client = await RawH2Client.connect(server.port);
    client.send(headersFrame(1, encodeHeaderBlock([...fields, ['content-type', 'application/grpc']]), { endStream: true }));
    expect((await client.answer(1)).reset).toBe(ErrorCode.PROTOCOL_ERROR);
    client.send(rateLimitCall(3));
    expect(grpcStatusOf(await client.answer(3))).toBe('0');
    expect(client.goaway()).toBeUndefined();
  });

  test('the fields a valid request may carry are accepted: tab inside a value, obs-text, token punctuation, te: trailers, repeated fields', async () => {
    const server = await startSocketServer();
    const client = await RawH2Client.connect(server.port);
    client.send(
      rateLimitCall(
        1,
        requestBlock([
          ['x-tab', 'a\tb'],
          ['x-latin', 'caf\u00e9'],
          ["x-!#$%&'*+-.^_`|~09az", 'v'],
          ['x-rep', '1'],
          ['x-rep', '2'],
        ]),
      ),
    );
    expect(grpcStatusOf(await client.answer(1))).toBe('0');
  });
});

describe('trailers (RFC 9113 8.1): malformed ones reset the stream with PROTOCOL_ERROR, the connection goes on', () => {
  test.each<[string, Array<[string, string]>]>([
    ['a value with NUL', [['x-trailer', 'a\u0000b']]],
    ['a value with LF', [['x-trailer', 'a\nb']]],
    ['an upper-case name', [['X-Trailer', 'v']]],
    ['a pseudo-header field', [[':path', '/x']]],
    ['a connection-specific field', [['connection', 'close']]],
  ])('%s', async (_what, fields) => {
    const server = await startSocketServer();
    const client = await RawH2Client.connect(server.port);
    client.send(headersFrame(1, requestBlock()), dataFrame(1, rateLimitMessage()), headersFrame(1, encodeHeaderBlock(fields), { endStream: true }));
    expect((await client.answer(1)).reset).toBe(ErrorCode.PROTOCOL_ERROR);
    client.send(rateLimitCall(3));
    expect(grpcStatusOf(await client.answer(3))).toBe('0');
    expect(client.goaway()).toBeUndefined();
  });

  test('well-formed trailers end the request, which is answered', async () => {
    const server = await startSocketServer();
    const client = await RawH2Client.connect(server.port);
    client.send(headersFrame(1, requestBlock()), dataFrame(1, rateLimitMessage()), headersFrame(1, encodeHeaderBlock([['x-trailer', 'a\tb']]), { endStream: true }));
    expect(grpcStatusOf(await client.answer(1))).toBe('0');
  });
});

describe('request headers as the application sees them (H2Connection on a plain net.Server)', () => {
  test('a record without a prototype: constructor and __proto__ are ordinary names; repeated fields are joined', async () => {
    const seen: Array<Record<string, string>> = [];
    const handler: StreamHandler = {
      open(stream) {
        seen.push(stream.headers);
        stream.respond(encodeHeaderBlock([[':status', '200'], ['grpc-status', '0']]), true);
        return undefined;
      },
    };
    const port = await startConnectionServer(handler);
    const client = await RawH2Client.connect(port);
    client.send(
      headersFrame(
        1,
        requestBlock([
          ['constructor', 'abc'],
          ['__proto__', 'x'],
          ['tostring', 'y'],
          ['cookie', 'a=1'],
          ['cookie', 'b=2'],
        ]),
        { endStream: true },
      ),
    );
    await client.answer(1);
    const headers = seen[0]!;
    expect(Object.getPrototypeOf(headers)).toBeNull();
    expect(headers['constructor']).toBe('abc');
    expect(headers['__proto__']).toBe('x');
    expect(headers['tostring']).toBe('y');
    expect(headers['cookie']).toBe('a=1; b=2');
    expect(headers['x-absent']).toBeUndefined();
  });
});

describe('stream identifiers and states (RFC 9113 5.1, 5.1.1)', () => {
  test('HEADERS on a stream that was answered and closed: GOAWAY PROTOCOL_ERROR', async () => {
    const server = await startSocketServer();
    const client = await RawH2Client.connect(server.port);
    client.send(rateLimitCall(1));
    expect(grpcStatusOf(await client.answer(1))).toBe('0');
    client.send(rateLimitCall(1));
    const goaway = await client.waitForGoaway();
    expect(goaway.code).toBe(ErrorCode.PROTOCOL_ERROR);
    expect(goaway.debug).toBe('HEADERS on closed stream 1');
  });

  test('HEADERS on an unused id below the highest one: GOAWAY PROTOCOL_ERROR', async () => {
    const server = await startSocketServer();
    const client = await RawH2Client.connect(server.port);
    client.send(rateLimitCall(7));
    expect(grpcStatusOf(await client.answer(7))).toBe('0');
    client.send(rateLimitCall(3));
    expect((await client.waitForGoaway()).code).toBe(ErrorCode.PROTOCOL_ERROR);
    // The call that went back was never answered.
    expect(client.streams.get(3)).toBeUndefined();
  });

  test('trailers on a stream the server reset lately are ignored (the client sent them before it knew)', async () => {
    const server = await startSocketServer({ maxConcurrentStreams: 1 });
    const client = await RawH2Client.connect(server.port);
    client.send(headersFrame(1, requestBlock()), headersFrame(3, requestBlock()));
    expect((await client.answer(3)).reset).toBe(ErrorCode.REFUSED_STREAM);
    client.send(dataFrame(3, rateLimitMessage()), headersFrame(3, encodeHeaderBlock([['x-trailer', 'v']]), { endStream: true }));
    await client.roundTrip();
    expect(client.goaway()).toBeUndefined();
    client.send(dataFrame(1, rateLimitMessage(), true));
    expect(grpcStatusOf(await client.answer(1))).toBe('0');
  });

  test('DATA on a closed stream the server did not reset: RST_STREAM STREAM_CLOSED; on one it reset lately: ignored', async () => {
    const server = await startSocketServer({ maxConcurrentStreams: 1 });
    const client = await RawH2Client.connect(server.port);
    client.send(rateLimitCall(1));
    expect(grpcStatusOf(await client.answer(1))).toBe('0');
    client.send(dataFrame(1, rateLimitMessage(), true));
    await client.waitFor(() => client.streams.get(1)?.reset !== undefined, 'RST_STREAM on stream 1');
    expect(client.streams.get(1)!.reset).toBe(ErrorCode.STREAM_CLOSED);

    client.send(headersFrame(3, requestBlock()), headersFrame(5, requestBlock()));
    expect((await client.answer(5)).reset).toBe(ErrorCode.REFUSED_STREAM);
    const frames = client.frames.length;
    client.send(dataFrame(5, rateLimitMessage(), true));
    await client.roundTrip();
    // Nothing but the PING's acknowledgement (not kept in frames) came back.
    expect(client.frames.length).toBe(frames);
    expect(client.goaway()).toBeUndefined();
  });
});

describe('a stream cannot depend on itself (RFC 9113 5.3.1): a stream error PROTOCOL_ERROR', () => {
  test('in a PRIORITY frame', async () => {
    const server = await startSocketServer();
    const client = await RawH2Client.connect(server.port);
    client.send(headersFrame(1, requestBlock()), frame(FrameType.PRIORITY, 0, 1, Buffer.from([0, 0, 0, 1, 16])));
    expect((await client.answer(1)).reset).toBe(ErrorCode.PROTOCOL_ERROR);
    client.send(rateLimitCall(3));
    expect(grpcStatusOf(await client.answer(3))).toBe('0');
  });

  test('in the priority fields of HEADERS', async () => {
    const server = await startSocketServer();
    const client = await RawH2Client.connect(server.port);
    const priority = Buffer.from([0, 0, 0, 1, 16]);
    client.send(frame(FrameType.HEADERS, Flag.PRIORITY | Flag.END_HEADERS | Flag.END_STREAM, 1, Buffer.concat([priority, requestBlock()])));
    expect((await client.answer(1)).reset).toBe(ErrorCode.PROTOCOL_ERROR);
    // Another stream with a valid dependency is served.
    const other = Buffer.from([0, 0, 0, 1, 16]);
    client.send(frame(FrameType.HEADERS, Flag.PRIORITY | Flag.END_HEADERS, 3, Buffer.concat([other, requestBlock()])), dataFrame(3, rateLimitMessage(), true));
    expect(grpcStatusOf(await client.answer(3))).toBe('0');
  });
});

describe('keepalive: only the acknowledgement of our own PING answers it (RFC 9113 6.7)', () => {
  test('an ACK with another payload does not: the connection is closed when the keepalive timeout passes', async () => {
    const server = await startSocketServer({ keepaliveTimeMs: 100, keepaliveTimeoutMs: 300 });
    const client = await RawH2Client.connect(server.port);
    const ping = await client.waitForFrame((f) => f.type === FrameType.PING && (f.flags & Flag.ACK) === 0, "the server's keepalive PING");
    const wrong = Buffer.from(ping.payload);
    wrong[0] ^= 0xff;
    client.send(pingFrame(wrong, true));
    await client.waitForClose();
    // Had the wrong ACK answered it, the next keepalive PING would have come before the close.
    expect(client.frames.filter((f) => f.type === FrameType.PING && (f.flags & Flag.ACK) === 0)).toHaveLength(1);
  });

  test('the right ACK does: the connection stays and is pinged again when idle', async () => {
    const server = await startSocketServer({ keepaliveTimeMs: 100, keepaliveTimeoutMs: 300 });
    const client = await RawH2Client.connect(server.port);
    const pings = (): Buffer[] => client.frames.filter((f) => f.type === FrameType.PING && (f.flags & Flag.ACK) === 0).map((f) => f.payload);
    // Each PING answered, three times: each next one comes only because the one before was answered.
    for (let i = 0; i < 3; i++) {
      await client.waitFor(() => pings().length > i, `keepalive PING ${i + 1}`);
      client.send(pingFrame(Buffer.from(pings()[i]!), true));
    }
    await client.waitFor(() => pings().length > 3, 'a fourth keepalive PING');
    expect(client.closed).toBe(false);
  });
});

describe('frames cut across socket reads', () => {
  test('calls sent one byte a read, and cut at every position of a frame header, are all answered', async () => {
    const server = await startSocketServer();
    const client = await RawH2Client.connect(server.port);
    const calls = Buffer.concat([rateLimitCall(1), rateLimitCall(3), rateLimitCall(5)]);
    for (let i = 0; i < calls.length; i++) {
      client.send(calls.subarray(i, i + 1));
      // A turn apart, so each byte is a read of its own.
      await new Promise((resolve) => setImmediate(resolve));
    }
    for (const id of [1, 3, 5]) expect(grpcStatusOf(await client.answer(id))).toBe('0');
    // A call's two frames, cut at each position of the second's header.
    let id = 7;
    for (let cut = 1; cut < 9; cut++, id += 2) {
      const call = rateLimitCall(id);
      const headerAt = call.readUIntBE(0, 3) + 9; // the DATA frame's header follows the HEADERS frame
      client.send(call.subarray(0, headerAt + cut));
      await new Promise((resolve) => setImmediate(resolve));
      client.send(call.subarray(headerAt + cut));
      expect(grpcStatusOf(await client.answer(id))).toBe('0');
    }
    expect(server.budgets.requests.held).toBe(0);
  });
});

describe('answers written outside a socket read (a timer: an RLQS push, a health Watch update)', () => {
  test('DATA framed up to a small stream window goes out at once, not with some later write', async () => {
    const handler: StreamHandler = {
      open(stream) {
        stream.respond(encodeHeaderBlock([[':status', '200'], ['content-type', 'application/grpc']]), false);
        // From a timer, more than the client's window of 10 bytes: 10 are framed, the rest waits.
        setTimeout(() => stream.write(Buffer.alloc(100, 1)), 20);
        return undefined;
      },
    };
    const port = await startConnectionServer(handler);
    const INITIAL_WINDOW_SIZE = 0x4;
    const client = await RawH2Client.connect(port, { settings: [[INITIAL_WINDOW_SIZE, 10]] });
    client.send(headersFrame(1, requestBlock([]), { endStream: true }));
    const data = await client.waitForFrame((f) => f.type === FrameType.DATA && f.streamId === 1, 'the first 10 bytes of DATA', 5_000);
    expect(data.payload.length).toBe(10);
  });
});
