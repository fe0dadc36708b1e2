/**
 * What the store follows of Redis's memory: whether a node may evict counters, and whether it
 * did. An evicted counter restarts at zero, so its limit loosens without anyone seeing it.
 *
 * - At start and every REDIS_EVICTION_CHECK_INTERVAL, each node of the instance (the connected
 *   master of a single or sentinel instance, every master of a cluster) is asked `CONFIG GET
 *   maxmemory-policy` and `INFO` (its `maxmemory`, `maxmemory_policy`, `evicted_keys` and
 *   `run_id`), within REDIS_TIMEOUT, off the request path. A Redis that forbids CONFIG (renamed,
 *   ACL, a managed service) is read from `INFO` alone; one that forbids both is said once.
 * - A node may evict counters when `maxmemory` is set and the policy is not `noeviction`: every
 *   counter has a TTL, so `volatile-*` policies take them as much as `allkeys-*` ones
 *   (`volatile-ttl` first takes the counters nearest their expiry, i.e. live ones). Shown as
 *   `<scope>.may_evict` (how many nodes may), one warning when a node starts to may and one line
 *   when it no longer may.
 * - `evicted_keys` growing between two checks adds the difference to `<scope>.evicted_keys` (keys,
 *   counters among them: each may have been a counter reset) and warns once when evictions start;
 *   one line when a check finds they stopped. A node's first check (or a restarted node's, a new
 *   `run_id`) only takes its baseline.
 * - With `noeviction` a full Redis answers writes with an OOM error instead, which
 *   BACKEND_FAILURE_MODE then decides (connection.ts follows those answers).
 */
import type { Cluster, Redis } from 'ioredis';
import type { Counter, Gauge, StatsStore } from '../../stats/store';
import type { Logger } from '../../telemetry/logger';
import { errorText, nodeAddress, type RedisConnection } from './connection';

export interface EvictionWatchOptions {
  conn: RedisConnection;
  /** REDIS_EVICTION_CHECK_INTERVAL in ms (> 0). */
  intervalMs: number;
  /** REDIS_TIMEOUT: the bound of one node's answer. */
  timeoutMs: number;
  stats: StatsStore;
  /** `ratelimit.redis` or `ratelimit.redis_per_second`. */
  scope: string;
  logger: Logger;
}

/** What one node answered. */
interface NodeReading {
  runId: string;
  maxmemory: number;
  /** undefined when neither CONFIG nor INFO says. */
  policy: string | undefined;
  evicted: number | undefined;
}

/** What is remembered of one node between checks. */
interface NodeState {
  runId: string;
  evicted: number | undefined;
  mayEvict: boolean;
  evicting: boolean;
  /** Keys evicted since the warning that they started. */
  evictedSinceWarning: number;
}

export class EvictionWatch {
  private readonly mayEvictGauge: Gauge;
  private readonly evictedCounter: Counter;
  private readonly nodes = new Map<string, NodeState>();
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;
  /** Said once: a node answered neither CONFIG nor INFO. */
  private saidBlind = false;
  /** Said once (debug): CONFIG is forbidden, INFO answers instead. */
  private saidNoConfig = false;

  constructor(private readonly options: EvictionWatchOptions) {
    this.mayEvictGauge = options.stats.gauge(options.scope + '.may_evict');
    this.evictedCounter = options.stats.counter(options.scope + '.evicted_keys');
  }

