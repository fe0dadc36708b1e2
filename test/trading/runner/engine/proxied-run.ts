/**
 * A paper run against the simulator behind a BrokerProxy (which cuts, withholds, fails and
 * freezes), as the engine tests of lost answers, stale views and what the operator is told start
 * it; the runs a failing test leaves open are closed after it (`closeOpenRuns` in afterEach), so
 * that Jest ends by itself.
 */
import { systemClock } from '../../../../src/platform/clock';
import type { ConfigFile } from '../../../../src/config/types';
import type { LogWriter } from '../../../../src/telemetry/logger';
import type { BrokerSimulator, SimulatorStartOptions } from '../../../../src/trading/simulator';
import type { FxcmClient } from '../../../../src/trading/fxcm';
import { Journal, readJournal } from '../../../../src/trading/runner/journal/journal';
import { BrokerCallBudget, accountKey, inProcessDecider } from '../../../../src/trading/runner/broker/call-budget';
import { LiveEngine, type LiveOptions, type LiveResult } from '../../../../src/trading/runner/engine/live';
import type { Strategy } from '../../../../src/trading/runner/strategy';
import { BrokerProxy } from '../../../support/broker-proxy';
import { newClient, startSim, TOKEN } from '../../helpers';
import { tightBrokerLimits } from '../helpers';

export interface ProxiedRun {
  engine: LiveEngine;
  client: FxcmClient;
  limiter: BrokerCallBudget;
  journal?: Journal;
  /** The run's log, `level message` per line. */
  lines: string[];
  running: Promise<LiveResult>;
  /** Closes the journal and the connections without ending the run (a kill -9: nothing more is written). */
  close: () => Promise<void>;
  /** Stops the run and closes everything; its result. */
  finish: () => Promise<LiveResult>;
}

export interface ProxiedRunOptions {
  sim: BrokerSimulator;
  proxy: BrokerProxy;
  strategy: Strategy<Record<string, unknown>>;
  /** A journal (resumed when it has lines); none when absent. */
  jfile?: string;
  /** The broker-call limits (default: open_trade 1000 a second, the others the broker's). */
  limits?: ConfigFile[];
  /** The client's request timeout: a withheld answer becomes a timeout this soon. */
  requestMs?: number;
  connectMs?: number;
  /** The engine's other options (a clock, the lost-answer snapshot's wait, …). */
  engine?: Partial<LiveOptions>;
}

const open = new Set<ProxiedRun>();

export function captureLog(): { log: LogWriter; lines: string[] } {
  const lines: string[] = [];
  const at = (level: string) => (msg: string) => void lines.push(`${level} ${msg}`);
  return { lines, log: { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') } };
}

export async function startProxiedRun(o: ProxiedRunOptions): Promise<ProxiedRun> {
  const limits = o.limits ?? tightBrokerLimits({ endpoint: 'open_trade', unit: 'second', requestsPerUnit: 1000 });
  const { decider } = inProcessDecider(limits, systemClock);
  const limiter = new BrokerCallBudget({ decider, account: accountKey(TOKEN), clock: systemClock });
  const client = newClient(o.sim, {
    baseUrl: o.proxy.url,
    beforeRequest: limiter.beforeRequest,
    afterResponse: limiter.afterResponse, // as the CLI wires it: a 429 holds its kind of call
    timeouts: { connectMs: o.connectMs ?? 5000, requestMs: o.requestMs ?? 5000, tradeIdsMs: 5000 },
  });
  const recorded = o.jfile ? readJournal(o.jfile) : [];
  const journal = o.jfile ? new Journal(o.jfile) : undefined;
  const { log, lines } = captureLog();
  const engine = new LiveEngine({ mode: 'paper', strategy: o.strategy, client, limiter, journal, recorded, logger: log, ...o.engine });
  await client.connect();
  const running = engine.run();
  running.catch(() => undefined);
  const close = async () => {
    journal?.close();
    await client.close();
    await limiter.close();
  };
  const finish = async () => {
    try {
      engine.stop();
      return await running;
    } finally {
      await close();
    }
  };
  const run: ProxiedRun = { engine, client, limiter, journal, lines, running, close, finish };
  open.add(run);
  return run;
}

/**
 * A simulator behind a BrokerProxy for each test of the calling `describe` (made before each,
 * stopped after it with the runs it left open); read them from the object returned.
 */
export function simBehindProxy(options: Partial<SimulatorStartOptions> = {}): { readonly sim: BrokerSimulator; readonly proxy: BrokerProxy } {
  const made = {} as { sim: BrokerSimulator; proxy: BrokerProxy };
  beforeEach(async () => {
    made.sim = await startSim(options);
    made.proxy = new BrokerProxy();
    await made.proxy.start(made.sim.url);
  });
  afterEach(async () => {
    await closeOpenRuns();
    await made.proxy.stop();
    await made.sim.stop();
  });
  return made;
}

/** Stops and closes every run still open (for afterEach). */
export async function closeOpenRuns(): Promise<void> {
  for (const r of open) {
    r.engine.stop();
    await r.client.close();
    await r.limiter.close();
  }
  open.clear();
}
