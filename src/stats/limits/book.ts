/**
 * What the service shows about its loaded limits' headroom and hot keys: makes each limit's
 * window (headroom.ts) when a config is built, takes the windows of the config that is swapped in
 * (`adopt`), publishes their gauges before each flush, and answers /debug/hotkeys.
 *
 * Gauges, per loaded limit (so as many series as limits, whatever the number of values), once one
 * of its keys was counted: `ratelimit.service.rate_limit.<key>.{limit, window_used, window_keys,
 * window_keys_over_limit, utilization}` (utilization in percent of the limit; the Prometheus
 * mapping scales it to a ratio), tagged `name` when the limit has one. A reload re-publishes them
 * at once with the new limits and removes those of the limits it removed.
 *
 * Bounds: the hot keys of at most HOT_KEYS_MAX_RULES limits (8 × 3·K entries each), and answers of
 * at most 2 × k entries.
 */
import type { RateLimitRule } from '../../core/rule';
import { unitToDivider } from '../../core/rls';
import type { Counter, Gauge, StatsStore } from '../store';
import { replaceTagChars } from '../tags';
import { HotKeys } from './hot-keys';
import { CandidateWatch, type CandidateHost } from './candidates';
import { DENIAL_PERIOD_S, RuleWindow, type WindowHost } from './headroom';
import { CAPACITY_PER_K, candidatesPage, hotKeysPage, summaryPart, type CandidatePart, type CandidatesPart, type HotKeysPart, type LimitPart, type LimitsPart, limitsPage, type PageSettings, type SummaryPart } from './pages';
import type { ValuePrivacy } from '../../telemetry/value-privacy';

export interface LimitsOptions {
  /** HEADROOM_ENABLED: the window gauges (default true). */
  readonly headroom: boolean;
  /** HOT_KEYS_TOP_K: keys listed per limit and horizon; 0 turns hot keys off (default 10). */
  readonly topK: number;
  /** HOT_KEYS_SAMPLE_ONE_IN: one counted call in N feeds the hot keys, weighted N (default 16). */
  readonly sampleOneIn: number;
  /** HOT_KEYS_MAX_RULES: limits whose hot keys are kept (default 1,000). */
  readonly maxRules: number;
  /** DEBUG_VALUES: how values are shown (default plain). */
  readonly values: ValuePrivacy;
}

export const DEFAULT_LIMITS_OPTIONS: LimitsOptions = Object.freeze({ headroom: true, topK: 10, sampleOneIn: 16, maxRules: 1000, values: 'plain' });

export { CAPACITY_PER_K };
/** The largest HOT_KEYS_TOP_K. */
export const MAX_TOP_K = 100;

const GAUGE_STATS = ['limit', 'window_used', 'window_keys', 'window_keys_over_limit', 'utilization'] as const;

/** An answer of a debug page: its status and body (JSON, or a one-line reason). */
export interface PageAnswer {
  readonly status: number;
  readonly body: string;
}

/** Candidates listed per page of /debug/candidates at most, and by default. */
export const MAX_CANDIDATES_PER_PAGE = 1000;
const DEFAULT_CANDIDATES_PER_PAGE = 100;

export class LimitsBook implements WindowHost, CandidateHost {
  headroom = DEFAULT_LIMITS_OPTIONS.headroom;
  topK = DEFAULT_LIMITS_OPTIONS.topK;
  sampleOneIn = DEFAULT_LIMITS_OPTIONS.sampleOneIn;
  private maxRules = DEFAULT_LIMITS_OPTIONS.maxRules;
  private values: ValuePrivacy = DEFAULT_LIMITS_OPTIONS.values;
  private current: RuleWindow[] = [];
  private readonly gauges = new Map<RuleWindow, Gauge[]>();
  private tracked = 0;
  private untracked = 0;
  private candidates: CandidateWatch[] = [];
  private candidatesTracked = 0;
  private candidatesUntracked = 0;

  constructor(
    private readonly stats: StatsStore,
    private readonly prefix: string,
  ) {}

