/**
 * What RLQS streams may make the process hold: the buckets it tracks for them, and the bytes those
 * buckets take, per stream, per connection and per process (RLQS_MAX_BUCKETS_PER_STREAM,
 * RLQS_MAX_BUCKET_BYTES_PER_STREAM, RLQS_MAX_BUCKETS_PER_CONNECTION, ..., RLQS_MAX_BUCKETS,
 * RLQS_MAX_BUCKET_BYTES). The quota engine asks here before it tracks any bucket, and tells here
 * what it lets go: the one place these budgets are enforced, counted and logged.
 *
 * A bucket that would take its stream or its connection over a budget is refused and its stream
 * is to end (RESOURCE_EXHAUSTED, the reason naming the setting); one that would take the process
 * over is refused and its stream goes on (the engine answers such a bucket without tracking it).
 *
 * The bytes are what a bucket holds, from measurements (bench/rlqs-memory.js): each bucket a
 * stream tracks costs BUCKET_BYTES plus its id's bytes; a bucket no other stream of its domain
 * tracks costs NAME_BYTES plus twice its id more (its shared name, placement and division). A
 * stream and its connection are charged what their buckets added; the process holds what is held
 * (a name's part until its last stream lets it go; an ended stream's reserved buckets until they
 * are let go).
 */
import type { Clock } from '../platform/clock';
import type { Counter, Gauge, StatsStore } from '../stats/store';
import type { Logger } from '../telemetry/logger';
import { ThrottledLog } from '../telemetry/throttled-log';

/** Heap one tracked bucket of a stream takes besides its id (measured: 627-644 bytes, bench/rlqs-memory.js). */
export const BUCKET_BYTES = 640;
/**
 * What a bucket no other stream tracks adds, besides twice its id: measured about 1,350 bytes of heap
 * (2.2 per byte of id); counted higher for what such a bucket costs every second besides its heap
 * (its division, its entry in each exchange: a Redis write a second with Redis).
 */
export const NAME_BYTES = 1920;

export interface BucketBudget {
  readonly buckets: number;
  readonly bytes: number;
}

export interface QuotaBudgets {
  readonly stream: BucketBudget;
  readonly connection: BucketBudget;
  readonly process: BucketBudget;
}

/** What a stream, a connection or the process holds. */
export class Holding {
  buckets = 0;
  bytes = 0;
}

/** A connection's streams together, while any is open or holds a bucket (an ended stream's are reserved a while). */
export class ConnectionHolding extends Holding {
  streams = 0;
  constructor(readonly key: unknown) {
    super();
  }
}

export type BudgetLevel = 'stream' | 'connection' | 'process';

/** A bucket the budgets do not let be tracked, and why (the text names the setting). */
export interface Refusal {
  readonly level: BudgetLevel;
  readonly reason: string;
}

const SETTINGS: Record<BudgetLevel, { buckets: string; bytes: string; whose: string }> = {
  stream: { buckets: 'RLQS_MAX_BUCKETS_PER_STREAM', bytes: 'RLQS_MAX_BUCKET_BYTES_PER_STREAM', whose: 'this stream' },
  connection: { buckets: 'RLQS_MAX_BUCKETS_PER_CONNECTION', bytes: 'RLQS_MAX_BUCKET_BYTES_PER_CONNECTION', whose: 'the streams of this connection' },
  process: { buckets: 'RLQS_MAX_BUCKETS', bytes: 'RLQS_MAX_BUCKET_BYTES', whose: 'the process' },
};

/** The bytes a bucket a stream starts tracking adds: its id's and BUCKET_BYTES, and its name's when it is new. */
export function bucketCost(idBytes: number, newName: boolean, keyLength: number): { bucket: number; name: number } {
  return { bucket: BUCKET_BYTES + idBytes, name: newName ? NAME_BYTES + 2 * keyLength : 0 };
}

export class QuotaAdmission {
  readonly process = new Holding();
  private readonly connections = new Map<unknown, ConnectionHolding>();
  private readonly counters: Record<BudgetLevel, Counter> | undefined;
  private readonly gauges: { buckets: Gauge; bytes: Gauge } | undefined;
  private readonly warnings: Record<BudgetLevel, ThrottledLog> | undefined;

