/**
 * Command lines of the strategy modes (platform/argv's parser): each command's options, and the
 * values they carry (numbers, parameters, realism, safety, log level).
 */
import { flag, isSet, list, type OptionSpecs, type ParsedArgs, UsageError } from '../../../platform/argv';
import type { Slippage } from '../../execution/fills';
import { DEFAULT_ROLLOVER, type RolloverRates } from '../../execution/financing';
import fs from 'node:fs';
import type { SafetyLimits } from '../protections/safety';
import { checkProtectionRules } from '../protections/protections';
import type { ProtectionRules } from '../strategy';
import { errorMessage } from '../../../platform/errors';
import { paramValue } from '../sweep/sweep';

const string = { type: 'string' } as const;
const repeated = { type: 'string', multiple: true } as const;
const bool = { type: 'boolean' } as const;

/** What every strategy mode accepts: parameters, safety limits, report and log output. */
export const STRATEGY_OPTIONS: OptionSpecs = {
  param: repeated,
  'max-position': string,
  'max-daily-loss': string,
  'min-usable-margin-pct': string,
  protections: string,
  report: string,
  quiet: bool,
  'log-level': string,
};

/** How a run reaches the broker through the rate limiter (paper, live, candles download). */
export const BROKER_OPTIONS: OptionSpecs = {
  url: string,
  token: string,
  limits: string,
  ratelimit: string,
  account: string,
  'budget-state': string,
};

export const BACKTEST_OPTIONS: OptionSpecs = {
  ...STRATEGY_OPTIONS,
  candles: repeated,
  symbol: string,
  timeframe: string,
  balance: string,
  currency: string,
  commission: string,
  leverage: string,
  slippage: string,
  'slippage-spread': string,
  rollover: bool,
  'rollover-rate': repeated,
};

/**
 * A sweep runs its backtests in worker threads with the strategy's log silent (thousands of runs
 * interleaved would be noise), so it takes the backtest options less --log-level.
 */
const { 'log-level': _silentInSweeps, ...SWEPT_BACKTEST_OPTIONS } = BACKTEST_OPTIONS;

/** What each backtest of `lookahead` takes: a sweep's (its runs are silent too). */
export const LOOKAHEAD_RUN_OPTIONS: OptionSpecs = SWEPT_BACKTEST_OPTIONS;

/** `lookahead`: its runs' options, and its own (which its runs do not see). */
export const LOOKAHEAD_OWN_OPTIONS: OptionSpecs = {
  cuts: string,
  workers: string,
  'no-warmup-check': bool,
  report: string,
};
export const LOOKAHEAD_OPTIONS: OptionSpecs = { ...SWEPT_BACKTEST_OPTIONS, ...LOOKAHEAD_OWN_OPTIONS };

export const SWEEP_OPTIONS: OptionSpecs = {
  ...SWEPT_BACKTEST_OPTIONS,
  grid: repeated,
  range: repeated,
  folds: string,
  'in-sample': string,
  objective: string,
  'min-trades': string,
  workers: string,
  top: string,
};

export const RUN_OPTIONS: OptionSpecs = {
  ...STRATEGY_OPTIONS,
  ...BROKER_OPTIONS,
  'allow-over-budget': bool,
  'if-no-budget': string,
  leverage: string,
  journal: string,
  'journal-max-bytes': string,
  duration: string,
  'token-refused-timeout': string,
  control: string,
  'control-token-file': string,
  notify: repeated,
  'notify-heartbeat': string,
};

export const REPLAY_OPTIONS: OptionSpecs = { param: repeated, quiet: bool, 'log-level': string, journal: string };

/** `candles download`: --symbol and --timeframe repeat (or take comma lists). */
export const CANDLES_OPTIONS: OptionSpecs = {
  ...BROKER_OPTIONS,
  symbol: repeated,
  timeframe: repeated,
  from: string,
  to: string,
  out: string,
  store: string,
};

export function num(p: ParsedArgs, name: string): number | undefined {
  const v = flag(p, name);
  if (v === undefined) return undefined;
  const n = Number(v);
  if (v.trim() === '' || !Number.isFinite(n)) throw new UsageError(`--${name} must be a number, got "${v}"`);
  return n;
}

const SIZE_UNITS: Record<string, number> = { '': 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3 };

/** A size in bytes: `8388608`, or with a binary unit `512K`, `8M`, `1G` (`KiB`, `MiB`, `GiB` too). */
export function byteSize(p: ParsedArgs, name: string): number | undefined {
  const v = flag(p, name);
  if (v === undefined) return undefined;
  const m = /^\s*(\d+)\s*([kmg]?)(?:i?b)?\s*$/i.exec(v);
  const n = m ? Number(m[1]) * SIZE_UNITS[m[2]!.toLowerCase()]! : NaN;
  if (!(n > 0) || !Number.isSafeInteger(n)) throw new UsageError(`--${name} must be a size in bytes above 0, such as 8388608 or 8M, got "${v}"`);
  return n;
}

