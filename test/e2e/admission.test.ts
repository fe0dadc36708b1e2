/**
 * Connection admission end to end (issue 40, item 1): one client cannot lock the others out of a
 * port. Attackers hold idle HTTP/2 connections (preface and SETTINGS, then nothing) from loopback
 * addresses of their own, past the per-peer bound and past the port's cap; silent and
 * half-handshaken TLS connections are closed at the handshake bound; the HTTP and debug ports are
 * held to the same model. In every case a fresh client from another address is served.
 */
import fs from 'node:fs';
import net from 'node:net';
import tls from 'node:tls';
import * as grpc from '@grpc/grpc-js';
import { RateLimitServiceClient } from '../../generated/envoy/service/ratelimit/v3/rls';
import { testCerts } from '../support/certs';
import { PREFACE, settingsFrame } from '../support/h2-frames';
import { quietFor, waitFor } from '../support/wait';
import { baseEnv, callGrpc, descriptor, E2E_GRPC_TRANSPORT, grpcClient, httpGet, runtimeDir, type Service, startService } from './harness';

const CONFIG = 'domain: adm\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1000000}\n';
const GOOD = { domain: 'adm', descriptors: [descriptor('k', 'good')] };

/** host:port → its parts. */
function hostPort(address: string): { host: string; port: number } {
  const i = address.lastIndexOf(':');
  return { host: address.slice(0, i), port: Number(address.slice(i + 1)) };
}

/** Every socket a test opened, destroyed after it. */
const sockets: net.Socket[] = [];
afterEach(() => {
  for (const s of sockets.splice(0)) s.destroy();
});

/**
 * Opens `n` connections from `from` to `address`, each sending `hello` (or nothing) and then
 * nothing more; resolves once each is connected or closed.
 */
async function hold(address: string, from: string, n: number, hello: Buffer | undefined): Promise<net.Socket[]> {
  const { host, port } = hostPort(address);
  const opened = await Promise.all(
    Array.from(
      { length: n },
      () =>
        new Promise<net.Socket>((resolve) => {
          const s = net.connect({ host, port, localAddress: from });
          sockets.push(s);
          s.on('error', () => undefined);
          s.on('data', () => undefined);
          s.once('connect', () => {
            if (hello !== undefined) s.write(hello);
            resolve(s);
          });
          s.once('close', () => resolve(s));
        }),
    ),
  );
  return opened;
}

const open = (list: net.Socket[]): number => list.filter((s) => !s.closed && !s.destroyed).length;

/** The value of one stat on the debug port's /stats page. */
async function stat(svc: Service, name: string): Promise<number> {
  const { body } = await httpGet(svc.debug, '/stats');
  const line = body.split('\n').find((l) => l.startsWith(`${name}: `));
  return line === undefined ? 0 : Number(line.slice(name.length + 2));
}

/** A good call on a new channel (a new connection) from 127.0.0.1. */
async function freshCall(svc: Service): Promise<void> {
  const client = grpcClient(svc.grpc);
  try {
    const res = await callGrpc(client, GOOD);
    expect(res.overallCode).toBe(1);
  } finally {
    client.close();
  }
}

const H2_HELLO = Buffer.concat([PREFACE, settingsFrame()]);

