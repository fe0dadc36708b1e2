/**
 * Bars of a paper run (issue 32, item 2): the warm-up history and the live bars form one series of
 * closed bars, without gaps or repeats, each equal to the broker's candle of its period — with the
 * history answered late (the clock crossing minutes meanwhile), a disconnect that misses ticks, and
 * a run killed mid-bar and resumed from its journal. The simulator runs on a manual clock that the
 * test moves on, one tick (1 s) at a time.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ManualClock, systemClock } from '../../../../src/platform/clock';
import type { CandleRow, Period } from '../../../../src/trading/fxcm/types';
import { PERIOD_SECONDS } from '../../../../src/trading/fxcm/candles';
import type { FxcmClient } from '../../../../src/trading/fxcm';
import { Journal, readJournal } from '../../../../src/trading/runner/journal/journal';
import { BrokerCallBudget, accountKey, inProcessDecider } from '../../../../src/trading/runner/broker/call-budget';
import { LiveEngine } from '../../../../src/trading/runner/engine/live';
import type { Bar, Strategy } from '../../../../src/trading/runner/strategy';
import type { BrokerSimulator } from '../../../../src/trading/simulator';
import { waitFor } from '../../../support/wait';
import { newClient, startSim, TOKEN } from '../../helpers';
import { tightBrokerLimits } from '../helpers';

const SYM = 'EUR/USD';
const TFS: Period[] = ['m1', 'm5'];
/** Monday 16 November 2026, 11:12:30 UTC: mid-minute, mid five minutes. */
const T0 = Date.UTC(2026, 10, 16, 11, 12, 30);
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rr-live-bars-'));

/** What the strategy saw: the history at onStart and every onBar, per time frame. */
function recorder() {
  const seen = new Map<Period, Bar[]>(TFS.map((tf) => [tf, []]));
  const strategy: Strategy<Record<string, unknown>> = {
    name: 'bars',
    symbols: [SYM],
    timeframes: TFS,
    warmup: 3,
    onStart(ctx) {
      for (const tf of TFS) seen.get(tf)!.push(...ctx.candles(SYM, tf));
    },
    onBar(_ctx, bar) {
      seen.get(bar.timeframe)!.push(bar);
    },
  };
  return { seen, strategy };
}

interface Run {
  engine: LiveEngine;
  client: FxcmClient;
  limiter: BrokerCallBudget;
  done: Promise<unknown>;
}

async function startRun(sim: BrokerSimulator, clock: ManualClock, strategy: Strategy<Record<string, unknown>>, journal?: Journal, recorded?: ReturnType<typeof readJournal>): Promise<Run> {
  const { decider } = inProcessDecider(tightBrokerLimits({ endpoint: 'open_trade', unit: 'second', requestsPerUnit: 1000 }), systemClock);
  const limiter = new BrokerCallBudget({ decider, account: accountKey(TOKEN), clock: systemClock });
  const client = newClient(sim, { beforeRequest: limiter.beforeRequest });
  const engine = new LiveEngine({ mode: 'paper', strategy, client, limiter, journal, recorded, clock });
  await client.connect();
  return { engine, client, limiter, done: engine.run() };
}

async function endRun(r: Run): Promise<void> {
  r.engine.stop();
  await r.done;
  await r.client.close();
  await r.limiter.close();
}

/** Moves the simulator's clock on one second at a time until `untilMs`, letting I/O run in between. */
async function driveTo(clock: ManualClock, untilMs: number, each?: (ms: number) => void): Promise<void> {
  while (clock.nowMs() < untilMs) {
    clock.advance(1000);
    each?.(clock.nowMs());
    await new Promise((r) => setTimeout(r, 2));
  }
}

const asBar = (tf: Period, r: CandleRow): Bar => ({
  symbol: SYM,
  timeframe: tf,
  ts: r[0],
  bidOpen: r[1],
  bidClose: r[2],
  bidHigh: r[3],
  bidLow: r[4],
  askOpen: r[5],
  askClose: r[6],
  askHigh: r[7],
  askLow: r[8],
  tickQty: r[9],
});
const fields = (b: Bar) => ({ ts: b.ts, bidOpen: b.bidOpen, bidHigh: b.bidHigh, bidLow: b.bidLow, bidClose: b.bidClose, askOpen: b.askOpen, askHigh: b.askHigh, askLow: b.askLow, askClose: b.askClose, tickQty: b.tickQty });
const iso = (ts: number) => new Date(ts * 1000).toISOString().slice(11, 16);

