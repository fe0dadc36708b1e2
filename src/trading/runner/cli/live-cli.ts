/**
 * `ratelimit-runner paper|live|replay` and `ratelimit-runner candles download`.
 */
import fs from 'node:fs';
import { FxcmClient } from '../../fxcm/client';
import { normalizePeriod, splitCandleRange } from '../../fxcm/candles';
import type { Period } from '../../fxcm/types';
import { systemClock } from '../../../platform/clock';
import type { ConfigFile } from '../../../limiter';
import { candlesCheckCommand } from '../candles/candles-check';
import { isoTime, writeCandleFile } from '../../fxcm/candle-file';
import { bundledLimitsFile } from '../broker/limits-file';
import { DownloadProgress } from '../candles/candles-progress';
import { CANDLE_STORE_ENV, downloadIntoStore, type StoreDownload } from '../candles/candles-store';
import { UsageError, flag, isSet, list, parseCommandArgs, wantsHelp, type ParsedArgs } from '../../../platform/argv';
import { CANDLES_OPTIONS, REPLAY_OPTIONS, RUN_OPTIONS, byteSize, logLevelOf, num, parseParams, protectionsOf, safetyOf, type StrategyLogLevel } from './args';
import { consoleLogger, loadForCommand } from './cli';
import { JournalFinishedError, strategyErrorLine } from '../errors';
import { Journal, finishedRunOf, journalPath, readJournal, type JournalLine } from '../journal/journal';
import { JournalLockedError } from '../journal/journal-lock';
import { BrokerCallBudget, accountKey, checkBudget, describeLimit, inProcessDecider, remoteDecider, type HeldBack } from '../broker/call-budget';
import { IF_NO_BUDGET, budgetStateDir, budgetStateFile, heldBackLine, type IfNoBudget } from '../broker/budget-state';
import { DEFAULT_TOKEN_REFUSED_MS, LiveEngine, type LiveIntent, type LiveResult } from '../engine/live';
import { FxcmAuthError, FxcmUnauthorizedError } from '../../fxcm/errors';
import { lastCheckpoint } from '../engine/checkpoint';
import { isoUtc } from '../../../platform/time-text';
import { buildReport, leftOpenText, writeReport } from '../report/report';
import type { Strategy } from '../strategy';
import { errorMessage } from '../../../platform/errors';
import type { OperatorAction } from '../engine/run-controls';
import { Notifier } from '../notify/notifier';
import type { LogWriter } from '../../../telemetry/logger';
import { CONTROL_TOKEN_ENV, type ControlServer, controlToken, notingLogger, startControlServer } from '../control/control-server';

export const DEFAULT_LIVE_URL = 'https://api-demo.fxcm.com';

