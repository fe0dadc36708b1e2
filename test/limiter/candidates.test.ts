/**
 * Candidate limits in the decision pipeline (the real config loader, the memory store, an injected
 * clock): the candidate's op rides in the enforced ops' batch and never makes a round trip of its
 * own; what it could not count (local over-limit cache, a store failure, a -1 from the store) is
 * counted as uncounted, and the answer is the rule's.
 */
import { MemoryStore } from '../../src/backends/memory';
import { loadConfig } from '../../src/config/load';
import { ManualClock } from '../../src/platform/clock';
import { LocalCache } from '../../src/limiter/local-cache';
import { RateLimitService, type ServiceFlags } from '../../src/limiter/service';
import { Code, type Descriptor } from '../../src/core/rls';
import { type CounterOp, type CounterStore, StoreError } from '../../src/core/store';
import { StatsStore } from '../../src/stats/store';
import type { CandidateWatch } from '../../src/stats/limits/candidates';

const YAML = `
domain: d
descriptors:
  - key: small
    rate_limit: {unit: minute, requests_per_unit: 2}
    candidate: {unit: minute, requests_per_unit: 1}
  - key: other
    rate_limit: {unit: minute, requests_per_unit: 100}
`;

const FLAGS: ServiceFlags = {
  shadowMode: false,
  quotaMode: false,
  responseDynamicMetadata: false,
  responseHeadersEnabled: false,
  limitHeader: 'a',
  remainingHeader: 'b',
  resetHeader: 'c',
};

/** A store that records each batch and answers from a memory store, or fails, or answers -1 for candidates. */
function recording(mode: 'count' | 'fail' | 'refuse-candidates' = 'count') {
  const mem = new MemoryStore({ maxKeys: 100 });
  const batches: string[][] = [];
  const store: CounterStore = {
    kind: 'recording',
    increment: async (ops: readonly CounterOp[], now: number) => {
      batches.push(ops.map((o) => o.key));
      if (mode === 'fail') throw new StoreError('down', true);
      const counts = await mem.increment(ops, now);
      return mode === 'refuse-candidates' ? counts.map((c, i) => (ops[i]!.follows !== undefined ? -1 : c)) : counts;
    },
    isHealthy: () => true,
    close: () => Promise.resolve(),
  };
  return { store, batches };
}

function setup(store: CounterStore, opts: { localCache?: boolean; failureMode?: 'error' | 'allow' | 'deny' } = {}) {
  const stats = new StatsStore();
  const clock = new ManualClock();
  clock.set(2222 * 1000);
  const config = loadConfig([{ name: 'test.yaml', content: YAML }], { mergeDomainConfig: false, stats });
  stats.limits.adopt(config.rules, 2222);
  const snapshot = { config, flags: FLAGS };
  const service = new RateLimitService({
    store,
    snapshot: () => snapshot,
    stats,
    clock,
    nearLimitRatio: 0.8,
    cacheKeyPrefix: '',
    localCache: opts.localCache ? new LocalCache(0) : undefined,
    failureMode: opts.failureMode,
  });
  const ask = (descriptors: Descriptor[]) => service.shouldRateLimit({ domain: 'd', descriptors, hitsAddend: 0 });
  const watch = (): CandidateWatch => stats.limits.candidateWatches()[0]!;
  return { stats, ask, watch };
}

const d = (key: string, value: string): Descriptor => ({ entries: [{ key, value }] });

describe('candidate limits in the pipeline', () => {
  test('counted in the batch of the enforced key, never alone; the local over-limit cache leaves it uncounted', async () => {
    const { store, batches } = recording();
    const { ask, watch, stats } = setup(store, { localCache: true });
    const codes: Code[] = [];
    for (let i = 0; i < 4; i++) codes.push((await ask([d('small', 'x')])).overallCode);
    // The rule's answers: 2 OK, then over (the store), then over from the local cache.
    expect(codes).toEqual([Code.OK, Code.OK, Code.OVER_LIMIT, Code.OVER_LIMIT]);
    expect(batches).toEqual([
      ['d_small_x_2220', 'd_small_x_2220_cand'],
      ['d_small_x_2220', 'd_small_x_2220_cand'],
      ['d_small_x_2220', 'd_small_x_2220_cand'],
    ]);
    // The 4th call was answered by the local cache: no batch, its candidate uncounted; so is the
    // 5th's, whose other key goes alone.
    await ask([d('small', 'x'), d('other', 'y')]);
    expect(batches[3]).toEqual(['d_other_y_2220']);
    const w = watch();
    expect({ calls: w.calls, hits: w.hits, wouldDeny: w.wouldDeny, wouldLimitHits: w.wouldLimitHits, uncounted: w.uncountedHits, peak: w.peakUsed }).toEqual({
      calls: 3,
      hits: 3,
      wouldDeny: 2,
      wouldLimitHits: 2,
      uncounted: 2,
      peak: 3,
    });
    expect(stats.counter('ratelimit.service.rate_limit.d.small.candidate_would_limit').value).toBe(2);
  });

  test('a store failure answers as BACKEND_FAILURE_MODE says and leaves the candidate uncounted', async () => {
    const allow = setup(recording('fail').store, { failureMode: 'allow' });
    expect((await allow.ask([d('small', 'x')])).overallCode).toBe(Code.OK);
    expect(allow.watch().uncountedHits).toBe(1);
    const error = setup(recording('fail').store, { failureMode: 'error' });
    await expect(error.ask([d('small', 'x')])).rejects.toThrow('down');
    expect(error.watch().uncountedHits).toBe(1);
    expect(error.watch().calls).toBe(0);
  });

  test('a -1 from the store for a candidate (a key it cannot hold) is uncounted, the answer the rule\'s', async () => {
    const { ask, watch } = setup(recording('refuse-candidates').store);
    const r = await ask([d('small', 'x')]);
    expect(r.overallCode).toBe(Code.OK);
    expect(r.statuses[0]!.limitRemaining).toBe(1);
    expect(watch().uncountedHits).toBe(1);
    expect(watch().calls).toBe(0);
  });
});
