/**
 * The memory store's budget of new counters per caller: a second's worth at once, then one every
 * 1/perSecond s; callers apart; slots freed once whole; past the cap of callers, one shared slot.
 */
import { CallerBudgets } from '../../src/backends/caller-budget';

const takes = (b: CallerBudgets, caller: string, n: number, nowMs: number): number => {
  let ok = 0;
  for (let i = 0; i < n; i++) if (b.take(caller, nowMs)) ok++;
  return ok;
};

describe('caller budgets', () => {
  test('a burst of one second\'s worth, then one every 1/perSecond s; each caller on its own', () => {
    const b = new CallerBudgets(100);
    expect(takes(b, '10.0.0.1', 150, 0)).toBe(100);
    expect(takes(b, '10.0.0.2', 150, 0)).toBe(100);
    // 10 ms: one more each.
    expect(takes(b, '10.0.0.1', 5, 10)).toBe(1);
    // A second later the budget is whole again.
    expect(takes(b, '10.0.0.1', 150, 1010)).toBe(100);
  });

  test('over a long run a caller gets perSecond a second, however fast it asks', () => {
    const b = new CallerBudgets(1000);
    let ok = 0;
    for (let ms = 0; ms < 10_000; ms++) ok += takes(b, 'sprayer', 20, ms);
    // 1,000 at once, then 1,000 a second for the 10 s.
    expect(ok).toBeGreaterThanOrEqual(10_990);
    expect(ok).toBeLessThanOrEqual(11_001);
  });

  test('the sweep frees the slots of callers whose budget is whole again', () => {
    const b = new CallerBudgets(10);
    takes(b, 'a', 10, 0);
    takes(b, 'b', 1, 0);
    expect(b.size).toBe(2);
    b.sweep(100); // b (one taken) is whole after 100 ms, a after 1 s
    expect(b.size).toBe(1);
    b.sweep(1000);
    expect(b.size).toBe(0);
    expect(takes(b, 'a', 20, 1000)).toBe(10);
  });

  test('past the most callers held, newcomers share one budget', () => {
    const b = new CallerBudgets(2, 3);
    for (const c of ['a', 'b', 'c']) expect(takes(b, c, 2, 0)).toBe(2);
    expect(takes(b, 'd', 5, 0) + takes(b, 'e', 5, 0)).toBe(2);
  });

  test('a budget must be positive', () => {
    expect(() => new CallerBudgets(0)).toThrow('new keys per caller per second must be > 0, got 0');
  });
});
