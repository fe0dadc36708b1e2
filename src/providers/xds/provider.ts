/**
 * The xDS config provider (CONFIG_TYPE=GRPC_XDS_SOTW; upstream `provider/xds_grpc_sotw_provider.go`
 * on go-control-plane's SotW ADS client): one bidirectional
 * `envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources` stream to the
 * management server, subscribed (wildcard) to `ratelimit.config.ratelimit.v3.RateLimitConfig`.
 *
 * Requests. Every request carries `node {id, metadata}` (metadata: CONFIG_GRPC_XDS_NODE_METADATA as
 * Struct string values, left out when empty), the type URL and no resource names:
 * - initial request of each stream: `version_info` = the last ACKed version ('' before the first),
 *   `response_nonce` '' (so a reconnect tells the server what the client still runs);
 * - ACK: `version_info` = response.version_info, `response_nonce` = response.nonce;
 * - NACK: `version_info` = the last ACKed version, `response_nonce` = response.nonce,
 *   `error_detail` = google.rpc.Status{code: 0 (as upstream), message: the error}.
 *
 * Per response (State of the World: the resources replace the whole config):
 * 0. its bytes are sized before anything is decoded (response-scan.ts, the stream's deserializer):
 *    more resources than CONFIG_MAX_RESOURCES, more resource bytes than CONFIG_MAX_BYTES or more
 *    descriptors than CONFIG_MAX_DESCRIPTORS is a failure (4) at once, with the cap in the NACK;
 * 1. every Any must be a RateLimitConfig (type URL ending in `/ratelimit.config.ratelimit.v3.RateLimitConfig`)
 *    that decodes; otherwise the error is `resource <i> (<type url>): …`;
 * 2. all resources are loaded together by the config builder (`loadConfigFromObjects`: the YAML validation and error
 *    texts, prefixed with RateLimitConfig.name), MERGE_DOMAIN_CONFIG read now via
 *    `mergeDomainConfig()`; an empty resource list is an empty config (0 domains);
 * 3. success: `store.update(config)`, then ACK, then log `xDS config version <v> accepted`;
 * 4. failure (1 or 2): `store.fail(err)` (config_load_error +1, the old config stays), NACK, and a
 *    warning `xDS config version <v> rejected (NACK): <error>`.
 *
 * Connecting, and how CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL and XDS_CLIENT_BACKOFF_* interact:
 * - Each attempt creates a fresh gRPC channel and opens the stream on it at once (no
 *   wait-for-ready: a failed connection fails the stream, with grpc-js's own reconnect backoff out
 *   of the way). The attempt is *connected* once the channel reached READY (TCP, TLS and HTTP/2
 *   up) or a response arrived.
 * - An attempt that ends without ever being connected (refused, unreachable, TLS handshake
 *   failure, connect timeout) is a failed connection attempt: the next one starts after
 *   `connectRetryIntervalMs`, a fixed interval, however many attempts fail. The backoff does not
 *   advance. Before the first stream and after each lost stream, this is how the client waits for
 *   the server to come (back).
 * - A connected stream that ends (any status, including a clean end from the server) is a lost
 *   stream: the next attempt starts after the jittered, doubling backoff delay (`reconnectBackoff`);
 *   the backoff is reset first when that stream delivered at least one response, so a server that
 *   drops a working stream is re-dialled after about XDS_CLIENT_BACKOFF_INITIAL_INTERVAL, and one
 *   that keeps accepting then dropping streams without answering is backed off up to the max.
 * - So after a loss the wait is: one backoff delay, then connection attempts every
 *   `connectRetryIntervalMs` until one connects. Every reconnect (either kind) logs one warning.
 * - While disconnected the store keeps the last good config.
 *
 * Lifecycle: `start()` starts connecting and returns at once (it throws only for unusable
 * settings: unreadable TLS files, a client cert without key, an invalid header name). The store
 * gets its first event with the first response (success or failure), which is what the app waits
 * for with `store.waitForFirst()` unless FORCE_START_WITHOUT_INITIAL_CONFIG. `stop()` cancels the
 * stream, closes the channel and clears the timer; the provider cannot be restarted.
 */
