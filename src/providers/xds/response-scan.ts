/**
 * Sizes an xDS DiscoveryResponse from its bytes, before anything is decoded: the client's
 * deserializer, so that a response over CONFIG_MAX_RESOURCES, CONFIG_MAX_BYTES or
 * CONFIG_MAX_DESCRIPTORS is refused (and NACKed) without building a single resource object.
 *
 * One pass over the protobuf wire format, allocating nothing per field: the top-level fields are
 * walked (each `resources` entry, field 2, is counted and its `google.protobuf.Any` read for the
 * length of its `value`); the descriptors of each RateLimitConfig (`descriptors`, field 3, and at
 * every depth `RateLimitDescriptor.descriptors`, field 4) are counted inside the value without
 * decoding it. Once a count is over its cap, resources are still counted (the NACK says how many
 * there were) but nothing more is descended into. Within the caps the response is decoded as
 * before (`DiscoveryResponse.decode`).
 *
 * The bytes of the whole response are bounded before this runs, by the gRPC receive limit
 * (XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES; grpc-js's 4 MiB when 0): a longer message ends the stream
 * at its length prefix, before it is buffered.
 *
 * Malformed bytes throw as the decoder would (grpc-js then ends the stream as for any response
 * it cannot parse).
 */
import { DiscoveryResponse } from '../../../generated/envoy/service/discovery/v3/discovery';
import { isRateLimitConfigType } from './convert';

/** The caps a response is held to (0 = no limit). */
export interface ResponseCaps {
  /** CONFIG_MAX_RESOURCES */
  readonly maxResources: number;
  /** CONFIG_MAX_BYTES: the bytes of all resource values together. */
  readonly maxBytes: number;
  /** CONFIG_MAX_DESCRIPTORS: descriptors of every depth of every resource. */
  readonly maxDescriptors: number;
}

/** A response refused by its size: only what the NACK needs. */
export interface RefusedResponse {
  readonly refused: string;
  readonly versionInfo: string;
  readonly nonce: string;
  readonly typeUrl: string;
  readonly resources: number;
}

export type ScannedResponse = DiscoveryResponse | RefusedResponse;

export function isRefused(r: ScannedResponse): r is RefusedResponse {
  return 'refused' in r;
}

/** The response of `buf`: decoded when within `caps`, else refused with the reason naming the cap. */
export function scanResponse(buf: Uint8Array, caps: ResponseCaps): ScannedResponse {
  const s = new Scan(buf);
  let versionInfo = '';
  let nonce = '';
  let typeUrl = '';
  let resources = 0;
  let bytes = 0;
  let descriptors = 0;
  let overResources = false;
  let overBytes = false;
  let overDescriptors: string | undefined;
  while (s.pos < buf.length) {
    const tag = s.varint();
    const wire = tag & 7;
    if (wire !== 2) {
      s.skip(wire);
      continue;
    }
    const len = s.varint();
    const start = s.pos;
    const end = s.advance(len);
    switch (tag >>> 3) {
      case 1:
        versionInfo = s.text(start, end);
        break;
      case 4:
        typeUrl = s.text(start, end);
        break;
      case 5:
        nonce = s.text(start, end);
        break;
      case 2: {
        resources++;
        // Past the count only the count goes on: nothing else of a resource is read.
        if (overResources || (caps.maxResources > 0 && resources > caps.maxResources)) {
          overResources = true;
          break;
        }
        const any = s.any(start, end);
        bytes += any.valueEnd - any.valueStart;
        if (caps.maxBytes > 0 && bytes > caps.maxBytes) overBytes = true;
        if (overBytes || overDescriptors !== undefined || caps.maxDescriptors === 0 || !any.rateLimitConfig) break;
        const room = caps.maxDescriptors - descriptors;
        const found = s.descriptors(any.valueStart, any.valueEnd, room);
        descriptors += found;
        if (found > room) overDescriptors = s.configName(any.valueStart, any.valueEnd);
        break;
      }
      default:
        break;
    }
  }
  let refused: string;
  if (overResources) {
    refused = `the response has ${resources} resources, more than the ${caps.maxResources} set by CONFIG_MAX_RESOURCES; it was not loaded`;
  } else if (overBytes) {
    refused = `the configuration holds ${bytes} bytes, more than the ${caps.maxBytes} set by CONFIG_MAX_BYTES; it was not loaded`;
  } else if (overDescriptors !== undefined) {
    refused = `${overDescriptors}: the configuration has more than ${caps.maxDescriptors} descriptors, the limit set by CONFIG_MAX_DESCRIPTORS; it was not loaded`;
  } else {
    return DiscoveryResponse.decode(buf);
  }
  return { refused, versionInfo, nonce, typeUrl, resources };
}

