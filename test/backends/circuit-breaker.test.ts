import { CircuitBreakerStore } from '../../src/backends/circuit-breaker';
import type { CounterOp, CounterStore } from '../../src/core/store';
import { ManualClock } from '../../src/platform/clock';
import { StoreError } from '../../src/core/store';
import { Unit } from '../../src/core/rls';
import { StatsStore } from '../../src/stats/store';
import { rule } from '../limiter/helpers';

/** A store whose next answers the test scripts: 'ok' or an error. */
function scripted() {
  const calls: string[] = [];
  let next: Array<'ok' | StoreError> = [];
  const store: CounterStore = {
    kind: 'scripted',
    increment: () => {
      const r = next.shift() ?? 'ok';
      calls.push(r === 'ok' ? 'ok' : 'err');
      return r === 'ok' ? Promise.resolve([1]) : Promise.reject(r);
    },
    isHealthy: () => true,
    close: () => Promise.resolve(),
  };
  return { store, calls, script: (...r: Array<'ok' | StoreError>) => (next = r) };
}

const stats = new StatsStore();
const ops: CounterOp[] = [{ key: 'k', hits: 1, windowSeconds: 60, rule: rule(stats, 'd.k', 10, Unit.MINUTE) }];
const down = () => new StoreError('connect ECONNREFUSED', true);

describe('circuit breaker', () => {
  test('opens after N transient failures, fails fast, probes after the open period, closes on success', async () => {
    const clock = new ManualClock(0);
    const { store, calls, script } = scripted();
    const changes: boolean[] = [];
    const cb = new CircuitBreakerStore(store, {
      failures: 3,
      openMs: 1000,
      clock,
      opened: stats.counter('cb.opened'),
      onStateChange: (open) => changes.push(open),
    });
    script(down(), down(), down(), down());
    for (let i = 0; i < 3; i++) await expect(cb.increment(ops, 0)).rejects.toThrow('ECONNREFUSED');
    expect(cb.isOpen).toBe(true);
    await expect(cb.increment(ops, 0)).rejects.toThrow(/circuit open after repeated failures: connect ECONNREFUSED/);
    expect(calls).toHaveLength(3);
    clock.advance(1000);
    // The probe fails: open again for another period.
    await expect(cb.increment(ops, 0)).rejects.toThrow('ECONNREFUSED');
    expect(calls).toHaveLength(4);
    await expect(cb.increment(ops, 0)).rejects.toThrow(/circuit open/);
    clock.advance(1000);
    await expect(cb.increment(ops, 0)).resolves.toEqual([1]);
    expect(cb.isOpen).toBe(false);
    expect(changes).toEqual([true, false]);
    expect(stats.counter('cb.opened').value).toBe(1);
  });

  test('only one probe at a time while half open', async () => {
    const clock = new ManualClock(0);
    const { store, script } = scripted();
    const cb = new CircuitBreakerStore(store, { failures: 1, openMs: 10, clock });
    script(down());
    await expect(cb.increment(ops, 0)).rejects.toThrow();
    clock.advance(10);
    const probe = cb.increment(ops, 0);
    await expect(cb.increment(ops, 0)).rejects.toThrow(/circuit open/);
    await expect(probe).resolves.toEqual([1]);
  });

  test('permanent errors and a success reset do not open it; failures 0 disables it', async () => {
    const clock = new ManualClock(0);
    const { store, script } = scripted();
    const cb = new CircuitBreakerStore(store, { failures: 2, openMs: 10, clock });
    script(new StoreError('WRONGTYPE', false), new StoreError('WRONGTYPE', false), down(), 'ok', down());
    for (let i = 0; i < 3; i++) await expect(cb.increment(ops, 0)).rejects.toThrow();
    await cb.increment(ops, 0);
    await expect(cb.increment(ops, 0)).rejects.toThrow('ECONNREFUSED');
    expect(cb.isOpen).toBe(false);
    const off = new CircuitBreakerStore(store, { failures: 0, openMs: 10, clock });
    script(down(), down(), down());
    for (let i = 0; i < 3; i++) await expect(off.increment(ops, 0)).rejects.toThrow('ECONNREFUSED');
    expect(off.isOpen).toBe(false);
  });

  test('a store that throws instead of rejecting ends the probe: the next period probes again', async () => {
    const clock = new ManualClock(0);
    let throwNext = true;
    const store: CounterStore = {
      kind: 'throwing',
      increment: () => {
        if (throwNext) throw new StoreError('thrown', true);
        return Promise.resolve([1]);
      },
      isHealthy: () => true,
      close: () => Promise.resolve(),
    };
    const cb = new CircuitBreakerStore(store, { failures: 1, openMs: 10, clock });
    await expect(cb.increment(ops, 0)).rejects.toThrow('thrown');
    expect(cb.isOpen).toBe(true);
    clock.advance(10);
    await expect(cb.increment(ops, 0)).rejects.toThrow('thrown');
    throwNext = false;
    clock.advance(10);
    await expect(cb.increment(ops, 0)).resolves.toEqual([1]);
    expect(cb.isOpen).toBe(false);
  });
});
