/**
 * The last OVER_LIMIT decisions (`/debug/denials`, DEBUG_DENIALS_SIZE) and the optional line per
 * denial (DEBUG_DENIALS_LOG_PER_SECOND).
 *
 * Contract with the decision path (src/limiter/service.ts calls {@link DenialRing.record} once per
 * descriptor answered OVER_LIMIT, never for an OK one): recording writes references and numbers
 * into a slot of a ring allocated at start-up; it builds no string and allocates nothing. The
 * request's descriptor is kept by reference (requests are fresh objects, never reused), unless it
 * is longer than {@link MAX_KEPT_CHARS} characters: then only its size is kept, so the ring holds
 * at most DEBUG_DENIALS_SIZE x 1,024 characters of request data whatever the clients send. Text is
 * made when the page is read (or a log line written), with DEBUG_VALUES applied to the values and
 * the client's address.
 *
 * The log: at most N lines a second (a second starts at the first denial after the last one
 * ended); the denials of that second beyond N are counted and told in one line when it ends.
 */
import type { Caller } from '../core/store';
import type { Descriptor, DescriptorStatus } from '../core/rls';
import { Code, UNIT_NAMES } from '../core/rls';
import type { RateLimitRule } from '../core/rule';
import type { Clock } from '../platform/clock';
import { isoUtc } from '../platform/time-text';
import type { Logger } from './logger';
import { describeValue, type ValuePrivacy } from './value-privacy';

/** The listener a request came through ('' for the runner's in-process limiter). */
export type Transport = 'grpc' | 'http' | '';

/** A descriptor longer than this (keys and values, in characters) is kept without its entries. */
export const MAX_KEPT_CHARS = 1024;
/** Most denials on one page. */
export const MAX_PAGE = 1000;
export const DEFAULT_PAGE = 100;

/** One recorded denial; the ring's slots are made once and overwritten. */
class Slot {
  seq = 0;
  atMs = 0;
  domain = '';
  /** The request's descriptor; undefined when it was too long to keep. */
  descriptor: Descriptor | undefined = undefined;
  /** Its entries and characters (what is told when it was not kept). */
  entries = 0;
  chars = 0;
  /** The descriptor's matched rule; the denying limit is `limit` (this rule's or one of `more`). */
  rule: RateLimitRule | undefined = undefined;
  limit: RateLimitRule['limit'] | undefined = undefined;
  hits = 0;
  resetSeconds = -1;
  transport: Transport = '';
  caller: Caller | undefined = undefined;
  /** The request's overall answer: OK when shadow or quota mode turned the denial into an OK. */
  overall = Code.OVER_LIMIT;
}

export interface DenialRingOptions {
  /** Denials kept (DEBUG_DENIALS_SIZE, > 0). */
  readonly size: number;
  readonly clock: Clock;
  /** Lines a second (DEBUG_DENIALS_LOG_PER_SECOND); 0 = none. */
  readonly logPerSecond: number;
  readonly logger: Pick<Logger, 'info'>;
  /** DEBUG_VALUES. */
  readonly privacy: ValuePrivacy;
}

/** What a page asks for (validated by {@link parseDenialsQuery}). */
export interface DenialsQuery {
  /** Denials on the page (1..MAX_PAGE). */
  readonly limit: number;
  /** Only denials older than this sequence number (the previous page's `next_before`). */
  readonly before: number | undefined;
  readonly domain: string | undefined;
  /** A rule's stats key (`domain.key_value...`, as /rlconfig lists it). */
  readonly rule: string | undefined;
}

const QUERY_KEYS = new Set(['limit', 'before', 'domain', 'rule']);

/** The page's query, or the one-line reason it is refused (a 400). */
export function parseDenialsQuery(q: URLSearchParams): DenialsQuery | string {
  for (const key of q.keys()) {
    if (!QUERY_KEYS.has(key)) return `unknown query parameter '${key}' (expected limit, before, domain, rule)`;
    if (q.getAll(key).length > 1) return `query parameter '${key}' is given more than once`;
  }
  const limitText = q.get('limit');
  let limit = DEFAULT_PAGE;
  if (limitText !== null) {
    limit = Number(limitText);
    if (!/^\d+$/.test(limitText) || limit < 1 || limit > MAX_PAGE) return `limit must be a whole number from 1 to ${MAX_PAGE}, not '${clip(limitText)}'`;
  }
  const beforeText = q.get('before');
  let before: number | undefined;
  if (beforeText !== null) {
    before = Number(beforeText);
    if (!/^\d+$/.test(beforeText) || !Number.isSafeInteger(before) || before < 1) return `before must be a denial's sequence number (a whole number from 1), not '${clip(beforeText)}'`;
  }
  const domain = q.get('domain') ?? undefined;
  const rule = q.get('rule') ?? undefined;
  if (domain === '') return 'domain must not be empty';
  if (rule === '') return 'rule must not be empty';
  return { limit, before, domain, rule };
}

