/**
 * The simulated market's price path: live quotes and candle history are one seeded path, so
 * history is exactly the past of the stream; candles of every period agree; the market stands
 * still while closed; its returns look like a market's (fat tails, clustered volatility, no trend
 * to exploit); the spread widens at the rollover.
 */
import { ManualClock, Market, type MarketOptions } from '../../src/trading/simulator';
import type { CandleRow } from '../../src/trading/fxcm';

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;

/** Row fields: [ts, bidOpen, bidClose, bidHigh, bidLow, askOpen, askClose, askHigh, askLow, tickQty]. */
const TS = 0;
const BID_OPEN = 1;
const BID_CLOSE = 2;
const BID_HIGH = 3;
const BID_LOW = 4;
const ASK_OPEN = 5;
const ASK_CLOSE = 6;
const ASK_HIGH = 7;
const ASK_LOW = 8;
const TICKS = 9;

const market = (nowMs: number, extra: Partial<MarketOptions> = {}) => {
  const clock = new ManualClock(nowMs);
  return { clock, m: new Market({ clock, seed: 5, symbols: ['EUR/USD', 'USD/JPY'], ...extra }) };
};

const sec = (ms: number) => Math.floor(ms / 1000);
const closeMid = (r: CandleRow) => (r[BID_CLOSE] + r[ASK_CLOSE]) / 2;

/** The candle that `rows` (shorter candles inside it) join into. */
function joined(rows: CandleRow[]): number[] {
  return [
    rows[0]![BID_OPEN],
    rows.at(-1)![BID_CLOSE],
    Math.max(...rows.map((r) => r[BID_HIGH])),
    Math.min(...rows.map((r) => r[BID_LOW])),
    rows[0]![ASK_OPEN],
    rows.at(-1)![ASK_CLOSE],
    Math.max(...rows.map((r) => r[ASK_HIGH])),
    Math.min(...rows.map((r) => r[ASK_LOW])),
    rows.reduce((n, r) => n + r[TICKS], 0),
  ];
}

function autocorrelation(xs: number[], lag: number): number {
  const mean = xs.reduce((a, b) => a + b, 0) / xs.length;
  let num = 0;
  let den = 0;
  for (let i = 0; i < xs.length; i++) {
    den += (xs[i]! - mean) ** 2;
    if (i >= lag) num += (xs[i]! - mean) * (xs[i - lag]! - mean);
  }
  return num / den;
}

