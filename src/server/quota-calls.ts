/**
 * StreamRateLimitQuotas as every transport serves it: each message of a stream goes to the quota
 * engine in order; its actions go back as responses; a refused report, or a client that does not
 * read its responses, ends the stream with a status naming why. Counts
 * `ratelimit_server.StreamRateLimitQuotas.total_requests` (streams opened), as upstream names
 * its method stats.
 */
import { status } from '@grpc/grpc-js';
import type { RateLimitQuotaResponse, RateLimitQuotaUsageReports } from '../../generated/envoy/service/rate_limit_quota/v3/rlqs';
import type { QuotaService } from '../quota/quota-service';
import { QuotaStreamError } from '../quota/types';
import type { Counter, StatsStore } from '../stats/store';
import type { Logger } from '../telemetry/logger';
import { quotaResponseOf, usageReportsOf } from './quota-codec';
import { RateLimitQuotaUsageReports as UsageReportsCodec } from '../../generated/envoy/service/rate_limit_quota/v3/rlqs';
import { GRPC_PREFIX_BYTES } from './proto-codec';

export const STREAM_RATE_LIMIT_QUOTAS_PATH = '/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas';

/** Responses a client may leave unread before its stream is ended (each is small). */
export const MAX_UNREAD_RESPONSES = 1024;

/** How a transport carries one stream. */
export interface QuotaStreamTransport {
  write(response: RateLimitQuotaResponse): void;
  /** Responses written but not yet taken by the client (flow control). */
  unread(): number;
  /** Ends the stream with a non-OK status. */
  fail(code: status, details: string): void;
  /** Ends the stream at once (RST_STREAM): a client that does not read cannot take a status. */
  reset(details: string): void;
}

export interface QuotaStreamHandle {
  /** Handles one report at once (its answer, if any, is written before this returns). */
  message(m: RateLimitQuotaUsageReports): void;
  /** The client ended or left: the stream's shares are released. */
  close(): void;
}

export class QuotaCalls {
  private readonly total: Counter;

  constructor(
    private readonly quota: QuotaService,
    stats: StatsStore,
    private readonly logger: Logger,
  ) {
    this.total = stats.counter('ratelimit_server.StreamRateLimitQuotas.total_requests');
  }

  open(t: QuotaStreamTransport): QuotaStreamHandle {
    this.total.inc();
    let ended = false;
    const stream = this.quota.open((actions) => {
      if (ended) return;
      if (t.unread() >= MAX_UNREAD_RESPONSES) {
        ended = true;
        stream.close();
        this.quota.stats?.streamErrors.inc();
        this.logger.debug(`RLQS stream ${stream.id} reset: the client left ${MAX_UNREAD_RESPONSES} responses unread`);
        t.reset(`the client left ${MAX_UNREAD_RESPONSES} responses unread`);
        return;
      }
      t.write(quotaResponseOf(actions));
    });
    const end = (code: status, details: string): void => {
      if (ended) return;
      ended = true;
      stream.close();
      this.quota.stats?.streamErrors.inc();
      this.logger.debug(`RLQS stream ${stream.id} ended: ${details}`);
      t.fail(code, details);
    };
    // A report is handled at once (the engine does no I/O on the way), so in the order they came.
    return {
      message: (m) => {
        if (ended) return;
        try {
          stream.report(usageReportsOf(m));
        } catch (err) {
          if (err instanceof QuotaStreamError) end(err.code, err.message);
          else end(status.INTERNAL, `RLQS: ${(err as Error)?.message ?? String(err)}`);
        }
      },
      close: () => {
        ended = true;
        stream.close();
      },
    };
  }
}

/** Why a lean transport ends an RLQS stream while reading its messages. */
export interface QuotaReadError {
  readonly code: status;
  readonly details: string;
}

/** A message's declared length, checked against REQUEST_MAX_BYTES before it is read. */
export function checkQuotaLength(length: number, maxRequestBytes: number): QuotaReadError | undefined {
  return length > maxRequestBytes ? { code: status.RESOURCE_EXHAUSTED, details: `Received message larger than max (${length} vs ${maxRequestBytes})` } : undefined;
}

/** One whole length-prefixed request message of an RLQS stream, decoded. */
export function decodeQuotaMessage(frame: Buffer): RateLimitQuotaUsageReports | QuotaReadError {
  if (frame[0] !== 0) return { code: status.UNIMPLEMENTED, details: 'compressed messages are not accepted on StreamRateLimitQuotas' };
  try {
    return UsageReportsCodec.decode(frame.subarray(GRPC_PREFIX_BYTES));
  } catch (err) {
    return { code: status.INVALID_ARGUMENT, details: `invalid RateLimitQuotaUsageReports: ${(err as Error).message}` };
  }
}

export const isQuotaReadError = (v: RateLimitQuotaUsageReports | QuotaReadError): v is QuotaReadError => 'code' in v && 'details' in v;
