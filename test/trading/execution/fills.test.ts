import { closeSide, entryFill, entryKind, exitFill, levelFromPips, openSide, tickMove, toPoint, trailStop, type PriceMove } from '../../../src/trading/execution/fills';

const PIP = 0.0001;
/** A candle with bid OHLC and the ask 2 pips above. */
const ask = (bid: number) => Math.round((bid + 0.0002) * 1e6) / 1e6;
const bar = (o: number, h: number, l: number, c: number): PriceMove => ({ bidOpen: o, bidHigh: h, bidLow: l, bidClose: c, askOpen: ask(o), askHigh: ask(h), askLow: ask(l), askClose: ask(c) });

describe('the execution model', () => {
  test('buys open at the ask and close at the bid; sells the other way', () => {
    expect(openSide(true, 1.1, 1.1002)).toBe(1.1002);
    expect(openSide(false, 1.1, 1.1002)).toBe(1.1);
    expect(closeSide(true, 1.1, 1.1002)).toBe(1.1);
    expect(closeSide(false, 1.1, 1.1002)).toBe(1.1002);
  });

  test('an entry beyond the market is a stop entry, else a limit entry (at the market: limit)', () => {
    expect(entryKind(true, 1.101, 1.1, 1.1002)).toBe('stop');
    expect(entryKind(true, 1.1002, 1.1, 1.1002)).toBe('limit');
    expect(entryKind(true, 1.099, 1.1, 1.1002)).toBe('limit');
    expect(entryKind(false, 1.099, 1.1, 1.1002)).toBe('stop');
    expect(entryKind(false, 1.1, 1.1, 1.1002)).toBe('limit');
  });

  test('entries fill at the level on the right side, or at the open when the price gaps through', () => {
    const buyStop = { isBuy: true, kind: 'stop' as const, rate: 1.1010 };
    expect(entryFill(buyStop, bar(1.1000, 1.1005, 1.0995, 1.1))).toBeUndefined();
    expect(entryFill(buyStop, bar(1.1000, 1.1008, 1.0995, 1.1))).toBe(1.101); // ask high 1.1010
    expect(entryFill(buyStop, bar(1.1020, 1.1030, 1.1015, 1.1025))).toBeCloseTo(1.1022, 10); // gap: the ask open
    const sellLimit = { isBuy: false, kind: 'limit' as const, rate: 1.1010 };
    expect(entryFill(sellLimit, bar(1.1000, 1.1009, 1.0995, 1.1))).toBeUndefined();
    expect(entryFill(sellLimit, bar(1.1000, 1.1010, 1.0995, 1.1))).toBe(1.101);
    const sellStop = { isBuy: false, kind: 'stop' as const, rate: 1.0990 };
    expect(entryFill(sellStop, bar(1.0980, 1.0985, 1.0970, 1.0975))).toBe(1.098); // gap down: the bid open
    const buyLimit = { isBuy: true, kind: 'limit' as const, rate: 1.0990 };
    expect(entryFill(buyLimit, bar(1.1000, 1.1005, 1.0987, 1.1))).toBe(1.099); // ask low 1.0989
    // a tick is a move whose open, high, low and close are one price
    expect(entryFill(buyStop, tickMove(1.1009, 1.1011))).toBe(1.1011);
  });

  test('exits: a long triggers on the bid, a short on the ask; stop before limit in one candle', () => {
    const long = { isBuy: true, stop: 1.0980, limit: 1.1030 };
    expect(exitFill(long, bar(1.1, 1.1029, 1.0981, 1.1))).toBeUndefined();
    expect(exitFill(long, bar(1.1, 1.1030, 1.0990, 1.1))).toEqual({ rate: 1.103, reason: 'limit' });
    expect(exitFill(long, bar(1.1, 1.1040, 1.0970, 1.1))).toEqual({ rate: 1.098, reason: 'stop' });
    expect(exitFill(long, bar(1.0960, 1.0965, 1.0950, 1.096))).toEqual({ rate: 1.096, reason: 'stop' }); // gap
    const short = { isBuy: false, stop: 1.1020, limit: 1.0970 };
    expect(exitFill(short, bar(1.1, 1.1017, 1.0969, 1.1))).toBeUndefined(); // ask high 1.1019, ask low 1.0971
    expect(exitFill(short, bar(1.1, 1.1018, 1.0968, 1.1))).toEqual({ rate: 1.102, reason: 'stop' });
    expect(exitFill({ isBuy: false, limit: 1.0970 }, bar(1.1, 1.1, 1.0968, 1.1))).toEqual({ rate: 1.097, reason: 'limit' });
  });

  test('pip distances become rates on the quoting grid: negative against the trade, positive for it', () => {
    expect(levelFromPips(true, 1.1002, -20, PIP)).toBe(1.0982);
    expect(levelFromPips(true, 1.1002, 30, PIP)).toBe(1.1032);
    expect(levelFromPips(false, 1.1, -15, PIP)).toBe(1.1015);
    expect(levelFromPips(false, 145.123, 12.5, 0.01)).toBe(144.998);
    expect(levelFromPips(true, 1.1, -12.34, PIP)).toBe(1.09877); // a tenth of a pip is the finest step
    expect(toPoint(1.1000000000001, PIP)).toBe(1.1);
  });

  test('a fixed trailing stop moves in whole steps with the best price and never back', () => {
    const long = { isBuy: true, stop: 1.0980, distance: 0.0020, trailingStep: 10 };
    expect(trailStop(long, bar(1.1, 1.1009, 1.1, 1.1), PIP)).toBe(1.098); // 9 pips: less than a step
    expect(trailStop(long, bar(1.1, 1.1010, 1.1, 1.1), PIP)).toBe(1.099);
    expect(trailStop(long, bar(1.1, 1.1035, 1.1, 1.1), PIP)).toBe(1.101); // best 1.1035 - 20 pips = 3.5 steps above: 3
    expect(trailStop(long, bar(1.0950, 1.0960, 1.0940, 1.0950), PIP)).toBe(1.098);
    const short = { isBuy: false, stop: 1.1017, distance: 0.0015, trailingStep: 10 };
    expect(trailStop(short, tickMove(1.0978, 1.0980), PIP)).toBe(1.0997); // ask 22 pips lower: 2 steps
  });

  test('a dynamic trailing stop (step 1) follows every tenth of a pip', () => {
    const long = { isBuy: true, stop: 1.0990, distance: 0.0010, trailingStep: 1 };
    expect(trailStop(long, tickMove(1.10003, 1.10023), PIP)).toBe(1.09903);
    expect(trailStop(long, tickMove(1.09995, 1.10015), PIP)).toBe(1.099);
  });
});
