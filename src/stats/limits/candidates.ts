/**
 * What one candidate limit (a rule's `candidate:` block) would have done since it was loaded,
 * from the counts the store returned for its own keys (counted in the enforced limit's round
 * trip; the answer never depends on it): the calls and hits counted, the calls it would have
 * denied and the hits over it (`would_limit`, also the counter
 * `ratelimit.service.rate_limit.<key>.candidate_would_limit`), the distinct keys (a HyperLogLog,
 * about ±3 %), the peak utilisation (the largest count over the candidate's capacity) and when it
 * was reached, and its top keys (one Space-Saving summary since the load, fed one counted call in
 * HOT_KEYS_SAMPLE_ONE_IN as the hot keys are). Hits the service could not count for it (the store
 * failed, the local over-limit cache answered the whole request, memcached could not hold the
 * candidate's key) are counted as `uncounted_hits`.
 *
 * Memory: the counters; the estimate (1 KiB) and the summary (3 × HOT_KEYS_TOP_K entries) of at
 * most HOT_KEYS_MAX_RULES candidates, made when one first counts.
 */
import type { Entry } from '../../core/rls';
import { hitsPast, type Algorithm, type RuleWatch } from '../../core/rule';
import type { Counter } from '../store';
import { DistinctEstimate } from './headroom';
import { SpaceSaving } from './space-saving';

/** What a candidate needs of the process-wide limits settings (the book). */
export interface CandidateHost {
  /** HOT_KEYS_TOP_K (0: no top keys). */
  readonly topK: number;
  /** HOT_KEYS_SAMPLE_ONE_IN. */
  readonly sampleOneIn: number;
  /** Whether one more candidate may keep its distinct keys and top keys (HOT_KEYS_MAX_RULES). */
  claimCandidate(): boolean;
  /** The candidate's would_limit counter, made when it first counts. */
  wouldLimitCounter(w: CandidateWatch): Counter;
}

export class CandidateWatch implements RuleWatch {
  /** What counts are compared with: requests_per_unit, or a token bucket's burst. */
  readonly capacity: number;
  private readonly bucket: boolean;
  /** Since when (seconds) the figures run: the load of the config that brought this candidate. */
  sinceS = -1;
  calls = 0;
  hits = 0;
  wouldDeny = 0;
  wouldLimitHits = 0;
  uncountedHits = 0;
  peakUsed = 0;
  peakAtS = -1;
  private distinct: DistinctEstimate | undefined;
  private top: SpaceSaving | undefined;
  /** Not kept (HOT_KEYS_MAX_RULES reached): not asked again. */
  private refused = false;
  private counter: Counter | undefined;
  private skip = 1;

  constructor(
    private readonly host: CandidateHost,
    /** The stats key of the rule the candidate is counted beside. */
    readonly key: string,
    readonly domain: string,
    /** The rule's `name`, '' when it has none. */
    readonly name: string,
    readonly requestsPerUnit: number,
    /** An RLS unit number. */
    readonly unit: number,
    readonly algorithm: Algorithm | undefined,
    readonly burst: number | undefined,
    /** The enforced limit it is counted beside (shown with it). */
    readonly enforced: { readonly requestsPerUnit: number; readonly unit: number; readonly algorithm: Algorithm | undefined },
  ) {
    this.capacity = algorithm === 'token_bucket' ? burst ?? requestsPerUnit : requestsPerUnit;
    this.bucket = algorithm === 'token_bucket';
  }

  counted(stem: string, entries: readonly Entry[], hits: number, after: number, nowS: number): void {
    const cap = this.capacity;
    this.calls++;
    this.hits += hits;
    if (after > cap) {
      const over = hitsPast(cap, hits, after);
      this.wouldDeny++;
      this.wouldLimitHits += over;
      (this.counter ??= this.host.wouldLimitCounter(this)).inc(over);
    }
    // A denied token-bucket request takes no token: what is in use is the count before it.
    const inUse = this.bucket && after > cap ? after - hits : after;
    if (inUse > this.peakUsed) {
      this.peakUsed = inUse;
      this.peakAtS = nowS;
    }
    if (this.refused) return;
    if (this.distinct === undefined) {
      if (!this.host.claimCandidate()) {
        this.refused = true;
        return;
      }
      this.distinct = new DistinctEstimate();
    }
    this.distinct.add(stem);
    const topK = this.host.topK;
    if (topK > 0 && --this.skip <= 0) {
      const n = this.host.sampleOneIn;
      this.skip = n <= 1 ? 1 : 1 + Math.floor(Math.log(1 - Math.random()) / Math.log(1 - 1 / n));
      const over = hitsPast(cap, hits, after);
      // Admitted into a full list only on a repeat, as the hot keys: the store had counted the key.
      (this.top ??= new SpaceSaving(topK * 3)).offer(stem, entries, hits * n, over * n, after > cap ? 0 : cap - after, nowS, after > hits);
    }
  }

  /** The local over-limit cache answered the enforced limit: a candidate key is never cached. */
  overInCache(): void {}

  /** Hits the service could not count for the candidate. */
  uncounted(hits: number): void {
    this.uncountedHits += hits;
  }

  /** The distinct keys counted since the load (an estimate), or undefined when not kept. */
  distinctKeys(): number | undefined {
    return this.distinct?.estimate();
  }

  /** The distinct keys estimate as text (worker mode merges them), or undefined when not kept. */
  distinctKeysText(): string | undefined {
    return this.distinct?.toText();
  }

  /** The top keys summary, if any call was sampled into it. */
  topKeys(): SpaceSaving | undefined {
    return this.top;
  }

  /** Whether `old` (the same rule's candidate in the config before a reload) counted the same limit. */
  sameAs(old: CandidateWatch): boolean {
    return old.key === this.key && old.requestsPerUnit === this.requestsPerUnit && old.unit === this.unit &&
      old.algorithm === this.algorithm && old.burst === this.burst;
  }

  /** Takes over the figures of the same candidate before a reload (the config did not change it). */
  inherit(old: CandidateWatch): void {
    this.sinceS = old.sinceS;
    this.calls = old.calls;
    this.hits = old.hits;
    this.wouldDeny = old.wouldDeny;
    this.wouldLimitHits = old.wouldLimitHits;
    this.uncountedHits = old.uncountedHits;
    this.peakUsed = old.peakUsed;
    this.peakAtS = old.peakAtS;
    this.distinct = old.distinct;
    this.top = old.top;
    this.refused = old.refused;
    this.counter = old.counter;
  }

  /** Whether it keeps distinct and top keys (counted against HOT_KEYS_MAX_RULES by the book). */
  get tracked(): boolean {
    return this.distinct !== undefined;
  }
}
