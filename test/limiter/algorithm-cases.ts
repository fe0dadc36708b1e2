/**
 * Shared cases for the rate limiting algorithms (extension), run against every store: the same
 * service, a ManualClock, and steady / bursty arrival patterns whose maximum admitted count in
 * any window of the unit's length is compared with each algorithm's documented bound.
 */
import type { CounterStore } from '../../src/core/store';
import { loadConfig } from '../../src/config/load';
import { ManualClock } from '../../src/platform/clock';
import { RateLimitService, type ServiceFlags } from '../../src/limiter/service';
import { Code, type Descriptor } from '../../src/core/rls';
import { StatsStore } from '../../src/stats/store';

export const L = 10;

export const ALGO_YAML = `
domain: algo
descriptors:
  - key: fixed
    rate_limit: {unit: second, requests_per_unit: ${L}}
  - key: sliding
    rate_limit: {unit: second, requests_per_unit: ${L}, algorithm: sliding_window}
  - key: bucket
    rate_limit: {unit: second, requests_per_unit: ${L}, algorithm: token_bucket}
  - key: smooth
    rate_limit: {unit: second, requests_per_unit: ${L}, algorithm: token_bucket, burst: 1}
  - key: multi
    rate_limit: {unit: second, requests_per_unit: 5}
    rate_limits:
      - {unit: minute, requests_per_unit: 8, algorithm: sliding_window}
      - {unit: hour, requests_per_unit: 20, algorithm: token_bucket, burst: 3}
`;

export const FLAGS: ServiceFlags = {
  shadowMode: false,
  quotaMode: false,
  responseDynamicMetadata: false,
  responseHeadersEnabled: true,
  limitHeader: 'X-RateLimit-Limit',
  remainingHeader: 'X-RateLimit-Remaining',
  resetHeader: 'X-RateLimit-Reset',
};

/** Documented bound: the most admitted in any half-open window of the unit's length. */
export const BOUND: Record<string, { steady: number; bursty: number }> = {
  // Upstream's fixed window: up to twice the limit across a window edge.
  fixed: { steady: 2 * L, bursty: 2 * L },
  // Weighted two windows: L + L·f < 2L at worst (a burst at a window's end, then a flood).
  sliding: { steady: 2 * L - 1, bursty: 2 * L - 1 },
  // GCRA: requests_per_unit + burst − 1 (here burst = L).
  bucket: { steady: 2 * L - 1, bursty: 2 * L - 1 },
  // GCRA with burst 1: never more than the limit.
  smooth: { steady: L, bursty: L },
};

export function setup(store: CounterStore, prefix = '', yaml = ALGO_YAML) {
  const stats = new StatsStore();
  const clock = new ManualClock();
  const config = loadConfig([{ name: 'algo.yaml', content: yaml }], { mergeDomainConfig: false, stats });
  const snapshot = { config, flags: FLAGS };
  const service = new RateLimitService({ store, snapshot: () => snapshot, stats, clock, nearLimitRatio: 0.8, cacheKeyPrefix: prefix });
  const ask = (key: string, value = 'v', hitsAddend = 0) =>
    service.shouldRateLimit({ domain: 'algo', descriptors: [{ entries: [{ key, value }] } as Descriptor], hitsAddend });
  return { stats, clock, service, ask };
}

/** Steady: one request every 25 ms (4x the limit) for 5 s. */
export function steady(startMs: number): number[] {
  const out: number[] = [];
  for (let t = 0; t < 5000; t += 25) out.push(startMs + t);
  return out;
}

/** Bursty: 3L requests at once around window edges, and floods right after a burst. */
export function bursty(startMs: number): number[] {
  const out: number[] = [];
  for (let k = 1; k <= 4; k++) {
    const edge = startMs + k * 1000;
    for (let j = 0; j < 3 * L; j++) out.push(edge - 1);
    for (let j = 0; j < 3 * L; j++) out.push(edge);
    for (let t = edge + 10; t < edge + 990; t += 10) out.push(t);
  }
  return out.sort((a, b) => a - b);
}

/** Drives the arrivals through the service; returns the admission times. */
export async function drive(
  s: ReturnType<typeof setup>,
  key: string,
  value: string,
  arrivals: readonly number[],
  between?: () => Promise<unknown>,
): Promise<number[]> {
  const admitted: number[] = [];
  for (const t of arrivals) {
    s.clock.set((t / 1000) * 1000);
    const res = await s.ask(key, value);
    if (res.overallCode === Code.OK) admitted.push(t);
    if (between !== undefined) await between();
  }
  return admitted;
}

/** The most admissions in any window [t, t + unitMs). */
export function maxInWindow(times: readonly number[], unitMs: number): number {
  let best = 0;
  let lo = 0;
  for (let hi = 0; hi < times.length; hi++) {
    while (times[hi]! - times[lo]! >= unitMs) lo++;
    best = Math.max(best, hi - lo + 1);
  }
  return best;
}

/**
 * A token bucket that is drained, sits idle for `idleMs`, then receives 3 × its burst at one
 * instant: exactly `burst` are admitted (a bucket refills to its burst, never beyond). Returns
 * the admitted count of the final burst. Catches a GCRA that keeps a past TAT as its base, which
 * would admit idle / T requests at once.
 */
export async function burstAfterIdle(s: ReturnType<typeof setup>, key: 'bucket' | 'smooth', value: string, startMs: number, idleMs: number): Promise<number> {
  s.clock.set(startMs);
  for (let i = 0; i < 3 * L; i++) await s.ask(key, value);
  s.clock.set(startMs + idleMs);
  let admitted = 0;
  for (let i = 0; i < 3 * L; i++) if ((await s.ask(key, value)).overallCode === Code.OK) admitted++;
  return admitted;
}
