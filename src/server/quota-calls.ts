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
import { QuotaStreamError, type UsageReports } from '../quota/types';
import type { Counter, StatsStore } from '../stats/store';
import type { Logger } from '../telemetry/logger';
import { decodeUsageReports, encodeQuotaResponseFrame } from './quota-codec';
import { ProtoDecodeError } from '../platform/proto-wire';

export const STREAM_RATE_LIMIT_QUOTAS_PATH = '/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas';

/** Responses a client may leave unread before its stream is ended (each is small). */
export const MAX_UNREAD_RESPONSES = 1024;

/**
 * Bucket usages of one report handled in one turn of the event loop: a bigger report (up to
 * REQUEST_MAX_BYTES, 30,000 buckets and more) is handled in parts of this many, each answered as
 * it is handled, one turn after the other, so it holds no other call for more than some
 * milliseconds. Envoy's reports are one part unless it reports more than this many buckets.
 */
export const REPORT_PART_USAGES = 1000;

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
  /** The report handled in parts is done: the transport may hand over the next message (see `busy`). */
  resume(): void;
}

export interface QuotaStreamHandle {
  /**
   * Handles one RateLimitQuotaUsageReports (its bytes, past the gRPC prefix): its answer, if any,
   * is written before this returns, unless the report is handled in parts (then `busy`); one that
   * cannot be decoded ends the stream.
   */
  message(body: Buffer): void;
  /**
   * A report is being handled in parts: the transport hands over no other message (it leaves them
   * to flow control) until `resume()`.
   */
  readonly busy: boolean;
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
    /** Runs a step of a report; false once the stream has ended (by it or before). */
    const step = (run: () => void): boolean => {
      if (ended) return false;
      try {
        run();
      } catch (err) {
        if (err instanceof ProtoDecodeError) end(status.INVALID_ARGUMENT, `invalid RateLimitQuotaUsageReports: ${err.message}`);
        else if (err instanceof QuotaStreamError) end(err.code, err.message);
        else end(status.INTERNAL, `RLQS: ${(err as Error)?.message ?? String(err)}`);
      }
      return !ended;
    };
    let busy = false;
    /** Messages a transport handed over while a report was handled in parts (it should not: kept in order all the same). */
    const waiting: Buffer[] = [];
    // A report is handled as it comes (the engine does no I/O on the way), so in the order they came;
    // a big one in parts, in turns one after the other, the next message waiting.
    const message = (body: Buffer): void => {
      if (busy) {
        waiting.push(body);
        return;
      }
      let r: UsageReports | undefined;
      if (!step(() => (r = decodeUsageReports(body))) || r === undefined) return;
      const report = r;
      const usages = report.usages;
      if (usages.length <= REPORT_PART_USAGES) {
        step(() => stream.report(report));
        return;
      }
      busy = true;
      const part = (at: number): void => {
        const to = Math.min(usages.length, at + REPORT_PART_USAGES);
        const last = to === usages.length;
        const going = step(() => stream.report({ domain: report.domain, usages: usages.slice(at, to) }, { at, last }));
        if (going && !last) {
          setImmediate(part, to);
          return;
        }
        busy = false;
        while (going && !busy && waiting.length > 0) message(waiting.shift()!);
        if (going && !busy) t.resume();
      };
      part(0);
    };
    return {
      message,
      get busy() {
        return busy;
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
