/**
 * REDIS_TLS with the shared REDIS_TLS_CACERT / _CLIENT_CERT / _CLIENT_KEY files and
 * REDIS_TLS_SKIP_HOSTNAME_VERIFICATION, against TLS-only redis-servers (test CA from openssl).
 */
import { startRedis, type RedisServer } from '../../support/redis';
import { connectStore, op, recordingLogger, redisSettings } from './helpers';

const failFast = { initialIntervalMs: 50, maxIntervalMs: 50, maxElapsedTimeMs: 300 };

describe('redis store over TLS', () => {
  let server: RedisServer;
  let wrongHost: RedisServer;
  let mutual: RedisServer;

  beforeAll(async () => {
    [server, wrongHost, mutual] = await Promise.all([
      startRedis({ tls: true }),
      startRedis({ tls: { cert: 'wrong-host' } }),
      startRedis({ tls: { authClients: 'yes' } }),
    ]);
  });

  afterAll(async () => {
    await Promise.all([server?.stop(), wrongHost?.stop(), mutual?.stop()]);
  });

  it('connects with the CA file and counts', async () => {
    expect(server.tlsPort).toBe(server.port);
    const store = await connectStore(redisSettings({ url: server.address, tls: true, tlsCaCertFile: server.certs!.ca }));
    expect(await store.increment([op('tls_key', 2)], 0)).toEqual([2]);
    await store.close();
    expect(await server.cli(['GET', 'tls_key'])).toBe('2\n');
  });

  it('refuses a server whose chain it cannot verify (no CA file: system roots only)', async () => {
    const logger = recordingLogger();
    await expect(
      connectStore(redisSettings({ url: server.address, tls: true, startup: failFast }), { logger }),
    ).rejects.toThrow(`timed out waiting for Redis connection to ${server.address}`);
    expect(logger.lines.some((l) => /certificate/i.test(l.msg))).toBe(true);
  });

  it('checks the host name unless REDIS_TLS_SKIP_HOSTNAME_VERIFICATION, which still verifies the chain', async () => {
    const ca = wrongHost.certs!.ca;
    // The certificate names only redis.invalid: connecting to 127.0.0.1 fails the name check.
    const logger = recordingLogger();
    await expect(
      connectStore(redisSettings({ url: wrongHost.address, tls: true, tlsCaCertFile: ca, startup: failFast }), { logger }),
    ).rejects.toThrow('timed out waiting for Redis connection');
    expect(logger.lines.some((l) => /altnames|does not match/i.test(l.msg))).toBe(true);

    const store = await connectStore(
      redisSettings({ url: wrongHost.address, tls: true, tlsCaCertFile: ca, tlsSkipHostnameVerification: true }),
    );
    expect(await store.increment([op('skip_key')], 0)).toEqual([1]);
    await store.close();

    // Skipping the name check does not skip the chain: without the CA it still fails.
    await expect(
      connectStore(redisSettings({ url: wrongHost.address, tls: true, tlsSkipHostnameVerification: true, startup: failFast })),
    ).rejects.toThrow('timed out waiting for Redis connection');
  });

  it('sends the client certificate when the server requires one (tls-auth-clients yes)', async () => {
    const certs = mutual.certs!;
    await expect(
      connectStore(redisSettings({ url: mutual.address, tls: true, tlsCaCertFile: certs.ca, startup: failFast })),
    ).rejects.toThrow('timed out waiting for Redis connection');
    const store = await connectStore(
      redisSettings({
        url: mutual.address,
        tls: true,
        tlsCaCertFile: certs.ca,
        tlsClientCertFile: certs.clientCert,
        tlsClientKeyFile: certs.clientKey,
      }),
    );
    expect(await store.increment([op('mtls_key', 3)], 0)).toEqual([3]);
    await store.close();
  });

  it('uses TLS for a rediss:// URL', async () => {
    const store = await connectStore(redisSettings({ url: `rediss://${server.address}`, tlsCaCertFile: server.certs!.ca }));
    expect(await store.increment([op('rediss_key')], 0)).toEqual([1]);
    await store.close();
  });
});
