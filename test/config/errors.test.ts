/** Every config error of reference section 3.2, with upstream's exact text, plus YAML 1.1 decoding quirks. */
import * as fs from 'fs';
import * as path from 'path';
import { ConfigError, loadConfig } from '../../src/config';
import { StatsStore } from '../../src/stats/store';
import { desc, load, loadError } from './helpers';

const FIXTURES = path.join(__dirname, 'fixtures');
function fixtureError(...names: string[]): string {
  try {
    loadConfig(
      names.map((n) => ({ name: n, content: fs.readFileSync(path.join(FIXTURES, n), 'utf8') })),
      { mergeDomainConfig: false, stats: new StatsStore() },
    );
    return 'OK';
  } catch (e) {
    expect(e).toBeInstanceOf(ConfigError);
    return (e as Error).message;
  }
}

describe('error messages (fixtures)', () => {
  test.each([
    [['bad_yaml.yaml'], "bad_yaml.yaml: error loading config file: yaml: line 5: Missing closing 'quote"],
    [['non_string_key.yaml'], 'non_string_key.yaml: config error, key is not of type string: 0.25'],
    [['misspelled_key.yaml'], "misspelled_key.yaml: config error, unknown key 'ratelimit'"],
    [['misspelled_key2.yaml'], "misspelled_key2.yaml: config error, unknown key 'requestsperunit'"],
    [['non_map_list.yaml'], 'non_map_list.yaml: config error, yaml file contains list of type other than map: a'],
    [['empty_domain.yaml'], 'empty_domain.yaml: config file cannot have empty domain'],
    [['basic_config.yaml', 'duplicate_domain.yaml'], "duplicate_domain.yaml: duplicate domain 'test-domain' in config file"],
    [['empty_key.yaml'], 'empty_key.yaml: descriptor has empty key'],
    [['duplicate_key.yaml'], "duplicate_key.yaml: duplicate descriptor composite key 'test-domain.key1_value1'"],
    [['unlimited_with_unit.yaml'], 'unlimited_with_unit.yaml: should not specify rate limit unit when unlimited'],
    [['bad_limit_unit.yaml'], "bad_limit_unit.yaml: invalid rate limit unit 'foo'"],
    [['replaces_empty.yaml'], 'replaces_empty.yaml: should not have an empty replaces entry'],
    [['replaces_self.yaml'], 'replaces_self.yaml: replaces should not contain name of same descriptor'],
  ])('%j', (files, message) => {
    expect(fixtureError(...files)).toBe(message);
  });

  test('basic_config.yaml loads', () => {
    expect(fixtureError('basic_config.yaml')).toBe('OK');
  });
});

