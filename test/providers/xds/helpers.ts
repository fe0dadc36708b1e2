/** Shared set-up for the xDS provider tests: settings, a provider wired to a real ConfigStore. */
import { RateLimitUnit } from '../../../generated/ratelimit/config/ratelimit/v3/rls_conf';
import type { ConfigBuilder } from '../../../src/providers/config-builder';
import { CONFIG_LOAD_ERROR, CONFIG_LOAD_SUCCESS, ConfigStore } from '../../../src/providers/config-store';
import { XdsProvider } from '../../../src/providers/xds/provider';
import type { XdsSettings } from '../../../src/settings/settings';
import { StatsStore } from '../../../src/stats/store';
import { rlc } from '../../support/xds';
import { CapturingLogger } from '../helpers';

export type Flags = { readonly loadedAt: number };

export interface SettingsOverrides extends Partial<Omit<XdsSettings, 'tls' | 'backoff'>> {
  tls?: Partial<XdsSettings['tls']>;
  backoff?: Partial<XdsSettings['backoff']>;
}

/** Small, fast settings: 50 ms connect retry, 50..200 ms backoff. */
export function xdsSettings(over: SettingsOverrides = {}): XdsSettings {
  const { tls, backoff, ...rest } = over;
  return {
    nodeId: 'test-node',
    nodeMetadata: {},
    serverUrl: '127.0.0.1:1',
    connectRetryIntervalMs: 50,
    additionalHeaders: {},
    maxMsgSizeInBytes: 0,
    ...rest,
    tls: { enabled: false, clientCertFile: '', clientKeyFile: '', serverCaFile: '', serverSan: '', ...tls },
    backoff: { initialIntervalMs: 50, maxIntervalMs: 200, randomFactor: 0.5, jitter: true, ...backoff },
  };
}

const cleanups: Array<() => unknown> = [];

/** Registers a clean-up for the end of the current test (run in reverse order). */
export function onCleanup(fn: () => unknown): void {
  cleanups.push(fn);
}

export async function runCleanups(): Promise<void> {
  for (const fn of cleanups.splice(0).reverse()) await fn();
}

export interface ProviderOptions {
  merge?: () => boolean;
  random?: () => number;
  maxBytes?: number;
  maxDescriptors?: number;
  maxResources?: number;
  builder?: ConfigBuilder;
}

export function setupProvider(settings: XdsSettings, opts: ProviderOptions = {}) {
  const stats = new StatsStore();
  const logger = new CapturingLogger();
  const store = new ConfigStore<Flags>({ stats, logger, readFlags: () => ({ loadedAt: Date.now() }) });
  const provider = new XdsProvider<Flags>({
    settings,
    mergeDomainConfig: opts.merge ?? (() => false),
    stats,
    store,
    logger,
    random: opts.random,
    maxBytes: opts.maxBytes,
    maxDescriptors: opts.maxDescriptors,
    maxResources: opts.maxResources,
    builder: opts.builder,
  });
  onCleanup(() => provider.stop());
  return {
    stats,
    logger,
    store,
    provider,
    successes: () => stats.counter(CONFIG_LOAD_SUCCESS).value,
    errors: () => stats.counter(CONFIG_LOAD_ERROR).value,
    config: () => store.current()?.config,
  };
}

/** A one-rule resource: `<domain>.<key>` limited to `n` per minute. */
export function simple(name: string, domain: string, key = 'k', n = 10) {
  return rlc(name, domain, [{ key, rateLimit: { unit: RateLimitUnit.MINUTE, requestsPerUnit: n } }]);
}
