/**
 * RequestReader (src/server/http1/parser.ts) on its own: every input is fed whole, byte by byte,
 * cut once at every position and in seeded random pieces, and the events must be the same
 * whatever the split (the status of a refusal, not its wording, is compared). Then a seeded,
 * bounded fuzz of random bytes and mutated valid requests: the reader never throws, every event
 * sequence is well formed, bodies stay within the limit, and a head, chunk-size line or trailer
 * section that never ends is refused before the reader holds more than its bound plus one piece.
 * Also: hold()/release() (reading no further request, even within one buffer), bytes carried
 * between pushes kept as copies, and the request budget they are charged to (503 past it).
 */
import { isDeepStrictEqual } from 'node:util';
import { pathOf } from '../../../src/server/http-util';
import { ByteBudget } from '../../../src/server/byte-budget';
import { type BodyPlan, MAX_HEAD_BYTES, type RequestHead, RequestReader } from '../../../src/server/http1/parser';
import { int, pick, prng, type Rng } from '../../support/prng';

/** What the reader reported, in a form two runs can be compared by. */
type Event =
  | {
      kind: 'head';
      method: string;
      target: string;
      path: string;
      minor: number;
      rawHeaders: string[];
      keepAlive: boolean;
      expectContinue: boolean;
      contentLength: number;
    }
  | { kind: 'bodyWanted'; target: string }
  | { kind: 'complete'; target: string; body: string }
  | { kind: 'fail'; status: number; reason: string };

interface Run {
  events: Event[];
  reader: RequestReader;
  /** Bytes pushed before the push during which `fail` came (-1: no fail). */
  fedBeforeFail: number;
  /** Every head object given to `head`, and the one given to each `complete`, for identity checks. */
  heads: RequestHead[];
  completedHeads: RequestHead[];
}

const KEEP: BodyPlan = { keep: true, limit: 1024 };
const DROP: BodyPlan = { keep: false };

function headEvent(head: RequestHead): Event {
  return {
    kind: 'head',
    method: head.method,
    target: head.target,
    path: head.path,
    minor: head.minor,
    rawHeaders: [...head.rawHeaders],
    keepAlive: head.keepAlive,
    expectContinue: head.expectContinue,
    contentLength: head.contentLength,
  };
}

/** A reader fed `input` in pieces of the sizes in `pieces` (what is left over goes in one last push). */
function feed(input: Buffer | string, pieces: readonly number[], plan: BodyPlan | ((head: RequestHead) => BodyPlan | undefined) = KEEP): Run {
  const bytes = typeof input === 'string' ? Buffer.from(input, 'latin1') : input;
  const events: Event[] = [];
  const heads: RequestHead[] = [];
  const completedHeads: RequestHead[] = [];
  const planOf = typeof plan === 'function' ? plan : () => plan;
  const reader = new RequestReader({
    head(head) {
      heads.push(head);
      events.push(headEvent(head));
      return planOf(head);
    },
    bodyWanted: (head) => events.push({ kind: 'bodyWanted', target: head.target }),
    complete(head, body) {
      completedHeads.push(head);
      events.push({ kind: 'complete', target: head.target, body: body.toString('latin1') });
    },
    fail: (status, reason) => events.push({ kind: 'fail', status, reason }),
  });
  let at = 0;
  let fedBeforeFail = -1;
  const push = (piece: Buffer): void => {
    const failsBefore = events.filter((e) => e.kind === 'fail').length;
    reader.push(piece);
    if (fedBeforeFail < 0 && events.filter((e) => e.kind === 'fail').length > failsBefore) fedBeforeFail = at;
    at += piece.length;
  };
  for (const n of pieces) {
    if (at >= bytes.length) break;
    // A copy, so that the reader cannot lean on the caller's buffer.
    push(Buffer.from(bytes.subarray(at, at + n)));
  }
  if (at < bytes.length) push(Buffer.from(bytes.subarray(at)));
  return { events, reader, fedBeforeFail, heads, completedHeads };
}

const whole = (input: Buffer | string, plan?: BodyPlan | ((head: RequestHead) => BodyPlan | undefined)): Event[] =>
  feed(input, [Infinity], plan).events;

/** Events without the wording of a refusal (which may name the first problem seen). */
function comparable(events: readonly Event[]): unknown[] {
  return events.map((e) => (e.kind === 'fail' ? { kind: 'fail', status: e.status } : e));
}

const lengthOf = (input: Buffer | string): number => (typeof input === 'string' ? Buffer.byteLength(input, 'latin1') : input.length);

function randomPieces(rng: Rng, total: number): number[] {
  const out: number[] = [];
  let left = total;
  while (left > 0) {
    const n = 1 + Math.floor(rng() * Math.min(left, rng() < 0.5 ? 8 : 256));
    out.push(n);
    left -= n;
  }
  return out;
}

/** The splits an input is fed in: whole, byte by byte, cut once at every position (short inputs), random. */
function splitsOf(total: number, seed: number): Array<{ name: string; pieces: number[] }> {
  const splits = [
    { name: 'whole', pieces: [total] },
    { name: 'byte by byte', pieces: Array.from({ length: total }, () => 1) },
  ];
  if (total <= 2000) for (let cut = 1; cut < total; cut++) splits.push({ name: `cut at ${cut}`, pieces: [cut] });
  const rng = prng(seed);
  for (let i = 0; i < 20; i++) splits.push({ name: `random split ${i} (seed ${seed})`, pieces: randomPieces(rng, total) });
  return splits;
}

/**
 * Feeds `input` in every split of splitsOf and fails naming the first split whose events differ
 * from the whole input's; returns the whole input's events.
 */
function sameForEverySplit(input: Buffer | string, plan: BodyPlan = KEEP): Event[] {
  const reference = whole(input, plan);
  for (const { name, pieces } of splitsOf(lengthOf(input), 0x5711)) {
    const events = feed(input, pieces, plan).events;
    if (!isDeepStrictEqual(comparable(events), comparable(reference))) {
      throw new Error(
        `fed ${name}, the events differ from the whole input's\ninput: ${JSON.stringify(input.toString())}\n` +
          `whole: ${JSON.stringify(reference)}\n${name}: ${JSON.stringify(events)}`,
      );
    }
  }
  return reference;
}

const kinds = (events: readonly Event[]): string[] => events.map((e) => (e.kind === 'fail' ? `fail ${e.status}` : e.kind));
const statusOf = (events: readonly Event[]): number | undefined => {
  const last = events[events.length - 1];
  return last?.kind === 'fail' ? last.status : undefined;
};
const headOf = (events: readonly Event[], i = 0): Extract<Event, { kind: 'head' }> => {
  const heads = events.filter((e) => e.kind === 'head');
  const head = heads[i];
  if (head === undefined) throw new Error(`no head number ${i} in ${JSON.stringify(events)}`);
  return head as Extract<Event, { kind: 'head' }>;
};
const bodiesOf = (events: readonly Event[]): string[] => events.flatMap((e) => (e.kind === 'complete' ? [e.body] : []));