const COMMON = `  --limits FILE         rate limit config (the 'ratelimit' YAML format; default: the bundled
                        examples/runner/broker-limits.yaml)
  --ratelimit HOST:PORT use a running 'ratelimit' over gRPC (shared budget, e.g. through Redis);
                        --limits is then the config it runs, used for the start-up check
  --account NAME        value of the 'account' descriptor (default: a fingerprint of the token)
  --budget-state DIR    where the in-process limiter keeps the budget between runs, one file per
                        broker and account that every run on the machine shares (default
                        \$RATELIMIT_RUNNER_STATE, else \$XDG_STATE_HOME/ratelimit-runner, else
                        ~/.local/state/ratelimit-runner); not used with --ratelimit
  --if-no-budget wait|exit  when a start-up call (snapshot, subscriptions, warm-up candles) is
                        over its budget: say until when and wait (default), or say it and exit 3
                        without calling the broker
  --allow-over-budget   start even when the config could exceed the broker's documented limits
  --journal DIR         append-only journal (DIR/journal.jsonl); an existing one is resumed:
                        the state is rebuilt from it plus one reconciliation snapshot. A run
                        killed while ending (onStop, or after a strategy error) is finished
                        (positions flattened); one that ended cleanly is refused (exit 2). One
                        runner per journal: DIR/journal.jsonl.lock names the process writing
                        it; a second is refused (exit 2) while it runs (a killed one's lock is
                        taken over)
  --journal-max-bytes SIZE  for a strategy with saveState and restoreState: once the journal
                        has grown by SIZE (bytes, or 512K, 8M, 1G) since its checkpoint, a new
                        checkpoint replaces it (the segment before stays as journal.prev.jsonl),
                        and a resume replays only what follows it (default 8M)
  --duration S          stop S seconds after onStart (the start-up snapshot and the warm-up
                        candles, which may wait for the candle budget, come first); a resumed
                        run: S seconds after it resumed (default: until SIGINT/SIGTERM)
  --token-refused-timeout S  when the broker refuses the token (every call 401 Unauthorized,
                        every handshake 403: revoked, expired, another session on it) for S
                        seconds without a call going through again, stop with exit 4; the
                        journal resumes the run once the token works (default ${DEFAULT_TOKEN_REFUSED_MS / 1000})
  --control HOST:PORT   serve the run's control API and dashboard there (JSON under /api/:
                        status, positions, trades, pnl, budget, protections, journal; the
                        page at /). Every /api/ call needs Authorization: Bearer TOKEN
  --control-token-file FILE  the token (its first line, 16 characters or more), else
                        \$RATELIMIT_RUNNER_CONTROL_TOKEN; on a loopback address without either,
                        one is made and printed with the page's address; any other address
                        needs one
  --notify URL          POST each event of the run to URL as JSON (repeatable): run started,
                        entry sent, filled, exit and its reason, order refused, disconnected,
                        reconnected, budget exhausted, protection locked, the operator's
                        actions, strategy error, run ended, and a heartbeat; queued and retried
                        apart from the run, which never waits for them
  --notify-heartbeat MIN  a heartbeat event every MIN minutes (default 5; 0: none)
  --report PATH         write PATH.json and PATH.html (default ./report)
  --param KEY=VALUE     strategy parameter; repeatable
  --max-position K      safety: maximum position per symbol and side, in K units
  --max-daily-loss N    safety: flatten and stop opening when the UTC day's loss reaches N
  --min-usable-margin-pct P  safety: refuse to open when the usable margin left after the order
                        would be below P% of equity
  --protections FILE    protections (stop-loss guard, max drawdown, cooldown, daily loss) from
                        a JSON file, instead of the strategy's \`protections\`
  --leverage N          the account's leverage, for the pre-trade margin check that mirrors the
                        broker's (an order needs its notional / N of usable margin; default 50,
                        the simulator's); the broker's own refusal is the last word
  --log-level LEVEL     strategy log output from LEVEL up: debug, info (default), warn, error
  --quiet               no strategy log output
  -h, --help            this help

Exit status: 0 ok, 1 the strategy failed to load or threw (positions are flattened; the
message says if any could not be), 2 usage, missing token, a journal that already ended or that
another running runner writes (the message names its process), or a limits config that could
exceed the broker's limits, 3 a start-up call over its budget with --if-no-budget exit (the
message says when the next call is allowed), 4 the broker refused the token (at the start, or
for --token-refused-timeout seconds during the run: the run stopped there, and the same
--journal resumes it).
`;

export const PAPER_USAGE = `Usage: ratelimit-runner paper <strategy> --url URL --token TOKEN [options]

Runs a strategy against a simulated broker ('ratelimit-runner sim'), every call through the
rate limiter.

Options:
  --url URL             the broker (simulator) URL
  --token TOKEN         API token (or FXCM_TOKEN)
${COMMON}`;

export const LIVE_USAGE = `Usage: ratelimit-runner live <strategy> --token TOKEN [--url URL] [options]

Runs a strategy against a real broker account (default URL ${DEFAULT_LIVE_URL}), every call
through the rate limiter.

Options:
  --url URL             the broker's REST/stream URL (or FXCM_URL)
  --token TOKEN         API token (or FXCM_TOKEN); required
${COMMON}`;

export const REPLAY_USAGE = `Usage: ratelimit-runner replay <strategy> --journal FILE|DIR [options]

Feeds a recorded paper/live run (its market events and broker answers) back to the strategy,
without a broker, and checks that its decisions are identical, bit for bit. A journal cut to a
checkpoint is replayed from it: the strategy's restoreState takes its state back, and the
decisions after it are checked.

Options:
  --journal FILE|DIR    the journal (journal.jsonl or its directory)
  --param KEY=VALUE     strategy parameter (the run's recorded params are used by default)
  --log-level LEVEL     strategy log output from LEVEL up: debug, info, warn, error
                        (default: none, as --quiet)
  --quiet               no strategy log output
  -h, --help            this help

Exit status: 0 identical, 1 a decision differs (the first difference is printed), 2 usage.
`;

