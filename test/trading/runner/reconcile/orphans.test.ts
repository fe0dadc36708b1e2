import { IntentExpiredError, OrderRejectedError, SafetyError } from '../../../../src/trading/runner/errors';
import { errorOf, journaledError, settleOrphan } from '../../../../src/trading/runner/reconcile/orphans';
import { unclaimedOrderCalls } from '../../../../src/trading/runner/reconcile/claims';

describe('a resumed journal', () => {
  const snap = { OpenPosition: [{ tradeId: 'T1', orderId: '11' }], Order: [{ orderId: '12' }] };
  // a market buy of 10 EUR/USD that filled at 1.1 with a 20-pip stop, an entry order beside it, and
  // an OCO group of two entry orders
  const position = { tradeId: 'T5', orderId: '50', currency: 'EUR/USD', isBuy: true, amountK: 10, open: 1.1, stop: 1.098, limit: 0, stopMove: 0 };
  const entry = { orderId: '51', currency: 'EUR/USD', isBuy: true, amountK: 10, buy: 1.105, sell: 1.1048, type: 'SE', isEntryOrder: true, stopRate: 0, limitRate: 0, stopMove: 0, ocoBulkId: 0 };
  const ocoA = { ...entry, orderId: '52', buy: 1.11, ocoBulkId: 7 };
  const ocoB = { ...entry, orderId: '53', isBuy: false, sell: 1.09, buy: 1.0902, ocoBulkId: 7 };
  const account = { OpenPosition: [position], Order: [entry, ocoA, ocoB] };
  const market = { symbol: 'EUR/USD', isBuy: true, amount: 10, stop: -20, isInPips: true };
  const message = (r: ReturnType<typeof settleOrphan>) => ('error' in r ? r.error.message : undefined);

  test('an openTrade is answered by the trade that matches everything it asked, never by an entry order', () => {
    const known = new Set<string>();
    expect(settleOrphan({ op: 'openTrade', args: market }, account, known)).toEqual({ value: { orderId: '50' }, orderIds: ['50'] });
    expect(known.has('50')).toBe(true);
    // once taken, nothing else matches: rejected, never resent
    expect(message(settleOrphan({ op: 'openTrade', args: market }, account, known))).toBe(
      'openTrade was interrupted by a restart before the broker answered and is not resent: market order buy 10 EUR/USD: no order at the broker matches it',
    );
  });

  test('a request that differs in symbol, side, amount, stop, limit or trailing step matches nothing: said, not guessed', () => {
    for (const args of [
      { ...market, symbol: 'GBP/USD' },
      { ...market, isBuy: false },
      { ...market, amount: 20 },
      { ...market, stop: -30 },
      { ...market, limit: 40 },
      { ...market, trailingStep: 10 },
      { ...market, isInPips: false, stop: 1.09 },
    ]) {
      expect(message(settleOrphan({ op: 'openTrade', args }, account, new Set()))).toMatch(/: no order at the broker matches it$/);
    }
    // the stop as a rate is the same stop
    expect(settleOrphan({ op: 'openTrade', args: { ...market, isInPips: false, stop: 1.098 } }, account, new Set())).toHaveProperty('value', { orderId: '50' });
  });

  test('two orders that match equally: neither is taken, and the message names both', () => {
    const twin = { ...position, tradeId: 'T6', orderId: '60' };
    const known = new Set<string>();
    expect(message(settleOrphan({ op: 'openTrade', args: market }, { OpenPosition: [position, twin] }, known))).toBe(
      'openTrade was interrupted by a restart before the broker answered and is not resent: market order buy 10 EUR/USD: 2 orders at the broker match it (50, 60), so which one is this run\'s is not guessed',
    );
    expect(known.size).toBe(0);
  });

  test('a createEntryOrder is answered by the entry order at its rate, or by the trade it filled into at that rate', () => {
    const req = { symbol: 'EUR/USD', isBuy: true, amount: 10, rate: 1.105 };
    expect(settleOrphan({ op: 'createEntryOrder', args: req }, account, new Set())).toEqual({ value: { orderId: '51' }, orderIds: ['51'] });
    expect(message(settleOrphan({ op: 'createEntryOrder', args: { ...req, rate: 1.106 } }, account, new Set()))).toMatch(/entry order buy 10 EUR\/USD at 1.106: no order at the broker matches it$/);
    const filled = { ...position, orderId: '51', open: 1.105, stop: 0 };
    expect(settleOrphan({ op: 'createEntryOrder', args: req }, { OpenPosition: [filled], Order: [] }, new Set())).toHaveProperty('value', { orderId: '51' });
  });

  test('a createOco is answered by the one OCO group whose two orders match its legs', () => {
    const req = { symbol: 'EUR/USD', amount: 10, first: { isBuy: true, rate: 1.11 }, second: { isBuy: false, rate: 1.09 } };
    const known = new Set<string>();
    expect(settleOrphan({ op: 'createOco', args: req }, account, known)).toEqual({ value: { orderIds: [] }, orderIds: ['52', '53'] });
    expect([...known].sort()).toEqual(['52', '53']);
    expect(message(settleOrphan({ op: 'createOco', args: { ...req, second: { isBuy: false, rate: 1.08 } } }, account, new Set()))).toMatch(/no OCO group at the broker matches it$/);
  });

  test('a closeTrade succeeded when its trade is gone, and is rejected when it is still open', () => {
    expect(settleOrphan({ op: 'closeTrade', args: { tradeId: 'T9' } }, snap, new Set())).toEqual({ value: undefined });
    expect(settleOrphan({ op: 'closeTrade', args: { tradeId: 'T1' } }, snap, new Set())).toHaveProperty('error');
    expect(settleOrphan({ op: 'setStop', args: { tradeId: 'T1' } }, snap, new Set())).toHaveProperty('error');
  });

  test('journaled errors come back as the classes a strategy catches', () => {
    expect(errorOf({ name: 'SafetyError', message: 'too big' })).toBeInstanceOf(SafetyError);
    expect(errorOf({ name: 'OrderRejectedError', message: 'unknown trade 5' })).toBeInstanceOf(OrderRejectedError);
    const expired = errorOf({ name: 'IntentExpiredError', message: 'expired waiting for open_trade', endpoint: 'open_trade' });
    expect(expired).toBeInstanceOf(IntentExpiredError);
    expect(expired.message).toBe('expired waiting for open_trade');
    const other = errorOf({ name: 'TypeError', message: 'x is not a function' });
    expect([other.name, other.message]).toEqual(['TypeError', 'x is not a function']);
  });

  test('a refusal keeps its rule and the broker code through the journal (a replay catches what the run caught)', () => {
    const margin = errorOf(JSON.parse(JSON.stringify(journaledError(new OrderRejectedError('not enough usable margin', 'margin', 3)))));
    expect(margin).toBeInstanceOf(OrderRejectedError);
    expect(margin).toMatchObject({ name: 'OrderRejectedError', rule: 'margin', code: 3, message: 'not enough usable margin' });
    const limit = errorOf(JSON.parse(JSON.stringify(journaledError(new SafetyError('maxPosition', 'EUR/USD: 10K + 500K would exceed the maximum position of 500K')))));
    expect(limit).toMatchObject({ name: 'SafetyError', rule: 'maxPosition' });
  });
});

