/** The simulator speaks Engine.IO 3 and 4 like the broker: raw handshakes, socket.io-client 2.x and 4.x. */
import { io as ioV4 } from 'socket.io-client';
// eslint-disable-next-line @typescript-eslint/no-require-imports
const ioV2 = require('socket.io-client-v2') as (url: string, opts: Record<string, unknown>) => any;
import { BrokerSimulator, UNAUTHORIZED } from '../../src/trading/simulator';
import { waitFor } from '../support/wait';

/** The broker's documented answer to a bad token. */
const BAD_TOKEN = 'Your token is not valid, please contact admin@fxcm.com';
import { decodePollingPayload } from '../../src/trading/fxcm';
import { TOKEN, once, startSim } from './helpers';

describe('simulator wire protocol', () => {
  let sim: BrokerSimulator;
  const clients: { close(): void }[] = [];
  beforeEach(async () => {
    sim = await startSim();
  });
  afterEach(async () => {
    for (const c of clients.splice(0)) c.close();
    await sim.stop();
  });

  const post = (path: string, bearer: string, body: string) =>
    fetch(`${sim.url}${path}`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${bearer}`, 'Content-Type': 'application/x-www-form-urlencoded', Accept: 'application/json', 'User-Agent': 'test' },
      body,
    }).then((r) => r.json() as Promise<any>);
  /** The same POST, with the HTTP status. */
  const postStatus = (path: string, bearer: string, body: string) =>
    fetch(`${sim.url}${path}`, { method: 'POST', headers: { Authorization: `Bearer ${bearer}`, 'Content-Type': 'application/x-www-form-urlencoded' }, body }).then(async (r) => ({
      status: r.status,
      body: (await r.json()) as any,
    }));

  test('EIO3 polling handshake with b64=1 is length-prefixed and carries the sid', async () => {
    const res = await fetch(`${sim.url}/socket.io/?access_token=${TOKEN}&EIO=3&transport=polling&t=abc&b64=1`);
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).toMatch(/^\d+:0\{"sid":"[^"]+","upgrades":\["websocket"\],"pingInterval":300,"pingTimeout":2000/);
    const packets = decodePollingPayload(text, 3);
    expect(packets[0]!.startsWith('0{')).toBe(true);
  });

  test('EIO4 polling handshake', async () => {
    const res = await fetch(`${sim.url}/socket.io/?access_token=${TOKEN}&EIO=4&transport=polling&t=abc`);
    const text = await res.text();
    expect(text).toMatch(/^0\{"sid":/);
  });

  test('a bad token is refused with HTTP 403 at the handshake', async () => {
    const res = await fetch(`${sim.url}/socket.io/?access_token=bad&EIO=3&transport=polling&t=abc&b64=1`);
    expect(res.status).toBe(403);
    await res.text();
  });

  test('socket.io-client 2.x (EIO3): socket.id equals the engine id, bearer works, price pushes are JSON strings', async () => {
    const socket = ioV2(sim.url, { query: `access_token=${TOKEN}`, reconnection: false, forceNew: true });
    clients.push(socket);
    await once(socket, 'connect');
    expect(socket.id).toBe(socket.io.engine.id);
    const r = await post('/subscribe', `${socket.io.engine.id}${TOKEN}`, 'pairs=EUR%2FUSD');
    expect(r.response.executed).toBe(true);
    expect(r.pairs[0].Symbol).toBe('EUR/USD');
    const got = once<[string]>(socket, 'EUR/USD');
    sim.market.setPrice('EUR/USD', 1.2, 1.2002);
    const [payload] = await got;
    expect(typeof payload).toBe('string');
    expect(JSON.parse(payload)).toMatchObject({ Rates: [1.2, 1.2002, expect.any(Number), expect.any(Number)], Symbol: 'EUR/USD' });
  });

  test('socket.io-client 2.x: bad token is refused (403 → connect_error)', async () => {
    const socket = ioV2(sim.url, { query: 'access_token=bad', reconnection: false, forceNew: true });
    clients.push(socket);
    const [err] = await once<[any]>(socket, 'connect_error');
    expect(String(err?.description ?? err)).toMatch(/403|xhr poll error/);
  });

  test('socket.io-client 4.x (EIO4): both the engine id and the socket id validate the bearer', async () => {
    const socket = ioV4(sim.url, { query: { access_token: TOKEN }, reconnection: false, forceNew: true });
    clients.push(socket);
    await once(socket, 'connect');
    const engineId = socket.io.engine.id;
    expect(engineId).not.toBe(socket.id);
    expect((await post('/trading/subscribe', `${engineId}${TOKEN}`, 'models=Order&models=Account')).response.executed).toBe(true);
    expect((await post('/trading/subscribe', `${socket.id}${TOKEN}`, 'models=Order')).response.executed).toBe(true);
    const byPath = await fetch(`${sim.url}/trading/get_model/Accounts`, { headers: { Authorization: `Bearer ${engineId}${TOKEN}` } }).then((r) => r.json() as Promise<any>);
    expect(byPath.accounts[0]).toMatchObject({ t: 6, accountId: '1537581', accountName: '01537581' });
    const bad = await postStatus('/trading/subscribe', `nope${TOKEN}`, 'models=Order');
    expect(bad).toEqual({ status: 401, body: { response: { executed: false, error: UNAUTHORIZED.noConnection } } });
  });

  test('a refused bearer keeps the broker envelope (HTTP 401) and names its cause', async () => {
    const first = ioV4(sim.url, { query: { access_token: TOKEN }, reconnection: false, forceNew: true });
    clients.push(first);
    await once(first, 'connect');
    const firstId = first.io.engine.id;
    expect((await post('/subscribe', `${firstId}${TOKEN}`, 'pairs=EUR%2FUSD')).response.executed).toBe(true);
    // a second runner on the same token takes the session over: the first one is told why
    const second = ioV4(sim.url, { query: { access_token: TOKEN }, reconnection: false, forceNew: true });
    clients.push(second);
    await once(second, 'connect');
    const secondId = second.io.engine.id;
    expect(await postStatus('/subscribe', `${firstId}${TOKEN}`, 'pairs=EUR%2FUSD')).toEqual({
      status: 401,
      body: { response: { executed: false, error: 'Unauthorized: token already has a streaming session on another connection (one session per token; use one token per runner)' }, pairs: [] },
    });
    expect((await post('/subscribe', `${secondId}${TOKEN}`, 'pairs=EUR%2FUSD')).response.executed).toBe(true);
    // the other causes: no bearer, a token the broker does not know, a connection that is gone
    const noBearer = await fetch(`${sim.url}/trading/get_model?models=Offer`).then(async (r) => ({ status: r.status, body: await r.json() }));
    expect(noBearer).toEqual({ status: 401, body: { response: { executed: false, error: UNAUTHORIZED.noBearer }, offers: [] } });
    expect((await post('/subscribe', `${secondId}nottoken`, 'pairs=EUR%2FUSD')).response.error).toBe(UNAUTHORIZED.unknownToken);
    second.close();
    await waitFor(async () => (await post('/subscribe', `${secondId}${TOKEN}`, 'pairs=EUR%2FUSD')).response.error === UNAUTHORIZED.noConnection, 'the closed connection refused as gone');
  });
});

describe('socketError bad-token mode', () => {
  test('EIO3 client receives the broker error text; EIO4 gets connect_error', async () => {
    const sim = await startSim({ badTokenMode: 'socketError' });
    const s2 = ioV2(sim.url, { query: 'access_token=bad', reconnection: false, forceNew: true });
    const s4 = ioV4(sim.url, { query: { access_token: 'bad' }, reconnection: false, forceNew: true });
    try {
      const [e2] = await once<[unknown]>(s2, 'error');
      expect(String(e2)).toBe(BAD_TOKEN);
      const [e4] = await once<[Error]>(s4, 'connect_error');
      expect(e4.message).toBe(BAD_TOKEN);
    } finally {
      s2.close();
      s4.close();
      await sim.stop();
    }
  });
});
