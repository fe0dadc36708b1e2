/**
 * The statsd sink (USE_STATSD, upstream's default): plain statsd lines as gostats writes them,
 * `name:<delta>|c`, `name:<value>|g`, `name:<ms>|ms`, each ending in `\n`, the name carrying its
 * tags and EXTRA_TAGS as `.__k=v` suffixes. Upstream sends them over TCP (gostats' TCP sink);
 * UDP is available too (`protocol: 'udp'`, one datagram of at most `maxPacketBytes` per batch of lines).
 *
 * Never blocks and never throws on the hot path: a flush only builds strings. Over TCP a lost
 * connection is re-opened in the background with a capped exponential backoff; while it is down
 * (or the socket is congested) lines wait in a bounded buffer (`maxPendingBytes`) and what does not
 * fit is dropped and counted in `dropped`, as is anything the socket reports as not written.
 *
 * When a timer kept only a random subset of its samples (more than the store's cap in one interval)
 * its lines carry the statsd sample rate, `name:<ms>|ms|@<kept/recorded>`, so servers scale counts back.
 */
import dgram from 'node:dgram';
import net from 'node:net';
import { Backoff } from '../../platform/backoff';
import type { Logger } from '../../telemetry/logger';
import { silentLogger } from '../../telemetry/logger';
import type { TimerSamples } from '../store';
import { TagNamer } from '../tags';
import { formatNumber, type StatsSink } from './types';

export interface StatsdSinkOptions {
  readonly host: string;
  readonly port: number;
  /** Default `tcp`, as upstream. */
  readonly protocol?: 'tcp' | 'udp';
  /** EXTRA_TAGS. */
  readonly extraTags?: Readonly<Record<string, string>>;
  readonly logger?: Logger;
  /** Most bytes held while the TCP connection is down or congested (default 8 MiB). */
  readonly maxPendingBytes?: number;
  /** Largest UDP datagram (default 1432, gostats' and datadog-go's size for a 1500-byte MTU). */
  readonly maxPacketBytes?: number;
  /** First reconnect delay (default 250 ms), doubled per failure up to `reconnectMaxMs` (default 10 s). */
  readonly reconnectMinMs?: number;
  readonly reconnectMaxMs?: number;
  /** A TCP connection attempt taking longer than this is abandoned (default 5 s). */
  readonly connectTimeoutMs?: number;
  /** Longest wait in `close()` for buffered lines to leave (default 2 s). */
  readonly closeTimeoutMs?: number;
}

interface Chunk {
  readonly text: string;
  readonly bytes: number;
  readonly lines: number;
}

interface Transport {
  readonly chunkBytes: number;
  start(): void;
  send(chunk: Chunk): void;
  close(): Promise<void>;
  readonly dropped: number;
}

const TCP_CHUNK_BYTES = 64 * 1024;

export class StatsdSink implements StatsSink {
  readonly kind = 'statsd' as const;
  readonly wantsTimerSamples = true;
  private readonly namer: TagNamer;
  private readonly transport: Transport;
  private cur = '';
  private curBytes = 0;
  private curLines = 0;

  constructor(opts: StatsdSinkOptions) {
    this.namer = new TagNamer(opts.extraTags ?? {});
    const logger = opts.logger ?? silentLogger;
    this.transport = opts.protocol === 'udp' ? new UdpTransport(opts, logger) : new TcpTransport(opts, logger);
  }

  get dropped(): number {
    return this.transport.dropped;
  }

  async start(): Promise<void> {
    this.transport.start();
  }

  counter(name: string, delta: number): void {
    this.add(this.namer.resolve(name).serialized + ':' + formatNumber(delta) + '|c\n');
  }

  gauge(name: string, value: number): void {
    this.add(this.namer.resolve(name).serialized + ':' + formatNumber(value) + '|g\n');
  }

  retireGauge(name: string): void {
    this.gauge(name, 0);
    this.namer.forget(name);
  }

