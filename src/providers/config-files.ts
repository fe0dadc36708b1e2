/**
 * Config files as the file provider lists them, and their reading: on the thread that builds the
 * config (the config builder's worker for a big one), so a big file is never read, decoded and
 * copied on the event loop.
 *
 * CONFIG_MAX_BYTES is checked twice: the provider adds up the sizes it lists (nothing is read when
 * they are over), and the reader reads no more than what is left of it, so a file that grew after
 * it was listed is refused at the byte past the limit, not read whole.
 */
import * as fs from 'node:fs';
import { ConfigError, type ConfigFile } from '../config/types';
import { errCode, fsReason } from '../platform/directory-watcher';

/** A config file found by the provider: its config name (the error prefix), path and size when listed. */
export interface ListedFile {
  readonly name: string;
  readonly path: string;
  readonly size: number;
}

/** `<name>: error loading config file: <reason>`, upstream's text for a file it cannot read. */
export function fileLoadError(name: string, reason: string): ConfigError {
  return new ConfigError(`${name}: error loading config file: ${reason}`);
}

/** The load of files over CONFIG_MAX_BYTES, `name` being the file that went past it. */
export function tooManyBytes(name: string, maxBytes: number): ConfigError {
  return new ConfigError(
    `${name}: the configuration files hold more than the ${maxBytes} bytes set by CONFIG_MAX_BYTES; they were not loaded`,
  );
}

/** Past the bytes left of the limit. */
class OverLimit extends Error {}

/**
 * Reads the listed files (UTF-8), all of them together at most `maxBytes` (0 = no limit). A file
 * removed since it was listed is left out: its removal reloads again.
 */
export function readListedFiles(files: readonly ListedFile[], maxBytes = 0): ConfigFile[] {
  const out: ConfigFile[] = [];
  let total = 0;
  for (const f of files) {
    let bytes: Buffer;
    try {
      bytes = readAtMost(f.path, maxBytes > 0 ? maxBytes - total : Infinity);
    } catch (err) {
      if (err instanceof OverLimit) throw tooManyBytes(f.name, maxBytes);
      if (errCode(err) === 'ENOENT') continue;
      throw fileLoadError(f.name, fsReason(err));
    }
    total += bytes.length;
    out.push({ name: f.name, content: bytes.toString('utf8') });
  }
  return out;
}

/** The bytes of a regular file, throwing OverLimit rather than reading more than `room`. */
function readAtMost(file: string, room: number): Buffer {
  // O_NONBLOCK: a file replaced by a FIFO since it was listed must not hold the open.
  const fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK);
  try {
    const st = fs.fstatSync(fd);
    if (!st.isFile()) throw new Error(`read ${file}: not a regular file`);
    if (st.size > room) throw new OverLimit();
    // One byte more than its size: a file that grew since shows it at the first read.
    let buf = Buffer.allocUnsafe(Math.min(st.size, room) + 1);
    let n = 0;
    for (;;) {
      if (n === buf.length) {
        const more = Buffer.allocUnsafe(Math.min(n * 2, room + 1));
        buf.copy(more, 0, 0, n);
        buf = more;
      }
      const got = fs.readSync(fd, buf, n, buf.length - n, null);
      if (got === 0) return buf.subarray(0, n);
      n += got;
      if (n > room) throw new OverLimit();
    }
  } finally {
    fs.closeSync(fd);
  }
}
