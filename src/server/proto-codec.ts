/**
 * The wire codec of ShouldRateLimit, by hand: decodes a RateLimitRequest straight into the
 * service's types (strict: truncated input, bad wire types and invalid UTF-8 are errors, as in Go's
 * protobuf, where ts-proto would silently substitute U+FFFD) and encodes a RateLimitResponse
 * straight from them, with no intermediate message objects on the hot path.
 *
 * Field numbers (data-plane-api): RateLimitRequest {domain 1, descriptors 2, hits_addend 3};
 * RateLimitDescriptor {entries 1, limit 2, hits_addend 3 (UInt64Value)}; Entry {key 1, value 2};
 * RateLimitOverride {requests_per_unit 1, unit 2}; RateLimitResponse {overall_code 1,
 * statuses 2, response_headers_to_add 3, dynamic_metadata 6}; DescriptorStatus {code 1,
 * current_limit 2, limit_remaining 3, duration_until_reset 4}; RateLimit {requests_per_unit 1,
 * unit 2, name 3}; Duration {seconds 1}; HeaderValue {key 1, value 2}.
 */
import { Struct } from '../../generated/google/protobuf/struct';
import type { Descriptor, DescriptorStatus, Entry, RateLimitRequest, RateLimitResponse } from '../core/rls';
import { notUtf8, ProtoDecodeError, Reader, strSize, varintSize, wireError, Writer } from '../platform/proto-wire';

export { ProtoDecodeError } from '../platform/proto-wire';

/**
 * Decodes a RateLimitRequest from `buf[start, end)` (a gRPC frame is decoded in place, past its
 * prefix); throws ProtoDecodeError on malformed input.
 */
export function decodeRateLimitRequest(buf: Buffer, start = 0, end = buf.length): RateLimitRequest {
  const r = new Reader(buf, start, end);
  let domain = '';
  const descriptors: Descriptor[] = [];
  let hitsAddend = 0;
  while (r.pos < r.end) {
    const tag = r.varint();
    const field = Math.floor(tag / 8);
    const wire = tag & 7;
    if (field === 1) {
      if (wire !== 2) throw wireError(wire, 2, 'domain');
      domain = r.string() ?? notUtf8('domain');
    } else if (field === 2) {
      if (wire !== 2) throw wireError(wire, 2, 'descriptors');
      const [start, end] = r.span();
      descriptors.push(decodeDescriptor(buf, start, end, descriptors.length));
    } else if (field === 3) {
      if (wire !== 0) throw wireError(wire, 0, 'hits_addend');
      hitsAddend = r.uint32();
    } else if (field === 0) {
      throw new ProtoDecodeError('invalid field number 0');
    } else {
      r.skip(wire);
    }
  }
  return { domain, descriptors, hitsAddend };
}

function decodeDescriptor(buf: Buffer, start: number, end: number, index: number): Descriptor {
  const r = new Reader(buf, start, end);
  const entries: Entry[] = [];
  let limit: Descriptor['limit'];
  let hitsAddend: number | undefined;
  while (r.pos < r.end) {
    const tag = r.varint();
    const field = Math.floor(tag / 8);
    const wire = tag & 7;
    if (field === 1) {
      if (wire !== 2) throw wireError(wire, 2, `descriptors[${index}].entries`);
      const [s, e] = r.span();
      entries.push(decodeEntry(buf, s, e, index, entries.length));
    } else if (field === 2) {
      if (wire !== 2) throw wireError(wire, 2, `descriptors[${index}].limit`);
      const [s, e] = r.span();
      limit = decodeOverride(buf, s, e, limit);
    } else if (field === 3) {
      if (wire !== 2) throw wireError(wire, 2, `descriptors[${index}].hits_addend`);
      const [s, e] = r.span();
      hitsAddend = decodeUInt64Value(buf, s, e, hitsAddend ?? 0, index);
    } else if (field === 0) {
      throw new ProtoDecodeError('invalid field number 0');
    } else {
      r.skip(wire);
    }
  }
  return { entries, limit, hitsAddend };
}

function decodeEntry(buf: Buffer, start: number, end: number, d: number, i: number): Entry {
  const r = new Reader(buf, start, end);
  let key = '';
  let value = '';
  while (r.pos < r.end) {
    const tag = r.varint();
    const field = Math.floor(tag / 8);
    const wire = tag & 7;
    if (field === 1) {
      if (wire !== 2) throw wireError(wire, 2, 'entry key');
      key = r.string() ?? notUtf8(`descriptors[${d}].entries[${i}].key`);
    } else if (field === 2) {
      if (wire !== 2) throw wireError(wire, 2, 'entry value');
      value = r.string() ?? notUtf8(`descriptors[${d}].entries[${i}].value`);
    } else if (field === 0) {
      throw new ProtoDecodeError('invalid field number 0');
    } else {
      r.skip(wire);
    }
  }
  return { key, value };
}

/** A repeated message field merges into the earlier one, as protobuf does. */
function decodeOverride(buf: Buffer, start: number, end: number, prev: Descriptor['limit']): NonNullable<Descriptor['limit']> {
  const r = new Reader(buf, start, end);
  let requestsPerUnit = prev?.requestsPerUnit ?? 0;
  let unit = prev?.unit ?? 0;
  while (r.pos < r.end) {
    const tag = r.varint();
    const field = Math.floor(tag / 8);
    const wire = tag & 7;
    if (field === 1) {
      if (wire !== 0) throw wireError(wire, 0, 'limit.requests_per_unit');
      requestsPerUnit = r.uint32();
    } else if (field === 2) {
      if (wire !== 0) throw wireError(wire, 0, 'limit.unit');
      unit = r.int32();
    } else if (field === 0) {
      throw new ProtoDecodeError('invalid field number 0');
    } else {
      r.skip(wire);
    }
  }
  return { requestsPerUnit, unit };
}

