/**
 * RLQS demand shared through Redis, so that replicas behind one Service divide one limit: one
 * hash per bucket, `<prefix>rlqs:<domain|bucket>`, with a field per stream holding
 * `<demand> <expiresAtMs>`; one pipeline per report (HSET, PEXPIRE, HGETALL), on a connection of
 * its own beside the counters', opened by the first report. Entries past their expiry are ignored
 * and deleted. When Redis cannot answer within REDIS_TIMEOUT (connecting included), the division
 * falls back to this replica's own streams (the limit is then divided per replica until Redis is
 * back) rather than leaving Envoy without an assignment.
 */
import type { DemandStore } from '../../core/quota-demand';
import type { RedisSettings } from '../../settings';
import type { Logger } from '../../telemetry/logger';
import { RedisConnection } from './connection';

/** How long after its expiry a bucket's hash stays (a replica's clock may run a little behind). */
const KEY_SLACK_MS = 5_000;

export class RedisDemandStore implements DemandStore {
  private readonly conn: RedisConnection;
  /** This replica's own entries: the fallback while Redis does not answer. */
  private readonly local = new Map<string, Map<string, { demand: number; expiresAtMs: number }>>();
  private failing = false;
  /** The first connection attempt, under way or done; cleared when it fails so the next report tries again. */
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

  async report(bucketKey: string, stream: string, demand: number, nowMs: number, expiresAtMs: number): Promise<ReadonlyMap<string, number>> {
    let mine = this.local.get(bucketKey);
    if (mine === undefined) {
      mine = new Map();
      this.local.set(bucketKey, mine);
    }
    mine.set(stream, { demand, expiresAtMs });
    const key = `${this.prefix}rlqs:${bucketKey}`;
    let fields: Record<string, string>;
    try {
      fields = await this.withTimeout(this.connect().then(() => this.exchange(key, stream, demand, nowMs, expiresAtMs)));
      if (this.failing) {
        this.failing = false;
        this.logger.info('RLQS: Redis answers again; limits are divided among all replicas');
      }
    } catch (err) {
      if (!this.failing) {
        this.failing = true;
        this.logger.warn(`RLQS: Redis does not answer (${(err as Error).message}); dividing limits among this replica's streams until it does`);
      }
      return this.live(mine, nowMs);
    }
    const all = new Map<string, { demand: number; expiresAtMs: number }>();
    const expired: string[] = [];
    for (const [s, v] of Object.entries(fields)) {
      const [d, e] = v.split(' ').map(Number);
      if (!(e! > nowMs) || !Number.isFinite(d)) expired.push(s);
      else all.set(s, { demand: d!, expiresAtMs: e! });
    }
    if (expired.length > 0) this.conn.client().hdel(key, ...expired).catch(() => undefined);
    return this.live(all, nowMs);
  }

  /** Writes this stream's demand and reads every stream's, in one pipeline. */
  private async exchange(key: string, stream: string, demand: number, nowMs: number, expiresAtMs: number): Promise<Record<string, string>> {
    const replies = await this.conn
      .client()
      .pipeline()
      .hset(key, stream, `${demand} ${expiresAtMs}`)
      .pexpire(key, Math.max(1, expiresAtMs - nowMs) + KEY_SLACK_MS)
      .hgetall(key)
      .exec();
    const last = replies?.[2];
    if (last === undefined || last[0] !== null) throw last?.[0] ?? new Error('no reply to HGETALL');
    return last[1] as Record<string, string>;
  }

  release(bucketKey: string, stream: string): void {
    const mine = this.local.get(bucketKey);
    mine?.delete(stream);
    if (mine?.size === 0) this.local.delete(bucketKey);
    this.conn
      .client()
      .hdel(`${this.prefix}rlqs:${bucketKey}`, stream)
      .catch(() => undefined);
  }

  async close(): Promise<void> {
    await this.conn.close();
  }

  private live(entries: Map<string, { demand: number; expiresAtMs: number }>, nowMs: number): Map<string, number> {
    const out = new Map<string, number>();
    for (const [s, v] of entries) if (v.expiresAtMs > nowMs) out.set(s, v.demand);
    return out;
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
