/**
 * Sizes an xDS DiscoveryResponse from its bytes, before anything is decoded: the client's
 * deserializer, so that a response over CONFIG_MAX_RESOURCES, CONFIG_MAX_BYTES or
 * CONFIG_MAX_DESCRIPTORS is refused (and NACKed) without building a single resource object.
 *
 * One pass over the protobuf wire format (platform/proto-wire's reader; one per message walked, nothing per field): the top-level fields are
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
import { Reader } from '../../platform/proto-wire';

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

/** The response of `bytes`: decoded when within `caps`, else refused with the reason naming the cap. */
export function scanResponse(bytes: Uint8Array, caps: ResponseCaps): ScannedResponse {
  const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const r = new Reader(buf, 0, buf.length);
  let versionInfo = '';
  let nonce = '';
  let typeUrl = '';
  let resources = 0;
  let bytesHeld = 0;
  let descriptors = 0;
  let overResources = false;
  let overBytes = false;
  let overDescriptors: string | undefined;
  while (r.pos < buf.length) {
    const tag = r.varint();
    const wire = tag & 7;
    if (wire !== 2) {
      r.skip(wire);
      continue;
    }
    const [start, end] = r.span();
    switch (tag >>> 3) {
      case 1:
        versionInfo = text(buf, start, end);
        break;
      case 4:
        typeUrl = text(buf, start, end);
        break;
      case 5:
        nonce = text(buf, start, end);
        break;
      case 2: {
        resources++;
        // Past the count only the count goes on: nothing else of a resource is read.
        if (overResources || (caps.maxResources > 0 && resources > caps.maxResources)) {
          overResources = true;
          break;
        }
        const any = readAny(buf, start, end);
        bytesHeld += any.valueEnd - any.valueStart;
        if (caps.maxBytes > 0 && bytesHeld > caps.maxBytes) overBytes = true;
        if (overBytes || overDescriptors !== undefined || caps.maxDescriptors === 0 || !any.rateLimitConfig) break;
        const room = caps.maxDescriptors - descriptors;
        // RateLimitConfig.descriptors = 3 (at the top); RateLimitDescriptor.descriptors = 4 (below).
        const found = countDescriptors(buf, any.valueStart, any.valueEnd, 3, 1, room);
        descriptors += found;
        if (found > room) overDescriptors = configName(buf, any.valueStart, any.valueEnd);
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
    refused = `the configuration holds ${bytesHeld} bytes, more than the ${caps.maxBytes} set by CONFIG_MAX_BYTES; it was not loaded`;
  } else if (overDescriptors !== undefined) {
    refused = `${overDescriptors}: the configuration has more than ${caps.maxDescriptors} descriptors, the limit set by CONFIG_MAX_DESCRIPTORS; it was not loaded`;
  } else {
    return DiscoveryResponse.decode(bytes);
  }
  return { refused, versionInfo, nonce, typeUrl, resources };
}

/** Nested descriptors deeper than this are not counted (the decoder refuses such depth anyway). */
const MAX_DEPTH = 100;

function text(buf: Buffer, start: number, end: number): string {
  return buf.toString('utf8', start, end);
}

/**
 * Each length-delimited field of the message at [start, end), in order, until `visit` returns
 * false; other wire types are skipped.
 */
function eachBytesField(buf: Buffer, start: number, end: number, visit: (field: number, from: number, to: number) => boolean | void): void {
  const r = new Reader(buf, start, end);
  while (r.pos < end) {
    const tag = r.varint();
    if ((tag & 7) !== 2) {
      r.skip(tag & 7);
      continue;
    }
    const [from, to] = r.span();
    if (visit(tag >>> 3, from, to) === false) return;
  }
}

/** An Any in [start, end): where its value is, and whether its type is RateLimitConfig. */
function readAny(buf: Buffer, start: number, end: number): { valueStart: number; valueEnd: number; rateLimitConfig: boolean } {
  const any = { valueStart: 0, valueEnd: 0, rateLimitConfig: false };
  eachBytesField(buf, start, end, (field, from, to) => {
    if (field === 1) any.rateLimitConfig = isRateLimitConfigType(text(buf, from, to));
    else if (field === 2) {
      any.valueStart = from;
      any.valueEnd = to;
    }
  });
  return any;
}

/**
 * The descriptors of every depth in [start, end) (fields `field` there, 4 below), counting up to
 * `room` + 1 (past that the answer is only "more").
 */
function countDescriptors(buf: Buffer, start: number, end: number, field: number, depth: number, room: number): number {
  let found = 0;
  eachBytesField(buf, start, end, (f, from, to) => {
    if (f !== field) return;
    found++;
    if (depth <= MAX_DEPTH && found <= room) found += countDescriptors(buf, from, to, 4, depth + 1, room - found);
    return found <= room;
  });
  return found;
}

/** The `name` (field 1) of the RateLimitConfig at [start, end). */
function configName(buf: Buffer, start: number, end: number): string {
  let name = '';
  eachBytesField(buf, start, end, (field, from, to) => {
    if (field === 1) name = text(buf, from, to);
  });
  return name;
}
