/**
 * The wire codec of StreamRateLimitQuotas, by hand: decodes a RateLimitQuotaUsageReports straight
 * into the quota engine's terms (src/quota/types.ts) and encodes its bucket actions straight into
 * a RateLimitQuotaResponse gRPC message. A thousand Envoys reporting a hundred buckets every 5 s
 * make 20,000 bucket reports a second; the generated code's message objects cost about a third
 * of the service's time there (bench/README.md, "RLQS at fleet scale").
 *
 * Field numbers (data-plane-api): RateLimitQuotaUsageReports {domain 1, bucket_quota_usages 2};
 * BucketQuotaUsage {bucket_id 1, time_elapsed 2, num_requests_allowed 3, num_requests_denied 4};
 * BucketId {bucket 1 (map<string, string>: entry key 1, value 2)}; RateLimitQuotaResponse
 * {bucket_action 1}; BucketAction {bucket_id 1, quota_assignment_action 2, abandon_action 3};
 * QuotaAssignmentAction {assignment_time_to_live 2, rate_limit_strategy 3}; RateLimitStrategy
 * {blanket_rule 1 (ALLOW_ALL 0, DENY_ALL 1), requests_per_time_unit 2, token_bucket 3};
 * TokenBucket {max_tokens 1, tokens_per_fill 2 (UInt32Value), fill_interval 3};
 * Duration {seconds 1, nanos 2}; UInt32Value {value 1}.
 */
import type { BucketAction, BucketPairs, BucketUsage, QuotaStrategy, UsageReports } from '../quota/types';
import { GRPC_PREFIX_BYTES } from './proto-codec';
import { notUtf8, ProtoDecodeError, Reader, strSize, varintSize, wireError, Writer } from '../platform/proto-wire';

/** Decodes a RateLimitQuotaUsageReports from `buf[start, end)`; throws ProtoDecodeError on malformed input. */
export function decodeUsageReports(buf: Buffer, start = 0, end = buf.length): UsageReports {
  const r = new Reader(buf, start, end);
  let domain = '';
  const usages: BucketUsage[] = [];
  while (r.pos < r.end) {
    const tag = r.varint();
    const field = Math.floor(tag / 8);
    const wire = tag & 7;
    if (field === 1) {
      if (wire !== 2) throw wireError(wire, 2, 'domain');
      domain = r.string() ?? notUtf8('domain');
    } else if (field === 2) {
      if (wire !== 2) throw wireError(wire, 2, 'bucket_quota_usages');
      const [s, e] = r.span();
      usages.push(decodeUsage(buf, s, e, usages.length));
    } else if (field === 0) {
      throw new ProtoDecodeError('invalid field number 0');
    } else {
      r.skip(wire);
    }
  }
  return { domain, usages };
}

/**
 * One bucket's usage; an absent time_elapsed reads as 0 (a subscription, as Envoy's first report).
 * Its id's pairs are decoded when first read: the engine reads them only for a bucket it does not
 * know by `wire` (at a stream's first report of it), while the message is being handled.
 */
class DecodedUsage implements BucketUsage {
  private pairs: Map<string, string> | undefined;

  constructor(
    private readonly buf: Buffer,
    private readonly idStart: number,
    private readonly idEnd: number,
    private readonly index: number,
    readonly wire: string,
    readonly elapsedSeconds: number,
    readonly allowed: number,
    readonly denied: number,
  ) {}

  get bucket(): BucketPairs {
    if (this.pairs === undefined) {
      const pairs = new Map<string, string>();
      decodeBucketId(this.buf, this.idStart, this.idEnd, pairs, `bucket_quota_usages[${this.index}]`);
      this.pairs = pairs;
    }
    return this.pairs;
  }
}

