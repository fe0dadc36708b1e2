import http from 'node:http';
import * as grpc from '@grpc/grpc-js';
import type { TracingSettings } from '../../src/settings/settings';
import { silentLogger } from '../../src/telemetry/logger';
import {
  NOOP_SPAN,
  NOOP_TRACING,
  SPAN_MEMCACHED_FETCH,
  SPAN_REDIS_PIPELINE,
  setupTracing,
} from '../../src/telemetry/tracing';
import { type ReceivedSpan, startGrpcCollector, startHttpCollector } from './otlp-receiver';

const OTEL_VARS = [
  'OTEL_EXPORTER_OTLP_ENDPOINT',
  'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT',
  'OTEL_EXPORTER_OTLP_PROTOCOL',
  'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL',
  'OTEL_EXPORTER_OTLP_INSECURE',
  'OTEL_EXPORTER_OTLP_TIMEOUT',
];
const saved: Record<string, string | undefined> = {};
const cleanups: Array<() => Promise<void>> = [];
beforeEach(() => {
  for (const v of OTEL_VARS) {
    saved[v] = process.env[v];
    delete process.env[v];
  }
});
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
  for (const v of OTEL_VARS) {
    if (saved[v] === undefined) delete process.env[v];
    else process.env[v] = saved[v];
  }
});

function settings(over: Partial<TracingSettings> = {}): TracingSettings {
  return {
    enabled: true,
    serviceName: 'RateLimit',
    serviceNamespace: 'edge',
    serviceInstanceId: 'instance-1',
    exporterProtocol: 'http',
    samplingRate: 1,
    ...over,
  };
}

/**
 * The OTLP/HTTP exporters load `http` with a dynamic `import()`, which Jest's module sandbox
 * refuses without --experimental-vm-modules (plain Node is fine). Hand the transport the module
 * it would have loaded; everything else (URL from the OTEL_* variables, encoding, headers) is the
 * exporter's own.
 */
function primeHttpTransport(exporter: unknown): void {
  const seen = new Set<unknown>();
  const walk = (o: unknown): boolean => {
    if (typeof o !== 'object' || o === null || seen.has(o)) return false;
    seen.add(o);
    const r = o as Record<string, unknown>;
    if ('_utils' in r && r['_utils'] === null && typeof r['_parameters'] === 'object') {
      r['_utils'] = { agent: new http.Agent({ keepAlive: false }), request: http.request };
      return true;
    }
    return Object.values(r).some(walk);
  };
  if (!walk(exporter)) throw new Error('OTLP HTTP transport internals changed: cannot prime it');
}
const primed = { onExporter: primeHttpTransport };

const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
const PARENT_ID = '00f067aa0ba902b7';
const B3_TRACE = '80f198ee56343ba864fe8b2a57d3eff7';
const B3_PARENT = 'e457b5a2e4d86bd1';

function byName(spans: ReceivedSpan[], name: string): ReceivedSpan {
  const s = spans.find((x) => x.name === name);
  if (s === undefined) throw new Error(`no span ${name} in ${JSON.stringify(spans.map((x) => x.name))}`);
  return s;
}

describe('tracing disabled', () => {
  test('a shared no-op: no allocation, request text never built', () => {
    const t = setupTracing(settings({ enabled: false }), silentLogger);
    expect(t).toBe(NOOP_TRACING);
    expect(t.enabled).toBe(false);
    const build = jest.fn(() => 'expensive');
    const span = t.startCallSpan({ traceparent: `00-${TRACE_ID}-${PARENT_ID}-01` }, 'd', build);
    expect(span).toBe(NOOP_SPAN);
    expect(t.startChildSpan(span, SPAN_REDIS_PIPELINE, { 'pipeline length': 2 })).toBe(NOOP_SPAN);
    expect(build).not.toHaveBeenCalled();
    expect(span.isRecording()).toBe(false);
    span.end();
  });
});

