/**
 * Protocol Buffers wire format, by hand, for the codecs of the hot paths (ShouldRateLimit in
 * server/proto-codec.ts, StreamRateLimitQuotas in server/quota-codec.ts) and the sizing of xDS
 * responses before they are decoded (providers/xds/response-scan.ts): a bounds-checked reader that
 * is strict like Go's protobuf (truncated input, bad wire types and invalid UTF-8 are errors) and
 * a writer into a buffer sized beforehand.
 */
import { isUtf8 } from 'node:buffer';

/** Bytes that cannot be decoded (a request so is answered INVALID_ARGUMENT). */
export class ProtoDecodeError extends Error {
  override readonly name = 'ProtoDecodeError';
}

export class Reader {
  pos: number;
  constructor(
    readonly buf: Buffer,
    start: number,
    readonly end: number,
  ) {
    this.pos = start;
  }

  /** A varint as a number: exact up to 2^53, rounded above. */
  varint(): number {
    const buf = this.buf;
    let result = 0;
    let mul = 1;
    for (let i = 0; i < 10; i++) {
      if (this.pos >= this.end) throw new ProtoDecodeError('truncated varint');
      const b = buf[this.pos++]!;
      result += (b & 0x7f) * mul;
      if (b < 0x80) return result;
      mul *= 128;
    }
    throw new ProtoDecodeError('varint longer than 10 bytes');
  }

  /** A uint32 field: the low 32 bits of the varint, exactly (protobuf truncates). */
  uint32(): number {
    const buf = this.buf;
    let result = 0;
    for (let i = 0; i < 10; i++) {
      if (this.pos >= this.end) throw new ProtoDecodeError('truncated varint');
      const b = buf[this.pos++]!;
      if (i < 5) result |= (b & 0x7f) << (7 * i);
      if (b < 0x80) return result >>> 0;
    }
    throw new ProtoDecodeError('varint longer than 10 bytes');
  }

  /** An int64 field (two's complement: a negative value takes ten bytes), exact up to 2^53 either way. */
  int64(): number {
    const buf = this.buf;
    let lo = 0;
    let hi = 0;
    for (let i = 0; i < 10; i++) {
      if (this.pos >= this.end) throw new ProtoDecodeError('truncated varint');
      const b = buf[this.pos++]!;
      if (i < 4) lo |= (b & 0x7f) << (7 * i);
      else if (i === 4) {
        lo |= (b & 0x0f) << 28;
        hi = (b & 0x7f) >> 4;
      } else hi |= (b & 0x7f) << (7 * i - 32);
      if (b < 0x80) {
        lo >>>= 0;
        // hi's sign bit is the value's: below zero, the value is minus its two's complement.
        return hi < 0 ? -((~hi >>> 0) * 2 ** 32 + (~lo >>> 0) + 1) : (hi >>> 0) * 2 ** 32 + lo;
      }
    }
    throw new ProtoDecodeError('varint longer than 10 bytes');
  }

  /** An int32 (enum) field: the low 32 bits, signed. */
  int32(): number {
    return this.uint32() | 0;
  }

  /** The bounds of a length-delimited field. */
  span(): [number, number] {
    const len = this.varint();
    const start = this.pos;
    const end = start + len;
    if (end > this.end) throw new ProtoDecodeError('truncated length-delimited field');
    this.pos = end;
    return [start, end];
  }

  /** A string field; undefined when it is not valid UTF-8 (the caller names the field: `?? notUtf8(name)`). */
  string(): string | undefined {
    const [start, end] = this.span();
    const buf = this.buf;
    // ASCII is by far the common case and needs no validation.
    let ascii = true;
    for (let i = start; i < end; i++) {
      if (buf[i]! >= 0x80) {
        ascii = false;
        break;
      }
    }
    if (ascii) return buf.toString('latin1', start, end);
    return isUtf8(buf.subarray(start, end)) ? buf.toString('utf8', start, end) : undefined;
  }

  skip(wireType: number): void {
    switch (wireType) {
      case 0:
        this.varint();
        return;
      case 1:
        this.advance(8);
        return;
      case 2:
        this.span();
        return;
      case 5:
        this.advance(4);
        return;
      default:
        throw new ProtoDecodeError(`unsupported wire type ${wireType}`);
    }
  }

  private advance(n: number): void {
    if (this.pos + n > this.end) throw new ProtoDecodeError('truncated fixed-width field');
    this.pos += n;
  }
}

/**
 * The errors of a field, made only when thrown: callers write `if (wire !== 2) throw
 * wireError(wire, 2, name)`, so a field's name (with its indexes) is not built for every field of
 * every request.
 */
export function wireError(actual: number, expected: number, field: string): ProtoDecodeError {
  return new ProtoDecodeError(`${field} has wire type ${actual}, expected ${expected}`);
}

export function notUtf8(field: string): never {
  throw new ProtoDecodeError(`${field} is not valid UTF-8`);
}

export function varintSize(v: number): number {
  let n = 1;
  while (v >= 128) {
    v = Math.floor(v / 128);
    n++;
  }
  return n;
}

export function strSize(s: string): number {
  const len = Buffer.byteLength(s);
  return varintSize(len) + len;
}

export class Writer {
  constructor(
    readonly buf: Buffer,
    public pos: number,
  ) {}
  byte(b: number): void {
    this.buf[this.pos++] = b;
  }
  varint(v: number): void {
    while (v >= 128) {
      this.buf[this.pos++] = (v % 128) | 0x80;
      v = Math.floor(v / 128);
    }
    this.buf[this.pos++] = v;
  }
  string(s: string): void {
    const len = Buffer.byteLength(s);
    this.varint(len);
    this.pos += this.buf.write(s, this.pos, len, 'utf8');
  }
  bytes(b: Uint8Array): void {
    this.varint(b.length);
    this.buf.set(b, this.pos);
    this.pos += b.length;
  }
}
