/**
 * MEMCACHE_SRV: the store finds its nodes with an SRV lookup (here against a DNS server the test
 * runs on 127.0.0.1), re-resolves every MEMCACHE_SRV_REFRESH, and keeps its list when a lookup
 * fails.
 */
import { MemcacheStore } from '../../../src/backends/memcache/store';
import { StatsStore } from '../../../src/stats/store';
import type { Logger } from '../../../src/telemetry/logger';
import { TestDnsServer } from '../../support/dns';
import { type MemcachedServer, rawGet, startMemcachedServers } from '../../support/memcached';
import { op, settings, uniqueKey } from './helpers';
import { waitFor } from '../../support/wait';

const SRV = '_memcache._tcp.ratelimit.test';

let dns: TestDnsServer;
let a: MemcachedServer;
let b: MemcachedServer;

beforeAll(async () => {
  dns = await TestDnsServer.start();
  [a, b] = (await startMemcachedServers(2)) as [MemcachedServer, MemcachedServer];
});
afterAll(async () => {
  await Promise.all([a?.stop(), b?.stop(), dns?.close()]);
});

function srvStore(refreshMs: number, logger?: Logger): Promise<MemcacheStore> {
  return MemcacheStore.create({
    settings: settings({ srv: SRV, srvRefreshMs: refreshMs }),
    expirationJitterMaxSeconds: 0,
    stats: new StatsStore(),
    timeoutMs: 300,
    healthCheckIntervalMs: 100,
    dnsServers: [dns.address],
    dnsTimeoutMs: 300,
    logger,
  });
}

describe('memcache store: MEMCACHE_SRV', () => {
  it('uses the SRV targets as nodes and picks up a new target on refresh; keeps the list when a lookup fails', async () => {
    dns.setSrv(SRV, [{ target: '127.0.0.1', port: a.port, priority: 10, weight: 5 }]);
    const warnings: string[] = [];
    const logger: Logger = {
      debug: () => {},
      info: () => {},
      warn: (m) => warnings.push(m),
      error: () => {},
      enabled: () => true,
    };
    const store = await srvStore(150, logger);
    try {
      expect(dns.queries).toContain(`SRV ${SRV}`);
      expect(store.servers()).toEqual([a.address]);
      expect(store.isHealthy()).toBe(true);
      const k1 = uniqueKey('srv');
      expect(await store.increment([op(k1, 2)], Date.now())).toEqual([2]);
      await store.idle();
      expect(await rawGet(a.port, k1)).toBe('2');

      // The record set grows (returned in another order): the refresh adds node b.
      dns.setSrv(SRV, [
        { target: '127.0.0.1', port: b.port, priority: 10, weight: 5 },
        { target: '127.0.0.1', port: a.port, priority: 10, weight: 5 },
      ]);
      await waitFor(() => store.servers().length === 2, 'the refresh to add the second target');
      expect(store.servers()).toEqual([a.address, b.address].sort());
      await waitFor(() => store.nodeStates().every((n) => n.up === true), 'both nodes probed');
      const keys = Array.from({ length: 30 }, (_, i) => uniqueKey(`srv${i}`));
      await store.increment(keys.map((k) => op(k, 1)), Date.now());
      await store.idle();
      let onB = 0;
      for (const k of keys) {
        const server = store.serverFor(k);
        const port = server === a.address ? a.port : b.port;
        expect(await rawGet(port, k)).toBe('1');
        if (server === b.address) onB++;
      }
      expect(onB).toBeGreaterThan(0);

      // The name disappears (NXDOMAIN): logged, the known servers stay.
      dns.remove(SRV);
      await waitFor(() => warnings.some((w) => w.includes('lookup failed, keeping the 2 known servers')), 'a failed refresh');
      expect(store.servers()).toEqual([a.address, b.address].sort());
      expect(store.isHealthy()).toBe(true);

      // A target removed: the node goes (and its client is closed).
      dns.setSrv(SRV, [{ target: '127.0.0.1', port: b.port }]);
      await store.refreshServers();
      expect(store.servers()).toEqual([b.address]);
      expect(await store.increment([op(k1, 1)], Date.now())).toEqual([1]);
    } finally {
      await store.close();
    }
  });

  it('fails start-up when the first lookup fails or the name is not an SRV name', async () => {
    dns.remove(SRV);
    await expect(srvStore(0)).rejects.toThrow(new RegExp(`^MEMCACHE_SRV=${SRV.replace(/\./g, '\\.')}: unable to fetch servers from SRV: `));
    await expect(
      MemcacheStore.create({ settings: settings({ srv: 'memcache.example' }), expirationJitterMaxSeconds: 0, stats: new StatsStore() }),
    ).rejects.toThrow('MEMCACHE_SRV: could not parse "memcache.example" as an SRV name (_service._proto.name)');
  });
});
