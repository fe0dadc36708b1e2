/**
 * What the limits book keeps of candidate limits (src/stats/limits/candidates.ts) across reloads:
 * an unchanged candidate keeps its figures and their start, a changed one starts again at the
 * reload; /debug/candidates shows hashed values with DEBUG_VALUES=hash; the candidates with
 * distinct and top keys are bounded by HOT_KEYS_MAX_RULES.
 */
import { loadConfig } from '../../src/config/load';
import type { RateLimitConfig } from '../../src/config/types';
import type { CandidateWatch } from '../../src/stats/limits/candidates';
import { StatsStore } from '../../src/stats/store';

const yaml = (candidatePerDay: number, rules = 1): string =>
  'domain: d\ndescriptors:\n' +
  Array.from({ length: rules }, (_, i) => `  - key: k${i}\n    rate_limit: {unit: day, requests_per_unit: 10}\n    candidate: {unit: day, requests_per_unit: ${candidatePerDay}}\n`).join('');

function load(stats: StatsStore, text: string, nowS: number): RateLimitConfig {
  const config = loadConfig([{ name: 'd.yaml', content: text }], { mergeDomainConfig: false, stats });
  stats.limits.adopt(config.rules, nowS);
  return config;
}

const watchOf = (config: RateLimitConfig, i = 0): CandidateWatch => [...config.rules][i]!.candidate!.watch as CandidateWatch;

/** `n` counted calls of `value` on the candidate, as the limiter feeds it (count after = 1..n). */
function feed(w: CandidateWatch, value: string, n: number, nowS: number): void {
  for (let c = 1; c <= n; c++) w.counted(`d_k0_${value}_`, [{ key: 'k0', value }], 1, c, nowS);
}

type Page = { candidates: Array<Record<string, unknown> & { top_keys: Array<Record<string, unknown>> }>; candidates_not_tracked: number };
const page = (stats: StatsStore, q = '', nowS = 1000): Page => JSON.parse(stats.limits.candidatesPage(new URLSearchParams(q), nowS).body) as Page;

describe('candidate limits in the limits book', () => {
  test('a reload keeps an unchanged candidate\'s figures and start; a changed one starts again', () => {
    const stats = new StatsStore();
    stats.limits.configure({ sampleOneIn: 1 });
    const first = load(stats, yaml(2), 100);
    feed(watchOf(first), 'alice', 3, 150);
    const same = load(stats, yaml(2), 200);
    expect(watchOf(same)).not.toBe(watchOf(first));
    expect(page(stats).candidates[0]).toMatchObject({ since: new Date(100_000).toISOString(), calls: 3, would_deny: 1, peak_used: 3, distinct_keys: 1 });
    const changed = load(stats, yaml(5), 300);
    expect(page(stats).candidates[0]).toMatchObject({ since: new Date(300_000).toISOString(), calls: 0, would_deny: 0, peak_used: 0, top_keys: [] });
    feed(watchOf(changed), 'bob', 1, 310);
    expect(page(stats).candidates[0]).toMatchObject({ calls: 1, peak_utilization: 0.2 });
  });

  test('DEBUG_VALUES=hash shows digests, hide shows no keys', () => {
    const stats = new StatsStore();
    stats.limits.configure({ sampleOneIn: 1, values: 'hash' });
    feed(watchOf(load(stats, yaml(2), 100)), 'alice', 3, 150);
    const hashed = page(stats).candidates[0]!.top_keys[0]!;
    expect(hashed['entries']).toMatch(/^#[0-9a-f]{16}$/);
    expect(JSON.stringify(page(stats))).not.toContain('alice');
    stats.limits.configure({ values: 'hide' });
    expect(page(stats).candidates[0]!.top_keys[0]).toEqual(expect.not.objectContaining({ entries: expect.anything() }));
  });

  test('at most HOT_KEYS_MAX_RULES candidates keep distinct and top keys; the others their counters', () => {
    const stats = new StatsStore();
    stats.limits.configure({ sampleOneIn: 1, maxRules: 2 });
    const config = load(stats, yaml(2, 3), 100);
    for (let i = 0; i < 3; i++) feed(watchOf(config, i), 'v', 3, 150);
    const p = page(stats);
    expect(p.candidates_not_tracked).toBe(1);
    expect(p.candidates.map((c) => c['distinct_keys'])).toEqual([1, 1, undefined]);
    expect(p.candidates.map((c) => c['would_deny'])).toEqual([1, 1, 1]);
  });
});
