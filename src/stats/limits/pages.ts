/**
 * /debug/hotkeys and /debug/candidates as parts and pages. A process's book gives the part of
 * what it saw for a query (the chosen limits' summaries, with plain keys); a page is made from
 * one part (one process) or from every worker's (worker mode's primary), merged as one process
 * would have counted: Space-Saving summaries merge with their error bounds summed, calls, hits and
 * would-deny counts add up, the distinct keys estimates are united (not summed: a key seen by two
 * workers is one key), and the peak is the largest (the workers share the store's counts).
 * DEBUG_VALUES is applied when the page is made, so a hashed key is hashed once, by the process
 * that shows it.
 */
import { UNIT_NAMES } from '../../core/rls';
import { describeValue, type ValuePrivacy } from '../../telemetry/value-privacy';
import { DistinctEstimate } from './headroom';
import { byCount, HotEntry, mergeSummaries, SpaceSaving } from './space-saving';

/** What every page needs of the settings (the same in the workers and their primary). */
export interface PageSettings {
  /** DEBUG_VALUES. */
  readonly values: ValuePrivacy;
  /** HOT_KEYS_TOP_K (0: no top keys). */
  readonly topK: number;
  /** HOT_KEYS_SAMPLE_ONE_IN. */
  readonly sampleOneIn: number;
}

/** The places of a summary per key shown: three times K, for the Space-Saving bound. */
export const CAPACITY_PER_K = 3;

/** A Space-Saving summary as it travels: every listed key as [key, entries, count, error, over, remaining, lastSeenS]. */
export interface SummaryPart {
  readonly total: number;
  readonly entries: ReadonlyArray<readonly [string, string, number, number, number, number, number]>;
}

export function summaryPart(s: SpaceSaving): SummaryPart {
  return { total: s.total, entries: [...s.entries.values()].map((e) => [e.key, e.entries, e.count, e.error, e.over, e.remaining, e.lastSeenS] as const) };
}

/** The summary back, with the capacity it was made with (so a full one has its floor). */
function summaryOf(p: SummaryPart, capacity: number): SpaceSaving {
  const s = new SpaceSaving(capacity);
  s.total = p.total;
  for (const [key, entries, count, error, over, remaining, lastSeenS] of p.entries) s.entries.set(key, new HotEntry(key, entries, count, error, over, remaining, lastSeenS));
  return s;
}

/** A loaded limit as the pages name it. */
export interface LimitPart {
  readonly domain: string;
  readonly rule: string;
  /** '' when it has none. */
  readonly name: string;
  readonly requestsPerUnit: number;
  readonly unit: number;
  readonly algorithm?: string;
}

/** What one process saw of the limits a /debug/hotkeys query chose. */
export interface HotKeysPart {
  readonly k: number;
  /** The query named one limit (the page then describes it). */
  readonly oneLimit: boolean;
  readonly limitsTracked: number;
  readonly limitsNotTracked: number;
  readonly limits: ReadonlyArray<{ readonly limit: LimitPart; readonly minute: SummaryPart; readonly hour: SummaryPart }>;
}

/** Fields a page carries beside its own (worker mode says which workers it merges). */
export type PageExtra = Readonly<Record<string, unknown>>;

const limitId = (l: { readonly domain: string; readonly rule: string }): string => l.domain + '\u0000' + l.rule;

export function hotKeysPage(parts: readonly HotKeysPart[], s: PageSettings, extra: PageExtra = {}): string {
  const capacity = s.topK * CAPACITY_PER_K;
  const first = parts[0];
  const merged = new Map<string, { limit: LimitPart; minute: SpaceSaving[]; hour: SpaceSaving[] }>();
  for (const part of parts) {
    for (const l of part.limits) {
      const id = limitId(l.limit);
      let m = merged.get(id);
      if (m === undefined) merged.set(id, (m = { limit: l.limit, minute: [], hour: [] }));
      m.minute.push(summaryOf(l.minute, capacity));
      m.hour.push(summaryOf(l.hour, capacity));
    }
  }
  const k = first?.k ?? s.topK;
  const out: Record<string, unknown> = {
    values: s.values,
    k,
    sample_one_in: s.sampleOneIn,
    capacity,
    // Each process tracks the limits it counted first: the most any of them tracks.
    limits_tracked: Math.max(0, ...parts.map((p) => p.limitsTracked)),
    limits_not_tracked: Math.max(0, ...parts.map((p) => p.limitsNotTracked)),
    ...extra,
  };
  if (first?.oneLimit === true && merged.size === 1) out['limit'] = limitInfo([...merged.values()][0]!.limit);
  for (const horizon of ['minute', 'hour'] as const) {
    const all: Array<{ limit: LimitPart; e: HotEntry; total: number }> = [];
    for (const m of merged.values()) {
      const view = mergeSummaries(m[horizon], capacity);
      const listed = [...view.entries.values()].sort(byCount);
      for (let i = 0; i < listed.length && i < k; i++) all.push({ limit: m.limit, e: listed[i]!, total: view.total });
    }
    all.sort((a, b) => byCount(a.e, b.e));
    out[horizon] = all.slice(0, k).map(({ limit, e, total }) => ({
      domain: limit.domain,
      rule: limit.rule,
      ...(limit.name !== '' ? { name: limit.name } : {}),
      ...shown(e, s.values),
      hits: Math.round(e.count),
      error: Math.round(e.error),
      over_limit_hits: Math.round(e.over),
      remaining: e.remaining,
      last_seen: new Date(e.lastSeenS * 1000).toISOString(),
      limit_hits: Math.round(total),
    }));
  }
  return JSON.stringify(out, null, 2) + '\n';
}