  timer(name: string, t: TimerSamples): void {
    const prefix = this.namer.resolve(name).serialized + ':';
    const n = t.samples.length;
    const suffix = t.count > n && n > 0 ? '|ms|@' + formatRate(n / t.count) + '\n' : '|ms\n';
    for (let i = 0; i < n; i++) this.add(prefix + formatNumber(t.samples[i]!) + suffix);
  }

  endFlush(): void {
    this.pushChunk();
  }

  async close(): Promise<void> {
    this.pushChunk();
    await this.transport.close();
  }

  private add(line: string): void {
    const bytes = Buffer.byteLength(line);
    if (this.curLines > 0 && this.curBytes + bytes > this.transport.chunkBytes) this.pushChunk();
    this.cur += line;
    this.curBytes += bytes;
    this.curLines++;
  }

  private pushChunk(): void {
    if (this.curLines === 0) return;
    const chunk: Chunk = { text: this.cur, bytes: this.curBytes, lines: this.curLines };
    this.cur = '';
    this.curBytes = 0;
    this.curLines = 0;
    this.transport.send(chunk);
  }
}

function formatRate(r: number): string {
  return String(Number(r.toPrecision(6)));
}

/** Resolves after `ms` or when `done` settles, whichever is first; the timer does not hold the process. */
function within(ms: number, done: Promise<unknown>): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    t.unref();
    done.then(
      () => {
        clearTimeout(t);
        resolve();
      },
      () => {
        clearTimeout(t);
        resolve();
      },
    );
  });
}

class TcpTransport implements Transport {
  readonly chunkBytes = TCP_CHUNK_BYTES;
  dropped = 0;
  private socket: net.Socket | undefined;
  private connected = false;
  private closed = false;
  private started = false;
  private pending: Chunk[] = [];
  private pendingBytes = 0;
  private reconnectTimer: NodeJS.Timeout | undefined;
  /** True from the first failure of an outage until the next successful connect (one warning each). */
  private down = false;
  private readonly target: string;
  private readonly maxPendingBytes: number;
  private readonly reconnectDelays: Backoff;
  private readonly connectTimeoutMs: number;
  private readonly closeTimeoutMs: number;

  constructor(
    private readonly opts: StatsdSinkOptions,
    private readonly logger: Logger,
  ) {
    this.target = `${opts.host.includes(':') ? `[${opts.host}]` : opts.host}:${opts.port}`;
    this.maxPendingBytes = opts.maxPendingBytes ?? 8 * 1024 * 1024;
    this.reconnectDelays = new Backoff({ initialMs: opts.reconnectMinMs ?? 250, maxMs: opts.reconnectMaxMs ?? 10_000 });
    this.connectTimeoutMs = opts.connectTimeoutMs ?? 5_000;
    this.closeTimeoutMs = opts.closeTimeoutMs ?? 2_000;
  }

  start(): void {
    if (this.started || this.closed) return;
    this.started = true;
    this.connect();
  }

