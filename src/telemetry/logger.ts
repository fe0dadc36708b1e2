/**
 * Logging as upstream's logrus set-up: LOG_LEVEL picks the level; LOG_FORMAT=json writes one JSON
 * object per line with `@timestamp`, `@message` and `level`, otherwise logrus-style text lines.
 * The runner's strategy log (`ctx.log`) uses the `plain` format: `[level] message {fields}`.
 */

import type { LogLevel } from '../settings/settings';

const RANK: Record<LogLevel, number> = { trace: 0, debug: 1, info: 2, warn: 3, error: 4, fatal: 5, panic: 6 };

/** Structured context of a log line (logrus fields): `key=value` in text, keys of the JSON object. */
export type LogFields = Record<string, unknown>;

export interface Logger {
  debug(msg: string, fields?: LogFields): void;
  info(msg: string, fields?: LogFields): void;
  warn(msg: string, fields?: LogFields): void;
  error(msg: string, fields?: LogFields): void;
  enabled(level: LogLevel): boolean;
}

/** What code that only writes log lines needs (the trading code, a strategy's `ctx.log`). */
export type LogWriter = Pick<Logger, 'debug' | 'info' | 'warn' | 'error'>;

export interface LoggerOptions {
  level: string;
  /** `text` (logrus), `json`, or `plain` (`[level] message {fields}`, no time: a terminal's). */
  format: 'text' | 'json' | 'plain' | string;
  /** Where lines go; stderr by default, like logrus. */
  write?: (line: string) => void;
}

export function normalizeLevel(level: string): LogLevel {
  const l = level.toLowerCase();
  if (l === 'warning') return 'warn';
  return (l in RANK ? l : 'warn') as LogLevel;
}

export function createLogger(opts: LoggerOptions): Logger {
  const min = RANK[normalizeLevel(opts.level)];
  const json = opts.format === 'json';
  const write = opts.write ?? ((line: string) => process.stderr.write(line));
  const emit = (level: LogLevel, msg: string, fields: LogFields | undefined): void => {
    if (RANK[level] < min) return;
    if (opts.format === 'plain') {
      write(`[${level}] ${msg}${fields !== undefined && Object.keys(fields).length > 0 ? ` ${JSON.stringify(fields)}` : ''}\n`);
      return;
    }
    const ts = new Date().toISOString();
    const name = level === 'warn' ? 'warning' : level;
    if (json) {
      write(JSON.stringify({ ...fields, '@timestamp': ts, '@message': msg, level: name }) + '\n');
      return;
    }
    let line = `time="${ts}" level=${name} msg=${JSON.stringify(msg)}`;
    if (fields !== undefined) for (const k of Object.keys(fields)) line += ` ${k}=${fieldText(fields[k])}`;
    write(line + '\n');
  };
  return {
    debug: (m, f) => emit('debug', m, f),
    info: (m, f) => emit('info', m, f),
    warn: (m, f) => emit('warn', m, f),
    error: (m, f) => emit('error', m, f),
    enabled: (level) => RANK[level] >= min,
  };
}

/** A field value as logrus writes it: bare when it is a plain word, quoted otherwise. */
function fieldText(v: unknown): string {
  const text = typeof v === 'string' ? v : v instanceof Error ? v.message : JSON.stringify(v) ?? String(v);
  return /^[\w./:@-]+$/.test(text) ? text : JSON.stringify(text);
}

/** A logger that drops everything (tests, library use). */
export const silentLogger: Logger = {
  debug: () => {},
  info: () => {},
  warn: () => {},
  error: () => {},
  enabled: () => false,
};
