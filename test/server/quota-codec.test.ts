/** The hand-written RLQS codec agrees with the generated (ts-proto) one, and is strict where it must be. */
import {
  RateLimitQuotaResponse as ProtoResponse,
  RateLimitQuotaUsageReports as ProtoReports,
  type RateLimitQuotaResponse,
} from '../../generated/envoy/service/rate_limit_quota/v3/rlqs';
import { RateLimitStrategy_BlanketRule } from '../../generated/envoy/type/v3/ratelimit_strategy';
import { mulberry32 } from '../../src/platform/random';
import type { BucketAction, QuotaStrategy, UsageReports } from '../../src/quota/types';
import { decodeUsageReports, encodeQuotaResponseFrame } from '../../src/server/quota-codec';
import { ProtoDecodeError } from '../../src/platform/proto-wire';

// No integer-like keys: a JS object (the generated code's map) would put them first.
const words = ['a', 'key', 'value/with/slash', 'é', '日本', '\u{1f600}', 'x'.repeat(200), ''];

function picker(rand: () => number) {
  return <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
}

function randomPairs(rand: () => number): Map<string, string> {
  const pick = picker(rand);
  const m = new Map<string, string>();
  const n = 1 + Math.floor(rand() * 3);
  for (let i = 0; i < n; i++) m.set(pick(words) + String.fromCharCode(97 + i), pick(words));
  return m;
}

function randomStrategy(rand: () => number): QuotaStrategy {
  const pick = picker(rand);
  const r = rand();
  if (r < 0.15) return { kind: 'allow-all' };
  if (r < 0.3) return { kind: 'deny-all' };
  const n = [0, 1, 127, 128, 300, 16_384, 4_294_967_295];
  return { kind: 'token-bucket', maxTokens: pick(n), tokensPerFill: pick(n), fillIntervalSeconds: pick([0, 1, 100, 3600, 2 ** 40]) };
}

function randomActions(rand: () => number): BucketAction[] {
  const pick = picker(rand);
  return Array.from({ length: Math.floor(rand() * 6) }, (): BucketAction => {
    const bucket = randomPairs(rand);
    return rand() < 0.2 ? { bucket, abandon: true } : { bucket, assign: { strategy: randomStrategy(rand), ttlSeconds: pick([0, 1, 20, 86_400]) } };
  });
}

/** The same actions as generated-code messages: the oracle. */
function asProto(actions: readonly BucketAction[]): RateLimitQuotaResponse {
  const duration = (s: number) => ({ seconds: BigInt(s), nanos: 0 });
  return {
    bucketAction: actions.map((a) => ({
      bucketId: { bucket: Object.fromEntries(a.bucket) },
      ...('abandon' in a
        ? { abandonAction: {} }
        : {
            quotaAssignmentAction: {
              assignmentTimeToLive: duration(a.assign.ttlSeconds),
              rateLimitStrategy:
                a.assign.strategy.kind === 'token-bucket'
                  ? { tokenBucket: { maxTokens: a.assign.strategy.maxTokens, tokensPerFill: a.assign.strategy.tokensPerFill, fillInterval: duration(a.assign.strategy.fillIntervalSeconds) } }
                  : { blanketRule: a.assign.strategy.kind === 'allow-all' ? RateLimitStrategy_BlanketRule.ALLOW_ALL : RateLimitStrategy_BlanketRule.DENY_ALL },
            },
          }),
    })),
  };
}

describe('RLQS responses encoded by hand', () => {
  test('byte for byte what the generated code writes, in one gRPC message with its prefix (2,000 random responses)', () => {
    const rand = mulberry32(7);
    for (let i = 0; i < 2000; i++) {
      const actions = randomActions(rand);
      const frame = encodeQuotaResponseFrame(actions);
      const expected = Buffer.from(ProtoResponse.encode(asProto(actions)).finish());
      expect(frame[0]).toBe(0);
      expect(frame.readUInt32BE(1)).toBe(frame.length - 5);
      expect(frame.subarray(5).toString('hex')).toBe(expected.toString('hex'));
    }
  });

  test('an action that carries its id as the stream sent it answers with those bytes, whatever the order of its pairs', () => {
    const sent = Buffer.from(ProtoReports.encode({ domain: 'd', bucketQuotaUsages: [{ bucketId: { bucket: { zone: 'b', api: 'v1' } }, timeElapsed: undefined, numRequestsAllowed: 0n, numRequestsDenied: 0n }] }).finish());
    const usage = decodeUsageReports(sent).usages[0]!;
    const bucket = new Map([['api', 'v1'], ['zone', 'b']]); // the canonical order differs from the stream's
    const strategy: QuotaStrategy = { kind: 'token-bucket', maxTokens: 3, tokensPerFill: 483, fillIntervalSeconds: 100 };
    const frame = encodeQuotaResponseFrame([{ bucket, wire: usage.wire, assign: { strategy, ttlSeconds: 20 } }, { bucket, wire: usage.wire, abandon: true }]);
    const back = ProtoResponse.decode(frame.subarray(5));
    expect(back.bucketAction.map((a) => Object.entries(a.bucketId!.bucket))).toEqual([
      [['zone', 'b'], ['api', 'v1']],
      [['zone', 'b'], ['api', 'v1']],
    ]);
    expect(back.bucketAction[0]!.quotaAssignmentAction!.rateLimitStrategy!.tokenBucket).toEqual({ maxTokens: 3, tokensPerFill: 483, fillInterval: { seconds: 100n, nanos: 0 } });
    expect(back.bucketAction[1]!.abandonAction).toEqual({});
  });
});

/** What the engine reads of a decoded report (the pairs may be decoded on that read). */
const seen = (r: UsageReports) => ({ domain: r.domain, usages: r.usages.map((u) => ({ bucket: u.bucket, elapsedSeconds: u.elapsedSeconds, allowed: u.allowed, denied: u.denied })) });