import * as fs from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import { Node } from '../../../generated/envoy/config/core/v3/base';
import { AggregatedDiscoveryServiceService } from '../../../generated/envoy/service/discovery/v3/ads';
import { DiscoveryRequest, type DiscoveryResponse } from '../../../generated/envoy/service/discovery/v3/discovery';
import { Backoff } from '../../platform/backoff';
import type { AlgorithmRestriction } from '../../core/store';
import { ConfigError, type RateLimitConfig } from '../../config/types';
import { ConfigBuilder, type BuildSource } from '../config-builder';
import type { XdsSettings } from '../../settings/settings';
import type { StatsStore } from '../../stats/store';
import type { ConfigStore, ProviderLogger } from '../config-store';
import { RATE_LIMIT_CONFIG_TYPE_URL } from './convert';
import { isRefused, type RefusedResponse, type ResponseCaps, type ScannedResponse, scanResponse } from './response-scan';
import { errorMessage } from '../../platform/errors';

export { RATE_LIMIT_CONFIG_TYPE_URL } from './convert';

export interface XdsProviderOptions<F> {
  readonly settings: XdsSettings;
  /** MERGE_DOMAIN_CONFIG, read at each response (upstream re-reads it from the environment). */
  readonly mergeDomainConfig: () => boolean;
  /** Where the loaded configs register their rule stats. */
  readonly stats: StatsStore;
  readonly store: ConfigStore<F>;
  readonly logger: ProviderLogger;
  /** Uniform in [0, 1) for the backoff jitter (default Math.random). */
  readonly random?: () => number;
  /** Algorithms the counter store cannot apply (configs using them are NACKed). */
  readonly restrictions?: readonly AlgorithmRestriction[];
  /** Builds the configs (default: one of its own on `stats`). */
  readonly builder?: ConfigBuilder;
  /** CONFIG_MAX_BYTES: a response whose resources hold more is NACKed; 0 = no limit. */
  readonly maxBytes?: number;
  /** CONFIG_MAX_DESCRIPTORS: a config with more descriptors is NACKed; 0 = no limit. */
  readonly maxDescriptors?: number;
  /** CONFIG_MAX_RESOURCES: a response with more resources is NACKed; 0 = no limit. */
  readonly maxResources?: number;
}

/** The ADS client whose responses are sized before they are decoded (response-scan.ts). */
type AdsClient = grpc.Client & {
  streamAggregatedResources(metadata: grpc.Metadata): grpc.ClientDuplexStream<DiscoveryRequest, ScannedResponse>;
};
type AdsClientConstructor = new (address: string, credentials: grpc.ChannelCredentials, options?: grpc.ChannelOptions) => AdsClient;

/** A client class whose StreamAggregatedResources deserializer refuses responses over `caps` (nothing decoded). */
function adsClientClass(caps: ResponseCaps): AdsClientConstructor {
  const base = AggregatedDiscoveryServiceService.streamAggregatedResources;
  return grpc.makeGenericClientConstructor(
    { streamAggregatedResources: { ...base, responseDeserialize: (value: Buffer): ScannedResponse => scanResponse(value, caps) } },
    'AggregatedDiscoveryService',
  ) as unknown as AdsClientConstructor;
}

/** One connection attempt: a channel and the stream on it. */
interface Attempt {
  readonly client: AdsClient;
  readonly call: grpc.ClientDuplexStream<DiscoveryRequest, ScannedResponse>;
  connected: boolean;
  responses: number;
  ended: boolean;
}

function readTlsFile(variable: string, file: string): Buffer {
  try {
    return fs.readFileSync(file);
  } catch (err) {
    throw new Error(`xDS TLS: cannot read ${variable} ${file}: ${errorMessage(err)}`);
  }
}

