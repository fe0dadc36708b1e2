/** Errors of the runner and where in a strategy script an error came from. */
import path from 'node:path';
import type { RunError } from './results';

/** The runner refused an intent before sending it (safety limit, margin, bad arguments). */
export class SafetyError extends Error {
  override readonly name = 'SafetyError';
  constructor(readonly rule: string, message: string) {
    super(message);
  }
}

/**
 * The rules of the locks on new entries: the operator's (pause, flatten, stop) and the
 * protections' (the daily loss limit among them). An entry refused by one is a SafetyError with
 * that rule; a hook that does not catch it is no strategy error (which would flatten and end the
 * run): the hook ends there and the run goes on, in every mode.
 */
export const ENTRY_LOCK_RULES: ReadonlySet<string> = new Set(['paused', 'flattened', 'stopping', 'stopLossGuard', 'maxDrawdown', 'cooldown', 'maxDailyLoss']);

/** Whether a hook's error (a StrategyError's cause, or the error itself) is an entry refused by a lock. */
export function isEntryLock(e: unknown): boolean {
  const cause = e instanceof StrategyError ? e.cause : e;
  return cause instanceof SafetyError && ENTRY_LOCK_RULES.has(cause.rule);
}

/**
 * The broker refused an order or a close, or the runner did before sending, by the broker's rule
 * (the same in every mode: engine/pre-trade.ts). `rule` names it: `amount` (not a multiple of 10,
 * above the broker's maximum, more than the trade holds), `trailing_step`, `margin` (not enough
 * usable margin after the order), `price` (no quote yet), or `broker` (the broker's answer, its
 * text in the message); `code` is the broker's error code when there is one.
 */
export class OrderRejectedError extends Error {
  override readonly name: string = 'OrderRejectedError';
  constructor(
    message: string,
    readonly rule: string = 'broker',
    readonly code?: number,
    override readonly cause?: unknown,
  ) {
    super(message);
  }
}

/**
 * The order or trade an operation names no longer exists: it was filled, closed, cancelled or
 * deleted (deleting one leg of an OCO deletes the whole group, as the broker does). Catchable:
 * `e.name === 'OrderGoneError'`; a strategy that races its own orders can ignore it.
 */
export class OrderGoneError extends OrderRejectedError {
  override readonly name = 'OrderGoneError';
  constructor(readonly what: 'order' | 'trade', readonly id: string) {
    super(`${what} ${id} no longer exists (${what === 'order' ? 'filled, cancelled or deleted' : 'closed'})`, 'gone');
  }
}

/** The intent waited for rate-limit budget past its deadline and was dropped, never sent. */
export class IntentExpiredError extends Error {
  override readonly name = 'IntentExpiredError';
  constructor(readonly endpoint: string, readonly waitedMs: number) {
    super(`intent for ${endpoint} expired after waiting ${waitedMs} ms for rate-limit budget; not sent`);
  }
}

/**
 * Paper/live: a broker call that got no answer (it timed out, the connection was lost before the
 * answer, a gateway answered 5xx) and may have been run by the broker, which neither its pushes
 * since nor a snapshot settled: the message says what was asked, why there was no answer and what
 * was found. It is never resent; an order it placed that shows up later is claimed by the run
 * (onOrder / onTrade say so). An order call that was found is answered as if the broker had.
 */
export class AnswerLostError extends Error {
  override readonly name = 'AnswerLostError';
  /** The HTTP status of the answer that was no answer (a gateway's 5xx), and its Retry-After. */
  readonly httpStatus?: number;
  readonly retryAfterMs?: number;
  constructor(readonly op: string, message: string, override readonly cause?: unknown) {
    super(message);
    const c = cause as { httpStatus?: unknown; retryAfterMs?: unknown } | undefined;
    if (typeof c?.httpStatus === 'number' && c.httpStatus >= 500) this.httpStatus = c.httpStatus;
    if (typeof c?.retryAfterMs === 'number') this.retryAfterMs = c.retryAfterMs;
  }
}

/** A journal whose run ended cleanly was given to resume: there is nothing to continue. */
export class JournalFinishedError extends Error {
  override readonly name = 'JournalFinishedError';
  constructor(readonly stoppedAt: number) {
    super(
      `the journal's run ended cleanly at ${new Date(stoppedAt).toISOString()} (onStop ran, every call answered): ` +
        'there is nothing to resume; start a new run with another --journal (use replay to check this one)',
    );
  }
}

/** A strategy that failed to load or threw; `location` is `file:line:column` in the script. */
export class StrategyError extends Error {
  override readonly name = 'StrategyError';
  constructor(message: string, readonly hook: string, readonly location: string | undefined, override readonly cause?: unknown) {
    super(message);
  }
}

/** First stack frame inside `file` (absolute path), as `file:line:col`. */
export function scriptLocation(err: unknown, file: string): string | undefined {
  const stack = err instanceof Error ? err.stack ?? '' : '';
  const abs = path.resolve(file);
  for (const line of stack.split('\n')) {
    const m = /\(?((?:file:\/\/)?[^\s()]+):(\d+):(\d+)\)?\s*$/.exec(line.trim());
    if (!m) continue;
    const f = m[1]!.replace(/^file:\/\//, '');
    if (path.resolve(f) === abs) return `${abs}:${m[2]}:${m[3]}`;
  }
  // syntax errors at load time: node prints "file:line" as the first stack line
  const first = stack.split('\n')[0] ?? '';
  const sm = /^(.*):(\d+)$/.exec(first);
  if (sm && path.resolve(sm[1]!) === abs) return `${abs}:${sm[2]}`;
  return undefined;
}

export function describeStrategyError(e: StrategyError): string {
  const cause = e.cause instanceof Error ? `${e.cause.name}: ${e.cause.message}` : e.message;
  return `strategy error in ${e.hook}: ${cause}${e.location ? ` (at ${e.location})` : ''}`;
}

/**
 * The one line a failed run prints about its strategy error (backtest, paper and live alike), and
 * what became of the positions: flattened, or which could not be closed (never claimed otherwise).
 */
export function strategyErrorLine(error: RunError): string {
  return `ratelimit-runner: strategy error in ${error.hook}: ${error.message}${error.location ? ` (at ${error.location})` : ''}; ${flattenOutcome(error)}\n`;
}

/** "all of the run's positions were flattened", or what the flatten could not close or delete. */
export function flattenOutcome(error: RunError): string {
  const left = error.notFlattened ?? [];
  if (left.length === 0) return "all of the run's positions were flattened";
  return `flattening FAILED, still open at the broker: ${left.join('; ')}; run again with the same --journal to reconcile and flatten them`;
}

/** Runs a strategy hook; what it throws becomes a StrategyError naming the hook and the script line. */
export async function runHook(hook: string, fn: () => void | Promise<void>, strategyFile: string | undefined): Promise<void> {
  try {
    await fn();
  } catch (e) {
    if (e instanceof StrategyError) throw e;
    const loc = strategyFile ? scriptLocation(e, strategyFile) : undefined;
    throw new StrategyError((e as Error)?.message ?? String(e), hook, loc, e);
  }
}

/** What ended a run, for its result and report: a hook's error, or the runner's own ('runner'). */
export function runErrorOf(e: unknown): RunError {
  const se = e instanceof StrategyError ? e : new StrategyError((e as Error)?.message ?? String(e), 'runner', undefined, e);
  return { message: se.cause instanceof Error ? se.cause.message : se.message, hook: se.hook, location: se.location };
}
