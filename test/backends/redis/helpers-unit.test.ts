import net from 'node:net';
/** The pure pieces of the Redis store: auth and URL parsing, masking, backoff, error classes. */
import {
  maskUrl,
  parseAddress,
  parseAuth,
  reconnectDelayMs,
} from '../../../src/backends/redis/connection';
import { toStoreError } from '../../../src/backends/redis/errors';
import { StoreError } from '../../../src/core/store';
import { freePort, requireBinary } from '../../support/redis';

describe('redis connection helpers', () => {
  it('splits REDIS_AUTH on the first colon', () => {
    expect(parseAuth('')).toEqual({});
    expect(parseAuth('secret')).toEqual({ password: 'secret' });
    expect(parseAuth('user:pa:ss')).toEqual({ username: 'user', password: 'pa:ss' });
    expect(parseAuth(':pw')).toEqual({ username: '', password: 'pw' });
  });

  it('masks passwords in URLs', () => {
    expect(maskUrl('redis://user:secret@host:6379/0')).toBe('redis://user:***@host:6379/0');
    expect(maskUrl('rediss://:secret@host:6380')).toBe('rediss://:***@host:6380');
    expect(maskUrl('a:1@h1:1,b:2@h2:2')).toBe('a:***@h1:1,b:***@h2:2');
    expect(maskUrl('127.0.0.1:6379')).toBe('127.0.0.1:6379');
    expect(maskUrl('mymaster,127.0.0.1:26379,127.0.0.1:26380')).toBe('mymaster,127.0.0.1:26379,127.0.0.1:26380');
    expect(maskUrl('/var/run/nutcracker/ratelimit.sock')).toBe('/var/run/nutcracker/ratelimit.sock');
  });

  it('parses host:port, [v6]:port, bare hosts and redis:// URLs', () => {
    expect(parseAddress('127.0.0.1:6380')).toEqual({ host: '127.0.0.1', port: 6380 });
    expect(parseAddress(' redis.local ')).toEqual({ host: 'redis.local', port: 6379 });
    expect(parseAddress('[::1]:7000')).toEqual({ host: '::1', port: 7000 });
    expect(parseAddress('rediss://u:p%40ss@h:7001/2')).toEqual({ host: 'h', port: 7001, username: 'u', password: 'p@ss', db: 2, tls: true });
    expect(() => parseAddress('host:notaport')).toThrow('invalid Redis address');
  });

  it('reconnects after 50 ms doubling to 2 s (ioredis counts attempts from 1)', () => {
    expect([1, 2, 3, 4, 5, 6, 7, 50].map(reconnectDelayMs)).toEqual([50, 100, 200, 400, 800, 1600, 2000, 2000]);
  });
});

describe('redis store errors', () => {
  const reply = (message: string): Error => Object.assign(new Error(message), { name: 'ReplyError' });

  it.each([
    ['CLUSTERDOWN The cluster is down', true],
    ['LOADING Redis is loading the dataset in memory', true],
    ['TRYAGAIN Multiple keys request during rehashing of slot', true],
    ['MOVED 3999 127.0.0.1:6381', true],
    ["READONLY You can't write against a read only replica.", true],
    ['MASTERDOWN Link with MASTER is down', true],
    ['WRONGTYPE Operation against a key holding the wrong kind of value', false],
    ['NOAUTH Authentication required.', false],
    ['ERR syntax error', false],
    ['ERR value is not an integer or out of range', false],
  ])('reply %j → transient %s', (message, transient) => {
    const e = toStoreError(reply(message));
    expect(e).toBeInstanceOf(StoreError);
    expect(e.message).toBe(message);
    expect(e.transient).toBe(transient);
  });

  it('treats client-side failures (lost connection, timeout) as transient', () => {
    for (const m of ['Connection is closed.', 'Command timed out', "Stream isn't writeable and enableOfflineQueue options is false"]) {
      expect(toStoreError(new Error(m))).toEqual(expect.objectContaining({ message: m, transient: true }));
    }
    const same = new StoreError('x', false);
    expect(toStoreError(same)).toBe(same);
  });
});

describe('test support', () => {
  it('fails clearly (never skips) when a binary is missing', () => {
    expect(() => requireBinary('redis-server-that-does-not-exist')).toThrow(/redis-server-that-does-not-exist is required by the Redis tests/);
    expect(() => requireBinary('redis-server')).not.toThrow();
  });

  it('finds a free loopback port: nothing listens on it, and a server can bind it', async () => {
    const port = await freePort();
    const refused = await new Promise<string>((resolve) => {
      const sock = net.connect(port, '127.0.0.1');
      sock.once('connect', () => {
        sock.destroy();
        resolve('connected');
      });
      sock.once('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? e.message));
    });
    expect(refused).toBe('ECONNREFUSED');
    const srv = net.createServer();
    await new Promise<void>((resolve, reject) => {
      srv.once('error', reject);
      srv.listen(port, '127.0.0.1', resolve);
    });
    expect((srv.address() as net.AddressInfo).port).toBe(port);
    await new Promise<void>((resolve) => srv.close(() => resolve()));
  });
});
