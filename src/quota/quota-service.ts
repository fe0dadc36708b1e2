/**
 * The Rate Limit Quota Service (RLQS): each Envoy reports its usage per bucket over one stream,
 * every 5 s (Envoy's filter hardcodes it), and enforces locally the assignment it gets back until
 * the assignment's time to live runs out. docs/rlqs.md explains the design; in short:
 *
 * - A bucket (BucketId pairs) is placed on the domain's descriptor tree (config
 *   `bucketDescriptor`) and limited by the rule found there. Unlimited, shadow-mode and
 *   whitelisted rules allow all; `requests_per_unit: 0` denies all; a bucket that no descriptor
 *   takes gets the configured default.
 * - A rule's limit is divided among the streams that report the bucket, by demand (shares.ts),
 *   in whole tokens per a whole-second fill interval that add up to the limit exactly. The streams
 *   of one replica form a group per bucket; replicas exchange each group's demand through the
 *   DemandStore about once a second and divide the limit first among replicas, then each its part
 *   among its streams.
 * - A stream's demand moves its published weight only when it changes by more than a tenth (or
 *   to or from zero), so the division is stable; a stream is sent a new assignment only when its
 *   share moved by more than RESEND_CHANGE, so Envoy does not keep replacing (and truncating) its
 *   token bucket. A change of a group is pushed to its other streams at once (demand drifting,
 *   at most every driftPushEveryMs: a second, longer for a bucket of hundreds of streams).
 * - Time to live: four of the stream's report intervals (5 s assumed until it has shown its
 *   cadence); an unchanged assignment is sent again before the next report could come too late.
 * - A fleet of Envoys reports the same buckets: a bucket's name is held once for all its streams,
 *   each stream finds its buckets by the bytes of their ids, and what a bucket holds is kept on
 *   the bucket itself (bench/README.md, "RLQS at fleet scale": 100,000 bucket-streams per replica).
 * - A bucket idle for IDLE_REPORTS_TO_ABANDON reports is abandoned.
 * - What streams may make the process hold is admitted in admission.ts, before a bucket is tracked:
 *   a stream that would take itself or its connection over a budget is answered for the report
 *   (the buckets that did not fit with their rule's answer without a share: deny all under a
 *   limit) and ended with RESOURCE_EXHAUSTED; a bucket that would take the process over is
 *   answered so at each report, untracked, and its stream goes on. A bucket id beyond
 *   REQUEST_MAX_ENTRIES / REQUEST_MAX_ENTRY_LENGTH ends its stream before anything is answered.
 */
import { randomUUID } from 'node:crypto';
import type { Clock } from '../platform/clock';
import type { BucketDemand } from '../core/quota-demand';
import { unitToDivider } from '../core/rls';
import type { RateLimitConfig } from '../config/types';
import type { RateLimitRule } from '../core/rule';
import type { Counter, Gauge, StatsStore } from '../stats/store';
import type { Logger } from '../telemetry/logger';
import { bucketCost, type ConnectionHolding, Holding, QuotaAdmission, type QuotaBudgets, type Refusal } from './admission';
import type { DemandStore, ReplicaDemand } from './demand';
import { divide, grainFor, meanDemand, tokenBucketFor, visibleChange, type Grain } from './shares';
import { QuotaStreamError, type BucketAction, type BucketPairs, type QuotaStrategy, type UsageReports } from './types';

export interface QuotaServiceOptions {
  /** The current config (undefined before the first one loads: every bucket is unmatched). */
  config: () => RateLimitConfig | undefined;
  demand: DemandStore;
  clock: Clock;
  /** What a bucket that no descriptor takes gets. */
  unmatched: { strategy: 'allow-all' | 'deny-all'; ttlSeconds: number };
  /** The buckets and bytes streams may make the process hold, per stream, connection and process (admission.ts). */
  budgets: QuotaBudgets;
  /** REQUEST_MAX_ENTRIES: most pairs in a bucket id (unbounded when unset). */
  maxEntries?: number;
  /** REQUEST_MAX_ENTRY_LENGTH: longest key or value of a bucket id, and domain, in characters (unbounded when unset). */
  maxEntryLength?: number;
  /**
   * `ratelimit.rlqs.{streams,buckets,bucket_bytes}` (gauges), `.{reports,assignments,abandons,
   * stream_errors,refused_buckets}`, `.{stream,connection,process}_budget_exhausted`, and per rule
   * `ratelimit.service.rate_limit.<key>.rlqs_{allowed,denied}`.
   */
  stats?: StatsStore;
  logger?: Logger;
  /** This replica's name among those sharing the demand store (random unless given: tests name them). */
  replica?: string;
}

interface QuotaStats {
  readonly streams: Gauge;
  readonly reports: Counter;
  readonly assignments: Counter;
  readonly abandons: Counter;
  readonly streamErrors: Counter;
  readonly refusedBuckets: Counter;
}

/** Envoy's report interval (filter_persistence.cc), assumed until a stream shows its own. */
export const ENVOY_REPORT_INTERVAL_S = 5;
/** An assignment lives this many of its stream's report intervals (renewed every third report). */
const TTL_INTERVALS = 4;
const MIN_TTL_S = 3;
/** Report intervals taken as measured are clamped to this range. */
const MIN_CADENCE_S = 1;
const MAX_CADENCE_S = 300;
/** A bucket's usage is turned into a rate over no less than this (shorter gaps accumulate). */
const MIN_MEASURE_S = 0.5;
/** Clamps on what a report may claim (time_elapsed of years, counts near 2^64). */
const MAX_ELAPSED_S = 3600;
const MAX_DEMAND_PER_S = 1e9;
/** Weight of the newest measurement in a bucket's demand. */
const NEWEST = 0.5;
/** A published demand moves only when the measured one differs from it by more than this part. */
const REPUBLISH_CHANGE = 0.1;
/** An assignment is sent again only when its rate moved by more than this part. */
const RESEND_CHANGE = 0.1;
/** A share this many times its stream's demand or more is not changed for a change's sake. */
const UNUSED_SHARE = 1.5;
/** Reports with no request after which a bucket is abandoned (Envoy stops reporting it). */
const IDLE_REPORTS_TO_ABANDON = 6;
/** How often replicas exchange their demand, and how long an exchanged entry lives. */
const EXCHANGE_EVERY_MS = 1000;
const EXCHANGE_TTL_MS = 5000;
/**
 * How often the streams of every bucket are looked at for one that stopped reporting it (stale
 * after two of its report intervals and a second: then left out of the division).
 */
const STALE_SCAN_EVERY_MS = 5000;
/** The next exchange after one that saw the other replicas' demand move. */
const EXCHANGE_SOON_MS = 200;
/** Report intervals a stream's shares stay reserved after it ends (Envoy may be about to reopen it). */
const RESERVED_AFTER_END = 0.6;
/**
 * Changes of a group are pushed to its streams this long after the first one: the reports of a
 * fleet that came together (start-up, a config change) make one new assignment, not one each.
 */
