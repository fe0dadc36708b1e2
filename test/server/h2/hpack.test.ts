/**
 * The HPACK decoder (RFC 7541) and its Huffman code: the Appendix C examples with the dynamic
 * table after each block, the malformed inputs that must be a COMPRESSION_ERROR (HpackError),
 * eviction, and the header list limit, which cuts a list without losing step with the encoder.
 * The table is private: it is read through the decoder's own interface, by decoding indexed
 * fields 62, 63... until the first index beyond the table.
 */
import { encodeHeaderBlock, HpackDecoder, HpackError } from '../../../src/server/h2/hpack';
import { decodeHuffman, HuffmanError } from '../../../src/server/h2/huffman';
import {
  hpackInteger,
  hpackString,
  huffmanEncode,
  indexedField,
  literalWithIndexing,
  literalWithIndexingIndexedName,
  literalWithoutIndexing,
  tableSizeUpdate,
} from '../../support/h2-frames';

type Field = [string, string];

const NO_LIMIT = Number.MAX_SAFE_INTEGER;

function hex(text: string): Buffer {
  return Buffer.from(text.replace(/\s+/g, ''), 'hex');
}

function decode(decoder: HpackDecoder, block: Buffer, maxListBytes = NO_LIMIT): Field[] {
  const fields: string[] = [];
  decoder.decode(block, 0, block.length, fields, maxListBytes);
  const out: Field[] = [];
  for (let i = 0; i < fields.length; i += 2) out.push([fields[i]!, fields[i + 1]!]);
  return out;
}

/** The dynamic table, newest first, as decoding its indexes shows it. */
function tableOf(decoder: HpackDecoder): Field[] {
  const entries: Field[] = [];
  for (let index = 62; index < 62 + 200; index++) {
    try {
      entries.push(decode(decoder, indexedField(index))[0]!);
    } catch (err) {
      if (err instanceof HpackError) return entries;
      throw err;
    }
  }
  throw new Error('a table of more than 200 entries');
}

/** RFC 7541 4.1: an entry's size is its octets plus 32. */
function sizeOf(entries: Field[]): number {
  return entries.reduce((sum, [name, value]) => sum + name.length + value.length + 32, 0);
}

function expectHpackError(decoder: HpackDecoder, block: Buffer): void {
  expect(() => decode(decoder, block)).toThrow(HpackError);
}

