/** One RLQS stream over the generated grpc-js client: send usage reports, read responses in order, see how it ended. */
import * as grpc from '@grpc/grpc-js';
import type {
  RateLimitQuotaResponse,
  RateLimitQuotaServiceClient,
  RateLimitQuotaUsageReports,
} from '../../generated/envoy/service/rate_limit_quota/v3/rlqs';

export function openQuotaStream(client: RateLimitQuotaServiceClient) {
  const call = client.streamRateLimitQuotas();
  const responses: RateLimitQuotaResponse[] = [];
  const waiters: Array<() => void> = [];
  let status: grpc.StatusObject | undefined;
  /** The token rate of the latest token-bucket assignment received (NaN before one). */
  let rate = Number.NaN;
  call.on('data', (r: RateLimitQuotaResponse) => {
    responses.push(r);
    if (r.bucketAction[0]?.quotaAssignmentAction?.rateLimitStrategy?.tokenBucket !== undefined) rate = tokensPerSecond(r);
    waiters.splice(0).forEach((w) => w());
  });
  call.on('status', (s: grpc.StatusObject) => {
    status = s;
    waiters.splice(0).forEach((w) => w());
  });
  call.on('error', () => undefined); // the status event carries it
  /** The next response (throws once the stream has ended without one). */
  const next = async (): Promise<RateLimitQuotaResponse> => {
    while (responses.length === 0) {
      if (status !== undefined) throw new Error(`stream ended: ${status.code} ${status.details}`);
      await new Promise<void>((r) => waiters.push(r));
    }
    return responses.shift()!;
  };
  const ended = async (): Promise<grpc.StatusObject> => {
    while (status === undefined) await new Promise<void>((r) => waiters.push(r));
    return status;
  };
  /** A report of one bucket `{api}` with this many allowed requests over `elapsedSeconds`. */
  const report = (api: string, elapsedSeconds: number, allowed: number, domain = 'gw') =>
    call.write({
      domain,
      bucketQuotaUsages: [{ bucketId: { bucket: { api } }, timeElapsed: { seconds: BigInt(elapsedSeconds), nanos: 0 }, numRequestsAllowed: BigInt(allowed), numRequestsDenied: 0n }],
    } satisfies RateLimitQuotaUsageReports);
  return { call, next, ended, report, rate: () => rate };
}

/** The token rate (tokens per second) of a response's first assignment. */
export function tokensPerSecond(r: RateLimitQuotaResponse): number {
  const tb = r.bucketAction[0]!.quotaAssignmentAction!.rateLimitStrategy!.tokenBucket!;
  return tb.tokensPerFill! / Number(tb.fillInterval!.seconds);
}
