/**
 * The run's webhook notifications against real HTTP sinks on 127.0.0.1: what a sink receives and
 * in which order, and that no sink (one that hangs, one that fails, one that is slow to recover)
 * changes anything for the caller of notify(). Every wait is for a request to arrive or a count
 * to change; the timed bounds are generous for a loaded machine.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import { ManualClock } from '../../../../src/platform/clock';
import { MAX_BACKOFF_MS, MAX_EVENT_BYTES, Notifier, type NotifierOptions, type NotifyEvent } from '../../../../src/trading/runner/notify/notifier';
import type { LogWriter } from '../../../../src/telemetry/logger';
import { quietFor, waitFor } from '../../../support/wait';

interface Received {
  event: NotifyEvent;
  method: string;
  path: string;
  headers: http.IncomingHttpHeaders;
  atMs: number;
}

/** How a test sink answers its i-th request (0-based): a status, or never. */
type Answer = (i: number) => { status: number; headers?: Record<string, string> } | 'hang';

interface TestSink {
  url: string;
  port: number;
  received: Received[];
  /** Resolves with the n-th request (1-based) once it has arrived. */
  nth(n: number): Promise<Received>;
  /** Answers 200 to the requests left hanging. */
  release(): void;
  close(): Promise<void>;
}

const RUN = { strategy: 'ma-crossover', mode: 'paper', account: '8123456' };
const cleanups: (() => Promise<void>)[] = [];

afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function startSink(answer: Answer = () => ({ status: 200 })): Promise<TestSink> {
  const received: Received[] = [];
  const hanging: http.ServerResponse[] = [];
  let waiters: { n: number; resolve: (r: Received) => void }[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const r: Received = {
        event: JSON.parse(Buffer.concat(chunks).toString()) as NotifyEvent,
        method: req.method ?? '',
        path: req.url ?? '',
        headers: req.headers,
        atMs: performance.now(),
      };
      const a = answer(received.length);
      received.push(r);
      waiters = waiters.filter((w) => (received.length >= w.n ? (w.resolve(received[w.n - 1]!), false) : true));
      if (a === 'hang') hanging.push(res);
      else res.writeHead(a.status, a.headers).end('{"ok":true}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  const sink: TestSink = {
    url: `http://127.0.0.1:${port}/hook`,
    port,
    received,
    nth: (n) =>
      received.length >= n
        ? Promise.resolve(received[n - 1]!)
        : new Promise((resolve, reject) => {
            const timer = setTimeout(() => reject(new Error(`the sink on ${port} had ${received.length} requests, not ${n}, after 15 s`)), 15_000);
            waiters.push({ n, resolve: (r) => (clearTimeout(timer), resolve(r)) });
          }),
    release: () => {
      for (const res of hanging.splice(0)) res.writeHead(200).end();
    },
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  cleanups.push(sink.close);
  return sink;
}

function notifier(o: Partial<NotifierOptions> & Pick<NotifierOptions, 'urls'>): Notifier {
  const n = new Notifier({ run: RUN, ...o });
  cleanups.push(() => n.close(0));
  return n;
}

function captureLog(): LogWriter & { lines: { level: string; msg: string }[] } {
  const lines: { level: string; msg: string }[] = [];
  const at = (level: string) => (msg: string, fields?: Record<string, unknown>) => lines.push({ level, msg: fields ? `${msg} ${JSON.stringify(fields)}` : msg });
  return { lines, debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}

const seqs = (s: TestSink): number[] => s.received.map((r) => r.event.seq);
const hang: Answer = () => 'hang';

describe('what a sink receives', () => {
  it('every event, in seq order, with the envelope and the details; two sinks both receive all', async () => {
    const a = await startSink();
    const b = await startSink();
    const n = notifier({ urls: [a.url, b.url] });
    n.notify('run_started', { symbols: ['EUR/USD'] });
    n.notify('entry_sent', { symbol: 'EUR/USD', amount: 10, seq: 999, kind: 'not-mine' });
    n.notify('filled', { tradeId: '77', rate: 1.1 });
    n.notify('operator', { action: 'pause' });
    n.notify('run_ended', { reason: 'stopped' });
    await Promise.all([a.nth(5), b.nth(5)]);
    expect(seqs(a)).toEqual([1, 2, 3, 4, 5]);
    expect(seqs(b)).toEqual([1, 2, 3, 4, 5]);
    const first = a.received[0]!;
    expect(first.method).toBe('POST');
    expect(first.path).toBe('/hook');
    expect(first.headers['content-type']).toBe('application/json');
    expect(first.headers['user-agent']).toBe('ratelimit-runner');
    expect(first.event).toEqual({ kind: 'run_started', seq: 1, at: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3})?Z$/), run: RUN, symbols: ['EUR/USD'] });
    // a detail named like the envelope does not replace it
    expect(a.received[1]!.event).toMatchObject({ kind: 'entry_sent', seq: 2, symbol: 'EUR/USD', amount: 10 });
    expect(b.received.map((r) => r.event.kind)).toEqual(['run_started', 'entry_sent', 'filled', 'operator', 'run_ended']);
    await waitFor(() => n.stats().every((s) => s.sent === 5), 'both sinks to count 5 sent');
    expect(n.stats()[0]).toEqual({ url: a.url, sent: 5, failed: 0, dropped: 0, retried: 0, queued: 0, inFlight: false });
  });

  it('an event over 64 KB or one that cannot be serialized is refused, counted failed, logged; notify never throws', async () => {
    const s = await startSink();
    const log = captureLog();
    const n = notifier({ urls: [s.url], log });
    const cycle: Record<string, unknown> = {};
    cycle['self'] = cycle;
    expect(() => n.notify('strategy_error', { stack: 'x'.repeat(MAX_EVENT_BYTES) })).not.toThrow();
    expect(() => n.notify('strategy_error', { cycle })).not.toThrow();
    n.notify('run_ended');
    const r = await s.nth(1);
    expect(r.event).toMatchObject({ kind: 'run_ended', seq: 3 });
    expect(n.stats()[0]).toMatchObject({ failed: 2, lastError: { message: expect.stringMatching(/refused/) } });
    expect(log.lines.filter((l) => l.level === 'warn')).toHaveLength(1);
    expect(log.lines[0]!.msg).toMatch(/notification 1 \(strategy_error\) not sent: its JSON is \d+ bytes, over 65536/);
  });
});

