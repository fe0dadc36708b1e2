/** A remote `ratelimit` over gRPC (plaintext), seen as the service's own request and response types. */
import * as grpc from '@grpc/grpc-js';
import { RateLimitServiceClient } from '../../generated/envoy/service/ratelimit/v3/rls';
import type { RateLimitRequest, RateLimitResponse } from '../core/rls';
import { fromProtoResponse, toProtoRequest } from './proto-convert';

export interface RemoteRateLimitService {
  shouldRateLimit(req: RateLimitRequest): Promise<RateLimitResponse>;
  close(): Promise<void>;
}

/** Connects lazily to `address` (e.g. `127.0.0.1:8081`); each call fails after `timeoutMs`. */
export function remoteRateLimitService(address: string, timeoutMs = 5000): RemoteRateLimitService {
  const client = new RateLimitServiceClient(address, grpc.credentials.createInsecure());
  return {
    shouldRateLimit: (req) =>
      new Promise((resolve, reject) => {
        client.shouldRateLimit(toProtoRequest(req), new grpc.Metadata(), { deadline: Date.now() + timeoutMs }, (err, res) => {
          if (err) reject(new Error(`rate limit service ${address}: ${err.message}`));
          else resolve(fromProtoResponse(res!));
        });
      }),
    close: async () => client.close(),
  };
}