  /** Checks now, then every interval (the timer does not hold the process). */
  start(): void {
    if (this.stopped || this.timer !== undefined) return;
    void this.check();
    this.timer = setInterval(() => void this.check(), this.options.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    this.stopped = true;
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
  }

  /** One check of every node; a check still running is not overlapped. Resolves when done. */
  check(): Promise<void> {
    this.running ??= this.checkNodes().finally(() => (this.running = undefined));
    return this.running;
  }

  private async checkNodes(): Promise<void> {
    const targets = this.targets();
    await Promise.all(
      targets.map(async ([address, client]) => {
        const reading = await this.read(address, client);
        if (reading !== undefined && !this.stopped) this.update(address, reading);
      }),
    );
    if (this.stopped) return;
    let may = 0;
    for (const s of this.nodes.values()) if (s.mayEvict) may++;
    this.mayEvictGauge.set(may);
  }

  /** The nodes to ask, by the address the log names: a ready connection to each. */
  private targets(): Array<[string, Redis]> {
    const conn = this.options.conn;
    if (!conn.isReady) return [];
    if (conn.isCluster) {
      const cluster = conn.client() as Cluster;
      return cluster
        .nodes('master')
        .filter((n) => n.status === 'ready')
        .map((n): [string, Redis] => [nodeAddress(n), n]);
    }
    const c = conn.client() as Redis;
    return c.status === 'ready' ? [[conn.maskedUrl, c]] : [];
  }

  private async read(address: string, client: Redis): Promise<NodeReading | undefined> {
    const [config, info] = await Promise.all([
      this.bounded(client.config('GET', 'maxmemory-policy')),
      this.bounded(client.info()),
    ]);
    if (info instanceof Error && config instanceof Error) {
      // Not a node that is away (its connection was ready): one that refuses to say.
      if (!this.saidBlind && !/timed out|closed|writeable/i.test(info.message)) {
        this.saidBlind = true;
        this.options.logger.warn(
          `${this.options.conn.label}: cannot tell whether ${address} may evict counters: CONFIG GET maxmemory-policy answered ${config.message}, INFO answered ${info.message}`,
        );
      }
      return undefined;
    }
    const fields = typeof info === 'string' ? infoFields(info) : new Map<string, string>();
    let policy: string | undefined;
    if (Array.isArray(config) && config.length >= 2) policy = String(config[1]);
    else {
      policy = fields.get('maxmemory_policy');
      if (!this.saidNoConfig && config instanceof Error) {
        this.saidNoConfig = true;
        this.options.logger.debug(`${this.options.conn.label}: CONFIG GET on ${address} answered ${config.message}; reading the policy from INFO`);
      }
    }
    const evicted = fields.get('evicted_keys');
    return {
      runId: fields.get('run_id') ?? '',
      maxmemory: Number(fields.get('maxmemory') ?? 0),
      policy,
      evicted: evicted === undefined ? undefined : Number(evicted),
    };
  }

  private update(address: string, r: NodeReading): void {
    const label = this.options.conn.label;
    const logger = this.options.logger;
    let s = this.nodes.get(address);
    const mayEvict = r.policy !== undefined && r.policy !== 'noeviction' && r.maxmemory > 0;
    if (s === undefined || s.runId !== r.runId) {
      // First sight of this node (or it restarted): a baseline, nothing counted.
      const had = s?.mayEvict ?? false;
      s = { runId: r.runId, evicted: r.evicted, mayEvict: had, evicting: false, evictedSinceWarning: 0 };
      this.nodes.set(address, s);
    } else if (r.evicted !== undefined && s.evicted !== undefined) {
      const delta = r.evicted - s.evicted;
      if (delta > 0) {
        this.evictedCounter.inc(delta);
        s.evictedSinceWarning += delta;
        if (!s.evicting) {
          s.evicting = true;
          s.evictedSinceWarning = delta;
          logger.warn(
            `${label}: ${address} evicted ${delta} key${delta === 1 ? '' : 's'} since the last check (maxmemory ${r.maxmemory} bytes, maxmemory-policy ${r.policy ?? 'unknown'}): each evicted counter restarted at zero, loosening its limit; see ${this.options.scope}.evicted_keys`,
          );
        }
      } else if (s.evicting) {
        s.evicting = false;
        logger.info(`${label}: ${address} evicts no more keys (${s.evictedSinceWarning} evicted since the warning)`);
      }
    }
    s.evicted = r.evicted;
    if (mayEvict !== s.mayEvict) {
      s.mayEvict = mayEvict;
      if (mayEvict) {
        logger.warn(
          `${label}: ${address} may evict counters (maxmemory ${r.maxmemory} bytes, maxmemory-policy ${r.policy}): an evicted counter restarts at zero; set maxmemory-policy noeviction (a full Redis then answers errors, which BACKEND_FAILURE_MODE decides)`,
        );
      } else {
        logger.info(`${label}: ${address} no longer evicts counters (maxmemory ${r.maxmemory} bytes, maxmemory-policy ${r.policy})`);
      }
    }
  }

  /** `p`'s value, or its error (or a timeout) as an Error: a check never throws and never waits longer than REDIS_TIMEOUT. */
  private bounded<T>(p: Promise<T>): Promise<T | Error> {
    return new Promise((resolve) => {
      const t = setTimeout(() => resolve(new Error('timed out')), this.options.timeoutMs);
      p.then(
        (v) => {
          clearTimeout(t);
          resolve(v);
        },
        (err: unknown) => {
          clearTimeout(t);
          resolve(err instanceof Error ? err : new Error(errorText(err)));
        },
      );
    });
  }
}

/** `field:value` lines of an INFO reply. */
function infoFields(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of text.split('\r\n')) {
    const i = line.indexOf(':');
    if (i > 0 && line.charCodeAt(0) !== 35 /* # */) out.set(line.slice(0, i), line.slice(i + 1));
  }
  return out;
}
