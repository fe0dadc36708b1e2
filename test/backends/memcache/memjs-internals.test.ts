/**
 * src/backends/memcache/node.ts reaches into memjs.Server's private fields (memjs has no public
 * socket access) to track and repair its sockets. memjs is pinned to the exact version below;
 * this test fails, naming the field, if an upgrade moves or reshapes what the wrapper relies on.
 */
import { Socket } from 'node:net';
import * as memjs from 'memjs';
import { MemcachedServer } from '../../support/memcached';

const PINNED = '1.3.2';

let mc: MemcachedServer;
beforeAll(async () => {
  mc = await MemcachedServer.start();
});
afterAll(async () => {
  await mc?.stop();
});

test(`memjs is the pinned ${PINNED} (package.json pins it exactly)`, () => {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  expect((require('memjs/package.json') as { version: string }).version).toBe(PINNED);
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  expect((require('../../../package.json') as { dependencies: Record<string, string> }).dependencies['memjs']).toBe(PINNED);
});

test('memjs.Server has the private fields the wrapper reads and resets', async () => {
  const server = new memjs.Server('127.0.0.1', mc.port, undefined, undefined, { timeout: 1, conntimeout: 1 });
  const s = server as unknown as Record<string, unknown>;
  const shape = {
    sock: typeof s['sock'],
    connected: typeof s['connected'],
    timeoutSet: typeof s['timeoutSet'],
    errorCallbacks: typeof s['errorCallbacks'],
    hasUsername: 'username' in s,
    hasPassword: 'password' in s,
  };
  expect(shape).toEqual({
    sock: 'function',
    connected: 'boolean',
    timeoutSet: 'boolean',
    errorCallbacks: 'object',
    hasUsername: true,
    hasPassword: true,
  });

  // sock(sasl, go) opens the connection and keeps it in `_socket`, which `go` receives.
  (s as { username: unknown; password: unknown }).username = undefined;
  (s as { username: unknown; password: unknown }).password = undefined;
  const given = await new Promise<Socket>((resolve) => (s['sock'] as (sasl: boolean, go: (sock: Socket) => void) => void).call(server, false, resolve));
  expect(given).toBeInstanceOf(Socket);
  expect(s['_socket']).toBe(given);
  expect(s['connected']).toBe(true);
  server.close();
});
