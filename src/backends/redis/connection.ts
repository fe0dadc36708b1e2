/**
 * Redis connections for the counter store, built from the REDIS_* (or REDIS_PERSECOND_*) settings
 * the way upstream's `src/redis/driver_impl.go` builds its radix clients:
 *
 * - `single`: `host:port` when the socket type is `tcp`, a unix socket path when it is `unix`
 *   (upstream's default); `sentinel`: `master,host:port,host:port…`; `cluster`: `host:port,…` seeds.
 *   A `redis://` / `rediss://` URL is also accepted where a `host:port` is (user, password and db
 *   taken from it; `rediss` turns TLS on).
 * - Auth: `password` or `user:password`, split on the first `:` (ACL users). In sentinel mode
 *   REDIS_AUTH is for the master and REDIS_SENTINEL_AUTH for the sentinels (same split rule).
 * - TLS (`_TLS`): CA, client certificate and key from the shared REDIS_TLS_* files when set; with
 *   REDIS_TLS_SKIP_HOSTNAME_VERIFICATION only the host name check is skipped, the chain is still
 *   verified. In sentinel mode TLS is used for the master and the sentinels alike.
 * - Timeouts: the connect timeout and every command's timeout are `_TIMEOUT`, so no command waits
 *   longer. Commands are never queued while disconnected (they fail at once) and never retried by
 *   the client (`maxRetriesPerRequest: 0`, no resend after a reconnect), so a hit is counted at most
 *   once. After the first successful connect the client reconnects by itself, forever, with a
 *   backoff of 50 ms doubling to 2 s.
 * - Pool: `_POOL_SIZE` connections in single and sentinel modes, handed out round-robin per
 *   pipeline (one connection already pipelines; several spread head-of-line blocking). In cluster
 *   mode ioredis keeps one connection per node and `_POOL_SIZE` is not used.
 * - Start-up: `connect()` retries until every connection is up and `PING` answers `PONG`, with
 *   upstream's backoff (REDIS_STARTUP_INITIAL_INTERVAL doubling to REDIS_STARTUP_MAX_INTERVAL, with
 *   jitter), forever unless REDIS_STARTUP_MAX_ELAPSED_TIME > 0.
 */
import fs from 'node:fs';
import type { ConnectionOptions } from 'node:tls';
import { Cluster, Redis, type ClusterOptions, type RedisOptions } from 'ioredis';
import type { RedisConnectionSettings, RedisSettings } from '../../settings/settings';
import type { Counter, Gauge, StatsStore } from '../../stats/store';
import type { Logger } from '../../telemetry/logger';
import { Backoff } from '../../platform/backoff';
import type { NodeCircuits } from './nodes';
import { SentinelWatch, waitForPromotion } from './sentinel';
import { StoreError } from '../../core/store';

export type RedisClient = Redis | Cluster;

/** Whether a command written to `c` now goes on the wire (what ioredis checks before writing). */
export function canWrite(c: Redis): boolean {
  return c.status === 'ready' && c.stream.writable;
}

/** The TLS and start-up settings both instances share (REDIS_TLS_*, REDIS_STARTUP_*). */
export type SharedRedisSettings = Pick<
  RedisSettings,
  'tlsClientCertFile' | 'tlsClientKeyFile' | 'tlsCaCertFile' | 'tlsSkipHostnameVerification' | 'startup'
>;

export interface Credentials {
  username?: string | undefined;
  password?: string | undefined;
}

/** `password` or `user:password`, split on the first `:`; empty means no auth. */
export function parseAuth(auth: string): Credentials {
  if (auth === '') return {};
  const i = auth.indexOf(':');
  return i < 0 ? { password: auth } : { username: auth.slice(0, i), password: auth.slice(i + 1) };
}

/** Hides passwords in `scheme://user:pass@host` and `user:pass@host` forms (every item of a list). */
export function maskUrl(url: string): string {
  return url.replace(/(^|,|\/\/)([^,@/:]*):([^,@/]*)@/g, (_m, lead: string, user: string) => `${lead}${user}:***@`);
}

export interface Address extends Credentials {
  host: string;
  port: number;
  db?: number | undefined;
  /** True for a `rediss://` URL. */
  tls?: boolean | undefined;
}

/** `host:port`, `[v6]:port`, `host` (port 6379) or a `redis://` / `rediss://` URL. */
export function parseAddress(text: string): Address {
  const s = text.trim();
  if (/^rediss?:\/\//i.test(s)) {
    const u = new URL(s);
    const db = u.pathname.length > 1 ? Number(u.pathname.slice(1)) : undefined;
    return {
      host: u.hostname.replace(/^\[(.*)\]$/, '$1'),
      port: u.port === '' ? 6379 : Number(u.port),
      username: u.username === '' ? undefined : decodeURIComponent(u.username),
      password: u.password === '' ? undefined : decodeURIComponent(u.password),
      db: db !== undefined && Number.isInteger(db) ? db : undefined,
      tls: u.protocol.toLowerCase() === 'rediss:',
    };
  }
  const v6 = /^\[([^\]]+)\](?::(\d+))?$/.exec(s);
  if (v6) return { host: v6[1]!, port: v6[2] === undefined ? 6379 : Number(v6[2]) };
  const i = s.lastIndexOf(':');
  if (i < 0) return { host: s, port: 6379 };
  const port = Number(s.slice(i + 1));
  if (!Number.isInteger(port) || port <= 0 || port > 65535) {
    throw new Error(`invalid Redis address ${JSON.stringify(maskUrl(s))}: expected host:port`);
  }
  return { host: s.slice(0, i), port };
}

