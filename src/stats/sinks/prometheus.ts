/**
 * The Prometheus sink (USE_PROMETHEUS): an HTTP listener on PROMETHEUS_ADDR serving
 * PROMETHEUS_PATH in the Prometheus text format (prom-client's registry and exposition), fed
 * by the flusher through upstream's mapping (statsd_exporter's mapper, `prom-mapper.ts`).
 * Counters accumulate the flushed deltas, gauges take the flushed value, timers are observed into
 * a histogram (or a summary, if a custom mapping says so). Before each scrape the flusher runs, so
 * a scrape sees current values rather than the last STATS_FLUSH_INTERVAL's.
 *
 * Built-in mapping (upstream's `default_mapper.yaml`); `<stat>` is one of total_hits, over_limit,
 * near_limit, within_limit, shadow_mode:
 *
 * | statsd name                                                   | Prometheus series                                               |
 * |---------------------------------------------------------------|-----------------------------------------------------------------|
 * | `ratelimit.service.rate_limit.<domain>.<k1>.<stat>`           | `ratelimit_service_rate_limit_<stat>{domain,key1}` (counter)    |
 * | `ratelimit.service.rate_limit.<domain>.<k1>.<k2>[.<more>…].<stat>` | `ratelimit_service_rate_limit_<stat>{domain,key1,key2}`: deeper levels add into key2's series |
 * | `ratelimit.service.call.should_rate_limit.<err>`              | `ratelimit_service_should_rate_limit_error{err_type}` (counter)  |
 * | `ratelimit_server.<Method>.total_requests`                    | `ratelimit_service_total_requests{grpc_method}` (counter)       |
 * | `ratelimit_server.<Method>.response_time`                     | `ratelimit_service_response_time_seconds{grpc_method}` histogram, seconds (ms with PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS) |
 * | `ratelimit.service.config_load_success` / `_error`            | `ratelimit_service_config_load_success` / `_error` (counter)    |
 * | anything else                                                 | the name with every character outside `[a-zA-Z0-9_]` made `_`, e.g. `ratelimit_service_rate_limit_domain_key_over_limit_with_local_cache`, `ratelimit_localcache_hitCount` (gauge) |
 *
 * The 3-level regexes are not anchored, as upstream's: `<domain>.<k1>.<k2>.over_limit_with_local_cache`
 * also counts into `ratelimit_service_rate_limit_over_limit{domain,key1,key2}`.
 * Histograms use Prometheus' default buckets (0.005 … 10).
 *
 * Tags become labels: EXTRA_TAGS and gostats tag suffixes (`ratelimit.memcache.multiget.__code=success`
 * → `ratelimit_memcache_multiget{code="success"}`); a mapping's own labels win unless `honor_labels`.
 * PROMETHEUS_MAPPER_YAML replaces the built-in mapping with a statsd_exporter mapping file (see
 * `prom-mapper.ts` for the keys supported). statsd_exporter's own counters (`statsd_exporter_events_total`
 * etc.) and prom-client's process metrics (`process_cpu_seconds_total`, `process_resident_memory_bytes`…)
 * are served too.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Counter as PromCounter, Gauge as PromGauge, Registry, Summary, collectDefaultMetrics } from 'prom-client';
import type { Logger } from '../../telemetry/logger';
import { silentLogger } from '../../telemetry/logger';
import { RULE_STATS_PREFIX, type TimerSamples } from '../store';
import { type Tag, TagNamer } from '../tags';
import { escapeLabelName, type MappedMetric, MetricMapper, type ObserverOptions, type StatsdMetricType } from './prom-mapper';
import type { StatsSink } from './types';
import { errorMessage } from '../../platform/errors';

export interface PrometheusSinkOptions {
  /** PROMETHEUS_ADDR: `:9090` (every interface), `host:port`, `[v6]:port`. Port 0 picks a free port. */
  readonly addr: string;
  /** PROMETHEUS_PATH (default `/metrics`). */
  readonly path?: string;
  /** The mapper: built-in unless a mapping file was given. */
  readonly mapper: MetricMapper;
  readonly extraTags?: Readonly<Record<string, string>>;
  readonly logger?: Logger;
  /** Serve prom-client's process and Node.js metrics too (default true). */
  readonly defaultMetrics?: boolean;
  /** Called with the listener before it listens: the process's connection admission takes its sockets. */
  readonly admitConnections?: (server: http.Server) => void;
}