const PUSH_AFTER_MS = 100;
/**
 * A group whose streams' demand only drifts is divided again at most every second, and a group of
 * more than DRIFT_MEMBERS_PER_S streams less often, up to DRIFT_PUSH_MAX_MS: a division is a pass
 * over all its streams (a thousand Envoys on one bucket), so its cost per second stays bounded, and
 * one stream's drift moves a big group's division little. (Joins, leaves, idleness and a config
 * change are pushed at once.) 2.5 s for every group was tried: a replica whose few streams' shares
 * lagged their published demand by up to 2.5 s, while the other replica followed that demand at
 * once, kept the two out of step in half the loaded CI runs of rlqs-replicas.
 */
const DRIFT_PUSH_MIN_MS = 1000;
const DRIFT_PUSH_MAX_MS = 2500;
const DRIFT_MEMBERS_PER_S = 400;

function driftPushEveryMs(members: number): number {
  return Math.min(DRIFT_PUSH_MAX_MS, Math.max(DRIFT_PUSH_MIN_MS, (members * 1000) / DRIFT_MEMBERS_PER_S));
}
/**
 * Streams of groups a push divides and tells in one turn of the event loop; the other due groups
 * follow in the next turns. A fleet's groups drift together: a push of all of them at once (100
 * buckets of 1,000 Envoys) held the reports behind it for tens of milliseconds.
 */
const PUSH_MEMBERS_PER_TURN = 10_000;
/**
 * Groups an exchange publishes in one turn of the event loop (and one call of the demand store:
 * one Redis pipeline); more follow in the next turns. A fleet has a hundred (one exchange); a flood
 * of buckets of their own, tens of thousands, which in one pass held the reports for 90 ms.
 */
const EXCHANGE_GROUPS_PER_TURN = 5000;
/** The blanket strategies (never changed: shared by every assignment of one). */
const ALLOW_ALL: QuotaStrategy = Object.freeze({ kind: 'allow-all' });
const DENY_ALL: QuotaStrategy = Object.freeze({ kind: 'deny-all' });
/** `/debug/rlqs` is made in pieces of about this many characters. */
const DESCRIBE_PIECE_CHARS = 64 * 1024;
/** Demand not yet measured (a stream's first report of a bucket has time_elapsed 0). */
export const NOT_MEASURED = -1;

/** Where a bucket lands in one config: its rule, and its strategy unless its limit is divided. */
interface Placement {
  readonly config: RateLimitConfig | undefined;
  readonly matched: boolean;
  readonly rule: RateLimitRule | undefined;
  readonly fixed: QuotaStrategy | undefined;
  readonly counters?: { readonly allowed: Counter; readonly denied: Counter };
}

/**
 * A bucket as every stream of a domain that reports it shares it: its canonical key, its pairs and
 * where it lands in the config, held once (a thousand Envoys report the same hundred buckets).
 */
interface NamedBucket {
  readonly domain: string;
  /** `domain|key`: its group's key (made once per bucket, not per stream). */
  readonly scoped: string;
  readonly key: string;
  readonly pairs: BucketPairs;
  placement: Placement | undefined;
  /** Streams tracking it: it is forgotten when the last one lets it go. */
  streams: number;
  /** What it adds to the process's bytes (admission.ts), given back when it is forgotten. */
  readonly bytes: number;
}

interface TrackedBucket {
  /** The shared name's key and pairs (the same string and map for every stream). */
  readonly key: string;
  readonly pairs: BucketPairs;
  readonly named: NamedBucket;
  /** Its id as its stream first sent it (BucketUsage.wire), if the transport gave it. */
  readonly wire: string | undefined;
  /** The stream's report that last carried it (a bucket given twice in one report is handled once). */
  reportSeq: number;
  /** Requests per second (allowed + denied), smoothed; NOT_MEASURED before a measurement. */
  demand: number;
  /** What the division uses: the demand, moved only by a material change. */
  published: number;
  /** Requests reported since `measureFromMs` (server clock), not yet turned into a rate. */
  countSince: number;
  measureFromMs: number;
  lastReportMs: number;
  idleReports: number;
  /** Reported since the bucket was last assigned: counted on its rule's stats then. */
  allowedSinceAssign: number;
  deniedSinceAssign: number;
  /** Whether a descriptor took the bucket when last assigned. */
  matched: boolean;
  /** The group it is divided in (a limited rule), if any. */
  group: Group | undefined;
  /** Left out of the division: its stream has not reported it for two intervals. */
  stale: boolean;
  /** The strategy last sent (Envoy holds it), when, and for how long. */
  held: QuotaStrategy | undefined;
  sentAtMs: number;
  sentTtlS: number;
  /**
   * The held token bucket's tokens per second, fill interval, tokens per fill and burst (NaN, 0,
   * 0, 0 for another strategy): copies on the bucket itself, so a report's or a division's pass
   * over its buckets reads one object per bucket (with 100,000 of them, the reads of other
   * objects are cache misses).
   */
  heldRate: number;
  heldFillS: number;
  heldPerFill: number;
  heldMaxTokens: number;
  /** Its tokens in the division `shareOf` (the group's last one when it is current). */
  share: number;
  shareOf: Division | undefined;
  /**
   * The bytes admission charged its stream and connection, and its own part of the process's
   * (admission.ts): read when it is let go only, so last (the fields a report reads come first).
   */
  readonly charged: number;
  readonly bytes: number;
}

/** This replica's streams of one bucket, and what the other replicas said of theirs. */
interface Group {
  readonly key: string;
  readonly members: Map<QuotaStream, TrackedBucket>;
  /**
   * The sum of the members' parties, kept as they change (an exchange between two full ones reads
   * it instead of visiting a thousand buckets); made again from the members at each full exchange.
   */
  own: Sum;
  remote: Map<string, ReplicaDemand>;
  division: Division | undefined;
  /** The members in stream id order, until they change. */
  sorted: Array<[QuotaStream, TrackedBucket]> | undefined;
  /** Each member's party in a division, in `sorted` order: kept from one division to the next (no garbage per pass). */
  parties: Sum[];
  /** When its streams were last looked at for stale ones. */
  scannedAtMs: number;
  /** Changes waiting that are not demand drift (a stream joined, left, went idle). */
  urgent: boolean;
  pushedAtMs: number;
}

interface Division {
  readonly limit: number;
  readonly unitS: number;
  readonly grain: Grain;
  /** This replica's tokens (each stream's are on its bucket: TrackedBucket.share). */
  readonly mine: number;
}