describe('a sink that never answers', () => {
  it('costs notify() nothing, is abandoned at timeoutMs and retried, and holds no other sink', async () => {
    const hung = await startSink(hang);
    const healthy = await startSink();
    const n = notifier({ urls: [hung.url, healthy.url], timeoutMs: 300, retries: 1, backoffMs: 10 });
    const start = performance.now();
    const returned = Array.from({ length: 1000 }, (_, i) => n.notify('filled', { tradeId: String(i), rate: 1.1 + i / 1e5 }) as unknown);
    const took = performance.now() - start;
    expect(took).toBeLessThan(50);
    // nothing to await either: notify() hands back no promise
    expect(returned.every((r) => r === undefined)).toBe(true);

    await healthy.nth(1000);
    expect(seqs(healthy)).toEqual(Array.from({ length: 1000 }, (_, i) => i + 1));

    const [first, retry, next] = [await hung.nth(1), await hung.nth(2), await hung.nth(3)];
    expect([first.event.seq, retry.event.seq, next.event.seq]).toEqual([1, 1, 2]);
    expect(retry.atMs - first.atMs).toBeGreaterThanOrEqual(250);
    expect(retry.atMs - first.atMs).toBeLessThan(5000);
    const stats = n.stats()[0]!;
    expect(stats.failed).toBeGreaterThanOrEqual(1);
    expect(stats.retried).toBeGreaterThanOrEqual(1);
    expect(stats.lastError?.message).toBe('no answer within 300 ms');
  });
});

