/**
 * WirePipeline against a real redis-server: the bytes it writes are exactly what ioredis's own
 * pipeline writes for the same commands, replies (and reply errors) come back in order even when
 * ioredis's own commands are interleaved, and a connection that is lost or not ready fails every
 * command instead of leaving the pipeline waiting. These pin the parts of ioredis's command
 * contract the store relies on (package.json allows a range of ioredis versions: an upgrade that
 * changed it fails here).
 */
import net from 'node:net';
import { Redis } from 'ioredis';
import { WirePipeline } from '../../../src/backends/redis/wire';
import { startRedis, type RedisServer } from '../../support/redis';

let redis: RedisServer;

beforeAll(async () => {
  redis = await startRedis();
});

afterAll(async () => {
  await redis?.stop();
});

/** A loopback TCP proxy in front of the real server that records what clients send. */
async function recordingProxy(): Promise<{ port: number; sent: () => Buffer; close: () => Promise<void> }> {
  const chunks: Buffer[] = [];
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(redis.port, redis.host);
    sockets.add(client).add(upstream);
    client.on('data', (d: Buffer) => {
      chunks.push(d);
      upstream.write(d);
    });
    upstream.on('data', (d: Buffer) => client.write(d));
    const end = (): void => {
      client.destroy();
      upstream.destroy();
    };
    client.on('close', end).on('error', end);
    upstream.on('close', end).on('error', end);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    sent: () => Buffer.concat(chunks),
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

async function client(port = redis.port): Promise<Redis> {
  // A short disconnectTimeout: ioredis arms it even on a socket that already died, and the test process must end at once.
  const c = new Redis({ host: '127.0.0.1', port, lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0, enableReadyCheck: false, disconnectTimeout: 20 });
  await c.connect();
  return c;
}

function send(c: Redis, p: WirePipeline): Promise<unknown[]> {
  return new Promise((resolve) => p.send(c, resolve));
}

describe('WirePipeline', () => {
  it('writes byte for byte what an ioredis pipeline writes for the same commands', async () => {
    const keys = ['wire_a_1700000000', 'wire_é_ünïcode_1700000000', 'wire_' + 'x'.repeat(300)];
    const viaIoredis = await recordingProxy();
    const viaWire = await recordingProxy();
    const a = await client(viaIoredis.port);
    const b = await client(viaWire.port);
    try {
      const base = [viaIoredis.sent().length, viaWire.sent().length] as const;
      const pipe = a.pipeline();
      const wire = new WirePipeline();
      for (const [i, k] of keys.entries()) {
        pipe.incrby(k, i + 1).expire(k, 60 + i);
        wire.incrbyExpire(k, i + 1, 60 + i);
      }
      pipe.get(keys[0]!);
      wire.command('get', [keys[0]!]);
      pipe.evalsha('0'.repeat(40), 1, keys[1]!, 's', 3);
      wire.command('evalsha', ['0'.repeat(40), 1, keys[1]!, 's', 3]);
      await pipe.exec();
      await send(b, wire);
      expect(viaWire.sent().subarray(base[1]).toString('latin1')).toBe(viaIoredis.sent().subarray(base[0]).toString('latin1'));
    } finally {
      a.disconnect();
      b.disconnect();
      await Promise.all([viaIoredis.close(), viaWire.close()]);
    }
  });

  it('takes the replies in order, reply errors in their place, beside ioredis commands in flight', async () => {
    const c = await client();
    try {
      await c.set('wire_string', 'abc');
      const p = new WirePipeline();
      p.incrbyExpire('wire_n', 5, 60);
      p.command('incrby', ['wire_string', 1]); // WRONGTYPE-like: not an integer
      p.command('get', ['wire_n']);
      p.command('get', ['wire_missing']);
      p.command('evalsha', ['f'.repeat(40), 0]);
      const before = c.get('wire_string');
      const replies = send(c, p);
      const after = c.incrby('wire_n', 10);
      const r = await replies;
      expect(r.slice(0, 2)).toEqual([5, 1]);
      expect(r[2]).toBeInstanceOf(Error);
      expect((r[2] as Error).message).toMatch(/^ERR value is not an integer/);
      expect(String(r[3])).toBe('5');
      expect(r[4]).toBeNull();
      expect((r[5] as Error).message).toMatch(/^NOSCRIPT/);
      expect(await before).toBe('abc');
      expect(await after).toBe(15);
      expect(await c.ttl('wire_n')).toBeGreaterThan(50);
    } finally {
      c.disconnect();
    }
  });

  it('fails every command of a pipeline whose connection is lost before the replies come', async () => {
    const proxy = await recordingProxy();
    const c = await client(proxy.port);
    try {
      redis.pause();
      const p = new WirePipeline();
      p.incrbyExpire('wire_lost', 1, 60);
      p.command('get', ['wire_lost']);
      const replies = send(c, p);
      await proxy.close(); // the connection drops while the server answers nothing
      const r = await replies;
      expect(r).toHaveLength(3);
      for (const e of r) expect(e).toBeInstanceOf(Error);
    } finally {
      redis.resume();
      c.disconnect();
    }
  });

  it('fails every command at once, writing nothing, on a connection that is not ready', async () => {
    const c = await client();
    c.disconnect();
    const write = jest.spyOn((c as unknown as { stream: net.Socket }).stream, 'write');
    const p = new WirePipeline();
    p.incrbyExpire('wire_closed', 1, 60);
    let replies: unknown[] | undefined;
    p.send(c, (r) => (replies = r));
    expect(write).not.toHaveBeenCalled();
    expect(replies).toHaveLength(2);
    for (const e of replies!) expect(e).toBeInstanceOf(Error);
  });
});