type FamilyType = 'counter' | 'gauge' | 'histogram' | 'summary';
type Labels = Record<string, string>;

interface Series {
  readonly labels: Labels;
  value: number;
  /** Histogram: per-bucket (non-cumulative) weights, then +Inf last. */
  counts?: Float64Array;
  count?: number;
  sum?: number;
  summary?: Summary;
}

/** One metric family, registered in prom-client's registry as a custom metric. */
class Family {
  readonly series = new Map<string, Series>();
  readonly aggregator = 'sum';
  constructor(
    readonly name: string,
    readonly help: string,
    readonly type: FamilyType,
    readonly observer: ObserverOptions,
  ) {}

  /** Stops exposing one series (a retired gauge). */
  dropSeries(labels: Labels): void {
    this.series.delete(seriesKey(labels));
  }

  seriesFor(labels: Labels): Series {
    const names = Object.keys(labels).sort();
    const key = seriesKey(labels);
    let s = this.series.get(key);
    if (s === undefined) {
      const sorted: Labels = {};
      for (const n of names) sorted[n] = labels[n]!;
      s = { labels: sorted, value: 0 };
      if (this.type === 'histogram') {
        s.counts = new Float64Array(this.observer.buckets.length + 1);
        s.count = 0;
        s.sum = 0;
      } else if (this.type === 'summary') {
        s.summary = new Summary({
          name: this.name,
          help: this.help,
          registers: [],
          percentiles: this.observer.quantiles.map((q) => q.quantile),
          maxAgeSeconds: this.observer.maxAgeSeconds,
          ageBuckets: this.observer.ageBuckets,
        });
      }
      this.series.set(key, s);
    }
    return s;
  }

  /** prom-client's custom-metric contract: what `registry.metrics()` renders. */
  async get(): Promise<{ name: string; help: string; type: FamilyType; aggregator: string; values: Array<{ metricName?: string; labels: Labels; value: number }> }> {
    const values: Array<{ metricName?: string; labels: Labels; value: number }> = [];
    for (const s of this.series.values()) {
      if (this.type === 'counter' || this.type === 'gauge') {
        values.push({ labels: s.labels, value: s.value });
      } else if (this.type === 'histogram') {
        const bounds = this.observer.buckets;
        const total = s.count!;
        let acc = 0;
        for (let i = 0; i < bounds.length; i++) {
          acc += s.counts![i]!;
          values.push({ metricName: this.name + '_bucket', labels: { ...s.labels, le: String(bounds[i]) }, value: Math.min(total, Math.round(acc)) });
        }
        values.push({ metricName: this.name + '_bucket', labels: { ...s.labels, le: '+Inf' }, value: total });
        values.push({ metricName: this.name + '_sum', labels: s.labels, value: s.sum! });
        values.push({ metricName: this.name + '_count', labels: s.labels, value: total });
      } else {
        const got = await s.summary!.get();
        for (const v of got.values as Array<{ metricName?: string; labels: Labels; value: number }>) {
          values.push({ metricName: v.metricName, labels: { ...s.labels, ...v.labels }, value: v.value });
        }
      }
    }
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
  }
}

function seriesKey(labels: Labels): string {
  let key = '';
  for (const n of Object.keys(labels).sort()) key += n + '\u0000' + labels[n] + '\u0001';
  return key;
}

/** Splits PROMETHEUS_ADDR as Go's net.Listen does: `:9090`, `host:9090`, `[::1]:9090`. */
export function parseListenAddr(addr: string): { host: string | undefined; port: number } {
  const i = addr.lastIndexOf(':');
  if (i < 0) throw new Error(`PROMETHEUS_ADDR ${JSON.stringify(addr)}: expected host:port or :port`);
  let host = addr.slice(0, i);
  const portText = addr.slice(i + 1);
  if (host.startsWith('[') && host.endsWith(']')) host = host.slice(1, -1);
  const port = Number(portText);
  if (!/^\d+$/.test(portText) || port > 65535) throw new Error(`PROMETHEUS_ADDR ${JSON.stringify(addr)}: invalid port ${JSON.stringify(portText)}`);
  return { host: host === '' ? undefined : host, port };
}

