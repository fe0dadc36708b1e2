/**
 * Conversions between ts-proto messages (generated/) and the service's own types. The request
 * conversion works in place (decoded messages are ours to keep), so the hot path copies nothing.
 */
import type {
  RateLimitRequest as ProtoRequest,
  RateLimitResponse as ProtoResponse,
  RateLimitResponse_DescriptorStatus as ProtoStatus,
} from '../../generated/envoy/service/ratelimit/v3/rls';
import {
  type DescriptorStatus,
  type JsonObject,
  type RateLimitRequest,
  type RateLimitResponse,
  ServiceError,
} from '../limiter/types';

/** Turns a decoded request into the service's request (the per-descriptor UInt64 becomes a number). */
export function fromProtoRequest(msg: ProtoRequest): RateLimitRequest {
  const descriptors = msg.descriptors;
  for (let i = 0; i < descriptors.length; i++) {
    const d = descriptors[i]!;
    const h = d.hitsAddend;
    if (h !== undefined) {
      if (h > BigInt(Number.MAX_SAFE_INTEGER)) {
        throw new ServiceError(`descriptor ${i}: hits_addend ${h} is larger than ${Number.MAX_SAFE_INTEGER}`);
      }
      (d as unknown as { hitsAddend: number }).hitsAddend = Number(h);
    }
  }
  return msg as unknown as RateLimitRequest;
}

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

function toProtoStatus(s: DescriptorStatus): ProtoStatus {
  return {
    code: s.code as number,
    currentLimit: s.currentLimit === undefined ? undefined : (s.currentLimit as ProtoStatus['currentLimit']),
    limitRemaining: s.limitRemaining,
    durationUntilReset:
      s.durationUntilReset === undefined ? undefined : { seconds: BigInt(s.durationUntilReset), nanos: 0 },
    quota: undefined,
  };
}

const EMPTY = Buffer.alloc(0);

export function toProtoResponse(res: RateLimitResponse): ProtoResponse {
  return {
    overallCode: res.overallCode as number,
    statuses: res.statuses.map(toProtoStatus),
    responseHeadersToAdd: res.responseHeadersToAdd.map((h) => ({ key: h.key, value: h.value, rawValue: EMPTY })),
    requestHeadersToAdd: [],
    rawBody: EMPTY,
    dynamicMetadata: res.dynamicMetadata,
    quota: undefined,
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
