import { ConfigError } from '../../src/config/types';
import { CONFIG_DOMAINS, CONFIG_RULES, ConfigStore } from '../../src/providers/config-store';
import * as v8 from 'node:v8';
import * as vm from 'node:vm';
import { StatsStore } from '../../src/stats/store';
import { CapturingLogger, fakeConfig } from './helpers';

interface Flags {
  shadowMode: boolean;
}

function setup(readFlags: () => Flags = () => ({ shadowMode: false })) {
  const stats = new StatsStore();
  const logger = new CapturingLogger();
  const store = new ConfigStore<Flags>({ stats, logger, readFlags });
  const count = (name: string) => stats.counter(name).value;
  return { stats, logger, store, count };
}

describe('ConfigStore', () => {
  test('starts empty with both load counters registered at 0', () => {
    const { store, stats } = setup();
    expect(store.current()).toBeUndefined();
    expect(store.hasFirstEvent).toBe(false);
    const names = stats.entries().map(([n]) => n);
    expect(names).toEqual(expect.arrayContaining(['ratelimit.service.config_load_success', 'ratelimit.service.config_load_error']));
  });

  test('update swaps config and flags together, counts, logs, notifies', () => {
    let shadow = false;
    const { store, logger, count } = setup(() => ({ shadowMode: shadow }));
    const seen: number[] = [];
    store.onUpdate((s) => seen.push(s.config.domainCount));

    const c1 = fakeConfig([{ name: 'a.yaml', content: 'x' }], false);
    store.update(c1);
    const s1 = store.current();
    expect(s1?.config).toBe(c1);
    expect(s1?.flags).toEqual({ shadowMode: false });
    expect(Object.isFrozen(s1)).toBe(true);

    shadow = true; // flags are re-read at every load
    const c2 = fakeConfig([], false);
    store.update(c2);
    const s2 = store.current();
    expect(s2?.config).toBe(c2);
    expect(s2?.flags).toEqual({ shadowMode: true });
    // The earlier snapshot is untouched: a request holding it keeps a consistent pair.
    expect(s1?.config).toBe(c1);
    expect(s1?.flags).toEqual({ shadowMode: false });

    expect(count('ratelimit.service.config_load_success')).toBe(2);
    expect(count('ratelimit.service.config_load_error')).toBe(0);
    expect(seen).toEqual([1, 0]);
    expect(logger.messages('info')).toEqual([
      'Successfully loaded new configuration',
      'Successfully loaded new configuration',
    ]);
  });

  test('fail keeps the previous snapshot, counts, logs, does not notify', () => {
    const { store, logger, count } = setup();
    const listener = jest.fn();
    store.onUpdate(listener);
    const c1 = fakeConfig([{ name: 'a.yaml', content: 'x' }], false);
    store.update(c1);
    const before = store.current();

    store.fail(new ConfigError('a.yaml: config file cannot have empty domain'));
    expect(store.current()).toBe(before);
    expect(count('ratelimit.service.config_load_error')).toBe(1);
    expect(count('ratelimit.service.config_load_success')).toBe(1);
    expect(listener).toHaveBeenCalledTimes(1);
    expect(logger.messages('error')).toEqual([
      'Error loading new configuration: a.yaml: config file cannot have empty domain',
    ]);
  });

  test('a failing first load leaves no config and still resolves waitForFirst', async () => {
    const { store } = setup();
    const first = store.waitForFirst();
    store.fail(new ConfigError('x.yaml: bad'));
    await expect(first).resolves.toBeUndefined();
    expect(store.hasFirstEvent).toBe(true);
    expect(store.current()).toBeUndefined();
    // Later successes do not change what the first event reported.
    store.update(fakeConfig([], false));
    await expect(store.waitForFirst()).resolves.toBeUndefined();
    expect(store.current()).toBeDefined();
  });

  test('waitForLoaded waits past failed loads for the first one that loads; lastError says why the last one failed', async () => {
    const { store } = setup();
    let loaded = false;
    void store.waitForLoaded().then(() => (loaded = true));
    expect(store.lastError).toBeUndefined();
    store.fail(new ConfigError('x.yaml: bad'));
    store.fail(new ConfigError('x.yaml: still bad'));
    await new Promise((r) => setImmediate(r));
    expect({ loaded, lastError: store.lastError }).toEqual({ loaded: false, lastError: 'x.yaml: still bad' });
    store.update(fakeConfig([], false));
    await store.waitForLoaded();
    expect(loaded).toBe(true);
    // A later failure does not undo it.
    store.fail(new ConfigError('x.yaml: bad again'));
    await expect(store.waitForLoaded()).resolves.toBeUndefined();
  });

  test('waitForFirst resolves with the first successful snapshot', async () => {
    const { store } = setup();
    const first = store.waitForFirst();
    const c = fakeConfig([{ name: 'a.yaml', content: 'x' }], false);
    store.update(c);
    const snap = await first;
    expect(snap?.config).toBe(c);
  });

  test('readFlags throwing fails the load; a throwing listener does not break the others', () => {
    let throwFlags = false;
    const { store, logger, count } = setup(() => {
      if (throwFlags) throw new Error('SHADOW_MODE: invalid boolean');
      return { shadowMode: false };
    });
    const good = jest.fn();
    store.onUpdate(() => {
      throw new Error('boom');
    });
    const unsubscribe = store.onUpdate(good);
    store.update(fakeConfig([], false));
    expect(good).toHaveBeenCalledTimes(1);
    expect(logger.messages('error')).toEqual(['config listener failed: boom']);

    throwFlags = true;
    const before = store.current();
    store.update(fakeConfig([{ name: 'a', content: 'x' }], false));
    expect(store.current()).toBe(before);
    expect(count('ratelimit.service.config_load_error')).toBe(1);

    unsubscribe();
    throwFlags = false;
    store.update(fakeConfig([], false));
    expect(good).toHaveBeenCalledTimes(1);
  });

  test('gauges follow the domains and rules loaded; fewer rules (none included) is an error line', () => {
    const { store, stats, logger } = setup();
    const gauge = (name: string) => stats.gauge(name).value;
    // Registered at 0 before any load: a failed first load shows as 0 rules.
    expect(stats.entries()).toEqual(expect.arrayContaining([[CONFIG_DOMAINS, 0], [CONFIG_RULES, 0]]));
    store.fail(new ConfigError('a.yaml: bad'));
    expect(gauge(CONFIG_RULES)).toBe(0);

    const files = (n: number) => Array.from({ length: n }, (_, i) => ({ name: `f${i}.yaml`, content: 'x' }));
    store.update(fakeConfig(files(3), false));
    expect([gauge(CONFIG_DOMAINS), gauge(CONFIG_RULES)]).toEqual([3, 3]);
    store.update(fakeConfig(files(4), false));
    const errors = () => logger.messages('error').filter((m) => !m.startsWith('Error loading new configuration'));
    expect(errors()).toEqual([]);

    store.update(fakeConfig(files(1), false));
    expect([gauge(CONFIG_DOMAINS), gauge(CONFIG_RULES)]).toEqual([1, 1]);
    expect(errors()).toEqual([
      'the new configuration has 1 rate limit rules (1 domains), the one it replaces had 4 (4 domains)',
    ]);

    store.update(fakeConfig([], false));
    expect([gauge(CONFIG_DOMAINS), gauge(CONFIG_RULES)]).toEqual([0, 0]);
    expect(logger.messages('error').at(-1)).toBe(
      'the new configuration has 0 rate limit rules (0 domains), the one it replaces had 1 (1 domains): no request is limited any more',
    );
    // A failed load changes neither the config nor the gauges.
    store.fail(new ConfigError('b.yaml: bad'));
    expect(gauge(CONFIG_RULES)).toBe(0);
  });

  test('a replaced first config is not kept alive by waitForFirst', async () => {
    v8.setFlagsFromString('--expose-gc');
    const gc = vm.runInNewContext('gc') as () => void;
    const { store } = setup();
    let first: ReturnType<typeof fakeConfig> | undefined = fakeConfig([{ name: 'big.yaml', content: 'x' }], false);
    const ref = new WeakRef(first);
    store.update(first);
    first = undefined;
    await store.waitForFirst();
    store.update(fakeConfig([], false));
    expect((await store.waitForFirst())?.config.domainCount).toBe(0);
    // WeakRefs are cleared by a collection after the job that last read them.
    await new Promise((resolve) => setImmediate(resolve));
    gc();
    expect(ref.deref()).toBeUndefined();
  });
});
