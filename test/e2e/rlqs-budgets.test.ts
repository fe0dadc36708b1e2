/**
 * RLQS admission end to end on the running service (on the default transport, and on grpc-js in
 * the second pass of the suite): a stream over RLQS_MAX_BUCKETS_PER_STREAM is ended with
 * RESOURCE_EXHAUSTED naming it, in one report or in several.
 */
import * as grpc from '@grpc/grpc-js';
import { RateLimitQuotaServiceClient, type RateLimitQuotaResponse, type RateLimitQuotaUsageReports } from '../../generated/envoy/service/rate_limit_quota/v3/rlqs';
import { baseEnv, runtimeDir, startService, type Service } from './harness';

const CONFIG = `domain: gw
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 100}
`;

let svc: Service;
const clients: RateLimitQuotaServiceClient[] = [];

/** A client on its own HTTP/2 connection (grpc-js shares one between clients of the same options otherwise). */
function connection(): RateLimitQuotaServiceClient {
  const c = new RateLimitQuotaServiceClient(svc.grpc, grpc.credentials.createInsecure(), { 'grpc.use_local_subchannel_pool': 1 });
  clients.push(c);
  return c;
}

beforeAll(async () => {
  const dirs = runtimeDir({ 'gw.yaml': CONFIG });
  svc = await startService({ ...baseEnv(dirs.root), RLQS_MAX_BUCKETS_PER_STREAM: '50' });
});

afterAll(async () => {
  for (const c of clients) c.close();
  await svc?.stop();
});

/** A report of users `from`..`to - 1`, each one allowed request. */
const users = (from: number, to: number): RateLimitQuotaUsageReports => ({
  domain: 'gw',
  bucketQuotaUsages: Array.from({ length: to - from }, (_, i) => ({
    bucketId: { bucket: { user: `u${from + i}` } },
    timeElapsed: { seconds: 0n, nanos: 0 },
    numRequestsAllowed: 1n,
    numRequestsDenied: 0n,
  })),
});

/** A stream: its responses as they come, and its status once it ends. */
function stream(client: RateLimitQuotaServiceClient) {
  const call = client.streamRateLimitQuotas();
  const responses: RateLimitQuotaResponse[] = [];
  call.on('data', (r: RateLimitQuotaResponse) => responses.push(r));
  call.on('error', () => undefined); // the status event carries it
  const ended = new Promise<grpc.StatusObject>((resolve) => call.on('status', resolve));
  return { call, responses, ended };
}

test.each([
  ['one report of 60 buckets', [[0, 60]]],
  ['reports of 20 buckets adding up to 60', [[0, 20], [20, 40], [40, 60]]],
])('a stream over RLQS_MAX_BUCKETS_PER_STREAM (50) ends RESOURCE_EXHAUSTED naming it: %s', async (_name, reports) => {
  const s = stream(connection());
  for (const [from, to] of reports) s.call.write(users(from!, to!));
  const st = await s.ended;
  expect(st.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
  expect(st.details).toContain('RLQS_MAX_BUCKETS_PER_STREAM');
});
