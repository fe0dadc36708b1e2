/**
 * The stats registry: every counter, gauge and timer of the service lives here under its
 * upstream (gostats) name, so sinks (statsd, Prometheus, the debug /stats page) read one place.
 * Series are created once and re-used across config reloads, as upstream does.
 *
 * A name may carry gostats tags as `.__k=v` suffixes (e.g. `ratelimit.memcache.multiget.__code=success`);
 * the sinks turn them into tags or labels (see `tags.ts`). The flusher (`flusher.ts`) reads the
 * series through `counterList()` / `gaugeList()` / `timerList()`.
 */
import type { Logger } from '../telemetry/logger';
import type { RuleStats } from '../core/rule';
import { LimitsBook } from './limits/book';

export class Counter {
  value = 0;
  /** The value at the last flush (see {@link Counter.latch}). */
  private flushedValue = 0;
  constructor(readonly name: string) {}
  inc(n = 1): void {
    this.value += n;
  }
  /** The increase since the previous latch (gostats' `latch`): what a flush sends as a delta. */
  latch(): number {
    const v = this.value;
    const d = v - this.flushedValue;
    this.flushedValue = v;
    return d;
  }
}

export class Gauge {
  value = 0;
  constructor(readonly name: string) {}
  set(v: number): void {
    this.value = v;
  }
}

/** Default cap on the samples one timer keeps between two flushes. */
export const DEFAULT_MAX_TIMER_SAMPLES = 65_536;

/** What a timer recorded since the previous drain. */
export interface TimerSamples {
  /**
   * The samples kept (milliseconds), in no particular order. A view on the timer's buffer: valid
   * until the timer records again. When more than the cap were recorded this is a uniform random
   * subset of them (reservoir sampling) and `count > samples.length`.
   */
  readonly samples: Float64Array;
  /** How many samples were recorded (kept or not). */
  readonly count: number;
  /** Their exact sum, in milliseconds. */
  readonly sumMs: number;
}

const INITIAL_SAMPLE_CAPACITY = 64;
const EMPTY_SAMPLES = new Float64Array(0);

/**
 * A timer keeps a running count and sum (milliseconds) for the debug /stats page and, while a sink
 * wants them ({@link StatsStore.enableTimerSamples}), the samples recorded since the last flush:
 * statsd sends each one as `name:<ms>|ms`, Prometheus observes them into a histogram. The buffer is
 * bounded (`maxSamples`); past the cap a uniform random subset is kept (reservoir sampling) while
 * the interval's count and sum stay exact.
 */
export class Timer {
  count = 0;
  sumMs = 0;
  private sampling = false;
  private buf: Float64Array = EMPTY_SAMPLES;
  private kept = 0;
  private seen = 0;
  private seenSumMs = 0;
  constructor(
    readonly name: string,
    private maxSamples = DEFAULT_MAX_TIMER_SAMPLES,
  ) {}

  record(ms: number): void {
    this.count++;
    this.sumMs += ms;
    if (this.sampling) this.sample(ms);
  }

  /** Turns sample keeping on or off (off drops the buffer). */
  keepSamples(on: boolean, maxSamples = this.maxSamples): void {
    this.sampling = on;
    this.maxSamples = Math.max(1, Math.floor(maxSamples));
    if (!on) {
      this.buf = EMPTY_SAMPLES;
      this.kept = 0;
      this.seen = 0;
      this.seenSumMs = 0;
    }
  }

  /** The samples recorded since the previous drain; starts a new interval. */
  drain(): TimerSamples {
    const out: TimerSamples = { samples: this.buf.subarray(0, this.kept), count: this.seen, sumMs: this.seenSumMs };
    this.kept = 0;
    this.seen = 0;
    this.seenSumMs = 0;
    // Give memory back after a burst: keep at most four times what this interval needed.
    // (`out.samples` still views the old buffer.)
    if (this.buf.length > INITIAL_SAMPLE_CAPACITY && this.buf.length > 4 * out.samples.length) {
      this.buf = new Float64Array(Math.max(INITIAL_SAMPLE_CAPACITY, out.samples.length));
    }
    return out;
  }

  /**
   * Adds what another process's timer recorded in one interval (worker mode): `count` recordings
   * summing to `sumMs`, of which `samples` were kept.
   */
  merge(count: number, sumMs: number, samples: ArrayLike<number>): void {
    this.count += count;
    this.sumMs += sumMs;
    if (!this.sampling) return;
    for (let i = 0; i < samples.length; i++) {
      this.seen++;
      this.keep(samples[i]!);
    }
    // The samples stand for `count` recordings: the interval's count and sum stay exact.
    this.seen += count - samples.length;
    this.seenSumMs += sumMs;
  }

