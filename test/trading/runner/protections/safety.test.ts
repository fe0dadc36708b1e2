import { SafetyError } from '../../../../src/trading/runner/errors';
import { SafetyGuard } from '../../../../src/trading/runner/protections/safety';

const T0 = Date.UTC(2024, 2, 5, 9, 30); // a Tuesday morning, UTC
const MIDNIGHT = Date.UTC(2024, 2, 6); // the next UTC day starts here
const HALTED_MSG = 'daily loss limit reached: no new positions until the next UTC day';

/** What checkOpen throws, or undefined when it lets the order through. */
function refusal(f: () => void): { name: string; rule: string; message: string } | undefined {
  try {
    f();
    return undefined;
  } catch (e) {
    expect(e).toBeInstanceOf(SafetyError);
    const s = e as SafetyError;
    return { name: s.name, rule: s.rule, message: s.message };
  }
}

describe('SafetyGuard', () => {
  test('without limits every order passes and the daily loss never triggers', () => {
    const g = new SafetyGuard({});
    const big = [{ isBuy: true, amount: 1_000_000 }];
    expect(refusal(() => g.checkOpen('EUR/USD', true, 1_000_000, big, T0, 1000, 0))).toBeUndefined();
    expect(g.checkDailyLoss(T0, 1000)).toBe(false);
    expect(g.checkDailyLoss(T0, -1_000_000)).toBe(false);
    expect(g.isHalted(T0)).toBe(false);
  });

  describe('maxPosition (K units per symbol and side)', () => {
    const g = new SafetyGuard({ maxPosition: 30 });

    test('up to the limit is allowed, past it is refused with a message naming the amounts', () => {
      expect(refusal(() => g.checkOpen('EUR/USD', true, 30, [], T0, 1000))).toBeUndefined();
      expect(refusal(() => g.checkOpen('EUR/USD', true, 40, [], T0, 1000))).toEqual({
        name: 'SafetyError',
        rule: 'maxPosition',
        message: 'EUR/USD: 0K + 40K would exceed the maximum position of 30K',
      });
    });

    test('the open trades of the same side are summed', () => {
      const open = [
        { isBuy: true, amount: 10 },
        { isBuy: true, amount: 10 },
      ];
      expect(refusal(() => g.checkOpen('USD/JPY', true, 10, open, T0, 1000))).toBeUndefined();
      expect(refusal(() => g.checkOpen('USD/JPY', true, 20, open, T0, 1000))).toEqual({
        name: 'SafetyError',
        rule: 'maxPosition',
        message: 'USD/JPY: 20K + 20K would exceed the maximum position of 30K',
      });
    });

    test('the other side does not count', () => {
      const longs = [{ isBuy: true, amount: 30 }];
      expect(refusal(() => g.checkOpen('EUR/USD', false, 30, longs, T0, 1000))).toBeUndefined();
      expect(refusal(() => g.checkOpen('EUR/USD', true, 10, longs, T0, 1000))).toMatchObject({ rule: 'maxPosition', message: 'EUR/USD: 30K + 10K would exceed the maximum position of 30K' });
      const shorts = [
        { isBuy: false, amount: 20 },
        { isBuy: true, amount: 20 },
      ];
      expect(refusal(() => g.checkOpen('EUR/USD', false, 20, shorts, T0, 1000))).toMatchObject({ rule: 'maxPosition', message: 'EUR/USD: 20K + 20K would exceed the maximum position of 30K' });
    });
  });

  describe('maxDailyLoss (per UTC day)', () => {
    test('the day starts at its first check; reaching -max triggers once and halts new positions', () => {
      const g = new SafetyGuard({ maxDailyLoss: 100 });
      expect(g.checkDailyLoss(T0, 5000)).toBe(false); // the day's baseline
      expect(g.dayPL(T0 + 60_000, 4950)).toBe(-50);
      expect(g.checkDailyLoss(T0 + 60_000, 4901)).toBe(false); // -99
      expect(g.isHalted(T0 + 60_000)).toBe(false);
      expect(g.checkDailyLoss(T0 + 120_000, 4900)).toBe(true); // exactly -100
      expect(g.isHalted(T0 + 120_000)).toBe(true);
      // the caller flattens once: later checks of the same day do not trigger again
      expect(g.checkDailyLoss(T0 + 180_000, 4800)).toBe(false);
      expect(g.isHalted(T0 + 180_000)).toBe(true);
      // and equity coming back the same day does not lift the halt
      expect(g.checkDailyLoss(T0 + 240_000, 6000)).toBe(false);
      expect(g.isHalted(T0 + 240_000)).toBe(true);
    });

    test('a halted day refuses new positions, before any other rule', () => {
      const g = new SafetyGuard({ maxDailyLoss: 100, maxPosition: 10, minUsableMarginPct: 50 });
      g.checkDailyLoss(T0, 1000);
      expect(g.checkDailyLoss(T0 + 1000, 850)).toBe(true);
      expect(refusal(() => g.checkOpen('EUR/USD', true, 10, [], T0 + 2000, 850, 850))).toEqual({ name: 'SafetyError', rule: 'maxDailyLoss', message: HALTED_MSG });
      expect(refusal(() => g.checkOpen('EUR/USD', false, 1000, [], T0 + 2000, 850, 0))).toMatchObject({ rule: 'maxDailyLoss' });
    });

    test('the halt ends at 00:00:00.000 UTC, not a millisecond before', () => {
      const g = new SafetyGuard({ maxDailyLoss: 100 });
      g.checkDailyLoss(T0, 1000);
      expect(g.checkDailyLoss(T0, 800)).toBe(true);
      expect(g.isHalted(MIDNIGHT - 1)).toBe(true);
      expect(refusal(() => g.checkOpen('EUR/USD', true, 10, [], MIDNIGHT - 1, 800))).toMatchObject({ rule: 'maxDailyLoss' });
      expect(g.isHalted(MIDNIGHT)).toBe(false);
      expect(refusal(() => g.checkOpen('EUR/USD', true, 10, [], MIDNIGHT, 800))).toBeUndefined();
    });

    test('a new UTC day takes its own baseline: the previous day\'s loss does not carry over', () => {
      const g = new SafetyGuard({ maxDailyLoss: 100 });
      expect(g.checkDailyLoss(MIDNIGHT - 60_000, 1000)).toBe(false);
      expect(g.dayPL(MIDNIGHT - 1, 920)).toBe(-80);
      // the first check after midnight sets the new baseline (920), so -80 + -50 is not -130
      expect(g.checkDailyLoss(MIDNIGHT, 920)).toBe(false);
      expect(g.dayPL(MIDNIGHT + 1, 870)).toBe(-50);
      expect(g.checkDailyLoss(MIDNIGHT + 2, 870)).toBe(false);
      expect(g.checkDailyLoss(MIDNIGHT + 3, 820)).toBe(true); // -100 from the new day's start
    });

    test('peekDayPL reads the day\'s P/L without starting a new day: the baseline stays for the run\'s own next check', () => {
      const g = new SafetyGuard({ maxDailyLoss: 100 });
      expect(g.checkDailyLoss(MIDNIGHT - 60_000, 1000)).toBe(false);
      expect(g.peekDayPL(MIDNIGHT - 1, 920)).toBe(-80);
      // after midnight it says 0 (a new day) and leaves the counters as they were
      const before = g.counters();
      expect(g.peekDayPL(MIDNIGHT + 1, 900)).toBe(0);
      expect(g.counters()).toEqual(before);
      // so the run's own first check of the day sets the baseline (850), not the peek's 900
      expect(g.checkDailyLoss(MIDNIGHT + 2, 850)).toBe(false);
      expect(g.dayPL(MIDNIGHT + 3, 800)).toBe(-50);
    });

    test('the day boundary is UTC midnight whatever the hour of the first check', () => {
      const g = new SafetyGuard({ maxDailyLoss: 100 });
      const late = Date.UTC(2024, 2, 5, 23, 59, 59, 999);
      expect(g.checkDailyLoss(late, 1000)).toBe(false);
      // one millisecond later is a new day, with a new baseline
      expect(g.dayPL(late + 1, 500)).toBe(0);
      expect(g.checkDailyLoss(late + 2, 500)).toBe(false);
    });

    test('a halt on one day can trigger again on the next', () => {
      const g = new SafetyGuard({ maxDailyLoss: 100 });
      g.checkDailyLoss(T0, 1000);
      expect(g.checkDailyLoss(T0, 900)).toBe(true);
      expect(g.checkDailyLoss(MIDNIGHT, 900)).toBe(false);
      expect(g.checkDailyLoss(MIDNIGHT + 1000, 799)).toBe(true);
      expect(g.isHalted(MIDNIGHT + 1000)).toBe(true);
    });

    test('checkOpen also starts the day: a loss counted from the first order of the day', () => {
      const g = new SafetyGuard({ maxDailyLoss: 100 });
      expect(refusal(() => g.checkOpen('EUR/USD', true, 10, [], T0, 2000))).toBeUndefined();
      expect(g.dayPL(T0 + 1, 1950)).toBe(-50);
      expect(g.checkDailyLoss(T0 + 2, 1900)).toBe(true);
    });
  });

  describe('minUsableMarginPct (the usable margin left after the order)', () => {
    const g = new SafetyGuard({ minUsableMarginPct: 25 });

    test('at the floor is allowed, below it is refused with the share rounded to 0.1%', () => {
      expect(refusal(() => g.checkOpen('EUR/USD', true, 10, [], T0, 1000, 250))).toBeUndefined();
      expect(refusal(() => g.checkOpen('EUR/USD', true, 10, [], T0, 1000, 1000))).toBeUndefined();
      expect(refusal(() => g.checkOpen('EUR/USD', true, 10, [], T0, 1000, 249))).toEqual({ name: 'SafetyError', rule: 'minUsableMarginPct', message: 'usable margin after the order would be 24.9% of equity, below 25%' });
      expect(refusal(() => g.checkOpen('EUR/USD', false, 10, [], T0, 3000, 100))).toEqual({ name: 'SafetyError', rule: 'minUsableMarginPct', message: 'usable margin after the order would be 3.3% of equity, below 25%' });
    });

    test('not checked when the usable margin is unknown or equity is not positive', () => {
      expect(refusal(() => g.checkOpen('EUR/USD', true, 10, [], T0, 1000))).toBeUndefined();
      expect(refusal(() => g.checkOpen('EUR/USD', true, 10, [], T0, 0, 0))).toBeUndefined();
      expect(refusal(() => g.checkOpen('EUR/USD', true, 10, [], T0, -5, 0))).toBeUndefined();
    });

    test('the position limit is checked before the margin floor', () => {
      const both = new SafetyGuard({ maxPosition: 10, minUsableMarginPct: 25 });
      expect(refusal(() => both.checkOpen('EUR/USD', true, 20, [], T0, 1000, 0))).toMatchObject({ rule: 'maxPosition' });
      expect(refusal(() => both.checkOpen('EUR/USD', true, 10, [], T0, 1000, 0))).toMatchObject({ rule: 'minUsableMarginPct', message: 'usable margin after the order would be 0.0% of equity, below 25%' });
    });
  });
});