/** The channel credentials for the settings (throws for unusable TLS settings). */
export function xdsChannelCredentials(tls: XdsSettings['tls']): grpc.ChannelCredentials {
  if (!tls.enabled) return grpc.credentials.createInsecure();
  if ((tls.clientCertFile === '') !== (tls.clientKeyFile === '')) {
    throw new Error('xDS TLS: CONFIG_GRPC_XDS_CLIENT_TLS_CERT and CONFIG_GRPC_XDS_CLIENT_TLS_KEY must be set together');
  }
  // No CA file: the system roots (grpc-js default), as upstream's tls.Config without RootCAs.
  const ca = tls.serverCaFile === '' ? null : readTlsFile('CONFIG_GRPC_XDS_SERVER_TLS_CACERT', tls.serverCaFile);
  const cert = tls.clientCertFile === '' ? null : readTlsFile('CONFIG_GRPC_XDS_CLIENT_TLS_CERT', tls.clientCertFile);
  const key = tls.clientKeyFile === '' ? null : readTlsFile('CONFIG_GRPC_XDS_CLIENT_TLS_KEY', tls.clientKeyFile);
  return grpc.credentials.createSsl(ca, key, cert);
}

/** The grpc-js channel options for the settings. */
export function xdsChannelOptions(settings: XdsSettings): grpc.ChannelOptions {
  const options: grpc.ChannelOptions = {};
  // SNI and certificate name check against the SAN instead of the host of the server URL.
  if (settings.tls.enabled && settings.tls.serverSan !== '') options['grpc.ssl_target_name_override'] = settings.tls.serverSan;
  if (settings.maxMsgSizeInBytes > 0) options['grpc.max_receive_message_length'] = settings.maxMsgSizeInBytes;
  return options;
}

/**
 * The delays before re-dialling a lost stream (XDS_CLIENT_BACKOFF_*): attempt n waits
 * `min(initial × 2ⁿ, max)`; with XDS_CLIENT_BACKOFF_JITTER on, that times `1 + f × (2r − 1)` for the
 * random factor f (clamped to [0, 1]), i.e. anywhere in `base × [1 − f, 1 + f)`, then capped at the max
 * (at the cap the jitter only shortens waits); jitter off or f = 0 is the plain doubling. This fixes
 * upstream's use of the random factor as the growth factor (section 10 item 8 of the behaviour notes).
 * Non-positive intervals are raised to 1 ms, and a max below the initial interval is raised to it.
 */
export function reconnectBackoff(settings: XdsSettings['backoff'], random?: () => number): Backoff {
  return new Backoff({
    initialMs: settings.initialIntervalMs,
    maxMs: settings.maxIntervalMs,
    jitter: settings.jitter ? { spread: settings.randomFactor } : 'none',
    random,
  });
}

export class XdsProvider<F> {
  private readonly settings: XdsSettings;
  private readonly mergeDomainConfig: () => boolean;
  private readonly builder: ConfigBuilder;
  private readonly ownBuilder: boolean;
  private readonly maxDescriptors: number;
  private readonly Client: AdsClientConstructor;
  /** Responses waiting while an earlier one is still being built (handled in order). */
  private readonly queue: Array<() => void | Promise<void>> = [];
  private draining = false;
  private readonly store: ConfigStore<F>;
  private readonly logger: ProviderLogger;
  private readonly backoff: Backoff;
  private readonly connectRetryMs: number;
  private readonly node: Node;

  private credentials: grpc.ChannelCredentials | undefined;
  private metadata: grpc.Metadata | undefined;
  private channelOptions: grpc.ChannelOptions = {};
  private attempt: Attempt | undefined;
  private timer: NodeJS.Timeout | undefined;
  private ackedVersion = '';
  private started = false;
  private stopped = false;
  private readonly restrictions: readonly AlgorithmRestriction[] | undefined;

