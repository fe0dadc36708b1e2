/**
 * What one connection may make the server do beyond answering requests, each a token bucket: a
 * burst, then a rate per second. A client past one is ended with GOAWAY ENHANCE_YOUR_CALM, as
 * nghttp2 and Go end the abusive peers of the known HTTP/2 attacks.
 */

/** Stream resets a client sends or provokes (rapid reset): nghttp2's defaults. */
export const RESETS = { burst: 1000, perSecond: 33 } as const;
/**
 * Frames that carry no request (SETTINGS, PING, PRIORITY, WINDOW_UPDATE, empty DATA and
 * CONTINUATION, unknown types): a flood of them costs the server for nothing. Each request stream
 * earns `perStream` more, for the window updates and pings that come with real traffic.
 */
export const CONTROL_FRAMES = { burst: 5000, perSecond: 500, perStream: 10 } as const;
/**
 * Header field representations decoded (the work of HPACK decoding): a block's first `freePerBlock`
 * are free, so requests never touch the bucket; an HPACK bomb (one large table entry referenced
 * tens of thousands of times) spends it at once.
 */
export const HEADER_WORK = { burst: 200_000, perSecond: 100_000, freePerBlock: 256 } as const;
