/**
 * A memcached that stops answering (SIGSTOP) while traffic keeps coming, as the Redis outage tests
 * do for Redis: every call ends within MEMCACHE_TIMEOUT (plus scheduling slack), as the failure
 * mode says; commands do not pile up on the hung connection; counting resumes after SIGCONT.
 * Steady traffic matters: memjs's own timeout is the socket's idle timeout, which each new write
 * restarts, so only a per-command deadline ends the wait.
 */
import type { MemcacheStore } from '../../../src/backends/memcache/store';
import { StoreError } from '../../../src/core/store';
import { StatsStore } from '../../../src/stats/store';
import { MemcachedServer } from '../../support/memcached';
import { waitFor } from '../../support/wait';
import { createStore, op, stat, uniqueKey } from './helpers';

const TIMEOUT_MS = 500;
/** Scheduling slack on a loaded 2-core CI machine. */
const MARGIN_MS = 400;
/** Calls launched together, and the most of them one test launches. */
const BURST = 5;
const MAX_CALLS = 4000;

interface Call {
  ms: number;
  counts?: number[];
  error?: unknown;
}

/**
 * Launches BURST calls every couple of milliseconds until `more()` says stop (or MAX_CALLS), and
 * resolves with every call's outcome and time once all have settled.
 */
async function steadyTraffic(send: () => Promise<number[]>, more: () => boolean, onBurst: () => void): Promise<Call[]> {
  const pending: Array<Promise<Call>> = [];
  while (more() && pending.length < MAX_CALLS) {
    for (let i = 0; i < BURST; i++) {
      const t0 = Date.now();
      pending.push(
        send().then(
          (counts) => ({ ms: Date.now() - t0, counts }),
          (error: unknown) => ({ ms: Date.now() - t0, error }),
        ),
      );
    }
    onBurst();
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
  return Promise.all(pending);
}

describe('memcache store: a hung memcached (SIGSTOP) under steady traffic', () => {
  let mc: MemcachedServer;
  beforeAll(async () => {
    mc = await MemcachedServer.start();
  });
  afterAll(async () => {
    mc?.resume();
    await mc?.stop();
  });

  test.each([
    ['unset: upstream fail-open, the keys count as 0', undefined],
    ['set: a transient StoreError, for the limiter to apply the mode', 'deny' as const],
  ])('BACKEND_FAILURE_MODE %s; every call ends within MEMCACHE_TIMEOUT, then fails at once until SIGCONT', async (_, failureMode) => {
    const stats = new StatsStore();
    const store = await createStore([mc.address], { stats, timeoutMs: TIMEOUT_MS, failureMode });
    const node = (): ReturnType<MemcacheStore['nodeStates']>[number] => store.nodeStates()[0]!;
    try {
      expect(await store.increment([op(uniqueKey('before'), 1)], Date.now())).toEqual([1]);
      await store.idle();

      await mc.pause();
      const key = uniqueKey('hung');
      let downAtCall = -1;
      let launched = 0;
      let mostInFlightWhileDown = 0;
      const calls = await steadyTraffic(
        () => store.increment([op(key, 2)], Date.now()),
        // Until the node is known down, then 100 calls more.
        () => downAtCall < 0 || launched < downAtCall + 100,
        () => {
          launched += BURST;
          if (downAtCall < 0 && node().up === false) downAtCall = launched;
          if (downAtCall >= 0) mostInFlightWhileDown = Math.max(mostInFlightWhileDown, node().inFlight);
        },
      );

      expect(downAtCall).toBeGreaterThan(0);
      for (const call of calls) {
        expect(call.ms).toBeLessThan(TIMEOUT_MS + MARGIN_MS);
        if (failureMode === undefined) {
          expect(call.counts).toEqual([2]);
        } else {
          expect(call.error).toBeInstanceOf(StoreError);
          expect((call.error as StoreError).transient).toBe(true);
        }
      }
      expect(stat(stats, 'multiget.__code=error')).toBe(calls.length);
      // The first calls waited for the deadline; once the node is known down, requests are not
      // sent to it (at most the health probe waits on it).
      expect(node().lastError).toBe(`memcached ${mc.address} timed out: no answer within ${TIMEOUT_MS} ms`);
      expect(mostInFlightWhileDown).toBeLessThanOrEqual(1);
      if (failureMode !== undefined) {
        const messages = new Set(calls.map((c) => (c.error as Error).message.replace(/\(.*\)/, '(…)')));
        expect([...messages].sort()).toEqual([
          `memcached read failed on ${mc.address}: memcached ${mc.address} is down (…); not asked until it answers a probe`,
          `memcached read failed on ${mc.address}: memcached ${mc.address} timed out: no answer within ${TIMEOUT_MS} ms`,
        ]);
      }

      mc.resume();
      await waitFor(() => node().up === true && store.isHealthy(), 'the node to answer a probe after SIGCONT');
      const after = uniqueKey('after');
      expect(await store.increment([op(after, 1)], Date.now())).toEqual([1]);
      await store.idle();
      expect(await store.increment([op(after, 1)], Date.now())).toEqual([2]);
    } finally {
      mc.resume();
      await store.close();
    }
  });

  test('at most maxInFlightPerNode commands wait on a hung connection; more fail at once, and the waiting ones are answered after SIGCONT', async () => {
    const stats = new StatsStore();
    // No probe (nothing marks the node down) and a long timeout: only the bound limits the queue.
    const store = await createStore([mc.address], { stats, timeoutMs: 30_000, healthCheckIntervalMs: 0, maxInFlightPerNode: 20, failureMode: 'deny' });
    try {
      expect(await store.increment([op(uniqueKey('warm'), 1)], Date.now())).toEqual([1]);
      await store.idle();
      await mc.pause();
      const key = uniqueKey('capped');
      const outcomes: Array<{ counts?: number[]; error?: unknown }> = [];
      const calls = Array.from({ length: 50 }, () =>
        store.increment([op(key, 1)], Date.now()).then(
          (counts) => outcomes.push({ counts }),
          (error: unknown) => outcomes.push({ error }),
        ),
      );
      await waitFor(() => outcomes.length === 30, 'the 30 calls past the bound to fail');
      expect(store.nodeStates()[0]!.inFlight).toBe(20);
      for (const o of outcomes) {
        expect(o.error).toBeInstanceOf(StoreError);
        expect((o.error as StoreError).transient).toBe(true);
        expect((o.error as Error).message).toBe(`memcached read failed on ${mc.address}: memcached ${mc.address}: 20 commands already wait for an answer`);
      }

      mc.resume();
      await Promise.all(calls);
      // The 20 that waited were read once memcached ran again (nothing counted yet: all read 0).
      expect(outcomes.slice(30).map((o) => o.counts)).toEqual(Array.from({ length: 20 }, () => [1]));
      await store.idle();
      expect(store.nodeStates()[0]!.inFlight).toBe(0);
    } finally {
      mc.resume();
      await store.close();
    }
  });
});

describe('memcache store: a stalled process is not a hung memcached', () => {
  test('answers that arrived while the event loop was blocked past MEMCACHE_TIMEOUT are taken, not timed out', async () => {
    const mc = await MemcachedServer.start();
    const store = await createStore([mc.address], { stats: new StatsStore(), timeoutMs: 200, failureMode: 'deny' });
    try {
      const key = uniqueKey('stall');
      expect(await store.increment([op(key, 1)], Date.now())).toEqual([1]);
      await store.idle();
      // The call is sent; then this process stalls (as a CPU-starved or collecting process does)
      // well past the deadline while memcached answers at once.
      const call = store.increment([op(key, 1)], Date.now());
      const until = Date.now() + 600;
      while (Date.now() < until) {
        /* a blocked event loop */
      }
      expect(await call).toEqual([2]);
      expect(store.nodeStates()[0]!.up).toBe(true);
    } finally {
      await store.close();
      await mc.stop();
    }
  });
});
