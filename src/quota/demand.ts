/**
 * The demand of every stream that reports a bucket, where every replica of the service sees it:
 * each replica writes its streams' demand and reads all of them, so N replicas divide one limit.
 * This is the one-replica store (in process); an entry not renewed before its expiry is gone,
 * which is how an Envoy that stops reporting releases its share.
 */
export interface DemandStore {
  /**
   * Records `demand` (requests per second) of `stream` for `bucketKey`, valid until `expiresAtMs`,
   * and answers the live demands of the bucket, this one included.
   */
  report(bucketKey: string, stream: string, demand: number, nowMs: number, expiresAtMs: number): Promise<ReadonlyMap<string, number>>;
  /** The stream no longer reports the bucket (it ended, or the bucket was abandoned). */
  release(bucketKey: string, stream: string): void;
}

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

  /** Buckets with at least one stream entry (expired ones included until next touched). */
  get size(): number {
    return this.buckets.size;
  }
}