export class QuotaService {
  private readonly streams = new Set<QuotaStream>();
  private readonly groups = new Map<string, Group>();
  /**
   * The buckets tracked by some stream, by domain, then key: found by the key a report's bucket
   * already has (its hash computed once), not by a text made for the look-up.
   */
  private readonly named = new Map<string, Map<string, NamedBucket>>();
  /** Each rule's RLQS counters (a config's rules are dropped with it). */
  private readonly ruleCounters = new WeakMap<RateLimitRule, { readonly allowed: Counter; readonly denied: Counter }>();
  private readonly dirty = new Set<Group>();
  /** Groups whose demand changed here since the last exchange. */
  private readonly unpublished = new Set<Group>();
  /** When the last exchange of every group ran (the others run on changes only). */
  private fullExchangeAtMs = -Infinity;
  private pushTimer: unknown;
  private exchangeTimer: unknown;
  private exchanging: Promise<void> | undefined;
  /** When the scheduled exchange runs (clock ms), if one is scheduled. */
  private exchangeAtMs: number | undefined;
  /** A local change to publish came while an exchange was under way: exchange again right after. */
  private exchangeAgain = false;
  private nextId = 0;
  private closed = false;
  /** Stream ids must differ across replicas that share a demand store. */
  readonly replica: string;
  readonly stats: QuotaStats | undefined;
  /** What the streams hold, against the budgets: asked before any bucket is tracked. */
  readonly admission: QuotaAdmission;

  constructor(readonly opts: QuotaServiceOptions) {
    this.replica = opts.replica ?? randomUUID().slice(0, 8);
    const st = opts.stats;
    this.stats =
      st === undefined
        ? undefined
        : {
            streams: st.gauge('ratelimit.rlqs.streams'),
            reports: st.counter('ratelimit.rlqs.reports'),
            assignments: st.counter('ratelimit.rlqs.assignments'),
            abandons: st.counter('ratelimit.rlqs.abandons'),
            streamErrors: st.counter('ratelimit.rlqs.stream_errors'),
            refusedBuckets: st.counter('ratelimit.rlqs.refused_buckets'),
          };
    this.admission = new QuotaAdmission(opts.budgets, { stats: st, logger: opts.logger, clock: opts.clock });
  }

  /**
   * A new stream; `send` delivers its bucket actions (one response per call). `connection`: what
   * names the stream's connection (any value its transport keeps for that connection), so its
   * streams share the connection's budget; a stream without one is a connection of its own.
   */
  open(send: (actions: BucketAction[]) => void, connection?: unknown): QuotaStream {
    const holding = this.admission.joinConnection(connection);
    const s = new QuotaStream(this, `${this.replica}.${String(++this.nextId).padStart(9, '0')}`, send, holding, () => {
      this.streams.delete(s);
      this.admission.leaveConnection(holding);
      this.stats?.streams.set(this.streams.size);
    });
    this.streams.add(s);
    this.stats?.streams.set(this.streams.size);
    return s;
  }

  /** Stops the exchange timer and the pushes (the service is stopping). */
  close(): void {
    this.closed = true;
    this.opts.clock.clearTimeout(this.exchangeTimer);
    this.opts.clock.clearTimeout(this.pushTimer);
  }

  /** Resolves once the exchange under way (if any) has been applied: for tests on a manual clock. */
  async settled(): Promise<void> {
    while (this.exchanging !== undefined) await this.exchanging;
  }

  /** The shared name of the bucket of `key` in `domain`, if some stream tracks it. */
  namedAt(domain: string, key: string): NamedBucket | undefined {
    return this.named.get(domain)?.get(key);
  }

  /**
   * The shared name of a bucket a stream starts tracking (release it when the stream lets the
   * bucket go): `known` (namedAt's), or a new one of `bytes` (what it adds to the process's).
   */
  nameBucket(domain: string, key: string, pairs: BucketPairs, bytes: number, known: NamedBucket | undefined): NamedBucket {
    let n = known;
    if (n === undefined) {
      let names = this.named.get(domain);
      if (names === undefined) this.named.set(domain, (names = new Map()));
      names.set(key, (n = { domain, scoped: `${domain}|${key}`, key, pairs, placement: undefined, streams: 0, bytes }));
    }
    n.streams++;
    return n;
  }

  releaseBucket(n: NamedBucket): void {
    if (--n.streams > 0) return;
    const names = this.named.get(n.domain);
    names?.delete(n.key);
    if (names?.size === 0) this.named.delete(n.domain);
    this.admission.releaseName(n.bytes);
  }

  /** A rule's `rlqs_allowed` / `rlqs_denied` counters, made once per rule (not per bucket placed). */
  countersOf(rule: RateLimitRule): { readonly allowed: Counter; readonly denied: Counter } | undefined {
    const stats = this.opts.stats;
    if (stats === undefined) return undefined;
    let c = this.ruleCounters.get(rule);
    if (c === undefined) {
      c = { allowed: stats.counter(`ratelimit.service.rate_limit.${rule.stats.key}.rlqs_allowed`), denied: stats.counter(`ratelimit.service.rate_limit.${rule.stats.key}.rlqs_denied`) };
      this.ruleCounters.set(rule, c);
    }
    return c;
  }

  /**
   * `/debug/rlqs`: every live stream, its domain and buckets, and what each was last assigned, in
   * pieces of about DESCRIBE_PIECE_CHARS made as they are taken: 100,000 buckets are never one
   * string, and the caller may let the event loop run between two pieces (streams and buckets that
   * change meanwhile are shown as they are when their line is made).
   */
  *describe(): Generator<string> {
    if (this.streams.size === 0) {
      yield 'no RLQS stream\n';
      return;
    }
    let out = '';
    for (const s of this.streams) {
      for (const line of s.describeLines()) {
        out += line;
        if (out.length >= DESCRIBE_PIECE_CHARS) {
          yield out;
          out = '';
        }
      }
    }
    if (out !== '') yield out;
  }

  /** `/debug/explain` for a bucket: where it is placed, its rule, and the streams that report it here. */
  explainBucket(domain: string, pairs: BucketPairs): string {
    const config = this.opts.config();
    if (config === undefined) return 'no rate limit configuration loaded\n';
    const descriptor = config.bucketDescriptor(domain, pairs);
    let out = `bucket ${bucketKey(pairs)} in domain '${domain}'\n`;
    if (descriptor === undefined) {
      const u = this.opts.unmatched;
      return out + `  no descriptor takes it: ${u.strategy} for ${u.ttlSeconds} s (RLQS_UNMATCHED_ACTION, RLQS_UNMATCHED_TTL)\n`;
    }
    out += `  descriptor: ${descriptor.entries.map((e) => `${e.key}=${e.value}`).join(', ')}\n`;
    const rule = config.getLimit(domain, descriptor);
    if (rule === undefined) out += '  no rate_limit there (whitelisted): allow all\n';
    else if (rule.unlimited) out += `  rule ${rule.fullKey}: unlimited: allow all\n`;
    else if (rule.shadowMode) out += `  rule ${rule.fullKey}: shadow mode: allow all\n`;
    else if (rule.limit.requestsPerUnit === 0) out += `  rule ${rule.fullKey}: 0 per unit: deny all\n`;
    else out += `  rule ${rule.fullKey}: ${rule.limit.requestsPerUnit} per ${unitToDivider(rule.limit.unit)} s, divided among the streams that report it\n`;
    const key = bucketKey(pairs);
    const group = this.groups.get(`${domain}|${key}`);
    if (group !== undefined && group.remote.size > 0) out += `  other replicas: ${[...group.remote].map(([r, d]) => `${r} (${describeDemand(d.demand)})`).join(', ')}\n`;
    for (const s of this.streams) out += s.describeBucket(domain, key);
    return out;
  }

