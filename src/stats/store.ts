/**
 * The stats registry: every counter, gauge and timer of the service lives here under its
 * upstream (gostats) name, so sinks (statsd, Prometheus, the debug /stats page) read one place.
 * Series are created once and re-used across config reloads, as upstream does.
 */

export class Counter {
  value = 0;
  constructor(readonly name: string) {}
  inc(n = 1): void {
    this.value += n;
  }
}

export class Gauge {
  value = 0;
  constructor(readonly name: string) {}
  set(v: number): void {
    this.value = v;
  }
}

/** A timer keeps a count and a sum (milliseconds); sinks that want samples subscribe later. */
export class Timer {
  count = 0;
  sumMs = 0;
  constructor(readonly name: string) {}
  record(ms: number): void {
    this.count++;
    this.sumMs += ms;
  }
}

/** Per-rule counters: `ratelimit.service.rate_limit.<key>.<stat>`. */
export interface RuleStats {
  readonly key: string;
  readonly totalHits: Counter;
  readonly overLimit: Counter;
  readonly nearLimit: Counter;
  readonly overLimitWithLocalCache: Counter;
  readonly withinLimit: Counter;
  readonly shadowMode: Counter;
}

export const RULE_STATS_PREFIX = 'ratelimit.service.rate_limit.';

/** Default cap on series created from request data (overrides, detailed metrics, unknown domains). */
export const DEFAULT_MAX_DYNAMIC_SERIES = 10_000;

export class StatsStore {
  private readonly counters = new Map<string, Counter>();
  private readonly gauges = new Map<string, Gauge>();
  private readonly timers = new Map<string, Timer>();
  private readonly ruleStatsByKey = new Map<string, RuleStats>();
  private dynamicSeries = 0;
  private overflowRuleStats: RuleStats | undefined;

  constructor(readonly maxDynamicSeries = DEFAULT_MAX_DYNAMIC_SERIES) {}

  counter(name: string): Counter {
    let c = this.counters.get(name);
    if (c === undefined) {
      c = new Counter(name);
      this.counters.set(name, c);
    }
    return c;
  }

  gauge(name: string): Gauge {
    let g = this.gauges.get(name);
    if (g === undefined) {
      g = new Gauge(name);
      this.gauges.set(name, g);
    }
    return g;
  }

  timer(name: string): Timer {
    let t = this.timers.get(name);
    if (t === undefined) {
      t = new Timer(name);
      this.timers.set(name, t);
    }
    return t;
  }

  /** Rule stats for a key known from config: always created. */
  ruleStats(key: string): RuleStats {
    let s = this.ruleStatsByKey.get(key);
    if (s === undefined) {
      s = this.makeRuleStats(key);
      this.ruleStatsByKey.set(key, s);
    }
    return s;
  }

  /**
   * Rule stats for a key built from request data (limit overrides, detailed_metric). Upstream
   * creates these without bound (#275, #1132); past `maxDynamicSeries` new keys share one
   * catch-all series, `ratelimit.service.rate_limit.overflow.*`.
   */
  dynamicRuleStats(key: string): RuleStats {
    const s = this.ruleStatsByKey.get(key);
    if (s !== undefined) return s;
    if (this.dynamicSeries >= this.maxDynamicSeries) {
      if (this.overflowRuleStats === undefined) {
        this.overflowRuleStats = this.ruleStats('overflow');
        this.counter('ratelimit.stats.dynamic_series_overflow');
      }
      this.counter('ratelimit.stats.dynamic_series_overflow').inc();
      return this.overflowRuleStats;
    }
    this.dynamicSeries++;
    return this.ruleStats(key);
  }

  /** A counter whose name comes from request data, bounded like dynamicRuleStats. */
  dynamicCounter(name: string, overflowName: string): Counter {
    const c = this.counters.get(name);
    if (c !== undefined) return c;
    if (this.dynamicSeries >= this.maxDynamicSeries) {
      this.counter('ratelimit.stats.dynamic_series_overflow').inc();
      return this.counter(overflowName);
    }
    this.dynamicSeries++;
    return this.counter(name);
  }

  /** Every series, sorted by name: counters and gauges as values, timers as count and sum. */
  entries(): Array<[string, number]> {
    const out: Array<[string, number]> = [];
    for (const c of this.counters.values()) out.push([c.name, c.value]);
    for (const g of this.gauges.values()) out.push([g.name, g.value]);
    for (const t of this.timers.values()) {
      out.push([t.name + '.count', t.count]);
      out.push([t.name + '.sum_ms', t.sumMs]);
    }
    out.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    return out;
  }

  private makeRuleStats(key: string): RuleStats {
    const p = RULE_STATS_PREFIX + key + '.';
    return {
      key,
      totalHits: this.counter(p + 'total_hits'),
      overLimit: this.counter(p + 'over_limit'),
      nearLimit: this.counter(p + 'near_limit'),
      overLimitWithLocalCache: this.counter(p + 'over_limit_with_local_cache'),
      withinLimit: this.counter(p + 'within_limit'),
      shadowMode: this.counter(p + 'shadow_mode'),
    };
  }
}

const IPV4 = /\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}/g;

/** Upstream's SanitizeStatName: `:` and `|` become `_`, and so do the dots of an IPv4 address. */
export function sanitizeStatName(s: string): string {
  let r = s;
  if (r.indexOf(':') >= 0 || r.indexOf('|') >= 0) r = r.replace(/[:|]/g, '_');
  if (r.indexOf('.') >= 0) r = r.replace(IPV4, (ip) => ip.replace(/\./g, '_'));
  return r;
}
