/**
 * RLQS: where the replicas of the service that share a bucket meet, so that they divide one
 * limit among all the Envoys that report it (src/quota). Each replica publishes, per bucket, the
 * demand of its own streams taken together, and reads every other replica's; an entry not renewed
 * before its expiry is gone, which is how a replica that stops (and its Envoys) releases its part.
 */

/** One replica's streams of one bucket, taken together. */
export interface BucketDemand {
  /** Requests per second (allowed + denied) of the streams that reported some, summed. */
  readonly demand: number;
  /** Streams that reported demand. */
  readonly measured: number;
  /** Streams that have not reported a rate yet. */
  readonly unmeasured: number;
  /** Streams that reported no request. */
  readonly idle: number;
}

export interface ReplicaDemand {
  readonly demand: BucketDemand;
  readonly expiresAtMs: number;
}

export interface DemandStore {
  /**
   * Publishes this replica's demand for each bucket of `mine` (valid until `expiresAtMs`) and
   * answers, for the same buckets, the live entries of the other replicas (by replica id);
   * undefined when the store could not answer (the caller keeps what it had until it expires).
   */
  exchange(replica: string, mine: ReadonlyMap<string, BucketDemand>, nowMs: number, expiresAtMs: number): Promise<Map<string, Map<string, ReplicaDemand>> | undefined>;
  /** This replica no longer has a stream reporting the bucket. */
  release(bucketKey: string, replica: string): void;
  /** Closes what the store holds open (a connection). */
  close?(): Promise<void>;
}

/** A replica's entry as one text (the Redis hash field's value) and back; undefined for a malformed one. */
export function encodeReplicaDemand(d: BucketDemand, expiresAtMs: number): string {
  return `${d.demand} ${d.measured} ${d.unmeasured} ${d.idle} ${expiresAtMs}`;
}

export function decodeReplicaDemand(text: string): ReplicaDemand | undefined {
  const f = text.split(' ').map(Number);
  if (f.length !== 5 || !f.every((x) => Number.isFinite(x) && x >= 0)) return undefined;
  return { demand: { demand: f[0]!, measured: f[1]!, unmeasured: f[2]!, idle: f[3]! }, expiresAtMs: f[4]! };
}