/** The TLS options of one connection: CA, client cert and key from the files; optional host check. */
export function tlsOptions(shared: SharedRedisSettings): ConnectionOptions {
  const o: ConnectionOptions = {};
  if (shared.tlsCaCertFile !== '') o.ca = fs.readFileSync(shared.tlsCaCertFile);
  if (shared.tlsClientCertFile !== '') o.cert = fs.readFileSync(shared.tlsClientCertFile);
  if (shared.tlsClientKeyFile !== '') o.key = fs.readFileSync(shared.tlsClientKeyFile);
  // Only the name check is skipped: the chain is still verified (rejectUnauthorized stays true).
  if (shared.tlsSkipHostnameVerification) o.checkServerIdentity = () => undefined;
  return o;
}

/** Background reconnect delays after the first successful connect: 50 ms doubling to 2 s. */
const RECONNECT_DELAYS = new Backoff({ initialMs: 50, maxMs: 2000 });

/** The delay before ioredis's reconnect attempt number `times` (from 1). */
export function reconnectDelayMs(times: number): number {
  return RECONNECT_DELAYS.delay(times - 1);
}

export interface RedisConnectionOptions {
  settings: RedisConnectionSettings;
  shared: SharedRedisSettings;
  logger: Logger;
  /** Registers `<statsScope>.cx_active`, `.cx_total` and `.cx_local_close` (upstream pool stats). */
  stats?: StatsStore | undefined;
  /** `ratelimit.redis_pool` or `ratelimit.redis_per_second_pool`. */
  statsScope?: string | undefined;
  /**
   * `ratelimit.redis` or `ratelimit.redis_per_second`: the scope of what the service follows of
   * the server's state (`.auth_failed`, and the store's eviction series).
   */
  stateStatsScope?: string | undefined;
  /** For log lines: `redis` or `redis per-second`. */
  label?: string | undefined;
  /** Jitter source of the start-up backoff (tests inject one). */
  random?: (() => number) | undefined;
  /**
   * Level of the `connecting to` line (default warn: at the default LOG_LEVEL it explains a
   * start-up that waits for Redis; RLQS's connection, opened on first use, says it at info).
   */
  connectingLogLevel?: 'warn' | 'info' | undefined;
  /** The variables of this instance, for hints: `REDIS_` (default) or `REDIS_PERSECOND_`. */
  variablePrefix?: 'REDIS_' | 'REDIS_PERSECOND_' | undefined;
  /**
   * The store's circuits of this instance (nodes.ts); a cluster node's lost or ready connection
   * opens or closes its node's circuit. Without it nothing is opened (RLQS's connection).
   */
  circuits?: NodeCircuits | undefined;
}

interface Tracked {
  wasReady: boolean;
  /** The last error of this connection, for the line that says it was lost. */
  lastError: string;
}

/** Sentinel mode: how long the replica being promoted is asked its ROLE before the writes stay where they are. */
const PROMOTION_WAIT_MS = 10_000;

/** ioredis's `disconnectTimeout`: how long a socket being closed may linger before it is destroyed. */
const DISCONNECT_TIMEOUT_MS = 20;

/** How long the losses of one outage are gathered into its one log line. */
const LOST_LINE_GATHER_MS = 100;

/**
 * One Redis instance as the store sees it: a pool of connections (single, sentinel) or a cluster
 * client. `client()` hands out the connection for the next pipeline.
 */
export class RedisConnection {
  readonly type: RedisConnectionSettings['type'];
  /** The URL with passwords masked, for logs and errors. */
  readonly maskedUrl: string;
  readonly label: string;
  private readonly pool: Redis[] = [];
  private readonly cluster: Cluster | undefined;
  /** Cluster: each node's connection by its `host:port`, kept from ioredis's `+node` / `-node` events. */
  private readonly nodesByAddress = new Map<string, Redis>();
  private rr = 0;
  private started = false;
  private closed = false;
  private readyCount = 0;
  private readonly listeners: Array<() => void> = [];
  private readonly tracked = new WeakMap<Redis, Tracked>();
  private readonly active: Gauge | undefined;
  private readonly total: Counter | undefined;
  private readonly localClose: Counter | undefined;
  private readonly authGauge: Gauge | undefined;
  private readonly oomGauge: Gauge | undefined;
  /** Redis answers writes with OOM (maxmemory reached under `noeviction`): the answer's text. */
  private oom: string | undefined;
  private readonly switches: Counter | undefined;
  private readonly maybeLost: Counter | undefined;
  /** Sentinel mode: the options every pool connection is made with (a switch-over makes new ones). */
  private readonly base: RedisOptions;
  private readonly sentinelWatch: SentinelWatch | undefined;
  /** Sentinel mode: the master (`ip:port`) the sentinels last named. */
  private masterTarget: string | undefined;
  /**
   * Sentinel mode, from the sentinels' `+failover-state-send-slaveof-noone` until the pool has
   * moved: the connections to the master being replaced, and the increments they acknowledged
   * since (which the new master may not have).
   */
  private suspect: { readonly clients: Set<Redis>; since: number; acknowledged: number; via: string } | undefined;
  /** Sentinel mode: when the pool began moving to a new master, until every connection is on it. */
  private moving: { at: number; address: string } | undefined;
  /**
   * Sentinel mode, from the moment the replica being promoted reports the master role until the
   * pool is on it: one connection of its own to it, which every pipeline takes meanwhile, and the
   * increments it acknowledged (lost if the failover is then aborted).
   */
  private interim: { client: Redis; address: string; acknowledged: number } | undefined;
  /** The code of the refusal (`WRONGPASS`, `NOAUTH`…) while the server refuses our credentials. */
  private authRefusal: string | undefined;
  private authError: StoreError | undefined;
  private wake: (() => void) | undefined;
  private sleepTimer: NodeJS.Timeout | undefined;
  private lastError = '';
  private lastErrorCode: unknown;
  /** Pool connections lost since the last line about it: one line per outage, not per connection. */
  private lostSinceLine = 0;
  private lostLineTimer: NodeJS.Timeout | undefined;
  /** A loss was logged and not every connection is back yet. */
  private degraded = false;