  get streamCount(): number {
    return this.streams.size;
  }

  /** The config changed: every bucket of every stream is assigned again (or abandoned). */
  configChanged(): Promise<void> {
    for (const g of this.groups.values()) g.division = undefined;
    for (const s of this.streams) s.reassignAll();
    return Promise.resolve();
  }

  // --- groups: one per bucket with a divided limit on this replica ---

  join(scopedKey: string, stream: QuotaStream, b: TrackedBucket): Group {
    let g = this.groups.get(scopedKey);
    if (g === undefined) {
      g = { key: scopedKey, members: new Map(), own: emptySum(), remote: new Map(), division: undefined, sorted: undefined, parties: [], scannedAtMs: this.opts.clock.nowMs(), urgent: false, pushedAtMs: -Infinity };
      this.groups.set(scopedKey, g);
    }
    const before = g.members.get(stream);
    if (before !== undefined) addParty(g.own, before, -1);
    g.members.set(stream, b);
    addParty(g.own, b);
    g.sorted = undefined;
    this.changed(g);
    // Streams joining: the other replicas hear of it at once (a fleet starting must not get the limit once per replica).
    this.scheduleExchange(0);
    return g;
  }

  leave(g: Group, stream: QuotaStream): void {
    const b = g.members.get(stream);
    if (b === undefined) return;
    g.members.delete(stream);
    addParty(g.own, b, -1);
    g.sorted = undefined;
    if (g.members.size === 0) {
      this.groups.delete(g.key);
      this.dirty.delete(g);
      this.opts.demand.release(g.key, this.replica);
      return;
    }
    this.changed(g);
  }

  /**
   * Something in the division of `g` changed: it is divided again and its streams are told in
   * PUSH_AFTER_MS, once for all the changes until then (a division costs a pass over the bucket's
   * streams: not one per report). A change of this replica's own demand goes to the others then too.
   */
  changed(g: Group, local = true, drift = false): void {
    if (local) {
      this.unpublished.add(g);
      this.scheduleExchange(PUSH_AFTER_MS);
    }
    // Demand drifting is told at most every driftPushEveryMs; anything else at the next push.
    if (!drift) g.urgent = true;
    this.dirty.add(g);
    if (this.pushTimer === undefined && !this.closed) this.pushTimer = this.opts.clock.setTimeout(() => this.push(), PUSH_AFTER_MS);
  }

  private push(): void {
    this.pushTimer = undefined;
    const now = this.opts.clock.nowMs();
    const groups: Group[] = [];
    let later = Infinity;
    let room = PUSH_MEMBERS_PER_TURN;
    for (const g of this.dirty) {
      const due = g.pushedAtMs + driftPushEveryMs(g.members.size);
      if (!g.urgent && due > now) later = Math.min(later, due);
      else if (room > 0) {
        groups.push(g);
        room -= g.members.size;
      } else later = now; // the rest in the next turn, after the reports waiting meanwhile
    }
    for (const g of groups) {
      this.dirty.delete(g);
      g.urgent = false;
      g.pushedAtMs = now;
    }
    if (later < Infinity && !this.closed) this.pushTimer = this.opts.clock.setTimeout(() => this.push(), later - now);
    // One response per stream, whatever the number of its buckets that changed.
    const out = new Map<QuotaStream, BucketAction[]>();
    for (const g of groups) {
      const old = g.division;
      g.division = undefined;
      if (old === undefined) continue; // never divided: its streams are assigned as they report
      const d = (g.division = this.divideGroup(g, old.limit, old.unitS));
      // (A reassignment may take its bucket out of the group: the pass is over the division's members.)
      for (const [s, b] of g.sorted!) {
        // A pass over the bucket's streams: the full assignment only for a share that moved enough.
        if (!mayHaveMoved(b, d)) continue;
        const a = s.reassign(b, now);
        if (a === undefined) continue;
        const list = out.get(s);
        if (list === undefined) out.set(s, [a]);
        else list.push(a);
      }
    }
    for (const [s, actions] of out) s.deliver(actions);
  }

  /**
   * Whole tokens of `stream` in the division of `g` for a limit of `limit` per `unitS`: the last
   * division (changes since are pushed soon); a stream that joined since gets an equal part of
   * this replica's tokens until then.
   */
  tokensOf(g: Group, b: TrackedBucket, limit: number, unitS: number): { tokens: number; grain: Grain } {
    let d = g.division;
    if (d === undefined || d.limit !== limit || d.unitS !== unitS) d = g.division = this.divideGroup(g, limit, unitS);
    return { tokens: b.shareOf === d ? b.share : Math.max(1, Math.floor(d.mine / g.members.size)), grain: d.grain };
  }

  private divideGroup(g: Group, limit: number, unitS: number): Division {
    const now = this.opts.clock.nowMs();
    // Streams in id order (the same order on every replica), sorted again only when they changed.
    g.sorted ??= [...g.members].sort((a, b) => (a[0].id < b[0].id ? -1 : a[0].id > b[0].id ? 1 : 0));
    const members = g.sorted;
    const local = g.parties;
    while (local.length < members.length) local.push(emptySum());
    local.length = members.length;
    for (let i = 0; i < members.length; i++) {
      const p = local[i]!;
      p.demand = 0;
      p.measured = 0;
      p.unmeasured = 0;
      p.idle = 0;
      addParty(p, members[i]![1]);
    }
    const own = sumOf(local);
    const replicas: Array<[string, BucketDemand]> = [[this.replica, own]];
    for (const [r, d] of g.remote) if (d.expiresAtMs > now) replicas.push([r, d.demand]);
    replicas.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    const parties = replicas.map(([, d]) => d);
    let streams = 0;
    for (const p of parties) streams += p.measured + p.unmeasured + p.idle;
    const grain = grainFor(limit, unitS, streams);
    const mean = meanDemand(parties);
    const mine = divide(grain.total, parties, grain.fillSeconds, mean)[replicas.findIndex(([r]) => r === this.replica)]!;
    const tokens = divide(mine, local, grain.fillSeconds, mean);
    const d: Division = { limit, unitS, grain, mine };
    for (let i = 0; i < members.length; i++) {
      const b = members[i]![1];
      b.share = tokens[i]!;
      b.shareOf = d;
    }
    return d;
  }

  /** The next exchange in `ms`, unless one is due sooner; right after the current one if `ms` is 0. */
  private scheduleExchange(ms: number): void {
    if (this.closed) return;
    if (ms === 0 && this.exchanging !== undefined) {
      this.exchangeAgain = true;
      return;
    }
    const at = this.opts.clock.nowMs() + ms;
    if (this.exchangeAtMs !== undefined && this.exchangeAtMs <= at) return;
    this.opts.clock.clearTimeout(this.exchangeTimer);
    this.exchangeAtMs = at;
    this.exchangeTimer = this.opts.clock.setTimeout(() => this.exchange(), ms);
  }

