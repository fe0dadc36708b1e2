/** Typed errors of the FXCM client. Every broker-side failure keeps the broker's code/message/parameters. */

/** The broker's JSON error body (`{"code":3,"message":"…","parameters":["10"]}`). */
export interface BrokerErrorBody {
  code: number;
  message: string;
  parameters: (string | number)[];
}

export class FxcmError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/**
 * `executed: false` from the server. `code` is -1 when the error string was not a JSON error body.
 * `httpStatus` is the answer's status; `retryAfterMs` what its Retry-After header asked for.
 */
export class FxcmApiError extends FxcmError {
  readonly code: number;
  readonly brokerMessage: string;
  readonly parameters: (string | number)[];
  constructor(
    readonly endpoint: string,
    readonly rawError: string,
    body?: BrokerErrorBody,
    readonly httpStatus = 200,
    readonly retryAfterMs?: number,
  ) {
    super(
      `${endpoint}: ${body ? `code ${body.code}: ${body.message}${body.parameters.length ? ` ${JSON.stringify(body.parameters)}` : ''}` : rawError || 'not executed'}` +
        (httpStatus === 429 ? ` (HTTP 429${retryAfterMs !== undefined ? `, retry after ${Math.ceil(retryAfterMs / 1000)} s` : ''})` : ''),
    );
    this.code = body?.code ?? -1;
    this.brokerMessage = body?.message ?? rawError;
    this.parameters = body?.parameters ?? [];
  }
}

/** `Unauthorized`: bad or stale bearer (the socket id changed, or a second session took the token). */
export class FxcmUnauthorizedError extends FxcmApiError {}

/**
 * The broker's per-command call limits (`ORA-20301`), the per-session request cap (HTTP 403), or
 * HTTP 429 Too Many Requests (`retryAfterMs` from its Retry-After; the runner's call budget then
 * holds calls of that kind until then).
 */
export class FxcmRateLimitError extends FxcmApiError {}

/**
 * The trade or order a call names does not exist (any more): `Trade 170162801 not found` /
 * `Order 390285837 not found` (the simulator's wording; the broker documents none).
 */
export class FxcmNotFoundError extends FxcmApiError {}

/** Weekend maintenance / market closed: `executed:false` with an empty error (candles). */
export class FxcmMarketClosedError extends FxcmApiError {}

/** A rule checked before sending failed; carries the code and message the broker would return. */
export class FxcmRuleError extends FxcmError {
  readonly code: number;
  readonly brokerMessage: string;
  readonly parameters: (string | number)[];
  constructor(readonly endpoint: string, readonly rule: string, body: BrokerErrorBody) {
    super(`${endpoint}: rule ${rule}: code ${body.code}: ${body.message}`);
    this.code = body.code;
    this.brokerMessage = body.message;
    this.parameters = body.parameters;
  }
}

/** Handshake refused (HTTP 403, or the socket error "Your token is not valid…"). */
export class FxcmAuthError extends FxcmError {
  constructor(message: string, readonly httpStatus?: number) {
    super(message);
  }
}

/**
 * Network / protocol failure, HTTP status other than 200 without a usable body. `unanswered`: the
 * request was (or may have been) sent and no answer says what became of it (answerLost).
 */
export class FxcmTransportError extends FxcmError {
  constructor(message: string, readonly httpStatus?: number, override readonly cause?: unknown, readonly unanswered = false) {
    super(message);
  }
}

/**
 * HTTP 5xx from the broker (or a gateway before it), whatever its body: `httpStatus`, and
 * `retryAfterMs` from a Retry-After header. Whether an order call it answers was executed is not
 * known from it: it is unanswered (answerLost).
 */
export class FxcmServerError extends FxcmTransportError {
  constructor(
    message: string,
    override readonly httpStatus: number,
    readonly retryAfterMs?: number,
  ) {
    super(message, httpStatus, undefined, true);
  }
}

/** `unanswered`: a REST request sent whose answer did not come in time (answerLost). */
export class FxcmTimeoutError extends FxcmError {
  constructor(message: string, readonly unanswered = false) {
    super(message);
  }
}

/**
 * Whether a failed REST call may have been run by the broker all the same: it was sent (or may
 * have been) and no answer came that says what became of it — a timeout, the connection lost
 * before the answer, an HTTP 5xx. Only a look at the broker tells (its pushes, a snapshot);
 * resending could do it twice.
 */
export function answerLost(e: unknown): boolean {
  return (e instanceof FxcmTimeoutError || e instanceof FxcmTransportError) && e.unanswered;
}

/** The client is not connected (no socket id for the bearer). */
export class FxcmNotConnectedError extends FxcmError {}

/** An order ended (Order D push) without any trade id: canceled or requoted. */
export class FxcmOrderRejectedError extends FxcmError {
  constructor(readonly orderId: string, readonly status: number) {
    super(`order ${orderId} ended without a trade (status ${status})`);
  }
}

/** Parses the `error` string of an envelope: a JSON-encoded broker error body, or plain text. */
export function parseBrokerError(error: string | undefined): BrokerErrorBody | undefined {
  if (!error) return undefined;
  const s = error.trim();
  if (!s.startsWith('{')) return undefined;
  try {
    const o = JSON.parse(s) as Partial<BrokerErrorBody>;
    if (typeof o.code === 'number') {
      return { code: o.code, message: String(o.message ?? ''), parameters: Array.isArray(o.parameters) ? o.parameters : [] };
    }
  } catch {
    /* plain string */
  }
  return undefined;
}

/** Maps an envelope error to the typed error. */
export function toApiError(endpoint: string, error: string | undefined, httpStatus = 200, retryAfterMs?: number): FxcmApiError {
  const raw = error ?? '';
  const body = parseBrokerError(raw);
  if (raw.startsWith('Unauthorized') || httpStatus === 401) return new FxcmUnauthorizedError(endpoint, raw, body, httpStatus);
  if (/ORA-20301/.test(raw) || httpStatus === 403 || httpStatus === 429) return new FxcmRateLimitError(endpoint, raw, body, httpStatus, retryAfterMs);
  if (raw === '' && endpoint.startsWith('/candles')) return new FxcmMarketClosedError(endpoint, raw, body, httpStatus);
  if (/^(Trade|Order) \S+ not found/i.test(raw)) return new FxcmNotFoundError(endpoint, raw, body, httpStatus);
  return new FxcmApiError(endpoint, raw, body, httpStatus);
}
