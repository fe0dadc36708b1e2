#!/usr/bin/env node
/**
 * `ratelimit-config-check`: loads every file of -config_dir as the service would and reports the
 * first error (exit 1) or `all rate limit configs ok`. Flags as upstream's config_check.
 */
import fs from 'node:fs';
import path from 'node:path';
import { loadConfig } from '../config/load';
import { ConfigError, type ConfigFile, type RateLimitConfig } from '../config/types';
import { explainRequest } from '../limiter/explain';
import { parseDescriptor } from '../limiter/descriptor-text';
import { StatsStore } from '../stats/store';
import { UNIT_NAMES } from '../core/rls';
import { type FlagSpec, parseFlagsOrExit, usage } from './flags';
import { errorMessage } from '../platform/errors';

const SPECS: FlagSpec[] = [
  { name: 'config_dir', kind: 'string', help: 'path to directory containing rate limit configs', default: '' },
  { name: 'merge_domain_configs', kind: 'bool', help: 'whether to merge configurations, referencing the same domain', default: 'false' },
  { name: 'explain', kind: 'bool', help: 'explain how -domain and -descriptors match the configs', default: 'false' },
  { name: 'domain', kind: 'string', help: 'with -explain: the request domain', default: '' },
  { name: 'descriptors', kind: 'list', help: 'with -explain: a descriptor as <key>=<value>,<key>=<value> (repeatable)' },
  { name: 'cache_key_prefix', kind: 'string', help: 'with -explain: CACHE_KEY_PREFIX for the cache keys shown', default: '' },
];

export function checkConfigDir(dir: string, merge: boolean, out: (line: string) => void): RateLimitConfig | undefined {
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
    const config = loadConfig(files, { mergeDomainConfig: merge, stats: new StatsStore() });
    out('all rate limit configs ok');
    for (const r of config.rules) {
      const c = r.candidate;
      if (c === undefined) continue;
      const algo = c.algorithm !== undefined ? ` algorithm=${c.algorithm}${c.algorithm === 'token_bucket' ? ` burst=${c.burst ?? c.limit.requestsPerUnit}` : ''}` : '';
      out(
        `candidate limit: ${r.fullKey}: unit=${UNIT_NAMES[c.limit.unit] ?? c.limit.unit} requests_per_unit=${c.limit.requestsPerUnit}${algo} ` +
          `(beside unit=${UNIT_NAMES[r.limit.unit] ?? r.limit.unit} requests_per_unit=${r.limit.requestsPerUnit}: counted, never enforced)`,
      );
    }
    return config;
  } catch (err) {
    const msg = err instanceof ConfigError ? err.message : errorMessage(err);
    out(`error loading rate limit configs: ${msg}`);
    return undefined;
  }
}

function main(argv: string[]): void {
  const flags = parseFlagsOrExit('ratelimit-config-check', argv, SPECS);
  const dir = flags['config_dir'] as string;
  if (dir === '') {
    process.stderr.write(`-config_dir is required\n${usage('ratelimit-config-check', SPECS)}`);
    process.exit(2);
  }
  const config = checkConfigDir(dir, flags['merge_domain_configs'] as boolean, (l) => process.stdout.write(l + '\n'));
  if (config === undefined) process.exit(1);
  if (flags['explain'] === true) {
    let descriptors;
    try {
      descriptors = (flags['descriptors'] as string[]).map(parseDescriptor);
    } catch (err) {
      process.stderr.write(`${errorMessage(err)}\n`);
      process.exit(2);
    }
    if (flags['domain'] === '' || descriptors.length === 0) {
      process.stderr.write('-explain needs -domain and at least one -descriptors\n');
      process.exit(2);
    }
    const request = { domain: flags['domain'] as string, descriptors, hitsAddend: 0 };
    explainRequest(config, request, { cacheKeyPrefix: flags['cache_key_prefix'] as string, nowMs: Date.now() }).then((text) => {
      process.stdout.write(text);
      process.exit(0);
    });
    return;
  }
  process.exit(0);
}

if (require.main === module) main(process.argv.slice(2));
