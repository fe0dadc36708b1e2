/**
 * RLQS across replicas: two services on one Redis divide one limit among the Envoys of both
 * (each sees the other's demand through Redis); while Redis hangs, each still answers, dividing
 * among its own streams once the other's entry has expired (5 s), and the division is global
 * again once Redis is back.
 */
import * as grpc from '@grpc/grpc-js';
import { RateLimitQuotaServiceClient } from '../../generated/envoy/service/rate_limit_quota/v3/rlqs';
import { type RedisServer, startRedis } from '../support/redis';
import { openQuotaStream, tokensPerSecond } from '../support/rlqs-stream';
import { quietFor, waitFor } from '../support/wait';
import { baseEnv, runtimeDir, startService, type Service } from './harness';

const CONFIG = 'domain: gw\ndescriptors:\n  - key: api\n    value: search\n    rate_limit: {unit: second, requests_per_unit: 100}\n';

let redis: RedisServer;
let replicas: Service[] = [];
let clients: RateLimitQuotaServiceClient[] = [];

beforeAll(async () => {
  redis = await startRedis();
  const { root } = runtimeDir({ 'gw.yaml': CONFIG });
  const env: NodeJS.ProcessEnv = { ...baseEnv(root), REDIS_SOCKET_TYPE: 'tcp', REDIS_URL: redis.address, REDIS_TIMEOUT: '300ms' };
  delete env['BACKEND_TYPE'];
  replicas = await Promise.all([startService(env), startService(env)]);
  clients = replicas.map((r) => new RateLimitQuotaServiceClient(r.grpc, grpc.credentials.createInsecure()));
});

afterAll(async () => {
  for (const c of clients) c.close();
  await Promise.all(replicas.map((r) => r.stop()));
  await redis?.stop();
});

test('two replicas on one Redis divide one limit by the demand of the Envoys of both; a hung Redis falls back to each replica', async () => {
  const [a, b] = [openQuotaStream(clients[0]!), openQuotaStream(clients[1]!)];
  a.report('search', 0, 1);
  b.report('search', 0, 1);
  await Promise.all([a.next(), b.next()]);
  // a asks 60 a second through replica 1, b 20 through replica 2; an assignment is sent when it
  // changes, so report until both hold the divided one.
  await waitFor(
    async () => {
      a.report('search', 1, 60);
      b.report('search', 1, 20);
      await quietFor(600); // the next report, paced (the service measures demand over half a second at least)
      return a.rate() + b.rate() <= 100 && a.rate() > 2 * b.rate() && b.rate() >= 10;
    },
    'the two replicas to divide the limit by demand',
  );

  // Redis hangs: each replica still answers (after REDIS_TIMEOUT), from its own streams only.
  redis.pause();
  try {
    await waitFor(
      async () => {
        a.report('search', 1, 60);
        await quietFor(400); // paced reports; the other replica's entry expires 5 s after its last exchange
        return a.rate() === 100;
      },
      'replica 1 to divide among its own streams',
      15_000,
    );
  } finally {
    redis.resume();
  }
  expect(replicas[0]!.output()).toContain('RLQS: Redis does not answer');
  await waitFor(
    async () => {
      a.report('search', 1, 60);
      b.report('search', 1, 20);
      await quietFor(600); // the next report, paced (the service measures demand over half a second at least)
      return a.rate() + b.rate() <= 100;
    },
    'the division to be global again',
    // Both replicas must exchange again and each push a changed share: a few seconds, more on a
    // loaded CI machine running two services beside the suite (10 s was passed once).
    20_000,
  );
  expect(replicas[0]!.output()).toContain('RLQS: Redis answers again');
  a.call.end();
  b.call.end();
  await Promise.all([a.ended(), b.ended()]);
  // Its waits add up to 45 s at most (10 + 15 + 20), above Jest's default of 30.
}, 60_000);