describe('connection admission', () => {
  let svc: Service;
  let dir: ReturnType<typeof runtimeDir>;

  beforeAll(async () => {
    dir = runtimeDir({ 'adm.yaml': CONFIG });
    svc = await startService({
      ...baseEnv(dir.root),
      GRPC_MAX_CONNECTIONS: '300',
      GRPC_MAX_CONNECTIONS_PER_PEER: '100',
      HTTP_MAX_CONNECTIONS: '200',
      HTTP_MAX_CONNECTIONS_PER_PEER: '50',
      DEBUG_MAX_CONNECTIONS: '30',
      DEBUG_MAX_CONNECTIONS_PER_PEER: '10',
    });
  });
  afterAll(async () => {
    if (svc) expect(await svc.stop()).toBe(0);
    fs.rmSync(dir.base, { recursive: true, force: true });
  });

  test('gRPC: idle HTTP/2 connections past the per-peer bound are closed at once; past the cap the idle ones make room; a fresh client is served', async () => {
    const good = grpcClient(svc.grpc);
    expect((await callGrpc(good, GOOD)).overallCode).toBe(1);

    // One address: 150 connections, of which it may hold 100.
    const one = await hold(svc.grpc, '127.0.0.2', 150, H2_HELLO);
    await waitFor(() => open(one) === 100, `127.0.0.2 to hold 100 connections (holds ${open(one)})`);
    // Four more addresses, 100 each: 500 idle connections against a cap of 300.
    const many = (await Promise.all(['127.0.0.3', '127.0.0.4', '127.0.0.5', '127.0.0.6'].map((a) => hold(svc.grpc, a, 100, H2_HELLO)))).flat();
    const attackers = [...one, ...many];
    await waitFor(() => open(attackers) <= 299, `the port to stay within its cap (attackers hold ${open(attackers)})`);

    // A client that already had a connection and keeps calling was not the one closed...
    expect((await callGrpc(good, GOOD)).overallCode).toBe(1);
    good.close();
    // ...and a new client gets a connection and is served.
    for (let i = 0; i < 3; i++) await freshCall(svc);
    expect(await stat(svc, 'ratelimit.server.connections.__listener=grpc')).toBeLessThanOrEqual(300);
    expect(await stat(svc, 'ratelimit.server.connections_refused.__listener=grpc')).toBeGreaterThanOrEqual(50);
    expect(await stat(svc, 'ratelimit.server.connections_evicted.__listener=grpc')).toBeGreaterThanOrEqual(200);
    expect(svc.output()).toContain('127.0.0.2 holds 100 connections (GRPC_MAX_CONNECTIONS_PER_PEER=100); its new connections are closed');
    expect(svc.output()).toMatch(/grpc port at GRPC_MAX_CONNECTIONS=300: closed a grpc connection of 127\.0\.0\.\d/);
  });

  test('HTTP: idle connections past the bounds are closed or make room; /healthcheck from a fresh client answers', async () => {
    const attackers = (await Promise.all(['127.0.0.2', '127.0.0.3', '127.0.0.4', '127.0.0.5', '127.0.0.6'].map((a) => hold(svc.http, a, 60, undefined)))).flat();
    await waitFor(() => open(attackers) <= 200, `the HTTP port to stay within its bounds (attackers hold ${open(attackers)})`);
    expect((await httpGet(svc.http, '/healthcheck')).status).toBe(200);
    // 300 against a cap of 200: 100 or more refused at their address's bound or closed for room.
    const refused = await stat(svc, 'ratelimit.server.connections_refused.__listener=http');
    const evicted = await stat(svc, 'ratelimit.server.connections_evicted.__listener=http');
    expect(refused + evicted).toBeGreaterThanOrEqual(100);
  });

  test('debug: past its cap and per-peer bound a fresh client still reads /stats; a method other than GET is refused', async () => {
    const attackers = (await Promise.all(['127.0.0.2', '127.0.0.3', '127.0.0.4', '127.0.0.5'].map((a) => hold(svc.debug, a, 15, undefined)))).flat();
    await waitFor(() => open(attackers) <= 30, `the debug port to stay within its bounds (attackers hold ${open(attackers)})`);
    const { status, body } = await httpGet(svc.debug, '/stats');
    expect(status).toBe(200);
    expect(body).toContain('ratelimit.server.connections_refused.__listener=debug: ');
    for (const method of ['POST', 'PUT', 'DELETE']) {
      const res = await fetch(`http://${svc.debug}/stats`, { method, body: 'x' });
      expect([res.status, res.headers.get('allow')]).toEqual([405, 'GET, HEAD']);
    }
  });
});

