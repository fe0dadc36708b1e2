/**
 * Rate limiting algorithms and several limits per descriptor (extension) on the memory store:
 * semantics of each algorithm's status fields, and the precision of each algorithm under steady
 * and bursty arrivals compared with its documented bound.
 */
import { MemoryStore } from '../../src/backends/memory';
import { gcra, slidingCount } from '../../src/core/algorithms';
import { mostRestrictive } from '../../src/limiter/algorithms';
import { Code } from '../../src/core/rls';
import { BOUND, L, burstAfterIdle, bursty, drive, maxInWindow, setup, steady } from './algorithm-cases';

const START = 1_700_000_000_000; // a window edge for every unit up to the minute

describe('algorithms (memory store)', () => {
  test.each(Object.keys(BOUND))('%s: max admitted per unit window, steady and bursty', async (key) => {
    const s = setup(new MemoryStore({ maxKeys: 10_000 }));
    const st = maxInWindow(await drive(s, key, 'steady', steady(START)), 1000);
    const bu = maxInWindow(await drive(s, key, 'bursty', bursty(START + 60_000)), 1000);
    expect(st).toBeLessThanOrEqual(BOUND[key]!.steady);
    expect(bu).toBeLessThanOrEqual(BOUND[key]!.bursty);
    if (key === 'fixed') expect(bu).toBe(2 * L); // the fixed window's known double admission
    if (key === 'sliding' || key === 'smooth') expect(st).toBeLessThanOrEqual(L + 1);
    // Every algorithm admits its full sustained rate.
    expect(st).toBeGreaterThanOrEqual(L);
  });

  test.each([
    ['bucket', L],
    ['smooth', 1],
  ] as const)('token bucket %s: after sitting idle, a burst admits exactly its burst (%i)', async (key, burst) => {
    const s = setup(new MemoryStore({ maxKeys: 100 }));
    for (const idleMs of [1500, 30_000, 3_600_000]) expect(await burstAfterIdle(s, key, `idle-${idleMs}`, START, idleMs)).toBe(burst);
  });

  test('GCRA: a stored arrival time in the past counts as a full bucket, never as credit', () => {
    const now = START;
    const fresh = gcra(undefined, 1, now, 100, L);
    for (const idle of [1, 100, 30_000, 86_400_000]) {
      expect(gcra(now - idle, 1, now, 100, L)).toEqual(fresh);
      // n hits at once are admitted only up to the burst, however long the key sat idle.
      expect(gcra(now - idle, L, now, 100, L).admitted).toBe(true);
      expect(gcra(now - idle, L + 1, now, 100, L)).toMatchObject({ admitted: false, count: L + 1 });
    }
  });

  test('sliding window: previous window weighted by the remaining fraction', async () => {
    const s = setup(new MemoryStore({ maxKeys: 100 }));
    s.clock.set(1000 * 1000);
    for (let i = 0; i < 10; i++) expect((await s.ask('sliding')).overallCode).toBe(Code.OK);
    const over = await s.ask('sliding');
    expect(over.overallCode).toBe(Code.OVER_LIMIT);
    expect(over.statuses[0]).toMatchObject({ limitRemaining: 0, durationUntilReset: 2 });
    // 300 ms into the next window: 10·0.7 = 7 → 3 more admitted.
    s.clock.set(1001.3 * 1000);
    const r = await s.ask('sliding');
    expect(r.statuses[0]).toMatchObject({ code: Code.OK, limitRemaining: 2, durationUntilReset: 2 });
    expect(r.responseHeadersToAdd).toEqual([
      { key: 'X-RateLimit-Limit', value: '10' },
      { key: 'X-RateLimit-Remaining', value: '2' },
      { key: 'X-RateLimit-Reset', value: '2' },
    ]);
    expect((await s.ask('sliding')).overallCode).toBe(Code.OK);
    expect((await s.ask('sliding')).overallCode).toBe(Code.OK);
    expect((await s.ask('sliding')).overallCode).toBe(Code.OVER_LIMIT);
    // Denied requests are not counted: two windows later everything is back.
    s.clock.set(1003 * 1000);
    expect((await s.ask('sliding')).statuses[0]).toMatchObject({ code: Code.OK, limitRemaining: 9 });
  });

  test('token bucket: burst, then the sustained rate; remaining and reset', async () => {
    const s = setup(new MemoryStore({ maxKeys: 100 }));
    s.clock.set(5000 * 1000);
    const first = await s.ask('bucket');
    expect(first.statuses[0]).toMatchObject({ code: Code.OK, limitRemaining: 9, durationUntilReset: 1 });
    for (let i = 0; i < 9; i++) expect((await s.ask('bucket')).overallCode).toBe(Code.OK);
    const denied = await s.ask('bucket');
    expect(denied.statuses[0]).toMatchObject({ code: Code.OVER_LIMIT, limitRemaining: 0, durationUntilReset: 1 });
    s.clock.advance(100); // one emission interval: one token back
    expect((await s.ask('bucket')).overallCode).toBe(Code.OK);
    expect((await s.ask('bucket')).overallCode).toBe(Code.OVER_LIMIT);
    // burst 1: one request per 100 ms, whatever the burst of arrivals
    s.clock.set(6000 * 1000);
    expect((await s.ask('smooth')).overallCode).toBe(Code.OK);
    expect((await s.ask('smooth')).overallCode).toBe(Code.OVER_LIMIT);
    s.clock.advance(99);
    expect((await s.ask('smooth')).overallCode).toBe(Code.OVER_LIMIT);
    s.clock.advance(1);
    expect((await s.ask('smooth')).overallCode).toBe(Code.OK);
  });

  test('hits_addend counts as that many requests for every algorithm', async () => {
    const s = setup(new MemoryStore({ maxKeys: 100 }));
    s.clock.set(7000 * 1000);
    expect((await s.ask('sliding', 'h', 10)).overallCode).toBe(Code.OK);
    expect((await s.ask('sliding', 'h', 1)).overallCode).toBe(Code.OVER_LIMIT);
    expect((await s.ask('bucket', 'h', 11)).overallCode).toBe(Code.OVER_LIMIT);
    expect((await s.ask('bucket', 'h', 10)).statuses[0]).toMatchObject({ code: Code.OK, limitRemaining: 0 });
  });

  test('several limits: each counted, the most restrictive reported, stats per limit', async () => {
    const s = setup(new MemoryStore({ maxKeys: 100 }));
    s.clock.set(9000 * 1000);
    const r1 = await s.ask('multi');
    // 5/s fixed → 4 left; 8/min sliding → 7 left; token bucket burst 3 → 2 left (most restrictive)
    expect(r1.statuses[0]).toMatchObject({ code: Code.OK, limitRemaining: 2, currentLimit: { requestsPerUnit: 20, unit: 4 - 1 } });
    await s.ask('multi');
    await s.ask('multi');
    const r4 = await s.ask('multi');
    expect(r4.overallCode).toBe(Code.OVER_LIMIT);
    expect(s.stats.counter('ratelimit.service.rate_limit.algo.multi.total_hits').value).toBe(4);
    expect(s.stats.counter('ratelimit.service.rate_limit.algo.multi.limit_2.total_hits').value).toBe(4);
    expect(s.stats.counter('ratelimit.service.rate_limit.algo.multi.limit_3.over_limit').value).toBe(1);
    expect(s.stats.counter('ratelimit.service.rate_limit.algo.multi.within_limit').value).toBe(4);
  });

  test('pure functions', () => {
    expect(slidingCount(3, 10, 1, 1_500, 1)).toBe(9); // 3 + 1 + 10·0.5
    const a = gcra(undefined, 1, 0, 100, 2);
    expect(a).toEqual({ admitted: true, tat: 100, count: 1 });
    const b = gcra(a.tat, 1, 0, 100, 2);
    expect(b).toEqual({ admitted: true, tat: 200, count: 2 });
    expect(gcra(b.tat, 1, 0, 100, 2).admitted).toBe(false);
    expect(mostRestrictive([{ code: Code.OK, currentLimit: undefined, limitRemaining: 0, durationUntilReset: undefined }]).code).toBe(Code.OK);
  });
});