describe('error messages (inline)', () => {
  test('unsupported leaf type: a float anywhere outside metadata', () => {
    expect(loadError('domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1.5}\n')).toBe(
      'file0.yaml: error checking config',
    );
    expect(loadError('domain: d\ndescriptors:\n  - key: k\n    value: 1.5\n')).toBe('file0.yaml: error checking config');
    expect(loadError('domain: .inf\n')).toBe('file0.yaml: error checking config');
  });

  test('integers outside int64 are not a valid leaf either', () => {
    expect(loadError('domain: d\ndescriptors:\n  - key: k\n    value: 9223372036854775808\n')).toBe(
      'file0.yaml: error checking config',
    );
  });

  test('a float inside metadata is fine', () => {
    expect(loadError('domain: d\ndescriptors:\n  - key: k\n    metadata: {ratio: 0.5, nested: {x: [1.5]}}\n')).toBe('OK');
  });

  test('empty or comment-only file, null domain', () => {
    expect(loadError('')).toBe('file0.yaml: config file cannot have empty domain');
    expect(loadError('# nothing here\n')).toBe('file0.yaml: config file cannot have empty domain');
    expect(loadError('domain: ~\n')).toBe('file0.yaml: config file cannot have empty domain');
    expect(loadError('descriptors: []\n')).toBe('file0.yaml: config file cannot have empty domain');
  });

  test('empty or unknown unit is invalid unless unlimited', () => {
    const rl = (r: string) => `domain: d\ndescriptors:\n  - key: k\n    rate_limit: ${r}\n`;
    expect(loadError(rl('{requests_per_unit: 5}'))).toBe("file0.yaml: invalid rate limit unit ''");
    expect(loadError(rl('{unit: unknown, requests_per_unit: 5}'))).toBe("file0.yaml: invalid rate limit unit 'unknown'");
    expect(loadError(rl('{unit: UNKNOWN, unlimited: true}'))).toBe('OK');
    expect(loadError(rl('{unlimited: true}'))).toBe('OK');
    // Not a valid unit, so "should not specify" does not apply (upstream only rejects valid units).
    expect(loadError(rl('{unit: foo, unlimited: true}'))).toBe('OK');
    expect(loadError(rl('{unit: Week, unlimited: true}'))).toBe(
      'file0.yaml: should not specify rate limit unit when unlimited',
    );
  });

  test('unit is case-insensitive, week is valid', () => {
    const c = load('domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: wEeK, requests_per_unit: 3}\n');
    expect(c.getLimit('d', desc(['k', 'x']))!.limit).toEqual({ name: '', requestsPerUnit: 3, unit: 7 });
  });

  test('share_threshold without a wildcard', () => {
    expect(
      loadError('domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n'),
    ).toBe("file0.yaml: share_threshold can only be used with wildcard values (containing '*'), but found key 'k_v'");
    expect(loadError('domain: d\ndescriptors:\n  - key: k\n    share_threshold: true\n')).toBe(
      "file0.yaml: share_threshold can only be used with wildcard values (containing '*'), but found key 'k'",
    );
  });

  test('metadata that cannot become a Struct: a map as a key', () => {
    expect(loadError('domain: d\ndescriptors:\n  - key: k\n    metadata: {outer: {[a]: x}}\n')).toBe(
      'file0.yaml: error parsing metadata: key is not of type string: [a]',
    );
  });

  test('duplicate composite key uses the full dotted path at depth', () => {
    const y = `domain: d
descriptors:
  - key: a
    value: b
    descriptors:
      - key: c
      - key: c
`;
    expect(loadError(y)).toBe("file0.yaml: duplicate descriptor composite key 'd.a_b.c'");
  });

  test('duplicate domain across files with merge on is fine, duplicate keys across merged files are not', () => {
    const a = 'domain: d\ndescriptors:\n  - key: k1\n    rate_limit: {unit: second, requests_per_unit: 1}\n';
    const b = 'domain: d\ndescriptors:\n  - key: k1\n    rate_limit: {unit: minute, requests_per_unit: 2}\n';
    expect(loadError([a, b])).toBe("file1.yaml: duplicate domain 'd' in config file");
    expect(loadError([a, b], true)).toBe("file1.yaml: duplicate descriptor composite key 'd.k1'");
  });

  test('check order inside a descriptor: empty key, duplicate, unit, replaces, share_threshold, metadata, children', () => {
    const base = 'domain: d\ndescriptors:\n  - key: k\n    value: v\n';
    // unit error wins over replaces, share_threshold, metadata and children errors
    expect(
      loadError(
        base +
          '  - key: k\n    value: w\n    share_threshold: true\n    metadata: {a: {[1]: 2}}\n' +
          '    rate_limit: {unit: bad, name: n, replaces: [{name: n}]}\n    descriptors: [{key: ""}]\n',
      ),
    ).toBe("file0.yaml: invalid rate limit unit 'bad'");
    expect(
      loadError(
        base +
          '  - key: k\n    value: w\n    share_threshold: true\n    metadata: {a: {[1]: 2}}\n' +
          '    rate_limit: {unit: second, name: n, replaces: [{name: n}]}\n    descriptors: [{key: ""}]\n',
      ),
    ).toBe('file0.yaml: replaces should not contain name of same descriptor');
    expect(
      loadError(base + '  - key: k\n    value: w\n    share_threshold: true\n    metadata: {a: {[1]: 2}}\n    descriptors: [{key: ""}]\n'),
    ).toContain('share_threshold can only be used');
    expect(loadError(base + '  - key: k\n    value: w*\n    share_threshold: true\n    metadata: {a: {[1]: 2}}\n    descriptors: [{key: ""}]\n')).toContain(
      'error parsing metadata',
    );
    expect(loadError(base + '  - key: k\n    value: w*\n    share_threshold: true\n    descriptors: [{key: ""}]\n')).toBe(
      'file0.yaml: descriptor has empty key',
    );
    // duplicate before the (also broken) unit
    expect(loadError(base + '  - key: k\n    value: v\n    rate_limit: {unit: bad}\n')).toBe(
      "file0.yaml: duplicate descriptor composite key 'd.k_v'",
    );
  });

  test('key validation of the whole file happens before the struct decode, and YAML errors before loading', () => {
    expect(loadError('domain: d\ndescriptors: 5\nbogus: 1\n')).toBe("file0.yaml: config error, unknown key 'bogus'");
    // a semantic error in an earlier file loses to a YAML error in a later one (all files parse first)
    expect(loadError(['domain: d\ndescriptors:\n  - key: ""\n', 'a: [\n'])).toMatch(/^file1\.yaml: error loading config file: yaml: line \d+: /);
  });

  test('a second YAML document is refused by name (upstream reads the first and drops the rest); an empty one is not a document', () => {
    const one = 'domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n';
    const two = 'domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 2}\n';
    expect(loadError(`${one}---\n${two}`)).toBe(
      'file0.yaml: error loading config file: yaml: line 5: a second YAML document: a config file holds one (envoyproxy/ratelimit reads only the first and ignores the rest); put each document in a file of its own',
    );
    expect(loadError(`---\n${one}---\n${two}---\n`)).toContain('yaml: line 6: a second YAML document');
    // One document, with its markers, a trailing separator, or a commented-out one after it: loaded.
    for (const text of [`---\n${one}`, `${one}---\n`, `${one}...\n`, `${one}---\n# domain: b\n`]) {
      expect(() => loadConfig([{ name: 'f.yaml', content: text }], { mergeDomainConfig: false, stats: new StatsStore() })).not.toThrow();
    }
  });

  test('YAML syntax errors are one line with the line number', () => {
    const msg = loadError('domain: d\ndescriptors:\n  - key: a\n   bad: [x\n');
    expect(msg).toMatch(/^file0\.yaml: error loading config file: yaml: line \d+: \S/);
    expect(msg).not.toContain('\n');
  });

  test('a document that is not a map', () => {
    expect(loadError('- a\n- b\n')).toBe(
      'file0.yaml: error loading config file: yaml: unmarshal errors:\n  line 1: cannot unmarshal !!seq into map[interface {}]interface {}',
    );
    expect(loadError('just a string\n')).toBe(
      'file0.yaml: error loading config file: yaml: unmarshal errors:\n  line 1: cannot unmarshal !!str `just a ...` into map[interface {}]interface {}',
    );
  });
});