  private sample(ms: number): void {
    this.seen++;
    this.seenSumMs += ms;
    this.keep(ms);
  }

  /** Keeps `ms` in the buffer, or in the reservoir once the buffer is full (`seen` counts it). */
  private keep(ms: number): void {
    if (this.kept < this.maxSamples) {
      if (this.kept === this.buf.length) {
        const next = new Float64Array(Math.min(this.maxSamples, Math.max(INITIAL_SAMPLE_CAPACITY, this.buf.length * 2)));
        next.set(this.buf);
        this.buf = next;
      }
      this.buf[this.kept++] = ms;
      return;
    }
    // Reservoir sampling (Algorithm R): each of the `seen` samples is kept with probability max/seen.
    const j = Math.floor(Math.random() * this.seen);
    if (j < this.maxSamples) this.buf[j] = ms;
  }
}

/** The series of one rule as made in the store: `ratelimit.service.rate_limit.<key>.<stat>` (core's RuleStats, with counters one can read). */
export interface RuleSeries {
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

/** The counter counting what went to the overflow series once the dynamic-series cap was hit. */
export const DYNAMIC_SERIES_OVERFLOW = 'ratelimit.stats.dynamic_series_overflow';

export interface StatsStoreOptions {
  /** Cap on series created from request data (default {@link DEFAULT_MAX_DYNAMIC_SERIES}). */
  readonly maxDynamicSeries?: number;
  /** Cap on the samples a timer keeps between two flushes (default {@link DEFAULT_MAX_TIMER_SAMPLES}). */
  readonly maxTimerSamples?: number;
  /** Told once, at warn level, when the dynamic-series cap is first hit. */
  readonly logger?: Pick<Logger, 'warn'>;
}

export class StatsStore {
  private readonly counters = new Map<string, Counter>();
  private readonly gauges = new Map<string, Gauge>();
  private readonly timers = new Map<string, Timer>();
  private readonly ruleStatsByKey = new Map<string, RuleSeries>();
  private dynamicSeries = 0;
  private overflowRuleStats: RuleSeries | undefined;
  private overflowWarned = false;
  private logger: Pick<Logger, 'warn'> | undefined;
  private timerSampling = false;
  /** Gauges removed since the last flush, for the sink to retire (only while a flusher runs). */
  private retired: string[] | undefined;
  private readonly maxTimerSamples: number;
  readonly maxDynamicSeries: number;
  /** The headroom and hot keys of the loaded limits (src/stats/limits/). */
  readonly limits: LimitsBook;

  /** `new StatsStore()`, `new StatsStore(maxDynamicSeries)` or `new StatsStore({ ...options })`. */
  constructor(options: number | StatsStoreOptions = {}) {
    const o: StatsStoreOptions = typeof options === 'number' ? { maxDynamicSeries: options } : options;
    this.maxDynamicSeries = o.maxDynamicSeries ?? DEFAULT_MAX_DYNAMIC_SERIES;
    this.maxTimerSamples = o.maxTimerSamples ?? DEFAULT_MAX_TIMER_SAMPLES;
    this.logger = o.logger;
    this.limits = new LimitsBook(this, RULE_STATS_PREFIX);
  }

  /** Sets (or replaces) the logger told once when the dynamic-series cap is first hit. */
  setLogger(logger: Pick<Logger, 'warn'> | undefined): void {
    this.logger = logger;
  }

  /**
   * Makes every timer, present and future, keep its samples between flushes (the flusher calls
   * this when its sink sends timer samples). Off by default, so a store nobody flushes keeps none.
   */
  enableTimerSamples(on = true): void {
    this.timerSampling = on;
    for (const t of this.timers.values()) t.keepSamples(on, this.maxTimerSamples);
  }

  /**
   * Removes a gauge whose series has no meaning any more (the info series of a replaced config
   * version, a limit a reload removed): it is no longer listed, and the next flush tells the sink
   * to retire it. Unknown names are ignored.
   */
  removeGauge(name: string): void {
    if (!this.gauges.delete(name)) return;
    this.retired?.push(name);
  }

  /** The flusher calls this once: from then on removed gauges are kept until it takes them. */
  trackRetiredGauges(): void {
    this.retired ??= [];
  }

  /** The gauges removed since the previous call (see {@link removeGauge}). */
  takeRetiredGauges(): string[] {
    const out = this.retired ?? [];
    if (out.length > 0) this.retired = [];
    return out;
  }

  /** Every counter, in creation order (live view: do not create series while iterating). */
  counterList(): IterableIterator<Counter> {
    return this.counters.values();
  }

  /** Every gauge, in creation order. */
  gaugeList(): IterableIterator<Gauge> {
    return this.gauges.values();
  }