  send(chunk: Chunk): void {
    if (this.closed) {
      this.dropped += chunk.lines;
      return;
    }
    if (!this.started) this.start();
    const s = this.socket;
    if (this.connected && s !== undefined && this.pending.length === 0 && s.writableLength + chunk.bytes <= this.maxPendingBytes) {
      this.write(s, chunk);
      return;
    }
    if (this.pendingBytes + chunk.bytes > this.maxPendingBytes) {
      this.dropped += chunk.lines;
      return;
    }
    this.pending.push(chunk);
    this.pendingBytes += chunk.bytes;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.reconnectTimer !== undefined) clearTimeout(this.reconnectTimer);
    this.reconnectTimer = undefined;
    const s = this.socket;
    if (s === undefined) {
      this.dropPending();
      return;
    }
    const gone = new Promise<void>((resolve) => s.once('close', () => resolve()));
    if (!this.connected) {
      // A connection attempt is under way: give it the same bounded wait to come up.
      const up = new Promise<void>((resolve) => {
        s.once('connect', () => resolve());
        s.once('close', () => resolve());
      });
      await within(this.closeTimeoutMs, up);
    }
    if (this.connected) {
      this.flushPending(s);
      s.end();
      await within(this.closeTimeoutMs, gone);
    }
    this.dropPending();
    s.destroy();
  }

  private dropPending(): void {
    for (const c of this.pending) this.dropped += c.lines;
    this.pending = [];
    this.pendingBytes = 0;
  }

  private write(s: net.Socket, chunk: Chunk): void {
    s.write(chunk.text, (err) => {
      if (err) this.dropped += chunk.lines;
    });
  }

  private flushPending(s: net.Socket): void {
    while (this.pending.length > 0 && s.writableLength < this.maxPendingBytes) {
      const c = this.pending.shift()!;
      this.pendingBytes -= c.bytes;
      this.write(s, c);
    }
  }

  private connect(): void {
    this.reconnectTimer = undefined;
    if (this.closed) return;
    const s = net.connect({ host: this.opts.host, port: this.opts.port });
    this.socket = s;
    s.unref();
    s.setNoDelay(true);
    s.setTimeout(this.connectTimeoutMs, () => s.destroy(new Error(`connect timed out after ${this.connectTimeoutMs} ms`)));
    s.on('data', () => {}); // a statsd server says nothing; read and discard anything it does
    s.once('connect', () => {
      s.setTimeout(0);
      this.connected = true;
      this.reconnectDelays.reset();
      if (this.down) {
        this.down = false;
        this.logger.info(`statsd: connected to ${this.target} again`);
      }
      this.flushPending(s);
    });
    s.on('drain', () => this.flushPending(s));
    s.on('error', (err) => {
      if (!this.down && !this.closed) {
        this.down = true;
        this.logger.warn(
          `statsd: connection to ${this.target} failed: ${err.message}; reconnecting in the background ` +
            `(stats are held up to ${this.maxPendingBytes} bytes, then dropped)`,
        );
      }
    });
    s.once('close', () => {
      if (this.socket === s) {
        this.socket = undefined;
        this.connected = false;
      }
      if (!this.closed) this.scheduleReconnect();
    });
  }

  private scheduleReconnect(): void {
    if (this.reconnectTimer !== undefined || this.closed) return;
    this.reconnectTimer = setTimeout(() => this.connect(), this.reconnectDelays.next());
    this.reconnectTimer.unref();
  }
}

class UdpTransport implements Transport {
  readonly chunkBytes: number;
  dropped = 0;
  private socket: dgram.Socket | undefined;
  private inflight = 0;
  private idle: (() => void) | undefined;
  private closed = false;
  private warned = false;
  private readonly closeTimeoutMs: number;

  constructor(
    private readonly opts: StatsdSinkOptions,
    private readonly logger: Logger,
  ) {
    this.chunkBytes = opts.maxPacketBytes ?? 1432;
    this.closeTimeoutMs = opts.closeTimeoutMs ?? 2_000;
  }

  start(): void {
    if (this.socket !== undefined || this.closed) return;
    const s = dgram.createSocket(net.isIPv6(this.opts.host) ? 'udp6' : 'udp4');
    s.unref();
    s.on('error', (err) => this.warn(err));
    this.socket = s;
  }

  send(chunk: Chunk): void {
    if (this.closed) {
      this.dropped += chunk.lines;
      return;
    }
    this.start();
    this.inflight++;
    this.socket!.send(chunk.text, this.opts.port, this.opts.host, (err) => {
      if (err) {
        this.dropped += chunk.lines;
        this.warn(err);
      }
      if (--this.inflight === 0 && this.idle !== undefined) this.idle();
    });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const s = this.socket;
    if (s === undefined) return;
    if (this.inflight > 0) await within(this.closeTimeoutMs, new Promise<void>((resolve) => (this.idle = resolve)));
    await new Promise<void>((resolve) => s.close(() => resolve()));
  }

  private warn(err: Error): void {
    if (this.warned || this.closed) return;
    this.warned = true;
    this.logger.warn(`statsd: sending to ${this.opts.host}:${this.opts.port} over UDP failed: ${err.message} (logged once)`);
  }
}
