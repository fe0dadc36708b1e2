/**
 * Reads into the process's one shared buffer (src/server/shared-reads.ts): every plain
 * connection's reads are views of one buffer, the server still counts and closes its connections,
 * and what a connection keeps past a read survives the next read of another connection.
 */
import crypto from 'node:crypto';
import net from 'node:net';
import zlib from 'node:zlib';
import type { AddressInfo } from 'node:net';
import type { ExchangeHandler } from '../../src/server/http1/connection';
import { RateLimitResponse, RateLimitResponse_Code } from '../../generated/envoy/service/ratelimit/v3/rls';
import { httpSocketServer } from '../../src/server/http-socket';
import { onReads, servingSocket, sharedReadServer } from '../../src/server/shared-reads';
import { silentLogger } from '../../src/telemetry/logger';
import { closeRawClients, dataFrame, grpcStatusOf, headersFrame, PREFACE, rateLimitCall, rateLimitMessage, RawH2Client, requestBlock, settingsFrame } from '../support/h2-frames';
import { startSocketServer, stopSocketServers } from '../support/h2-server';
import { waitFor } from '../support/wait';

const servers: net.Server[] = [];
const clients: net.Socket[] = [];

afterEach(async () => {
  closeRawClients();
  for (const c of clients.splice(0)) c.destroy();
  await stopSocketServers();
  await Promise.all(servers.splice(0).map((s) => new Promise<void>((resolve) => s.close(() => resolve()))));
});

async function listen(server: net.Server): Promise<number> {
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as AddressInfo).port;
}

async function connect(port: number): Promise<net.Socket> {
  const c = net.connect(port, '127.0.0.1');
  clients.push(c);
  c.on('error', () => {});
  await new Promise<void>((resolve) => c.once('connect', resolve));
  return c;
}

describe('sharedReadServer', () => {
  it("reads every connection into one buffer; each read's bytes are right while the listener runs", async () => {
    const arrays = new Set<ArrayBufferLike>();
    const received = new Map<number, string>();
    const server = sharedReadServer((socket) => {
      const port = socket.remotePort!;
      onReads(socket, (chunk) => {
        arrays.add(chunk.buffer);
        received.set(port, (received.get(port) ?? '') + chunk.toString('latin1'));
      });
    }, false);
    const port = await listen(server);
    const a = await connect(port);
    const b = await connect(port);
    for (let i = 0; i < 20; i++) {
      a.write(`a${i};`);
      b.write(`b${i};`);
    }
    const all = (p: string) => Array.from({ length: 20 }, (_, i) => `${p}${i};`).join('');
    await waitFor(() => received.get(a.localPort!) === all('a') && received.get(b.localPort!) === all('b'), 'both connections read whole');
    expect(arrays.size).toBe(1);
  });

  it("counts its connections (getConnections, maxConnections, close) and sees a client's end", async () => {
    const ends: string[] = [];
    const server = sharedReadServer((socket) => {
      onReads(socket, () => {});
      socket.on('end', () => {
        ends.push('end');
        // Half-open: the server may still answer after the client ended its side.
        socket.end('bye');
      });
    }, true);
    server.maxConnections = 2;
    const port = await listen(server);
    const count = () => new Promise<number>((resolve, reject) => server.getConnections((err, n) => (err ? reject(err) : resolve(n))));
    const a = await connect(port);
    const b = await connect(port);
    await waitFor(async () => (await count()) === 2, 'two connections counted');
    // Over maxConnections: Node closes it before any reading.
    const c = await connect(port);
    await new Promise<void>((resolve) => c.once('close', () => resolve()));
    let answer = '';
    a.on('data', (d: Buffer) => (answer += d.toString()));
    a.end();
    await new Promise<void>((resolve) => a.once('close', () => resolve()));
    expect(ends).toEqual(['end']);
    expect(answer).toBe('bye');
    b.destroy();
    await waitFor(async () => (await count()) === 0, 'no connection counted');
    // close() waits for the counted connections: it resolves now.
    await new Promise<void>((resolve) => server.close(() => resolve()));
    servers.length = 0;
  });

  it('hands the server\'s "connection" listeners a socket that leads to the one serving', async () => {
    const served: net.Socket[] = [];
    const server = sharedReadServer((socket) => {
      served.push(socket);
      onReads(socket, () => {});
    }, false);
    const seen: net.Socket[] = [];
    server.on('connection', (accepted: net.Socket) => seen.push(servingSocket(accepted)));
    const port = await listen(server);
    await connect(port);
    await waitFor(() => seen.length === 1, 'the connection event');
    expect(seen[0]).toBe(served[0]);
    expect(seen[0]!.remotePort).toBeGreaterThan(0);
  });
});

