/**
 * An incremental HTTP/1.1 request reader (RFC 9112) for the HTTP port, fed with the bytes of one
 * connection as they arrive. It frames requests (Content-Length or chunked bodies), keeps no more
 * than one request's head and (collected) body, and refuses what would make two readers of the
 * same bytes disagree (request smuggling): a Content-Length beside a Transfer-Encoding, two
 * different lengths, a coding other than chunked, bare LF line ends, folded header lines.
 *
 * Errors carry the status Go's net/http answers for them (upstream's HTTP server): 400, 413,
 * 417, 431, 501, 505, and 503 when the process cannot hold more request bytes. After an error
 * the reader accepts nothing more: the connection closes.
 *
 * What it holds between reads (an unfinished head, a body still arriving, requests it was told to
 * hold back) is copied out of the socket reads and charged to the process's request budget.
 */

import { ByteBudget } from '../byte-budget';
import { pathOf } from '../http-util';
import { HeldBody } from '../held-body';
import { EMPTY_BUFFER } from '../../platform/bytes';

/** A request's head, as read. */
export interface RequestHead {
  readonly method: string;
  /** The request target as sent. */
  readonly target: string;
  /** The target's path: no query, and an absolute-form target reduced to its path. */
  readonly path: string;
  /** 0 for HTTP/1.0, 1 for HTTP/1.1 (and for HTTP/1.2 to 1.9, as Go reads them). */
  readonly minor: number;
  /** Header names (as sent) and values (without surrounding blanks), alternating. */
  readonly rawHeaders: readonly string[];
  /** The connection may carry another request after this one. */
  readonly keepAlive: boolean;
  /** `Expect: 100-continue` on a request that has a body still to come. */
  readonly expectContinue: boolean;
  /** The declared Content-Length; -1 for a chunked body. */
  readonly contentLength: number;
}

/** How a request's body is read: kept (up to a limit of bytes) or counted and dropped. */
export type BodyPlan = { readonly keep: true; readonly limit: number } | { readonly keep: false };

export interface RequestEvents {
  /**
   * A head has arrived, before any of its body: returns how to read the body, or undefined when
   * the request was refused already (the reader then stops).
   */
  head(head: RequestHead): BodyPlan | undefined;
  /** The client waits for `100 Continue` before it sends the body (which is wanted). */
  bodyWanted(head: RequestHead): void;
  /**
   * The whole request has arrived (an empty buffer when the body was dropped or empty). The body
   * may be a view of a socket read, valid until this returns: copy what must outlive it.
   */
  complete(head: RequestHead, body: Buffer): void;
  /** The input is not a request this server accepts; nothing more is read. */
  fail(status: number, reason: string): void;
}

/** Largest request line plus header section (node:http's default; Go's is 1 MiB). */
export const MAX_HEAD_BYTES = 16 * 1024;
/** Largest chunk-size line (with extensions) and trailer section. */
const MAX_CHUNK_LINE_BYTES = 4096;

const enum State {
  Head,
  Length,
  ChunkSize,
  ChunkData,
  ChunkDataEnd,
  Trailers,
  Failed,
}

const OUT_OF_BUFFER = 'the server holds too many incomplete requests (REQUEST_MAX_BUFFERED_BYTES)';
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** Characters a header value may not hold (controls other than HTAB, and DEL). */
const BAD_VALUE = /[\x00-\x08\x0a-\x1f\x7f]/;
/** Characters a request target may not hold. */
const BAD_TARGET = /[\x00-\x20\x7f]/;
const DIGITS = /^[0-9]+$/;
const BARE_CR_OR_LF = /\r(?!\n)|(?<!\r)\n/;
const HEX = /^[0-9a-fA-F]{1,15}$/;

export class RequestReader {
  private state = State.Head;
  /** Bytes received and not yet consumed. */
  private pending: Buffer = EMPTY_BUFFER;
  /** Where the search for the end of the head resumes in `pending`. */
  private searchFrom = 0;
  private head: RequestHead | undefined;
  private plan: BodyPlan = { keep: false };
  /** Body bytes still to come: of the Content-Length, or of the current chunk. */
  private remaining = 0;
  private bodySize = 0;
  private readonly body: HeldBody;
  private trailerBytes = 0;
  /** Empty lines were read where a request line was due: a request has begun, for the time bounds. */
  private blankLines = false;
  /** Told to read no further request for now (the connection has too many unanswered). */
  private holding = false;
  /** Bytes of `pending` charged to the budget. */
  private pendingCharged = 0;

  constructor(
    private readonly events: RequestEvents,
    private readonly budget: ByteBudget = new ByteBudget(Number.MAX_SAFE_INTEGER),
  ) {
    this.body = new HeldBody(budget);
  }

