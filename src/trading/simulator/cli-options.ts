/**
 * Options of `ratelimit-runner sim`: argv (platform/argv) → SimulatorStartOptions.
 * Most flags also have an environment variable (the flag wins).
 */
import { flag, isSet, list, type OptionSpecs, parseCommandArgs, UsageError } from '../../platform/argv';
import type { SimulatorStartOptions } from './server';

export const SIMULATOR_USAGE = `ratelimit-runner sim [options]
  --host HOST                 listen address (SIM_HOST, default 127.0.0.1)
  --port PORT                 listen port, 0 = any free port (SIM_PORT, default 0)
  --seed N                    price path seed: live prices and candle history (SIM_SEED, default 1)
  --token TOKEN               accepted API token, repeatable (SIM_TOKENS, comma-separated; required)
  --symbols A/B,C/D           symbols from the broker's offer list (SIM_SYMBOLS, default EUR/USD,USD/JPY,GBP/USD)
  --tick-ms MS                price tick interval, a divisor of 5000 (SIM_TICK_MS, default 1000; 0 = no ticks)
  --volatility X              daily std-dev of the log price, a fraction (SIM_VOLATILITY, default 0.005 = 0.5 %)
  --replay SYMBOL=FILE        replay candles (JSON rows/objects or CSV) for SYMBOL, repeatable
  --always-open               ignore FX market hours (SIM_ALWAYS_OPEN=1)
  --slippage PIPS             market orders, stops and stop entries fill PIPS worse (default 0)
  --slippage-spread F         ... and F times the spread worse (default 0)
  --rollover on|off           book the daily rollover at 17:00 New York on open trades (default on)
  --ping-interval-ms MS       Engine.IO pingInterval (default 25000)
  --ping-timeout-ms MS        Engine.IO pingTimeout (default 60000)
  --bad-token-mode MODE       http403 (default) | socketError
  --open-position-limit N     get_model OpenPosition per hour (default 50)
  --order-snapshot-limit N    get_model Order per hour (default 1500)
  --update-subscriptions-limit N  update_subscriptions per hour (default 500)
  --session-request-limit N   requests per session before HTTP 403 (default unlimited)`;

const string = { type: 'string' } as const;

const SIMULATOR_OPTIONS: OptionSpecs = {
  host: string,
  port: string,
  seed: string,
  token: { type: 'string', multiple: true },
  symbols: string,
  'tick-ms': string,
  volatility: string,
  replay: { type: 'string', multiple: true },
  'always-open': { type: 'boolean' },
  slippage: string,
  'slippage-spread': string,
  rollover: string,
  'ping-interval-ms': string,
  'ping-timeout-ms': string,
  'bad-token-mode': string,
  'open-position-limit': string,
  'order-snapshot-limit': string,
  'update-subscriptions-limit': string,
  'session-request-limit': string,
};

/** The simulator's options from argv and the environment (the flag wins); a bad one is a UsageError. */
export function parseSimulatorArgs(argv: string[], env: NodeJS.ProcessEnv = {}): SimulatorStartOptions {
  const p = parseCommandArgs(argv, SIMULATOR_OPTIONS, { positionals: 0, usage: `${SIMULATOR_USAGE}\n` });
  const one = (name: string, envName?: string) => flag(p, name) ?? (envName ? env[envName] : undefined);
  const number = (name: string, envName?: string) => {
    const v = one(name, envName);
    if (v === undefined) return undefined;
    const n = Number(v);
    if (!Number.isFinite(n) || n < 0) throw new UsageError(`--${name}: not a number: ${v}`);
    return n;
  };
  const int = (name: string, envName?: string) => {
    const n = number(name, envName);
    if (n !== undefined && !Number.isInteger(n)) throw new UsageError(`--${name}: not a whole number: ${one(name, envName)}`);
    return n;
  };
  const given = list(p, 'token');
  const tokens = given.length ? given : (env.SIM_TOKENS ?? '').split(',').filter(Boolean);
  if (!tokens.length) throw new UsageError('at least one --token is required', `${SIMULATOR_USAGE}\n`);
  const symbols = one('symbols', 'SIM_SYMBOLS')?.split(',').filter(Boolean);
  const replay: Record<string, string> = {};
  for (const r of list(p, 'replay')) {
    const eq = r.lastIndexOf('=');
    if (eq <= 0) throw new UsageError(`--replay SYMBOL=FILE expected, got ${r}`);
    replay[r.slice(0, eq)] = r.slice(eq + 1);
  }
  const mode = one('bad-token-mode');
  if (mode !== undefined && mode !== 'http403' && mode !== 'socketError') throw new UsageError(`--bad-token-mode: http403 | socketError`);
  const rollover = one('rollover');
  if (rollover !== undefined && rollover !== 'on' && rollover !== 'off') throw new UsageError(`--rollover: on | off`);
  const slippage = { pips: number('slippage') ?? 0, spreadShare: number('slippage-spread') ?? 0 };
  const alwaysOpen = isSet(p, 'always-open') || env.SIM_ALWAYS_OPEN === '1' || env.SIM_ALWAYS_OPEN === 'true';
  return {
    host: one('host', 'SIM_HOST') ?? '127.0.0.1',
    port: int('port', 'SIM_PORT') ?? 0,
    seed: int('seed', 'SIM_SEED') ?? 1,
    tokens,
    symbols,
    tickIntervalMs: int('tick-ms', 'SIM_TICK_MS') ?? 1000,
    volatility: number('volatility', 'SIM_VOLATILITY'),
    replay: Object.keys(replay).length ? replay : undefined,
    isOpen: alwaysOpen ? () => true : undefined,
    slippage: slippage.pips || slippage.spreadShare ? slippage : undefined,
    rollover: rollover !== 'off',
    pingIntervalMs: int('ping-interval-ms'),
    pingTimeoutMs: int('ping-timeout-ms'),
    badTokenMode: mode as SimulatorStartOptions['badTokenMode'],
    limits: {
      openPositionSnapshotsPerHour: int('open-position-limit'),
      orderSnapshotsPerHour: int('order-snapshot-limit'),
      updateSubscriptionsPerHour: int('update-subscriptions-limit'),
      requestsPerSession: int('session-request-limit'),
    },
  };
}
