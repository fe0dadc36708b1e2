/**
 * A loopback OTLP trace receiver for the tracing tests: OTLP/HTTP (`POST /v1/traces`, JSON or
 * protobuf) and OTLP/gRPC (`TraceService/Export`), decoding just what the tests look at.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import zlib from 'node:zlib';
import * as grpc from '@grpc/grpc-js';

export type AttrValue = string | number | boolean;

export interface ReceivedSpan {
  readonly scope: string;
  readonly traceId: string;
  readonly spanId: string;
  readonly parentSpanId: string;
  readonly name: string;
  readonly kind: number;
  readonly attributes: Record<string, AttrValue>;
  readonly resource: Record<string, AttrValue>;
}

export interface Received {
  readonly spans: ReceivedSpan[];
  readonly contentTypes: string[];
  readonly paths: string[];
}

// ---- minimal protobuf reader ---------------------------------------------------------------

type Field = { wire: 0; n: bigint } | { wire: 1; b: Buffer } | { wire: 2; b: Buffer } | { wire: 5; b: Buffer };

function readVarint(buf: Buffer, pos: number): [bigint, number] {
  let result = 0n;
  let shift = 0n;
  for (;;) {
    const byte = buf[pos++]!;
    result |= BigInt(byte & 0x7f) << shift;
    if ((byte & 0x80) === 0) return [result, pos];
    shift += 7n;
  }
}

function fields(buf: Buffer): Map<number, Field[]> {
  const out = new Map<number, Field[]>();
  let pos = 0;
  while (pos < buf.length) {
    const [tag, p1] = readVarint(buf, pos);
    pos = p1;
    const no = Number(tag >> 3n);
    const wire = Number(tag & 7n);
    let f: Field;
    if (wire === 0) {
      const [n, p2] = readVarint(buf, pos);
      pos = p2;
      f = { wire: 0, n };
    } else if (wire === 1) {
      f = { wire: 1, b: buf.subarray(pos, pos + 8) };
      pos += 8;
    } else if (wire === 2) {
      const [len, p2] = readVarint(buf, pos);
      f = { wire: 2, b: buf.subarray(p2, p2 + Number(len)) };
      pos = p2 + Number(len);
    } else if (wire === 5) {
      f = { wire: 5, b: buf.subarray(pos, pos + 4) };
      pos += 4;
    } else {
      throw new Error(`unsupported wire type ${wire}`);
    }
    const list = out.get(no) ?? [];
    list.push(f);
    out.set(no, list);
  }
  return out;
}

const bytesOf = (m: Map<number, Field[]>, no: number): Buffer[] => (m.get(no) ?? []).map((f) => (f as { b: Buffer }).b);
const first = (m: Map<number, Field[]>, no: number): Field | undefined => m.get(no)?.[0];

function pbAnyValue(buf: Buffer): AttrValue {
  const m = fields(buf);
  const s = first(m, 1);
  if (s !== undefined) return (s as { b: Buffer }).b.toString('utf8');
  const b = first(m, 2);
  if (b !== undefined) return (b as { n: bigint }).n !== 0n;
  const i = first(m, 3);
  if (i !== undefined) return Number((i as { n: bigint }).n);
  const d = first(m, 4);
  if (d !== undefined) return (d as { b: Buffer }).b.readDoubleLE(0);
  return '';
}

function pbAttributes(list: Buffer[]): Record<string, AttrValue> {
  const out: Record<string, AttrValue> = {};
  for (const kv of list) {
    const m = fields(kv);
    out[bytesOf(m, 1)[0]!.toString('utf8')] = pbAnyValue(bytesOf(m, 2)[0] ?? Buffer.alloc(0));
  }
  return out;
}

export function decodeProtobuf(body: Buffer): ReceivedSpan[] {
  const spans: ReceivedSpan[] = [];
  for (const rs of bytesOf(fields(body), 1)) {
    const rsm = fields(rs);
    const res = bytesOf(rsm, 1)[0];
    const resource = res === undefined ? {} : pbAttributes(bytesOf(fields(res), 1));
    for (const ss of bytesOf(rsm, 2)) {
      const ssm = fields(ss);
      const scopeBuf = bytesOf(ssm, 1)[0];
      const scope = scopeBuf === undefined ? '' : (bytesOf(fields(scopeBuf), 1)[0]?.toString('utf8') ?? '');
      for (const sp of bytesOf(ssm, 2)) {
        const m = fields(sp);
        spans.push({
          scope,
          traceId: bytesOf(m, 1)[0]?.toString('hex') ?? '',
          spanId: bytesOf(m, 2)[0]?.toString('hex') ?? '',
          parentSpanId: bytesOf(m, 4)[0]?.toString('hex') ?? '',
          name: bytesOf(m, 5)[0]?.toString('utf8') ?? '',
          kind: Number((first(m, 6) as { n: bigint } | undefined)?.n ?? 0n),
          attributes: pbAttributes(bytesOf(m, 9)),
          resource,
        });
      }
    }
  }
  return spans;
}

// ---- JSON ------------------------------------------------------------------------------------

interface JsonKV {
  key: string;
  value: { stringValue?: string; intValue?: number | string; boolValue?: boolean; doubleValue?: number };
}

function jsonAttributes(list: JsonKV[] | undefined): Record<string, AttrValue> {
  const out: Record<string, AttrValue> = {};
  for (const { key, value } of list ?? []) {
    out[key] = value.stringValue ?? (value.intValue !== undefined ? Number(value.intValue) : (value.boolValue ?? value.doubleValue ?? ''));
  }
  return out;
}

export function decodeJson(body: Buffer): ReceivedSpan[] {
  const doc = JSON.parse(body.toString('utf8')) as {
    resourceSpans: Array<{
      resource?: { attributes?: JsonKV[] };
      scopeSpans: Array<{
        scope?: { name?: string };
        spans: Array<{ traceId: string; spanId: string; parentSpanId?: string; name: string; kind: number; attributes?: JsonKV[] }>;
      }>;
    }>;
  };
  const spans: ReceivedSpan[] = [];
  for (const rs of doc.resourceSpans) {
    const resource = jsonAttributes(rs.resource?.attributes);
    for (const ss of rs.scopeSpans) {
      for (const s of ss.spans) {
        spans.push({
          scope: ss.scope?.name ?? '',
          traceId: s.traceId,
          spanId: s.spanId,
          parentSpanId: s.parentSpanId ?? '',
          name: s.name,
          kind: s.kind,
          attributes: jsonAttributes(s.attributes),
          resource,
        });
      }
    }
  }
  return spans;
}

// ---- receivers -------------------------------------------------------------------------------

export interface HttpCollector extends Received {
  readonly url: string;
  close(): Promise<void>;
}

export async function startHttpCollector(): Promise<HttpCollector> {
  const got: Received = { spans: [], contentTypes: [], paths: [] };
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      let body = Buffer.concat(chunks);
      if (req.headers['content-encoding'] === 'gzip') body = zlib.gunzipSync(body);
      const type = String(req.headers['content-type'] ?? '');
      got.contentTypes.push(type);
      got.paths.push(`${req.method} ${req.url}`);
      try {
        got.spans.push(...(type.includes('json') ? decodeJson(body) : decodeProtobuf(body)));
      } catch {
        res.writeHead(400).end();
        return;
      }
      res.writeHead(200, { 'Content-Type': type.includes('json') ? 'application/json' : 'application/x-protobuf' });
      res.end(type.includes('json') ? '{}' : Buffer.alloc(0));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const port = (server.address() as AddressInfo).port;
  return {
    ...got,
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export interface GrpcCollector extends Received {
  readonly url: string;
  readonly metadata: grpc.Metadata[];
  close(): Promise<void>;
}

export async function startGrpcCollector(): Promise<GrpcCollector> {
  const got = { spans: [] as ReceivedSpan[], contentTypes: [] as string[], paths: [] as string[], metadata: [] as grpc.Metadata[] };
  const server = new grpc.Server();
  const path = '/opentelemetry.proto.collector.trace.v1.TraceService/Export';
  server.addService(
    {
      Export: {
        path,
        requestStream: false,
        responseStream: false,
        requestSerialize: (b: Buffer) => b,
        requestDeserialize: (b: Buffer) => b,
        responseSerialize: () => Buffer.alloc(0),
        responseDeserialize: () => ({}),
      },
    },
    {
      Export: (call: grpc.ServerUnaryCall<Buffer, object>, cb: grpc.sendUnaryData<object>) => {
        got.paths.push(path);
        got.metadata.push(call.metadata);
        got.spans.push(...decodeProtobuf(call.request));
        cb(null, {});
      },
    },
  );
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  return {
    ...got,
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.tryShutdown(() => resolve());
        setTimeout(() => server.forceShutdown(), 1000).unref();
      }),
  };
}