  /** Every timer, in creation order. */
  timerList(): IterableIterator<Timer> {
    return this.timers.values();
  }

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
      t = new Timer(name, this.maxTimerSamples);
      if (this.timerSampling) t.keepSamples(true);
      this.timers.set(name, t);
    }
    return t;
  }

  /** Rule stats for a key known from config: always created. */
  ruleStats(key: string): RuleSeries {
    let s = this.ruleStatsByKey.get(key);
    if (s === undefined) {
      s = this.makeRuleStats(key);
      this.ruleStatsByKey.set(key, s);
    }
    return s;
  }

  /**
   * Rule stats of a rule from config, whose series are made when one of them first counts: a rule
   * that never counts costs no series, so a config of many rules stays small, and the series of a
   * removed config are only those it used. Upstream's sinks see the same (a counter that never
   * moved is never sent). Not bounded by the dynamic-series cap: the config bounds them.
   */
  configRuleStats(key: string): RuleStats {
    const made = this.ruleStatsByKey.get(key);
    return made !== undefined ? made : new PendingRuleStats(this, key);
  }

  /**
   * Rule stats for a key built from request data (limit overrides, detailed_metric). Upstream
   * creates these without bound (#275, #1132); past `maxDynamicSeries` new keys share one
   * catch-all series, `ratelimit.service.rate_limit.overflow.*`.
   */
  dynamicRuleStats(key: string): RuleSeries {
    const s = this.ruleStatsByKey.get(key);
    if (s !== undefined) return s;
    if (this.dynamicSeries >= this.maxDynamicSeries) {
      if (this.overflowRuleStats === undefined) {
        this.overflowRuleStats = this.ruleStats('overflow');
        this.counter(DYNAMIC_SERIES_OVERFLOW);
      }
      this.overflowed(RULE_STATS_PREFIX + key);
      return this.overflowRuleStats;
    }
    this.dynamicSeries++;
    return this.ruleStats(key);
  }

  /**
   * dynamicRuleStats, created only when one of them first counts: a config lookup can build a
   * request-specific rule without creating series (lookups have no side effects).
   */
  deferredRuleStats(key: string): RuleStats {
    let resolved: RuleSeries | undefined;
    const stats = (): RuleSeries => (resolved ??= this.dynamicRuleStats(key));
    return {
      key,
      totalHits: { inc: (n?: number) => stats().totalHits.inc(n) },
      overLimit: { inc: (n?: number) => stats().overLimit.inc(n) },
      nearLimit: { inc: (n?: number) => stats().nearLimit.inc(n) },
      overLimitWithLocalCache: { inc: (n?: number) => stats().overLimitWithLocalCache.inc(n) },
      withinLimit: { inc: (n?: number) => stats().withinLimit.inc(n) },
      shadowMode: { inc: (n?: number) => stats().shadowMode.inc(n) },
    };
  }

  /** A counter whose name comes from request data, bounded like dynamicRuleStats. */
  dynamicCounter(name: string, overflowName: string): Counter {
    const c = this.counters.get(name);
    if (c !== undefined) return c;
    if (this.dynamicSeries >= this.maxDynamicSeries) {
      this.overflowed(name);
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

  private overflowed(name: string): void {
    this.counter(DYNAMIC_SERIES_OVERFLOW).inc();
    if (this.overflowWarned) return;
    this.overflowWarned = true;
    const shown = name.length > 200 ? name.slice(0, 200) + '…' : name;
    this.logger?.warn(
      `stats: the cap of ${this.maxDynamicSeries} stat series created from request data (limit overrides, ` +
        `detailed_metric, unknown domains) is reached; new ones (first: ${JSON.stringify(shown)}) are counted ` +
        `under ${RULE_STATS_PREFIX}overflow.* and ${DYNAMIC_SERIES_OVERFLOW}. This is logged once.`,
    );
  }

  private makeRuleStats(key: string): RuleSeries {
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

/** Rule stats that make their series when one first counts (see {@link StatsStore.configRuleStats}). */
class PendingRuleStats implements RuleStats {
  private made: RuleSeries | undefined;
  constructor(
    private readonly store: StatsStore,
    readonly key: string,
  ) {}
  private get series(): RuleSeries {
    return (this.made ??= this.store.ruleStats(this.key));
  }
  get totalHits(): Counter {
    return this.series.totalHits;
  }
  get overLimit(): Counter {
    return this.series.overLimit;
  }
  get nearLimit(): Counter {
    return this.series.nearLimit;
  }
  get overLimitWithLocalCache(): Counter {
    return this.series.overLimitWithLocalCache;
  }
  get withinLimit(): Counter {
    return this.series.withinLimit;
  }
  get shadowMode(): Counter {
    return this.series.shadowMode;
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