/** What one process counted for one candidate limit since its load. */
export interface CandidatePart {
  readonly domain: string;
  readonly rule: string;
  readonly name: string;
  readonly enforced: { readonly requestsPerUnit: number; readonly unit: number; readonly algorithm?: string };
  readonly candidate: { readonly requestsPerUnit: number; readonly unit: number; readonly algorithm?: string; readonly burst?: number };
  /** What counts are compared with (requests_per_unit, or a token bucket's burst). */
  readonly capacity: number;
  readonly sinceS: number;
  readonly calls: number;
  readonly hits: number;
  readonly wouldDeny: number;
  readonly wouldLimitHits: number;
  readonly uncountedHits: number;
  /** The distinct keys estimate's registers, when kept. */
  readonly distinct?: string;
  readonly peakUsed: number;
  readonly peakAtS: number;
  readonly top?: SummaryPart;
}

/** What one process saw of the candidates a /debug/candidates query chose (one page of them). */
export interface CandidatesPart {
  readonly k: number;
  readonly total: number;
  readonly offset: number;
  readonly limit: number;
  readonly tracked: number;
  readonly notTracked: number;
  readonly candidates: readonly CandidatePart[];
}

interface MergedCandidate {
  first: CandidatePart;
  sinceS: number;
  calls: number;
  hits: number;
  wouldDeny: number;
  wouldLimitHits: number;
  uncountedHits: number;
  distinct: DistinctEstimate | undefined;
  peakUsed: number;
  peakAtS: number;
  tops: SpaceSaving[];
}

export function candidatesPage(parts: readonly CandidatesPart[], s: PageSettings, nowS: number, extra: PageExtra = {}): string {
  const capacity = s.topK * CAPACITY_PER_K;
  // In the first part's order (the config's, the same in every worker), then any only others list.
  const merged = new Map<string, MergedCandidate>();
  for (const part of parts) {
    for (const c of part.candidates) {
      const id = limitId(c);
      let m = merged.get(id);
      if (m === undefined) {
        merged.set(id, (m = { first: c, sinceS: c.sinceS, calls: 0, hits: 0, wouldDeny: 0, wouldLimitHits: 0, uncountedHits: 0, distinct: undefined, peakUsed: 0, peakAtS: -1, tops: [] }));
      }
      m.sinceS = Math.min(m.sinceS, c.sinceS);
      m.calls += c.calls;
      m.hits += c.hits;
      m.wouldDeny += c.wouldDeny;
      m.wouldLimitHits += c.wouldLimitHits;
      m.uncountedHits += c.uncountedHits;
      if (c.distinct !== undefined) (m.distinct ??= new DistinctEstimate()).addAll(c.distinct);
      if (c.peakUsed > m.peakUsed) {
        m.peakUsed = c.peakUsed;
        m.peakAtS = c.peakAtS;
      }
      if (c.top !== undefined) m.tops.push(summaryOf(c.top, capacity));
    }
  }
  const first = parts[0];
  const total = Math.max(0, ...parts.map((p) => p.total));
  const offset = first?.offset ?? 0;
  const k = s.topK === 0 ? 0 : first?.k ?? s.topK;
  const out: Record<string, unknown> = {
    values: s.values,
    k,
    sample_one_in: s.sampleOneIn,
    total,
    offset,
    limit: first?.limit ?? 0,
    ...(offset + merged.size < total ? { next_offset: offset + merged.size } : {}),
    candidates_tracked: Math.max(0, ...parts.map((p) => p.tracked)),
    candidates_not_tracked: Math.max(0, ...parts.map((p) => p.notTracked)),
    ...extra,
    candidates: [...merged.values()].map((m) => candidateInfo(m, k, capacity, s.values, nowS)),
  };
  return JSON.stringify(out, null, 2) + '\n';
}

