import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { ConfigFile } from '../../../src/config/types';
import type { Candle } from '../../../src/trading/fxcm/types';

/** A hand-made candle: bid OHLC and a constant spread (ask = bid + spread). */
export function candle(ts: number, o: number, h: number, l: number, c: number, spread = 0.0002): Candle {
  const r = (x: number) => Math.round(x * 1e6) / 1e6;
  return { ts, bidOpen: o, bidHigh: h, bidLow: l, bidClose: c, askOpen: r(o + spread), askHigh: r(h + spread), askLow: r(l + spread), askClose: r(c + spread), tickQty: 1 };
}

/** Flat candles (o=h=l=c) at the given bid closes, one minute apart from t0. */
export function flat(t0: number, closes: number[], spread = 0.0002): Candle[] {
  return closes.map((c, i) => candle(t0 + i * 60, c, c, c, c, spread));
}

/** A deterministic zig-zag series for the crossover example. */
export function wave(t0: number, n: number): Candle[] {
  const out: Candle[] = [];
  let p = 1.1;
  for (let i = 0; i < n; i++) {
    const d = 0.0004 * Math.sin(i / 7) + 0.0001 * Math.cos(i / 3);
    const o = p;
    p = Math.round((p + d) * 1e5) / 1e5;
    out.push(candle(t0 + i * 60, o, Math.max(o, p) + 0.0001, Math.min(o, p) - 0.0001, p));
  }
  return out;
}

export interface TightLimit {
  /** The broker endpoint, e.g. `open_trade`. */
  endpoint: string;
  /** Limit one model of the endpoint only (get_model's `models`), e.g. `OpenPosition`. */
  model?: string;
  unit: 'second' | 'hour';
  requestsPerUnit: number;
}

/**
 * A broker-limits config (domain fxcm, like examples/runner/broker-limits.yaml) with one limit,
 * per account: low enough for a test to reach, unlike the bundled limits.
 */
export function tightBrokerLimits({ endpoint, model, unit, requestsPerUnit }: TightLimit): ConfigFile[] {
  const rateLimit = `rate_limit: {unit: ${unit}, requests_per_unit: ${requestsPerUnit}}`;
  const limited =
    model === undefined
      ? `            ${rateLimit}`
      : `            descriptors:
              - key: model
                value: ${model}
                ${rateLimit}`;
  const content = `domain: fxcm
descriptors:
  - key: broker
    value: fxcm
    descriptors:
      - key: account
        descriptors:
          - key: endpoint
            value: ${endpoint}
${limited}
`;
  return [{ name: 'tight.yaml', content }];
}

/**
 * The environment of a runner child process with a budget state of its own: the broker budget is
 * kept across runs (budget-state.test.ts tests that); other tests start each run afresh.
 */
export function freshRunnerEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  return { PATH: process.env.PATH, RATELIMIT_RUNNER_STATE: fs.mkdtempSync(path.join(os.tmpdir(), 'rr-budget-')), ...extra };
}
