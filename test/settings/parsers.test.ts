import {
  SettingsError,
  goDurationNanos,
  parseBool,
  parseDurationMs,
  parseFloat64,
  parseInt64,
  parseList,
  parseMap,
} from '../../src/settings';

function errorOf(fn: () => unknown): SettingsError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(SettingsError);
    return err as SettingsError;
  }
  throw new Error('expected a SettingsError');
}

describe('parseBool (strconv.ParseBool)', () => {
  it.each(['1', 't', 'T', 'TRUE', 'true', 'True'])('%s is true', (text) => {
    expect(parseBool(text, 'X')).toBe(true);
  });
  it.each(['0', 'f', 'F', 'FALSE', 'false', 'False'])('%s is false', (text) => {
    expect(parseBool(text, 'X')).toBe(false);
  });
  it.each(['maybe', 'yes', 'no', 'on', 'off', 'tRUE', 'FaLsE', ' true', 'true ', '2', '', 'y'])('%j is rejected', (text) => {
    expect(() => parseBool(text, 'X')).toThrow(SettingsError);
  });
  it('names the variable, the value and the accepted values', () => {
    expect(errorOf(() => parseBool('maybe', 'USE_STATSD')).message).toBe(
      'invalid value "maybe" for USE_STATSD: expected a boolean (true, false, 1, 0, t, f)',
    );
  });
});

describe('parseInt64 (strconv.ParseInt base 0, as envconfig calls it)', () => {
  it.each([
    ['0', 0],
    ['42', 42],
    ['+42', 42],
    ['-42', -42],
    ['-0', 0],
    ['1_000_000', 1_000_000],
    ['0x1F', 31],
    ['0X1f', 31],
    ['0x_1f', 31],
    ['-0x10', -16],
    ['0b101', 5],
    ['0o17', 15],
    ['0O17', 15],
    ['017', 15],
    ['010', 8],
    ['0_10', 8],
    ['9007199254740991', Number.MAX_SAFE_INTEGER],
  ])('%s is %d', (text, value) => {
    expect(parseInt64(text, 'X')).toBe(value);
  });
  it.each(['', ' 1', '1 ', '1.0', '1e3', 'abc', '08', '0x', '0xg', '1__0', '_1', '1_', '--1', '+-1', '0b2', '١'])('%j is rejected', (text) => {
    expect(() => parseInt64(text, 'X')).toThrow(SettingsError);
  });
  it('rejects values a number cannot hold exactly', () => {
    expect(errorOf(() => parseInt64('9223372036854775808', 'X')).message).toContain('out of range');
    expect(() => parseInt64('9007199254740993', 'X')).toThrow(SettingsError);
  });
  it('checks the range and says it', () => {
    expect(parseInt64('65535', 'PORT', { min: 0, max: 65535 })).toBe(65535);
    expect(errorOf(() => parseInt64('65536', 'PORT', { min: 0, max: 65535 })).message).toBe(
      'invalid value "65536" for PORT: expected an integer between 0 and 65535',
    );
    expect(errorOf(() => parseInt64('-1', 'N', { min: 0 })).message).toBe('invalid value "-1" for N: expected an integer >= 0');
    expect(errorOf(() => parseInt64('x', 'N')).message).toBe('invalid value "x" for N: expected an integer');
  });
});

describe('parseFloat64 (strconv.ParseFloat)', () => {
  it.each([
    ['0.8', 0.8],
    ['1', 1],
    ['0', 0],
    ['.5', 0.5],
    ['1.', 1],
    ['-2.5', -2.5],
    ['+2.5', 2.5],
    ['1e-3', 0.001],
    ['1E3', 1000],
    ['1.e2', 100],
    ['1_000.5', 1000.5],
    ['0x1p-2', 0.25],
    ['0x.8p1', 1],
    ['0X1.8P1', 3],
  ])('%s is %d', (text, value) => {
    expect(parseFloat64(text, 'X')).toBeCloseTo(value, 12);
  });
  it.each(['', '.', 'e3', '1e', '1,5', '0.8 ', 'abc', '1__0', '1_.5', '._5', '0x1', 'NaN', 'Inf', '-inf', 'infinity', '1e400'])(
    '%j is rejected',
    (text) => {
      expect(() => parseFloat64(text, 'X')).toThrow(SettingsError);
    },
  );
  it('checks the range', () => {
    expect(parseFloat64('1', 'R', { min: 0, max: 1 })).toBe(1);
    expect(errorOf(() => parseFloat64('1.01', 'NEAR_LIMIT_RATIO', { min: 0, max: 1 })).message).toBe(
      'invalid value "1.01" for NEAR_LIMIT_RATIO: expected a number between 0 and 1',
    );
    expect(() => parseFloat64('-0.1', 'R', { min: 0, max: 1 })).toThrow(SettingsError);
  });
});