export class PrometheusSink implements StatsSink {
  readonly kind = 'prometheus' as const;
  readonly wantsTimerSamples = true;
  /**
   * The service's own counters are exported from the start, at 0, so that an alert's increase()
   * sees their first event (a series born at 1 shows no increase); a rule's counters appear when
   * they first move, so a big config does not export six idle series per rule.
   */
  readonly wantsUnchanged = (counter: string): boolean => !counter.startsWith(RULE_STATS_PREFIX);
  /** Counters exported at 0 already (a delta of 0 is then nothing to do). */
  private readonly announced = new Set<string>();
  readonly registry = new Registry();
  private readonly families = new Map<string, Family>();
  private readonly namer: TagNamer;
  private readonly logger: Logger;
  private readonly path: string;
  private readonly listen: { host: string | undefined; port: number };
  private server: http.Server | undefined;
  private flushHook: (() => void | Promise<void>) | undefined;
  private readonly events: PromCounter<'type'>;
  private readonly unmapped: PromCounter;
  private readonly actions: PromCounter<'action'>;
  private readonly conflicts: PromCounter<'type'>;
  private readonly errors: PromCounter<'reason'>;
  private readonly metricsCount: PromGauge<'type'>;
  private droppedEvents = 0;

  constructor(private readonly opts: PrometheusSinkOptions) {
    this.namer = new TagNamer(opts.extraTags ?? {});
    this.logger = opts.logger ?? silentLogger;
    this.path = opts.path === undefined || opts.path === '' ? '/metrics' : opts.path;
    this.listen = parseListenAddr(opts.addr);
    const registers = [this.registry];
    this.events = new PromCounter({ name: 'statsd_exporter_events_total', help: 'The total number of StatsD events seen.', labelNames: ['type'], registers });
    this.unmapped = new PromCounter({ name: 'statsd_exporter_events_unmapped_total', help: 'The total number of StatsD events no mapping was found for.', registers });
    this.actions = new PromCounter({ name: 'statsd_exporter_events_actions_total', help: 'The total number of StatsD events by action.', labelNames: ['action'], registers });
    this.conflicts = new PromCounter({ name: 'statsd_exporter_events_conflict_total', help: 'The total number of StatsD events with conflicting names.', labelNames: ['type'], registers });
    this.errors = new PromCounter({ name: 'statsd_exporter_events_error_total', help: 'The total number of StatsD events discarded due to errors.', labelNames: ['reason'], registers });
    this.metricsCount = new PromGauge({ name: 'statsd_exporter_metrics_total', help: 'The total number of metrics.', labelNames: ['type'], registers });
    if (opts.defaultMetrics !== false) collectDefaultMetrics({ register: this.registry });
  }

  get dropped(): number {
    return this.droppedEvents;
  }

  attachFlush(flush: () => void | Promise<void>): void {
    this.flushHook = flush;
  }

  /** The listening address once started (tests use port 0). */
  address(): AddressInfo | undefined {
    const a = this.server?.address();
    return a !== null && typeof a === 'object' ? a : undefined;
  }

  start(): Promise<void> {
    if (this.server !== undefined) return Promise.resolve();
    const server = http.createServer((req, res) => void this.handle(req, res));
    this.opts.admitConnections?.(server);
    this.server = server;
    return new Promise((resolve, reject) => {
      const onError = (err: Error): void => {
        this.server = undefined;
        reject(new Error(`prometheus: cannot listen on ${this.opts.addr}: ${err.message}`));
      };
      server.once('error', onError);
      server.listen({ host: this.listen.host, port: this.listen.port }, () => {
        server.off('error', onError);
        server.on('error', (err) => this.logger.error(`prometheus: listener error: ${err.message}`));
        this.logger.info(`Starting prometheus sink on ${this.opts.addr}${this.path}`);
        resolve();
      });
    });
  }

  counter(name: string, delta: number): void {
    if (delta === 0) {
      if (this.announced.has(name)) return;
      this.announced.add(name);
    }
    this.observe(name, 'counter', (m, labels, scale) => {
      const v = delta * scale;
      if (v < 0) {
        this.errors.inc({ reason: 'illegal_negative_counter' });
        this.droppedEvents++;
        return;
      }
      const f = this.family(m, 'counter');
      if (f === undefined) return;
      f.seriesFor(labels).value += v;
      if (delta !== 0) this.events.inc({ type: 'counter' });
    }, delta !== 0);
  }

  gauge(name: string, value: number): void {
    this.observe(name, 'gauge', (m, labels, scale) => {
      const f = this.family(m, 'gauge');
      if (f === undefined) return;
      f.seriesFor(labels).value = value * scale;
      this.events.inc({ type: 'gauge' });
    });
  }

