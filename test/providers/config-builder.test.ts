/**
 * The config builder with its real worker thread (dist/, built by `make build`): a big config is
 * built while the event loop keeps turning, from files and from xDS resources, with the loader's
 * exact errors; the limits and the worker's heap bound refuse what is too big.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { RateLimitConfig as RateLimitConfigProto } from '../../generated/ratelimit/config/ratelimit/v3/rls_conf';
import { ConfigError } from '../../src/config/types';
import type { RateLimitConfig } from '../../src/config/types';
import { ConfigBuilder } from '../../src/providers/config-builder';
import type { ListedFile } from '../../src/providers/config-files';
import { RATE_LIMIT_CONFIG_TYPE_URL, yamlToRateLimitConfig } from '../../src/providers/xds/convert';
import { StatsStore } from '../../src/stats/store';
import { makeTmpDir } from './helpers';

let tmp: string;
beforeEach(() => {
  tmp = makeTmpDir();
});
afterEach(() => fs.rmSync(tmp, { recursive: true, force: true }));

/** `n` descriptors `client_id = client_<i>`, each with its limit; `tail` appended as is. */
function bigYaml(n: number, tail = ''): string {
  const parts = ['domain: big\ndescriptors:\n'];
  for (let i = 0; i < n; i++) {
    parts.push(`  - key: client_id\n    value: client_${i}\n    rate_limit:\n      unit: second\n      requests_per_unit: ${1 + (i % 50)}\n`);
  }
  return parts.join('') + tail;
}

function listed(name: string, content: string): ListedFile[] {
  const file = path.join(tmp, name);
  fs.writeFileSync(file, content);
  return [{ name, path: file, size: fs.statSync(file).size }];
}

const desc = (key: string, value: string) => ({ entries: [{ key, value }] });

/** Runs `work` while a 10 ms interval ticks; the longest gap between ticks, and how many there were. */
async function whileTicking<T>(work: () => T | Promise<T>): Promise<{ result: T; maxGapMs: number; ticks: number }> {
  let last = performance.now();
  let maxGapMs = 0;
  let ticks = 0;
  const timer = setInterval(() => {
    const now = performance.now();
    maxGapMs = Math.max(maxGapMs, now - last);
    last = now;
    ticks++;
  }, 10);
  try {
    const result = await work();
    maxGapMs = Math.max(maxGapMs, performance.now() - last);
    return { result, maxGapMs, ticks };
  } finally {
    clearInterval(timer);
  }
}

test('a big config is built in a worker: the event loop keeps turning, the snapshot is complete', async () => {
  const builder = new ConfigBuilder({ stats: new StatsStore() });
  const files = listed('big.yaml', bigYaml(40_000));
  const { result, maxGapMs, ticks } = await whileTicking(() => builder.build({ kind: 'files', files }, { mergeDomainConfig: false }));
  const config = result as RateLimitConfig;
  expect(config.ruleCount).toBe(40_000);
  expect(config.getLimit('big', desc('client_id', 'client_39999'))?.limit.requestsPerUnit).toBe(50);
  expect(config.getLimit('big', desc('client_id', 'client_0'))?.fullKey).toBe('big.client_id_client_0');
  // Built at once on this thread, this takes seconds with no tick at all; off it, the timer keeps
  // firing (the bound is generous: the machine may be loaded).
  expect(ticks).toBeGreaterThan(10);
  expect(maxGapMs).toBeLessThan(1000);
}, 60_000);

test('xDS resources are decoded and built in the worker the same way', async () => {
  const builder = new ConfigBuilder({ stats: new StatsStore() });
  const proto = yamlToRateLimitConfig('big.yaml', bigYaml(3_000), 'big');
  const value = RateLimitConfigProto.encode(proto).finish();
  expect(value.byteLength).toBeGreaterThan(64 * 1024);
  const pending = builder.build({ kind: 'resources', resources: [{ typeUrl: RATE_LIMIT_CONFIG_TYPE_URL, value }] }, { mergeDomainConfig: false });
  expect(pending).toBeInstanceOf(Promise);
  const config = await pending;
  expect(config.ruleCount).toBe(3_000);
  expect(config.getLimit('big', desc('client_id', 'client_2999'))?.limit.requestsPerUnit).toBe(50);
}, 60_000);

test("a worker's load error is the loader's exact text", async () => {
  const builder = new ConfigBuilder({ stats: new StatsStore() });
  const files = listed('big.yaml', bigYaml(2_000, '  - key: late\n    rate_limit:\n      unit: fortnight\n'));
  const err = await Promise.resolve(builder.build({ kind: 'files', files }, { mergeDomainConfig: false })).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(ConfigError);
  expect((err as Error).message).toBe("big.yaml: invalid rate limit unit 'fortnight'");
}, 60_000);

test('CONFIG_MAX_DESCRIPTORS refuses a bigger config, on either thread, naming the setting', async () => {
  const builder = new ConfigBuilder({ stats: new StatsStore() });
  const message = 'big.yaml: the configuration has more than 1000 descriptors, the limit set by CONFIG_MAX_DESCRIPTORS; it was not loaded';
  const big = listed('big.yaml', bigYaml(1_001));
  expect(big[0]!.size).toBeGreaterThan(64 * 1024);
  await expect(Promise.resolve(builder.build({ kind: 'files', files: big }, { mergeDomainConfig: false, maxDescriptors: 1000 }))).rejects.toThrow(
    message,
  );
  // Small enough to be built at once, deep enough to pass the limit: every depth counts.
  const nested = Array.from({ length: 980 }, (_, i) => `      - {key: b, value: '${i}'}\n`).join('');
  const small = listed('big.yaml', bigYaml(20, `  - key: a\n    descriptors:\n${nested}`));
  expect(small[0]!.size).toBeLessThan(64 * 1024);
  expect(() => builder.build({ kind: 'files', files: small }, { mergeDomainConfig: false, maxDescriptors: 1000 })).toThrow(message);
  // At the limit it loads.
  const at = await builder.build({ kind: 'files', files: listed('big.yaml', bigYaml(1_001)) }, { mergeDomainConfig: false, maxDescriptors: 1001 });
  expect(at.ruleCount).toBe(1001);
}, 60_000);

test('a config that needs more than the worker heap limit fails its load; the process lives on', async () => {
  const builder = new ConfigBuilder({ stats: new StatsStore(), maxHeapMb: 16 });
  const files = listed('big.yaml', bigYaml(100_000));
  const err = await Promise.resolve(builder.build({ kind: 'files', files }, { mergeDomainConfig: false })).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(ConfigError);
  expect((err as Error).message).toBe('the configuration needs more than 16 MiB of memory to load; it was not loaded');
}, 60_000);

test('close() ends a build in progress', async () => {
  const builder = new ConfigBuilder({ stats: new StatsStore() });
  const files = listed('big.yaml', bigYaml(20_000));
  const pending = Promise.resolve(builder.build({ kind: 'files', files }, { mergeDomainConfig: false }));
  builder.close();
  await expect(pending).rejects.toThrow('the config build was stopped');
  await expect(Promise.resolve(builder.build({ kind: 'files', files }, { mergeDomainConfig: false }))).rejects.toThrow('closed');
}, 60_000);
