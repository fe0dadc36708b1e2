/**
 * The size budget of a config load (src/config/budget.ts): a config over CONFIG_MAX_DESCRIPTORS,
 * or over the YAML nodes it allows, is refused while it is read (before its tree is whole), or
 * before it is parsed at all when the text alone shows it; the node bound of a text never falls
 * short of what either reader makes.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { countYamlNodes, GENERAL_READER_WEIGHT, LoadBudget, LoadBudgetError, NODES_PER_DESCRIPTOR } from '../../src/config/budget';
import { parseBlockYaml } from '../../src/config/block-yaml';
import { loadConfig, loadConfigFromObjects } from '../../src/config/load';
import { ConfigError } from '../../src/config/types';
import { parseGeneralYaml, parseYaml } from '../../src/config/tree';
import { StatsStore } from '../../src/stats/store';
import { int, pick, prng } from '../support/prng';

/** `n` descriptors of one limit each, in block style (11 nodes each). */
function blockConfig(n: number): string {
  let s = 'domain: d\ndescriptors:\n';
  for (let i = 0; i < n; i++) s += `  - key: k\n    value: v${i}\n    rate_limit:\n      unit: second\n      requests_per_unit: ${i + 1}\n`;
  return s;
}

const opts = (maxDescriptors: number) => ({ mergeDomainConfig: false, stats: new StatsStore(), maxDescriptors });

describe('CONFIG_MAX_DESCRIPTORS while reading', () => {
  test('the block reader stops at the descriptor past the cap, before the rest of the document is read', () => {
    // The text after descriptor 11 is not even YAML: the reader never gets there.
    const text = blockConfig(11) + '  - key: [unclosed\n';
    const budget = new LoadBudget(10);
    expect(() => parseYaml(text, budget)).toThrow(
      new LoadBudgetError('the configuration has more than 10 descriptors, the limit set by CONFIG_MAX_DESCRIPTORS; it was not loaded'),
    );
    // Within the cap it reads on, and the error is the document's own.
    expect(() => loadConfig([{ name: 'a.yaml', content: text }], opts(100))).toThrow(/^a\.yaml: error loading config file: yaml: line \d+: /);
  });

  test('a load is refused by name across files, and exactly at the cap it loads', () => {
    const files = [
      { name: 'a.yaml', content: blockConfig(6) },
      { name: 'b.yaml', content: blockConfig(6).replace('domain: d', 'domain: e') },
    ];
    expect(() => loadConfig(files, opts(11))).toThrow(
      new ConfigError('b.yaml: the configuration has more than 11 descriptors, the limit set by CONFIG_MAX_DESCRIPTORS; it was not loaded'),
    );
    expect(loadConfig(files, opts(12)).ruleCount).toBe(12);
    expect(loadConfig(files, opts(0)).ruleCount).toBe(12);
  });

  test('descriptors that aliases repeat are counted as the decoder makes them', () => {
    // Five descriptors in the text, 5 x 4 = 20 once the aliases are expanded.
    const text = `domain: d
descriptors:
  - key: a
    descriptors: &four
      - {key: x1}
      - {key: x2}
      - {key: x3}
      - {key: x4}
  - {key: b, descriptors: *four}
  - {key: c, descriptors: *four}
  - {key: e, descriptors: *four}
`;
    expect(loadConfig([{ name: 'a.yaml', content: text }], opts(20)).domainCount).toBe(1);
    expect(() => loadConfig([{ name: 'a.yaml', content: text }], opts(19))).toThrow(
      new ConfigError('a.yaml: the configuration has more than 19 descriptors, the limit set by CONFIG_MAX_DESCRIPTORS; it was not loaded'),
    );
  });

  test('xDS documents are counted the same way (their nodes and descriptors)', () => {
    const docs = [{ name: 'r1', root: { domain: 'd', descriptors: Array.from({ length: 11 }, (_, i) => ({ key: 'k', value: `v${i}` })) } }];
    expect(() => loadConfigFromObjects(docs, opts(10))).toThrow(
      new ConfigError('r1: the configuration has more than 10 descriptors, the limit set by CONFIG_MAX_DESCRIPTORS; it was not loaded'),
    );
    const metadata = { domain: 'd', descriptors: [{ key: 'k', metadata: { list: Array.from({ length: 100 }, (_, i) => i) } }] };
    expect(() => loadConfigFromObjects([{ name: 'r2', root: metadata }], opts(5))).toThrow(/^r2: the configuration has more than 80 YAML nodes/);
  });
});

