/**
 * deploy/observability/ against real components: the alert rules through `promtool check rules`
 * and `promtool test rules` (each alert fires when it should and stays silent when it should
 * not), and the Grafana dashboard against a real Prometheus scraping the built service in worker
 * mode on a real Redis (USE_PROMETHEUS=true) after known traffic (over-limit and shadow-mode hits,
 * an RLQS report, a hung Redis answered by the failure mode, a refused load and a reload): every panel's query, every
 * variable's and the annotation's, with the variables substituted, returns data, and every series
 * a query or an alert names is one the service exports (a Memcached service's scrape is read for
 * the Memcached names). The alert rules load in that Prometheus and evaluate without error.
 */
import fs from 'node:fs';
import path from 'node:path';
import { freePort } from '../support/ports';
import { MemcachedServer } from '../support/memcached';
import { PrometheusServer, promtool } from '../support/prometheus';
import { type RedisServer, startRedis } from '../support/redis';
import { waitFor } from '../support/wait';
import * as grpc from '@grpc/grpc-js';
import { RateLimitQuotaServiceClient } from '../../generated/envoy/service/rate_limit_quota/v3/rlqs';
import { openQuotaStream } from '../support/rlqs-stream';
import { baseEnv, callGrpc, descriptor, grpcClient, httpGet, httpPost, runtimeDir, type Service, startService } from '../e2e/harness';

const DIR = path.resolve(__dirname, '../../deploy/observability');
const ALERTS = path.join(DIR, 'alerts.yaml');

interface Target {
  expr: string;
}
interface Panel {
  type: string;
  title: string;
  datasource?: { uid: string };
  gridPos: { x: number; y: number; w: number; h: number };
  targets?: Target[];
}
interface Dashboard {
  uid: string;
  panels: Panel[];
  templating: { list: Array<{ name: string; type: string; query?: string | { query: string }; allValue?: string }> };
  annotations: { list: Array<{ name: string; expr: string }> };
}
const dashboard = JSON.parse(fs.readFileSync(path.join(DIR, 'dashboard.json'), 'utf8')) as Dashboard;

/** A query as Grafana sends it: the variables substituted (All is the variable's allValue). */
function substituted(expr: string, values: Record<string, string>): string {
  return expr
    .replace(/\$__rate_interval/g, '1m')
    .replace(/\$__interval/g, '15s')
    .replace(/\$\{?(\w+)\}?/g, (whole, name: string) => values[name] ?? whole);
}

/** The series names a PromQL expression reads: the service's own (ratelimit_…), without a histogram's suffix. */
function seriesNames(expr: string): string[] {
  return [...new Set([...expr.matchAll(/\bratelimit_[a-z0-9_]+/g)].map((m) => m[0].replace(/_(bucket|count|sum)$/, '')))];
}

