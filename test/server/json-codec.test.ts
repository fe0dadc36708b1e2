import {
  JsonRequestError,
  parseRateLimitRequest,
  parseRateLimitRequestBytes,
  serializeRateLimitResponse,
} from '../../src/server/json-codec';
import type { Descriptor, RateLimitRequest, RateLimitResponse } from '../../src/core/rls';
import { prng } from '../support/prng';

/** Parses and returns the thrown JsonRequestError (fails the test when there is none). */
function reject(body: string): JsonRequestError {
  try {
    parseRateLimitRequest(body);
  } catch (err) {
    expect(err).toBeInstanceOf(JsonRequestError);
    const e = err as JsonRequestError;
    expect(e.message).not.toMatch(/\n/);
    return e;
  }
  throw new Error(`expected ${JSON.stringify(body.slice(0, 200))} to be rejected`);
}

function expectReject(body: string, message: string | RegExp): JsonRequestError {
  const e = reject(body);
  if (typeof message === 'string') expect(e.message).toBe(message);
  else expect(e.message).toMatch(message);
  return e;
}

function desc(over: Partial<Descriptor>): Descriptor {
  return { entries: [], limit: undefined, hitsAddend: undefined, ...over };
}

function req(over: Partial<RateLimitRequest>): RateLimitRequest {
  return { domain: '', descriptors: [], hitsAddend: 0, ...over };
}

/** Wraps a descriptor-level JSON fragment in a request. */
const inDesc = (fields: string): string => `{"domain":"d","descriptors":[{${fields}}]}`;
/** Wraps a limit-override JSON fragment in a request. */
const inLimit = (fields: string): string => inDesc(`"entries":[{"key":"k"}],"limit":{${fields}}`);
/** Wraps an entry JSON fragment in a request. */
const inEntry = (fields: string): string => inDesc(`"entries":[{"key":"a","value":"b"},{${fields}}]`);

describe('parseRateLimitRequest: valid requests', () => {
  test('a full request with lowerCamelCase names', () => {
    const body = JSON.stringify({
      domain: 'edge',
      descriptors: [
        { entries: [{ key: 'remote_address', value: '10.0.0.1' }, { key: 'path', value: '/a' }] },
        { entries: [{ key: 'k', value: 'v' }], limit: { requestsPerUnit: 7, unit: 'MINUTE' }, hitsAddend: 3 },
      ],
      hitsAddend: 2,
    });
    expect(parseRateLimitRequest(body)).toEqual({
      domain: 'edge',
      descriptors: [
        desc({ entries: [{ key: 'remote_address', value: '10.0.0.1' }, { key: 'path', value: '/a' }] }),
        desc({ entries: [{ key: 'k', value: 'v' }], limit: { requestsPerUnit: 7, unit: 2 }, hitsAddend: 3 }),
      ],
      hitsAddend: 2,
    });
  });

  test('the same request with proto names', () => {
    const body =
      '{"domain":"edge","descriptors":[{"entries":[{"key":"k","value":"v"}],' +
      '"limit":{"requests_per_unit":7,"unit":"HOUR"},"hits_addend":"4"}],"hits_addend":"5"}';
    expect(parseRateLimitRequest(body)).toEqual(
      req({
        domain: 'edge',
        descriptors: [desc({ entries: [{ key: 'k', value: 'v' }], limit: { requestsPerUnit: 7, unit: 3 }, hitsAddend: 4 })],
        hitsAddend: 5,
      }),
    );
  });

  test('defaults: empty object, missing fields, empty lists and messages', () => {
    expect(parseRateLimitRequest('{}')).toEqual(req({}));
    const r = parseRateLimitRequest('{"descriptors":[{},{"entries":[{}]},{"limit":{}}]}');
    expect(r).toEqual(
      req({
        descriptors: [
          desc({}),
          desc({ entries: [{ key: '', value: '' }] }),
          desc({ limit: { requestsPerUnit: 0, unit: 0 } }),
        ],
      }),
    );
    // Absent optional fields are undefined, but the keys are there (a stable object shape).
    expect(r.descriptors[0]).toHaveProperty('limit', undefined);
    expect(r.descriptors[0]).toHaveProperty('hitsAddend', undefined);
  });

  test('whitespace (space, tab, CR, LF) anywhere between tokens', () => {
    const body = ' \t\r\n{ "domain" :\n"d" ,\t"descriptors" : [ { "entries" : [ { "key" : "k" , "value" : "v" } ] } ] }\r\n ';
    expect(parseRateLimitRequest(body)).toEqual(
      req({ domain: 'd', descriptors: [desc({ entries: [{ key: 'k', value: 'v' }] })] }),
    );
  });

  test('field names may be written with escapes', () => {
    expect(parseRateLimitRequest('{"dom\\u0061in":"x","hits\\u005faddend":1}')).toEqual(req({ domain: 'x', hitsAddend: 1 }));
  });

  test('fields in any order', () => {
    const body = '{"hitsAddend":1,"descriptors":[{"hitsAddend":0,"limit":{"unit":1,"requestsPerUnit":2},"entries":[{"value":"v","key":"k"}]}],"domain":"d"}';
    expect(parseRateLimitRequest(body)).toEqual(
      req({
        domain: 'd',
        hitsAddend: 1,
        descriptors: [desc({ entries: [{ key: 'k', value: 'v' }], limit: { requestsPerUnit: 2, unit: 1 }, hitsAddend: 0 })],
      }),
    );
  });
});

describe('parseRateLimitRequest: null means not set', () => {
  test.each([
    ['{"domain":null}', req({})],
    ['{"descriptors":null}', req({})],
    ['{"hitsAddend":null}', req({})],
    ['{"hits_addend":null}', req({})],
    ['{"descriptors":[{"entries":null,"limit":null,"hitsAddend":null}]}', req({ descriptors: [desc({})] })],
    ['{"descriptors":[{"hits_addend":null}]}', req({ descriptors: [desc({})] })],
    ['{"descriptors":[{"entries":[{"key":null,"value":null}]}]}', req({ descriptors: [desc({ entries: [{ key: '', value: '' }] })] })],
    [
      '{"descriptors":[{"limit":{"requestsPerUnit":null,"requests_per_unit":null}}]}',
      null, // duplicate even when both are null
    ],
    ['{"descriptors":[{"limit":{"requestsPerUnit":null,"unit":null}}]}', req({ descriptors: [desc({ limit: { requestsPerUnit: 0, unit: 0 } })] })],
  ])('%s', (body, expected) => {
    if (expected === null) expectReject(body, /duplicate field/);
    else expect(parseRateLimitRequest(body)).toEqual(expected);
  });

  test('null inside a list is an error', () => {
    expectReject('{"descriptors":[null]}', 'descriptors[0]: expected a descriptor as a JSON object, got null');
    expectReject('{"descriptors":[{"entries":[{"key":"k"},null]}]}', 'descriptors[0].entries[1]: expected an entry as a JSON object, got null');
  });

  test('a null-like literal that is not null', () => {
    expectReject('{"domain":nul}', /invalid literal/);
    expectReject('{"domain":nullx}', /invalid literal/);
    expectReject('{"domain":NULL}', /unexpected character "N"/);
  });
});