export const CANDLES_USAGE = `Usage: ratelimit-runner candles download --url URL --token TOKEN --symbol SYM --timeframe TF
       --from TIME --to TIME (--out FILE | --store DIR) [--limits FILE] [--ratelimit HOST:PORT] [--account NAME]
       ratelimit-runner candles check [FILE|DIR...] [--symbol SYM] [--timeframe TF]

download: bid/ask candles of every symbol and time frame given (--symbol and --timeframe repeat,
or take comma lists: --symbol EUR/USD,GBP/USD --timeframe m1,H1 downloads all four), in as many
requests as the broker's per-request limits need, each one through the rate limiter (the bundled
limits allow 2 candle requests a minute, so a long download mostly waits: on a terminal, a
progress bar says for how long). One line per symbol and time frame on stdout when it is done.
  --out FILE    one symbol and one time frame, written as JSON, or as CSV when FILE ends with
                .csv (a CSV file has no symbol or time frame: give 'backtest' --symbol and
                --timeframe with it)
  --store DIR   a local candle store (default, when --out is not given: \$${CANDLE_STORE_ENV}):
                DIR/EUR_USD/m1.json per symbol and time frame (the month, M1, is MN1.json), JSON
                that 'backtest --candles' reads as it is. A download asks only for what the file
                does not cover yet (before and after its range) and merges it in, saving after
                every request: an interrupted download keeps what it fetched, and the same
                command again completes it.
TIME is ISO 8601 (2024-01-02T00:00:00Z) or epoch seconds.
Exit status: 0 done, 1 a download failed (the others still ran), 2 usage, 130 or 143 stopped by
SIGINT or SIGTERM.

check: reads candle files and reports their contents, bad rows and gaps
('ratelimit-runner candles check --help').
`;

function help(p: ParsedArgs, usage: string): boolean {
  if (wantsHelp(p)) {
    process.stdout.write(usage);
    return true;
  }
  return false;
}

function load(file: string | undefined, what: string): Strategy<Record<string, unknown>> | number {
  if (!file) throw new UsageError(`${what} needs a strategy file`);
  return loadForCommand(file);
}

interface Broker {
  client: FxcmClient;
  limiter: BrokerCallBudget;
  config: ReturnType<typeof inProcessDecider>['config'];
  /** The limits config file (--limits or the bundled one). */
  limitsFile: string;
  /** Where the in-process limiter keeps the budget (undefined with --ratelimit). */
  stateFile: string | undefined;
}

/**
 * FxcmClient behind a BrokerCallBudget; checks the limits config (returns its problems).
 * `onHeldBack` hears each over-limit answer: the endpoint and the seconds until it is asked again.
 */
function makeBroker(p: ParsedArgs, url: string, token: string, onHeldBack?: (endpoint: string, seconds: number, heldBack: HeldBack) => void): { broker: Broker; problems: string[] } {
  const limitsFile = flag(p, 'limits') ?? bundledLimitsFile();
  if (!fs.existsSync(limitsFile)) throw new UsageError(`limits file not found: ${limitsFile}`);
  const files: ConfigFile[] = [{ name: limitsFile, content: fs.readFileSync(limitsFile, 'utf8') }];
  const remote = flag(p, 'ratelimit');
  const account = flag(p, 'account') ?? accountKey(token);
  const stateFile = remote ? undefined : budgetStateFile(budgetStateDir(flag(p, 'budget-state')), url, account);
  const local = inProcessDecider(files, systemClock, stateFile ? { file: stateFile, onWarning: (m) => process.stderr.write(`ratelimit-runner: ${m}\n`) } : undefined);
  const decider = remote ? remoteDecider(remote) : local.decider;
  const limiter = new BrokerCallBudget({ decider, account, clock: systemClock, onWait: onHeldBack, onThrottled: throttledLine });
  const client = new FxcmClient({ baseUrl: url, token, beforeRequest: limiter.beforeRequest, afterResponse: limiter.afterResponse, timeouts: { connectMs: 15000, requestMs: 15000, tradeIdsMs: 30000 } });
  return { broker: { client, limiter, config: local.config, limitsFile, stateFile }, problems: checkBudget(local.config, limiter) };
}

/** The broker answered a call HTTP 429 (or a 5xx with Retry-After): its kind of call is held. */
function throttledLine(endpoint: string, status: number, holdMs: number, fromRetryAfter: boolean): void {
  const why = fromRetryAfter ? 'as its Retry-After asks' : 'no Retry-After: a backoff that doubles with each 429 in a row';
  process.stderr.write(`ratelimit-runner: the broker answered HTTP ${status} to ${endpoint}: holding ${endpoint} calls for ${(holdMs / 1000).toFixed(1)} s (${why})\n`);
}

