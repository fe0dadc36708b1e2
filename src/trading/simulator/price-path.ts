/**
 * The simulated price of one symbol: a pure function of (seed, symbol, time), so the live stream
 * and the candle history are the same path (every historical candle is what the stream showed).
 *
 * The log mid is a random walk fixed at PATH_ANCHOR_MS (the spec's `price` there), extended
 * forwards and backwards, and built top-down so any instant is cheap: day-start levels are sums of
 * daily increments (cached), hour-start levels within a day and 5-second grid points within an hour
 * are Brownian bridges between them. Every draw is hashed from its indices (random.ts), so nothing
 * depends on the order of requests. Between grid points mid and spread are linear in time: a
 * candle's high and low are the extremes of its grid points, and a quote at any instant lies
 * within them.
 *
 * Variance per hour = base × session profile × a persistent random factor (volatility clustering)
 * × a boost after news-like jumps, and zero while the market is closed; each bridge uses the
 * variance integrated over its interval, so the levels agree. Jumps are part of the path and
 * happen in an instant, so the price gaps: news-like jumps of 5 to 40 pips on a quarter hour (as
 * releases come out, so candles of m1 to m15 open beyond the previous close), and a session gap
 * when the market opens after a closure (the Sunday open differs from the Friday close, normal with
 * a standard deviation of 0.3 × the daily volatility: some 16 pips on EUR/USD). A quote just before
 * a jump and a candle's close are the price before it; the price at the jump's instant is after it.
 * The spread widens around the daily rollover, after a jump or an open, and mildly with volatility.
 */
import type { Candle } from '../fxcm/types';
import type { SymbolSpec } from './market';
import { DAY_MS, GRID_MS, HOUR_MS, MINUTE_MS, STEPS_PER_HOUR, type MarketCalendar, type OpenSteps } from './calendar';
import { Lru } from './lru';
import { fillNormals, normalAt, streamKey, uniformAt } from './random';

/** Math's functions bound once: inside a vm context (Jest) every global lookup in a hot loop is slow. */
const { exp, sqrt, abs, floor, ceil, max, min, round } = Math;

/** The instant where every symbol's mid equals its spec `price`: 2026-01-01T00:00Z. */
export const PATH_ANCHOR_MS = Date.UTC(2026, 0, 1);
/** Standard deviation of the log mid over a 24-hour trading day of average activity (0.5 %). */
export const DEFAULT_DAILY_VOLATILITY = 0.005;

/** Relative activity per UTC hour: Asia quiet, London busy, the London/New York overlap busiest. */
const SESSION_PROFILE = meanOne([
  0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.7, 1.2, 1.3, 1.3, 1.2, 1.2, 1.8, 1.9, 1.9, 1.7, 1.1, 1.0, 0.9, 0.8, 0.7, 0.5, 0.5, 0.6,
]);

/**
 * Volatility clustering: the log of the volatility factor is smooth value noise over these time
 * scales (hours), with these weights; calm and busy spells last hours to days.
 */
const CLUSTER_SCALES_HOURS = [6, 24, 120];
const CLUSTER_WEIGHTS = [0.3, 0.35, 0.35];
/** E[factor²] of that noise, divided out so `volatility` keeps its meaning on average. */
const CLUSTER_MEAN_VARIANCE = clusterMeanVariance();

/** News-like jumps: chance per open hour, size range in pips. */
const JUMP_PROBABILITY_PER_HOUR = 0.015;
const JUMP_MIN_PIPS = 5;
const JUMP_MAX_PIPS = 40;
/** News-like jumps land on a quarter hour: grid points 180, 360 or 540 of the hour. */
const QUARTER_HOUR_STEPS = STEPS_PER_HOUR / 4;
/** The session gap at a market open: its standard deviation in log price, as a share of the daily volatility. */
const SESSION_GAP_DAILY_SHARE = 0.3;
/** After a jump the variance is ×(1 + boost) for the rest of its hour, the boost halving each hour after (3 hours). */
const JUMP_VOLATILITY_BOOST = 3;
const JUMP_AFTERMATH_HOURS = 3;
/** After a jump the spread is ×4, fading to normal over 10 minutes. */
const JUMP_SPREAD_FACTOR = 4;
const JUMP_SPREAD_MS = 10 * MINUTE_MS;
/** Around 17:00 New York the spread is ×5 within 3 minutes either side, fading to normal over 5 more. */
const ROLLOVER_SPREAD_FACTOR = 5;
const ROLLOVER_FULL_MS = 3 * MINUTE_MS;
const ROLLOVER_FADE_MS = 5 * MINUTE_MS;
/** Ticks per open grid step at average activity (a candle's tick count). */
const TICKS_PER_STEP = 2;

