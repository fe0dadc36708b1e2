/**
 * The fast block reader must read a document exactly as the general reader (the `yaml` package)
 * does, or leave it to it: every config of the repository and thousands of mutations of them.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { parseBlockYaml } from '../../src/config/block-yaml';
import { parseGeneralYaml, parseYaml } from '../../src/config/tree';
import { int, pick, prng } from '../support/prng';

const ROOT = path.join(__dirname, '..', '..');
const show = (v: unknown): string => JSON.stringify(v, (_k, x: unknown) => (typeof x === 'bigint' ? `${x}n` : x));

function yamlFiles(dir: string): string[] {
  const out: string[] = [];
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...yamlFiles(full));
    else if (/\.ya?ml$/.test(e.name)) out.push(full);
  }
  return out;
}

const SEEDS = [...yamlFiles(path.join(ROOT, 'test/config/fixtures')), ...yamlFiles(path.join(ROOT, 'examples'))].map((f) =>
  fs.readFileSync(f, 'utf8'),
);

/** The fast reader's tree equals the general reader's, or it declines. */
function sameOrDeclined(text: string): boolean {
  const fast = parseBlockYaml(text);
  if (fast === undefined) return false;
  let general: string;
  try {
    general = show(parseGeneralYaml(text));
  } catch (e) {
    general = `error: ${(e as Error).message}`;
  }
  expect({ text, tree: show(fast) }).toEqual({ text, tree: general });
  return true;
}

test('reads the repository configs as the general reader does', () => {
  expect(SEEDS.length).toBeGreaterThan(10);
  let read = 0;
  for (const s of SEEDS) if (sameOrDeclined(s)) read++;
  expect(read).toBeGreaterThan(10);
});

test('the shapes a config uses: nesting, quoting, comments, nulls, a list at its key\'s column', () => {
  const doc = `# head
domain: "d"   # trailing comment
descriptors:
- key: 'it''s'
  value: a:b#c
  rate_limit:
    unit: second
    requests_per_unit: 0x1F
  descriptors:
    -
      key: k2
    - key: "x y"
      rate_limit: ~
  shadow_mode: yes
  metadata:
    n: 1.5
    when: 2001-01-01
    empty:
`;
  expect(sameOrDeclined(doc)).toBe(true);
  expect(parseBlockYaml('# only a comment\n')).toBeNull();
});

test('one-line flow collections as configs write them: the same tree as the general reader', () => {
  const doc = `domain: d
descriptors:
  - {key: a, value: b, rate_limit: {unit: second, requests_per_unit: 5}}
  - key: k
    rate_limit: { unit: 'minute', requests_per_unit: 0x10 }
    descriptors: [{key: x}, {key: y, shadow_mode: yes}]
  - key: m
    metadata: {list: [1, 2.5, ~, "q"], empty: {}, none: [], nested: {a: [b, [c]]}}
    rate_limit: {unit: hour, requests_per_unit: 1}  # comment
`;
  expect(sameOrDeclined(doc)).toBe(true);
  for (const ok of ['a: []\n', 'a: {}\n', '- [a, b]\n', '- {a: b}\n', "a: {'k': v}\n", 'a: [-1, +2, a-b, a#b]\n', 'a: [x y, 1 2]\n']) {
    expect({ ok, read: sameOrDeclined(ok) }).toEqual({ ok, read: true });
  }
});

test('declines what it does not read, and the general reader still answers', () => {
  for (const doc of [
    'a: {b}\n',
    'a: {b:1}\n',
    'a: {b: }\n',
    'a: {b: 1,}\n',
    'a: [b: 1]\n',
    'a: [- b]\n',
    'a: [b, , c]\n',
    'a: {b: [1}\n',
    "a: {b: 'x, y'}\n",
    'a: {b: 1} c\n',
    '{a: 1}\n',
    `a: ${'['.repeat(40)}${']'.repeat(40)}\n`,
    'a: &x 1\nb: *x\n',
    'a: |\n  text\n',
    'a: "esc\\n"\n',
    'a:\n  multi\n  line\n',
    '---\na: 1\n',
    'a:\n\t- 1\n',
    '<<: {a: 1}\n',
    'a: !!str 1\n',
    'plain scalar document\n',
    'a: 1\r\nb: 2\r\n',
  ]) {
    expect(parseBlockYaml(doc)).toBeUndefined();
    expect(() => parseYaml(doc)).not.toThrow(TypeError);
  }
});

const FLOW_SEEDS = [
  'domain: d\ndescriptors:\n  - {key: a, value: b, rate_limit: {unit: second, requests_per_unit: 5}}\n  - key: c\n    rate_limit: {unit: minute, requests_per_unit: 7}\n',
  'domain: d\ndescriptors:\n  - key: k\n    metadata: {l: [1, x, {y: z}], m: {}}\n    descriptors: [{key: x, value: "v"}, {key: y}]\n',
  "k: {'a': 'b c', \"d\": 1, e: [0x1F, 1e3, .5, ~, yes, 2001-01-01]}  # c\nl: [ x , { y : z } ]\ntop:\n  - [1, [2, [3]]]\n  - {}\n",
];

test('mutated configs: the same tree as the general reader whenever the fast reader answers', () => {
  const seeds = [...SEEDS, ...FLOW_SEEDS].filter((s) => parseBlockYaml(s) !== undefined);
  expect(seeds.length).toBeGreaterThan(FLOW_SEEDS.length);
  const bits = [' ', '  ', '#', ' #x', "'", '"', ':', ': ', '- ', '-', '~', 'null', 'yes', '0x1F', '1e3', '12_3', '2001-01-01',
    'a:b', "''", '""', '"a"', "'b'", 'k: v', '\n', '\n  ', '\n- ', 'x y', '::', ' :', '%', '@', '0o7', '+1', '.5', '-.inf',
    '<<', '? ', '*a', '&a', '!!str ', '|', '>', '[', ']', '{', '}', ',', '\\'];
  const rng = prng(30);
  let read = 0;
  for (let i = 0; i < 2000; i++) {
    let doc = pick(rng, seeds);
    for (let k = 0, n = 1 + int(rng, 3); k < n; k++) {
      const at = int(rng, doc.length + 1);
      const op = rng();
      if (op < 0.6) doc = doc.slice(0, at) + pick(rng, bits) + doc.slice(at);
      else if (op < 0.8) doc = doc.slice(0, at) + doc.slice(at + 1 + int(rng, 4));
      else {
        const lines = doc.split('\n');
        const j = int(rng, lines.length);
        lines[j] = (rng() < 0.5 ? ' ' : '') + lines[j]!.replace(/^ /, rng() < 0.5 ? '' : ' ');
        doc = lines.join('\n');
      }
    }
    if (sameOrDeclined(doc)) read++;
  }
  expect(read).toBeGreaterThan(500);
});