function decodeUsage(buf: Buffer, start: number, end: number, index: number): BucketUsage {
  const r = new Reader(buf, start, end);
  let idStart = start;
  let idEnd = start;
  let ids = 0;
  let elapsedSeconds = 0;
  let allowed = 0;
  let denied = 0;
  while (r.pos < r.end) {
    const tag = r.varint();
    const field = Math.floor(tag / 8);
    const wire = tag & 7;
    if (field === 1) {
      if (wire !== 2) throw wireError(wire, 2, `bucket_quota_usages[${index}].bucket_id`);
      [idStart, idEnd] = r.span();
      ids++;
    } else if (field === 2) {
      if (wire !== 2) throw wireError(wire, 2, `bucket_quota_usages[${index}].time_elapsed`);
      const [s, e] = r.span();
      elapsedSeconds = decodeDuration(buf, s, e, index);
    } else if (field === 3) {
      if (wire !== 0) throw wireError(wire, 0, `bucket_quota_usages[${index}].num_requests_allowed`);
      allowed = r.varint();
    } else if (field === 4) {
      if (wire !== 0) throw wireError(wire, 0, `bucket_quota_usages[${index}].num_requests_denied`);
      denied = r.varint();
    } else if (field === 0) {
      throw new ProtoDecodeError('invalid field number 0');
    } else {
      r.skip(wire);
    }
  }
  if (ids > 1) {
    // A message field given twice merges (protobuf): the pairs of every id, decoded now; no `wire` (Envoy never does this).
    const bucket = new Map<string, string>();
    const again = new Reader(buf, start, end);
    while (again.pos < again.end) {
      const tag = again.varint();
      if (Math.floor(tag / 8) !== 1) {
        again.skip(tag & 7);
        continue;
      }
      const [s, e] = again.span();
      decodeBucketId(buf, s, e, bucket, `bucket_quota_usages[${index}]`);
    }
    return { bucket, elapsedSeconds, allowed, denied };
  }
  return new DecodedUsage(buf, idStart, idEnd, index, buf.toString('latin1', idStart, idEnd), elapsedSeconds, allowed, denied);
}
/** BucketId's map entries into `into` (a key given twice keeps its last value, as protobuf maps do). */
function decodeBucketId(buf: Buffer, start: number, end: number, into: Map<string, string>, where: string): void {
  const r = new Reader(buf, start, end);
  while (r.pos < r.end) {
    const tag = r.varint();
    const field = Math.floor(tag / 8);
    const wire = tag & 7;
    if (field === 1) {
      if (wire !== 2) throw wireError(wire, 2, `${where}.bucket_id.bucket`);
      const [s, e] = r.span();
      const entry = new Reader(buf, s, e);
      let key = '';
      let value = '';
      while (entry.pos < entry.end) {
        const t = entry.varint();
        const f = Math.floor(t / 8);
        if (f === 1) {
          if ((t & 7) !== 2) throw wireError(t & 7, 2, `${where}.bucket_id.bucket key`);
          key = entry.string() ?? notUtf8(`${where}.bucket_id.bucket key`);
        } else if (f === 2) {
          if ((t & 7) !== 2) throw wireError(t & 7, 2, `${where}.bucket_id.bucket value`);
          value = entry.string() ?? notUtf8(`${where}.bucket_id.bucket value`);
        } else if (f === 0) {
          throw new ProtoDecodeError('invalid field number 0');
        } else {
          entry.skip(t & 7);
        }
      }
      into.set(key, value);
    } else if (field === 0) {
      throw new ProtoDecodeError('invalid field number 0');
    } else {
      r.skip(wire);
    }
  }
}

/** usage `index`'s time_elapsed in seconds (the engine refuses a negative one by name). */
function decodeDuration(buf: Buffer, start: number, end: number, index: number): number {
  const r = new Reader(buf, start, end);
  let seconds = 0;
  let nanos = 0;
  while (r.pos < r.end) {
    const tag = r.varint();
    const field = Math.floor(tag / 8);
    const wire = tag & 7;
    if (field === 1) {
      if (wire !== 0) throw wireError(wire, 0, `bucket_quota_usages[${index}].time_elapsed.seconds`);
      seconds = r.int64();
    } else if (field === 2) {
      if (wire !== 0) throw wireError(wire, 0, `bucket_quota_usages[${index}].time_elapsed.nanos`);
      nanos = r.int32();
    } else if (field === 0) {
      throw new ProtoDecodeError('invalid field number 0');
    } else {
      r.skip(wire);
    }
  }
  return seconds + nanos / 1e9;
}

// ---------------------------------------------------------------------------------------------
// Encoding

/** Bytes of a map entry (proto3: an empty key or value is not written). */
const entrySize = (k: string, v: string): number => (k === '' ? 0 : 1 + strSize(k)) + (v === '' ? 0 : 1 + strSize(v));

function bucketIdSize(a: BucketAction): number {
  if (a.wire !== undefined) return a.wire.length;
  let size = 0;
  for (const [k, v] of a.bucket) {
    const entry = entrySize(k, v);
    size += 1 + varintSize(entry) + entry;
  }
  return size;
}

/** A bucket's id: as its stream sent it when the action has that, else from its pairs. */
function writeBucketId(w: Writer, a: BucketAction, size: number): void {
  w.byte(0x0a);
  w.varint(size);
  if (a.wire !== undefined) {
    w.pos += w.buf.write(a.wire, w.pos, 'latin1');
    return;
  }
  for (const [k, v] of a.bucket) {
    w.byte(0x0a);
    w.varint(entrySize(k, v));
    if (k !== '') {
      w.byte(0x0a);
      w.string(k);
    }
    if (v !== '') {
      w.byte(0x12);
      w.string(v);
    }
  }
}