describe('parseRateLimitRequest: unknown fields', () => {
  test.each([
    ['{"domain":"d","extra":1}', 'unknown field "extra"'],
    ['{"Domain":"d"}', 'unknown field "Domain"'],
    ['{"hitsaddend":1}', 'unknown field "hitsaddend"'],
    ['{"HitsAddend":1}', 'unknown field "HitsAddend"'],
    ['{"descriptors":[{"entries":[],"foo":{}}]}', 'descriptors[0]: unknown field "foo"'],
    ['{"descriptors":[{"entries":[{"key":"k","val":"v"}]}]}', 'descriptors[0].entries[0]: unknown field "val"'],
    ['{"descriptors":[{"limit":{"requestsPerUnit":1,"units":"SECOND"}}]}', 'descriptors[0].limit: unknown field "units"'],
    ['{"descriptors":[{"limit":{"requestsperunit":1}}]}', 'descriptors[0].limit: unknown field "requestsperunit"'],
    ['{"[envoy.ext]":1}', 'unknown field "[envoy.ext]"'],
    ['{"@type":"x"}', 'unknown field "@type"'],
    ['{"":1}', 'unknown field ""'],
  ])('%s', (body, message) => {
    expectReject(body, message);
  });

  test('an unknown field is refused before its value is looked at', () => {
    const deep = '['.repeat(200000);
    expectReject(`{"x":${deep}`, 'unknown field "x"');
  });

  test('a very long unknown name is shortened in the message', () => {
    const e = reject(`{"${'a'.repeat(5000)}":1}`);
    expect(e.message.length).toBeLessThan(120);
  });
});

describe('parseRateLimitRequest: duplicate fields', () => {
  test.each([
    ['{"domain":"a","domain":"b"}', 'duplicate field "domain"'],
    ['{"domain":null,"domain":"b"}', 'duplicate field "domain"'],
    ['{"domain":"a","domain":null}', 'duplicate field "domain"'],
    ['{"hitsAddend":1,"hits_addend":2}', 'duplicate field "hits_addend"'],
    ['{"hits_addend":1,"hitsAddend":1}', 'duplicate field "hitsAddend"'],
    ['{"hitsAddend":1,"hitsAddend":1}', 'duplicate field "hitsAddend"'],
    ['{"descriptors":[],"descriptors":[]}', 'duplicate field "descriptors"'],
    ['{"descriptors":[{"entries":[],"entries":[]}]}', 'descriptors[0]: duplicate field "entries"'],
    ['{"descriptors":[{"hitsAddend":0,"hits_addend":null}]}', 'descriptors[0]: duplicate field "hits_addend"'],
    ['{"descriptors":[{"limit":{},"limit":null}]}', 'descriptors[0]: duplicate field "limit"'],
    ['{"descriptors":[{"entries":[{"key":"a","key":"b"}]}]}', 'descriptors[0].entries[0]: duplicate field "key"'],
    ['{"descriptors":[{"entries":[{"value":"a","value":"a"}]}]}', 'descriptors[0].entries[0]: duplicate field "value"'],
    ['{"descriptors":[{"limit":{"requests_per_unit":1,"requestsPerUnit":1}}]}', 'descriptors[0].limit: duplicate field "requestsPerUnit"'],
    ['{"descriptors":[{"limit":{"unit":1,"unit":"SECOND"}}]}', 'descriptors[0].limit: duplicate field "unit"'],
    ['{"dom\\u0061in":"a","domain":"b"}', 'duplicate field "domain"'],
  ])('%s', (body, message) => {
    expect(reject(body).message).toMatch(new RegExp(`^${message.replace(/[[\]]/g, '\\$&')} `));
  });

  test('JSON.parse would silently keep the last one; we do not', () => {
    const body = '{"domain":"a","domain":"b"}';
    expect(JSON.parse(body)).toEqual({ domain: 'b' });
    reject(body);
  });

  test('the same field in different messages is not a duplicate', () => {
    const r = parseRateLimitRequest('{"hitsAddend":1,"descriptors":[{"hitsAddend":2},{"hits_addend":3}]}');
    expect(r.hitsAddend).toBe(1);
    expect(r.descriptors.map((d) => d.hitsAddend)).toEqual([2, 3]);
  });
});

