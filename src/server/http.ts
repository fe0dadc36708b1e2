/**
 * The HTTP port (upstream port 8080): `POST /json` answers the proto3-JSON form of
 * ShouldRateLimit (200 OK, 429 over limit, 400 bad input or a failed decision) and
 * `/healthcheck` answers 200 `OK` or 500. Like upstream's router, any method is accepted.
 * Served by our HTTP/1.1 connection handler (http1/), which calls this per request.
 */
import type { Logger } from '../telemetry/logger';
import { NOOP_TRACING, type Span, type Tracing } from '../telemetry/tracing';
import type { Transport } from '../telemetry/denials';
import { requestText } from './request-text';
import type { RateLimitRequest } from '../core/rls';
import type { Caller } from '../core/store';
import { socketCaller } from './callers';
import { Code } from '../core/rls';
import type { DecisionAnswer } from '../limiter/service';
import type { Health } from './health';
import { errorMessage } from '../platform/errors';
import { parseRateLimitRequestBytes, serializeRateLimitResponse } from './json-codec';
import { errorAnswer, type Exchange, type ExchangeHandler } from './http1/connection';
import type { BodyPlan, RequestHead } from './http1/parser';

/**
 * What the listeners ask of the limiter: RateLimitService.decideInto, which hands the outcome to
 * the listener's answer, in the same turn when the store counts in process.
 */
export interface Decider {
  decideInto<C>(request: RateLimitRequest, span: Span | undefined, caller: Caller | undefined, transport: Transport, ctx: C, answer: DecisionAnswer<C>): void;
}

export interface HttpServerOptions {
  service: Decider;
  health: Health;
  logger: Logger;
  /** Largest accepted /json body in bytes (REQUEST_MAX_BYTES). */
  maxBodyBytes: number;
  tracing?: Tracing;
  /** In worker mode: this worker's number, sent in `workerHeader` of /healthcheck answers. */
  worker?: { readonly header: string; readonly slot: number };
}

const DROP_BODY: BodyPlan = { keep: false };
const JSON_HEADERS = 'Content-Type: application/json\r\n';
const TEXT_HEADERS = 'Content-Type: text/plain; charset=utf-8\r\n';

export function createHttpHandler(opts: HttpServerOptions): ExchangeHandler {
  const { service, health, logger, maxBodyBytes } = opts;
  const tracing = opts.tracing ?? NOOP_TRACING;
  const keepBody: BodyPlan = { keep: true, limit: maxBodyBytes };
  const workerHeader = opts.worker === undefined ? '' : `${opts.worker.header}: ${opts.worker.slot}\r\n`;
  const healthHeaders = TEXT_HEADERS + workerHeader;

  /** A decision, 200 OK or 429 over limit (500 for an UNKNOWN overall code, as upstream); a failed one, 400. */
  const answer: DecisionAnswer<Exchange> = {
    decided(exchange, response) {
      let body: string;
      try {
        body = serializeRateLimitResponse(response);
      } catch (err) {
        logger.error(`cannot encode /json response: ${String(err)}`);
        errorAnswer(exchange, 500);
        return;
      }
      const code = response.overallCode === Code.OVER_LIMIT ? 429 : response.overallCode === Code.OK ? 200 : 500;
      exchange.answer(code, JSON_HEADERS, body);
    },
    failed(exchange, err) {
      const msg = errorMessage(err);
      logger.debug(`error answering /json request: ${msg}`);
      // Upstream answers every decision error on /json with 400, including store errors.
      errorAnswer(exchange, 400, msg);
    },
  };

  const handleJson = (head: RequestHead, body: Buffer, exchange: Exchange): void => {
    let request: RateLimitRequest;
    try {
      request = parseRateLimitRequestBytes(body);
    } catch (err) {
      const msg = errorMessage(err);
      logger.debug(`error parsing /json request: ${msg}`);
      errorAnswer(exchange, 400, msg);
      return;
    }
    const span = tracing.enabled ? tracing.startCallSpan(headerRecord(head.rawHeaders), request.domain, () => requestText(request)) : undefined;
    service.decideInto(request, span, socketCaller(exchange.socket), 'http', exchange, answer);
  };

  return {
    plan: (head) => (head.path === '/json' ? keepBody : DROP_BODY),
    handle(head, body, exchange) {
      const path = head.path;
      if (path === '/json') handleJson(head, body, exchange);
      else if (path === '/healthcheck') {
        if (health.isHealthy()) exchange.answer(200, healthHeaders, 'OK');
        else exchange.answer(500, workerHeader, '');
      } else errorAnswer(exchange, 404, undefined, '404 page not found');
    },
  };
}

/** The request's headers by lower-case name (repeated ones joined), for trace propagation. */
function headerRecord(raw: readonly string[]): Record<string, string> {
  // No prototype: `constructor` or `__proto__` is a header name like any other.
  const out: Record<string, string> = Object.create(null);
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!.toLowerCase();
    const prev = out[name];
    out[name] = prev === undefined ? raw[i + 1]! : `${prev}, ${raw[i + 1]!}`;
  }
  return out;
}