  retireGauge(name: string): void {
    this.observe(name, 'gauge', (m, labels) => this.families.get(m.name)?.dropSeries(labels));
    this.namer.forget(name);
  }

  timer(name: string, t: TimerSamples): void {
    this.observe(name, 'observer', (m, labels, scale) => {
      const f = this.family(m, m.observer.type);
      if (f === undefined) return;
      const s = f.seriesFor(labels);
      const n = t.samples.length;
      if (f.type === 'histogram') {
        const bounds = m.observer.buckets;
        // Each kept sample stands for count/kept recorded ones (1 unless the timer's cap was hit).
        const w = n > 0 ? t.count / n : 0;
        for (let i = 0; i < n; i++) {
          const v = t.samples[i]! * scale;
          let b = 0;
          while (b < bounds.length && v > bounds[b]!) b++;
          s.counts![b] = s.counts![b]! + w;
        }
        s.count! += n > 0 ? t.count : 0;
        s.sum! += n > 0 ? t.sumMs * scale : 0;
      } else {
        for (let i = 0; i < n; i++) s.summary!.observe(t.samples[i]! * scale);
      }
      this.events.inc({ type: 'observer' }, n);
    });
  }

  endFlush(): void {}

  async close(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    if (server === undefined) return;
    await new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    });
  }

  /** Maps one event and applies it; `event: false` (a counter exported at 0) counts no statsd event. */
  private observe(name: string, type: StatsdMetricType, apply: (m: MappedMetric, labels: Labels, scale: number) => void, event = true): void {
    const tagged = this.namer.resolve(name);
    const m = this.opts.mapper.map(tagged.base, type);
    if (m.drop) {
      if (event) this.actions.inc({ action: 'drop' });
      return;
    }
    if (event) {
      if (m.matched) this.actions.inc({ action: 'map' });
      else this.unmapped.inc();
    }
    apply(m, this.labelsOf(m, tagged.tags), m.scale ?? 1);
  }

  /** A series' labels: the name's tags, then the mapping's (which win unless `honor_labels`). */
  private labelsOf(m: MappedMetric, tags: readonly Tag[]): Labels {
    const labels: Labels = {};
    for (const [k, v] of tags) labels[escapeLabelName(k)] = v;
    for (const [k, v] of Object.entries(m.labels)) {
      if (m.honorLabels && k in labels) continue;
      labels[k] = v;
    }
    return labels;
  }

  private family(m: MappedMetric, type: FamilyType): Family | undefined {
    let f = this.families.get(m.name);
    if (f === undefined) {
      if (this.registry.getSingleMetric(m.name) !== undefined) {
        // A name taken by the exporter's own or the process metrics.
        this.conflicts.inc({ type: type === 'histogram' || type === 'summary' ? 'observer' : type });
        this.droppedEvents++;
        return undefined;
      }
      f = new Family(m.name, m.help, type, m.observer);
      this.families.set(m.name, f);
      this.registry.registerMetric(f as unknown as Parameters<Registry['registerMetric']>[0]);
      this.metricsCount.inc({ type: type === 'histogram' || type === 'summary' ? 'observer' : type });
      return f;
    }
    if (f.type !== type) {
      this.conflicts.inc({ type: type === 'histogram' || type === 'summary' ? 'observer' : type });
      this.droppedEvents++;
      if (this.logger.enabled('debug')) this.logger.debug(`prometheus: ${m.name} is a ${f.type}, dropping a ${type} event for it`);
      return undefined;
    }
    return f;
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    req.resume();
    const q = (req.url ?? '/').indexOf('?');
    const path = q < 0 ? (req.url ?? '/') : (req.url ?? '/').slice(0, q);
    if (path !== this.path) {
      res.writeHead(404, { 'Content-Type': 'text/plain; charset=utf-8', 'X-Content-Type-Options': 'nosniff' });
      res.end('404 page not found\n');
      return;
    }
    try {
      await this.flushHook?.();
    } catch (err) {
      this.logger.error(`prometheus: flush before scrape failed: ${errorMessage(err)}`);
    }
    try {
      const body = await this.registry.metrics();
      res.writeHead(200, { 'Content-Type': this.registry.contentType });
      res.end(req.method === 'HEAD' ? undefined : body);
    } catch (err) {
      res.writeHead(500, { 'Content-Type': 'text/plain; charset=utf-8' });
      res.end(`error gathering metrics: ${errorMessage(err)}\n`);
    }
  }
}