describe('parseRateLimitRequest: wrong types at every level', () => {
  test.each([
    // top level
    ['[]', 'expected the request as a JSON object, got an array'],
    ['"x"', 'expected the request as a JSON object, got a string'],
    ['42', 'expected the request as a JSON object, got a number'],
    ['-1.5e3', 'expected the request as a JSON object, got a number'],
    ['null', 'expected the request as a JSON object, got null'],
    ['true', 'expected the request as a JSON object, got true'],
    ['false', 'expected the request as a JSON object, got false'],
    // request fields
    ['{"domain":1}', 'domain: expected a string, got a number'],
    ['{"domain":true}', 'domain: expected a string, got true'],
    ['{"domain":{}}', 'domain: expected a string, got an object'],
    ['{"domain":["a"]}', 'domain: expected a string, got an array'],
    ['{"descriptors":{}}', 'descriptors: expected a JSON array, got an object'],
    ['{"descriptors":"x"}', 'descriptors: expected a JSON array, got a string'],
    ['{"descriptors":1}', 'descriptors: expected a JSON array, got a number'],
    ['{"hitsAddend":true}', 'hitsAddend: expected a uint32 (a number or a numeric string), got true'],
    ['{"hits_addend":[1]}', 'hits_addend: expected a uint32 (a number or a numeric string), got an array'],
    ['{"hitsAddend":{"value":1}}', 'hitsAddend: expected a uint32 (a number or a numeric string), got an object'],
    // descriptor
    ['{"descriptors":[1]}', 'descriptors[0]: expected a descriptor as a JSON object, got a number'],
    ['{"descriptors":[{},[]]}', 'descriptors[1]: expected a descriptor as a JSON object, got an array'],
    ['{"descriptors":[{"entries":{}}]}', 'descriptors[0].entries: expected a JSON array, got an object'],
    ['{"descriptors":[{"entries":"k=v"}]}', 'descriptors[0].entries: expected a JSON array, got a string'],
    ['{"descriptors":[{"limit":[]}]}', 'descriptors[0].limit: expected a limit override as a JSON object, got an array'],
    ['{"descriptors":[{"limit":5}]}', 'descriptors[0].limit: expected a limit override as a JSON object, got a number'],
    ['{"descriptors":[{"hitsAddend":false}]}', 'descriptors[0].hitsAddend: expected a uint64 (a number or a numeric string), got false'],
    ['{"descriptors":[{"hitsAddend":{"value":1}}]}', 'descriptors[0].hitsAddend: expected a uint64 (a number or a numeric string), got an object'],
    // entry
    [inEntry('"key":1'), 'descriptors[0].entries[1].key: expected a string, got a number'],
    [inEntry('"key":"k","value":false'), 'descriptors[0].entries[1].value: expected a string, got false'],
    [inEntry('"key":["k"]'), 'descriptors[0].entries[1].key: expected a string, got an array'],
    ['{"descriptors":[{"entries":["k"]}]}', 'descriptors[0].entries[0]: expected an entry as a JSON object, got a string'],
    // limit override
    [inLimit('"requestsPerUnit":true'), 'descriptors[0].limit.requestsPerUnit: expected a uint32 (a number or a numeric string), got true'],
    [inLimit('"requests_per_unit":{}'), 'descriptors[0].limit.requests_per_unit: expected a uint32 (a number or a numeric string), got an object'],
    [inLimit('"unit":true'), 'descriptors[0].limit.unit: expected an enum value name or an integer, got true'],
    [inLimit('"unit":["SECOND"]'), 'descriptors[0].limit.unit: expected an enum value name or an integer, got an array'],
  ])('%s', (body, message) => {
    expectReject(body, message);
  });
});

describe('parseRateLimitRequest: uint32 fields', () => {
  const top = (v: string): number => parseRateLimitRequest(`{"hitsAddend":${v}}`).hitsAddend;
  const rpu = (v: string): number => parseRateLimitRequest(inLimit(`"requestsPerUnit":${v}`)).descriptors[0]!.limit!.requestsPerUnit;

  test.each([
    ['0', 0],
    ['1', 1],
    ['4294967295', 4294967295],
    ['1.0', 1],
    ['1e2', 100],
    ['1E2', 100],
    ['1e+2', 100],
    ['1.5e1', 15],
    ['100e-2', 1],
    ['0.0', 0],
    ['-0', 0],
    ['-0.0e7', 0],
    ['0e99999999999', 0],
    ['4.294967295e9', 4294967295],
    ['123456789', 123456789],
    ['1234567890', 1234567890],
    ['"7"', 7],
    ['"1e2"', 100],
    ['"1.0"', 1],
    ['"4294967295"', 4294967295],
    ['"\\u0035"', 5],
    ['"-0"', 0],
  ])('accepts %s', (v, n) => {
    expect(top(v)).toBe(n);
    expect(rpu(v)).toBe(n);
  });

  test.each([
    ['1.5', /got 1\.5 which is not an integer/],
    ['0.5', /not an integer/],
    ['1e-1', /not an integer/],
    ['15e-1', /not an integer/],
    ['-1', /got -1 which is negative/],
    ['-1e0', /negative/],
    ['4294967296', /got 4294967296 which is out of range \(max 4294967295\)/],
    ['4.294967296e9', /out of range/],
    ['1e10', /out of range/],
    ['99999999999999999999999', /out of range/],
    ['1e99999999999', /out of range/],
    ['1e-99999999999', /not an integer/],
    ['0.0001e21', /out of range/], // protojson: more than 20 digits after shifting
    ['"1.5"', /not an integer/],
    ['"-1"', /negative/],
    ['"4294967296"', /out of range/],
    ['" 1"', /the string " 1" which is not a number/],
    ['"1 "', /not a number/],
    ['"+1"', /not a number/],
    ['"0x10"', /not a number/],
    ['"01"', /not a number/],
    ['"1e"', /not a number/],
    ['"1,2"', /not a number/],
    ['""', /not a number/],
    ['"Infinity"', /not a number/],
    ['"NaN"', /not a number/],
    ['"one"', /not a number/],
  ])('rejects %s', (v, message) => {
    expectReject(`{"hitsAddend":${v}}`, message);
    const e = reject(inLimit(`"requestsPerUnit":${v}`));
    expect(e.message).toMatch(message);
    expect(e.path).toBe('descriptors[0].limit.requestsPerUnit');
  });

  test.each(['01', '00', '+1', '.5', '1.', '1e', '1e+', '--1', '-', '0x10', '1_0', 'NaN', 'Infinity', '-Infinity', '1.2.3', '1ee2', '1.e5'])(
    'invalid number literal %s is a syntax error',
    (v) => {
      expect(reject(`{"hitsAddend":${v}}`).message).toMatch(/^hitsAddend: invalid JSON at line 1, column \d+: (invalid number|unexpected character|invalid literal)/);
    },
  );
});

