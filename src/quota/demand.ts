/**
 * The demand store of one process: replicas (QuotaService instances) of one process share it;
 * replicas in different processes share the Redis one (src/backends/redis/demand.ts).
 */
import type { BucketDemand, DemandStore, ReplicaDemand } from '../core/quota-demand';

export type { BucketDemand, DemandStore, ReplicaDemand } from '../core/quota-demand';

export class MemoryDemandStore implements DemandStore {
  private readonly buckets = new Map<string, Map<string, ReplicaDemand>>();

  exchange(replica: string, mine: ReadonlyMap<string, BucketDemand>, nowMs: number, expiresAtMs: number): Promise<Map<string, Map<string, ReplicaDemand>>> {
    const out = new Map<string, Map<string, ReplicaDemand>>();
    for (const [key, demand] of mine) {
      let replicas = this.buckets.get(key);
      if (replicas === undefined) {
        replicas = new Map();
        this.buckets.set(key, replicas);
      }
      replicas.set(replica, { demand, expiresAtMs });
      const others = new Map<string, ReplicaDemand>();
      for (const [r, d] of replicas) {
        if (d.expiresAtMs <= nowMs) replicas.delete(r);
        else if (r !== replica) others.set(r, d);
      }
      out.set(key, others);
    }
    return Promise.resolve(out);
  }

  release(bucketKey: string, replica: string): void {
    const replicas = this.buckets.get(bucketKey);
    if (replicas === undefined) return;
    replicas.delete(replica);
    if (replicas.size === 0) this.buckets.delete(bucketKey);
  }
}

/**
 * A demand store made when a replica first publishes to it, so that RLQS costs nothing (no
 * connection, no log line) in a deployment that never has an RLQS stream.
 */
export class FirstUseDemandStore implements DemandStore {
  private store: DemandStore | undefined;

  constructor(private readonly create: () => DemandStore) {}

  exchange(replica: string, mine: ReadonlyMap<string, BucketDemand>, nowMs: number, expiresAtMs: number): Promise<Map<string, Map<string, ReplicaDemand>> | undefined> {
    this.store ??= this.create();
    return this.store.exchange(replica, mine, nowMs, expiresAtMs);
  }

  /** Before the first exchange nothing was published, so there is nothing to release. */
  release(bucketKey: string, replica: string): void {
    this.store?.release(bucketKey, replica);
  }

  async close(): Promise<void> {
    await this.store?.close?.();
  }
}