function budgetOf(b: Broker) {
  return b.limiter.budget().map((u) => {
    const ep = u.endpoint === 'candles' ? '/candles' : u.endpoint === 'subscribe' ? '/subscribe' : `/trading/${u.endpoint === 'trading_subscribe' ? 'subscribe' : u.endpoint}`;
    return { ...u, limit: describeLimit(b.config, b.limiter, ep, u.endpoint === 'get_model' ? { models: ['OpenPosition', 'Order'] } : {}) };
  });
}

/** --control HOST:PORT and its token (a usage error when it is malformed or needs a token it has not). */
function controlAddress(p: ParsedArgs): { host: string; port: number; token: string; made: boolean } | undefined {
  const at = flag(p, 'control');
  if (at === undefined) return undefined;
  const m = /^(\[[0-9a-fA-F:]+\]|[^:\s]+):(\d{1,5})$/.exec(at);
  const port = m ? Number(m[2]) : NaN;
  if (!m || port > 65535) throw new UsageError(`--control must be HOST:PORT (e.g. 127.0.0.1:8099; port 0 picks a free one), got "${at}"`);
  const host = m[1]!.replace(/^\[(.*)\]$/, '$1');
  try {
    return { host, port, ...controlToken(host, flag(p, 'control-token-file'), process.env) };
  } catch (e) {
    throw new UsageError(errorMessage(e));
  }
}

function tokenOf(p: ParsedArgs, command: string): string {
  const token = flag(p, 'token') ?? process.env.FXCM_TOKEN;
  if (!token) throw new UsageError(`${command} needs an API token: pass --token TOKEN or set FXCM_TOKEN`);
  return token;
}