/** Hash levels: each kind of draw has its own index space. */
const LEVEL_DAY = 1;
const LEVEL_HOUR = 2;
const LEVEL_STEP = 3;
const LEVEL_JUMP = 4;
const LEVEL_CLUSTER = 5;
const LEVEL_GAP = 6;

/** How many items each cache keeps (per symbol). */
const DAY_CACHE = 64;
const GRID_CACHE = 256;
const SUMMARY_CACHE = 50_000;

function meanOne(xs: number[]): number[] {
  const mean = xs.reduce((a, b) => a + b, 0) / xs.length;
  return xs.map((x) => x / mean);
}

/** Value noise between knots k and k+1 is (1-s)·z_k + s·z_{k+1} with s = smoothstep: variance (1-s)² + s². */
function clusterMeanVariance(): number {
  let product = 1;
  for (const w of CLUSTER_WEIGHTS) {
    let sum = 0;
    const n = 1000;
    for (let i = 0; i < n; i++) {
      const f = (i + 0.5) / n;
      const s = f * f * (3 - 2 * f);
      sum += exp(2 * w * w * ((1 - s) ** 2 + s ** 2));
    }
    product *= sum / n;
  }
  return product;
}

interface Jump {
  /** The grid step before the jump: the price jumps at grid point step + 1 (−1: at the hour's start). */
  step: number;
  /** In log price. */
  size: number;
  atMs: number;
}

interface HourModel {
  startMs: number;
  open: OpenSteps;
  /** Variance of one open grid step (before a jump in this hour boosts it). */
  stepVariance: number;
  jump: Jump | undefined;
  previousJump: Jump | undefined;
  /** Was the last grid step of the previous hour open (so this hour's first point is a traded quote)? */
  tradedBefore: boolean;
  /** Variance integrated over the hour. */
  variance: number;
  ticksPerStep: number;
  /** The spread's mild dependence on volatility. */
  spreadScale: number;
}

interface DayBridge {
  /** Diffusion part of the log mid at each hour start (25 values, the last is the next day's start). */
  diffusion: Float64Array;
  /** Sum of the jumps at each hour start. */
  jumps: Float64Array;
}

interface HourExtremes {
  bidHigh: number;
  bidLow: number;
  askHigh: number;
  askLow: number;
}

interface HourGrid extends HourExtremes {
  /** Log of mid / spec price at the hour's grid points 0…719. */
  levels: Float64Array;
  /** Half the spread at each grid point, or one value for the whole hour. */
  halfSpread: Float64Array | number;
  /** Bid and ask at grid point 720, the next hour's start, and just before it (a gap may open the next hour). */
  end: [number, number];
  endBefore: [number, number];
}

/** Unrounded bid/ask OHLC of a span (a candle's prices) and its tick count. */
export type PathCandle = Omit<Candle, 'ts' | 'tickQty'> & { ticks: number };

export class PricePath {
  private readonly key: number;
  /** Variance of one grid step at average activity. */
  private readonly baseStepVariance: number;
  /** Standard deviation of a session gap, in log price. */
  private readonly gapSd: number;
  /** Day-start levels (diffusion, jumps): index d for day d ≥ 0 after the anchor, and -d before it. */
  private readonly ahead = { diffusion: [0], jumps: [0] };
  private readonly behind = { diffusion: [0], jumps: [0] };
  private readonly dayHours = new Lru<number, HourModel[]>(DAY_CACHE);
  private readonly bridges = new Lru<number, DayBridge>(DAY_CACHE);
  private readonly grids = new Lru<number, HourGrid>(GRID_CACHE);
  private readonly extremes = new Lru<number, HourExtremes>(SUMMARY_CACHE);
  /** Working arrays of one hour's grid (reused: a grid is built in one go). */
  private readonly scratch = { weights: new Float64Array(STEPS_PER_HOUR), normals: new Float64Array(STEPS_PER_HOUR), levels: new Float64Array(STEPS_PER_HOUR + 1) };

