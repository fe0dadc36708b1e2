/**
 * The decision pipeline with the real config loader, the memory store and an injected clock:
 * aggregation (replaces, unlimited, shadow, quota, headers, dynamic metadata), hits_addend,
 * the local cache and the error answers.
 */
import { MemoryStore } from '../../src/backends/memory';
import { loadConfig } from '../../src/config/load';
import { ManualClock } from '../../src/platform/clock';
import { LocalCache } from '../../src/limiter/local-cache';
import { type DecisionAnswer, RateLimitService, type ServiceFlags } from '../../src/limiter/service';
import { Code, type Descriptor, ServiceError, Unit } from '../../src/core/rls';
import { Caller, StoreError } from '../../src/core/store';
import type { CounterStore } from '../../src/core/store';
import { StatsStore } from '../../src/stats/store';

const YAML = `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: small
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: free
    rate_limit: {unlimited: true}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: quota_a
    quota_mode: true
    metadata: {backend: a, nested: {x: 1, w: first}}
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: quota_b
    quota_mode: true
    metadata: {backend: b, nested: {w: second, z: 3}}
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: broad
    rate_limit: {name: broad, unit: hour, requests_per_unit: 100}
  - key: narrow
    rate_limit:
      unit: minute
      requests_per_unit: 5
      replaces: [{name: broad}]
  - key: unlimited_replacer
    rate_limit:
      unlimited: true
      replaces: [{name: broad}]
`;

const FLAGS: ServiceFlags = {
  shadowMode: false,
  quotaMode: false,
  responseDynamicMetadata: false,
  responseHeadersEnabled: false,
  limitHeader: 'RateLimit-Limit',
  remainingHeader: 'RateLimit-Remaining',
  resetHeader: 'RateLimit-Reset',
};

function setup(
  flags: Partial<ServiceFlags> = {},
  opts: { localCache?: boolean; store?: CounterStore; failureMode?: 'error' | 'allow' | 'deny' } = {},
) {
  const stats = new StatsStore();
  const clock = new ManualClock();
  clock.set(2222 * 1000);
  const config = loadConfig([{ name: 'test.yaml', content: YAML }], { mergeDomainConfig: false, stats });
  const store = opts.store ?? new MemoryStore({ maxKeys: 1000 });
  const snapshot = { config, flags: { ...FLAGS, ...flags } };
  const service = new RateLimitService({
    store,
    snapshot: () => snapshot,
    stats,
    clock,
    nearLimitRatio: 0.8,
    cacheKeyPrefix: '',
    localCache: opts.localCache ? new LocalCache(0) : undefined,
    failureMode: opts.failureMode,
  });
  const ask = (descriptors: Descriptor[], hitsAddend = 0) => service.shouldRateLimit({ domain: 'd', descriptors, hitsAddend });
  return { stats, clock, service, ask };
}

const d = (key: string, value: string, extra: Partial<Descriptor> = {}): Descriptor => ({ entries: [{ key, value }], ...extra });
const counter = (stats: StatsStore, name: string) => stats.counter(name).value;

