/**
 * `ratelimit-runner candles check FILE|DIR...`: reads every row of each candle file with the
 * validation of fxcm/candle-file.ts (what `backtest --candles` would refuse) and reports per file its
 * symbol, time frame, count, first and last candle, a store file's covered range, the bad rows
 * (each with its line or row) and the gaps: candles missing while the FX market was open
 * (fxcm/market-hours.ts; the weekend close is not a gap). A file with a bad row is invalid, and
 * the exit status is then 1; gaps are reported, not refused (a holiday has none either).
 */
import fs from 'node:fs';
import path from 'node:path';
import { PERIOD_SECONDS, normalizePeriod } from '../../fxcm/candles';
import { fxOpenSeconds } from '../../fxcm/market-hours';
import type { Candle, Period } from '../../fxcm/types';
import { UsageError, flag, parseCommandArgs, wantsHelp, type OptionSpecs } from '../../../platform/argv';
import { CandleFileError, inspectCandleFile, isoTime, type CandleProblem, type CandleProblemKind, type Coverage } from '../../fxcm/candle-file';
import { CANDLE_STORE_ENV } from './candles-store';
import { errorMessage } from '../../../platform/errors';

export const CANDLES_CHECK_USAGE = `Usage: ratelimit-runner candles check [FILE|DIR...] [--symbol SYM] [--timeframe TF]

Reads every row of each candle file (a directory: every .json and .csv file under it, e.g. a
candle store; none given: the store in ${CANDLE_STORE_ENV}) and reports per file: symbol, time
frame, count, first and last candle, the range a store file covers, the bad rows (a value that
is not a number, prices that contradict each other, an ask below the bid, a repeated time, a
time before the row above), each with its line (CSV) or row (JSON), and the gaps: candles
missing while the FX market was open (it closes Friday 16:55 to Sunday 17:00 New York; holidays
and other instruments' hours are not known, so such gaps are listed too).

Options:
  --symbol SYM          symbol of CSV files (they have none of their own)
  --timeframe TF        time frame of CSV files (without one, gaps are not looked for)
  -h, --help            this help

Exit status: 0 every file valid (gaps or not), 1 a file is invalid or unreadable, 2 usage.
`;

/** `candles check`: the symbol and time frame of CSV files, which have none of their own. */
export const CANDLES_CHECK_OPTIONS: OptionSpecs = {
  symbol: { type: 'string' },
  timeframe: { type: 'string' },
};

/** Rows and gaps listed per file; the rest are counted. */
const LISTED = 10;

/** Candles missing between two candles while the market was open. */
export interface CandleGap {
  /** The last candle before the gap and the first after it (epoch seconds). */
  before: number;
  after: number;
  /** Whole periods of open market between them. */
  missing: number;
}

export interface CandleFileCheck {
  file: string;
  /** Why the file as a whole could not be read (not JSON, a CSV header without a column, …). */
  unreadable?: string;
  symbol?: string;
  /** As written in the file (or --timeframe). */
  timeframe?: string;
  period?: Period;
  count: number;
  first?: number;
  last?: number;
  covered?: Coverage;
  problems: CandleProblem[];
  /** The gaps, or why they were not looked for. */
  gaps: CandleGap[] | string;
}

export const isValid = (c: CandleFileCheck): boolean => c.unreadable === undefined && c.problems.length === 0 && (c.timeframe === undefined || c.period !== undefined);

/**
 * Gaps between consecutive candles: a gap is at least one whole period of open market after a
 * candle's end with no candle (so a weekend, or a daily candle an hour longer at a daylight-saving
 * change, is none).
 */
export function findGaps(candles: readonly Candle[], period: Period): CandleGap[] {
  const step = PERIOD_SECONDS[period];
  const gaps: CandleGap[] = [];
  for (let i = 1; i < candles.length; i++) {
    const before = candles[i - 1]!.ts;
    const after = candles[i]!.ts;
    if (after - before <= step) continue;
    const missing = Math.floor(fxOpenSeconds(before + step, after) / step);
    if (missing > 0) gaps.push({ before, after, missing });
  }
  return gaps;
}

/** `opts` name the symbol and time frame of files that have none of their own (CSV). */
export function checkCandleFile(file: string, opts: { symbol?: string; timeframe?: string } = {}): CandleFileCheck {
  let read;
  try {
    read = inspectCandleFile(file);
  } catch (e) {
    if (e instanceof CandleFileError || (e as NodeJS.ErrnoException).code !== undefined) return { file, unreadable: errorMessage(e), count: 0, problems: [], gaps: 'the file was not read' };
    throw e;
  }
  const timeframe = read.timeframe ?? opts.timeframe;
  const period = timeframe === undefined ? undefined : normalizePeriod(timeframe);
  const { candles } = read;
  const inOrder = !read.problems.some((p) => p.kind === 'duplicate' || p.kind === 'unsorted');
  return {
    file,
    symbol: read.symbol ?? opts.symbol,
    timeframe,
    period,
    count: candles.length,
    first: candles[0]?.ts,
    last: candles[candles.length - 1]?.ts,
    covered: read.covered,
    problems: read.problems,
    gaps:
      period === undefined
        ? 'gaps not looked for without a time frame'
        : period === 'M1'
          ? 'gaps not looked for in monthly candles (months differ in length)'
          : !inOrder
            ? 'gaps not looked for: the rows are not in time order'
            : findGaps(candles, period),
  };
}

