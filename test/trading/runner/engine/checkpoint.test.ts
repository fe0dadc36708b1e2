/**
 * Checkpoints (issue 32, item 9): a paper run whose strategy has saveState/restoreState cuts its
 * journal to a checkpoint whenever it has grown by its bound, so the journal stays bounded
 * however long the run; a resume (and a replay) from the checkpoint gives the same state and
 * decisions as one from the whole journal; a kill at each step of the compaction resumes; a
 * strategy without the hooks keeps the whole journal and resumes as before. The simulator runs on
 * a manual clock that the test moves on one tick (1 s) at a time.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ManualClock, systemClock } from '../../../../src/platform/clock';
import type { LogWriter } from '../../../../src/telemetry/logger';
import type { BrokerSimulator } from '../../../../src/trading/simulator';
import { Journal, previousJournalPath, readJournal, type JournalLine } from '../../../../src/trading/runner/journal/journal';
import { jsonProblem, lastCheckpoint, type CheckpointLine } from '../../../../src/trading/runner/engine/checkpoint';
import { BrokerCallBudget, accountKey, inProcessDecider } from '../../../../src/trading/runner/broker/call-budget';
import { LiveEngine, type LiveResult } from '../../../../src/trading/runner/engine/live';
import { validateStrategy } from '../../../../src/trading/runner/engine/loader';
import { replayJournal } from '../../../../src/trading/runner/cli/live-cli';
import { computeMetrics } from '../../../../src/trading/runner/report/report-metrics';
import type { Strategy } from '../../../../src/trading/runner/strategy';
import { newClient, startSim, TOKEN } from '../../helpers';
import { tightBrokerLimits } from '../helpers';
import { waitFor } from '../../../support/wait';

const SYM = 'EUR/USD';
/** Monday 16 November 2026, 11:12:30 UTC. */
const T0 = Date.UTC(2026, 10, 16, 11, 12, 30);
/** The journal's bound in these tests: a few dozen ticks with a position open. */
const BOUND = 32 * 1024;
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rr-checkpoint-'));
let runs = 0;
const freshDir = (name: string) => path.join(dir, `${name}-${++runs}`);

/** What the strategy keeps between hooks (its saved state). */
interface Kept {
  ticks: number;
  bids: number[];
  bars: number;
  /** Its broker calls. */
  calls: number;
}

/** A strategy's ticks as the test waits for them: `seen` at the end of its onTick, `ticked(n)` resolves once n were seen. */
function tickWaiter() {
  const waiters: { ticks: number; resolve: () => void }[] = [];
  let seen = 0;
  return {
    seen(ticks: number): void {
      seen = ticks;
      for (const w of waiters.filter((x) => x.ticks <= ticks)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve();
      }
    },
    ticked: (ticks: number) =>
      new Promise<void>((resolve, reject) => {
        const t = setTimeout(() => reject(new Error(`tick ${ticks} never reached the strategy (it saw ${seen})`)), 10_000);
        waiters.push({ ticks, resolve: () => (clearTimeout(t), resolve()) });
      }),
  };
}

/** What `drive` moves on: a strategy whose ticks the test can wait for. */
interface Ticking {
  ticks(): number;
  ticked(ticks: number): Promise<void>;
}

/**
 * A strategy that decides on what it keeps: every 40th tick it opens against the mean of its last
 * 30 bids, or closes; 20 ticks later it places an entry order far from the market, or deletes it.
 * It sets a timer (that never fires in these tests: it is state).
 */
