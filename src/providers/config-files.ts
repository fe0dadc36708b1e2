/**
 * Config files as the file provider lists them, and their reading: on the thread that builds the
 * config (the config builder's worker for a big one), so a big file is never read, decoded and
 * copied on the event loop.
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

/** Reads the listed files (UTF-8). A file removed since it was listed is left out: its removal reloads again. */
export function readListedFiles(files: readonly ListedFile[]): ConfigFile[] {
  const out: ConfigFile[] = [];
  for (const f of files) {
    let content: string;
    try {
      content = fs.readFileSync(f.path, 'utf8');
    } catch (err) {
      if (errCode(err) === 'ENOENT') continue;
      throw fileLoadError(f.name, fsReason(err));
    }
    out.push({ name: f.name, content });
  }
  return out;
}