  constructor(seed: number, private readonly spec: SymbolSpec, dailyVolatility: number, private readonly calendar: MarketCalendar) {
    this.key = streamKey(seed, spec.symbol);
    this.baseStepVariance = (dailyVolatility * dailyVolatility) / 24 / STEPS_PER_HOUR;
    this.gapSd = SESSION_GAP_DAILY_SHARE * dailyVolatility;
  }

  /** Unrounded bid and ask at `ms`. */
  quoteAt(ms: number): [number, number] {
    const hourStart = floorTo(ms, HOUR_MS);
    const offset = ms - hourStart;
    if (offset === 0) return this.atHourStart(hourStart);
    const g = this.grid(hourStart);
    const i = floor(offset / GRID_MS);
    const f = (offset - i * GRID_MS) / GRID_MS;
    const [bid0, ask0] = this.point(g, i);
    const [bid1, ask1] = this.pointBefore(hourStart, g, i + 1);
    return [bid0 + (bid1 - bid0) * f, ask0 + (ask1 - ask0) * f];
  }

  /** Unrounded bid and ask just before `ms`: the price before a jump at `ms`, else the quote at `ms`. */
  quoteBefore(ms: number): [number, number] {
    const hourStart = floorTo(ms, HOUR_MS);
    const offset = ms - hourStart;
    if (offset % GRID_MS !== 0) return this.quoteAt(ms);
    if (offset === 0) return this.beforeHourStart(hourStart, this.atHourStart(hourStart));
    return this.pointBefore(hourStart, this.grid(hourStart), offset / GRID_MS);
  }

  /**
   * The span [fromMs, toMs): open at `fromMs`, close just before `toMs` (a jump at `toMs` opens the
   * next candle), extremes over the grid points between.
   */
  candle(fromMs: number, toMs: number): PathCandle {
    const [bidOpen, askOpen] = this.quoteAt(fromMs);
    const [bidClose, askClose] = toMs > fromMs ? this.quoteBefore(toMs) : [bidOpen, askOpen];
    const c: PathCandle = {
      bidOpen,
      bidClose,
      bidHigh: max(bidOpen, bidClose),
      bidLow: min(bidOpen, bidClose),
      askOpen,
      askClose,
      askHigh: max(askOpen, askClose),
      askLow: min(askOpen, askClose),
      ticks: 0,
    };
    for (let hourStart = floorTo(fromMs, HOUR_MS); hourStart < toMs; hourStart += HOUR_MS) {
      const first = max(0, ceil((fromMs - hourStart) / GRID_MS));
      const last = min(STEPS_PER_HOUR, floor((toMs - hourStart) / GRID_MS));
      if (first === 0 && last === STEPS_PER_HOUR) {
        widen(c, this.hourExtremes(hourStart));
      } else {
        const g = this.grid(hourStart);
        for (let i = first; i <= last; i++) {
          const [bid, ask] = hourStart + i * GRID_MS === toMs && toMs > fromMs ? this.pointBefore(hourStart, g, i) : this.point(g, i);
          widenBy(c, bid, ask);
        }
      }
      // ticks of the grid steps that start inside the span
      const m = this.hourModel(hourStart);
      const stepEnd = min(STEPS_PER_HOUR, ceil((toMs - hourStart) / GRID_MS));
      c.ticks += m.ticksPerStep * max(0, min(stepEnd, m.open.to) - max(first, m.open.from));
    }
    return c;
  }

  // ------------------------------------------------------------------ hours

  private hourModel(hourStart: number): HourModel {
    const day = floorTo(hourStart, DAY_MS);
    return this.hoursOfDay(day)[(hourStart - day) / HOUR_MS]!;
  }

