/**
 * Worker mode's merged /debug/hotkeys and /debug/candidates (src/stats/limits/pages.ts): two
 * processes share one store (each sees the shared count) and each gets part of a seeded Zipf
 * stream; their parts, through JSON as over IPC, merge into one page whose hot keys hold the
 * Space-Saving bounds against the exact counts of the whole stream, and whose candidate figures
 * are the sums, the largest peak and the union of the distinct keys (the same estimate as one
 * process fed every key).
 */
import type { RateLimitRule } from '../../src/core/rule';
import { candidatesPage, hotKeysPage, limitsPage, CAPACITY_PER_K, type CandidatesPart, type HotKeysPart, type LimitsPart } from '../../src/stats/limits/pages';
import { StatsStore } from '../../src/stats/store';
import { prng, zipf } from '../support/prng';

const K = 10;
const MINUTE_UNIT = 2; // RLS Unit MINUTE
const SETTINGS = { values: 'plain', topK: K, sampleOneIn: 1 } as const;

/** One process's book with one limit of `requestsPerUnit` a minute and a candidate of `candidate`. */
function processBook(requestsPerUnit: number, candidate: number) {
  const stats = new StatsStore();
  stats.limits.configure({ topK: K, sampleOneIn: 1 });
  const limit = { name: '', requestsPerUnit, unit: MINUTE_UNIT };
  const w = stats.limits.watch('d.user', 'd', limit, undefined, undefined);
  const c = stats.limits.candidate('d.user', 'd', '', { requestsPerUnit: candidate, unit: MINUTE_UNIT }, undefined, undefined, { requestsPerUnit, unit: MINUTE_UNIT, algorithm: undefined });
  stats.limits.adopt([{ watch: w, candidate: { watch: c } } as unknown as RateLimitRule], 0);
  return {
    stats,
    counted: (value: string, after: number, candidateAfter: number, nowS: number) => {
      const stem = 'd_user_' + value + '_';
      w.counted(stem, [{ key: 'user', value }], 1, after, nowS);
      c.counted(stem, [{ key: 'user', value }], 1, candidateAfter, nowS);
    },
  };
}

/** A part as the primary gets it: through JSON. */
const overIpc = <T>(part: T | { status: number }): T => {
  if (typeof part === 'object' && part !== null && 'status' in part) throw new Error(`refused: ${JSON.stringify(part)}`);
  return JSON.parse(JSON.stringify(part)) as T;
};

test('two processes\' parts merge: hot keys within the bounds of the whole stream, candidate figures as one process would have counted', () => {
  const rng = prng(46);
  const draw = zipf(rng, 2000, 1.2);
  const a = processBook(1e9, 50);
  const b = processBook(1e9, 50);
  const whole = processBook(1e9, 50);
  // The shared store's counts: each call sees the count after it, whichever process made it.
  const exact = new Map<string, number>();
  const nowS = 1_000_000_000 - (1_000_000_000 % 60) + 3;
  const calls = 60_000;
  let overCandidate = 0;
  let peak = 0;
  for (let i = 0; i < calls; i++) {
    const v = 'u' + draw();
    const after = (exact.get(v) ?? 0) + 1;
    exact.set(v, after);
    if (after > 50) overCandidate++;
    peak = Math.max(peak, after);
    (rng() < 0.5 ? a : b).counted(v, after, after, nowS);
    whole.counted(v, after, after, nowS);
  }
  const q = new URLSearchParams('domain=d&rule=user');

  const hot = JSON.parse(hotKeysPage([a, b].map((p) => overIpc<HotKeysPart>(p.stats.limits.hotKeysPart(q, nowS))), SETTINGS)) as {
    minute: Array<{ entries: string; hits: number; error: number; limit_hits: number }>;
  };
  expect(hot.minute).toHaveLength(K);
  // The merged bound: each part's error at most its total over the capacity, so at most the whole's.
  const bound = calls / (K * CAPACITY_PER_K);
  for (const e of hot.minute) {
    const truth = exact.get(e.entries.slice('user='.length))!;
    expect(e.hits).toBeGreaterThanOrEqual(truth);
    expect(e.hits - e.error).toBeLessThanOrEqual(truth);
    expect(e.error).toBeLessThanOrEqual(bound);
    expect(e.limit_hits).toBe(calls);
  }
  // The heaviest keys, in their true order (Zipf 1.2 separates them by far more than the bound).
  const trueTop = [...exact.entries()].sort((x, y) => y[1] - x[1]).slice(0, 5).map(([v]) => `user=${v}`);
  expect(hot.minute.slice(0, 5).map((e) => e.entries)).toEqual(trueTop);

  type Cand = { calls: number; hits: number; would_deny: number; would_limit_hits: number; distinct_keys: number; peak_used: number; top_keys: Array<{ entries: string }> };
  const page = (parts: CandidatesPart[]): Cand => (JSON.parse(candidatesPage(parts, SETTINGS, nowS + 10)) as { candidates: Cand[] }).candidates[0]!;
  const merged = page([a, b].map((p) => overIpc<CandidatesPart>(p.stats.limits.candidatesPart(new URLSearchParams()))));
  const one = page([overIpc<CandidatesPart>(whole.stats.limits.candidatesPart(new URLSearchParams()))]);
  expect(merged).toMatchObject({ calls, hits: calls, would_deny: overCandidate, would_limit_hits: overCandidate, peak_used: peak });
  // The union of the two estimates is the estimate of every key: not the sum of the two.
  expect(merged.distinct_keys).toBe(one.distinct_keys);
  expect(merged.distinct_keys).toBeGreaterThan(exact.size * 0.9);
  expect(merged.distinct_keys).toBeLessThan(exact.size * 1.1);
  expect(merged.top_keys.slice(0, 5).map((e) => e.entries)).toEqual(trueTop);
});

