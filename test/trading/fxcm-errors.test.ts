/** The broker's error envelopes to typed errors: Unauthorized whatever its cause's wording or status. */
import { FxcmApiError, FxcmNotFoundError, FxcmRateLimitError, FxcmUnauthorizedError, toApiError } from '../../src/trading/fxcm/errors';

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
