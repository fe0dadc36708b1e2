import { BACKTEST_OPTIONS, CANDLES_OPTIONS, REPLAY_OPTIONS, RUN_OPTIONS, UsageError, flag, isSet, list, num, parseCommandArgs, parseParams, safetyOf, wantsHelp } from '../../../src/trading/runner/args';

describe('strategy-mode command lines', () => {
  test('values, repeated flags, booleans and positionals', () => {
    const p = parseCommandArgs(['s.js', '--candles', 'a.json', '--candles=b.csv', '--balance', '500', '--quiet', '--param', 'fast=5', '--param', 'label=x', '--param', 'on=true'], BACKTEST_OPTIONS);
    expect(p.positional).toEqual(['s.js']);
    expect(list(p, 'candles')).toEqual(['a.json', 'b.csv']);
    expect(num(p, 'balance')).toBe(500);
    expect(isSet(p, 'quiet')).toBe(true);
    expect(parseParams(p)).toEqual({ fast: 5, label: 'x', on: true });
    expect(flag(p, 'report')).toBeUndefined();
    expect(wantsHelp(p)).toBe(false);
  });

  test('the last of a repeated single-value flag wins', () => {
    expect(flag(parseCommandArgs(['--report', 'a', '--report', 'b'], BACKTEST_OPTIONS), 'report')).toBe('b');
  });

  test('-h and --help on every command', () => {
    for (const spec of [BACKTEST_OPTIONS, RUN_OPTIONS, REPLAY_OPTIONS, CANDLES_OPTIONS]) {
      expect(wantsHelp(parseCommandArgs(['-h'], spec))).toBe(true);
      expect(wantsHelp(parseCommandArgs(['--help'], spec))).toBe(true);
    }
  });

  test('an unknown flag, a missing value or a bad number is a usage error naming the flag', () => {
    expect(() => parseCommandArgs(['--candels', 'x'], BACKTEST_OPTIONS)).toThrow(UsageError);
    expect(() => parseCommandArgs(['--candels', 'x'], BACKTEST_OPTIONS)).toThrow(/--candels/);
    expect(() => parseCommandArgs(['--journal'], RUN_OPTIONS)).toThrow(/--journal/);
    expect(() => parseCommandArgs(['--quiet=yes'], RUN_OPTIONS)).toThrow(UsageError);
    // a flag of another command is unknown here
    expect(() => parseCommandArgs(['--candles', 'a'], RUN_OPTIONS)).toThrow(/--candles/);
    expect(() => num(parseCommandArgs(['--balance', 'lots'], BACKTEST_OPTIONS), 'balance')).toThrow('--balance must be a number, got "lots"');
    expect(() => num(parseCommandArgs(['--balance='], BACKTEST_OPTIONS), 'balance')).toThrow(/--balance must be a number/);
    expect(() => parseParams(parseCommandArgs(['--param', 'novalue'], RUN_OPTIONS))).toThrow('--param needs KEY=VALUE, got "novalue"');
  });

  test('safety limits', () => {
    expect(safetyOf(parseCommandArgs(['--max-position', '3', '--max-daily-loss', '200', '--min-usable-margin-pct', '25'], RUN_OPTIONS))).toEqual({ maxPosition: 3, maxDailyLoss: 200, minUsableMarginPct: 25 });
  });
});