describe('RLQS usage reports decoded by hand', () => {
  test('what the generated code reads (2,000 random reports)', () => {
    const rand = mulberry32(11);
    const pick = picker(rand);
    for (let i = 0; i < 2000; i++) {
      const usages = Array.from({ length: Math.floor(rand() * 5) }, () => ({
        bucket: randomPairs(rand),
        elapsed: rand() < 0.2 ? undefined : { seconds: pick([0n, 5n, -3n, 86_400n, -(2n ** 40n), 2n ** 50n]), nanos: pick([0, 500_000_000, -1]) },
        allowed: pick([0n, 1n, 300n, 2n ** 40n]),
        denied: pick([0n, 7n, 2n ** 33n]),
      }));
      const domain = pick(words);
      const bytes = Buffer.from(
        ProtoReports.encode({
          domain,
          bucketQuotaUsages: usages.map((u) => ({ bucketId: { bucket: Object.fromEntries(u.bucket) }, timeElapsed: u.elapsed, numRequestsAllowed: u.allowed, numRequestsDenied: u.denied })),
        }).finish(),
      );
      const expected: UsageReports = {
        domain,
        usages: usages.map((u) => ({
          bucket: u.bucket,
          elapsedSeconds: u.elapsed === undefined ? 0 : Number(u.elapsed.seconds) + u.elapsed.nanos / 1e9,
          allowed: Number(u.allowed),
          denied: Number(u.denied),
        })),
      };
      expect(seen(decodeUsageReports(bytes))).toEqual(expected);
    }
  });

  test('a counter near 2^64 reads as a number near it (the engine clamps it), not as a small one', () => {
    const bytes = Buffer.from(ProtoReports.encode({ domain: 'd', bucketQuotaUsages: [{ bucketId: { bucket: { a: 'b' } }, timeElapsed: undefined, numRequestsAllowed: 2n ** 64n - 1n, numRequestsDenied: 0n }] }).finish());
    expect(decodeUsageReports(bytes).usages[0]!.allowed).toBeGreaterThan(2 ** 63);
  });

  test.each([
    ['a truncated varint', [0x12, 0x02, 0x18, 0x80], 'truncated varint'],
    ['a usage longer than the message', [0x12, 0x05, 0x18, 0x01], 'truncated length-delimited field'],
    ['a domain that is not UTF-8', [0x0a, 0x02, 0xc3, 0x28], 'domain is not valid UTF-8'],
    ['a bucket value that is not UTF-8', [0x12, 0x08, 0x0a, 0x06, 0x0a, 0x04, 0x12, 0x02, 0xff, 0xfe], 'bucket_quota_usages[0].bucket_id.bucket value is not valid UTF-8'],
    ['a count with the wire type of a string', [0x12, 0x03, 0x1a, 0x01, 0x00], 'bucket_quota_usages[0].num_requests_allowed has wire type 2, expected 0'],
    ['field number 0', [0x02, 0x00], 'invalid field number 0'],
  ])('%s is an error that names it', (_, bytes, message) => {
    // A bucket id's pairs are decoded when the engine first reads them: its errors come then.
    const read = () => seen(decodeUsageReports(Buffer.from(bytes)));
    expect(read).toThrow(ProtoDecodeError);
    expect(read).toThrow(message);
  });

  test('the same bucket id gives the same wire text; another order of its pairs another one (the engine then finds it by its pairs)', () => {
    const encode = (bucket: Record<string, string>) =>
      Buffer.from(ProtoReports.encode({ domain: 'd', bucketQuotaUsages: [{ bucketId: { bucket }, timeElapsed: undefined, numRequestsAllowed: 1n, numRequestsDenied: 0n }] }).finish());
    const a = decodeUsageReports(encode({ x: '1', y: '2' })).usages[0]!;
    const b = decodeUsageReports(encode({ x: '1', y: '2' })).usages[0]!;
    const c = decodeUsageReports(encode({ y: '2', x: '1' })).usages[0]!;
    expect(a.wire).toBe(b.wire);
    expect(c.wire).not.toBe(a.wire);
    expect(c.bucket).toEqual(a.bucket);
  });

  test('a bucket_id given twice merges its pairs, as protobuf merges a repeated message field', () => {
    const id = (k: string, v: string) => {
      const entry = Buffer.concat([Buffer.from([0x0a, k.length]), Buffer.from(k), Buffer.from([0x12, v.length]), Buffer.from(v)]);
      const body = Buffer.concat([Buffer.from([0x0a, entry.length]), entry]);
      return Buffer.concat([Buffer.from([0x0a, body.length]), body]);
    };
    const usage = Buffer.concat([id('a', '1'), id('b', '2'), Buffer.from([0x18, 0x05])]);
    const bytes = Buffer.concat([Buffer.from([0x12, usage.length]), usage]);
    expect(seen(decodeUsageReports(bytes)).usages).toEqual([{ bucket: new Map([['a', '1'], ['b', '2']]), elapsedSeconds: 0, allowed: 5, denied: 0 }]);
  });

  test('unknown fields are skipped, as protobuf does', () => {
    const known = ProtoReports.encode({ domain: 'd', bucketQuotaUsages: [{ bucketId: { bucket: { a: 'b' } }, timeElapsed: undefined, numRequestsAllowed: 3n, numRequestsDenied: 1n }] }).finish();
    const withUnknown = Buffer.concat([Buffer.from([0x48, 0x05, 0x52, 0x01, 0x00]), Buffer.from(known)]);
    expect(seen(decodeUsageReports(withUnknown))).toEqual(seen(decodeUsageReports(Buffer.from(known))));
  });
});