  /** Publishes every group's demand, reads the other replicas', marks stale streams; once at a time. */
  private exchange(): void {
    this.exchangeTimer = undefined;
    this.exchangeAtMs = undefined;
    if (this.closed || this.groups.size === 0) return;
    if (this.exchanging !== undefined) {
      this.exchangeAgain = true;
      return;
    }
    const now = this.opts.clock.nowMs();
    // Every group once a second (entries renewed); in between, the changed ones. The streams of a
    // group are visited every STALE_SCAN_EVERY_MS (stale ones found), a fifth of the groups at each
    // full exchange: a pass over all is a cache miss per stream of each bucket, 100,000 of them
    // for 1,000 Envoys of 100 buckets (tens of milliseconds the reports would wait).
    const full = now - this.fullExchangeAtMs >= EXCHANGE_EVERY_MS;
    if (full) this.fullExchangeAtMs = now;
    let scans = full ? Math.ceil((this.groups.size * EXCHANGE_EVERY_MS) / STALE_SCAN_EVERY_MS) : 0;
    const groups = full ? [...this.groups.values()] : [...this.unpublished].filter((g) => this.groups.get(g.key) === g);
    this.unpublished.clear();
    let remoteChanged = false;
    /** The groups from `from` on, EXCHANGE_GROUPS_PER_TURN of them: published, and the others' demand read. */
    const slice = (from: number): Promise<void> => {
      const mine = new Map<string, BucketDemand>();
      const to = Math.min(groups.length, from + EXCHANGE_GROUPS_PER_TURN);
      for (let i = from; i < to; i++) {
        const g = groups[i]!;
        if (this.groups.get(g.key) !== g) continue; // gone since the pass began
        scans = this.publishing(g, now, full, scans, mine);
      }
      const done = this.opts.demand.exchange(this.replica, mine, now, now + EXCHANGE_TTL_MS).then(
        (answer) => {
          if (answer === undefined) return;
          for (const [key, remote] of answer) {
            const g = this.groups.get(key);
            if (g === undefined) continue;
            if (!sameRemote(g.remote, remote)) {
              remoteChanged = true;
              this.changed(g, false);
            }
            g.remote = remote;
          }
        },
        () => undefined,
      );
      // Thousands of buckets (each its own: a flood): the next slice in a later turn, so the reports wait no longer than one.
      if (to >= groups.length || this.closed) return done;
      return done.then(() => new Promise<void>((resolve) => setImmediate(resolve))).then(() => slice(to));
    };
    this.exchanging = slice(0).finally(() => {
      this.exchanging = undefined;
      const again = this.exchangeAgain;
      this.exchangeAgain = false;
      // While the other replicas' demand moves (a fleet starting), look again soon.
      this.scheduleExchange(again ? 0 : remoteChanged ? EXCHANGE_SOON_MS : EXCHANGE_EVERY_MS);
    });
  }

  /** One group's part of an exchange: its stale streams looked for (if `scans` allow), its demand into `mine`. */
  private publishing(g: Group, now: number, full: boolean, scans: number, mine: Map<string, BucketDemand>): number {
    let changed = false;
    if (scans > 0 && now - g.scannedAtMs >= STALE_SCAN_EVERY_MS) {
      scans--;
      g.scannedAtMs = now;
      const own = emptySum();
      for (const [s, b] of g.members) {
        const stale = now - b.lastReportMs > (2 * s.cadenceS + 1) * 1000;
        if (stale !== b.stale) {
          b.stale = stale;
          changed = true;
        }
        addParty(own, b);
      }
      g.own = own; // what was added and taken away since the last pass may have drifted by rounding
    }
    if (full) for (const d of g.remote.values()) if (d.expiresAtMs <= now) changed = true;
    if (changed) this.changed(g, false);
    mine.set(g.key, { ...g.own });
    return scans;
  }
}

export class QuotaStream {
  private domain = '';
  private readonly buckets = new Map<string, TrackedBucket>();
  /** Tracked buckets by the bytes of their id as the stream sent it (BucketUsage.wire). */
  private readonly byWire = new Map<string, TrackedBucket>();
  private reportSeq = 0;
  /** The budget the report being handled in parts passed (the stream ends after its last part). */
  private ending: Refusal | undefined;
  private closed = false;
  /** What its buckets hold (admission.ts). */
  private readonly holding = new Holding();
  /** Seconds between the stream's periodic reports, smoothed. */
  cadenceS = ENVOY_REPORT_INTERVAL_S;
  private lastPeriodicMs: number | undefined;

  constructor(
    private readonly service: QuotaService,
    readonly id: string,
    private readonly send: (actions: BucketAction[]) => void,
    /** What the streams of its connection hold together. */
    private readonly connection: ConnectionHolding,
    private readonly onClose: () => void,
  ) {}

  get bucketCount(): number {
    return this.buckets.size;
  }

  /** Its lines of `/debug/rlqs`: the stream, then one per bucket. */
  *describeLines(): Generator<string> {
    yield `stream ${this.id} domain '${this.domain}': ${this.buckets.size} buckets, reports every ${this.cadenceS.toFixed(1)} s\n`;
    for (const b of this.buckets.values()) yield `  ${bucketLine(b)}\n`;
  }

  describeBucket(domain: string, key: string): string {
    const b = domain === this.domain ? this.buckets.get(key) : undefined;
    return b === undefined ? '' : `  stream ${this.id}: ${bucketLine(b)}\n`;
  }