const GET = 'GET / HTTP/1.1\r\nHost: x\r\n\r\n';
const post = (body: string, extra = ''): string => `POST /json HTTP/1.1\r\nHost: x\r\n${extra}Content-Length: ${Buffer.byteLength(body, 'latin1')}\r\n\r\n${body}`;
const chunkedHead = (extra = ''): string => `POST /json HTTP/1.1\r\nHost: x\r\n${extra}Transfer-Encoding: chunked\r\n\r\n`;

// ---------------------------------------------------------------------------------------------

describe('request line', () => {
  test('a simple GET: its head, then its completion with an empty body', () => {
    const events = sameForEverySplit('GET /healthcheck?verbose=1 HTTP/1.1\r\nHost: example\r\nX-A:  b \t\r\n\r\n');
    expect(events).toEqual([
      {
        kind: 'head',
        method: 'GET',
        target: '/healthcheck?verbose=1',
        path: '/healthcheck',
        minor: 1,
        rawHeaders: ['Host', 'example', 'X-A', 'b'],
        keepAlive: true,
        expectContinue: false,
        contentLength: 0,
      },
      { kind: 'complete', target: '/healthcheck?verbose=1', body: '' },
    ]);
  });

  test('any token is a method', () => {
    for (const method of ['PURGE', 'M-SEARCH', "X!#$%&'*+.^_`|~1"]) {
      expect(headOf(sameForEverySplit(`${method} /json HTTP/1.1\r\nHost: x\r\n\r\n`)).method).toBe(method);
    }
  });

  test.each([
    ['no spaces', 400, 'GET\r\nHost: x\r\n\r\n'],
    ['no version', 400, 'GET /\r\nHost: x\r\n\r\n'],
    ['a leading space', 400, ' GET / HTTP/1.1\r\nHost: x\r\n\r\n'],
    ['an empty target (two spaces)', 400, 'GET  / HTTP/1.1\r\nHost: x\r\n\r\n'],
    ['tabs instead of spaces', 400, 'GET\t/\tHTTP/1.1\r\nHost: x\r\n\r\n'],
    ['a method that is no token', 400, 'G@T / HTTP/1.1\r\nHost: x\r\n\r\n'],
    ['a method with a control character', 400, 'G\x01T / HTTP/1.1\r\nHost: x\r\n\r\n'],
    ['a control character in the target', 400, 'GET /a\x01b HTTP/1.1\r\nHost: x\r\n\r\n'],
    ['DEL in the target', 400, 'GET /a\x7fb HTTP/1.1\r\nHost: x\r\n\r\n'],
    ['a space in the target', 400, 'GET /a b HTTP/1.1\r\nHost: x\r\n\r\n'],
    ['a trailing space after the version', 400, 'GET / HTTP/1.1 \r\nHost: x\r\n\r\n'],
    ['a lower-case version', 400, 'GET / http/1.1\r\nHost: x\r\n\r\n'],
    ['a version without minor', 400, 'GET / HTTP/1\r\nHost: x\r\n\r\n'],
    ['a version with a letter', 400, 'GET / HTTP/1.x\r\nHost: x\r\n\r\n'],
    ['a two-digit major', 400, 'GET / HTTP/11.1\r\nHost: x\r\n\r\n'],
    ['a version without a dot', 400, 'GET / HTTP/1-1\r\nHost: x\r\n\r\n'],
    ['HTTP/2.0', 505, 'GET / HTTP/2.0\r\nHost: x\r\n\r\n'],
    ['HTTP/0.9', 505, 'GET / HTTP/0.9\r\nHost: x\r\n\r\n'],
    ['HTTP/3.0', 505, 'GET / HTTP/3.0\r\nHost: x\r\n\r\n'],
  ])('%s → %i, and nothing is read after it', (_name, status, input) => {
    const events = sameForEverySplit(input + GET);
    expect(kinds(events)).toEqual([`fail ${status}`]);
  });

  test('the path of origin-form, absolute-form and asterisk-form targets', () => {
    expect(headOf(sameForEverySplit('POST http://example.com/json?x=1 HTTP/1.1\r\nHost: example.com\r\nContent-Length: 0\r\n\r\n'))).toMatchObject({
      target: 'http://example.com/json?x=1',
      path: '/json',
    });
    expect(headOf(sameForEverySplit('GET https://h:8080/healthcheck HTTP/1.1\r\nHost: h\r\n\r\n')).path).toBe('/healthcheck');
    expect(headOf(sameForEverySplit('GET http://example.com HTTP/1.1\r\nHost: h\r\n\r\n')).path).toBe('/');
    expect(headOf(sameForEverySplit('OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n')).path).toBe('*');
    expect(pathOf('/json')).toBe('/json');
    expect(pathOf('/json?a=b?c')).toBe('/json');
    expect(pathOf('/a/b/')).toBe('/a/b/');
    expect(pathOf('http://h/json?x')).toBe('/json');
    expect(pathOf('HTTP://H:1/p/q?r')).toBe('/p/q');
    expect(pathOf('http://h')).toBe('/');
  });

  test('empty lines before a request line are ignored, at the start and between requests', () => {
    const events = sameForEverySplit(`\r\n\r\n${GET}\r\n${post('ab')}\r\n\r\n\r\n${GET}`);
    expect(kinds(events)).toEqual(['head', 'complete', 'head', 'complete', 'head', 'complete']);
    expect(bodiesOf(events)).toEqual(['', 'ab', '']);
  });

  test('a megabyte of empty lines before a request, in odd-sized pieces: the request is read', () => {
    const run = feed(Buffer.concat([Buffer.from('\r\n'.repeat(512 * 1024)), Buffer.from(GET)]), Array.from({ length: 64 }, () => 16 * 1024 + 1));
    expect(kinds(run.events)).toEqual(['head', 'complete']);
    expect(run.reader.midRequest).toBe(false);
  });
});