  private hoursOfDay(dayStart: number): HourModel[] {
    return this.dayHours.getOr(dayStart, () => {
      const jumps: (Jump | undefined)[] = [];
      for (let h = -JUMP_AFTERMATH_HOURS; h < 24; h++) jumps.push(this.jumpIn(dayStart + h * HOUR_MS));
      const models: HourModel[] = [];
      let before = this.calendar.openSteps(dayStart - HOUR_MS);
      for (let h = 0; h < 24; h++) {
        const startMs = dayStart + h * HOUR_MS;
        let aftermath = 1;
        for (let lag = 1; lag <= JUMP_AFTERMATH_HOURS; lag++) if (jumps[JUMP_AFTERMATH_HOURS + h - lag]) aftermath += JUMP_VOLATILITY_BOOST / 2 ** lag;
        const activity = SESSION_PROFILE[h]! * this.clusterFactor(startMs) * aftermath;
        const open = this.calendar.openSteps(startMs);
        const opens = open.from < open.to && (open.from > 0 || !(before.from < before.to && before.to === STEPS_PER_HOUR));
        // an hour the market opens in has the session gap as its jump
        const jump = opens ? this.sessionGap(startMs, open.from) : jumps[JUMP_AFTERMATH_HOURS + h];
        const stepVariance = this.baseStepVariance * activity;
        const boosted = jump ? max(0, open.to - max(open.from, jump.step + 1)) : 0;
        models.push({
          startMs,
          open,
          stepVariance,
          jump,
          previousJump: jumps[JUMP_AFTERMATH_HOURS + h - 1],
          tradedBefore: before.from < before.to && before.to === STEPS_PER_HOUR,
          variance: stepVariance * (open.to - open.from + JUMP_VOLATILITY_BOOST * boosted),
          ticksPerStep: max(1, round(TICKS_PER_STEP * sqrt(activity))),
          spreadScale: min(2, max(0.75, activity ** 0.25)),
        });
        before = open;
      }
      return models;
    });
  }

  /** Variance multiplier of an hour: exp(2 × value noise over several scales), mean 1. */
  private clusterFactor(hourStart: number): number {
    const hour = (hourStart - PATH_ANCHOR_MS) / HOUR_MS;
    let y = 0;
    for (let s = 0; s < CLUSTER_SCALES_HOURS.length; s++) {
      const x = hour / CLUSTER_SCALES_HOURS[s]!;
      const k = floor(x);
      const f = x - k;
      const t = f * f * (3 - 2 * f);
      const z0 = normalAt(this.key, LEVEL_CLUSTER, s, k);
      const z1 = normalAt(this.key, LEVEL_CLUSTER, s, k + 1);
      y += CLUSTER_WEIGHTS[s]! * (z0 + (z1 - z0) * t);
    }
    return exp(2 * y) / CLUSTER_MEAN_VARIANCE;
  }

  /** The gap at a market open at grid point `at` of the hour. */
  private sessionGap(hourStart: number, at: number): Jump {
    const hour = (hourStart - PATH_ANCHOR_MS) / HOUR_MS;
    return { step: at - 1, size: this.gapSd * normalAt(this.key, LEVEL_GAP, hour, 0), atMs: hourStart + at * GRID_MS };
  }

  /** The hour's news-like jump, if its hashed chance fires on a quarter hour inside the open steps. */
  private jumpIn(hourStart: number): Jump | undefined {
    const hour = (hourStart - PATH_ANCHOR_MS) / HOUR_MS;
    if (uniformAt(this.key, LEVEL_JUMP, hour, 0) >= JUMP_PROBABILITY_PER_HOUR) return undefined;
    const at = QUARTER_HOUR_STEPS * (1 + floor(uniformAt(this.key, LEVEL_JUMP, hour, 1) * 3));
    const step = at - 1;
    const open = this.calendar.openSteps(hourStart);
    if (at <= open.from || at >= open.to) return undefined;
    const pips = JUMP_MIN_PIPS + (JUMP_MAX_PIPS - JUMP_MIN_PIPS) * uniformAt(this.key, LEVEL_JUMP, hour, 2) ** 2;
    const sign = uniformAt(this.key, LEVEL_JUMP, hour, 3) < 0.5 ? -1 : 1;
    return { step, size: (sign * pips * this.spec.pip) / this.spec.price, atMs: hourStart + (step + 1) * GRID_MS };
  }

  // ------------------------------------------------------------------ levels