  /**
   * One message of the stream. Throws QuotaStreamError for a malformed report, before anything of
   * it is answered, and once the report is answered when it takes the stream or its connection
   * over a budget (the stream ends).
   *
   * `part`: a big report may be handed in parts, in turns of the event loop one after the other
   * (QuotaCalls), each answered as it is handled: `at` is the index in the whole report of the
   * part's first usage (0 for the first part: the report's own checks and cadence are there),
   * `last` whether it ends the report (a budget passed in an earlier part ends the stream then).
   */
  report(r: UsageReports, part?: { readonly at: number; readonly last: boolean }): void {
    if (this.closed) return;
    const service = this.service;
    const first = part === undefined || part.at === 0;
    if (first) {
      this.checkDomain(r.domain);
      service.stats?.reports.inc();
    }
    // Envoy keeps reporting (the domain alone) when it has no bucket left, e.g. after abandons.
    if (r.usages.length === 0) return;
    const now = service.opts.clock.nowMs();
    // A bucket's first report is alone and has time_elapsed 0; a periodic one carries every bucket.
    if (first && (r.usages.length > 1 || r.usages.some((u) => u.elapsedSeconds > 0))) {
      if (this.lastPeriodicMs !== undefined) {
        const gap = Math.min(MAX_CADENCE_S, Math.max(MIN_CADENCE_S, (now - this.lastPeriodicMs) / 1000));
        this.cadenceS = NEWEST * gap + (1 - NEWEST) * this.cadenceS;
      }
      this.lastPeriodicMs = now;
    }
    const actions: BucketAction[] = [];
    const touched: TrackedBucket[] = [];
    const seq = first ? ++this.reportSeq : this.reportSeq;
    /** The stream's or its connection's budget this report would exceed: the stream ends once it is answered. */
    let ending = first ? undefined : this.ending;
    const usages = r.usages;
    const at = part?.at ?? 0;
    for (let i = 0; i < usages.length; i++) {
      const u = usages[i]!;
      // A bucket the stream reported before is found by its bytes: no decoding, no canonical key.
      let b = u.wire === undefined ? undefined : this.byWire.get(u.wire);
      if (b === undefined) this.checkBucketId(u.bucket, at + i);
      const key = b?.key ?? bucketKey(u.bucket);
      if (!(u.elapsedSeconds >= 0)) throw new QuotaStreamError(3, `bucket ${clip(key)}: time_elapsed must be a duration of zero or more, got ${u.elapsedSeconds} s`);
      const elapsedS = Math.min(MAX_ELAPSED_S, u.elapsedSeconds);
      const allowed = clampCount(u.allowed);
      const denied = clampCount(u.denied);
      const count = allowed + denied;
      b ??= this.buckets.get(key);
      if (b === undefined) {
        if (ending !== undefined) {
          actions.push(this.untracked(u.bucket, u.wire));
          continue;
        }
        // Admitted or refused here only: every bucket a stream tracks passes this one check.
        const known = service.namedAt(this.domain, key);
        const cost = bucketCost(u.wire?.length ?? key.length, known === undefined, key.length);
        const refused = service.admission.admit(this.holding, this.connection, cost, this.id);
        if (refused !== undefined) {
          if (refused.level !== 'process') ending = refused;
          actions.push(this.untracked(u.bucket, u.wire));
          continue;
        }
        const named = service.nameBucket(this.domain, key, u.bucket, cost.name, known);
        b = {
          key: named.key,
          pairs: named.pairs,
          named,
          wire: u.wire,
          reportSeq: 0,
          demand: NOT_MEASURED,
          published: NOT_MEASURED,
          // A stream that reopened reports its buckets with the time since Envoy's last report.
          countSince: elapsedS > 0 ? count : 0,
          measureFromMs: now - elapsedS * 1000,
          lastReportMs: now,
          idleReports: 0,
          allowedSinceAssign: 0,
          deniedSinceAssign: 0,
          matched: false,
          group: undefined,
          stale: false,
          held: undefined,
          sentAtMs: 0,
          sentTtlS: 0,
          heldRate: NaN,
          heldFillS: 0,
          heldPerFill: 0,
          heldMaxTokens: 0,
          share: 0,
          shareOf: undefined,
          charged: cost.bucket + cost.name,
          bytes: cost.bucket,
        };
        this.buckets.set(key, b);
        // Its first bytes only (Envoy sends a bucket's id the same way each time): another form of
        // a tracked id (map order, unknown fields) takes the canonical path and adds nothing here.
        if (u.wire !== undefined) this.byWire.set(u.wire, b);
      } else {
        b.countSince += count;
        if (b.stale && b.group !== undefined) {
          addParty(b.group.own, b, -1);
          b.stale = false;
          addParty(b.group.own, b);
          service.changed(b.group);
        }
      }
      b.lastReportMs = now;
      b.allowedSinceAssign += allowed;
      b.deniedSinceAssign += denied;
      this.measure(b, now, count);
      if (b.reportSeq !== seq) {
        b.reportSeq = seq;
        touched.push(b);
      }
    }
    for (const b of touched) {
      if (b.idleReports >= IDLE_REPORTS_TO_ABANDON) {
        actions.push(this.abandon(b));
        continue;
      }
      const a = this.assign(b, now, false, true);
      if (a !== undefined) actions.push(a);
    }
    if (actions.length > 0 && !this.closed) this.send(actions);
    this.ending = ending;
    if (ending !== undefined && (part === undefined || part.last)) throw new QuotaStreamError(8, ending.reason);
  }

  /** A bucket id the stream reports for the first time: pairs within REQUEST_MAX_ENTRIES / REQUEST_MAX_ENTRY_LENGTH, none empty. */
  private checkBucketId(pairs: BucketPairs, index: number): void {
    const o = this.service.opts;
    const where = `bucket_quota_usages[${index}].bucket_id`;
    if (pairs.size === 0) throw new QuotaStreamError(3, `${where} must hold at least one key/value pair`);
    const maxEntries = o.maxEntries ?? Infinity;
    if (pairs.size > maxEntries) throw new QuotaStreamError(3, `${where}: ${pairs.size} entries, more than ${maxEntries} (REQUEST_MAX_ENTRIES)`);
    const maxLength = o.maxEntryLength ?? Infinity;
    for (const [k, v] of pairs) {
      if (k.length > maxLength) throw new QuotaStreamError(3, `${where}: key '${clip(k)}' is ${k.length} characters long, more than ${maxLength} (REQUEST_MAX_ENTRY_LENGTH)`);
      if (v.length > maxLength) throw new QuotaStreamError(3, `${where}: the value of '${clip(k)}' is ${v.length} characters long, more than ${maxLength} (REQUEST_MAX_ENTRY_LENGTH)`);
      if (k === '' || v === '') throw new QuotaStreamError(3, `${where}: keys and values must not be empty (got '${clip(k)}': '${clip(v)}')`);
    }
  }

  /** Turns the usage reported since the last measurement into a rate, and publishes a material change. */
  private measure(b: TrackedBucket, now: number, count: number): void {
    const spanS = (now - b.measureFromMs) / 1000;
    if (spanS < MIN_MEASURE_S) return;
    const rate = Math.min(MAX_DEMAND_PER_S, b.countSince / spanS);
    b.countSince = 0;
    b.measureFromMs = now;
    // No request in a whole report: the share goes back at once (not by halves).
    b.demand = count === 0 ? 0 : b.demand <= 0 ? rate : NEWEST * rate + (1 - NEWEST) * b.demand;
    b.idleReports = count === 0 ? b.idleReports + 1 : 0;
    const p = b.published;
    const moved = b.demand === 0 ? p !== 0 : p <= 0 || Math.abs(b.demand - p) > REPUBLISH_CHANGE * p;
    if (!moved) return;
    // From or to idle (or a first rate) is told at once; a busy stream's demand moving, with the drift.
    const drift = p > 0 && b.demand > 0;
    const g = b.group;
    if (g !== undefined) addParty(g.own, b, -1);
    b.published = b.demand;
    if (g !== undefined) {
      addParty(g.own, b);
      this.service.changed(g, true, drift);
    }
  }

