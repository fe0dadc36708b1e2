/**
 * Tracing as upstream (`src/trace/trace.go`, TRACING_*): an OpenTelemetry tracer provider exporting
 * OTLP, a `ShouldRateLimit Execution` span per call whose parent comes from the caller's trace
 * headers, and child spans for the store round trip (`Redis Pipeline Execution`,
 * `Memcached Fetch Execution`).
 *
 * - Exporter: OTLP over HTTP (TRACING_EXPORTER_PROTOCOL=http, the default) or gRPC (`grpc`).
 *   Endpoint, headers, timeout, compression and TLS come from the standard OTEL_EXPORTER_OTLP_* /
 *   OTEL_EXPORTER_OTLP_TRACES_* variables, read by the exporters themselves. Over HTTP the payload is
 *   protobuf (`http/protobuf`, as Go's otlptracehttp) unless OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or
 *   OTEL_EXPORTER_OTLP_PROTOCOL is `http/json`.
 * - Resource: service.name = TRACING_SERVICE_NAME, service.namespace = TRACING_SERVICE_NAMESPACE (when
 *   set), service.instance.id = TRACING_SERVICE_INSTANCE_ID or a random UUIDv4.
 * - Sampler: ParentBased(TraceIdRatioBased(TRACING_SAMPLING_RATE)).
 * - Propagators (extraction): W3C tracecontext, W3C baggage, B3 single header (`b3`) and B3 multi
 *   header (`x-b3-*`); when several are present the last one that parses wins (B3), as Go's composite.
 * - Spans are batched (BatchSpanProcessor; OTEL_BSP_* apply) and `shutdown()` flushes them with a
 *   bounded wait.
 *
 * When TRACING_ENABLED is false, `setupTracing` returns {@link NOOP_TRACING}: every helper returns
 * one shared non-recording span and allocates nothing. Check `tracing.enabled` before building an
 * expensive `request string`, or pass a function that builds it.
 */