  /** Diffusion and jump sums at the start of the UTC day `dayStart`. */
  private dayLevel(dayStart: number): [number, number] {
    const d = round((dayStart - PATH_ANCHOR_MS) / DAY_MS);
    if (d >= 0) {
      const a = this.ahead;
      while (a.diffusion.length <= d) {
        const n = a.diffusion.length - 1;
        const [dd, dj] = this.dayIncrement(PATH_ANCHOR_MS + n * DAY_MS);
        a.diffusion.push(a.diffusion[n]! + dd);
        a.jumps.push(a.jumps[n]! + dj);
      }
      return [a.diffusion[d]!, a.jumps[d]!];
    }
    const b = this.behind;
    while (b.diffusion.length <= -d) {
      const n = b.diffusion.length;
      const [dd, dj] = this.dayIncrement(PATH_ANCHOR_MS - n * DAY_MS);
      b.diffusion.push(b.diffusion[n - 1]! - dd);
      b.jumps.push(b.jumps[n - 1]! - dj);
    }
    return [b.diffusion[-d]!, b.jumps[-d]!];
  }

  /** The day's diffusion increment (normal, with the day's integrated variance) and its jumps. */
  private dayIncrement(dayStart: number): [number, number] {
    let variance = 0;
    let jumps = 0;
    for (const m of this.hoursOfDay(dayStart)) {
      variance += m.variance;
      jumps += m.jump?.size ?? 0;
    }
    const d = round((dayStart - PATH_ANCHOR_MS) / DAY_MS);
    return [sqrt(variance) * normalAt(this.key, LEVEL_DAY, d, 0), jumps];
  }

  /** Hour-start levels of a day: a Brownian bridge between its start and the next day's start. */
  private bridge(dayStart: number): DayBridge {
    return this.bridges.getOr(dayStart, () => {
      const [b0, j0] = this.dayLevel(dayStart);
      const [b1] = this.dayLevel(dayStart + DAY_MS);
      const hours = this.hoursOfDay(dayStart);
      const d = round((dayStart - PATH_ANCHOR_MS) / DAY_MS);
      const weights = Float64Array.from(hours, (m) => m.variance);
      const normals = Float64Array.from(hours, (_, k) => normalAt(this.key, LEVEL_HOUR, d, k));
      const diffusion = bridgeLevels(b0, b1, weights, normals, new Float64Array(25));
      const jumps = new Float64Array(25);
      jumps[0] = j0;
      for (let h = 0; h < 24; h++) jumps[h + 1] = jumps[h]! + (hours[h]!.jump?.size ?? 0);
      return { diffusion, jumps };
    });
  }

  /** Bid and ask at a whole hour, without the hour's grid (a day start needs only the day levels). */
  private atHourStart(hourStart: number): [number, number] {
    const day = floorTo(hourStart, DAY_MS);
    const h = (hourStart - day) / HOUR_MS;
    let b: number;
    let j: number;
    if (h === 0) {
      [b, j] = this.dayLevel(day);
    } else {
      const br = this.bridge(day);
      b = br.diffusion[h]!;
      j = br.jumps[h]!;
    }
    const m = this.hourModel(hourStart);
    // a gap at the hour's start is in its first quote
    if (m.jump && m.jump.step === -1) j += m.jump.size;
    const mid = this.spec.price * exp(b + j);
    const half = tradedAt(0, m) ? this.halfSpread(m) * widening(hourStart, this.calendar.rolloverMs(hourStart), m) : this.closedHalfSpread();
    return [mid - half, mid + half];
  }

  // ------------------------------------------------------------------ grid

  private grid(hourStart: number): HourGrid {
    return this.grids.getOr(hourStart, () => {
      const m = this.hourModel(hourStart);
      const levels = this.hourLevels(hourStart, m, new Float64Array(STEPS_PER_HOUR + 1));
      const halfSpread = this.halfSpreads(hourStart, m);
      const end = this.atHourStart(hourStart + HOUR_MS);
      const endBefore = this.beforeHourStart(hourStart + HOUR_MS, end);
      const g: HourGrid = { levels, halfSpread, end, endBefore, ...this.extremesOf(levels, halfSpread, endBefore) };
      this.extremes.set(hourStart, { bidHigh: g.bidHigh, bidLow: g.bidLow, askHigh: g.askHigh, askLow: g.askLow });
      return g;
    });
  }

  /** Extremes of a whole hour: kept far longer than the grid, so long candles are cheap to ask again. */
  private hourExtremes(hourStart: number): HourExtremes {
    return this.extremes.getOr(hourStart, () => {
      const m = this.hourModel(hourStart);
      const next = hourStart + HOUR_MS;
      return this.extremesOf(this.hourLevels(hourStart, m, this.scratch.levels), this.halfSpreads(hourStart, m), this.beforeHourStart(next, this.atHourStart(next)));
    });
  }