describe('header section', () => {
  test('names as sent, values without surrounding blanks, empty values and repeats kept', () => {
    const events = sameForEverySplit('GET / HTTP/1.1\r\nhOsT: x\r\nX-Empty:\r\nX-Tab:\tin\tside\t\r\nX-Rep: 1\r\nX-Rep: 2\r\nX-Latin: \xe9\xff\r\n\r\n');
    expect(headOf(events).rawHeaders).toEqual(['hOsT', 'x', 'X-Empty', '', 'X-Tab', 'in\tside', 'X-Rep', '1', 'X-Rep', '2', 'X-Latin', '\xe9\xff']);
    expect(kinds(events)).toEqual(['head', 'complete']);
  });

  test.each([
    ['a folded line (space)', 'GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n  folded\r\n\r\n'],
    ['a folded line (tab)', 'GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n\tfolded\r\n\r\n'],
    ['a folded first header line', 'GET / HTTP/1.1\r\n Host: x\r\n\r\n'],
    ['a folded line that looks like a header', 'GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n X-B: b\r\n\r\n'],
    ['a space in a name', 'GET / HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n'],
    ['a space before the colon', 'GET / HTTP/1.1\r\nHost : x\r\n\r\n'],
    ['an empty name', 'GET / HTTP/1.1\r\nHost: x\r\n: v\r\n\r\n'],
    ['a separator in a name', 'GET / HTTP/1.1\r\nHost: x\r\nX(a): v\r\n\r\n'],
    ['a NUL in a name', 'GET / HTTP/1.1\r\nHost: x\r\nX\x00a: v\r\n\r\n'],
    ['a line without a colon', 'GET / HTTP/1.1\r\nHost: x\r\nNoColon\r\n\r\n'],
    ['a NUL in a value', 'GET / HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n'],
    ['an ESC in a value', 'GET / HTTP/1.1\r\nHost: x\r\nX-A: a\x1bb\r\n\r\n'],
    ['DEL in a value', 'GET / HTTP/1.1\r\nHost: x\r\nX-A: a\x7fb\r\n\r\n'],
    ['a bare CR in a value', 'GET / HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n'],
    ['bare LF line ends everywhere', 'GET / HTTP/1.1\nHost: x\n\n'],
    ['a bare LF after the request line', 'GET / HTTP/1.1\nHost: x\r\n\r\n'],
    ['a bare LF ending one header line', 'GET / HTTP/1.1\r\nHost: x\nX-A: b\r\n\r\n'],
    ['a bare LF ending the head', 'GET / HTTP/1.1\r\nHost: x\r\n\n'],
    ['an LF, CRLF ending the head', 'GET / HTTP/1.1\r\nHost: x\n\r\n'],
    ['two Host headers', 'GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n'],
    ['no Host in HTTP/1.1', 'GET / HTTP/1.1\r\nX-A: b\r\n\r\n'],
  ])('%s → 400', (_name, input) => {
    expect(kinds(sameForEverySplit(input + GET))).toEqual(['fail 400']);
  });

  test('a later HTTP/1.x is read as HTTP/1.1 (as Go does): it needs a Host', () => {
    expect(kinds(sameForEverySplit('GET / HTTP/1.2\r\n\r\n'))).toEqual(['fail 400']);
  });

  test.each([
    ['an unsupported version', 'GET / HTTP/2.0\r\nA: b\n\nX: y\r\n\r\n'],
    ['an unsupported coding', 'GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\nA: b\n\nX: y\r\n\r\n'],
  ])('%s and a bare LF later in the head: one status whatever the split', (_name, input) => {
    sameForEverySplit(input);
  });

  test('HTTP/1.0 needs no Host; an empty Host is a Host', () => {
    expect(headOf(sameForEverySplit('GET / HTTP/1.0\r\n\r\n'))).toMatchObject({ minor: 0, keepAlive: false });
    expect(kinds(sameForEverySplit('GET / HTTP/1.1\r\nHost:\r\n\r\n'))).toEqual(['head', 'complete']);
  });

  test('a head that arrives complete over 16 KiB is 431', () => {
    const big = `GET / HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(MAX_HEAD_BYTES)}\r\n\r\n`;
    expect(kinds(whole(big))).toEqual(['fail 431']);
    expect(kinds(whole(big + GET))).toEqual(['fail 431']);
    expect(kinds(sameForEverySplit(big))).toEqual(['fail 431']);
  });

  test('a head over 16 KiB arriving in small pieces is 431 as soon as it passes the bound, not when (if ever) it ends', () => {
    // Header lines that never end the head: the reader must refuse after MAX_HEAD_BYTES, not keep them.
    const endless = 'GET / HTTP/1.1\r\nHost: x\r\n' + 'X-Header-Line: 0123456789\r\n'.repeat(4 * 1024);
    for (const piece of [1, 7, 100, 1500]) {
      const run = feed(endless, Array.from({ length: Math.ceil(endless.length / piece) }, () => piece));
      expect(kinds(run.events)).toEqual(['fail 431']);
      // Up to 3 bytes of an unfinished CRLFCRLF are allowed beyond the bound.
      expect(run.fedBeforeFail).toBeLessThanOrEqual(MAX_HEAD_BYTES + 3);
    }
  });

  test('the 16 KiB bound on a head does not depend on how the head arrives', () => {
    // Heads of MAX_HEAD_BYTES - 4 .. MAX_HEAD_BYTES + 1 bytes (request line and header lines,
    // without the empty line): accepted up to the bound, whole or in pieces.
    for (let size = MAX_HEAD_BYTES - 4; size <= MAX_HEAD_BYTES + 1; size++) {
      const start = 'GET / HTTP/1.1\r\nHost: x\r\nX-Fill: ';
      const input = `${start}${'f'.repeat(size - start.length)}\r\n\r\n`;
      const expected = size <= MAX_HEAD_BYTES ? ['head', 'complete'] : ['fail 431'];
      for (const [name, pieces] of [
        ['whole', [input.length]],
        ['byte by byte', Array.from({ length: input.length }, () => 1)],
        ['cut before the last byte', [input.length - 1]],
        ['cut before the last two bytes', [input.length - 2]],
      ] as const) {
        const got = kinds(feed(input, pieces).events);
        if (!isDeepStrictEqual(got, expected)) throw new Error(`a head of ${size} bytes fed ${name}: ${got.join(', ')}; expected ${expected.join(', ')}`);
      }
    }
  });
});

describe('Content-Length', () => {
  test('the body is read to its length, and the next request after it', () => {
    const events = sameForEverySplit(post('hello') + post('') + GET);
    expect(kinds(events)).toEqual(['head', 'complete', 'head', 'complete', 'head', 'complete']);
    expect(bodiesOf(events)).toEqual(['hello', '', '']);
    expect(headOf(events).contentLength).toBe(5);
  });

  test('blanks around the value, and an HTTP/1.0 body', () => {
    expect(bodiesOf(sameForEverySplit('POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: \t 3 \r\n\r\nabc'))).toEqual(['abc']);
    expect(bodiesOf(sameForEverySplit('POST /json HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc'))).toEqual(['abc']);
  });

  test('equal duplicates are one length', () => {
    const events = sameForEverySplit('POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\ncontent-length: 3\r\n\r\nabc' + GET);
    expect(kinds(events)).toEqual(['head', 'complete', 'head', 'complete']);
    expect(bodiesOf(events)).toEqual(['abc', '']);
  });

  test.each([
    ['letters', 'abc'],
    ['negative', '-1'],
    ['a sign', '+1'],
    ['a fraction', '1.0'],
    ['hex', '0x10'],
    ['empty', ''],
    ['two numbers', '1 2'],
    ['a list', '3, 3'],
    ['sixteen digits', '1234567890123456'],
  ])('an invalid value (%s) → 400', (_name, value) => {
    expect(kinds(sameForEverySplit(`POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: ${value}\r\n\r\nabc`))).toEqual(['fail 400']);
  });

  test('conflicting duplicates → 400', () => {
    expect(kinds(sameForEverySplit('POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd'))).toEqual(['fail 400']);
  });
});

