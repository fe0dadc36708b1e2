/**
 * StreamRateLimitQuotas as every transport serves it: each message of a stream goes to the quota
 * engine in order; its actions go back as responses; a refused report, a stream over its budget
 * (the engine's admission: per stream, per connection, per process), or a client that does not
 * read its responses, ends the stream with a status naming why. The transport names each
 * stream's connection, so the streams of one connection share its budget. Counts
 * `ratelimit_server.StreamRateLimitQuotas.total_requests` (streams opened), as upstream names
 * its method stats.
 */
import { status } from '@grpc/grpc-js';
import type { QuotaService } from '../quota/quota-service';
import { QuotaStreamError } from '../quota/types';
import type { Counter, StatsStore } from '../stats/store';
import type { Logger } from '../telemetry/logger';
import { decodeUsageReports, encodeQuotaResponseFrame } from './quota-codec';
import { ProtoDecodeError } from './proto-wire';

export const STREAM_RATE_LIMIT_QUOTAS_PATH = '/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas';

/** Responses a client may leave unread before its stream is ended (each is small). */
export const MAX_UNREAD_RESPONSES = 1024;

/** How a transport carries one stream. */
export interface QuotaStreamTransport {
  /** One RateLimitQuotaResponse as an uncompressed gRPC message (its 5-byte prefix included). */
  write(frame: Buffer): void;
  /** Responses written but not yet taken by the client (flow control). */
  unread(): number;
  /** Ends the stream with a non-OK status. */
  fail(code: status, details: string): void;
  /** Ends the stream at once (RST_STREAM): a client that does not read cannot take a status. */
  reset(details: string): void;
}

export interface QuotaStreamHandle {
  /**
   * Handles one RateLimitQuotaUsageReports (its bytes, past the gRPC prefix) at once: its answer,
   * if any, is written before this returns; one that cannot be decoded ends the stream.
   */
  message(body: Buffer): void;
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

  /** A new stream on `connection` (any value the transport keeps for the connection it came on). */
  open(t: QuotaStreamTransport, connection: unknown): QuotaStreamHandle {
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
      t.write(encodeQuotaResponseFrame(actions));
    }, connection);
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
      message: (body) => {
        if (ended) return;
        try {
          stream.report(decodeUsageReports(body));
        } catch (err) {
          if (err instanceof ProtoDecodeError) end(status.INVALID_ARGUMENT, `invalid RateLimitQuotaUsageReports: ${err.message}`);
          else if (err instanceof QuotaStreamError) end(err.code, err.message);
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

/** Why a whole length-prefixed request message of an RLQS stream cannot be taken, if it cannot. */
export function quotaFrameError(frame: Buffer): QuotaReadError | undefined {
  return frame[0] !== 0 ? { code: status.UNIMPLEMENTED, details: 'compressed messages are not accepted on StreamRateLimitQuotas' } : undefined;
}