function counting(hooks: boolean) {
  const kept: Kept = { ticks: 0, bids: [], bars: 0, calls: 0 };
  /** What it read through ctx at its last tick: the runner's state, which a checkpoint must give back. */
  let view: unknown;
  /** What ctx read in restoreState: the time and quote of the checkpoint. */
  let restoredWith: unknown;
  let keptAtResume: Kept | undefined;
  let started = false;
  const waiter = tickWaiter();
  const strategy: Strategy<Record<string, unknown>> = {
    name: hooks ? 'counting' : 'counting-without-hooks',
    symbols: [SYM],
    timeframes: ['m1'],
    onStart(ctx) {
      started = true;
      ctx.setTimer('hourly', 3_600_000);
    },
    async onTick(ctx, t) {
      kept.ticks++;
      kept.bids.push(t.bid);
      if (kept.bids.length > 30) kept.bids.shift();
      const gone = (e: Error) => {
        if (e.name !== 'OrderGoneError') throw e;
      };
      if (kept.ticks % 40 === 0) {
        kept.calls++;
        const mine = ctx.positions(SYM);
        if (mine.length) await ctx.closeTrade(mine[0]!.tradeId).catch(gone);
        else {
          const mean = kept.bids.reduce((a, b) => a + b, 0) / kept.bids.length;
          await ctx.openTrade({ symbol: SYM, isBuy: t.bid < mean, amount: 10 });
        }
      } else if (kept.ticks % 40 === 20) {
        kept.calls++;
        const [order] = ctx.orders(SYM);
        if (order) await ctx.deleteOrder(order.orderId).catch(gone);
        else await ctx.createEntryOrder({ symbol: SYM, isBuy: true, amount: 10, rate: Math.round((t.bid - 0.005) * 1e5) / 1e5 });
      }
      view = JSON.parse(JSON.stringify({ now: ctx.now(), positions: ctx.positions(), orders: ctx.orders(), candles: ctx.candles(SYM, 'm1'), account: ctx.account() }));
      waiter.seen(kept.ticks);
    },
    onBar() {
      kept.bars++;
    },
    onReconnect(_ctx, e) {
      if (e.reason === 'resume') keptAtResume = clone(kept);
    },
  };
  if (hooks) {
    strategy.saveState = () => clone(kept);
    strategy.restoreState = (ctx, s) => {
      Object.assign(kept, s as Kept);
      restoredWith = clone({ now: ctx.now(), price: ctx.price(SYM) });
    };
  }
  return {
    strategy,
    kept,
    view: () => view,
    restoredWith: () => restoredWith,
    keptAtResume: () => keptAtResume,
    started: () => started,
    ticks: () => kept.ticks,
    ticked: waiter.ticked,
  };
}
type Counter = ReturnType<typeof counting>;

const clone = <T>(v: T): T => JSON.parse(JSON.stringify(v)) as T;