  constructor(private readonly options: RedisConnectionOptions) {
    const s = options.settings;
    this.type = s.type;
    this.maskedUrl = maskUrl(s.url);
    this.label = options.label ?? 'redis';
    if (options.stats !== undefined) {
      const scope = options.statsScope ?? 'ratelimit.redis_pool';
      this.active = options.stats.gauge(scope + '.cx_active');
      this.total = options.stats.counter(scope + '.cx_total');
      this.localClose = options.stats.counter(scope + '.cx_local_close');
      const state = options.stateStatsScope ?? 'ratelimit.redis';
      this.authGauge = options.stats.gauge(state + '.auth_failed');
      this.oomGauge = options.stats.gauge(state + '.oom');
      if (s.type === 'sentinel') {
        this.switches = options.stats.counter(state + '.master_switches');
        this.maybeLost = options.stats.counter(state + '.increments_maybe_lost');
      }
    }
    const base = (this.base = this.baseOptions());
    if (s.type === 'cluster') {
      this.cluster = this.createCluster(base);
    } else {
      const size = Math.max(1, s.poolSize);
      for (let i = 0; i < size; i++) this.pool.push(this.track(this.createRedis(base)));
    }
    if (s.type === 'sentinel') this.sentinelWatch = this.createSentinelWatch();
  }

  /** Sentinel mode: how many sentinels' events are listened to now. */
  get sentinelsListening(): number {
    return this.sentinelWatch?.listening ?? 0;
  }

  /** Sentinel mode: true from the start of a failover until the pool has moved (the batcher then counts acknowledgements). */
  get suspecting(): boolean {
    return this.suspect !== undefined;
  }

  /**
   * Sentinel mode, while a failover is under way: `n` increments were acknowledged by `client`;
   * if it is a connection to the master being replaced, they may be lost.
   */
  acknowledged(client: Redis, n: number): void {
    const sus = this.suspect;
    if (sus !== undefined && sus.clients.has(client)) sus.acknowledged += n;
    else if (this.interim !== undefined && client === this.interim.client) this.interim.acknowledged += n;
  }

  private createSentinelWatch(): SentinelWatch {
    const s = this.options.settings;
    const items = s.url.split(',');
    const auth = parseAuth(s.sentinelAuth);
    const connection: RedisOptions = {
      ...credentials(auth),
      connectTimeout: s.timeoutMs,
      disconnectTimeout: DISCONNECT_TIMEOUT_MS,
      retryStrategy: (times) => (this.closed ? null : reconnectDelayMs(times)),
      maxRetriesPerRequest: null,
    };
    if (s.tls) connection.tls = tlsOptions(this.options.shared);
    return new SentinelWatch({
      masterName: items[0]!.trim(),
      sentinels: items.slice(1).map((item) => {
        const a = parseAddress(item);
        return { host: a.host, port: a.port };
      }),
      connection,
      logger: this.options.logger,
      label: this.label,
      onFailoverStart: (replica, via) => this.failoverStarted(replica, via),
      onFailoverAbort: (via) => this.failoverAborted(via),
      onSwitch: (address, via) => this.switchTo(address, via),
    });
  }

  private failoverStarted(replica: string, via: string): void {
    if (this.closed || !this.started || this.suspect !== undefined) return;
    const clients = new Set(this.pool.filter((c) => c.status === 'ready'));
    this.suspect = { clients, since: Date.now(), acknowledged: 0, via };
    this.options.logger.info(
      `${this.label}: ${via} began promoting ${replica} in place of ${this.sentinelMasterName()}: increments the current master acknowledges from now until the writes move may be lost`,
    );
    void this.followPromotion(replica);
  }

  /**
   * The replica being promoted is asked its ROLE until it says master; from then on every
   * pipeline goes to it on a connection of its own, until the pool has moved (the sentinels
   * announce the switch about a second later, once their INFO has seen the promotion).
   */
  private async followPromotion(replica: string): Promise<void> {
    const options = this.directOptions();
    const waiting = (): boolean => this.suspect !== undefined && !this.closed;
    if (!(await waitForPromotion(replica, options, PROMOTION_WAIT_MS, waiting)) || !waiting()) return;
    const i = replica.lastIndexOf(':');
    const client = new Redis({ ...options, host: replica.slice(0, i), port: Number(replica.slice(i + 1)) });
    client.on('error', (err: Error) => this.onError(err));
    try {
      await client.connect();
    } catch {
      client.disconnect();
      return;
    }
    if (!waiting() || this.moving !== undefined) {
      client.disconnect();
      return;
    }
    this.interim = { client, address: replica, acknowledged: 0 };
    this.options.logger.info(`${this.label}: ${replica} reports the master role: writing to it until the sentinels announce the switch`);
  }

