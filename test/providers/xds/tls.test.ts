import { CLIENT2_SAN, CLIENT_SAN, SERVER_SAN_DNS, type TestCerts, testCerts } from '../../support/certs';
import { TestXdsServer } from '../../support/xds';

import { onCleanup, runCleanups, setupProvider, simple, xdsSettings } from './helpers';
import { quietFor, waitFor } from '../../support/wait';

let certs: TestCerts;

beforeAll(() => {
  certs = testCerts();
});

afterEach(runCleanups);

async function tlsServer(mtls: boolean, pair = certs.server): Promise<TestXdsServer> {
  const s = await TestXdsServer.start({ tls: { cert: pair.cert, key: pair.key, clientCa: mtls ? certs.ca.cert : undefined } });
  onCleanup(() => s.stop());
  s.push('1', [simple('one', 'dom')]);
  return s;
}

function tlsSettings(serverUrl: string, over: { client?: { cert: string; key: string } | null; san?: string; ca?: string } = {}) {
  const client = over.client === undefined ? certs.client : over.client;
  return xdsSettings({
    serverUrl,
    connectRetryIntervalMs: 100,
    tls: {
      enabled: true,
      serverCaFile: over.ca ?? certs.ca.cert,
      clientCertFile: client?.cert ?? '',
      clientKeyFile: client?.key ?? '',
      serverSan: over.san ?? '',
    },
  });
}

/** Waits long enough for a few connection attempts, then checks nothing got through. */
async function expectRejected(xds: TestXdsServer, p: ReturnType<typeof setupProvider>): Promise<void> {
  await waitFor(() => p.logger.messages('warn').length >= 2, 'two failed attempts', 5000);
  await quietFor(100);
  expect(xds.requests).toHaveLength(0);
  expect(p.store.hasFirstEvent).toBe(false);
}

describe('xDS over TLS', () => {
  test('mTLS: the server verifies the client certificate, the client the server certificate', async () => {
    const xds = await tlsServer(true);
    const p = setupProvider(tlsSettings(`localhost:${xds.port}`));
    p.provider.start();
    await xds.waitForRequest((r) => r.kind === 'ack' && r.request.versionInfo === '1');
    expect(p.config()!.domainCount).toBe(1);
    expect(xds.requests[0]!.peerSan).toBe(`DNS:${CLIENT_SAN}`);
  });

  test('the second client certificate is seen with its own SAN', async () => {
    const xds = await tlsServer(true);
    const p = setupProvider(tlsSettings(`localhost:${xds.port}`, { client: certs.client2 }));
    p.provider.start();
    await xds.waitForRequest((r) => r.kind === 'ack');
    expect(xds.requests[0]!.peerSan).toBe(`DNS:${CLIENT2_SAN}`);
  });

  test('server-only TLS without a client certificate', async () => {
    const xds = await tlsServer(false);
    const p = setupProvider(tlsSettings(`localhost:${xds.port}`, { client: null }));
    p.provider.start();
    await xds.waitForRequest((r) => r.kind === 'ack');
    expect(xds.requests[0]!.peerSan).toBeUndefined();
  });

  test('SAN override: the server name checked is CONFIG_GRPC_XDS_SERVER_TLS_SAN, not the host dialled', async () => {
    const xds = await tlsServer(true);
    const ok = setupProvider(tlsSettings(`127.0.0.1:${xds.port}`, { san: SERVER_SAN_DNS }));
    ok.provider.start();
    await xds.waitForRequest((r) => r.kind === 'ack');
    ok.provider.stop();

    const before = xds.requests.length;
    const bad = setupProvider(tlsSettings(`127.0.0.1:${xds.port}`, { san: 'wrong.ratelimit.test' }));
    bad.provider.start();
    await waitFor(() => bad.logger.messages('warn').length >= 2, 'two failed attempts', 5000);
    expect(bad.logger.messages('warn')[0]).toMatch(/failed \(UNAVAILABLE: .*wrong\.ratelimit\.test.*\); retrying in 100 ms/);
    expect(xds.requests.length).toBe(before);
    expect(bad.store.hasFirstEvent).toBe(false);
  });

  test('a client without a certificate, or with one from another CA, is refused by an mTLS server', async () => {
    const xds = await tlsServer(true);
    const none = setupProvider(tlsSettings(`localhost:${xds.port}`, { client: null }));
    none.provider.start();
    await expectRejected(xds, none);
    none.provider.stop();
    const rogue = setupProvider(tlsSettings(`localhost:${xds.port}`, { client: certs.rogueClient }));
    rogue.provider.start();
    await expectRejected(xds, rogue);
  });

  test('a server certificate from another CA is refused by the client', async () => {
    const xds = await tlsServer(false, certs.rogueServer);
    const p = setupProvider(tlsSettings(`localhost:${xds.port}`));
    p.provider.start();
    await expectRejected(xds, p);
  });
});
