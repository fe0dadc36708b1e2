/**
 * The simulated broker's realism: a stop crossed by a gap in the price path fills at the first
 * price beyond it, not at the stop; open trades accrue the daily rollover at 17:00 New York
 * (Wednesday three days) at the offer's rollB/rollS and pay it into the balance at the close;
 * market orders and stops slip by the configured model.
 */
import type { TableRecord } from '../../src/trading/fxcm';
import { Faults, ManualClock, Market, TradingEngine, type EngineOptions } from '../../src/trading/simulator';

const MINUTE = 60_000;
const TOKEN = 'realism';

function broker(nowMs: number, options: EngineOptions = {}) {
  const clock = new ManualClock(nowMs);
  const market = new Market({ clock, seed: 5, symbols: ['EUR/USD'] });
  const pushes: { model: string; rec: TableRecord }[] = [];
  const engine = new TradingEngine(market, new Faults(), (_token, model, rec) => pushes.push({ model, rec }), options);
  const acc = engine.addAccount(TOKEN, { accountId: '1000', balance: 10000 });
  return { clock, market, engine, acc, pushes };
}

/** Opens a market trade and waits for its fill (the engine fills after the HTTP answer). */
async function open(engine: TradingEngine, isBuy: boolean, amount: number, extra: Record<string, string> = {}) {
  const before = engine.trades.size;
  engine.openTrade(TOKEN, { account_id: '1000', symbol: 'EUR/USD', is_buy: String(isBuy), amount: String(amount), order_type: 'AtMarket', time_in_force: 'GTC', ...extra });
  await new Promise((resolve) => setImmediate(resolve));
  expect(engine.trades.size).toBe(before + 1);
  return [...engine.trades.values()].at(-1)!;
}

test('a stop crossed by a news jump fills at the first price beyond it, not at the stop', async () => {
  // the first news jump of June 2024 (5 pips or more between two m1 candles)
  const probe = new Market({ clock: new ManualClock(Date.UTC(2024, 6, 1)), seed: 5, symbols: ['EUR/USD'] });
  const rows = probe.candles('EUR/USD', 'm1', Date.UTC(2024, 5, 3) / 1000, Date.UTC(2024, 5, 28) / 1000, 40000);
  const k = rows.findIndex((r, i) => i > 0 && r[0] - rows[i - 1]![0] === 60 && Math.abs(r[1] - rows[i - 1]![2]) >= 0.0005);
  const [jumpSec, bidAfter] = [rows[k]![0], rows[k]![1]];
  const bidBefore = rows[k - 1]![2];
  const down = bidAfter < bidBefore;

  const { clock, market, engine, acc } = broker(jumpSec * 1000 - 30_000);
  market.tick();
  const t = await open(engine, down, 10); // a long before a drop, a short before a rise
  const stop = Math.round(((bidBefore + bidAfter) / 2) * 1e5) / 1e5; // halfway through the jump
  engine.changeTradeStopLimit(TOKEN, { trade_id: t.tradeId, is_stop: 'true', rate: String(stop), is_in_pips: 'false' });
  clock.set(jumpSec * 1000 - 1000);
  market.tick();
  expect(engine.trades.has(t.tradeId)).toBe(true); // a second before, the price is still on the near side
  clock.set(jumpSec * 1000);
  market.tick();
  expect(engine.trades.has(t.tradeId)).toBe(false);
  const closed = engine.closed.at(-1)!;
  const q = market.quote('EUR/USD')!;
  expect(closed.close).toBe(down ? q.bid : q.ask);
  expect(Math.abs((closed.close as number) - stop)).toBeGreaterThan(0.0002);
  expect(acc.balance).toBeCloseTo(10000 + (closed.grossPL as number), 9);
});

test('rollover: Tuesday one day, Wednesday three, at rollB/rollS per 10K; paid into the balance at the close; off on request', async () => {
  // Tuesday 2026-11-17 20:00 UTC; the rollovers are at 22:00 UTC (17:00 New York, winter time)
  const start = Date.UTC(2026, 10, 17, 20);
  const { clock, market, engine, acc } = broker(start);
  market.tick();
  const long = await open(engine, true, 20);
  const short = await open(engine, false, 10);
  const offer = engine.snapshot(TOKEN, 'Offer')[0]!;
  expect([offer.rollB, offer.rollS]).toEqual([-0.62, 0.28]);
  clock.set(Date.UTC(2026, 10, 17, 23));
  market.tick();
  expect([long.roll, short.roll]).toEqual([expect.closeTo(-0.62 * 2, 9), expect.closeTo(0.28, 9)]);
  clock.set(Date.UTC(2026, 10, 18, 23));
  market.tick();
  expect([long.roll, short.roll]).toEqual([expect.closeTo(-0.62 * 2 * 4, 9), expect.closeTo(0.28 * 4, 9)]);
  const positions = engine.snapshot(TOKEN, 'OpenPosition');
  expect(positions.map((p) => p.roll)).toEqual([-4.96, 1.12]);
  expect(engine.snapshot(TOKEN, 'Summary')[0]!.rollSum).toBe(-3.84);
  const account = engine.snapshot(TOKEN, 'Account')[0]!;
  expect(account.equity).toBeCloseTo(10000 + (account.grossPL as number) - 3.84, 1);
  engine.closeTrade(TOKEN, { trade_id: long.tradeId, amount: '20', order_type: 'AtMarket', time_in_force: 'GTC' });
  await new Promise((resolve) => setImmediate(resolve));
  const closed = engine.closed.at(-1)!;
  expect(closed.roll).toBe(-4.96);
  expect(acc.balance).toBeCloseTo(10000 + (closed.grossPL as number) - 4.96, 9);

  const off = broker(start, { rollover: false });
  off.market.tick();
  const t = await open(off.engine, true, 20);
  off.clock.set(Date.UTC(2026, 10, 18, 23));
  off.market.tick();
  expect(t.roll).toBe(0);
});

test('slippage: a market buy fills above the ask, a stop below its level; limits at their rate', async () => {
  const { clock, market, engine } = broker(Date.UTC(2026, 10, 17, 12), { slippage: { pips: 0.5, spreadShare: 0 } });
  market.setPrice('EUR/USD', 1.1, 1.1002);
  const t = await open(engine, true, 10);
  expect(t.open).toBe(1.10025);
  engine.changeTradeStopLimit(TOKEN, { trade_id: t.tradeId, is_stop: 'true', rate: '1.099', is_in_pips: 'false' });
  clock.set(Date.UTC(2026, 10, 17, 12, 1));
  market.setPrice('EUR/USD', 1.0985, 1.0987);
  expect(engine.closed.at(-1)!.close).toBe(1.09845);
  const l = await open(engine, true, 10);
  engine.changeTradeStopLimit(TOKEN, { trade_id: l.tradeId, is_stop: 'false', rate: '1.1', is_in_pips: 'false' });
  market.setPrice('EUR/USD', 1.1005, 1.1007);
  expect(engine.closed.at(-1)!.close).toBe(1.1005);
});