describe('Transfer-Encoding', () => {
  test.each([['gzip'], ['gzip, chunked'], ['chunked, gzip'], ['identity'], ['chunked, chunked']])('%s → 501', (coding) => {
    expect(kinds(sameForEverySplit(`POST /json HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: ${coding}\r\n\r\n0\r\n\r\n`))).toEqual(['fail 501']);
  });

  test('two Transfer-Encoding headers → 501', () => {
    expect(kinds(sameForEverySplit('POST /json HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n'))).toEqual([
      'fail 501',
    ]);
  });

  test('with a Content-Length, in either order → 400', () => {
    expect(kinds(sameForEverySplit('POST /json HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n'))).toEqual(['fail 400']);
    expect(kinds(sameForEverySplit('POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n'))).toEqual(['fail 400']);
  });

  test('chunked in HTTP/1.0 → 400', () => {
    expect(kinds(sameForEverySplit('POST /json HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n'))).toEqual(['fail 400']);
  });
});

describe('chunked bodies', () => {
  test('chunks with extensions, upper-case and zero-padded sizes, and trailers', () => {
    const input =
      chunkedHead() +
      '5;name=value\r\nhello\r\n' +
      '1 ; spaced="quoted;ext"\r\n,\r\n' +
      'A;a;b\r\n0123456789\r\n' +
      '00001\r\n!\r\n' +
      '0;last\r\nTrailer-A: 1\r\nTrailer-B: two words\r\n\r\n' +
      GET;
    const events = sameForEverySplit(input);
    expect(kinds(events)).toEqual(['head', 'complete', 'head', 'complete']);
    expect(headOf(events).contentLength).toBe(-1);
    expect(bodiesOf(events)).toEqual(['hello,0123456789!', '']);
  });

  test('an empty chunked body', () => {
    expect(bodiesOf(sameForEverySplit(chunkedHead() + '0\r\n\r\n'))).toEqual(['']);
  });

  test('a body dropped by the plan is read through, however long', () => {
    const chunk = 'z'.repeat(5000);
    const events = sameForEverySplit(chunkedHead() + `${chunk.length.toString(16)}\r\n${chunk}\r\n0\r\n\r\n` + post('q'.repeat(3000)) + GET, DROP);
    expect(kinds(events)).toEqual(['head', 'complete', 'head', 'complete', 'head', 'complete']);
    expect(bodiesOf(events)).toEqual(['', '', '']);
  });

  test.each([
    ['not hex', 'x\r\n'],
    ['empty', '\r\n'],
    ['a leading space', ' 5\r\nhello\r\n'],
    ['a letter after the digits', '5x\r\nhello\r\n'],
    ['negative', '-5\r\nhello\r\n'],
    ['0x prefix', '0x5\r\nhello\r\n'],
    ['sixteen hex digits', '0000000000000005\r\nhello\r\n'],
    ['a control character in an extension', '5;a\x01b\r\nhello\r\n'],
    ['a bare LF after the size', '5\nhello\r\n'],
    ['no CRLF after the data', '5\r\nhelloXY0\r\n\r\n'],
    ['a bare LF after the data', '5\r\nhello\n0\r\n\r\n'],
    ['a data longer than its size', '3\r\nhello\r\n0\r\n\r\n'],
    ['a trailer without a colon', '0\r\nNoColon\r\n\r\n'],
    ['a folded trailer', '0\r\nT: a\r\n folded\r\n\r\n'],
    ['a trailer with a bad name', '0\r\nBad Name: v\r\n\r\n'],
    ['a trailer with a control character', '0\r\nT: a\x00b\r\n\r\n'],
  ])('malformed: %s → 400', (_name, body) => {
    const events = sameForEverySplit(chunkedHead() + body + '0\r\n\r\n' + GET);
    expect(kinds(events)).toEqual(['head', 'fail 400']);
  });

  test('a chunk-size line over 4 KiB → 400, without waiting for its end', () => {
    const line = '1;' + 'e'.repeat(5000);
    expect(kinds(sameForEverySplit(chunkedHead() + line + '\r\na\r\n0\r\n\r\n'))).toEqual(['head', 'fail 400']);
    const run = feed(chunkedHead() + line, Array.from({ length: 200 }, () => 64));
    expect(kinds(run.events)).toEqual(['head', 'fail 400']);
    expect(run.fedBeforeFail).toBeLessThanOrEqual(chunkedHead().length + 4096);
  });

  test('trailers over 16 KiB → 431, without waiting for their end', () => {
    const trailers = 'T: 0123456789abcdef\r\n'.repeat(1000);
    expect(kinds(sameForEverySplit(chunkedHead() + '0\r\n' + trailers + '\r\n'))).toEqual(['head', 'fail 431']);
    const start = chunkedHead() + '0\r\n';
    const run = feed(start + trailers, Array.from({ length: 400 }, () => 100));
    expect(kinds(run.events)).toEqual(['head', 'fail 431']);
    expect(run.fedBeforeFail).toBeLessThanOrEqual(start.length + MAX_HEAD_BYTES);
  });
});

describe('bounds at their edge, whatever the split', () => {
  const check = (what: string, input: string, expected: string[]): void => {
    for (const [name, pieces] of [
      ['whole', [input.length]],
      ['byte by byte', Array.from({ length: input.length }, () => 1)],
      ['cut before the last byte', [input.length - 1]],
    ] as const) {
      const got = kinds(feed(input, pieces).events);
      if (!isDeepStrictEqual(got, expected)) throw new Error(`${what} fed ${name}: ${got.join(', ')}; expected ${expected.join(', ')}`);
    }
  };

  test('a chunk-size line of 4094..4097 bytes', () => {
    for (let size = 4094; size <= 4097; size++) {
      const line = '1;' + 'e'.repeat(size - 2);
      check(`a chunk-size line of ${size} bytes`, chunkedHead() + line + '\r\na\r\n0\r\n\r\n', size <= 4096 ? ['head', 'complete'] : ['head', 'fail 400']);
    }
  });

  test('trailers of MAX_HEAD_BYTES - 2 .. MAX_HEAD_BYTES + 1 bytes', () => {
    for (let size = MAX_HEAD_BYTES - 2; size <= MAX_HEAD_BYTES + 1; size++) {
      // One trailer line of `size` bytes with its CRLF, then the empty line.
      const trailer = 'T: ' + 't'.repeat(size - 5) + '\r\n';
      check(`trailers of ${size} bytes`, chunkedHead() + '1\r\na\r\n0\r\n' + trailer + '\r\n', size <= MAX_HEAD_BYTES ? ['head', 'complete'] : ['head', 'fail 431']);
    }
  });
});

