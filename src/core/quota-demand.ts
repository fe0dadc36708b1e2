/**
 * RLQS: where the demand of every stream that reports a bucket is kept, so that every replica of
 * the service divides one limit among all of them (src/quota). Each replica writes its streams'
 * demand and reads all of them; an entry not renewed before its expiry is gone, which is how an
 * Envoy that stops reporting releases its share.
 */
export interface DemandStore {
  /**
   * Records `demand` (requests per second) of `stream` for `bucketKey`, valid until `expiresAtMs`,
   * and answers the live demands of the bucket, this one included.
   */
  report(bucketKey: string, stream: string, demand: number, nowMs: number, expiresAtMs: number): Promise<ReadonlyMap<string, number>>;
  /** The stream no longer reports the bucket (it ended, or the bucket was abandoned). */
  release(bucketKey: string, stream: string): void;
  /** Closes what the store holds open (a connection). */
  close?(): Promise<void>;
}
