/**
 * Sizing a DiscoveryResponse from its bytes (src/providers/xds/response-scan.ts): the counts match
 * what decoding would find, a response over a cap is refused with what its NACK needs and nothing
 * decoded, and one within the caps is exactly DiscoveryResponse.decode's.
 */
import { DiscoveryResponse } from '../../../generated/envoy/service/discovery/v3/discovery';
import { RateLimitConfig as RateLimitConfigProto, RateLimitUnit } from '../../../generated/ratelimit/config/ratelimit/v3/rls_conf';
import { RATE_LIMIT_CONFIG_TYPE_URL } from '../../../src/providers/xds/convert';
import { isRefused, type ResponseCaps, scanResponse } from '../../../src/providers/xds/response-scan';
import { rlc } from '../../support/xds';

const NONE: ResponseCaps = { maxResources: 0, maxBytes: 0, maxDescriptors: 0 };

function any(config: RateLimitConfigProto) {
  return { typeUrl: RATE_LIMIT_CONFIG_TYPE_URL, value: Buffer.from(RateLimitConfigProto.encode(config).finish()) };
}

function encode(resources: Array<{ typeUrl: string; value: Buffer }>, version = '7', nonce = 'n7'): Uint8Array {
  return DiscoveryResponse.encode(
    DiscoveryResponse.fromPartial({ versionInfo: version, nonce, typeUrl: RATE_LIMIT_CONFIG_TYPE_URL, resources }),
  ).finish();
}

/** A resource of `top` descriptors, each with `children` children with a limit each (1 + children per top). */
function tree(name: string, top: number, children: number) {
  const limit = { unit: RateLimitUnit.SECOND, requestsPerUnit: 3 };
  return rlc(name, name, Array.from({ length: top }, (_, i) => ({
    key: 'k',
    value: `v${i}`,
    rateLimit: limit,
    descriptors: Array.from({ length: children }, (_, j) => ({ key: 'c', value: `w${j}`, rateLimit: limit, descriptors: [] })),
  })));
}

test('within the caps: the decoded response, as DiscoveryResponse.decode makes it', () => {
  const bytes = encode([any(tree('a', 3, 2)), any(tree('b', 1, 0))]);
  const caps = { maxResources: 2, maxBytes: 10_000, maxDescriptors: 10 };
  expect(scanResponse(bytes, caps)).toEqual(DiscoveryResponse.decode(bytes));
  expect(scanResponse(bytes, NONE)).toEqual(DiscoveryResponse.decode(bytes));
});

test('CONFIG_MAX_RESOURCES: every resource counted, none decoded', () => {
  const bytes = encode(Array.from({ length: 50_000 }, (_, i) => any(rlc(`r${i}`, `d${i}`))));
  const out = scanResponse(bytes, { ...NONE, maxResources: 10_000 });
  expect(out).toEqual({
    refused: 'the response has 50000 resources, more than the 10000 set by CONFIG_MAX_RESOURCES; it was not loaded',
    versionInfo: '7',
    nonce: 'n7',
    typeUrl: RATE_LIMIT_CONFIG_TYPE_URL,
    resources: 50_000,
  });
});

test('CONFIG_MAX_BYTES: the bytes of the resource values together', () => {
  const resources = [any(tree('a', 20, 0)), any(tree('b', 20, 0))];
  const total = resources.reduce((n, r) => n + r.value.byteLength, 0);
  const bytes = encode(resources);
  expect(isRefused(scanResponse(bytes, { ...NONE, maxBytes: total }))).toBe(false);
  expect(scanResponse(bytes, { ...NONE, maxBytes: total - 1 })).toMatchObject({
    refused: `the configuration holds ${total} bytes, more than the ${total - 1} set by CONFIG_MAX_BYTES; it was not loaded`,
    resources: 2,
  });
});

test('CONFIG_MAX_DESCRIPTORS: every depth of every resource, named by the resource that went past it', () => {
  // 3 x (1 + 4) = 15, then 2 x (1 + 0) = 2: 17 in all.
  const bytes = encode([any(tree('first', 3, 4)), any(tree('second', 2, 0))]);
  expect(isRefused(scanResponse(bytes, { ...NONE, maxDescriptors: 17 }))).toBe(false);
  expect(scanResponse(bytes, { ...NONE, maxDescriptors: 16 })).toMatchObject({
    refused: 'second: the configuration has more than 16 descriptors, the limit set by CONFIG_MAX_DESCRIPTORS; it was not loaded',
  });
  expect(scanResponse(bytes, { ...NONE, maxDescriptors: 14 })).toMatchObject({ refused: expect.stringMatching(/^first: /) });
  // A descriptor's rate_limit (field 3 there) is not a descriptor; only the config's field 3 is.
  const flat = encode([any(tree('flat', 5, 0))]);
  expect(isRefused(scanResponse(flat, { ...NONE, maxDescriptors: 5 }))).toBe(false);
});

test('resources of another type are not searched for descriptors (their decode refuses them)', () => {
  const other = { typeUrl: 'type.googleapis.com/envoy.config.cluster.v3.Cluster', value: Buffer.from(RateLimitConfigProto.encode(tree('x', 50, 0)).finish()) };
  expect(isRefused(scanResponse(encode([other]), { ...NONE, maxDescriptors: 1 }))).toBe(false);
});

test('malformed bytes throw, as the decoder does', () => {
  const bytes = encode([any(tree('a', 3, 0))]);
  const cut = bytes.subarray(0, bytes.length - 3);
  expect(() => DiscoveryResponse.decode(cut)).toThrow();
  expect(() => scanResponse(cut, { ...NONE, maxResources: 5 })).toThrow('truncated');
});
