/** Shared helpers for the provider tests: a fake loader, a capturing logger, bounded waits. */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { ConfigError, type ConfigFile, type RateLimitConfig } from '../../src/config/types';
import type { ProviderLogger } from '../../src/providers/config-store';
import { readListedFiles, type ListedFile } from '../../src/providers/config-files';

/** What the fake loader returns: the files it was given, so tests can look at names and contents. */
export interface FakeConfig extends RateLimitConfig {
  readonly files: readonly ConfigFile[];
  readonly merge: boolean;
}

/** The file provider's loader over fakeConfig: reads the listed files as the real one does. */
export function fakeLoader(listed: ListedFile[], mergeDomainConfig: boolean): RateLimitConfig {
  return fakeConfig(readListedFiles(listed), mergeDomainConfig);
}

/** Every file is one "domain"; a file whose content is `bad` fails like the real loader would. */
export function fakeConfig(files: ConfigFile[], mergeDomainConfig: boolean): RateLimitConfig {
  for (const f of files) {
    if (f.content.trim() === 'bad') throw new ConfigError(`${f.name}: config file cannot have empty domain`);
  }
  const config: FakeConfig = {
    files: files.map((f) => ({ ...f })),
    merge: mergeDomainConfig,
    domainCount: files.length,
    ruleCount: files.length,
    hasDomain: () => false,
    getLimit: () => undefined,
    bucketDescriptor: () => undefined,
    explainMatch: () => ({ domainFound: false, override: false, steps: [] }),
    dump: () => files.map((f) => `${f.name}=${f.content}\n`).join(''),
    dumpChunks: () => files.map((f) => `${f.name}=${f.content}\n`),
    rules: [],
  };
  return config;
}

export class CapturingLogger implements ProviderLogger {
  readonly lines: Array<{ level: 'info' | 'warn' | 'error'; msg: string }> = [];
  info(msg: string): void {
    this.lines.push({ level: 'info', msg });
  }
  warn(msg: string): void {
    this.lines.push({ level: 'warn', msg });
  }
  error(msg: string): void {
    this.lines.push({ level: 'error', msg });
  }
  messages(level?: 'info' | 'warn' | 'error'): string[] {
    return this.lines.filter((l) => level === undefined || l.level === level).map((l) => l.msg);
  }
}

export function makeTmpDir(): string {
  return fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'rl-providers-')));
}

/** Writes `files` (relative path → content) under `dir`, creating directories. */
export function writeTree(dir: string, files: Record<string, string>): void {
  for (const [rel, content] of Object.entries(files)) {
    const p = path.join(dir, rel);
    fs.mkdirSync(path.dirname(p), { recursive: true });
    fs.writeFileSync(p, content);
  }
}

/** Atomically points symlink `link` at `target` (ln -s target tmp && mv -T tmp link). */
export function swapSymlink(link: string, target: string): void {
  const tmp = `${link}.tmp-${process.pid}-${Date.now()}`;
  fs.symlinkSync(target, tmp);
  fs.renameSync(tmp, link);
}
