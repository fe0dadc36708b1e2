/**
 * End to end: stats reach a real statsd (TCP, as upstream) and a Prometheus scrape under
 * upstream's names, and spans reach an OTLP receiver with the caller's trace as parent.
 */
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import * as grpc from '@grpc/grpc-js';
import { baseEnv, callGrpc, descriptor, grpcClient, httpGet, runtimeDir, startService } from './harness';
import { freePort } from '../support/ports';
import { waitFor } from '../support/wait';

const CONFIG = 'domain: obs\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 2}\n';

/** The sum of the counter lines `name:N|c` received. */
function counted(received: string, name: string): number {
  let sum = 0;
  for (const m of received.matchAll(new RegExp(`^${name.replace(/\./g, '\\.')}:(\\d+)\\|c$`, 'gm'))) sum += Number(m[1]);
  return sum;
}

test('statsd over TCP receives upstream\'s counter, timer and rule lines', async () => {
  let received = '';
  const server = net.createServer((socket) => socket.on('data', (d) => (received += d.toString())));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as net.AddressInfo).port;
  const dir = runtimeDir({ 'obs.yaml': CONFIG });
  const env: NodeJS.ProcessEnv = { ...baseEnv(dir.root), STATSD_HOST: '127.0.0.1', STATSD_PORT: String(port), STATS_FLUSH_INTERVAL: '100ms' };
  delete env['USE_STATSD'];
  const svc = await startService(env);
  try {
    const client = grpcClient(svc.grpc);
    for (let i = 0; i < 3; i++) await callGrpc(client, { domain: 'obs', descriptors: [descriptor('k', 'v')] });
    client.close();
    // Counters are sent as what they gained since the last flush (statsd's rule, as upstream): the
    // three calls may fall into one flush or several, so the lines add up.
    await waitFor(() => counted(received, 'ratelimit.service.rate_limit.obs.k.total_hits') === 3, 'total_hits lines adding up to 3');
    await waitFor(() => counted(received, 'ratelimit_server.ShouldRateLimit.total_requests') === 3, 'total_requests lines adding up to 3');
    expect(counted(received, 'ratelimit.service.rate_limit.obs.k.over_limit')).toBe(1);
    expect(received).toMatch(/^ratelimit_server\.ShouldRateLimit\.response_time:\d+(\.\d+)?\|ms/m);
    expect(received).toMatch(/^ratelimit\.service\.config_load_success:1\|c$/m);
  } finally {
    expect(await svc.stop()).toBe(0);
    server.close();
    fs.rmSync(dir.base, { recursive: true, force: true });
  }
});

test('Prometheus scrape shows upstream\'s metric names and labels', async () => {
  const port = await freePort();
  const dir = runtimeDir({ 'obs.yaml': CONFIG });
  const svc = await startService({ ...baseEnv(dir.root), USE_PROMETHEUS: 'true', PROMETHEUS_ADDR: `127.0.0.1:${port}` });
  try {
    const client = grpcClient(svc.grpc);
    for (let i = 0; i < 3; i++) await callGrpc(client, { domain: 'obs', descriptors: [descriptor('k', 'v')] });
    client.close();
    const body = (await httpGet(`127.0.0.1:${port}`, '/metrics')).body;
    expect(body).toMatch(/^ratelimit_service_rate_limit_total_hits\{domain="obs",key1="k"\} 3$/m);
    expect(body).toMatch(/^ratelimit_service_rate_limit_over_limit\{domain="obs",key1="k"\} 1$/m);
    expect(body).toMatch(/^ratelimit_service_total_requests\{grpc_method="ShouldRateLimit"\} 3$/m);
    expect(body).toMatch(/^ratelimit_service_response_time_seconds_count\{grpc_method="ShouldRateLimit"\} 3$/m);
  } finally {
    expect(await svc.stop()).toBe(0);
    fs.rmSync(dir.base, { recursive: true, force: true });
  }
});

test('OTLP receives the call span with the caller\'s traceparent as parent', async () => {
  const bodies: unknown[] = [];
  const receiver = http.createServer((req, res) => {
    let b = '';
    req.on('data', (d) => (b += d.toString()));
    req.on('end', () => {
      bodies.push(JSON.parse(b));
      res.setHeader('Content-Type', 'application/json');
      res.end('{}');
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  const port = (receiver.address() as net.AddressInfo).port;
  const dir = runtimeDir({ 'obs.yaml': CONFIG });
  const svc = await startService({
    ...baseEnv(dir.root),
    TRACING_ENABLED: 'true',
    TRACING_SERVICE_NAME: 'rl-e2e',
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `http://127.0.0.1:${port}/v1/traces`,
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json',
  });
  const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
  const parentId = '00f067aa0ba902b7';
  try {
    const client = grpcClient(svc.grpc);
    const md = new grpc.Metadata();
    md.set('traceparent', `00-${traceId}-${parentId}-01`);
    await new Promise<void>((resolve, reject) =>
      client.shouldRateLimit(
        { domain: 'obs', descriptors: [descriptor('k', 'traced')], hitsAddend: 0 },
        md,
        (err) => (err ? reject(err) : resolve()),
      ),
    );
    client.close();
  } finally {
    expect(await svc.stop()).toBe(0); // shutdown flushes the spans
  }
  receiver.close();
  fs.rmSync(dir.base, { recursive: true, force: true });
  const spans = (bodies as Array<{ resourceSpans: Array<{ scopeSpans: Array<{ spans: Array<Record<string, unknown>> }> }> }>)
    .flatMap((b) => b.resourceSpans)
    .flatMap((r) => r.scopeSpans)
    .flatMap((s) => s.spans);
  const call = spans.find((s) => s['name'] === 'ShouldRateLimit Execution');
  expect(call).toBeDefined();
  expect(String(call!['traceId']).toLowerCase()).toBe(traceId);
  expect(String(call!['parentSpanId']).toLowerCase()).toBe(parentId);
  const attrs = (call!['attributes'] as Array<{ key: string; value: { stringValue?: string } }>).map((a) => [a.key, a.value.stringValue]);
  expect(attrs).toEqual(expect.arrayContaining([['domain', 'obs']]));
  expect(JSON.stringify(bodies)).toContain('rl-e2e');
});
