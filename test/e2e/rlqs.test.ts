/**
 * RLQS end to end on the running service (on the default transport, and on grpc-js in the
 * second pass of the suite): a stream's first report is answered with a token bucket from the YAML rule,
 * two streams divide the limit by demand, a config change abandons a bucket whose rule is gone,
 * and a bad report ends the stream with INVALID_ARGUMENT naming why.
 */
import fs from 'node:fs';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { RateLimitQuotaServiceClient, type RateLimitQuotaResponse } from '../../generated/envoy/service/rate_limit_quota/v3/rlqs';
import { openQuotaStream } from '../support/rlqs-stream';
import { quietFor, waitFor } from '../support/wait';
import { baseEnv, httpGet, runtimeDir, startService, type Service } from './harness';

const CONFIG = `domain: gw
descriptors:
  - key: api
    value: search
    rate_limit: {unit: second, requests_per_unit: 100}
  - key: api
    value: export
    rate_limit: {unit: minute, requests_per_unit: 6}
`;

let svc: Service;
let configDir: string;
let client: RateLimitQuotaServiceClient;

beforeAll(async () => {
  const dirs = runtimeDir({ 'gw.yaml': CONFIG });
  configDir = dirs.configDir;
  svc = await startService({ ...baseEnv(dirs.root), RUNTIME_WATCH_ROOT: 'false' });
  client = new RateLimitQuotaServiceClient(svc.grpc, grpc.credentials.createInsecure());
});

afterAll(async () => {
  client?.close();
  await svc?.stop();
});

const bucketOf = (r: RateLimitQuotaResponse) => r.bucketAction[0]!;

test("a bucket's first report gets a token bucket at once: whole tokens per whole seconds (half the limit until a rate is reported), living four of Envoy's 5 s intervals", async () => {
  const s = openQuotaStream(client);
  s.report('search', 0, 1);
  const r = await s.next();
  expect(bucketOf(r).bucketId).toEqual({ bucket: { api: 'search' } });
  expect(bucketOf(r).quotaAssignmentAction).toMatchObject({
    assignmentTimeToLive: { seconds: 20n, nanos: 0 },
    rateLimitStrategy: { tokenBucket: { maxTokens: 10, tokensPerFill: 500, fillInterval: { seconds: 10n, nanos: 0 } } },
  });
  s.call.end();
  expect((await s.ended()).code).toBe(grpc.status.OK);
});

test('two streams divide the limit by their demand', async () => {
  const [a, b] = [openQuotaStream(client), openQuotaStream(client)];
  a.report('export', 0, 1);
  await a.next();
  b.report('export', 0, 1);
  await b.next();
  // An equal split at first (each holding half its part until it reports a rate); then a asks,
  // b reports no request: b keeps one token, a gets the rest.
  await waitFor(() => a.rate() === b.rate(), 'an equal split');
  expect(a.rate() + b.rate()).toBeCloseTo(6 / 60 / 2, 12);
  // The service measures demand on its own clock: reports are paced as Envoy paces them (here 0.6 s, not 5 s).
  await waitFor(
    async () => {
      a.report('export', 1, 3);
      b.report('export', 1, 0);
      await quietFor(600);
      return a.rate() > b.rate();
    },
    'a larger share for the stream with demand',
  );
  expect(a.rate() + b.rate()).toBeCloseTo(6 / 60, 12);
  a.call.end();
  b.call.end();
  await Promise.all([a.ended(), b.ended()]);
});

test('a config change that removes a rule abandons its buckets', async () => {
  const s = openQuotaStream(client);
  s.report('search', 0, 1);
  await s.next();
  fs.writeFileSync(path.join(configDir, 'gw.yaml'), CONFIG.replace(/ {2}- key: api\n {4}value: search\n.*\n/, ''));
  const r = await s.next();
  expect(r.bucketAction).toEqual([{ bucketId: { bucket: { api: 'search' } }, abandonAction: {} }]);
  fs.writeFileSync(path.join(configDir, 'gw.yaml'), CONFIG);
  await waitFor(async () => (await httpGet(svc.debug, '/rlconfig')).body.includes('gw.api_search'), 'the config to be back');
  s.call.end();
  await s.ended();
});

test('a report without a domain ends the stream with INVALID_ARGUMENT and the reason', async () => {
  const s = openQuotaStream(client);
  s.report('search', 0, 1, '');
  const st = await s.ended();
  expect(st.code).toBe(grpc.status.INVALID_ARGUMENT);
  expect(st.details).toBe('the first usage report of a stream must name its domain');
});

test('the debug port shows the live buckets and explains a bucket; /stats counts streams, assignments and what Envoy reported per rule', async () => {
  const allowedSoFar = async () => Number(/ratelimit\.service\.rate_limit\.gw\.api_search\.rlqs_allowed: (\d+)/.exec((await httpGet(svc.debug, '/stats')).body)?.[1] ?? 0);
  const before = await allowedSoFar();
  const s = openQuotaStream(client);
  s.report('search', 0, 1);
  await s.next();
  s.report('search', 1, 42);
  await waitFor(async () => (await allowedSoFar()) === before + 43, 'the reported usage on the rule');
  const live = (await httpGet(svc.debug, '/debug/rlqs')).body;
  expect(live).toMatch(/stream \S+ domain 'gw': 1 buckets/);
  expect(live).toMatch(/\[\["api","search"\]\]: demand .*assigned token bucket \(max \d+, \d+ tokens every 10 s\) for 20 s/);
  const why = await httpGet(svc.debug, '/debug/explain?domain=gw&bucket=api=search');
  expect(why.status).toBe(200);
  expect(why.body).toContain('descriptor: api=search');
  expect(why.body).toContain('rule gw.api_search: 100 per 1 s, divided among the streams that report it');
  expect(why.body).toMatch(/stream \S+: \[\["api","search"\]\]: demand/);
  expect((await httpGet(svc.debug, '/debug/explain?domain=gw&bucket=colour=red')).body).toContain('no descriptor takes it: allow-all for 10 s');
  const stats = (await httpGet(svc.debug, '/stats')).body;
  expect(stats).toMatch(/ratelimit\.rlqs\.streams: [1-9]/);
  expect(stats).toMatch(/ratelimit\.rlqs\.assignments: [1-9]/);
  expect(stats).toContain('ratelimit_server.StreamRateLimitQuotas.total_requests:');
  expect(stats).toMatch(/ratelimit\.rlqs\.stream_errors: [1-9]/); // the stream without a domain, above
  s.call.end();
  await s.ended();
});
