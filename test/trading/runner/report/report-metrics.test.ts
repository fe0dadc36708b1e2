/**
 * The report's trade statistics against hand-computed answers, and the edge cases (no trades,
 * only wins, only losses, breakeven trades, one-day runs) that must give null, never NaN or
 * Infinity, in the JSON.
 */
import { buildReport, computeMetrics, renderHtml } from '../../../../src/trading/runner/report/report';
import type { ClosedTrade, EquityPoint } from '../../../../src/trading/runner/results';
import type { CloseReason } from '../../../../src/trading/runner/strategy';

const H = 3600_000;
const D = 24 * H;
const T = Date.UTC(2024, 0, 30); // Tuesday 30 January 2024, 00:00 UTC

function trade(tradeId: string, isBuy: boolean, pl: number, plPips: number, openTime: number, closeTime: number, reason: CloseReason = 'close'): ClosedTrade {
  return { tradeId, symbol: 'EUR/USD', isBuy, amount: 10, openRate: 1.1, closeRate: 1.1, openTime, closeTime, plPips, pl, grossPL: pl, commission: 0, reason };
}
const point = (ts: number, equity: number): EquityPoint => ({ ts, balance: equity, equity });

// Six trades over four days across a month end; D is breakeven, E overlaps D.
const TRADES = [
  trade('A', true, 30, 30, T, T + 2 * H), //          Jan 30, 2 h
  trade('B', false, -10, -10, T + 3 * H, T + 4 * H), // Jan 30, 1 h
  trade('C', true, -15, -15, T + D, T + D + H), //    Jan 31, 1 h
  trade('D', false, 0, 0, T + 2 * D, T + 2 * D + 2 * H), //      Feb 1, 2 h, breakeven
  trade('E', false, -5, -5, T + 2 * D + H, T + 2 * D + 3 * H), //  Feb 1, 2 h
  trade('F', true, 50, 40, T + 3 * D, T + 3 * D + 4 * H), //      Feb 2, 4 h
];
const EQUITY = [
  point(T + 2 * H, 10030),
  point(T + 4 * H, 10020),
  point(T + D + H, 10005), // January's last point
  point(T + 2 * D + 3 * H, 10000),
  point(T + 3 * D + 4 * H, 10050),
  point(T + 4 * D, 10050),
];

/** Every number in a JSON text is finite: NaN and Infinity would be written as null or a string. */
function jsonSafe(v: unknown): void {
  const text = JSON.stringify(v);
  expect(text).not.toMatch(/NaN|Infinity/);
  const walk = (x: unknown): void => {
    if (typeof x === 'number') expect(Number.isFinite(x)).toBe(true);
    else if (x && typeof x === 'object') Object.values(x).forEach(walk);
  };
  walk(v);
}