describe('parseRateLimitRequest: UInt64Value hitsAddend on a descriptor', () => {
  const hits = (v: string): number | undefined => parseRateLimitRequest(inDesc(`"hitsAddend":${v}`)).descriptors[0]!.hitsAddend;

  test('presence is kept, 0 included; null is absent', () => {
    expect(hits('0')).toBe(0);
    expect(hits('"0"')).toBe(0);
    expect(hits('0.0')).toBe(0);
    expect(hits('null')).toBeUndefined();
    expect(parseRateLimitRequest(inDesc('"entries":[]')).descriptors[0]!.hitsAddend).toBeUndefined();
  });

  test('numbers and strings up to 2^53-1 are exact', () => {
    expect(hits('5')).toBe(5);
    expect(hits('"5"')).toBe(5);
    expect(hits('4294967296')).toBe(4294967296); // beyond uint32: fine for a UInt64Value
    expect(hits('9007199254740991')).toBe(Number.MAX_SAFE_INTEGER);
    expect(hits('"9007199254740991"')).toBe(Number.MAX_SAFE_INTEGER);
    expect(hits('9.007199254740991e15')).toBe(Number.MAX_SAFE_INTEGER);
  });

  test('valid uint64 values above 2^53-1 are refused, not rounded', () => {
    for (const v of ['9007199254740992', '"9007199254740993"', '18446744073709551615', '"18446744073709551615"', '1e19']) {
      expect(reject(inDesc(`"hitsAddend":${v}`)).message).toMatch(
        /^descriptors\[0\]\.hitsAddend: .* is a valid uint64 but exceeds 9007199254740991 \(2\^53-1\)/,
      );
    }
  });

  test('outside uint64 or not integral is refused', () => {
    expectReject(inDesc('"hitsAddend":18446744073709551616'), /out of range \(max 18446744073709551615\)/);
    expectReject(inDesc('"hits_addend":"18446744073709551616"'), /^descriptors\[0\]\.hits_addend: .*out of range/);
    expectReject(inDesc('"hitsAddend":1e20'), /out of range/);
    expectReject(inDesc('"hitsAddend":-1'), /negative/);
    expectReject(inDesc('"hitsAddend":"-5"'), /negative/);
    expectReject(inDesc('"hitsAddend":2.5'), /not an integer/);
    expectReject(inDesc('"hitsAddend":" 5"'), /not a number/);
  });

  test('a very long number is shortened in the message', () => {
    const e = reject(inDesc(`"hitsAddend":${'9'.repeat(5000)}`));
    expect(e.message.length).toBeLessThan(200);
  });
});

describe('parseRateLimitRequest: enum unit (envoy.type.v3.RateLimitUnit)', () => {
  const unit = (v: string): number => parseRateLimitRequest(inLimit(`"requestsPerUnit":1,"unit":${v}`)).descriptors[0]!.limit!.unit;

  test.each([
    ['"UNKNOWN"', 0],
    ['"SECOND"', 1],
    ['"MINUTE"', 2],
    ['"HOUR"', 3],
    ['"DAY"', 4],
    ['"MONTH"', 5],
    ['"YEAR"', 6],
    ['"\\u0044AY"', 4],
    ['0', 0],
    ['3', 3],
    ['6', 6],
    ['7', 7], // unknown numbers pass through (open enum); the pipeline rejects them
    ['99', 99],
    ['-1', -1],
    ['2147483647', 2147483647],
    ['-2147483648', -2147483648],
    ['2.0', 2],
    ['2e0', 2],
  ])('%s → %d', (v, n) => {
    expect(unit(v)).toBe(n);
  });

  test.each([
    ['"WEEK"', /unknown envoy\.type\.v3\.RateLimitUnit value "WEEK"/], // no WEEK in this enum
    ['"second"', /unknown .* value "second"/],
    ['"SECONDS"', /unknown/],
    ['""', /unknown/],
    ['"2"', /unknown .* value "2"/], // strings are looked up as names only
    ['2147483648', /out of range/],
    ['-2147483649', /out of range/],
    ['1.5', /not an integer/],
    ['false', /expected an enum value name or an integer, got false/],
  ])('rejects %s', (v, message) => {
    const e = expectReject(inLimit(`"unit":${v}`), message);
    expect(e.path).toBe('descriptors[0].limit.unit');
  });
});

describe('parseRateLimitRequest: strings', () => {
  const domain = (lit: string): string => parseRateLimitRequest(`{"domain":${lit}}`).domain;

  test('escapes', () => {
    expect(domain('"a\\"b\\\\c\\/d\\be\\ff\\ng\\rh\\ti"')).toBe('a"b\\c/d\be\ff\ng\rh\ti');
    expect(domain('"\\u0041\\u00e9\\u4e2D\\u0000"')).toBe('A\u00e9\u4e2d\u0000');
    expect(domain('"\\ud83d\\ude00"')).toBe('\u{1f600}');
    expect(domain('"x\\uD83D\\uDE00y"')).toBe('x\u{1f600}y');
    expect(domain('""')).toBe('');
  });

  test('raw non-ASCII text, including astral characters', () => {
    const s = 'héllo 世界 \u{1f600} \u2028 \u007f';
    expect(domain(JSON.stringify(s))).toBe(s);
    expect(parseRateLimitRequest(inEntry(`"key":${JSON.stringify(s)},"value":"\\u00e9${s}"`)).descriptors[0]!.entries[1]).toEqual({
      key: s,
      value: `é${s}`,
    });
  });

  test.each([
    ['"\\ud800"', /lone UTF-16 surrogate/],
    ['"\\uD800x"', /lone UTF-16 surrogate/],
    ['"\\udc00"', /lone UTF-16 surrogate/],
    ['"\\ude00\\ud83d"', /lone UTF-16 surrogate/], // reversed pair
    ['"\\ud83d\\u0041"', /lone UTF-16 surrogate/],
    ['"\\ud83d\\ud83d"', /lone UTF-16 surrogate/],
    ['"\\ud83d\\n"', /lone UTF-16 surrogate/],
    ['"\\ud83d\\ude0"', /lone UTF-16 surrogate/],
    ['"a\ud800b"', /lone UTF-16 surrogate/], // a raw lone surrogate in the JS string
    ['"a\udc00"', /lone UTF-16 surrogate/],
    ['"\\ud800\udc00"', /lone UTF-16 surrogate/], // escaped high + raw low
    ['"\ud800\\udc00"', /lone UTF-16 surrogate/], // raw high + escaped low
    ['"\\x41"', /invalid escape "\\\\x" in string/],
    ['"\\a"', /invalid escape/],
    ['"\\U0041"', /invalid escape/],
    ['"\\u12G4"', /invalid escape "\\\\u12G4" in string/],
    ['"\\u004"', /invalid escape/],
    ['"\\u"', /invalid escape/],
    ['"\\\'"', /invalid escape/],
    ['"a\nb"', /control character U\+000A must be escaped/],
    ['"a\tb"', /control character U\+0009/],
    ['"\u0000"', /control character U\+0000/],
    ['"\u001f"', /control character U\+001F/],
    ['"abc', /unterminated string/],
    ['"abc\\', /invalid escape "\\\\}" in string/], // the backslash escapes the closing brace
    ['"abc\\"', /unterminated string/],
    ["'abc'", /unexpected character "'"/],
  ])('rejects %j', (lit, message) => {
    const e = expectReject(`{"domain":${lit}}`, message);
    expect(e.message).toMatch(/^domain: invalid JSON at line 1, column \d+: /);
  });

  test('an unterminated string at the end of the body', () => {
    expectReject('{"domain":"abc', 'domain: invalid JSON at line 1, column 11: unterminated string');
    expectReject('{"domain":"abc\\', 'domain: invalid JSON at line 1, column 11: unterminated string');
    expectReject('{"domain":"abc\\u12', /invalid escape/);
  });

  test('the same string rules apply to field names and nested strings', () => {
    expectReject('{"dom\\ud800ain":1}', /lone UTF-16 surrogate/);
    expectReject('{"a\nb":1}', /control character/);
    expectReject(inEntry('"key":"\\ud800"'), /^descriptors\[0\]\.entries\[1\]\.key: invalid JSON at line 1, column \d+: invalid escape "\\\\ud800" in string: lone UTF-16 surrogate$/);
    expectReject(inEntry('"key":"k","value":"\\q"'), /^descriptors\[0\]\.entries\[1\]\.value: .*invalid escape/);
  });
});