describe('silent and half-handshaken TLS connections', () => {
  const certs = testCerts();
  let svc: Service;
  let dir: ReturnType<typeof runtimeDir>;

  beforeAll(async () => {
    dir = runtimeDir({ 'adm.yaml': CONFIG });
    svc = await startService({
      ...baseEnv(dir.root),
      GRPC_SERVER_USE_TLS: 'true',
      GRPC_SERVER_TLS_CERT: certs.server.cert,
      GRPC_SERVER_TLS_KEY: certs.server.key,
      HTTP_SERVER_USE_TLS: 'true',
      CONNECTION_HANDSHAKE_TIMEOUT: '1s',
      TLS_MAX_HANDSHAKES: '50',
    });
  });
  afterAll(async () => {
    if (svc) expect(await svc.stop()).toBe(0);
    fs.rmSync(dir.base, { recursive: true, force: true });
  });

  const tlsClient = () =>
    new RateLimitServiceClient(svc.grpc, grpc.credentials.createSsl(fs.readFileSync(certs.ca.cert)), { 'grpc.ssl_target_name_override': 'localhost' });

  /** The first bytes a TLS client sends (its whole ClientHello), caught by a listener that answers nothing. */
  async function clientHello(): Promise<Buffer> {
    const catcher = net.createServer();
    const caught = new Promise<Buffer>((resolve) => catcher.once('connection', (s) => s.once('data', (d: Buffer) => resolve(d))));
    await new Promise<void>((resolve) => catcher.listen(0, '127.0.0.1', resolve));
    const client = tls.connect({ host: '127.0.0.1', port: (catcher.address() as net.AddressInfo).port, servername: 'localhost', ALPNProtocols: ['h2', 'http/1.1'] });
    client.on('error', () => undefined);
    const hello = await caught;
    client.destroy();
    await new Promise((resolve) => catcher.close(resolve));
    return hello;
  }

  test.each([
    ['gRPC', () => svc.grpc],
    ['HTTP', () => svc.http],
  ])('%s port: closed once past CONNECTION_HANDSHAKE_TIMEOUT, while a TLS client is served', async (_port, address) => {
    // A TLS record header and the start of a ClientHello, then nothing.
    const halfHello = Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03]);
    const silent = await hold(address(), '127.0.0.2', 100, undefined);
    const half = await hold(address(), '127.0.0.3', 100, halfHello);
    // A whole ClientHello, then nothing: the server answers, and waits for the rest of the handshake.
    const whole = await hold(address(), '127.0.0.4', 100, await clientHello());
    const all = [...silent, ...half, ...whole];
    const client = tlsClient();
    expect((await callGrpc(client, GOOD)).overallCode).toBe(1);
    client.close();
    await waitFor(() => open(all) === 0, `the stalled handshakes to be closed (${open(all)} open)`, 15_000);
    const listener = address() === svc.grpc ? 'grpc' : 'http';
    const timedOut = await stat(svc, `ratelimit.server.connections_timed_out.__listener=${listener}.__phase=handshake`);
    // Our TLS servers make a TLS socket only once a whole ClientHello is in, and hold at most 50 of
    // those under way (grpc-js's own TLS server makes one at once, and has no such bound).
    if (listener === 'http' || E2E_GRPC_TRANSPORT === 'socket') {
      const evicted = await stat(svc, `ratelimit.server.connections_evicted.__listener=${listener}`);
      expect(evicted).toBeGreaterThanOrEqual(50);
      expect(timedOut + evicted).toBeGreaterThanOrEqual(300);
      expect(svc.output()).toContain('50 TLS handshakes under way (TLS_MAX_HANDSHAKES): closed the oldest');
    } else expect(timedOut).toBeGreaterThanOrEqual(300);
  });

  test('a TLS client that completes its handshake is not cut by the bound', async () => {
    const { host, port } = hostPort(svc.http);
    const socket = tls.connect({ host, port, ca: fs.readFileSync(certs.ca.cert), servername: 'localhost' });
    sockets.push(socket);
    await new Promise<void>((resolve, reject) => {
      socket.once('secureConnect', () => resolve());
      socket.once('error', reject);
    });
    // Past the handshake bound, and within the keep-alive one (5 s): still open, and it answers.
    await quietFor(1500);
    socket.write('GET /healthcheck HTTP/1.1\r\nHost: x\r\n\r\n');
    const answer = await new Promise<string>((resolve) => socket.once('data', (d: Buffer) => resolve(d.toString())));
    expect(answer).toMatch(/^HTTP\/1\.1 200/);
  });
});