  /** Log of mid / spec price at the hour's grid points (a bridge between its hour levels, plus the jumps). */
  private hourLevels(hourStart: number, m: HourModel, levels: Float64Array): Float64Array {
    const day = floorTo(hourStart, DAY_MS);
    const h = (hourStart - day) / HOUR_MS;
    const br = this.bridge(day);
    const { weights, normals } = this.scratch;
    const jumpFrom = m.jump ? m.jump.step + 1 : STEPS_PER_HOUR;
    weights.fill(0);
    for (let i = m.open.from; i < m.open.to; i++) weights[i] = i >= jumpFrom ? m.stepVariance * (1 + JUMP_VOLATILITY_BOOST) : m.stepVariance;
    if (m.variance > 0) fillNormals(this.key, LEVEL_STEP, (hourStart - PATH_ANCHOR_MS) / HOUR_MS, normals);
    bridgeLevels(br.diffusion[h]!, br.diffusion[h + 1]!, weights, normals, levels);
    const before = br.jumps[h]!;
    const after = before + (m.jump?.size ?? 0);
    for (let i = 0; i < STEPS_PER_HOUR; i++) levels[i] += i >= jumpFrom ? after : before;
    return levels;
  }

  /** Bid and ask extremes over an hour's grid points 0…719 and `end` (point 720). */
  private extremesOf(levels: Float64Array, halves: Float64Array | number, end: [number, number]): HourExtremes {
    const e: HourExtremes = { bidHigh: -Infinity, bidLow: Infinity, askHigh: -Infinity, askLow: Infinity };
    if (typeof halves === 'number') {
      // one spread all hour: the extremes are those of the level (exp is increasing)
      let lo = Infinity;
      let hi = -Infinity;
      for (let i = 0; i < STEPS_PER_HOUR; i++) {
        if (levels[i]! < lo) lo = levels[i]!;
        if (levels[i]! > hi) hi = levels[i]!;
      }
      const top = this.spec.price * exp(hi);
      const bottom = this.spec.price * exp(lo);
      widenBy(e, top - halves, top + halves);
      widenBy(e, bottom - halves, bottom + halves);
    } else {
      for (let i = 0; i < STEPS_PER_HOUR; i++) {
        const mid = this.spec.price * exp(levels[i]!);
        widenBy(e, mid - halves[i]!, mid + halves[i]!);
      }
    }
    widenBy(e, end[0], end[1]);
    return e;
  }

  /** Bid and ask just before a whole hour whose first quote is `at`: without a gap opening the hour, `at` itself. */
  private beforeHourStart(hourStart: number, at: [number, number]): [number, number] {
    const jump = this.hourModel(hourStart).jump;
    if (!jump || jump.step !== -1) return at;
    const mid = ((at[0] + at[1]) / 2) * exp(-jump.size);
    const half = this.closedHalfSpread();
    return [mid - half, mid + half];
  }

  /** Bid and ask just before grid point `i` (1…720) of an hour: before its jump when it lands there. */
  private pointBefore(hourStart: number, g: HourGrid, i: number): [number, number] {
    if (i === STEPS_PER_HOUR) return g.endBefore;
    const jump = this.hourModel(hourStart).jump;
    if (!jump || jump.step + 1 !== i || i === 0) return this.point(g, i);
    const mid = this.spec.price * exp(g.levels[i]! - jump.size);
    const half = typeof g.halfSpread === 'number' ? g.halfSpread : g.halfSpread[i - 1]!;
    return [mid - half, mid + half];
  }

  /** Unrounded bid and ask at grid point `i` (0…720) of an hour. */
  private point(g: HourGrid, i: number): [number, number] {
    if (i === STEPS_PER_HOUR) return g.end;
    const mid = this.spec.price * exp(g.levels[i]!);
    const half = typeof g.halfSpread === 'number' ? g.halfSpread : g.halfSpread[i]!;
    return [mid - half, mid + half];
  }

  // ------------------------------------------------------------------ spread

  /** Half the spread of an hour, before the rollover and jumps widen it. */
  private halfSpread(m: HourModel): number {
    return (this.spec.spreadPips * this.spec.pip * m.spreadScale) / 2;
  }