async function runMode(argv: string[], mode: 'paper' | 'live'): Promise<number> {
  const usage = mode === 'paper' ? PAPER_USAGE : LIVE_USAGE;
  const p = parseCommandArgs(argv, RUN_OPTIONS, { positionals: 1, usage });
  if (help(p, usage)) return 0;
  const file = p.positional[0];
  if (!file) throw new UsageError(`${mode} needs a strategy file`);
  const url = flag(p, 'url') ?? (mode === 'live' ? process.env.FXCM_URL ?? DEFAULT_LIVE_URL : undefined);
  if (!url) throw new UsageError('paper needs --url URL (the simulator, e.g. from ratelimit-runner sim)');
  const token = tokenOf(p, mode);
  const strategy = load(file, mode);
  if (typeof strategy === 'number') return strategy;
  const controlAt = controlAddress(p);
  const { logger: log, notes } = notingLogger(consoleLogger(logLevelOf(p)));
  const notifier = notifierOf(p, { strategy: strategy.name ?? 'strategy', mode }, log);
  const ifNoBudget = (flag(p, 'if-no-budget') ?? 'wait') as IfNoBudget;
  if (!IF_NO_BUDGET.includes(ifNoBudget)) throw new UsageError(`--if-no-budget must be wait or exit, got ${ifNoBudget}`);
  // Until the run is going, a call held back by the budget is said with its time (once per limit
  // and time); with --if-no-budget exit the run ends there instead of calling.
  let running = false;
  let outOfBudget: string | undefined;
  const said = new Set<string>();
  // a limit exhausted is told once per limit and time it is whole again
  const exhausted = new Map<string, number>();
  const { broker, problems } = makeBroker(p, url, token, (_endpoint, _s, held) => {
    const until = Math.ceil(held.untilMs / 1000);
    if (notifier && exhausted.get(held.what) !== until) {
      exhausted.set(held.what, until);
      notifier.notify('budget_exhausted', { limit: held.what, wholeAgainAt: isoUtc(held.untilMs) });
    }
    if (running || outOfBudget !== undefined) return;
    const line = heldBackLine(mode, held, broker.stateFile, ifNoBudget, systemClock.nowMs());
    if (ifNoBudget === 'exit') {
      outOfBudget = line;
      void broker.limiter.close();
      return;
    }
    const key = `${held.what}@${Math.ceil(held.untilMs / 1000)}`;
    if (!said.has(key)) process.stderr.write(line);
    said.add(key);
  });
  if (problems.length) {
    const allow = isSet(p, 'allow-over-budget');
    process.stderr.write(`ratelimit-runner ${mode}: the rate limit config ${broker.limitsFile} could let calls exceed the broker's documented limits:\n${problems.map((x) => `  - ${x}\n`).join('')}`);
    if (!allow) {
      process.stderr.write('refusing to start (fix the config, or pass --allow-over-budget)\n');
      await broker.limiter.close();
      return 2;
    }
    process.stderr.write(`ratelimit-runner ${mode}: starting anyway (--allow-over-budget): the broker may refuse calls over its limits\n`);
  }
  const jdir = flag(p, 'journal');
  const jfile = jdir ? journalPath(jdir) : undefined;
  // the journal's lock before anything reads it: one runner per journal
  let journal: Journal | undefined;
  try {
    journal = jfile ? new Journal(jfile) : undefined;
  } catch (e) {
    await broker.limiter.close();
    if (!(e instanceof JournalLockedError)) throw e;
    process.stderr.write(`ratelimit-runner ${mode}: ${e.message}\n`);
    return 2;
  }
  const recorded = jfile ? readJournal(jfile) : [];
  const stoppedAt = finishedRunOf(recorded);
  if (stoppedAt !== undefined) {
    journal?.close();
    await broker.limiter.close();
    throw new UsageError(`${jfile}: ${new JournalFinishedError(stoppedAt).message}`);
  }
  const tookOver = journal?.lock.tookOver;
  if (journal !== undefined && journal.tornTailBytes > 0) {
    process.stderr.write(
      `ratelimit-runner ${mode}: ${journal.file}: its last line was cut (${journal.tornTailBytes} bytes; the run stopped while writing it) and is dropped; resuming from the line before it\n`,
    );
  }
  const duration = num(p, 'duration');
  const journalMaxBytes = byteSize(p, 'journal-max-bytes');
  const tokenRefused = num(p, 'token-refused-timeout');
  if (tokenRefused !== undefined && !(tokenRefused > 0)) {
    journal?.close();
    await broker.limiter.close();
    throw new UsageError(`--token-refused-timeout must be a number of seconds above 0, got "${flag(p, 'token-refused-timeout')}"`);
  }
  const engine = new LiveEngine({
    mode,
    strategy,
    strategyFile: file,
    params: parseParams(p),
    safety: safetyOf(p),
    protections: protectionsOf(p),
    leverage: num(p, 'leverage'),
    logger: log,
    client: broker.client,
    limiter: broker.limiter,
    journal,
    journalMaxBytes,
    recorded,
    durationMs: duration !== undefined ? duration * 1000 : undefined,
    tokenRefusedTimeoutMs: tokenRefused !== undefined ? tokenRefused * 1000 : undefined,
    onRunning: () => {
      running = true;
      notifier?.notify('run_started', { url, resumed: recorded.length > 0, symbols: strategy.symbols });
    },
    events: notifier ? (kind, details) => notifier.notify(kind, details) : undefined,
  });
  let stoppedStarting = false;
  // a start-up call may be waiting for budget: stop waiting too
  const stoppingStart = () => {
    if (running) return;
    stoppedStarting = true;
    void broker.limiter.close();
  };
  const onSignal = () => {
    stoppingStart();
    engine.stop();
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  let result: LiveResult;
  let control: ControlServer | undefined;
  try {
    if (controlAt !== undefined) {
      const source = {
        view: () => engine.view(),
        limits: () => broker.limiter.limits(),
        budgetUse: () => broker.limiter.budget(),
        journalFile: () => journal?.file,
        notes: () => notes,
        notifications: () => notifier?.stats() ?? [],
        // the API's stop is the signal's (the engine journals it first)
        act: (a: OperatorAction) => engine.act(a).finally(() => a.action === 'stop' && stoppingStart()),
      };
      control = await startControlServer({ ...controlAt, source }).catch((e: unknown) => {
        throw new Error(`--control ${controlAt.host}:${controlAt.port}: ${errorMessage(e)}`);
      });
      process.stdout.write(`control: ${controlAt.made ? `${control.url}#token=${controlAt.token}` : `${control.url} (the token of ${flag(p, 'control-token-file') ? '--control-token-file' : CONTROL_TOKEN_ENV})`}\n`);
    }
    await broker.client.connect();
    if (tookOver) process.stdout.write(`the journal's lock named process ${tookOver.pid} (since ${tookOver.since}), which is no longer running: taken over\n`);
    if (recorded.length) process.stdout.write(`resuming from ${jfile} (${resumedFrom(recorded)})\n`);
    process.stdout.write(`${strategy.name ?? 'strategy'}: ${mode} run on ${url} started\n`);
    result = await engine.run();
  } catch (e) {
    const refused = e instanceof FxcmAuthError || e instanceof FxcmUnauthorizedError;
    const why = refused ? `the broker refused the token (${errorMessage(e)}): check --token or FXCM_TOKEN` : errorMessage(e);
    process.stderr.write(outOfBudget ?? `ratelimit-runner ${mode}: ${stoppedStarting ? 'stopped before the run started' : why}\n`);
    await control?.close();
    await broker.client.close();
    await broker.limiter.close();
    journal?.close();
    notifier?.notify('run_ended', { error: outOfBudget?.trim() ?? (stoppedStarting ? 'stopped before the run started' : why) });
    await notifier?.close(NOTIFY_CLOSE_MS);
    return outOfBudget ? 3 : refused ? 4 : 1;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
  await control?.close();
  await broker.client.close();
  journal?.close();
  const budget = budgetOf(broker);
  await broker.limiter.close();
  const report = buildReport({ ...result, budget });
  const out = writeReport(report, flag(p, 'report') ?? 'report');
  const m = report.metrics;
  process.stdout.write(
    `${result.strategy}: ${result.decisions} decisions, ${m.trades} closed trades, net P/L ${m.netPL.toFixed(2)} ${report.currency}${result.resumed ? ' (resumed)' : ''}\n` +
      (result.leftOpen && (result.leftOpen.positions.length || result.leftOpen.orders.length) ? `left open at the broker: ${leftOpenText(result.leftOpen)}\n` : '') +
      `budget: ${budget.map((b) => `${b.endpoint} ${b.sent}${b.limit ? ` (${b.limit})` : ''}${b.waited ? `, ${b.waited} waited` : ''}`).join('; ')}\n` +
      `report: ${out.json} ${out.html}\n`,
  );
  if (notifier) {
    notifier.notify('run_ended', {
      decisions: result.decisions,
      trades: m.trades,
      netPL: m.netPL,
      currency: report.currency,
      resumed: result.resumed,
      leftOpen: result.leftOpen ? { positions: result.leftOpen.positions.length, orders: result.leftOpen.orders.length } : undefined,
      ...(result.error ? { error: result.error } : {}),
      ...(result.halted ? { halted: result.halted.message } : {}),
      ...(result.unsettled?.length ? { unsettled: result.unsettled } : {}),
      report: out.json,
    });
    await notifier.close(NOTIFY_CLOSE_MS);
  }
  if (result.unsettled?.length) {
    process.stderr.write(
      `ratelimit-runner ${mode}: ${result.unsettled.join(', ')} got no answer from the broker and no snapshot could settle ${result.unsettled.length > 1 ? 'them' : 'it'}: ` +
        `the broker may hold orders of this run that it does not list; ${jfile ? 'run again with the same --journal to reconcile' : 'check the account'}\n`,
    );
  }
  if (result.error) {
    process.stderr.write(strategyErrorLine(result.error));
    return 1;
  }
  if (result.halted) {
    process.stderr.write(`ratelimit-runner ${mode}: ${result.halted.message}: the run stopped there; ${jfile ? 'run again with the same --journal once the token works' : 'what it held is still open at the broker'}\n`);
    return 4;
  }
  return 0;
}

/** --notify-heartbeat's default: a watchdog that misses two heartbeats knows within ten minutes. */
const DEFAULT_HEARTBEAT_MIN = 5;
/** How long the end of a run waits for its last notifications (run_ended) to be delivered. */
const NOTIFY_CLOSE_MS = 5000;

/** --notify URL (repeatable) and --notify-heartbeat MIN: the run's notifier, or none. */
function notifierOf(p: ParsedArgs, run: { strategy: string; mode: string }, log: LogWriter): Notifier | undefined {
  const urls = list(p, 'notify');
  const beat = num(p, 'notify-heartbeat');
  if (beat !== undefined && !(beat >= 0)) throw new UsageError(`--notify-heartbeat must be a number of minutes (0: none), got "${flag(p, 'notify-heartbeat')}"`);
  if (!urls.length) return undefined;
  try {
    return new Notifier({ urls, run, heartbeatMs: (beat ?? DEFAULT_HEARTBEAT_MIN) * 60_000, log });
  } catch (e) {
    throw new UsageError(errorMessage(e));
  }
}

/** What a resume starts from: "its checkpoint of <time> and the 120 journal lines after it", or "3400 journal lines". */
function resumedFrom(lines: readonly JournalLine[]): string {
  const at = lastCheckpoint(lines);
  if (at < 0) return `${lines.length} journal lines`;
  return `its checkpoint of ${isoUtc(lines[at]!.t ?? 0)} and the ${lines.length - at - 1} journal lines after it`;
}

export const paperCommand = (argv: string[]) => runMode(argv, 'paper');
export const liveCommand = (argv: string[]) => runMode(argv, 'live');

const key = (i: LiveIntent) => JSON.stringify(i);

/**
 * Replays a journal (from its checkpoint when it has one); returns the recorded and replayed
 * decisions, and the checkpoint's time.
 */
export async function replayJournal(strategy: Strategy<Record<string, unknown>>, file: string, opts: { strategyFile?: string; params?: Record<string, unknown>; logLevel?: StrategyLogLevel } = {}) {
  const lines = readJournal(file);
  const run = lines.find((l) => l.k === 'run');
  const recorded = lines.filter((l) => l.k === 'intent').map((l) => ({ id: l.id, ts: l.t ?? (l as { ts?: number }).ts, op: l.op, args: l.args }) as LiveIntent);
  const engine = new LiveEngine({
    mode: 'replay',
    strategy,
    strategyFile: opts.strategyFile,
    params: { ...((run?.params as Record<string, unknown>) ?? {}), ...(opts.params ?? {}) },
    logger: consoleLogger(opts.logLevel ?? 'silent'),
    recorded: lines,
  });
  const result = await engine.replay();
  const at = lastCheckpoint(lines);
  return { recorded, replayed: result.intents, result, checkpointAt: at >= 0 ? lines[at]!.t : undefined };
}

export async function replayCommand(argv: string[]): Promise<number> {
  const p = parseCommandArgs(argv, REPLAY_OPTIONS, { positionals: 1, usage: REPLAY_USAGE });
  if (help(p, REPLAY_USAGE)) return 0;
  const j = flag(p, 'journal');
  if (!j) throw new UsageError('replay needs --journal FILE');
  const file = journalPath(j);
  if (!fs.existsSync(file)) throw new UsageError(`journal not found: ${file}`);
  const strategy = load(p.positional[0], 'replay');
  if (typeof strategy === 'number') return strategy;
  const { recorded, replayed, checkpointAt } = await replayJournal(strategy, file, { strategyFile: p.positional[0], params: parseParams(p), logLevel: logLevelOf(p, 'silent') });
  const len = Math.max(recorded.length, replayed.length);
  for (let i = 0; i < len; i++) {
    const a = recorded[i];
    const b = replayed[i];
    if (!a || !b || key(a) !== key(b)) {
      process.stdout.write(`replay: decision ${i + 1} differs\n  recorded: ${a ? key(a) : '(none)'}\n  replayed: ${b ? key(b) : '(none)'}\n`);
      return 1;
    }
  }
  const from = checkpointAt === undefined ? '' : ` after its checkpoint of ${isoUtc(checkpointAt)}`;
  process.stdout.write(`replay: ${replayed.length} decisions${from} identical to the recorded run\n`);
  return 0;
}

function parseTime(v: string | undefined, name: string): number {
  if (v === undefined) throw new UsageError(`candles download needs --${name} TIME`);
  if (/^\d+$/.test(v)) return Number(v);
  const ms = Date.parse(v);
  if (!Number.isFinite(ms)) throw new UsageError(`--${name}: not a time: ${v}`);
  return Math.floor(ms / 1000);
}

/** A repeatable option's values, comma lists split, repeats dropped: `--symbol A,B --symbol C`. */
function listed(p: ParsedArgs, name: string): string[] {
  return [...new Set(list(p, name).flatMap((v) => v.split(',').map((x) => x.trim()).filter(Boolean)))];
}

const EXIT_ON_SIGNAL: Record<string, number> = { SIGINT: 130, SIGTERM: 143 };

/** "4320 candles in DIR/EUR_USD/m1.json, covering 2024-03-11T00:00:00Z to 2024-03-13T23:58:00Z" */
function storeContents(s: StoreDownload): string {
  return `${s.candles} candles in ${s.file}${s.covered ? `, covering ${isoTime(s.covered.from)} to ${isoTime(s.covered.to)}` : ''}`;
}

/** Where `candles download` writes: --out FILE, or a store (--store DIR, else $RATELIMIT_RUNNER_CANDLES). */
function destinationOf(p: ParsedArgs): { out: string; store?: undefined } | { store: string; out?: undefined } {
  const out = flag(p, 'out');
  const store = flag(p, 'store');
  if (out !== undefined && store !== undefined) throw new UsageError('give --out FILE or --store DIR, not both');
  if (out !== undefined) return { out };
  const dir = store ?? process.env[CANDLE_STORE_ENV];
  if (!dir) throw new UsageError(`candles download needs --out FILE or --store DIR (or ${CANDLE_STORE_ENV}=DIR)`);
  return { store: dir };
}

export async function candlesCommand(argv: string[]): Promise<number> {
  const [sub, ...rest] = argv;
  if (sub === undefined || sub === '--help' || sub === '-h') {
    process.stdout.write(CANDLES_USAGE);
    return 0;
  }
  if (sub === 'check') return candlesCheckCommand(rest);
  if (sub !== 'download') throw new UsageError(`unknown candles command "${sub}" (download, check)`);
  const p = parseCommandArgs(rest, CANDLES_OPTIONS, { positionals: 0, usage: CANDLES_USAGE });
  if (help(p, CANDLES_USAGE)) return 0;
  const url = flag(p, 'url') ?? process.env.FXCM_URL;
  if (!url) throw new UsageError('candles download needs --url URL');
  const token = tokenOf(p, 'candles download');
  const symbols = listed(p, 'symbol');
  if (!symbols.length) throw new UsageError('candles download needs --symbol SYM');
  const periods: Period[] = [];
  for (const tf of listed(p, 'timeframe')) {
    const period = normalizePeriod(tf);
    if (!period) throw new UsageError(`--timeframe ${tf}: not a time frame (m1 m5 m15 m30 H1 H2 H3 H4 H6 H8 D1 W1 M1)`);
    if (!periods.includes(period)) periods.push(period);
  }
  if (!periods.length) throw new UsageError('candles download needs --timeframe TF (m1 m5 m15 m30 H1 … D1 W1 M1)');
  const from = parseTime(flag(p, 'from'), 'from');
  const to = parseTime(flag(p, 'to'), 'to');
  if (from > to) throw new UsageError('--from is after --to');
  const dest = destinationOf(p);
  const plan = symbols.flatMap((symbol) => periods.map((period) => ({ symbol, period })));
  if (dest.out !== undefined && plan.length > 1) throw new UsageError(`--out FILE takes one symbol and one time frame, not ${plan.length}: use --store DIR for several`);

  const progress = new DownloadProgress(process.stderr);
  const { broker, problems } = makeBroker(p, url, token, (endpoint, seconds) => {
    if (endpoint === 'candles') progress.waiting(seconds);
  });
  for (const x of problems) process.stderr.write(`warning: ${x}\n`);
  progress.budget = describeLimit(broker.config, broker.limiter, '/candles');
  const stop = new AbortController();
  let stoppedBy: NodeJS.Signals | undefined;
  const onSignal = (signal: NodeJS.Signals) => {
    stoppedBy = signal;
    stop.abort();
    void broker.limiter.close(); // a request waiting for the budget gives up now
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  let failed = 0;
  try {
    await broker.client.connect();
    for (const { symbol, period } of plan) {
      if (stoppedBy) break;
      const label = `${symbol} ${period}`;
      let stored: StoreDownload | undefined;
      try {
        if (dest.store !== undefined) {
          stored = await downloadIntoStore(broker.client, {
            dir: dest.store,
            symbol,
            period,
            from,
            to,
            nowSec: () => Math.floor(systemClock.nowMs() / 1000),
            signal: stop.signal,
            onProgress: (s) => {
              stored = s;
              if (s.requests === 0) progress.start(label, s.planned, s.candles);
              else progress.answered(s.candles);
            },
          });
          progress.finish();
          process.stdout.write(`${label}: ${storeContents(stored)} (${stored.requests} candle requests)\n`);
        } else {
          let got = 0;
          progress.start(label, splitCandleRange(period, from, to).length, 0);
          const candles = await broker.client.downloadCandles(symbol, period, from, to, {
            signal: stop.signal,
            onChunk: (c) => progress.answered((got += c.length)),
          });
          writeCandleFile(dest.out, symbol, period, candles);
          progress.finish();
          const calls = broker.limiter.budget().find((b) => b.endpoint === 'candles');
          process.stdout.write(`${candles.length} ${symbol} ${period} candles written to ${dest.out} (${calls?.sent ?? 0} candle requests)\n`);
        }
      } catch (e) {
        progress.finish();
        const kept = stored ? `; the store keeps ${storeContents(stored)}: the same command again completes it` : '';
        if (stoppedBy) {
          process.stderr.write(`ratelimit-runner candles download: ${label}: stopped by ${stoppedBy}${kept}\n`);
          break;
        }
        failed++;
        process.stderr.write(`ratelimit-runner candles download: ${label}: ${errorMessage(e)}${kept}\n`);
      }
    }
  } catch (e) {
    process.stderr.write(`ratelimit-runner candles download: ${errorMessage(e)}\n`);
    return 1;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await broker.client.close();
    await broker.limiter.close();
  }
  if (stoppedBy) return EXIT_ON_SIGNAL[stoppedBy] ?? 1;
  return failed ? 1 : 0;
}