  configure(o: Partial<LimitsOptions>): void {
    if (o.headroom !== undefined) this.headroom = o.headroom;
    if (o.topK !== undefined) this.topK = Math.max(0, Math.min(MAX_TOP_K, Math.floor(o.topK)));
    if (o.sampleOneIn !== undefined) this.sampleOneIn = Math.max(1, Math.floor(o.sampleOneIn));
    if (o.maxRules !== undefined) this.maxRules = Math.max(0, Math.floor(o.maxRules));
    if (o.values !== undefined) this.values = o.values;
  }

  /** The window of one loaded limit (called as a config is built; nothing is published before `adopt`). */
  watch(key: string, domain: string, limit: RateLimitRule['limit'], algorithm: RateLimitRule['algorithm'], burst: number | undefined): RuleWindow {
    return new RuleWindow(this, key, domain, limit.name, limit.requestsPerUnit, limit.unit, unitToDivider(limit.unit), algorithm, burst);
  }

  /** The watch of a rule's candidate limit (called as a config is built). */
  candidate(
    key: string,
    domain: string,
    name: string,
    limit: { readonly requestsPerUnit: number; readonly unit: number },
    algorithm: RateLimitRule['algorithm'],
    burst: number | undefined,
    enforced: { readonly requestsPerUnit: number; readonly unit: number; readonly algorithm: RateLimitRule['algorithm'] },
  ): CandidateWatch {
    return new CandidateWatch(this, key, domain, name, limit.requestsPerUnit, limit.unit, algorithm, burst, enforced);
  }

  claimCandidate(): boolean {
    if (this.candidatesTracked >= this.maxRules) {
      this.candidatesUntracked++;
      return false;
    }
    this.candidatesTracked++;
    return true;
  }

  wouldLimitCounter(w: CandidateWatch): Counter {
    return this.stats.counter(this.prefix + w.key + '.candidate_would_limit');
  }

  claimHotKeys(): HotKeys | undefined {
    if (this.topK === 0) return undefined;
    if (this.tracked >= this.maxRules) {
      this.untracked++;
      return undefined;
    }
    this.tracked++;
    return new HotKeys(this.topK * CAPACITY_PER_K);
  }

  /**
   * The config swapped in: its limits' windows become the ones published. A limit with the same
   * stats key and window length as before keeps what its window and hot keys saw; the gauges of a
   * limit that was published before are re-published at once (a changed limit shows at the next
   * flush or scrape); those of removed limits are removed.
   */
  adopt(rules: Iterable<RateLimitRule>, nowS = 0): void {
    const next: RuleWindow[] = [];
    const byKey = new Map<string, RuleWindow>();
    const nextCandidates: CandidateWatch[] = [];
    for (const r of rules) {
      const c = r.candidate?.watch;
      if (c instanceof CandidateWatch) nextCandidates.push(c);
      const w = r.watch;
      if (!(w instanceof RuleWindow) || byKey.has(w.key)) continue;
      byKey.set(w.key, w);
      next.push(w);
    }
    this.adoptCandidates(nextCandidates, nowS);
    for (const old of this.current) {
      const w = byKey.get(old.key);
      if (w === old) continue;
      if (w !== undefined) w.inherit(old);
      if (w === undefined || w.name !== old.name) this.removeGauges(old);
      else this.gauges.delete(old);
    }
    this.tracked = 0;
    for (const w of next) if (w.hotKeys() !== undefined) this.tracked++;
    this.current = next;
  }

  /**
   * A candidate the reload did not change (same rule, limit, unit and algorithm) keeps its figures
   * and their start; a new or changed one starts at `nowS`.
   */
  private adoptCandidates(next: CandidateWatch[], nowS: number): void {
    const old = new Map<string, CandidateWatch>();
    for (const c of this.candidates) old.set(c.key, c);
    this.candidatesTracked = 0;
    for (const c of next) {
      const o = old.get(c.key);
      if (c.sinceS < 0) {
        if (o !== undefined && o !== c && c.sameAs(o)) c.inherit(o);
        else c.sinceS = nowS;
      }
      if (c.tracked) this.candidatesTracked++;
    }
    this.candidates = next;
  }