  /** True while a request has begun and not yet completed (for the request timeout). */
  get midRequest(): boolean {
    return this.state === State.Head ? this.pending.length > 0 || this.blankLines : this.state !== State.Failed;
  }

  /** True once a head is complete and its body is still being read. */
  get readingBody(): boolean {
    return this.state !== State.Head && this.state !== State.Failed;
  }

  get failed(): boolean {
    return this.state === State.Failed;
  }

  /** True while told to read no further request (see {@link hold}). */
  get held(): boolean {
    return this.holding;
  }

  /** Stops reading: what is buffered and what comes later is ignored. */
  stop(): void {
    this.state = State.Failed;
    this.pending = EMPTY_BUFFER;
    this.budget.give(this.pendingCharged);
    this.pendingCharged = 0;
    this.body.free();
  }

  /** Reads no further request after the one being completed; later bytes wait in the reader. */
  hold(): void {
    this.holding = true;
  }

  /** Reads on: the requests that waited are read now. */
  release(): void {
    if (!this.holding) return;
    this.holding = false;
    this.push(EMPTY_BUFFER);
  }

  /** Consumes `chunk`, calling the events for every head, request and error it completes. */
  push(chunk: Buffer): void {
    if (this.failed) return;
    const buf = this.pending.length === 0 ? chunk : chunk.length === 0 ? this.pending : Buffer.concat([this.pending, chunk]);
    let at = 0;
    while (at < buf.length && !this.failed && !this.holding) {
      const next = this.step(buf, at);
      if (next < 0) break; // needs more bytes
      at = next;
    }
    if (this.failed) return;
    // Left over: an unfinished head, chunk line or trailer, or requests held back; a copy, so that
    // it does not pin a whole socket read. A body being read is kept as it arrives.
    this.pending = at === buf.length ? EMPTY_BUFFER : at === 0 && buf !== chunk ? buf : Buffer.from(buf.subarray(at));
    const more = this.pending.length - this.pendingCharged;
    if (more > 0 && !this.budget.tryTake(more)) {
      this.pending = EMPTY_BUFFER;
      this.refuse(503, OUT_OF_BUFFER);
      return;
    }
    if (more < 0) this.budget.give(-more);
    this.pendingCharged = this.pending.length;
    if (this.plan.keep && !this.body.keep(this.plan.limit)) this.refuse(503, OUT_OF_BUFFER);
  }

  /** One step from `at`: returns where the next starts, or -1 when more bytes are needed. */
  private step(buf: Buffer, at: number): number {
    switch (this.state) {
      case State.Head:
        return this.readHead(buf, at);
      case State.Length: {
        const n = Math.min(this.remaining, buf.length - at);
        if (!this.take(buf, at, n)) return -1;
        this.remaining -= n;
        if (this.remaining === 0) this.finish();
        return at + n;
      }
      case State.ChunkSize:
        return this.readChunkSize(buf, at);
      case State.ChunkData: {
        const n = Math.min(this.remaining, buf.length - at);
        if (!this.take(buf, at, n)) return -1;
        this.remaining -= n;
        if (this.remaining === 0) this.state = State.ChunkDataEnd;
        return at + n;
      }
      case State.ChunkDataEnd:
        if (buf.length - at < 2) return -1;
        if (buf[at] !== 13 || buf[at + 1] !== 10) return this.refuse(400, 'malformed chunked encoding');
        this.state = State.ChunkSize;
        return at + 2;
      case State.Trailers:
        return this.readTrailer(buf, at);
      default:
        return -1;
    }
  }

  private readHead(buf: Buffer, start: number): number {
    let at = start;
    // Empty lines before a request line are ignored (RFC 9112 2.2).
    while (at + 1 < buf.length && buf[at] === 13 && buf[at + 1] === 10) at += 2;
    if (at > start) this.blankLines = true;
    if (at >= buf.length) return at;
    if (at + 1 === buf.length && buf[at] === 13) return -1;
    const from = Math.max(at, this.searchFrom - 3);
    const end = buf.indexOf('\r\n\r\n', from, 'latin1');
    if (end < 0) {
      if (buf.indexOf('\n\n', from, 'latin1') >= 0 || buf.indexOf('\n\r\n', from, 'latin1') >= 0) {
        return this.refuse(400, 'malformed request: lines must end with CRLF');
      }
      // Up to 3 bytes of the unfinished CRLFCRLF do not count.
      if (buf.length - at > MAX_HEAD_BYTES + 3) return this.refuse(431, 'Request Header Fields Too Large');
      // push keeps the bytes from `start` on, so the resume point is relative to it.
      this.searchFrom = buf.length - start;
      return -1;
    }
    if (end - at > MAX_HEAD_BYTES) return this.refuse(431, 'Request Header Fields Too Large');
    this.searchFrom = 0;
    this.blankLines = false;
    const text = buf.toString('latin1', at, end);
    return this.parseHead(text) ? end + 4 : -1;
  }

