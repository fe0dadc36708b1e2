/** Contract suite: FxcmClient against the simulator over real sockets (Engine.IO 3 and 4). */
import {
  FxcmApiError,
  FxcmAuthError,
  FxcmOrderRejectedError,
  FxcmRateLimitError,
  FxcmRuleError,
  FxcmTimeoutError,
  FxcmUnauthorizedError,
  type FxcmClient,
  type PriceUpdate,
} from '../../src/trading/fxcm';
import { UNAUTHORIZED, type BrokerSimulator } from '../../src/trading/simulator';
import { TOKEN, newClient, once, startSim } from './helpers';
import { waitFor } from '../support/wait';

const AMOUNT_ERR = { code: 3, brokerMessage: 'Amount should be divisible by 10', parameters: ['10'] };

describe.each([3, 4] as const)('FxcmClient over Engine.IO %i', (eio) => {
  let sim: BrokerSimulator;
  let client: FxcmClient;
  beforeEach(async () => {
    sim = await startSim();
    client = newClient(sim, { engineIO: eio });
    await client.connect();
  });
  afterEach(async () => {
    await client.close();
    await sim.stop();
  });

  test('headers, bearer and form encoding as the broker expects', async () => {
    const seen: { endpoint: string; method: string }[] = [];
    const c2 = newClient(sim, { engineIO: eio, token: TOKEN, beforeRequest: async (endpoint, method) => void seen.push({ endpoint, method }) });
    await client.close();
    await c2.connect();
    try {
      await c2.subscribeTables(['Order', 'Account']);
      expect(seen).toEqual([{ endpoint: '/trading/subscribe', method: 'POST' }]);
      const req = sim.lastRequest!;
      expect(req.body).toBe('models=Order&models=Account');
      expect(req.headers.authorization).toBe(`Bearer ${c2.socketId}${TOKEN}`);
      expect(req.headers['content-type']).toBe('application/x-www-form-urlencoded');
      expect(req.headers.accept).toBe('application/json');
      expect(req.headers['user-agent']).toBeTruthy();
      await c2.getCandles('EUR/USD', 'H1', { num: 2 });
      expect(sim.lastRequest!.query).toBe('num=2');
      await c2.openTrade({ symbol: 'EUR/USD', isBuy: false, amount: 10 });
      expect(sim.lastRequest!.body).toBe('account_id=1537581&symbol=EUR%2FUSD&is_buy=false&rate=0&amount=10&order_type=AtMarket&time_in_force=GTC');
      expect(sim.requestCounts()['/trading/subscribe']).toBe(1);
    } finally {
      await c2.close();
    }
  });

  test('prices: subscribe returns the quote and pushes arrive with [bid, ask, high, low]', async () => {
    const snap = await client.subscribePrices(['EUR/USD', 'USD/JPY']);
    expect(snap.map((p) => p.Symbol)).toEqual(['EUR/USD', 'USD/JPY']);
    const got = once<[PriceUpdate]>(client, 'price');
    sim.market.setPrice('EUR/USD', 1.25, 1.2502);
    const [p] = await got;
    expect(p.Symbol).toBe('EUR/USD');
    expect(p.Rates.slice(0, 2)).toEqual([1.25, 1.2502]);
    expect(client.lastPrice('EUR/USD')?.Rates[0]).toBe(1.25);
    expect(await client.unsubscribePrices('EUR/USD')).toEqual(['EUR/USD']);
  });

  test('snapshots of every model; account id read from the Account snapshot', async () => {
    const snap = await client.getModel(['Offer', 'OpenPosition', 'ClosedPosition', 'Order', 'Summary', 'LeverageProfile', 'Account', 'Properties']);
    expect(snap.Offer!.map((o) => o.currency)).toEqual(['EUR/USD', 'USD/JPY', 'GBP/USD']);
    expect(snap.Account![0]).toMatchObject({ accountId: '1537581', accountName: '01537581' });
    expect(await client.getAccountId()).toBe('1537581');
    expect(snap.LeverageProfile).toEqual([]);
    const instruments = await client.getInstruments();
    expect(instruments[0]).toEqual({ symbol: 'EUR/USD', visible: true, order: 1 });
    await client.updateSubscriptions('GBP/USD', false);
    expect((await client.getOffers()).map((o) => o.currency)).toEqual(['EUR/USD', 'USD/JPY']);
  });

  test('market order: fills at ask, Order I/D push links the order to its trade; close at bid', async () => {
    await client.subscribeTables(['OpenPosition', 'ClosedPosition', 'Account']);
    sim.market.setPrice('EUR/USD', 1.1, 1.1002);
    const { orderId } = await client.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 10 });
    expect(orderId).toMatch(/^\d+$/);
    const [tradeId] = await client.awaitTradeIds(orderId);
    await waitFor(() => client.records('OpenPosition').length === 1, 'open position', 5000);
    const pos = client.records('OpenPosition')[0]!;
    expect(pos).toMatchObject({ tradeId, open: 1.1002, isBuy: true, amountK: 10 });
    // snapshot never carries the order→trade link
    expect((await client.getOrders()).every((o) => o.tradeId === '')).toBe(true);
    sim.market.setPrice('EUR/USD', 1.101, 1.1012);
    const close = await client.closeTrade({ tradeId: tradeId!, amount: 10 });
    await client.awaitTradeIds(close.orderId);
    await waitFor(() => client.records('ClosedPosition').length === 1, 'closed position', 5000);
    expect(client.records('ClosedPosition')[0]).toMatchObject({ tradeId, close: 1.101, currencyPoint: 1 });
    expect(client.records('OpenPosition')).toEqual([]);
    expect(client.records('Account')[0]!.balance).toBeCloseTo(50000 + 0.0008 * 10000, 2);
  });

  test('partial fills give several trade ids for one order; a requote ends without trade', async () => {
    sim.faults.partialFills(3);
    const { orderId } = await client.openTrade({ symbol: 'EUR/USD', isBuy: false, amount: 30 });
    const ids = await client.awaitTradeIds(orderId);
    expect(ids).toHaveLength(3);
    expect(sim.engine.trades.size).toBe(3);
    sim.faults.requoteNext();
    const r = await client.openTrade({ symbol: 'EUR/USD', isBuy: false, amount: 10 });
    await expect(client.awaitTradeIds(r.orderId)).rejects.toBeInstanceOf(FxcmOrderRejectedError);
    await client.closeAllForSymbol({ symbol: 'EUR/USD' });
    await waitFor(() => sim.engine.trades.size === 0, 'all closed', 5000);
  });

  test('entry orders rest until the price crosses; change and delete; OCO group', async () => {
    sim.market.setPrice('EUR/USD', 1.1, 1.1002);
    const e = await client.createEntryOrder({ symbol: 'EUR/USD', isBuy: true, amount: 10, rate: 1.105, stop: -20, limit: 40, isInPips: true });
    await waitFor(() => client.records('Order').some((o) => o.orderId === e.orderId), 'entry order push', 5000);
    // currencyPoint: one pip of 10K EUR/USD is worth 1 USD (the broker shows 0.5 for 5K).
    expect(client.records('Order').find((o) => o.orderId === e.orderId)).toMatchObject({ type: 'SE', status: 1, isEntryOrder: true, currencyPoint: 1 });
    await client.changeOrder({ orderId: e.orderId, rate: 1.104, amount: 20 });
    await waitFor(() => client.records('Order').find((o) => o.orderId === e.orderId)?.amountK === 20, 'changed', 5000);
    const sl = await client.changeOrderStopLimit({ orderId: e.orderId, stop: -30, isStopInPips: true, limit: 50, isLimitInPips: true });
    expect(sl).toHaveLength(2);
    sim.market.setPrice('EUR/USD', 1.1038, 1.104);
    const [tradeId] = await client.awaitTradeIds(e.orderId);
    const t = sim.engine.trades.get(tradeId!)!;
    expect(t).toMatchObject({ open: 1.104, amountK: 20, stop: 1.101, limit: 1.109 });

    const e2 = await client.createEntryOrder({ symbol: 'EUR/USD', isBuy: false, amount: 10, rate: 1.2 });
    await client.deleteOrder(e2.orderId);
    await expect(client.awaitTradeIds(e2.orderId)).rejects.toBeInstanceOf(FxcmOrderRejectedError);

    await client.simpleOco({ symbol: 'EUR/USD', amount: 10, isBuy: true, rate: 1.11, isBuy2: false, rate2: 1.09 });
    await waitFor(() => client.records('Order').filter((o) => Number(o.ocoBulkId) > 0).length === 2, 'oco orders', 5000);
    const [a, b] = client.records('Order').filter((o) => Number(o.ocoBulkId) > 0);
    await client.removeFromOco([String(b!.orderId)]);
    await client.addToOco([String(b!.orderId)], Number(a!.ocoBulkId));
    await client.editOco({ ocoBulkId: Number(a!.ocoBulkId), addOrderIds: [], removeOrderIds: [] });
    sim.market.setPrice('EUR/USD', 1.1098, 1.11);
    const ids = await client.awaitTradeIds(String(a!.orderId));
    expect(ids).toHaveLength(1);
    await expect(client.awaitTradeIds(String(b!.orderId))).rejects.toBeInstanceOf(FxcmOrderRejectedError);
  });

  test('stops, limits and trailing stops trigger on the right side', async () => {
    await client.subscribeTables(['OpenPosition', 'ClosedPosition']);
    sim.market.setPrice('EUR/USD', 1.1, 1.1002);
    const buy = await client.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 10 });
    const [buyTrade] = await client.awaitTradeIds(buy.orderId);
    await client.changeTradeStopLimit({ tradeId: buyTrade!, isStop: true, rate: -10, isInPips: true, trailingStep: 10 });
    // ask falls below the stop but the bid (the closing side of a buy) does not: no trigger
    sim.market.setPrice('EUR/USD', 1.0995, 1.0996);
    expect(sim.engine.trades.has(buyTrade!)).toBe(true);
    // fixed trailing: +10 pips moves the stop +10 pips
    sim.market.setPrice('EUR/USD', 1.101, 1.1012);
    expect(sim.engine.trades.get(buyTrade!)!.stop).toBeCloseTo(1.1, 5);
    sim.market.setPrice('EUR/USD', 1.0999, 1.1001);
    await waitFor(() => client.records('ClosedPosition').some((c) => c.tradeId === buyTrade), 'trailing stop close', 5000);

    const sell = await client.openTrade({ symbol: 'EUR/USD', isBuy: false, amount: 10, limit: 1.095 });
    const [sellTrade] = await client.awaitTradeIds(sell.orderId);
    sim.market.setPrice('EUR/USD', 1.0948, 1.0951); // bid crosses but ask (closing side of a sell) does not
    expect(sim.engine.trades.has(sellTrade!)).toBe(true);
    sim.market.setPrice('EUR/USD', 1.0947, 1.0949);
    await waitFor(() => client.records('ClosedPosition').some((c) => c.tradeId === sellTrade), 'limit close', 5000);
  });

  test('rules are checked before sending with the broker code and message', async () => {
    const id = await client.getAccountId();
    const before = sim.requestCounts()['/trading/open_trade'] ?? 0;
    await expect(client.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 15 })).rejects.toMatchObject({ ...AMOUNT_ERR, rule: 'amount' });
    await expect(client.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 10, accountId: id.padStart(8, '0') })).rejects.toMatchObject({ ...AMOUNT_ERR, rule: 'account_id' });
    await expect(client.createEntryOrder({ symbol: 'EUR/USD', isBuy: true, amount: 10, rate: 1.2, trailingStopStep: 5 })).rejects.toBeInstanceOf(FxcmRuleError);
    await expect(client.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 10, orderType: 'MarketRange', timeInForce: 'GTC' })).rejects.toMatchObject({ rule: 'time_in_force' });
    await expect(client.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 10, stop: 5, isInPips: true })).rejects.toMatchObject({ code: 18 });
    expect(sim.requestCounts()['/trading/open_trade'] ?? 0).toBe(before);
    // trailing 1 and >= 10 are accepted
    await client.createEntryOrder({ symbol: 'EUR/USD', isBuy: true, amount: 10, rate: 1.2, stop: 1.19, trailingStopStep: 1 });
    await client.createEntryOrder({ symbol: 'EUR/USD', isBuy: true, amount: 10, rate: 1.2, stop: 1.19, trailingStopStep: 10 });
  });

  test('the simulator enforces the same rules with the exact error bodies (typed errors)', async () => {
    const raw = newClient(sim, { engineIO: eio, validate: false });
    await client.close();
    await raw.connect();
    try {
      const id = await raw.getAccountId();
      await expect(raw.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 15 })).rejects.toMatchObject(AMOUNT_ERR);
      const zero = raw.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 10, accountId: `0${id}` });
      await expect(zero).rejects.toBeInstanceOf(FxcmApiError);
      await expect(zero).rejects.toMatchObject({ ...AMOUNT_ERR, rawError: '{"code":3,"message":"Amount should be divisible by 10","parameters":["10"]}' });
      for (const step of [2, 5, 9]) {
        await expect(raw.createEntryOrder({ symbol: 'EUR/USD', isBuy: true, amount: 10, rate: 1.2, trailingStopStep: step })).rejects.toMatchObject({ code: 3 });
      }
      await expect(raw.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 10, orderType: 'MarketRange', timeInForce: 'GTC' })).rejects.toMatchObject({ code: 3 });
      await expect(raw.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 10, stop: 3, isInPips: true })).rejects.toMatchObject({
        code: 18,
        brokerMessage: 'The Stop distance must be ',
        parameters: ['<', 0],
      });
    } finally {
      await raw.close();
    }
  });

  test("the simulator refuses what the runner's pre-trade check refuses: above the maximum amount, without the margin, a close of more than the trade", async () => {
    const raw = newClient(sim, { engineIO: eio, validate: false });
    await client.close();
    await raw.connect();
    try {
      await expect(raw.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 1e15 })).rejects.toMatchObject({ code: 3, brokerMessage: 'Amount should not be more than 50000', parameters: ['50000'] });
      // 40,000K EUR/USD needs about 40e6 × rate / 50 of margin; the account has 50,000
      const margin = raw.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 40_000 });
      await expect(margin).rejects.toBeInstanceOf(FxcmApiError);
      await expect(margin).rejects.toMatchObject({ code: 3, brokerMessage: 'Not enough usable margin' });
      expect(sim.engine.snapshot(TOKEN, 'OpenPosition')).toEqual([]);
      // a margin a 10K trade holds is its notional over 50, at its closing price
      await raw.subscribeTables(['OpenPosition']);
      await raw.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 10 });
      await waitFor(() => sim.engine.trades.size === 1, 'the trade');
      const [t] = sim.engine.snapshot(TOKEN, 'OpenPosition') as Array<{ tradeId: string; usedMargin: number; close: number }>;
      expect(t!.usedMargin).toBeCloseTo((10_000 * t!.close) / 50, 2);
      await expect(raw.closeTrade({ tradeId: t!.tradeId, amount: 20 })).rejects.toMatchObject({ code: 3, brokerMessage: "Amount should not be more than the trade's 10", parameters: ['10'] });
      expect(sim.engine.trades.size).toBe(1);
    } finally {
      await raw.close();
    }
  });

  test('a second connection with the same token invalidates the first bearer, and the error says why', async () => {
    await client.subscribeTables('Order');
    const second = newClient(sim, { engineIO: eio, reconnect: false });
    await second.connect();
    try {
      const refused = client.getAccounts();
      await expect(refused).rejects.toBeInstanceOf(FxcmUnauthorizedError);
      await expect(refused).rejects.toMatchObject({ httpStatus: 401, brokerMessage: UNAUTHORIZED.sessionTaken });
      await expect(refused).rejects.toThrow(/token already has a streaming session .*use one token per runner/);
      expect((await second.getAccounts()).length).toBe(1);
    } finally {
      await second.close();
    }
  });

  test('reconnect: new handshake, new bearer, re-subscribed prices and tables, one reconciling snapshot', async () => {
    await client.subscribePrices('EUR/USD');
    await client.subscribeTables(['OpenPosition', 'Order']);
    const firstSid = client.socketId;
    const before = sim.requestCounts()['/trading/get_model'] ?? 0;
    // a trade opened while the client is away shows up through the reconciling snapshot
    const reconnected = once<[string]>(client, 'reconnected', 10000);
    sim.faults.disconnect();
    await waitFor(() => !client.connected, 'disconnect', 5000);
    const sid = (await reconnected)[0];
    expect(sid).not.toBe(firstSid);
    expect((sim.requestCounts()['/trading/get_model'] ?? 0) - before).toBe(1);
    const got = once<[PriceUpdate]>(client, 'price');
    sim.market.setPrice('EUR/USD', 1.3, 1.3002);
    expect((await got)[0].Rates[0]).toBe(1.3);
    const { orderId } = await client.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 10 });
    expect(await client.awaitTradeIds(orderId)).toHaveLength(1);
  });
});