  /** The candidates of the config in use (tests and the debug page). */
  candidateWatches(): readonly CandidateWatch[] {
    return this.candidates;
  }

  /** What the pages need of the settings. */
  get pageSettings(): PageSettings {
    return { values: this.values, topK: this.topK, sampleOneIn: this.sampleOneIn };
  }

  /**
   * `GET /debug/candidates[?domain=D[&rule=R]][&k=N][&offset=O][&limit=L]`: what each candidate
   * limit would have done since its load, in /rlconfig order, L candidates from the O-th (default
   * 100, at most 1,000), each with its top N keys (default HOT_KEYS_TOP_K, at most it).
   */
  candidatesPage(query: URLSearchParams, nowS: number): PageAnswer {
    const part = this.candidatesPart(query);
    return 'status' in part ? part : { status: 200, body: candidatesPage([part], this.pageSettings, nowS) };
  }

  /** What this process counted for the candidates the query chose (a page of them), or the query's refusal. */
  candidatesPart(query: URLSearchParams): CandidatesPart | PageAnswer {
    const refused = paramsRefusal(query, 'candidates', ['domain', 'rule', 'k', 'offset', 'limit']);
    if (refused !== undefined) return bad(refused);
    if (query.has('k') && this.topK === 0) return bad('top keys are off (HOT_KEYS_TOP_K=0): k cannot be given');
    const k = intParam(query, 'k', this.topK, 1, this.topK, ' (HOT_KEYS_TOP_K)');
    if (typeof k === 'string') return bad(k);
    const limit = intParam(query, 'limit', DEFAULT_CANDIDATES_PER_PAGE, 1, MAX_CANDIDATES_PER_PAGE, '');
    if (typeof limit === 'string') return bad(limit);
    const offset = intParam(query, 'offset', 0, 0, 999_999_999, '');
    if (typeof offset === 'string') return bad(offset);
    const domain = query.get('domain');
    const rule = query.get('rule');
    let chosen: readonly CandidateWatch[] = this.candidates;
    if (domain !== null) {
      chosen = chosen.filter((c) => c.domain === domain);
      if (chosen.length === 0) return bad(`domain ${JSON.stringify(domain)} has no candidate limits`);
    }
    if (rule !== null) {
      if (domain === null) return bad('rule needs domain');
      chosen = chosen.filter((c) => c.key === rule || c.key === domain + '.' + rule || (c.name !== '' && c.name === rule));
      if (chosen.length === 0) return bad(`domain ${JSON.stringify(domain)} has no candidate limit on ${JSON.stringify(rule)} (a stats key or a limit's name)`);
    }
    return {
      k: this.topK === 0 ? 0 : k,
      total: chosen.length,
      offset,
      limit,
      tracked: this.candidatesTracked,
      notTracked: this.candidatesUntracked,
      candidates: chosen.slice(offset, offset + limit).map(candidatePart),
    };
  }

  /** Sets the gauges of every published limit (the flusher runs this before each flush). */
  publish(nowS: number): void {
    if (!this.headroom) return;
    for (const w of this.current) {
      if (!w.seen) continue;
      let g = this.gauges.get(w);
      if (g === undefined) {
        g = GAUGE_STATS.map((s) => this.stats.gauge(this.gaugeName(w, s)));
        this.gauges.set(w, g);
      }
      const f = w.figures(nowS);
      g[0]!.set(w.requestsPerUnit);
      g[1]!.set(f.used);
      g[2]!.set(f.keys);
      g[3]!.set(f.keysOverLimit);
      g[4]!.set(w.capacity > 0 ? (100 * f.used) / w.capacity : 0);
    }
  }

  private gaugeName(w: RuleWindow, stat: string): string {
    const base = this.prefix + w.key + '.' + stat;
    return w.name === '' ? base : base + '.__name=' + replaceTagChars(w.name);
  }

  private removeGauges(w: RuleWindow): void {
    this.gauges.delete(w);
    for (const s of GAUGE_STATS) this.stats.removeGauge(this.gaugeName(w, s));
  }

