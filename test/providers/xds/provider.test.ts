import { Duration } from '../../../generated/google/protobuf/duration';
import { RateLimitConfig as RateLimitConfigProto, RateLimitUnit } from '../../../generated/ratelimit/config/ratelimit/v3/rls_conf';
import { ConfigBuilder } from '../../../src/providers/config-builder';
import { reconnectBackoff } from '../../../src/providers/xds/provider';
import { StatsStore } from '../../../src/stats/store';
import { rlc, TestXdsServer } from '../../support/xds';

import { onCleanup, runCleanups, setupProvider, simple, xdsSettings } from './helpers';
import { quietFor, waitFor } from '../../support/wait';

afterEach(runCleanups);

async function server(): Promise<TestXdsServer> {
  const s = await TestXdsServer.start();
  onCleanup(() => s.stop());
  return s;
}

function entries(...kv: Array<[string, string]>) {
  return { entries: kv.map(([key, value]) => ({ key, value })) };
}

describe('reconnectBackoff (XDS_CLIENT_BACKOFF_*)', () => {
  const next = (b: { next(): number }, n: number) => Array.from({ length: n }, () => b.next());

  test('jitter off: the plain doubling, whatever the random factor', () => {
    const b = reconnectBackoff({ initialIntervalMs: 100, maxIntervalMs: 1000, randomFactor: 0.5, jitter: false }, () => 0);
    expect(next(b, 6)).toEqual([100, 200, 400, 800, 1000, 1000]);
  });

  test('jitter on: the random factor is the spread around the doubling base, capped at the max', () => {
    const values = [0, 0.5, 0.999999, 0.25];
    let i = 0;
    const b = reconnectBackoff({ initialIntervalMs: 1000, maxIntervalMs: 5000, randomFactor: 0.5, jitter: true }, () => values[i++]!);
    // r = 0 → base × 0.5; r = 0.5 → base; r → 1 → base × 1.5 (6000, over the max: capped); r = 0.25 → 5000 × 0.75
    expect(next(b, 4)).toEqual([500, 2000, 5000, 3750]);
  });
});