  constructor(opts: XdsProviderOptions<F>) {
    this.settings = opts.settings;
    this.mergeDomainConfig = opts.mergeDomainConfig;
    this.ownBuilder = opts.builder === undefined;
    this.builder = opts.builder ?? new ConfigBuilder({ stats: opts.stats });
    this.maxDescriptors = opts.maxDescriptors ?? 0;
    this.Client = adsClientClass({ maxBytes: opts.maxBytes ?? 0, maxDescriptors: this.maxDescriptors, maxResources: opts.maxResources ?? 0 });
    this.store = opts.store;
    this.logger = opts.logger;
    this.restrictions = opts.restrictions;
    this.backoff = reconnectBackoff(opts.settings.backoff, opts.random);
    this.connectRetryMs = Math.max(1, opts.settings.connectRetryIntervalMs);
    const md = opts.settings.nodeMetadata;
    this.node = Node.fromPartial({
      id: opts.settings.nodeId,
      metadata: Object.keys(md).length > 0 ? { ...md } : undefined,
    });
  }

  /** The last ACKed version ('' before the first). */
  get lastAckedVersion(): string {
    return this.ackedVersion;
  }

  /** True while a stream is connected. */
  get connected(): boolean {
    return this.attempt !== undefined && this.attempt.connected && !this.attempt.ended;
  }

  /** Starts connecting and returns at once. Idempotent; throws after stop() or for unusable settings. */
  start(): void {
    if (this.stopped) throw new Error('XdsProvider: start() after stop()');
    if (this.started) return;
    this.credentials = xdsChannelCredentials(this.settings.tls);
    const metadata = new grpc.Metadata();
    for (const [k, v] of Object.entries(this.settings.additionalHeaders)) {
      try {
        metadata.add(k, v);
      } catch {
        // Not grpc-js's text: it quotes an illegal value, and these values are secrets (tokens).
        throw new Error(`CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: invalid header ${JSON.stringify(k)}: gRPC refuses its name or its value (not shown)`);
      }
    }
    this.metadata = metadata;
    this.channelOptions = xdsChannelOptions(this.settings);
    this.started = true;
    this.logger.info(`xDS: connecting to ${this.settings.serverUrl} as node '${this.settings.nodeId}'`);
    this.connect();
  }

  /** Cancels the stream, closes the channel, clears the timer. Idempotent. */
  stop(): void {
    this.stopped = true;
    this.queue.length = 0;
    if (this.ownBuilder) this.builder.close();
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    const a = this.attempt;
    this.attempt = undefined;
    if (a !== undefined) this.closeAttempt(a);
  }

  private connect(): void {
    if (this.stopped) return;
    const client = new this.Client(this.settings.serverUrl, this.credentials!, this.channelOptions);
    const call = client.streamAggregatedResources(this.metadata!.clone());
    const attempt: Attempt = { client, call, connected: false, responses: 0, ended: false };
    this.attempt = attempt;
    this.watchReady(attempt);

    call.on('metadata', () => {
      attempt.connected = true;
    });
    call.on('data', (resp: ScannedResponse) => this.onResponse(attempt, resp));
    // Non-OK statuses are emitted as 'error' before 'status'; 'status' is the one terminal event.
    call.on('error', () => {});
    call.on('status', (status: grpc.StatusObject) => this.onStreamEnd(attempt, status));
    this.send(attempt, { versionInfo: this.ackedVersion, responseNonce: '' });
  }

  /** Marks the attempt connected when its channel reaches READY. */
  private watchReady(attempt: Attempt): void {
    const channel = attempt.client.getChannel();
    const check = (): void => {
      if (attempt.ended || attempt.connected) return;
      let state: grpc.connectivityState;
      try {
        state = channel.getConnectivityState(false);
      } catch {
        return;
      }
      if (state === grpc.connectivityState.READY) {
        attempt.connected = true;
        return;
      }
      if (state === grpc.connectivityState.SHUTDOWN) return;
      try {
        channel.watchConnectivityState(state, Infinity, check);
      } catch {
        // The channel was closed in between.
      }
    };
    check();
  }

  private send(attempt: Attempt, fields: Partial<DiscoveryRequest>): void {
    if (attempt.ended || this.attempt !== attempt) return;
    attempt.call.write(
      DiscoveryRequest.fromPartial({
        node: this.node,
        typeUrl: RATE_LIMIT_CONFIG_TYPE_URL,
        ...fields,
      }),
    );
  }