describe('order calls answered before a kill but not yet claimed', () => {
  const oco = { symbol: 'EUR/USD', amount: 10, first: { isBuy: true, rate: 1.11 }, second: { isBuy: false, rate: 1.09 } };
  const ocoClaim = { symbol: 'EUR/USD', amount: 10, legs: [{ isBuy: true, rate: 1.11 }, { isBuy: false, rate: 1.09 }] };
  const intent = (id: number, op: string, args: unknown) => ({ k: 'intent', id, ts: 1, op, args });
  const answer = (id: number, value: unknown, extra: Record<string, unknown> = {}) => ({ k: 'answer', id, ok: true, value, ...extra });

  test('an answered order call without its own line is claimed; with it, not', () => {
    const lines = [
      intent(1, 'openTrade', { symbol: 'EUR/USD', isBuy: true, amount: 10 }),
      answer(1, { orderId: '11' }),
      { k: 'own', t: 2, orderId: '11' },
      intent(2, 'createEntryOrder', { symbol: 'EUR/USD', isBuy: true, amount: 10, rate: 1.1 }),
      answer(2, { orderId: '12' }),
      intent(3, 'createOco', oco),
      answer(3, { orderIds: [] }),
      intent(4, 'closeTrade', { tradeId: 'T1' }),
      answer(4, undefined),
      intent(5, 'openTrade', { symbol: 'EUR/USD', isBuy: false, amount: 10 }),
      { k: 'answer', id: 5, ok: false, error: { name: 'OrderRejectedError', message: 'no' } },
    ];
    expect(unclaimedOrderCalls(lines, 9)).toEqual([
      { k: 'own', t: 9, orderId: '12' },
      { k: 'own', t: 9, oco: ocoClaim },
    ]);
    expect(unclaimedOrderCalls([...lines, { k: 'own', t: 3, orderId: '12' }, { k: 'own', t: 3, oco: ocoClaim }], 9)).toEqual([]);
  });

  test('an OCO settled at a restart claims the orders found for it, not its legs again', () => {
    const settled = [intent(1, 'createOco', oco), answer(1, { orderIds: [] }, { claims: ['52', '53'] })];
    expect(unclaimedOrderCalls([...settled, { k: 'own', t: 2, orderId: '52' }, { k: 'own', t: 2, orderId: '53' }], 9)).toEqual([]);
    expect(unclaimedOrderCalls([...settled, { k: 'own', t: 2, orderId: '52' }], 9)).toEqual([{ k: 'own', t: 9, orderId: '53' }]);
  });
});
