#!/usr/bin/env node
/**
 * `ratelimit-runner`: the trading side of the package: strategy modes (backtest, …) and the
 * simulated broker (`ratelimit-runner sim`).
 */
// First: the runner's optional packages are checked before any module needs them.
import './runner-packages';
import { BrokerSimulator, parseSimulatorArgs, SIMULATOR_USAGE } from '../trading/simulator';
import { UsageError } from '../platform/argv';
import { backtestCommand } from '../trading/runner/cli/cli';
import { candlesCommand, liveCommand, paperCommand, replayCommand } from '../trading/runner/cli/live-cli';
import { newCommand } from '../trading/runner/cli/new-cli';
import { sweepCommand } from '../trading/runner/cli/sweep-cli';
import { lookaheadCommand } from '../trading/runner/cli/lookahead-cli';

const USAGE = `Usage: ratelimit-runner <command> [options]

Commands:
  backtest  run a strategy over candle files (deterministic; JSON + HTML report)
  sweep     backtest a grid of parameters, walk-forward: in-sample choice, out-of-sample check
  lookahead check that a strategy's backtest cannot see the future, nor depends on more history
            than its warmup (exit 1 when a decision changed)
  paper     run a strategy against the simulated broker (every call through the rate limiter)
  live      run a strategy against a real broker account (--token or FXCM_TOKEN)
  replay    replay a paper/live journal and check the decisions are identical
  candles   'candles download' (to a file or a local store) and 'candles check' (validate files)
  sim       run the simulated broker (the FXCM-style REST + socket.io API) on loopback
  new       write a strategy to start from, with its test (node --test)

Run 'ratelimit-runner <command> --help' for a command's options.
`;

async function sim(argv: string[]): Promise<void> {
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(SIMULATOR_USAGE);
    return;
  }
  let options;
  try {
    options = parseSimulatorArgs(argv, process.env);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    process.stderr.write(`ratelimit-runner sim: ${err.message}\n${err.usage ?? ''}`);
    process.exit(2);
  }
  const simulator = new BrokerSimulator();
  const { url } = await simulator.start(options);
  process.stdout.write(`ratelimit-runner sim listening on ${url}\n`);
  for (const sig of ['SIGTERM', 'SIGINT'] as const) {
    process.once(sig, () => {
      simulator.stop().then(
        () => process.exit(0),
        () => process.exit(1),
      );
    });
  }
}

async function mode(command: string, run: (argv: string[]) => Promise<number>, argv: string[]): Promise<void> {
  let code: number;
  try {
    code = await run(argv);
  } catch (err) {
    if (err instanceof UsageError) {
      const after = err.usage ?? `Run 'ratelimit-runner ${command} --help' for the options.\n`;
      process.stderr.write(`ratelimit-runner ${command}: ${err.message}\n${after}`);
      process.exit(2);
    }
    throw err;
  }
  process.exitCode = code;
}

async function main(argv: string[]): Promise<void> {
  const [command, ...rest] = argv;
  switch (command) {
    case 'sim':
      return sim(rest);
    case 'backtest':
      return mode(command, backtestCommand, rest);
    case 'sweep':
      return mode(command, sweepCommand, rest);
    case 'lookahead':
      return mode(command, lookaheadCommand, rest);
    case 'paper':
      return mode(command, paperCommand, rest);
    case 'live':
      return mode(command, liveCommand, rest);
    case 'replay':
      return mode(command, replayCommand, rest);
    case 'candles':
      return mode(command, candlesCommand, rest);
    case 'new':
      return mode(command, newCommand, rest);
    case undefined:
    case '--help':
    case '-h':
    case 'help':
      process.stdout.write(USAGE);
      return;
    default:
      process.stderr.write(`ratelimit-runner: unknown command "${command}"\n${USAGE}`);
      process.exit(2);
  }
}

main(process.argv.slice(2)).catch((err: unknown) => {
  process.stderr.write(`ratelimit-runner: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
