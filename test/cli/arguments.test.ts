/**
 * Every program refuses what it does not take: an unknown flag or a stray positional argument is a
 * usage error (exit 2, one line naming the argument, then the usage), never silently ignored (a
 * `ratelimit --port 9999` that starts on the default ports).
 */
import os from 'node:os';
import path from 'node:path';
import { ROOT, run } from '../e2e/harness';

const STRATEGY = path.join(ROOT, 'examples/strategies/ma-crossover.js');
/** Where `new` would write, should it ever take the stray argument (never the working tree). */
const NEW_DIR = path.join(os.tmpdir(), 'ratelimit-arguments-test');

interface Case {
  readonly program: string;
  readonly args: readonly string[];
  /** The first line of stderr. */
  readonly message: string;
  /** How the usage that follows begins. */
  readonly usage: string;
}

const goStyle = (script: string, program: string): Case[] => [
  { program: script, args: ['--bogus', 'x'], message: `${program}: flag provided but not defined: -bogus`, usage: `Usage of ${program}:` },
  { program: script, args: ['stray'], message: `${program}: unexpected argument: stray`, usage: `Usage of ${program}:` },
];

const runnerCommand = (command: string[], usage: string, takesFile: boolean): Case[] => {
  const label = `ratelimit-runner ${command[0]}`;
  const file = takesFile ? [STRATEGY] : [];
  return [
    { program: 'runner.js', args: [...command, ...file, '--bogus'], message: `${label}: Unknown option '--bogus'.`, usage },
    { program: 'runner.js', args: [...command, ...file, 'stray'], message: `${label}: unexpected argument: stray`, usage },
  ];
};

const CASES: Case[] = [
  // The service takes no flags: every setting is an environment variable.
  { program: 'ratelimit.js', args: ['--port', '9999', '-config_dir', '/x'], message: 'ratelimit: flag provided but not defined: -port', usage: 'Usage: ratelimit' },
  { program: 'ratelimit.js', args: ['stray'], message: 'ratelimit: unexpected argument: stray', usage: 'Usage: ratelimit' },
  ...goStyle('client.js', 'ratelimit-client'),
  ...goStyle('config-check.js', 'ratelimit-config-check'),
  ...goStyle('xds-server.js', 'ratelimit-xds-server'),
  { program: 'runner.js', args: ['--bogus'], message: 'ratelimit-runner: unknown command "--bogus"', usage: 'Usage: ratelimit-runner <command>' },
  { program: 'runner.js', args: ['stray'], message: 'ratelimit-runner: unknown command "stray"', usage: 'Usage: ratelimit-runner <command>' },
  ...runnerCommand(['backtest'], 'Usage: ratelimit-runner backtest', true),
  ...runnerCommand(['sweep'], 'Usage: ratelimit-runner sweep', true),
  ...runnerCommand(['paper'], 'Usage: ratelimit-runner paper', true),
  ...runnerCommand(['live'], 'Usage: ratelimit-runner live', true),
  ...runnerCommand(['replay'], 'Usage: ratelimit-runner replay', true),
  ...runnerCommand(['candles', 'download'], 'Usage: ratelimit-runner candles download', false),
  ...runnerCommand(['new'], 'Usage: ratelimit-runner new', false).map((c) => (c.args.includes('stray') ? { ...c, args: ['new', 'name', 'stray', '--dir', NEW_DIR] } : c)),
  // `candles check` takes any number of files: only its flags can be unknown.
  { program: 'runner.js', args: ['candles', 'check', '--bogus'], message: "ratelimit-runner candles: Unknown option '--bogus'.", usage: 'Usage: ratelimit-runner candles check' },
  // The simulator reads its command line as the runner's commands do (platform/argv): the same messages.
  { program: 'runner.js', args: ['sim', '--bogus'], message: "ratelimit-runner sim: Unknown option '--bogus'.", usage: 'ratelimit-runner sim [options]' },
  { program: 'runner.js', args: ['sim', 'stray'], message: 'ratelimit-runner sim: unexpected argument: stray', usage: 'ratelimit-runner sim [options]' },
];

const shown = (args: readonly string[]): string => args.map((a) => (a === STRATEGY ? '<strategy>' : a === NEW_DIR ? '<tmp>' : a)).join(' ');

test.each(CASES.map((c) => [`${c.program} ${shown(c.args)}`, c] as const))('%s: exit 2, a line naming the argument, the usage', async (_name, c) => {
  const r = await run(c.program, [...c.args]);
  const [first, second] = r.stderr.split('\n');
  expect({ code: r.code, first, second: second?.slice(0, c.usage.length) }).toEqual({ code: 2, first: c.message, second: c.usage });
  expect(r.stdout).toBe('');
});