describe('body limits', () => {
  const plan: BodyPlan = { keep: true, limit: 10 };

  test('a body of exactly the limit is read', () => {
    expect(bodiesOf(sameForEverySplit(post('0123456789'), plan))).toEqual(['0123456789']);
    expect(bodiesOf(sameForEverySplit(chunkedHead() + '4\r\n0123\r\n6\r\n456789\r\n0\r\n\r\n', plan))).toEqual(['0123456789']);
  });

  test('a declared length over the limit is 413 on the head alone, without reading the body', () => {
    const head = 'POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\n';
    const run = feed(head, [head.length], plan);
    expect(kinds(run.events)).toEqual(['head', 'fail 413']);
    expect(run.events[1]).toMatchObject({ reason: 'request body of 11 bytes exceeds the limit of 10' });
    expect(run.reader.failed).toBe(true);
    expect(kinds(sameForEverySplit(head + '01234567890' + GET, plan))).toEqual(['head', 'fail 413']);
  });

  test('a chunked body passing the limit is 413 at the chunk-size line that passes it, before its data', () => {
    const upToLine = chunkedHead() + '4\r\n0123\r\n7\r\n';
    const run = feed(upToLine, [upToLine.length], plan);
    expect(kinds(run.events)).toEqual(['head', 'fail 413']);
    expect(kinds(sameForEverySplit(upToLine + '4567890\r\n0\r\n\r\n', plan))).toEqual(['head', 'fail 413']);
  });

  test('a body over any limit is read and dropped when the plan drops it', () => {
    expect(kinds(sameForEverySplit(post('x'.repeat(5000)) + GET, DROP))).toEqual(['head', 'complete', 'head', 'complete']);
  });
});

describe('Expect', () => {
  test('100-continue with a body within the limit: bodyWanted after the head, before any body byte', () => {
    const head = 'POST /json HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n';
    const run = feed(head, [head.length]);
    expect(kinds(run.events)).toEqual(['head', 'bodyWanted']);
    expect(headOf(run.events).expectContinue).toBe(true);
    run.reader.push(Buffer.from('abc'));
    expect(kinds(run.events)).toEqual(['head', 'bodyWanted', 'complete']);
    expect(kinds(sameForEverySplit(head + 'abc'))).toEqual(['head', 'bodyWanted', 'complete']);
  });

  test('100-continue in any case, and on a chunked body', () => {
    expect(kinds(sameForEverySplit(post('abc', 'Expect: 100-Continue\r\n')))).toEqual(['head', 'bodyWanted', 'complete']);
    expect(kinds(sameForEverySplit(chunkedHead('Expect: 100-continue\r\n') + '3\r\nabc\r\n0\r\n\r\n'))).toEqual(['head', 'bodyWanted', 'complete']);
  });

  test('100-continue without a body to come: no bodyWanted', () => {
    for (const input of [post('', 'Expect: 100-continue\r\n'), 'GET / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\r\n']) {
      const events = sameForEverySplit(input);
      expect(kinds(events)).toEqual(['head', 'complete']);
      expect(headOf(events).expectContinue).toBe(false);
    }
  });

  test('100-continue with a declared length over the limit: 413, no bodyWanted', () => {
    expect(kinds(sameForEverySplit(post('x'.repeat(2000), 'Expect: 100-continue\r\n')))).toEqual(['head', 'fail 413']);
  });

  test('100-continue in HTTP/1.0: no bodyWanted (1.0 clients do not wait), the body is read', () => {
    const events = sameForEverySplit('POST /json HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nok');
    expect(kinds(events)).toEqual(['head', 'complete']);
    expect(bodiesOf(events)).toEqual(['ok']);
  });

  test.each([['foo'], ['200-ok'], ['100-continue, foo']])('Expect: %s → 417', (value) => {
    expect(kinds(sameForEverySplit(post('abc', `Expect: ${value}\r\n`)))).toEqual(['fail 417']);
    expect(kinds(sameForEverySplit(`GET / HTTP/1.0\r\nExpect: ${value}\r\n\r\n`))).toEqual(['fail 417']);
  });
});

describe('keep-alive', () => {
  test.each([
    ['HTTP/1.1', true, 'GET / HTTP/1.1\r\nHost: x\r\n\r\n'],
    ['HTTP/1.1, Connection: close', false, 'GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'],
    ['HTTP/1.1, Connection: Keep-Alive, CLOSE', false, 'GET / HTTP/1.1\r\nHost: x\r\nConnection: Keep-Alive, CLOSE\r\n\r\n'],
    ['HTTP/1.1, Connection: upgrade', true, 'GET / HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\n\r\n'],
    ['HTTP/1.1, Connection: keep-alive', true, 'GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n'],
    ['HTTP/1.0', false, 'GET / HTTP/1.0\r\n\r\n'],
    ['HTTP/1.0, Connection: keep-alive', true, 'GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n'],
    ['HTTP/1.0, Connection: Keep-Alive', true, 'GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n'],
    ['HTTP/1.0, Connection: keep-alive, close', false, 'GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n'],
  ])('%s → keepAlive %s', (_name, keepAlive, input) => {
    expect(headOf(sameForEverySplit(input)).keepAlive).toBe(keepAlive);
  });

  test('close wins over keep-alive in HTTP/1.0 whatever their order (as in Go: hasClose || !keep-alive)', () => {
    expect(headOf(sameForEverySplit('GET / HTTP/1.0\r\nConnection: close, keep-alive\r\n\r\n')).keepAlive).toBe(false);
    expect(headOf(sameForEverySplit('GET / HTTP/1.0\r\nConnection: close\r\nConnection: keep-alive\r\n\r\n')).keepAlive).toBe(false);
  });
});