/** The metric families a scrape exposes (from its `# TYPE` lines). */
function exported(scrape: string): Set<string> {
  return new Set([...scrape.matchAll(/^# TYPE (\S+) /gm)].map((m) => m[1]!));
}

/** Every expression of the alert rules file (the `expr:` lines). */
function alertExprs(): Array<{ alert: string; expr: string }> {
  const out: Array<{ alert: string; expr: string }> = [];
  let alert = '';
  for (const line of fs.readFileSync(ALERTS, 'utf8').split('\n')) {
    const a = /^\s+- alert: (\S+)/.exec(line);
    if (a !== null) alert = a[1]!;
    const e = /^\s+expr: (.+)$/.exec(line);
    if (e !== null) out.push({ alert, expr: e[1]! });
  }
  return out;
}

describe('the alert rules', () => {
  test('promtool check rules: valid, every alert with a runbook', () => {
    const r = promtool(['check', 'rules', 'alerts.yaml'], DIR);
    expect(r.out).toContain('SUCCESS: 13 rules found');
    expect(r.code).toBe(0);
    const text = fs.readFileSync(ALERTS, 'utf8');
    const alerts = alertExprs().map((a) => a.alert);
    expect(alerts).toEqual([
      'RateLimitNoRulesLoaded',
      'RateLimitRulesDropped',
      'RateLimitConfigLoadErrors',
      'RateLimitStoreErrors',
      'RateLimitStoreCircuitOpen',
      'RateLimitFailureModeAnswers',
      'RateLimitStoreRefusesCredentials',
      'RateLimitStoreFull',
      'RateLimitCountersMayBeEvicted',
      'RateLimitCountersEvicted',
      'RateLimitRuleNearLimit',
      'RateLimitSlowDecisions',
      'RateLimitWorkerRestarts',
    ]);
    expect(text.match(/^\s+runbook: >-$/gm)).toHaveLength(alerts.length);
  });

  test('promtool test rules: each alert fires on its series and stays silent on the others', () => {
    const r = promtool(['test', 'rules', 'alerts.test.yaml'], DIR);
    expect(r.out).toContain('SUCCESS');
    expect(r.code).toBe(0);
    // Every alert is tested.
    const tests = fs.readFileSync(path.join(DIR, 'alerts.test.yaml'), 'utf8');
    for (const { alert } of alertExprs()) expect(tests).toContain(`alertname: ${alert}\n`);
  });
});

describe('the dashboard', () => {
  test('is importable: a datasource variable every panel uses, domain and rule variables, panels within the grid', () => {
    expect(dashboard.uid).toBe('ratelimit-service');
    expect(dashboard.templating.list.map((v) => [v.name, v.type])).toEqual([
      ['datasource', 'datasource'],
      ['domain', 'query'],
      ['rule', 'query'],
    ]);
    const ids = new Set<number>();
    for (const p of dashboard.panels) {
      expect(p.gridPos.x + p.gridPos.w).toBeLessThanOrEqual(24);
      if (p.type === 'row') continue;
      expect([p.title, p.datasource?.uid]).toEqual([p.title, '${datasource}']);
      expect(p.targets!.length).toBeGreaterThan(0);
      ids.add((p as unknown as { id: number }).id);
    }
    const titles = dashboard.panels.filter((p) => p.type !== 'row').map((p) => p.title);
    for (const needed of [/^Decisions by code/, /^Top rules by denials/, /^Utilisation per rule/, /^Hot keys/, /^p99 decision latency.*20 ms/, /^Store errors and circuit/, /^Failure-mode answers/, /^Loaded rules/, /^RLQS streams and buckets/]) {
      expect(titles.some((t) => needed.test(t))).toBe(true);
    }
    expect(dashboard.annotations.list.map((a) => a.name)).toEqual(['config reloads']);
  });

  describe('against a real Prometheus scraping the service', () => {
    // Windows of a day: the known traffic's counts and gauges stay in one window for the test's
    // length (a minute's window rolled over between the calls and the queries, and the gauges read 0).
    const CONFIG = `
domain: obs
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
`;
    const MORE = `${CONFIG}  - key: path\n    rate_limit: {unit: minute, requests_per_unit: 1000}\n`;
    let redis: RedisServer;
    let svc: Service;
    let prom: PrometheusServer;
    let dir: ReturnType<typeof runtimeDir>;
    let metrics: string;

    beforeAll(async () => {
      redis = await startRedis();
      dir = runtimeDir({ 'obs.yaml': CONFIG });
      const promPort = await freePort();
      metrics = `127.0.0.1:${promPort}`;
      svc = await startService({
        ...baseEnv(dir.root),
        BACKEND_TYPE: 'redis',
        REDIS_SOCKET_TYPE: 'tcp',
        REDIS_URL: redis.address,
        REDIS_TIMEOUT: '200ms',
        BACKEND_FAILURE_MODE: 'allow',
        BACKEND_CIRCUIT_FAILURES: '3',
        WORKERS: '2',
        USE_PROMETHEUS: 'true',
        PROMETHEUS_ADDR: metrics,
      });
      prom = await PrometheusServer.start([metrics], { ruleFiles: [ALERTS] });
    }, 60_000);
    afterAll(async () => {
      await prom?.stop();
      if (svc !== undefined) expect(await svc.stop()).toBe(0);
      await redis?.stop();
      fs.rmSync(dir.base, { recursive: true, force: true });
    });

    /** Rewrites the config file whole (a rename: the watcher never reads half a file). */
    const put = (content: string): void => {
      const tmp = path.join(dir.base, 'obs.yaml.next');
      fs.writeFileSync(tmp, content);
      fs.renameSync(tmp, path.join(dir.configDir, 'obs.yaml'));
    };
    const value = async (expr: string): Promise<number | undefined> => (await prom.query(expr))[0]?.value;

    test('every panel, variable and annotation query returns data; every series named is exported', async () => {
      // Known traffic: alice over her limit of 3 (2 denied) over /json; a shadow-mode rule over its
      // limit of 1 over gRPC (5 let through); an RLQS report.
      for (let i = 0; i < 5; i++) await httpPost(svc.http, '/json', JSON.stringify({ domain: 'obs', descriptors: [{ entries: [{ key: 'user', value: 'alice' }] }] }));
      const client = grpcClient(svc.grpc);
      const quota = new RateLimitQuotaServiceClient(svc.grpc, grpc.credentials.createInsecure());
      const stream = openQuotaStream(quota);
      try {
        for (let i = 0; i < 6; i++) await callGrpc(client, { domain: 'obs', descriptors: [descriptor('trial', 'bob')] });
        stream.report('alice', 0, 1, 'obs');
        expect((await stream.next()).bucketAction[0]!.quotaAssignmentAction).toBeDefined();
        // The store hangs: calls time out (REDIS_TIMEOUT 200 ms), the circuit opens after 3, and
        // BACKEND_FAILURE_MODE=allow answers them.
        redis.pause();
        try {
          for (let i = 0; i < 6; i++) expect((await callGrpc(client, { domain: 'obs', descriptors: [descriptor('user', `hung${i}`)] })).overallCode).toBe(1);
        } finally {
          redis.resume();
        }
        // A refused load, then a reload that adds a rule (a new version: the annotation).
        put('domain: obs\ndescriptors: [\n');
        await waitFor(async () => ((await value('sum(ratelimit_service_config_load_error)')) ?? 0) >= 1, 'the refused load in Prometheus', 30_000);
        put(MORE);
        await waitFor(async () => (await value('max(ratelimit_config_rules)')) === 3, 'the reload in Prometheus', 30_000);
        // Two scrapes after the traffic, so every rate() has its samples.
        await waitFor(async () => ((await value('count_over_time(ratelimit_config_rules[1m])')) ?? 0) >= 3, 'three scrapes', 30_000);
      } finally {
        stream.call.end();
        await stream.ended();
        quota.close();
        client.close();
      }
      expect((await prom.targets()).map((t) => t.health)).toEqual(['up']);

      const scrape = (await httpGet(metrics, '/metrics')).body;
      const names = exported(scrape);
      const queries: Array<[string, string]> = [];
      for (const p of dashboard.panels) for (const t of p.targets ?? []) queries.push([p.title, t.expr]);
      for (const v of dashboard.templating.list) if (typeof v.query === 'object') queries.push([`variable ${v.name}`, v.query.query]);
      for (const a of dashboard.annotations.list) queries.push([`annotation ${a.name}`, a.expr]);

      for (const values of [
        { domain: '.*', rule: '.*' },
        { domain: 'obs', rule: 'user|trial' },
      ]) {
        for (const [title, expr] of queries) {
          const q = substituted(expr, values);
          for (const name of seriesNames(q)) expect([title, name, names.has(name)]).toEqual([title, name, true]);
          // label_values() is Grafana's, not PromQL: its series is checked above.
          if (title.startsWith('variable ')) continue;
          const answer = await prom.query(q);
          expect([title, q, answer.length > 0]).toEqual([title, q, true]);
        }
      }
      // The numbers of the known traffic.
      expect(await value('sum(ratelimit_service_rate_limit_over_limit{domain="obs",key1="user"})')).toBe(2);
      expect(await value('sum(ratelimit_service_rate_limit_shadow_mode{domain="obs",key1="trial"})')).toBe(5);
      expect(await value('max(ratelimit_service_rate_limit_window_used{domain="obs",key1="user"})')).toBe(5);
      expect(await value('max(ratelimit_service_rate_limit_utilization{domain="obs",key1="user"})')).toBeCloseTo(5 / 3, 5);
      expect(await value('sum(ratelimit_service_should_rate_limit_error{err_type="failure_mode_allow"})')).toBe(6);
      expect(await value('sum(ratelimit_service_should_rate_limit_error{err_type="redis_error"})')).toBe(6);
      // The reload's version is the annotation's one series.
      expect((await prom.query(dashboard.annotations.list[0]!.expr)).map((s) => Object.keys(s.metric))).toEqual([['version']]);

      // The alert rules: every series they name is exported (Memcached's below), and they evaluate.
      for (const { alert, expr } of alertExprs()) {
        for (const name of seriesNames(expr)) if (name !== 'ratelimit_memcache_circuit_open') expect([alert, name, names.has(name)]).toEqual([alert, name, true]);
      }
      type Rules = { data: { groups: Array<{ rules: Array<{ name: string; health: string; lastError?: string }> }> } };
      const rules = async (): Promise<Rules['data']['groups'][number]['rules']> => ((await (await fetch(`http://${prom.address}/api/v1/rules`)).json()) as Rules).data.groups.flatMap((g) => g.rules);
      expect((await rules()).map((r) => r.name).sort()).toEqual(alertExprs().map((a) => a.alert).sort());
      await waitFor(async () => (await rules()).every((r) => r.health === 'ok'), 'every alert rule evaluated');
    }, 120_000);
  });

  test('on Memcached the store series the queries name are exported too', async () => {
    const mc = await MemcachedServer.start();
    const dir = runtimeDir({ 'obs.yaml': 'domain: obs\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 3}\n' });
    const port = await freePort();
    const svc = await startService({ ...baseEnv(dir.root), BACKEND_TYPE: 'memcache', MEMCACHE_HOST_PORT: mc.address, USE_PROMETHEUS: 'true', PROMETHEUS_ADDR: `127.0.0.1:${port}`, STATS_FLUSH_INTERVAL: '200ms' });
    try {
      await httpPost(svc.http, '/json', JSON.stringify({ domain: 'obs', descriptors: [{ entries: [{ key: 'user', value: 'a' }] }] }));
      // The single process's sink exports a series from the flush after it first moved.
      await waitFor(async () => exported((await httpGet(`127.0.0.1:${port}`, '/metrics')).body).has('ratelimit_memcache_circuit_open'), 'the Memcached circuit gauge exported');
    } finally {
      expect(await svc.stop()).toBe(0);
      await mc.stop();
      fs.rmSync(dir.base, { recursive: true, force: true });
    }
  });
});
