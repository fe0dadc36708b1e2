/**
 * Sentinel switch-overs under load, against a master, a replica and three sentinels: the store
 * follows the sentinels' events, so its writes leave the old master as soon as the replica being
 * promoted reports the master role, its pool is on the new master within a second of
 * `+switch-master`, and nothing more reaches the old one (a planned `SENTINEL FAILOVER` leaves it
 * up, accepting writes, for some 10 s). Counts are checked per counter after each switch: every
 * increment acknowledged and not found on the new master was counted in
 * `ratelimit.redis.increments_maybe_lost` (planned), or is one of the few the kill took before
 * the replica had it (kill -9, which nothing can count).
 */
import type { RedisConnection } from '../../../src/backends/redis/connection';
import type { RedisStore } from '../../../src/backends/redis/store';
import { systemClock } from '../../../src/platform/clock';
import { StatsStore } from '../../../src/stats/store';
import type { Logger } from '../../../src/telemetry/logger';
import { commandStats, parseInfo, startSentinelSet, type RedisServer, type SentinelSet } from '../../support/redis';
import { waitFor } from '../../support/wait';
import { connectStore, op, redisSettings, uniqueKey } from './helpers';

const KEYS = 40;
const POOL = 3;

let set: SentinelSet;

beforeAll(async () => {
  set = await startSentinelSet();
}, 60_000);

afterAll(async () => {
  await set?.stop();
});

interface Line {
  level: string;
  msg: string;
  at: number;
}

