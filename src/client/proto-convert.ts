/**
 * Conversions between ts-proto messages (generated/) and the service's own types, for clients
 * (`ratelimit-client`, the runner); the server uses its hand-written proto-codec.
 */
import type { RateLimitRequest as ProtoRequest, RateLimitResponse as ProtoResponse } from '../../generated/envoy/service/ratelimit/v3/rls';
import type { JsonObject, RateLimitRequest, RateLimitResponse } from '../core/rls';

/** Builds the request message for a client from the service's request type. */
export function toProtoRequest(req: RateLimitRequest): ProtoRequest {
  return {
    domain: req.domain,
    hitsAddend: req.hitsAddend,
    descriptors: req.descriptors.map((d) => ({
      entries: d.entries.map((e) => ({ key: e.key, value: e.value })),
      limit: d.limit === undefined ? undefined : { requestsPerUnit: d.limit.requestsPerUnit, unit: d.limit.unit },
      hitsAddend: d.hitsAddend === undefined ? undefined : BigInt(d.hitsAddend),
    })),
  };
}

/** The service's response type from a decoded response (the client prints it as JSON). */
export function fromProtoResponse(msg: ProtoResponse): RateLimitResponse {
  return {
    overallCode: msg.overallCode as number,
    statuses: msg.statuses.map((s) => ({
      code: s.code as number,
      currentLimit: s.currentLimit,
      limitRemaining: s.limitRemaining,
      durationUntilReset: s.durationUntilReset === undefined ? undefined : Number(s.durationUntilReset.seconds),
    })),
    responseHeadersToAdd: msg.responseHeadersToAdd.map((h) => ({ key: h.key, value: h.value })),
    dynamicMetadata: msg.dynamicMetadata as JsonObject | undefined,
  };
}
