/**
 * gRPC listeners started in-process on 127.0.0.1 with a rate limit service on a memory store: the
 * one set-up of grpc-transports.test.ts, h2-interop.test.ts and the h2 tests. startGrpcListener
 * starts any transport; startSocketServer starts the socket listener (our HTTP/2 server) and also
 * keeps the server side of each accepted socket, so a test can see what the server buffers for a
 * peer. Plus grpc-js clients for the well-behaved traffic that must keep being served, and a proxy
 * that watches the HTTP/2 frames between a client and a listener.
 */
import net from 'node:net';
import * as grpc from '@grpc/grpc-js';
import {
  type RateLimitRequest,
  type RateLimitResponse,
  RateLimitResponse_Code,
  RateLimitServiceClient,
} from '../../generated/envoy/service/ratelimit/v3/rls';
import type { ServiceFlags } from '../../src/limiter/service';
import { createGrpcJsListener } from '../../src/server/grpc';
import type { GrpcListener, GrpcListenerOptions } from '../../src/server/grpc-common';
import { type ServerBudgets, serverBudgets } from '../../src/server/byte-budget';
import { createGrpcSocketListener } from '../../src/server/grpc-socket';
import { type ConnectionOptions, H2Connection, type StreamHandler } from '../../src/server/h2/connection';
import type { AdmittedConnection } from '../../src/server/admission';
import { Health } from '../../src/server/health';
import type { GrpcSettings } from '../../src/settings';
import { StatsStore } from '../../src/stats/store';
import { silentLogger } from '../../src/telemetry/logger';
import { FULL_ANSWER_FLAGS, grpcTestAdmission, grpcTestSettings, memoryRateLimitService } from './grpc-service';

/** GRPC_TRANSPORT: our socket handler (the program's default) or grpc-js. */
export type GrpcTransport = 'socket' | 'grpc-js';

const LISTENERS = { socket: createGrpcSocketListener, 'grpc-js': createGrpcJsListener } as const;

/** Listener options over the test defaults; `stats`, `health` and `service` replace the made ones. */
export interface TestListenerOptions extends Partial<Omit<GrpcListenerOptions, 'grpc'>> {
  /** The config (domain `d`) of the memory-store service. */
  config: string;
  /** Default 'socket'. */
  transport?: GrpcTransport;
  /** The service's flags; default FULL_ANSWER_FLAGS. */
  flags?: ServiceFlags;
  /** Over grpcTestSettings' defaults. */
  grpc?: Partial<GrpcSettings>;
}

export interface TestListener {
  port: number;
  address: string;
  listener: GrpcListener;
  health: Health;
  stats: StatsStore;
  /** The process budgets the listener was given (a test's own unless passed in). */
  budgets: ServerBudgets;
}

/** A listener made but not yet bound: startSocketServer has to watch the making alone. */
type UnboundListener = Omit<TestListener, 'port' | 'address'>;

function createTestListener(options: TestListenerOptions): UnboundListener {
  const { config, transport = 'socket', flags, grpc: grpcOver, ...over } = options;
  const stats = over.stats ?? new StatsStore();
  const health = over.health ?? new Health();
  const budgets = over.budgets ?? serverBudgets(32 << 20);
  health.add('store', true);
  const grpc = grpcTestSettings({ transport, ...grpcOver });
  const listener = LISTENERS[transport]({
    service: memoryRateLimitService(stats, config, { flags }),
    logger: silentLogger,
    target: '127.0.0.1:0',
    maxRequestBytes: 1 << 20,
    certificates: undefined,
    ...over,
    budgets,
    grpc,
    admission: over.admission ?? grpcTestAdmission(grpc, stats),
    health,
    stats,
  });
  return { listener, health, stats, budgets };
}

async function listen(made: UnboundListener): Promise<TestListener> {
  const port = await made.listener.listen();
  return { ...made, port, address: `127.0.0.1:${port}` };
}

/** Starts a listener on 127.0.0.1 and a free port. Stopping it is the caller's job. */
export function startGrpcListener(options: TestListenerOptions): Promise<TestListener> {
  return listen(createTestListener(options));
}

/** A limit no test reaches: every well-behaved call is answered OK. */
const CONFIG = `
domain: d
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000000}
`;

/** No response headers or metadata: the answers stay small. */
const PLAIN_FLAGS: ServiceFlags = { ...FULL_ANSWER_FLAGS, responseDynamicMetadata: false, responseHeadersEnabled: false };

export interface SocketServer extends TestListener {
  /** The server side of every accepted socket, in accept order. */
  serverSockets: net.Socket[];
  /** The server side of the connection whose client socket is `client`. */
  serverSocketOf(client: net.Socket): net.Socket;
}

const running = new Set<SocketServer>();
const clients = new Set<grpc.Client>();

/**
 * Starts the socket listener (`over`: its settings; `options`: the rest of its options). Its
 * net.Server is made by net.createServer inside createGrpcSocketListener; wrapping that one call
 * is how the test sees the accepted sockets.
 */