describe('tracing over OTLP/HTTP', () => {
  test('JSON: call span parented on the incoming traceparent, child span, resource', async () => {
    const col = await startHttpCollector();
    cleanups.push(() => col.close());
    process.env['OTEL_EXPORTER_OTLP_ENDPOINT'] = col.url;
    process.env['OTEL_EXPORTER_OTLP_TRACES_PROTOCOL'] = 'http/json';
    const infos: string[] = [];
    const tracing = setupTracing(settings(), { ...silentLogger, info: (m) => void infos.push(m) }, primed);
    expect(tracing.enabled).toBe(true);

    const call = tracing.startCallSpan({ traceparent: `00-${TRACE_ID}-${PARENT_ID}-01`, ':authority': 'x' }, 'messaging', () => 'domain:"messaging"');
    const child = tracing.startChildSpan(call, SPAN_REDIS_PIPELINE, { 'pipeline length': 4, 'perSecondPipeline length': 0 });
    child.end();
    call.end();
    await tracing.shutdown();

    expect(col.paths).toEqual(['POST /v1/traces']);
    expect(col.contentTypes[0]).toContain('application/json');
    const callSpan = byName(col.spans, 'ShouldRateLimit Execution');
    expect(callSpan.traceId).toBe(TRACE_ID);
    expect(callSpan.parentSpanId).toBe(PARENT_ID);
    expect(callSpan.attributes).toEqual({ domain: 'messaging', 'request string': 'domain:"messaging"' });
    expect(callSpan.kind).toBe(2); // SERVER
    expect(callSpan.scope).toBe('ratelimit');
    const pipeline = byName(col.spans, SPAN_REDIS_PIPELINE);
    expect(pipeline.traceId).toBe(TRACE_ID);
    expect(pipeline.parentSpanId).toBe(callSpan.spanId);
    expect(pipeline.attributes).toEqual({ 'pipeline length': 4, 'perSecondPipeline length': 0 });
    expect(pipeline.scope).toBe('redis.fixedCacheImpl');
    expect(callSpan.resource).toMatchObject({ 'service.name': 'RateLimit', 'service.namespace': 'edge', 'service.instance.id': 'instance-1' });
    expect(infos.join('\n')).toContain('TracerProvider initialized with following parameters: protocol: http (json), serviceName: RateLimit');
  });

  test('protobuf (the default): B3 single header parents the call span; memcached child; random instance id', async () => {
    const col = await startHttpCollector();
    cleanups.push(() => col.close());
    process.env['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT'] = `${col.url}/v1/traces`;
    const tracing = setupTracing(settings({ serviceInstanceId: '', serviceNamespace: '' }), silentLogger, primed);
    const call = tracing.startCallSpan({ b3: `${B3_TRACE}-${B3_PARENT}-1` }, 'd', 'r');
    tracing.startChildSpan(call, SPAN_MEMCACHED_FETCH, { 'keysToGet length': 3 }).end();
    call.end();
    await tracing.shutdown();

    expect(col.contentTypes[0]).toContain('application/x-protobuf');
    const callSpan = byName(col.spans, 'ShouldRateLimit Execution');
    expect(callSpan.traceId).toBe(B3_TRACE);
    expect(callSpan.parentSpanId).toBe(B3_PARENT);
    expect(callSpan.attributes).toEqual({ domain: 'd', 'request string': 'r' });
    const fetch = byName(col.spans, SPAN_MEMCACHED_FETCH);
    expect(fetch.parentSpanId).toBe(callSpan.spanId);
    expect(fetch.attributes).toEqual({ 'keysToGet length': 3 });
    expect(callSpan.resource['service.instance.id']).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(callSpan.resource).not.toHaveProperty('service.namespace');
  });

  test('no incoming context: a new trace (root span)', async () => {
    const col = await startHttpCollector();
    cleanups.push(() => col.close());
    process.env['OTEL_EXPORTER_OTLP_ENDPOINT'] = col.url;
    const tracing = setupTracing(settings(), silentLogger, primed);
    tracing.startCallSpan({}, 'd', 'r').end();
    await tracing.shutdown();
    const callSpan = byName(col.spans, 'ShouldRateLimit Execution');
    expect(callSpan.parentSpanId).toBe('');
    expect(callSpan.traceId).toMatch(/^[0-9a-f]{32}$/);
  });

  test('sampling: rate 0 drops root spans but a sampled parent wins (ParentBased)', async () => {
    const col = await startHttpCollector();
    cleanups.push(() => col.close());
    process.env['OTEL_EXPORTER_OTLP_ENDPOINT'] = col.url;
    const tracing = setupTracing(settings({ samplingRate: 0 }), silentLogger, primed);
    const root = tracing.startCallSpan({}, 'dropped', 'r');
    expect(root.isRecording()).toBe(false);
    root.end();
    tracing.startCallSpan({ traceparent: `00-${TRACE_ID}-${PARENT_ID}-01` }, 'kept', 'r').end();
    const unsampled = tracing.startCallSpan({ traceparent: `00-${TRACE_ID}-${PARENT_ID}-00` }, 'unsampled', 'r');
    expect(unsampled.isRecording()).toBe(false);
    unsampled.end();
    await tracing.shutdown();
    expect(col.spans.map((s) => s.attributes['domain'])).toEqual(['kept']);
  });

  test('shutdown is bounded when the collector is unreachable', async () => {
    const col = await startHttpCollector();
    const url = col.url;
    await col.close(); // nothing listens there now
    process.env['OTEL_EXPORTER_OTLP_ENDPOINT'] = url;
    process.env['OTEL_EXPORTER_OTLP_TIMEOUT'] = '300'; // the exporter's own deadline (no retries past it)
    const tracing = setupTracing(settings(), silentLogger, { ...primed, shutdownTimeoutMs: 500 });
    tracing.startCallSpan({}, 'd', 'r').end();
    const t0 = Date.now();
    await tracing.shutdown();
    expect(Date.now() - t0).toBeLessThan(3000);
    await tracing.shutdown(); // idempotent
  });
});

