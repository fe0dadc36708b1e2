/**
 * The hot keys of a loaded limit (src/stats/limits/): against exact counts of a seeded Zipf stream
 * (every listed count within its stated bounds, every key heavier than the bound listed, the
 * heaviest in order), across the periods of the minute and the hour, under a spray of distinct
 * values with a watched hot key (it stays listed with its exact count, the memory stays at the
 * bound), and the sampled mode's estimates.
 */
import type { RateLimitRule } from '../../src/core/rule';
import { StatsStore } from '../../src/stats/store';
import { CAPACITY_PER_K } from '../../src/stats/limits/book';
import type { RuleWindow } from '../../src/stats/limits/headroom';
import { prng, zipf } from '../support/prng';

const K = 10;
const CAPACITY = K * CAPACITY_PER_K;
const MINUTE_UNIT = 2; // RLS Unit MINUTE

/** A limit's window and a store that counts exactly per key and window, as the real ones do. */
function limit(opts: { sampleOneIn?: number; requestsPerUnit?: number } = {}): { w: RuleWindow; hit: (value: string, nowS: number) => void; stats: StatsStore } {
  const stats = new StatsStore();
  stats.limits.configure({ topK: K, sampleOneIn: opts.sampleOneIn ?? 1 });
  const w = stats.limits.watch('d.user', 'd', { name: '', requestsPerUnit: opts.requestsPerUnit ?? 1e9, unit: MINUTE_UNIT }, undefined, undefined);
  // As a config swap does: its limits' windows are the ones published.
  stats.limits.adopt([{ watch: w } as unknown as RateLimitRule]);
  const counts = new Map<string, number>();
  const hit = (value: string, nowS: number): void => {
    const stem = 'd_user_' + value + '_';
    const key = stem + (nowS - (nowS % 60));
    const after = (counts.get(key) ?? 0) + 1;
    counts.set(key, after);
    w.counted(stem, [{ key: 'user', value }], 1, after, nowS);
  };
  return { w, hit, stats };
}

function checkAgainstExact(view: ReturnType<NonNullable<ReturnType<RuleWindow['hotKeys']>>['view']>, exact: Map<string, number>, total: number): void {
  expect(view.total).toBe(total);
  const bound = total / CAPACITY;
  // Every listed key: true count in [count - error, count], error at most total / capacity ...
  for (const e of view.entries.values()) {
    const truth = exact.get(e.key) ?? 0;
    expect(e.count).toBeGreaterThanOrEqual(truth);
    expect(e.count - e.error).toBeLessThanOrEqual(truth);
    expect(e.error).toBeLessThanOrEqual(bound * 1.0000001);
  }
  // ... and every key heavier than that bound is listed.
  for (const [key, n] of exact) if (n > bound) expect(view.entries.has(key)).toBe(true);
}

