import net from 'node:net';
import type { CounterOp } from '../../../src/core/store';
import { MemcacheStore, type MemcacheStoreOptions } from '../../../src/backends/memcache/store';
import { Unit } from '../../../src/core/rls';
import type { MemcacheSettings } from '../../../src/settings/settings';
import { StatsStore } from '../../../src/stats/store';
import { rule } from '../../limiter/helpers';

const ruleStats = new StatsStore();
const r = rule(ruleStats, 'd.k', 10, Unit.MINUTE);

export function op(key: string, hits = 1, windowSeconds = 60): CounterOp {
  return { key, hits, windowSeconds, rule: r };
}

export function settings(over: Partial<MemcacheSettings> = {}): MemcacheSettings {
  return {
    hostPorts: [],
    srv: '',
    srvRefreshMs: 0,
    maxIdleConns: 2,
    timeoutMs: 500,
    tls: { enabled: false, clientCertFile: '', clientKeyFile: '', caCertFile: '', skipHostnameVerification: false },
    ...over,
  };
}

export type TestStoreOptions = Partial<Omit<MemcacheStoreOptions, 'settings'>> & { settings?: Partial<MemcacheSettings> };

/**
 * A store with no jitter and its own stats; closed by the caller. Its MEMCACHE_TIMEOUT is generous
 * (a loaded 2-core CI machine can keep memcached from answering for hundreds of ms, and a late
 * answer drops the increment): tests of the timeout pass their own.
 */
export function createStore(hostPorts: string[], o: TestStoreOptions = {}): Promise<MemcacheStore> {
  const { settings: s, ...rest } = o;
  return MemcacheStore.create({
    expirationJitterMaxSeconds: 0,
    stats: new StatsStore(),
    timeoutMs: 5000,
    healthCheckIntervalMs: 100,
    ...rest,
    settings: settings({ hostPorts, ...s }),
  });
}

/** A counter's value by its full name. */
export function stat(stats: StatsStore, name: string): number {
  return stats.counter(`ratelimit.memcache.${name}`).value;
}

let seq = 0;
/** A key unique to this process and call, so tests sharing a server never collide. */
export function uniqueKey(label: string): string {
  return `test_${process.pid}_${Date.now()}_${seq++}_${label}`;
}

/**
 * A TCP proxy in front of memcached that runs `beforeAdd(key)` (e.g. another writer adding the
 * key) before it forwards a binary-protocol ADD: the lost add race, made deterministic.
 */
export async function addRaceProxy(
  upstreamPort: number,
  beforeAdd: (key: string) => Promise<void>,
): Promise<{ address: string; close(): Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(upstreamPort, '127.0.0.1');
    sockets.add(client).add(upstream);
    client.on('error', () => upstream.destroy());
    upstream.on('error', () => client.destroy());
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
    upstream.pipe(client);
    // Client → memcached: frame requests (24-byte header + body), hold each ADD for the hook.
    let buf = Buffer.alloc(0);
    let chain = Promise.resolve();
    client.on('data', (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      while (buf.length >= 24) {
        const total = 24 + buf.readUInt32BE(8);
        if (buf.length < total) break;
        const frame = buf.subarray(0, total);
        buf = buf.subarray(total);
        const opcode = frame[1]!;
        const key = frame.toString('utf8', 24 + frame[4]!, 24 + frame[4]! + frame.readUInt16BE(2));
        chain = chain.then(async () => {
          if (opcode === 0x02) await beforeAdd(key);
          upstream.write(frame);
        });
      }
    });
  });
  await new Promise<void>((res) => server.listen(0, '127.0.0.1', () => res()));
  return {
    address: `127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise((res) => server.close(res));
    },
  };
}
