/**
 * The whole decision pipeline in the caller's process, on a MemoryStore, or on a FileStore when
 * the counts must outlive the process and be shared with others on the machine: what the strategy
 * runner uses when it does not talk to a remote `ratelimit`. Same config format, same answers; every
 * default (near-limit ratio, response flags) is the settings module's.
 */
import { FileStore } from '../backends/file';
import { MemoryStore } from '../backends/memory';
import { loadConfig } from '../config/load';
import type { ConfigFile, RateLimitConfig } from '../config/types';
import type { Clock } from '../platform/clock';
import type { RateLimitRequest, RateLimitResponse } from '../core/rls';
import { loadReloadableFlags, loadSettings } from '../settings';
import { StatsStore } from '../stats/store';
import { toServiceFlags } from './flags';
import { RateLimitService } from './service';

export interface InProcessLimiterOptions {
  readonly clock: Clock;
  /** Cache-key prefix of its counters. */
  readonly cacheKeyPrefix?: string;
  /** Counters kept at most (past it, new keys are counted in the overflow sketches; see MEMORY_MAX_KEYS). */
  readonly maxKeys?: number;
  /** Keep the counters in this file (FileStore: shared by the processes that name it, kept across restarts). */
  readonly stateFile?: string;
  /** Hears what the file store repaired (a corrupt state file set aside). */
  readonly onStateWarning?: (message: string) => void;
}

export interface InProcessLimiter {
  shouldRateLimit(req: RateLimitRequest): Promise<RateLimitResponse>;
  /** The loaded config, for lookups (`getLimit`) without counting. */
  readonly config: RateLimitConfig;
}

/** Loads `files` (throws ConfigError as `ratelimit` would at start-up) and serves from memory. */
export function createInProcessLimiter(files: readonly ConfigFile[], options: InProcessLimiterOptions): InProcessLimiter {
  const defaults = loadSettings({});
  const stats = new StatsStore();
  const config = loadConfig(files, { mergeDomainConfig: false, stats });
  const flags = toServiceFlags(loadReloadableFlags({}));
  const service = new RateLimitService({
    store:
      options.stateFile !== undefined
        ? new FileStore({ path: options.stateFile, maxKeys: options.maxKeys, onWarning: options.onStateWarning })
        : new MemoryStore({ maxKeys: options.maxKeys ?? 100_000 }),
    snapshot: () => ({ config, flags }),
    stats,
    clock: options.clock,
    nearLimitRatio: defaults.cache.nearLimitRatio,
    cacheKeyPrefix: options.cacheKeyPrefix ?? '',
  });
  return { shouldRateLimit: (req) => service.shouldRateLimit(req), config };
}