/** The series is gap-free and repeat-free from its first bar to `lastTs`, and each bar is the broker's candle. */
function expectBrokerSeries(sim: BrokerSimulator, tf: Period, bars: Bar[], lastTs: number): void {
  const p = PERIOD_SECONDS[tf];
  const first = bars[0]!.ts;
  expect(bars.map((b) => iso(b.ts))).toEqual(Array.from({ length: (lastTs - first) / p + 1 }, (_, i) => iso(first + i * p)));
  const broker = sim.market.candles(SYM, tf, first, lastTs).map((r) => asBar(tf, r));
  expect(bars.map(fields)).toEqual(broker.map(fields));
}

describe('paper bars: history plus live bars are the broker candles', () => {
  let clock: ManualClock;
  let sim: BrokerSimulator;
  beforeEach(async () => {
    clock = new ManualClock(T0);
    sim = await startSim({ clock, tickIntervalMs: 1000 });
  });
  afterEach(async () => {
    await sim.stop();
  });

  test('history answered late, then a disconnect: one series, closed bars only, equal to the candles', async () => {
    // the m1 and m5 history wait while the clock crosses minutes (as a wait for candle budget does)
    sim.faults.slowResponses('/candles/1/m1', 150, 1);
    sim.faults.slowResponses('/candles/1/m5', 150, 1);
    const { seen, strategy } = recorder();
    const run = await startRun(sim, clock, strategy);
    let disconnected = false;
    await driveTo(clock, T0 + 7 * 60_000, (ms) => {
      // mid-minute, the broker drops the connection: ticks are missed until the client is back
      if (!disconnected && ms >= T0 + 4 * 60_000) disconnected = sim.faults.disconnect() > 0;
    });
    expect(disconnected).toBe(true);
    await driveTo(clock, T0 + 13 * 60_000 + 1000);
    // the last closed bars: m1 11:25 (closed by the 11:26:00 tick... at 11:25:31 + 1 s: 11:24), m5 11:20
    const lastM1 = Math.floor(clock.nowMs() / 60_000) * 60 - 60;
    const lastM5 = Math.floor(clock.nowMs() / 300_000) * 300 - 300;
    await waitFor(() => seen.get('m1')!.at(-1)?.ts === lastM1 && seen.get('m5')!.at(-1)?.ts === lastM5, 'the last closed bars');
    await endRun(run);
    expect(seen.get('m1')![0]!.ts).toBe(Math.floor(T0 / 60_000) * 60 - 3 * 60); // the warm-up
    expectBrokerSeries(sim, 'm1', seen.get('m1')!, lastM1);
    expectBrokerSeries(sim, 'm5', seen.get('m5')!, lastM5);
  });

  test('killed mid-bar and resumed from the journal: the bar of the crash is the broker candle, nothing twice', async () => {
    const jfile = path.join(dir, `crash-${Date.now()}`, 'journal.jsonl');
    const first = recorder();
    const journal = new Journal(jfile);
    const run1 = await startRun(sim, clock, first.strategy, journal);
    await driveTo(clock, T0 + 3 * 60_000 + 11_000); // 11:15:41
    await waitFor(() => first.seen.get('m1')!.at(-1)?.ts === Math.floor(clock.nowMs() / 60_000) * 60 - 60, 'the bars before the crash');
    // kill -9: the process is gone (no onStop, nothing more in the journal)
    await run1.client.close();
    await run1.limiter.close();
    journal.close();
    await driveTo(clock, T0 + 4 * 60_000 + 50_000); // down for about a minute
    const second = recorder();
    const run2 = await startRun(sim, clock, second.strategy, new Journal(jfile), readJournal(jfile));
    await driveTo(clock, T0 + 9 * 60_000 + 1000);
    const lastM1 = Math.floor(clock.nowMs() / 60_000) * 60 - 60;
    const lastM5 = Math.floor(clock.nowMs() / 300_000) * 300 - 300;
    await waitFor(() => second.seen.get('m1')!.at(-1)?.ts === lastM1 && second.seen.get('m5')!.at(-1)?.ts === lastM5, 'the last closed bars after the restart');
    await endRun(run2);
    // the resumed strategy replayed what the first run saw, then went on: one series
    expectBrokerSeries(sim, 'm1', second.seen.get('m1')!, lastM1);
    expectBrokerSeries(sim, 'm5', second.seen.get('m5')!, lastM5);
  });
});
