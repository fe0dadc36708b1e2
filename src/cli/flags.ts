import { errorMessage } from '../platform/errors';
/**
 * Go `flag`-style command lines, as upstream's tools take them: `-name value`, `-name=value`,
 * `--name`; boolean flags stand alone or take `=true|false`; string-list flags repeat.
 */

export interface FlagSpec {
  readonly name: string;
  readonly kind: 'string' | 'bool' | 'list';
  readonly help: string;
  readonly default?: string;
}

export type ParsedFlags = Record<string, string | boolean | string[]>;

export class FlagError extends Error {}

/** `-h`, `-help` or `--help`: the program prints its usage on stdout and exits 0, as Go's flag package. */
export class HelpRequested extends Error {
  constructor() {
    super('help requested');
  }
}

/** Whether an argument asks for help, in any of the spellings programs accept. */
export function isHelpFlag(arg: string): boolean {
  return arg === '-h' || arg === '--help' || arg === '-help' || arg === '--h';
}

const BOOL_TRUE = new Set(['1', 't', 'T', 'TRUE', 'true', 'True']);
const BOOL_FALSE = new Set(['0', 'f', 'F', 'FALSE', 'false', 'False']);

export function parseFlags(argv: readonly string[], specs: readonly FlagSpec[]): ParsedFlags {
  const byName = new Map(specs.map((s) => [s.name, s]));
  const out: ParsedFlags = {};
  for (const s of specs) {
    if (s.kind === 'list') out[s.name] = [];
    else if (s.kind === 'bool') out[s.name] = s.default === 'true';
    else out[s.name] = s.default ?? '';
  }
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (!arg.startsWith('-') || arg === '-' || arg === '--') {
      throw new FlagError(`unexpected argument: ${arg}`);
    }
    const body = arg.replace(/^--?/, '');
    const eq = body.indexOf('=');
    const name = eq < 0 ? body : body.slice(0, eq);
    if (isHelpFlag(arg)) throw new HelpRequested();
    const spec = byName.get(name);
    if (spec === undefined) throw new FlagError(`flag provided but not defined: -${name}`);
    if (spec.kind === 'bool') {
      if (eq < 0) out[name] = true;
      else {
        const v = body.slice(eq + 1);
        if (BOOL_TRUE.has(v)) out[name] = true;
        else if (BOOL_FALSE.has(v)) out[name] = false;
        else throw new FlagError(`invalid boolean value "${v}" for -${name}`);
      }
      continue;
    }
    let value: string;
    if (eq >= 0) value = body.slice(eq + 1);
    else {
      if (i + 1 >= argv.length) throw new FlagError(`flag needs an argument: -${name}`);
      value = argv[++i]!;
    }
    if (spec.kind === 'list') (out[name] as string[]).push(value);
    else out[name] = value;
  }
  return out;
}

/**
 * parseFlags for a program's main: help prints the usage on stdout and exits 0; a bad flag prints
 * its error and the usage on stderr and exits 2.
 */
export function parseFlagsOrExit(program: string, argv: readonly string[], specs: readonly FlagSpec[]): ParsedFlags {
  try {
    return parseFlags(argv, specs);
  } catch (err) {
    if (err instanceof HelpRequested) {
      process.stdout.write(usage(program, specs));
      process.exit(0);
    }
    process.stderr.write(`${program}: ${errorMessage(err)}\n${usage(program, specs)}`);
    process.exit(2);
  }
}

export function usage(program: string, specs: readonly FlagSpec[]): string {
  let s = `Usage of ${program}:\n`;
  for (const f of specs) {
    s += `  -${f.name}${f.kind === 'bool' ? '' : ' ' + f.kind}\n    \t${f.help}`;
    if (f.default !== undefined && f.default !== '') s += ` (default ${JSON.stringify(f.default)})`;
    s += '\n';
  }
  return s;
}
