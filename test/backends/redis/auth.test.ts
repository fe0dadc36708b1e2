/**
 * Refused credentials are named as such: Redis restarted with a new password (and one that
 * wants a password when none is sent). Every call then fails at once with an error that says so
 * (not transient: retrying or opening a circuit changes nothing), the log says it once however
 * often the connections retry, `ratelimit.redis.auth_failed` is 1 and, with
 * REDIS_HEALTH_CHECK_ACTIVE_CONNECTION, health is down; all of it ends when the password matches.
 */
import { StoreError } from '../../../src/core/store';
import { systemClock } from '../../../src/platform/clock';
import { StatsStore } from '../../../src/stats/store';
import { startRedis, type RedisServer } from '../../support/redis';
import { waitFor } from '../../support/wait';
import { connectStore, op, recordingLogger, redisSettings, timed, uniqueKey } from './helpers';

const TIMEOUT_MS = 500;


describe('redis store: refused credentials', () => {
  const servers: RedisServer[] = [];
  afterEach(async () => {
    await Promise.all(servers.splice(0).map((s) => s.stop()));
  });

  it('a restart with a new password: named once, every call refused at once, health down, all back when it matches', async () => {
    const first = await startRedis({ password: 'old-pw' });
    servers.push(first);
    const logger = recordingLogger();
    const stats = new StatsStore();
    const store = await connectStore(
      redisSettings({ url: first.address, auth: 'old-pw', timeoutMs: TIMEOUT_MS, poolSize: 3, healthCheckActiveConnection: true }),
      { logger, stats, circuit: { failures: 2, openMs: 200, clock: systemClock } },
    );
    const health: boolean[] = [];
    store.onHealthChange((h) => health.push(h));
    const said = (what: RegExp) => logger.lines.filter((l) => what.test(l.msg));
    try {
      const key = uniqueKey('auth');
      expect(await store.increment([op(key)], 0)).toEqual([1]);

      // Same port, new password.
      await first.kill();
      const second = await startRedis({ port: first.port, password: 'new-pw' });
      servers.push(second);
      await waitFor(() => stats.gauge('ratelimit.redis.auth_failed').value === 1, 'the refusal to be seen');
      // The pool keeps retrying (each refusal is a debug line); say it once all the same.
      const refusals = () => logger.lines.filter((l) => l.level === 'debug' && /WRONGPASS/.test(l.msg)).length;
      const seen = refusals();
      await waitFor(() => refusals() >= seen + 3, 'more refused attempts');
      expect(said(/credentials/)).toEqual([
        {
          level: 'error',
          msg: `redis: ${first.address} refuses our credentials (WRONGPASS invalid username-password pair or user is disabled.): every call fails until REDIS_AUTH matches the server's password`,
        },
      ]);
      expect(store.isHealthy()).toBe(false);
      expect(health).toEqual([false]);
      for (let i = 0; i < 5; i++) {
        const r = await timed(store.increment([op(key)], 0));
        expect(r.error).toBeInstanceOf(StoreError);
        expect((r.error as StoreError).message).toBe('redis authentication failed: WRONGPASS invalid username-password pair or user is disabled.');
        expect((r.error as StoreError).transient).toBe(false);
        expect(r.ms).toBeLessThan(TIMEOUT_MS / 2);
      }
      // Not a store that stopped answering: no circuit opens.
      expect(stats.counter('ratelimit.redis.circuit_opened').value).toBe(0);

      // The password matches again: one line, the gauge down, health up, counting resumes.
      await second.cli(['CONFIG', 'SET', 'requirepass', 'old-pw']);
      await waitFor(() => store.isHealthy(), 'the store to authenticate again', 10_000);
      expect(said(/accepts our credentials again/)).toEqual([{ level: 'info', msg: `redis: ${first.address} accepts our credentials again` }]);
      expect(stats.gauge('ratelimit.redis.auth_failed').value).toBe(0);
      expect(health).toEqual([false, true]);
      expect(await store.increment([op(key)], 0)).toEqual([1]);
    } finally {
      await store.close();
    }
  }, 30_000);

  it('a server that starts wanting a password when none is sent is named NOAUTH, with the same hint', async () => {
    const server = await startRedis();
    servers.push(server);
    const logger = recordingLogger();
    const stats = new StatsStore();
    const store = await connectStore(redisSettings({ url: server.address, timeoutMs: TIMEOUT_MS, poolSize: 1 }), { logger, stats });
    try {
      await server.cli(['CONFIG', 'SET', 'requirepass', 'now-pw']);
      await server.cli(['-a', 'now-pw', '--no-auth-warning', 'CLIENT', 'KILL', 'TYPE', 'normal']);
      await waitFor(() => stats.gauge('ratelimit.redis.auth_failed').value === 1, 'the refusal to be seen');
      const lines = logger.lines.filter((l) => /credentials/.test(l.msg));
      expect(lines).toEqual([{ level: 'error', msg: expect.stringMatching(/^redis: 127\.0\.0\.1:\d+ refuses our credentials \(.*NOAUTH.*\): every call fails until REDIS_AUTH matches/) }]);
      const r = await timed(store.increment([op(uniqueKey('noauth'))], 0));
      expect((r.error as StoreError).message).toMatch(/^redis authentication failed: .*NOAUTH/);
    } finally {
      await store.close();
    }
  });
});