/** `--param KEY=VALUE`, repeated; numbers and true/false are parsed. */
export function parseParams(p: ParsedArgs): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const kv of list(p, 'param')) {
    const i = kv.indexOf('=');
    if (i <= 0) throw new UsageError(`--param needs KEY=VALUE, got "${kv}"`);
    out[kv.slice(0, i)] = paramValue(kv.slice(i + 1));
  }
  return out;
}

/** The backtest's realism options (--help of backtest lists them): slippage and rollover. */
export interface Realism {
  slippage?: Slippage;
  rollover?: Record<string, RolloverRates>;
}

/**
 * `--slippage PIPS`, `--slippage-spread SHARE` (both none by default); `--rollover` charges the
 * typical rates of execution/financing.ts, and `--rollover-rate SYMBOL=LONG,SHORT` (per 10K units
 * per day, repeatable; implies --rollover) sets a symbol's.
 */
export function realismOf(p: ParsedArgs): Realism {
  const out: Realism = {};
  const pips = num(p, 'slippage');
  const spreadShare = num(p, 'slippage-spread');
  for (const [name, v] of [['slippage', pips], ['slippage-spread', spreadShare]] as const) {
    if (v !== undefined && v < 0) throw new UsageError(`--${name} must be 0 or more, got "${flag(p, name)}"`);
  }
  if (pips || spreadShare) out.slippage = { pips: pips ?? 0, spreadShare: spreadShare ?? 0 };
  const rates = list(p, 'rollover-rate');
  if (isSet(p, 'rollover') || rates.length) {
    out.rollover = { ...DEFAULT_ROLLOVER };
    for (const r of rates) {
      const m = /^([^=]+)=([^,]+),([^,]+)$/.exec(r);
      const [long, short] = m ? [Number(m[2]), Number(m[3])] : [NaN, NaN];
      if (!m || !Number.isFinite(long) || !Number.isFinite(short)) throw new UsageError(`--rollover-rate needs SYMBOL=LONG,SHORT (per 10K units per day), got "${r}"`);
      out.rollover[m[1]!] = { long, short };
    }
  }
  return out;
}

export function safetyOf(p: ParsedArgs): SafetyLimits {
  return { maxPosition: num(p, 'max-position'), maxDailyLoss: num(p, 'max-daily-loss'), minUsableMarginPct: num(p, 'min-usable-margin-pct') };
}

/** `--protections FILE`: a JSON file of protections, instead of the strategy's (a usage error naming what is wrong). */
export function protectionsOf(p: ParsedArgs): ProtectionRules | undefined {
  const file = flag(p, 'protections');
  if (file === undefined) return undefined;
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    throw new UsageError(`--protections ${file}: ${(e as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : errorMessage(e)}`);
  }
  try {
    return checkProtectionRules(JSON.parse(text), `--protections ${file}`);
  } catch (e) {
    throw new UsageError(e instanceof SyntaxError ? `--protections ${file}: not JSON (${e.message})` : errorMessage(e));
  }
}

/** What a backtest's command line sets of its run (backtest and lookahead read it alike). */
export function backtestRunOf(p: ParsedArgs): { params: Record<string, unknown>; balance?: number; currency?: string; commissionPerK?: number; leverage?: number; safety: SafetyLimits; protections?: ProtectionRules } & Realism {
  return {
    params: parseParams(p),
    balance: num(p, 'balance'),
    currency: flag(p, 'currency'),
    commissionPerK: num(p, 'commission'),
    leverage: num(p, 'leverage'),
    ...realismOf(p),
    safety: safetyOf(p),
    protections: protectionsOf(p),
  };
}

export const LOG_LEVELS = ['debug', 'info', 'warn', 'error'] as const;
/** What a strategy's ctx.log writes: this level and above; 'silent' writes nothing. */
export type StrategyLogLevel = (typeof LOG_LEVELS)[number] | 'silent';

/** `--log-level debug|info|warn|error` (default info); `--quiet` is silent. */
export function logLevelOf(p: ParsedArgs, otherwise: StrategyLogLevel = 'info'): StrategyLogLevel {
  if (isSet(p, 'quiet')) return 'silent';
  const v = flag(p, 'log-level');
  if (v === undefined) return otherwise;
  if (!(LOG_LEVELS as readonly string[]).includes(v)) throw new UsageError(`--log-level must be one of ${LOG_LEVELS.join(', ')}, got "${v}"`);
  return v as StrategyLogLevel;
}
