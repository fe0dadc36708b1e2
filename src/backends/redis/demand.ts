/**
 * RLQS demand shared through Redis, so that replicas behind one Service divide one limit: one
 * hash per bucket, `<prefix>rlqs:<domain|bucket>`, with a field per replica holding its streams'
 * demand taken together and the entry's expiry (src/core/quota-demand.ts). A replica exchanges
 * all its buckets in one pipeline (HSET, PEXPIRE and HGETALL per bucket) about once a second, on
 * a connection of its own beside the counters', opened by the first exchange; entries past their
 * expiry are ignored and deleted. When Redis cannot answer within REDIS_TIMEOUT (connecting
 * included), the exchange answers nothing: the replica keeps the other replicas' last entries
 * until they expire, then divides among its own streams until Redis is back.
 */
import { decodeReplicaDemand, encodeReplicaDemand, type BucketDemand, type DemandStore, type ReplicaDemand } from '../../core/quota-demand';
import type { RedisSettings } from '../../settings';
import type { Logger } from '../../telemetry/logger';
import { RedisConnection } from './connection';
import { errorMessage } from '../../platform/errors';

/** How long after its expiry a bucket's hash stays (a replica's clock may run a little behind). */
const KEY_SLACK_MS = 5_000;

export class RedisDemandStore implements DemandStore {
  private readonly conn: RedisConnection;
  private failing = false;
  /** The first connection attempt, under way or done; cleared when it fails so the next exchange tries again. */
  private connecting: Promise<void> | undefined;

  constructor(
    private readonly settings: RedisSettings,
    private readonly logger: Logger,
    private readonly prefix: string,
  ) {
    this.conn = new RedisConnection({ settings: { ...settings, poolSize: 1 }, shared: settings, logger, label: 'redis rlqs', connectingLogLevel: 'info' });
  }

  /** Connects (with the start-up retry of REDIS_STARTUP_*) unless connected or connecting already. */
  connect(): Promise<void> {
    this.connecting ??= this.conn.connect().catch((err: unknown) => {
      this.connecting = undefined;
      throw err;
    });
    return this.connecting;
  }

  async exchange(replica: string, mine: ReadonlyMap<string, BucketDemand>, nowMs: number, expiresAtMs: number): Promise<Map<string, Map<string, ReplicaDemand>> | undefined> {
    if (mine.size === 0) return new Map();
    const keys = [...mine.keys()];
    let replies: Array<Record<string, string>>;
    try {
      replies = await this.withTimeout(this.connect().then(() => this.pipeline(replica, keys, mine, nowMs, expiresAtMs)));
      if (this.failing) {
        this.failing = false;
        this.logger.info('RLQS: Redis answers again; limits are divided among all replicas');
      }
    } catch (err) {
      if (!this.failing) {
        this.failing = true;
        this.logger.warn(`RLQS: Redis does not answer (${errorMessage(err)}); dividing limits among this replica's streams until it does`);
      }
      return undefined;
    }
    const out = new Map<string, Map<string, ReplicaDemand>>();
    keys.forEach((key, i) => {
      const others = new Map<string, ReplicaDemand>();
      const expired: string[] = [];
      for (const [r, v] of Object.entries(replies[i]!)) {
        if (r === replica) continue;
        const d = decodeReplicaDemand(v);
        if (d === undefined || d.expiresAtMs <= nowMs) expired.push(r);
        else others.set(r, d);
      }
      if (expired.length > 0) this.conn.client().hdel(this.redisKey(key), ...expired).catch(() => undefined);
      out.set(key, others);
    });
    return out;
  }

  private redisKey(bucketKey: string): string {
    return `${this.prefix}rlqs:${bucketKey}`;
  }

  /** Writes this replica's entry of every bucket and reads every replica's, in one pipeline. */
  private async pipeline(replica: string, keys: string[], mine: ReadonlyMap<string, BucketDemand>, nowMs: number, expiresAtMs: number): Promise<Array<Record<string, string>>> {
    const p = this.conn.client().pipeline();
    const ttl = Math.max(1, expiresAtMs - nowMs) + KEY_SLACK_MS;
    for (const key of keys) {
      const k = this.redisKey(key);
      p.hset(k, replica, encodeReplicaDemand(mine.get(key)!, expiresAtMs)).pexpire(k, ttl).hgetall(k);
    }
    const replies = await p.exec();
    return keys.map((_, i) => {
      const r = replies?.[3 * i + 2];
      if (r === undefined || r[0] !== null) throw r?.[0] ?? new Error('no reply to HGETALL');
      return r[1] as Record<string, string>;
    });
  }

  release(bucketKey: string, replica: string): void {
    this.conn
      .client()
      .hdel(this.redisKey(bucketKey), replica)
      .catch(() => undefined);
  }

  async close(): Promise<void> {
    await this.conn.close();
  }

  private withTimeout<T>(p: Promise<T>): Promise<T> {
    const ms = this.settings.timeoutMs;
    if (!(ms > 0)) return p;
    return new Promise<T>((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
      p.then(
        (v) => {
          clearTimeout(t);
          resolve(v);
        },
        (e: unknown) => {
          clearTimeout(t);
          reject(e as Error);
        },
      );
    });
  }
}