  /** The options of a connection to one data node by address (the pool's, without the sentinels; no reconnection). */
  private directOptions(): RedisOptions {
    const s = this.options.settings;
    const o: RedisOptions = { ...this.base, ...credentials(parseAuth(s.auth)), lazyConnect: true, retryStrategy: () => null, reconnectOnError: null };
    if (s.tls) o.tls = tlsOptions(this.options.shared);
    return o;
  }

  private dropInterim(): void {
    const i = this.interim;
    if (i === undefined) return;
    this.interim = undefined;
    i.client.disconnect();
  }

  private failoverAborted(via: string): void {
    if (this.suspect === undefined) return;
    this.suspect = undefined;
    const i = this.interim;
    this.dropInterim();
    this.options.logger.info(`${this.label}: ${via} aborted the failover of ${this.sentinelMasterName()}; the master stays`);
    if (i !== undefined && i.acknowledged > 0) {
      // The replica we wrote to goes back to being a replica: what it counted is thrown away.
      this.maybeLost?.inc(i.acknowledged);
      this.options.logger.warn(`${this.label}: ${i.acknowledged} increments acknowledged by ${i.address} before the failover was aborted may be lost (counted in ratelimit.redis.increments_maybe_lost)`);
    }
  }

  /**
   * The sentinels name `address` as our master: every pool connection not connected to it now
   * is replaced by a new one (which ioredis connects through the sentinels to the master they
   * name, and whose role it checks); the old ones are dropped at once, so nothing more is written
   * to the old master. Said once per switch.
   */
  private switchTo(address: string, via: string): void {
    if (this.closed || !this.started) return;
    const previous = this.masterTarget;
    const first = previous === undefined;
    if (address === previous && this.suspect === undefined) return;
    this.masterTarget = address;
    if (this.interim !== undefined && this.interim.address !== address) this.dropInterim();
    const stale = this.pool.filter((c) => !(c.status === 'ready' && remoteAddress(c) === address));
    const sus = this.suspect;
    this.suspect = undefined;
    if (stale.length === 0) {
      this.dropInterim();
      // After a kill the pool reconnects through the sentinels, and the leader names the promoted
      // node before its +switch-master reaches us: the switch happened all the same.
      if (!first && address !== previous) {
        this.switches?.inc();
        this.options.logger.info(
          `${this.label}: ${via}: ${this.sentinelMasterName()} is now ${address}; all ${this.pool.length} connections on the new master ${address}, reconnected through the sentinels before the switch was announced`,
        );
      }
      return;
    }
    if (!first || sus !== undefined) this.switches?.inc();
    this.options.logger.info(
      `${this.label}: ${via}: ${this.sentinelMasterName()} is now ${address}; moving ${stale.length} of ${this.pool.length} connection${this.pool.length === 1 ? '' : 's'} to it`,
    );
    this.moving = { at: Date.now(), address };
    for (const old of stale) {
      const i = this.pool.indexOf(old);
      this.untrack(old, true);
      old.disconnect();
      const fresh = this.track(this.createRedis(this.base));
      this.pool[i] = fresh;
      fresh.connect().catch(() => undefined);
    }
    if (sus !== undefined && sus.acknowledged > 0) {
      this.maybeLost?.inc(sus.acknowledged);
      this.options.logger.warn(
        `${this.label}: ${sus.acknowledged} increment${sus.acknowledged === 1 ? '' : 's'} acknowledged by the old master after ${sus.via} began the failover may be lost (counted in ratelimit.redis.increments_maybe_lost)`,
      );
    }
    this.changed();
  }

  private sentinelMasterName(): string {
    return this.options.settings.url.split(',')[0]!.trim();
  }

  get isCluster(): boolean {
    return this.cluster !== undefined;
  }

  /** The store's circuits of this instance, if it has them. */
  get circuits(): NodeCircuits | undefined {
    return this.options.circuits;
  }

  /** Connections currently ready (cluster: node connections). */
  get readyConnections(): number {
    return this.readyCount;
  }

  /** Whether commands can be sent now: a pool connection is ready, or the cluster is. */
  get isReady(): boolean {
    if (this.closed) return false;
    if (this.cluster !== undefined) return this.cluster.status === 'ready';
    return this.readyCount > 0;
  }

  get isStarted(): boolean {
    return this.started;
  }

  /** Called whenever a connection becomes ready or is lost. */
  onStateChange(listener: () => void): void {
    this.listeners.push(listener);
  }

  /**
   * The client for the next pipeline: the cluster, or the next ready pool connection (any pool
   * connection when none is ready: its commands then fail at once).
   */
  client(): RedisClient {
    if (this.cluster !== undefined) return this.cluster;
    const interim = this.interim;
    if (interim !== undefined && interim.client.status === 'ready') return interim.client;
    const pool = this.pool;
    const n = pool.length;
    if (n === 1) return pool[0]!;
    for (let k = 0; k < n; k++) {
      const c = pool[this.rr];
      this.rr = this.rr + 1 === n ? 0 : this.rr + 1;
      if (c!.status === 'ready') return c!;
    }
    return pool[this.rr]!;
  }