  /** The windows published (tests and the debug pages). */
  windows(): readonly RuleWindow[] {
    return this.current;
  }

  /**
   * `GET /debug/hotkeys[?domain=D[&rule=R]][&k=N]`: the top N keys (default HOT_KEYS_TOP_K, at
   * most it) of one limit, of a domain's limits, or of all, over the last minute and the last hour.
   * `rule` is a limit's stats key (with or without its domain) or its name.
   */
  hotKeysPage(query: URLSearchParams, nowS: number): PageAnswer {
    const part = this.hotKeysPart(query, nowS);
    return 'status' in part ? part : { status: 200, body: hotKeysPage([part], this.pageSettings) };
  }

  /**
   * `GET /debug/limits[?domain=D][&q=TEXT][&offset=O][&limit=L]`: every loaded limit in /rlconfig
   * order with its window's figures and its denials over the last 15 minutes, L from the O-th
   * (default 100, at most 1,000); `q` keeps the limits whose stats key or name contains it.
   */
  limitsPage(query: URLSearchParams, nowS: number): PageAnswer {
    const part = this.limitsPart(query, nowS);
    return 'status' in part ? part : { status: 200, body: limitsPage([part]) };
  }

  /** This process's part of /debug/limits for the query, or the query's refusal. */
  limitsPart(query: URLSearchParams, nowS: number): LimitsPart | PageAnswer {
    const refused = paramsRefusal(query, 'limits', ['domain', 'q', 'offset', 'limit']);
    if (refused !== undefined) return bad(refused);
    const limit = intParam(query, 'limit', DEFAULT_LIMITS_PER_PAGE, 1, MAX_LIMITS_PER_PAGE, '');
    if (typeof limit === 'string') return bad(limit);
    const offset = intParam(query, 'offset', 0, 0, 999_999_999, '');
    if (typeof offset === 'string') return bad(offset);
    const domain = query.get('domain');
    const q = query.get('q');
    if (q !== null && q.length > 200) return bad('q must be at most 200 characters');
    let chosen: readonly RuleWindow[] = this.current;
    if (domain !== null) {
      chosen = chosen.filter((w) => w.domain === domain);
      if (chosen.length === 0) return bad(`domain ${JSON.stringify(domain)} has no loaded limits`);
    }
    if (q !== null && q !== '') {
      const needle = q.toLowerCase();
      chosen = chosen.filter((w) => w.key.toLowerCase().includes(needle) || w.name.toLowerCase().includes(needle));
    }
    return {
      total: chosen.length,
      offset,
      limit,
      periodSeconds: DENIAL_PERIOD_S,
      headroom: this.headroom,
      limits: chosen.slice(offset, offset + limit).map((w) => {
        const f = w.figures(nowS);
        return { ...limitPart(w), capacity: w.capacity, used: f.used, keys: f.keys, keysOverLimit: f.keysOverLimit, denials: w.denialSeries(nowS) };
      }),
    };
  }

  /** What this process saw of the limits the query chose (every listed key), or the query's refusal. */
  hotKeysPart(query: URLSearchParams, nowS: number): HotKeysPart | PageAnswer {
    const refused = paramsRefusal(query, 'hotkeys', ['domain', 'rule', 'k']);
    if (refused !== undefined) return bad(refused);
    if (this.topK === 0) return bad('hot keys are off (HOT_KEYS_TOP_K=0)');
    const k = intParam(query, 'k', this.topK, 1, this.topK, ' (HOT_KEYS_TOP_K)');
    if (typeof k === 'string') return bad(k);
    const domain = query.get('domain');
    const rule = query.get('rule');
    let chosen: RuleWindow[] = this.current;
    if (domain !== null) {
      chosen = this.current.filter((w) => w.domain === domain);
      if (chosen.length === 0) return bad(`domain ${JSON.stringify(domain)} has no loaded limits`);
    }
    if (rule !== null) {
      if (domain === null) return bad('rule needs domain');
      const found = chosen.filter((w) => w.key === rule || w.key === domain + '.' + rule || (w.name !== '' && w.name === rule));
      if (found.length === 0) return bad(`domain ${JSON.stringify(domain)} has no limit ${JSON.stringify(rule)} (a stats key or a limit's name)`);
      chosen = found;
    }
    const oneLimit = rule !== null && chosen.length === 1;
    const limits: Array<HotKeysPart['limits'][number]> = [];
    for (const w of chosen) {
      const hot = w.hotKeys();
      // A limit without keys this hour adds nothing to the lists (nor to a merge), unless it is the one asked for.
      if (hot !== undefined && hot.active(nowS)) limits.push({ limit: limitPart(w), minute: summaryPart(hot.view('minute', nowS)), hour: summaryPart(hot.view('hour', nowS)) });
      else if (oneLimit) limits.push({ limit: limitPart(w), minute: NO_KEYS, hour: NO_KEYS });
    }
    return { k, oneLimit, limitsTracked: this.tracked, limitsNotTracked: this.untracked, limits };
  }
}