describe('hot keys against exact counts', () => {
  test('a seeded Zipf stream in one 15-second period: bounds hold, the top keys are the true top keys', () => {
    const { w, hit } = limit();
    const draw = zipf(prng(43), 5000, 1.1);
    const exact = new Map<string, number>();
    const N = 200_000;
    const t0 = 1_000_000_020; // a 15-second period starts at ...020? no matter: all in one period below
    const start = t0 - (t0 % 15);
    for (let i = 0; i < N; i++) {
      const v = 'u' + draw();
      hit(v, start + 3);
      const stem = 'd_user_' + v + '_';
      exact.set(stem, (exact.get(stem) ?? 0) + 1);
    }
    const view = w.hotKeys()!.view('minute', start + 5);
    checkAgainstExact(view, exact, N);
    const trueTop = [...exact.entries()].sort((a, b) => b[1] - a[1]).slice(0, 5).map(([k]) => k);
    const shownTop = [...view.entries.values()].sort((a, b) => b.count - a.count).slice(0, 5).map((e) => e.key);
    expect(shownTop).toEqual(trueTop);
  });

  test('spread over an hour: the minute and the hour views merge their periods within the summed bounds', () => {
    const { w, hit } = limit();
    const rng = prng(7);
    const draw = zipf(rng, 2000, 1.2);
    const begin = 1_800_000_000 - (1_800_000_000 % 900);
    const end = begin + 3600 + 600;
    const events: Array<[string, number]> = [];
    for (let t = begin; t < end; t += 1) for (let j = 0; j < 20; j++) events.push(['u' + draw(), t]);
    for (const [v, t] of events) hit(v, t);
    const nowS = end - 1;
    for (const horizon of ['minute', 'hour'] as const) {
      const view = w.hotKeys()!.view(horizon, nowS);
      // What the horizon covers: its periods that started within it (45-60 s, 45-60 min).
      const slot = horizon === 'minute' ? 15 : 900;
      const span = horizon === 'minute' ? 60 : 3600;
      const from = nowS - (nowS % 15) - (horizon === 'minute' ? 45 : 0);
      const fromH = nowS - (nowS % slot) - (span - slot);
      const since = horizon === 'minute' ? from : fromH;
      const exact = new Map<string, number>();
      let total = 0;
      for (const [v, t] of events) {
        if (t < since) continue;
        total++;
        const stem = 'd_user_' + v + '_';
        exact.set(stem, (exact.get(stem) ?? 0) + 1);
      }
      // The merge's bound is the sum of its parts': total / capacity overall.
      checkAgainstExact(view, exact, total);
    }
  });
});

describe('a spray of distinct values', () => {
  test('cannot push a watched hot key out; the lists stay at their bound', () => {
    const { w, hit, stats } = limit();
    const start = 1_900_000_000 - (1_900_000_000 % 60);
    let hot = 0;
    const SPRAY = 1_000_000;
    for (let i = 0; i < SPRAY; i++) {
      const nowS = start + Math.floor((i * 59) / SPRAY); // within one minute window of the rule
      hit('spray-' + i, nowS);
      if (i % 100 === 0) {
        hit('watched', nowS);
        hot++;
      }
    }
    const nowS = start + 59;
    for (const horizon of ['minute', 'hour'] as const) {
      const view = w.hotKeys()!.view(horizon, nowS);
      const watched = view.entries.get('d_user_watched_');
      expect(watched).toBeDefined();
      expect(view.entries.size).toBeLessThanOrEqual(CAPACITY);
    }
    // Its count over the minute view: every hit since it was listed, at its second hit at the latest.
    const minute = w.hotKeys()!.view('minute', nowS);
    const seen = minute.entries.get('d_user_watched_')!;
    expect(seen.count - seen.error).toBeGreaterThanOrEqual(hot - 1 - 15); // at most its first hit of each 15-second period before it was listed
    // The debug page lists it first, spray values not at all beyond the free places.
    const page = JSON.parse(stats.limits.hotKeysPage(new URLSearchParams(''), nowS).body) as { minute: Array<{ entries: string; hits: number }> };
    expect(page.minute[0]!.entries).toBe('user=watched');
  });
});

describe('sampling (HOT_KEYS_SAMPLE_ONE_IN)', () => {
  test('one call in 8, weighted 8: the heaviest keys are found, their counts near the truth', () => {
    const { w, hit } = limit({ sampleOneIn: 8 });
    const draw = zipf(prng(99), 1000, 1.2);
    const exact = new Map<string, number>();
    const start = 2_000_000_000 - (2_000_000_000 % 15);
    const N = 400_000;
    for (let i = 0; i < N; i++) {
      const v = 'u' + draw();
      hit(v, start + 1);
      exact.set('d_user_' + v + '_', (exact.get('d_user_' + v + '_') ?? 0) + 1);
    }
    const view = w.hotKeys()!.view('minute', start + 2);
    const top3 = [...exact.entries()].sort((a, b) => b[1] - a[1]).slice(0, 3);
    for (const [key, truth] of top3) {
      const e = view.entries.get(key)!;
      expect(e).toBeDefined();
      // Sampling error (a binomial of mean truth/8, weighted 8): well within 5 % at these counts.
      expect(Math.abs(e.count - truth) / truth).toBeLessThan(0.05);
    }
    expect(Math.abs(view.total - N) / N).toBeLessThan(0.02);
  });
});