describe('parseDurationMs (time.ParseDuration, in milliseconds)', () => {
  it.each([
    ['0', 0],
    ['-0', 0],
    ['+0', 0],
    ['0s', 0],
    ['300ms', 300],
    ['10s', 10_000],
    ['1.5h', 5_400_000],
    ['2h45m', 9_900_000],
    ['1h30m15s', 5_415_000],
    ['150us', 0.15],
    ['150µs', 0.15], // U+00B5 micro sign
    ['150μs', 0.15], // U+03BC greek mu
    ['2500ns', 0.0025],
    ['.5s', 500],
    ['1.s', 1000],
    ['24h', 86_400_000],
    ['-1.5s', -1500],
    ['1m0.5s', 60_500],
  ])('%s is %d ms', (text, ms) => {
    expect(parseDurationMs(text, 'X')).toBeCloseTo(ms, 9);
  });
  it.each([
    ['10', 'missing unit'],
    ['1.5', 'missing unit'],
    ['0.0', 'missing unit'],
    ['00', 'missing unit'],
    ['', 'invalid duration'],
    ['-', 'invalid duration'],
    ['s', 'invalid duration'],
    ['.s', 'invalid duration'],
    ['1sec', 'unknown unit "sec"'],
    ['1 s', 'unknown unit " s"'],
    ['1d', 'unknown unit "d"'],
    ['1H', 'unknown unit "H"'],
    ['1h 30m', 'unknown unit "h "'],
    ['10000000000000h', 'duration out of range'],
  ])('%j is rejected (%s)', (text, reason) => {
    const err = errorOf(() => parseDurationMs(text, 'REDIS_TIMEOUT'));
    expect(err.message).toContain(`invalid value ${JSON.stringify(text)} for REDIS_TIMEOUT: ${reason}`);
    expect(err.message).toContain('300ms');
    expect(err.message).not.toContain('\n');
  });
  it('is exact in nanoseconds like Go', () => {
    expect(goDurationNanos('1h2m3.000000004s')).toBe(3_723_000_000_004n);
    expect(goDurationNanos('2562047h47m16.854775807s')).toBe(2n ** 63n - 1n);
    expect(goDurationNanos('2562047h47m16.854775808s')).toEqual({ error: 'duration out of range' });
  });
});

describe('parseList', () => {
  it('splits on commas', () => {
    expect(parseList('a,b,c')).toEqual(['a', 'b', 'c']);
    expect(parseList('host1:11211,host2:11211')).toEqual(['host1:11211', 'host2:11211']);
  });
  it('trims items and drops empty ones', () => {
    expect(parseList(' a , b ,, c, ')).toEqual(['a', 'b', 'c']);
    expect(parseList('')).toEqual([]);
    expect(parseList(' , ')).toEqual([]);
  });
});

describe('parseMap', () => {
  it('reads k1:v1,k2:v2', () => {
    expect(parseMap('a:1,b:2', 'EXTRA_TAGS')).toEqual({ a: '1', b: '2' });
  });
  it('reads k=v with "=" (xDS node metadata)', () => {
    expect(parseMap('region=eu,zone=eu-1a', 'CONFIG_GRPC_XDS_NODE_METADATA', '=')).toEqual({ region: 'eu', zone: 'eu-1a' });
  });
  it('splits at the first separator only, so a value may contain it', () => {
    expect(parseMap('authorization:Basic a:b', 'H')).toEqual({ authorization: 'Basic a:b' });
    expect(parseMap('k=a=b', 'M', '=')).toEqual({ k: 'a=b' });
  });
  it('trims, skips empty items, keeps empty values, last key wins', () => {
    expect(parseMap(' a : 1 ,, b:, a:3 ,', 'X')).toEqual({ a: '3', b: '' });
    expect(parseMap('', 'X')).toEqual({});
  });
  it('rejects an item without the separator or with an empty key', () => {
    expect(errorOf(() => parseMap('a:1,b', 'EXTRA_TAGS')).message).toBe(
      'invalid value "a:1,b" for EXTRA_TAGS: expected comma-separated key:value pairs (item "b" has no ":")',
    );
    expect(errorOf(() => parseMap(':1', 'EXTRA_TAGS')).message).toContain('empty key');
    expect(errorOf(() => parseMap('a:1', 'M', '=')).message).toContain('expected comma-separated key=value pairs');
  });
});