const NO_KEYS: SummaryPart = { total: 0, entries: [] };

/** Limits listed per page of /debug/limits at most, and by default. */
export const MAX_LIMITS_PER_PAGE = 1000;
const DEFAULT_LIMITS_PER_PAGE = 100;

function limitPart(w: RuleWindow): LimitPart {
  return {
    domain: w.domain,
    rule: w.key,
    name: w.name,
    requestsPerUnit: w.requestsPerUnit,
    unit: w.unit,
    ...(w.algorithm !== undefined ? { algorithm: w.algorithm } : {}),
  };
}

function candidatePart(c: CandidateWatch): CandidatePart {
  const distinct = c.distinctKeysText();
  const top = c.topKeys();
  return {
    domain: c.domain,
    rule: c.key,
    name: c.name,
    enforced: {
      requestsPerUnit: c.enforced.requestsPerUnit,
      unit: c.enforced.unit,
      ...(c.enforced.algorithm !== undefined ? { algorithm: c.enforced.algorithm } : {}),
    },
    candidate: {
      requestsPerUnit: c.requestsPerUnit,
      unit: c.unit,
      ...(c.algorithm !== undefined ? { algorithm: c.algorithm } : {}),
      ...(c.algorithm === 'token_bucket' ? { burst: c.capacity } : {}),
    },
    capacity: c.capacity,
    sinceS: c.sinceS,
    calls: c.calls,
    hits: c.hits,
    wouldDeny: c.wouldDeny,
    wouldLimitHits: c.wouldLimitHits,
    uncountedHits: c.uncountedHits,
    ...(distinct !== undefined ? { distinct } : {}),
    peakUsed: c.peakUsed,
    peakAtS: c.peakAtS,
    ...(top !== undefined ? { top: summaryPart(top) } : {}),
  };
}

/** Why a page refuses its query's parameters (one it does not take, or one given twice), or undefined. */
function paramsRefusal(query: URLSearchParams, page: string, takes: readonly string[]): string | undefined {
  for (const name of query.keys()) {
    if (!takes.includes(name)) return `unknown parameter ${JSON.stringify(name)}: ${page} takes ${takes.slice(0, -1).join(', ')} and ${takes.at(-1)}`;
    if (query.getAll(name).length > 1) return `parameter ${JSON.stringify(name)} is given more than once`;
  }
  return undefined;
}

/** An integer parameter of a page's query in [min, max] (`dflt` when absent), or why it is refused (the text cut short). */
function intParam(query: URLSearchParams, name: string, dflt: number, min: number, max: number, why: string): number | string {
  const t = query.get(name);
  if (t === null) return dflt;
  const v = /^\d{1,9}$/.test(t) ? Number(t) : NaN;
  return v >= min && v <= max ? v : `${name} must be an integer from ${min} to ${max}${why}, not ${JSON.stringify(t.length > 40 ? t.slice(0, 40) + '...' : t)}`;
}

function bad(reason: string): PageAnswer {
  return { status: 400, body: reason + '\n' };
}
