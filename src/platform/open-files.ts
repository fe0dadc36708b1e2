/**
 * The process's open-file limit (the soft RLIMIT_NOFILE), read from Linux's /proc/self/limits:
 * node has no getrlimit. Every connection holds a file descriptor, so the connections the process
 * may hold are bounded by it.
 */
import fs from 'node:fs';

/** The soft limit on open files; undefined where it cannot be read (not Linux) or is unlimited. */
export function openFileLimit(readLimits: () => string = () => fs.readFileSync('/proc/self/limits', 'utf8')): number | undefined {
  let text: string;
  try {
    text = readLimits();
  } catch {
    return undefined;
  }
  const line = text.split('\n').find((l) => l.startsWith('Max open files'));
  const soft = line?.slice('Max open files'.length).trim().split(/\s+/)[0];
  const n = Number(soft);
  return soft !== undefined && Number.isSafeInteger(n) && n > 0 ? n : undefined;
}

/**
 * The connections that leave room in `limit` open files for the rest of the process (store
 * connections, config files and their watches, the worker channel): a tenth of the limit, at
 * least 256, is kept, but never more than half of it.
 */
export function connectionsWithin(limit: number): number {
  const reserve = Math.min(Math.floor(limit / 2), Math.max(256, Math.floor(limit / 10)));
  return Math.max(1, limit - reserve);
}
