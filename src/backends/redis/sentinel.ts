/**
 * What a sentinel-mode instance follows of its sentinels: their pub/sub events about our master,
 * so that writes move to a new master when the sentinels switch, not when the old master drops
 * its connections (a planned `SENTINEL FAILOVER` leaves the old master up, accepting writes, until
 * the sentinels turn it into a replica some 10 s later, and its writes are then thrown away).
 *
 * - One subscriber connection per sentinel (REDIS_SENTINEL_AUTH, REDIS_TLS as for the sentinels),
 *   reconnecting forever with the background backoff, subscribed to `+switch-master`,
 *   `+failover-state-send-slaveof-noone` (the sentinels begin promoting a replica) and
 *   `-failover-abort-*`. Only events naming our master are passed on; the three sentinels each
 *   announce the same switch, and a switch to the address already moved to is passed on once.
 * - When a subscription (re)starts, that sentinel is asked `SENTINEL GET-MASTER-ADDR-BY-NAME` on a
 *   connection of its own, so a switch announced while nobody listened is not missed.
 * - The count of sentinels listened to is said when it drops to 0 and when it is back.
 * - `waitForPromotion` asks the replica being promoted for its ROLE until it says `master`, so the
 *   writes can leave the old master as soon as its writes are lost, not a second later when the
 *   sentinels' once-a-second INFO has seen it and they announce the switch.
 */
import { Redis, type RedisOptions } from 'ioredis';
import type { Logger } from '../../telemetry/logger';
import { errorMessage } from '../../platform/errors';

const CHANNELS = ['+switch-master', '+failover-state-send-slaveof-noone', '-failover-abort-*'];

export interface SentinelWatchOptions {
  masterName: string;
  sentinels: ReadonlyArray<{ host: string; port: number }>;
  /** Credentials, TLS, timeouts and the reconnect strategy of a sentinel connection. */
  connection: RedisOptions;
  logger: Logger;
  /** `redis` or `redis per-second`, for log lines. */
  label: string;
  /** The sentinels begin promoting `replica` (`ip:port`) in place of our master (`via`: the sentinel that said it). */
  onFailoverStart(replica: string, via: string): void;
  /** The failover they began was aborted. */
  onFailoverAbort(via: string): void;
  /** Our master is now `address` (`ip:port`), as `via` says (an event, or a sentinel asked). */
  onSwitch(address: string, via: string): void;
}

export class SentinelWatch {
  private readonly subscribers: Redis[] = [];
  private readonly subscribed = new Set<Redis>();
  private closed = false;
  private everSubscribed = false;

  constructor(private readonly options: SentinelWatchOptions) {}

  /** Sentinels whose events are listened to now. */
  get listening(): number {
    return this.subscribed.size;
  }

