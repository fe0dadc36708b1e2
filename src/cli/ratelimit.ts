#!/usr/bin/env node
/**
 * `ratelimit`: the service. Reads its settings from the environment (upstream's variables), starts
 * the listeners and stops gracefully on SIGTERM, SIGINT or SIGHUP (as upstream, SIGHUP does not
 * reload). A bad setting stops start-up with one line naming the variable. With WORKERS ≠ 1 this
 * process becomes the primary of worker mode and forks itself as the workers (src/app/cluster).
 */
import { RateLimitApp } from '../app/app';
import { StartupError } from '../app/lifecycle';
import { runPrimary } from '../app/cluster/primary';
import { runWorker } from '../app/cluster/worker';
import { loadSettings, SettingsError } from '../settings';
import { renderSettingsHelp } from '../settings/table';
import { FlagError, HelpRequested, parseFlags } from './flags';
import { createLogger } from '../telemetry/logger';
import { forkWorker, isWorkerProcess, primaryChannel, STOP_SIGNALS, stopOnSignals } from './service-process';

const USAGE = `Usage: ratelimit [-h | --help]

The rate limit service (drop-in for envoyproxy/ratelimit). It takes no flags: every setting is an
environment variable, listed here with its default; docs/settings.md says the same.
SIGTERM, SIGINT or SIGHUP stop it gracefully.
`;

async function main(): Promise<void> {
  try {
    // No flags but help: anything else (`--port 9999`) would be silently ignored otherwise.
    parseFlags(process.argv.slice(2), []);
  } catch (err) {
    if (err instanceof HelpRequested) {
      process.stdout.write(`${USAGE}${renderSettingsHelp()}\nSee docs/settings.md for details.\n`);
      return;
    }
    if (!(err instanceof FlagError)) throw err;
    process.stderr.write(`ratelimit: ${err.message}\n${USAGE}`);
    process.exit(2);
  }
  let settings;
  try {
    settings = loadSettings(process.env);
  } catch (err) {
    if (err instanceof SettingsError) {
      process.stderr.write(`ratelimit: ${err.message}\n`);
      process.exit(1);
    }
    throw err;
  }
  const logger = createLogger({ level: settings.log.level, format: settings.log.format });
  // A worker reads the same environment: the primary has already logged the warnings.
  if (settings.server.workers !== 1 && isWorkerProcess()) {
    try {
      // Not once: a terminal's Ctrl-C reaches the worker and the primary forwards it too, and a
      // second signal without a listener would kill the worker before it drained.
      await runWorker(settings, process.env, logger, primaryChannel(), (app) => stopOnSignals(app, logger, false));
    } catch (err) {
      if (!(err instanceof StartupError)) throw err;
      process.exit(1); // the primary says the error
    }
    return;
  }
  for (const w of settings.warnings) logger.warn(w);
  if (settings.server.workers !== 1) {
    try {
      const primary = await runPrimary(settings, logger, { fork: forkWorker, reportFatal: (message) => process.stderr.write(`ratelimit: ${message}\n`) });
      for (const sig of STOP_SIGNALS) process.on(sig, () => primary.stop(sig));
      primary.ended.then((code) => process.exit(code), () => process.exit(1));
    } catch (err) {
      if (!(err instanceof StartupError)) throw err;
      process.stderr.write(`ratelimit: ${err.message}\n`);
      process.exit(1);
    }
    return;
  }

  let app: RateLimitApp | undefined;
  try {
    const created = new RateLimitApp({ settings, env: process.env, logger });
    app = created;
    stopOnSignals(created, logger, true);
    await created.start();
  } catch (err) {
    if (app?.isStopping === true) return; // a signal arrived during start-up
    if (err instanceof StartupError) {
      process.stderr.write(`ratelimit: ${err.message}\n`);
      process.exit(1);
    }
    throw err;
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`ratelimit: fatal: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
