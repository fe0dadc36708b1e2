/**
 * The two kinds of HTTP/2 error (RFC 9113 5.4) as values: the frame handlers of a connection
 * return one (undefined when all is well, so the common case allocates nothing), and the
 * connection acts on it in one place (H2Connection.handleError), as Go's x/net/http2 and Rust's
 * h2 do. Not Errors: they are never thrown, and need no stack.
 */
import type { ErrorCode } from './frames';

/** The connection must end: GOAWAY with `code` and `debug`, then the socket closes (5.4.1). */
export class ConnectionError {
  constructor(
    readonly code: ErrorCode,
    readonly debug: string,
  ) {}
}

/** Stream `id` must end: RST_STREAM with `code`; the connection goes on (5.4.2). */
export class StreamError {
  constructor(
    readonly id: number,
    readonly code: ErrorCode,
  ) {}
}

export type H2Error = ConnectionError | StreamError;