describe('struct decode type mismatches (yaml: unmarshal errors)', () => {
  const prefix = 'file0.yaml: error loading config file: yaml: unmarshal errors:\n  ';
  test.each([
    ['requests_per_unit: "abc"', 'line 5: cannot unmarshal !!str `abc` into uint32'],
    ['requests_per_unit: abc', 'line 5: cannot unmarshal !!str `abc` into uint32'],
    ['requests_per_unit: -1', 'line 5: cannot unmarshal !!int `-1` into uint32'],
    ['requests_per_unit: 4294967296', 'line 5: cannot unmarshal !!int `4294967296` into uint32'],
    ['requests_per_unit: true', 'line 5: cannot unmarshal !!bool `true` into uint32'],
    ['requests_per_unit: 2001-01-01', 'line 5: cannot unmarshal !!timestamp `2001-01-01` into uint32'],
    ['unlimited: maybe', 'line 5: cannot unmarshal !!str `maybe` into bool'],
    ['unlimited: 1', 'line 5: cannot unmarshal !!int `1` into bool'],
    ['unit: {name: x}', 'line 5: cannot unmarshal !!map into string'],
    ['name: [{name: x}]', 'line 5: cannot unmarshal !!seq into string'],
    ['replaces: {name: x}', 'line 5: cannot unmarshal !!map into []config.yamlReplaces'],
    ['replaces: somename', 'line 5: cannot unmarshal !!str `somename` into []config.yamlReplaces'],
  ])('rate_limit.%s', (field, detail) => {
    const y = `domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      ${field}\n`;
    expect(loadError(y)).toBe(prefix + detail);
  });

  test('descriptor-level mismatches', () => {
    expect(loadError('domain: d\ndescriptors: 5\n')).toBe(prefix + 'line 2: cannot unmarshal !!int `5` into []config.YamlDescriptor');
    expect(loadError('domain: d\ndescriptors:\n  - key: k\n    shadow_mode: "maybe"\n')).toBe(
      prefix + 'line 4: cannot unmarshal !!str `maybe` into bool',
    );
    expect(loadError('domain: d\ndescriptors:\n  - key: k\n    rate_limit: 5\n')).toBe(
      prefix + 'line 4: cannot unmarshal !!int `5` into config.YamlRateLimit',
    );
    expect(loadError('domain: d\ndescriptors:\n  - key: k\n    metadata: 5\n')).toBe(
      prefix + 'line 4: cannot unmarshal !!int `5` into map[string]interface {}',
    );
    expect(loadError('domain: d\ndescriptors:\n  - key: k\n    metadata: [a]\n')).toBe(
      prefix + 'line 4: cannot unmarshal !!seq into map[string]interface {}',
    );
    expect(loadError('domain: [{key: a}]\n')).toBe(prefix + 'line 1: cannot unmarshal !!seq into string');
  });

  test('all mismatches are collected, in document order; long values are cut', () => {
    const y = `domain: d
descriptors:
  - key: k
    shadow_mode: sometimes
    rate_limit: {unit: second, requests_per_unit: twelve-thousand}
`;
    expect(loadError(y)).toBe(
      prefix + 'line 4: cannot unmarshal !!str `sometimes` into bool\n  line 5: cannot unmarshal !!str `twelve-...` into uint32',
    );
  });

  test('uint32 bounds', () => {
    const c = load('domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 4294967295}\n');
    expect(c.getLimit('d', desc(['k', 'v']))!.limit.requestsPerUnit).toBe(4294967295);
  });
});