describe('parseRateLimitRequest: JSON syntax', () => {
  test.each([
    ['', 'empty request body'],
    ['   ', 'request body contains only whitespace'],
    ['\r\n\t ', 'request body contains only whitespace'],
    ['\ufeff{}', /byte order mark/],
    ['\ufeff', /byte order mark/],
    ['{', /unexpected end of input, expected a field name/],
    ['{"domain"', /expected ':' after field name "domain"/],
    ['{"domain":', /unexpected end of input, expected a value/],
    ['{"domain":"d"', /unexpected end of input, expected ',' or '}'/],
    ['{"domain":"d",', /unexpected end of input, expected a field name/],
    ['{"domain":"d",}', /expected a field name \(a JSON string\)/],
    ['{,"domain":"d"}', /expected a field name/],
    ['{"domain" "d"}', /expected ':'/],
    ['{"domain":"d" "hitsAddend":1}', /expected ',' or '}' after a field value/],
    ['{"domain":"d";}', /expected ',' or '}'/],
    ['{domain:"d"}', /expected a field name/],
    ["{'domain':'d'}", /expected a field name/],
    ['{"descriptors":[}', /unexpected character|expected a descriptor/],
    ['{"descriptors":[{},]}', /expected a descriptor as a JSON object|unexpected character "\]"/],
    ['{"descriptors":[{}', /unexpected end of input, expected ',' or '\]'/],
    ['{"descriptors":[{} {}]}', /expected ',' or '\]' after a list element/],
    ['{"descriptors":[{}]', /unexpected end of input, expected ',' or '}'/],
    ['{/*c*/}', /expected a field name/],
    ['{}// comment', /unexpected data after the top-level object/],
    ['{} x', /unexpected data after the top-level object/],
    ['{}{}', /unexpected data after the top-level object/],
    ['{}}', /unexpected data after the top-level object/],
    ['{}\u00a0', /unexpected data after the top-level object/], // NBSP is not JSON whitespace
    ['\u00a0{}', /unexpected character/],
    ['{"hitsAddend":1}garbage', /unexpected data/],
    ['{"domain":"d"}\u0000', /unexpected data/],
    ['{"hitsAddend":1 2}', /expected ',' or '}'/],
    ['{"hitsAddend":1x}', /invalid number/],
    ['{"domain":tru}', /invalid literal/],
    ['{"domain":undefined}', /unexpected character "u"/],
  ])('%j', (body, message) => {
    expectReject(body, message);
  });

  test('syntax errors report the line and column', () => {
    const e = reject('{\n  "domain": "d",\n  "descriptors": [\n    {"entries": [{"key": "k", "value": "v"}],}\n  ]\n}');
    expect(e.message).toBe('descriptors[0]: invalid JSON at line 4, column 46: expected a field name (a JSON string)');
    expect(e.path).toBe('descriptors[0]');
    expect(e.offset).toBe('{\n  "domain": "d",\n  "descriptors": [\n    {"entries": [{"key": "k", "value": "v"}],'.length);
  });

  test('every truncation of a valid body is rejected with a JsonRequestError', () => {
    const body =
      '{"domain":"edge","descriptors":[{"entries":[{"key":"k\\u00e9","value":"v\\ud83d\\ude00"}],' +
      '"limit":{"requests_per_unit":"10","unit":"MINUTE"},"hitsAddend":1e2}],"hits_addend":3}';
    expect(() => parseRateLimitRequest(body)).not.toThrow();
    for (let n = 0; n < body.length; n++) reject(body.slice(0, n));
  });
});

describe('parseRateLimitRequest: deep nesting never overflows the stack', () => {
  const N = 100000;
  const arrays = '['.repeat(N) + ']'.repeat(N);
  const objects = '{"a":'.repeat(N) + '1' + '}'.repeat(N);

  test.each([
    [`{"domain":${arrays}}`, 'domain: expected a string, got an array'],
    [`{"domain":${objects}}`, 'domain: expected a string, got an object'],
    [`{"hitsAddend":${arrays}}`, /^hitsAddend: expected a uint32/],
    [`{"descriptors":${objects}}`, 'descriptors: expected a JSON array, got an object'],
    [`{"descriptors":[${arrays}]}`, 'descriptors[0]: expected a descriptor as a JSON object, got an array'],
    [`{"descriptors":[{"entries":[${arrays}]}]}`, 'descriptors[0].entries[0]: expected an entry as a JSON object, got an array'],
    [`{"descriptors":[{"entries":[{"key":${objects}}]}]}`, 'descriptors[0].entries[0].key: expected a string, got an object'],
    [`{"descriptors":[{"limit":${arrays}}]}`, /^descriptors\[0\]\.limit: expected a limit override/],
    [`{"descriptors":[{"limit":{"unit":${arrays}}}]}`, /^descriptors\[0\]\.limit\.unit: expected an enum/],
    [`{"descriptors":[{"hitsAddend":${objects}}]}`, /^descriptors\[0\]\.hitsAddend: expected a uint64/],
    [`{"unknown":${arrays}}`, 'unknown field "unknown"'],
    [arrays, 'expected the request as a JSON object, got an array'],
    ['['.repeat(N), 'expected the request as a JSON object, got an array'],
    [`{"domain":${'['.repeat(N)}`, 'domain: expected a string, got an array'],
  ])('case %#', (body, message) => {
    expectReject(body, message);
  });

  test('long flat lists are fine', () => {
    const entries = Array.from({ length: 20000 }, (_, i) => ({ key: `k${i}`, value: `v${i}` }));
    const descriptors = Array.from({ length: 2000 }, () => ({ entries: [{ key: 'a', value: 'b' }] }));
    const r = parseRateLimitRequest(JSON.stringify({ domain: 'd', descriptors: [{ entries }, ...descriptors] }));
    expect(r.descriptors).toHaveLength(2001);
    expect(r.descriptors[0]!.entries).toEqual(entries);
  });
});

