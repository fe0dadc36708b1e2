/**
 * Where the in-process limiter keeps a broker budget between runs: one file per broker and
 * account (the `account` descriptor: --account, or a fingerprint of the token), so that restarts
 * and runs side by side on one token spend one budget, as the broker counts it. With --ratelimit
 * the remote service keeps it (in Redis) instead.
 *
 * The directory: --budget-state DIR, else $RATELIMIT_RUNNER_STATE, else
 * $XDG_STATE_HOME/ratelimit-runner, else ~/.local/state/ratelimit-runner.
 */
import os from 'node:os';
import path from 'node:path';
import { isoTime } from '../../fxcm/candle-file';
import type { HeldBack } from './call-budget';

export const BUDGET_STATE_ENV = 'RATELIMIT_RUNNER_STATE';

/** What a run does when the broker budget of a start-up call is used up (`--if-no-budget`). */
export type IfNoBudget = 'wait' | 'exit';
export const IF_NO_BUDGET: readonly IfNoBudget[] = ['wait', 'exit'];

export function budgetStateDir(flagDir: string | undefined, env: NodeJS.ProcessEnv = process.env): string {
  if (flagDir) return flagDir;
  if (env[BUDGET_STATE_ENV]) return env[BUDGET_STATE_ENV]!;
  const base = env.XDG_STATE_HOME || path.join(os.homedir(), '.local', 'state');
  return path.join(base, 'ratelimit-runner');
}

/** `DIR/budget-api-demo.fxcm.com-1537581.json`: the broker's host (and port) and the account. */
export function budgetStateFile(dir: string, brokerUrl: string, account: string): string {
  let host = brokerUrl;
  try {
    host = new URL(brokerUrl).host;
  } catch {
    // not a URL: the text as it is, made safe below
  }
  const safe = (s: string) => s.replace(/[^A-Za-z0-9._-]/g, '_');
  return path.join(dir, `budget-${safe(host)}-${safe(account)}.json`);
}

/** One line on a start-up call held back: which limit, until when, and what the run does. */
export function heldBackLine(command: string, h: HeldBack, stateFile: string | undefined, action: IfNoBudget, nowMs: number): string {
  const whose = stateFile ? `shared by every run on this account, kept in ${stateFile}` : 'shared by every runner of the --ratelimit service';
  const secs = Math.max(1, Math.ceil((h.untilMs - nowMs) / 1000));
  const what = action === 'wait' ? 'waiting (--if-no-budget exit stops instead)' : 'not calling the broker: exiting (--if-no-budget exit)';
  return `ratelimit-runner ${command}: the broker budget for ${h.what} is used up (${whose}); the next call is allowed at ${isoTime(Math.ceil(h.untilMs / 1000))} (in ${secs} s): ${what}\n`;
}
