#!/usr/bin/env node
/**
 * `ratelimit-runner`: the trading side of the package. Today it runs the simulated broker
 * (`ratelimit-runner sim`); the strategy modes (backtest, paper, live, replay) come next.
 */
import { BrokerSimulator, parseSimulatorArgs, SIMULATOR_USAGE } from '../trading/simulator';

const USAGE = `Usage: ratelimit-runner <command> [options]

Commands:
  sim       run the simulated broker (the FXCM-style REST + socket.io API) on loopback

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
    process.stderr.write(`ratelimit-runner sim: ${(err as Error).message}\n`);
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

async function main(argv: string[]): Promise<void> {
  const [command, ...rest] = argv;
  switch (command) {
    case 'sim':
      return sim(rest);
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