  /**
   * The stream ended. Envoy keeps enforcing its assignments until they expire and reopens the
   * stream at its next report, so its shares stay reserved for most of a report interval
   * (RESERVED_AFTER_END), then go back to the others (told at once). A reserved bucket is still
   * held, so it stays counted against the budgets of its connection and of the process until then:
   * streams opened and ended in a loop cannot hold more than the budgets.
   */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    const reserved: TrackedBucket[] = [];
    for (const b of this.buckets.values()) {
      if (b.group !== undefined) reserved.push(b);
      else this.release(b);
    }
    this.buckets.clear();
    this.byWire.clear();
    this.onClose();
    if (reserved.length === 0) return;
    this.service.opts.clock.setTimeout(() => {
      for (const b of reserved) {
        this.service.leave(b.group!, this);
        this.release(b);
      }
    }, RESERVED_AFTER_END * this.cadenceS * 1000);
  }

  /** The division of one of its buckets changed: the new assignment if its share moved materially. */
  reassign(b: TrackedBucket, now: number): BucketAction | undefined {
    return this.closed || this.buckets.get(b.key) !== b ? undefined : this.assign(b, now, false);
  }

  /** Sends actions made outside a report (a push). */
  deliver(actions: BucketAction[]): void {
    if (!this.closed) this.send(actions);
  }

  /** After a config change: assign every bucket again, abandon those whose rule is gone. */
  reassignAll(): void {
    if (this.closed || this.buckets.size === 0) return;
    const now = this.service.opts.clock.nowMs();
    const actions: BucketAction[] = [];
    for (const b of [...this.buckets.values()]) {
      const a = this.assign(b, now, true);
      if (a !== undefined) actions.push(a);
    }
    if (actions.length > 0 && !this.closed) this.send(actions);
  }

  /** Time to live of an assignment now: three report intervals, at least MIN_TTL_S. */
  private ttlS(): number {
    return Math.max(MIN_TTL_S, Math.ceil(TTL_INTERVALS * this.cadenceS));
  }

  private abandon(b: TrackedBucket): BucketAction {
    this.buckets.delete(b.key);
    this.release(b);
    if (b.wire !== undefined && this.byWire.get(b.wire) === b) this.byWire.delete(b.wire);
    if (b.group !== undefined) this.service.leave(b.group, this);
    b.group = undefined;
    this.service.stats?.abandons.inc();
    return { bucket: b.pairs, wire: b.wire, abandon: true };
  }

  /** A bucket the stream lets go: its name, and what it held against the budgets. */
  private release(b: TrackedBucket): void {
    this.service.releaseBucket(b.named);
    this.service.admission.release(this.holding, this.connection, b.charged, b.bytes);
  }

  /**
   * A bucket the budgets did not admit: not tracked nor divided, answered (at each report that
   * carries it) with what its rule gives without a share, for one time to live. A limited rule
   * denies all: neither Envoy's own fallback (allow all unless configured) nor a static share
   * could keep a limit that streams without number may report.
   */
  private untracked(pairs: BucketPairs, wire: string | undefined): BucketAction {
    this.service.stats?.refusedBuckets.inc();
    const p = this.place(pairs);
    return { bucket: pairs, wire, assign: { strategy: p.fixed ?? DENY_ALL, ttlSeconds: this.ttlFor(p) } };
  }

  /** Where a bucket lands in the current config (remembered per config: a lookup is not per report). */
  private place(pairs: BucketPairs, known?: Placement): Placement {
    const o = this.service.opts;
    const config = o.config();
    if (known !== undefined && known.config === config) return known;
    const descriptor = config?.bucketDescriptor(this.domain, pairs);
    if (descriptor === undefined) return { config, matched: false, rule: undefined, fixed: o.unmatched.strategy === 'allow-all' ? ALLOW_ALL : DENY_ALL };
    const rule = config!.getLimit(this.domain, descriptor);
    const counters = rule === undefined ? undefined : this.service.countersOf(rule);
    let fixed: QuotaStrategy | undefined;
    if (rule === undefined || rule.unlimited || rule.shadowMode) fixed = ALLOW_ALL;
    else if (rule.limit.requestsPerUnit === 0 || !(unitToDivider(rule.limit.unit) > 0)) fixed = DENY_ALL;
    return { config, matched: true, rule, fixed, counters };
  }

  /** Time to live of an assignment: three report intervals; for an unmatched bucket, RLQS_UNMATCHED_TTL if longer. */
  private ttlFor(p: Placement): number {
    return p.matched ? this.ttlS() : Math.max(this.ttlS(), this.service.opts.unmatched.ttlSeconds);
  }

  /** What Envoy reported for a bucket since it was last assigned, on its rule's `rlqs_allowed` / `rlqs_denied`. */
  private countUsage(b: TrackedBucket, p: Placement): void {
    if (p.counters !== undefined) {
      if (b.allowedSinceAssign > 0) p.counters.allowed.inc(b.allowedSinceAssign);
      if (b.deniedSinceAssign > 0) p.counters.denied.inc(b.deniedSinceAssign);
    }
    b.allowedSinceAssign = 0;
    b.deniedSinceAssign = 0;
  }

  private checkDomain(domain: string): void {
    if (this.domain === '') {
      if (domain === '') throw new QuotaStreamError(3, 'the first usage report of a stream must name its domain');
      const maxLength = this.service.opts.maxEntryLength ?? Infinity;
      if (domain.length > maxLength) throw new QuotaStreamError(3, `domain is ${domain.length} characters long, more than ${maxLength} (REQUEST_MAX_ENTRY_LENGTH)`);
      this.domain = domain;
    } else if (domain !== '' && domain !== this.domain) {
      throw new QuotaStreamError(3, `a stream reports one domain: got '${clip(domain)}' after '${this.domain}' (open a new stream for another domain)`);
    }
  }

  /**
   * The action for a bucket now, or undefined when the assignment Envoy holds is still good: its
   * share moved by no more than RESEND_CHANGE and its time to live outlasts the next report.
   * `configChange`: a bucket whose rule is gone is abandoned. `onReport`: its stream just reported
   * it (the burst may grow).
   */
  private assign(b: TrackedBucket, now: number, configChange: boolean, onReport = false): BucketAction | undefined {
    const service = this.service;
    const place = (b.named.placement = this.place(b.pairs, b.named.placement));
    this.countUsage(b, place);
    if (configChange && b.matched && !place.matched) return this.abandon(b);
    b.matched = place.matched;
    let strategy: QuotaStrategy;
    const ttlS = this.ttlFor(place);
    if (place.fixed !== undefined) {
      if (b.group !== undefined) service.leave(b.group, this);
      b.group = undefined;
      strategy = place.fixed;
    } else {
      const limit = place.rule!.limit.requestsPerUnit;
      const unitS = unitToDivider(place.rule!.limit.unit);
      b.group ??= service.join(b.named.scoped, this, b);
      const { tokens, grain } = service.tokensOf(b.group, b, limit, unitS);
      // Until its first report with a rate, a stream holds half its share and a small burst: each
      // Envoy of a fleet starting together admits its first request unasked and starts its first
      // bucket full, which the fleet's first interval pays back.
      const first = b.demand === NOT_MEASURED;
      const tb = tokenBucketFor(first ? Math.max(1, Math.floor(tokens / 2)) : tokens, grain.fillSeconds, limit / unitS, first);
      // Envoy scales a replaced bucket's tokens to the new max_tokens: a burst grows at most
      // twofold per report, so a nearly empty small bucket does not become a full large one.
      if (b.heldFillS > 0) tb.maxTokens = Math.min(tb.maxTokens, (onReport ? 2 : 1) * b.heldMaxTokens);
      const v = b.heldFillS > 0 && b.heldFillS !== tb.fillIntervalSeconds ? visibleChange(tb, { maxTokens: b.heldMaxTokens, tokensPerFill: b.heldPerFill, fillIntervalSeconds: b.heldFillS }) : tb;
      strategy = { kind: 'token-bucket', maxTokens: v.maxTokens, tokensPerFill: v.tokensPerFill, fillIntervalSeconds: v.fillIntervalSeconds };
    }
    if (b.held !== undefined && !materiallyDifferent(b, strategy)) {
      // The same assignment again only when the next report could come after it expires.
      if ((now - b.sentAtMs) / 1000 + 2 * this.cadenceS <= b.sentTtlS) return undefined;
      strategy = b.held;
    }
    b.held = strategy;
    b.sentAtMs = now;
    b.sentTtlS = ttlS;
    const tb = strategy.kind === 'token-bucket' ? strategy : undefined;
    b.heldRate = tb === undefined ? NaN : tb.tokensPerFill / tb.fillIntervalSeconds;
    b.heldFillS = tb?.fillIntervalSeconds ?? 0;
    b.heldPerFill = tb?.tokensPerFill ?? 0;
    b.heldMaxTokens = tb?.maxTokens ?? 0;
    service.stats?.assignments.inc();
    return { bucket: b.pairs, wire: b.wire, assign: { strategy, ttlSeconds: ttlS } };
  }
}