describe('the HTTP/2 server on shared reads', () => {
  it("the rest of a read left for the next turn is not overwritten by another connection's read", async () => {
    const server = await startSocketServer();
    // Calls with a padding header: 90 of them are 30-40 KiB, more than one turn (16 KiB), so each
    // connection's read is handled over several turns while the other's reads come between. The
    // two pad differently, so that a view of the shared buffer would read the other's frames.
    const calls = (base: number, pad: number) => {
      const block = requestBlock([['x-padding', 'p'.repeat(pad)]]);
      return Buffer.concat(Array.from({ length: 90 }, (_, i) => rateLimitCall(base + 2 * i, block)));
    };
    const a = await RawH2Client.connect(server.port);
    const b = await RawH2Client.connect(server.port);
    for (let round = 0; round < 3; round++) {
      const first = 1 + round * 180;
      a.send(calls(first, 300));
      b.send(calls(first, 201));
      for (const client of [a, b]) {
        for (let i = 0; i < 90; i++) expect(grpcStatusOf(await client.answer(first + 2 * i))).toBe('0');
      }
    }
    expect(a.goaway()).toBeUndefined();
    expect(b.goaway()).toBeUndefined();
  });

  it("a message that arrives over several reads is kept whole while other connections' reads come between", async () => {
    const server = await startSocketServer();
    const a = await RawH2Client.connect(server.port);
    const b = await RawH2Client.connect(server.port);
    // A value whose letters differ from place to place: bytes read again over later ones show.
    const value = Array.from({ length: 900 }, (_, i) => String.fromCharCode(97 + ((i * 7) % 26))).join('');
    const message = rateLimitMessage({ user: value });
    const half = 400;
    const padded = requestBlock([['x-padding', 'q'.repeat(1500)]]);
    a.send(headersFrame(1, requestBlock()), dataFrame(1, message.subarray(0, half)));
    await waitFor(() => server.serverSocketOf(a.socket).bytesRead > half, "the first half read");
    b.send(rateLimitCall(1, padded));
    expect(grpcStatusOf(await b.answer(1))).toBe('0');
    a.send(dataFrame(1, message.subarray(half), true));
    const answer = await a.answer(1);
    expect(grpcStatusOf(answer)).toBe('0');
    // The limit of the configured descriptor: the request came through as sent.
    const response = RateLimitResponse.decode(Buffer.concat(answer.data).subarray(5));
    expect(response.overallCode).toBe(RateLimitResponse_Code.OK);
    expect(response.statuses[0]?.currentLimit?.requestsPerUnit).toBe(1_000_000_000);
  });

  it("a preface that arrives in parts is not overwritten by another connection's read", async () => {
    const server = await startSocketServer();
    const a = await RawH2Client.connect(server.port, { handshake: false });
    a.send(PREFACE.subarray(0, 10));
    await waitFor(() => server.serverSockets.length === 1 && server.serverSockets[0]!.bytesRead === 10, 'the first part read');
    // Another connection's read, different bytes at the same place of the shared buffer.
    const other = await connect(server.port);
    other.write('GET / HTTP/1.1\r\nHost: x\r\n\r\n');
    await waitFor(() => server.serverSockets.length === 2 && server.serverSockets[1]!.bytesRead > 0, "the other connection's read");
    a.send(PREFACE.subarray(10), settingsFrame(), rateLimitCall(1));
    expect(grpcStatusOf(await a.answer(1))).toBe('0');
  });

  it("a compressed message is inflated whole, whatever the connection's next reads are", async () => {
    const server = await startSocketServer();
    const a = await RawH2Client.connect(server.port);
    const b = await RawH2Client.connect(server.port);
    const message = rateLimitMessage({ user: 'x'.repeat(900) }).subarray(5);
    const gzipped = zlib.gzipSync(message);
    const prefix = Buffer.alloc(5);
    prefix[0] = 1;
    prefix.writeUInt32BE(gzipped.length, 1);
    const block = requestBlock([['grpc-encoding', 'gzip']]);
    const padded = requestBlock([['x-padding', 'q'.repeat(1500)]]);
    const filler = (round: number) => Buffer.concat(Array.from({ length: 20 }, (_, j) => rateLimitCall(1 + 2 * j + 40 * round, padded)));
    for (let i = 0; i < 5; i++) {
      const id = 1 + 2 * i;
      // The thread pool (4 threads) busy: a's message is inflated after b's read is handled.
      const busy = Array.from({ length: 4 }, () => new Promise((resolve) => crypto.pbkdf2('p', 's', 20_000, 32, 'sha256', resolve)));
      a.send(headersFrame(id, block), dataFrame(id, Buffer.concat([prefix, gzipped]), true));
      b.send(filler(i));
      await Promise.all(busy);
      expect(grpcStatusOf(await a.answer(id))).toBe('0');
      for (let j = 0; j < 20; j++) expect(grpcStatusOf(await b.answer(1 + 2 * j + 40 * i))).toBe('0');
    }
  });
});

