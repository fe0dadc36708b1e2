import {
  AMOUNT_BODY,
  CLOSE_TIF_BY_ORDER_TYPE,
  TIF_BY_ORDER_TYPE,
  MAX_AMOUNT_K,
  checkAccountId,
  checkAmount,
  checkCloseWithinTrade,
  checkMargin,
  ruleOfBody,
  checkIsBuy,
  checkOrderRules,
  checkStopInPips,
  checkTimeInForce,
  checkTrailingStep,
} from '../../src/trading/fxcm/rules';

// The broker's documented bodies (reference §1.4), written out rather than taken from the module.
const AMOUNT = { code: 3, message: 'Amount should be divisible by 10', parameters: ['10'] };
const STOP_IN_PIPS = { code: 18, message: 'The Stop distance must be ', parameters: ['<', 0] };
// The simulator's own bodies for the rules the broker does not document.
const TRAILING = { code: 3, message: 'Trailing stop step should be 1 (dynamic) or 10 and above (fixed)', parameters: ['10'] };
const IS_BUY = { code: 3, message: 'is_buy is required', parameters: ['is_buy'] };
const tif = (t: string, orderType: string) => ({ code: 3, message: 'Invalid time in force for the order type', parameters: [t, orderType] });
const orderType = (o: string) => ({ code: 3, message: 'Invalid order type', parameters: [o] });

