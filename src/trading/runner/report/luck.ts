/**
 * Could luck alone explain a sweep's result? A sweep that tries K parameter sets and keeps the best
 * finds a "winner" even on a market with no edge at all: the best of K is biased upwards, the more
 * so the larger K. These tests account for that.
 *
 * - In sample, per fold: White's reality check (White 2000, "A Reality Check for Data Snooping"),
 *   studentized as in Hansen's SPA test: the statistic is the best set's t-value of mean P/L per
 *   period, max_k √n·mean_k/sd_k; its distribution under "no set has an edge" is bootstrapped by
 *   resampling the periods of all K series together (Politis & Romano's stationary bootstrap, which
 *   keeps the series' dependence on each other and over time) and centring each set on its own mean.
 *   The p-value is the share of resamples whose best is at least the observed best.
 * - Over the folds: Fisher's method combines the folds' p-values (the folds are disjoint windows).
 * - Out of sample: the same bootstrap with one series, the chosen sets' joined out-of-sample P/L:
 *   how often a strategy with no edge makes at least that much.
 *
 * The periods are the equity curve cut into at most MAX_PERIODS consecutive runs of bars (P/L per
 * period, marked to market), so the cost does not grow with the bars. The randomness is seeded:
 * the same sweep gives the same p-values, whatever the number of worker threads.
 */
import { mulberry32 } from '../../../platform/random';
import type { EquityPoint } from '../results';

/** Below this p-value a result is told apart from luck. */
export const LUCK_ALPHA = 0.05;
/** Resamples of the bootstrap: p-values to about ±0.007 around 0.05. */
export const BOOTSTRAP_SAMPLES = 1000;
/** Periods a run's P/L is cut into for the tests. */
export const MAX_PERIODS = 100;
/** The bootstrap's seed (each fold adds its number, so folds draw differently but reproducibly). */
export const LUCK_SEED = 20_000_101;

export const LUCK_METHOD =
  "White's reality check (studentized; stationary bootstrap of P/L per period, " +
  `${BOOTSTRAP_SAMPLES} resamples) over every parameter set of a fold; folds combined by Fisher's method; ` +
  `out of sample the same bootstrap of the joined runs; luck unless p < ${LUCK_ALPHA}`;

/**
 * P/L per period of an equity curve: its points cut into at most `periods` runs of (nearly) equal
 * length, each the change in equity over its run (the first from `startBalance`).
 */
export function periodPL(equity: readonly EquityPoint[], startBalance: number, periods = MAX_PERIODS): number[] {
  const n = equity.length;
  const m = Math.min(n, periods);
  const out: number[] = [];
  let before = startBalance;
  for (let k = 0; k < m; k++) {
    const last = equity[Math.floor(((k + 1) * n) / m) - 1]!.equity;
    out.push(last - before);
    before = last;
  }
  return out;
}

function meanAndSd(xs: readonly number[]): [number, number] {
  const n = xs.length;
  const mean = xs.reduce((a, b) => a + b, 0) / n;
  const variance = n > 1 ? xs.reduce((a, x) => a + (x - mean) ** 2, 0) / (n - 1) : 0;
  return [mean, Math.sqrt(variance)];
}

/**
 * The reality check's p-value for `series` (one per parameter set, all of one length: P/L per
 * period): how often the best studentized mean of resampled, centred series reaches the observed
 * best. Null when no series varies (nothing traded) or there is less than two periods.
 */
export function realityCheck(series: readonly (readonly number[])[], seed: number, samples = BOOTSTRAP_SAMPLES): number | null {
  const moving = series.map((s) => [s, ...meanAndSd(s)] as const).filter(([, , sd]) => sd > 1e-12);
  const n = moving[0]?.[0].length ?? 0;
  if (n < 2) return null;
  const root = Math.sqrt(n);
  const observed = Math.max(...moving.map(([, mean, sd]) => (root * mean) / sd));
  const rng = mulberry32(seed);
  const counts = new Float64Array(n);
  // mean block length n^(1/3): long enough to keep the dependence of neighbouring periods
  const restart = 1 / Math.max(1, Math.round(Math.cbrt(n)));
  let reached = 0;
  for (let b = 0; b < samples; b++) {
    counts.fill(0);
    let i = Math.floor(rng() * n);
    for (let t = 0; t < n; t++) {
      counts[i]!++;
      i = rng() < restart ? Math.floor(rng() * n) : (i + 1) % n;
    }
    let best = -Infinity;
    for (const [s, mean, sd] of moving) {
      let sum = 0;
      for (let t = 0; t < n; t++) sum += counts[t]! * s[t]!;
      const z = (root * (sum / n - mean)) / sd;
      if (z > best) best = z;
    }
    if (best >= observed) reached++;
  }
  return (reached + 1) / (samples + 1);
}

/**
 * Fisher's method: the p-value of −2·Σ ln pᵢ against χ² with 2k degrees of freedom (closed form
 * for an even number of degrees of freedom).
 */
export function fisherCombined(pValues: readonly number[]): number {
  if (pValues.length === 0) return 1;
  const half = -pValues.reduce((s, p) => s + Math.log(p), 0);
  let term = 1;
  let sum = 1;
  for (let j = 1; j < pValues.length; j++) {
    term *= half / j;
    sum += term;
  }
  return Math.min(1, Math.exp(-half) * sum);
}
