/**
 * The DogStatsD sink (USE_DOG_STATSD), as upstream's `src/godogstats`: DogStatsD over UDP to
 * STATSD_HOST:STATSD_PORT through hot-shots (datadog-go upstream), no client-side aggregation.
 *
 * Naming: the gostats tag suffixes of a name (`….__k=v`, EXTRA_TAGS included) become DogStatsD
 * tags `k:v`; then the mogrifiers (USE_DOG_STATSD_MOGRIFIERS) are tried in the order listed and
 * the first whose pattern matches the base name rewrites it: the name becomes its NAME template
 * and its TAGS are added, `$0`, `$1`… replaced by the match groups. So with
 * `PATTERN=^ratelimit\.service\.rate_limit\.(.*)\.(.*)\.total_hits$`, `NAME=ratelimit.total_hits`,
 * `TAGS=domain:$1,descriptor:$2`, `ratelimit.service.rate_limit.d.k_v.total_hits:3|c` is sent as
 * `ratelimit.total_hits:3|c|#descriptor:k_v,domain:d`.
 *
 * Values: counters are deltas (`|c`), gauges absolute (`|g`), timers one `|ms` per sample in whole
 * milliseconds (upstream converts to a time.Duration of whole milliseconds).
 */
import { StatsD } from 'hot-shots';
import type { DogStatsdMogrifier } from '../../settings/settings';
import type { Logger } from '../../telemetry/logger';
import { silentLogger } from '../../telemetry/logger';
import type { TimerSamples } from '../store';
import { TagNamer } from '../tags';
import type { StatsSink } from './types';
import { errorMessage } from '../../platform/errors';

export interface DogStatsdSinkOptions {
  readonly host: string;
  readonly port: number;
  readonly extraTags?: Readonly<Record<string, string>>;
  readonly mogrifiers?: readonly DogStatsdMogrifier[];
  readonly logger?: Logger;
  /** UDP payload size (default 1432, datadog-go's default for UDP). */
  readonly maxPacketBytes?: number;
  /** Extra hot-shots options (tests turn origin detection off, for example). */
  readonly clientOptions?: Readonly<Record<string, unknown>>;
}

interface CompiledMogrifier {
  readonly name: string;
  readonly re: RegExp;
  readonly metricName: string;
  readonly tags: ReadonlyArray<readonly [string, string]>;
}

/** A name as sent: the DogStatsD metric name and its tags (`k:v`). */
export interface DogName {
  readonly name: string;
  readonly tags: readonly string[];
}

const VAR = /\$(\d+)/g;

function substitute(template: string, m: RegExpExecArray): string {
  return template.replace(VAR, (_s, d: string) => m[Number(d)] ?? '');
}

/** Compiles the mogrifiers (patterns were checked when settings were read; this re-checks). */
export function compileMogrifiers(mogrifiers: readonly DogStatsdMogrifier[]): CompiledMogrifier[] {
  return mogrifiers.map((m) => {
    let re: RegExp;
    try {
      re = new RegExp(m.pattern);
    } catch (err) {
      throw new Error(`DOG_STATSD_MOGRIFIER_${m.name}_PATTERN: invalid regular expression ${JSON.stringify(m.pattern)}: ${errorMessage(err)}`);
    }
    const tags = Object.entries(m.tags).sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    return { name: m.name, re, metricName: m.metricName, tags };
  });
}

/** Turns store names into DogStatsD names and tags (cached per name). */
export class DogNamer {
  private readonly namer: TagNamer;
  private readonly mogrifiers: CompiledMogrifier[];
  private readonly cache = new Map<string, DogName>();

  constructor(extraTags: Readonly<Record<string, string>>, mogrifiers: readonly DogStatsdMogrifier[]) {
    this.namer = new TagNamer(extraTags);
    this.mogrifiers = compileMogrifiers(mogrifiers);
  }

  /** Drops a retired name from the caches. */
  forget(storeName: string): void {
    this.cache.delete(storeName);
    this.namer.forget(storeName);
  }

  resolve(storeName: string): DogName {
    let d = this.cache.get(storeName);
    if (d === undefined) {
      d = this.compute(storeName);
      this.cache.set(storeName, d);
    }
    return d;
  }

  private compute(storeName: string): DogName {
    const t = this.namer.resolve(storeName);
    const tags = t.tags.map(([k, v]) => k + ':' + v);
    for (const m of this.mogrifiers) {
      const match = m.re.exec(t.base);
      if (match === null) continue;
      for (const [k, v] of m.tags) tags.push(k + ':' + substitute(v, match));
      return { name: substitute(m.metricName, match), tags };
    }
    return { name: t.base, tags };
  }
}

export class DogStatsdSink implements StatsSink {
  readonly kind = 'dogstatsd' as const;
  readonly wantsTimerSamples = true;
  private readonly client: StatsD;
  private readonly namer: DogNamer;
  private readonly logger: Logger;
  private errors = 0;
  private warned = false;
  private closed = false;

  constructor(opts: DogStatsdSinkOptions) {
    this.logger = opts.logger ?? silentLogger;
    this.namer = new DogNamer(opts.extraTags ?? {}, opts.mogrifiers ?? []);
    this.client = new StatsD({
      host: opts.host,
      port: opts.port,
      protocol: 'udp',
      maxBufferSize: opts.maxPacketBytes ?? 1432,
      bufferFlushInterval: 1000,
      aggregation: false,
      errorHandler: (err: Error) => this.onError(err),
      ...(opts.clientOptions ?? {}),
    });
  }

  get dropped(): number {
    return this.errors;
  }

  async start(): Promise<void> {}

  counter(name: string, delta: number): void {
    const d = this.namer.resolve(name);
    this.client.increment(d.name, delta, 1, d.tags as string[]);
  }

  gauge(name: string, value: number): void {
    const d = this.namer.resolve(name);
    this.client.gauge(d.name, value, 1, d.tags as string[]);
  }

  retireGauge(name: string): void {
    this.gauge(name, 0);
    this.namer.forget(name);
  }

  timer(name: string, t: TimerSamples): void {
    const d = this.namer.resolve(name);
    for (const v of t.samples) this.client.timing(d.name, Math.trunc(v), 1, d.tags as string[]);
  }

  endFlush(): void {
    this.client.flush();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await new Promise<void>((resolve) => {
      const t = setTimeout(resolve, 2000);
      t.unref();
      this.client.close(() => {
        clearTimeout(t);
        resolve();
      });
    });
  }

  private onError(err: Error): void {
    this.errors++;
    if (this.warned) return;
    this.warned = true;
    this.logger.warn(`dogstatsd: sending stats failed: ${err.message} (logged once)`);
  }
}