/** Nested descriptors deeper than this are not counted (the decoder refuses such depth anyway). */
const MAX_DEPTH = 100;

class Scan {
  pos = 0;
  private readonly decoder = new TextDecoder();

  constructor(private readonly buf: Uint8Array) {}

  /** A varint of up to 64 bits, as a number (lengths and tags fit in 32). */
  varint(): number {
    const buf = this.buf;
    let result = 0;
    let scale = 1;
    for (let i = 0; i < 10; i++) {
      if (this.pos >= buf.length) throw new RangeError('premature EOF');
      const b = buf[this.pos++]!;
      result += (b & 0x7f) * scale;
      if (b < 0x80) return result;
      scale *= 128;
    }
    throw new Error('invalid varint');
  }

  /** Moves past `len` bytes, which must end by `limit`; the end. */
  advance(len: number, limit = this.buf.length): number {
    const end = this.pos + len;
    if (end > limit) throw new RangeError('premature EOF');
    this.pos = end;
    return end;
  }

  skip(wire: number): void {
    switch (wire) {
      case 0:
        this.varint();
        return;
      case 1:
        this.advance(8);
        return;
      case 5:
        this.advance(4);
        return;
      case 2:
        this.advance(this.varint());
        return;
      default:
        // Groups (3, 4) are not in these messages; the decoder reports what it makes of them.
        throw new Error(`cannot skip wire type ${wire}`);
    }
  }

  text(start: number, end: number): string {
    return this.decoder.decode(this.buf.subarray(start, end));
  }

  /** An Any in [start, end): where its value is, and whether its type is RateLimitConfig. */
  any(start: number, end: number): { valueStart: number; valueEnd: number; rateLimitConfig: boolean } {
    const saved = this.pos;
    this.pos = start;
    let valueStart = 0;
    let valueEnd = 0;
    let rateLimitConfig = false;
    while (this.pos < end) {
      const tag = this.varint();
      if ((tag & 7) !== 2) {
        this.skip(tag & 7);
        continue;
      }
      const len = this.varint();
      const from = this.pos;
      const to = this.advance(len, end);
      if (tag >>> 3 === 1) rateLimitConfig = isRateLimitConfigType(this.text(from, to));
      else if (tag >>> 3 === 2) {
        valueStart = from;
        valueEnd = to;
      }
    }
    this.pos = saved;
    return { valueStart, valueEnd, rateLimitConfig };
  }

  /**
   * The descriptors of every depth in the RateLimitConfig at [start, end), counting up to `room`
   * + 1 (past that the answer is only "more").
   */
  descriptors(start: number, end: number, room: number): number {
    const saved = this.pos;
    let found = 0;
    // The ends of the messages being walked: the config, then each descriptor opened.
    const ends = [end];
    this.pos = start;
    while (ends.length > 0 && found <= room) {
      const top = ends[ends.length - 1]!;
      if (this.pos >= top) {
        this.pos = top;
        ends.pop();
        continue;
      }
      const tag = this.varint();
      if ((tag & 7) !== 2) {
        this.skip(tag & 7);
        continue;
      }
      const len = this.varint();
      const field = tag >>> 3;
      // RateLimitConfig.descriptors = 3 (at the top); RateLimitDescriptor.descriptors = 4 (below).
      const isDescriptor = ends.length === 1 ? field === 3 : field === 4;
      if (isDescriptor) {
        found++;
        if (ends.length <= MAX_DEPTH) {
          const childEnd = this.pos + len;
          if (childEnd > top) throw new RangeError('premature EOF');
          ends.push(childEnd);
          continue;
        }
      }
      this.advance(len, top);
    }
    this.pos = saved;
    return found;
  }

  /** The `name` (field 1) of the RateLimitConfig at [start, end). */
  configName(start: number, end: number): string {
    const saved = this.pos;
    this.pos = start;
    let name = '';
    while (this.pos < end) {
      const tag = this.varint();
      if ((tag & 7) !== 2) {
        this.skip(tag & 7);
        continue;
      }
      const len = this.varint();
      const from = this.pos;
      const to = this.advance(len, end);
      if (tag >>> 3 === 1) name = this.text(from, to);
    }
    this.pos = saved;
    return name;
  }
}
