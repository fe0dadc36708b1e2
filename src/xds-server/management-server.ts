/**
 * A small State-of-the-World ADS management server for RateLimitConfig resources: what
 * `ratelimit-xds-server` runs, and what the tests drive.
 *
 * `ManagementServer` serves one snapshot `{version, resources}` to every
 * `StreamAggregatedResources` stream, whatever the node:
 * - a stream's request with an empty `response_nonce` (its subscription) is answered with the
 *   current snapshot at once, whatever `version_info` the client reports (so a client that kept
 *   version "3" from an earlier server process still gets this process's resources); with no
 *   snapshot yet the stream waits;
 * - `setSnapshot()` pushes the new snapshot to every subscribed stream;
 * - every request is logged as one line: the subscription, an ACK, or a NACK (with the node id,
 *   version, nonce and error_detail), and handed to `onRequest` listeners with its stream's
 *   headers; requests for other type URLs are ignored (never answered), as are ACKs/NACKs of a
 *   response that is not the stream's latest (stale nonce);
 * - `DeltaAggregatedResources` answers UNIMPLEMENTED;
 * - `stop()` breaks every stream (force shutdown); `start()` again listens on the same port and
 *   keeps serving the last snapshot.
 * Resources are RateLimitConfig messages (packed into Any here) or ready-made Any values (so tests
 * can send anything).
 *
 * `DirectoryPublisher` feeds a ManagementServer from a directory of YAML config files: every
 * `*.yaml`/`*.yml` file directly in it (dot files skipped, symlinks followed) is one resource named
 * after the file without its extension. Each file is validated with the service's loader and the
 * whole set as the service would load it (MERGE_DOMAIN_CONFIG as given); a file that fails is
 * logged by name and left out (or kept at its last published version), and the rest is
 * published. Published versions are
 * `<prefix>1`, `<prefix>2`, …; a reload that yields exactly the published resources publishes
 * nothing. The directory is watched with the file provider's DirectoryWatcher (a burst of events
 * reloads once, 100 ms after the last one; a directory replaced or removed and recreated is watched
 * again).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import type { Node } from '../../generated/envoy/config/core/v3/base';
import {
  AggregatedDiscoveryServiceService,
  type AggregatedDiscoveryServiceServer,
} from '../../generated/envoy/service/discovery/v3/ads';
import {
  type DeltaDiscoveryRequest,
  type DeltaDiscoveryResponse,
  type DiscoveryRequest,
  DiscoveryResponse,
} from '../../generated/envoy/service/discovery/v3/discovery';
import { Any } from '../../generated/google/protobuf/any';
import { RateLimitConfig as RateLimitConfigProto } from '../../generated/ratelimit/config/ratelimit/v3/rls_conf';
import { loadConfigFromObjects } from '../config/load';
import { ConfigError } from '../config/types';
import { StatsStore } from '../stats/store';
import { type Logger, silentLogger } from '../telemetry/logger';
import { DirectoryWatcher } from '../platform/directory-watcher';
import { RATE_LIMIT_CONFIG_TYPE_URL, rateLimitConfigToObject, yamlToRateLimitConfig } from '../providers/xds/convert';
import { errorMessage } from '../platform/errors';

export type ManagementServerLogger = Pick<Logger, 'info' | 'warn' | 'error'>;

export interface ManagementServerTlsOptions {
  /** PEM certificate chain of the server. */
  readonly cert: Buffer;
  /** PEM private key of the server. */
  readonly key: Buffer;
  /** PEM CA bundle; when set, clients must present a certificate it signed (mTLS). */
  readonly clientCa?: Buffer | undefined;
}

export interface ManagementServerOptions {
  /** Listen address (default 127.0.0.1). */
  readonly host?: string;
  /** Listen port (default 0: any free port; after the first start, restarts reuse the bound port). */
  readonly port?: number;
  /** Serve TLS instead of plaintext. */
  readonly tls?: ManagementServerTlsOptions;
  readonly logger?: ManagementServerLogger;
}

export type RequestKind = 'subscribe' | 'ack' | 'nack';

