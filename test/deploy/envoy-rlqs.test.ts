/**
 * envoy/envoy-rlqs.yaml against the rules it claims: every bucket its matchers build (header values
 * filled with samples) is placed on the `example` domain of examples/runtime/ratelimit/config/
 * example.yaml by the service's own placement, and lands on the rule its comment names.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { parse } from 'yaml';
import { loadConfig } from '../../src/config/load';
import { StatsStore } from '../../src/stats/store';
import { ROOT } from './helpers';

type Json = Record<string, unknown>;
const at = (v: unknown, ...keys: string[]): unknown => keys.reduce<unknown>((o, k) => (o as Json | undefined)?.[k], v);

const envoy = parse(fs.readFileSync(path.join(ROOT, 'envoy/envoy-rlqs.yaml'), 'utf8')) as Json;
const exampleFile = path.join(ROOT, 'examples/runtime/ratelimit/config/example.yaml');
const config = loadConfig([{ name: exampleFile, content: fs.readFileSync(exampleFile, 'utf8') }], { mergeDomainConfig: false, stats: new StatsStore() });

const filter = (at(envoy, 'static_resources', 'listeners') as Json[])
  .flatMap((l) => at(l, 'filter_chains') as Json[])
  .flatMap((c) => at(c, 'filters') as Json[])
  .flatMap((f) => at(f, 'typed_config', 'http_filters') as Json[])
  .find((f) => f['name'] === 'envoy.filters.http.rate_limit_quota')!;
const settings = at(filter, 'typed_config') as Json;

/** Sample values for the headers a bucket takes from the request. */
const SAMPLE: Record<string, string> = { 'x-user': 'alice', ':method': 'POST' };

function bucketOf(action: unknown): Map<string, string> {
  const builder = at(action, 'typed_config', 'bucket_id_builder', 'bucket_id_builder') as Record<string, Json>;
  return new Map(
    Object.entries(builder).map(([k, v]) => [k, (v['string_value'] as string | undefined) ?? SAMPLE[at(v, 'custom_value', 'typed_config', 'header_name') as string]!]),
  );
}

const limitOf = (pairs: Map<string, string>) => {
  const d = config.bucketDescriptor('example', pairs);
  const rule = d && config.getLimit('example', d);
  return d === undefined ? 'no descriptor' : rule === undefined ? 'whitelisted' : `${rule.fullKey} ${rule.limit.requestsPerUnit}/${rule.limit.unit}`;
};

test('the filter asks the ratelimit cluster about the example domain', () => {
  expect(settings['@type']).toBe('type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaFilterConfig');
  expect(settings['domain']).toBe('example');
  expect(at(settings, 'rlqs_server', 'envoy_grpc', 'cluster_name')).toBe('ratelimit');
});

test('each bucket lands on the rule its comment names; the catch-all on none (the unmatched default)', () => {
  const matchers = at(settings, 'bucket_matchers', 'matcher_list', 'matchers') as Json[];
  const placed = matchers.map((m) => limitOf(bucketOf(at(m, 'on_match', 'action'))));
  // Units: RLS numbers (1 second, 2 minute, 3 hour, 4 day, 7 week).
  expect(placed).toEqual(['example.user.method_POST 10/2', 'example.path_/api/* 100/1', 'example.plan_free 10000/7']);
  expect(limitOf(bucketOf(at(settings, 'bucket_matchers', 'on_no_match', 'action')))).toBe('no descriptor');
  // Every bucket says Envoy's real cadence (the filter ignores reporting_interval and reports every 5 s),
  // and allows all before its first assignment.
  for (const m of matchers) {
    const b = at(m, 'on_match', 'action', 'typed_config') as Json;
    expect(b['reporting_interval']).toBe('5s');
    expect(at(b, 'no_assignment_behavior', 'fallback_rate_limit', 'blanket_rule')).toBe('ALLOW_ALL');
  }
});