describe('RFC 7541 Appendix C', () => {
  test('C.2: a literal with indexing enters the table; without indexing, never indexed and indexed fields do not', () => {
    const withIndexing = new HpackDecoder();
    expect(decode(withIndexing, hex('400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572'))).toEqual([['custom-key', 'custom-header']]);
    expect(tableOf(withIndexing)).toEqual([['custom-key', 'custom-header']]);
    expect(sizeOf(tableOf(withIndexing))).toBe(55);

    const withoutIndexing = new HpackDecoder();
    expect(decode(withoutIndexing, hex('040c 2f73 616d 706c 652f 7061 7468'))).toEqual([[':path', '/sample/path']]);
    expect(tableOf(withoutIndexing)).toEqual([]);

    const neverIndexed = new HpackDecoder();
    expect(decode(neverIndexed, hex('1008 7061 7373 776f 7264 0673 6563 7265 74'))).toEqual([['password', 'secret']]);
    expect(tableOf(neverIndexed)).toEqual([]);

    const indexed = new HpackDecoder();
    expect(decode(indexed, hex('82'))).toEqual([[':method', 'GET']]);
    expect(tableOf(indexed)).toEqual([]);
  });

  const FIRST_REQUEST: Field[] = [
    [':method', 'GET'],
    [':scheme', 'http'],
    [':path', '/'],
    [':authority', 'www.example.com'],
  ];
  const SECOND_REQUEST: Field[] = [...FIRST_REQUEST, ['cache-control', 'no-cache']];
  const THIRD_REQUEST: Field[] = [
    [':method', 'GET'],
    [':scheme', 'https'],
    [':path', '/index.html'],
    [':authority', 'www.example.com'],
    ['custom-key', 'custom-value'],
  ];

  test.each([
    {
      example: 'C.3 (plain literals)',
      blocks: [
        '8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d',
        '8286 84be 5808 6e6f 2d63 6163 6865',
        '8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65',
      ],
    },
    {
      example: 'C.4 (Huffman-coded literals)',
      blocks: [
        '8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff',
        '8286 84be 5886 a8eb 1064 9cbf',
        '8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf',
      ],
    },
  ])('$example: three requests share the dynamic table', ({ blocks }) => {
    const decoder = new HpackDecoder();
    expect(decode(decoder, hex(blocks[0]!))).toEqual(FIRST_REQUEST);
    expect(tableOf(decoder)).toEqual([[':authority', 'www.example.com']]);
    expect(sizeOf(tableOf(decoder))).toBe(57);

    // 0xbe is index 62: the entry the first request added.
    expect(decode(decoder, hex(blocks[1]!))).toEqual(SECOND_REQUEST);
    expect(tableOf(decoder)).toEqual([
      ['cache-control', 'no-cache'],
      [':authority', 'www.example.com'],
    ]);
    expect(sizeOf(tableOf(decoder))).toBe(110);

    // 0xbf is index 63: the first entry, now second newest.
    expect(decode(decoder, hex(blocks[2]!))).toEqual(THIRD_REQUEST);
    expect(tableOf(decoder)).toEqual([
      ['custom-key', 'custom-value'],
      ['cache-control', 'no-cache'],
      [':authority', 'www.example.com'],
    ]);
    expect(sizeOf(tableOf(decoder))).toBe(164);
  });

  const DATE_21 = 'Mon, 21 Oct 2013 20:13:21 GMT';
  const DATE_22 = 'Mon, 21 Oct 2013 20:13:22 GMT';
  const LOCATION = 'https://www.example.com';
  const COOKIE = 'foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1';

  test.each([
    {
      example: 'C.5 (plain literals)',
      blocks: [
        '4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a ' +
          '3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 6c65 2e63 6f6d',
        '4803 3330 37c1 c0bf',
        '88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d 54c0 5a04 ' +
          '677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049 5541 5851 5745 4f49 ' +
          '553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e 3d31',
      ],
    },
    {
      example: 'C.6 (Huffman-coded literals)',
      blocks: [
        '4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 2d1b ff6e ' +
          '919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3',
        '4883 640e ffc1 c0bf',
        '88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab 77ad 94e7 ' +
          '821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed ' +
          '4ee5 b106 3d50 07',
      ],
    },
  ])('$example: three responses in a 256-byte table, with evictions', ({ blocks }) => {
    const decoder = new HpackDecoder(256);
    expect(decode(decoder, hex(blocks[0]!))).toEqual([
      [':status', '302'],
      ['cache-control', 'private'],
      ['date', DATE_21],
      ['location', LOCATION],
    ]);
    expect(tableOf(decoder)).toEqual([
      ['location', LOCATION],
      ['date', DATE_21],
      ['cache-control', 'private'],
      [':status', '302'],
    ]);
    expect(sizeOf(tableOf(decoder))).toBe(222);

    // Adding :status 307 evicts :status 302, the oldest.
    expect(decode(decoder, hex(blocks[1]!))).toEqual([
      [':status', '307'],
      ['cache-control', 'private'],
      ['date', DATE_21],
      ['location', LOCATION],
    ]);
    expect(tableOf(decoder)).toEqual([
      [':status', '307'],
      ['location', LOCATION],
      ['date', DATE_21],
      ['cache-control', 'private'],
    ]);
    expect(sizeOf(tableOf(decoder))).toBe(222);

    // Several evictions within one block: later fields see the table as it is at that point.
    expect(decode(decoder, hex(blocks[2]!))).toEqual([
      [':status', '200'],
      ['cache-control', 'private'],
      ['date', DATE_22],
      ['location', LOCATION],
      ['content-encoding', 'gzip'],
      ['set-cookie', COOKIE],
    ]);
    expect(tableOf(decoder)).toEqual([
      ['set-cookie', COOKIE],
      ['content-encoding', 'gzip'],
      ['date', DATE_22],
    ]);
    expect(sizeOf(tableOf(decoder))).toBe(215);
  });
});