describe('simulated market: one price path for live quotes and candle history', () => {
  test('history joins the live stream: candles open and close on the ticks, and hold every tick', () => {
    // Wednesday 16:52:30 New York: twelve minutes across the 17:00 rollover and a UTC hour
    const start = Date.UTC(2024, 2, 13, 20, 52, 30);
    const { clock, m } = market(start, { tickIntervalMs: 1000 });
    const ticks: { symbol: string; t: number; bid: number; ask: number }[] = [];
    m.on('price', (symbol: string, q: { bid: number; ask: number }) => ticks.push({ symbol, t: clock.nowMs(), bid: q.bid, ask: q.ask }));
    m.start();
    m.advance(12 * MINUTE);
    m.stop();
    expect(ticks).toHaveLength(2 * 12 * 60);
    for (const symbol of ['EUR/USD', 'USD/JPY']) {
      const mine = ticks.filter((k) => k.symbol === symbol);
      const at = new Map(mine.map((k) => [k.t, k]));
      expect(new Set(mine.map((k) => k.bid)).size).toBeGreaterThan(10); // the price moves
      const rows = m.candles(symbol, 'm1', sec(start), sec(clock.nowMs()));
      expect(rows.map((r) => r[TS] * 1000)).toEqual(Array.from({ length: 12 }, (_, i) => Date.UTC(2024, 2, 13, 20, 53 + i)));
      for (const r of rows) {
        const open = at.get(r[TS] * 1000)!;
        expect([r[BID_OPEN], r[ASK_OPEN]]).toEqual([open.bid, open.ask]);
        // a candle is the ticks stamped in its minute: it closes on the last of them (the
        // current one on the last tick until now), and counts them
        const inside = mine.filter((x) => x.t >= r[TS] * 1000 && x.t < r[TS] * 1000 + MINUTE);
        const close = at.get(Math.min(r[TS] * 1000 + MINUTE - 1000, clock.nowMs()))!;
        expect([r[BID_CLOSE], r[ASK_CLOSE]]).toEqual([close.bid, close.ask]);
        expect(r[TICKS]).toBe(inside.length);
        expect([r[BID_HIGH], r[BID_LOW], r[ASK_HIGH], r[ASK_LOW]]).toEqual([Math.max(...inside.map((k) => k.bid)), Math.min(...inside.map((k) => k.bid)), Math.max(...inside.map((k) => k.ask)), Math.min(...inside.map((k) => k.ask))]);
        for (const k of inside) {
          expect(k.bid).toBeGreaterThanOrEqual(r[BID_LOW]);
          expect(k.bid).toBeLessThanOrEqual(r[BID_HIGH]);
          expect(k.ask).toBeGreaterThanOrEqual(r[ASK_LOW]);
          expect(k.ask).toBeLessThanOrEqual(r[ASK_HIGH]);
        }
      }
    }
    // no future: nothing after now, and the current hour closes at now
    expect(m.candles('EUR/USD', 'm1', sec(clock.nowMs()) + 1, sec(clock.nowMs()) + 3600)).toEqual([]);
    const hour = m.candles('EUR/USD', 'H1', sec(Date.UTC(2024, 2, 13, 21)), sec(Date.UTC(2024, 2, 13, 23)));
    expect(hour).toHaveLength(1);
    expect(hour[0]![BID_CLOSE]).toBe(ticks.filter((k) => k.symbol === 'EUR/USD').at(-1)!.bid);
  });

  test('the same seed gives the same history whatever the order of requests; another seed another one', () => {
    const now = Date.UTC(2024, 5, 1);
    const late = [sec(Date.UTC(2024, 4, 20)), sec(Date.UTC(2024, 4, 25))] as const;
    const early = [sec(Date.UTC(2024, 1, 20)), sec(Date.UTC(2024, 1, 22))] as const;
    const a = market(now).m;
    const lateFirst = [a.candles('EUR/USD', 'H1', ...late), a.candles('EUR/USD', 'm5', ...early)];
    const b = market(now).m;
    const earlyFirst = [b.candles('EUR/USD', 'm5', ...early), b.candles('EUR/USD', 'H1', ...late)];
    expect(lateFirst[0]!.length).toBeGreaterThan(80);
    expect(lateFirst[0]).toEqual(earlyFirst[1]);
    expect(lateFirst[1]).toEqual(earlyFirst[0]);
    // the live quote at a moment of history is that moment's candle open
    const then = market(Date.UTC(2024, 4, 21, 10)).m;
    expect(then.quote('EUR/USD')).toMatchObject({ bid: lateFirst[0]!.find((r) => r[TS] === sec(Date.UTC(2024, 4, 21, 10)))![BID_OPEN] });
    const other = market(now, { seed: 6 }).m;
    expect(other.candles('EUR/USD', 'H1', ...late)).not.toEqual(lateFirst[0]);
    expect(other.candles('USD/JPY', 'H1', ...late).map(closeMid)).not.toEqual(a.candles('USD/JPY', 'H1', ...late).map(closeMid));
  });

  test('longer candles are their shorter candles joined: m1 → H1 → D1 → W1 and M1', () => {
    const { m } = market(Date.UTC(2024, 3, 2));
    const within = (rows: CandleRow[], from: number, to: number) => rows.filter((r) => r[TS] >= from && r[TS] < to);
    const check = (longer: CandleRow[], shorter: CandleRow[], end: (ts: number) => number) => {
      expect(longer.length).toBeGreaterThan(0);
      for (const c of longer) expect(c.slice(1)).toEqual(joined(within(shorter, c[TS], end(c[TS]))));
    };
    for (const symbol of ['EUR/USD', 'USD/JPY']) {
      // a Monday and a Tuesday in minutes
      const h1 = m.candles(symbol, 'H1', sec(Date.UTC(2024, 2, 11)), sec(Date.UTC(2024, 2, 13)) - 1);
      expect(h1).toHaveLength(48);
      check(h1, m.candles(symbol, 'm1', sec(Date.UTC(2024, 2, 11)), sec(Date.UTC(2024, 2, 13)) - 1, 10000), (ts) => ts + 3600);
      // March 2024 (its first day is a Friday; three weekends)
      const from = sec(Date.UTC(2024, 2, 1));
      const to = sec(Date.UTC(2024, 3, 1)) - 1;
      const d1 = m.candles(symbol, 'D1', from, to);
      check(d1, m.candles(symbol, 'H1', from, to, 10000), (ts) => ts + 86400);
      const weeks = m.candles(symbol, 'W1', from, to).filter((w) => w[TS] + 7 * 86400 <= to + 1); // Sunday to Saturday, inside March
      expect(weeks).toHaveLength(4);
      check(weeks, d1, (ts) => ts + 7 * 86400);
      check(m.candles(symbol, 'M1', from, to), d1, () => to + 1);
    }
  });

  test('closed market: the path stands still from the Friday close to the Sunday open, without ticks or candles; the open gaps', () => {
    const friday = Date.UTC(2024, 2, 15, 20, 50); // 16:50 New York
    const sunday = Date.UTC(2024, 2, 17, 21, 5); // 17:05 New York
    const { clock, m } = market(Date.UTC(2024, 2, 18), { tickIntervalMs: 1000 });
    const rows = m.candles('EUR/USD', 'm1', sec(friday), sec(sunday));
    const lastFriday = rows.findIndex((r) => r[TS] * 1000 >= sunday - 5 * MINUTE) - 1;
    expect(rows[lastFriday]![TS] * 1000).toBe(Date.UTC(2024, 2, 15, 20, 54)); // the close is 16:55
    expect(rows[lastFriday + 1]![TS] * 1000).toBe(Date.UTC(2024, 2, 17, 21, 0)); // the open is 17:00
    const mid = (r: CandleRow, bid: number, ask: number) => (r[bid]! + r[ask]!) / 2;
    // the Sunday open is the Friday close moved by the session gap (this weekend's: -41.6 pips)
    const gapPips = (mid(rows[lastFriday + 1]!, BID_OPEN, ASK_OPEN) - mid(rows[lastFriday]!, BID_CLOSE, ASK_CLOSE)) / 0.0001;
    expect(gapPips).toBeCloseTo(-41.6, 0);
    // while closed the quote is the Friday close
    const saturday = new Market({ clock: new ManualClock(Date.UTC(2024, 2, 16, 12)), seed: 5, symbols: ['EUR/USD'] }).quote('EUR/USD')!;
    expect((saturday.bid + saturday.ask) / 2).toBeCloseTo(mid(rows[lastFriday]!, BID_CLOSE, ASK_CLOSE), 4);
    expect(m.candles('EUR/USD', 'D1', sec(Date.UTC(2024, 2, 16)), sec(Date.UTC(2024, 2, 16, 23)))).toEqual([]);
    expect(m.candles('EUR/USD', 'H1', sec(Date.UTC(2024, 2, 16)), sec(Date.UTC(2024, 2, 17, 20)))).toEqual([]);
    // Saturday: no ticks
    clock.set(Date.UTC(2024, 2, 16, 12));
    const before = m.quote('EUR/USD');
    let ticks = 0;
    m.on('price', () => ticks++);
    m.start();
    m.advance(10 * MINUTE);
    m.stop();
    expect(ticks).toBe(0);
    expect(m.quote('EUR/USD')).toEqual(before);
  });

  test('gaps: every Sunday open differs from the Friday close by a realistic amount, and news jumps open m1 candles beyond the previous close', () => {
    const { m } = market(Date.UTC(2025, 0, 1));
    const gaps: number[] = [];
    for (let week = 0; week < 52; week++) {
      // Friday 20:54 UTC (16:54 New York in winter, 15:54 in summer) to Sunday 23:00 UTC
      const friday = Date.UTC(2024, 0, 5) + week * 7 * DAY;
      const rows = m.candles('EUR/USD', 'H1', sec(friday + 18 * HOUR), sec(friday + 2 * DAY + 23 * HOUR));
      const close = rows.findIndex((r, i) => i + 1 < rows.length && rows[i + 1]![TS] - r[TS] > 3600);
      gaps.push((rows[close + 1]![BID_OPEN] + rows[close + 1]![ASK_OPEN] - rows[close]![BID_CLOSE] - rows[close]![ASK_CLOSE]) / 2 / 0.0001);
    }
    const meanAbs = gaps.reduce((a, g) => a + Math.abs(g), 0) / gaps.length;
    expect(meanAbs).toBeGreaterThan(8);
    expect(meanAbs).toBeLessThan(25);
    expect(Math.min(...gaps.map(Math.abs))).toBeLessThan(3);
    expect(Math.max(...gaps.map(Math.abs))).toBeGreaterThan(30);
    // news jumps: m1 candles (a month of weekdays) that open 5 pips or more from the previous close,
    // each on a quarter hour
    const rows = m.candles('EUR/USD', 'm1', sec(Date.UTC(2024, 5, 3)), sec(Date.UTC(2024, 5, 28)), 40000);
    const jumps = rows.filter((r, i) => i > 0 && r[TS] - rows[i - 1]![TS] === 60 && Math.abs(r[BID_OPEN] - rows[i - 1]![BID_CLOSE]) >= 0.0005);
    expect(jumps.length).toBeGreaterThan(3);
    for (const r of jumps) expect(r[TS] % 900).toBe(0);
  });

  test('returns look like a market: fat tails and clustered volatility, no trend a crossover could ride', () => {
    const now = Date.UTC(2025, 5, 2);
    const { m } = market(now, { seed: 1 });
    // hourly log returns over 200 days (consecutive traded hours only)
    const h1 = m.candles('EUR/USD', 'H1', sec(now - 200 * DAY), sec(now), 10000);
    const hourly: number[] = [];
    for (let i = 1; i < h1.length; i++) if (h1[i]![TS] - h1[i - 1]![TS] === 3600) hourly.push(Math.log(closeMid(h1[i]!) / closeMid(h1[i - 1]!)));
    expect(hourly.length).toBeGreaterThan(3000);
    const mean = hourly.reduce((a, b) => a + b, 0) / hourly.length;
    const variance = hourly.reduce((a, x) => a + (x - mean) ** 2, 0) / hourly.length;
    const kurtosis = hourly.reduce((a, x) => a + (x - mean) ** 4, 0) / hourly.length / variance ** 2;
    expect(kurtosis).toBeGreaterThan(4); // a normal distribution has 3
    expect(autocorrelation(hourly.map(Math.abs), 1)).toBeGreaterThan(0.1);

    // daily returns over two years: about the configured volatility, and today's sign says nothing about tomorrow's
    const d1 = m.candles('EUR/USD', 'D1', sec(now - 730 * DAY), sec(now));
    const daily = d1.slice(1).map((r, i) => Math.log(closeMid(r) / closeMid(d1[i]!)));
    const dailySd = Math.sqrt(daily.reduce((a, x) => a + x * x, 0) / daily.length);
    expect(dailySd).toBeGreaterThan(0.0035);
    expect(dailySd).toBeLessThan(0.0065);
    let sameSign = 0;
    for (let i = 1; i < daily.length; i++) if (Math.sign(daily[i]!) === Math.sign(daily[i - 1]!)) sameSign++;
    expect(sameSign / (daily.length - 1)).toBeGreaterThan(0.4);
    expect(sameSign / (daily.length - 1)).toBeLessThan(0.6);

    // a 10/30 moving-average crossover on three weeks of m1, always in the market, no costs
    const closes: number[] = [];
    for (let week = 3; week >= 1; week--) closes.push(...m.candles('EUR/USD', 'm1', sec(now - week * 7 * DAY), sec(now - (week - 1) * 7 * DAY) - 60, 10000).map(closeMid));
    const average = (to: number, n: number) => closes.slice(to - n, to).reduce((a, b) => a + b, 0) / n;
    let side = 0;
    let entry = 0;
    const results: number[] = [];
    for (let i = 30; i < closes.length; i++) {
      const want = average(i, 10) > average(i, 30) ? 1 : -1;
      if (want === side) continue;
      if (side !== 0) results.push(side * (closes[i]! - entry));
      side = want;
      entry = closes[i]!;
    }
    expect(results.length).toBeGreaterThan(300);
    const wins = results.filter((r) => r > 0);
    const gains = wins.reduce((a, b) => a + b, 0);
    const losses = -results.filter((r) => r <= 0).reduce((a, b) => a + b, 0);
    expect(wins.length / results.length).toBeLessThan(0.8);
    expect(gains / losses).toBeGreaterThan(0.6); // profit factor: neither a gift nor a trap
    expect(gains / losses).toBeLessThan(1.6);
  });

  test('the volatility option is the daily standard deviation of the log price', () => {
    const now = Date.UTC(2025, 5, 2);
    const dailySd = (volatility: number) => {
      const d1 = market(now, { volatility }).m.candles('EUR/USD', 'D1', sec(now - 400 * DAY), sec(now));
      const r = d1.slice(1).map((c, i) => Math.log(closeMid(c) / closeMid(d1[i]!)));
      return Math.sqrt(r.reduce((a, x) => a + x * x, 0) / r.length);
    };
    const calm = dailySd(0.002);
    const wild = dailySd(0.02);
    expect(calm).toBeGreaterThan(0.0014);
    expect(calm).toBeLessThan(0.003);
    expect(wild / calm).toBeGreaterThan(7);
  });

  test('the spread widens at the 17:00 New York rollover', () => {
    const { clock, m } = market(Date.UTC(2024, 2, 11, 12));
    const spread = (ms: number) => {
      clock.set(ms);
      m.tick();
      const q = m.quote('EUR/USD')!;
      return q.ask - q.bid;
    };
    const ratios: number[] = [];
    for (const day of [11, 12, 13, 14]) {
      const noon = spread(Date.UTC(2024, 2, day, 16)); // 12:00 New York (summer time)
      const rollover = spread(Date.UTC(2024, 2, day, 21)); // 17:00 New York
      expect(rollover).toBeGreaterThan(2 * noon);
      expect(spread(Date.UTC(2024, 2, day, 21, 30))).toBeLessThan(rollover / 2); // and narrows again
      ratios.push(rollover / noon);
    }
    expect(ratios.reduce((a, b) => a + b, 0) / ratios.length).toBeGreaterThan(3);
  });

  test('setPrice departs from the path until the next tick', () => {
    const { clock, m } = market(Date.UTC(2024, 2, 13, 12));
    m.setPrice('EUR/USD', 1.5, 1.5002);
    expect(m.quote('EUR/USD')).toMatchObject({ bid: 1.5, ask: 1.5002 });
    clock.advance(1000);
    m.tick();
    const [row] = m.candles('EUR/USD', 'm1', sec(Date.UTC(2024, 2, 13, 12)), sec(clock.nowMs()));
    expect(m.quote('EUR/USD')).toMatchObject({ bid: row![BID_CLOSE], ask: row![ASK_CLOSE] });
  });

  test('long requests are served: 1000 H1 candles, a year of D1, 10000 m1 (each well under a second)', () => {
    const now = Date.UTC(2026, 10, 25, 17);
    const { m } = market(now);
    expect(m.candles('EUR/USD', 'H1', sec(now) - 1500 * 3600, sec(now), 1000)).toHaveLength(1000);
    expect(m.candles('EUR/USD', 'D1', sec(now) - 365 * 86400, sec(now)).length).toBeGreaterThan(300);
    expect(m.candles('EUR/USD', 'm1', sec(now) - 16 * 86400, sec(now), 10000)).toHaveLength(10000);
  });
});
