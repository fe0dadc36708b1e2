/**
 * Dividing one limit among the Envoys that report a bucket (RLQS), and the token bucket a share
 * goes out as. What Envoy's rate_limit_quota filter does with a token bucket (read in its
 * global_client_impl.cc) shapes it: it refills continuously at tokens_per_fill / fill_interval
 * with fill_interval in whole seconds (a sub-second one divides by zero), replaces its bucket only
 * when max_tokens, tokens_per_fill or fill_interval's nanos differ, and a replacement starts with
 * the old bucket's ratio of remaining to max tokens, truncated to whole tokens.
 *
 * So a limit of L per U seconds is divided in whole tokens per a fill interval F = U × k (k a
 * power of ten, so that L × k is at least 1000 and ten per stream): the shares are integers that
 * add up to T = L × k exactly (483 tokens per 100 s, say), and no rate is lost to rounding.
 */

/** Each active Envoy gets at least this part of an equal split, so a quiet one is not starved. */
export const FLOOR_OF_EQUAL_SPLIT = 0.1;

/**
 * A share is not above the demand it serves times this (when the demands add up to more than the
 * limit): what one Envoy cannot use goes to the others instead of being wasted.
 */
export const DEMAND_HEADROOM = 1.1;

/** Tokens the limit is divided into at least, per fill interval: the precision of a share. */
const MIN_TOTAL_TOKENS = 1000;
/** ...and at least this many per stream, so that each gets a whole token or more. */
const MIN_TOKENS_PER_STREAM = 10;

/** Who takes part in a division: one stream, or one replica's streams of a bucket together. */
export interface Party {
  /** Requests per second (allowed + denied) of its streams that reported some, summed. */
  readonly demand: number;
  /** Its streams that reported demand. */
  readonly measured: number;
  /** Its streams that have not reported a rate yet: each counts as the mean measured demand. */
  readonly unmeasured: number;
  /** Its streams that reported no request in their last report: one token each. */
  readonly idle: number;
}

/** How a limit is cut into tokens: `total` tokens every `fillSeconds`. */
export interface Grain {
  readonly fillSeconds: number;
  readonly total: number;
}

/** The fill interval and token count for a limit of `limit` per `unitSeconds`, shared by `streams`. */
export function grainFor(limit: number, unitSeconds: number, streams: number): Grain {
  const need = Math.max(MIN_TOTAL_TOKENS, MIN_TOKENS_PER_STREAM * streams);
  let k = 1;
  while (limit * k < need) k *= 10;
  return { fillSeconds: unitSeconds * k, total: limit * k };
}

/** The mean demand of the measured streams (1 when none is: the unmeasured then split equally). */
export function meanDemand(parties: readonly Party[]): number {
  let demand = 0;
  let measured = 0;
  for (const p of parties) {
    demand += p.demand;
    measured += p.measured;
  }
  return measured > 0 && demand > 0 ? demand / measured : 1;
}

/**
 * Whole tokens per party that add up to `total` (an integer), in the parties' order (which must
 * be the same wherever the division is made, for the shares of replicas to add up): idle streams
 * one token each; the rest a floor per active stream plus the remainder in proportion to demand,
 * no party above DEMAND_HEADROOM × its demand while the demands exceed the limit; when nobody is
 * active, an equal split per stream. `fillSeconds` converts demand (per second) to tokens.
 */