describe('FxcmClient faults and limits', () => {
  let sim: BrokerSimulator;
  let client: FxcmClient;
  beforeEach(async () => {
    sim = await startSim({ limits: { openPositionSnapshotsPerHour: 50 } });
    client = newClient(sim);
    await client.connect();
  });
  afterEach(async () => {
    await client.close();
    await sim.stop();
  });

  test('51st OpenPosition snapshot in an hour fails with the broker limit error', async () => {
    for (let i = 0; i < 50; i++) await client.getOpenPositions();
    await expect(client.getOpenPositions()).rejects.toBeInstanceOf(FxcmRateLimitError);
    await expect(client.getOpenPositions()).rejects.toThrow(/ORA-20301.*Cmd=44/);
    expect(sim.requestCounts()['/trading/get_model:OpenPosition']).toBe(52);
    // other models are not limited by it
    expect(await client.getAccounts()).toHaveLength(1);
  });

  test('slow responses hit the request timeout; dropped pushes are lost', async () => {
    const slow = newClient(sim, { timeouts: { requestMs: 100 } });
    await client.close();
    await slow.connect();
    try {
      sim.faults.slowResponses('/trading/get_model', 400, 1);
      await expect(slow.getAccounts()).rejects.toBeInstanceOf(FxcmTimeoutError);
      await slow.subscribePrices('EUR/USD');
      const seen: number[] = [];
      slow.on('price', (p: PriceUpdate) => seen.push(p.Rates[0]!));
      sim.faults.dropPushes(1);
      sim.market.setPrice('EUR/USD', 1.2, 1.2002);
      sim.market.setPrice('EUR/USD', 1.21, 1.2102);
      await waitFor(() => seen.length >= 1, 'price', 5000);
      expect(seen).toEqual([1.21]);
      expect(sim.faults.fired.dropped).toBe(1);
      sim.faults.failNext('/trading/get_model', { code: 7, message: 'boom', parameters: [] });
      await expect(slow.getAccounts()).rejects.toMatchObject({ code: 7, brokerMessage: 'boom' });
    } finally {
      await slow.close();
    }
  });

  test('per-session request cap answers HTTP 403 as a rate-limit error', async () => {
    await client.close();
    await sim.stop();
    sim = await startSim({ limits: { requestsPerSession: 2 } });
    client = newClient(sim);
    await client.connect();
    await client.getAccounts();
    await client.getAccounts();
    await expect(client.getAccounts()).rejects.toMatchObject({ httpStatus: 403 });
    await expect(client.getAccounts()).rejects.toBeInstanceOf(FxcmRateLimitError);
  });

  test('a bad token fails the connect with an auth error', async () => {
    const bad = newClient(sim, { token: 'bad', reconnect: false });
    await expect(bad.connect()).rejects.toBeInstanceOf(FxcmAuthError);
    await bad.close();
  });
});