describe('YAML nodes', () => {
  test(`metadata is free, its nodes are not: ${NODES_PER_DESCRIPTOR} per descriptor the cap allows`, () => {
    let text = 'domain: d\ndescriptors:\n  - key: k\n    metadata:\n      list:\n';
    for (let i = 0; i < 200; i++) text += `        - ${i}\n`;
    expect(() => loadConfig([{ name: 'm.yaml', content: text }], opts(10))).toThrow(
      new ConfigError(
        'm.yaml: the configuration has up to 212 YAML nodes, more than the 160 left of 160 (16 for each of the 10 descriptors CONFIG_MAX_DESCRIPTORS allows); it was not loaded',
      ),
    );
    expect(loadConfig([{ name: 'm.yaml', content: text }], opts(14)).domainCount).toBe(1);
  });

  test('a text far over the budget is refused before it is parsed (its syntax error is never reached)', () => {
    const text = blockConfig(100) + 'key: [unclosed\n';
    expect(() => loadConfig([{ name: 'big.yaml', content: text }], opts(10))).toThrow(/^big\.yaml: the configuration has up to 1111 YAML nodes, more than the 160 left of 160/);
  });

  test(`outside the block style a node weighs ${GENERAL_READER_WEIGHT}: refused before the yaml package builds its document`, () => {
    // An anchor takes the document to the general reader: 7 descriptors of 11 nodes fit 16 x 10 in
    // block style, not a quarter of it.
    const text = blockConfig(7).replace('domain: d', 'domain: &dom d');
    expect(() => loadConfig([{ name: 'g.yaml', content: text }], opts(10))).toThrow(
      new ConfigError(
        'g.yaml: the configuration has up to 82 YAML nodes outside the block style (flow collections, anchors, tags, multi-line or escaped scalars): ' +
          'read that way a node takes 4 times the memory, so it may hold 40 where block style may hold 160 (16 for each of the 10 descriptors CONFIG_MAX_DESCRIPTORS allows); it was not loaded',
      ),
    );
    expect(loadConfig([{ name: 'g.yaml', content: text }], opts(0)).ruleCount).toBe(7);
  });

  test('merges of merges are counted: they cannot grow without bound', () => {
    let text = 'a0: &a0 {k1: 1, k2: 2, k3: 3, k4: 4}\n';
    for (let i = 1; i <= 20; i++) text += `a${i}: &a${i}\n  <<: [*a${i - 1}, *a${i - 1}]\n`;
    text += 'domain: d\n';
    const budget = new LoadBudget(1000);
    expect(() => parseGeneralYaml(text, budget)).toThrow(/more than 16000 YAML nodes/);
  });

  test('the bound of a text is never below the nodes either reader makes (configs and their mutations)', () => {
    const seeds = [blockConfig(3), blockConfig(2).replace(/rate_limit:\n\s+unit: second\n\s+requests_per_unit: (\d+)/g, 'rate_limit: {unit: second, requests_per_unit: $1}')];
    for (const dir of ['test/config/fixtures', 'examples']) {
      const walk = (d: string): void => {
        for (const e of fs.readdirSync(d, { withFileTypes: true })) {
          const full = path.join(d, e.name);
          if (e.isDirectory()) walk(full);
          else if (/\.ya?ml$/.test(e.name)) seeds.push(fs.readFileSync(full, 'utf8'));
        }
      };
      walk(path.join(__dirname, '..', '..', dir));
    }
    const bits = [' ', ':', ': ', '- ', '-', '? ', ',', '[', ']', '{', '}', '{}', '[]', '"', "'", '#', ' #', '\n', '\n  ', '&a ', '*a', '!!str ', '|', '---\n', '...\n', 'k: v', 'x'];
    const rng = prng(40);
    let checked = 0;
    for (let i = 0; i < 3000; i++) {
      let doc = pick(rng, seeds);
      for (let k = 0, n = int(rng, 4); k < n; k++) {
        const at = int(rng, doc.length + 1);
        doc = doc.slice(0, at) + pick(rng, bits) + doc.slice(at);
      }
      const bound = countYamlNodes(doc);
      for (const read of [parseBlockYaml, parseGeneralYaml]) {
        const budget = new LoadBudget(1e9);
        try {
          if (read(doc, budget) === undefined) continue;
        } catch {
          continue; // a syntax error
        }
        checked++;
        expect({ doc, made: Math.min(budget.mark().nodes, bound) }).toEqual({ doc, made: budget.mark().nodes });
      }
    }
    expect(checked).toBeGreaterThan(2000);
  });
});
