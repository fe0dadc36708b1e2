/**
 * The demand store of one replica (in process): enough for one process; replicas sharing a Redis
 * use the Redis one (src/backends/redis/demand.ts).
 */
import type { DemandStore } from '../core/quota-demand';

export type { DemandStore } from '../core/quota-demand';

export class MemoryDemandStore implements DemandStore {
  private readonly buckets = new Map<string, Map<string, { demand: number; expiresAtMs: number }>>();

  report(bucketKey: string, stream: string, demand: number, nowMs: number, expiresAtMs: number): Promise<ReadonlyMap<string, number>> {
    let streams = this.buckets.get(bucketKey);
    if (streams === undefined) {
      streams = new Map();
      this.buckets.set(bucketKey, streams);
    }
    streams.set(stream, { demand, expiresAtMs });
    const live = new Map<string, number>();
    for (const [s, d] of streams) {
      if (d.expiresAtMs <= nowMs) streams.delete(s);
      else live.set(s, d.demand);
    }
    return Promise.resolve(live);
  }

  release(bucketKey: string, stream: string): void {
    const streams = this.buckets.get(bucketKey);
    if (streams === undefined) return;
    streams.delete(stream);
    if (streams.size === 0) this.buckets.delete(bucketKey);
  }
}

/**
 * A demand store made when a stream first reports to it, so that RLQS costs nothing (no connection,
 * no log line) in a deployment that never has an RLQS stream.
 */
export class FirstUseDemandStore implements DemandStore {
  private store: DemandStore | undefined;

  constructor(private readonly create: () => DemandStore) {}

  report(bucketKey: string, stream: string, demand: number, nowMs: number, expiresAtMs: number): Promise<ReadonlyMap<string, number>> {
    this.store ??= this.create();
    return this.store.report(bucketKey, stream, demand, nowMs, expiresAtMs);
  }

  /** Before the first report nothing was recorded, so there is nothing to release. */
  release(bucketKey: string, stream: string): void {
    this.store?.release(bucketKey, stream);
  }

  async close(): Promise<void> {
    await this.store?.close?.();
  }
}
