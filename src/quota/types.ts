/**
 * RLQS in the service's own terms (the transports convert from and to
 * envoy.service.rate_limit_quota.v3): usage reports in, bucket actions out.
 */

/** A bucket's id: string pairs, order-free (BucketId.bucket). */
export type BucketPairs = ReadonlyMap<string, string>;

export interface BucketUsage {
  /** May be decoded when first read: a bucket its stream already reported is found by `wire`. */
  readonly bucket: BucketPairs;
  /**
   * The bucket id as its stream sent it (its bytes as latin1 text), when the transport has it:
   * the same text names the same bucket on that stream (an answer may carry it back as it came).
   */
  readonly wire?: string;
  /** Seconds since the bucket's previous report; 0 in Envoy's first report of a new bucket. */
  readonly elapsedSeconds: number;
  readonly allowed: number;
  readonly denied: number;
}

export interface UsageReports {
  /** Set in a stream's first message; later messages may leave it empty. */
  readonly domain: string;
  readonly usages: readonly BucketUsage[];
}

/** How Envoy limits a bucket's requests (RateLimitStrategy). */
export type QuotaStrategy =
  | { readonly kind: 'allow-all' }
  | { readonly kind: 'deny-all' }
  | { readonly kind: 'token-bucket'; readonly maxTokens: number; readonly tokensPerFill: number; readonly fillIntervalSeconds: number };

/** `wire`: the bucket id as its stream sent it (BucketUsage.wire), to be sent back as it is. */
export type BucketAction =
  | { readonly bucket: BucketPairs; readonly wire?: string; readonly assign: { readonly strategy: QuotaStrategy; readonly ttlSeconds: number } }
  | { readonly bucket: BucketPairs; readonly wire?: string; readonly abandon: true };

/** A report the service refuses, or a stream over its budget: the stream ends with this gRPC status. */
export class QuotaStreamError extends Error {
  override readonly name = 'QuotaStreamError';
  constructor(
    /** gRPC status: 3 INVALID_ARGUMENT (a malformed report), 8 RESOURCE_EXHAUSTED (over a budget). */
    readonly code: 3 | 8,
    message: string,
  ) {
    super(message);
  }
}