describe('pipelining and stopping', () => {
  test('requests of every framing in one buffer come out in order', () => {
    const input = GET + post('one') + chunkedHead() + '3\r\ntwo\r\n0\r\n\r\n' + 'GET /last HTTP/1.0\r\n\r\n';
    const events = sameForEverySplit(input);
    expect(kinds(events)).toEqual(['head', 'complete', 'head', 'complete', 'head', 'complete', 'head', 'complete']);
    expect(bodiesOf(events)).toEqual(['', 'one', 'two', '']);
    expect(events.filter((e) => e.kind === 'complete').map((e) => (e as { target: string }).target)).toEqual(['/', '/json', '/json', '/last']);
  });

  test('each complete gives the head its head event gave', () => {
    const run = feed(GET + post('ab') + GET, [Infinity]);
    expect(run.completedHeads).toHaveLength(3);
    run.completedHeads.forEach((head, i) => expect(head).toBe(run.heads[i]));
  });

  test('after a failure nothing is read: not the rest of the buffer, not later pushes', () => {
    const run = feed(GET + 'BAD REQUEST\r\n\r\n' + GET, [Infinity]);
    expect(kinds(run.events)).toEqual(['head', 'complete', 'fail 400']);
    expect(run.reader.failed).toBe(true);
    expect(run.reader.midRequest).toBe(false);
    expect(run.reader.readingBody).toBe(false);
    run.reader.push(Buffer.from(GET));
    run.reader.push(Buffer.from('GET'));
    expect(kinds(run.events)).toEqual(['head', 'complete', 'fail 400']);
  });

  test('stop() inside complete stops the rest of the same buffer (Connection: close)', () => {
    const events: string[] = [];
    const reader: RequestReader = new RequestReader({
      head: () => KEEP,
      bodyWanted: () => events.push('bodyWanted'),
      complete: (head) => {
        events.push(`complete ${head.target}`);
        if (!head.keepAlive) reader.stop();
      },
      fail: (status) => events.push(`fail ${status}`),
    });
    reader.push(Buffer.from('GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nGET /c HTTP/1.1\r\nHost: x\r\n\r\n'));
    reader.push(Buffer.from(GET));
    expect(events).toEqual(['complete /a', 'complete /b']);
    expect(reader.failed).toBe(true);
  });

  test('a head plan of undefined stops the reader without a fail', () => {
    const events = whole(post('abc') + GET, () => undefined);
    expect(kinds(events)).toEqual(['head']);
  });

  test('midRequest and readingBody follow a request', () => {
    const run = feed('', []);
    const { reader } = run;
    expect([reader.midRequest, reader.readingBody]).toEqual([false, false]);
    reader.push(Buffer.from('POST /json HTTP/1.1\r\n'));
    expect([reader.midRequest, reader.readingBody]).toEqual([true, false]);
    reader.push(Buffer.from('Host: x\r\nContent-Length: 2\r\n\r\n'));
    expect([reader.midRequest, reader.readingBody]).toEqual([true, true]);
    reader.push(Buffer.from('ok'));
    expect([reader.midRequest, reader.readingBody]).toEqual([false, false]);
    expect(kinds(run.events)).toEqual(['head', 'complete']);
  });
});

// ---------------------------------------------------------------------------------------------
// Holding back, copies and the request budget

/** Events recorded as `feed` records them; `onComplete` runs after each complete is recorded. */
function recording(events: Event[], plan: BodyPlan, onComplete: () => void = () => {}): ConstructorParameters<typeof RequestReader>[0] {
  return {
    head(head) {
      events.push(headEvent(head));
      return plan;
    },
    bodyWanted: (head) => events.push({ kind: 'bodyWanted', target: head.target }),
    complete(head, body) {
      events.push({ kind: 'complete', target: head.target, body: body.toString('latin1') });
      onComplete();
    },
    fail: (status, reason) => events.push({ kind: 'fail', status, reason }),
  };
}

/** Requests of every framing, the last two with bodies that span pieces in most splits. */
const PIPELINE = [GET, post('one'), chunkedHead() + '3\r\ntwo\r\n5\r\nthree\r\n0\r\n\r\n', post('x'.repeat(300)), 'GET /last HTTP/1.0\r\n\r\n'];
const PIPELINED = PIPELINE.join('');

/**
 * Feeds PIPELINED in `pieces`, overwriting each pushed buffer once its push returns (as if the
 * socket's memory were reused); with `hold`, the reader is held at every complete and released
 * once after each push, then until it reads no more.
 */
function feedOverwritten(pieces: readonly number[], budget: ByteBudget, hold: boolean): { events: Event[]; reader: RequestReader } {
  const events: Event[] = [];
  const reader: RequestReader = new RequestReader(
    recording(events, KEEP, () => {
      if (hold) reader.hold();
    }),
    budget,
  );
  const bytes = Buffer.from(PIPELINED, 'latin1');
  let at = 0;
  const push = (to: number): void => {
    const piece = Buffer.from(bytes.subarray(at, to));
    reader.push(piece);
    piece.fill(0);
    at = to;
    reader.release();
  };
  for (const n of pieces) {
    if (at >= bytes.length) break;
    push(Math.min(bytes.length, at + n));
  }
  if (at < bytes.length) push(bytes.length);
  while (reader.held) reader.release();
  return { events, reader };
}

