/** The broker's error envelopes to typed errors: Unauthorized whatever its cause's wording or status. */
import { FxcmApiError, FxcmNotFoundError, FxcmRateLimitError, FxcmUnauthorizedError, toApiError } from '../../src/trading/fxcm/errors';
import { retryAfterMsOf } from '../../src/platform/retry-after';

test("'Unauthorized', with or without its cause, and any 401 are FxcmUnauthorizedError", () => {
  expect(toApiError('/trading/get_model', 'Unauthorized')).toBeInstanceOf(FxcmUnauthorizedError);
  const withCause = toApiError('/trading/get_model', 'Unauthorized: token already has a streaming session on another connection', 200);
  expect(withCause).toBeInstanceOf(FxcmUnauthorizedError);
  expect(withCause.message).toContain('token already has a streaming session');
  expect(toApiError('/trading/get_model', 'anything', 401)).toBeInstanceOf(FxcmUnauthorizedError);
  expect(toApiError('/trading/get_model', 'ORA-20301: too many')).toBeInstanceOf(FxcmRateLimitError);
  expect(toApiError('/trading/get_model', 'Not Unauthorized here')).not.toBeInstanceOf(FxcmUnauthorizedError);
  expect(toApiError('/trading/get_model', 'Not Unauthorized here')).toBeInstanceOf(FxcmApiError);
});

test('a trade or order that does not exist is FxcmNotFoundError; other errors are not', () => {
  expect(toApiError('/trading/close_trade', 'Trade 170162801 not found')).toBeInstanceOf(FxcmNotFoundError);
  expect(toApiError('/trading/delete_order', 'Order 390285837 not found')).toBeInstanceOf(FxcmNotFoundError);
  expect(toApiError('/trading/open_trade', 'Unknown symbol XAU/EUR')).not.toBeInstanceOf(FxcmNotFoundError);
});

test('HTTP 429 is FxcmRateLimitError with its status and Retry-After, said in the message', () => {
  const e = toApiError('/trading/open_trade', 'Too Many Requests', 429, 7000);
  expect(e).toBeInstanceOf(FxcmRateLimitError);
  expect(e).toMatchObject({ httpStatus: 429, retryAfterMs: 7000 });
  expect(e.message).toBe('/trading/open_trade: Too Many Requests (HTTP 429, retry after 7 s)');
});

test('Retry-After: delta-seconds, or an HTTP-date against the answer\'s own Date', () => {
  expect(retryAfterMsOf('7')).toBe(7000);
  expect(retryAfterMsOf(' 0 ')).toBe(0);
  expect(retryAfterMsOf('Wed, 21 Oct 2026 07:28:30 GMT', 'Wed, 21 Oct 2026 07:28:00 GMT')).toBe(30_000);
  expect(retryAfterMsOf('Wed, 21 Oct 2026 07:28:00 GMT', 'Wed, 21 Oct 2026 07:28:30 GMT')).toBe(0);
  // without the server's Date an HTTP-date cannot be read against this machine's clock
  expect(retryAfterMsOf('Wed, 21 Oct 2026 07:28:30 GMT')).toBeUndefined();
  expect(retryAfterMsOf('soon')).toBeUndefined();
  expect(retryAfterMsOf(undefined)).toBeUndefined();
  expect(retryAfterMsOf(null)).toBeUndefined();
});