/** Bytes of a Duration of whole seconds (proto3: 0 is not written). */
const durationSize = (seconds: number): number => (seconds === 0 ? 0 : 1 + varintSize(seconds));

function writeDuration(w: Writer, tag: number, seconds: number): void {
  w.byte(tag);
  w.varint(durationSize(seconds));
  if (seconds !== 0) {
    w.byte(0x08);
    w.varint(seconds);
  }
}

function tokenBucketSize(s: Extract<QuotaStrategy, { kind: 'token-bucket' }>): number {
  // tokens_per_fill is a wrapper: present even when 0 (an empty UInt32Value).
  const perFill = s.tokensPerFill === 0 ? 0 : 1 + varintSize(s.tokensPerFill);
  const fill = durationSize(s.fillIntervalSeconds);
  return (s.maxTokens === 0 ? 0 : 1 + varintSize(s.maxTokens)) + 1 + varintSize(perFill) + perFill + 1 + varintSize(fill) + fill;
}

/** Bytes of a RateLimitStrategy whose token bucket (if it is one) takes `tb` bytes. */
function strategySize(s: QuotaStrategy, tb: number): number {
  // blanket_rule: written even for ALLOW_ALL (0), as the oneof's member it is
  return s.kind === 'token-bucket' ? 1 + varintSize(tb) + tb : 2;
}

function writeStrategy(w: Writer, s: QuotaStrategy, tb: number): void {
  if (s.kind !== 'token-bucket') {
    w.byte(0x08);
    w.byte(s.kind === 'allow-all' ? 0 : 1);
    return;
  }
  w.byte(0x1a);
  w.varint(tb);
  if (s.maxTokens !== 0) {
    w.byte(0x08);
    w.varint(s.maxTokens);
  }
  w.byte(0x12);
  w.varint(s.tokensPerFill === 0 ? 0 : 1 + varintSize(s.tokensPerFill));
  if (s.tokensPerFill !== 0) {
    w.byte(0x08);
    w.varint(s.tokensPerFill);
  }
  writeDuration(w, 0x1a, s.fillIntervalSeconds);
}

/**
 * A RateLimitQuotaResponse as one uncompressed gRPC message: the 5-byte prefix and the message in
 * one buffer, so the transport writes it without a copy. Each part's size is worked out once, in
 * the first pass (a length comes before what it measures), and read again in the second.
 */
export function encodeQuotaResponseFrame(actions: readonly BucketAction[]): Buffer {
  const n = actions.length;
  const idSizes = new Array<number>(n);
  const tbSizes = new Array<number>(n);
  const strategySizes = new Array<number>(n);
  const bodySizes = new Array<number>(n); // QuotaAssignmentAction, or 0 for the empty AbandonAction
  const sizes = new Array<number>(n);
  let total = 0;
  for (let i = 0; i < n; i++) {
    const a = actions[i]!;
    const id = (idSizes[i] = bucketIdSize(a));
    let body = 0;
    if ('assign' in a) {
      const st = a.assign.strategy;
      const tb = (tbSizes[i] = st.kind === 'token-bucket' ? tokenBucketSize(st) : 0);
      const strategy = (strategySizes[i] = strategySize(st, tb));
      const ttl = durationSize(a.assign.ttlSeconds);
      body = 1 + varintSize(ttl) + ttl + 1 + varintSize(strategy) + strategy;
    }
    bodySizes[i] = body;
    const size = (sizes[i] = 1 + varintSize(id) + id + 1 + varintSize(body) + body);
    total += 1 + varintSize(size) + size;
  }
  const w = new Writer(Buffer.allocUnsafe(GRPC_PREFIX_BYTES + total), GRPC_PREFIX_BYTES);
  w.buf[0] = 0;
  w.buf.writeUInt32BE(total, 1);
  for (let i = 0; i < n; i++) {
    const a = actions[i]!;
    w.byte(0x0a);
    w.varint(sizes[i]!);
    writeBucketId(w, a, idSizes[i]!);
    if ('assign' in a) {
      w.byte(0x12);
      w.varint(bodySizes[i]!);
      writeDuration(w, 0x12, a.assign.ttlSeconds);
      w.byte(0x1a);
      w.varint(strategySizes[i]!);
      writeStrategy(w, a.assign.strategy, tbSizes[i]!);
    } else {
      w.byte(0x1a);
      w.byte(0);
    }
  }
  return w.buf;
}