/** A parameter's text in an error line, cut short (it comes from the client). */
function clip(text: string): string {
  return text.length > 40 ? `${text.slice(0, 40)}...` : text;
}

export class DenialRing {
  private readonly slots: Slot[];
  /** Denials recorded since start-up; the newest is number `total`, in slot `(total - 1) % size`. */
  private total = 0;
  private readonly size: number;
  private readonly clock: Clock;
  private readonly privacy: ValuePrivacy;
  private readonly logPerSecond: number;
  private readonly logger: Pick<Logger, 'info'>;
  private logSecondEndsMs = 0;
  private loggedThisSecond = 0;
  private leftOut = 0;
  private leftOutTimer: unknown = undefined;

  constructor(opts: DenialRingOptions) {
    this.size = opts.size;
    this.clock = opts.clock;
    this.privacy = opts.privacy;
    this.logPerSecond = opts.logPerSecond;
    this.logger = opts.logger;
    this.slots = new Array<Slot>(opts.size);
    for (let i = 0; i < opts.size; i++) this.slots[i] = new Slot();
  }

  /** Denials recorded since start-up (the page's `recorded`). */
  get recorded(): number {
    return this.total;
  }

  /**
   * One descriptor answered OVER_LIMIT. `rule` is the descriptor's matched rule and
   * `status.currentLimit` the limit that denied (its own or one of its `rate_limits`).
   */
  record(
    domain: string,
    descriptor: Descriptor,
    rule: RateLimitRule | undefined,
    status: DescriptorStatus,
    hits: number,
    overall: Code,
    transport: Transport,
    caller: Caller | undefined,
  ): void {
    const seq = ++this.total;
    const slot = this.slots[(seq - 1) % this.size]!;
    const entries = descriptor.entries;
    let chars = 0;
    for (let i = 0; i < entries.length; i++) chars += entries[i]!.key.length + entries[i]!.value.length;
    slot.seq = seq;
    slot.atMs = this.clock.nowMs();
    slot.domain = domain;
    slot.descriptor = chars <= MAX_KEPT_CHARS ? descriptor : undefined;
    slot.entries = entries.length;
    slot.chars = chars;
    slot.rule = rule;
    slot.limit = status.currentLimit;
    slot.hits = hits;
    slot.resetSeconds = status.durationUntilReset ?? -1;
    slot.transport = transport;
    slot.caller = caller;
    slot.overall = overall;
    if (this.logPerSecond > 0) this.log(slot);
  }

  /** The page: newest first, `query.limit` at most, and where the next (older) page starts. */
  page(query: DenialsQuery): string {
    const oldest = Math.max(1, this.total - this.size + 1);
    let seq = query.before === undefined ? this.total : Math.min(this.total, query.before - 1);
    const out: string[] = [];
    let last = 0;
    for (; seq >= oldest && out.length < query.limit; seq--) {
      const slot = this.slots[(seq - 1) % this.size]!;
      if (query.domain !== undefined && slot.domain !== query.domain) continue;
      if (query.rule !== undefined && this.shownRuleKey(slot) !== query.rule) continue;
      out.push(JSON.stringify(this.describe(slot)));
      last = seq;
    }
    // More may follow when the page is full and older denials are still kept.
    const next = out.length === query.limit && last > oldest ? last : undefined;
    return (
      `{"size":${this.size},"recorded":${this.total},"kept":${Math.min(this.total, this.size)},` +
      `"denials":[${out.join(',')}]` +
      (next !== undefined ? `,"next_before":${next}` : '') +
      '}\n'
    );
  }