  /**
   * Cluster: the connection of the master serving `slot` in ioredis's slot map (its public
   * `slots`: slot → node addresses, master first) when it can take a write now; undefined when the
   * map has no entry or that connection is not ready (connecting, lost, or the cluster itself not
   * ready): the cluster's own routing is then used.
   */
  readyMaster(slot: number): Redis | undefined {
    const c = this.cluster;
    if (c === undefined || c.status !== 'ready') return undefined;
    const address = c.slots[slot]?.[0];
    return address === undefined ? undefined : this.readyNode(address);
  }

  /** Cluster: the connection to the node at `address` when the cluster is ready and it can take a write now. */
  readyNode(address: string): Redis | undefined {
    if (this.cluster?.status !== 'ready') return undefined;
    const node = this.nodesByAddress.get(address);
    return node !== undefined && canWrite(node) ? node : undefined;
  }

  /** Cluster: the address (`host:port`) of the master serving `slot` in ioredis's slot map. */
  masterAddress(slot: number): string | undefined {
    return this.cluster?.slots[slot]?.[0];
  }

  /** Cluster: has ioredis reload its slot map (it runs one reload at a time). */
  refreshSlots(): void {
    this.cluster?.refreshSlotsCache();
  }

  /**
   * Connects every connection and checks `PING` → `PONG`, retrying with upstream's backoff.
   * Rejects with `timed out waiting for Redis connection to <url>` once
   * REDIS_STARTUP_MAX_ELAPSED_TIME (when > 0) has passed, or when `close()` is called meanwhile.
   */
  async connect(): Promise<void> {
    const { initialIntervalMs, maxIntervalMs, maxElapsedTimeMs } = this.options.shared.startup;
    // Upstream's jpillora/backoff (factor 2, jitter): the n-th wait is uniform in [min, min·2ⁿ], capped.
    const delays = new Backoff({ initialMs: initialIntervalMs, maxMs: maxIntervalMs, jitter: 'from-initial', random: this.options.random });
    const startedAt = Date.now();
    const s = this.options.settings;
    this.options.logger[this.options.connectingLogLevel ?? 'warn'](
      `connecting to ${this.label} on ${this.maskedUrl} (${s.type}${this.cluster === undefined ? `, pool size ${this.pool.length}` : ''})`,
    );
    for (let attempt = 0; ; attempt++) {
      if (this.closed) throw this.closedError();
      this.lastError = '';
      this.lastErrorCode = undefined;
      try {
        await this.attempt();
        if (this.closed) throw this.closedError();
        this.started = true;
        this.options.logger.info(`connected to ${this.label} on ${this.maskedUrl}`);
        this.sentinelWatch?.start();
        this.changed();
        return;
      } catch (err) {
        if (this.closed) throw this.closedError();
        // "Connection is closed." hides the reason (e.g. WRONGPASS), which came as an error event.
        let message = errorText(err);
        if (this.lastError !== '' && this.lastError !== message) message = `${this.lastError} (${message})`;
        const hint = this.missingSocketHint();
        if (hint !== undefined) message += `; ${hint}`;
        const elapsed = Date.now() - startedAt;
        if (maxElapsedTimeMs > 0 && elapsed >= maxElapsedTimeMs) {
          this.options.logger.error(`${this.label}: giving up on ${this.maskedUrl} after ${elapsed} ms: ${message}`);
          // Upstream's words; the hint only when the address itself is the likely mistake.
          throw new Error(`timed out waiting for Redis connection to ${this.maskedUrl}${hint === undefined ? '' : `: ${this.lastError}; ${hint}`}`, { cause: err });
        }
        let delay = delays.delay(attempt);
        if (maxElapsedTimeMs > 0) delay = Math.max(0, Math.min(delay, maxElapsedTimeMs - elapsed));
        this.options.logger.warn(
          `failed to connect to ${this.label} on ${this.maskedUrl} (attempt ${attempt + 1}): ${message}; retrying in ${delay} ms`,
        );
        await this.sleep(delay);
      }
    }
  }