describe('trade statistics: known answers', () => {
  const m = computeMetrics(TRADES, EQUITY, 10000, T);

  test('expectancy: mean net P/L and mean pips per trade, breakeven included', () => {
    expect(m.expectancy).toBeCloseTo(50 / 6, 9);
    expect(m.expectancyPips).toBeCloseTo(40 / 6, 9);
  });

  test('average and largest win and loss', () => {
    expect(m.averageWin).toBe(40); // (30 + 50) / 2
    expect(m.largestWin).toBe(50);
    expect(m.averageLoss).toBe(-10); // (-10 - 15 - 5) / 3
    expect(m.largestLoss).toBe(-15);
  });

  test('exposure: the union of the open spans over the run (overlaps once)', () => {
    // A 2 h + B 1 h + C 1 h + D∪E [48 h, 51 h] 3 h + F 4 h = 11 h of 96 h
    expect(m.exposure).toBeCloseTo(11 / 96, 9);
  });

  test('average holding time', () => {
    expect(m.averageHoldingMs).toBe(2 * H); // (2 + 1 + 1 + 2 + 2 + 4) h / 6
  });

  test('longest losing streak: B, C; the breakeven D ends it before E', () => {
    expect(m.longestLosingStreak).toBe(2);
    const shuffled = [TRADES[1]!, TRADES[2]!, TRADES[4]!, TRADES[0]!, TRADES[3]!, TRADES[5]!]; // B C E A D F: 3 in list order
    expect(computeMetrics(shuffled, EQUITY, 10000, T).longestLosingStreak).toBe(2); // in close order, not list order
    const noBreakeven = TRADES.filter((t) => t.tradeId !== 'D');
    expect(computeMetrics(noBreakeven, EQUITY, 10000, T).longestLosingStreak).toBe(3);
  });

  test('long / short split', () => {
    expect(m.long).toEqual({ trades: 3, wins: 2, winRate: Math.round((2 / 3) * 1e10) / 1e10, netPL: 65 });
    expect(m.short).toEqual({ trades: 3, wins: 0, winRate: 0, netPL: -15 });
  });

  test('monthly returns: against the previous month end, compounding to the run return; P/L of trades closed in the month', () => {
    expect(m.monthly.map((x) => x.month)).toEqual(['2024-01', '2024-02']);
    expect(m.monthly[0]!.returnPct).toBeCloseTo(0.05, 9); // 10005 / 10000
    expect(m.monthly[1]!.returnPct).toBeCloseTo((10050 / 10005 - 1) * 100, 8);
    expect(m.monthly.map((x) => x.closedPL)).toEqual([5, 45]);
    expect(m.monthly.map((x) => x.closedTrades)).toEqual([3, 3]);
    expect(m.monthly[0]!.equityChange).toBeCloseTo(5, 9);
    expect(m.monthly[1]!.equityChange).toBeCloseTo(45, 9);
    const compounded = m.monthly.reduce((g, x) => g * (1 + x.returnPct! / 100), 1);
    expect((compounded - 1) * 100).toBeCloseTo(m.returnPct, 8);
  });

  test('a position open across a month end: the equity change holds its unrealised P/L, the closed P/L falls in its closing month', () => {
    const across = [trade('X', true, 30, 30, T + D, T + 2 * D + H)]; // opened Jan 31, closed Feb 1
    const eq = [point(T + D + 12 * H, 10020), point(T + 2 * D + H, 10030)]; // +20 unrealised at January's end
    const months = computeMetrics(across, eq, 10000, T).monthly;
    expect(months).toEqual([
      { month: '2024-01', returnPct: 0.2, equityChange: 20, closedTrades: 0, closedPL: 0 },
      { month: '2024-02', returnPct: expect.closeTo((10030 / 10020 - 1) * 100, 9), equityChange: 10, closedTrades: 1, closedPL: 30 },
    ]);
    const html = renderHtml(buildReport({ strategy: 's', mode: 'backtest', currency: 'USD', startBalance: 10000, startTime: T, trades: across, equity: eq }));
    expect(html).toContain('Equity change (USD)');
    expect(html).toContain('Their P/L (USD)');
  });

  test('the HTML shows every statistic', () => {
    const html = renderHtml(buildReport({ strategy: 's', mode: 'backtest', currency: 'USD', startBalance: 10000, startTime: T, trades: TRADES, equity: EQUITY }));
    for (const s of ['Expectancy per trade (USD / pips)', '8.33 / 6.7', '40.00 / 50.00', '-10.00 / -15.00', '11.5%', '2 h', 'Longest losing streak', '2 trades', 'long (buy)', '66.7%', 'short (sell)', '2024-01', '0.05%', '2024-02', '0.45%'])
      expect(html).toContain(s);
  });
});

