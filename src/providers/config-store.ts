/**
 * The config store: the one place that holds the current immutable config snapshot (upstream
 * `service.SetConfig`). Providers (file, xDS) hand it whole configs; it swaps one reference, so a
 * request that read `current()` once uses one consistent config + flags pair from start to end.
 *
 * On every provider event:
 * - success (`update`): re-read the reloadable flags (upstream re-reads SHADOW_MODE, QUOTA_MODE,
 *   RESPONSE_DYNAMIC_METADATA and the LIMIT_* header settings from the environment at every load),
 *   swap `{ config, flags }`, `ratelimit.service.config_load_success` +1, notify listeners (health),
 *   log `Successfully loaded new configuration`;
 * - failure (`fail`): `ratelimit.service.config_load_error` +1, log
 *   `Error loading new configuration: <message>`, keep the previous snapshot (none before the first
 *   successful load: requests then fail with `no rate limit configuration loaded`), listeners are
 *   not called (health does not change on a failed load).
 *
 * Beyond upstream, so that losing limits is never silent: the gauges `ratelimit.config.domains` and
 * `ratelimit.config.rules` hold what the current snapshot has (0 before the first successful load,
 * so a failed first load shows as 0 rules), and a load that leaves fewer rules than the snapshot it
 * replaces (none included) is logged at error level with both counts.
 *
 * `waitForFirst()` resolves at the first event, success or failure (upstream unblocks start-up on
 * the first event even when it is an error); `waitForLoaded()` at the first successful load, which
 * is what start-up waits for here after a failed first load (the service does not listen without
 * a config unless FORCE_START_WITHOUT_INITIAL_CONFIG); `lastError` says why the last load failed.
 *
 * With a history (DEBUG_CONFIG_HISTORY_SIZE > 0), every load, failed or not, is told to it with
 * its source (config-history.ts): it versions and diffs the loads.
 */
import type { ConfigSnapshot, RateLimitConfig } from '../config/types';
import type { Counter, Gauge, StatsStore } from '../stats/store';
import type { Logger } from '../telemetry/logger';
import type { ConfigHistory, LoadSource } from './config-history';
import { errorMessage } from '../platform/errors';

/** The logger the providers write to (a subset of the service logger). */
export type ProviderLogger = Pick<Logger, 'info' | 'warn' | 'error'>;

export type ConfigListener<F> = (snapshot: ConfigSnapshot<F>) => void;

export interface ConfigStoreOptions<F> {
  stats: StatsStore;
  logger: ProviderLogger;
  /**
   * Reads the reloadable flags; called once per successful load, before the swap. If it throws, the
   * load counts as failed and the previous snapshot stays.
   */
  readFlags: () => F;
  /** Told every load (DEBUG_CONFIG_HISTORY_SIZE > 0). */
  history?: ConfigHistory | undefined;
}

export const CONFIG_LOAD_SUCCESS = 'ratelimit.service.config_load_success';
export const CONFIG_LOAD_ERROR = 'ratelimit.service.config_load_error';
/** Gauges (not upstream): domains and rules (limits, the lines of /rlconfig) of the current config. */
export const CONFIG_DOMAINS = 'ratelimit.config.domains';
export const CONFIG_RULES = 'ratelimit.config.rules';

export class ConfigStore<F> {
  /** The current snapshot; replaced (never mutated) on each successful load. */
  private snapshot: ConfigSnapshot<F> | undefined = undefined;
  private readonly listeners = new Set<ConfigListener<F>>();
  private readonly loadSuccess: Counter;
  private readonly loadError: Counter;
  private readonly domains: Gauge;
  private readonly rules: Gauge;
  private readonly logger: ProviderLogger;
  private readonly readFlags: () => F;
  private readonly history: ConfigHistory | undefined;
  private firstEventSeen = false;
  private resolveFirst!: () => void;
  /** Settles at the first event. It holds no snapshot: a big first config must not outlive its replacement. */
  private readonly first: Promise<void>;
  private firstLoaded = false;
  private resolveLoaded!: () => void;
  /** Settles at the first successful load (holding no snapshot either). */
  private readonly loaded: Promise<void>;
  private lastErrorMessage: string | undefined;

