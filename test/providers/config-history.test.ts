/**
 * The config history's contract beyond the e2e test: a config bigger than a slice is walked over
 * several turns of the event loop with the same result, the diff lists at most MAX_LISTED limits
 * with exact counts, loads land in the order they happened, the history keeps N, and the info
 * gauge moves with the version.
 */
import { ConfigHistory, MAX_LISTED, SLICE_RULES } from '../../src/providers/config-history';
import { ManualClock } from '../../src/platform/clock';
import { StatsStore } from '../../src/stats/store';
import { load } from '../config/helpers';

function rules(n: number, rpu = 1, from = 0): string {
  let s = 'domain: h\ndescriptors:\n';
  for (let i = from; i < from + n; i++) s += `  - key: k\n    value: v${i}\n    rate_limit: {unit: minute, requests_per_unit: ${rpu}}\n`;
  return s;
}

function history(size = 5) {
  const stats = new StatsStore();
  const lines: string[] = [];
  const h = new ConfigHistory({ size, clock: new ManualClock(1_700_000_000_000), stats, logger: { info: (m) => lines.push(m) } });
  return { h, stats, lines };
}

async function entries(h: ConfigHistory, limit = 5) {
  return (JSON.parse(await h.page({ limit, before: undefined })) as { history: Array<Record<string, any>> }).history;
}

describe('ConfigHistory', () => {
  test('a config of several slices: walked across turns, counted exactly, listed up to the cap', async () => {
    const n = SLICE_RULES * 2 + 10;
    const { h } = history();
    const a = load(rules(n));
    h.loaded(undefined, a, { kind: 'files', files: ['a.yaml'] });
    // The walk yields to the loop: nothing is in the history in the same turn.
    expect(h.version).toBeUndefined();
    const b = load(rules(n, 2, 5));
    h.loaded(a, b, { kind: 'xds', version: '7' });
    const [second, first] = await entries(h);
    expect(first).toMatchObject({ outcome: 'loaded', limits: n, diff: { added: n, removed: 0, changed: 0, not_listed: n - MAX_LISTED } });
    expect(first!['diff'].limits).toHaveLength(MAX_LISTED);
    expect(second).toMatchObject({ source: { xds_version: '7' }, previous_version: first!['version'], diff: { added: 5, removed: 5, changed: n - 5 } });
    // The same rules from another build: the same version.
    const again = history();
    again.h.loaded(undefined, load(rules(n, 2, 5)), undefined);
    await again.h.settled();
    expect(again.h.version).toBe(second!['version']);
  });

  test('loads land in order, failed ones included; the history keeps N; the info gauge moves', async () => {
    const { h, stats, lines } = history(2);
    const a = load(rules(3));
    const b = load(rules(3, 9));
    h.loaded(undefined, a, undefined);
    h.failed('a.yaml: bad', { kind: 'files', files: ['a.yaml'] });
    h.loaded(a, b, undefined);
    const page = await entries(h);
    expect(page.map((e) => [e['seq'], e['outcome']])).toEqual([
      [3, 'loaded'],
      [2, 'failed'],
    ]);
    const v1 = page[1]!['version_in_use'];
    expect(page[0]).toMatchObject({ previous_version: v1, diff: { changed: 3 } });
    const gauges = [...stats.gaugeList()].map((g) => [g.name, g.value]);
    expect(gauges.filter(([n]) => String(n).startsWith('ratelimit.config.info'))).toEqual([[`ratelimit.config.info.__version=${h.version}`, 1]]);
    expect(lines).toEqual([
      `config version ${v1} loaded: 3 limits in 1 domains, 3 added, 0 removed, 0 changed`,
      `config version ${h.version} loaded (was ${v1}): 3 limits in 1 domains, 0 added, 0 removed, 3 changed`,
    ]);
  });
});