describe('holding back, copies and the request budget', () => {
  test('hold() inside complete stops the reader mid-buffer; each release() reads one more request; the events are those of an uninterrupted read', () => {
    const budget = new ByteBudget(1 << 20);
    const events: Event[] = [];
    const reader: RequestReader = new RequestReader(
      recording(events, KEEP, () => reader.hold()),
      budget,
    );
    const reference = whole(PIPELINED);
    const completes = (): number => events.filter((e) => e.kind === 'complete').length;
    const after = (n: number): number => PIPELINE.slice(n).join('').length;
    reader.push(Buffer.from(PIPELINED, 'latin1'));
    expect(completes()).toBe(1);
    expect(reader.held).toBe(true);
    expect(reader.midRequest).toBe(true);
    // What is held back is a copy, charged.
    expect(budget.held).toBe(after(1));
    // A push while held reads nothing.
    reader.push(Buffer.alloc(0));
    expect(completes()).toBe(1);
    for (let n = 2; n <= PIPELINE.length; n++) {
      reader.release();
      expect(completes()).toBe(n);
      expect(budget.held).toBe(after(n));
    }
    expect(events).toEqual(reference);
    reader.release();
    expect(reader.held).toBe(false);
    expect(reader.midRequest).toBe(false);
    expect(budget.held).toBe(0);
  });

  test('held at every request and released once per push, in every split, with bytes arriving while held: the events of an uninterrupted read, nothing left charged', () => {
    const reference = whole(PIPELINED);
    for (const { name, pieces } of splitsOf(PIPELINED.length, 0x401d)) {
      const budget = new ByteBudget(1 << 20);
      const { events, reader } = feedOverwritten(pieces, budget, true);
      if (!isDeepStrictEqual(events, reference)) throw new Error(`held, fed ${name}: ${JSON.stringify(events)}`);
      expect([name, reader.midRequest, budget.held]).toEqual([name, false, 0]);
    }
  });

  test('bytes carried between pushes (unfinished heads, chunk lines, bodies) are copies: overwriting each pushed buffer after its push changes nothing', () => {
    const reference = whole(PIPELINED);
    for (const { name, pieces } of splitsOf(PIPELINED.length, 0xc0b1)) {
      const budget = new ByteBudget(1 << 20);
      const { events } = feedOverwritten(pieces, budget, false);
      if (!isDeepStrictEqual(events, reference)) throw new Error(`overwritten, fed ${name}: ${JSON.stringify(events)}`);
      expect([name, budget.held]).toEqual([name, 0]);
    }
  });

  test('an unfinished head is charged exactly as it arrives, and given back when it completes', () => {
    const budget = new ByteBudget(1 << 20);
    const events: Event[] = [];
    const reader = new RequestReader(recording(events, KEEP), budget);
    reader.push(Buffer.from('GET / HTTP/1.1\r\n'));
    expect(budget.held).toBe(16);
    reader.push(Buffer.from('Host: x\r\n'));
    expect(budget.held).toBe(25);
    reader.push(Buffer.from('\r\n'));
    expect(kinds(events)).toEqual(['head', 'complete']);
    expect(budget.held).toBe(0);
  });

  test('a body arriving in pieces is held in storage of about its size, charged, and given back when complete', () => {
    const budget = new ByteBudget(1 << 20);
    const events: Event[] = [];
    const reader = new RequestReader(recording(events, { keep: true, limit: 4096 }), budget);
    const body = Buffer.alloc(3000, 'b');
    reader.push(Buffer.from(`POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: ${body.length}\r\n\r\n`));
    expect(budget.held).toBe(0);
    for (let at = 0; at < body.length - 500; at += 500) {
      reader.push(Buffer.from(body.subarray(at, at + 500)));
      const received = at + 500;
      expect(budget.held).toBeGreaterThanOrEqual(received);
      expect(budget.held).toBeLessThanOrEqual(Math.max(512, 2 * received));
    }
    reader.push(Buffer.from(body.subarray(body.length - 500)));
    expect(bodiesOf(events)).toEqual([body.toString('latin1')]);
    expect(budget.held).toBe(0);
  });

  test.each<[string, number, string[]]>([
    ['an unfinished head', 100, ['GET / HTTP/1.1\r\n', `X-Pad: ${'p'.repeat(120)}`]],
    ['a body', 2048, ['POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 3000\r\n\r\n', ...Array.from({ length: 6 }, () => 'b'.repeat(500))]],
    ['a chunk-size line', 100, [chunkedHead(), `1;ext=${'e'.repeat(120)}`]],
    ['requests held back', 50, [GET + GET + GET]],
  ])('%s the budget cannot hold: 503, nothing more is read, and the budget is given back', (_name, limit, pieces) => {
    const budget = new ByteBudget(limit);
    const events: Event[] = [];
    const reader: RequestReader = new RequestReader(
      recording(events, { keep: true, limit: 4096 }, () => reader.hold()),
      budget,
    );
    for (const piece of pieces) reader.push(Buffer.from(piece, 'latin1'));
    expect(statusOf(events)).toBe(503);
    expect((events[events.length - 1] as { reason: string }).reason).toContain('REQUEST_MAX_BUFFERED_BYTES');
    expect(reader.failed).toBe(true);
    expect(budget.held).toBe(0);
  });

  test('stop() gives back what an unfinished head or body holds', () => {
    for (const pieces of [['GET / HTTP/1.1\r\nHost'], ['POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 700\r\n\r\n', 'x'.repeat(600)]]) {
      const budget = new ByteBudget(1 << 20);
      const reader = new RequestReader(recording([], KEEP), budget);
      for (const piece of pieces) reader.push(Buffer.from(piece, 'latin1'));
      expect(budget.held).toBeGreaterThan(0);
      reader.stop();
      expect(budget.held).toBe(0);
    }
  });
});

// ---------------------------------------------------------------------------------------------
// Fuzz


const VALID_REQUESTS = [
  GET,
  'GET /healthcheck?x=1 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n',
  post('{"domain":"d"}'),
  post('abc', 'Expect: 100-continue\r\n'),
  chunkedHead() + '5;e=1\r\nhello\r\n1\r\n!\r\n0\r\nT: v\r\n\r\n',
  chunkedHead('Expect: 100-continue\r\n') + 'a\r\n0123456789\r\n0\r\n\r\n',
  'GET / HTTP/1.0\r\n\r\n',
  'POST /json HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 4\r\n\r\nbody',
  'HEAD http://h/p HTTP/1.1\r\nHost: h\r\n\r\n',
  '\r\nPUT /x HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n',
  post('x'.repeat(300)),
].map((s) => Buffer.from(s, 'latin1'));

/** Pieces of HTTP that random input is made of, beside random bytes. */
const FRAGMENTS = [
  '\r\n',
  '\r\n\r\n',
  '\r',
  '\n',
  ' ',
  '\t',
  ':',
  ';',
  'GET',
  'POST',
  ' / ',
  'HTTP/1.1',
  'HTTP/1.0',
  'Host: x',
  'Content-Length: ',
  'Transfer-Encoding: chunked',
  'Expect: 100-continue',
  'Connection: close',
  '0',
  '5',
  'ff',
  'ffffffff',
  '99999',
].map((s) => Buffer.from(s, 'latin1'));

function randomInput(rng: Rng): Buffer {
  const parts: Buffer[] = [];
  const n = int(rng, 40);
  for (let i = 0; i < n; i++) {
    if (rng() < 0.5) parts.push(pick(rng, FRAGMENTS));
    else parts.push(Buffer.from(Array.from({ length: 1 + int(rng, 6) }, () => int(rng, 256))));
  }
  return Buffer.concat(parts);
}

/** One to three mutations: bit flips, truncation, inserted, deleted, duplicated or replaced bytes. */
function mutate(rng: Rng, input: Buffer): Buffer {
  let buf = Buffer.from(input);
  const rounds = 1 + int(rng, 3);
  for (let r = 0; r < rounds; r++) {
    const at = int(rng, buf.length + 1);
    switch (int(rng, 6)) {
      case 0:
        if (buf.length > 0) buf[at % buf.length]! ^= 1 << int(rng, 8);
        break;
      case 1:
        buf = buf.subarray(0, at);
        break;
      case 2:
        buf = Buffer.concat([buf.subarray(0, at), rng() < 0.5 ? pick(rng, FRAGMENTS) : Buffer.from([int(rng, 256)]), buf.subarray(at)]);
        break;
      case 3:
        buf = Buffer.concat([buf.subarray(0, at), buf.subarray(at + 1 + int(rng, 4))]);
        break;
      case 4: {
        const from = int(rng, buf.length + 1);
        buf = Buffer.concat([buf.subarray(0, at), buf.subarray(from, from + 1 + int(rng, 16)), buf.subarray(at)]);
        break;
      }
      default:
        if (buf.length > 0) buf[at % buf.length] = pick(rng, [0, 9, 10, 13, 32, 0x3a, 0x3b, 0x7f, 0x80, 0xff]);
        break;
    }
  }
  return buf;
}

function mutatedRequests(rng: Rng): Buffer {
  const requests = Array.from({ length: 1 + int(rng, 3) }, () => pick(rng, VALID_REQUESTS));
  return mutate(rng, Buffer.concat(requests));
}