  /** Parses a complete head; false when it was refused. */
  private parseHead(text: string): boolean {
    // First, so that the answer does not depend on how the bytes were split (an unfinished head
    // with a bare LF is refused before its end arrives).
    if (BARE_CR_OR_LF.test(text)) return this.refused(400, 'malformed request: lines must end with CRLF');
    let lineEnd = text.indexOf('\r\n');
    if (lineEnd < 0) lineEnd = text.length;
    const line = text.slice(0, lineEnd);
    const sp1 = line.indexOf(' ');
    const sp2 = sp1 < 0 ? -1 : line.indexOf(' ', sp1 + 1);
    if (sp1 <= 0 || sp2 < 0) return this.refused(400, 'malformed request line');
    const method = line.slice(0, sp1);
    const target = line.slice(sp1 + 1, sp2);
    const version = line.slice(sp2 + 1);
    if (!TOKEN.test(method)) return this.refused(400, 'malformed request method');
    if (target === '' || BAD_TARGET.test(target)) return this.refused(400, 'malformed request target');
    if (version.length !== 8 || !version.startsWith('HTTP/') || version[6] !== '.') return this.refused(400, 'malformed HTTP version');
    const major = version.charCodeAt(5) - 48;
    const minorDigit = version.charCodeAt(7) - 48;
    if (major < 0 || major > 9 || minorDigit < 0 || minorDigit > 9) return this.refused(400, 'malformed HTTP version');
    const minor = minorDigit === 0 ? 0 : 1;
    if (major !== 1) return this.refused(505, 'HTTP Version Not Supported');

    const rawHeaders: string[] = [];
    let contentLength = -2; // none yet
    let chunked = false;
    let transferEncoding = false;
    let closeAsked = false;
    let keepAliveAsked = false;
    let host = false;
    let expect = '';
    let start = lineEnd + 2;
    while (start < text.length) {
      let end = text.indexOf('\r\n', start);
      if (end < 0) end = text.length;
      const c = text.charCodeAt(start);
      if (c === 32 || c === 9) return this.refused(400, 'folded header lines are not accepted');
      const colon = text.indexOf(':', start);
      if (colon < 0 || colon > end) return this.refused(400, 'malformed header line');
      const name = text.slice(start, colon);
      if (!TOKEN.test(name)) return this.refused(400, 'malformed header name');
      const value = trimBlanks(text.slice(colon + 1, end));
      if (BAD_VALUE.test(value)) return this.refused(400, 'malformed header value');
      rawHeaders.push(name, value);
      start = end + 2;
      switch (name.length) {
        case 4:
          if (name.toLowerCase() === 'host') {
            if (host) return this.refused(400, 'too many Host headers');
            host = true;
          }
          break;
        case 6:
          if (name.toLowerCase() === 'expect') expect = value.toLowerCase();
          break;
        case 10:
          if (name.toLowerCase() === 'connection') {
            for (const token of value.toLowerCase().split(',')) {
              const t = trimBlanks(token);
              if (t === 'close') closeAsked = true;
              else if (t === 'keep-alive') keepAliveAsked = true;
            }
          }
          break;
        case 14:
          if (name.toLowerCase() === 'content-length') {
            if (!DIGITS.test(value) || value.length > 15) return this.refused(400, 'invalid Content-Length');
            const n = Number(value);
            if (contentLength !== -2 && contentLength !== n) return this.refused(400, 'conflicting Content-Length headers');
            contentLength = n;
          }
          break;
        case 17:
          if (name.toLowerCase() === 'transfer-encoding') {
            if (transferEncoding || value.toLowerCase() !== 'chunked') return this.refused(501, 'Unsupported transfer encoding');
            transferEncoding = true;
            chunked = true;
          }
          break;
      }
    }
    if (chunked && contentLength !== -2) return this.refused(400, 'Content-Length and Transfer-Encoding together');
    if (minor === 1 && !host) return this.refused(400, 'missing required Host header');
    if (chunked && minor === 0) return this.refused(400, 'chunked encoding in an HTTP/1.0 request');
    const length = chunked ? -1 : contentLength === -2 ? 0 : contentLength;
    if (expect !== '' && expect !== '100-continue') return this.refused(417, 'Expectation Failed');
    const head: RequestHead = {
      method,
      target,
      path: pathOf(target),
      minor,
      rawHeaders,
      // `close` wins over `keep-alive`, as in Go; HTTP/1.0 keeps the connection only when asked.
      keepAlive: !closeAsked && (minor === 1 || keepAliveAsked),
      expectContinue: expect !== '' && minor === 1 && length !== 0,
      contentLength: length,
    };
    this.head = head;
    const plan = this.events.head(head);
    if (plan === undefined) {
      this.stop();
      return false;
    }
    this.plan = plan;
    this.bodySize = 0;
    if (chunked) this.state = State.ChunkSize;
    else if (length === 0) {
      this.finish();
      return true;
    } else if (plan.keep && length > plan.limit) return this.refused(413, `request body of ${length} bytes exceeds the limit of ${plan.limit}`);
    else {
      this.remaining = length;
      this.state = State.Length;
    }
    if (head.expectContinue) this.events.bodyWanted(head);
    return true;
  }