describe('trade statistics: edge cases', () => {
  test('no trades: null where there is nothing to average, zero exposure, months from the equity', () => {
    const m = computeMetrics([], EQUITY, 10000, T);
    expect(m).toMatchObject({ expectancy: null, expectancyPips: null, averageWin: null, averageLoss: null, largestWin: null, largestLoss: null, averageHoldingMs: null, longestLosingStreak: 0, exposure: 0 });
    expect(m.long).toEqual({ trades: 0, wins: 0, winRate: null, netPL: 0 });
    expect(m.monthly.map((x) => x.closedPL)).toEqual([0, 0]);
    jsonSafe(m);
    expect(renderHtml(buildReport({ strategy: 's', mode: 'backtest', currency: 'USD', startBalance: 10000, trades: [], equity: EQUITY }))).toContain('n/a (no trade)');
  });

  test('only wins: the loss figures are null, the streak 0', () => {
    const m = computeMetrics([TRADES[0]!, TRADES[5]!], EQUITY, 10000, T);
    expect(m).toMatchObject({ averageWin: 40, largestWin: 50, averageLoss: null, largestLoss: null, longestLosingStreak: 0, profitFactor: null });
    jsonSafe(m);
  });

  test('only losses: the win figures are null, the streak every trade', () => {
    const losses = [TRADES[1]!, TRADES[2]!, TRADES[4]!];
    const m = computeMetrics(losses, EQUITY, 10000, T);
    expect(m).toMatchObject({ averageWin: null, largestWin: null, averageLoss: -10, largestLoss: -15, longestLosingStreak: 3, profitFactor: 0, expectancy: -10 });
    expect(m.short.winRate).toBe(0);
    jsonSafe(m);
  });

  test('only breakeven trades: expectancy 0, neither wins nor losses', () => {
    const even = [trade('X', true, 0, 0, T, T + H), trade('Y', false, 0, 0, T + 2 * H, T + 3 * H)];
    const m = computeMetrics(even, EQUITY, 10000, T);
    expect(m).toMatchObject({ expectancy: 0, expectancyPips: 0, averageWin: null, averageLoss: null, breakeven: 2, longestLosingStreak: 0 });
    expect(m.long.winRate).toBe(0);
    jsonSafe(m);
  });

  test('a one-day run: one month, Sharpe n/a, exposure over the day', () => {
    const day = [point(T + 6 * H, 10010), point(T + 12 * H, 10020)];
    const m = computeMetrics([trade('A', true, 20, 20, T + 3 * H, T + 9 * H)], day, 10000, T);
    expect(m.exposure).toBeCloseTo(0.5, 9); // 6 h of [00:00, 12:00]
    expect(m.monthly).toEqual([{ month: '2024-01', returnPct: 0.2, equityChange: 20, closedTrades: 1, closedPL: 20 }]);
    expect(m.sharpe).toBeNull();
    jsonSafe(m);
  });

  test('a run that spans no time (one point, no start), no equity, a zero balance: null, never NaN', () => {
    const one = computeMetrics([trade('A', true, 5, 5, T, T)], [point(T, 10005)], 10000);
    expect(one.exposure).toBeNull();
    expect(one.averageHoldingMs).toBe(0);
    const none = computeMetrics([], [], 10000);
    expect(none).toMatchObject({ exposure: null, monthly: [] });
    const broke = computeMetrics([], [point(T, 0)], 0, T - H);
    expect(broke.monthly).toEqual([{ month: '2024-01', returnPct: null, equityChange: null, closedTrades: 0, closedPL: 0 }]);
    jsonSafe([one, none, broke]);
  });

  test('a month with a closed trade but no equity point: its return is null, its P/L counted', () => {
    const m = computeMetrics([trade('A', true, 7, 7, T, Date.UTC(2024, 2, 2))], [point(T + H, 10000), point(Date.UTC(2024, 3, 1), 10007)], 10000, T);
    expect(m.monthly).toEqual([
      { month: '2024-01', returnPct: 0, equityChange: 0, closedTrades: 0, closedPL: 0 },
      { month: '2024-03', returnPct: null, equityChange: null, closedTrades: 1, closedPL: 7 },
      { month: '2024-04', returnPct: 0.07, equityChange: 7, closedTrades: 0, closedPL: 0 },
    ]);
  });
});