describe('JsonRequestError', () => {
  test('carries the path and the offset', () => {
    const e = reject('{"descriptors":[{"entries":[{"key":"a","value":"b"},{"key":1}]}]}');
    expect(e).toBeInstanceOf(Error);
    expect(e.name).toBe('JsonRequestError');
    expect(e.message).toBe('descriptors[0].entries[1].key: expected a string, got a number');
    expect(e.path).toBe('descriptors[0].entries[1].key');
    expect(e.offset).toBe('{"descriptors":[{"entries":[{"key":"a","value":"b"},{"key":'.length);
  });

  test('the path uses the name the client wrote', () => {
    expect(reject('{"descriptors":[{"limit":{"requests_per_unit":-1}}]}').path).toBe('descriptors[0].limit.requests_per_unit');
    expect(reject('{"hits_addend":-1}').path).toBe('hits_addend');
  });

  test('top-level errors have an empty path', () => {
    const e = reject('[]');
    expect(e.path).toBe('');
    expect(e.offset).toBe(0);
  });
});

describe('parseRateLimitRequestBytes', () => {
  const enc = (s: string): Uint8Array => new TextEncoder().encode(s);

  test('valid UTF-8 parses as the string form', () => {
    const body = '{"domain":"é\u{1f600}","descriptors":[{"entries":[{"key":"k","value":"世界"}]}]}';
    expect(parseRateLimitRequestBytes(enc(body))).toEqual(parseRateLimitRequest(body));
    expect(parseRateLimitRequestBytes(Buffer.from(body))).toEqual(parseRateLimitRequest(body));
  });

  test('invalid UTF-8 is rejected, not replaced', () => {
    const bad = Buffer.concat([Buffer.from('{"domain":"'), Buffer.from([0xff, 0xfe]), Buffer.from('"}')]);
    expect(() => parseRateLimitRequestBytes(bad)).toThrow(new JsonRequestError('request body is not valid UTF-8', '', undefined));
    // CESU-style encoded surrogate (ED A0 80) is not UTF-8 either.
    const surrogate = Buffer.concat([Buffer.from('{"domain":"'), Buffer.from([0xed, 0xa0, 0x80]), Buffer.from('"}')]);
    expect(() => parseRateLimitRequestBytes(surrogate)).toThrow(JsonRequestError);
    const truncated = Buffer.concat([Buffer.from('{"domain":"'), Buffer.from([0xe4, 0xb8])]);
    expect(() => parseRateLimitRequestBytes(truncated)).toThrow(JsonRequestError);
  });

  test('a UTF-8 BOM is kept and rejected', () => {
    const body = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('{}')]);
    expect(() => parseRateLimitRequestBytes(body)).toThrow(/byte order mark/);
  });

  test('empty body', () => {
    expect(() => parseRateLimitRequestBytes(new Uint8Array(0))).toThrow('empty request body');
  });
});

// -----------------------------------------------------------------------------------------------

function res(over: Partial<RateLimitResponse>): RateLimitResponse {
  return { overallCode: 0, statuses: [], responseHeadersToAdd: [], dynamicMetadata: undefined, ...over };
}