import { randomUUID } from 'node:crypto';
import {
  type Attributes,
  type Context,
  INVALID_SPAN_CONTEXT,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  type TextMapGetter,
  type TextMapPropagator,
  type Tracer,
  trace,
} from '@opentelemetry/api';
import { CompositePropagator, W3CBaggagePropagator, W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter as OtlpGrpcExporter } from '@opentelemetry/exporter-trace-otlp-grpc';
import { OTLPTraceExporter as OtlpJsonExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as OtlpProtoExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { B3InjectEncoding, B3Propagator } from '@opentelemetry/propagator-b3';
import { defaultResource, resourceFromAttributes } from '@opentelemetry/resources';
import {
  BasicTracerProvider,
  BatchSpanProcessor,
  type BufferConfig,
  ParentBasedSampler,
  type SpanExporter,
  TraceIdRatioBasedSampler,
} from '@opentelemetry/sdk-trace-base';
import type { TracingSettings } from '../settings/settings';
import type { Logger } from './logger';

export type { Attributes, Span } from '@opentelemetry/api';

/** Span names and attribute keys, as upstream. */
export const SPAN_SHOULD_RATE_LIMIT = 'ShouldRateLimit Execution';
export const SPAN_REDIS_PIPELINE = 'Redis Pipeline Execution';
export const SPAN_MEMCACHED_FETCH = 'Memcached Fetch Execution';
export const ATTR_DOMAIN = 'domain';
export const ATTR_REQUEST_STRING = 'request string';
export const ATTR_PIPELINE_LENGTH = 'pipeline length';
export const ATTR_PER_SECOND_PIPELINE_LENGTH = 'perSecondPipeline length';
export const ATTR_KEYS_TO_GET_LENGTH = 'keysToGet length';

/**
 * Where the caller's trace context is read from: gRPC metadata (pass `call.metadata`, or
 * `call.metadata.getMap()`), HTTP request headers (`req.headers`) or the headers of an HTTP/2
 * stream. Keys are matched lower-case.
 */
export type TraceCarrier =
  | Readonly<Record<string, string | readonly string[] | Buffer | undefined>>
  | { getMap(): Record<string, unknown> };

export interface Tracing {
  /** False for the no-op tracing: callers may skip building span attributes. */
  readonly enabled: boolean;
  /**
   * Starts the `ShouldRateLimit Execution` span (attributes `domain`, `request string`) as a child
   * of the context found in `carrier` (a new trace when there is none). End it with `span.end()`.
   */
  startCallSpan(carrier: TraceCarrier, domain: string, requestText: string | (() => string)): Span;
  /** Starts a child of `parent` (e.g. `Redis Pipeline Execution` with its lengths). */
  startChildSpan(parent: Span, name: string, attributes?: Attributes): Span;
  /** Flushes buffered spans (bounded wait) and stops exporting. */
  shutdown(): Promise<void>;
}

/** The span every no-op helper returns: records nothing, costs nothing. */
export const NOOP_SPAN: Span = trace.wrapSpanContext(INVALID_SPAN_CONTEXT);

export const NOOP_TRACING: Tracing = Object.freeze({
  enabled: false,
  startCallSpan: (): Span => NOOP_SPAN,
  startChildSpan: (): Span => NOOP_SPAN,
  shutdown: async (): Promise<void> => {},
});

export interface TracingOptions {
  /** Use this exporter instead of the OTLP one (tests). */
  readonly exporter?: SpanExporter;
  /** Environment for the protocol choice (default `process.env`). */
  readonly env?: NodeJS.ProcessEnv;
  /** Batch processor tuning (defaults: OTEL_BSP_* or the SDK's). */
  readonly batch?: BufferConfig;
  /** Longest wait in `shutdown()` (default 5 s). */
  readonly shutdownTimeoutMs?: number;
  /** Told the exporter in use once it is built (tests). */
  readonly onExporter?: (exporter: SpanExporter) => void;
}

function firstValue(v: unknown): string | undefined {
  if (typeof v === 'string') return v;
  if (Array.isArray(v)) {
    for (const x of v) if (typeof x === 'string') return x;
  }
  return undefined;
}

const getter: TextMapGetter<Record<string, unknown>> = {
  keys: (carrier) => Object.keys(carrier),
  get: (carrier, key) => {
    const v = carrier[key] ?? carrier[key.toLowerCase()];
    if (typeof v === 'string') return v;
    if (Array.isArray(v)) {
      const strings = v.filter((x): x is string => typeof x === 'string');
      return strings.length === 0 ? undefined : strings;
    }
    return firstValue(v);
  },
};

function carrierRecord(carrier: TraceCarrier): Record<string, unknown> {
  const c = carrier as { getMap?: unknown };
  return typeof c.getMap === 'function' ? (carrier as { getMap(): Record<string, unknown> }).getMap() : (carrier as Record<string, unknown>);
}

/** The propagators upstream installs (W3C tracecontext + baggage + B3), as one composite. */
export function createPropagator(): TextMapPropagator {
  return new CompositePropagator({
    propagators: [
      new W3CTraceContextPropagator(),
      new W3CBaggagePropagator(),
      new B3Propagator({ injectEncoding: B3InjectEncoding.MULTI_HEADER }),
      new B3Propagator({ injectEncoding: B3InjectEncoding.SINGLE_HEADER }),
    ],
  });
}

function httpEncoding(env: NodeJS.ProcessEnv): 'json' | 'protobuf' {
  const p = (env['OTEL_EXPORTER_OTLP_TRACES_PROTOCOL'] || env['OTEL_EXPORTER_OTLP_PROTOCOL'] || '').trim().toLowerCase();
  return p === 'http/json' ? 'json' : 'protobuf';
}

function createExporter(settings: TracingSettings, env: NodeJS.ProcessEnv): { exporter: SpanExporter; what: string } {
  switch (settings.exporterProtocol) {
    case 'grpc':
      return { exporter: new OtlpGrpcExporter(), what: 'grpc' };
    case 'http':
      return httpEncoding(env) === 'json'
        ? { exporter: new OtlpJsonExporter(), what: 'http (json)' }
        : { exporter: new OtlpProtoExporter(), what: 'http (protobuf)' };
    default:
      throw new Error(`Invalid otlptrace client protocol: ${String(settings.exporterProtocol)}`);
  }
}

/** Instrumentation scopes, named as upstream's tracers. */
const SCOPE_FOR_SPAN: Readonly<Record<string, string>> = {
  [SPAN_REDIS_PIPELINE]: 'redis.fixedCacheImpl',
  [SPAN_MEMCACHED_FETCH]: 'memcached.cacheImpl',
};

class OtelTracing implements Tracing {
  readonly enabled = true;
  private readonly tracers = new Map<string, Tracer>();
  private readonly callTracer: Tracer;
  private stopped: Promise<void> | undefined;

  constructor(
    private readonly provider: BasicTracerProvider,
    private readonly propagator: TextMapPropagator,
    private readonly logger: Logger,
    private readonly shutdownTimeoutMs: number,
  ) {
    this.callTracer = provider.getTracer('ratelimit');
  }

  startCallSpan(carrier: TraceCarrier, domain: string, requestText: string | (() => string)): Span {
    const parent: Context = this.propagator.extract(ROOT_CONTEXT, carrierRecord(carrier), getter);
    return this.callTracer.startSpan(
      SPAN_SHOULD_RATE_LIMIT,
      {
        kind: SpanKind.SERVER,
        attributes: {
          [ATTR_DOMAIN]: domain,
          [ATTR_REQUEST_STRING]: typeof requestText === 'function' ? requestText() : requestText,
        },
      },
      parent,
    );
  }

  startChildSpan(parent: Span, name: string, attributes?: Attributes): Span {
    const scope = SCOPE_FOR_SPAN[name] ?? 'ratelimit';
    let tracer = this.tracers.get(scope);
    if (tracer === undefined) {
      tracer = this.provider.getTracer(scope);
      this.tracers.set(scope, tracer);
    }
    return tracer.startSpan(name, { attributes }, trace.setSpan(ROOT_CONTEXT, parent));
  }

  shutdown(): Promise<void> {
    if (this.stopped === undefined) {
      this.stopped = new Promise<void>((resolve) => {
        const t = setTimeout(() => {
          this.logger.warn(`tracing: shutdown did not finish within ${this.shutdownTimeoutMs} ms; unsent spans are dropped`);
          resolve();
        }, this.shutdownTimeoutMs);
        t.unref();
        this.provider.shutdown().then(
          () => {
            clearTimeout(t);
            resolve();
          },
          (err: unknown) => {
            clearTimeout(t);
            this.logger.warn(`tracing: shutdown failed: ${err instanceof Error ? err.message : String(err)}`);
            resolve();
          },
        );
      });
    }
    return this.stopped;
  }
}

/**
 * Builds the tracing of TRACING_*: the no-op one when disabled. Throws only for a protocol other
 * than http or grpc (the settings already reject it).
 */
export function setupTracing(settings: TracingSettings, logger: Logger, options: TracingOptions = {}): Tracing {
  if (!settings.enabled) return NOOP_TRACING;
  const env = options.env ?? process.env;
  const { exporter, what } = options.exporter !== undefined ? { exporter: options.exporter, what: 'custom' } : createExporter(settings, env);
  options.onExporter?.(exporter);
  const instanceId = settings.serviceInstanceId !== '' ? settings.serviceInstanceId : randomUUID();
  const attributes: Attributes = {
    'service.name': settings.serviceName,
    'service.instance.id': instanceId,
  };
  if (settings.serviceNamespace !== '') attributes['service.namespace'] = settings.serviceNamespace;
  const rate = Math.min(1, Math.max(0, settings.samplingRate));
  const provider = new BasicTracerProvider({
    resource: defaultResource().merge(resourceFromAttributes(attributes)),
    sampler: new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(rate) }),
    spanProcessors: [new BatchSpanProcessor(exporter, options.batch)],
  });
  logger.info(
    `TracerProvider initialized with following parameters: protocol: ${what}, serviceName: ${settings.serviceName}, ` +
      `serviceNamespace: ${settings.serviceNamespace}, serviceInstanceId: ${instanceId}, samplingRate: ${rate}`,
  );
  return new OtelTracing(provider, createPropagator(), logger, options.shutdownTimeoutMs ?? 5_000);
}