const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

function listed<T>(items: readonly T[], line: (x: T) => string): string[] {
  const out = items.slice(0, LISTED).map((x) => `  ${line(x)}`);
  if (items.length > LISTED) out.push(`  … and ${items.length - LISTED} more`);
  return out;
}

/** The report of one file, several lines; the first says ok or INVALID. */
export function formatCheck(c: CandleFileCheck): string {
  if (c.unreadable !== undefined) return `${c.file}: INVALID: ${c.unreadable}\n`;
  const lines: string[] = [];
  const kinds = new Map<CandleProblemKind, number>();
  for (const p of c.problems) kinds.set(p.kind, (kinds.get(p.kind) ?? 0) + 1);
  const badTimeframe = c.timeframe !== undefined && c.period === undefined;
  if (isValid(c)) lines.push(`${c.file}: ok`);
  else if (c.problems.length) lines.push(`${c.file}: INVALID: ${plural(c.problems.length, 'bad row')} (${[...kinds].map(([k, n]) => `${n} ${k}`).join(', ')})`);
  else lines.push(`${c.file}: INVALID: the time frame ${c.timeframe} is not one of m1 m5 m15 m30 H1 H2 H3 H4 H6 H8 D1 W1 M1`);
  const what = `${c.symbol ?? 'symbol unknown'} ${badTimeframe ? c.timeframe : c.period ?? 'time frame unknown'}`;
  const span = c.first === undefined ? '' : ` from ${isoTime(c.first)} to ${isoTime(c.last!)}`;
  const covered = c.covered ? ` (the store covers ${isoTime(c.covered.from)} to ${isoTime(c.covered.to)})` : '';
  lines.push(`  ${what}, ${plural(c.count, 'candle')}${span}${covered}`);
  if (c.symbol === undefined || c.timeframe === undefined) lines.push('  (a CSV file has no symbol or time frame of its own: pass --symbol and --timeframe)');
  lines.push(...listed(c.problems, (p) => p.message));
  if (typeof c.gaps === 'string') lines.push(`  ${c.gaps}`);
  else if (!c.gaps.length) lines.push('  no gaps while the market was open');
  else {
    lines.push(`  ${plural(c.gaps.length, 'gap')} while the market was open:`);
    lines.push(...listed(c.gaps, (g) => `  after ${isoTime(g.before)}, next ${isoTime(g.after)}: ${plural(g.missing, `${c.period} candle`)} missing`));
  }
  return lines.join('\n') + '\n';
}

/** FILE and DIR arguments to files: a directory gives its .json and .csv files, recursively, sorted. */
function candleFilesOf(args: readonly string[]): string[] {
  return args.flatMap((a) => {
    if (!fs.existsSync(a) || !fs.statSync(a).isDirectory()) return [a];
    return fs
      .readdirSync(a, { recursive: true, encoding: 'utf8' })
      .filter((f) => /\.(json|csv)$/i.test(f))
      .sort()
      .map((f) => path.join(a, f));
  });
}

export function candlesCheckCommand(argv: string[]): number {
  const p = parseCommandArgs(argv, CANDLES_CHECK_OPTIONS, { positionals: Infinity, usage: CANDLES_CHECK_USAGE });
  if (wantsHelp(p)) {
    process.stdout.write(CANDLES_CHECK_USAGE);
    return 0;
  }
  const store = process.env[CANDLE_STORE_ENV];
  const args = p.positional.length ? p.positional : store ? [store] : [];
  if (!args.length) throw new UsageError(`candles check needs FILE or DIR arguments (or ${CANDLE_STORE_ENV} set to a candle store)`);
  const files = candleFilesOf(args);
  if (!files.length) throw new UsageError(`no .json or .csv files under ${args.join(', ')}`);
  let invalid = 0;
  for (const file of files) {
    const c = checkCandleFile(file, { symbol: flag(p, 'symbol'), timeframe: flag(p, 'timeframe') });
    if (!isValid(c)) invalid++;
    process.stdout.write(formatCheck(c));
  }
  if (files.length > 1) process.stdout.write(`${plural(files.length, 'file')} checked, ${invalid} invalid\n`);
  return invalid ? 1 : 0;
}
