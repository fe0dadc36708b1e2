/**
 * The headroom of one loaded limit in its current window, from the counts the store returns (no
 * round trip of its own): `used`, the largest count any key reached; `keys`, the keys counted;
 * `keysOverLimit`, the keys that went over the limit. The window is the limit's unit aligned as
 * the fixed window's (for a sliding window or a token bucket too); its figures end when it does.
 *
 * For upstream's fixed window both key counts are exact and need no memory: a key is new in the
 * window when its count before the hits was 0, and goes over once, when its count passes the
 * limit. Each replica counts the keys it saw first or saw go over, so with a shared store the sums
 * over replicas are the totals. A sliding window's or a token bucket's count is not monotonic in
 * the window, so for them both are HyperLogLog estimates (about ±3 %) of the keys this process saw.
 *
 * The same object feeds the limit's hot keys (hot-keys.ts), sampled one call in `sampleOneIn`.
 */
import type { Entry } from '../../core/rls';
import { hitsPast, type Algorithm, type RuleWatch } from '../../core/rule';
import { HotKeys } from './hot-keys';

/** What a window needs of the process-wide limits settings (the book). */
export interface WindowHost {
  /** HEADROOM_ENABLED. */
  readonly headroom: boolean;
  /** HOT_KEYS_TOP_K (0: no hot keys). */
  readonly topK: number;
  /** HOT_KEYS_SAMPLE_ONE_IN. */
  readonly sampleOneIn: number;
  /** A place for one more limit's hot keys (HOT_KEYS_MAX_RULES), or undefined at the cap. */
  claimHotKeys(): HotKeys | undefined;
}

/** The figures of a window, read by the gauges and the debug pages. */
export interface WindowFigures {
  readonly used: number;
  readonly keys: number;
  readonly keysOverLimit: number;
}

const HLL_BITS = 10;
const HLL_REGISTERS = 1 << HLL_BITS;
const { clz32, imul } = Math;

/** A HyperLogLog of 1,024 registers (1 KiB), over 32-bit hashes. */
export class DistinctEstimate {
  private readonly registers = new Uint8Array(HLL_REGISTERS);
  private empty = HLL_REGISTERS;

  add(text: string): void {
    const h = hash32(text);
    const i = h >>> (32 - HLL_BITS);
    const rank = clz32((h << HLL_BITS) | (1 << (HLL_BITS - 1))) + 1;
    const r = this.registers;
    if (rank > r[i]!) {
      if (r[i] === 0) this.empty--;
      r[i] = rank;
    }
  }

  estimate(): number {
    if (this.empty === HLL_REGISTERS) return 0;
    let sum = 0;
    for (let i = 0; i < HLL_REGISTERS; i++) sum += 2 ** -this.registers[i]!;
    const m = HLL_REGISTERS;
    const raw = ((0.7213 / (1 + 1.079 / m)) * m * m) / sum;
    // Linear counting while registers are empty: near exact for small numbers.
    if (raw <= 2.5 * m && this.empty > 0) return Math.round(m * Math.log(m / this.empty));
    return Math.round(raw);
  }

  clear(): void {
    this.registers.fill(0);
    this.empty = HLL_REGISTERS;
  }

  /** The registers as text, to travel to another process (worker mode's merged pages). */
  toText(): string {
    return Buffer.from(this.registers.buffer, this.registers.byteOffset, this.registers.byteLength).toString('base64');
  }

  /** Adds the keys of an estimate made elsewhere (its {@link toText}): the union's estimate, not a sum. */
  addAll(text: string): void {
    const other = Buffer.from(text, 'base64');
    if (other.length !== HLL_REGISTERS) throw new Error(`a distinct-keys estimate has ${HLL_REGISTERS} registers, not ${other.length}`);
    const r = this.registers;
    for (let i = 0; i < HLL_REGISTERS; i++) {
      if (other[i]! <= r[i]!) continue;
      if (r[i] === 0) this.empty--;
      r[i] = other[i]!;
    }
  }
}