  /** Quits every connection (bounded by the timeout), then drops them; stops any start-up retry. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.sleepTimer !== undefined) clearTimeout(this.sleepTimer);
    if (this.lostLineTimer !== undefined) clearTimeout(this.lostLineTimer);
    this.wake?.();
    await this.sentinelWatch?.close();
    this.dropInterim();
    const clients: RedisClient[] = this.cluster !== undefined ? [this.cluster] : this.pool;
    await Promise.all(clients.map((c) => this.quit(c)));
    this.changed();
  }

  private async quit(c: RedisClient): Promise<void> {
    if (c.status === 'ready') {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        c.quit().catch(() => undefined),
        new Promise<void>((resolve) => (timer = setTimeout(resolve, Math.max(this.options.settings.timeoutMs, 100)))),
      ]);
      clearTimeout(timer);
    }
    if (c.status === 'end') return;
    // A socket is open (or opening) when connecting or connected; a client waiting to reconnect
    // has none, and disconnect() only cancels its timer.
    const open = c instanceof Cluster || c.status === 'connecting' || c.status === 'connect' || c.status === 'ready';
    // ioredis ends the last socket again even when it is already closed, and arms its
    // disconnectTimeout timer on it, which nothing clears: let that short timer run out here, so
    // that nothing of this connection holds the event loop once close() has resolved.
    const deadSocket = !open && !(c instanceof Cluster) && c.stream !== undefined && c.stream.destroyed;
    c.disconnect();
    if (deadSocket) await new Promise<void>((resolve) => setTimeout(resolve, DISCONNECT_TIMEOUT_MS + 5));
    if (open && (c.status as string) !== 'end') {
      // Wait for the socket to close so the 'close' listeners (stats, health) have run.
      let timer: NodeJS.Timeout | undefined;
      await new Promise<void>((resolve) => {
        c.once('end', resolve);
        timer = setTimeout(resolve, 1000);
      });
      clearTimeout(timer);
    }
  }

  /**
   * Upstream's default socket type is unix, so a `host:port` URL (or no URL at all: the nutcracker
   * socket) without REDIS_SOCKET_TYPE=tcp ends as a missing socket file: say what to set.
   */
  private missingSocketHint(): string | undefined {
    const s = this.options.settings;
    if (this.cluster !== undefined || s.type === 'sentinel' || s.socketType !== 'unix' || this.lastErrorCode !== 'ENOENT') return undefined;
    const p = this.options.variablePrefix ?? 'REDIS_';
    return `${p}SOCKET_TYPE is unix: for Redis on host:port set ${p}SOCKET_TYPE=tcp and ${p}URL=host:port`;
  }

  private closedError(): Error {
    return new Error(`${this.label} connection to ${this.maskedUrl} closed`);
  }

