/**
 * The service's own view of an RLS v3 request and response. Transport adapters (gRPC, /json, the
 * runner) convert to and from these; the pipeline never sees protobuf or JSON.
 */

export interface Entry {
  key: string;
  value: string;
}

/** RateLimitDescriptor.RateLimitOverride; `unit` is an envoy.type.v3.RateLimitUnit number. */
export interface LimitOverride {
  requestsPerUnit: number;
  unit: number;
}

export interface Descriptor {
  entries: Entry[];
  limit?: LimitOverride | undefined;
  /** Per-descriptor hits_addend; present (even 0) overrides the request's value. */
  hitsAddend?: number | undefined;
}

export interface RateLimitRequest {
  domain: string;
  descriptors: Descriptor[];
  /** Request-level hits_addend; 0 means 1. */
  hitsAddend: number;
}

export const enum Code {
  UNKNOWN = 0,
  OK = 1,
  OVER_LIMIT = 2,
}

/** envoy.service.ratelimit.v3.RateLimitResponse.RateLimit.Unit numbers (WEEK is 7). */
export const enum Unit {
  UNKNOWN = 0,
  SECOND = 1,
  MINUTE = 2,
  HOUR = 3,
  DAY = 4,
  MONTH = 5,
  YEAR = 6,
  WEEK = 7,
}

export const UNIT_NAMES: Readonly<Record<number, string>> = {
  0: 'UNKNOWN',
  1: 'SECOND',
  2: 'MINUTE',
  3: 'HOUR',
  4: 'DAY',
  5: 'MONTH',
  6: 'YEAR',
  7: 'WEEK',
};

/** Window length in seconds per unit (upstream UnitToDivider); 0 for an invalid unit. */
export function unitToDivider(unit: number): number {
  switch (unit) {
    case Unit.SECOND:
      return 1;
    case Unit.MINUTE:
      return 60;
    case Unit.HOUR:
      return 3600;
    case Unit.DAY:
      return 86400;
    case Unit.WEEK:
      return 604800;
    case Unit.MONTH:
      return 2592000;
    case Unit.YEAR:
      return 31536000;
    default:
      return 0;
  }
}

export interface CurrentLimit {
  name: string;
  requestsPerUnit: number;
  unit: number;
}

export interface DescriptorStatus {
  code: Code;
  currentLimit?: CurrentLimit | undefined;
  limitRemaining: number;
  /** Whole seconds until the window resets; undefined when there is no current limit. */
  durationUntilReset?: number | undefined;
}

export interface HeaderValue {
  key: string;
  value: string;
}

/** A JSON value as carried in google.protobuf.Struct. */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };
export type JsonObject = { [key: string]: JsonValue };

export interface RateLimitResponse {
  overallCode: Code;
  statuses: DescriptorStatus[];
  responseHeadersToAdd: HeaderValue[];
  dynamicMetadata?: JsonObject | undefined;
}

/** An error answered to the caller with upstream's text (gRPC UNKNOWN, /json 400). */
export class ServiceError extends Error {
  override readonly name = 'ServiceError';
}

/** A request outside the service's limits (REQUEST_MAX_*): gRPC INVALID_ARGUMENT, /json 400. */
export class InvalidRateLimitRequestError extends ServiceError {}
