/**
 * The one seam between the decision pipeline and a counter store (memory, Redis, Memcached). A
 * store applies a whole request's keys in one round trip and returns the counts after the
 * increment; statuses are computed once, by the limiter, for every store.
 */
import type { Algorithm, RateLimitRule } from './rule';
import type { Entry } from './rls';

export interface CounterOp {
  /** The full cache key (prefix, domain, entries, window start). */
  readonly key: string;
  /** How much to add (the hits_addend; may be 0 for a check-only descriptor). */
  readonly hits: number;
  /** Window length in seconds (the unit's divider); also the base of the key's expiry. */
  readonly windowSeconds: number;
  /** The rule being counted, so a store can apply a per-rule algorithm atomically. */
  readonly rule: RateLimitRule;
  /**
   * sliding_window only: the previous window's key (read, never written). The op's algorithm is
   * `rule.algorithm` (undefined: upstream's fixed window); see src/limiter/algorithms.ts for
   * what a store returns for each.
   */
  readonly prevKey?: string | undefined;
  /**
   * For the rule's watch (stores ignore both): the key without its window start, and the
   * request descriptor's entries.
   */
  readonly stem?: string | undefined;
  readonly entries?: readonly Entry[] | undefined;
  /**
   * Only on a candidate limit's op (RateLimitRule.candidate): the enforced op it is counted beside.
   * A store sends it where that one goes (the same Redis instance, the same memcached node), never
   * lets it change what the enforced ops count (STOP_CACHE_KEY_INCREMENT, the memory store's
   * places and caller budgets), and answers -1 for it when it cannot count it rather than failing
   * the request.
   */
  readonly follows?: CounterOp | undefined;
}

/** What the limiter knows about the request beyond its ops. */
export interface IncrementContext {
  /** Some other key of the request is already over its limit (found in the local cache). */
  readonly overLimitElsewhere: boolean;
  /**
   * The client the request comes from: its transport's peer address (one string per connection).
   * Undefined for a caller in the process (the runner) or on a Unix socket. The memory store
   * bounds the new counters one caller adds a second (MEMORY_CALLER_NEW_KEYS_PER_SECOND).
   */
  readonly caller?: string | undefined;
}

/**
 * A client as its transport knows it, made once per connection (or peer): its address and the
 * two contexts a request from it can need, so that no request allocates one.
 */
export class Caller {
  readonly overLimitElsewhere: IncrementContext;
  readonly notOverLimitElsewhere: IncrementContext;

  constructor(readonly address: string) {
    this.overLimitElsewhere = Object.freeze({ overLimitElsewhere: true, caller: address });
    this.notOverLimitElsewhere = Object.freeze({ overLimitElsewhere: false, caller: address });
  }
}

export interface CounterStore {
  /** Short name for logs and health (`memory`, `redis`, `memcache`). */
  readonly kind: string;
  /**
   * Adds each op's hits to its key and resolves to the counts after the increment, in order (for
   * an op with an algorithm, its effective count after: src/limiter/algorithms.ts). A count may
   * be more than the key's own (the memory store's overflow counts colliding keys together),
   * never less. A store that honours STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT may add less (see
   * stop-increment.ts); the count it returns is then the count after what it really added.
   */
  increment(ops: readonly CounterOp[], nowMs: number, context?: IncrementContext): Promise<number[]>;
  /** The same, answered at once, for a store that counts in process (no promise on the hot path). */
  incrementSync?(ops: readonly CounterOp[], nowMs: number, context?: IncrementContext): number[];
  /** Algorithms this store cannot apply; configs using them are refused at load. */
  readonly restrictions?: readonly AlgorithmRestriction[];
  /** Whether the store can currently serve (health checks). */
  isHealthy(): boolean;
  /** Releases connections and timers. */
  close(): Promise<void>;
}

/**
 * An algorithm a store cannot apply, or `candidate` for candidate limits it cannot count beside
 * the enforced ones without changing an answer; configs using it are refused at load.
 */
export interface AlgorithmRestriction {
  readonly store: string;
  readonly algorithm: Algorithm | 'candidate';
  readonly reason: string;
}

/** A counter store failure; `transient` tells a retry or a fail-open policy it may pass. */
export class StoreError extends Error {
  override readonly name = 'StoreError';
  constructor(
    message: string,
    readonly transient: boolean,
  ) {
    super(message);
  }
}
