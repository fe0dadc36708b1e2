#!/usr/bin/env node
/**
 * `ratelimit-config-check`: loads every file of -config_dir as the service would and reports the
 * first error (exit 1) or `all rate limit configs ok`. Flags as upstream's config_check.
 */
import fs from 'node:fs';
import path from 'node:path';
import { loadConfig } from '../config/load';
import { ConfigError, type ConfigFile } from '../config/types';
import { StatsStore } from '../stats/store';
import { type FlagSpec, parseFlags, usage } from './flags';

const SPECS: FlagSpec[] = [
  { name: 'config_dir', kind: 'string', help: 'path to directory containing rate limit configs', default: '' },
  { name: 'merge_domain_configs', kind: 'bool', help: 'whether to merge configurations, referencing the same domain', default: 'false' },
];

export function checkConfigDir(dir: string, merge: boolean, out: (line: string) => void): boolean {
  out('checking rate limit configs...');
  out(`loading config directory: ${dir}`);
  try {
    const files: ConfigFile[] = [];
    for (const name of fs.readdirSync(dir).sort()) {
      const full = path.join(dir, name);
      if (!fs.statSync(full).isFile()) continue;
      out(`opening config file: ${full}`);
      files.push({ name: full, content: fs.readFileSync(full, 'utf8') });
    }
    loadConfig(files, { mergeDomainConfig: merge, stats: new StatsStore() });
  } catch (err) {
    const msg = err instanceof ConfigError ? err.message : (err as Error).message;
    out(`error loading rate limit configs: ${msg}`);
    return false;
  }
  out('all rate limit configs ok');
  return true;
}

function main(argv: string[]): void {
  let flags;
  try {
    flags = parseFlags(argv, SPECS);
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n${usage('ratelimit-config-check', SPECS)}`);
    process.exit(2);
  }
  const dir = flags['config_dir'] as string;
  if (dir === '') {
    process.stderr.write(`-config_dir is required\n${usage('ratelimit-config-check', SPECS)}`);
    process.exit(2);
  }
  const ok = checkConfigDir(dir, flags['merge_domain_configs'] as boolean, (l) => process.stdout.write(l + '\n'));
  process.exit(ok ? 0 : 1);
}

if (require.main === module) main(process.argv.slice(2));
