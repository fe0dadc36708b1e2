import { UsageError, flag, isSet, list, parseCommandArgs, wantsHelp } from '../../../../src/platform/argv';
import { BACKTEST_OPTIONS, CANDLES_OPTIONS, REPLAY_OPTIONS, RUN_OPTIONS, byteSize, num, parseParams, safetyOf } from '../../../../src/trading/runner/cli/args';

/** A command taking one file, as backtest, paper, live and replay do. */
const ONE_FILE = { positionals: 1, usage: 'Usage: one-file <strategy> [options]\n' };

function usageErrorOf(parse: () => unknown): UsageError {
  try {
    parse();
  } catch (err) {
    expect(err).toBeInstanceOf(UsageError);
    return err as UsageError;
  }
  throw new Error('expected a UsageError');
}

describe('strategy-mode command lines', () => {
  test('values, repeated flags, booleans and positionals', () => {
    const p = parseCommandArgs(['s.js', '--candles', 'a.json', '--candles=b.csv', '--balance', '500', '--quiet', '--param', 'fast=5', '--param', 'label=x', '--param', 'on=true'], BACKTEST_OPTIONS, ONE_FILE);
    expect(p.positional).toEqual(['s.js']);
    expect(list(p, 'candles')).toEqual(['a.json', 'b.csv']);
    expect(num(p, 'balance')).toBe(500);
    expect(isSet(p, 'quiet')).toBe(true);
    expect(parseParams(p)).toEqual({ fast: 5, label: 'x', on: true });
    expect(flag(p, 'report')).toBeUndefined();
    expect(wantsHelp(p)).toBe(false);
  });

  test('the last of a repeated single-value flag wins', () => {
    expect(flag(parseCommandArgs(['--report', 'a', '--report', 'b'], BACKTEST_OPTIONS, ONE_FILE), 'report')).toBe('b');
  });

  test('-h and --help on every command', () => {
    for (const spec of [BACKTEST_OPTIONS, RUN_OPTIONS, REPLAY_OPTIONS, CANDLES_OPTIONS]) {
      expect(wantsHelp(parseCommandArgs(['-h'], spec, ONE_FILE))).toBe(true);
      expect(wantsHelp(parseCommandArgs(['--help'], spec, ONE_FILE))).toBe(true);
    }
  });

  test('an unknown flag, a missing value or a bad number is a usage error naming the flag', () => {
    expect(() => parseCommandArgs(['--candels', 'x'], BACKTEST_OPTIONS, ONE_FILE)).toThrow(UsageError);
    expect(() => parseCommandArgs(['--candels', 'x'], BACKTEST_OPTIONS, ONE_FILE)).toThrow(/--candels/);
    expect(() => parseCommandArgs(['--journal'], RUN_OPTIONS, ONE_FILE)).toThrow(/--journal/);
    expect(() => parseCommandArgs(['--quiet=yes'], RUN_OPTIONS, ONE_FILE)).toThrow(UsageError);
    // a flag of another command is unknown here
    expect(() => parseCommandArgs(['--candles', 'a'], RUN_OPTIONS, ONE_FILE)).toThrow(/--candles/);
    expect(() => num(parseCommandArgs(['--balance', 'lots'], BACKTEST_OPTIONS, ONE_FILE), 'balance')).toThrow('--balance must be a number, got "lots"');
    expect(() => num(parseCommandArgs(['--balance='], BACKTEST_OPTIONS, ONE_FILE), 'balance')).toThrow(/--balance must be a number/);
    expect(() => parseParams(parseCommandArgs(['--param', 'novalue'], RUN_OPTIONS, ONE_FILE))).toThrow('--param needs KEY=VALUE, got "novalue"');
  });

  test('a positional argument beyond those the command takes is a usage error naming it, with the usage', () => {
    for (const argv of [['s.js', 'stray'], ['s.js', '--quiet', 'stray', '--report', 'r']]) {
      const err = usageErrorOf(() => parseCommandArgs(argv, BACKTEST_OPTIONS, ONE_FILE));
      expect(err).toMatchObject({ message: 'unexpected argument: stray', usage: ONE_FILE.usage });
    }
    expect(() => parseCommandArgs(['a.json'], CANDLES_OPTIONS, { positionals: 0, usage: '' })).toThrow('unexpected argument: a.json');
    expect(parseCommandArgs(['a.json', 'b.csv'], CANDLES_OPTIONS, { positionals: Infinity, usage: '' }).positional).toEqual(['a.json', 'b.csv']);
    // help wins: the usage is what was asked for
    expect(wantsHelp(parseCommandArgs(['s.js', 'stray', '--help'], BACKTEST_OPTIONS, ONE_FILE))).toBe(true);
  });

  test('an unknown option carries the usage too', () => {
    expect(usageErrorOf(() => parseCommandArgs(['--candels', 'x'], BACKTEST_OPTIONS, ONE_FILE)).usage).toBe(ONE_FILE.usage);
  });

  test('--journal-max-bytes: bytes, or with a binary unit; anything else is a usage error naming the flag', () => {
    const size = (v: string) => byteSize(parseCommandArgs([`--journal-max-bytes=${v}`], RUN_OPTIONS, ONE_FILE), 'journal-max-bytes');
    expect(byteSize(parseCommandArgs([], RUN_OPTIONS, ONE_FILE), 'journal-max-bytes')).toBeUndefined();
    expect([size('8388608'), size('512K'), size('8M'), size('8m'), size('8MiB'), size('8 MB'), size('1G')]).toEqual([8388608, 512 * 1024, 8 * 1024 ** 2, 8 * 1024 ** 2, 8 * 1024 ** 2, 8 * 1024 ** 2, 1024 ** 3]);
    for (const bad of ['0', '-1', '1.5M', 'lots', '8T', '', '99999999999999999G']) {
      expect(() => size(bad)).toThrow(`--journal-max-bytes must be a size in bytes above 0, such as 8388608 or 8M, got "${bad}"`);
    }
  });

  test('safety limits', () => {
    expect(safetyOf(parseCommandArgs(['--max-position', '3', '--max-daily-loss', '200', '--min-usable-margin-pct', '25'], RUN_OPTIONS, ONE_FILE))).toEqual({ maxPosition: 3, maxDailyLoss: 200, minUsableMarginPct: 25 });
  });
});