/** One DiscoveryRequest as the server received it. */
export interface ObservedRequest {
  /** Stream number, unique per ManagementServer (across restarts). */
  readonly streamId: number;
  readonly kind: RequestKind;
  /** True for an ACK/NACK of a response that is not the stream's latest. */
  readonly stale: boolean;
  /** The node id of the request, or of the stream's earlier requests when this one has none. */
  readonly nodeId: string;
  readonly request: DiscoveryRequest;
  /** The stream's request headers (text values; the first one of a repeated key). */
  readonly headers: Readonly<Record<string, string>>;
  /** `subjectaltname` of the client certificate (mTLS), e.g. `DNS:client.ratelimit.test`. */
  readonly peerSan: string | undefined;
}

/** One DiscoveryResponse as the server sent it. */
export interface SentResponse {
  readonly streamId: number;
  readonly nodeId: string;
  readonly response: DiscoveryResponse;
}

export interface ResourceSnapshot {
  readonly version: string;
  readonly resources: readonly Any[];
}

interface StreamState {
  readonly id: number;
  readonly call: grpc.ServerDuplexStream<DiscoveryRequest, DiscoveryResponse>;
  readonly headers: Record<string, string>;
  readonly peerSan: string | undefined;
  node: Node | undefined;
  subscribed: boolean;
  lastNonce: string | undefined;
  lastVersion: string | undefined;
}

/** Packs a RateLimitConfig into an Any (Any values are passed through). */
export function toAny(resource: RateLimitConfigProto | Any): Any {
  if (isAny(resource)) return resource;
  return { typeUrl: RATE_LIMIT_CONFIG_TYPE_URL, value: Buffer.from(RateLimitConfigProto.encode(resource).finish()) };
}

function isAny(r: RateLimitConfigProto | Any): r is Any {
  return 'typeUrl' in r && 'value' in r && !('domain' in r);
}

