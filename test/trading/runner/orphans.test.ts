import { IntentExpiredError, OrderRejectedError, SafetyError } from '../../../src/trading/runner/errors';
import { errorOf, settleOrphan } from '../../../src/trading/runner/orphans';

describe('a resumed journal', () => {
  const snap = { OpenPosition: [{ tradeId: 'T1', orderId: '11' }], Order: [{ orderId: '12' }] };

  test('an order the journal never saw answers an orphaned openTrade, once', () => {
    const known = new Set(['11']);
    expect(settleOrphan({ op: 'openTrade', args: {} }, snap, known)).toEqual({ value: { orderId: '12' } });
    expect(known.has('12')).toBe(true);
    // a second orphan finds no unknown order left: rejected, never resent
    const second = settleOrphan({ op: 'createEntryOrder', args: {} }, snap, known);
    expect('error' in second && second.error).toBeInstanceOf(OrderRejectedError);
    expect('error' in second && second.error.message).toBe('createEntryOrder was interrupted by a restart before the broker answered and is not resent');
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
});