/** FNV-1a over the UTF-16 code units, then murmur3's finaliser (so every bit depends on every char). */
function hash32(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = imul(h ^ s.charCodeAt(i), 0x01000193);
  h ^= h >>> 16;
  h = imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = imul(h, 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/** The denials of a limit over the last 15 minutes, in 30 periods of 30 seconds (the console's sparkline). */
export const DENIAL_PERIOD_S = 30;
export const DENIAL_PERIODS = 30;

/**
 * Over-limit hits per period, kept from a limit's first denial: 30 counts and their periods' starts
 * (360 bytes a limit that ever denied). A period's count is reset when its slot is taken again.
 */
class DenialRing {
  readonly counts = new Uint32Array(DENIAL_PERIODS);
  readonly starts = new Float64Array(DENIAL_PERIODS).fill(-1);

  add(hits: number, nowS: number): void {
    const start = nowS - (nowS % DENIAL_PERIOD_S);
    const i = (start / DENIAL_PERIOD_S) % DENIAL_PERIODS;
    if (this.starts[i] !== start) {
      this.starts[i] = start;
      this.counts[i] = 0;
    }
    this.counts[i] += hits;
  }

  /** Oldest first: the over-limit hits of each of the last 30 periods up to the one holding `nowS`. */
  series(nowS: number): number[] {
    const last = nowS - (nowS % DENIAL_PERIOD_S);
    const out = new Array<number>(DENIAL_PERIODS).fill(0);
    for (let k = 0; k < DENIAL_PERIODS; k++) {
      const start = last - (DENIAL_PERIODS - 1 - k) * DENIAL_PERIOD_S;
      const i = (start / DENIAL_PERIOD_S) % DENIAL_PERIODS;
      if (this.starts[i] === start) out[k] = this.counts[i]!;
    }
    return out;
  }
}

/** One loaded limit's window and hot keys (core's RuleWatch). */
export class RuleWindow implements RuleWatch {
  /** The window length in seconds (the unit's divider). */
  readonly windowSeconds: number;
  /** What counts are compared with: requests_per_unit, or a token bucket's burst. */
  readonly capacity: number;
  private readonly exactKeys: boolean;
  private readonly bucket: boolean;
  private windowStart = -1;
  private used = 0;
  private keys = 0;
  private keysOver = 0;
  private distinct: DistinctEstimate | undefined;
  private distinctOver: DistinctEstimate | undefined;
  /** Some key was counted since the limit loaded (its gauges are made then). */
  seen = false;
  private hot: HotKeys | undefined;
  private denials: DenialRing | undefined;
  /** No place for hot keys at HOT_KEYS_MAX_RULES: not asked again. */
  private hotRefused = false;
  private skip = 1;

  constructor(
    private readonly host: WindowHost,
    /** The stats key (`ratelimit.service.rate_limit.<key>.*`). */
    readonly key: string,
    readonly domain: string,
    /** The limit's `name`, '' when it has none. */
    readonly name: string,
    readonly requestsPerUnit: number,
    /** An RLS unit number. */
    readonly unit: number,
    windowSeconds: number,
    readonly algorithm: Algorithm | undefined,
    burst: number | undefined,
  ) {
    this.windowSeconds = windowSeconds > 0 ? windowSeconds : 1;
    this.capacity = algorithm === 'token_bucket' ? burst ?? requestsPerUnit : requestsPerUnit;
    this.bucket = algorithm === 'token_bucket';
    this.exactKeys = algorithm === undefined || algorithm === 'fixed_window';
  }

  counted(stem: string, entries: readonly Entry[], hits: number, after: number, nowS: number): void {
    const host = this.host;
    const cap = this.capacity;
    if (host.headroom) {
      this.turn(nowS);
      this.seen = true;
      // A denied token-bucket request takes no token: what is in use is the count before it.
      const inUse = this.bucket && after > cap ? after - hits : after;
      if (inUse > this.used) this.used = inUse;
      const before = after - hits;
      if (this.exactKeys) {
        if (before <= 0 && after > 0) this.keys++;
        if (before <= cap && after > cap) this.keysOver++;
      } else {
        (this.distinct ??= new DistinctEstimate()).add(stem);
        if (after > cap) (this.distinctOver ??= new DistinctEstimate()).add(stem);
      }
      // As over_limit counts: the hits past the limit.
      if (after > cap) (this.denials ??= new DenialRing()).add(hitsPast(cap, hits, after), nowS);
    }
    if (host.topK > 0 && --this.skip <= 0) {
      const over = hitsPast(cap, hits, after);
      // Admitted into a full list only on a repeat: the store had counted the key in this window.
      this.sample(stem, entries, hits, over, after > cap ? 0 : cap - after, nowS, after > hits);
    }
  }

  overInCache(stem: string, entries: readonly Entry[], hits: number, nowS: number): void {
    const host = this.host;
    if (host.headroom) {
      this.turn(nowS);
      this.seen = true;
      (this.denials ??= new DenialRing()).add(hits, nowS);
    }
    if (host.topK > 0 && --this.skip <= 0) this.sample(stem, entries, hits, hits, 0, nowS, true);
  }

  private sample(stem: string, entries: readonly Entry[], hits: number, over: number, remaining: number, nowS: number, admit: boolean): void {
    const n = this.host.sampleOneIn;
    // A geometric gap of mean n: every call is as likely to be taken, whatever the traffic's rhythm.
    this.skip = n <= 1 ? 1 : 1 + Math.floor(Math.log(1 - Math.random()) / Math.log(1 - 1 / n));
    let hot = this.hot;
    if (hot === undefined) {
      if (this.hotRefused) return;
      hot = this.hot = this.host.claimHotKeys();
      if (hot === undefined) {
        this.hotRefused = true;
        return;
      }
    }
    hot.offer(stem, entries, hits * n, over * n, remaining, nowS, admit);
  }

  /** Starts a new window when `nowS` is past the current one. */
  private turn(nowS: number): void {
    const ws = nowS - (nowS % this.windowSeconds);
    if (ws === this.windowStart) return;
    this.windowStart = ws;
    this.used = 0;
    this.keys = 0;
    this.keysOver = 0;
    this.distinct?.clear();
    this.distinctOver?.clear();
  }

  /**
   * Takes over what the same limit's window saw in the config before a reload: the hot keys, the
   * gauges' publication, and the current window when its length and algorithm are unchanged (the
   * keys over the limit only when the limit is too).
   */
  inherit(old: RuleWindow): void {
    this.hot ??= old.hot;
    this.denials ??= old.denials;
    this.seen ||= old.seen;
    if (old.windowSeconds !== this.windowSeconds || old.algorithm !== this.algorithm) return;
    this.windowStart = old.windowStart;
    this.used = old.used;
    this.keys = old.keys;
    this.distinct = old.distinct;
    if (old.capacity === this.capacity) {
      this.keysOver = old.keysOver;
      this.distinctOver = old.distinctOver;
    }
  }

  /** The current window's figures at `nowS` (zeros once the window has ended). */
  figures(nowS: number): WindowFigures {
    if (nowS - (nowS % this.windowSeconds) !== this.windowStart) return { used: 0, keys: 0, keysOverLimit: 0 };
    if (this.exactKeys) return { used: this.used, keys: this.keys, keysOverLimit: this.keysOver };
    return { used: this.used, keys: this.distinct?.estimate() ?? 0, keysOverLimit: this.distinctOver?.estimate() ?? 0 };
  }

  /** Over-limit hits in each of the last 30 periods of 30 s, oldest first (all 0 before a first denial). */
  denialSeries(nowS: number): number[] {
    return this.denials?.series(nowS) ?? new Array<number>(DENIAL_PERIODS).fill(0);
  }

  /** The hot keys, if any were taken. */
  hotKeys(): HotKeys | undefined {
    return this.hot;
  }
}