describe('tracing shutdown', () => {
  test('returns after its own bound while the collector hangs, with a warning', async () => {
    const sockets = new Set<import('node:net').Socket>();
    const hang = http.createServer(() => {}); // reads requests, never answers
    hang.on('connection', (s) => sockets.add(s));
    await new Promise<void>((resolve) => hang.listen(0, '127.0.0.1', () => resolve()));
    cleanups.push(
      () =>
        new Promise<void>((resolve) => {
          for (const s of sockets) s.destroy();
          hang.close(() => resolve());
        }),
    );
    const port = (hang.address() as import('node:net').AddressInfo).port;
    process.env['OTEL_EXPORTER_OTLP_ENDPOINT'] = `http://127.0.0.1:${port}`;
    process.env['OTEL_EXPORTER_OTLP_TIMEOUT'] = '2000';
    const warnings: string[] = [];
    const tracing = setupTracing(settings(), { ...silentLogger, warn: (m) => void warnings.push(m) }, { ...primed, shutdownTimeoutMs: 200 });
    tracing.startCallSpan({}, 'd', 'r').end();
    const t0 = Date.now();
    await tracing.shutdown();
    const took = Date.now() - t0;
    expect(took).toBeGreaterThanOrEqual(150);
    expect(took).toBeLessThan(1500);
    expect(warnings.join('\n')).toContain('tracing: shutdown did not finish within 200 ms');
  });
});

describe('tracing over OTLP/gRPC', () => {
  test('B3 multi headers from gRPC metadata parent the call span', async () => {
    const col = await startGrpcCollector();
    cleanups.push(() => col.close());
    process.env['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT'] = col.url;
    const tracing = setupTracing(settings({ exporterProtocol: 'grpc' }), silentLogger);
    const md = new grpc.Metadata();
    md.set('x-b3-traceid', B3_TRACE);
    md.set('x-b3-spanid', B3_PARENT);
    md.set('x-b3-sampled', '1');
    md.set('baggage', 'tenant=acme');
    const call = tracing.startCallSpan(md, 'grpc-domain', 'r');
    tracing.startChildSpan(call, SPAN_REDIS_PIPELINE, { 'pipeline length': 2, 'perSecondPipeline length': 2 }).end();
    call.end();
    await tracing.shutdown();

    expect(col.paths[0]).toBe('/opentelemetry.proto.collector.trace.v1.TraceService/Export');
    const callSpan = byName(col.spans, 'ShouldRateLimit Execution');
    expect(callSpan.traceId).toBe(B3_TRACE);
    expect(callSpan.parentSpanId).toBe(B3_PARENT);
    expect(callSpan.attributes['domain']).toBe('grpc-domain');
    expect(byName(col.spans, SPAN_REDIS_PIPELINE).parentSpanId).toBe(callSpan.spanId);
  });

  test('HTTP headers with array values (node IncomingHttpHeaders) work as a carrier', async () => {
    const col = await startGrpcCollector();
    cleanups.push(() => col.close());
    process.env['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT'] = col.url;
    const tracing = setupTracing(settings({ exporterProtocol: 'grpc' }), silentLogger);
    tracing.startCallSpan({ traceparent: [`00-${TRACE_ID}-${PARENT_ID}-01`], 'content-type': 'application/json' }, 'json', 'r').end();
    await tracing.shutdown();
    const callSpan = byName(col.spans, 'ShouldRateLimit Execution');
    expect(callSpan.traceId).toBe(TRACE_ID);
    expect(callSpan.parentSpanId).toBe(PARENT_ID);
  });
});