  private sleep(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      this.wake = resolve;
      this.sleepTimer = setTimeout(resolve, ms);
    }).finally(() => {
      this.wake = undefined;
      this.sleepTimer = undefined;
    });
  }

  /** One start-up attempt: connect what is not connected, then PING every connection. */
  private async attempt(): Promise<void> {
    if (this.cluster !== undefined) {
      const c = this.cluster;
      if (c.status !== 'ready') await c.connect();
      await expectPong(c);
      // Open every master's connection now: ioredis connects a node lazily on its first command,
      // and with the offline queue off the other commands of that first pipeline would fail.
      await Promise.all(
        c.nodes('master').map(async (node) => {
          if (node.status === 'wait') await node.connect();
          await expectPong(node);
        }),
      );
      return;
    }
    const results = await Promise.allSettled(
      this.pool.map(async (c) => {
        if (c.status !== 'ready') await c.connect();
        await expectPong(c);
      }),
    );
    for (const r of results) if (r.status === 'rejected') throw r.reason;
  }

  private baseOptions(): RedisOptions {
    const s = this.options.settings;
    return {
      lazyConnect: true,
      connectTimeout: s.timeoutMs,
      // No commandTimeout: it arms a timer per command. The store bounds each pipeline (and its
      // EVAL fallback) by REDIS_TIMEOUT itself; the start-up PING has its own deadline.
      // How long a closing socket may linger before it is destroyed (ioredis: 2 s). Every reply
      // wanted has come by then (QUIT answered, or a connection dropped on purpose), and ioredis
      // also arms this timer for sockets that already died: keep it short.
      disconnectTimeout: DISCONNECT_TIMEOUT_MS,
      // Never queue while disconnected and never retry or resend a command: a hit is counted at
      // most once, and a request fails at once while Redis is away.
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      autoResendUnfulfilledCommands: false,
      autoResubscribe: false,
      enableReadyCheck: true,
      // Sentinel: after a failover the old master may stay up as a replica; reconnect (which
      // re-resolves the master through the sentinels) instead of failing every write with READONLY.
      reconnectOnError: s.type === 'sentinel' ? (err) => (err.message.startsWith('READONLY') ? 1 : false) : null,
      // Before the first successful connect the start-up loop retries (with upstream's backoff);
      // after it, reconnect forever in the background.
      retryStrategy: (times) => (this.started && !this.closed ? reconnectDelayMs(times) : null),
    };
  }

  private createRedis(base: RedisOptions): Redis {
    const s = this.options.settings;
    const shared = this.options.shared;
    const auth = parseAuth(s.auth);
    const o: RedisOptions = { ...base, ...credentials(auth) };
    if (s.type === 'sentinel') {
      const items = s.url.split(',');
      const sentinelAuth = parseAuth(s.sentinelAuth);
      o.name = items[0]!.trim();
      o.sentinels = items.slice(1).map((item) => {
        const a = parseAddress(item);
        return { host: a.host, port: a.port };
      });
      o.sentinelUsername = sentinelAuth.username;
      o.sentinelPassword = sentinelAuth.password;
      o.sentinelCommandTimeout = s.timeoutMs;
      o.sentinelRetryStrategy = (times) => (this.started && !this.closed ? reconnectDelayMs(times) : null);
      o.updateSentinels = true;
      if (s.tls) {
        const t = tlsOptions(shared);
        o.tls = t;
        o.sentinelTLS = t;
        o.enableTLSForSentinelMode = true;
      }
    } else if (s.socketType === 'unix') {
      o.path = s.url;
      if (s.tls) o.tls = tlsOptions(shared);
    } else {
      const a = parseAddress(s.url);
      o.host = a.host;
      o.port = a.port;
      if (a.db !== undefined) o.db = a.db;
      if (auth.password === undefined && a.password !== undefined) Object.assign(o, credentials(a));
      if (s.tls || a.tls === true) o.tls = tlsOptions(shared);
    }
    return new Redis(o);
  }

  private createCluster(base: RedisOptions): Cluster {
    const s = this.options.settings;
    const seeds = s.url
      .split(',')
      .filter((x) => x.trim() !== '')
      .map((item) => parseAddress(item));
    const auth = parseAuth(s.auth);
    const first = seeds[0];
    const creds = auth.password === undefined && first?.password !== undefined ? credentials(first) : credentials(auth);
    const useTls = s.tls || seeds.some((a) => a.tls === true);
    const { retryStrategy: _r, enableOfflineQueue: _e, lazyConnect: _l, ...nodeBase } = base;
    const redisOptions: ClusterOptions['redisOptions'] = { ...nodeBase, ...creds };
    if (useTls) redisOptions.tls = tlsOptions(this.options.shared);
    const options: ClusterOptions = {
      lazyConnect: true,
      enableOfflineQueue: false,
      enableReadyCheck: true,
      redisOptions,
      slotsRefreshTimeout: Math.max(s.timeoutMs, 100),
      // MOVED / ASK / TRYAGAIN / CLUSTERDOWN are retried by ioredis within the command timeout.
      maxRedirections: 16,
      retryDelayOnFailover: 100,
      retryDelayOnClusterDown: 100,
      retryDelayOnTryAgain: 100,
      clusterRetryStrategy: (times) => (this.started && !this.closed ? reconnectDelayMs(times) : null),
    };
    const cluster = new Cluster(
      seeds.map((a) => ({ host: a.host, port: a.port })),
      options,
    );
    cluster.on('error', (err: Error) => this.onError(err));
    cluster.on('node error', (err: Error) => this.onError(err));
    cluster.on('+node', (node: Redis) => {
      this.nodesByAddress.set(nodeAddress(node), node);
      this.track(node);
    });
    cluster.on('-node', (node: Redis) => {
      const address = nodeAddress(node);
      if (this.nodesByAddress.get(address) === node) this.nodesByAddress.delete(address);
      this.untrack(node);
    });
    cluster.on('ready', () => this.changed());
    cluster.on('close', () => this.changed());
    cluster.on('end', () => this.changed());
    return cluster;
  }

  private track(c: Redis): Redis {
    const t: Tracked = { wasReady: false, lastError: '' };
    this.tracked.set(c, t);
    c.on('error', (err: Error) => {
      t.lastError = err.message;
      this.onError(err);
    });
    c.on('ready', () => {
      this.accepted();
      // A single or sentinel instance answers again: its circuit closes now, not at the next probe.
      if (this.cluster === undefined && !this.closed) this.options.circuits?.get('')?.closeNow('a connection is ready again');
      if (this.cluster !== undefined && !this.closed) this.options.circuits?.get(nodeAddress(c))?.closeNow('its connection is ready again');
      if (!t.wasReady) {
        t.wasReady = true;
        this.readyCount++;
        this.total?.inc();
        this.active?.set(this.readyCount);
        if (this.degraded && !this.closed && this.readyCount === this.pool.length) {
          if (this.lostLineTimer !== undefined) {
            clearTimeout(this.lostLineTimer);
            this.logLost(); // the loss before the return
          }
          this.degraded = false;
          this.options.logger.info(`${this.label}: reconnected to ${this.maskedUrl} (${this.readyCount} connection${this.readyCount === 1 ? '' : 's'})`);
        }
        const m = this.moving;
        if (m !== undefined && !this.closed && this.readyCount === this.pool.length) {
          this.moving = undefined;
          this.dropInterim();
          this.options.logger.info(`${this.label}: all ${this.readyCount} connections on the new master ${m.address}, ${Date.now() - m.at} ms after the switch`);
        }
      }
      this.changed();
    });
    c.on('close', () => this.lost(c));
    c.on('end', () => this.lost(c));
    return c;
  }

  /** `quiet`: dropped on purpose (a switch-over), not a loss to report. */
  private untrack(c: Redis, quiet = false): void {
    this.lost(c, quiet);
    this.tracked.delete(c);
  }

  private lost(c: Redis, quiet = false): void {
    const t = this.tracked.get(c);
    if (t === undefined || !t.wasReady) return;
    t.wasReady = false;
    this.readyCount--;
    this.localClose?.inc();
    this.active?.set(this.readyCount);
    if (this.started && !this.closed && this.cluster !== undefined) {
      // A cluster node's connection is lost: its keys fail at once from now on. The first probe
      // is due at once, so a connection that only dropped costs one request, a dead node one
      // REDIS_TIMEOUT per open period.
      this.options.circuits?.of(nodeAddress(c)).openNow(`connection lost${t.lastError === '' ? '' : `: ${t.lastError}`}`, 0);
    }
    if (this.started && !this.closed && this.cluster === undefined && !quiet) {
      // The pool's connections go down together when Redis does: say it once, with the count.
      this.lostSinceLine++;
      this.degraded = true;
      this.lostLineTimer ??= setTimeout(() => this.logLost(), LOST_LINE_GATHER_MS);
    }
    this.changed();
  }

  private logLost(): void {
    this.lostLineTimer = undefined;
    const n = this.lostSinceLine;
    this.lostSinceLine = 0;
    if (this.closed || n === 0) return;
    this.options.logger.warn(
      `${this.label}: lost ${n} of ${this.pool.length} connection${this.pool.length === 1 ? '' : 's'} to ${this.maskedUrl}${this.lastError === '' ? '' : `: ${this.lastError}`}; reconnecting`,
    );
  }

  private onError(err: Error): void {
    this.lastError = err.message;
    this.lastErrorCode = (err as NodeJS.ErrnoException).code;
    if (this.options.logger.enabled('debug')) this.options.logger.debug(`${this.label} (${this.maskedUrl}): ${err.message}`);
    const refusal = authRefusal(err.message);
    if (refusal !== undefined) this.refused(refusal, err.message);
  }

  /**
   * The server refused our credentials: said once per change (a new refusal, not every
   * reconnection), shown in `<scope>.auth_failed`, and named in every call's error while no
   * connection is ready. At start-up each failed attempt already says it.
   */
  private refused(code: string, message: string): void {
    if (this.authRefusal === code) return;
    this.authRefusal = code;
    this.authGauge?.set(1);
    const p = this.options.variablePrefix ?? 'REDIS_';
    const variable = /sentinel/i.test(message) ? `${p}SENTINEL_AUTH` : `${p}AUTH`;
    this.authError = new StoreError(`${this.label} authentication failed: ${message}`, false);
    if (this.started && !this.closed) {
      this.options.logger.error(
        `${this.label}: ${this.maskedUrl} refuses our credentials (${message}): every call fails until ${variable} matches the server's password`,
      );
    }
    this.changed();
  }

  /** A connection authenticated (it is ready): the credentials match again. */
  private accepted(): void {
    if (this.authRefusal === undefined) return;
    this.authRefusal = undefined;
    this.authError = undefined;
    this.authGauge?.set(0);
    if (this.started && !this.closed) this.options.logger.info(`${this.label}: ${this.maskedUrl} accepts our credentials again`);
  }

  /**
   * Why a call cannot be sent now, when the reason is known: the server refuses our credentials
   * and no connection is ready. Undefined otherwise (the call's own error then says what happened).
   */
  unavailable(): StoreError | undefined {
    if (this.authError !== undefined && !this.isReady) return this.authError;
    const m = this.moving;
    if (m !== undefined && !this.isReady) return new StoreError(`${this.label}: moving to the new master ${m.address}`, true);
    return undefined;
  }

  /** Sentinel mode: the pool is moving to a new master (failures now say nothing about the store's health). */
  get switching(): boolean {
    return this.moving !== undefined;
  }

  /** Whether Redis answers writes with OOM now (the batcher tells; it then looks at each answered pipeline). */
  get outOfMemory(): boolean {
    return this.oom !== undefined;
  }

  /**
   * A write was answered `OOM command not allowed when used memory > 'maxmemory'` (true), or a
   * write succeeded again (false): said once per change, shown in `<scope>.oom`.
   */
  memoryAnswer(full: boolean, message = ''): void {
    if (full === (this.oom !== undefined) || this.closed) return;
    this.oom = full ? message : undefined;
    this.oomGauge?.set(full ? 1 : 0);
    if (full) {
      this.options.logger.warn(
        `${this.label}: ${this.maskedUrl} is full and refuses every increment, of existing counters too (${message}): those calls fail, as BACKEND_FAILURE_MODE decides, until counters expire or maxmemory is raised`,
      );
    } else {
      this.options.logger.info(`${this.label}: ${this.maskedUrl} has room for counters again`);
    }
  }

  /** While the server refuses our credentials: the code of the refusal (`WRONGPASS`, `NOAUTH`…). */
  get authFailure(): string | undefined {
    return this.authRefusal;
  }

  private changed(): void {
    for (const l of this.listeners) l();
  }
}