export async function startSocketServer(over: Partial<GrpcSettings> = {}, options: Partial<TestListenerOptions> = {}): Promise<SocketServer> {
  const serverSockets: net.Socket[] = [];
  const createServer = net.createServer;
  const spy = jest.spyOn(net, 'createServer').mockImplementation(((...args: Parameters<typeof net.createServer>) => {
    const server = createServer(...args);
    server.on('connection', (socket: net.Socket) => serverSockets.push(socket));
    return server;
  }) as typeof net.createServer);
  let made: UnboundListener;
  try {
    made = createTestListener({ config: CONFIG, flags: PLAIN_FLAGS, ...options, grpc: over });
  } finally {
    spy.mockRestore();
  }
  const server: SocketServer = {
    ...(await listen(made)),
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
/** Plain servers of startConnectionServer, with their accepted sockets. */
const plainServers = new Set<{ server: net.Server; sockets: net.Socket[] }>();

/**
 * A plain net.Server on 127.0.0.1 whose every connection is an H2Connection with `handler`: no
 * keepalive, no body timeout, 10 streams, 64 KiB of headers, unless `options` says otherwise.
 * `admit` takes each socket through admission first (undefined: refused, nothing is made).
 * Resolves its port; stopSocketServers closes it.
 */
export async function startConnectionServer(
  handler: StreamHandler,
  { options = {}, admit }: { options?: Partial<ConnectionOptions>; admit?: (socket: net.Socket) => { connection: AdmittedConnection | undefined } | undefined } = {},
): Promise<number> {
  const sockets: net.Socket[] = [];
  const server = net.createServer((socket) => {
    sockets.push(socket);
    const admitted = admit === undefined ? undefined : admit(socket);
    if (admit !== undefined && admitted === undefined) return;
    const connection = new H2Connection(socket, handler, {
      maxConcurrentStreams: 10,
      maxHeaderListBytes: 64 * 1024,
      keepaliveTimeMs: 0,
      keepaliveTimeoutMs: 0,
      bodyTimeoutMs: 0,
      maxHeldBodyBytes: 1 << 20,
      budgets: serverBudgets(1 << 20),
      ...options,
    });
    if (admitted !== undefined) admitted.connection = connection;
  });
  plainServers.add({ server, sockets });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as net.AddressInfo).port;
}

export async function stopSocketServers(): Promise<void> {
  for (const c of clients) c.close();
  clients.clear();
  await Promise.all(
    [...plainServers].map(({ server, sockets }) => {
      for (const s of sockets.splice(0)) s.destroy();
      return new Promise<void>((resolve) => (server.listening ? server.close(() => resolve()) : resolve()));
    }),
  );
  plainServers.clear();
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

/** A ShouldRateLimit request in domain `d`: one descriptor for each record of entries. */
export function rateLimitRequest(...descriptors: Array<Record<string, string>>): RateLimitRequest {
  return {
    domain: 'd',
    descriptors: descriptors.map((d) => ({
      entries: Object.entries(d).map(([key, value]) => ({ key, value })),
      limit: undefined,
      hitsAddend: undefined,
    })),
    hitsAddend: 0,
  };
}

/** One ShouldRateLimit call; rejects on a gRPC error. */
export function callRateLimit(client: RateLimitServiceClient, user = 'alice'): Promise<RateLimitResponse> {
  return new Promise((resolve, reject) =>
    client.shouldRateLimit(rateLimitRequest({ user }), new grpc.Metadata(), { deadline: Date.now() + 10_000 }, (err, response) =>
      err ? reject(err) : resolve(response!),
    ),
  );
}

/** A well-behaved call answered OK. */
export async function expectServed(client: RateLimitServiceClient): Promise<void> {
  const response = await callRateLimit(client);
  expect(response.overallCode).toBe(RateLimitResponse_Code.OK);
}

export interface FrameCountingProxy {
  address: string;
  /** The connections carried so far. */
  readonly connections: number;
  /** The type of every frame a client sent. */
  clientFrameTypes: Set<number>;
  /** Resolves at the first GOAWAY frame a server sends. */
  firstGoaway: Promise<void>;
  close(): Promise<void>;
}

/**
 * A TCP proxy on 127.0.0.1 in front of `target` (`host:port`) that counts the connections it
 * carries and reads the HTTP/2 frame headers going each way. The caller closes it.
 */
export async function startFrameCountingProxy(target: string): Promise<FrameCountingProxy> {
  const [host, port] = [target.slice(0, target.lastIndexOf(':')), Number(target.slice(target.lastIndexOf(':') + 1))];
  let connections = 0;
  const clientFrameTypes = new Set<number>();
  let sawGoaway!: () => void;
  const firstGoaway = new Promise<void>((resolve) => (sawGoaway = resolve));
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    connections++;
    const upstream = net.connect(port, host);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('error', () => undefined);
      s.on('close', () => sockets.delete(s));
    }
    client.pipe(upstream).pipe(client);
    // A client starts with the 24-byte connection preface, which is not a frame.
    client.on('data', frameTypeReader(24, (type) => clientFrameTypes.add(type)));
    upstream.on('data', frameTypeReader(0, (type) => type === 0x7 && sawGoaway()));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    address: `127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    get connections() {
      return connections;
    },
    clientFrameTypes,
    firstGoaway,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/**
 * A 'data' listener that calls `onType` with the type of each frame (9-byte headers) of a
 * stream however TCP cuts it, after `skip` leading bytes.
 */
function frameTypeReader(skip: number, onType: (type: number) => void): (chunk: Buffer) => void {
  let pending = Buffer.alloc(0);
  let skipLeft = skip;
  return (chunk) => {
    pending = Buffer.concat([pending, chunk]);
    const skipped = Math.min(skipLeft, pending.length);
    skipLeft -= skipped;
    pending = pending.subarray(skipped);
    while (pending.length >= 9 && pending.length >= 9 + pending.readUIntBE(0, 3)) {
      onType(pending[3]!);
      pending = pending.subarray(9 + pending.readUIntBE(0, 3));
    }
  };
}
