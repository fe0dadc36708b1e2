/**
 * Command lines in the GNU style (`--name value`, `--name=value`, `-h`), read with node:util's
 * parseArgs: each command declares its options, so an unknown or malformed flag is a usage error
 * (exit 2) instead of being ignored. (Upstream's Go-style `-name value` tools use cli/flags.ts.)
 */
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { errorMessage } from './errors';

/** The command line is wrong: the program says so (and its usage) and exits 2. */
export class UsageError extends Error {
  /** `usage`: the command's usage, printed after the message (an argument it does not take). */
  constructor(
    message: string,
    readonly usage?: string,
  ) {
    super(message);
  }
}

/** What a command takes besides its options, and the usage shown when it is given something else. */
export interface CommandShape {
  /** Most positional arguments (a strategy file: 1; none: 0; files to check: Infinity). */
  readonly positionals: number;
  readonly usage: string;
}

export type OptionSpecs = NonNullable<ParseArgsConfig['options']>;

export interface ParsedArgs {
  positional: string[];
  values: Record<string, string | boolean | string[] | undefined>;
}

/**
 * argv → positionals and option values; `-h`/`--help` is accepted by every command. An unknown
 * option, or a positional argument beyond `shape.positionals`, is a usage error carrying the usage.
 */
export function parseCommandArgs(argv: string[], options: OptionSpecs, shape: CommandShape): ParsedArgs {
  let parsed: ParsedArgs;
  try {
    const { values, positionals } = parseArgs({ args: argv, options: { help: { type: 'boolean', short: 'h' }, ...options }, allowPositionals: true, strict: true });
    parsed = { positional: positionals, values };
  } catch (e) {
    // node's own messages name the flag ("Unknown option '--x'", "Option '--balance <value>' argument missing")
    // (without its hint about positionals that start with '-', which misleads for a mistyped flag)
    if (String((e as { code?: unknown }).code).startsWith('ERR_PARSE_ARGS')) {
      throw new UsageError(errorMessage(e).replace(/\. To specify a positional argument[\s\S]*$/, '.'), shape.usage);
    }
    throw e;
  }
  const stray = parsed.positional[shape.positionals];
  if (stray !== undefined && !wantsHelp(parsed)) throw new UsageError(`unexpected argument: ${stray}`, shape.usage);
  return parsed;
}

export const wantsHelp = (p: ParsedArgs): boolean => p.values.help === true;

export const isSet = (p: ParsedArgs, name: string): boolean => p.values[name] === true;

/** A string option's value (the last when repeated without `multiple`). */
export function flag(p: ParsedArgs, name: string): string | undefined {
  const v = p.values[name];
  return typeof v === 'string' ? v : undefined;
}

/** A repeated option's values. */
export function list(p: ParsedArgs, name: string): string[] {
  const v = p.values[name];
  return Array.isArray(v) ? v : [];
}