function capture(): { log: LogWriter; lines: string[] } {
  const lines: string[] = [];
  const at = (level: string) => (msg: string) => void lines.push(`${level} ${msg}`);
  return { lines, log: { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') } };
}

interface Run {
  engine: LiveEngine;
  journal: Journal;
  log: string[];
  done: Promise<LiveResult>;
  close: () => Promise<void>;
}

async function startRun(sim: BrokerSimulator, clock: ManualClock, c: { strategy: Strategy<Record<string, unknown>> }, jfile: string, journalMaxBytes: number | undefined = BOUND): Promise<Run> {
  const { decider } = inProcessDecider(tightBrokerLimits({ endpoint: 'open_trade', unit: 'second', requestsPerUnit: 1000 }), systemClock);
  const limiter = new BrokerCallBudget({ decider, account: accountKey(TOKEN), clock: systemClock });
  const client = newClient(sim, { beforeRequest: limiter.beforeRequest });
  const recorded = readJournal(jfile);
  const journal = new Journal(jfile);
  const { log, lines } = capture();
  const engine = new LiveEngine({ mode: 'paper', strategy: c.strategy, client, limiter, journal, journalMaxBytes, recorded, logger: log, clock });
  await client.connect();
  const done = engine.run();
  const close = async () => {
    journal.close();
    await client.close();
    await limiter.close();
  };
  return { engine, journal, log: lines, done, close };
}

/** Stops a run as SIGTERM does (onStop, the result). */
async function endRun(r: Run): Promise<LiveResult> {
  r.engine.stop();
  const result = await r.done;
  await r.close();
  return result;
}

/** kill -9: nothing more reaches the journal or the broker; the engine is stopped after that only to clear its timers. */
async function kill(r: Run): Promise<void> {
  await r.close();
  r.engine.stop();
  await r.done;
}

/** Moves the market on `n` ticks, each one handled by the strategy before the next; `each` after every one. */
async function drive(clock: ManualClock, c: Ticking, n: number, each?: () => void): Promise<void> {
  for (let i = 0; i < n; i++) {
    const seen = c.ticked(c.ticks() + 1);
    clock.advance(1000);
    await seen;
    each?.();
  }
}

const untilStarted = (c: Counter): Promise<void> => waitFor(() => c.started(), 'onStart');
const untilResumed = (c: Counter, what: string): Promise<void> => waitFor(() => c.keptAtResume() !== undefined, what);

/** The broker's order calls so far (what must never be sent twice), by endpoint. */
const orderCalls = (sim: BrokerSimulator) => Object.entries(sim.requestCounts()).filter(([k]) => /^\/trading\/(open|close|create|change|delete)/.test(k));
const bytes = (lines: readonly JournalLine[]) => lines.reduce((n, l) => n + Buffer.byteLength(JSON.stringify(l)) + 1, 0);

/** The journal a crash at a step of a compaction leaves behind, and what the strategy kept then. */
interface Image {
  step: 'written' | 'renamed';
  compaction: number;
  dir: string;
  kept: Kept;
}

describe('journal checkpoints of a paper run', () => {
  let clock: ManualClock;
  let sim: BrokerSimulator;
  beforeEach(async () => {
    clock = new ManualClock(T0);
    sim = await startSim({ clock, tickIntervalMs: 1000 });
  });
  afterEach(async () => {
    jest.restoreAllMocks();
    await sim.stop();
  });

  test('a long run keeps its journal under the bound; the checkpoint replays to the state and decisions of the whole journal', async () => {
    const jdir = freshDir('long');
    const jfile = path.join(jdir, 'journal.jsonl');
    // The whole journal, as it would be without compaction: each segment as it is replaced
    // (after the first, without its run line and checkpoint), then the last one.
    const segments: JournalLine[][] = [];
    const rename = fs.renameSync;
    jest.spyOn(fs, 'renameSync').mockImplementation((from, to) => {
      if (to === jfile) segments.push(readJournal(jfile));
      rename(from, to);
    });
    const c = counting(true);
    const run = await startRun(sim, clock, c, jfile);
    await untilStarted(c);
    let largest = 0;
    let sinceCheckpoint = 0;
    const watch = () => {
      largest = Math.max(largest, fs.statSync(jfile).size);
      sinceCheckpoint = Math.max(sinceCheckpoint, run.journal.bytesSinceCheckpoint);
    };
    await drive(clock, c, 1210, watch);
    // on until a decision follows the last checkpoint (where checkpoints fall depends on the bytes of every line)
    while ((readJournal(jfile)[1] as CheckpointLine).intents >= c.kept.calls) await drive(clock, c, 10, watch);
    const live = await endRun(run);
    expect(live.error).toBeUndefined();
    expect(run.log.filter((l) => l.startsWith('error') || l.startsWith('warn'))).toEqual([]);

    const whole = [...segments.flatMap((s, i) => (i === 0 ? s : s.slice(2))), ...readJournal(jfile).slice(2)];
    const wholeBytes = bytes(whole);
    // bounded: the bytes after the checkpoint pass the bound by at most one input's lines, and the
    // checkpoint itself is small, while the run wrote many times the bound
    expect(segments.length).toBeGreaterThan(5);
    expect(wholeBytes).toBeGreaterThan(10 * BOUND);
    expect(sinceCheckpoint).toBeLessThan(BOUND + 4096);
    expect(largest).toBeLessThan(2 * BOUND);
    // the journal is its run line, its checkpoint and what followed; one previous segment is kept
    const lines = readJournal(jfile);
    expect(lines.map((l) => l.k).slice(0, 2)).toEqual(['run', 'checkpoint']);
    expect(lastCheckpoint(lines)).toBe(1);
    expect(readJournal(previousJournalPath(jfile))).toEqual(segments.at(-1));
    expect(fs.readdirSync(jdir).sort()).toEqual(['journal.jsonl', 'journal.prev.jsonl']);

    // The compacted journal (from its checkpoint) and the whole one (from the start) replay to the
    // same strategy state, the same view of the runner's state, the same trades and decisions.
    const wholeFile = path.join(jdir, 'whole.jsonl');
    fs.writeFileSync(wholeFile, whole.map((l) => JSON.stringify(l) + '\n').join(''));
    const fromCheckpoint = counting(true);
    const fromStart = counting(true);
    const a = await replayJournal(fromCheckpoint.strategy, jfile);
    const b = await replayJournal(fromStart.strategy, wholeFile);
    expect(a.checkpointAt).toBe(lines[1]!.t);
    expect(b.checkpointAt).toBeUndefined();
    expect(JSON.stringify(a.replayed)).toBe(JSON.stringify(a.recorded));
    expect(JSON.stringify(b.replayed)).toBe(JSON.stringify(b.recorded));
    const before = (lines[1] as CheckpointLine).intents;
    expect(a.replayed.length).toBeGreaterThan(0);
    expect(a.replayed).toEqual(b.replayed.filter((i) => i.id > before));
    expect(fromCheckpoint.kept).toEqual(fromStart.kept);
    expect(fromCheckpoint.kept).toEqual(c.kept);
    expect(fromCheckpoint.view()).toEqual(fromStart.view());
    expect(fromCheckpoint.view()).toEqual(c.view());
    // The same trades, each closed for the same reason (why a trade the strategy closed closed is
    // noted again from its call's recorded answer: a replay sends nothing).
    expect(a.result.trades).toEqual(b.result.trades);
    expect(a.result.trades).toEqual(live.trades);
    expect(live.trades.some((t) => t.reason === 'close')).toBe(true);
    expect(a.result.trades.length).toBeGreaterThan(5);
    const closedBefore = (lines[1] as CheckpointLine).engine.closed.length;
    expect(a.result.trades.slice(0, closedBefore)).toEqual(live.trades.slice(0, closedBefore));
    expect([a.result.decisions, b.result.decisions]).toEqual([live.decisions, live.decisions]);
    expect(live.decisions).toBe(c.kept.calls);
    // Each checkpoint, taken back with the lines after it, gives the next one: the strategy's
    // state and the runner's (the sets' members in another order).
    const comparable = (c: CheckpointLine) => {
      const broker = c.engine.broker;
      const sorted = (ids: string[]) => [...ids].sort();
      return {
        ...c,
        engine: {
          ...c.engine,
          broker: {
            ...broker,
            knownOrderIds: sorted(broker.knownOrderIds),
            ownOrders: sorted(broker.ownOrders),
            ownTrades: sorted(broker.ownTrades),
            closeReasons: [...broker.closeReasons].sort(),
          },
          announcedTrades: sorted(c.engine.announcedTrades),
          announcedOrders: sorted(c.engine.announcedOrders),
        },
      };
    };
    for (let k = 1; k < segments.length; k++) {
      const from = segments[k]![1] as CheckpointLine;
      const next = (k + 1 < segments.length ? segments[k + 1]![1] : lines[1]) as CheckpointLine;
      const fresh = counting(true);
      const engine = new LiveEngine({ mode: 'replay', strategy: fresh.strategy, recorded: segments[k]! });
      await engine.replay();
      // restoreState reads the time and prices of its checkpoint
      expect(fresh.restoredWith()).toEqual({ now: from.engine.now, price: from.engine.quotes.find(([symbol]) => symbol === SYM)![1] });
      const got = clone(engine.checkpoint());
      expect(got.engine.closed.slice(0, from.engine.closed.length)).toEqual(from.engine.closed);
      expect(comparable(got)).toEqual(comparable(next));
    }
    // the equity curve before the checkpoint is thinned, keeping what the report reads from it
    const thinned = computeMetrics(a.result.trades, a.result.equity, a.result.startBalance);
    const full = computeMetrics(b.result.trades, b.result.equity, b.result.startBalance);
    expect(a.result.equity.length).toBeLessThan(b.result.equity.length);
    expect([thinned.endEquity, thinned.maxDrawdown, thinned.monthly]).toEqual([full.endEquity, full.maxDrawdown, full.monthly]);
  }, 60_000);

  test('killed at each step of a compaction (new file written, renamed over the journal): each resumes with the state of that moment, nothing sent twice', async () => {
    const jdir = freshDir('kill');
    const jfile = path.join(jdir, 'journal.jsonl');
    const c = counting(true);
    const images: Image[] = [];
    let compaction = 0;
    const image = (step: Image['step']) => {
      const to = path.join(dir, `image-${runs}-${compaction}-${step}`);
      // without the journal's lock: it names this (live) test process, where a killed run's would name a dead one
      fs.cpSync(jdir, to, { recursive: true, filter: (src) => !src.endsWith('.lock') });
      images.push({ step, compaction, dir: to, kept: clone(c.kept) });
    };
    const rename = fs.renameSync;
    jest.spyOn(fs, 'renameSync').mockImplementation((from, to) => {
      if (to !== jfile || ++compaction > 2) return rename(from, to);
      image('written');
      rename(from, to);
      image('renamed');
    });
    const run = await startRun(sim, clock, c, jfile);
    await untilStarted(c);
    await drive(clock, c, 410);
    expect(compaction).toBeGreaterThan(2);
    await kill(run);
    jest.restoreAllMocks();
    expect(images.map((i) => `${i.compaction} ${i.step}`)).toEqual(['1 written', '1 renamed', '2 written', '2 renamed']);

    for (const img of images) {
      const file = path.join(img.dir, 'journal.jsonl');
      const onDisk = readJournal(file);
      if (img.step === 'written') {
        // the old journal is whole under its name; the new one waits beside it
        expect(fs.existsSync(`${file}.next`)).toBe(true);
        expect(lastCheckpoint(onDisk)).toBe(img.compaction === 1 ? -1 : 1);
      } else {
        expect(onDisk.map((l) => l.k)).toEqual(['run', 'checkpoint']);
        expect((onDisk[1] as CheckpointLine).strategy).toEqual(img.kept);
      }
      const calls = orderCalls(sim);
      const again = counting(true);
      const resumed = await startRun(sim, clock, again, file);
      await untilResumed(again, `the resume from the image of compaction ${img.compaction}, ${img.step}`);
      expect(again.keptAtResume()).toEqual(img.kept);
      // a compaction killed before its rename leaves no trace once resumed
      expect(fs.existsSync(`${file}.next`)).toBe(false);
      const result = await endRun(resumed);
      expect(result.error).toBeUndefined();
      expect(result.resumed).toBe(true);
      expect(orderCalls(sim)).toEqual(calls);
      const replayed = await replayJournal(counting(true).strategy, file);
      expect(JSON.stringify(replayed.replayed)).toBe(JSON.stringify(replayed.recorded));
    }
  }, 60_000);

  test('a journal cut in the middle of its last line after a compaction: the torn line is said and dropped, the checkpoint is kept', async () => {
    const jdir = freshDir('torn');
    const jfile = path.join(jdir, 'journal.jsonl');
    const c = counting(true);
    const run = await startRun(sim, clock, c, jfile, 8 * 1024);
    await untilStarted(c);
    await drive(clock, c, 150);
    // a few lines after the checkpoint, the last of which is cut (the checkpoint itself is only
    // ever renamed into place, never appended)
    while (readJournal(jfile).length < 5) await drive(clock, c, 1);
    await kill(run);
    const lines = readJournal(jfile);
    expect(lastCheckpoint(lines)).toBe(1);
    const whole = fs.statSync(jfile).size;
    fs.truncateSync(jfile, whole - 9); // killed while writing its last line
    const reopened = new Journal(jfile);
    const lastLine = bytes(lines.slice(-1));
    expect(reopened.tornTailBytes).toBe(lastLine - 9);
    expect(reopened.bytesSinceCheckpoint).toBe(whole - lastLine - bytes(lines.slice(0, 2)));
    reopened.close();
    const kept = lines.slice(0, -1);
    expect(readJournal(jfile)).toEqual(kept);
    const again = counting(true);
    const resumed = await startRun(sim, clock, again, jfile, 8 * 1024);
    await untilResumed(again, 'the resume');
    // the checkpoint's ticks and those after it, the torn one not among them
    const ticksAfter = kept.slice(2).filter((l) => l.k === 'price').length;
    expect(again.keptAtResume()!.ticks).toBe((kept[1] as CheckpointLine & { strategy: Kept }).strategy.ticks + ticksAfter);
    expect((await endRun(resumed)).error).toBeUndefined();
  }, 60_000);

  test('no checkpoint while an intent waits for its answer, or an answered order call for its claim', async () => {
    const jdir = freshDir('in-flight');
    const jfile = path.join(jdir, 'journal.jsonl');
    // What each compaction drops: every intent in it must have its answer, every order an answer
    // names its claim (else a kill right after would lose them with the segment).
    const dropped: string[] = [];
    let compactions = 0;
    const rename = fs.renameSync;
    jest.spyOn(fs, 'renameSync').mockImplementation((from, to) => {
      if (to === jfile) {
        compactions++;
        const old = readJournal(jfile);
        const answers = new Map(old.filter((l) => l.k === 'answer').map((l) => [l.id, l]));
        const claimed = new Set(old.filter((l) => l.k === 'own').map((l) => l.orderId));
        for (const i of old.filter((l) => l.k === 'intent')) {
          const a = answers.get(i.id);
          if (!a) dropped.push(`intent ${i.id} without its answer`);
          const orderId = (a?.value as { orderId?: string } | undefined)?.orderId;
          if (orderId !== undefined && !claimed.has(orderId)) dropped.push(`order ${orderId} of intent ${i.id} without its claim`);
        }
      }
      rename(from, to);
    });
    // the first order's answer is slow: ticks go on while it waits
    sim.faults.slowResponses('/trading/open_trade', 300, 1);
    let ticks = 0;
    let answered = false;
    let started = false;
    /** The tick of the second order, set once the first is answered. */
    let secondAt = Infinity;
    const waiter = tickWaiter();
    const strategy: Strategy<Record<string, unknown>> = {
      name: 'calls',
      symbols: [SYM],
      onStart() {
        started = true;
      },
      async onTick(ctx) {
        ticks++;
        // not awaited: the hook ends, the call waits for its answer
        if (ticks === 5) void ctx.openTrade({ symbol: SYM, isBuy: true, amount: 10 }).then(() => (answered = true));
        // awaited: answered within the hook, claimed by the input after it
        if (ticks === secondAt) await ctx.openTrade({ symbol: SYM, isBuy: false, amount: 10 });
        waiter.seen(ticks);
      },
      saveState: () => ({ ticks }),
      restoreState(_ctx, state) {
        ticks = (state as { ticks: number }).ticks;
      },
    };
    const c = { strategy, ticks: () => ticks, ticked: waiter.ticked };
    // a checkpoint at every point the runner may take one
    const run = await startRun(sim, clock, c, jfile, 1);
    await waitFor(() => started, 'onStart');
    let ticksWhileWaiting = 0;
    await drive(clock, c, 5);
    while (!answered) await drive(clock, c, 1, () => (ticksWhileWaiting += answered ? 0 : 1));
    secondAt = ticks + 5;
    await drive(clock, c, 40);
    const result = await endRun(run);
    expect(result.error).toBeUndefined();
    expect(ticksWhileWaiting).toBeGreaterThan(3);
    expect(compactions).toBeGreaterThan(40);
    expect(dropped).toEqual([]);
    expect(orderCalls(sim)).toEqual([['/trading/open_trade', 2]]);
    const replayed = await replayJournal(strategy, jfile);
    expect(JSON.stringify(replayed.replayed)).toBe(JSON.stringify(replayed.recorded));
  }, 60_000);

  test('a restoreState that throws is a strategy error: the resumed run flattens what it owns, claimed before the checkpoint or after it', async () => {
    const jdir = freshDir('restore-throws');
    const jfile = path.join(jdir, 'journal.jsonl');
    // a checkpoint after the entry order of tick 20 ...
    const first = counting(true);
    const run1 = await startRun(sim, clock, first, jfile, 1);
    await untilStarted(first);
    await drive(clock, first, 25);
    await kill(run1);
    expect(((readJournal(jfile)[1] as CheckpointLine).strategy as Kept).ticks).toBeGreaterThan(20);
    // ... and the trade of tick 40 claimed after it (no checkpoint under the default bound)
    const second = counting(true);
    const run2 = await startRun(sim, clock, second, jfile, undefined);
    await untilResumed(second, 'the first resume');
    await drive(clock, second, 20);
    await kill(run2);
    const tail = readJournal(jfile).slice(2);
    expect(tail.filter((l) => l.k === 'own')).toHaveLength(1);
    expect(sim.engine.snapshot(TOKEN, 'OpenPosition')).toHaveLength(1);
    expect(sim.engine.snapshot(TOKEN, 'Order').filter((o) => o.isEntryOrder)).toHaveLength(1);

    const broken = counting(true);
    broken.strategy.restoreState = () => {
      throw new Error('state from an older version');
    };
    const run3 = await startRun(sim, clock, broken, jfile, undefined);
    const result = await run3.done;
    await run3.close();
    expect(result.error).toMatchObject({ hook: 'restoreState', message: 'state from an older version' });
    expect(run3.log).toContain('error strategy error in restoreState: state from an older version; the run cannot go on from its checkpoint');
    expect(sim.engine.snapshot(TOKEN, 'OpenPosition')).toEqual([]);
    expect(sim.engine.snapshot(TOKEN, 'Order').filter((o) => o.isEntryOrder)).toEqual([]);
    expect(broken.kept.ticks).toBe(0);
  }, 60_000);

  test('a strategy without saveState/restoreState: said once at the start, never compacted, resumed by replaying the whole journal', async () => {
    const jdir = freshDir('no-hooks');
    const jfile = path.join(jdir, 'journal.jsonl');
    const c = counting(false);
    const run = await startRun(sim, clock, c, jfile, 4 * 1024);
    await untilStarted(c);
    // not at a decision tick: a claim still queued behind the last hook is the window of kill -9
    // this test is not about
    await drive(clock, c, 210);
    const kept = clone(c.kept);
    await kill(run);
    const warnings = run.log.filter((l) => l.includes('has no saveState and restoreState hooks'));
    expect(warnings).toEqual([
      'warn counting-without-hooks has no saveState and restoreState hooks: its journal is never cut to a checkpoint (it grows with every tick, some 14 MB an hour) and a resume replays all of it (docs/strategy-guide.md)',
    ]);
    expect(fs.statSync(jfile).size).toBeGreaterThan(10 * 4 * 1024);
    expect(lastCheckpoint(readJournal(jfile))).toBe(-1);
    expect(fs.readdirSync(jdir)).toEqual(['journal.jsonl']);

    const sent = () => orderCalls(sim).reduce((n, [, count]) => n + count, 0);
    expect(sent()).toBe(10); // every 20 ticks to 200
    const again = counting(false);
    const resumed = await startRun(sim, clock, again, jfile, 4 * 1024);
    await untilResumed(again, 'the resume');
    expect(again.keptAtResume()).toEqual(kept);
    expect(sent()).toBe(10);
    await drive(clock, again, 50);
    expect((await endRun(resumed)).error).toBeUndefined();
    expect(lastCheckpoint(readJournal(jfile))).toBe(-1);
    expect(sent()).toBe(13); // ticks 220, 240, 260
    const replayed = await replayJournal(counting(false).strategy, jfile);
    expect(JSON.stringify(replayed.replayed)).toBe(JSON.stringify(replayed.recorded));
    expect(replayed.replayed.length).toBe(13);
  }, 60_000);

  test('a saveState whose value JSON cannot give back is named, and the run goes on without checkpoints', async () => {
    const jdir = freshDir('bad-state');
    const jfile = path.join(jdir, 'journal.jsonl');
    const c = counting(true);
    c.strategy.saveState = () => ({ ticks: c.kept.ticks, seen: new Map([[1, 2]]) });
    const run = await startRun(sim, clock, c, jfile, 4 * 1024);
    await untilStarted(c);
    await drive(clock, c, 150);
    const result = await endRun(run);
    expect(result.error).toBeUndefined();
    expect(run.log.filter((l) => l.startsWith('error'))).toEqual([
      'error saveState returned what JSON cannot give back: state.seen is a Map; the journal is not cut to checkpoints for the rest of this run (a resume replays it from its last one)',
    ]);
    expect(lastCheckpoint(readJournal(jfile))).toBe(-1);
  }, 60_000);

  test('a compaction that fails (a full disk) is said once; the run goes on with its whole journal, which resumes', async () => {
    const jdir = freshDir('full-disk');
    const jfile = path.join(jdir, 'journal.jsonl');
    const c = counting(true);
    const rename = fs.renameSync;
    let refused = 0;
    jest.spyOn(fs, 'renameSync').mockImplementation((from, to) => {
      if (to !== jfile) return rename(from, to);
      refused++;
      throw Object.assign(new Error('ENOSPC: no space left on device, rename'), { code: 'ENOSPC' });
    });
    const run = await startRun(sim, clock, c, jfile, 4 * 1024);
    await untilStarted(c);
    await drive(clock, c, 150);
    const result = await endRun(run);
    jest.restoreAllMocks();
    expect(result.error).toBeUndefined();
    expect(refused).toBe(1);
    expect(run.log.filter((l) => l.startsWith('error'))).toEqual([
      'error the journal could not be cut to a checkpoint: ENOSPC: no space left on device, rename; it keeps growing for the rest of this run (a resume replays it whole)',
    ]);
    // nothing half done is left: the journal is whole from its start, with every tick's lines
    expect(fs.readdirSync(jdir)).toEqual(['journal.jsonl', 'journal.prev.jsonl']);
    const lines = readJournal(jfile);
    expect(lastCheckpoint(lines)).toBe(-1);
    expect(bytes(lines)).toBeGreaterThan(4 * 4 * 1024);
    const replayed = await replayJournal(counting(true).strategy, jfile);
    expect(JSON.stringify(replayed.replayed)).toBe(JSON.stringify(replayed.recorded));
    expect(replayed.replayed.length).toBe(result.decisions);
  }, 60_000);

  test('killed between an order call\'s answer and its claim: the resumed run claims the order, says so, and sends nothing again', async () => {
    const jdir = freshDir('unclaimed');
    const jfile = path.join(jdir, 'journal.jsonl');
    // the process dies right after the journal took the answer of the entry order of tick 20
    const append = Journal.prototype.append;
    let dead = false;
    jest.spyOn(Journal.prototype, 'append').mockImplementation(function (this: Journal, line, sync) {
      if (dead) return;
      append.call(this, line, sync);
      if (line.k === 'answer' && (line.value as { orderId?: string } | undefined)?.orderId !== undefined) dead = true;
    });
    const first = counting(false);
    const run1 = await startRun(sim, clock, first, jfile, undefined);
    await untilStarted(first);
    await drive(clock, first, 20);
    await kill(run1);
    jest.restoreAllMocks();
    const lines = readJournal(jfile);
    expect(lines.at(-1)).toMatchObject({ k: 'answer', ok: true });
    expect(lines.filter((l) => l.k === 'own')).toEqual([]);
    const orderId = String((lines.at(-1)!.value as { orderId: string }).orderId);
    expect(sim.engine.snapshot(TOKEN, 'Order').filter((o) => o.isEntryOrder).map((o) => String(o.orderId))).toEqual([orderId]);
    const calls = orderCalls(sim);

    const second = counting(false);
    const run2 = await startRun(sim, clock, second, jfile, undefined);
    await untilResumed(second, 'the resume');
    await drive(clock, second, 1);
    expect(run2.log).toContain(`warn order ${orderId} had been answered but not yet claimed by this run before the restart: claimed now`);
    expect((second.view() as { orders: Array<{ orderId: string }> }).orders.map((o) => o.orderId)).toEqual([orderId]);
    expect(orderCalls(sim)).toEqual(calls);
    // the claim is journaled now: a second resume has nothing left to claim
    const result = await endRun(run2);
    expect(result.error).toBeUndefined();
    expect(readJournal(jfile).filter((l) => l.k === 'own').map((l) => l.orderId)).toEqual([orderId]);
  }, 60_000);

  test('a journal that starts at a checkpoint needs a strategy with restoreState', async () => {
    const jdir = freshDir('needs-hooks');
    const jfile = path.join(jdir, 'journal.jsonl');
    const c = counting(true);
    const run = await startRun(sim, clock, c, jfile, 4 * 1024);
    await untilStarted(c);
    await drive(clock, c, 60);
    await endRun(run);
    expect(lastCheckpoint(readJournal(jfile))).toBe(1);
    await expect(replayJournal(counting(false).strategy, jfile)).rejects.toThrow(
      'the journal starts at a checkpoint, which only a strategy with saveState and restoreState can go on from: counting-without-hooks does not have them',
    );
  }, 60_000);
});

describe('the state hooks', () => {
  test('a strategy has both, or neither', () => {
    const base = { symbols: [SYM] };
    expect(() => validateStrategy({ ...base, saveState: () => 1 }, 's.js')).toThrow('s.js: the strategy has saveState but no restoreState: define both, or neither');
    expect(() => validateStrategy({ ...base, restoreState: () => undefined }, 's.js')).toThrow('s.js: the strategy has restoreState but no saveState: define both, or neither');
    expect(() => validateStrategy({ ...base, saveState: 1, restoreState: () => undefined }, 's.js')).toThrow('s.js: saveState must be a function');
    expect(() => validateStrategy({ ...base, saveState: () => 1, restoreState: () => undefined }, 's.js')).not.toThrow();
  });

  test('what JSON does not give back as it was is named by where it is', () => {
    expect(jsonProblem({ a: [1, 'x', null, true, { b: 2.5 }], skipped: undefined })).toBeUndefined();
    expect(jsonProblem(undefined)).toBe('state is undefined');
    expect(jsonProblem({ w: { m: new Map() } })).toBe('state.w.m is a Map');
    expect(jsonProblem({ s: new Set([1]) })).toBe('state.s is a Set');
    expect(jsonProblem([1, new Date(0)])).toBe('state[1] is a Date');
    expect(jsonProblem({ n: NaN })).toBe('state.n is NaN');
    expect(jsonProblem({ n: [1, Infinity] })).toBe('state.n[1] is Infinity');
    expect(jsonProblem({ xs: [1, undefined] })).toBe('state.xs[1] is undefined');
    expect(jsonProblem({ f: () => 1 })).toBe('state.f is a function');
    expect(jsonProblem({ big: 1n })).toBe('state.big is a bigint');
    class Window {}
    expect(jsonProblem({ w: new Window() })).toBe('state.w is a Window');
    const loop: Record<string, unknown> = {};
    loop.self = loop;
    expect(jsonProblem(loop)).toBe('state.self refers back to itself');
    const shared = { x: 1 };
    expect(jsonProblem({ a: shared, b: shared })).toBeUndefined();
    expect(jsonProblem(Object.create(null))).toBeUndefined();
  });
});