describe('Huffman', () => {
  test('every octet round-trips through the code (each code length, up to 30 bits)', () => {
    const all = Array.from({ length: 256 }, (_, i) => String.fromCharCode(i)).join('');
    const coded = huffmanEncode(all);
    expect(decodeHuffman(coded, 0, coded.length)).toBe(all);
    for (let i = 0; i < 256; i++) {
      const one = huffmanEncode(String.fromCharCode(i) + 'a');
      expect(decodeHuffman(one, 0, one.length)).toBe(String.fromCharCode(i) + 'a');
    }
    expect(decodeHuffman(Buffer.alloc(0), 0, 0)).toBe('');
  });

  test('padding of up to 7 one bits is accepted', () => {
    // 'a' is 00011 (5 bits) + 111; '0' is 00000 (5 bits), twice = 10 bits + 111111.
    expect(decodeHuffman(Buffer.from([0x1f]), 0, 1)).toBe('a');
    expect(decodeHuffman(Buffer.from([0x00, 0x3f]), 0, 2)).toBe('00');
  });

  test.each([
    { what: 'padding of more than 7 bits (a whole byte of ones after a symbol)', bytes: [0x1f, 0xff] },
    { what: 'a byte of padding after a byte-aligned end (eight 5-bit symbols)', bytes: [0, 0, 0, 0, 0, 0xff] },
    { what: 'padding that is not all ones', bytes: [0x18] },
    { what: 'padding with a zero bit among the ones', bytes: [0x1d] },
    { what: 'EOS (30 one bits) inside the string', bytes: [0xff, 0xff, 0xff, 0xfc] },
    { what: 'EOS followed by a symbol', bytes: [0xff, 0xff, 0xff, 0xfc, 0x1f] },
  ])('$what is a HuffmanError, and an HpackError inside a block', ({ bytes }) => {
    const coded = Buffer.from(bytes);
    expect(() => decodeHuffman(coded, 0, coded.length)).toThrow(HuffmanError);
    const block = Buffer.concat([Buffer.from([0x00]), hpackString('x-name'), hpackInteger(coded.length, 7, 0x80), coded]);
    expectHpackError(new HpackDecoder(), block);
  });

  test('Huffman-coded names and values decode in a block', () => {
    const block = Buffer.concat([
      literalWithoutIndexing('x-coded', 'Hello, World! ~{}', true),
      literalWithIndexing('x-indexed', 'value with spaces', true),
    ]);
    const decoder = new HpackDecoder();
    expect(decode(decoder, block)).toEqual([
      ['x-coded', 'Hello, World! ~{}'],
      ['x-indexed', 'value with spaces'],
    ]);
    expect(tableOf(decoder)).toEqual([['x-indexed', 'value with spaces']]);
  });
});

