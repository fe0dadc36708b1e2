/**
 * Both ports' connection bookkeeping: a drain stops the listener, ends every connection gracefully
 * and refuses one that arrives meanwhile; a forced close destroys what is left.
 */
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { ConnectionSet } from '../../src/server/connection-set';
import { waitFor } from '../support/wait';

interface Fake {
  readonly socket: net.Socket;
  ended: boolean;
  destroy(): void;
}

/** What a test opened, closed after it whatever its outcome. */
const opened: Array<net.Server | net.Socket> = [];
afterEach(async () => {
  for (const o of opened.splice(0)) {
    if (o instanceof net.Server) await new Promise((resolve) => (o.listening ? o.close(resolve) : resolve(undefined)));
    else o.destroy();
  }
});

async function serve() {
  const ended: Fake[] = [];
  const set = new ConnectionSet<Fake>((c) => {
    c.ended = true;
    ended.push(c);
  });
  const made: Fake[] = [];
  const refused: net.Socket[] = [];
  const server = net.createServer((socket) => {
    opened.push(socket);
    const c = set.admit(socket, () => {
      const fake: Fake = { socket, ended: false, destroy: () => socket.destroy() };
      made.push(fake);
      return fake;
    });
    if (c === undefined) refused.push(socket);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  opened.push(server);
  const port = (server.address() as AddressInfo).port;
  const connect = () =>
    new Promise<net.Socket>((resolve) => {
      const client = net.connect(port, '127.0.0.1', () => resolve(client));
      client.on('error', () => undefined);
      opened.push(client);
    });
  return { set, server, made, refused, connect };
}

test('a drain ends every connection and resolves once they and the listener have closed', async () => {
  const s = await serve();
  const client = await s.connect();
  await waitFor(() => s.made.length === 1, 'the connection admitted');
  let drained = false;
  const drain = s.set.drain(s.server).then(() => (drained = true));
  expect(s.made[0]!.ended).toBe(true);
  expect([...s.set]).toHaveLength(1); // still open until its socket closes
  expect(drained).toBe(false);
  s.made[0]!.socket.end(); // the connection finishes its work and closes
  client.on('end', () => client.end());
  await drain;
  await waitFor(() => [...s.set].length === 0, 'the closed connection forgotten');
});

test('a connection that arrives during a drain is refused; a forced close destroys what is left', async () => {
  const s = await serve();
  const first = await s.connect();
  await waitFor(() => s.made.length === 1, 'the first connection admitted');
  const early = s.set.drain(s.server);
  // The listener is closed now; a socket the server had already accepted still reaches admit.
  const late = new net.Socket();
  opened.push(late);
  s.server.emit('connection', late);
  expect(s.refused).toEqual([late]);
  expect(late.destroyed).toBe(true);
  expect(s.made).toHaveLength(1);
  s.set.forceClose();
  await new Promise((resolve) => first.once('close', resolve));
  await early;
});