  private onResponse(attempt: Attempt, resp: ScannedResponse): void {
    if (this.stopped || this.attempt !== attempt || attempt.ended) return;
    attempt.connected = true;
    attempt.responses++;

    // A response over a cap was never decoded: its NACK still waits for the builds before it.
    if (isRefused(resp)) this.enqueue(() => this.rejected(attempt, resp, new ConfigError(resp.refused)));
    else this.enqueue(() => this.load(attempt, resp));
  }

  /** Runs `task` after the responses before it (one config is built at a time, in order). */
  private enqueue(task: () => void | Promise<void>): void {
    this.queue.push(task);
    if (!this.draining) this.drain();
  }

  private drain(): void {
    this.draining = true;
    for (let task = this.queue.shift(); task !== undefined; task = this.queue.shift()) {
      const pending = task();
      if (pending !== undefined) {
        void pending.then(() => this.drain());
        return;
      }
    }
    this.draining = false;
  }

  /** Builds the response's config, then swaps it in and ACKs, or counts the failure and NACKs. */
  private load(attempt: Attempt, resp: DiscoveryResponse): void | Promise<void> {
    if (this.stopped) return;
    let built: RateLimitConfig | Promise<RateLimitConfig>;
    try {
      const source: BuildSource = { kind: 'resources', resources: resp.resources };
      built = this.builder.build(source, {
        mergeDomainConfig: this.mergeDomainConfig(),
        restrictions: this.restrictions,
        maxDescriptors: this.maxDescriptors,
      });
    } catch (err) {
      this.rejected(attempt, resp, err);
      return;
    }
    if (!(built instanceof Promise)) {
      this.accepted(attempt, resp, built);
      return;
    }
    return built.then(
      (config) => this.accepted(attempt, resp, config),
      (err: unknown) => this.rejected(attempt, resp, err),
    );
  }

  private accepted(attempt: Attempt, resp: DiscoveryResponse, config: RateLimitConfig): void {
    if (this.stopped) return;
    this.store.update(config, { kind: 'xds', version: resp.versionInfo });
    this.ackedVersion = resp.versionInfo;
    this.send(attempt, { versionInfo: resp.versionInfo, responseNonce: resp.nonce });
    this.logger.info(`xDS config version ${resp.versionInfo} accepted`);
  }

  private rejected(attempt: Attempt, resp: DiscoveryResponse | RefusedResponse, err: unknown): void {
    if (this.stopped) return;
    const message = errorMessage(err);
    this.store.fail(err, { kind: 'xds', version: resp.versionInfo });
    this.send(attempt, {
      versionInfo: this.ackedVersion,
      responseNonce: resp.nonce,
      errorDetail: { code: 0, message, details: [] },
    });
    this.logger.warn(`xDS config version ${resp.versionInfo} rejected (NACK): ${message}`);
  }

  private onStreamEnd(attempt: Attempt, status: grpc.StatusObject): void {
    if (attempt.ended) return;
    attempt.ended = true;
    if (this.stopped || this.attempt !== attempt) return;
    this.attempt = undefined;
    this.closeAttempt(attempt);

    const why = `${grpc.status[status.code] ?? status.code}: ${status.details}`;
    let delay: number;
    if (attempt.connected) {
      if (attempt.responses > 0) this.backoff.reset();
      delay = this.backoff.next();
      this.logger.warn(
        `xDS stream to ${this.settings.serverUrl} closed (${why}); keeping the current configuration, reconnecting in ${delay} ms`,
      );
    } else {
      delay = this.connectRetryMs;
      this.logger.warn(`xDS connection to ${this.settings.serverUrl} failed (${why}); retrying in ${delay} ms`);
    }
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.connect();
    }, delay);
  }

  private closeAttempt(attempt: Attempt): void {
    attempt.ended = true;
    try {
      attempt.call.cancel();
    } catch {
      // already finished
    }
    attempt.client.close();
  }
}
