/**
 * STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT (upstream Section 1.10): descriptors that are not the
 * reason a request is rejected are not charged. Shared by the stores that honour it. A candidate
 * limit's op (CounterOp.follows) is always charged its hits and changes nothing of the others'.
 */
import type { CounterOp } from '../core/store';

/**
 * The amount to really add to each key.
 * - Some key is already over in the local cache: add nothing to the others.
 * - Else, with the counts before this request (`current`): if any key would go over with its
 *   hits, only those keys are charged; if none would, every key is.
 * `current` is only read when no key is over elsewhere (then no read of the counts is needed).
 */
export function stopIncrementAddends(
  ops: readonly CounterOp[],
  overLimitElsewhere: boolean,
  current: readonly number[] | undefined,
): number[] {
  const out = new Array<number>(ops.length);
  if (overLimitElsewhere) {
    out.fill(0);
    chargeCandidates(ops, out);
    return out;
  }
  if (current === undefined) throw new Error('stopIncrementAddends: the current counts are needed');
  let anyOver = false;
  for (let i = 0; i < ops.length; i++) {
    const op = ops[i]!;
    // An algorithm other than the fixed window never charges a denied request by itself; a
    // candidate limit is charged every hit and has no say in the others'.
    if (op.rule.algorithm !== undefined || op.follows !== undefined) {
      out[i] = op.hits;
      continue;
    }
    const over = current[i]! + op.hits > op.rule.limit.requestsPerUnit;
    out[i] = over ? op.hits : 0;
    anyOver ||= over;
  }
  if (!anyOver) for (let i = 0; i < ops.length; i++) out[i] = ops[i]!.hits;
  return out;
}

/** A candidate limit's op is charged its hits whatever the enforced ones are charged. */
function chargeCandidates(ops: readonly CounterOp[], out: number[]): void {
  for (let i = 0; i < ops.length; i++) if (ops[i]!.follows !== undefined) out[i] = ops[i]!.hits;
}