describe('malformed blocks are HpackErrors', () => {
  test('index 0 in an indexed field', () => {
    expectHpackError(new HpackDecoder(), Buffer.from([0x80]));
  });

  test('an index beyond the static and dynamic tables', () => {
    const decoder = new HpackDecoder();
    expect(decode(decoder, indexedField(61))).toEqual([['www-authenticate', '']]);
    expectHpackError(decoder, indexedField(62));
    expectHpackError(decoder, literalWithIndexingIndexedName(62, 'v'));
    decode(decoder, literalWithIndexing('a', 'b'));
    expect(decode(decoder, indexedField(62))).toEqual([['a', 'b']]);
    expectHpackError(decoder, indexedField(63));
    expectHpackError(decoder, indexedField(100_000));
  });

  test('a dynamic table size update above the limit, or after a field', () => {
    expectHpackError(new HpackDecoder(), tableSizeUpdate(4097));
    expectHpackError(new HpackDecoder(256), tableSizeUpdate(257));
    expectHpackError(new HpackDecoder(), Buffer.concat([indexedField(2), tableSizeUpdate(100)]));
    // At the start of a block, up to the limit, even twice: fine.
    const decoder = new HpackDecoder();
    expect(decode(decoder, Buffer.concat([tableSizeUpdate(0), tableSizeUpdate(4096), indexedField(2)]))).toEqual([[':method', 'GET']]);
  });

  test('strings cut off by the end of the block', () => {
    expectHpackError(new HpackDecoder(), Buffer.from([0x00])); // no name
    expectHpackError(new HpackDecoder(), Buffer.concat([Buffer.from([0x00]), hpackString('name')])); // no value
    expectHpackError(new HpackDecoder(), Buffer.from([0x00, 0x05, 0x61, 0x62])); // 5 octets announced, 2 present
    expectHpackError(new HpackDecoder(), Buffer.concat([Buffer.from([0x00]), hpackInteger(1000, 7), Buffer.alloc(10, 0x61)]));
  });

  test('integers above the limit or cut off', () => {
    // 2^28 + 127 as an index: beyond MAX_INTEGER.
    expectHpackError(new HpackDecoder(), indexedField(2 ** 28 + 127));
    expectHpackError(new HpackDecoder(), Buffer.from([0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0f]));
    // A continuation bit on the last octet of the block.
    expectHpackError(new HpackDecoder(), Buffer.from([0xff, 0x80]));
    expectHpackError(new HpackDecoder(), Buffer.from([0xff]));
    // Redundant zero continuation octets, but few: still 127, beyond the table.
    expectHpackError(new HpackDecoder(), Buffer.concat([Buffer.from([0xff]), Buffer.alloc(10, 0x80), Buffer.from([0x00])]));
  });

  // An over-long integer: the prefix full, then 150 continuation octets carrying zeros (the value
  // stays 127, 31 or 15) and a last octet. RFC 7541 5.1 allows rejecting it; what must never
  // happen is another exception (it would escape the connection handler) or a table without bound.
  const ZERO_RUN = Buffer.alloc(150, 0x80);

  test('an over-long integer as an index is an HpackError', () => {
    const block = Buffer.concat([Buffer.from([0xff]), ZERO_RUN, Buffer.from([0x00])]);
    expectHpackError(new HpackDecoder(), block);
  });

  test('an over-long integer as a literal name index is an HpackError', () => {
    const block = Buffer.concat([Buffer.from([0x0f]), ZERO_RUN, Buffer.from([0x00]), hpackString('v')]);
    expectHpackError(new HpackDecoder(), block);
  });

  test('an over-long integer as a string length is an HpackError (127 octets are not there)', () => {
    const block = Buffer.concat([Buffer.from([0x00, 0x7f]), ZERO_RUN, Buffer.from([0x00]), hpackString('v'), indexedField(2)]);
    expectHpackError(new HpackDecoder(), block);
  });

  test('an over-long table size update is an HpackError or a size of 31, never a table without a bound', () => {
    const decoder = new HpackDecoder();
    const update = Buffer.concat([Buffer.from([0x3f]), ZERO_RUN, Buffer.from([0x00])]);
    let rejected = false;
    try {
      decode(decoder, update);
    } catch (err) {
      expect(err).toBeInstanceOf(HpackError);
      rejected = true;
    }
    if (!rejected) {
      // A 31-octet table holds no entry of 32 octets or more.
      decode(decoder, literalWithIndexing('x-name', 'a value'));
      expect(tableOf(decoder)).toEqual([]);
    }
  });
});

describe('the dynamic table', () => {
  test('the oldest entries are evicted when an entry does not fit', () => {
    const decoder = new HpackDecoder();
    // Entries of 1000 octets: 'n' + 967 octets + 32. Four fit in 4096, the fifth evicts the first.
    const value = (i: number): string => String(i).repeat(967);
    for (let i = 1; i <= 4; i++) decode(decoder, literalWithIndexing('n', value(i)));
    expect(tableOf(decoder).map(([, v]) => v[0])).toEqual(['4', '3', '2', '1']);
    decode(decoder, literalWithIndexing('n', value(5)));
    expect(tableOf(decoder).map(([, v]) => v[0])).toEqual(['5', '4', '3', '2']);
    expect(sizeOf(tableOf(decoder))).toBe(4000);
  });

  test('an entry larger than the table empties it and is not added; the field is still decoded', () => {
    const decoder = new HpackDecoder();
    decode(decoder, literalWithIndexing('a', 'b'));
    const huge = 'x'.repeat(4096 - 32); // with the name 'n': 4097 octets
    expect(decode(decoder, literalWithIndexing('n', huge))).toEqual([['n', huge]]);
    expect(tableOf(decoder)).toEqual([]);
    // Exactly the table size fits.
    decode(decoder, literalWithIndexing('', huge));
    expect(tableOf(decoder)).toEqual([['', huge]]);
  });

  test('many small entries wrap the ring and keep the newest that fit', () => {
    const decoder = new HpackDecoder();
    // 36-octet entries: 113 fit in 4096.
    for (let i = 0; i < 300; i++) decode(decoder, literalWithIndexing('k', String(i).padStart(3, '0')));
    const table = tableOf(decoder);
    expect(table).toHaveLength(113);
    expect(table[0]).toEqual(['k', '299']);
    expect(table[112]).toEqual(['k', '187']);
  });

  test('a size update shrinks the table (evicting) and a later one cannot bring entries back', () => {
    const decoder = new HpackDecoder();
    for (let i = 0; i < 3; i++) decode(decoder, literalWithIndexing('k', `v${i}`)); // 35 octets each
    decode(decoder, Buffer.concat([tableSizeUpdate(70), indexedField(2)]));
    expect(tableOf(decoder)).toEqual([['k', 'v2'], ['k', 'v1']]);
    decode(decoder, Buffer.concat([tableSizeUpdate(0), tableSizeUpdate(4096), indexedField(2)]));
    expect(tableOf(decoder)).toEqual([]);
    // Now a 40-octet table: one entry at a time.
    decode(decoder, tableSizeUpdate(40));
    decode(decoder, Buffer.concat([literalWithIndexing('k', 'v3'), literalWithIndexing('k', 'v4')]));
    expect(tableOf(decoder)).toEqual([['k', 'v4']]);
  });
});

