/**
 * Two runners share one budget through a running `ratelimit` (dist/src/cli/ratelimit.js, needs
 * `npx tsc -p tsconfig.json`) on a real redis-server: the calls the simulator sees from both
 * together never exceed the budget.
 */
import fs from 'node:fs';
import path from 'node:path';
import { systemClock } from '../../../../src/platform/clock';
import { BrokerCallBudget, remoteDecider } from '../../../../src/trading/runner/broker/call-budget';
import { LiveEngine } from '../../../../src/trading/runner/engine/live';
import type { Strategy } from '../../../../src/trading/runner/strategy';
import { type RedisServer, startRedis } from '../../../support/redis';
import { baseEnv, runtimeDir, type Service, startService } from '../../../e2e/harness';
import { newClient, startSim, TOKEN, TOKEN2 } from '../../helpers';

const BUNDLED = fs.readFileSync(path.join(__dirname, '../../../../examples/runner/broker-limits.yaml'), 'utf8');
// the bundled limits plus open_trade: 3 per second per account
const CONFIG = BUNDLED.replace(
  '          # ORA-20301 Cmd=24',
  '          - key: endpoint\n            value: open_trade\n            rate_limit: {unit: second, requests_per_unit: 3}\n          # ORA-20301 Cmd=24',
);

describe('two runners, one budget: remote ratelimit on Redis', () => {
  let redis: RedisServer;
  let svc: Service;
  beforeAll(async () => {
    redis = await startRedis();
    const dir = runtimeDir({ 'broker-limits.yaml': CONFIG });
    const env: NodeJS.ProcessEnv = { ...baseEnv(dir.root), REDIS_SOCKET_TYPE: 'tcp', REDIS_URL: redis.address, REDIS_TIMEOUT: '500ms' };
    delete env['BACKEND_TYPE'];
    svc = await startService(env);
  }, 30000);
  afterAll(async () => {
    await svc?.stop();
    await redis?.stop();
  });

  test('combined open_trade calls seen by the simulator stay within 3 per second', async () => {
    const sim = await startSim({ tickIntervalMs: 20 });
    // [before, after] each admitted call: the service decided somewhere in between.
    const times: Array<[number, number]> = [];
    const strategy = (): Strategy<Record<string, unknown>> => ({
      name: 'greedy',
      symbols: ['EUR/USD'],
      async onTick(ctx) {
        try {
          const before = Date.now();
          await ctx.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 10, ttlMs: 50 });
          times.push([before, Date.now()]);
        } catch (e) {
          if ((e as Error).name !== 'IntentExpiredError') throw e;
        }
      },
    });
    const runners = [TOKEN, TOKEN2].map((token) => {
      const limiter = new BrokerCallBudget({ decider: remoteDecider(svc.grpc), account: 'shared-account', clock: systemClock });
      const client = newClient(sim, { token, beforeRequest: limiter.beforeRequest, reconnect: false });
      return { limiter, client, engine: new LiveEngine({ mode: 'paper', strategy: strategy(), client, limiter, durationMs: 2500 }) };
    });
    try {
      await Promise.all(runners.map((r) => r.client.connect()));
      const results = await Promise.all(runners.map((r) => r.engine.run()));
      for (const r of results) expect(r.error).toBeUndefined();
      const n = sim.requestCounts()['/trading/open_trade'] ?? 0;
      const sent = runners.map((r) => r.limiter.budget().find((b) => b.endpoint === 'open_trade')?.sent ?? 0);
      expect(sent[0]! + sent[1]!).toBe(n);
      expect(sent[0]).toBeGreaterThan(0);
      expect(sent[1]).toBeGreaterThan(0);
      // Fixed one-second windows of the service: at most 3 calls per window. A call that began and
      // ended within one wall-clock second was admitted in that second's window (one that
      // straddles an edge may belong to either, so it is counted in neither).
      const perSecond = new Map<number, number>();
      const seconds = new Set<number>();
      for (const [before, after] of times) {
        const s = Math.floor(before / 1000);
        seconds.add(s).add(Math.floor(after / 1000));
        if (Math.floor(after / 1000) === s) perSecond.set(s, (perSecond.get(s) ?? 0) + 1);
      }
      for (const c of perSecond.values()) expect(c).toBeLessThanOrEqual(3);
      expect(n).toBeLessThanOrEqual(3 * (seconds.size + 1));
      expect(runners.some((r) => (r.limiter.budget().find((b) => b.endpoint === 'open_trade')?.expired ?? 0) > 0)).toBe(true);
    } finally {
      for (const r of runners) {
        await r.client.close();
        await r.limiter.close();
      }
      await sim.stop();
    }
  });
});