/**
 * Whether Envoy should be sent `next` instead of what it holds: another kind; a burst doubled; a
 * rate moved by more than RESEND_CHANGE (Envoy replaces its bucket and truncates its tokens: a
 * smaller change costs about as much as it brings).
 */
function materiallyDifferent(b: TrackedBucket, next: QuotaStrategy): boolean {
  const heldTokenBucket = b.heldFillS > 0;
  if (!heldTokenBucket || next.kind !== 'token-bucket') return heldTokenBucket || b.held!.kind !== next.kind;
  return rateMoved(b.heldRate, next.tokensPerFill / next.fillIntervalSeconds, b.published) || next.maxTokens >= 2 * b.heldMaxTokens;
}

/**
 * A rate moved by more than RESEND_CHANGE of itself, unless both rates are well above the
 * stream's demand (it cannot use the difference; a rise of its demand is reported and published).
 */
function rateMoved(was: number, now: number, demand: number): boolean {
  const moved = Math.abs(now - was);
  if (demand > 0 && Math.min(was, now) >= UNUSED_SHARE * demand) return false;
  return moved > RESEND_CHANGE * was;
}

/**
 * Whether the bucket's share in division `d` may differ materially from what it holds (a cheap test
 * before the full assignment; a time to live running out is renewed at the stream's reports).
 */
function mayHaveMoved(b: TrackedBucket, d: Division): boolean {
  if (b.shareOf !== d || Number.isNaN(b.heldRate)) return true;
  if (b.heldFillS !== d.grain.fillSeconds) return true;
  // A first assignment holds half its share: compare with what it would be sent.
  const share = b.demand === NOT_MEASURED ? Math.max(1, Math.floor(b.share / 2)) : b.share;
  return rateMoved(b.heldRate, share / d.grain.fillSeconds, b.published);
}

/** A BucketDemand being summed. */
type Sum = { demand: number; measured: number; unmeasured: number; idle: number };

const emptySum = (): Sum => ({ demand: 0, measured: 0, unmeasured: 0, idle: 0 });

/** Adds one bucket's part to `sum` (`sign` -1 takes it away): its published demand, or one unmeasured or idle stream. */
function addParty(sum: Sum, b: TrackedBucket, sign = 1): Sum {
  const p = b.stale ? 0 : b.published;
  if (p === NOT_MEASURED) sum.unmeasured += sign;
  else if (p <= 0) sum.idle += sign;
  else {
    // Whatever rounding the additions and removals leave, a sum of demands is never below 0.
    sum.demand = Math.max(0, sum.demand + sign * p);
    sum.measured += sign;
  }
  return sum;
}

function sumOf(parties: readonly BucketDemand[]): BucketDemand {
  let demand = 0;
  let measured = 0;
  let unmeasured = 0;
  let idle = 0;
  for (const p of parties) {
    demand += p.demand;
    measured += p.measured;
    unmeasured += p.unmeasured;
    idle += p.idle;
  }
  return { demand, measured, unmeasured, idle };
}

function sameRemote(a: ReadonlyMap<string, ReplicaDemand>, b: ReadonlyMap<string, ReplicaDemand>): boolean {
  if (a.size !== b.size) return false;
  for (const [r, x] of a) {
    const y = b.get(r)?.demand;
    if (y === undefined || y.demand !== x.demand.demand || y.measured !== x.demand.measured || y.unmeasured !== x.demand.unmeasured || y.idle !== x.demand.idle) return false;
  }
  return true;
}

/** A reported count as a number no larger than 2^53 (uint64 on the wire). */
function clampCount(n: number): number {
  return Number.isFinite(n) && n > 0 ? Math.min(n, Number.MAX_SAFE_INTEGER) : 0;
}

/** At most the first 64 characters of a client's text, for a message that names it. */
function clip(text: string): string {
  return text.length <= 64 ? text : `${text.slice(0, 64)}… (${text.length} characters)`;
}

/** A bucket's pairs in one canonical text (sorted by key): the same bucket whatever the map order. */
export function bucketKey(pairs: BucketPairs): string {
  return JSON.stringify([...pairs.keys()].sort().map((k) => [k, pairs.get(k)]));
}

function describeDemand(d: BucketDemand): string {
  return `${d.demand.toFixed(2)}/s from ${d.measured} streams, ${d.unmeasured} not measured, ${d.idle} idle`;
}

function describeStrategy(s: QuotaStrategy): string {
  if (s.kind !== 'token-bucket') return s.kind;
  return `token bucket (max ${s.maxTokens}, ${s.tokensPerFill} tokens every ${s.fillIntervalSeconds} s)`;
}

function bucketLine(b: TrackedBucket): string {
  const demand = b.demand === NOT_MEASURED ? 'not measured yet' : `${b.demand.toFixed(2)}/s`;
  const sent = b.held === undefined ? 'nothing yet' : `${describeStrategy(b.held)} for ${b.sentTtlS} s`;
  return `${b.key}: demand ${demand}${b.stale ? ' (stale)' : ''}, assigned ${sent}`;
}
