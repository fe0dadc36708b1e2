/** HTTP/2 frame and setting codes (RFC 9113 sections 6, 7 and 11) and frame header writing. */

export const FRAME_HEADER_BYTES = 9;
export const CONNECTION_PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');

export const enum FrameType {
  DATA = 0x0,
  HEADERS = 0x1,
  PRIORITY = 0x2,
  RST_STREAM = 0x3,
  SETTINGS = 0x4,
  PUSH_PROMISE = 0x5,
  PING = 0x6,
  GOAWAY = 0x7,
  WINDOW_UPDATE = 0x8,
  CONTINUATION = 0x9,
}

export const enum Flag {
  END_STREAM = 0x1,
  ACK = 0x1,
  END_HEADERS = 0x4,
  PADDED = 0x8,
  PRIORITY = 0x20,
}

export const enum ErrorCode {
  NO_ERROR = 0x0,
  PROTOCOL_ERROR = 0x1,
  INTERNAL_ERROR = 0x2,
  FLOW_CONTROL_ERROR = 0x3,
  SETTINGS_TIMEOUT = 0x4,
  STREAM_CLOSED = 0x5,
  FRAME_SIZE_ERROR = 0x6,
  REFUSED_STREAM = 0x7,
  CANCEL = 0x8,
  COMPRESSION_ERROR = 0x9,
  CONNECT_ERROR = 0xa,
  ENHANCE_YOUR_CALM = 0xb,
  INADEQUATE_SECURITY = 0xc,
  HTTP_1_1_REQUIRED = 0xd,
}

export const enum Setting {
  HEADER_TABLE_SIZE = 0x1,
  ENABLE_PUSH = 0x2,
  MAX_CONCURRENT_STREAMS = 0x3,
  INITIAL_WINDOW_SIZE = 0x4,
  MAX_FRAME_SIZE = 0x5,
  MAX_HEADER_LIST_SIZE = 0x6,
}

/** The initial flow-control window of a connection and of a stream (RFC 9113 6.9.2). */
export const DEFAULT_WINDOW = 65_535;
/**
 * Our SETTINGS_INITIAL_WINDOW_SIZE: what a client may send on a new stream before we open its
 * window further (to the message it declares). Far above a rate limit request; small, so that
 * streams a client never finishes hold little.
 */
export const STREAM_WINDOW = 16 * 1024;
export const MAX_WINDOW = 2 ** 31 - 1;
export const DEFAULT_MAX_FRAME_SIZE = 16_384;
export const MAX_FRAME_SIZE_LIMIT = 2 ** 24 - 1;

/** Writes a frame header at `pos`; returns the position of the payload. */
export function writeFrameHeader(out: Buffer, pos: number, length: number, type: FrameType, flags: number, streamId: number): number {
  out[pos] = length >>> 16;
  out[pos + 1] = (length >>> 8) & 0xff;
  out[pos + 2] = length & 0xff;
  out[pos + 3] = type;
  out[pos + 4] = flags;
  out.writeUInt32BE(streamId, pos + 5);
  return pos + FRAME_HEADER_BYTES;
}