describe('RateLimitService', () => {
  test('errors in upstream order, counted as service_error', async () => {
    const { service, stats } = setup();
    await expect(service.shouldRateLimit({ domain: '', descriptors: [], hitsAddend: 0 })).rejects.toThrow(
      new ServiceError('rate limit domain must not be empty'),
    );
    await expect(service.shouldRateLimit({ domain: 'd', descriptors: [], hitsAddend: 0 })).rejects.toThrow(
      'rate limit descriptor list must not be empty',
    );
    expect(counter(stats, 'ratelimit.service.call.should_rate_limit.service_error')).toBe(2);
  });

  test('decideInto answers in the same turn on the memory store, later on a remote one, and counts a thrown error', async () => {
    const { service, stats } = setup();
    const outcomes: string[] = [];
    const answer: DecisionAnswer<string> = {
      decided: (ctx, response) => outcomes.push(`${ctx} ${response.overallCode}`),
      failed: (ctx, err) => outcomes.push(`${ctx} failed: ${(err as Error).message}`),
    };
    service.decideInto({ domain: 'd', descriptors: [d('k', 'v')], hitsAddend: 0 }, undefined, undefined, '', 'now', answer);
    expect(outcomes).toEqual([`now ${Code.OK}`]);
    service.decideInto({ domain: '', descriptors: [], hitsAddend: 0 }, undefined, undefined, '', 'bad', answer);
    expect(outcomes[1]).toBe('bad failed: rate limit domain must not be empty');
    expect(counter(stats, 'ratelimit.service.call.should_rate_limit.service_error')).toBe(1);

    const remote: CounterStore = {
      kind: 'remote',
      increment: (ops) => Promise.resolve(ops.map(() => 1)),
      isHealthy: () => true,
      close: () => Promise.resolve(),
    };
    const later = new Promise<void>((resolve) =>
      setup({}, { store: remote }).service.decideInto({ domain: 'd', descriptors: [d('k', 'v')], hitsAddend: 0 }, undefined, undefined, '', 'later', {
        decided: (ctx, response) => resolve(void outcomes.push(`${ctx} ${response.overallCode}`)),
        failed: answer.failed,
      }),
    );
    expect(outcomes).toHaveLength(2);
    await later;
    expect(outcomes[2]).toBe(`later ${Code.OK}`);
  });

  test('no config loaded', async () => {
    const stats = new StatsStore();
    const service = new RateLimitService({
      store: new MemoryStore({ maxKeys: 10 }),
      snapshot: () => undefined,
      stats,
      clock: new ManualClock(),
      nearLimitRatio: 0.8,
      cacheKeyPrefix: '',
    });
    await expect(service.shouldRateLimit({ domain: 'd', descriptors: [d('k', 'v')], hitsAddend: 0 })).rejects.toThrow(
      'no rate limit configuration loaded',
    );
  });

  test('store errors are counted as redis_error and rethrown', async () => {
    const failing: CounterStore = {
      kind: 'failing',
      increment: () => Promise.reject(new StoreError('connection refused', true)),
      isHealthy: () => false,
      close: () => Promise.resolve(),
    };
    const { ask, stats } = setup({}, { store: failing });
    await expect(ask([d('k', 'v')])).rejects.toThrow('connection refused');
    expect(counter(stats, 'ratelimit.service.call.should_rate_limit.redis_error')).toBe(1);
    // total_hits is counted before the store is asked, as upstream.
    expect(counter(stats, 'ratelimit.service.rate_limit.d.k.total_hits')).toBe(1);
  });

  test('BACKEND_FAILURE_MODE allow and deny answer instead of failing, and count it', async () => {
    const failing: CounterStore = {
      kind: 'failing',
      increment: () => Promise.reject(new StoreError('connection refused', true)),
      isHealthy: () => false,
      close: () => Promise.resolve(),
    };
    const allow = setup({}, { store: failing, failureMode: 'allow' });
    const a = await allow.ask([d('k', 'v'), d('nothing', 'x')]);
    expect(a.overallCode).toBe(Code.OK);
    expect(a.statuses.map((s) => s.code)).toEqual([Code.OK, Code.OK]);
    expect(counter(allow.stats, 'ratelimit.service.call.should_rate_limit.failure_mode_allow')).toBe(1);
    expect(counter(allow.stats, 'ratelimit.service.call.should_rate_limit.redis_error')).toBe(1);

    const deny = setup({}, { store: failing, failureMode: 'deny' });
    const r = await deny.ask([d('k', 'v'), d('nothing', 'x'), d('shadow', 's')]);
    expect(r.overallCode).toBe(Code.OVER_LIMIT);
    expect(r.statuses[0]).toEqual({
      code: Code.OVER_LIMIT,
      currentLimit: { name: '', requestsPerUnit: 10, unit: Unit.MINUTE },
      limitRemaining: 0,
      durationUntilReset: 58,
    });
    expect(r.statuses[1]!.code).toBe(Code.OK);
    expect(r.statuses[2]!.code).toBe(Code.OK);
    expect(counter(deny.stats, 'ratelimit.service.call.should_rate_limit.failure_mode_deny')).toBe(1);

    const error = setup({}, { store: failing, failureMode: 'error' });
    await expect(error.ask([d('k', 'v')])).rejects.toBeInstanceOf(StoreError);
  });

  test.each([
    ['unset', undefined],
    ['allow', 'allow' as const],
    ['deny', 'deny' as const],
    ['error', 'error' as const],
  ])(
    'a full memory store (BACKEND_FAILURE_MODE %s) counts a new key in its overflow: a watched newcomer gets exactly its limit, the live counters go on',
    async (_, failureMode) => {
      const { ask, stats } = setup({}, { store: new MemoryStore({ maxKeys: 3 }), failureMode });
      for (let i = 0; i < 4; i++) await ask([d('k', 'victim')]);
      // A spray of distinct values fills the other two places, then goes on past them.
      for (let i = 0; i < 200; i++) expect((await ask([d('k', `spray${i}`)])).statuses[0]!.limitRemaining).toBe(9);
      // The watched newcomer (2 a minute): neither let through for ever nor refused from the start.
      const watched = [];
      for (let i = 0; i < 4; i++) watched.push(await ask([d('small', 'newcomer')]));
      expect(watched.map((r) => r.overallCode)).toEqual([Code.OK, Code.OK, Code.OVER_LIMIT, Code.OVER_LIMIT]);
      expect(watched.map((r) => r.statuses[0]!.limitRemaining)).toEqual([1, 0, 0, 0]);
      expect(counter(stats, 'ratelimit.service.call.should_rate_limit.failure_mode_allow')).toBe(0);
      expect(counter(stats, 'ratelimit.service.call.should_rate_limit.failure_mode_deny')).toBe(0);
      expect(counter(stats, 'ratelimit.service.call.should_rate_limit.redis_error')).toBe(0);
      // The victim's counter was never dropped: 4 hits before, the fifth now.
      expect((await ask([d('k', 'victim')])).statuses[0]!.limitRemaining).toBe(5);
    },
  );

  test('the caller reaches the store: one caller past MEMORY_CALLER_NEW_KEYS_PER_SECOND counts its new keys in the overflow, others and in-process calls are not bound', async () => {
    const overCallerBudget = new StatsStore().counter('over');
    const store = new MemoryStore({ maxKeys: 100, callerNewKeysPerSecond: 3, overCallerBudget });
    const { service } = setup({}, { store });
    const sprayer = new Caller('192.0.2.1');
    const other = new Caller('192.0.2.2');
    const ask = (value: string, caller?: Caller) => service.shouldRateLimit({ domain: 'd', descriptors: [d('small', value)], hitsAddend: 0 }, undefined, caller);
    for (let i = 0; i < 5; i++) await ask(`s${i}`, sprayer);
    expect(store.size).toBe(3);
    expect(overCallerBudget.value).toBe(2);
    // Counted all the same: s3's second hit is its last within the limit, the third is over.
    expect((await ask('s3', sprayer)).statuses[0]!.limitRemaining).toBe(0);
    expect((await ask('s3', sprayer)).overallCode).toBe(Code.OVER_LIMIT);
    await ask('o1', other);
    await ask('n1');
    await ask('n2');
    await ask('n3');
    await ask('n4');
    expect(store.size).toBe(8);
    expect(overCallerBudget.value).toBe(4);
  });

  test('counts, remaining and reset from the injected clock', async () => {
    const { ask } = setup();
    const r1 = await ask([d('k', 'v')]);
    expect(r1.overallCode).toBe(Code.OK);
    expect(r1.statuses[0]).toEqual({
      code: Code.OK,
      currentLimit: { name: '', requestsPerUnit: 10, unit: Unit.MINUTE },
      limitRemaining: 9,
      durationUntilReset: 58,
    });
    const r2 = await ask([d('k', 'v')], 4);
    expect(r2.statuses[0]!.limitRemaining).toBe(5);
  });

  test('hits_addend: per-descriptor value wins, 0 only checks, request 0 means 1', async () => {
    const { ask, stats } = setup();
    const r = await ask([d('k', 'a', { hitsAddend: 0 }), d('k', 'b', { hitsAddend: 3 }), d('k', 'c')], 2);
    expect(r.statuses.map((s) => s.limitRemaining)).toEqual([10, 7, 8]);
    expect(counter(stats, 'ratelimit.service.rate_limit.d.k.total_hits')).toBe(5);
  });

  test('the same key twice in one request is incremented twice', async () => {
    const { ask } = setup();
    const r = await ask([d('small', 'x'), d('small', 'x'), d('small', 'x')]);
    expect(r.statuses.map((s) => s.code)).toEqual([Code.OK, Code.OK, Code.OVER_LIMIT]);
    expect(r.overallCode).toBe(Code.OVER_LIMIT);
  });

  test('unlimited: OK with remaining 4294967295, no stats, no counting', async () => {
    const { ask, stats } = setup();
    const r = await ask([d('free', 'x')]);
    expect(r.statuses[0]).toEqual({ code: Code.OK, currentLimit: undefined, limitRemaining: 4294967295, durationUntilReset: undefined });
    expect(counter(stats, 'ratelimit.service.rate_limit.d.free.total_hits')).toBe(0);
  });

  test('replaces: the replaced rule is neither counted nor reported; unlimited rules replace too', async () => {
    const { ask, stats } = setup();
    const r = await ask([d('broad', 'x'), d('narrow', 'x')]);
    expect(r.statuses[0]).toEqual({ code: Code.OK, currentLimit: undefined, limitRemaining: 0, durationUntilReset: undefined });
    expect(r.statuses[1]!.limitRemaining).toBe(4);
    expect(counter(stats, 'ratelimit.service.rate_limit.d.broad.total_hits')).toBe(0);
    const u = await ask([d('broad', 'x'), d('unlimited_replacer', 'x')]);
    expect(u.statuses[0]!.currentLimit).toBeUndefined();
    const alone = await ask([d('broad', 'x')]);
    expect(alone.statuses[0]!.limitRemaining).toBe(99);
  });

  test('rule shadow mode: OK with remaining 0, shadow_mode counted', async () => {
    const { ask, stats } = setup();
    await ask([d('shadow', 'x')]);
    const r = await ask([d('shadow', 'x')]);
    expect(r.overallCode).toBe(Code.OK);
    expect(r.statuses[0]).toMatchObject({ code: Code.OK, limitRemaining: 0 });
    expect(counter(stats, 'ratelimit.service.rate_limit.d.shadow.shadow_mode')).toBe(1);
  });

  test('global shadow mode flips only the overall code, once per response', async () => {
    const { ask, stats } = setup({ shadowMode: true, responseHeadersEnabled: true });
    await ask([d('small', 'g'), d('small', 'g')]);
    const r = await ask([d('small', 'g')]);
    expect(r.overallCode).toBe(Code.OK);
    expect(r.statuses[0]!.code).toBe(Code.OVER_LIMIT);
    expect(r.responseHeadersToAdd.map((h) => h.value)).toEqual(['2', '0', '58']);
    expect(counter(stats, 'ratelimit.service.global_shadow_mode')).toBe(1);
  });

  test('quota mode: over only when every quota descriptor is over or a normal one is', async () => {
    const { ask } = setup();
    await ask([d('quota_a', 'x')]);
    const oneOver = await ask([d('quota_a', 'x'), d('quota_b', 'x')]);
    expect(oneOver.overallCode).toBe(Code.OK);
    expect(oneOver.statuses[0]!.code).toBe(Code.OVER_LIMIT);
    const allOver = await ask([d('quota_a', 'x'), d('quota_b', 'x')]);
    expect(allOver.overallCode).toBe(Code.OVER_LIMIT);
  });

  test('global quota mode makes unmatched descriptors pass as quota', async () => {
    const { ask } = setup({ quotaMode: true });
    await ask([d('small', 'q'), d('small', 'q')]);
    const r = await ask([d('small', 'q'), d('nothing', 'x')]);
    expect(r.overallCode).toBe(Code.OK);
    const only = await ask([d('small', 'q')]);
    expect(only.overallCode).toBe(Code.OVER_LIMIT);
  });

  test('response headers describe the smallest remaining, or the last over-limit status', async () => {
    const { ask } = setup({ responseHeadersEnabled: true, limitHeader: 'X-L', remainingHeader: 'X-R', resetHeader: 'X-T' });
    const r = await ask([d('k', 'h'), d('small', 'h')]);
    expect(r.responseHeadersToAdd).toEqual([
      { key: 'X-L', value: '2' },
      { key: 'X-R', value: '1' },
      { key: 'X-T', value: '58' },
    ]);
    const none = await ask([d('nothing', 'x')]);
    expect(none.responseHeadersToAdd).toEqual([]);
    const off = setup();
    expect((await off.ask([d('k', 'h')])).responseHeadersToAdd).toEqual([]);
  });

  test('dynamic metadata: request echo and first-wins merge of passed descriptors', async () => {
    const { ask } = setup({ responseDynamicMetadata: true });
    const r = await ask([d('quota_a', 'm'), d('quota_b', 'm', { hitsAddend: 1 }), d('k', 'v', { limit: { requestsPerUnit: 3, unit: Unit.SECOND } })], 1);
    expect(r.dynamicMetadata).toEqual({
      domain: 'd',
      descriptors: [
        { entries: ['quota_a=m'] },
        { entries: ['quota_b=m'], hitsAddend: 1 },
        { entries: ['k=v'], limit: 'requests_per_unit:3 unit:SECOND' },
      ],
      hitsAddend: 1,
      metadata: { backend: 'a', nested: { x: 1, w: 'first', z: 3 } },
    });
    // Over-limit descriptors contribute no metadata.
    const over = await ask([d('quota_a', 'm'), d('quota_b', 'm')]);
    expect(over.dynamicMetadata!['metadata']).toBeUndefined();
    expect(over.dynamicMetadata!['hitsAddend']).toBeUndefined();
    const off = setup();
    expect((await off.ask([d('k', 'v')])).dynamicMetadata).toBeUndefined();
  });

  test('limit overrides count under their own stats key; an invalid unit is an error answer', async () => {
    const { ask, stats } = setup();
    const r = await ask([d('k', 'o', { limit: { requestsPerUnit: 1, unit: Unit.HOUR } })]);
    expect(r.statuses[0]!.currentLimit).toEqual({ name: '', requestsPerUnit: 1, unit: Unit.HOUR });
    expect(counter(stats, 'ratelimit.service.rate_limit.d.k_o.total_hits')).toBe(1);
    await expect(ask([d('k', 'o', { limit: { requestsPerUnit: 1, unit: 0 } })])).rejects.toBeInstanceOf(ServiceError);
    await expect(ask([d('k', 'o', { limit: { requestsPerUnit: 1, unit: 42 } })])).rejects.toThrow(/invalid rate limit unit/);
  });

  test('local cache: over-limit keys skip the store until their window ends', async () => {
    const calls: number[] = [];
    const mem = new MemoryStore({ maxKeys: 100 });
    const counting: CounterStore = {
      kind: 'counting',
      increment: (ops, now) => {
        calls.push(ops.length);
        return mem.increment(ops, now);
      },
      isHealthy: () => true,
      close: () => Promise.resolve(),
    };
    const { ask, stats, clock } = setup({}, { localCache: true, store: counting });
    for (let i = 0; i < 5; i++) await ask([d('small', 'lc')]);
    expect(calls).toEqual([1, 1, 1]);
    expect(counter(stats, 'ratelimit.service.rate_limit.d.small.over_limit')).toBe(3);
    expect(counter(stats, 'ratelimit.service.rate_limit.d.small.over_limit_with_local_cache')).toBe(2);
    clock.set((2222 + 60) * 1000);
    const next = await ask([d('small', 'lc')]);
    expect(next.overallCode).toBe(Code.OK);
    expect(calls).toHaveLength(4);
  });

  test('unknown domain: OK and domain_not_found', async () => {
    const { service, stats } = setup();
    const r = await service.shouldRateLimit({ domain: 'other', descriptors: [d('k', 'v')], hitsAddend: 0 });
    expect(r.overallCode).toBe(Code.OK);
    expect(counter(stats, 'ratelimit.service.rate_limit.other.domain_not_found')).toBe(1);
  });

  test('unknown domain: domain_not_found once per descriptor, under the sanitized name', async () => {
    const { service, stats } = setup();
    await service.shouldRateLimit({ domain: 'no:such', descriptors: [d('k', 'v'), d('k', 'w')], hitsAddend: 0 });
    expect(counter(stats, 'ratelimit.service.rate_limit.no_such.domain_not_found')).toBe(2);
    await service.shouldRateLimit({ domain: 'nope', descriptors: [{ entries: [{ key: 'k', value: 'v' }], limit: { requestsPerUnit: 3, unit: 2 } }], hitsAddend: 0 });
    expect(counter(stats, 'ratelimit.service.rate_limit.nope.domain_not_found')).toBe(1);
  });
});