describe('the header list limit', () => {
  test('a list above the limit sets tooLarge and keeps only the fields within it; the table stays in step', () => {
    const decoder = new HpackDecoder();
    // Ten 100-octet fields (name 'h' + 67 octets + 32) entering the table, against a 450-octet limit.
    const fields: Field[] = Array.from({ length: 10 }, (_, i) => [`h`, `${i}`.repeat(67)]);
    const block = Buffer.concat(fields.map(([n, v]) => literalWithIndexing(n, v)));
    const out: string[] = [];
    decoder.decode(block, 0, block.length, out, 450);
    expect(decoder.tooLarge).toBe(true);
    expect(out).toEqual(fields.slice(0, 4).flat());
    // Every field entered the table, the cut ones too: index 62 is the tenth, 71 the first.
    expect(decode(decoder, Buffer.concat([indexedField(62), indexedField(71)]), 450)).toEqual([fields[9], fields[0]]);
    expect(decoder.tooLarge).toBe(false);
    expect(tableOf(decoder)).toEqual([...fields].reverse());
  });

  test('a list exactly at the limit is not too large', () => {
    const decoder = new HpackDecoder();
    const block = literalWithoutIndexing('n', 'v'.repeat(67)); // 100 octets
    expect(decode(decoder, block, 100)).toEqual([['n', 'v'.repeat(67)]]);
    expect(decoder.tooLarge).toBe(false);
    expect(decode(decoder, block, 99)).toEqual([]);
    expect(decoder.tooLarge).toBe(true);
  });

  test('an HPACK bomb (one 4 KiB entry referenced thousands of times) keeps no more than the limit', () => {
    const decoder = new HpackDecoder();
    const big = 'b'.repeat(4000);
    decode(decoder, literalWithIndexing('x-bomb', big));
    const bomb = Buffer.alloc(60_000, 0xbe); // index 62, 60000 times: 242 MB of header list
    const out: string[] = [];
    decoder.decode(bomb, 0, bomb.length, out, 64 * 1024);
    expect(decoder.tooLarge).toBe(true);
    // 16 fields of 4038 octets fit in 64 KiB.
    expect(out.length / 2).toBe(16);
    expect(decode(decoder, indexedField(62))).toEqual([['x-bomb', big]]);
  });
});

test('encodeHeaderBlock: what it writes decodes to the same fields, with no table state', () => {
  const fields: Field[] = [
    [':status', '200'],
    [':status', '431'],
    ['content-type', 'application/grpc'],
    ['grpc-status', '8'],
    ['grpc-message', 'm'.repeat(300)],
    ['x-custom', ''],
  ];
  const block = encodeHeaderBlock(fields);
  expect(block[0]).toBe(0x88);
  const decoder = new HpackDecoder();
  expect(decode(decoder, block)).toEqual(fields);
  expect(tableOf(decoder)).toEqual([]);
});