  start(): void {
    for (const s of this.options.sentinels) this.subscribe(s);
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const c of this.subscribers) c.disconnect();
    this.subscribed.clear();
  }

  private subscribe(s: { host: string; port: number }): void {
    const via = `${s.host}:${s.port}`;
    const c = new Redis({ ...this.options.connection, host: s.host, port: s.port, lazyConnect: true, autoResubscribe: true, enableOfflineQueue: true });
    this.subscribers.push(c);
    c.on('error', (err: Error) => {
      if (this.options.logger.enabled('debug')) this.options.logger.debug(`${this.options.label}: sentinel ${via}: ${err.message}`);
    });
    c.on('close', () => this.lost(c));
    c.on('pmessage', (_pattern: string, channel: string, message: string) => this.event(channel, message, via));
    let once = false;
    // Subscribed again after a reconnection (autoResubscribe): check what may have been missed.
    c.on('ready', () => {
      if (!this.closed && once && !this.subscribed.has(c)) void this.subscribedNow(c, s, via);
    });
    c.connect()
      .then(() => c.psubscribe(...CHANNELS))
      .then(() => {
        once = true;
        return this.subscribedNow(c, s, via);
      })
      .catch((err: unknown) => {
        if (this.options.logger.enabled('debug')) this.options.logger.debug(`${this.options.label}: sentinel ${via}: ${errorMessage(err)}`);
      });
  }

  private async subscribedNow(c: Redis, s: { host: string; port: number }, via: string): Promise<void> {
    if (this.closed) return;
    const wasNone = this.subscribed.size === 0;
    this.subscribed.add(c);
    if (wasNone && this.everSubscribed) this.options.logger.info(`${this.options.label}: listening to the sentinels' switch-overs again (sentinel ${via})`);
    this.everSubscribed = true;
    // The subscriber cannot ask: a short-lived connection asks where our master is now.
    const ask = new Redis({ ...this.options.connection, host: s.host, port: s.port, lazyConnect: true, retryStrategy: () => null, enableOfflineQueue: false });
    ask.on('error', () => undefined);
    try {
      await ask.connect();
      const reply = (await ask.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', this.options.masterName)) as [string, string] | null;
      if (!this.closed && Array.isArray(reply) && reply.length === 2) this.options.onSwitch(`${reply[0]}:${reply[1]}`, `sentinel ${via}`);
    } catch {
      // This sentinel is away; its events come once it is back.
    } finally {
      ask.disconnect();
    }
  }

  private lost(c: Redis): void {
    if (!this.subscribed.delete(c) || this.closed) return;
    if (this.subscribed.size === 0) {
      this.options.logger.warn(
        `${this.options.label}: no sentinel's events are listened to now: a switch-over is followed only when the old master refuses writes (READONLY) or drops its connections`,
      );
    }
  }

  /**
   * `+switch-master <name> <old-ip> <old-port> <new-ip> <new-port>`, or an instance event:
   * `master <name> <ip> <port>`, or `<type> <name> <ip> <port> @ <master-name> <ip> <port>`.
   */
  private event(channel: string, message: string, via: string): void {
    if (this.closed) return;
    const parts = message.split(' ');
    if (channel === '+switch-master') {
      if (parts[0] === this.options.masterName && parts.length >= 5) this.options.onSwitch(`${parts[3]}:${parts[4]}`, `+switch-master from sentinel ${via}`);
      return;
    }
    const at = parts.indexOf('@');
    const master = parts[0] === 'master' ? parts[1] : at < 0 ? undefined : parts[at + 1];
    if (master !== this.options.masterName) return;
    if (channel === '+failover-state-send-slaveof-noone') {
      if (parts.length >= 4) this.options.onFailoverStart(`${parts[2]}:${parts[3]}`, `sentinel ${via}`);
    } else {
      this.options.onFailoverAbort(`sentinel ${via}`);
    }
  }
}

/** How often the replica being promoted is asked its ROLE. */
const PROMOTION_POLL_MS = 10;

/**
 * Resolves true once the node at `address` answers `ROLE` with `master`, false when `stillWaiting()`
 * turns false or `maxMs` has passed (the failover went elsewhere, or was aborted). It asks on a
 * connection of its own (`connection`: the data nodes' credentials and TLS), made again when it is
 * lost: the sentinels' promotion ends with `CLIENT KILL TYPE normal` on the promoted node.
 */
export async function waitForPromotion(address: string, connection: RedisOptions, maxMs: number, stillWaiting: () => boolean): Promise<boolean> {
  const i = address.lastIndexOf(':');
  const options: RedisOptions = { ...connection, host: address.slice(0, i), port: Number(address.slice(i + 1)), lazyConnect: true, retryStrategy: () => null, enableOfflineQueue: false, enableReadyCheck: false };
  const deadline = Date.now() + maxMs;
  let c: Redis | undefined;
  try {
    while (stillWaiting() && Date.now() < deadline) {
      try {
        if (c === undefined || c.status === 'end') {
          c?.disconnect();
          c = new Redis(options);
          c.on('error', () => undefined);
          await c.connect();
        }
        const role = (await c.call('ROLE')) as unknown[];
        if (Array.isArray(role) && role[0] === 'master') return true;
      } catch {
        // Killed by the promotion, or not up: ask again on a new connection.
        c?.disconnect();
        c = undefined;
      }
      await new Promise((resolve) => setTimeout(resolve, PROMOTION_POLL_MS));
    }
    return false;
  } finally {
    c?.disconnect();
  }
}