export function divide(total: number, parties: readonly Party[], fillSeconds: number, mean = meanDemand(parties)): number[] {
  const n = parties.length;
  if (n === 0) return [];
  let active = 0;
  let idle = 0;
  for (const p of parties) {
    active += p.measured + p.unmeasured;
    idle += p.idle;
  }
  const quotas = new Array<number>(n).fill(0);
  if (active === 0) {
    const streams = idle > 0 ? idle : n;
    for (let i = 0; i < n; i++) quotas[i] = (total * (idle > 0 ? parties[i]!.idle : 1)) / streams;
    return wholeTokens(quotas);
  }
  const spare = Math.max(0, total - idle);
  const weight = parties.map((p) => p.demand + p.unmeasured * mean);
  const count = parties.map((p) => p.measured + p.unmeasured);
  const floor = (FLOOR_OF_EQUAL_SPLIT * spare) / active;
  // Caps apply only when the demands ask for more than the limit: else everyone gets more than it asks.
  const cap = weight.map((w, i) => Math.max(count[i]!, DEMAND_HEADROOM * w * fillSeconds));
  let capsTotal = 0;
  for (let i = 0; i < n; i++) if (count[i]! > 0) capsTotal += cap[i]!;
  const capped = new Array<boolean>(n).fill(false);
  let fixed = 0;
  // Water-filling: each round caps at least one party or ends; the pool never empties (caps add up to more than `spare`).
  for (let round = 0; round <= n; round++) {
    let poolCount = 0;
    let poolWeight = 0;
    for (let i = 0; i < n; i++) {
      if (capped[i] || count[i] === 0) continue;
      poolCount += count[i]!;
      poolWeight += weight[i]!;
    }
    const rest = spare - fixed - poolCount * floor;
    let over = false;
    for (let i = 0; i < n; i++) {
      if (capped[i] || count[i] === 0) continue;
      const q = count[i]! * floor + rest * (poolWeight > 0 ? weight[i]! / poolWeight : count[i]! / poolCount);
      quotas[i] = q;
      if (capsTotal >= spare && q > cap[i]!) {
        capped[i] = true;
        quotas[i] = cap[i]!;
        fixed += cap[i]!;
        over = true;
      }
    }
    if (!over) break;
  }
  for (let i = 0; i < n; i++) quotas[i]! += parties[i]!.idle;
  return wholeTokens(quotas);
}

/** Cumulative rounding: whole numbers, each within one of its quota, adding up to the rounded total. */
function wholeTokens(quotas: readonly number[]): number[] {
  let sum = 0;
  let before = 0;
  return quotas.map((q) => {
    sum += q;
    const upTo = Math.round(sum);
    const t = upTo - before;
    before = upTo;
    return t;
  });
}

export interface TokenBucketAssignment {
  maxTokens: number;
  tokensPerFill: number;
  fillIntervalSeconds: number;
}

/**
 * Burst (max_tokens) of a share: one second of it, at least 2 (with 1, a saturated bucket refilled
 * slower than its requests come wastes the refill while it waits full), and never more than one
 * second of the whole limit (at least 2) — so no Envoy admits more than about a second of the limit
 * at once. A stream's first assignment of a bucket holds a fifth of that, at least 1: Envoy starts
 * a new token bucket full, and a fleet starting together must not admit a burst per Envoy.
 */
export function tokenBucketFor(tokens: number, fillSeconds: number, limitPerSecond: number, first: boolean): TokenBucketAssignment {
  const perSecond = tokens / fillSeconds;
  const ceiling = Math.max(2, Math.floor(limitPerSecond));
  const burst = first ? Math.max(1, Math.floor(perSecond / 5)) : Math.max(2, Math.floor(perSecond));
  const maxTokens = Math.min(0xffffffff, ceiling, burst);
  return { maxTokens, tokensPerFill: Math.min(tokens, 0xffffffff), fillIntervalSeconds: fillSeconds };
}

/**
 * Envoy does not see a change of fill_interval's seconds alone (it compares max_tokens,
 * tokens_per_fill and the interval's nanos): such a bucket goes out with tokens and interval
 * doubled, the same rate told apart by tokens_per_fill.
 */
export function visibleChange(next: TokenBucketAssignment, held: TokenBucketAssignment | undefined): TokenBucketAssignment {
  if (held === undefined || held.fillIntervalSeconds === next.fillIntervalSeconds) return next;
  if (held.tokensPerFill !== next.tokensPerFill || held.maxTokens !== next.maxTokens) return next;
  return { ...next, tokensPerFill: next.tokensPerFill * 2, fillIntervalSeconds: next.fillIntervalSeconds * 2 };
}