test('a key seen by one process only: the other\'s floor is added to its count and error, so the bounds still hold', () => {
  const a = processBook(1e9, 1e9);
  const b = processBook(1e9, 1e9);
  const nowS = 2_000_000_000 - (2_000_000_000 % 60) + 1;
  // b's list is full of keys seen twice each (its floor is 2); "only-a" is never offered to b.
  for (let i = 0; i < K * CAPACITY_PER_K; i++) for (let j = 1; j <= 2; j++) b.counted(`b${i}`, j, j, nowS);
  for (let j = 1; j <= 7; j++) a.counted('only-a', j, j, nowS);
  const q = new URLSearchParams('domain=d&rule=user&k=1');
  const page = JSON.parse(hotKeysPage([a, b].map((p) => overIpc<HotKeysPart>(p.stats.limits.hotKeysPart(q, nowS))), SETTINGS)) as {
    minute: Array<{ entries: string; hits: number; error: number }>;
  };
  expect(page.minute).toEqual([expect.objectContaining({ entries: 'user=only-a', hits: 9, error: 2 })]);
});

test('/debug/limits: each limit\'s over-limit hits per 30 s over 15 minutes, merged over processes by sum, older periods dropped', () => {
  const a = processBook(2, 1e9);
  const b = processBook(2, 1e9);
  const t0 = 3_000_000_000 - (3_000_000_000 % 60);
  // a: counts 1..4 at t0 (2 over the limit of 2); b: count 5 at t0 + 30 (1 over), count 7 by 2 hits at t0 + 31 (2 over).
  for (let n = 1; n <= 4; n++) a.counted('x', n, n, t0);
  b.counted('x', 5, 5, t0 + 30);
  b.stats.limits.windows()[0]!.counted('d_user_x_', [{ key: 'user', value: 'x' }], 2, 7, t0 + 31);
  const page = (nowS: number) =>
    JSON.parse(limitsPage([a, b].map((p) => overIpc<LimitsPart>(p.stats.limits.limitsPart(new URLSearchParams(), nowS))))) as {
      denial_period_seconds: number;
      limits: Array<{ window_used: number; over_limit_hits_per_period: number[] }>;
    };
  const now = page(t0 + 40);
  expect(now.denial_period_seconds).toBe(30);
  expect(now.limits[0]!.window_used).toBe(7);
  const series = now.limits[0]!.over_limit_hits_per_period;
  expect(series).toHaveLength(30);
  expect(series.slice(-2)).toEqual([2, 3]);
  expect(series.slice(0, -2).every((n) => n === 0)).toBe(true);
  // 15 minutes later the t0 period has left the series; the t0 + 30 one is the oldest.
  expect(page(t0 + 30 + 29 * 30).limits[0]!.over_limit_hits_per_period[0]).toBe(3);
  expect(page(t0 + 30 + 30 * 30).limits[0]!.over_limit_hits_per_period.every((n) => n === 0)).toBe(true);
});