  private readChunkSize(buf: Buffer, at: number): number {
    const end = buf.indexOf('\r\n', at, 'latin1');
    if (end < 0) {
      // The CR of an unfinished CRLF does not count.
      if (buf.length - at > MAX_CHUNK_LINE_BYTES + 1) return this.refuse(400, 'chunk size line too long');
      return -1;
    }
    if (end - at > MAX_CHUNK_LINE_BYTES) return this.refuse(400, 'chunk size line too long');
    const line = buf.toString('latin1', at, end);
    let sizeEnd = 0;
    while (sizeEnd < line.length && isHexDigit(line.charCodeAt(sizeEnd))) sizeEnd++;
    const rest = line.slice(sizeEnd);
    if (!HEX.test(line.slice(0, sizeEnd)) || (rest !== '' && !/^[ \t]*;/.test(rest)) || BAD_VALUE.test(rest)) {
      return this.refuse(400, 'malformed chunk size');
    }
    const size = parseInt(line.slice(0, sizeEnd), 16);
    const plan = this.plan;
    if (plan.keep && this.bodySize + size > plan.limit) return this.refuse(413, `request body exceeds the limit of ${plan.limit} bytes`);
    if (size === 0) {
      this.state = State.Trailers;
      this.trailerBytes = 0;
    } else {
      this.remaining = size;
      this.state = State.ChunkData;
    }
    return end + 2;
  }

  /** One trailer line (ignored), or the empty line that ends the request. */
  private readTrailer(buf: Buffer, at: number): number {
    const end = buf.indexOf('\r\n', at, 'latin1');
    if (end < 0) {
      if (this.trailerBytes + buf.length - at > MAX_HEAD_BYTES + 1) return this.refuse(431, 'Request Header Fields Too Large');
      return -1;
    }
    if (end === at) {
      this.finish();
      return at + 2;
    }
    this.trailerBytes += end - at + 2;
    if (this.trailerBytes > MAX_HEAD_BYTES) return this.refuse(431, 'Request Header Fields Too Large');
    const line = buf.toString('latin1', at, end);
    const colon = line.indexOf(':');
    if (colon <= 0 || !TOKEN.test(line.slice(0, colon)) || BAD_VALUE.test(line)) return this.refuse(400, 'malformed trailer');
    return end + 2;
  }

  /** Body bytes: kept or counted. False when they cannot be held (the request is refused). */
  private take(buf: Buffer, at: number, n: number): boolean {
    if (n === 0) return true;
    this.bodySize += n;
    if (!this.plan.keep) return true;
    if (!this.body.receive(buf, at, at + n, this.plan.limit)) return this.refused(503, OUT_OF_BUFFER);
    return true;
  }

  private finish(): void {
    const head = this.head!;
    const body = this.body.bytes();
    this.head = undefined;
    this.state = State.Head;
    this.events.complete(head, body);
    this.body.free();
  }

  private refuse(status: number, reason: string): number {
    this.refused(status, reason);
    return -1;
  }

  private refused(status: number, reason: string): false {
    this.stop();
    this.events.fail(status, reason);
    return false;
  }
}

function isHexDigit(c: number): boolean {
  return (c >= 48 && c <= 57) || (c >= 65 && c <= 70) || (c >= 97 && c <= 102);
}

function trimBlanks(s: string): string {
  let a = 0;
  let b = s.length;
  while (a < b && (s.charCodeAt(a) === 32 || s.charCodeAt(a) === 9)) a++;
  while (b > a && (s.charCodeAt(b - 1) === 32 || s.charCodeAt(b - 1) === 9)) b--;
  return a === 0 && b === s.length ? s : s.slice(a, b);
}