describe('failing answers', () => {
  it('500 twice then 200: delivered once after two retries; a 400 is not retried', async () => {
    const flaky = await startSink((i) => ({ status: i < 2 ? 500 : 200 }));
    const n = notifier({ urls: [flaky.url], backoffMs: 10 });
    n.notify('exit', { tradeId: '1' });
    await flaky.nth(3);
    expect(seqs(flaky)).toEqual([1, 1, 1]);
    await waitFor(() => n.stats()[0]!.sent === 1, 'the event counted sent');
    expect(n.stats()[0]).toMatchObject({ sent: 1, failed: 0, retried: 2, lastError: { message: expect.stringMatching(/^answered 500/) } });

    const refusing = await startSink(() => ({ status: 400 }));
    const m = notifier({ urls: [refusing.url], backoffMs: 10 });
    m.notify('exit', { tradeId: '1' });
    m.notify('exit', { tradeId: '2' });
    await refusing.nth(2);
    expect(seqs(refusing)).toEqual([1, 2]);
    await waitFor(() => m.stats()[0]!.failed === 2, 'both events counted failed');
    expect(m.stats()[0]).toMatchObject({ sent: 0, failed: 2, retried: 0 });
  });

  it('a failing sink is logged at warn once (no storm), its recovery at info once', async () => {
    const s = await startSink((i) => ({ status: i < 10 ? 503 : 200 }));
    const log = captureLog();
    const n = notifier({ urls: [s.url], retries: 0, log });
    for (let i = 0; i < 11; i++) n.notify('filled', { i });
    await s.nth(11);
    await waitFor(() => n.stats()[0]!.sent === 1, 'the 11th event counted sent');
    expect(n.stats()[0]).toMatchObject({ failed: 10, sent: 1 });
    expect(log.lines.map((l) => l.level)).toEqual(['warn', 'info']);
    expect(log.lines[0]!.msg).toMatch(/notification sink .* failing: answered 503/);
  });

  it('Retry-After of a 429 is waited for, up to the cap', async () => {
    const clock = new ManualClock(1_000_000);
    const s = await startSink((i) => (i === 0 ? { status: 429, headers: { 'Retry-After': '2' } } : i === 2 ? { status: 429, headers: { 'Retry-After': '3600' } } : { status: 200 }));
    const n = notifier({ urls: [s.url], backoffMs: 10, clock });
    n.notify('order_refused', { reason: 'budget' });
    await s.nth(1);
    await waitFor(() => n.stats()[0]!.retried === 1, 'the retry scheduled');
    clock.advance(1990);
    await quietFor(100);
    expect(s.received).toHaveLength(1);
    clock.advance(10);
    await s.nth(2);

    n.notify('order_refused', { reason: 'budget' });
    await s.nth(3);
    await waitFor(() => n.stats()[0]!.retried === 2, 'the second retry scheduled');
    clock.advance(MAX_BACKOFF_MS - 1);
    await quietFor(100);
    expect(s.received).toHaveLength(3);
    clock.advance(1);
    expect((await s.nth(4)).event.seq).toBe(2);
  });
});

describe('bounds', () => {
  it('a full queue drops the oldest and keeps the newest', async () => {
    const s = await startSink((i) => (i === 0 ? 'hang' : { status: 200 }));
    const n = notifier({ urls: [s.url], queueMax: 5 });
    for (let i = 0; i < 20; i++) n.notify('filled', { i });
    expect(n.stats()[0]).toMatchObject({ dropped: 15, queued: 5 });
    expect((await s.nth(1)).event.seq).toBe(16);
    s.release();
    await s.nth(5);
    expect(seqs(s)).toEqual([16, 17, 18, 19, 20]);
  });

  it('heartbeats arrive every heartbeatMs; while the sink is down at most one waits, the newest', async () => {
    const clock = new ManualClock(0);
    const up = await startSink();
    const n = notifier({ urls: [up.url], heartbeatMs: 1000, clock });
    clock.advance(1000);
    expect((await up.nth(1)).event).toMatchObject({ kind: 'heartbeat', seq: 1, run: RUN });
    clock.advance(1000);
    expect((await up.nth(2)).event).toMatchObject({ kind: 'heartbeat', seq: 2 });

    const down = await startSink((i) => (i === 0 ? 'hang' : { status: 200 }));
    const m = notifier({ urls: [down.url], heartbeatMs: 1000, timeoutMs: 60_000, clock });
    clock.advance(1000);
    await down.nth(1);
    for (let i = 0; i < 5; i++) clock.advance(1000);
    expect(m.stats()[0]).toMatchObject({ queued: 1, dropped: 0, inFlight: true });
    m.notify('filled');
    clock.advance(1000);
    expect(m.stats()[0]).toMatchObject({ queued: 2, dropped: 0, inFlight: true });
    down.release();
    await down.nth(3);
    // heartbeats 2 to 6 were each replaced by the next; the queued event keeps its place
    expect(down.received.map((r) => [r.event.kind, r.event.seq])).toEqual([
      ['heartbeat', 1],
      ['filled', 7],
      ['heartbeat', 8],
    ]);
  });
});