describe('XdsProvider', () => {
  /** `n` descriptors client_id=client_<i>, each limited to i+1 a minute. */
  const many = (name: string, n: number) =>
    rlc(name, 'big', Array.from({ length: n }, (_, i) => ({ key: 'client_id', value: `client_${i}`, rateLimit: { unit: RateLimitUnit.MINUTE, requestsPerUnit: i + 1 } })));

  test('a big response is built off the event loop and ACKed after it, in order; one over CONFIG_MAX_BYTES is NACKed by name', async () => {
    const xds = await server();
    const p = setupProvider(xdsSettings({ serverUrl: xds.address }), { maxBytes: 200_000 });
    p.provider.start();
    await xds.waitForRequest((r) => r.kind === 'subscribe');
    const big = many('big', 3_000);
    expect(RateLimitConfigProto.encode(big).finish().byteLength).toBeGreaterThan(64 * 1024); // built in the worker
    xds.push('1', [big]);
    xds.push('2', [simple('small', 'dom-a', 'a', 5)]);
    // The second waits for the first: both are ACKed, in order, and the second is what stays.
    await xds.waitForRequest((r) => r.kind === 'ack' && r.request.versionInfo === '2');
    const acks = xds.requests.filter((r) => r.kind === 'ack').map((r) => r.request.versionInfo);
    expect(acks).toEqual(['1', '2']);
    expect(p.successes()).toBe(2);
    expect(p.config()?.hasDomain('dom-a')).toBe(true);
    expect(p.logger.messages('error')).toContain(
      'the new configuration has 1 rate limit rules (1 domains), the one it replaces had 3000 (1 domains)',
    );

    xds.push('3', [many('big', 8_000)]); // about 280 KB
    const nack = await xds.waitForRequest((r) => r.kind === 'nack');
    expect(nack.request.errorDetail?.message).toMatch(/^the configuration holds \d+ bytes, more than the 200000 set by CONFIG_MAX_BYTES; it was not loaded$/);
    expect(nack.request.versionInfo).toBe('2');
    expect(p.config()?.hasDomain('dom-a')).toBe(true);
  }, 60_000);

  test('a response over CONFIG_MAX_RESOURCES or CONFIG_MAX_DESCRIPTORS is NACKed by name at once, nothing built; the last config stays', async () => {
    const xds = await server();
    const stats = new StatsStore();
    let builds = 0;
    const builder = new (class extends ConfigBuilder {
      override build(...args: Parameters<ConfigBuilder['build']>) {
        builds++;
        return super.build(...args);
      }
    })({ stats });
    onCleanup(() => builder.close());
    const p = setupProvider(xdsSettings({ serverUrl: xds.address }), { maxResources: 1000, maxDescriptors: 2_000, builder });
    xds.push('1', [simple('one', 'dom-a', 'a', 5)]);
    p.provider.start();
    await xds.waitForRequest((r) => r.kind === 'ack' && r.request.versionInfo === '1');
    expect(builds).toBe(1);
    const good = p.store.current();

    // 40,000 resources (about 2.6 MB, under gRPC's 4 MiB): counted on the wire, not decoded.
    xds.push('2', Array.from({ length: 40_000 }, (_, i) => rlc(`r${i}`, `d${i}`)));
    const started = Date.now();
    const nack = await xds.waitForRequest((r) => r.kind === 'nack', 10_000);
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(nack.request.errorDetail?.message).toBe('the response has 40000 resources, more than the 1000 set by CONFIG_MAX_RESOURCES; it was not loaded');
    expect(nack.request.versionInfo).toBe('1');
    expect(nack.request.responseNonce).toBe(xds.responses.at(-1)!.response.nonce);

    xds.push('3', [simple('one', 'dom-a', 'a', 5), many('big', 2_500)]);
    const nack2 = await xds.waitForRequest((r) => r.kind === 'nack' && r.request.responseNonce === xds.responses.at(-1)!.response.nonce);
    expect(nack2.request.errorDetail?.message).toBe('big: the configuration has more than 2000 descriptors, the limit set by CONFIG_MAX_DESCRIPTORS; it was not loaded');
    expect(builds).toBe(1);
    expect(p.store.current()).toBe(good);
    expect(p.errors()).toBe(2);
    expect(p.logger.messages('warn')).toContain(
      'xDS config version 2 rejected (NACK): the response has 40000 resources, more than the 1000 set by CONFIG_MAX_RESOURCES; it was not loaded',
    );
  }, 30_000);

  test('initial request, load and ACK with the response version and nonce', async () => {
    const xds = await server();
    xds.push('1', [simple('one', 'dom-a', 'a', 5), simple('two', 'dom-b', 'b', 7)]);
    const p = setupProvider(xdsSettings({ serverUrl: xds.address }));

    expect(p.provider.start()).toBeUndefined(); // returns at once
    expect(p.store.hasFirstEvent).toBe(false);
    const first = await p.store.waitForFirst();
    expect(first?.config.domainCount).toBe(2);

    const ack = await xds.waitForRequest((r) => r.kind === 'ack');
    const [subscribe] = xds.requests;
    expect(subscribe!.kind).toBe('subscribe');
    expect(subscribe!.request).toMatchObject({
      versionInfo: '',
      responseNonce: '',
      typeUrl: 'type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig',
      resourceNames: [],
      errorDetail: undefined,
      node: { id: 'test-node' },
    });
    expect(ack.request.versionInfo).toBe('1');
    expect(ack.request.responseNonce).toBe(xds.responses[0]!.response.nonce);
    expect(ack.request.errorDetail).toBeUndefined();
    expect(ack.stale).toBe(false);

    const config = p.config()!;
    expect(config.getLimit('dom-a', entries(['a', 'x']))?.limit).toEqual({ name: '', requestsPerUnit: 5, unit: RateLimitUnit.MINUTE });
    expect(config.getLimit('dom-b', entries(['b', 'x']))?.limit.requestsPerUnit).toBe(7);
    expect(p.successes()).toBe(1);
    expect(p.provider.lastAckedVersion).toBe('1');
    expect(p.logger.messages('info')).toContain('xDS config version 1 accepted');
  });

  test('update → new config; invalid update → NACK with the last good version, old config kept', async () => {
    const xds = await server();
    xds.push('1', [simple('one', 'dom', 'a', 1)]);
    const p = setupProvider(xdsSettings({ serverUrl: xds.address }));
    p.provider.start();
    await xds.waitForRequest((r) => r.kind === 'ack' && r.request.versionInfo === '1');

    xds.push('2', [simple('one', 'dom', 'a', 2)]);
    await xds.waitForRequest((r) => r.kind === 'ack' && r.request.versionInfo === '2');
    expect(p.config()!.getLimit('dom', entries(['a', 'x']))?.limit.requestsPerUnit).toBe(2);
    const good = p.store.current();

    xds.push('3', [simple('one', 'dom', 'a', 3), rlc('broken', 'dom2', [{ key: '', rateLimit: { unit: RateLimitUnit.SECOND, requestsPerUnit: 1 } }])]);
    const nack = await xds.waitForRequest((r) => r.kind === 'nack');
    expect(nack.request.versionInfo).toBe('2');
    expect(nack.request.responseNonce).toBe(xds.responses.at(-1)!.response.nonce);
    expect(nack.request.errorDetail).toEqual({ code: 0, message: 'broken: descriptor has empty key', details: [] });
    expect(p.store.current()).toBe(good);
    expect(p.errors()).toBe(1);
    expect(p.successes()).toBe(2);
    expect(p.provider.lastAckedVersion).toBe('2');
    expect(p.logger.messages('warn')).toContain('xDS config version 3 rejected (NACK): broken: descriptor has empty key');
    expect(p.logger.messages('error')).toContain('Error loading new configuration: broken: descriptor has empty key');

    // A later good version is accepted again.
    xds.push('4', [simple('one', 'dom', 'a', 4)]);
    await xds.waitForRequest((r) => r.kind === 'ack' && r.request.versionInfo === '4');
    expect(p.config()!.getLimit('dom', entries(['a', 'x']))?.limit.requestsPerUnit).toBe(4);
  });

  test('an empty resource list loads an empty config', async () => {
    const xds = await server();
    xds.push('1', [simple('one', 'dom')]);
    const p = setupProvider(xdsSettings({ serverUrl: xds.address }));
    p.provider.start();
    await xds.waitForRequest((r) => r.kind === 'ack' && r.request.versionInfo === '1');
    expect(p.config()!.domainCount).toBe(1);
    xds.push('2', []);
    await xds.waitForRequest((r) => r.kind === 'ack' && r.request.versionInfo === '2');
    expect(p.config()!.domainCount).toBe(0);
    expect(p.config()!.dump()).toBe('');
  });

  test('a resource of another type or that does not decode: NACK, load error', async () => {
    const xds = await server();
    const p = setupProvider(xdsSettings({ serverUrl: xds.address }));
    p.provider.start();
    await xds.waitForRequest((r) => r.kind === 'subscribe');

    const duration = { typeUrl: 'type.googleapis.com/google.protobuf.Duration', value: Buffer.from(Duration.encode({ seconds: 1n, nanos: 0 }).finish()) };
    xds.push('1', [simple('ok', 'dom'), duration]);
    const nack = await xds.waitForRequest((r) => r.kind === 'nack');
    expect(nack.request.versionInfo).toBe('');
    expect(nack.request.errorDetail?.message).toBe(
      'resource 1: cannot unpack "type.googleapis.com/google.protobuf.Duration" as ratelimit.config.ratelimit.v3.RateLimitConfig: mismatched message type',
    );
    // The first event was a failure: start-up would go on without a config.
    expect(await p.store.waitForFirst()).toBeUndefined();

    xds.push('2', [{ typeUrl: 'type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig', value: Buffer.from([0x0a, 0xff]) }]);
    const nack2 = await xds.waitForRequest((r) => r.kind === 'nack' && r.request.responseNonce === xds.responses.at(-1)!.response.nonce);
    expect(nack2.request.errorDetail?.message).toMatch(/^resource 0: cannot decode ratelimit\.config\.ratelimit\.v3\.RateLimitConfig: /);
    expect(p.errors()).toBe(2);
    expect(p.store.current()).toBeUndefined();
  });

  test('MERGE_DOMAIN_CONFIG is read at each response', async () => {
    const xds = await server();
    let merge = false;
    const p = setupProvider(xdsSettings({ serverUrl: xds.address }), { merge: () => merge });
    const resources = [simple('a', 'dom', 'x'), simple('b', 'dom', 'y')];
    xds.push('1', resources);
    p.provider.start();
    const nack = await xds.waitForRequest((r) => r.kind === 'nack');
    expect(nack.request.errorDetail?.message).toBe("b: duplicate domain 'dom' in config file");
    merge = true;
    xds.push('2', resources);
    await xds.waitForRequest((r) => r.kind === 'ack' && r.request.versionInfo === '2');
    expect(p.config()!.domainCount).toBe(1);
  });

  test('node id and metadata on every request; additional headers on the stream', async () => {
    const xds = await server();
    xds.push('1', [simple('one', 'dom')]);
    const p = setupProvider(
      xdsSettings({
        serverUrl: xds.address,
        nodeId: 'rl-node-7',
        nodeMetadata: { zone: 'eu-1', role: 'ratelimit' },
        additionalHeaders: { 'x-tenant': 'blue', Authorization: 'Bearer abc' },
      }),
    );
    p.provider.start();
    await xds.waitForRequest((r) => r.kind === 'ack' && r.request.versionInfo === '1');
    xds.push('2', [rlc('bad', '')]);
    await xds.waitForRequest((r) => r.kind === 'nack');
    expect(xds.requests.map((r) => r.kind)).toEqual(['subscribe', 'ack', 'nack']);
    for (const r of xds.requests) {
      expect(r.request.node?.id).toBe('rl-node-7');
      expect(r.request.node?.metadata).toEqual({ zone: 'eu-1', role: 'ratelimit' });
      expect(r.request.typeUrl).toBe('type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig');
      expect(r.headers['x-tenant']).toBe('blue');
      expect(r.headers['authorization']).toBe('Bearer abc');
    }
  });

  test('server stopped mid-stream: old config kept, reconnect after the backoff, last ACKed version resent', async () => {
    const xds = await server();
    xds.push('1', [simple('one', 'dom', 'a', 1)]);
    const p = setupProvider(
      xdsSettings({ serverUrl: xds.address, connectRetryIntervalMs: 100, backoff: { initialIntervalMs: 40, maxIntervalMs: 1000, randomFactor: 0.5 } }),
    );
    p.provider.start();
    await xds.waitForRequest((r) => r.kind === 'ack' && r.request.versionInfo === '1');
    xds.push('2', [simple('one', 'dom', 'a', 2)]);
    await xds.waitForRequest((r) => r.kind === 'ack' && r.request.versionInfo === '2');
    const good = p.store.current();
    expect(p.provider.connected).toBe(true);

    await xds.stop();
    // The lost stream (it had delivered responses): one backoff delay from the initial interval...
    await waitFor(() => p.logger.messages('warn').some((m) => m.includes('closed')), 'the stream-loss warning');
    const closed = p.logger.messages('warn').find((m) => m.includes('closed'))!;
    expect(closed).toMatch(/^xDS stream to 127\.0\.0\.1:\d+ closed \(\w+: .*\); keeping the current configuration, reconnecting in (\d+) ms$/);
    const wait = Number(/reconnecting in (\d+) ms/.exec(closed)![1]);
    expect(wait).toBeGreaterThanOrEqual(20);
    expect(wait).toBeLessThanOrEqual(60);
    // ...then connection attempts every connectRetryIntervalMs while the server is down.
    await waitFor(() => p.logger.messages('warn').filter((m) => m.includes('failed')).length >= 2, 'two failed connection attempts');
    for (const m of p.logger.messages('warn').filter((w) => w.includes('failed'))) {
      expect(m).toMatch(/^xDS connection to 127\.0\.0\.1:\d+ failed \(UNAVAILABLE: .*\); retrying in 100 ms$/);
    }
    expect(p.store.current()).toBe(good);
    expect(p.errors()).toBe(0);

    const before = xds.requests.length;
    await xds.restart();
    const resub = await xds.waitForRequest((r) => r.kind === 'subscribe', 5000, before);
    expect(resub.request.versionInfo).toBe('2');
    expect(resub.request.responseNonce).toBe('');
    expect(resub.request.node?.id).toBe('test-node');
    expect(resub.streamId).not.toBe(xds.requests[0]!.streamId);
    // The restarted server still serves version 2: re-applied and ACKed on the new stream.
    await xds.waitForRequest((r) => r.kind === 'ack' && r.streamId === resub.streamId);
    xds.push('3', [simple('one', 'dom', 'a', 3)]);
    await xds.waitForRequest((r) => r.kind === 'ack' && r.request.versionInfo === '3');
    expect(p.config()!.getLimit('dom', entries(['a', 'x']))?.limit.requestsPerUnit).toBe(3);
  });

  test('no server at start: connection attempts every connectRetryIntervalMs until it comes up', async () => {
    const xds = await server();
    await xds.stop(); // keep its port, nobody listening
    xds.push('1', [simple('one', 'dom')]);
    const p = setupProvider(xdsSettings({ serverUrl: xds.address, connectRetryIntervalMs: 60 }));
    p.provider.start();
    await waitFor(() => p.logger.messages('warn').length >= 3, 'three failed attempts');
    expect(p.store.hasFirstEvent).toBe(false);
    expect(p.provider.connected).toBe(false);
    await xds.restart();
    await p.store.waitForFirst();
    expect(p.config()!.domainCount).toBe(1);
    const subs = xds.find((r) => r.kind === 'subscribe');
    expect(subs).toHaveLength(1);
    expect(subs[0]!.request.versionInfo).toBe('');
  });

  test('stop() closes the stream and no request follows', async () => {
    const xds = await server();
    xds.push('1', [simple('one', 'dom')]);
    const p = setupProvider(xdsSettings({ serverUrl: xds.address }));
    p.provider.start();
    await xds.waitForRequest((r) => r.kind === 'ack');
    expect(xds.openStreams).toBe(1);
    p.provider.stop();
    await waitFor(() => xds.openStreams === 0, 'the stream closed on the server');
    const n = xds.requests.length;
    xds.push('2', [simple('one', 'dom', 'k', 2)]);
    await quietFor(150);
    expect(xds.requests.length).toBe(n);
    expect(() => p.provider.start()).toThrow('start() after stop()');
  });

  test('unusable settings make start() throw', () => {
    const p = setupProvider(xdsSettings({ tls: { enabled: true, clientCertFile: '/nonexistent.crt' } }));
    expect(() => p.provider.start()).toThrow('CONFIG_GRPC_XDS_CLIENT_TLS_CERT and CONFIG_GRPC_XDS_CLIENT_TLS_KEY must be set together');
    const q = setupProvider(xdsSettings({ tls: { enabled: true, serverCaFile: '/nonexistent/ca.crt' } }));
    expect(() => q.provider.start()).toThrow(/cannot read CONFIG_GRPC_XDS_SERVER_TLS_CACERT \/nonexistent\/ca\.crt/);
    const r = setupProvider(xdsSettings({ additionalHeaders: { 'bad header': 'x' } }));
    expect(() => r.provider.start()).toThrow(/CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: invalid header "bad header"/);
    // A value grpc-js refuses is a secret: its error (which quotes it) is not passed on.
    const v = setupProvider(xdsSettings({ additionalHeaders: { authorization: 'Bearer s3cr3t\u00e9' } }));
    expect(() => v.provider.start()).toThrow(
      new Error('CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: invalid header "authorization": gRPC refuses its name or its value (not shown)'),
    );
  });

  test('max message size: a response over XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES fails the stream', async () => {
    const xds = await server();
    const big = rlc(
      'big',
      'dom',
      Array.from({ length: 200 }, (_, i) => ({ key: `key-${i}`, rateLimit: { unit: RateLimitUnit.SECOND, requestsPerUnit: i } })),
    );
    xds.push('1', [big]);
    const p = setupProvider(xdsSettings({ serverUrl: xds.address, maxMsgSizeInBytes: 512, backoff: { initialIntervalMs: 5000 } }));
    p.provider.start();
    await waitFor(() => p.logger.messages('warn').some((m) => m.includes('RESOURCE_EXHAUSTED')), 'the stream to fail');
    expect(p.store.hasFirstEvent).toBe(false);
  });
});