function decodeUInt64Value(buf: Buffer, start: number, end: number, prev: number, index: number): number {
  const r = new Reader(buf, start, end);
  let value = prev;
  while (r.pos < r.end) {
    const tag = r.varint();
    const field = Math.floor(tag / 8);
    const wire = tag & 7;
    if (field === 1) {
      if (wire !== 0) throw wireError(wire, 0, 'hits_addend.value');
      value = r.varint();
      if (value > Number.MAX_SAFE_INTEGER) {
        throw new ProtoDecodeError(`descriptors[${index}].hits_addend is larger than ${Number.MAX_SAFE_INTEGER}`);
      }
    } else if (field === 0) {
      throw new ProtoDecodeError('invalid field number 0');
    } else {
      r.skip(wire);
    }
  }
  return value;
}

// ---------------------------------------------------------------------------------------------
// Encoding

function limitSize(s: DescriptorStatus): number {
  const l = s.currentLimit!;
  let n = 0;
  if (l.requestsPerUnit !== 0) n += 1 + varintSize(l.requestsPerUnit);
  if (l.unit !== 0) n += 1 + varintSize(l.unit);
  if (l.name !== '') n += 1 + strSize(l.name);
  return n;
}

function durationSize(seconds: number): number {
  return seconds === 0 ? 0 : 1 + varintSize(seconds);
}

function statusSize(s: DescriptorStatus): number {
  let n = 0;
  if (s.code !== 0) n += 1 + varintSize(s.code);
  if (s.currentLimit !== undefined) {
    const l = limitSize(s);
    n += 1 + varintSize(l) + l;
  }
  if (s.limitRemaining !== 0) n += 1 + varintSize(s.limitRemaining);
  if (s.durationUntilReset !== undefined) {
    const d = durationSize(s.durationUntilReset);
    n += 1 + varintSize(d) + d;
  }
  return n;
}

/** Encodes a RateLimitResponse (proto3: default values are not written). */
export function encodeRateLimitResponse(res: RateLimitResponse): Buffer {
  return encodeResponse(res, 0);
}

/** Bytes of the gRPC message prefix: compressed flag and big-endian length. */
export const GRPC_PREFIX_BYTES = 5;

/**
 * Encodes a RateLimitResponse as one uncompressed gRPC message: the 5-byte prefix and the message
 * in one buffer, so the transport writes it without a copy.
 */
export function encodeRateLimitResponseFrame(res: RateLimitResponse): Buffer {
  const buf = encodeResponse(res, GRPC_PREFIX_BYTES);
  buf[0] = 0;
  buf.writeUInt32BE(buf.length - GRPC_PREFIX_BYTES, 1);
  return buf;
}

/** The encoding after `reserved` bytes left for the caller. */
function encodeResponse(res: RateLimitResponse, reserved: number): Buffer {
  const statuses = res.statuses;
  const headers = res.responseHeadersToAdd;
  const sizes = new Array<number>(statuses.length);
  let total = res.overallCode !== 0 ? 1 + varintSize(res.overallCode) : 0;
  for (let i = 0; i < statuses.length; i++) {
    const n = statusSize(statuses[i]!);
    sizes[i] = n;
    total += 1 + varintSize(n) + n;
  }
  for (const h of headers) {
    const n = (h.key !== '' ? 1 + strSize(h.key) : 0) + (h.value !== '' ? 1 + strSize(h.value) : 0);
    total += 1 + varintSize(n) + n;
  }
  const metadata = res.dynamicMetadata === undefined ? undefined : Struct.encode(Struct.wrap(res.dynamicMetadata)).finish();
  if (metadata !== undefined) total += 1 + varintSize(metadata.length) + metadata.length;

  const w = new Writer(Buffer.allocUnsafe(reserved + total), reserved);
  if (res.overallCode !== 0) {
    w.byte(0x08);
    w.varint(res.overallCode);
  }
  for (let i = 0; i < statuses.length; i++) {
    const s = statuses[i]!;
    w.byte(0x12);
    w.varint(sizes[i]!);
    if (s.code !== 0) {
      w.byte(0x08);
      w.varint(s.code);
    }
    const l = s.currentLimit;
    if (l !== undefined) {
      w.byte(0x12);
      w.varint(limitSize(s));
      if (l.requestsPerUnit !== 0) {
        w.byte(0x08);
        w.varint(l.requestsPerUnit);
      }
      if (l.unit !== 0) {
        w.byte(0x10);
        w.varint(l.unit);
      }
      if (l.name !== '') {
        w.byte(0x1a);
        w.string(l.name);
      }
    }
    if (s.limitRemaining !== 0) {
      w.byte(0x18);
      w.varint(s.limitRemaining);
    }
    if (s.durationUntilReset !== undefined) {
      w.byte(0x22);
      w.varint(durationSize(s.durationUntilReset));
      if (s.durationUntilReset !== 0) {
        w.byte(0x08);
        w.varint(s.durationUntilReset);
      }
    }
  }
  for (const h of headers) {
    const n = (h.key !== '' ? 1 + strSize(h.key) : 0) + (h.value !== '' ? 1 + strSize(h.value) : 0);
    w.byte(0x1a);
    w.varint(n);
    if (h.key !== '') {
      w.byte(0x0a);
      w.string(h.key);
    }
    if (h.value !== '') {
      w.byte(0x12);
      w.string(h.value);
    }
  }
  if (metadata !== undefined) {
    w.byte(0x32);
    w.bytes(metadata);
  }
  return w.buf;
}