describe('close(ms)', () => {
  it('delivers the queued run_ended to a healthy sink before it resolves', async () => {
    const s = await startSink();
    const n = notifier({ urls: [s.url] });
    n.notify('exit', { tradeId: '1' });
    n.notify('run_ended', { reason: 'stopped' });
    await n.close(10_000);
    expect(s.received.map((r) => r.event.kind)).toEqual(['exit', 'run_ended']);
    expect(n.stats()[0]).toMatchObject({ sent: 2, dropped: 0 });
    n.notify('exit');
    expect(n.stats()[0]).toMatchObject({ queued: 0, inFlight: false });
  });

  it('with a hanging sink resolves by ms, the rest counted dropped', async () => {
    const s = await startSink(hang);
    const n = notifier({ urls: [s.url] });
    n.notify('exit', { tradeId: '1' });
    n.notify('run_ended', { reason: 'stopped' });
    await s.nth(1);
    const start = performance.now();
    await n.close(200);
    const took = performance.now() - start;
    expect(took).toBeGreaterThanOrEqual(150);
    expect(took).toBeLessThan(3000);
    expect(n.stats()[0]).toMatchObject({ sent: 0, dropped: 2, queued: 0, inFlight: false });
  });
});

describe('URLs', () => {
  it('a URL that is not http: or https:, or not a URL, is refused at construction', () => {
    expect(() => new Notifier({ urls: ['ftp://x'], run: RUN })).toThrow('--notify ftp://x/: only http: and https: URLs are supported, not ftp:');
    expect(() => new Notifier({ urls: ['not a URL'], run: RUN })).toThrow('--notify not a URL: not a URL (expected http://... or https://...)');
    expect(() => new Notifier({ urls: ['ftp://joe:hunter2@x/'], run: RUN })).toThrow(/^(?!.*hunter2)/);
    expect(() => new Notifier({ urls: ['http://joe:hunter2@[bad/'], run: RUN })).toThrow(/^(?!.*hunter2).*not a URL/);
  });

  it('credentials go as Basic auth and never into stats or logs; the query string is sent, not shown', async () => {
    const s = await startSink((i) => ({ status: i === 0 ? 500 : 200 }));
    const log = captureLog();
    const n = notifier({ urls: [`http://alice:s3cr%40t@127.0.0.1:${s.port}/hook?token=abc123`], retries: 1, backoffMs: 10, log });
    n.notify('disconnected', { reason: 'socket closed' });
    const r = await s.nth(2);
    expect(r.headers.authorization).toBe(`Basic ${Buffer.from('alice:s3cr@t').toString('base64')}`);
    expect(r.path).toBe('/hook?token=abc123');
    await waitFor(() => n.stats()[0]!.sent === 1, 'the event counted sent');
    expect(n.stats()[0]!.url).toBe(s.url);
    const shown = JSON.stringify(n.stats()) + JSON.stringify(log.lines);
    expect(log.lines.length).toBeGreaterThan(0);
    for (const secret of ['alice', 's3cr', 'abc123']) expect(shown).not.toContain(secret);
  });
});