function hostPort(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

function describeStatus(s: DiscoveryRequest['errorDetail']): string {
  if (s === undefined) return '';
  return s.code !== 0 ? `code ${s.code}: ${s.message}` : s.message;
}

export class ManagementServer {
  readonly host: string;
  private boundPort: number;
  private readonly tls: ManagementServerTlsOptions | undefined;
  private readonly logger: ManagementServerLogger;
  private server: grpc.Server | undefined;
  private readonly streams = new Map<number, StreamState>();
  private readonly listeners = new Set<(r: ObservedRequest) => void>();
  private readonly responseListeners = new Set<(r: SentResponse) => void>();
  private current: ResourceSnapshot | undefined;
  private nextStreamId = 1;
  private nonceCounter = 0;

  constructor(opts: ManagementServerOptions = {}) {
    this.host = opts.host ?? '127.0.0.1';
    this.boundPort = opts.port ?? 0;
    this.tls = opts.tls;
    this.logger = opts.logger ?? silentLogger;
  }

  /** The bound port (the requested one before the first start). */
  get port(): number {
    return this.boundPort;
  }

  /** `host:port` to dial. */
  get address(): string {
    return hostPort(this.host, this.boundPort);
  }

  get listening(): boolean {
    return this.server !== undefined;
  }

  /** Number of open StreamAggregatedResources streams. */
  get openStreams(): number {
    return this.streams.size;
  }

  /** The snapshot being served. */
  snapshot(): ResourceSnapshot | undefined {
    return this.current;
  }

  /** Binds and serves; resolves with the port. Can be called again after stop() (same port). */
  async start(): Promise<number> {
    if (this.server !== undefined) return this.boundPort;
    const server = new grpc.Server();
    const impl: AggregatedDiscoveryServiceServer = {
      streamAggregatedResources: (call) => this.onStream(call),
      deltaAggregatedResources: (call: grpc.ServerDuplexStream<DeltaDiscoveryRequest, DeltaDiscoveryResponse>) => {
        call.on('error', () => {});
        call.emit('error', {
          code: grpc.status.UNIMPLEMENTED,
          details: 'DeltaAggregatedResources is not implemented: use StreamAggregatedResources (SotW)',
        });
      },
    };
    server.addService(AggregatedDiscoveryServiceService, impl);
    const creds =
      this.tls === undefined
        ? grpc.ServerCredentials.createInsecure()
        : grpc.ServerCredentials.createSsl(
            this.tls.clientCa ?? null,
            [{ cert_chain: this.tls.cert, private_key: this.tls.key }],
            this.tls.clientCa !== undefined,
          );
    // A port released by stop() a moment ago may still be in use briefly: retry for up to 2 s.
    const deadline = Date.now() + 2000;
    for (;;) {
      try {
        this.boundPort = await new Promise<number>((resolve, reject) =>
          server.bindAsync(hostPort(this.host, this.boundPort), creds, (err, port) => (err ? reject(err) : resolve(port))),
        );
        break;
      } catch (err) {
        if (this.boundPort === 0 || !/EADDRINUSE|address already in use/i.test(String(err)) || Date.now() > deadline) {
          server.forceShutdown();
          throw err;
        }
        await new Promise((r) => setTimeout(r, 50));
      }
    }
    this.server = server;
    return this.boundPort;
  }

  /** Stops listening and breaks every stream (clients see the stream fail). */
  async stop(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    this.streams.clear();
    if (server === undefined) return;
    server.forceShutdown();
    await new Promise((r) => setImmediate(r));
  }

  /** Serves `resources` as `version` from now on and pushes it to every subscribed stream. */
  setSnapshot(version: string, resources: ReadonlyArray<RateLimitConfigProto | Any>): void {
    this.current = { version, resources: resources.map(toAny) };
    for (const s of this.streams.values()) if (s.subscribed) this.respond(s);
  }

  /** Calls `listener` with every request received; returns the unsubscribe function. */
  onRequest(listener: (r: ObservedRequest) => void): () => void {
    this.listeners.add(listener);
    return () => {
      this.listeners.delete(listener);
    };
  }

  /** Calls `listener` with every response sent; returns the unsubscribe function. */
  onResponse(listener: (r: SentResponse) => void): () => void {
    this.responseListeners.add(listener);
    return () => {
      this.responseListeners.delete(listener);
    };
  }

  private onStream(call: grpc.ServerDuplexStream<DiscoveryRequest, DiscoveryResponse>): void {
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(call.metadata.getMap())) if (typeof v === 'string') headers[k] = v;
    let peerSan: string | undefined;
    try {
      peerSan = call.getAuthContext().sslPeerCertificate?.subjectaltname;
    } catch {
      peerSan = undefined;
    }
    const state: StreamState = {
      id: this.nextStreamId++,
      call,
      headers,
      peerSan,
      node: undefined,
      subscribed: false,
      lastNonce: undefined,
      lastVersion: undefined,
    };
    this.streams.set(state.id, state);
    const remove = (): void => {
      this.streams.delete(state.id);
    };
    call.on('data', (req: DiscoveryRequest) => this.onRequestReceived(state, req));
    call.on('end', () => {
      remove();
      call.end();
    });
    call.on('cancelled', remove);
    call.on('close', remove);
    call.on('error', remove);
  }

  private onRequestReceived(s: StreamState, req: DiscoveryRequest): void {
    if (req.node !== undefined) s.node = req.node;
    const nodeId = s.node?.id ?? '';
    const kind: RequestKind = req.responseNonce === '' ? 'subscribe' : req.errorDetail !== undefined ? 'nack' : 'ack';
    const stale = kind !== 'subscribe' && req.responseNonce !== s.lastNonce;
    const ours = req.typeUrl === RATE_LIMIT_CONFIG_TYPE_URL;
    const where = `stream ${s.id}, node '${nodeId}'`;
    if (!ours) {
      this.logger.info(`${where}: ignoring a request for type ${JSON.stringify(req.typeUrl)}`);
    } else if (kind === 'subscribe') {
      this.logger.info(`${where}: subscribed (version_info '${req.versionInfo}')`);
    } else if (kind === 'ack') {
      this.logger.info(`${where}: ACK version '${req.versionInfo}' nonce ${req.responseNonce}${stale ? ' (stale)' : ''}`);
    } else {
      this.logger.warn(
        `${where}: NACK nonce ${req.responseNonce}${stale ? ' (stale)' : ''}, still at version '${req.versionInfo}': ${describeStatus(req.errorDetail)}`,
      );
    }
    const observed: ObservedRequest = { streamId: s.id, kind, stale, nodeId, request: req, headers: s.headers, peerSan: s.peerSan };
    for (const l of this.listeners) {
      try {
        l(observed);
      } catch (err) {
        this.logger.error(`request listener failed: ${String(err)}`);
      }
    }
    if (!ours || stale) return;
    if (kind === 'subscribe') {
      s.subscribed = true;
      s.lastVersion = undefined;
      this.respond(s);
    } else if (this.current !== undefined && s.lastVersion !== this.current.version) {
      this.respond(s);
    }
  }

  private respond(s: StreamState): void {
    const snap = this.current;
    if (snap === undefined) return;
    const nonce = String(++this.nonceCounter);
    s.lastNonce = nonce;
    s.lastVersion = snap.version;
    const response = DiscoveryResponse.fromPartial({
      versionInfo: snap.version,
      resources: [...snap.resources],
      typeUrl: RATE_LIMIT_CONFIG_TYPE_URL,
      nonce,
    });
    s.call.write(response);
    const sent: SentResponse = { streamId: s.id, nodeId: s.node?.id ?? '', response };
    for (const l of this.responseListeners) {
      try {
        l(sent);
      } catch (err) {
        this.logger.error(`response listener failed: ${String(err)}`);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Directory → snapshots

const YAML_FILE = /\.ya?ml$/i;

export interface LoadedDirectory {
  /** The files whose resources are served (sorted), one per resource. */
  readonly files: readonly string[];
  readonly resources: readonly RateLimitConfigProto[];
  /** Files that could not be served as they are now, each with its error. */
  readonly problems: readonly DirectoryProblem[];
}

export interface DirectoryProblem {
  readonly file: string;
  readonly error: string;
  /** True when the file's previous (valid) version is served instead; false when it is left out. */
  readonly keptPrevious: boolean;
}

/**
 * Reads every `*.yaml`/`*.yml` file of `dir` into RateLimitConfig resources named after the files.
 * A file that is invalid by itself, or that the set cannot load beside the files before it (a
 * duplicate domain), is left out and reported; when `previous` holds a valid version of that file
 * (the last published one), that version is served instead, so a typo in one file never removes
 * limits that were live. Throws only when the directory cannot be read.
 */
export function loadConfigDirectory(
  dir: string,
  mergeDomainConfigs: boolean,
  previous: ReadonlyMap<string, RateLimitConfigProto> = new Map(),
): LoadedDirectory {
  const names = fs
    .readdirSync(dir)
    .filter((n) => !n.startsWith('.') && YAML_FILE.test(n))
    .sort();
  const candidates: Array<{ file: string; resource: RateLimitConfigProto }> = [];
  const problems: DirectoryProblem[] = [];
  const byResource = new Map<string, string>();
  const fail = (file: string, error: string): void => {
    const old = previous.get(file);
    problems.push({ file, error, keptPrevious: old !== undefined });
    if (old !== undefined) candidates.push({ file, resource: old });
  };
  for (const name of names) {
    const full = path.join(dir, name);
    let st: fs.Stats | undefined;
    try {
      st = fs.statSync(full, { throwIfNoEntry: false });
    } catch {
      st = undefined;
    }
    if (st === undefined || !st.isFile()) continue;
    let content: string;
    try {
      content = fs.readFileSync(full, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue;
      fail(name, `${name}: error loading config file: ${errorMessage(err)}`);
      continue;
    }
    const resourceName = name.replace(YAML_FILE, '');
    const other = byResource.get(resourceName);
    if (other !== undefined) {
      problems.push({ file: name, error: `${name}: resource name '${resourceName}' is already used by ${other}`, keptPrevious: false });
      continue;
    }
    byResource.set(resourceName, name);
    try {
      candidates.push({ file: name, resource: yamlToRateLimitConfig(name, content, resourceName) });
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      fail(name, err.message);
    }
  }
  // The set as the service will load it from these very resources (duplicate domains, merges).
  const loads = (set: ReadonlyArray<{ file: string; resource: RateLimitConfigProto }>): string | undefined => {
    try {
      const docs = set.map((c) => ({ name: c.file, root: rateLimitConfigToObject(c.resource).root }));
      loadConfigFromObjects(docs, { mergeDomainConfig: mergeDomainConfigs, stats: new StatsStore() });
      return undefined;
    } catch (err) {
      if (err instanceof ConfigError) return err.message;
      throw err;
    }
  };
  let accepted = candidates;
  if (loads(candidates) !== undefined) {
    // Rare: find the files the set cannot take, in name order (upstream names the later file).
    accepted = [];
    for (const c of candidates) {
      const error = loads([...accepted, c]);
      if (error === undefined) accepted.push(c);
      else problems.push({ file: c.file, error, keptPrevious: false });
    }
  }
  return { files: accepted.map((c) => c.file), resources: accepted.map((c) => c.resource), problems };
}

export interface DirectoryPublisherOptions {
  readonly dir: string;
  readonly server: ManagementServer;
  readonly logger?: ManagementServerLogger;
  /** Versions are `<versionPrefix><n>` (default ''). */
  readonly versionPrefix?: string;
  /** Validate the set with MERGE_DOMAIN_CONFIG on (default false). */
  readonly mergeDomainConfigs?: boolean;
  /** Quiet time after the last fs event before reloading (default 100 ms). */
  readonly debounceMs?: number;
  /** How often a directory that does not exist or cannot be watched is retried (default 1000 ms). */
  readonly retryMs?: number;
}

export class DirectoryPublisher {
  private readonly dir: string;
  private readonly server: ManagementServer;
  private readonly logger: ManagementServerLogger;
  private readonly prefix: string;
  private readonly merge: boolean;
  private readonly watcher: DirectoryWatcher;
  private counter = 0;
  private published: Buffer[] | undefined;
  /** The served resource of each file, so a file that turns invalid keeps its last good version. */
  private lastGood = new Map<string, RateLimitConfigProto>();
  private stopped = false;

  constructor(opts: DirectoryPublisherOptions) {
    this.dir = path.resolve(opts.dir);
    this.server = opts.server;
    this.logger = opts.logger ?? silentLogger;
    this.prefix = opts.versionPrefix ?? '';
    this.merge = opts.mergeDomainConfigs ?? false;
    this.watcher = new DirectoryWatcher({
      onChange: () => this.reload(),
      logger: this.logger,
      debounceMs: opts.debounceMs,
      retryMs: opts.retryMs,
    });
  }

  /** The last published version ('' before the first). */
  get version(): string {
    return this.counter === 0 ? '' : `${this.prefix}${this.counter}`;
  }

  /** Starts watching and loads the directory once (publishing it when valid). */
  start(): boolean {
    // Watch first, so no change made after the read is missed.
    this.watcher.watch(this.dir);
    return this.reload();
  }

  stop(): void {
    this.stopped = true;
    this.watcher.close();
  }

  /**
   * Re-reads the directory and publishes what it can when that differs from what is served. False
   * when a file had to be left out or kept at its previous version, or the directory is unreadable.
   */
  reload(): boolean {
    if (this.stopped) return false;
    let loaded: LoadedDirectory;
    try {
      loaded = loadConfigDirectory(this.dir, this.merge, this.lastGood);
    } catch (err) {
      const msg = err instanceof Error ? err.message : String(err);
      this.logger.error(
        `config directory ${this.dir} not published: ${msg}; ${this.counter === 0 ? 'nothing is served yet' : `still serving version '${this.version}'`}`,
      );
      return false;
    }
    for (const p of loaded.problems) {
      this.logger.error(
        p.keptPrevious
          ? `config directory ${this.dir}: ${p.file} keeps its previous version: ${p.error}`
          : `config directory ${this.dir}: ${p.file} left out: ${p.error}`,
      );
    }
    this.lastGood = new Map(loaded.files.map((f, i) => [f, loaded.resources[i]!]));
    const encoded = loaded.resources.map((r) => Buffer.from(RateLimitConfigProto.encode(r).finish()));
    if (this.published !== undefined && sameBuffers(this.published, encoded)) {
      this.logger.info(`config directory ${this.dir} unchanged; still serving version '${this.version}'`);
      return loaded.problems.length === 0;
    }
    this.counter++;
    this.published = encoded;
    this.server.setSnapshot(this.version, loaded.resources);
    this.logger.info(
      `serving version '${this.version}': ${loaded.resources.length} resource(s)${loaded.resources.length > 0 ? ` (${loaded.resources.map((r) => r.name).join(', ')})` : ''}`,
    );
    return loaded.problems.length === 0;
  }
}

function sameBuffers(a: readonly Buffer[], b: readonly Buffer[]): boolean {
  return a.length === b.length && a.every((x, i) => x.equals(b[i]!));
}
