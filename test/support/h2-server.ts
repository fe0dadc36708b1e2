/**
 * The socket gRPC listener (our HTTP/2 server) started in-process on 127.0.0.1 with a rate limit
 * service on a memory store, as in grpc-transports.test.ts, plus the server side of each accepted
 * socket so a test can see what the server buffers for a peer; and grpc-js clients for the
 * well-behaved traffic that must keep being served.
 */
import net from 'node:net';
import * as grpc from '@grpc/grpc-js';
import {
  type RateLimitResponse,
  RateLimitResponse_Code,
  RateLimitServiceClient,
} from '../../generated/envoy/service/ratelimit/v3/rls';
import type { ServiceFlags } from '../../src/limiter/service';
import type { GrpcListener } from '../../src/server/grpc-common';
import { createGrpcSocketListener } from '../../src/server/grpc-socket';
import { Health } from '../../src/server/health';
import type { GrpcSettings } from '../../src/settings';
import { StatsStore } from '../../src/stats/store';
import { silentLogger } from '../../src/telemetry/logger';
import { FULL_ANSWER_FLAGS, grpcTestSettings, memoryRateLimitService } from './grpc-service';

/** A limit no test reaches: every well-behaved call is answered OK. */
const CONFIG = `
domain: d
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000000}
`;

/** No response headers or metadata: the answers stay small. */
const PLAIN_FLAGS: ServiceFlags = { ...FULL_ANSWER_FLAGS, responseDynamicMetadata: false, responseHeadersEnabled: false };

export interface SocketServer {
  port: number;
  address: string;
  listener: GrpcListener;
  /** The server side of every accepted socket, in accept order. */
  serverSockets: net.Socket[];
  /** The server side of the connection whose client socket is `client`. */
  serverSocketOf(client: net.Socket): net.Socket;
}

const running = new Set<SocketServer>();
const clients = new Set<grpc.Client>();

/**
 * Starts the socket listener. Its net.Server is made by net.createServer inside
 * createGrpcSocketListener; wrapping that one call is how the test sees the accepted sockets.
 */
export async function startSocketServer(over: Partial<GrpcSettings> = {}): Promise<SocketServer> {
  const stats = new StatsStore();
  const health = new Health();
  health.add('store', true);
  const serverSockets: net.Socket[] = [];
  const createServer = net.createServer;
  const spy = jest.spyOn(net, 'createServer').mockImplementation(((...args: Parameters<typeof net.createServer>) => {
    const server = createServer(...args);
    server.on('connection', (socket: net.Socket) => serverSockets.push(socket));
    return server;
  }) as typeof net.createServer);
  let listener: GrpcListener;
  try {
    listener = createGrpcSocketListener({
      service: memoryRateLimitService(stats, CONFIG, { flags: PLAIN_FLAGS }),
      logger: silentLogger,
      target: '127.0.0.1:0',
      maxRequestBytes: 1 << 20,
      certificates: undefined,
      grpc: grpcTestSettings(over),
      health,
      stats,
    });
  } finally {
    spy.mockRestore();
  }
  const port = await listener.listen();
  const server: SocketServer = {
    port,
    address: `127.0.0.1:${port}`,
    listener,
    serverSockets,
    serverSocketOf(client) {
      const found = serverSockets.find((s) => s.remotePort === client.localPort);
      if (found === undefined) throw new Error(`no server socket for client port ${String(client.localPort)}`);
      return found;
    },
  };
  running.add(server);
  return server;
}

/** Closes every grpc-js client and listener started here (for afterEach). */
export async function stopSocketServers(): Promise<void> {
  for (const c of clients) c.close();
  clients.clear();
  await Promise.all(
    [...running].map(async (server) => {
      running.delete(server);
      server.listener.forceClose();
      await server.listener.drain();
    }),
  );
}

export function rateLimitClient(address: string): RateLimitServiceClient {
  const c = new RateLimitServiceClient(address, grpc.credentials.createInsecure());
  clients.add(c);
  return c;
}

/** One ShouldRateLimit call; rejects on a gRPC error. */
export function callRateLimit(client: RateLimitServiceClient, user = 'alice'): Promise<RateLimitResponse> {
  return new Promise((resolve, reject) =>
    client.shouldRateLimit(
      { domain: 'd', descriptors: [{ entries: [{ key: 'user', value: user }], limit: undefined, hitsAddend: undefined }], hitsAddend: 0 },
      new grpc.Metadata(),
      { deadline: Date.now() + 10_000 },
      (err, response) => (err ? reject(err) : resolve(response!)),
    ),
  );
}

/** A well-behaved call answered OK. */
export async function expectServed(client: RateLimitServiceClient): Promise<void> {
  const response = await callRateLimit(client);
  expect(response.overallCode).toBe(RateLimitResponse_Code.OK);
}
