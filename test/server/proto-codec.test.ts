/** The hand-written wire codec agrees with the generated (ts-proto) one, and is strict where it must be. */
import {
  RateLimitRequest as ProtoRequest,
  RateLimitResponse as ProtoResponse,
} from '../../generated/envoy/service/ratelimit/v3/rls';
import {
  decodeRateLimitRequest,
  encodeRateLimitResponse,
  encodeRateLimitResponseFrame,
  ProtoDecodeError,
} from '../../src/server/proto-codec';
import { fromProtoResponse, toProtoRequest } from '../../src/client/proto-convert';
import type { RateLimitRequest, RateLimitResponse } from '../../src/core/rls';

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 4294967296;
  };
}

const words = ['', 'a', 'key', 'value/with/slash', 'é', '日本', '\u{1f600}', 'x'.repeat(200)];

function randomRequest(rand: () => number): RateLimitRequest {
  const pick = <T>(xs: readonly T[]) => xs[Math.floor(rand() * xs.length)]!;
  return {
    domain: pick(words),
    hitsAddend: pick([0, 1, 7, 4294967295]),
    descriptors: Array.from({ length: Math.floor(rand() * 4) }, () => ({
      entries: Array.from({ length: Math.floor(rand() * 3) }, () => ({ key: pick(words), value: pick(words) })),
      limit: rand() < 0.3 ? { requestsPerUnit: pick([0, 5, 4294967295]), unit: pick([0, 1, 6]) } : undefined,
      hitsAddend: rand() < 0.3 ? pick([0, 1, 2 ** 40, Number.MAX_SAFE_INTEGER]) : undefined,
    })),
  };
}

function randomResponse(rand: () => number): RateLimitResponse {
  const pick = <T>(xs: readonly T[]) => xs[Math.floor(rand() * xs.length)]!;
  return {
    overallCode: pick([0, 1, 2]),
    statuses: Array.from({ length: Math.floor(rand() * 4) }, () => ({
      code: pick([0, 1, 2]),
      currentLimit: rand() < 0.7 ? { name: pick(words), requestsPerUnit: pick([0, 10, 4294967295]), unit: pick([0, 1, 5, 7]) } : undefined,
      limitRemaining: pick([0, 3, 4294967295]),
      durationUntilReset: rand() < 0.7 ? pick([1, 58, 31536000]) : undefined,
    })),
    responseHeadersToAdd: rand() < 0.5 ? [{ key: 'RateLimit-Limit', value: '10' }, { key: 'x', value: '' }] : [],
    dynamicMetadata: rand() < 0.3 ? { domain: 'd', descriptors: [{ entries: ['k=v'] }], n: 1.5, ok: true, none: null } : undefined,
  };
}

describe('proto codec', () => {
  test('decodes what ts-proto encodes (random requests)', () => {
    const rand = rng(7);
    for (let i = 0; i < 500; i++) {
      const req = randomRequest(rand);
      const bytes = Buffer.from(ProtoRequest.encode(toProtoRequest(req)).finish());
      expect(decodeRateLimitRequest(bytes)).toEqual(req);
    }
  });

  test('ts-proto decodes what it encodes (random responses)', () => {
    const rand = rng(11);
    for (let i = 0; i < 500; i++) {
      const res = randomResponse(rand);
      const decoded = fromProtoResponse(ProtoResponse.decode(encodeRateLimitResponse(res)));
      expect(decoded).toEqual({ ...res, statuses: res.statuses.map((s) => ({ ...s, currentLimit: s.currentLimit })) });
    }
  });

  test('gRPC framing: a request decodes in place inside a larger buffer; a response frame is prefix + message', () => {
    const rand = rng(13);
    for (let i = 0; i < 100; i++) {
      const req = randomRequest(rand);
      const bytes = Buffer.from(ProtoRequest.encode(toProtoRequest(req)).finish());
      const prefix = Buffer.alloc(5);
      prefix.writeUInt32BE(bytes.length, 1);
      const framed = Buffer.concat([prefix, bytes, Buffer.from([0xff, 0xff])]);
      expect(decodeRateLimitRequest(framed, 5, 5 + bytes.length)).toEqual(req);
      const res = randomResponse(rand);
      const message = encodeRateLimitResponse(res);
      const frame = encodeRateLimitResponseFrame(res);
      expect(frame[0]).toBe(0);
      expect(frame.readUInt32BE(1)).toBe(message.length);
      expect(frame.subarray(5)).toEqual(message);
    }
  });

  test('skips unknown fields of every wire type and merges repeated messages', () => {
    // domain "d", unknown varint 9, unknown fixed64 10, unknown fixed32 11, unknown bytes 12
    const bytes = Buffer.from([0x0a, 0x01, 0x64, 0x48, 0x05, 0x51, 1, 2, 3, 4, 5, 6, 7, 8, 0x5d, 1, 2, 3, 4, 0x62, 0x02, 0xaa, 0xbb]);
    expect(decodeRateLimitRequest(bytes)).toEqual({ domain: 'd', descriptors: [], hitsAddend: 0 });
    // descriptor with limit {rpu 5} then limit {unit 2}: merged
    const merged = Buffer.from([0x12, 0x08, 0x12, 0x02, 0x08, 0x05, 0x12, 0x02, 0x10, 0x02]);
    expect(decodeRateLimitRequest(merged).descriptors[0]!.limit).toEqual({ requestsPerUnit: 5, unit: 2 });
  });

  test.each([
    ['truncated string', [0x0a, 0x05, 0x61]],
    ['truncated varint', [0x18, 0x80]],
    ['wrong wire type', [0x0d, 1, 2, 3, 4]],
    ['field number 0', [0x00, 0x01]],
    ['invalid UTF-8', [0x0a, 0x02, 0xc3, 0x28]],
    ['group wire type', [0x0b]],
    ['over-long varint', [0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]],
    ['hits_addend beyond 2^53', [0x12, 0x0c, 0x1a, 0x0a, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]],
  ])('refuses %s', (_name, bytes) => {
    expect(() => decodeRateLimitRequest(Buffer.from(bytes))).toThrow(ProtoDecodeError);
  });

  test('uint32 fields keep the low 32 bits, enums are signed int32', () => {
    // hits_addend = 2^32 + 3 → 3; limit.unit = -1 (10-byte varint)
    const bytes = Buffer.from([
      0x18, 0x83, 0x80, 0x80, 0x80, 0x10,
      0x12, 0x0d, 0x12, 0x0b, 0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
    ]);
    const req = decodeRateLimitRequest(bytes);
    expect(req.hitsAddend).toBe(3);
    expect(req.descriptors[0]!.limit!.unit).toBe(-1);
  });
});
