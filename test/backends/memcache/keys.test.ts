/** Key rules and the key → node distribution (no memcached needed). */
import { keyProblem, pickNode, utf8Length } from '../../../src/backends/memcache/keys';
import { distinctNodes, parseHostPort } from '../../../src/backends/memcache/servers';

/** CRC-32 (IEEE, as Go's crc32.ChecksumIEEE) over the UTF-8 bytes, bit by bit: the reference. */
function crc32Ref(s: string): number {
  let c = 0xffffffff;
  for (const b of Buffer.from(s, 'utf8')) {
    c ^= b;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0xedb88320 : c >>> 1;
  }
  return (c ^ 0xffffffff) >>> 0;
}

const samples = ['', 'a', 'foobar', 'domain_key_value_1234', 'é', 'ü€', '\u{1f600}x', 'a\ud800', '\udc00b', 'x\ud83d'];

describe('memcache keys', () => {
  it('measures UTF-8 bytes exactly as Buffer encodes them', () => {
    for (const s of samples) expect(utf8Length(s)).toBe(Buffer.byteLength(s));
  });

  it('allows printable keys up to 250 bytes and nothing memcached would refuse', () => {
    expect(keyProblem('domain_key_value_1234')).toBeUndefined();
    expect(keyProblem('x'.repeat(250))).toBeUndefined();
    expect(keyProblem('€'.repeat(83) + 'x')).toBeUndefined(); // 250 bytes
    expect(keyProblem('€'.repeat(84))).toBe('it is 252 bytes long, more than 250');
    expect(keyProblem('a\u0085b')).toBeUndefined(); // C1 controls are multi-byte UTF-8, no byte <= 0x20
  });

  it('places keys as upstream (gomemcache): crc32(key) % n over the list as configured', () => {
    expect(crc32Ref('123456789')).toBe(0xcbf43926); // the CRC-32 check value
    const nodes = distinctNodes(['10.0.0.3:11211', '10.0.0.1:11211', '10.0.0.2:11211', '10.0.0.1:11211']);
    expect(nodes).toEqual(['10.0.0.3:11211', '10.0.0.1:11211', '10.0.0.2:11211']);
    const counts = [0, 0, 0];
    const N = 9000;
    for (let i = 0; i < N; i++) {
      const key = `domain_key_value${i}_${1700000000 + (i % 60)}`;
      const k = pickNode(key, nodes.length);
      expect(k).toBe(crc32Ref(key) % 3);
      counts[k]!++;
    }
    for (const c of counts) expect(c / N).toBeGreaterThan(0.29);
    for (const c of counts) expect(c / N).toBeLessThan(0.38);
    for (const s of samples) expect(pickNode(s, 7)).toBe(crc32Ref(s) % 7);
    expect(pickNode('anything', 1)).toBe(0);
  });

  it('parses host:port entries', () => {
    expect(parseHostPort(' 127.0.0.1:11211 ')).toBe('127.0.0.1:11211');
    expect(parseHostPort('[::1]:11211')).toBe('[::1]:11211');
    expect(parseHostPort('mc.example:1')).toBe('mc.example:1');
    for (const bad of ['mc.example', ':11211', 'mc:0', 'mc:65536', 'mc:x', '::1:11211', 'mc:1.5']) {
      expect(() => parseHostPort(bad)).toThrow(`MEMCACHE_HOST_PORT: invalid memcached server address "${bad}": expected host:port`);
    }
  });
});