describe('broker order rules', () => {
  test('the amount body is the documented one', () => {
    expect(AMOUNT_BODY).toEqual(AMOUNT);
  });

  describe('amount (K units)', () => {
    test.each([10, 20, 100, 1000, '30', 10.0])('%p is accepted', (a) => {
      expect(checkAmount(a)).toBeUndefined();
    });

    test.each([1, 5, 15, 11, 99, 0, -10, -20, 10.5, 20.000001, NaN, Infinity, 'ten', '', null, undefined, {}])('%p is refused with the amount body', (a) => {
      expect(checkAmount(a)).toEqual(AMOUNT);
    });

    test('each refusal is a fresh copy: changing it does not change the shared body', () => {
      const body = checkAmount(15)!;
      body.parameters.push('x');
      body.message = 'changed';
      expect(AMOUNT_BODY).toEqual(AMOUNT);
      expect(checkAmount(15)).toEqual(AMOUNT);
    });
  });

  describe("the simulator's bodies for what the broker does not document", () => {
    test('an amount above the maximum (50,000,000 units, the offers\' maxQuantity)', () => {
      expect(MAX_AMOUNT_K).toBe(50_000);
      expect(checkAmount(50_000)).toBeUndefined();
      expect(checkAmount(50_010)).toEqual({ code: 3, message: 'Amount should not be more than 50000', parameters: ['50000'] });
      expect(checkAmount(1e15)).toEqual({ code: 3, message: 'Amount should not be more than 50000', parameters: ['50000'] });
    });

    test('a close of more than the trade holds; not enough usable margin', () => {
      expect(checkCloseWithinTrade(10, 10)).toBeUndefined();
      expect(checkCloseWithinTrade(20, 10)).toEqual({ code: 3, message: "Amount should not be more than the trade's 10", parameters: ['10'] });
      expect(checkMargin(100, 100)).toBeUndefined();
      expect(checkMargin(100.004, 100)).toEqual({ code: 3, message: 'Not enough usable margin', parameters: ['100.00', '100.00'] });
    });

    test('the rule each body names (the runner maps a broker refusal to it)', () => {
      expect(ruleOfBody(checkAmount(15)!)).toBe('amount');
      expect(ruleOfBody(checkAmount(1e15)!)).toBe('amount');
      expect(ruleOfBody(checkCloseWithinTrade(20, 10)!)).toBe('amount');
      expect(ruleOfBody(checkMargin(2, 1)!)).toBe('margin');
      expect(ruleOfBody(checkTrailingStep(5)!)).toBe('trailing_step');
      expect(ruleOfBody(checkStopInPips(3, true)!)).toBe('stop');
      expect(ruleOfBody({ code: 7, message: 'something else', parameters: [] })).toBeUndefined();
    });
  });

  describe('account id', () => {
    test.each(['1', '1234567', 1234567, '10', '100'])('%p is accepted', (id) => {
      expect(checkAccountId(id)).toBeUndefined();
    });

    // The broker answers an account id with leading zeros (the account name) with the amount body.
    test.each(['0', '01234567', '001', 0, '', ' 123', '123 ', '-123', '12.5', 'abc', 'D123', null, undefined])('%p is refused with the amount body', (id) => {
      expect(checkAccountId(id)).toEqual(AMOUNT);
    });
  });

  describe('trailing step', () => {
    test.each([0, 1, 10, 11, 25, 1000, '0', '1', '10'])('%p is accepted', (s) => {
      expect(checkTrailingStep(s)).toBeUndefined();
    });

    test.each([undefined, null, ''])('%p (not sent) is accepted', (s) => {
      expect(checkTrailingStep(s)).toBeUndefined();
    });

    test.each([2, 3, 5, 9, '2', '9', 9.5, 1.5, -1, -10, 'abc', NaN, -Infinity])('%p is refused', (s) => {
      expect(checkTrailingStep(s)).toEqual(TRAILING);
    });
  });

  describe('time in force per order type', () => {
    test('the tables', () => {
      expect(TIF_BY_ORDER_TYPE).toEqual({
        AtMarket: ['DAY', 'GTC', 'IOC', 'FOK'],
        MarketRange: ['IOC', 'FOK'],
        Entry: ['GTC', 'DAY', 'GTD', 'IOC', 'FOK'],
        RangeEntry: ['GTC', 'DAY', 'GTD', 'IOC', 'FOK'],
      });
      expect(CLOSE_TIF_BY_ORDER_TYPE).toEqual({ AtMarket: ['IOC', 'GTC', 'FOK', 'DAY', 'GTD'], MarketRange: ['IOC', 'FOK'] });
    });

    test.each([
      ['AtMarket', 'DAY'],
      ['AtMarket', 'GTC'],
      ['AtMarket', 'IOC'],
      ['AtMarket', 'FOK'],
      ['MarketRange', 'IOC'],
      ['MarketRange', 'FOK'],
      ['Entry', 'GTC'],
      ['Entry', 'DAY'],
      ['Entry', 'GTD'],
      ['Entry', 'IOC'],
      ['Entry', 'FOK'],
      ['RangeEntry', 'GTC'],
      ['RangeEntry', 'GTD'],
    ])('open: %s with %s is accepted', (o, t) => {
      expect(checkTimeInForce(o, t)).toBeUndefined();
    });

    test.each([
      ['AtMarket', 'GTD'],
      ['MarketRange', 'GTC'],
      ['MarketRange', 'DAY'],
      ['MarketRange', 'GTD'],
      ['Entry', 'gtc'],
      ['Entry', ''],
      ['AtMarket', 'undefined'],
    ])('open: %s with %p is refused, naming both', (o, t) => {
      expect(checkTimeInForce(o, t)).toEqual(tif(t, o));
    });

    test('a missing time in force is refused as the string "undefined"', () => {
      expect(checkTimeInForce('AtMarket', undefined)).toEqual(tif('undefined', 'AtMarket'));
    });

    test.each(['Market', 'atmarket', '', 'Range'])('an unknown order type %p is refused', (o) => {
      expect(checkTimeInForce(o, 'GTC')).toEqual(orderType(o));
    });

    test('a missing order type is refused as "undefined"', () => {
      expect(checkTimeInForce(undefined, 'GTC')).toEqual(orderType('undefined'));
    });

    test('close: AtMarket accepts GTD too; MarketRange only IOC/FOK; entry types are not close types', () => {
      for (const t of ['IOC', 'GTC', 'FOK', 'DAY', 'GTD']) expect(checkTimeInForce('AtMarket', t, CLOSE_TIF_BY_ORDER_TYPE)).toBeUndefined();
      expect(checkTimeInForce('MarketRange', 'IOC', CLOSE_TIF_BY_ORDER_TYPE)).toBeUndefined();
      expect(checkTimeInForce('MarketRange', 'GTC', CLOSE_TIF_BY_ORDER_TYPE)).toEqual(tif('GTC', 'MarketRange'));
      expect(checkTimeInForce('Entry', 'GTC', CLOSE_TIF_BY_ORDER_TYPE)).toEqual(orderType('Entry'));
    });
  });

  describe('is_buy', () => {
    test.each([true, false, 'true', 'false'])('%p is accepted', (b) => {
      expect(checkIsBuy(b)).toBeUndefined();
    });

    test.each([undefined, null, '', 1, 0, 'True', 'yes', 'buy'])('%p is refused', (b) => {
      expect(checkIsBuy(b)).toEqual(IS_BUY);
    });
  });

  describe('stop in pips', () => {
    test.each([3, 0.1, '3', 1])('a positive stop %p in pips is refused with the documented body', (s) => {
      expect(checkStopInPips(s, true)).toEqual(STOP_IN_PIPS);
      expect(checkStopInPips(s, 'true')).toEqual(STOP_IN_PIPS);
    });

    test.each([-3, -0.1, '-3', 0, undefined, null])('a stop of %p in pips is accepted', (s) => {
      expect(checkStopInPips(s, true)).toBeUndefined();
    });

    test.each([false, 'false', undefined, 1, 'yes'])('a positive stop is a rate, not checked, when is_in_pips is %p', (p) => {
      expect(checkStopInPips(1.2345, p)).toBeUndefined();
    });

    test('a stop that is not a number is not this rule\'s business', () => {
      expect(checkStopInPips('abc', true)).toBeUndefined();
    });
  });

  describe('checkOrderRules', () => {
    const good = { account_id: '1234567', amount: 10, is_buy: true, order_type: 'AtMarket', time_in_force: 'GTC' };

    test('a valid order passes; account_id may be left out', () => {
      expect(checkOrderRules(good)).toBeUndefined();
      const { account_id: _drop, ...noAccount } = good;
      expect(checkOrderRules(noAccount)).toBeUndefined();
      expect(checkOrderRules({ ...good, trailing_stop_step: 10, trailing_step: 1, stop: -5, is_in_pips: true })).toBeUndefined();
    });

    test('each rule is reported under its name with its body', () => {
      expect(checkOrderRules({ ...good, account_id: '01234567' })).toEqual({ rule: 'account_id', body: AMOUNT });
      expect(checkOrderRules({ ...good, amount: 15 })).toEqual({ rule: 'amount', body: AMOUNT });
      expect(checkOrderRules({ ...good, is_buy: undefined })).toEqual({ rule: 'is_buy', body: IS_BUY });
      expect(checkOrderRules({ ...good, order_type: 'MarketRange' })).toEqual({ rule: 'time_in_force', body: tif('GTC', 'MarketRange') });
      expect(checkOrderRules({ ...good, order_type: 'Bogus' })).toEqual({ rule: 'time_in_force', body: orderType('Bogus') });
      expect(checkOrderRules({ ...good, trailing_stop_step: 5 })).toEqual({ rule: 'trailing_stop_step', body: TRAILING });
      expect(checkOrderRules({ ...good, trailing_step: 5 })).toEqual({ rule: 'trailing_step', body: TRAILING });
      expect(checkOrderRules({ ...good, stop: 3, is_in_pips: 'true' })).toEqual({ rule: 'stop', body: STOP_IN_PIPS });
    });

    test('only the first failing rule is reported, in the broker\'s order', () => {
      const all = { account_id: '0', amount: 15, is_buy: 'x', order_type: 'MarketRange', time_in_force: 'GTC', trailing_stop_step: 5, trailing_step: 5, stop: 3, is_in_pips: true };
      const order: string[] = [];
      let p: Record<string, unknown> = { ...all };
      const fixes: [string, Record<string, unknown>][] = [
        ['account_id', { account_id: '1' }],
        ['amount', { amount: 20 }],
        ['is_buy', { is_buy: false }],
        ['time_in_force', { time_in_force: 'IOC' }],
        ['trailing_stop_step', { trailing_stop_step: 0 }],
        ['trailing_step', { trailing_step: 10 }],
        ['stop', { stop: -3 }],
      ];
      for (const [, fix] of fixes) {
        order.push(checkOrderRules(p)!.rule);
        p = { ...p, ...fix };
      }
      expect(order).toEqual(fixes.map(([r]) => r));
      expect(checkOrderRules(p)).toBeUndefined();
    });

    test('with the close table: is_buy is not required and AtMarket accepts GTD', () => {
      const close = { amount: 10, order_type: 'AtMarket', time_in_force: 'GTD' };
      expect(checkOrderRules(close)).toEqual({ rule: 'is_buy', body: IS_BUY });
      expect(checkOrderRules(close, true)).toBeUndefined();
      expect(checkOrderRules({ ...close, is_buy: true })).toEqual({ rule: 'time_in_force', body: tif('GTD', 'AtMarket') });
      expect(checkOrderRules({ ...close, order_type: 'Entry', time_in_force: 'GTC' }, true)).toEqual({ rule: 'time_in_force', body: orderType('Entry') });
      expect(checkOrderRules({ ...close, amount: 5 }, true)).toEqual({ rule: 'amount', body: AMOUNT });
    });
  });
});