describe('serializeRateLimitResponse', () => {
  const json = (r: RateLimitResponse): unknown => JSON.parse(serializeRateLimitResponse(r));

  test('OK with a limit', () => {
    const r = res({
      overallCode: 1,
      statuses: [{ code: 1, currentLimit: { name: '', requestsPerUnit: 50, unit: 1 }, limitRemaining: 49, durationUntilReset: 1 }],
    });
    expect(json(r)).toEqual(
      JSON.parse(
        '{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":50,"unit":"SECOND"},"limitRemaining":49,"durationUntilReset":"1s"}]}',
      ),
    );
  });

  test('over limit: limitRemaining 0 is omitted', () => {
    const r = res({
      overallCode: 2,
      statuses: [{ code: 2, currentLimit: { name: '', requestsPerUnit: 20, unit: 2 }, limitRemaining: 0, durationUntilReset: 37 }],
    });
    expect(json(r)).toEqual(
      JSON.parse(
        '{"overallCode":"OVER_LIMIT","statuses":[{"code":"OVER_LIMIT","currentLimit":{"requestsPerUnit":20,"unit":"MINUTE"},"durationUntilReset":"37s"}]}',
      ),
    );
  });

  test('no match', () => {
    const r = res({ overallCode: 1, statuses: [{ code: 1, limitRemaining: 0 }] });
    expect(json(r)).toEqual(JSON.parse('{"overallCode":"OK","statuses":[{"code":"OK"}]}'));
  });

  test('unlimited status', () => {
    const r = res({ overallCode: 1, statuses: [{ code: 1, limitRemaining: 4294967295 }] });
    expect((json(r) as { statuses: unknown[] }).statuses[0]).toEqual(JSON.parse('{"code":"OK","limitRemaining":4294967295}'));
  });

  test('everything at its default is {}', () => {
    expect(serializeRateLimitResponse(res({}))).toBe('{}');
    expect(json(res({ statuses: [{ code: 0, limitRemaining: 0 }] }))).toEqual({ statuses: [{}] });
    expect(json(res({ statuses: [{ code: 0, currentLimit: { name: '', requestsPerUnit: 0, unit: 0 }, limitRemaining: 0 }] }))).toEqual({
      statuses: [{ currentLimit: {} }],
    });
  });

  test('all units, WEEK included, and the limit name', () => {
    const names = ['SECOND', 'MINUTE', 'HOUR', 'DAY', 'MONTH', 'YEAR', 'WEEK'];
    const r = res({
      overallCode: 1,
      statuses: names.map((_, i) => ({ code: 1, currentLimit: { name: `rule ${i} "q"`, requestsPerUnit: 1, unit: i + 1 }, limitRemaining: 1 })),
    });
    const out = json(r) as { statuses: { currentLimit: { name: string; unit: string } }[] };
    expect(out.statuses.map((s) => s.currentLimit.unit)).toEqual(names);
    expect(out.statuses[2]!.currentLimit.name).toBe('rule 2 "q"');
  });

  test('unknown enum numbers are written as numbers', () => {
    const r = res({ overallCode: 9 as never, statuses: [{ code: 5 as never, currentLimit: { name: '', requestsPerUnit: 1, unit: 42 }, limitRemaining: 0 }] });
    expect(json(r)).toEqual({ overallCode: 9, statuses: [{ code: 5, currentLimit: { requestsPerUnit: 1, unit: 42 } }] });
  });

  test('durations', () => {
    const d = (n: number): unknown =>
      (json(res({ statuses: [{ code: 1, limitRemaining: 0, durationUntilReset: n }] })) as { statuses: { durationUntilReset: unknown }[] }).statuses[0]!
        .durationUntilReset;
    expect(d(0)).toBe('0s'); // a present Duration of 0 is still written
    expect(d(58)).toBe('58s');
    expect(d(2592000)).toBe('2592000s');
    expect(d(1.5)).toBe('1.500s');
    expect(d(0.000001)).toBe('0.000001s');
    expect(d(2.123456789)).toBe('2.123456789s');
    expect(d(-3)).toBe('-3s');
    expect(() => d(Infinity)).toThrow(/Duration range/);
    expect(() => d(NaN)).toThrow(/Duration range/);
    expect(() => d(315576000001)).toThrow(/Duration range/);
  });

  test('response headers: key and value, empty value omitted', () => {
    const r = res({
      overallCode: 2,
      responseHeadersToAdd: [
        { key: 'RateLimit-Limit', value: '10' },
        { key: 'RateLimit-Remaining', value: '0' },
        { key: 'X-Empty', value: '' },
        { key: 'X-Üñí "c\\ode"\n', value: 'v\u2028\u{1f600}' },
      ],
    });
    expect(json(r)).toEqual({
      overallCode: 'OVER_LIMIT',
      responseHeadersToAdd: [
        { key: 'RateLimit-Limit', value: '10' },
        { key: 'RateLimit-Remaining', value: '0' },
        { key: 'X-Empty' },
        { key: 'X-Üñí "c\\ode"\n', value: 'v\u2028\u{1f600}' },
      ],
    });
  });

  test('dynamic metadata as a plain JSON object, keys sorted as protojson writes a Struct', () => {
    const md = {
      domain: 'edge',
      descriptors: [{ entries: ['k=v'], hitsAddend: 0 }],
      metadata: { z: null, a: [true, false, 1.5, -2, 'x', { n: {} }], '': 'empty key', 'ü\n': 1e21 },
      hitsAddend: 3,
    };
    const text = serializeRateLimitResponse(res({ overallCode: 1, dynamicMetadata: md }));
    expect(JSON.parse(text)).toEqual({ overallCode: 'OK', dynamicMetadata: md });
    expect(text.indexOf('"descriptors"')).toBeLessThan(text.indexOf('"domain"'));
    expect(text.indexOf('"hitsAddend":3')).toBeLessThan(text.indexOf('"metadata"'));
    expect(json(res({ dynamicMetadata: {} }))).toEqual({ dynamicMetadata: {} });
  });

  test('fields are written in proto declaration order', () => {
    const text = serializeRateLimitResponse(
      res({
        overallCode: 1,
        statuses: [{ code: 1, currentLimit: { name: 'n', requestsPerUnit: 5, unit: 3 }, limitRemaining: 4, durationUntilReset: 9 }],
        responseHeadersToAdd: [{ key: 'k', value: 'v' }],
        dynamicMetadata: { a: 1 },
      }),
    );
    expect(text).toBe(
      '{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"name":"n","requestsPerUnit":5,"unit":"HOUR"},' +
        '"limitRemaining":4,"durationUntilReset":"9s"}],"responseHeadersToAdd":[{"key":"k","value":"v"}],"dynamicMetadata":{"a":1}}',
    );
  });

  test('values no response can hold are marshal errors', () => {
    expect(() => serializeRateLimitResponse(res({ dynamicMetadata: { n: NaN } }))).toThrow(/not a valid JSON number/);
    expect(() => serializeRateLimitResponse(res({ dynamicMetadata: { n: [Infinity] } }))).toThrow(/not a valid JSON number/);
    expect(() => serializeRateLimitResponse(res({ statuses: [{ code: 1, limitRemaining: -1 }] }))).toThrow(/not a uint32/);
    expect(() => serializeRateLimitResponse(res({ statuses: [{ code: 1, limitRemaining: 4294967296 }] }))).toThrow(/not a uint32/);
    expect(() => serializeRateLimitResponse(res({ statuses: [{ code: 1, limitRemaining: 1.5 }] }))).toThrow(/not a uint32/);
    expect(() => serializeRateLimitResponse(res({ overallCode: 1.5 as never }))).toThrow(/not an enum number/);
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    expect(() => serializeRateLimitResponse(res({ dynamicMetadata: cyclic as never }))).toThrow(/nested deeper/);
  });

  test('undefined properties of dynamic metadata are left out', () => {
    const md = { a: 1, b: undefined } as unknown as RateLimitResponse['dynamicMetadata'];
    expect(serializeRateLimitResponse(res({ dynamicMetadata: md }))).toBe('{"dynamicMetadata":{"a":1}}');
  });
});

// -----------------------------------------------------------------------------------------------
// Property tests