const STATUSES = new Set([400, 413, 417, 431, 501, 505]);

/** Throws unless `events` are a well-formed sequence for `plan`. */
function checkWellFormed(events: readonly Event[], plan: BodyPlan): void {
  let open: Extract<Event, { kind: 'head' }> | undefined;
  let wanted = false;
  let failed = false;
  for (const [i, e] of events.entries()) {
    const where = `event ${i} (${e.kind})`;
    if (failed) throw new Error(`${where} after fail`);
    switch (e.kind) {
      case 'head':
        if (open !== undefined) throw new Error(`${where}: a head while the previous request is open`);
        open = e;
        wanted = false;
        break;
      case 'bodyWanted':
        if (open === undefined || wanted) throw new Error(`${where}: not right after a head`);
        if (!open.expectContinue || open.contentLength === 0) throw new Error(`${where}: no body expected to come`);
        if (plan.keep && open.contentLength > plan.limit) throw new Error(`${where}: for a body over the limit`);
        wanted = true;
        break;
      case 'complete': {
        if (open === undefined) throw new Error(`${where}: without a head`);
        if (e.target !== open.target) throw new Error(`${where}: for another head`);
        if (open.expectContinue && !wanted && !(plan.keep && open.contentLength > plan.limit)) throw new Error(`${where}: no bodyWanted for an expecting client`);
        const size = Buffer.byteLength(e.body, 'latin1');
        if (!plan.keep && size !== 0) throw new Error(`${where}: a dropped body of ${size} bytes`);
        if (plan.keep && size > plan.limit) throw new Error(`${where}: a body of ${size} bytes over the limit of ${plan.limit}`);
        if (plan.keep && open.contentLength >= 0 && size !== open.contentLength) throw new Error(`${where}: a body of ${size} bytes for a length of ${open.contentLength}`);
        open = undefined;
        break;
      }
      case 'fail':
        if (!STATUSES.has(e.status)) throw new Error(`${where}: status ${e.status}`);
        if (e.status === 413 && (open === undefined || !plan.keep)) throw new Error(`${where}: 413 without a kept body`);
        failed = true;
        break;
    }
  }
}

/** An input that never ends what it begins, and where the reader must refuse it by. */
function endlessInput(rng: Rng): { input: Buffer; bound: number; status: number } {
  const TOKEN_CHARS = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  const name = (): string => Array.from({ length: 1 + int(rng, 20) }, () => pick(rng, [...TOKEN_CHARS])).join('');
  const lineChars = (): string => Array.from({ length: 1 + int(rng, 60) }, () => String.fromCharCode(0x21 + int(rng, 94))).join('');
  switch (int(rng, 3)) {
    case 0: {
      const start = pick(rng, ['', 'GET / HTTP/1.1\r\n', '\r\n\r\nPOST /json HTTP/1.1\r\nHost: x\r\n']);
      const leading = start.startsWith('\r\n\r\n') ? 4 : 0;
      let text = start;
      while (text.length < 3 * MAX_HEAD_BYTES) text += `X-${name()}: ${lineChars()}\r\n`;
      return { input: Buffer.from(text, 'latin1'), bound: leading + MAX_HEAD_BYTES, status: 431 };
    }
    case 1: {
      const start = chunkedHead() + pick(rng, ['', '3\r\nabc\r\n']) + '1;';
      let text = start;
      while (text.length < start.length + 3 * 4096) text += `${lineChars()};`;
      return { input: Buffer.from(text, 'latin1'), bound: start.length - 2 + 4096, status: 400 };
    }
    default: {
      const start = chunkedHead() + '0\r\n';
      let text = start;
      while (text.length < start.length + 3 * MAX_HEAD_BYTES) text += `T-${name()}: ${lineChars()}\r\n`;
      return { input: Buffer.from(text, 'latin1'), bound: start.length + MAX_HEAD_BYTES, status: 431 };
    }
  }
}

const FUZZ_SEED = 0x5eed1111;
const FUZZ_CASES = 20_000;
const ENDLESS_CASES = 300;

describe('fuzz', () => {
  test(`${FUZZ_CASES} random and mutated inputs (seed ${FUZZ_SEED.toString(16)}), whole and split at random: no throw, well-formed events, the same whatever the split`, () => {
    const rng = prng(FUZZ_SEED);
    const problems: string[] = [];
    for (let i = 0; i < FUZZ_CASES && problems.length < 5; i++) {
      const input = rng() < 0.4 ? randomInput(rng) : mutatedRequests(rng);
      const plan: BodyPlan = rng() < 0.2 ? DROP : { keep: true, limit: pick(rng, [0, 3, 10, 64, 1024]) };
      const pieces = rng() < 0.1 ? Array.from({ length: input.length }, () => 1) : randomPieces(rng, input.length);
      try {
        const all = feed(input, [Infinity], plan);
        const split = feed(input, pieces, plan);
        checkWellFormed(all.events, plan);
        checkWellFormed(split.events, plan);
        if (!isDeepStrictEqual(comparable(all.events), comparable(split.events))) {
          throw new Error(`whole: ${JSON.stringify(all.events)}\nsplit ${JSON.stringify(pieces)}: ${JSON.stringify(split.events)}`);
        }
        // Nothing more once failed.
        if (split.reader.failed) {
          const before = split.events.length;
          split.reader.push(Buffer.from(GET));
          if (split.events.length !== before) throw new Error('events after a failure');
        }
      } catch (err) {
        problems.push(`case ${i} (plan ${JSON.stringify(plan)}), input ${JSON.stringify(input.toString('latin1'))}: ${(err as Error).stack}`);
      }
    }
    expect(problems).toEqual([]);
  });

  test(`${ENDLESS_CASES} heads, chunk-size lines and trailers that never end, in random pieces: refused before the reader holds more than its bound plus one piece`, () => {
    const rng = prng(FUZZ_SEED + 1);
    const problems: string[] = [];
    for (let i = 0; i < ENDLESS_CASES && problems.length < 5; i++) {
      const { input, bound, status } = endlessInput(rng);
      const pieces: number[] = [];
      for (let left = input.length; left > 0; ) {
        const n = Math.min(left, 1 + int(rng, pick(rng, [1, 16, 512, 4096])));
        pieces.push(n);
        left -= n;
      }
      try {
        const run = feed(input, pieces);
        checkWellFormed(run.events, KEEP);
        if (statusOf(run.events) !== status) throw new Error(`expected a fail ${status}, got ${JSON.stringify(kinds(run.events))}`);
        if (run.fedBeforeFail > bound) throw new Error(`still waiting after ${run.fedBeforeFail} bytes (bound ${bound})`);
      } catch (err) {
        problems.push(`case ${i}, input starting ${JSON.stringify(input.subarray(0, 120).toString('latin1'))}: ${(err as Error).message}`);
      }
    }
    expect(problems).toEqual([]);
  });
});