function credentials(c: Credentials): Credentials {
  const o: Credentials = {};
  if (c.username !== undefined) o.username = c.username;
  if (c.password !== undefined) o.password = c.password;
  return o;
}

/** The `ip:port` a connection is connected to (IPv4-mapped addresses as plain IPv4), or '' without a socket. */
function remoteAddress(c: Redis): string {
  const ip = c.stream?.remoteAddress;
  if (ip === undefined) return '';
  return `${ip.startsWith('::ffff:') ? ip.slice(7) : ip}:${c.stream.remotePort}`;
}

/** A cluster node's address as ioredis keys its slot map: `host:port` from the node's options. */
export function nodeAddress(node: Redis): string {
  return `${node.options.host ?? '127.0.0.1'}:${node.options.port ?? 6379}`;
}

async function expectPong(c: RedisClient): Promise<void> {
  const reply = await c.ping();
  if (reply !== 'PONG') throw new Error(`connecting redis error: ${String(reply)}`);
}

/**
 * The code of a reply that refuses our credentials, if `message` is one: `WRONGPASS` (a wrong
 * password or user), `NOAUTH` (the server wants a password, none was sent), or an older server's
 * `ERR invalid password`.
 */
export function authRefusal(message: string): string | undefined {
  const m = /\b(WRONGPASS|NOAUTH)\b/.exec(message);
  if (m !== null) return m[1];
  return /\binvalid (?:password|username-password)/i.test(message) ? 'WRONGPASS' : undefined;
}

export function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