function timedLogger(): Logger & { lines: Line[] } {
  const lines: Line[] = [];
  const at = (level: string) => (msg: string) => void lines.push({ level, msg, at: Date.now() });
  return { lines, debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error'), enabled: () => false };
}

/** Two loops of calls over the keys; each acknowledged increment is counted per key. */
function load(store: RedisStore, keys: string[]) {
  const acked = new Array<number>(keys.length).fill(0);
  let failed = 0;
  let stopped = false;
  let next = 0;
  const loops = [0, 1].map(async () => {
    while (!stopped) {
      const i = next++ % keys.length;
      try {
        await store.increment([op(keys[i]!, 1, 3600)], 0);
        acked[i]!++;
      } catch {
        failed++;
      }
      await new Promise((resolve) => setTimeout(resolve, 1));
    }
  });
  return {
    acked,
    total: () => acked.reduce((a, b) => a + b, 0),
    failed: () => failed,
    stop: async () => {
      stopped = true;
      await Promise.all(loops);
    },
  };
}

/** Per key, the increments acknowledged that the master does not have. */
async function lost(master: RedisServer, keys: string[], acked: number[]): Promise<number> {
  let n = 0;
  for (let i = 0; i < keys.length; i++) {
    const v = Number((await master.cli(['GET', keys[i]!])).trim() || 0);
    if (acked[i]! > v) n += acked[i]! - v;
  }
  return n;
}

const mainOf = (s: RedisStore): RedisConnection => (s as unknown as { main: RedisConnection }).main;

describe('redis store in sentinel mode: switch-overs under load', () => {
  let store: RedisStore;
  let logger: ReturnType<typeof timedLogger>;
  const stats = new StatsStore();
  const said = (what: RegExp) => logger.lines.filter((l) => what.test(l.msg));
  /** Waits for the `n`th "all connections on the new master"; a timeout shows what the store said. */
  const poolMoved = async (n: number, since: number): Promise<void> => {
    try {
      await waitFor(() => said(/all \d+ connections on the new master/).length === n, 'the pool on the new master', 20_000);
    } catch (err) {
      const lines = logger.lines.filter((l) => l.at >= since).map((l) => `${l.at - since} ms ${l.level} ${l.msg}`);
      throw new Error(`${(err as Error).message}; the store said:\n${lines.join('\n')}`);
    }
  };

  beforeAll(async () => {
    logger = timedLogger();
    store = await connectStore(redisSettings({ type: 'sentinel', url: set.url, timeoutMs: 500, poolSize: POOL }), {
      logger,
      stats,
      circuit: { failures: 5, openMs: 300, clock: systemClock },
    });
    await waitFor(() => mainOf(store).sentinelsListening === 3, 'the store to listen to the three sentinels', 20_000);
  });

  afterAll(async () => {
    await store?.close();
  });

  it('a planned SENTINEL FAILOVER: the pool moves within a second of +switch-master, the old master gets no more writes, each lost increment was counted', async () => {
    const keys = Array.from({ length: KEYS }, (_, i) => uniqueKey(`planned${i}`));
    const old = await set.master();
    const events = await set.events();
    const calls = load(store, keys);
    try {
      await waitFor(() => calls.total() >= 200, 'calls before the switch');
      const began = Date.now();
      const promoted = await set.switchOver();
      expect(promoted).not.toBe(old);
      const switched = await events.next('+switch-master');
      await poolMoved(1, began);
      const moved = said(/all \d+ connections on the new master/)[0]!;
      expect(moved.msg).toContain(`on the new master ${promoted.address},`);
      // The switch announced by the sentinels to writes on the new master.
      expect(moved.at - switched.at).toBeLessThan(1000);

      // From now on the old master (still up, still a master for a while) gets nothing.
      const oldIncrby = (await commandStats(old))['incrby'] ?? 0;
      const atMove = calls.total();
      await waitFor(() => calls.total() >= atMove + 300, 'calls after the move');
      expect(parseInfo(await old.cli(['INFO', 'replication']))['role']).toBeDefined();
      expect((await commandStats(old))['incrby'] ?? 0).toBe(oldIncrby);
    } finally {
      await calls.stop();
      events.stop();
    }
    const master = await set.master();
    const missing = await lost(master, keys, calls.acked);
    // Every increment the new master lacks was counted as maybe lost (the count is an upper bound).
    expect(missing).toBeLessThanOrEqual(stats.counter('ratelimit.redis.increments_maybe_lost').value);
    expect(stats.counter('ratelimit.redis.master_switches').value).toBe(1);
    expect(said(/began promoting 127\.0\.0\.1:\d+ in place of mymaster/)).toHaveLength(1);
    expect(said(/reports the master role: writing to it until the sentinels announce the switch/)).toHaveLength(1);
    expect(said(/mymaster is now/)).toEqual([
      expect.objectContaining({ level: 'info', msg: expect.stringMatching(new RegExp(`^redis: \\+switch-master from sentinel 127\\.0\\.0\\.1:\\d+: mymaster is now ${master.address.replace(/\./g, '\\.')}; moving ${POOL} of ${POOL} connections to it$`)) }),
    ]);
    expect(said(/lost \d+ of/)).toEqual([]);
    const maybe = stats.counter('ratelimit.redis.increments_maybe_lost').value;
    expect(said(/acknowledged by the old master after/)).toHaveLength(maybe > 0 ? 1 : 0);
    // The writes left the old master when the replica reported the master role, not a second
    // later at +switch-master: a few dozen increments at this rate, not the ~1,000 of a second.
    expect(maybe).toBeLessThan(300);
  }, 90_000);

  it('a kill -9 of the master: the pool moves within a second of +switch-master, and no increment acknowledged after the kill is lost', async () => {
    const master = await set.master();
    const replica = set.servers.find((s) => s !== master)!;
    // After the planned switch the old master becomes a replica of the new one (the sentinels do it some 10 s later).
    await waitFor(async () => {
        const r = parseInfo(await replica.cli(['INFO', 'replication']));
        return r['role'] === 'slave' && r['master_link_status'] === 'up';
      }, 'the other node to be a synced replica', 40_000);
    const keys = Array.from({ length: KEYS }, (_, i) => uniqueKey(`killed${i}`));
    const events = await set.events();
    const before = said(/all \d+ connections on the new master/).length;
    const calls = load(store, keys);
    let promoted: RedisServer;
    let atKill: number[] = [];
    try {
      await waitFor(() => calls.total() >= 200, 'calls before the kill');
      const began = Date.now();
      promoted = await set.failover(() => (atKill = calls.acked.slice()));
      const switched = await events.next('+switch-master');
      await poolMoved(before + 1, began);
      const moved = said(/all \d+ connections on the new master/)[before]!;
      expect(moved.msg).toContain(`on the new master ${promoted.address},`);
      expect(moved.at - switched.at).toBeLessThan(1000);
      const atMove = calls.total();
      await waitFor(() => calls.total() >= atMove + 300, 'calls after the move');
    } finally {
      await calls.stop();
      events.stop();
    }
    // What the kill takes is what the master had acknowledged and not yet sent to the replica
    // (bench/redis-failover.js measures it); every increment acknowledged after the kill (on the
    // promoted node, first on a connection of its own, then through the moved pool) is there.
    const after = calls.acked.map((n, i) => n - atKill[i]!);
    expect(await lost(promoted, keys, after)).toBe(0);
    expect(after.reduce((a, b) => a + b, 0)).toBeGreaterThanOrEqual(300);
    expect(stats.counter('ratelimit.redis.master_switches').value).toBe(2);
    // The old master is dead: that pool loss is said once, as any outage.
    expect(said(/lost \d+ of \d+ connections/).length).toBeLessThanOrEqual(1);
    await set.servers.find((s) => s !== promoted)!.restart();
  }, 120_000);

  it('a switch announced after the pool reconnected to the new master on its own is still counted and said', async () => {
    // After a kill the pool's reconnections ask the sentinels, and the leader names the promoted
    // node before its +switch-master reaches us; on a loaded machine the whole pool can get there
    // first. That order cannot be made on demand: the store is put in its state (the switch not
    // yet heard, the pool on the master) and told of the switch.
    const main = mainOf(store) as unknown as { masterTarget: string; switchTo(address: string, via: string): void };
    const master = await set.master();
    await waitFor(() => mainOf(store).readyConnections === POOL, 'the pool ready');
    const switches = stats.counter('ratelimit.redis.master_switches').value;
    main.masterTarget = '127.0.0.1:1';
    main.switchTo(master.address, '+switch-master from sentinel (the test)');
    expect(stats.counter('ratelimit.redis.master_switches').value).toBe(switches + 1);
    expect(said(/reconnected through the sentinels before the switch was announced/).map((l) => l.msg)).toEqual([
      `redis: +switch-master from sentinel (the test): mymaster is now ${master.address}; all ${POOL} connections on the new master ${master.address}, reconnected through the sentinels before the switch was announced`,
    ]);
    // The same address again is no new switch.
    main.switchTo(master.address, '+switch-master from another sentinel');
    expect(stats.counter('ratelimit.redis.master_switches').value).toBe(switches + 1);
  });
});
