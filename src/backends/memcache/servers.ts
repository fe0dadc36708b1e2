/**
 * Where the memcached nodes come from: MEMCACHE_HOST_PORT (`host:port,…`) or MEMCACHE_SRV
 * (`_service._proto.name`, resolved with node:dns). Either way the result is a de-duplicated list
 * of `host:port` names: MEMCACHE_HOST_PORT in the order given (it decides key placement, as
 * upstream), SRV targets sorted so every instance builds the same list. SRV priority and weight are not used: every target is a
 * node (as upstream, which hands all targets to gomemcache).
 */
import { Resolver } from 'node:dns/promises';

/** upstream srv.go's pattern: `_service._proto.name`. */
const SRV_PATTERN = /^_(.+?)\._(.+?)\.(.+)$/;

export class MemcacheConfigError extends Error {
  override readonly name = 'MemcacheConfigError';
}

/** `host:port` (IPv6 as `[addr]:port`) checked and normalised; throws MemcacheConfigError. */
export function parseHostPort(entry: string, variable = 'MEMCACHE_HOST_PORT'): string {
  const s = entry.trim();
  const i = s.lastIndexOf(':');
  const host = i > 0 ? s.slice(0, i) : '';
  const port = i > 0 ? Number(s.slice(i + 1)) : NaN;
  const bareIpv6 = host.includes(':') && !/^\[.*\]$/.test(host);
  if (host === '' || bareIpv6 || !Number.isInteger(port) || port < 1 || port > 65535 || !/^\d+$/.test(s.slice(i + 1))) {
    throw new MemcacheConfigError(`${variable}: invalid memcached server address "${entry}": expected host:port`);
  }
  return `${host}:${port}`;
}

/** De-duplicated node names in the order given: the order decides key placement (keys.ts). */
export function distinctNodes(names: Iterable<string>): string[] {
  return [...new Set(names)];
}

export function checkSrvName(srv: string): void {
  if (!SRV_PATTERN.test(srv)) {
    throw new MemcacheConfigError(`MEMCACHE_SRV: could not parse "${srv}" as an SRV name (_service._proto.name)`);
  }
}

export interface SrvResolverOptions {
  /** DNS servers to ask instead of the system's (`ip` or `ip:port`), e.g. a test server. */
  servers?: readonly string[] | undefined;
  /** Per-try timeout (default 2000 ms); two tries. */
  timeoutMs?: number | undefined;
}

export class SrvResolver {
  private readonly resolver: Resolver;

  constructor(opts: SrvResolverOptions = {}) {
    this.resolver = new Resolver({ timeout: opts.timeoutMs ?? 2000, tries: 2 });
    if (opts.servers !== undefined && opts.servers.length > 0) this.resolver.setServers([...opts.servers]);
  }

  /** The SRV targets as sorted `target:port` names; rejects when the lookup fails or is empty. */
  async resolve(srv: string): Promise<string[]> {
    const records = await this.resolver.resolveSrv(srv);
    const names: string[] = [];
    for (const r of records) {
      const target = r.name.endsWith('.') ? r.name.slice(0, -1) : r.name;
      if (target === '' || r.port === 0) continue;
      names.push(target.includes(':') ? `[${target}]:${r.port}` : `${target}:${r.port}`);
    }
    if (names.length === 0) throw new Error(`no usable SRV records for ${srv}`);
    // DNS answers come in any order; sort so that every instance builds the same list.
    return distinctNodes(names).sort();
  }

  cancel(): void {
    this.resolver.cancel();
  }
}