  constructor(
    readonly budgets: QuotaBudgets,
    opts: { stats?: StatsStore; logger?: Logger; clock?: Clock } = {},
  ) {
    const st = opts.stats;
    this.counters =
      st === undefined
        ? undefined
        : {
            stream: st.counter('ratelimit.rlqs.stream_budget_exhausted'),
            connection: st.counter('ratelimit.rlqs.connection_budget_exhausted'),
            process: st.counter('ratelimit.rlqs.process_budget_exhausted'),
          };
    this.gauges = st === undefined ? undefined : { buckets: st.gauge('ratelimit.rlqs.buckets'), bytes: st.gauge('ratelimit.rlqs.bucket_bytes') };
    const logger = opts.logger;
    this.warnings =
      logger === undefined
        ? undefined
        : {
            stream: new ThrottledLog((m) => logger.warn(m), 1000, opts.clock),
            connection: new ThrottledLog((m) => logger.warn(m), 1000, opts.clock),
            process: new ThrottledLog((m) => logger.warn(m), 1000, opts.clock),
          };
  }

  /** The holding of connection `key`'s streams (a holding of its own without a key); leave it when the stream ends. */
  joinConnection(key: unknown): ConnectionHolding {
    if (key === undefined) {
      const own = new ConnectionHolding(undefined);
      own.streams = 1;
      return own;
    }
    let c = this.connections.get(key);
    if (c === undefined) this.connections.set(key, (c = new ConnectionHolding(key)));
    c.streams++;
    return c;
  }

  leaveConnection(c: ConnectionHolding): void {
    c.streams--;
    this.forgetIdle(c);
  }

  /** Connections with an open RLQS stream, or a bucket held for one that ended. */
  get connectionCount(): number {
    return this.connections.size;
  }

  /**
   * Takes one bucket and `cost` for stream `stream` (named `streamId` in the log) on `connection`,
   * or refuses it, taking nothing: the first budget it would exceed, stream, connection, process.
   */
  admit(stream: Holding, connection: Holding, cost: { bucket: number; name: number }, streamId: string): Refusal | undefined {
    const charged = cost.bucket + cost.name;
    const b = this.budgets;
    const refusal =
      this.over('stream', stream, b.stream, charged) ?? this.over('connection', connection, b.connection, charged) ?? this.over('process', this.process, b.process, charged);
    if (refusal !== undefined) {
      this.counters?.[refusal.level].inc();
      this.warnings?.[refusal.level].log(
        refusal.level === 'process'
          ? `RLQS: ${refusal.reason}: new buckets get their rule's answer without a share (deny all under a limit) until some are released`
          : `RLQS stream ${streamId} ended: ${refusal.reason}`,
      );
      return refusal;
    }
    for (const h of [stream, connection]) {
      h.buckets++;
      h.bytes += charged;
    }
    this.process.buckets++;
    this.process.bytes += charged;
    this.published();
    return undefined;
  }

  /** A tracked bucket let go: what `admit` charged its stream and connection, and its own part of the process's. */
  release(stream: Holding, connection: ConnectionHolding, charged: number, bucketPart: number): void {
    for (const h of [stream, connection]) {
      h.buckets--;
      h.bytes -= charged;
    }
    this.process.buckets--;
    this.process.bytes -= bucketPart;
    this.forgetIdle(connection);
    this.published();
  }

  private forgetIdle(c: ConnectionHolding): void {
    if (c.streams === 0 && c.buckets === 0 && c.key !== undefined && this.connections.get(c.key) === c) this.connections.delete(c.key);
  }

  /** A bucket's shared name let go by its last stream: its part of the process's bytes. */
  releaseName(nameBytes: number): void {
    this.process.bytes -= nameBytes;
    this.published();
  }

  private over(level: BudgetLevel, h: Holding, budget: BucketBudget, bytes: number): Refusal | undefined {
    const s = SETTINGS[level];
    if (h.buckets + 1 > budget.buckets) return { level, reason: `${s.whose} would track more than ${budget.buckets} buckets (${s.buckets})` };
    if (h.bytes + bytes > budget.bytes) return { level, reason: `${s.whose} would hold more than ${budget.bytes} bytes of buckets (${s.bytes})` };
    return undefined;
  }

  private published(): void {
    const g = this.gauges;
    if (g === undefined) return;
    g.buckets.set(this.process.buckets);
    g.bytes.set(this.process.bytes);
  }
}

/** Budgets of these bounds, every bound not given unlimited. */
export function quotaBudgets(b: {
  streamBuckets?: number;
  streamBytes?: number;
  connectionBuckets?: number;
  connectionBytes?: number;
  processBuckets?: number;
  processBytes?: number;
}): QuotaBudgets {
  const n = (x: number | undefined): number => x ?? Infinity;
  return {
    stream: { buckets: n(b.streamBuckets), bytes: n(b.streamBytes) },
    connection: { buckets: n(b.connectionBuckets), bytes: n(b.connectionBytes) },
    process: { buckets: n(b.processBuckets), bytes: n(b.processBytes) },
  };
}