describe('property: random valid requests round-trip', () => {
  const UNIT_NAMES = ['UNKNOWN', 'SECOND', 'MINUTE', 'HOUR', 'DAY', 'MONTH', 'YEAR'];
  const ALPHABET = ['a', 'Z', '0', '_', '-', ' ', '"', '\\', '/', '\n', '\t', '\u0000', '\u001f', 'é', '世', '\u2028', '\u{1f600}', '\ufffd', '\u007f'];

  function gen(seed: number): { request: RateLimitRequest; body: string } {
    const rnd = prng(seed);
    const int = (n: number): number => Math.floor(rnd() * n);
    const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)]!;
    const ws = (): string => (rnd() < 0.7 ? '' : pick([' ', '\n', '\t', '\r\n  ', '   ']));

    const str = (): string => {
      let s = '';
      for (let n = int(8); n > 0; n--) s += pick(ALPHABET);
      return s;
    };
    /** A JSON string literal for s, written with a random mix of raw characters and escapes. */
    const strJson = (s: string): string => {
      let out = '"';
      for (const ch of s) {
        const cp = ch.codePointAt(0)!;
        const escapeIt = cp < 0x20 || ch === '"' || ch === '\\' || rnd() < 0.2;
        if (!escapeIt) out += ch;
        else if (ch === '"' || ch === '\\') out += '\\' + ch;
        else if (ch === '\n' && rnd() < 0.5) out += '\\n';
        else if (ch === '/' && rnd() < 0.5) out += '\\/';
        else {
          for (let k = 0; k < ch.length; k++) {
            const hex = ch.charCodeAt(k).toString(16).padStart(4, '0');
            out += '\\u' + (rnd() < 0.5 ? hex : hex.toUpperCase());
          }
        }
      }
      return out + '"';
    };
    /** A JSON number (or numeric string) whose exact value is the integer n. */
    const intJson = (n: number, allowString: boolean): string => {
      let t: string;
      switch (int(5)) {
        case 0:
          t = n === 0 ? pick(['0', '-0', '0.0', '0e5']) : `${n}.0`;
          break;
        case 1:
          t = n % 100 === 0 && n !== 0 ? `${n / 100}e2` : `${n}e0`;
          break;
        case 2:
          t = n === 0 ? '0' : `${n}00e-2`;
          break;
        default:
          t = String(n);
      }
      return allowString && rnd() < 0.3 ? `"${t}"` : t;
    };
    const name = (camel: string, snake: string): string => (rnd() < 0.5 ? camel : snake);
    const obj = (members: string[]): string => {
      // Random order, optional explicit nulls are added by the callers.
      for (let i = members.length - 1; i > 0; i--) {
        const j = int(i + 1);
        [members[i], members[j]] = [members[j]!, members[i]!];
      }
      return `{${ws()}${members.join(`${ws()},${ws()}`)}${ws()}}`;
    };
    const member = (key: string, value: string): string => `${strJson(key)}${ws()}:${ws()}${value}`;

    const descriptors: Descriptor[] = [];
    const descJson: string[] = [];
    for (let n = int(4); n > 0; n--) {
      const entries = Array.from({ length: int(4) }, () => ({ key: str(), value: str() }));
      const d: Descriptor = { entries, limit: undefined, hitsAddend: undefined };
      const members: string[] = [];
      if (entries.length > 0 || rnd() < 0.5) {
        const es = entries.map((e) => {
          const m: string[] = [];
          if (e.key !== '' || rnd() < 0.5) m.push(member('key', strJson(e.key)));
          if (e.value !== '' || rnd() < 0.5) m.push(member('value', rnd() < 0.9 || e.value !== '' ? strJson(e.value) : 'null'));
          return obj(m);
        });
        members.push(member('entries', `[${ws()}${es.join(`${ws()},${ws()}`)}${ws()}]`));
      } else if (rnd() < 0.3) members.push(member('entries', 'null'));
      if (rnd() < 0.5) {
        const limit = { requestsPerUnit: rnd() < 0.2 ? 4294967295 : int(100000), unit: int(7) };
        d.limit = limit;
        const unitJson = rnd() < 0.5 ? strJson(UNIT_NAMES[limit.unit]!) : String(limit.unit);
        members.push(member('limit', obj([member(name('requestsPerUnit', 'requests_per_unit'), intJson(limit.requestsPerUnit, true)), member('unit', unitJson)])));
      } else if (rnd() < 0.3) members.push(member('limit', 'null'));
      if (rnd() < 0.5) {
        const h = rnd() < 0.2 ? 0 : rnd() < 0.2 ? Number.MAX_SAFE_INTEGER : int(1000);
        d.hitsAddend = h;
        members.push(member(name('hitsAddend', 'hits_addend'), intJson(h, true)));
      } else if (rnd() < 0.3) members.push(member(name('hitsAddend', 'hits_addend'), 'null'));
      descriptors.push(d);
      descJson.push(obj(members));
    }
    const request: RateLimitRequest = { domain: str(), descriptors, hitsAddend: rnd() < 0.3 ? 0 : int(5000) };
    const top: string[] = [];
    if (request.domain !== '' || rnd() < 0.5) top.push(member('domain', strJson(request.domain)));
    if (descriptors.length > 0 || rnd() < 0.5) top.push(member('descriptors', `[${ws()}${descJson.join(`${ws()},${ws()}`)}${ws()}]`));
    if (request.hitsAddend !== 0 || rnd() < 0.5) top.push(member(name('hitsAddend', 'hits_addend'), intJson(request.hitsAddend, true)));
    return { request, body: ws() + obj(top) + ws() };
  }

  test('2000 random requests', () => {
    for (let seed = 1; seed <= 2000; seed++) {
      const { request, body } = gen(seed);
      let parsed: RateLimitRequest;
      try {
        parsed = parseRateLimitRequest(body);
      } catch (err) {
        throw new Error(`seed ${seed}: ${(err as Error).message}\n${body}`);
      }
      expect(parsed).toEqual(request);
      // The body is plain JSON too: JSON.parse agrees on the strings.
      expect(JSON.parse(body)).toBeDefined();
    }
  });

  test('random single-character mutations: accepted ⇒ valid JSON; rejected ⇒ JsonRequestError', () => {
    const rnd = prng(12345);
    const noise = ['{', '}', '[', ']', ',', ':', '"', '\\', '0', '1', '-', '.', 'e', 'n', 't', ' ', '\ud800', 'x', '\u0001'];
    for (let k = 0; k < 3000; k++) {
      const { body } = gen(1 + (k % 500));
      const at = Math.floor(rnd() * body.length);
      const op = Math.floor(rnd() * 3);
      const c = noise[Math.floor(rnd() * noise.length)]!;
      const mutated = op === 0 ? body.slice(0, at) + body.slice(at + 1) : op === 1 ? body.slice(0, at) + c + body.slice(at) : body.slice(0, at) + c + body.slice(at + 1);
      let ok = true;
      try {
        parseRateLimitRequest(mutated);
      } catch (err) {
        if (!(err instanceof JsonRequestError)) throw new Error(`non-JsonRequestError for ${JSON.stringify(mutated)}: ${String(err)}`);
        ok = false;
      }
      if (ok) expect(() => JSON.parse(mutated)).not.toThrow();
    }
  });
});
