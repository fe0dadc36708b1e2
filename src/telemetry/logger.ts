/**
 * Logging as upstream's logrus set-up: LOG_LEVEL picks the level; LOG_FORMAT=json writes one JSON
 * object per line with `@timestamp`, `@message` and `level`, otherwise logrus-style text lines.
 */

export type LogLevel = 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'fatal' | 'panic';

const RANK: Record<LogLevel, number> = { trace: 0, debug: 1, info: 2, warn: 3, error: 4, fatal: 5, panic: 6 };

export interface Logger {
  debug(msg: string): void;
  info(msg: string): void;
  warn(msg: string): void;
  error(msg: string): void;
  enabled(level: LogLevel): boolean;
}

export interface LoggerOptions {
  level: string;
  format: 'text' | 'json' | string;
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
  const emit = (level: LogLevel, msg: string): void => {
    if (RANK[level] < min) return;
    const ts = new Date().toISOString();
    write(
      json
        ? JSON.stringify({ '@timestamp': ts, '@message': msg, level: level === 'warn' ? 'warning' : level }) + '\n'
        : `time="${ts}" level=${level === 'warn' ? 'warning' : level} msg=${JSON.stringify(msg)}\n`,
    );
  };
  return {
    debug: (m) => emit('debug', m),
    info: (m) => emit('info', m),
    warn: (m) => emit('warn', m),
    error: (m) => emit('error', m),
    enabled: (level) => RANK[level] >= min,
  };
}

/** A logger that drops everything (tests, library use). */
export const silentLogger: Logger = {
  debug: () => {},
  info: () => {},
  warn: () => {},
  error: () => {},
  enabled: () => false,
};