function candidateInfo(m: MergedCandidate, k: number, capacity: number, values: ValuePrivacy, nowS: number): Record<string, unknown> {
  const c = m.first;
  const top = m.tops.length === 0 ? [] : [...mergeSummaries(m.tops, capacity).entries.values()].sort(byCount).slice(0, k);
  const distinct = m.distinct?.estimate();
  return {
    domain: c.domain,
    rule: c.rule,
    ...(c.name !== '' ? { name: c.name } : {}),
    enforced: {
      requests_per_unit: c.enforced.requestsPerUnit,
      unit: UNIT_NAMES[c.enforced.unit] ?? String(c.enforced.unit),
      ...(c.enforced.algorithm !== undefined ? { algorithm: c.enforced.algorithm } : {}),
    },
    candidate: {
      requests_per_unit: c.candidate.requestsPerUnit,
      unit: UNIT_NAMES[c.candidate.unit] ?? String(c.candidate.unit),
      ...(c.candidate.algorithm !== undefined ? { algorithm: c.candidate.algorithm } : {}),
      ...(c.candidate.burst !== undefined ? { burst: c.candidate.burst } : {}),
    },
    since: new Date(Math.max(0, m.sinceS) * 1000).toISOString(),
    seconds: Math.max(0, nowS - m.sinceS),
    calls: m.calls,
    hits: m.hits,
    would_deny: m.wouldDeny,
    would_limit_hits: m.wouldLimitHits,
    uncounted_hits: m.uncountedHits,
    ...(distinct !== undefined ? { distinct_keys: distinct } : {}),
    peak_used: m.peakUsed,
    peak_utilization: c.capacity > 0 ? m.peakUsed / c.capacity : m.peakUsed > 0 ? null : 0,
    ...(m.peakAtS >= 0 ? { peak_at: new Date(m.peakAtS * 1000).toISOString() } : {}),
    top_keys: top.map((e) => ({
      ...shown(e, values),
      hits: Math.round(e.count),
      error: Math.round(e.error),
      would_limit_hits: Math.round(e.over),
      remaining: e.remaining,
      last_seen: new Date(e.lastSeenS * 1000).toISOString(),
    })),
  };
}

function limitInfo(l: LimitPart): Record<string, unknown> {
  return {
    domain: l.domain,
    rule: l.rule,
    ...(l.name !== '' ? { name: l.name } : {}),
    requests_per_unit: l.requestsPerUnit,
    unit: UNIT_NAMES[l.unit] ?? String(l.unit),
    ...(l.algorithm !== undefined ? { algorithm: l.algorithm } : {}),
  };
}

function shown(e: HotEntry, values: ValuePrivacy): Record<string, string> {
  if (values === 'plain') return { key: e.key, entries: e.entries };
  if (values === 'hide') return {};
  return { key: describeValue('hash', e.key), entries: describeValue('hash', e.entries) };
}

/** One loaded limit's headroom as one process saw it (the console's rules table). */
export interface LimitRowPart extends LimitPart {
  /** What counts are compared with (requests_per_unit, or a token bucket's burst). */
  readonly capacity: number;
  readonly used: number;
  readonly keys: number;
  readonly keysOverLimit: number;
  /** Over-limit hits in each of the last DENIAL_PERIODS periods of DENIAL_PERIOD_S, oldest first. */
  readonly denials: readonly number[];
}

/** What one process saw of the limits a /debug/limits query chose (one page of them). */
export interface LimitsPart {
  readonly total: number;
  readonly offset: number;
  readonly limit: number;
  readonly periodSeconds: number;
  /** HEADROOM_ENABLED: false, and the window figures and denials are all 0. */
  readonly headroom: boolean;
  readonly limits: readonly LimitRowPart[];
}

/**
 * /debug/limits from one part or every worker's: the largest `used` (the workers share the
 * store's counts), the sums of the keys (each worker counts the keys it saw) and of the denials.
 */
export function limitsPage(parts: readonly LimitsPart[], extra: PageExtra = {}): string {
  const merged = new Map<string, { first: LimitRowPart; used: number; keys: number; over: number; denials: number[] }>();
  for (const part of parts) {
    for (const l of part.limits) {
      const id = limitId(l);
      const m = merged.get(id);
      if (m === undefined) {
        merged.set(id, { first: l, used: l.used, keys: l.keys, over: l.keysOverLimit, denials: [...l.denials] });
        continue;
      }
      m.used = Math.max(m.used, l.used);
      m.keys += l.keys;
      m.over += l.keysOverLimit;
      for (let i = 0; i < m.denials.length && i < l.denials.length; i++) m.denials[i]! += l.denials[i]!;
    }
  }
  const first = parts[0];
  const total = Math.max(0, ...parts.map((p) => p.total));
  const offset = first?.offset ?? 0;
  const out = {
    total,
    offset,
    limit: first?.limit ?? 0,
    ...(offset + merged.size < total ? { next_offset: offset + merged.size } : {}),
    denial_period_seconds: first?.periodSeconds ?? 0,
    ...(first !== undefined && !first.headroom ? { headroom: 'off (HEADROOM_ENABLED=false): no window figures nor denials' } : {}),
    ...extra,
    limits: [...merged.values()].map((m) => ({
      ...limitInfo(m.first),
      window_used: m.used,
      utilization: m.first.capacity > 0 ? m.used / m.first.capacity : m.used > 0 ? null : 0,
      window_keys: m.keys,
      window_keys_over_limit: m.over,
      over_limit_hits_per_period: m.denials,
    })),
  };
  return JSON.stringify(out) + '\n';
}