  constructor(opts: ConfigStoreOptions<F>) {
    this.logger = opts.logger;
    this.readFlags = opts.readFlags;
    this.history = opts.history;
    // Created up front so both series exist (at 0) before the first load, as gostats does.
    this.loadSuccess = opts.stats.counter(CONFIG_LOAD_SUCCESS);
    this.loadError = opts.stats.counter(CONFIG_LOAD_ERROR);
    this.domains = opts.stats.gauge(CONFIG_DOMAINS);
    this.rules = opts.stats.gauge(CONFIG_RULES);
    this.first = new Promise((resolve) => {
      this.resolveFirst = resolve;
    });
    this.loaded = new Promise((resolve) => {
      this.resolveLoaded = resolve;
    });
  }

  /** Hot path: the current `{ config, flags }`, or undefined before the first successful load. */
  current(): ConfigSnapshot<F> | undefined {
    return this.snapshot;
  }

  /** True once a provider reported its first event (success or failure). */
  get hasFirstEvent(): boolean {
    return this.firstEventSeen;
  }

  /**
   * Resolves at the first event: with the current snapshot (undefined when the first load failed).
   * Already resolved when the first event has happened.
   */
  waitForFirst(): Promise<ConfigSnapshot<F> | undefined> {
    return this.first.then(() => (this.firstLoaded ? this.snapshot : undefined));
  }

  /** Resolves at the first successful load (at once when there was one). */
  waitForLoaded(): Promise<void> {
    return this.loaded;
  }

  /** The message of the last failed load (undefined before any failure). */
  get lastError(): string | undefined {
    return this.lastErrorMessage;
  }

  /** A successful load: swap in `config` with freshly read flags. `source`: where it came from (the history's). */
  update(config: RateLimitConfig, source?: LoadSource): void {
    let flags: F;
    try {
      flags = this.readFlags();
    } catch (err) {
      this.fail(err, source);
      return;
    }
    const next: ConfigSnapshot<F> = Object.freeze({ config, flags });
    const before = this.snapshot?.config;
    this.snapshot = next;
    this.loadSuccess.inc();
    this.domains.set(config.domainCount);
    this.rules.set(config.ruleCount);
    this.history?.loaded(before, config, source);
    if (before !== undefined && config.ruleCount < before.ruleCount) {
      this.logger.error(
        `the new configuration has ${config.ruleCount} rate limit rules (${config.domainCount} domains), ` +
          `the one it replaces had ${before.ruleCount} (${before.domainCount} domains)` +
          (config.ruleCount === 0 ? ': no request is limited any more' : ''),
      );
    }
    for (const listener of this.listeners) {
      try {
        listener(next);
      } catch (err) {
        this.logger.error(`config listener failed: ${errorMessage(err)}`);
      }
    }
    this.logger.info('Successfully loaded new configuration');
    this.markFirst();
    this.resolveLoaded();
  }

  /** A failed load: count it, log it, keep the previous snapshot. */
  fail(err: unknown, source?: LoadSource): void {
    this.loadError.inc();
    this.lastErrorMessage = errorMessage(err);
    this.logger.error(`Error loading new configuration: ${this.lastErrorMessage}`);
    this.history?.failed(this.lastErrorMessage, source);
    this.markFirst();
  }

  /**
   * Called after each successful swap (not on failures), e.g. health with
   * HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED reading `snapshot.config.domainCount`. Returns an
   * unsubscribe function. A listener that throws is logged and does not affect the others.
   */
  onUpdate(listener: ConfigListener<F>): () => void {
    this.listeners.add(listener);
    return () => {
      this.listeners.delete(listener);
    };
  }

  private markFirst(): void {
    if (this.firstEventSeen) return;
    this.firstEventSeen = true;
    this.firstLoaded = this.snapshot !== undefined;
    this.resolveFirst();
  }
}