describe('the HTTP/1.1 server on shared reads', () => {
  it("a request head or body left unfinished by a read is not overwritten by another connection's reads", async () => {
    // Echoes the body: what was kept across reads comes back as it was sent.
    const echo: ExchangeHandler = {
      plan: () => ({ keep: true, limit: 1 << 20 }),
      handle: (_head, body, exchange) => exchange.answer(200, '', body.toString('latin1')),
    };
    const http = httpSocketServer(echo, { logger: silentLogger });
    const port = await listen(http.server);
    const a = await connect(port);
    const b = await connect(port);
    let answerA = '';
    a.on('data', (d: Buffer) => (answerA += d.toString('latin1')));
    // Letters that differ from place to place: a view read again over later bytes shows.
    const body = Array.from({ length: 3000 }, (_, i) => String.fromCharCode(65 + ((i * 7) % 26))).join('');
    const request = `POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
    // Cut in the head, at its end, then in the body; between the parts b's requests are read.
    const headEnd = request.indexOf('\r\n\r\n') + 4;
    const cuts = [0, 30, headEnd, headEnd + 900, request.length];
    for (let i = 0; i + 1 < cuts.length; i++) {
      a.write(request.slice(cuts[i], cuts[i + 1]));
      const bBody = 'b'.repeat(4000 + i);
      const bRequest = `POST /echo HTTP/1.1\r\nHost: b\r\nContent-Length: ${bBody.length}\r\n\r\n${bBody}`;
      let answerB = '';
      const onB = (d: Buffer) => (answerB += d.toString('latin1'));
      b.on('data', onB);
      b.write(bRequest);
      await waitFor(() => answerB.endsWith(bBody), `b's answer ${i}`);
      b.off('data', onB);
    }
    await waitFor(() => answerA.endsWith(body), "a's answer");
    expect(answerA).toMatch(/^HTTP\/1\.1 200 /);
    expect(answerA.length - answerA.indexOf('\r\n\r\n') - 4).toBe(body.length);
  });
});
