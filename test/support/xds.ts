/**
 * A controllable in-test ADS server (a thin wrapper over the ManagementServer of
 * src/xds-server/management-server.ts): records every DiscoveryRequest with its stream's
 * headers, serves whatever resource set and version the test pushes, and can be stopped and
 * restarted on the same port. Always `await server.stop()` (afterEach) so no handle stays open.
 *
 *   const xds = await TestXdsServer.start();
 *   xds.push('1', [rlc('one', 'example', [...])]);
 *   await xds.waitForRequest((r) => r.kind === 'ack' && r.request.versionInfo === '1');
 */
import * as fs from 'node:fs';
import type { DiscoveryRequest } from '../../generated/envoy/service/discovery/v3/discovery';
import type { Any } from '../../generated/google/protobuf/any';
import {
  type DeepPartial,
  RateLimitConfig as RateLimitConfigProto,
  type RateLimitDescriptor,
} from '../../generated/ratelimit/config/ratelimit/v3/rls_conf';
import {
  ManagementServer,
  type ManagementServerLogger,
  type ManagementServerTlsOptions,
  type ObservedRequest,
  type SentResponse,
} from '../../src/xds-server/management-server';

export type { ObservedRequest, SentResponse } from '../../src/xds-server/management-server';

export interface TestXdsServerOptions {
  readonly host?: string;
  readonly port?: number;
  /** Paths of the server cert/key and, for mTLS, of the CA that signs client certs. */
  readonly tls?: { readonly cert: string; readonly key: string; readonly clientCa?: string };
  readonly logger?: ManagementServerLogger;
}

/** Builds a RateLimitConfig from a partial (proto field names, camelCase). */
export function rlc(name: string, domain: string, descriptors: DeepPartial<RateLimitDescriptor>[] = []): RateLimitConfigProto {
  return RateLimitConfigProto.fromPartial({ name, domain, descriptors });
}

export class TestXdsServer {
  readonly server: ManagementServer;
  /** Every request received, in order, across restarts. */
  readonly requests: ObservedRequest[] = [];
  /** Every response sent, in order, across restarts. */
  readonly responses: SentResponse[] = [];
  /** Log lines of the server (`info|warn|error: …`). */
  readonly logs: string[] = [];

  private constructor(opts: TestXdsServerOptions) {
    let tls: ManagementServerTlsOptions | undefined;
    if (opts.tls !== undefined) {
      tls = {
        cert: fs.readFileSync(opts.tls.cert),
        key: fs.readFileSync(opts.tls.key),
        clientCa: opts.tls.clientCa === undefined ? undefined : fs.readFileSync(opts.tls.clientCa),
      };
    }
    const capture: ManagementServerLogger = {
      info: (m) => {
        this.logs.push(`info: ${m}`);
        opts.logger?.info(m);
      },
      warn: (m) => {
        this.logs.push(`warn: ${m}`);
        opts.logger?.warn(m);
      },
      error: (m) => {
        this.logs.push(`error: ${m}`);
        opts.logger?.error(m);
      },
    };
    this.server = new ManagementServer({ host: opts.host ?? '127.0.0.1', port: opts.port ?? 0, tls, logger: capture });
    this.server.onRequest((r) => this.requests.push(r));
    this.server.onResponse((r) => this.responses.push(r));
  }

  /** Creates and starts a server (port 0 by default: read `port`/`address` afterwards). */
  static async start(opts: TestXdsServerOptions = {}): Promise<TestXdsServer> {
    const s = new TestXdsServer(opts);
    await s.server.start();
    return s;
  }

  get port(): number {
    return this.server.port;
  }

  /** `host:port` for CONFIG_GRPC_XDS_SERVER_URL. */
  get address(): string {
    return this.server.address;
  }

  get openStreams(): number {
    return this.server.openStreams;
  }

  /** Serves `resources` (RateLimitConfig messages or raw Any values) as `version`, pushing it now. */
  push(version: string, resources: ReadonlyArray<RateLimitConfigProto | Any>): void {
    this.server.setSnapshot(version, resources);
  }

  /**
   * Stops listening and breaks every open stream; `restart()` listens again on the same port and
   * serves the last pushed snapshot to the streams that reconnect.
   */
  async stop(): Promise<void> {
    await this.server.stop();
  }

  async restart(): Promise<void> {
    await this.server.start();
  }

  /** The requests for which `pred` holds. */
  find(pred: (r: ObservedRequest) => boolean): ObservedRequest[] {
    return this.requests.filter(pred);
  }

  /** Resolves with the first request (from index `from`) matching `pred`; rejects after `timeoutMs`. */
  async waitForRequest(pred: (r: ObservedRequest) => boolean, timeoutMs = 5000, from = 0): Promise<ObservedRequest> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const hit = this.requests.slice(from).find(pred);
      if (hit !== undefined) return hit;
      if (Date.now() > deadline) {
        throw new Error(
          `no matching xDS request within ${timeoutMs} ms; got:\n${this.requests.map((r) => describe(r)).join('\n')}`,
        );
      }
      await new Promise((r) => setTimeout(r, 10));
    }
  }
}

/** One line per request, for failure messages. */
export function describe(r: ObservedRequest): string {
  const q: DiscoveryRequest = r.request;
  return `#${r.streamId} ${r.kind}${r.stale ? '(stale)' : ''} node=${r.nodeId} version=${JSON.stringify(q.versionInfo)} nonce=${JSON.stringify(q.responseNonce)}${q.errorDetail ? ` error=${JSON.stringify(q.errorDetail.message)}` : ''}`;
}
