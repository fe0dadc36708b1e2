/**
 * RLQS on a simulated clock: Envoys (EnvoyQuotaClient, faithful to Envoy's filter) streaming in
 * process to one or more replicas of the real QuotaService, requests arriving at fixed rates, all
 * timers on one ManualClock. A minute of traffic runs in well under a second and gives the same
 * numbers on every run, loaded machine or not. Replicas share a DemandStore (a MemoryDemandStore,
 * or one RedisDemandStore each on a real Redis: their exchanges are awaited between steps).
 */
import { ManualClock } from '../../src/platform/clock';
import type { RateLimitConfig } from '../../src/config/types';
import type { DemandStore } from '../../src/quota/demand';
import { QuotaService } from '../../src/quota/quota-service';
import { quotaBudgets } from '../../src/quota/admission';
import { silentLogger } from '../../src/telemetry/logger';
import { EnvoyQuotaClient, inProcessTransport, type EnvoyQuotaClientOptions } from './envoy-quota-client';

/** Requests of one Envoy to one bucket at a fixed rate between two times (simulated ms). */
export interface Source {
  readonly name: string;
  readonly envoy: EnvoyQuotaClient;
  readonly bucket: Record<string, string>;
  rate: number;
  readonly startMs: number;
  readonly stopMs: number;
  sent: number;
  /** When each admitted request was decided (simulated ms). */
  readonly admitted: number[];
}

export class RlqsSimulation {
  readonly clock = new ManualClock(0);
  readonly replicas: QuotaService[];
  readonly envoys: EnvoyQuotaClient[] = [];
  readonly sources: Source[] = [];
  private readonly transports = new Map<EnvoyQuotaClient, ReturnType<typeof inProcessTransport>>();

  constructor(opts: { config: () => RateLimitConfig; demand: DemandStore[]; maxBucketsPerStream?: number }) {
    this.replicas = opts.demand.map(
      (demand, i) =>
        new QuotaService({
          replica: `replica${i}`,
          config: opts.config,
          demand,
          clock: this.clock,
          unmatched: { strategy: 'allow-all', ttlSeconds: 10 },
          budgets: quotaBudgets({ streamBuckets: opts.maxBucketsPerStream ?? 10_000 }),
        }),
    );
  }

  /** An Envoy streaming to replica `replica` (responses 1 ms after the report, as on a LAN). */
  envoy(replica = 0, over: Partial<EnvoyQuotaClientOptions> = {}): EnvoyQuotaClient {
    const transport = inProcessTransport(this.replicas[replica]!, this.clock, silentLogger);
    const e = new EnvoyQuotaClient({ transport, clock: this.clock, domain: 'quota', ...over });
    this.envoys.push(e);
    this.transports.set(e, transport);
    return e;
  }

  /** Ends the Envoy's stream with UNAVAILABLE, as a network cut would. */
  cut(envoy: EnvoyQuotaClient): void {
    this.transports.get(envoy)!.cut('connection reset');
  }

  /** `rate` requests a second from `envoy` to `bucket` from `startMs` until `stopMs`. */
  source(name: string, envoy: EnvoyQuotaClient, bucket: Record<string, string>, rate: number, startMs = 0, stopMs = Infinity): Source {
    const s: Source = { name, envoy, bucket, rate, startMs, stopMs, sent: 0, admitted: [] };
    this.sources.push(s);
    let next = startMs;
    const fire = (): void => {
      const now = this.clock.nowMs();
      if (now >= s.stopMs || s.rate <= 0) return;
      s.sent++;
      if (s.envoy.request(s.bucket)) s.admitted.push(now);
      next += 1000 / s.rate;
      this.clock.setTimeout(fire, next - now);
    };
    this.clock.setTimeout(fire, startMs - this.clock.nowMs());
    return s;
  }

  /** Runs `fn` at simulated time `atMs`. */
  at(atMs: number, fn: () => void): void {
    this.clock.setTimeout(fn, atMs - this.clock.nowMs());
  }

  /** Runs the clock to `untilMs` in steps, letting the replicas' demand exchanges finish between steps. */
  async run(untilMs: number, stepMs = 20): Promise<void> {
    while (this.clock.nowMs() < untilMs) {
      this.clock.advance(Math.min(stepMs, untilMs - this.clock.nowMs()));
      await Promise.all(this.replicas.map((r) => r.settled()));
    }
  }

  stop(): void {
    for (const e of this.envoys) e.close();
    for (const r of this.replicas) r.close();
  }
}

/** Timestamps in [fromMs, toMs). */
export const countIn = (ts: readonly number[], fromMs: number, toMs: number): number => ts.filter((t) => t >= fromMs && t < toMs).length;

/** The most timestamps in any window [t, t + 1 s) with t ≥ fromMs. */
export function maxPerSecond(ts: readonly number[], fromMs = -Infinity): number {
  const sorted = ts.filter((t) => t >= fromMs).sort((a, b) => a - b);
  let best = 0;
  for (let i = 0, j = 0; i < sorted.length; i++) {
    while (sorted[i]! - sorted[j]! >= 1000) j++;
    best = Math.max(best, i - j + 1);
  }
  return best;
}
