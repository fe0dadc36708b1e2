import { loadConfig } from '../../src/config';
import type { RateLimitConfig } from '../../src/config';
import { StatsStore } from '../../src/stats/store';
import type { Descriptor } from '../../src/core/rls';

export function load(
  content: string | string[],
  opts: { merge?: boolean; stats?: StatsStore } = {},
): RateLimitConfig {
  const files = (Array.isArray(content) ? content : [content]).map((c, i) => ({ name: `file${i}.yaml`, content: c }));
  return loadConfig(files, { mergeDomainConfig: opts.merge ?? false, stats: opts.stats ?? new StatsStore() });
}

/** The ConfigError message for a document, or 'OK'. */
export function loadError(content: string | string[], merge = false): string {
  try {
    load(content, { merge });
    return 'OK';
  } catch (e) {
    expect((e as Error).name).toBe('ConfigError');
    return (e as Error).message;
  }
}

export function desc(...kv: Array<[string, string]>): Descriptor {
  return { entries: kv.map(([key, value]) => ({ key, value })) };
}