  /** While the market is closed the quote is frozen: its mid does not move and its spread is the spec's. */
  private closedHalfSpread(): number {
    return (this.spec.spreadPips * this.spec.pip) / 2;
  }

  /** Half the spread at each grid point of an hour, or one value when it is the same all hour. */
  private halfSpreads(hourStart: number, m: HourModel): Float64Array | number {
    const { from, to } = m.open;
    if (from === to && !m.tradedBefore) return this.closedHalfSpread();
    const half = this.halfSpread(m);
    const rollover = this.calendar.rolloverMs(hourStart);
    const nearRollover = abs(rollover - hourStart - HOUR_MS / 2) < HOUR_MS / 2 + ROLLOVER_FULL_MS + ROLLOVER_FADE_MS;
    if (from === 0 && to === STEPS_PER_HOUR && !nearRollover && !m.jump && !m.previousJump) return half;
    const out = new Float64Array(STEPS_PER_HOUR);
    for (let i = 0; i < STEPS_PER_HOUR; i++) out[i] = tradedAt(i, m) ? half * widening(hourStart + i * GRID_MS, rollover, m) : this.closedHalfSpread();
    return out;
  }
}

/** Does grid point `i` of an hour end or start an open step (the first and last traded quotes included)? */
function tradedAt(i: number, m: HourModel): boolean {
  const { from, to } = m.open;
  return (from < to && i >= from && i <= to) || (i === 0 && m.tradedBefore);
}

/** How much wider than usual the spread is at `ms`: around the rollover, and just after a jump. */
function widening(ms: number, rolloverMs: number, m: HourModel): number {
  let f = 1;
  const d = abs(ms - rolloverMs);
  if (d <= ROLLOVER_FULL_MS) f = ROLLOVER_SPREAD_FACTOR;
  else if (d < ROLLOVER_FULL_MS + ROLLOVER_FADE_MS) f = 1 + (ROLLOVER_SPREAD_FACTOR - 1) * (1 - (d - ROLLOVER_FULL_MS) / ROLLOVER_FADE_MS);
  if (m.jump) f = max(f, afterJump(ms, m.jump));
  if (m.previousJump) f = max(f, afterJump(ms, m.previousJump));
  return f;
}

function afterJump(ms: number, j: Jump): number {
  const since = ms - j.atMs;
  return since >= 0 && since < JUMP_SPREAD_MS ? 1 + (JUMP_SPREAD_FACTOR - 1) * (1 - since / JUMP_SPREAD_MS) : 1;
}

/**
 * Levels of a Brownian bridge from `from` to `to` over intervals of variance `weights[i]`: the
 * conditional law of a random walk with those increments, given both ends, drawn with the standard
 * normals `z`. Writes weights.length + 1 levels into `out`; the last interval with variance arrives
 * at `to` exactly (with no variance at all, `to` equals `from` and the levels stay flat).
 */
function bridgeLevels(from: number, to: number, weights: Float64Array, z: Float64Array, out: Float64Array): Float64Array {
  const n = weights.length;
  let remaining = 0;
  let last = -1;
  for (let i = 0; i < n; i++) {
    if (weights[i]! > 0) {
      remaining += weights[i]!;
      last = i;
    }
  }
  let x = from;
  out[0] = x;
  for (let i = 0; i < n; i++) {
    const w = weights[i]!;
    if (i === last) {
      x = to;
    } else if (w > 0) {
      x += ((to - x) * w) / remaining + sqrt((w * max(0, remaining - w)) / remaining) * z[i]!;
      remaining -= w;
    }
    out[i + 1] = x;
  }
  return out;
}

function floorTo(ms: number, unit: number): number {
  return floor(ms / unit) * unit;
}

function widen(c: HourExtremes, e: HourExtremes): void {
  if (e.bidHigh > c.bidHigh) c.bidHigh = e.bidHigh;
  if (e.bidLow < c.bidLow) c.bidLow = e.bidLow;
  if (e.askHigh > c.askHigh) c.askHigh = e.askHigh;
  if (e.askLow < c.askLow) c.askLow = e.askLow;
}

function widenBy(c: HourExtremes, bid: number, ask: number): void {
  if (bid > c.bidHigh) c.bidHigh = bid;
  if (bid < c.bidLow) c.bidLow = bid;
  if (ask > c.askHigh) c.askHigh = ask;
  if (ask < c.askLow) c.askLow = ask;
}