describe('YAML 1.1 / yaml.v2 quirks', () => {
  const one = (fields: string) => `domain: d\ndescriptors:\n  - key: k\n${fields}`;

  test('yes/no/on/off/y/n are booleans', () => {
    for (const [text, expected] of [
      ['yes', true],
      ['on', true],
      ['Y', true],
      ['TRUE', true],
      ['no', false],
      ['off', false],
      ['n', false],
      ['False', false],
    ] as const) {
      const c = load(one(`    value: v\n    shadow_mode: ${text}\n    rate_limit: {unit: second, requests_per_unit: 1}\n`));
      expect(c.getLimit('d', desc(['k', 'v']))!.shadowMode).toBe(expected);
    }
  });

  test('string fields take the source text of any scalar', () => {
    const rl = '    rate_limit: {unit: second, requests_per_unit: 1}\n';
    for (const [text, value] of [
      ['123', '123'],
      ['on', 'on'],
      ['0x1F', '0x1F'],
      ['1_000', '1_000'],
      ['2001-12-14', '2001-12-14'],
      ['"quoted: yes"', 'quoted: yes'],
      ["'single'", 'single'],
      ['~', ''],
      ['', ''],
    ]) {
      const c = load(one(`    value: ${text}\n${rl}`));
      const fk = value === '' ? 'd.k' : `d.k_${value}`;
      expect(c.dump()).toBe(`${fk}: unit=SECOND requests_per_unit=1, shadow_mode: false, quota_mode: false\n`);
    }
    // a boolean-looking key and domain stay text too
    const c = load('domain: yes\ndescriptors:\n  - key: off\n    rate_limit: {unit: HOUR, requests_per_unit: 1}\n');
    expect(c.getLimit('yes', desc(['off', 'x']))!.fullKey).toBe('yes.off');
  });

  test('integer forms for requests_per_unit: octal, hex, underscores, sign', () => {
    const rpu = (t: string) =>
      load(one(`    rate_limit: {unit: second, requests_per_unit: ${t}}\n`)).getLimit('d', desc(['k', 'x']))!.limit.requestsPerUnit;
    expect(rpu('010')).toBe(8);
    expect(rpu('0x10')).toBe(16);
    expect(rpu('0o10')).toBe(8);
    expect(rpu('0b101')).toBe(5);
    expect(rpu('1_000')).toBe(1000);
    expect(rpu('+7')).toBe(7);
    expect(rpu('~')).toBe(0);
    // "08" is not octal, so yaml.v2 reads it as a float
    expect(loadError(one('    rate_limit: {unit: second, requests_per_unit: 08}\n'))).toBe('file0.yaml: error checking config');
    expect(loadError(one('    rate_limit: {unit: second, requests_per_unit: 1e3}\n'))).toBe('file0.yaml: error checking config');
  });

  test('missing requests_per_unit is 0, null rate_limit is no rate limit', () => {
    const c = load('domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second}\n  - key: b\n    rate_limit:\n');
    expect(c.getLimit('d', desc(['a', 'x']))!.limit.requestsPerUnit).toBe(0);
    expect(c.getLimit('d', desc(['b', 'x']))).toBeUndefined();
    expect(c.dump()).toBe('d.a: unit=SECOND requests_per_unit=0, shadow_mode: false, quota_mode: false\n');
  });

  test('non-string keys', () => {
    expect(loadError('domain: d\n1: x\n')).toBe('file0.yaml: config error, key is not of type string: 1');
    expect(loadError('domain: d\ny: x\n')).toBe('file0.yaml: config error, key is not of type string: true');
    expect(loadError('domain: d\n~: x\n')).toBe('file0.yaml: config error, key is not of type string: <nil>');
    expect(loadError('domain: d\n1000000.0: x\n')).toBe('file0.yaml: config error, key is not of type string: 1e+06');
    expect(loadError('domain: d\n"1": x\n')).toBe("file0.yaml: config error, unknown key '1'");
  });

  test('list items that are not maps are printed like Go %v', () => {
    expect(loadError('domain: d\ndescriptors:\n  - 5\n')).toBe(
      'file0.yaml: config error, yaml file contains list of type other than map: 5',
    );
    expect(loadError('domain: d\ndescriptors:\n  -\n')).toBe(
      'file0.yaml: config error, yaml file contains list of type other than map: <nil>',
    );
    expect(loadError('domain: d\ndescriptors:\n  - [a, 1, true]\n')).toBe(
      'file0.yaml: config error, yaml file contains list of type other than map: [a 1 true]',
    );
    expect(loadError('domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      replaces: [x]\n')).toBe(
      'file0.yaml: config error, yaml file contains list of type other than map: x',
    );
  });

  test('unknown keys are rejected at any depth, but not inside metadata', () => {
    expect(loadError('domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, burst: 1}\n')).toBe(
      "file0.yaml: config error, unknown key 'burst'",
    );
    expect(loadError('domain: d\ndescriptors:\n  - key: k\n    metadata: {anything: {goes: [1, {x: 2.5}]}}\n')).toBe('OK');
    // keys valid somewhere are accepted anywhere by the key check and ignored by the decode
    expect(loadError('domain: d\ndescriptors:\n  - key: k\n    domain: other\n    unit: second\n')).toBe('OK');
  });

  test('yaml.v2 reads only the first YAML document; here a second one is refused (a difference), even a broken one', () => {
    expect(loadError('---\ndomain: first\n---\ndomain: second\nbogus: [\n')).toContain('yaml: line 3: a second YAML document');
  });

  test('anchors, aliases and merge keys', () => {
    const y = `domain: d
descriptors:
  - key: a
    rate_limit: &rl {unit: minute, requests_per_unit: 10, name: shared}
  - key: b
    rate_limit: *rl
  - key: c
    rate_limit:
      <<: *rl
      requests_per_unit: 20
`;
    const c = load(y);
    expect(c.getLimit('d', desc(['b', 'x']))!.limit).toEqual({ name: 'shared', requestsPerUnit: 10, unit: 2 });
    expect(c.getLimit('d', desc(['c', 'x']))!.limit).toEqual({ name: 'shared', requestsPerUnit: 20, unit: 2 });
    expect(loadError('domain: d\ndescriptors: *nope\n')).toBe(
      "file0.yaml: error loading config file: yaml: unknown anchor 'nope' referenced",
    );
  });

  test('duplicate map keys: the last one wins (yaml.v2 non-strict)', () => {
    const c = load('domain: d\ndomain: e\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n');
    expect(c.getLimit('e', desc(['k', 'v']))).toBeDefined();
    expect(c.domainCount).toBe(1);
  });

  test('explicit tags', () => {
    const c = load('domain: d\ndescriptors:\n  - key: k\n    value: !!str 12\n    rate_limit: {unit: second, requests_per_unit: !!int "3"}\n');
    expect(c.getLimit('d', desc(['k', '12']))!.limit.requestsPerUnit).toBe(3);
    expect(loadError('domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: !!int abc}\n')).toBe(
      'file0.yaml: error loading config file: yaml: cannot decode !!str `abc` as a !!int',
    );
  });
});

test('alias bombs are refused (yaml.v2 "excessive aliasing")', () => {
  // 2^30 descriptor paths if expanded; anchors live inside metadata, which is not key-checked.
  let anchors = 'x0: &x0 [{key: k}]\n';
  for (let i = 1; i <= 30; i++) anchors += `x${i}: &x${i} [{key: k, descriptors: *x${i - 1}}, {key: j, descriptors: *x${i - 1}}]\n`;
  const doc =
    'domain: d\ndescriptors:\n  - key: root\n    metadata:\n' +
    anchors.replace(/^/gm, '      ').trimEnd() +
    '\n    descriptors: *x30\n';
  expect(loadError(doc)).toBe('file0.yaml: error loading config file: yaml: document contains excessive aliasing');
});
