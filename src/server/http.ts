/**
 * The HTTP listener (upstream port 8080): `POST /json` answers the proto3-JSON form of
 * ShouldRateLimit (200 OK, 429 over limit, 400 bad input or a failed decision) and
 * `/healthcheck` answers 200 `OK` or 500. Like upstream's router, any method is accepted.
 */
import http from 'node:http';
import type { Logger } from '../telemetry/logger';
import { NOOP_TRACING, type Span, type Tracing } from '../telemetry/tracing';
import { requestText } from './request-text';
import type { RateLimitRequest, RateLimitResponse } from '../core/rls';
import { Code } from '../core/rls';
import type { Health } from './health';
import { BodyTooLargeError, pathOf, plainError, plainText, readBody } from './http-util';
import { JsonRequestError, parseRateLimitRequestBytes, serializeRateLimitResponse } from './json-codec';

/** What the listeners ask: RateLimitService.decideNow (a response now, or a promise of one). */
export interface Decider {
  decideNow(request: RateLimitRequest, span?: Span): RateLimitResponse | Promise<RateLimitResponse>;
}

export interface HttpServerOptions {
  service: Decider;
  health: Health;
  logger: Logger;
  /** Largest accepted /json body in bytes (REQUEST_MAX_BYTES). */
  maxBodyBytes: number;
  tracing?: Tracing;
}


export function createHttpHandler(opts: HttpServerOptions): http.RequestListener {
  const { service, health, logger, maxBodyBytes } = opts;
  const tracing = opts.tracing ?? NOOP_TRACING;
  /** Writes a decision: 200 OK, 429 over limit (500 for an UNKNOWN overall code, as upstream). */
  const answer = (res: http.ServerResponse, response: RateLimitResponse): void => {
    let body: string;
    try {
      body = serializeRateLimitResponse(response);
    } catch (err) {
      logger.error(`cannot encode /json response: ${String(err)}`);
      plainError(res, 500, 'Internal Server Error');
      return;
    }
    // One writeHead with a flat header list skips the per-response header map. It fixes the
    // header before end(), so the length must be in it: without it node:http answers chunked.
    res.writeHead(response.overallCode === Code.OVER_LIMIT ? 429 : response.overallCode === Code.OK ? 200 : 500, [
      'Content-Type',
      'application/json',
      'Content-Length',
      String(Buffer.byteLength(body)),
    ]);
    res.end(body);
  };

  const failed = (res: http.ServerResponse, err: unknown, span: Span | undefined): void => {
    span?.end();
    const msg = (err as Error)?.message ?? String(err);
    logger.debug(`error answering /json request: ${msg}`);
    // Upstream answers every decision error on /json with 400, including store errors.
    plainError(res, 400, 'Bad Request', msg);
  };

  // Callbacks rather than async functions: no promise at all when the store counts in process.
  const handleJson = (req: http.IncomingMessage, res: http.ServerResponse): void =>
    readBody(req, maxBodyBytes, (readError, body) => {
      if (readError !== undefined) {
        if (readError instanceof BodyTooLargeError) {
          // The rest of the body is not wanted: close the connection after the answer rather
          // than read (or wait for) what the client declared.
          res.shouldKeepAlive = false;
          plainError(res, 413, 'Request Entity Too Large', readError.message);
        }
        else plainError(res, 400, 'Bad Request', readError.message);
        return;
      }
      let request: RateLimitRequest;
      try {
        request = parseRateLimitRequestBytes(body!);
      } catch (err) {
        const msg = err instanceof JsonRequestError ? err.message : String((err as Error)?.message ?? err);
        logger.debug(`error parsing /json request: ${msg}`);
        plainError(res, 400, 'Bad Request', msg);
        return;
      }
      const span = tracing.enabled ? tracing.startCallSpan(req.headers, request.domain, () => requestText(request)) : undefined;
      let decided: RateLimitResponse | Promise<RateLimitResponse>;
      try {
        decided = service.decideNow(request, span);
      } catch (err) {
        failed(res, err, span);
        return;
      }
      if (decided instanceof Promise) {
        decided.then(
          (response) => {
            span?.end();
            answer(res, response);
          },
          (err: unknown) => failed(res, err, span),
        );
      } else {
        span?.end();
        answer(res, decided);
      }
    });

  return (req, res) => {
    const path = pathOf(req.url);
    if (path === '/json') {
      handleJson(req, res);
      return;
    }
    if (path === '/healthcheck') {
      req.resume();
      if (health.isHealthy()) plainText(res, 200, 'OK');
      else {
        res.statusCode = 500;
        res.end();
      }
      return;
    }
    req.resume();
    plainError(res, 404, '404 page not found');
  };
}