  private describe(slot: Slot): Record<string, unknown> {
    const limit = slot.limit;
    const d: Record<string, unknown> = {
      seq: slot.seq,
      time: isoUtc(slot.atMs),
      domain: slot.domain,
      rule: this.shownRuleKey(slot),
    };
    const name = limit?.name ?? '';
    if (name !== '') d['rule_name'] = name;
    if (slot.descriptor !== undefined) {
      d['descriptor'] = slot.descriptor.entries.map((e) => ({ key: e.key, value: describeValue(this.privacy, e.value) }));
    } else {
      d['descriptor_omitted'] = `${slot.entries} entries, ${slot.chars} characters (more than ${MAX_KEPT_CHARS} are not kept)`;
    }
    d['hits'] = slot.hits;
    if (limit !== undefined) d['limit'] = { requests_per_unit: limit.requestsPerUnit, unit: UNIT_NAMES[limit.unit] ?? String(limit.unit) };
    if (slot.resetSeconds >= 0) d['reset_seconds'] = slot.resetSeconds;
    d['transport'] = slot.transport === '' ? 'in-process' : slot.transport;
    if (slot.caller !== undefined) d['caller'] = describeValue(this.privacy, slot.caller.address);
    d['answered'] = slot.overall === Code.OVER_LIMIT ? 'OVER_LIMIT' : 'OK';
    return d;
  }

  /** A denial as the fields of its log line: flat texts, as a text line reads them. */
  private logFields(slot: Slot): Record<string, unknown> {
    const limit = slot.limit;
    const descriptor = slot.descriptor;
    return {
      domain: slot.domain,
      rule: this.shownRuleKey(slot),
      descriptor:
        descriptor !== undefined
          ? descriptor.entries.map((e) => `${e.key}=${describeValue(this.privacy, e.value)}`).join(',')
          : `(${slot.entries} entries, ${slot.chars} characters: not kept)`,
      hits: slot.hits,
      ...(limit !== undefined ? { limit: `${limit.requestsPerUnit}/${UNIT_NAMES[limit.unit] ?? String(limit.unit)}` } : {}),
      ...(slot.resetSeconds >= 0 ? { reset_seconds: slot.resetSeconds } : {}),
      transport: slot.transport === '' ? 'in-process' : slot.transport,
      ...(slot.caller !== undefined ? { caller: describeValue(this.privacy, slot.caller.address) } : {}),
      answered: slot.overall === Code.OVER_LIMIT ? 'OVER_LIMIT' : 'OK',
    };
  }

  /**
   * The stats key of the limit that denied, as shown: a request-specific key (detailed_metric,
   * value_to_metric, a request's own limit) carries the request's values as `.<key>_<value>`
   * segments, which DEBUG_VALUES then shows as it shows the values themselves.
   */
  private shownRuleKey(slot: Slot): string {
    const key = ruleKey(slot);
    if (this.privacy === 'plain') return key;
    const descriptor = slot.descriptor;
    if (descriptor === undefined) return describeValue(this.privacy, key);
    let shown = key;
    for (const e of descriptor.entries) {
      if (e.value === '') continue;
      const segment = '.' + e.key + '_' + e.value;
      // An override's key has its first entry right after the domain's dot: found the same way.
      if (shown.includes(segment)) shown = shown.split(segment).join('.' + e.key + '_' + describeValue(this.privacy, e.value));
    }
    return shown;
  }

  /** The line of a denial, or its count among those left out this second. */
  private log(slot: Slot): void {
    const now = slot.atMs;
    if (now >= this.logSecondEndsMs) {
      this.tellLeftOut();
      this.logSecondEndsMs = now + 1000;
      this.loggedThisSecond = 0;
    }
    if (this.loggedThisSecond < this.logPerSecond) {
      this.loggedThisSecond++;
      this.logger.info('over limit', this.logFields(slot));
      return;
    }
    if (this.leftOut++ === 0) this.leftOutTimer = this.clock.setTimeout(() => this.tellLeftOut(), this.logSecondEndsMs - now);
  }

  private tellLeftOut(): void {
    if (this.leftOutTimer !== undefined) {
      this.clock.clearTimeout(this.leftOutTimer);
      this.leftOutTimer = undefined;
    }
    const n = this.leftOut;
    if (n === 0) return;
    this.leftOut = 0;
    this.logger.info(`over limit: ${n} more denials in that second were not logged (DEBUG_DENIALS_LOG_PER_SECOND=${this.logPerSecond})`);
  }

  /** Stops the timer of a pending left-out line (writing it now). */
  close(): void {
    this.tellLeftOut();
  }
}

/** The stats key of the limit that denied: the rule's, or that of one of its `rate_limits`. */
function ruleKey(slot: Slot): string {
  const rule = slot.rule;
  if (rule === undefined) return '';
  if (rule.limit === slot.limit || rule.more === undefined) return rule.fullKey;
  for (const r of rule.more) if (r.limit === slot.limit) return r.fullKey;
  return rule.fullKey;
}
