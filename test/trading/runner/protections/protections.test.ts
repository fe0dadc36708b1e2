/**
 * The protections on the run's own clock (protections.ts): the stop-loss guard counts stop-outs
 * within its window (per symbol when asked) and locks for its time; the drawdown lock holds for
 * its time and starts its peak again at the unlock; a cooldown locks its symbol only; each lock is
 * told once; a declaration is checked with the reason named.
 */
import { Protections, checkProtectionRules, runProtections } from '../../../../src/trading/runner/protections/protections';
import type { ProtectionLock } from '../../../../src/trading/runner/results';

const MIN = 60_000;
const T = Date.UTC(2026, 10, 16, 9);

const refusal = (p: Protections, symbol: string, at: number): string => {
  try {
    p.check(symbol, at);
    return 'allowed';
  } catch (e) {
    return `${(e as Error).name} ${(e as { rule: string }).rule}`;
  }
};

describe('protections', () => {
  test('the stop-loss guard: 3 stop-outs within 60 min lock every symbol for 30 min; a close by the strategy or a stop outside the window does not count', () => {
    const told: ProtectionLock[] = [];
    const p = new Protections({ stopLossGuard: { stops: 3, withinMin: 60, lockMin: 30 } }, (l) => told.push(l));
    p.closed('EUR/USD', 'stop', T);
    p.closed('EUR/USD', 'close', T + MIN);
    p.closed('USD/JPY', 'trailing', T + 5 * MIN);
    p.closed('EUR/USD', 'stop', T + 61 * MIN); // the first one is out of the window now
    expect(told).toEqual([]);
    expect(refusal(p, 'EUR/USD', T + 61 * MIN)).toBe('allowed');
    p.closed('EUR/USD', 'stop', T + 62 * MIN);
    expect(told).toEqual([{ rule: 'stopLossGuard', from: T + 62 * MIN, until: T + 92 * MIN, reason: '3 stop-outs within 60 min: no new entries for 30 min' }]);
    expect(refusal(p, 'GBP/USD', T + 62 * MIN)).toBe('SafetyError stopLossGuard');
    expect(refusal(p, 'EUR/USD', T + 92 * MIN - 1)).toBe('SafetyError stopLossGuard');
    expect(refusal(p, 'EUR/USD', T + 92 * MIN)).toBe('allowed');
    // the stops that locked are spent: one more is not a new lock
    p.closed('EUR/USD', 'stop', T + 93 * MIN);
    expect(told).toHaveLength(1);
    expect(p.history).toEqual(told);
  });

  test('per symbol: only the symbol stopped out is locked', () => {
    const p = new Protections({ stopLossGuard: { stops: 2, withinMin: 10, lockMin: 5, perSymbol: true } });
    p.closed('EUR/USD', 'stop', T);
    p.closed('USD/JPY', 'stop', T + MIN);
    expect(p.locks(T + MIN)).toEqual([]);
    p.closed('EUR/USD', 'stop', T + 2 * MIN);
    expect([refusal(p, 'EUR/USD', T + 2 * MIN), refusal(p, 'USD/JPY', T + 2 * MIN)]).toEqual(['SafetyError stopLossGuard', 'allowed']);
    expect(p.locks(T + 2 * MIN)).toEqual([expect.objectContaining({ rule: 'stopLossGuard', symbol: 'EUR/USD' })]);
  });

  test('max drawdown: 10 % below the peak locks for 60 min, and the peak starts again at the unlock', () => {
    const told: ProtectionLock[] = [];
    const p = new Protections({ maxDrawdown: { pct: 10, lockMin: 60 } }, (l) => told.push(l));
    p.equity(T, 10_000);
    p.equity(T + MIN, 11_000);
    p.equity(T + 2 * MIN, 9_950); // 9.5 %
    expect(told).toEqual([]);
    p.equity(T + 3 * MIN, 9_900); // 10 %
    expect(told.map((l) => [l.rule, l.until, l.reason])).toEqual([['maxDrawdown', T + 63 * MIN, 'equity 10.0% below its highest point (11000.00): no new entries for 60 min']]);
    p.equity(T + 30 * MIN, 9_000); // locked already: no second lock
    expect(refusal(p, 'EUR/USD', T + 30 * MIN)).toBe('SafetyError maxDrawdown');
    p.equity(T + 63 * MIN, 9_000); // unlocked; the peak is now 9,000
    expect(refusal(p, 'EUR/USD', T + 63 * MIN)).toBe('allowed');
    p.equity(T + 64 * MIN, 8_200);
    expect(told).toHaveLength(1);
    p.equity(T + 65 * MIN, 8_100);
    expect(told).toHaveLength(2);
  });

  test('a cooldown locks the symbol that closed a trade, whatever the reason, and no other', () => {
    const p = new Protections({ cooldown: { minutes: 15 } });
    p.closed('EUR/USD', 'close', T);
    expect([refusal(p, 'EUR/USD', T + 14 * MIN), refusal(p, 'USD/JPY', T + 14 * MIN), refusal(p, 'EUR/USD', T + 15 * MIN)]).toEqual(['SafetyError cooldown', 'allowed', 'allowed']);
  });

  test('a checkpoint keeps the stops, the peak and the locks', () => {
    const rules = { stopLossGuard: { stops: 2, withinMin: 10, lockMin: 5 }, maxDrawdown: { pct: 50, lockMin: 5 } };
    const a = new Protections(rules);
    a.closed('EUR/USD', 'stop', T);
    a.equity(T, 10_000);
    const b = new Protections(rules);
    b.restore(JSON.parse(JSON.stringify(a.saved())));
    b.closed('EUR/USD', 'stop', T + MIN);
    expect(refusal(b, 'EUR/USD', T + MIN)).toBe('SafetyError stopLossGuard');
    b.equity(T + 2 * MIN, 4_000);
    expect(b.locks(T + 2 * MIN).map((l) => l.rule)).toEqual(['stopLossGuard', 'maxDrawdown']);
  });

  test('a declaration is checked, naming what is wrong; the daily loss joins the safety limits', () => {
    expect(checkProtectionRules({ cooldown: { minutes: 5 }, dailyLoss: 200 }, 's.js')).toEqual({ cooldown: { minutes: 5 }, dailyLoss: 200 });
    expect(() => checkProtectionRules({ stoplossGuard: {} }, 's.js')).toThrow('s.js: unknown protection stoplossGuard (there are stopLossGuard, maxDrawdown, cooldown, dailyLoss)');
    expect(() => checkProtectionRules({ stopLossGuard: { stops: 2.5, withinMin: 10, lockMin: 5 } }, 's.js')).toThrow('s.js: stopLossGuard.stops must be a whole number above 0, got 2.5');
    expect(() => checkProtectionRules({ maxDrawdown: { pct: 120, lockMin: 5 } }, 's.js')).toThrow('s.js: maxDrawdown.pct must be below 100, got 120');
    expect(() => checkProtectionRules({ cooldown: { minutes: 5, hours: 1 } }, 's.js')).toThrow('s.js: cooldown has no field hours (it has minutes)');
    expect(() => checkProtectionRules([1], 's.js')).toThrow('s.js: protections must be an object, got [1]');
    expect(runProtections({ dailyLoss: 200 }, undefined, {})).toEqual({ rules: { dailyLoss: 200 }, safety: { maxDailyLoss: 200 } });
    expect(runProtections({ dailyLoss: 200 }, { cooldown: { minutes: 1 } }, { maxDailyLoss: 50 })).toEqual({ rules: { cooldown: { minutes: 1 } }, safety: { maxDailyLoss: 50 } });
  });
});
